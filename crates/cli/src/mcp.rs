//! `warden mcp`: Warden as a Model Context Protocol server on stdio, for other agents and
//! editors. The tools are `warden-mcp`'s, over the in-process front door
//! (`warden_service::local`, the same `TaskService` and worker `warden ask`/`run` use without a
//! server), as the person at this machine (`local`); this module parses the arguments and runs
//! the stdio transport. `/mcp` on `warden serve` offers the same tools over HTTP.
//!
//! stdout carries protocol messages only; progress goes to the client as MCP progress
//! notifications and logs go to stderr.

use std::sync::Arc;

use anyhow::Context;
use rmcp::ServiceExt;
use warden_mcp::WardenMcp;
use warden_repo::RepoSpec;
use warden_service::config::Loaded;

/// `warden mcp`'s arguments.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// A repository the tools offer by name (PATH|URL[@REV], named after its last path
    /// component); repeat for more. `ask`, `run_change` and the code tools also take an
    /// absolute path or a URL.
    #[arg(long = "repo", value_name = "PATH|URL[@REV]")]
    pub repos: Vec<String>,
}

/// Serves MCP on stdin/stdout until the client closes stdin.
pub async fn serve(config: Loaded, args: McpArgs) -> anyhow::Result<u8> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let mut offered: Vec<RepoSpec> = Vec::new();
    for text in &args.repos {
        let spec = RepoSpec::parse(text, &cwd).map_err(crate::usage)?;
        if offered.iter().any(|other| other.name == spec.name) {
            return Err(crate::usage(anyhow::anyhow!(
                "two --repo arguments are both named {:?}: offer one of them",
                spec.name
            )));
        }
        offered.push(spec);
    }
    let local = crate::local_cli::open(config).await?;
    let server = WardenMcp::in_process(Arc::new(local), offered);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client did not open a session")?;
    running
        .waiting()
        .await
        .context("the MCP session ended abnormally")?;
    Ok(0)
}
