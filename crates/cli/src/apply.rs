//! `warden apply TASK [--branch NAME]`: fetches a change task's proposal commit from Warden's
//! mirror into the user's repository as a branch (`warden/<task-id>` by default). Only objects
//! and that one ref are written: the work tree, the index and the current branch are untouched,
//! and an existing branch is never moved (unless it already points at the proposal).
//!
//! Against a server (`--server`/`WARDEN_SERVER`) the proposal comes as a git bundle from
//! `GET /v1/tasks/{id}/proposal` (only what the proposal added, so the repository must hold its
//! base commit) and is written the same way ([`fetch_bundle`]).

use crate::usage;
use std::path::{Path, PathBuf};
use warden_protocol::{Proposal, TaskId};
use warden_repo::proposal::{fetch_bundle_into, fetch_proposal_into, ApplyError, ApplyOutcome};
use warden_repo::Git;

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

/// Fetches the proposal from `mirror` into `target` as `branch`, checking it is the commit the
/// task recorded.
pub fn fetch(
    git: &Git,
    mirror: &Path,
    id: &TaskId,
    proposal: &Proposal,
    target: &Path,
    branch: &str,
) -> anyhow::Result<u8> {
    let fetched = fetch_proposal_into(git, mirror, id.as_str(), target, branch);
    report(
        fetched,
        &proposal.commit,
        target,
        branch,
        "the mirror's proposal ref",
    )
}

/// Fetches the proposal from a server's `bundle` (prerequisite `base`) into `target` as
/// `branch`, checking it is `commit`, the commit the server says the task recorded.
pub fn fetch_bundle(
    git: &Git,
    bundle: &[u8],
    id: &TaskId,
    (base, commit): (&str, &str),
    target: &Path,
    branch: &str,
) -> anyhow::Result<u8> {
    let fetched = fetch_bundle_into(git, bundle, id.as_str(), base, target, branch);
    report(
        fetched,
        commit,
        target,
        branch,
        "the server's proposal bundle",
    )
}

fn report(
    fetched: Result<(ApplyOutcome, String), ApplyError>,
    expected: &str,
    target: &Path,
    branch: &str,
    source: &str,
) -> anyhow::Result<u8> {
    match fetched {
        Ok((outcome, commit)) => {
            if commit != expected {
                anyhow::bail!("{source} points at {commit}, but the task recorded {expected}");
            }
            let verb = match outcome {
                ApplyOutcome::Created => "created",
                ApplyOutcome::AlreadyThere => "already at the proposal:",
            };
            println!("{verb} branch {branch} at {commit} in {}", target.display());
            eprintln!(
                "warden: your work tree, index and current branch were not touched; to take the \
                 change: git -C {} merge {branch}",
                shell_word(&target.to_string_lossy())
            );
            Ok(0)
        }
        Err(
            error @ (ApplyError::BranchExists { .. }
            | ApplyError::InvalidBranch(_)
            | ApplyError::MissingBase { .. }),
        ) => Err(usage(error)),
        Err(error) => Err(error.into()),
    }
}

/// `word` as one shell word: as it is when it has nothing a shell would split or expand, else
/// in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shell_words_quote_only_what_a_shell_would_split() {
        assert_eq!(super::shell_word("/tmp/my-repo_1"), "/tmp/my-repo_1");
        assert_eq!(super::shell_word("/tmp/my repo"), "'/tmp/my repo'");
        assert_eq!(super::shell_word("/tmp/it's"), r"'/tmp/it'\''s'");
        assert_eq!(super::shell_word("$HOME"), "'$HOME'");
    }
}
