//! Publication of an approved proposal, as two side effects done at most once each: push the
//! proposal commit to `warden/<task-id>` on the repository's remote, then open a pull request
//! for that branch on GitHub. Each step journals its intent before it starts and reconciles by
//! asking the remote first (`ls-remote` for the branch, pulls-by-head for the pull request),
//! never from a local record, so running the steps again after a crash at any point completes
//! the publication with exactly one branch and one pull request. The caller (the CLI's
//! `warden approve`, or a `warden serve` worker through [`publish_approved`]) verifies the
//! approval and records the publication status.
//!
//! On the server the task queue is the durable trigger: deciding a publish approval moves its
//! task from `waiting_approval` back to `queued` ([`requeue_decided`], re-done by workers with
//! [`requeue_decided_tasks`] after a crash in between), and the worker that claims it publishes
//! ([`approved_publication`]) or ends it with the rejection ([`rejected_publication`]) instead
//! of running the agent. A crash during publication interrupts that run; the next run resumes
//! it, each step reconciled with the remote.
//!
//! Crash tests stop the process at named points with `WARDEN_FAILPOINT`:
//! `publish_after_push` (pushed, nothing recorded) and `publish_after_pr` (opened, nothing
//! recorded). Only a build with the `failpoints` feature has them, and only test builds enable
//! it (a dev-dependency of warden-cli): in any other build [`crash_point`] is empty and the
//! variable is never read.

use std::path::{Path, PathBuf};

use serde_json::json;
use warden_protocol::{Proposal, Publication, PublicationStatus};
use warden_repo::proposal::{push_proposal, ApplyError, PushOutcome};
use warden_repo::{Git, RepoError};
use warden_runtime::{Journal, JournalError, RecordKind};

use crate::config::GithubSettings;
use crate::github::{
    repo_from_remote_url, web_host_of_api, GithubClient, GithubClientConfig, GithubError,
    GithubRepo, NewPullRequest, PullRequest,
};
use crate::outage::StoreCalls;
use crate::redact::Redactor;

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
    /// From [`resolve_target`]; `None`: publication ends at the push.
    pub target: Option<&'a GithubTarget>,
    pub settings: &'a GithubSettings,
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
    pub error: PublishError,
}

