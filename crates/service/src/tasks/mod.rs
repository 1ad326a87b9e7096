//! The front door to tasks: [`TaskService`], which every interface calls — the HTTP API
//! (`warden-api`), the CLI, and the interfaces to come (web console, GitHub, Slack, MCP). It owns
//! every rule about who may do what to which task, and which input a task accepts:
//!
//! - **Who.** A [`Principal`] (a name and a [`Role`]) comes from the interface, which
//!   authenticates it its own way (an API token, the local user). Tasks belong to their
//!   submitter's name; only an admin sees everyone's; a viewer only reads; only an admin
//!   decides approvals. A task the principal may not see does not exist for them (not found,
//!   never forbidden).
//! - **What.** Submissions ([`Submission`], `submit.rs`), answers, follow-ups, cancels and
//!   retries (`control.rs`), approval decisions (`approvals.rs`) and what is read back (tasks,
//!   approvals, a proposal's diff: `observe.rs`).
//! - **Errors.** One [`ServiceError`] whose variants keep a stable meaning and a message for
//!   people; each interface maps them once (the API to its status codes and error codes).
//!
//! **Invariant:** an interface holds no rule of its own. It turns its input into the service's
//! (parsing its wire format), calls one method, and renders the answer: a check that exists in
//! only one interface is a bug (`tests/suite/tasks_service.rs` asks the service and the HTTP
//! route the same things and expects the same refusals).

mod approvals;
mod control;
mod journal_page;
mod observe;
mod repos;
mod submit;
mod usage;

pub use approvals::{ApprovalList, ApprovalListing, PUBLISH_KINDS};
pub use control::steerable;
pub use control::MAX_MESSAGE_BYTES;
pub use journal_page::{journal_page, JournalPageQuery};
pub use observe::{
    CitedLines, ProposalDiff, TaskList, TaskListing, MAX_CITED, MAX_CITED_LINES, MAX_PAGE,
};
pub use repos::{pin_for_reading, RepoRegistration};
pub use submit::{
    checked_prompt, valid_repo_name, valid_rev, Idempotency, PinnedRepos, Submission, Submitted,
};
pub use usage::{MAX_REPO_LOOKUPS, OTHER_TASKS};

use std::sync::Arc;

use tokio::sync::Notify;
use warden_protocol::views::TaskView;
use warden_protocol::{TaskId, TaskStatus};
use warden_store::{ApprovalStatus, Store, StoreError};

use crate::cancel::RunningTasks;
use crate::config::callback::CallbackConfig;
use crate::task_view::task_view;
use warden_engine::redact::Redactor;

/// What a maintenance task upgrades and how: part of a [`Submission`].
pub use warden_engine::maintain_options::MaintainOptions;
pub use warden_protocol::views::Role;

/// Who acts: the owner name tasks are filed under, and their role. Interfaces authenticate it
/// (the API from a bearer token); the service trusts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
}

impl Principal {
    /// The owner whose tasks (and their events, approvals and spend) this principal sees;
    /// `None` for an admin, who sees everyone's.
    pub fn owner_scope(&self) -> Option<&str> {
        match self.role {
            Role::Admin => None,
            Role::Operator | Role::Viewer => Some(&self.name),
        }
    }

    /// Whether the principal sees the tasks of `owner`.
    pub fn sees_tasks_of(&self, owner: &str) -> bool {
        self.owner_scope().is_none_or(|own| own == owner)
    }

    /// Operators and admins: submitting, cancelling, retrying and answering tasks.
    fn require_writer(&self) -> Result<(), ServiceError> {
        match self.role {
            Role::Admin | Role::Operator => Ok(()),
            Role::Viewer => Err(ServiceError::Forbidden(
                "viewer tokens can only read".into(),
            )),
        }
    }
}

