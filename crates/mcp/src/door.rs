//! The front door the tools call, in the two shapes Warden has: the in-process one of
//! `warden mcp` (`warden_service::local`: repositories named by path or URL, or offered by
//! name with `--repo`; a worker in this process runs the task; the principal is `local`), and
//! `warden serve`'s `TaskService` (registered repository names; the server's workers run the
//! task; the principal is the bearer token's). Every rule is the service's: this module only
//! turns a tool's arguments into one call of either and its refusal into a sentence.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use warden_protocol::views::TaskView as Task;
use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};
use warden_repo::RepoSpec;
use warden_service::local::{Local, LocalError};
use warden_service::tasks::{Principal, ServiceError, Submission, TaskService};

use crate::Refusal;

/// How often a served tool call looks for its task's new events and status.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Where the tools' tasks go.
pub enum Door {
    /// `warden mcp`: in-process tasks, and the repositories offered with `--repo`.
    InProcess {
        local: Arc<Local>,
        offered: Vec<RepoSpec>,
    },
    /// `/mcp` on `warden serve`: the server's front door over its registered repositories.
    Served { tasks: Box<TaskService> },
}

/// A task to submit, as a tool received it.
pub(crate) struct Request {
    pub kind: TaskKind,
    pub prompt: String,
    /// Names (`name[@rev]`), or in-process absolute paths and URLs too.
    pub repos: Vec<String>,
    pub follow_up_to: Option<TaskId>,
    pub checks: Option<Vec<String>>,
}

impl From<LocalError> for Refusal {
    fn from(error: LocalError) -> Refusal {
        match error {
            LocalError::Usage(message) => Refusal(message),
            LocalError::Failed(error) => Refusal(format!("warden failed: {error:#}")),
        }
    }
}

/// A refusal of the server's front door: its sentence, except for Warden's own failures,
/// which are logged and reported without details (as the HTTP API does).
impl From<ServiceError> for Refusal {
    fn from(error: ServiceError) -> Refusal {
        match error {
            ServiceError::Store(_) | ServiceError::Internal(_) => {
                tracing::error!(%error, "an MCP tool call failed");
                Refusal("warden failed; see the server log".into())
            }
            refusal => Refusal(refusal.to_string()),
        }
    }
}

impl Door {
    fn tasks(&self) -> &TaskService {
        match self {
            Door::InProcess { local, .. } => &local.tasks,
            Door::Served { tasks } => tasks,
        }
    }

