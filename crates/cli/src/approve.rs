//! `warden approve ID --hash H` / `warden reject ID`: the decision on an approval bound to a
//! hash, for change tasks run in-process with `--publish`. Approving checks that `H` is the
//! approval's subject hash and that the proposal still hashes to it (its commit still under its
//! ref in the mirror, same tree, same validations); the decision, who and when, is recorded
//! once. Publication then pushes the proposal commit to `warden/<task-id>` on the repository's
//! remote: the intent is journaled before the push, the remote is asked before and after
//! (`ls-remote`), so a crash at any point followed by `warden approve` again (same hash)
//! completes it without a second push. Pull requests are not opened yet.

use crate::records::{self, TaskRecord};
use crate::usage;
use anyhow::Context;
use std::path::{Path, PathBuf};
use warden_protocol::{ApprovalStatus, ChangeOutcome, PublicationStatus, TaskStatus};
use warden_repo::proposal::{proposal_hash, proposal_ref, push_proposal, PushOutcome};
use warden_repo::Git;
use warden_runtime::{Clock, FileJournal, Journal, RecordKind, SystemClock};
use warden_server::config::Config;

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The approval id (`apr_…`)
    pub id: String,
    /// The hash the approval is bound to, exactly as shown with the proposal
    #[arg(long)]
    pub hash: String,
}

#[derive(Debug, clap::Args)]
pub struct RejectArgs {
    /// The approval id (`apr_…`)
    pub id: String,
}

/// Failure point for crash tests: `WARDEN_FAILPOINT=publish_after_push` exits right after the
/// push, before anything records it.
const FAILPOINT: &str = "WARDEN_FAILPOINT";

fn find(home: &Path, id: &str) -> anyhow::Result<TaskRecord> {
    records::list(home)?
        .into_iter()
        .find(|record| {
            record
                .change_result
                .as_ref()
                .and_then(|r| r.approval.as_ref())
                .is_some_and(|a| a.id == id)
        })
        .ok_or_else(|| usage(anyhow::anyhow!("no approval {id}")))
}

fn who() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local user".into())
}

pub fn reject(config: &Config, args: RejectArgs) -> anyhow::Result<u8> {
    let mut record = find(&config.home, &args.id)?;
    let redactor = config.redactor();
    let Some(result) = record.change_result.as_mut() else {
        return Err(usage(anyhow::anyhow!("no approval {}", args.id)));
    };
    let Some(approval) = result.approval.as_mut() else {
        return Err(usage(anyhow::anyhow!("no approval {}", args.id)));
    };
    if approval.status != ApprovalStatus::Pending {
        return Err(usage(anyhow::anyhow!(
            "approval {} was already decided ({:?})",
            args.id,
            approval.status
        )));
    }
    approval.status = ApprovalStatus::Rejected;
    approval.decided_by = Some(who());
    approval.decided_at = Some(records::rfc3339(SystemClock.now_ms()));
    if let ChangeOutcome::Proposal { publication, .. } = &mut result.outcome {
        publication.status = PublicationStatus::NotRequested;
    }
    record.status = TaskStatus::Completed;
    records::save(&config.home, &record, &redactor)?;
    println!("rejected {}: nothing was published", args.id);
    Ok(0)
}

