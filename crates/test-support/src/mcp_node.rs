//! The official MCP reference servers from npm (`@modelcontextprotocol/server-filesystem` and
//! `server-everything`) for the tests of Warden's MCP client: `WARDEN_TEST_MCP_NODE_SERVERS`
//! names the directory `.ci/mcp-node.sh` installed them into (`npm ci` of the pinned
//! `.ci/mcp-node/package-lock.json`; it prints the line). Without it those tests skip, saying
//! so — unless `WARDEN_TEST_REQUIRE` lists `mcp` (CI sets it), where a missing directory fails
//! the test instead of letting it pass without having run.

use std::io::Write;
use std::path::PathBuf;

/// The variable naming the directory.
pub const SERVERS_VAR: &str = "WARDEN_TEST_MCP_NODE_SERVERS";

/// Where the servers are installed (`…/node_modules/@modelcontextprotocol/server-*`); `None`
/// (said on stderr) when none is configured and they are not required.
///
/// # Panics
/// When `WARDEN_TEST_REQUIRE` lists `mcp` and the variable is unset or the servers are not
/// under it.
pub fn servers() -> Option<PathBuf> {
    let configured = std::env::var_os(SERVERS_VAR)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    let complete = |dir: &PathBuf| {
        ["server-filesystem", "server-everything"]
            .iter()
            .all(|name| {
                dir.join("node_modules/@modelcontextprotocol")
                    .join(name)
                    .join("package.json")
                    .is_file()
            })
    };
    match configured {
        Some(dir) if complete(&dir) => Some(dir),
        configured => {
            assert!(
                !crate::postgres::required("mcp"),
                "{} lists mcp but {SERVERS_VAR} {}: install them with \
                 `eval \"$(bash .ci/mcp-node.sh)\"`",
                crate::postgres::REQUIRE_VAR,
                match &configured {
                    Some(path) => format!("holds no reference servers ({})", path.display()),
                    None => "is not set".to_string(),
                }
            );
            // Not `eprintln!`: the test harness would capture it.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {SERVERS_VAR} not set (the npm MCP reference servers)"
            );
            None
        }
    }
}

/// The entry point of one reference server (`server-filesystem`, `server-everything`) under
/// [`servers`]' directory.
pub fn entry(dir: &std::path::Path, server: &str) -> PathBuf {
    dir.join("node_modules/@modelcontextprotocol")
        .join(server)
        .join("dist/index.js")
}
