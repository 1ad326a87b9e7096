//! Publication of an approved proposal, as two side effects done at most once each: push the
//! proposal commit to `warden/<task-id>` on the repository's remote, then open a pull request
//! for that branch on GitHub. Each step journals its intent before it starts and reconciles by
//! asking the remote first (`ls-remote` for the branch, pulls-by-head for the pull request),
//! never from a local record, so running the steps again after a crash at any point completes
//! the publication with exactly one branch and one pull request. The caller (a worker, through
//! `warden_service::publication::publish_approved`) verifies the approval and records the
//! publication status; nothing here reads or writes a store.
//!
//! Crash tests stop the process at named points with `WARDEN_FAILPOINT`:
//! `publish_after_push` (pushed, nothing recorded) and `publish_after_pr` (opened, nothing
//! recorded). Only a build with the `failpoints` feature has them, and only test builds enable
//! it (a dev-dependency of warden-cli): in any other build [`crash_point`] is empty and the
//! variable is never read.

use std::path::{Path, PathBuf};

use serde_json::json;
use warden_protocol::{Proposal, Publication, PublicationStatus};
use warden_repo::proposal::{push_proposal_onto, ApplyError, PushOutcome};
use warden_repo::{Git, RepoError};
use warden_runtime::{Journal, JournalError, RecordKind};

use crate::config::GithubSettings;
use crate::github_client::{
    repo_from_remote_url, web_host_of_api, GithubClient, GithubClientConfig, GithubError,
    GithubRepo, NewPullRequest, PullRequest,
};
use warden_engine::redact::Redactor;

/// The environment variable naming a crash point (`failpoints` builds only; see the module
/// docs).
pub const FAILPOINT_ENV: &str = "WARDEN_FAILPOINT";
/// The exit status of a planned crash.
pub const FAILPOINT_EXIT: i32 = 101;
/// Whether this build stops at crash points (the `failpoints` feature, test builds only).
pub const FAILPOINTS: bool = cfg!(feature = "failpoints");

/// GitHub caps a pull request body at 65,536 characters; stay well under.
const MAX_BODY_CHARS: usize = 60_000;
const MAX_TITLE_CHARS: usize = 200;

/// Why publication stopped.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The push was refused or failed (a branch at another commit, a transport error).
    #[error("push failed: {0}")]
    Push(#[from] ApplyError),
    /// GitHub refused or could not be reached after retries.
    #[error("opening the pull request failed: {0}")]
    Github(#[from] GithubError),
    /// The intent could not be journaled, so the side effect was not started.
    #[error("cannot journal the publication: {0}")]
    Journal(#[from] JournalError),
    /// The publication target cannot work as configured (no token, no base branch).
    #[error("{0}")]
    Config(String),
    /// A blocking task failed to run.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The branch a task's proposal is published to.
pub fn branch_for(task_id: &str) -> String {
    format!("warden/{task_id}")
}

/// Stops the process if `WARDEN_FAILPOINT` names `point` (crash tests).
#[cfg(feature = "failpoints")]
pub fn crash_point(point: &str) {
    if std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == point) {
        std::process::exit(FAILPOINT_EXIT);
    }
}

/// Without the `failpoints` feature a crash point does nothing and reads nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn crash_point(_point: &str) {}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Where and what to push.
#[derive(Debug, Clone)]
pub struct PushInput {
    pub git: Git,
    /// The mirror holding the proposal commit.
    pub mirror: PathBuf,
    /// The remote URL or path (may carry credentials; never journaled with them).
    pub remote: String,
    pub commit: String,
    pub branch: String,
    /// A fast-forward of an existing branch: the commit the branch must be at (see [`Onto`]).
    pub onto: Option<String>,
}

/// Step 1: push the proposal commit to its branch, at most once. The intent is journaled
/// first; [`push_proposal_onto`] asks the remote before and after, so a branch already at the
/// commit (an earlier attempt that crashed before recording) counts as done. With
/// [`PushInput::onto`] the branch exists and is fast-forwarded from that commit.
pub async fn push_step(
    input: &PushInput,
    journal: &mut dyn Journal,
    redactor: &Redactor,
) -> Result<PushOutcome, PublishError> {
    journal
        .append(
            now_ms(),
            RecordKind::SideEffectIntent,
            redactor.json(json!({"push": {
                "remote": warden_repo::redact_credentials(&input.remote),
                "branch": input.branch,
                "commit": input.commit,
                "onto": input.onto,
            }})),
        )
        .await?;
    let owned = input.clone();
    let result = tokio::task::spawn_blocking(move || {
        push_proposal_onto(
            &owned.git,
            &owned.mirror,
            &owned.remote,
            &owned.commit,
            &owned.branch,
            owned.onto.as_deref(),
        )
    })
    .await
    .map_err(|e| PublishError::Internal(format!("push task: {e}")))?;
    crash_point("publish_after_push");
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => {
            let message = redactor.text(&error.to_string());
            let _ = journal
                .append(
                    now_ms(),
                    RecordKind::SideEffectOutcome,
                    json!({"push": {"failed": message}}),
                )
                .await;
            return Err(PublishError::Push(error));
        }
    };
    journal
        .append(
            now_ms(),
            RecordKind::SideEffectOutcome,
            json!({"push": {"branch": input.branch, "commit": input.commit,
                "already_there": outcome == PushOutcome::AlreadyThere}}),
        )
        .await?;
    Ok(outcome)
}

/// Where a pull request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubTarget {
    pub repo: GithubRepo,
    /// The branch to merge into; `None`: the remote's default branch (its `HEAD`).
    pub base: Option<String>,
}