impl PublishFailure {
    /// The publication to record: `failed`, with the branch.
    pub fn publication(&self, task_id: &str) -> Publication {
        Publication {
            status: PublicationStatus::Failed,
            branch: Some(branch_for(task_id)),
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
    let branch = branch_for(request.task_id);
    let before_push = |error: PublishError| PublishFailure {
        pushed: false,
        error,
    };
    let after_push = |error: PublishError| PublishFailure {
        pushed: true,
        error,
    };
    let push = PushInput {
        git: request.git.clone(),
        mirror: request.mirror.to_path_buf(),
        remote: request.remote.to_string(),
        commit: request.proposal.commit.clone(),
        branch: branch.clone(),
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
        branch,
        base,
        commit: request.proposal.commit.clone(),
        title: pull_request_title(request.proposal, redactor),
        body: pull_request_body(request.task_id, request.proposal, redactor),
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

/// What the server's publication of an approved proposal needs: a store (a run's, which
/// retries through outages, or the store itself), the mirrors, the GitHub settings.
pub struct ServerPublish<'a, C: ?Sized = dyn warden_store::Store> {
    pub store: &'a C,
    pub repos: &'a warden_repo::RepoStore,
    pub settings: &'a GithubSettings,
    pub redactor: &'a Redactor,
}

impl<C: ?Sized> Clone for ServerPublish<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: ?Sized> Copy for ServerPublish<'_, C> {}

/// Why [`publish_approved`] did not publish.
#[derive(Debug, thiserror::Error)]
pub enum ApprovedPublishError {
    /// The approval, its task, its proposal or its repository is not what publication needs
    /// (unknown, not approved, not a publish approval, another hash, a changed proposal).
    /// Retrying cannot help.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] warden_store::StoreError),
    /// Publication started and stopped (see [`PublishFailure::pushed`]); calling again resumes.
    #[error("{}", .0.error)]
    Publish(PublishFailure),
}

/// Publishes the proposal a `publish` approval approved, for a server change task: checks that
/// the approval is approved (or consumed: resuming after a crash) and bound to the task's
/// proposal hash, that the proposal in the mirror still hashes to it, consumes the approval
/// (an approval authorises one publication), then runs [`publish_proposal`] against the
/// registered repository's remote (a URL, or a local repository's `origin`). Returns the task's
/// change result with the publication filled in; recording it (and the task's status) is the
/// caller's. Safe to call again after a crash at any point.
pub async fn publish_approved<C: StoreCalls + ?Sized>(
    context: ServerPublish<'_, C>,
    approval_id: &str,
    journal: &mut dyn Journal,
) -> Result<warden_protocol::ChangeResult, ApprovedPublishError> {
    use warden_store::ApprovalStatus;
    let refused = |message: String| ApprovedPublishError::Refused(message);
    let approval = context
        .store
        .call("reading the approval", |store| {
            store.get_approval(approval_id)
        })
        .await?
        .ok_or_else(|| refused(format!("no approval {approval_id}")))?;
    if !matches!(approval.kind.as_str(), "publish" | "publish_sensitive") {
        return Err(refused(format!(
            "approval {approval_id} is a {} approval, not a publication",
            approval.kind
        )));
    }
    if !matches!(
        approval.status,
        ApprovalStatus::Approved | ApprovalStatus::Consumed
    ) {
        return Err(refused(format!(
            "approval {approval_id} is {}, not approved",
            approval.status.as_str()
        )));
    }
    let task = context
        .store
        .call("reading the task", |store| store.get_task(&approval.task))
        .await?
        .ok_or_else(|| refused(format!("no task {}", approval.task)))?;
    let mut result: warden_protocol::ChangeResult = task
        .result
        .clone()
        .and_then(|value| serde_json::from_value(value).ok())
        .ok_or_else(|| refused(format!("task {} has no change result", task.id)))?;
    let proposal = match &result.outcome {
        warden_protocol::ChangeOutcome::Proposal { proposal, .. } => proposal.as_ref().clone(),
        _ => return Err(refused(format!("task {} has no proposal", task.id))),
    };
    if proposal.hash != approval.subject_hash {
        return Err(refused(format!(
            "approval {approval_id} is bound to another hash than task {}'s proposal",
            task.id
        )));
    }
    // The repository as the task's runs pinned it: registered, or an in-process task's own
    // source; its mirror holds the proposal.
    let task_repo = crate::worker::proposal_repo(&task, &proposal);
    let spec = crate::worker::repo_specs(context.store, std::slice::from_ref(&task_repo))
        .await
        .map_err(|failure| refused(failure.message))?
        .pop()
        .ok_or_else(|| refused(format!("repository {}", proposal.repo)))?;
    let registered_branch = match &task_repo.source {
        Some(_) => None,
        None => context
            .store
            .call("reading the repository", |store| {
                store.get_repo(&proposal.repo)
            })
            .await?
            .and_then(|repository| repository.branch),
    };
    let mirror = context.repos.mirror_path(&spec);
    let git = context.repos.git().clone();
    let remote = publish_remote(&git, &spec.source).map_err(refused)?;
    let (check_git, check_mirror, check_proposal, task_text, hash) = (
        git.clone(),
        mirror.clone(),
        proposal.clone(),
        task.id.as_str().to_string(),
        approval.subject_hash.clone(),
    );
    tokio::task::spawn_blocking(move || {
        verify_proposal(
            &check_git,
            &check_mirror,
            &task_text,
            &check_proposal,
            &hash,
        )
    })
    .await
    .map_err(|e| refused(format!("verification task: {e}")))?
    .map_err(|now| {
        refused(format!(
            "the proposal changed since approval {approval_id} was given (now {now}); nothing \
             was published"
        ))
    })?;
    // The run's journal starts with the decision it acts on (who approved which hash, when).
    journal
        .append(
            warden_runtime::Clock::now_ms(&warden_runtime::SystemClock),
            warden_runtime::RecordKind::ApprovalDecided,
            serde_json::json!({
                "approval": approval.id,
                "decision": "approve",
                "hash": approval.subject_hash,
                "by": approval.decided_by,
                "decided_at": approval.decided_at_ms.map(crate::time::rfc3339),
            }),
        )
        .await
        .map_err(|error| refused(format!("cannot journal the decision: {error}")))?;
    if approval.status == ApprovalStatus::Approved {
        context
            .store
            .call("consuming the approval", |store| {
                store.consume_approval(approval_id, &approval.subject_hash)
            })
            .await?;
    }
    let mut target = resolve_target(context.settings, &proposal.repo, &remote, None);
    if let Some(target) = target.as_mut() {
        if target.base.is_none() {
            target.base = registered_branch.clone();
        }
    }
    let request = PublishRequest {
        git: &git,
        mirror: &mirror,
        remote: &remote,
        task_id: task.id.as_str(),
        proposal: &proposal,
        target: target.as_ref(),
        settings: context.settings,
    };
    let published = publish_proposal(request, journal, context.redactor, &mut |_| Ok(()))
        .await
        .map_err(ApprovedPublishError::Publish)?;
    if let warden_protocol::ChangeOutcome::Proposal { publication, .. } = &mut result.outcome {
        *publication = published.publication.clone();
    }
    if target.is_none() {
        result.notices.push(format!(
            "no GitHub repository for {} (its remote is not on {}): the branch is pushed and no \
             pull request was opened; name one with [[publish]] in warden.toml (or `warden \
             approve --github OWNER/NAME`)",
            proposal.repo,
            web_host_of_api(&context.settings.api_url).unwrap_or_else(|| "GitHub".into())
        ));
    }
    // What an interrupted publication had done already is said, not done again.
    if published.push == warden_repo::proposal::PushOutcome::AlreadyThere {
        result.notices.push(format!(
            "the branch {} was already on the remote (it was already there from an interrupted \
             publication); it was not pushed again",
            branch_for(task.id.as_str())
        ));
    }
    if published
        .pull
        .as_ref()
        .is_some_and(|pull| pull.already_there)
    {
        result.notices.push(
            "the pull request was already open (it was already there from an interrupted \
             publication); no second one was opened"
                .into(),
        );
    }
    if let Some(recorded) = result.approval.as_mut() {
        if recorded.id == approval.id {
            recorded.status = warden_protocol::ApprovalStatus::Approved;
            recorded.decided_by = approval.decided_by.clone();
            recorded.decided_at = approval.decided_at_ms.map(crate::time::rfc3339);
        }
    }
    Ok(result)
}

/// A change task's result and the stored publish approval it records (the one its proposal
/// waits for, or was published under). `None`: no proposal, no approval, or one that is not a
/// publish approval of this task.
async fn recorded_publication<C: StoreCalls + ?Sized>(
    store: &C,
    task: &warden_store::Task,
) -> Result<Option<(warden_protocol::ChangeResult, warden_store::Approval)>, warden_store::StoreError>
{
    let Some(result) = task
        .result
        .clone()
        .and_then(|value| serde_json::from_value::<warden_protocol::ChangeResult>(value).ok())
    else {
        return Ok(None);
    };
    if !matches!(
        result.outcome,
        warden_protocol::ChangeOutcome::Proposal { .. }
    ) {
        return Ok(None);
    }
    let Some(id) = result.approval.as_ref().map(|a| a.id.clone()) else {
        return Ok(None);
    };
    let approval = store
        .call("reading the publish approval", |store| {
            store.get_approval(&id)
        })
        .await?
        .filter(|a| {
            a.task == task.id && matches!(a.kind.as_str(), "publish" | "publish_sensitive")
        });
    Ok(approval.map(|approval| (result, approval)))
}

fn publication_status(result: &warden_protocol::ChangeResult) -> Option<PublicationStatus> {
    match &result.outcome {
        warden_protocol::ChangeOutcome::Proposal { publication, .. } => Some(publication.status),
        _ => None,
    }
}

/// The approval a claimed change task should be published under instead of running the agent
/// again: its result is a proposal whose publication is not finished (`awaiting_approval`,
/// `pushed` or `failed`) and its publish approval is approved (or consumed: a publication
/// interrupted earlier). For the worker that claims a task an approval re-queued.
pub async fn approved_publication<C: StoreCalls + ?Sized>(
    store: &C,
    task: &warden_store::Task,
) -> Result<Option<warden_store::Approval>, warden_store::StoreError> {
    let Some((result, approval)) = recorded_publication(store, task).await? else {
        return Ok(None);
    };
    let unfinished = matches!(
        publication_status(&result),
        Some(
            PublicationStatus::AwaitingApproval
                | PublicationStatus::Pushed
                | PublicationStatus::Failed
        )
    );
    let approved = matches!(
        approval.status,
        warden_store::ApprovalStatus::Approved | warden_store::ApprovalStatus::Consumed
    );
    Ok((unfinished && approved).then_some(approval))
}

/// The final result of a claimed change task whose publish approval was rejected while it
/// waited: the proposal stays (in the result and in the mirror, for `warden apply`), its
/// publication is `not_requested` (nothing was pushed; SPEC §5 has no `rejected` publication)
/// and its approval shows the rejection. The task then ends `completed`, as `warden reject`
/// ends a local one. `None` when the task is not a rejected publication.
pub async fn rejected_publication<C: StoreCalls + ?Sized>(
    store: &C,
    task: &warden_store::Task,
) -> Result<Option<warden_protocol::ChangeResult>, warden_store::StoreError> {
    let Some((mut result, approval)) = recorded_publication(store, task).await? else {
        return Ok(None);
    };
    if publication_status(&result) != Some(PublicationStatus::AwaitingApproval)
        || approval.status != warden_store::ApprovalStatus::Rejected
    {
        return Ok(None);
    }
    if let warden_protocol::ChangeOutcome::Proposal { publication, .. } = &mut result.outcome {
        *publication = Publication {
            status: PublicationStatus::NotRequested,
            branch: None,
            pr_url: None,
        };
    }
    if let Some(recorded) = result.approval.as_mut() {
        recorded.status = warden_protocol::ApprovalStatus::Rejected;
        recorded.decided_by = approval.decided_by.clone();
        recorded.decided_at = approval.decided_at_ms.map(crate::time::rfc3339);
    }
    Ok(Some(result))
}

/// Queues a task that waits for a publish approval once that approval is decided (approved or
/// rejected): its next run publishes the proposal, or ends the task with the rejection, without
/// running the agent. The queue is the durable trigger: a decision recorded by a process that
/// died before queueing is found again by [`requeue_decided_tasks`]. `Ok(true)` when this call
/// queued it; a task in any other status (still running, cancelled, queued by someone else) is
/// left alone.
/// Whether the result records a publication that failed.
pub fn publication_failed(result: &warden_protocol::ChangeResult) -> bool {
    matches!(
        &result.outcome,
        warden_protocol::ChangeOutcome::Proposal { publication, .. }
            if publication.status == warden_protocol::PublicationStatus::Failed
    )
}

/// Queues a task waiting on a publication whose approval was approved or consumed and whose
/// publication failed (a refused token, a remote that was down), so its next run resumes the
/// publication. `false` when the task is not such a task.
pub async fn requeue_failed_publication(
    store: &dyn warden_store::Store,
    task: &warden_protocol::TaskId,
) -> Result<bool, warden_store::StoreError> {
    use warden_protocol::TaskStatus;
    let Some(current) = store.get_task(task).await? else {
        return Ok(false);
    };
    if current.status != TaskStatus::WaitingApproval {
        return Ok(false);
    }
    let Some((result, approval)) = recorded_publication(store, &current).await? else {
        return Ok(false);
    };
    let approved = matches!(
        approval.status,
        warden_store::ApprovalStatus::Approved | warden_store::ApprovalStatus::Consumed
    );
    if !approved || !publication_failed(&result) {
        return Ok(false);
    }
    match store
        .transition(task, TaskStatus::WaitingApproval, TaskStatus::Queued, None)
        .await
    {
        Ok(_) => Ok(true),
        Err(warden_store::StoreError::StatusConflict { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

pub async fn requeue_decided(
    store: &dyn warden_store::Store,
    task: &warden_protocol::TaskId,
) -> Result<bool, warden_store::StoreError> {
    use warden_protocol::TaskStatus;
    let Some(current) = store.get_task(task).await? else {
        return Ok(false);
    };
    if current.status != TaskStatus::WaitingApproval {
        return Ok(false);
    }
    let Some((result, approval)) = recorded_publication(store, &current).await? else {
        return Ok(false);
    };
    if approval.status == warden_store::ApprovalStatus::Pending || publication_failed(&result) {
        // Undecided, or a failed publication waiting for its cause to be fixed (approving
        // again resumes it: `TaskService::decide`).
        return Ok(false);
    }
    match store
        .transition(task, TaskStatus::WaitingApproval, TaskStatus::Queued, None)
        .await
    {
        Ok(_) => Ok(true),
        Err(warden_store::StoreError::StatusConflict { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// How many `waiting_approval` tasks one page of [`requeue_decided_tasks`] reads.
const WAITING_PAGE: u32 = 200;

/// [`requeue_decided`] for every task waiting for an approval: recovery from a crash between
/// recording a decision and queueing its task, and for a decision made while the run that asked
/// for it was still finishing. Workers call it periodically. Returns the tasks it queued.
pub async fn requeue_decided_tasks(
    store: &dyn warden_store::Store,
) -> Result<Vec<warden_protocol::TaskId>, warden_store::StoreError> {
    let mut queued = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_tasks(warden_store::TaskQuery {
                owner: None,
                status: Some(warden_protocol::TaskStatus::WaitingApproval),
                before: before.take(),
                limit: WAITING_PAGE,
            })
            .await?;
        for task in &page {
            if requeue_decided(store, &task.id).await? {
                queued.push(task.id.clone());
            }
        }
        match page.last() {
            Some(last) if page.len() == WAITING_PAGE as usize => before = Some(last.id.clone()),
            _ => return Ok(queued),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Env};
    use std::collections::HashMap;

    struct MapEnv(HashMap<&'static str, String>);

    impl Env for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
    }

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

    fn load(toml: &str, env: &[(&'static str, &str)]) -> anyhow::Result<Config> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("warden.toml");
        std::fs::write(&path, toml)?;
        let mut vars: HashMap<&'static str, String> =
            env.iter().map(|(k, v)| (*k, v.to_string())).collect();
        vars.insert("WARDEN_HOME", dir.path().display().to_string());
        Config::load(Some(&path), &MapEnv(vars))
    }

    #[test]
    fn targets_come_from_the_flag_then_publish_entries_then_the_remote_url() {
        let config = load(
            "[[publish]]\nrepo = \"app\"\ngithub = \"acme/app\"\nbase = \"develop\"\n",
            &[],
        )
        .unwrap();
        let settings = &config.github;
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
                &enterprise.github,
                "lib",
                "https://ghe.example.com/acme/lib.git",
                None
            )
            .map(|t| t.repo.to_string()),
            Some("acme/lib".into())
        );
    }

    #[test]
    fn the_token_comes_from_the_environment_only_and_is_redacted() {
        let config = load(
            "",
            &[
                ("GITHUB_TOKEN", "ghp_from_github_token_123"),
                ("WARDEN_GITHUB_API_URL", "http://127.0.0.1:9"),
            ],
        )
        .unwrap();
        assert_eq!(
            config.github.token.as_ref().map(|t| t.expose()),
            Some("ghp_from_github_token_123")
        );
        assert_eq!(config.github.api_url, "http://127.0.0.1:9");
        assert!(!format!("{config:?}").contains("ghp_from_github_token_123"));
        assert_eq!(
            config
                .redactor()
                .text("token ghp_from_github_token_123 here"),
            "token [redacted] here"
        );
        let preferred = load(
            "",
            &[
                ("GITHUB_TOKEN", "ghp_from_github_token_123"),
                ("WARDEN_GITHUB_TOKEN", "ghp_from_warden_token_456"),
            ],
        )
        .unwrap();
        assert_eq!(
            preferred.github.token.as_ref().map(|t| t.expose()),
            Some("ghp_from_warden_token_456")
        );
        // Never from the file.
        assert!(load("[github]\ntoken = \"ghp_in_file_123456\"\n", &[]).is_err());
        for bad in [
            "[github]\napi_url = \"ftp://x\"\n",
            "[github]\napi_url = \"https://u:p@api.github.com\"\n",
            "[[publish]]\nrepo = \"a\"\ngithub = \"not-a-pair\"\n",
            "[[publish]]\nrepo = \"a\"\ngithub = \"o/a\"\nbase = \"-x\"\n",
            "[[publish]]\nrepo = \"a\"\ngithub = \"o/a\"\n[[publish]]\nrepo = \"a\"\ngithub = \"o/b\"\n",
        ] {
            assert!(load(bad, &[]).is_err(), "{bad}");
        }
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
            }],
            sensitive_files: vec![],
        };
        let redactor = Redactor::new(["sk-live-secret-value-1234".to_string()]);
        let body = pull_request_body("tsk_1", &proposal, &redactor);
        assert!(body.contains("`tsk_1`"), "{body}");
        assert!(body.contains("Fix the parser"), "{body}");
        assert!(body.contains("| `cargo test \\| tee log` | 0 |"), "{body}");
        assert!(body.contains("`src/'odd'.rs` (modified)"), "{body}");
        assert!(!body.contains("sk-live-secret-value-1234"), "{body}");
        assert!(!body.contains("output"), "{body}");
        assert_eq!(pull_request_title(&proposal, &redactor), "Fix the parser");
    }
}
