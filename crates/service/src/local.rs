//! Warden without a server: `warden ask`/`run` and the commands that look at their tasks keep
//! them in a store (an embedded SQLite database, [`DATABASE_FILE`] under `WARDEN_HOME`) and run
//! them with the worker code `warden serve` uses, one worker in this process. Crash recovery,
//! budgets, journals and events are the served ones.
//!
//! What only a local front door can do happens here, before the task exists: repositories are
//! named by path or URL (not registered names), pinned with progress on the caller's terminal
//! (`PATH@worktree` included), and what pinning noticed goes into the task for its result. A
//! task's repository then carries its source ([`warden_store::TaskRepo::source`]) and the
//! pinned commit, so the worker pins it again without fetching.
//!
//! The database is not `warden serve`'s (`warden.db`): a server on the same `WARDEN_HOME` never
//! runs an in-process task, and this process's worker claims only the task it follows
//! ([`WorkerOptions::only`]), so concurrent `warden ask`s on one home each run their own.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use warden_protocol::views::{ApprovalView, TaskView};
use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};
use warden_repo::{RepoSpec, RepoStore};
use warden_store::{EventStream, Store, TaskRepo};

use crate::cancel::RunningTasks;
use crate::config::ServiceConfig;
use crate::tasks::{PinnedRepos, Principal, Role, ServiceError, TaskService};
use crate::worker::{self, Services, WorkerOptions};
use warden_engine::config::Config;
/// A repository pinned and snapshotted for reading ([`Local::pin_to_read`]).
pub use warden_engine::question::TaskRepo as PinnedRepo;
use warden_engine::question::{self, SetupError};

/// The in-process tasks' database, under `WARDEN_HOME`.
pub const DATABASE_FILE: &str = "local.db";

/// The in-process tasks' database URL under `home`.
pub fn database_url(home: &std::path::Path) -> String {
    format!("sqlite://{}", home.join(DATABASE_FILE).display())
}

/// The owner of in-process tasks.
pub const OWNER: &str = "local";

/// How often the follower looks for new events and the task's status.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);

/// A refusal (exit 2) or a failure of the front door.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// What was asked for cannot be: the message says what to do instead.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

fn usage(message: impl Into<String>) -> LocalError {
    LocalError::Usage(message.into())
}

/// A task to submit in-process.
#[derive(Debug, Clone)]
pub struct Submission {
    pub kind: TaskKind,
    pub prompt: String,
    /// The `--repo` arguments, parsed; empty to continue on the follow-up's repositories.
    pub repos: Vec<RepoSpec>,
    pub follow_up_to: Option<TaskId>,
    /// A change's checks; `None` keeps a follow-up's (no checks for a new task).
    pub checks: Option<Vec<String>>,
    pub baseline: bool,
    pub publish: bool,
    /// A maintain task's selection and mode.
    pub maintain: Option<warden_engine::change::MaintainOptions>,
}

/// The local store and the front door every interface calls; the worker's services (the
/// model client among them) are built when a task is to run here.
pub struct Local {
    config: Arc<Config>,
    service_config: Arc<ServiceConfig>,
    store: Arc<dyn Store>,
    pub repos: RepoStore,
    pub tasks: TaskService,
    wake: Arc<Notify>,
    running: Arc<RunningTasks>,
    services: tokio::sync::OnceCell<Arc<Services>>,
}

/// Who acts in-process: the person at this machine, who owns every local task and decides
/// their approvals.
pub fn principal() -> Principal {
    Principal {
        name: OWNER.into(),
        role: Role::Admin,
    }
}

/// A refusal of the front door as this one reports it: the service's message, exit 2 for
/// what the person asked (anything but a store or internal failure).
impl From<ServiceError> for LocalError {
    fn from(error: ServiceError) -> LocalError {
        match error {
            ServiceError::Store(_) | ServiceError::Internal(_) => {
                LocalError::Failed(anyhow::Error::new(error))
            }
            refusal => LocalError::Usage(refusal.to_string()),
        }
    }
}

/// The redactor of both layers' secrets (the service's are in the engine's already when both
/// came from one `config::load`; added again so a mismatched pair cannot drop them).
fn redactor(config: &Config, service_config: &ServiceConfig) -> warden_engine::redact::Redactor {
    config.redactor().with_secrets(service_config.secrets())
}