/// The GitHub repository a task's repository publishes to: `explicit` (`--github owner/name`),
/// else a `[[publish]]` entry for `repo_name`, else the remote URL when it is on the configured
/// GitHub host. `None`: publication stops at the push.
pub fn resolve_target(
    settings: &GithubSettings,
    repo_name: &str,
    remote: &str,
    explicit: Option<&GithubRepo>,
) -> Option<GithubTarget> {
    let entry = settings.targets.iter().find(|t| t.repo == repo_name);
    let base = entry.and_then(|e| e.base.clone());
    if let Some(repo) = explicit {
        return Some(GithubTarget {
            repo: repo.clone(),
            base,
        });
    }
    if let Some(entry) = entry {
        return Some(GithubTarget {
            repo: entry.github.clone(),
            base,
        });
    }
    let host = web_host_of_api(&settings.api_url)?;
    repo_from_remote_url(remote, &host).map(|repo| GithubTarget { repo, base: None })
}

/// A client for the configured API, or why there is none.
pub fn client_for(settings: &GithubSettings) -> Result<GithubClient, PublishError> {
    let auth = settings.auth().ok_or_else(|| {
        PublishError::Config(
            "no GitHub token: set WARDEN_GITHUB_TOKEN (or GITHUB_TOKEN) in the environment of \
             the Warden process, or configure [github.app]"
                .into(),
        )
    })?;
    let mut config = GithubClientConfig::with_auth(&settings.api_url, auth);
    if let Some(base) = settings.retry_base {
        config.retry_base = base;
    }
    GithubClient::new(config).map_err(PublishError::Github)
}

/// The branch the remote's `HEAD` points at, asked of the remote (`ls-remote --symref`).
pub fn remote_default_branch(
    git: &Git,
    mirror: &Path,
    remote: &str,
) -> Result<Option<String>, RepoError> {
    let git_dir = format!("--git-dir={}", mirror.display());
    let output = git.run_transfer(
        mirror,
        &[
            &git_dir,
            "ls-remote",
            "--symref",
            "--end-of-options",
            remote,
            "HEAD",
        ],
    )?;
    Ok(output.text().lines().find_map(|line| {
        let (target, name) = line.strip_prefix("ref: ")?.split_once('\t')?;
        (name == "HEAD")
            .then(|| target.strip_prefix("refs/heads/").map(str::to_string))
            .flatten()
    }))
}

/// The pull request title: the summary's first line.
pub fn pull_request_title(proposal: &Proposal, redactor: &Redactor) -> String {
    let first = proposal.summary.lines().next().unwrap_or_default().trim();
    let title = if first.is_empty() {
        "Warden change".to_string()
    } else {
        first.chars().take(MAX_TITLE_CHARS).collect()
    };
    redactor.text(&title)
}

/// Findings a pull request body lists; the rest are counted.
const MAX_PR_FINDINGS: usize = 20;

