//! Where a task's repositories come from: the registered repository of each name (its source,
//! at the commit an earlier run recorded), or an in-process task's own source. Workers,
//! publication, diffs and the front door all pin through [`repo_specs`].

use std::path::Path;

use warden_protocol::{Failure, FailureCode};
use warden_repo::RepoSpec;
use warden_store::{Task, TaskRepo};

use crate::outage::StoreCalls;

/// The task's repositories as pinnable specs: the registered source, at the commit an earlier
/// run recorded, else the revision asked for, else the registered branch.
pub async fn repo_specs<C: StoreCalls + ?Sized>(
    store: &C,
    repos: &[TaskRepo],
) -> Result<Vec<RepoSpec>, Failure> {
    let mut specs = Vec::with_capacity(repos.len());
    for repo in repos {
        if let Some(source) = &repo.source {
            specs.push(in_process_spec(repo, source)?);
            continue;
        }
        let registered = store
            .call("reading a repository", |store| store.get_repo(&repo.name))
            .await
            .map_err(|e| Failure {
                code: FailureCode::Infrastructure,
                message: format!("cannot read repository {}: {e}", repo.name),
            })?
            .ok_or_else(|| Failure {
                code: FailureCode::RepositoryError,
                message: format!("repository {:?} is not registered", repo.name),
            })?;
        let mut spec =
            RepoSpec::parse(&registered.source, Path::new("/")).map_err(|e| Failure {
                code: FailureCode::RepositoryError,
                message: e.to_string(),
            })?;
        spec.name = registered.name.clone();
        spec.rev = repo
            .commit
            .clone()
            .or_else(|| repo.rev.clone())
            .or_else(|| registered.branch.clone());
        specs.push(spec);
    }
    Ok(specs)
}

/// An in-process task's repository: its own source (never a registered one), at the commit
/// the front door pinned.
fn in_process_spec(repo: &TaskRepo, source: &str) -> Result<RepoSpec, Failure> {
    // A local source is an absolute, canonical path; a URL never starts with `/`.
    let source = if source.starts_with('/') {
        warden_repo::Source::Path(std::path::PathBuf::from(source))
    } else {
        warden_repo::Source::Url(source.to_string())
    };
    Ok(RepoSpec {
        source,
        // The commit the front door pinned; a repository it could not snapshot (a disk
        // budget) is pinned again here, so the run fails visibly.
        rev: repo.commit.clone().or_else(|| repo.rev.clone()),
        name: repo.name.clone(),
        within: None,
    })
}

/// The repository of a task that holds `proposal`: the task's repository of that name, else
/// the registered repository of that name.
pub fn proposal_repo(task: &Task, proposal: &warden_protocol::Proposal) -> TaskRepo {
    task.repos
        .iter()
        .find(|r| r.name == proposal.repo)
        .cloned()
        .unwrap_or_else(|| TaskRepo::named(&proposal.repo))
}