impl Local {
    /// Opens (creating) the local database and Warden's repository store.
    pub async fn open(
        config: Arc<Config>,
        service_config: Arc<ServiceConfig>,
    ) -> Result<Local, LocalError> {
        let store = warden_store::open(&database_url(&config.home))
            .await
            .context("cannot open the database")?;
        let (home, storage) = (config.home.clone(), config.storage);
        let repos = tokio::task::spawn_blocking(move || storage.open_repos(&home))
            .await
            .context("opening the repository store crashed")?
            .context("cannot open the repository store")?;
        let wake = Arc::new(Notify::new());
        let running: Arc<RunningTasks> = Arc::default();
        let tasks = TaskService::new(Arc::clone(&store), Arc::clone(&wake))
            .with_running(Arc::clone(&running))
            .with_repos(repos.clone(), redactor(&config, &service_config));
        Ok(Local {
            config,
            service_config,
            store,
            repos,
            tasks,
            wake,
            running,
            services: tokio::sync::OnceCell::new(),
        })
    }

    /// What this process's worker runs tasks with, built once: the model client (a model that
    /// cannot be built, a missing key among them, is a usage error naming what to set), and
    /// the store publishing the events it stores.
    pub async fn services(&self) -> Result<&Arc<Services>, LocalError> {
        self.services_with(true).await
    }

    /// [`Local::services`] for a task that asks no model (`warden maintain` in baseline
    /// mode): a model that cannot be built is not an error.
    pub async fn services_without_model(&self) -> Result<&Arc<Services>, LocalError> {
        self.services_with(false).await
    }