/// The review section of a pull request body: the verdict, the rounds and model, each finding
/// as Codex's review format writes it (priority, title, location, body), Markdown kept inert.
fn review_section(review: &warden_protocol::Review) -> String {
    let inert = |text: &str| text.replace('`', "'").replace(['\r', '\n'], " ");
    let mut section = format!(
        "\n## Review\n\n**{}** after {} round(s) by `{}`, {} finding(s).\n",
        inert(&review.verdict),
        review.rounds,
        inert(&review.model),
        review.findings.len()
    );
    if !review.explanation.trim().is_empty() {
        section.push_str(&format!("\n{}\n", inert(review.explanation.trim())));
    }
    if !review.findings.is_empty() {
        section.push('\n');
    }
    for finding in review.findings.iter().take(MAX_PR_FINDINGS) {
        let lines = if finding.location.start_line == finding.location.end_line {
            finding.location.start_line.to_string()
        } else {
            format!(
                "{}-{}",
                finding.location.start_line, finding.location.end_line
            )
        };
        section.push_str(&format!(
            "- **P{}** {} — `{}:{lines}` (confidence {:.2}): {}\n",
            finding.priority,
            inert(&finding.title),
            inert(&finding.location.path),
            finding.confidence,
            inert(&finding.body)
        ));
    }
    if review.findings.len() > MAX_PR_FINDINGS {
        section.push_str(&format!(
            "- … and {} more\n",
            review.findings.len() - MAX_PR_FINDINGS
        ));
    }
    section
}

/// The pull request body: the task, the summary, the files, each validation's command and exit
/// code (never its output), and the reviewer's verdict and findings when a review ran,
/// registered secrets redacted.
pub fn pull_request_body(
    task_id: &str,
    proposal: &Proposal,
    review: Option<&warden_protocol::Review>,
    redactor: &Redactor,
) -> String {
    let mut body = String::new();
    body.push_str(&format!("Proposed by Warden for task `{task_id}`.\n\n"));
    body.push_str("## Summary\n\n");
    body.push_str(proposal.summary.trim());
    body.push_str("\n\n## Changes\n\n");
    body.push_str(&format!(
        "{} file(s), +{} −{} on base `{}`\n\n",
        proposal.diff_stat.files_changed,
        proposal.diff_stat.additions,
        proposal.diff_stat.deletions,
        proposal.base_commit
    ));
    for file in proposal.files.iter().take(100) {
        body.push_str(&format!(
            "- `{}` ({})\n",
            file.path.replace('`', "'"),
            file.status
        ));
    }
    if proposal.files.len() > 100 {
        body.push_str(&format!("- … and {} more\n", proposal.files.len() - 100));
    }
    body.push_str("\n## Validations\n\n");
    if proposal.validations.is_empty() {
        body.push_str("No check commands were configured.\n");
    } else {
        body.push_str("| command | exit code |\n|---|---|\n");
        for validation in &proposal.validations {
            let code = validation
                .exit_code
                .map_or("killed".to_string(), |c| c.to_string());
            let command = validation.command.replace('|', "\\|").replace('\n', " ");
            body.push_str(&format!("| `{command}` | {code} |\n"));
        }
        if let Some(first) = proposal.validations.first() {
            body.push_str(&format!(
                "\nRun on tree `{}` in the `{}` sandbox.\n",
                first.tree, first.sandbox
            ));
        }
    }
    if let Some(review) = review {
        body.push_str(&review_section(review));
    }
    body.push_str(&format!(
        "\nProposal `{}`, commit `{}`, approved hash `{}`.\n",
        proposal.id, proposal.commit, proposal.hash
    ));
    let mut body = redactor.text(&body);
    if body.chars().count() > MAX_BODY_CHARS {
        body = body.chars().take(MAX_BODY_CHARS).collect::<String>() + "\n\n(truncated)\n";
    }
    body
}

/// What to open.
#[derive(Debug, Clone)]
pub struct PullRequestInput {
    pub repo: GithubRepo,
    pub branch: String,
    pub base: String,
    /// The commit the branch holds (recorded; the branch was verified by the push step).
    pub commit: String,
    pub title: String,
    pub body: String,
    pub draft: bool,
}

/// What [`open_pull_request_step`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestOutcome {
    pub pull: PullRequest,
    /// Found on GitHub rather than created by this call (an earlier attempt got through).
    pub already_there: bool,
}