pub async fn approve(config: &Config, args: ApproveArgs) -> anyhow::Result<u8> {
    let mut record = find(&config.home, &args.id)?;
    let redactor = config.redactor();
    let git = Git::locate()?;
    let task_id = record.id.clone();
    let (proposal, approval) = match record.change_result.as_ref() {
        Some(result) => match (&result.outcome, &result.approval) {
            (ChangeOutcome::Proposal { proposal, .. }, Some(approval)) => {
                (proposal.clone(), approval.clone())
            }
            _ => return Err(usage(anyhow::anyhow!("no approval {}", args.id))),
        },
        None => return Err(usage(anyhow::anyhow!("no approval {}", args.id))),
    };
    let published = matches!(
        record.change_result.as_ref().map(|r| &r.outcome),
        Some(ChangeOutcome::Proposal { publication, .. })
            if publication.status == PublicationStatus::Pushed
    );
    match approval.status {
        ApprovalStatus::Pending => {}
        // Approved before, publication unfinished (a crash): the same hash resumes it.
        ApprovalStatus::Approved if !published => {}
        _ => {
            return Err(usage(anyhow::anyhow!(
                "approval {} was already used ({:?}); an approval is single use",
                args.id,
                approval.status
            )))
        }
    }
    if args.hash != approval.subject_hash {
        return Err(usage(anyhow::anyhow!(
            "hash {} is not the hash approval {} is bound to; nothing was published",
            args.hash,
            args.id
        )));
    }
    // The subject must still be exactly what was approved.
    let mirror = find_mirror(&git, &config.home, &proposal.repo, task_id.as_str())?;
    let git_dir = format!("--git-dir={}", mirror.display());
    let current = || -> Option<(String, String)> {
        let run = |rev: String| {
            git.run(
                &mirror,
                &[&git_dir, "rev-parse", "--verify", "--quiet", &rev],
            )
            .ok()
            .map(|o| o.text())
        };
        let at_ref = run(proposal_ref(task_id.as_str()))?;
        let tree = run(format!("{at_ref}^{{tree}}"))?;
        let parent = run(format!("{at_ref}^"))?;
        let validations = serde_json::to_value(&proposal.validations).ok()?;
        Some((
            at_ref.clone(),
            proposal_hash(&parent, &tree, &at_ref, &validations),
        ))
    };
    match current() {
        Some((at_ref, recomputed))
            if recomputed == approval.subject_hash && at_ref == proposal.commit => {}
        other => {
            return Err(usage(anyhow::anyhow!(
                "the proposal changed since approval {} was requested (now {}); the approval \
                 is invalid and nothing was published",
                args.id,
                other.map_or("missing".to_string(), |(_, hash)| hash)
            )))
        }
    }
    let remote = remote_of(&git, &record)?;
    let branch = format!("warden/{task_id}");

    let now = SystemClock.now_ms();
    let mut journal = FileJournal::create(&next_journal(&config.home, &record))
        .context("cannot create the publication journal")?;
    if approval.status == ApprovalStatus::Pending {
        set_approval(&mut record, ApprovalStatus::Approved, Some(now));
        records::save(&config.home, &record, &redactor)?;
    }
    journal
        .append(
            now,
            RecordKind::ApprovalDecided,
            serde_json::json!({"approval": args.id, "decision": "approve", "hash": args.hash, "by": who()}),
        )
        .await?;
    journal
        .append(
            SystemClock.now_ms(),
            RecordKind::SideEffectIntent,
            serde_json::json!({"push": {"remote": redactor.text(&warden_repo::redact_credentials(&remote)), "branch": branch, "commit": proposal.commit}}),
        )
        .await?;
    let outcome = push_proposal(&git, &mirror, &remote, &proposal.commit, &branch);
    if std::env::var(FAILPOINT).is_ok_and(|v| v == "publish_after_push") {
        std::process::exit(101);
    }
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            let _ = journal
                .append(
                    SystemClock.now_ms(),
                    RecordKind::SideEffectOutcome,
                    serde_json::json!({"push": {"failed": error.to_string()}}),
                )
                .await;
            set_publication(&mut record, PublicationStatus::Failed, &branch);
            records::save(&config.home, &record, &redactor)?;
            return Err(anyhow::anyhow!("publication failed: {error}"));
        }
    };
    journal
        .append(
            SystemClock.now_ms(),
            RecordKind::SideEffectOutcome,
            serde_json::json!({"push": {"branch": branch, "commit": proposal.commit,
                "already_there": outcome == PushOutcome::AlreadyThere}}),
        )
        .await?;
    set_publication(&mut record, PublicationStatus::Pushed, &branch);
    record.status = TaskStatus::Completed;
    records::save(&config.home, &record, &redactor)?;
    println!(
        "approved {}: pushed {} to {branch}{}",
        args.id,
        proposal.commit,
        if outcome == PushOutcome::AlreadyThere {
            " (it was already there)"
        } else {
            ""
        }
    );
    eprintln!("warden: pull requests are not opened yet; open one from {branch}");
    Ok(0)
}

fn set_approval(record: &mut TaskRecord, status: ApprovalStatus, at_ms: Option<u64>) {
    if let Some(approval) = record
        .change_result
        .as_mut()
        .and_then(|r| r.approval.as_mut())
    {
        approval.status = status;
        approval.decided_by = Some(who());
        approval.decided_at = at_ms.map(records::rfc3339);
    }
}

fn set_publication(record: &mut TaskRecord, status: PublicationStatus, branch: &str) {
    if let Some(ChangeOutcome::Proposal { publication, .. }) =
        record.change_result.as_mut().map(|r| &mut r.outcome)
    {
        publication.status = status;
        publication.branch = Some(branch.to_string());
    }
}

/// The first unused journal path after the task's runs.
fn next_journal(home: &Path, record: &TaskRecord) -> PathBuf {
    let mut run = 2;
    loop {
        let path = records::journal_path(home, &record.id, run);
        if !path.exists() {
            return path;
        }
        run += 1;
    }
}

/// Where the repository is published: its URL, or the `origin` remote of a local repository.
fn remote_of(git: &Git, record: &TaskRecord) -> anyhow::Result<String> {
    let repo = record
        .repos
        .first()
        .ok_or_else(|| anyhow::anyhow!("task {} has no repository", record.id))?;
    if repo.source_kind == "url" {
        return Ok(repo.source.clone());
    }
    let path = PathBuf::from(&repo.source);
    let url = git
        .run(&path, &["config", "--get", "remote.origin.url"])
        .map_err(|_| {
            usage(anyhow::anyhow!(
                "{} has no `origin` remote to publish to",
                path.display()
            ))
        })?
        .text();
    let looks_like_url = url.contains("://") || url.contains(':');
    Ok(if !looks_like_url && Path::new(&url).is_relative() {
        path.join(url).display().to_string()
    } else {
        url
    })
}

/// The mirror holding the task's proposal ref.
pub fn find_mirror(git: &Git, home: &Path, repo: &str, task: &str) -> anyhow::Result<PathBuf> {
    let dir = home.join("mirrors");
    let prefix = format!("{repo}-");
    let reference = proposal_ref(task);
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !(name.starts_with(&prefix) && name.ends_with(".git")) {
            continue;
        }
        let git_dir = format!("--git-dir={}", path.display());
        if git
            .run(
                &path,
                &[&git_dir, "rev-parse", "--verify", "--quiet", &reference],
            )
            .is_ok()
        {
            return Ok(path);
        }
    }
    anyhow::bail!("no mirror under {} holds {reference}", dir.display())
}
