//! A change task's proposal as a diff a person can read before approving it — the one producer
//! for `GET /v1/tasks/{id}/diff` and `warden diff` (through `warden_service::diff::task_diff`),
//! so both show exactly the same redacted text.
//!
//! - The diff comes from Warden's mirror through the hardened git (`diff-tree -p --no-renames
//!   --no-ext-diff --no-textconv --no-color`): no diff driver or textconv a repository
//!   configures ever runs. The proposal ref must still point at the recorded commit, whose
//!   parent is the recorded base.
//! - Registered secrets (model API keys, URL credentials) and credential-looking strings
//!   (GitHub/GitLab/AWS/Slack/`sk-` tokens, PEM private-key bodies) are replaced by
//!   `[redacted]`, and so are the values of sensitive files (`.env*` keep their names, keys and
//!   credential stores only their diff markers; see [`crate::sensitive`]).
//! - At most [`MAX_DIFF_BYTES`], cut at a line end (`truncated`), so a secret is never cut in
//!   half past the redaction.
//!
//! [`proposal_bundle`] is the proposal itself for `warden apply` against a server
//! (`GET /v1/tasks/{id}/proposal`): a git bundle of the proposal ref with the base commit as its
//! prerequisite, so it carries only what the proposal added — its commit, trees and the new
//! contents of the files it changed. Raw objects cannot be redacted, so it is withheld when
//! redacting would change anything in those (every changed file in full, binary files as text,
//! and the commit message) or when the proposal changes sensitive files.

use std::io::Read;
use std::path::Path;

use warden_protocol::Proposal;
use warden_repo::proposal::proposal_ref;
use warden_repo::Git;

use crate::redact::Redactor;

/// The largest diff produced; longer ones are cut at a line end and marked truncated.
pub const MAX_DIFF_BYTES: usize = 4 << 20;

/// The proposal's diff against its base with every secret redacted, and whether it was cut.
/// `None` when the mirror no longer holds the proposal as recorded.
pub fn redacted_proposal_diff(
    git: &Git,
    mirror: &Path,
    task_id: &str,
    proposal: &Proposal,
    redactor: &Redactor,
) -> Result<Option<(String, bool)>, String> {
    if !is_object_id(&proposal.base_commit) || !is_object_id(&proposal.commit) {
        return Err(format!(
            "task {task_id}: the stored proposal names malformed commits"
        ));
    }
    let Some((text, truncated)) = proposal_diff(
        git,
        mirror,
        task_id,
        &proposal.base_commit,
        &proposal.commit,
        MAX_DIFF_BYTES,
    )?
    else {
        return Ok(None);
    };
    let diff = crate::sensitive::redact_sensitive_file_values(
        &crate::sensitive::redact_credential_patterns(&redactor.text(&text)),
    );
    Ok(Some((diff, truncated)))
}

fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The diff of `commit` against `base` in `mirror`, at most `max` bytes cut at a line end, and
/// whether it was cut. `None` when the mirror no longer holds the task's proposal as recorded
/// (ref moved or gone, or the commit is not on top of `base`).
fn proposal_diff(
    git: &Git,
    mirror: &Path,
    task_id: &str,
    base: &str,
    commit: &str,
    max: usize,
) -> Result<Option<(String, bool)>, String> {
    if !holds_proposal(git, mirror, task_id, base, commit) {
        return Ok(None);
    }
    let git_dir = format!("--git-dir={}", mirror.display());
    let mut stream = git
        .stream(
            mirror,
            &[
                &git_dir,
                "diff-tree",
                "-p",
                "-r",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                base,
                commit,
            ],
        )
        .map_err(|e| e.to_string())?;
    drop(stream.take_stdin());
    let Some(stdout) = stream.take_stdout() else {
        return Err("git diff-tree has no output pipe".into());
    };
    let mut bytes = Vec::new();
    stdout
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read git diff-tree: {e}"))?;
    if bytes.len() > max {
        // Dropping the stream kills git; cut at the last complete line.
        drop(stream);
        bytes.truncate(max);
        let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(end);
        return Ok(Some((String::from_utf8_lossy(&bytes).into_owned(), true)));
    }
    stream.finish().map_err(|e| e.to_string())?;
    Ok(Some((String::from_utf8_lossy(&bytes).into_owned(), false)))
}

/// Whether `mirror`'s proposal ref of `task_id` points at `commit`, whose parent is `base`.
fn holds_proposal(git: &Git, mirror: &Path, task_id: &str, base: &str, commit: &str) -> bool {
    if !mirror.is_dir() {
        return false;
    }
    let git_dir = format!("--git-dir={}", mirror.display());
    let resolve = |rev: &str| {
        git.run(mirror, &[&git_dir, "rev-parse", "--verify", "--quiet", rev])
            .ok()
            .map(|o| o.text())
    };
    let at_ref = resolve(&format!("{}^{{commit}}", proposal_ref(task_id)));
    let parent = resolve(&format!("{commit}^1"));
    at_ref.as_deref() == Some(commit) && parent.as_deref() == Some(base)
}

/// The largest proposal bundle served.
pub const MAX_BUNDLE_BYTES: usize = 64 << 20;