/// Step 2: open the pull request for the branch, at most once. The intent is journaled first;
/// before every create attempt GitHub is asked for pull requests of this head (open or closed),
/// and one found counts as done. A create answered "already exists", or failing with a 5xx or
/// a network error (it may have gone through), is followed by asking again, with backoff.
pub async fn open_pull_request_step(
    client: &GithubClient,
    input: &PullRequestInput,
    journal: &mut dyn Journal,
    redactor: &Redactor,
) -> Result<PullRequestOutcome, PublishError> {
    journal
        .append(
            now_ms(),
            RecordKind::SideEffectIntent,
            redactor.json(json!({"open_pr": {
                "repo": input.repo.to_string(),
                "head": input.branch,
                "base": input.base,
                "commit": input.commit,
            }})),
        )
        .await?;
    let result = open_reconciled(client, input).await;
    if let Ok(outcome) = &result {
        if !outcome.already_there {
            crash_point("publish_after_pr");
        }
    }
    match result {
        Ok(outcome) => {
            journal
                .append(
                    now_ms(),
                    RecordKind::SideEffectOutcome,
                    json!({"open_pr": {
                        "number": outcome.pull.number,
                        "url": outcome.pull.html_url,
                        "head_sha": outcome.pull.head_sha,
                        "already_there": outcome.already_there,
                    }}),
                )
                .await?;
            Ok(outcome)
        }
        Err(error) => {
            let _ = journal
                .append(
                    now_ms(),
                    RecordKind::SideEffectOutcome,
                    json!({"open_pr": {"failed": redactor.text(&error.to_string())}}),
                )
                .await;
            Err(PublishError::Github(error))
        }
    }
}

async fn open_reconciled(
    client: &GithubClient,
    input: &PullRequestInput,
) -> Result<PullRequestOutcome, GithubError> {
    let request = NewPullRequest {
        title: input.title.clone(),
        head: input.branch.clone(),
        base: input.base.clone(),
        body: input.body.clone(),
        draft: input.draft,
    };
    let attempts = client.max_attempts();
    let mut attempt = 1;
    loop {
        let existing = client.pulls_for_branch(&input.repo, &input.branch).await?;
        if let Some(pull) = existing.into_iter().next() {
            return Ok(PullRequestOutcome {
                pull,
                already_there: true,
            });
        }
        let error = match client.create_pull(&input.repo, &request).await {
            Ok(pull) => {
                return Ok(PullRequestOutcome {
                    pull,
                    already_there: false,
                })
            }
            Err(error) => error,
        };
        let again = matches!(error, GithubError::AlreadyExists(_)) || error.is_retryable();
        if !again || attempt >= attempts {
            return Err(error);
        }
        if error.is_retryable() {
            tokio::time::sleep(client.backoff(attempt, error.retry_after())).await;
        }
        attempt += 1;
    }
}

/// Everything [`publish_proposal`] needs.
#[derive(Debug, Clone, Copy)]
pub struct PublishRequest<'a> {
    pub git: &'a Git,
    /// The mirror holding the proposal commit (already verified against the approved hash).
    pub mirror: &'a Path,
    /// The repository's remote URL or path.
    pub remote: &'a str,
    pub task_id: &'a str,
    pub proposal: &'a Proposal,
    /// The reviewer's verdict and findings, when a review ran: shown in the pull request.
    pub review: Option<&'a warden_protocol::Review>,
    /// From [`resolve_target`]; `None`: publication ends at the push.
    pub target: Option<&'a GithubTarget>,
    pub settings: &'a GithubSettings,
    /// `None`: the task's own branch ([`branch_for`]), new on the remote. Some: a follow-up's
    /// proposal added to the branch (and pull request) an earlier proposal was published to.
    pub onto: Option<&'a Onto>,
}

/// A follow-up change published on the branch of the change it follows up: the proposal
/// commit's parent is the earlier proposal's commit, which the branch must still hold; the
/// push fast-forwards it (never forced) and the pull request of that branch is the earlier
/// one (found, not opened again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Onto {
    pub branch: String,
    /// The earlier proposal's commit: where the remote branch must be before the push.
    pub parent: String,
}

