//! `warden approve ID --hash H` / `warden reject ID`: the decision on an approval bound to a
//! hash, for change tasks run in-process with `--publish`. Approving checks that `H` is the
//! approval's subject hash and that the proposal still hashes to it (its commit still under its
//! ref in the mirror, same tree, same validations); the decision, who and when, is recorded
//! once. Publication then runs the steps of [`warden_server::publish`]: push the proposal
//! commit to `warden/<task-id>` on the repository's remote, then, when the repository has a
//! GitHub target (`--github OWNER/NAME`, a `[[publish]]` entry, or a GitHub remote URL), open a
//! pull request. Each step journals its intent first and asks the remote before acting, so a
//! crash at any point followed by `warden approve` again (same hash) completes publication
//! with one branch and one pull request. Without a GitHub target publication ends at `pushed`.

use crate::records::{self, TaskRecord};
use crate::usage;
use anyhow::Context;
use std::path::{Path, PathBuf};
use warden_protocol::{ApprovalStatus, ChangeOutcome, Publication, PublicationStatus, TaskStatus};
use warden_repo::proposal::{proposal_ref, PushOutcome};
use warden_repo::Git;
use warden_runtime::{Clock, FileJournal, Journal, RecordKind, SystemClock};
use warden_server::config::Config;
use warden_server::github::GithubRepo;
use warden_server::publish::{
    branch_for, publish_proposal, publish_remote, resolve_target, verify_proposal, PublishRequest,
};

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The approval id (`apr_…`)
    pub id: String,
    /// The hash the approval is bound to, exactly as shown with the proposal
    #[arg(long)]
    pub hash: String,
    /// The GitHub repository (`owner/name`) to open the pull request on, overriding
    /// `[[publish]]` and the remote URL (pass it again when resuming)
    #[arg(long, value_name = "OWNER/NAME")]
    pub github: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RejectArgs {
    /// The approval id (`apr_…`)
    pub id: String,
}

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
    let (proposal, approval, status) = match record.change_result.as_ref() {
        Some(result) => match (&result.outcome, &result.approval) {
            (
                ChangeOutcome::Proposal {
                    proposal,
                    publication,
                },
                Some(approval),
            ) => (proposal.clone(), approval.clone(), publication.status),
            _ => return Err(usage(anyhow::anyhow!("no approval {}", args.id))),
        },
        None => return Err(usage(anyhow::anyhow!("no approval {}", args.id))),
    };
    let explicit = match &args.github {
        Some(text) => Some(
            GithubRepo::parse(text)
                .ok_or_else(|| usage(anyhow::anyhow!("--github {text:?} is not owner/name")))?,
        ),
        None => None,
    };
    let remote = remote_of(&git, &record)?;
    let target = resolve_target(&config.github, &proposal.repo, &remote, explicit.as_ref());
    // Done: the pull request is open, or the branch is pushed and there is no GitHub target.
    let finished = status == PublicationStatus::PrOpened
        || (status == PublicationStatus::Pushed && target.is_none());
    match approval.status {
        ApprovalStatus::Pending => {}
        // Approved before, publication unfinished (a crash, a failure): the same hash resumes it.
        ApprovalStatus::Approved if !finished => {}
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
    if let Err(now) = verify_proposal(
        &git,
        &mirror,
        task_id.as_str(),
        &proposal,
        &approval.subject_hash,
    ) {
        return Err(usage(anyhow::anyhow!(
            "the proposal changed since approval {} was requested (now {now}); the approval is \
             invalid and nothing was published",
            args.id
        )));
    }
    let branch = branch_for(task_id.as_str());

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

    let request = PublishRequest {
        git: &git,
        mirror: &mirror,
        remote: &remote,
        task_id: task_id.as_str(),
        proposal: &proposal,
        target: target.as_ref(),
        settings: &config.github,
    };
    let home = config.home.clone();
    let mut pushed_record = record.clone();
    let mut on_pushed = |publication: &Publication| {
        set_publication(&mut pushed_record, publication);
        records::save(&home, &pushed_record, &redactor).map_err(|e| format!("{e:#}"))
    };
    let published = publish_proposal(request, &mut journal, &redactor, &mut on_pushed).await;
    match published {
        Ok(published) => {
            set_publication(&mut record, &published.publication);
            record.status = TaskStatus::Completed;
            records::save(&config.home, &record, &redactor)?;
            let pushed = already(published.push == PushOutcome::AlreadyThere);
            match &published.pull {
                Some(pull) => println!(
                    "approved {}: pushed {} to {branch}{pushed}; pull request {}{}",
                    args.id,
                    proposal.commit,
                    pull.pull.html_url,
                    already(pull.already_there)
                ),
                None => {
                    println!(
                        "approved {}: pushed {} to {branch}{pushed}",
                        args.id, proposal.commit
                    );
                    eprintln!(
                        "warden: no GitHub repository for {} (its remote is not on {}); no pull \
                         request was opened. Name one with [[publish]] in warden.toml or \
                         --github OWNER/NAME",
                        proposal.repo, config.github.api_url
                    );
                }
            }
            Ok(0)
        }
        Err(failure) => {
            set_publication(&mut record, &failure.publication(task_id.as_str()));
            records::save(&config.home, &record, &redactor)?;
            let error = redactor.text(&failure.error.to_string());
            if failure.pushed {
                Err(anyhow::anyhow!(
                    "the branch {branch} is pushed, but {error}; fix it and run `warden approve \
                     {} --hash {}` again",
                    args.id,
                    args.hash
                ))
            } else {
                Err(anyhow::anyhow!("publication failed: {error}"))
            }
        }
    }
}

fn already(yes: bool) -> &'static str {
    if yes {
        " (it was already there)"
    } else {
        ""
    }
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

fn set_publication(record: &mut TaskRecord, new: &Publication) {
    if let Some(ChangeOutcome::Proposal { publication, .. }) =
        record.change_result.as_mut().map(|r| &mut r.outcome)
    {
        publication.status = new.status;
        publication.branch = new.branch.clone();
        if new.pr_url.is_some() {
            publication.pr_url = new.pr_url.clone();
        }
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
    let source = warden_repo::Source::Path(PathBuf::from(&repo.source));
    publish_remote(git, &source).map_err(|message| usage(anyhow::anyhow!(message)))
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
