//! `warden apply TASK [--branch NAME]`: fetches a change task's proposal commit from Warden's
//! mirror into the user's repository as a branch (`warden/<task-id>` by default). Only objects
//! and that one ref are written: the work tree, the index and the current branch are untouched,
//! and an existing branch is never moved (unless it already points at the proposal).

use crate::records;
use crate::usage;
use anyhow::Context;
use std::path::PathBuf;
use warden_protocol::{ChangeOutcome, TaskId, TaskKind};
use warden_repo::proposal::{fetch_proposal_into, ApplyError, ApplyOutcome};
use warden_repo::Git;
use warden_server::config::Config;

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The change task whose proposal to fetch
    pub task: String,
    /// The branch to create (default `warden/<task-id>`)
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// The repository to fetch into (default: the task's local repository, else the current
    /// directory)
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
}

pub fn apply(config: &Config, args: ApplyArgs) -> anyhow::Result<u8> {
    let id: TaskId = args.task.parse().map_err(usage)?;
    let record = records::load(&config.home, &id).map_err(usage)?;
    if record.kind != TaskKind::Change {
        return Err(usage(anyhow::anyhow!("task {id} is not a change task")));
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
    let target = match (&args.repo, record.repos.first()) {
        (Some(path), _) => path.clone(),
        (None, Some(repo)) if repo.source_kind == "path" => PathBuf::from(&repo.source),
        _ => std::env::current_dir().context("cannot read the current directory")?,
    };
    let branch = args
        .branch
        .clone()
        .unwrap_or_else(|| format!("warden/{id}"));
    let git = Git::locate()?;
    let mirror = crate::approve::find_mirror(&git, &config.home, &proposal.repo, id.as_str())?;
    match fetch_proposal_into(&git, &mirror, id.as_str(), &target, &branch) {
        Ok((outcome, commit)) => {
            if commit != proposal.commit {
                anyhow::bail!(
                    "the mirror's proposal ref points at {commit}, but the task recorded {}",
                    proposal.commit
                );
            }
            let verb = match outcome {
                ApplyOutcome::Created => "created",
                ApplyOutcome::AlreadyThere => "already at the proposal:",
            };
            println!("{verb} branch {branch} at {commit} in {}", target.display());
            eprintln!("warden: your work tree, index and current branch were not touched");
            Ok(0)
        }
        Err(error @ (ApplyError::BranchExists { .. } | ApplyError::InvalidBranch(_))) => {
            Err(usage(error))
        }
        Err(error) => Err(error.into()),
    }
}