/// What [`publish_proposal`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// `pushed` (no GitHub target) or `pr_opened`, with the branch and the pull request URL.
    pub publication: Publication,
    pub push: PushOutcome,
    pub pull: Option<PullRequestOutcome>,
}

/// Why [`publish_proposal`] stopped, and whether the branch is on the remote by then.
#[derive(Debug)]
pub struct PublishFailure {
    pub pushed: bool,
    /// The branch publication pushes to (the task's own, or the one it continues).
    pub branch: String,
    pub error: PublishError,
}

impl PublishFailure {
    /// The publication to record: `failed`, with the branch.
    pub fn publication(&self) -> Publication {
        Publication {
            status: PublicationStatus::Failed,
            branch: Some(self.branch.clone()),
            pr_url: None,
        }
    }
}

/// Publishes an approved proposal: [`push_step`], then `on_pushed` (the caller records
/// `pushed`), then, with a GitHub target, [`open_pull_request_step`] against the target's base
/// or the remote's default branch. Safe to call again after a crash or a failure at any point:
/// each step reconciles with the remote first. The caller must have checked the approval and
/// that the proposal still hashes to what it approved.
pub async fn publish_proposal(
    request: PublishRequest<'_>,
    journal: &mut dyn Journal,
    redactor: &Redactor,
    on_pushed: &mut (dyn FnMut(&Publication) -> Result<(), String> + Send),
) -> Result<Published, PublishFailure> {
    let branch = match request.onto {
        Some(onto) => onto.branch.clone(),
        None => branch_for(request.task_id),
    };
    let before_push = |error: PublishError| PublishFailure {
        pushed: false,
        branch: branch.clone(),
        error,
    };
    let after_push = |error: PublishError| PublishFailure {
        pushed: true,
        branch: branch.clone(),
        error,
    };
    let push = PushInput {
        git: request.git.clone(),
        mirror: request.mirror.to_path_buf(),
        remote: request.remote.to_string(),
        commit: request.proposal.commit.clone(),
        branch: branch.clone(),
        onto: request.onto.map(|onto| onto.parent.clone()),
    };
    let pushed = push_step(&push, journal, redactor)
        .await
        .map_err(before_push)?;
    let mut publication = Publication {
        status: PublicationStatus::Pushed,
        branch: Some(branch.clone()),
        pr_url: None,
    };
    on_pushed(&publication).map_err(|e| after_push(PublishError::Internal(e)))?;
    let Some(target) = request.target else {
        return Ok(Published {
            publication,
            push: pushed,
            pull: None,
        });
    };
    let client = client_for(request.settings).map_err(after_push)?;
    let base = match &target.base {
        Some(base) => base.clone(),
        None => {
            let (git, mirror, remote) = (
                request.git.clone(),
                request.mirror.to_path_buf(),
                request.remote.to_string(),
            );
            tokio::task::spawn_blocking(move || remote_default_branch(&git, &mirror, &remote))
                .await
                .map_err(|e| after_push(PublishError::Internal(e.to_string())))?
                .map_err(|e| after_push(PublishError::Push(e.into())))?
                .ok_or_else(|| {
                    after_push(PublishError::Config(format!(
                        "cannot tell the remote's default branch (its HEAD); set base in the \
                         [[publish]] entry for {}",
                        request.proposal.repo
                    )))
                })?
        }
    };
    let input = PullRequestInput {
        repo: target.repo.clone(),
        branch: branch.clone(),
        base,
        commit: request.proposal.commit.clone(),
        title: pull_request_title(request.proposal, redactor),
        body: pull_request_body(request.task_id, request.proposal, request.review, redactor),
        draft: request.settings.draft,
    };
    let opened = open_pull_request_step(&client, &input, journal, redactor)
        .await
        .map_err(after_push)?;
    publication.status = PublicationStatus::PrOpened;
    publication.pr_url = Some(opened.pull.html_url.clone());
    Ok(Published {
        publication,
        push: pushed,
        pull: Some(opened),
    })
}

