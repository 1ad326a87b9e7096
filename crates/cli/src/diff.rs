//! `warden diff TASK`: a change task's proposal before you approve or apply it — what it is
//! (repository, base, commit, the hash an approval binds to), a stat of the files it touches,
//! the sensitive files among them, and the unified diff with secrets and sensitive values
//! redacted. Both in-process and with `--server` the view comes from the front door
//! (`TaskService::proposal_diff`, served as `GET /v1/tasks/{id}/diff`) and its one producer
//! (`warden_engine::diff::redacted_proposal_diff`), and the text is escaped for the terminal.

use serde_json::Value;
use warden_protocol::Proposal;

use crate::text;

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The change task whose proposal to show
    pub task: String,
    /// Only the summary and the stat, not the diff itself
    #[arg(long)]
    pub stat: bool,
    /// Print {task_id, repo, base_commit, commit, hash, files, sensitive_files, diff, truncated}
    /// as one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Prints a diff view (the API's `DiffView` shape) with the proposal's file stat.
pub fn print_diff(view: &Value, proposal: Option<&Proposal>, args: &DiffArgs) {
    let files = proposal
        .map(|p| serde_json::to_value(&p.files).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    if args.json {
        let mut view = view.clone();
        view["files"] = files;
        if args.stat {
            view["diff"] = Value::Null;
        }
        println!("{}", text::json_line(&view));
        return;
    }
    let field = |name: &str| text::one_line(view[name].as_str().unwrap_or("?"));
    println!(
        "proposal of {} on {} @ {}\n  commit {}\n  hash   {}",
        field("task_id"),
        field("repo"),
        text::short_commit(view["base_commit"].as_str().unwrap_or("?")),
        field("commit"),
        field("hash"),
    );
    if let Some(proposal) = proposal {
        let (mut added, mut removed) = (0u64, 0u64);
        for file in &proposal.files {
            let counts = match (file.additions, file.deletions) {
                (Some(a), Some(d)) => {
                    added += a;
                    removed += d;
                    format!("+{a} -{d}")
                }
                _ => "binary".into(),
            };
            println!(
                "  {:<8} {} ({counts})",
                file.status,
                text::one_line(&file.path)
            );
        }
        println!(
            "  {} file(s) changed, {added} insertion(s), {removed} deletion(s)",
            proposal.files.len()
        );
    }
    if let Some(sensitive) = view["sensitive_files"].as_array().filter(|s| !s.is_empty()) {
        println!("  sensitive files (their values are hidden; publishing needs a publish_sensitive approval):");
        for path in sensitive {
            println!("    ! {}", text::one_line(path.as_str().unwrap_or("?")));
        }
    }
    if args.stat {
        return;
    }
    println!();
    for line in view["diff"].as_str().unwrap_or_default().lines() {
        println!("{}", text::one_line(line));
    }
    if view["truncated"] == Value::Bool(true) {
        println!("[… the diff is longer than 4 MiB and was cut here]");
    }
}