/// Why the service refused or failed. Each variant keeps its meaning across interfaces (the
/// API maps each to one status and error code); the message is for people.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The input is not acceptable (a field's value, a combination of fields).
    #[error("{0}")]
    Invalid(String),
    /// An idempotency key that is not 1-255 visible ASCII characters.
    #[error("Idempotency-Key must be 1-255 visible ASCII characters")]
    InvalidIdempotencyKey,
    /// The idempotency key was used before by this owner with a different request.
    #[error("Idempotency-Key {key:?} was already used with a different request")]
    IdempotencyConflict { key: String },
    /// No such task or approval visible to the principal (another owner's does not exist for
    /// them), or nothing of the kind asked for (a task without a proposal).
    #[error("{0}")]
    NotFound(String),
    /// The task names a repository that is not registered.
    #[error("repository {name:?} is not registered (POST /v1/repos)")]
    UnknownRepository { name: String },
    /// A task kind this server cannot run.
    #[error("{0}")]
    UnsupportedKind(String),
    /// The principal's role may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// What was to be created exists already (a repository's name is taken).
    #[error("{0}")]
    AlreadyExists(String),
    /// The task's status does not allow the action (cancel a finished task, retry an unfinished
    /// one, answer a task that asked nothing).
    #[error("task {task} is {}: {action}", status_name(.status))]
    WrongStatus {
        task: TaskId,
        status: TaskStatus,
        action: &'static str,
    },
    /// The action conflicts with what the task is doing (its publication runs, its status keeps
    /// changing, it ended before its approval was decided).
    #[error("{0}")]
    Conflict(String),
    /// The hash presented is not the one the approval is bound to; nothing was decided.
    #[error("hash {hash} is not the hash approval {approval} is bound to; nothing was decided")]
    HashMismatch { approval: String, hash: String },
    /// The approval was decided before; an approval is decided once.
    #[error("approval {approval} is {}; an approval is decided once", status.as_str())]
    AlreadyDecided {
        approval: String,
        status: ApprovalStatus,
    },
    /// The store failed (or refused in a way no variant above names).
    #[error(transparent)]
    Store(StoreError),
    /// Warden itself failed (no randomness, no git, a task that panicked).
    #[error("{0}")]
    Internal(String),
}

/// A task status as the API spells it (`waiting_input`).
fn status_name(status: &TaskStatus) -> &'static str {
    warden_store::state::status_name(*status)
}

impl ServiceError {
    fn internal(error: impl std::fmt::Display) -> ServiceError {
        ServiceError::Internal(error.to_string())
    }

    fn wrong_status(task: &Task, action: &'static str) -> ServiceError {
        ServiceError::WrongStatus {
            task: task.id.clone(),
            status: task.status,
            action,
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(error: StoreError) -> ServiceError {
        match error {
            StoreError::IdempotencyConflict { key } => ServiceError::IdempotencyConflict { key },
            error @ StoreError::AlreadyExists { .. } => {
                ServiceError::AlreadyExists(error.to_string())
            }
            other => ServiceError::Store(other),
        }
    }
}

/// The front door to tasks (see the module documentation). Cheap to clone: its parts are
/// shared.
#[derive(Clone)]
pub struct TaskService {
    store: Arc<dyn Store>,
    /// Woken after each task queued, so an idle worker claims it at once.
    wake: Arc<Notify>,
    /// Which `callback.url`s a task may name (none by default).
    callbacks: Arc<CallbackConfig>,
    /// The runs of this process's workers, stopped at once by a cancel.
    running: Arc<RunningTasks>,
    /// Warden's repository store: its git checks publication remotes, its mirrors hold
    /// proposals. `None`: no diffs are shown, and the git on `PATH` checks remotes.
    repos: Option<warden_repo::RepoStore>,
    /// Redacts registered secrets from what is shown (diffs).
    redactor: Redactor,
    /// `[sandbox] repo_mount_roots`: where registered repositories' own mounts may lie (none:
    /// no repository may have mounts).
    repo_mount_roots: Arc<Vec<std::path::PathBuf>>,
    /// Fetches and snapshots repositories as they are registered; `None`: not warmed.
    warmer: Option<crate::warm::Warmer>,
    /// Why the workers have no model, when they have none: what needs one is refused.
    model_missing: Option<Arc<String>>,
}

impl std::fmt::Debug for TaskService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskService")
            .field("store", &self.store.backend())
            .finish_non_exhaustive()
    }
}

impl TaskService {
    /// The service over `store`, waking `wake` when a task is queued; no callbacks, no runs of
    /// this process to stop, no diffs until configured with the `with_` methods.
    pub fn new(store: Arc<dyn Store>, wake: Arc<Notify>) -> TaskService {
        TaskService {
            store,
            wake,
            callbacks: Arc::default(),
            running: Arc::default(),
            repos: None,
            redactor: Redactor::default(),
            repo_mount_roots: Arc::default(),
            warmer: None,
            model_missing: None,
        }
    }

