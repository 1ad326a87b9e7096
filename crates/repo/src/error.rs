//! `RepoError`: every way pinning, mirroring, snapshotting or running git can fail. Messages are
//! lowercase, name the thing that failed and never carry URL credentials.

use std::path::PathBuf;
use std::time::Duration;

/// Why a repository operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// None of the fixed git locations holds a git that runs.
    #[error("no usable git found (tried {tried})")]
    GitNotFound {
        /// The absolute paths that were tried, comma-separated.
        tried: String,
    },
    /// The git process could not be started or talked to.
    #[error("could not run git {args}: {source}")]
    Spawn {
        /// The git arguments, credentials redacted.
        args: String,
        source: std::io::Error,
    },
    /// Git ran and exited unsuccessfully.
    #[error("git {args} failed ({status}): {stderr}")]
    GitFailed {
        /// The git arguments, credentials redacted.
        args: String,
        /// The exit code, `None` when git was killed by a signal.
        code: Option<i32>,
        /// A readable rendering of the exit status.
        status: String,
        /// Git's standard error, trimmed and credentials redacted.
        stderr: String,
    },
    /// Git ran past its deadline and was killed, with everything it started.
    #[error("git {args} timed out after {}s and was killed", timeout.as_secs_f64())]
    Timeout {
        /// The git arguments, credentials redacted.
        args: String,
        /// The deadline that passed.
        timeout: Duration,
    },
    /// The repository argument (`PATH[@REV]` or `URL[@REV]`) is not acceptable.
    #[error("invalid repository {spec:?}: {reason}")]
    InvalidSpec {
        /// The text as given, credentials redacted.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The revision does not name a commit in the repository.
    #[error("revision {rev:?} does not name a commit in {repo}: {detail}")]
    RevisionNotFound {
        /// The revision as given.
        rev: String,
        /// The repository name.
        repo: String,
        /// What git said.
        detail: String,
    },
    /// The repository uses an object format Warden cannot handle.
    #[error("repository uses unsupported object format {0:?}")]
    UnsupportedObjectFormat(String),
    /// Git produced output Warden did not expect (a protocol violation, not a user error).
    #[error("unexpected git output: {0}")]
    UnexpectedOutput(String),
    /// An object did not hash to its id, or a commit's tree was not the pinned one.
    #[error("snapshot verification failed: {0}")]
    Corrupt(String),
    /// A tree holds an entry that must never be written (`.git`, `..`, a path through a symlink).
    #[error("refusing to materialize tree entry {path:?}: {reason}")]
    UnsafeEntry {
        /// The entry's path inside the tree.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// A disk budget would be exceeded (a snapshot larger than its limit); nothing past the
    /// limit was written and nothing partial is kept.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A file-system operation under `WARDEN_HOME` failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        source: std::io::Error,
    },
}

impl RepoError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> RepoError {
        let path = path.into();
        move |source| RepoError::Io {
            action,
            path,
            source,
        }
    }

    /// The error in one sentence for a person: git's own complaint (its `fatal:` or `error:`
    /// line) rather than the command line Warden ran; other errors as they display.
    pub fn summary(&self) -> String {
        match self {
            RepoError::GitFailed { stderr, status, .. } => {
                let complaint = stderr
                    .lines()
                    .map(str::trim)
                    .find_map(|line| {
                        line.strip_prefix("fatal:")
                            .or_else(|| line.strip_prefix("error:"))
                    })
                    .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
                    .map(str::trim);
                match complaint {
                    Some(complaint) => complaint.to_string(),
                    None => format!("git failed ({status})"),
                }
            }
            other => other.to_string(),
        }
    }

    /// Whether trying again later may succeed (network trouble, a timeout, a busy lock).
    pub fn is_retryable(&self) -> bool {
        match self {
            RepoError::Timeout { .. } | RepoError::Spawn { .. } => true,
            RepoError::GitFailed { stderr, .. } => {
                let stderr = stderr.to_ascii_lowercase();
                [
                    "could not resolve host",
                    "connection",
                    "timed out",
                    "unable to access",
                    ".lock",
                ]
                .iter()
                .any(|needle| stderr.contains(needle))
            }
            RepoError::GitNotFound { .. }
            | RepoError::InvalidSpec { .. }
            | RepoError::RevisionNotFound { .. }
            | RepoError::UnsupportedObjectFormat(_)
            | RepoError::UnexpectedOutput(_)
            | RepoError::Corrupt(_)
            | RepoError::UnsafeEntry { .. }
            | RepoError::QuotaExceeded(_)
            | RepoError::Io { .. } => false,
        }
    }
}

/// Replaces the user-info part of every `scheme://user:secret@host` in `text` with `***`, so
/// tokens embedded in URLs never reach an error message, a log line or a reply.
/// Replaces the userinfo of every URL in `text` with `***`.
pub fn redact_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '\'' || c == '"')
            .unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&tail[at..authority_end]);
            }
            None => out.push_str(&tail[..authority_end]),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redact_credentials;

    #[test]
    fn credentials_are_redacted_wherever_they_appear() {
        for (input, expect) in [
            ("https://github.com/o/r", "https://github.com/o/r"),
            ("https://tok@github.com/o/r", "https://***@github.com/o/r"),
            (
                "fatal: https://u:p@h/x and ssh://git@h/y",
                "fatal: https://***@h/x and ssh://***@h/y",
            ),
            ("no url here", "no url here"),
            ("https://u:p@host", "https://***@host"),
        ] {
            assert_eq!(redact_credentials(input), expect, "{input}");
        }
    }
}
