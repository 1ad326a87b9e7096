//! Evidence validation (SPEC §5): checks one citation the model made against the task's manifest
//! of pinned checkouts and turns it into a `warden_protocol::Evidence` with a canonical path and a
//! Warden-built link. Every refusal says what to fix, because it goes back to the model.

use std::io::Read;

use crate::browse::{evidence_url, BrowseBase};
use crate::confine::{CheckoutRoot, ConfineError};

/// One repository of a task's manifest, as evidence is checked against it.
#[derive(Debug, Clone)]
pub struct PinnedCheckout {
    pub repo: String,
    /// The full commit id the task is pinned to.
    pub commit: String,
    /// The snapshot (or view of it) the agent read.
    pub root: CheckoutRoot,
    pub browse: Option<BrowseBase>,
}

/// A citation as the model submitted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvidenceClaim<'a> {
    pub repo: &'a str,
    pub commit: &'a str,
    pub path: &'a str,
    pub start_line: u64,
    pub end_line: u64,
}

/// Why a citation was refused; the message is written for the model to correct it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceError {
    /// The repository is not in the task's manifest.
    #[error("repository {repo:?} is not part of this task; cite one of: {}", known.join(", "))]
    UnknownRepo {
        repo: String,
        /// The manifest's repository names.
        known: Vec<String>,
    },
    /// The commit is not the full pinned commit of that repository.
    #[error("commit {given:?} is not the pinned commit of {repo}; cite {pinned}")]
    WrongCommit {
        repo: String,
        given: String,
        pinned: String,
    },
    /// The path is absolute, escapes the checkout, is under `.git`, or does not exist.
    #[error("{0}")]
    Path(ConfineError),
    /// The path names a directory or something else that is not a regular file.
    #[error("{path} is not a regular file; cite a file")]
    NotAFile { path: String },
    /// The file could not be read.
    #[error("{path} could not be read: {message}")]
    Unreadable { path: String, message: String },
    /// `start_line` is 0.
    #[error("line numbers start at 1; start_line is 0")]
    StartLineZero,
    /// `start_line` is after `end_line`.
    #[error("start_line {start_line} is after end_line {end_line}")]
    Reversed { start_line: u64, end_line: u64 },
    /// The range ends past the last line of the file.
    #[error("{path} has {line_count} lines; end_line {end_line} is past the end")]
    PastEnd {
        path: String,
        line_count: u64,
        end_line: u64,
    },
    /// The file is empty, so no line can be cited.
    #[error("{path} is empty (0 lines); it cannot be cited by line")]
    EmptyFile { path: String },
}

/// Validates `claim` against `manifest` (SPEC §5) and returns the accepted evidence.
pub fn validate_evidence(
    manifest: &[PinnedCheckout],
    claim: &EvidenceClaim,
) -> Result<warden_protocol::Evidence, EvidenceError> {
    let checkout = manifest
        .iter()
        .find(|checkout| checkout.repo == claim.repo)
        .ok_or_else(|| EvidenceError::UnknownRepo {
            repo: claim.repo.to_string(),
            known: manifest.iter().map(|c| c.repo.clone()).collect(),
        })?;
    if claim.commit != checkout.commit {
        return Err(EvidenceError::WrongCommit {
            repo: checkout.repo.clone(),
            given: claim.commit.to_string(),
            pinned: checkout.commit.clone(),
        });
    }
    if claim.start_line == 0 {
        return Err(EvidenceError::StartLineZero);
    }
    if claim.start_line > claim.end_line {
        return Err(EvidenceError::Reversed {
            start_line: claim.start_line,
            end_line: claim.end_line,
        });
    }
    let resolved = checkout
        .root
        .resolve(claim.path)
        .map_err(EvidenceError::Path)?;
    let path =
        checkout
            .root
            .relative_display(&resolved)
            .ok_or_else(|| EvidenceError::Unreadable {
                path: claim.path.to_string(),
                message: "its path is not valid UTF-8".into(),
            })?;
    let unreadable = |e: std::io::Error| EvidenceError::Unreadable {
        path: path.clone(),
        message: e.to_string(),
    };
    let metadata = std::fs::metadata(&resolved).map_err(unreadable)?;
    if !metadata.is_file() {
        return Err(EvidenceError::NotAFile { path });
    }
    let line_count =
        count_lines(std::fs::File::open(&resolved).map_err(unreadable)?).map_err(unreadable)?;
    if line_count == 0 {
        return Err(EvidenceError::EmptyFile { path });
    }
    if claim.end_line > line_count {
        return Err(EvidenceError::PastEnd {
            path,
            line_count,
            end_line: claim.end_line,
        });
    }
    let url = checkout.browse.as_ref().map(|browse| {
        evidence_url(
            browse,
            &checkout.commit,
            &path,
            claim.start_line,
            claim.end_line,
        )
    });
    Ok(warden_protocol::Evidence {
        repo: checkout.repo.clone(),
        commit: checkout.commit.clone(),
        path,
        start_line: claim.start_line,
        end_line: claim.end_line,
        url,
    })
}