    /// Refuses tasks that need a model (questions, changes, model-mode maintenance), saying
    /// `reason`, when the workers have none; `None`: they have one.
    pub fn with_model_missing(mut self, reason: Option<String>) -> TaskService {
        self.model_missing = reason.map(Arc::new);
        self
    }

    /// Accepts task callbacks as `config` allows.
    pub fn with_callbacks(mut self, config: CallbackConfig) -> TaskService {
        self.callbacks = Arc::new(config);
        self
    }

    /// Shares the workers' registry of runs, so a cancel stops a run of this process at once.
    pub fn with_running(mut self, running: Arc<RunningTasks>) -> TaskService {
        self.running = running;
        self
    }

    /// Checks publication remotes with `repos`' git and shows proposal diffs from its mirrors,
    /// redacted with `redactor`.
    pub fn with_repos(mut self, repos: warden_repo::RepoStore, redactor: Redactor) -> TaskService {
        self.repos = Some(repos);
        self.redactor = redactor;
        self
    }

    /// Where registered repositories' own mounts may lie (`[sandbox] repo_mount_roots`).
    pub fn with_repo_mount_roots(mut self, roots: Vec<std::path::PathBuf>) -> TaskService {
        self.repo_mount_roots = Arc::new(roots);
        self
    }

    /// Warms repositories as they are registered: their mirror and the snapshot of their
    /// default branch are written in the background ([`crate::warm`]). Needs `with_repos`.
    pub fn with_warming(mut self) -> TaskService {
        self.warmer = self.repos.clone().map(crate::warm::Warmer::new);
        self
    }

    /// What warms (and refreshes) registered repositories, with `with_warming`.
    pub(crate) fn warmer(&self) -> Option<&crate::warm::Warmer> {
        self.warmer.as_ref()
    }

    /// The store the service keeps tasks in (the service's own parts read it; interfaces go
    /// through the service's methods).
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The event hub over this service's store (what streams read).
    pub fn hub(&self, options: crate::hub::HubOptions) -> crate::hub::Hub {
        crate::hub::Hub::new(Arc::clone(&self.store), options)
    }

    /// How many tasks are in each status (every owner's: the service's metrics).
    pub async fn task_counts(&self) -> Result<Vec<(TaskStatus, u64)>, ServiceError> {
        Ok(self.store.count_tasks_by_status().await?)
    }

    /// Which store backend keeps the tasks (`sqlite` or `postgres`), for logs and `doctor`.
    pub fn backend(&self) -> &'static str {
        self.store.backend()
    }

    /// What removes Warden's registered secrets from text (an interface's context from
    /// outside, e.g. a failed check's output, before it becomes a prompt).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Warden's repository store, when configured.
    pub fn repo_store(&self) -> Option<&warden_repo::RepoStore> {
        self.repos.as_ref()
    }

    /// The task `id` if `principal` may see it; [`ServiceError::NotFound`] otherwise (another
    /// owner's task does not exist for them, nor does an id that cannot be one).
    pub async fn task(&self, principal: &Principal, id: &str) -> Result<TaskView, ServiceError> {
        Ok(task_view(&self.visible_task(principal, id).await?))
    }

    /// [`TaskService::task`] as the store keeps it, for the service's own rules.
    pub(crate) async fn visible_task(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Task, ServiceError> {
        let missing = || ServiceError::NotFound(format!("task {id} not found"));
        let parsed: TaskId = id.parse().map_err(|_| missing())?;
        let task = self.store.get_task(&parsed).await?.ok_or_else(missing)?;
        if !principal.sees_tasks_of(&task.owner) {
            return Err(missing());
        }
        Ok(task)
    }

    /// The events of task `id` after its `after`th, at most `limit`, each with its number in
    /// the task's stream, once `principal` may see the task: what an interface follows a task
    /// with (MCP's progress), the events' redaction already done when they were stored.
    pub async fn task_events(
        &self,
        principal: &Principal,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, warden_protocol::Event)>, ServiceError> {
        let task = self.visible_task(principal, id).await?;
        let records = self
            .store
            .events_after(&warden_store::EventStream::Task(task.id), after, limit)
            .await?;
        Ok(records
            .into_iter()
            .map(|record| (record.task_seq, record.event))
            .collect())
    }
}

/// A task as the service keeps it; interfaces see a [`TaskView`].
pub(crate) use warden_store::Task;