/// Where a repository's proposals are pushed: a URL source itself, or a local repository's
/// `origin` when git may push there. The one check behind both refusing `--publish` at
/// submission (`warden run --publish`, `POST /v1/tasks` with `publish`) and publishing after
/// an approval. `Err` is one sentence saying what to configure.
pub fn publish_remote(git: &Git, source: &warden_repo::Source) -> Result<String, String> {
    let path = match source {
        warden_repo::Source::Url(url) => return Ok(url.clone()),
        warden_repo::Source::Path(path) => path,
    };
    let shown = path.display();
    let Some(remote) = origin_of(git, path) else {
        return Err(format!(
            "cannot publish: {shown} has no `origin` remote to push the branch to; add one with \
             `git -C {shown} remote add origin URL` (https or ssh), or run the task without \
             publishing"
        ));
    };
    warden_repo::spec::check_push_target(&remote, path).map_err(|why| {
        format!(
            "cannot publish: the `origin` remote of {shown} ({}) is not one Warden can push to \
             ({why}); set an https or ssh URL with `git -C {shown} remote set-url origin URL`, \
             or run the task without publishing",
            warden_repo::redact_credentials(&remote)
        )
    })?;
    Ok(remote)
}

/// The remote a local repository publishes to: its `origin` URL (a relative path resolved
/// against the repository). `None` without an `origin`.
pub fn origin_of(git: &Git, repository: &Path) -> Option<String> {
    let url = git
        .run(repository, &["config", "--get", "remote.origin.url"])
        .ok()?
        .text();
    if url.is_empty() {
        return None;
    }
    let looks_like_url = url.contains("://") || url.contains(':');
    Some(if !looks_like_url && Path::new(&url).is_relative() {
        repository.join(url).display().to_string()
    } else {
        url
    })
}