/// What [`proposal_bundle`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposalBundle {
    /// A git bundle (v2) of `refs/warden/proposals/<task>`, its prerequisite the base commit.
    Bundle(Vec<u8>),
    /// Not served, and why (a sentence for the requester).
    Withheld(String),
}

/// The proposal as a git bundle holding only what it added (see the module docs). `None` when
/// the mirror no longer holds the proposal as recorded.
pub fn proposal_bundle(
    git: &Git,
    mirror: &Path,
    task_id: &str,
    proposal: &Proposal,
    redactor: &Redactor,
) -> Result<Option<ProposalBundle>, String> {
    if !is_object_id(&proposal.base_commit) || !is_object_id(&proposal.commit) {
        return Err(format!(
            "task {task_id}: the stored proposal names malformed commits"
        ));
    }
    let (base, commit) = (proposal.base_commit.as_str(), proposal.commit.as_str());
    if !holds_proposal(git, mirror, task_id, base, commit) {
        return Ok(None);
    }
    if !proposal.sensitive_files.is_empty() {
        return Ok(Some(ProposalBundle::Withheld(format!(
            "the proposal changes sensitive files ({}), whose values Warden never serves; read \
             the redacted diff with `warden diff {task_id}`",
            proposal.sensitive_files.join(", ")
        ))));
    }
    let git_dir = format!("--git-dir={}", mirror.display());
    let run = |args: &[&str]| -> Result<Vec<u8>, String> {
        let mut full = vec![git_dir.as_str()];
        full.extend_from_slice(args);
        git.run(mirror, &full)
            .map(|o| o.stdout)
            .map_err(|e| e.to_string())
    };
    // Every changed file whole (binary ones as text) and the commit message: all the bundle's
    // readable content.
    let mut content = run(&[
        "diff-tree",
        "-p",
        "-r",
        "--text",
        "--unified=2147483647",
        "--no-renames",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        base,
        commit,
    ])?;
    content.extend(run(&["cat-file", "commit", commit])?);
    let text = String::from_utf8_lossy(&content);
    let redacted = crate::sensitive::redact_sensitive_file_values(
        &crate::sensitive::redact_credential_patterns(&redactor.text(&text)),
    );
    if redacted != text {
        return Ok(Some(ProposalBundle::Withheld(format!(
            "the proposal holds text Warden redacts (a registered secret or a credential-looking \
             string), which a bundle cannot hide; read the redacted diff with `warden diff \
             {task_id}`"
        ))));
    }
    let bundle = run(&[
        "bundle",
        "create",
        "--quiet",
        "-",
        &proposal_ref(task_id),
        &format!("^{base}"),
    ])?;
    if bundle.len() > MAX_BUNDLE_BYTES {
        return Ok(Some(ProposalBundle::Withheld(format!(
            "the proposal's bundle is {} bytes, more than the {MAX_BUNDLE_BYTES} served",
            bundle.len()
        ))));
    }
    Ok(Some(ProposalBundle::Bundle(bundle)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_test_support::git_fixture::TempRepo;

    /// A repository whose second commit writes `content` to `notes.txt`, used as the mirror with
    /// that commit as `tsk_1`'s proposal.
    fn proposal_of(content: &str) -> (TempRepo, Proposal) {
        let repo = TempRepo::new();
        repo.write("README.md", "# app\n");
        let base = repo.commit("base");
        repo.write("notes.txt", content);
        let commit = repo.commit("notes");
        repo.git(&["update-ref", &proposal_ref("tsk_1"), &commit]);
        let proposal = serde_json::from_value(serde_json::json!({
            "id": "prp_1", "repo": "app", "base_commit": base, "commit": commit,
            "tree": "0".repeat(40), "ref": proposal_ref("tsk_1"),
            "diff_stat": {"files_changed": 1, "additions": 1, "deletions": 0},
            "files": [], "summary": "notes", "hash": "sha256:x", "validations": [],
        }))
        .unwrap();
        (repo, proposal)
    }

    fn bundle(content: &str, redactor: &Redactor) -> ProposalBundle {
        let (repo, proposal) = proposal_of(content);
        let git = Git::locate().unwrap();
        proposal_bundle(
            &git,
            &repo.path().join(".git"),
            "tsk_1",
            &proposal,
            redactor,
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn a_proposal_bundle_holds_only_what_the_proposal_added() {
        let ProposalBundle::Bundle(bytes) = bundle("plain notes\n", &Redactor::new([])) else {
            panic!("withheld");
        };
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("# v2 git bundle\n-"), "{text}");
        assert!(text.contains(" refs/warden/proposals/tsk_1\n"), "{text}");
    }

    /// Raw objects cannot be redacted: anything redaction would replace withholds the bundle.
    #[test]
    fn a_proposal_bundle_is_withheld_when_redaction_would_change_it() {
        let token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
        let shaped = bundle(&format!("token {token}\n"), &Redactor::new([]));
        assert!(
            matches!(&shaped, ProposalBundle::Withheld(why) if why.contains("redacts")),
            "{shaped:?}"
        );
        let registered = bundle(
            "key my-registered-secret\n",
            &Redactor::new(["my-registered-secret".to_string()]),
        );
        assert!(
            matches!(registered, ProposalBundle::Withheld(_)),
            "{registered:?}"
        );
    }
}
