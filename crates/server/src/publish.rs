//! Publication of an approved proposal, as two side effects done at most once each: push the
//! proposal commit to `warden/<task-id>` on the repository's remote, then open a pull request
//! for that branch on GitHub. Each step journals its intent before it starts and reconciles by
//! asking the remote first (`ls-remote` for the branch, pulls-by-head for the pull request),
//! never from a local record, so running the steps again after a crash at any point completes
//! the publication with exactly one branch and one pull request. The caller (the CLI's
//! `warden approve`, later the server's publish intents) verifies the approval and records the
//! publication status between the steps.
//!
//! Crash tests stop the process at named points with `WARDEN_FAILPOINT`:
//! `publish_after_push` (pushed, nothing recorded) and `publish_after_pr` (opened, nothing
//! recorded).

use std::path::{Path, PathBuf};

use serde_json::json;
use warden_protocol::Proposal;
use warden_repo::proposal::{push_proposal, ApplyError, PushOutcome};
use warden_repo::{Git, RepoError};
use warden_runtime::{Journal, JournalError, RecordKind};

use crate::config::GithubSettings;
use crate::github::{
    repo_from_remote_url, web_host_of_api, GithubClient, GithubClientConfig, GithubError,
    GithubRepo, NewPullRequest, PullRequest,
};
use crate::redact::Redactor;

/// The environment variable naming a crash point (tests only; see the module docs).
pub const FAILPOINT_ENV: &str = "WARDEN_FAILPOINT";
/// The exit status of a planned crash.
pub const FAILPOINT_EXIT: i32 = 101;

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
pub fn crash_point(point: &str) {
    if std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == point) {
        std::process::exit(FAILPOINT_EXIT);
    }
}

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
}

/// Step 1: push the proposal commit to its branch, at most once. The intent is journaled
/// first; [`push_proposal`] asks the remote before and after, so a branch already at the commit
/// (an earlier attempt that crashed before recording) counts as done.
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
            }})),
        )
        .await?;
    let owned = input.clone();
    let result = tokio::task::spawn_blocking(move || {
        push_proposal(
            &owned.git,
            &owned.mirror,
            &owned.remote,
            &owned.commit,
            &owned.branch,
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
    let token = settings.token.clone().ok_or_else(|| {
        PublishError::Config(
            "no GitHub token: set WARDEN_GITHUB_TOKEN (or GITHUB_TOKEN) in the environment of \
             the Warden process"
                .into(),
        )
    })?;
    let mut config = GithubClientConfig::new(&settings.api_url, token);
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

/// The pull request body: the task, the summary, the files, and each validation's command and
/// exit code (never its output), registered secrets redacted.
pub fn pull_request_body(task_id: &str, proposal: &Proposal, redactor: &Redactor) -> String {
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