/// Checks that the proposal is still exactly what `hash` approved: the commit under the task's
/// proposal ref in the mirror is `proposal.commit`, and its parent, tree and the validation
/// records hash to `hash`. `Err` carries what the mirror holds now (a hash, or `missing`).
pub fn verify_proposal(
    git: &Git,
    mirror: &Path,
    task_id: &str,
    proposal: &Proposal,
    hash: &str,
) -> Result<(), String> {
    let git_dir = format!("--git-dir={}", mirror.display());
    let run = |rev: String| {
        git.run(
            mirror,
            &[
                &git_dir,
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &rev,
            ],
        )
        .ok()
        .map(|o| o.text())
    };
    let current = || -> Option<(String, String)> {
        let at_ref = run(warden_repo::proposal::proposal_ref(task_id))?;
        let tree = run(format!("{at_ref}^{{tree}}"))?;
        let parent = run(format!("{at_ref}^"))?;
        let validations = serde_json::to_value(&proposal.validations).ok()?;
        let recomputed =
            warden_repo::proposal::proposal_hash(&parent, &tree, &at_ref, &validations);
        Some((at_ref, recomputed))
    };
    match current() {
        Some((at_ref, recomputed)) if recomputed == hash && at_ref == proposal.commit => Ok(()),
        Some((_, recomputed)) => Err(recomputed),
        None => Err("missing".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::load;

    /// Runs in a child copy of this test binary (so the variable is set for it alone): a
    /// `failpoints` build exits at the named point, any other build ignores the variable.
    #[test]
    fn a_crash_point_stops_the_process_only_in_a_failpoints_build() {
        const CHILD: &str = "WARDEN_FAILPOINT_TEST_CHILD";
        if std::env::var_os(CHILD).is_some() {
            crash_point("test_point");
            return;
        }
        #[allow(clippy::disallowed_methods)]
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "publish::tests::a_crash_point_stops_the_process_only_in_a_failpoints_build",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env(FAILPOINT_ENV, "test_point")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        if FAILPOINTS {
            assert_eq!(output.status.code(), Some(FAILPOINT_EXIT), "{stdout}");
        } else {
            assert!(output.status.success(), "{stdout}");
            assert!(stdout.contains("1 passed"), "{stdout}");
        }
    }

    #[test]
    fn targets_come_from_the_flag_then_publish_entries_then_the_remote_url() {
        let config = load(
            "[[publish]]\nrepo = \"app\"\ngithub = \"acme/app\"\nbase = \"develop\"\n",
            &[],
        )
        .unwrap();
        let settings = &config.service.github;
        assert_eq!(settings.api_url, "https://api.github.com");
        assert!(settings.token.is_none());
        let target = |repo: &str, remote: &str, explicit: Option<&str>| {
            let explicit = explicit.and_then(GithubRepo::parse);
            resolve_target(settings, repo, remote, explicit.as_ref())
                .map(|t| (t.repo.to_string(), t.base))
        };
        assert_eq!(
            target("app", "git@github.com:other/app.git", None),
            Some(("acme/app".into(), Some("develop".into())))
        );
        assert_eq!(
            target("app", "/srv/app.git", Some("me/fork")),
            Some(("me/fork".into(), Some("develop".into())))
        );
        assert_eq!(
            target("lib", "https://github.com/acme/lib.git", None),
            Some(("acme/lib".into(), None))
        );
        assert_eq!(target("lib", "/srv/lib.git", None), None);
        assert_eq!(target("lib", "https://gitlab.com/acme/lib.git", None), None);

        // GitHub Enterprise: remotes on the API's host are recognised.
        let enterprise = load(
            "[github]\napi_url = \"https://ghe.example.com/api/v3\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            resolve_target(
                &enterprise.service.github,
                "lib",
                "https://ghe.example.com/acme/lib.git",
                None
            )
            .map(|t| t.repo.to_string()),
            Some("acme/lib".into())
        );
    }

    #[test]
    fn the_pull_request_body_has_the_facts_and_no_secret() {
        let proposal = Proposal {
            id: "prp_1".into(),
            repo: "app".into(),
            base_commit: "a".repeat(40),
            commit: "b".repeat(40),
            tree: "c".repeat(40),
            reference: "refs/warden/proposals/tsk_1".into(),
            diff_stat: warden_protocol::DiffStat {
                files_changed: 1,
                additions: 2,
                deletions: 1,
            },
            files: vec![warden_protocol::ChangedFile {
                path: "src/`odd`.rs".into(),
                status: "modified".into(),
                additions: Some(2),
                deletions: Some(1),
            }],
            summary: "Fix the parser\n\nIt used sk-live-secret-value-1234 by mistake.".into(),
            hash: format!("sha256:{}", "d".repeat(64)),
            validations: vec![warden_protocol::Validation {
                command: "cargo test | tee log".into(),
                exit_code: Some(0),
                tree: "c".repeat(40),
                config_hash: "sha256:x".into(),
                sandbox: "linux".into(),
                duration_ms: 5,
                output_tail: "output sk-live-secret-value-1234".into(),
                reused: false,
            }],
            sensitive_files: vec![],
        };
        let redactor = Redactor::new(["sk-live-secret-value-1234".to_string()]);
        let body = pull_request_body("tsk_1", &proposal, None, &redactor);
        assert!(body.contains("`tsk_1`"), "{body}");
        assert!(body.contains("Fix the parser"), "{body}");
        assert!(body.contains("| `cargo test \\| tee log` | 0 |"), "{body}");
        assert!(body.contains("`src/'odd'.rs` (modified)"), "{body}");
        assert!(!body.contains("sk-live-secret-value-1234"), "{body}");
        assert!(!body.contains("output"), "{body}");
        assert_eq!(pull_request_title(&proposal, &redactor), "Fix the parser");
        assert!(!body.contains("## Review"), "no review ran: {body}");

        // With a review: its verdict and findings, inert, the secret still redacted.
        let review = warden_protocol::Review {
            verdict: "reported".into(),
            explanation: "One test went missing.".into(),
            findings: vec![warden_protocol::ReviewFinding {
                title: "Restore the `deleted` test".into(),
                body: "It used sk-live-secret-value-1234.\nPut it back.".into(),
                priority: 1,
                confidence: 0.9,
                location: warden_protocol::FindingLocation {
                    repo: "app".into(),
                    commit: "c".repeat(40),
                    path: "tests/a.rs".into(),
                    start_line: 3,
                    end_line: 3,
                },
            }],
            rounds: 1,
            model: "openai:gpt".into(),
            usage: warden_protocol::Usage::default(),
        };
        let body = pull_request_body("tsk_1", &proposal, Some(&review), &redactor);
        assert!(
            body.contains(
                "## Review\n\n**reported** after 1 round(s) by `openai:gpt`, 1 finding(s)."
            ),
            "{body}"
        );
        assert!(
            body.contains("- **P1** Restore the 'deleted' test — `tests/a.rs:3` (confidence 0.90): It used [redacted]. Put it back.\n"),
            "{body}"
        );
        assert!(!body.contains("sk-live-secret-value-1234"), "{body}");
    }
}