    /// [`Local::services`]; without `needs_model`, a model that cannot be built is replaced by
    /// one that refuses every call with the reason (a publication run asks no model).
    async fn services_with(&self, needs_model: bool) -> Result<&Arc<Services>, LocalError> {
        self.services
            .get_or_try_init(|| async {
                let model = match question::build_model(&self.config) {
                    Ok(model) => model,
                    Err(error) if !needs_model => {
                        Arc::new(crate::worker::NoModel(error.to_string()))
                            as Arc<dyn warden_runtime::Model>
                    }
                    Err(error) => return Err(usage(error.to_string())),
                };
                // The eviction before a snapshot is written keeps what unfinished tasks need
                // (a server's own eviction keeps what these need, reading this database too).
                let stores = [Arc::clone(&self.store)];
                match crate::storage::retained(&stores, &self.repos).await {
                    Ok(retained) => self.repos.set_retained(retained),
                    Err(error) => tracing::warn!(%error, "cannot read which repositories unfinished tasks use"),
                }
                // Events this process stores reach its hub (and metrics) as they commit.
                let hub = crate::hub::instrument(&self.store, crate::hub::HubOptions::default());
                Ok(Arc::new(Services {
                    model_missing: None,
                    config: Arc::clone(&self.config),
                    service_config: Arc::clone(&self.service_config),
                    store: Arc::clone(&self.store),
                    repos: self.repos.clone(),
                    model,
                    redactor: redactor(&self.config, &self.service_config),
                    wake: Arc::clone(&self.wake),
                    running: Arc::clone(&self.running),
                    hub,
                }))
            })
            .await
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The repositories of the task approval `id` is for, read without opening the task
    /// service (`warden approve --github` chooses their publish target before it opens one).
    pub async fn approval_repos(
        home: &std::path::Path,
        id: &str,
    ) -> Result<Vec<String>, LocalError> {
        let store = warden_store::open(&database_url(home))
            .await
            .context("cannot open the database")?;
        let approval = store
            .get_approval(id)
            .await
            .map_err(anyhow::Error::from)?
            .ok_or_else(|| usage(format!("approval {id} not found")))?;
        let task = store
            .get_task(&approval.task)
            .await
            .map_err(anyhow::Error::from)?
            .ok_or_else(|| usage(format!("approval {id} has no task")))?;
        Ok(task.repos.iter().map(|repo| repo.name.clone()).collect())
    }

    /// The task, or a usage error naming it.
    pub async fn task(&self, id: &TaskId) -> Result<TaskView, LocalError> {
        match self.tasks.task(&principal(), id.as_str()).await {
            Err(ServiceError::NotFound(_)) => Err(usage(format!(
                "no task {id} in {}; `warden tasks` lists the tasks there (a server's task: give \
                 --server URL or set WARDEN_SERVER)",
                self.database_display()
            ))),
            other => Ok(other?),
        }
    }

    fn database_display(&self) -> String {
        self.config.home.join(DATABASE_FILE).display().to_string()
    }

    /// Pins the repositories given by path or URL (progress through `progress`) and submits
    /// the task through the front door every interface uses. Without repositories a follow-up
    /// continues on its task's commits (a change on its proposal) and nothing is pinned.
    pub async fn submit(
        &self,
        submission: Submission,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<TaskView, LocalError> {
        let kind = submission.kind;
        // The service's own refusal, before anything is pinned.
        crate::tasks::checked_prompt(kind, &submission.prompt)?;
        if submission.repos.is_empty() && submission.follow_up_to.is_none() {
            return Err(usage(match kind {
                TaskKind::Change => {
                    "name the repository with --repo PATH|URL[@REV] (or continue a task with \
                     --follow-up TASK)"
                }
                _ => "name at least one repository with --repo PATH|URL[@REV]",
            }));
        }
        if let Some(id) = &submission.follow_up_to {
            self.check_follow_up(id, kind).await?;
        }
        let proposes = matches!(kind, TaskKind::Change | TaskKind::Maintain);
        if proposes && submission.repos.len() > 1 {
            return Err(usage(format!(
                "a {} task works on exactly one repository",
                warden_store::state::kind_name(kind)
            )));
        }
        if submission.publish && submission.repos.iter().any(RepoSpec::wants_work_tree) {
            // Refused before anything is pinned or asked of a model.
            return Err(usage(
                "cannot publish a change made on @worktree: the snapshot's uncommitted files \
                 would be pushed without review; commit them and run on HEAD, or leave out \
                 --publish",
            ));
        }
        if submission.publish {
            if let Some(spec) = submission.repos.first() {
                crate::publish::publish_remote(self.repos.git(), &spec.source).map_err(usage)?;
            }
        }
        let pinned = if submission.repos.is_empty() {
            None
        } else {
            Some(self.pin(&submission.repos, progress).await?)
        };
        let submitted = self
            .tasks
            .submit(
                &principal(),
                crate::tasks::Submission {
                    checks: proposes.then_some(submission.checks).flatten(),
                    publish: proposes.then_some(submission.publish),
                    maintain: submission.maintain,
                    follow_up_to: submission.follow_up_to.map(|id| id.to_string()),
                    baseline: submission.baseline,
                    pinned,
                    ..crate::tasks::Submission::new(kind, submission.prompt, Vec::new())
                },
                None,
            )
            .await?;
        Ok(submitted.task)
    }

    /// Pins `specs` into Warden's mirrors and snapshots, reporting progress; a snapshot a disk
    /// budget refuses leaves its repository unpinned, so the task's run fails visibly with
    /// `quota_exceeded` and a result.
    async fn pin(
        &self,
        specs: &[RepoSpec],
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<PinnedRepos, LocalError> {
        // Pinning and the snapshots run git and write files: blocking work.
        let repo_store = self.repos.clone();
        let pin_specs = specs.to_vec();
        let (lines, mut received) = tokio::sync::mpsc::unbounded_channel::<String>();
        let pinning = tokio::task::spawn_blocking(move || {
            question::pin_all(&repo_store, &pin_specs, &|line| {
                let _ = lines.send(line.to_string());
            })
        });
        while let Some(line) = received.recv().await {
            progress(&line);
        }
        let pinned = pinning.await.context("pinning the repositories crashed")?;
        match pinned {
            Ok(repos) => Ok(PinnedRepos::new(
                repos
                    .iter()
                    .map(|repo| TaskRepo {
                        name: repo.pinned.name.clone(),
                        rev: None,
                        commit: Some(repo.pinned.commit.clone()),
                        source: Some(repo.pinned.source.display_redacted()),
                    })
                    .collect(),
                question::repo_notices(&repos),
            )),
            Err(SetupError::Quota(_)) => Ok(PinnedRepos::new(
                specs
                    .iter()
                    .map(|spec| TaskRepo {
                        name: spec.name.clone(),
                        rev: spec.rev.clone(),
                        commit: None,
                        source: Some(spec.source.display_redacted()),
                    })
                    .collect(),
                Vec::new(),
            )),
            Err(SetupError::Usage(message)) => Err(usage(message)),
            Err(SetupError::Infrastructure(message)) => Err(anyhow::anyhow!(message).into()),
        }
    }

    /// A follow-up continues a task of its kind that is not still running, with the advice
    /// the person needs when it does not.
    async fn check_follow_up(&self, id: &TaskId, kind: TaskKind) -> Result<(), LocalError> {
        let earlier = self.task(id).await?;
        match (earlier.kind, kind) {
            (TaskKind::Change, TaskKind::Question) => {
                return Err(usage(format!(
                    "task {id} is a change task: continue it with `warden run --follow-up {id} \
                     \"…\"` (or `warden answer {id} \"…\"`)"
                )))
            }
            (TaskKind::Question, TaskKind::Change) => {
                return Err(usage(format!(
                    "task {id} is a question: continue it with `warden ask --follow-up {id} \"…\"`"
                )))
            }
            _ => {}
        }
        if !earlier.status.is_terminal() && earlier.status != TaskStatus::WaitingInput {
            return Err(usage(format!(
                "task {id} is still {}: follow it up once it has ended",
                warden_store::state::status_name(earlier.status)
            )));
        }
        Ok(())
    }

    /// Runs this process's worker on `id` until the task no longer waits for one (it finished,
    /// or waits for an answer or an approval), passing each of its events to `on_event` in
    /// order; then returns the task. When `interrupt` resolves the task is cancelled and
    /// followed to its end.
    pub async fn drive(
        &self,
        id: &TaskId,
        on_event: &(dyn Fn(Event) + Send + Sync),
        interrupt: impl std::future::Future<Output = ()>,
    ) -> Result<TaskView, LocalError> {
        self.drive_with(id, 0, on_event, interrupt, true).await
    }

    /// [`Local::drive`] for a task queued by a decision on its publish approval: publishing
    /// asks no model, so none needs to be configured.
    pub async fn drive_publication(
        &self,
        id: &TaskId,
        on_event: &(dyn Fn(Event) + Send + Sync),
    ) -> Result<TaskView, LocalError> {
        // Only what publishing does is shown, not the run that made the proposal again.
        let after = self.last_event(id).await?;
        self.drive_with(id, after, on_event, std::future::pending(), false)
            .await
    }

    /// [`Local::drive`], passing on only the events after the task's event `after` (what
    /// happened before an answer was given is not shown again). A task that no longer waits
    /// for a worker is only read: no worker (nor model) is needed for it.
    pub async fn drive_after(
        &self,
        id: &TaskId,
        after: u64,
        on_event: &(dyn Fn(Event) + Send + Sync),
        interrupt: impl std::future::Future<Output = ()>,
    ) -> Result<TaskView, LocalError> {
        self.drive_with(id, after, on_event, interrupt, true).await
    }

    async fn drive_with(
        &self,
        id: &TaskId,
        after: u64,
        on_event: &(dyn Fn(Event) + Send + Sync),
        interrupt: impl std::future::Future<Output = ()>,
        needs_model: bool,
    ) -> Result<TaskView, LocalError> {
        let task = self.task(id).await?;
        if !waits_for_a_worker(task.status) {
            return self.follow(id, after, on_event, interrupt).await;
        }
        let (stop, stopped) = watch::channel(false);
        let options = WorkerOptions {
            only: Some(id.clone()),
            slots: 1,
            poll: Duration::from_millis(200),
            ..WorkerOptions::from_config(worker_name(), &self.service_config)
        };
        let services = Arc::clone(self.services_with(needs_model).await?);
        self.recover_dead_runs(id).await?;
        let worker = tokio::spawn(worker::run_workers(services, options, stopped));
        self.wake.notify_one();
        let followed = self.follow(id, after, on_event, interrupt).await;
        let _ = stop.send(true);
        let _ = worker.await;
        followed
    }

    /// Passes the task's events to `on_event` until it settles; then its last events and the
    /// task.
    async fn follow(
        &self,
        id: &TaskId,
        mut after: u64,
        on_event: &(dyn Fn(Event) + Send + Sync),
        interrupt: impl std::future::Future<Output = ()>,
    ) -> Result<TaskView, LocalError> {
        let stream = EventStream::Task(id.clone());
        let mut interrupt = std::pin::pin!(interrupt);
        let mut interrupted = false;
        loop {
            // The status first: a settled task's last events are stored by then.
            let task = self.task(id).await?;
            loop {
                let records = self
                    .store()
                    .events_after(&stream, after, crate::hub::BATCH)
                    .await
                    .context("cannot read the task's events")?;
                let Some(last) = records.last() else { break };
                after = last.task_seq;
                for record in records {
                    on_event(record.event);
                }
            }
            if !waits_for_a_worker(task.status) {
                return Ok(task);
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
                _ = &mut interrupt, if !interrupted => {
                    interrupted = true;
                    match self.tasks.cancel(&principal(), id.as_str()).await {
                        // It ended (or began publishing) meanwhile: that outcome stands.
                        Ok(_) | Err(ServiceError::WrongStatus { .. } | ServiceError::Conflict(_)) => {}
                        Err(error) => return Err(error.into()),
                    }
                }
            }
        }
    }

    /// Pins `spec` (a path or URL, as `warden ask --repo` takes) and materializes its
    /// verified read-only snapshot, for reading code outside a task (`warden mcp`'s
    /// `read_file`, `search`, `list_dir`).
    pub async fn read_snapshot(&self, spec: &RepoSpec) -> Result<PinnedRepo, LocalError> {
        Ok(crate::tasks::pin_for_reading(self.repos.clone(), spec.clone()).await?)
    }

    /// Pins `spec` as [`Local::submit`] pins a task's repository (progress through
    /// `progress`, the work tree's uncommitted files left out and said in the notices) and
    /// materializes its verified read-only snapshot, for commands that read a repository
    /// without making a task of it (`warden vulns`). A disk budget's refusal is an error here:
    /// there is no task to fail visibly.
    pub async fn pin_to_read(
        &self,
        spec: &RepoSpec,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<warden_engine::question::TaskRepo, LocalError> {
        let repo_store = self.repos.clone();
        let pin_specs = vec![spec.clone()];
        let (lines, mut received) = tokio::sync::mpsc::unbounded_channel::<String>();
        let pinning = tokio::task::spawn_blocking(move || {
            question::pin_all(&repo_store, &pin_specs, &|line| {
                let _ = lines.send(line.to_string());
            })
        });
        while let Some(line) = received.recv().await {
            progress(&line);
        }
        match pinning.await.context("pinning the repository crashed")? {
            Ok(mut repos) if repos.len() == 1 => Ok(repos.remove(0)),
            Ok(_) => Err(anyhow::anyhow!("pinning gave no repository").into()),
            Err(SetupError::Usage(message) | SetupError::Quota(message)) => Err(usage(message)),
            Err(SetupError::Infrastructure(message)) => Err(anyhow::anyhow!(message).into()),
        }
    }

    /// Cancels the task through the front door: its run stops at once (in another process,
    /// within about a second). A finished task is refused, as on a server.
    pub async fn cancel(&self, id: &TaskId) -> Result<TaskView, LocalError> {
        self.task(id).await?;
        Ok(self.tasks.cancel(&principal(), id.as_str()).await?)
    }

    /// Repeats a finished task as a new one over the same pinned commits (`warden retry`).
    pub async fn retry(&self, id: &TaskId) -> Result<TaskView, LocalError> {
        self.task(id).await?;
        Ok(self.tasks.retry(&principal(), id.as_str()).await?)
    }
}

/// Whether a task in `status` is still to be run (or running): not finished, not waiting for
/// a person.
fn waits_for_a_worker(status: TaskStatus) -> bool {
    matches!(
        status,
        TaskStatus::Queued | TaskStatus::Running | TaskStatus::Testing
    )
}

impl Local {
    /// The task's latest event sequence number (0 when it has none).
    pub async fn last_event(&self, id: &TaskId) -> Result<u64, LocalError> {
        let mut after = 0;
        loop {
            let records = self
                .store()
                .events_after(&EventStream::Task(id.clone()), after, crate::hub::BATCH)
                .await
                .context("cannot read the task's events")?;
            match records.last() {
                Some(last) => after = last.task_seq,
                None => return Ok(after),
            }
        }
    }
}

/// One run's journal as `warden logs` shows it.
pub struct RunJournalView {
    pub run: u32,
    /// The records as a journal holds them (`seq`, `kind`, `at`, `hash`, `prev_hash`,
    /// `payload`), sensitive observations hidden as the API hides them.
    pub records: Vec<Value>,
    /// The run's hash chain verified.
    pub chain_ok: bool,
}

impl Local {
    /// Every run's journal of the task, oldest run first: the pages of
    /// [`TaskService::journal_page`] (the API's reader), verified and redacted as it serves them.
    pub async fn journals(&self, id: &TaskId) -> Result<Vec<RunJournalView>, LocalError> {
        self.task(id).await?;
        let mut views: Vec<RunJournalView> = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .tasks
                .journal_page(
                    &principal(),
                    id.as_str(),
                    crate::tasks::JournalPageQuery {
                        run: None,
                        after,
                        limit: crate::tasks::MAX_PAGE,
                    },
                )
                .await?;
            if views.is_empty() {
                views = page
                    .runs
                    .iter()
                    .map(|run| RunJournalView {
                        run: run.number,
                        records: Vec::new(),
                        chain_ok: true,
                    })
                    .collect();
            }
            for record in page.data {
                let Some(view) = views.iter_mut().find(|v| v.run == record.run) else {
                    continue;
                };
                view.chain_ok &= record.chain_ok;
                view.records.push(json!({
                    "seq": record.seq,
                    "kind": record.kind,
                    "at": record.at,
                    "hash": record.hash,
                    "prev_hash": record.prev_hash,
                    "payload": record.payload,
                }));
            }
            match page.next_cursor {
                Some(cursor) => after = Some(cursor),
                None => return Ok(views),
            }
        }
    }

    /// A change task's proposal diff (see [`crate::diff::task_diff`]).
    pub async fn diff(
        &self,
        id: &TaskId,
    ) -> Result<(warden_protocol::Proposal, String, bool), LocalError> {
        self.task(id).await?;
        let task = self.tasks.visible_task(&principal(), id.as_str()).await?;
        crate::diff::task_diff(
            self.store().as_ref(),
            &self.repos,
            &redactor(&self.config, &self.service_config),
            &task,
        )
        .await
        .map_err(|error| match error {
            crate::diff::TaskDiffError::Missing(message) => usage(message),
            crate::diff::TaskDiffError::Failed(message) => {
                LocalError::Failed(anyhow::anyhow!(message))
            }
        })
    }

    /// The newest tasks, newest first.
    pub async fn list(&self, limit: u32) -> Result<Vec<TaskView>, LocalError> {
        let listing = crate::tasks::TaskListing {
            status: None,
            before: None,
            limit,
        };
        Ok(self.tasks.list(&principal(), listing).await?.tasks)
    }

    /// The mirror holding the task's repository (and its proposal), for `warden apply`.
    pub async fn mirror(
        &self,
        task: &TaskView,
    ) -> Result<(RepoSpec, std::path::PathBuf), LocalError> {
        let spec = crate::task_repos::repo_specs(self.store().as_ref(), &task.repos)
            .await
            .map_err(|failure| usage(failure.message))?
            .into_iter()
            .next()
            .ok_or_else(|| usage(format!("task {} names no repository", task.id)))?;
        let mirror = self.repos.mirror_path(&spec);
        Ok((spec, mirror))
    }
}

impl Local {
    /// Answers task `id` through the front door: one waiting for input resumes with the
    /// answer; a finished one is continued by a follow-up of its kind (a change on its
    /// proposal). Returns the task to follow.
    pub async fn answer(&self, id: &TaskId, text: &str) -> Result<TaskView, LocalError> {
        self.task(id).await?;
        Ok(self
            .tasks
            .post_message(&principal(), id.as_str(), text)
            .await?)
    }

    /// Decides approval `id` (bound to `hash`) through the front door; returns the task it
    /// belongs to, queued again to publish or to end unpublished.
    pub async fn decide(
        &self,
        id: &str,
        decision: warden_store::Decision,
        hash: Option<&str>,
    ) -> Result<ApprovalView, LocalError> {
        let hash = match hash {
            Some(hash) => hash.to_string(),
            // Rejecting is about whatever is pending.
            None => self.tasks.approval(&principal(), id).await?.subject_hash,
        };
        Ok(self.tasks.decide(&principal(), id, decision, &hash).await?)
    }
}

/// An approval decided by [`Local::approve`]: newly, or approved before and resumed.
#[derive(Debug, Clone)]
pub struct Approved {
    pub approval: ApprovalView,
    /// Approved before (same hash), its publication not finished: this process resumes it.
    pub resumed: bool,
}

impl Local {
    /// Approves `id` for exactly `hash`. An approval given before for the same hash whose
    /// task has not ended (its publication was interrupted by a crash, or failed for a cause
    /// fixed since) is resumed rather than refused: this process publishes it, reconciling
    /// with the remote. Any other refusal is the service's.
    pub async fn approve(&self, id: &str, hash: &str) -> Result<Approved, LocalError> {
        let refusal = match self
            .tasks
            .decide(&principal(), id, warden_store::Decision::Approve, hash)
            .await
        {
            Ok(approval) => {
                return Ok(Approved {
                    approval,
                    resumed: false,
                })
            }
            Err(refusal) => refusal,
        };
        let Ok(approval) = self.tasks.approval(&principal(), id).await else {
            return Err(refusal.into());
        };
        let decided_before = matches!(
            approval.status,
            warden_store::ApprovalStatus::Approved | warden_store::ApprovalStatus::Consumed
        ) && approval.subject_hash == hash;
        if !decided_before || self.task(&approval.task_id).await?.status.is_terminal() {
            return Err(refusal.into());
        }
        Ok(Approved {
            approval,
            resumed: true,
        })
    }

    /// Why the publication of `task` failed, when it did (the task still waits: approving the
    /// same hash again resumes it).
    pub fn publication_failure(task: &TaskView) -> Option<String> {
        let result = task.result.as_ref()?;
        if result
            .pointer("/publication/status")
            .and_then(|s| s.as_str())
            != Some("failed")
        {
            return None;
        }
        result["notices"]
            .as_array()?
            .iter()
            .filter_map(|n| n.as_str())
            .rfind(|n| n.starts_with("publication failed"))
            .map(str::to_string)
    }
}

impl Local {
    /// A run of this task left open by an in-process worker that died (Ctrl-C twice, a crash,
    /// a kill) on this machine is interrupted now, so the task is queued again at once rather
    /// than when the dead run's lease expires; its next run resumes from the journal. A worker
    /// that may still be alive (another host, a live process with that id) is waited out.
    async fn recover_dead_runs(&self, id: &TaskId) -> Result<(), LocalError> {
        let runs = self
            .store()
            .list_runs(id)
            .await
            .context("cannot list the task's runs")?;
        for run in runs.iter().filter(|run| run.ended_at_ms.is_none()) {
            if dead_local_worker(&run.worker) {
                let requeued = self
                    .store()
                    .interrupt_worker_runs(&run.worker)
                    .await
                    .context("cannot recover the run of a process that died")?;
                for requeued in requeued {
                    tracing::info!(run = %requeued.run, "run of a process that died interrupted");
                }
            }
        }
        Ok(())
    }
}

/// The worker name of this process: `local-worker-<host>-<pid>-<random>`. A run it leaves behind
/// when it dies is recovered by the next command that runs the task ([`dead_local_worker`]).
fn worker_name() -> String {
    format!("local-{}", crate::worker::process_worker_name())
}

/// Whether `worker` names an in-process worker of this host whose process is gone.
fn dead_local_worker(worker: &str) -> bool {
    let Some(rest) = worker.strip_prefix("local-worker-") else {
        return false;
    };
    let mut parts = rest.rsplitn(3, '-');
    let (Some(_random), Some(pid), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let this_host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let this_host: String = this_host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    if host != this_host {
        return false;
    }
    let Some(pid) = pid
        .parse::<i32>()
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    if pid == rustix::process::getpid() {
        return false;
    }
    // No such process: it died. Any other answer (alive, or not ours to signal) waits.
    matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// The task JSON of `GET /v1/tasks/{id}`, for the renderers the CLI shares with `--server`.
pub fn task_json(task: &TaskView) -> Value {
    crate::task_view::view_json(task)
}
