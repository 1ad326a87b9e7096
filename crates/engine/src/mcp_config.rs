//! `[[mcp.servers]]`: operator-configured MCP servers whose tools the agent may use. Read from
//! Warden's own configuration only, never from a repository (a repository's `.mcp.json` and
//! the like are never read). Each server is a program started inside the task's sandbox over
//! stdio (see `crate::mcp_client`).

use anyhow::bail;
use std::time::Duration;
use warden_config::McpSection;

/// One server, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub read_only: bool,
    pub allow_tools: Option<Vec<String>>,
    pub call_timeout: Duration,
}

/// Longest server name: the offered names (`NAME__TOOL`) must fit the providers' 64.
pub const MAX_NAME: usize = 24;

/// Checks and resolves `[mcp]`; a message names the entry and what is wrong.
pub fn resolve(section: &McpSection) -> anyhow::Result<Vec<McpServerConfig>> {
    let mut servers: Vec<McpServerConfig> = Vec::new();
    for (index, entry) in section.servers.iter().enumerate() {
        let at = format!("mcp.servers[{index}] ({:?})", entry.name);
        let name_ok = !entry.name.is_empty()
            && entry.name.len() <= MAX_NAME
            && entry
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok {
            bail!("{at}: name must be 1 to {MAX_NAME} characters of a-z, 0-9 and _");
        }
        if servers.iter().any(|server| server.name == entry.name) {
            bail!("{at}: another server has the same name");
        }
        if entry.command.trim().is_empty() || entry.command.contains('\0') {
            bail!("{at}: command must name a program");
        }
        if entry.args.iter().any(|arg| arg.contains('\0')) {
            bail!("{at}: an argument contains a NUL byte");
        }
        for (name, value) in &entry.env {
            let valid = name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid || value.contains('\0') {
                bail!("{at}: env {name:?} is not a valid variable (NAME = \"value\")");
            }
        }
        if entry.network.is_some() {
            bail!(
                "{at}: network is not supported: MCP servers run inside the sandbox without \
                 network (allowing a named destination is not built yet); remove the key"
            );
        }
        if entry.approval == Some(true) {
            bail!(
                "{at}: approval = true is not supported yet: the tools of a server not marked \
                 read_only are denied; mark it read_only = true if its tools only read"
            );
        }
        if let Some(tools) = &entry.allow_tools {
            if let Some(empty) = tools.iter().find(|tool| tool.is_empty()) {
                bail!("{at}: allow_tools has an empty name {empty:?}");
            }
        }
        let call_timeout = match entry.call_timeout_secs {
            Some(0) => bail!("{at}: call_timeout_secs must be at least 1"),
            Some(secs) if secs > 3600 => bail!("{at}: call_timeout_secs must be at most 3600"),
            Some(secs) => Duration::from_secs(secs),
            None => Duration::from_secs(60),
        };
        servers.push(McpServerConfig {
            name: entry.name.clone(),
            command: entry.command.clone(),
            args: entry.args.clone(),
            env: entry
                .env
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            read_only: entry.read_only,
            allow_tools: entry.allow_tools.clone(),
            call_timeout,
        });
    }
    Ok(servers)
}
