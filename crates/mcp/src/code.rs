//! The read-only code tools (`read_file`, `search`, `list_dir`): the repository is pinned to
//! a commit and its verified read-only snapshot materialized (or reused) through the front
//! door, then the agent's own read tools (`warden_tools::question_tools`: path confinement,
//! bounded and paged output, `.gitignore`d files skipped) run over it. Every result names the
//! repository and the commit it read; what the tools return is repository text, returned as
//! text and never interpreted.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};
use warden_runtime::ToolOutput;
use warden_service::tasks::Principal;

use crate::door::Door;
use crate::tools::{CodeArgs, Tool};
use crate::Refusal;

/// Runs code tool `tool` (`read_file`, `search` or `list_dir`).
pub(crate) async fn call(
    door: &Door,
    principal: &Principal,
    tool: Tool,
    arguments: &Value,
) -> Result<CallToolResult, Refusal> {
    let args: CodeArgs = tool.arguments(arguments)?;
    let repo = door
        .read_snapshot(principal, &args.repo, args.rev.as_deref())
        .await?;
    let name = repo.pinned.name.clone();
    let commit = repo.snapshot.commit.clone();
    let workspace = warden_tools::Workspace::new(vec![(name.clone(), repo.snapshot.root.clone())])
        .map_err(|error| Refusal(format!("cannot read the snapshot of {name}: {error}")))?;
    let agent_tool = warden_tools::question_tools(Arc::new(workspace))
        .into_iter()
        .find(|agent_tool| agent_tool.spec().name == tool.name())
        .ok_or_else(|| Refusal(format!("{} is not available", tool.name())))?;
    // The agent's tool takes the arguments that are not about which repository to read.
    let mut own = arguments.clone();
    if let Some(map) = own.as_object_mut() {
        map.remove("repo");
        map.remove("rev");
    }
    let output = agent_tool.call(own).await;
    // The snapshot stays in use (safe from eviction) until the tool has read it.
    drop(repo);
    let (text, failed) = match output {
        ToolOutput::Ok(text) => (text, false),
        ToolOutput::Error(text) => (text, true),
        ToolOutput::Rejected(errors) => (errors.join("\n"), true),
        ToolOutput::Stop(failure) => (failure.message, true),
        ToolOutput::Finish(_) => (String::new(), true),
    };
    let content = vec![ContentBlock::text(format!("{name} @ {commit}\n{text}"))];
    let mut result = if failed {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(json!({
        "repo": name,
        "commit": commit,
        "output": text,
    }));
    Ok(result)
}
