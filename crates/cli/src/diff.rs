//! `warden diff TASK`: a change task's proposal before you approve or apply it — what it is
//! (repository, base, commit, the hash an approval binds to), a stat of the files it touches,
//! the sensitive files among them, and the unified diff with secrets and sensitive values
//! redacted. In-process the diff comes from Warden's mirror; with `--server` from
//! `GET /v1/tasks/{id}/diff`. Both go through the same producer
//! (`warden_server::diff::redacted_proposal_diff`), and the text is escaped for the terminal.

use serde_json::{json, Value};
use warden_protocol::{ChangeOutcome, Proposal, TaskId, TaskKind};
use warden_repo::Git;
use warden_server::config::Config;

use crate::{records, text, usage};

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

/// The proposal's diff from this machine's task records and Warden's mirror.
pub fn diff_local(config: &Config, args: &DiffArgs) -> anyhow::Result<u8> {
    let id: TaskId = args.task.parse().map_err(usage)?;
    let record = records::load(&config.home, &id).map_err(usage)?;
    if record.kind != TaskKind::Change {
        return Err(usage(anyhow::anyhow!(
            "task {id} is a question: only change tasks have a diff"
        )));
    }
    let proposal = match record.change_result.as_ref().map(|r| &r.outcome) {
        Some(ChangeOutcome::Proposal { proposal, .. }) => proposal.clone(),
        _ => {
            return Err(usage(anyhow::anyhow!(
                "task {id} has no proposal (status {:?})",
                record.status
            )))
        }
    };
    let git = Git::locate()?;
    let mirror = crate::approve::find_mirror(&git, &config.home, &proposal.repo, id.as_str())?;
    let (diff, truncated) = warden_server::diff::redacted_proposal_diff(
        &git,
        &mirror,
        id.as_str(),
        &proposal,
        &config.redactor(),
    )
    .map_err(|e| anyhow::anyhow!(e))?
    .ok_or_else(|| anyhow::anyhow!("the proposal of task {id} is no longer in Warden's mirror"))?;
    let view = json!({
        "task_id": id.as_str(),
        "repo": proposal.repo,
        "base_commit": proposal.base_commit,
        "commit": proposal.commit,
        "hash": proposal.hash,
        "diff": diff,
        "truncated": truncated,
        "sensitive_files": proposal.sensitive_files,
    });
    print_diff(&view, Some(&proposal), args);
    Ok(0)
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