    pub(crate) async fn submit(
        &self,
        principal: &Principal,
        request: Request,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Task, Refusal> {
        match self {
            Door::InProcess { local, offered } => {
                let repos = resolve_offered(offered, &request.repos)?;
                local.services().await?;
                Ok(local
                    .submit(
                        warden_service::local::Submission {
                            kind: request.kind,
                            prompt: request.prompt,
                            repos,
                            follow_up_to: request.follow_up_to,
                            checks: request.checks,
                            baseline: false,
                            publish: false,
                            maintain: None,
                        },
                        progress,
                    )
                    .await?)
            }
            Door::Served { tasks } => {
                let submission = Submission {
                    follow_up_to: request.follow_up_to.map(|id| id.to_string()),
                    checks: request.checks,
                    ..Submission::new(request.kind, request.prompt, request.repos)
                };
                Ok(tasks.submit(principal, submission, None).await?.task)
            }
        }
    }

    /// Follows task `id` until it no longer waits for a worker, passing on its events after
    /// `after`; in-process, this process's worker runs it meanwhile. When `cancelled`
    /// resolves the task is cancelled (if the principal may) and followed to its end.
    pub(crate) async fn follow(
        &self,
        principal: &Principal,
        id: &TaskId,
        after: u64,
        on_event: &(dyn Fn(Event) + Send + Sync),
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<Task, Refusal> {
        match self {
            Door::InProcess { local, .. } => {
                Ok(local.drive_after(id, after, on_event, cancelled).await?)
            }
            Door::Served { tasks } => {
                follow_served(tasks, principal, id, after, on_event, cancelled).await
            }
        }
    }

    pub(crate) async fn task(&self, principal: &Principal, id: &TaskId) -> Result<Task, Refusal> {
        match self {
            Door::InProcess { local, .. } => Ok(local.task(id).await?),
            Door::Served { tasks } => Ok(tasks.task(principal, id.as_str()).await?),
        }
    }

    /// A change task's proposal and diff: `(proposal JSON, diff, truncated)`.
    pub(crate) async fn diff(
        &self,
        principal: &Principal,
        id: &TaskId,
    ) -> Result<(Value, String, bool), Refusal> {
        match self {
            Door::InProcess { local, .. } => {
                let (proposal, diff, truncated) = local.diff(id).await?;
                let proposal = json!({
                    "repo": proposal.repo,
                    "base_commit": proposal.base_commit,
                    "commit": proposal.commit,
                    "hash": proposal.hash,
                    "sensitive_files": proposal.sensitive_files,
                });
                Ok((proposal, diff, truncated))
            }
            Door::Served { tasks } => {
                let diff = tasks.proposal_diff(principal, id.as_str()).await?;
                let proposal = json!({
                    "repo": diff.repo,
                    "base_commit": diff.base_commit,
                    "commit": diff.commit,
                    "hash": diff.hash,
                    "sensitive_files": diff.sensitive_files,
                });
                Ok((proposal, diff.diff, diff.truncated))
            }
        }
    }

    /// Answers a task waiting for input, or follows a finished one up; the task to follow.
    pub(crate) async fn answer(
        &self,
        principal: &Principal,
        id: &TaskId,
        text: &str,
    ) -> Result<Task, Refusal> {
        match self {
            Door::InProcess { local, .. } => {
                local.services().await?;
                Ok(local.answer(id, text).await?)
            }
            Door::Served { tasks } => Ok(tasks.post_message(principal, id.as_str(), text).await?),
        }
    }

    pub(crate) async fn cancel(&self, principal: &Principal, id: &TaskId) -> Result<Task, Refusal> {
        match self {
            Door::InProcess { local, .. } => Ok(local.cancel(id).await?),
            Door::Served { tasks } => Ok(tasks.cancel(principal, id.as_str()).await?),
        }
    }

    /// The task's latest event sequence number (0 when it has none), once the principal may
    /// see it.
    pub(crate) async fn last_event(
        &self,
        principal: &Principal,
        id: &TaskId,
    ) -> Result<u64, Refusal> {
        let mut after = 0;
        loop {
            let records = self
                .tasks()
                .task_events(principal, id.as_str(), after, 500)
                .await?;
            match records.last() {
                Some((seq, _)) => after = *seq,
                None => return Ok(after),
            }
        }
    }

    /// The repositories offered by name: `(text, structured)`.
    pub(crate) async fn list_repos(
        &self,
        principal: &Principal,
    ) -> Result<(String, Value), Refusal> {
        match self {
            Door::InProcess { offered, .. } => {
                let repos: Vec<Value> = offered
                    .iter()
                    .map(|spec| {
                        json!({
                            "name": spec.name,
                            "source": spec.source.display_redacted(),
                            "rev": spec.rev,
                        })
                    })
                    .collect();
                let text = if offered.is_empty() {
                    "no repository is offered by name (start `warden mcp --repo PATH|URL` to \
                     offer some); ask, run_change and the code tools also take an absolute path \
                     or a git URL"
                        .to_string()
                } else {
                    offered
                        .iter()
                        .map(|spec| match &spec.rev {
                            Some(rev) => {
                                format!("{} — {}@{rev}", spec.name, spec.source.display_redacted())
                            }
                            None => format!("{} — {}", spec.name, spec.source.display_redacted()),
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                Ok((text, json!({ "repos": repos })))
            }
            Door::Served { tasks } => {
                // A registered source may hold credentials: only names and branches are shown.
                let registered = tasks.repos(principal).await?;
                let repos: Vec<Value> = registered
                    .iter()
                    .map(|repo| json!({"name": repo.name, "branch": repo.branch}))
                    .collect();
                let text = if registered.is_empty() {
                    "no repository is registered on this server (an admin registers them: \
                     POST /v1/repos)"
                        .to_string()
                } else {
                    registered
                        .iter()
                        .map(|repo| match &repo.branch {
                            Some(branch) => format!("{} (branch {branch})", repo.name),
                            None => repo.name.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                Ok((text, json!({ "repos": repos })))
            }
        }
    }

    /// Pins repository `entry` (at `rev` when given) and materializes its verified read-only
    /// snapshot.
    pub(crate) async fn read_snapshot(
        &self,
        principal: &Principal,
        entry: &str,
        rev: Option<&str>,
    ) -> Result<warden_service::local::PinnedRepo, Refusal> {
        match self {
            Door::InProcess { local, offered } => {
                let mut spec = resolve_offered(offered, &[entry.to_string()])?
                    .into_iter()
                    .next()
                    .ok_or_else(|| Refusal("name a repository".into()))?;
                if let Some(rev) = rev {
                    if !warden_service::tasks::valid_rev(rev) {
                        return Err(Refusal(format!(
                            "revision {rev:?} is not a branch, tag or commit name"
                        )));
                    }
                    spec.rev = Some(rev.to_string());
                }
                if spec.wants_work_tree() {
                    return Err(Refusal(
                        "the code tools read commits: name a branch, tag or commit, not \
                         @worktree"
                            .into(),
                    ));
                }
                Ok(local.read_snapshot(&spec).await?)
            }
            Door::Served { tasks } => Ok(tasks.read_snapshot(principal, entry.trim(), rev).await?),
        }
    }

    pub(crate) fn is_served(&self) -> bool {
        matches!(self, Door::Served { .. })
    }
}

/// Follows a task the server's workers run, through the store.
async fn follow_served(
    tasks: &TaskService,
    principal: &Principal,
    id: &TaskId,
    mut after: u64,
    on_event: &(dyn Fn(Event) + Send + Sync),
    cancelled: impl std::future::Future<Output = ()>,
) -> Result<Task, Refusal> {
    let mut cancelled = std::pin::pin!(cancelled);
    let mut asked_to_cancel = false;
    loop {
        // The status first: a settled task's last events are stored by then.
        let task = tasks.task(principal, id.as_str()).await?;
        loop {
            let records = tasks
                .task_events(principal, id.as_str(), after, 500)
                .await?;
            let Some((last, _)) = records.last() else {
                break;
            };
            after = *last;
            for (_, event) in records {
                on_event(event);
            }
        }
        if !waits_for_a_worker(task.status) {
            return Ok(task);
        }
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            _ = &mut cancelled, if !asked_to_cancel => {
                asked_to_cancel = true;
                match tasks.cancel(principal, id.as_str()).await {
                    // It ended meanwhile, or this token may not cancel: that outcome stands.
                    Ok(_) | Err(ServiceError::WrongStatus { .. } | ServiceError::Conflict(_)
                        | ServiceError::Forbidden(_)) => {}
                    Err(error) => return Err(error.into()),
                }
            }
        }
    }
}

pub(crate) fn waits_for_a_worker(status: TaskStatus) -> bool {
    matches!(
        status,
        TaskStatus::Queued | TaskStatus::Running | TaskStatus::Testing
    )
}

/// Each entry is the name of a repository offered with `--repo`, else an absolute path or a
/// URL (`PATH|URL[@REV]`, as `warden ask --repo` takes).
fn resolve_offered(offered: &[RepoSpec], entries: &[String]) -> Result<Vec<RepoSpec>, Refusal> {
    entries
        .iter()
        .map(|entry| {
            let entry = entry.trim();
            if let Some(spec) = offered.iter().find(|spec| spec.name == entry) {
                return Ok(spec.clone());
            }
            let is_relative_path = !entry.starts_with('/') && !entry.contains(':');
            if is_relative_path {
                let names: Vec<&str> = offered.iter().map(|spec| spec.name.as_str()).collect();
                return Err(Refusal(format!(
                    "repository {entry:?} is not one this server offers ({}) nor an absolute \
                     path or a URL: call list_repos, or name it by absolute path or URL",
                    if names.is_empty() {
                        "it offers none: start `warden mcp --repo PATH` to offer some".into()
                    } else {
                        format!("it offers {}", names.join(", "))
                    }
                )));
            }
            RepoSpec::parse(entry, std::path::Path::new("/")).map_err(|error| {
                Refusal(format!(
                    "{error}: name a repository by absolute path or git URL, optionally @REV, \
                     or one list_repos names"
                ))
            })
        })
        .collect()
}
