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
    if !mirror.is_dir() {
        return Ok(None);
    }
    let git_dir = format!("--git-dir={}", mirror.display());
    let resolve = |rev: &str| {
        git.run(mirror, &[&git_dir, "rev-parse", "--verify", "--quiet", rev])
            .ok()
            .map(|o| o.text())
    };
    let at_ref = resolve(&format!("{}^{{commit}}", proposal_ref(task_id)));
    let parent = resolve(&format!("{commit}^1"));
    if at_ref.as_deref() != Some(commit) || parent.as_deref() != Some(base) {
        return Ok(None);
    }
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