/// Number of `\n`, plus one when the content is non-empty and does not end in `\n`.
fn count_lines(mut reader: impl Read) -> std::io::Result<u64> {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut newlines = 0u64;
    let mut last = None;
    loop {
        let read = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let chunk = &buffer[..read];
        newlines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        last = chunk.last().copied();
    }
    Ok(match last {
        Some(b'\n') | None => newlines,
        Some(_) => newlines + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    struct Fixture {
        _dirs: (tempfile::TempDir, tempfile::TempDir),
        manifest: Vec<PinnedCheckout>,
    }

    fn fixture() -> Fixture {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.rs"), "s\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/nested")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        let lib: String = (1..=42).map(|i| format!("line {i}\n")).collect();
        std::fs::write(root.join("src/lib.rs"), lib).unwrap();
        std::fs::write(root.join("src/no_newline.rs"), "a\nb").unwrap();
        std::fs::write(root.join("src/empty.rs"), "").unwrap();
        std::fs::write(root.join("src/one.rs"), "\n").unwrap();
        std::fs::write(root.join("src/nested/a b.rs"), "x\n").unwrap();
        symlink("lib.rs", root.join("src/alias.rs")).unwrap();
        symlink(outside.path().join("secret.rs"), root.join("src/escape.rs")).unwrap();
        symlink("../.git/config", root.join("src/config")).unwrap();
        let manifest = vec![
            PinnedCheckout {
                repo: "app".into(),
                commit: COMMIT.into(),
                root: CheckoutRoot::new(root).unwrap(),
                browse: Some(BrowseBase::GitHub {
                    base: "https://github.com/o/app".into(),
                }),
            },
            PinnedCheckout {
                repo: "lib".into(),
                commit: "f".repeat(40),
                root: CheckoutRoot::new(root).unwrap(),
                browse: None,
            },
        ];
        Fixture {
            _dirs: (dir, outside),
            manifest,
        }
    }

    fn claim<'a>(
        repo: &'a str,
        commit: &'a str,
        path: &'a str,
        start: u64,
        end: u64,
    ) -> EvidenceClaim<'a> {
        EvidenceClaim {
            repo,
            commit,
            path,
            start_line: start,
            end_line: end,
        }
    }

    /// `Ok((path, url))` for accepted evidence, `Err(message)` for a refusal.
    fn check(f: &Fixture, claim: EvidenceClaim<'_>, expect: Result<(&str, Option<&str>), &str>) {
        let got = validate_evidence(&f.manifest, &claim);
        match (got, expect) {
            (Ok(evidence), Ok((path, url))) => {
                assert_eq!(evidence.path, path, "{claim:?}");
                assert_eq!(evidence.url.as_deref(), url, "{claim:?}");
                assert_eq!(evidence.repo, claim.repo);
                assert_eq!(evidence.commit, claim.commit);
                assert_eq!(
                    (evidence.start_line, evidence.end_line),
                    (claim.start_line, claim.end_line)
                );
            }
            (Err(err), Err(message)) => assert_eq!(err.to_string(), message, "{claim:?}"),
            (got, expect) => panic!("{claim:?}: got {got:?}, expected {expect:?}"),
        }
    }

    #[test]
    fn accepts_valid_citations() {
        let f = fixture();
        let url = format!("https://github.com/o/app/blob/{COMMIT}/src/lib.rs#L10-L24");
        check(
            &f,
            claim("app", COMMIT, "src/lib.rs", 10, 24),
            Ok(("src/lib.rs", Some(&url))),
        );
        check(
            &f,
            claim("app", COMMIT, "./src/../src/lib.rs", 10, 24),
            Ok(("src/lib.rs", Some(&url))),
        );
        // A symlink is followed and the evidence names its target.
        check(
            &f,
            claim("app", COMMIT, "src/alias.rs", 10, 24),
            Ok(("src/lib.rs", Some(&url))),
        );
        let last = format!("https://github.com/o/app/blob/{COMMIT}/src/lib.rs#L42");
        check(
            &f,
            claim("app", COMMIT, "src/lib.rs", 42, 42),
            Ok(("src/lib.rs", Some(&last))),
        );
        check(
            &f,
            claim("app", COMMIT, "src/no_newline.rs", 2, 2),
            Ok((
                "src/no_newline.rs",
                Some(&format!(
                    "https://github.com/o/app/blob/{COMMIT}/src/no_newline.rs#L2"
                )),
            )),
        );
        check(
            &f,
            claim("app", COMMIT, "src/one.rs", 1, 1),
            Ok((
                "src/one.rs",
                Some(&format!(
                    "https://github.com/o/app/blob/{COMMIT}/src/one.rs#L1"
                )),
            )),
        );
        check(
            &f,
            claim("app", COMMIT, "src/nested/a b.rs", 1, 1),
            Ok((
                "src/nested/a b.rs",
                Some(&format!(
                    "https://github.com/o/app/blob/{COMMIT}/src/nested/a%20b.rs#L1"
                )),
            )),
        );
        let other = "f".repeat(40);
        check(
            &f,
            claim("lib", &other, "src/lib.rs", 1, 1),
            Ok(("src/lib.rs", None)),
        );
    }

    #[test]
    fn refuses_invalid_citations_with_fixable_messages() {
        let f = fixture();
        let wrong = "f".repeat(40);
        for (c, message) in [
            (
                claim("web", COMMIT, "src/lib.rs", 1, 1),
                r#"repository "web" is not part of this task; cite one of: app, lib"#.to_string(),
            ),
            (
                claim("app", &wrong, "src/lib.rs", 1, 1),
                format!(r#"commit "{wrong}" is not the pinned commit of app; cite {COMMIT}"#),
            ),
            (
                claim("app", "0123456", "src/lib.rs", 1, 1),
                format!(r#"commit "0123456" is not the pinned commit of app; cite {COMMIT}"#),
            ),
            (
                claim("app", COMMIT, "../outside.rs", 1, 1),
                r#"path "../outside.rs" leaves the repository"#.into(),
            ),
            (
                claim("app", COMMIT, "src/../../x.rs", 1, 1),
                r#"path "src/../../x.rs" leaves the repository"#.into(),
            ),
            (
                claim("app", COMMIT, "/etc/passwd", 1, 1),
                r#"path "/etc/passwd" is absolute; paths are relative to the repository root"#
                    .into(),
            ),
            (
                claim("app", COMMIT, "src/escape.rs", 1, 1),
                r#"path "src/escape.rs" resolves outside the repository through a symlink"#.into(),
            ),
            (
                claim("app", COMMIT, ".git/config", 1, 1),
                r#"path ".git/config" is inside .git, which is not part of the checkout"#.into(),
            ),
            (
                claim("app", COMMIT, "src/config", 1, 1),
                r#"path "src/config" is inside .git, which is not part of the checkout"#.into(),
            ),
            (
                claim("app", COMMIT, "src/missing.rs", 1, 1),
                r#"path "src/missing.rs" does not exist"#.into(),
            ),
            (
                claim("app", COMMIT, "src", 1, 1),
                "src is not a regular file; cite a file".into(),
            ),
            (
                claim("app", COMMIT, "", 1, 1),
                ". is not a regular file; cite a file".into(),
            ),
            (
                claim("app", COMMIT, "src/lib.rs", 0, 3),
                "line numbers start at 1; start_line is 0".into(),
            ),
            (
                claim("app", COMMIT, "src/lib.rs", 9, 5),
                "start_line 9 is after end_line 5".into(),
            ),
            (
                claim("app", COMMIT, "src/lib.rs", 40, 50),
                "src/lib.rs has 42 lines; end_line 50 is past the end".into(),
            ),
            (
                claim("app", COMMIT, "src/lib.rs", 43, 43),
                "src/lib.rs has 42 lines; end_line 43 is past the end".into(),
            ),
            (
                claim("app", COMMIT, "src/no_newline.rs", 1, 3),
                "src/no_newline.rs has 2 lines; end_line 3 is past the end".into(),
            ),
            (
                claim("app", COMMIT, "src/empty.rs", 1, 1),
                "src/empty.rs is empty (0 lines); it cannot be cited by line".into(),
            ),
            (
                claim("app", COMMIT, "src/alias.rs", 1, 99),
                "src/lib.rs has 42 lines; end_line 99 is past the end".into(),
            ),
        ] {
            check(&f, c, Err(&message));
        }
    }

    #[test]
    fn counts_lines_like_an_editor() {
        for (content, lines) in [
            ("", 0),
            ("\n", 1),
            ("a", 1),
            ("a\n", 1),
            ("a\nb", 2),
            ("a\nb\n", 2),
            ("\n\n", 2),
        ] {
            assert_eq!(
                count_lines(content.as_bytes()).unwrap(),
                lines,
                "{content:?}"
            );
        }
    }
}
