//! `warden apply TASK [--branch NAME]`: fetches a change task's proposal commit from Warden's
//! mirror into the user's repository as a branch (`warden/<task-id>` by default). Only objects
//! and that one ref are written: the work tree, the index and the current branch are untouched,
//! and an existing branch is never moved (unless it already points at the proposal).

use crate::usage;
use std::path::{Path, PathBuf};
use warden_protocol::{Proposal, TaskId};
use warden_repo::proposal::{fetch_proposal_into, ApplyError, ApplyOutcome};
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
    match fetch_proposal_into(git, mirror, id.as_str(), target, branch) {
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
            eprintln!(
                "warden: your work tree, index and current branch were not touched; to take the \
                 change: git -C {} merge {branch}",
                shell_word(&target.to_string_lossy())
            );
            Ok(0)
        }
        Err(error @ (ApplyError::BranchExists { .. } | ApplyError::InvalidBranch(_))) => {
            Err(usage(error))
        }
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
