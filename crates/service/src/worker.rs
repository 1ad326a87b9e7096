//! Workers: a loop that claims queued tasks from the store with a lease — as many at once as it
//! has free slots ([`ClaimQueue`], one `claim_batch`) — runs up to `slots` of them at once,
//! heartbeats each run while it lasts (a lost lease cancels it), and finishes each run with its
//! status and result JSON through a [`CompletionBatcher`] (runs that end together end in one
//! transaction, each acknowledged once it is durable; their `task_finished` events reach this
//! process's subscribers at once). A run talks to the store through
//! [`crate::outage::RunStore`], which rides out outages until the run's lease would expire; a
//! run lost then (or when the heartbeat cannot renew the lease in time) records nothing and is
//! released to the queue once the store answers again, never failed by the outage. Expired leases of dead workers are re-queued by every
//! worker periodically. At shutdown a worker stops claiming, lets its runs finish within a grace
//! period and releases the rest back to the queue (not counted as an interruption).
//!
//! A question run resolves the task's registered repositories, pins them (at the commits an
//! earlier run recorded, or now, recording them), opens the sandbox, and runs the agent loop
//! with the store-backed journal, events and ledger. A run after a crash replays the model
//! decisions an earlier run journaled instead of paying for them again.
//!
//! A change run (one repository, a writable view, checks, a proposal, an approval when it is to
//! be published) lives in `change_task`, as does the run of a task queued again by a decision
//! on its publish approval (publication or rejection, no agent). Workers also queue, with the
//! expired runs, waiting tasks whose approval was decided but which were not queued.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{watch, Notify, Semaphore};
use warden_protocol::{
    Event, Failure, FailureCode, QuestionOutcome, QuestionResult, Role, TaskKind, TaskStatus,
    TranscriptEntry, Usage,
};
use warden_repo::RepoStore;
use warden_runtime::{CancelFlag, EventSink, Model, RunReport, SystemClock};
use warden_store::{
    Claim, ClaimFilter, ClaimQueue, Clock, Completion, CompletionBatcher, LeasedClaim, RunJournal,
    RunRef, Store, StoreError, Task, TaskRepo, MESSAGE_AGENT, MESSAGE_STEER,
};

use crate::cancel::{RunningTasks, STATUS_CHECK_EVERY};
use crate::journal::{
    recorded_decisions, store_events, RecordedDecision, ReplayModel, StoreJournal,
};
use crate::ledger::{Budget, StoreLedger};
use crate::outage::{Lost, RunLease, RunStore, StoreCalls};
use crate::task_repos::repo_specs;
use warden_engine::config::Config;
use warden_engine::question::{self, QuestionRun, SetupError, TaskSandbox};
use warden_engine::redact::Redactor;

mod change_end;
mod change_task;
mod gate;
mod maintain_task;
mod requeue_gate;
mod review;

/// What every run of a worker process shares.
pub struct Services {
    pub config: Arc<Config>,
    /// The service's sections: leases, per-day budgets, where proposals are published.
    pub service_config: Arc<crate::config::ServiceConfig>,
    pub store: Arc<dyn Store>,
    pub repos: RepoStore,
    pub model: Arc<dyn Model>,
    /// Why there is no model (none configured): the server runs only what asks none,
    /// baseline-mode maintenance, and its front door refuses the rest saying this.
    pub model_missing: Option<String>,
    pub redactor: Redactor,
    /// Woken when a task is submitted, so an idle worker claims it at once.
    pub wake: Arc<Notify>,
    /// The runs of this process, so the API can stop one at once (cancel).
    pub running: Arc<RunningTasks>,
    /// Where the events `store` stores are published (SSE) and what is counted (metrics).
    pub hub: Arc<crate::hub::Hub>,
}

/// The model of a process that has none configured: every call is refused with the reason.
pub struct NoModel(pub String);

impl warden_runtime::Model for NoModel {
    fn name(&self) -> String {
        "unconfigured".into()
    }

    fn complete<'a>(
        &'a self,
        _request: &'a warden_runtime::ModelRequest,
        _events: &'a dyn warden_runtime::EventSink,
    ) -> warden_runtime::BoxFuture<
        'a,
        Result<warden_runtime::ModelResponse, warden_runtime::ModelError>,
    > {
        let message = self.0.clone();
        Box::pin(async move {
            Err(warden_runtime::ModelError::Permanent {
                status: None,
                message,
            })
        })
    }

    fn has_price(&self) -> bool {
        false
    }
}

/// How one worker process runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The name runs are leased to. Stable across restarts of `warden serve` (one per
    /// `WARDEN_HOME`), unique per process for `warden worker`.
    pub name: String,
    pub slots: usize,
    pub lease: Duration,
    /// How often an idle worker looks for work it was not woken for (other processes'
    /// submissions, re-queued tasks).
    pub poll: Duration,
    pub shutdown_grace: Duration,
    /// Claim only this task: the worker of an in-process `warden ask`/`run` runs the task it
    /// follows and nobody else's.
    pub only: Option<warden_protocol::TaskId>,
}

impl WorkerOptions {
    pub fn from_config(name: String, config: &crate::config::ServiceConfig) -> WorkerOptions {
        WorkerOptions {
            name,
            slots: config.serve.workers,
            lease: config.serve.lease,
            poll: Duration::from_millis(500),
            shutdown_grace: config.serve.shutdown_grace,
            only: None,
        }
    }
}

/// Runs the worker until `shutdown` turns true, then drains it (see the module docs).
pub async fn run_workers(
    services: Arc<Services>,
    options: WorkerOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(options.slots));
    let (release, _) = watch::channel(false);
    let mut runs = tokio::task::JoinSet::new();
    let filter = ClaimFilter {
        kinds: vec![TaskKind::Question, TaskKind::Change, TaskKind::Maintain],
        task: options.only.clone(),
    };
    let requeue_every = (options.lease / 2).max(Duration::from_millis(500));
    let mut last_requeue: Option<Instant> = None;
    // The store's leases are in wall-clock time: the queue reads the same clock (and measures
    // how long ago it was granted a lease on its monotonic side).
    let clock: Arc<dyn Clock> = Arc::new(warden_store::SystemClock);
    let mut requeue_gate = requeue_gate::RequeueGate::new(options.lease);
    let mut queue = ClaimQueue::new(
        Arc::clone(&services.store),
        Arc::clone(&clock),
        &options.name,
        filter.clone(),
        options.lease,
        1,
    );
    let batcher = CompletionBatcher::start(
        Arc::clone(&services.store),
        Duration::ZERO,
        COMPLETION_BATCH,
    );
    loop {
        if *shutdown.borrow() {
            break;
        }
        while runs.try_join_next().is_some() {}
        if last_requeue.is_none_or(|at| at.elapsed() >= requeue_every) {
            last_requeue = Some(Instant::now());
            let look = requeue_gate.look(clock.as_ref());
            if let Some(stepped_ms) = look.stepped_ms {
                tracing::warn!(
                    stepped_ms,
                    "the wall clock was stepped; leases are wall-clock times in the store, so \
                     expired ones are re-queued only once live runs had a lease's time to renew \
                     theirs (after a step forward)"
                );
            }
            if look.may_requeue {
                match services.store.requeue_expired().await {
                    Ok(requeued) => {
                        for r in requeued {
                            tracing::info!(run = %r.run, status = ?r.status, "lease expired");
                        }
                    }
                    Err(error) => tracing::warn!(%error, "re-queueing expired runs failed"),
                }
            }
            // Decisions on publish approvals whose task was not queued (a crash in between,
            // or a decision made while the asking run was still finishing).
            match crate::publication::requeue_decided_tasks(services.store.as_ref()).await {
                Ok(queued) => {
                    for task in queued {
                        tracing::info!(%task, "queued for its decided publication");
                    }
                }
                Err(error) => tracing::warn!(%error, "queueing decided publications failed"),
            }
            if let Err(error) = queue.keep_alive().await {
                tracing::warn!(%error, "renewing queued claims failed");
            }
        }
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.changed() => break,
        };
        // Claim for every free slot at once (this one included), so no claim waits for a slot.
        queue.set_refill(slots.available_permits() + 1);
        match queue.next_leased().await {
            Ok(Some(leased)) => {
                let granted = lease_granted_at(&leased, clock.monotonic_ms());
                let claim = leased.claim;
                let services = Arc::clone(&services);
                let options = options.clone();
                let release = release.subscribe();
                let batcher = batcher.clone();
                let span = tracing::info_span!(
                    "task.run",
                    task.id = %claim.task.id,
                    task.kind = warden_store::state::kind_name(claim.task.kind),
                    task.run = %claim.run(),
                );
                runs.spawn(tracing::Instrument::instrument(
                    async move {
                        let lease = RunLease::new(options.lease, granted);
                        execute(&services, &options, claim, lease, release, &batcher).await;
                        drop(permit);
                    },
                    span,
                ));
            }
            Ok(None) => {
                drop(permit);
                tokio::select! {
                    _ = services.wake.notified() => {}
                    _ = tokio::time::sleep(options.poll.min(requeue_every)) => {}
                    _ = shutdown.changed() => break,
                }
            }
            Err(error) => {
                drop(permit);
                tracing::warn!(%error, "claiming a task failed");
                tokio::select! {
                    _ = tokio::time::sleep(options.poll) => {}
                    _ = shutdown.changed() => break,
                }
            }
        }
    }
    // Stop claiming: claims not started go back to the queue at once; let runs finish within
    // the grace period, then release the rest.
    if let Err(error) = queue.release().await {
        tracing::warn!(%error, "releasing queued claims failed; they come back when their leases expire");
    }
    let drained = tokio::time::timeout(options.shutdown_grace, async {
        while runs.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!(
            runs = runs.len(),
            "grace period over: releasing runs to the queue"
        );
        let _ = release.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while runs.join_next().await.is_some() {}
        })
        .await;
    }
}

/// Completions ended in one transaction at most.
const COMPLETION_BATCH: usize = 64;

/// When the claim's lease was granted (or last renewed), as this process's monotonic time
/// (`now_monotonic_ms` on the store clock's monotonic scale), never later than now. Never from
/// the wall clock: a step between the grant and now would shorten or stretch the run's lease.
fn lease_granted_at(leased: &LeasedClaim, now_monotonic_ms: i64) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let age = Duration::from_millis(
        u64::try_from(now_monotonic_ms - leased.granted_monotonic_ms).unwrap_or(0),
    );
    now.checked_sub(age).unwrap_or(now)
}

/// How a run ended, for the store.
enum Ending {
    Finished {
        status: TaskStatus,
        result: Value,
    },
    /// Released at shutdown: back to the queue.
    Released,
    /// The lease was lost: someone else owns the task now.
    LeaseLost,
}

/// The services of one run: the worker's, except that it reaches the store only through a
/// [`RunStore`], which retries through outages until the run's lease would expire
/// ([`crate::outage`]).
pub(crate) struct RunServices {
    pub config: Arc<Config>,
    pub service_config: Arc<crate::config::ServiceConfig>,
    pub store: RunStore,
    pub repos: RepoStore,
    pub model: Arc<dyn Model>,
    pub redactor: Redactor,
    pub running: Arc<RunningTasks>,
}

fn run_services(services: &Services, lease: &Arc<RunLease>) -> RunServices {
    RunServices {
        config: Arc::clone(&services.config),
        service_config: Arc::clone(&services.service_config),
        store: RunStore::new(Arc::clone(&services.store), Arc::clone(lease)),
        repos: services.repos.clone(),
        model: Arc::clone(&services.model),
        redactor: services.redactor.clone(),
        running: Arc::clone(&services.running),
    }
}

/// Runs one claimed task to its end and records it. A run whose lease is lost (taken by the
/// store, or not renewable through an outage) records nothing: the task is someone else's, or
/// goes back to the queue.
async fn execute(
    services: &Services,
    options: &WorkerOptions,
    claim: Claim,
    lease: Arc<RunLease>,
    mut release: watch::Receiver<bool>,
    batcher: &CompletionBatcher,
) {
    let run = claim.run();
    let cancel = CancelFlag::default();
    let registration = services.running.register(&claim.task.id, cancel.clone());
    let control = Arc::clone(registration.control());
    let watcher = tokio::spawn(crate::cancel::watch_status(
        Arc::clone(&services.store),
        claim.task.id.clone(),
        Arc::clone(&control),
        STATUS_CHECK_EVERY,
    ));
    let heartbeat = tokio::spawn(heartbeat(
        Arc::clone(&services.store),
        run.clone(),
        options.name.clone(),
        Arc::clone(&lease),
    ));
    let run_services = run_services(services, &lease);
    let ending = tokio::select! {
        ending = run_task(&run_services, options, &claim, cancel.clone()) => ending,
        _ = release.wait_for(|r| *r) => Ending::Released,
        // A stopped run that does not wind down (a model call in flight) is dropped.
        _ = control.stopped_for(STOP_GRACE) => Ending::LeaseLost,
        // A lost run stops: its agent loop is cancelled, its sandbox commands killed.
        _ = async {
            lease.lost_now().await;
            control.stop();
            tokio::time::sleep(STOP_GRACE).await;
        } => Ending::LeaseLost,
    };
    watcher.abort();
    if let Some(why) = lease.lost() {
        heartbeat.abort();
        abandon(services, options, &run, why);
        return;
    }
    if control.stopped() {
        heartbeat.abort();
        tracing::info!(%run, "the task was ended outside the run; the run stops without a result");
        return;
    }
    let (status, result) = match ending {
        Ending::Finished { status, result } => (status, Some(result)),
        Ending::Released => (TaskStatus::Queued, None),
        Ending::LeaseLost => {
            heartbeat.abort();
            tracing::warn!(%run, "lease lost; the run was abandoned");
            return;
        }
    };
    // The heartbeat goes on while the run is recorded: finishing, too, may wait out an outage.
    if status == TaskStatus::WaitingInput {
        record_clarification(&run_services, &claim.task, result.as_ref()).await;
    }
    // Batched with whatever else ends now; through an outage, the run's store retries until
    // the lease would expire.
    let completion = Completion::new(run.clone(), &options.name, status, result.clone());
    let finished = match batcher.finish(completion).await {
        Err(error) if error.is_retryable() => {
            run_services
                .store
                .call("finishing the run", |store| {
                    store.finish_run(&run, &options.name, status, result.clone())
                })
                .await
        }
        other => other.map(|finished| finished.task),
    };
    heartbeat.abort();
    match finished {
        Ok(_) => {}
        // Ended outside the run a moment before it finished (a cancel): that outcome stands.
        Err(error @ (StoreError::LeaseLost { .. } | StoreError::StatusConflict { .. })) => {
            tracing::info!(%run, %error, "the run no longer holds its task; its result is dropped");
        }
        Err(error) => match lease.lost() {
            Some(why) => abandon(services, options, &run, why),
            None => tracing::warn!(%run, %error, "finishing the run failed"),
        },
    }
}

/// A lost run stops without a result. Lost to an outage, it is released to the queue once the
/// store answers again (unless its lease expired and a worker re-queued it first).
fn abandon(services: &Services, options: &WorkerOptions, run: &RunRef, why: Lost) {
    match why {
        Lost::Taken => tracing::warn!(%run, "lease lost; the run was abandoned"),
        Lost::Outage => {
            tracing::warn!(%run, "the store was unreachable for the run's lease; the run stopped and its task goes back to the queue");
            tokio::spawn(release_when_reachable(
                Arc::clone(&services.store),
                run.clone(),
                options.name.clone(),
                options.lease,
            ));
        }
    }
}

/// How long a worker keeps trying to release a run lost to an outage.
const RELEASE_FOR: Duration = Duration::from_secs(600);

/// Releases a run that stopped during an outage back to the queue (not counted as an
/// interruption) once the store answers, for at most [`RELEASE_FOR`].
async fn release_when_reachable(
    store: Arc<dyn Store>,
    run: RunRef,
    worker: String,
    lease: Duration,
) {
    let give_up = tokio::time::Instant::now() + RELEASE_FOR;
    let mut delay = Duration::from_millis(200);
    loop {
        match store
            .finish_run(&run, &worker, TaskStatus::Queued, None)
            .await
        {
            Ok(_) => {
                tracing::info!(%run, "the store answers again: the run's task was released to the queue");
                return;
            }
            Err(error) if error.is_retryable() && tokio::time::Instant::now() < give_up => {
                tracing::debug!(%run, %error, "releasing the run failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min((lease / 4).max(Duration::from_millis(200)));
            }
            // Re-queued at its lease's expiry (or ended) meanwhile: nothing to release.
            Err(error) => {
                tracing::info!(%run, %error, "the run was not released");
                return;
            }
        }
    }
}

/// How long a stopped run may take to wind down (its sandbox commands are killed at once; a
/// model call in flight is not) before it is dropped.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Appends the agent's clarifying question to the task's conversation before the task starts
/// waiting, so the answer always comes after it and the run after the answer sees both.
async fn record_clarification(services: &RunServices, task: &Task, result: Option<&Value>) {
    let Some(question) = result
        .and_then(|r| r.pointer("/clarification/question"))
        .and_then(Value::as_str)
    else {
        return;
    };
    let author = services.model.name();
    if let Err(error) = services
        .store
        .call("recording the clarifying question", |store| {
            store.append_task_message(&task.id, MESSAGE_AGENT, question, &author)
        })
        .await
    {
        tracing::warn!(task = %task.id, %error, "cannot record the clarifying question");
    }
}

/// Renews the run's lease every third of it (sooner after a failed renewal). The run is lost
/// when the store says the run is no longer this worker's, or when the lease could not be
/// renewed before its deadline ([`RunLease::deadline`]): another worker may claim the task
/// once it expires, so the run must have stopped by then.
async fn heartbeat(store: Arc<dyn Store>, run: RunRef, worker: String, lease: Arc<RunLease>) {
    let every = (lease.lease() / 3).max(Duration::from_millis(100));
    let retry_every = (every / 4).max(Duration::from_millis(50));
    let mut next = tokio::time::Instant::now() + every;
    loop {
        let deadline = lease.deadline();
        tokio::time::sleep_until(next.min(deadline)).await;
        if tokio::time::Instant::now() >= lease.deadline() {
            tracing::warn!(%run, "the lease could not be renewed in time; the run stops");
            lease.lose(Lost::Outage);
            return;
        }
        let asked = tokio::time::Instant::now();
        match tokio::time::timeout_at(
            lease.deadline(),
            store.heartbeat(&run, &worker, lease.lease()),
        )
        .await
        {
            Ok(Ok(_)) => {
                lease.renewed(asked);
                next = asked + every;
            }
            Ok(Err(StoreError::LeaseLost { .. })) | Ok(Err(StoreError::NotFound { .. })) => {
                lease.lose(Lost::Taken);
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(%run, %error, "heartbeat failed; retrying");
                next = tokio::time::Instant::now() + retry_every;
            }
            // The loop looks at the deadline again.
            Err(_) => next = tokio::time::Instant::now(),
        }
    }
}

/// A failure before the agent loop: the result JSON of SPEC §5 and its status.
fn failed(task: &Task, model: &str, failure: Failure) -> Ending {
    let result = QuestionResult {
        task_id: task.id.clone(),
        kind: task.kind,
        outcome: QuestionOutcome::Failure { failure },
        usage: Usage {
            cost_usd: Some(0.0),
            ..Usage::default()
        },
        model: model.to_string(),
        sandbox: None,
        notices: vec![],
    };
    Ending::Finished {
        status: TaskStatus::Failed,
        result: serde_json::to_value(&result).unwrap_or(Value::Null),
    }
}

fn setup_failure(error: SetupError) -> Failure {
    match error {
        SetupError::Usage(message) => Failure {
            code: FailureCode::RepositoryError,
            message,
        },
        SetupError::Infrastructure(message) => Failure {
            code: FailureCode::Infrastructure,
            message,
        },
        SetupError::Quota(message) => Failure {
            code: FailureCode::QuotaExceeded,
            message,
        },
    }
}

async fn run_task(
    services: &RunServices,
    options: &WorkerOptions,
    claim: &Claim,
    cancel: CancelFlag,
) -> Ending {
    let task = &claim.task;
    let model_name = services.model.name();
    match task.kind {
        TaskKind::Question => {}
        // A maintenance is a change Warden makes itself: the same pinning, view, proposal and
        // publication.
        TaskKind::Change | TaskKind::Maintain => {
            return change_task::run_change_task(services, options, claim, cancel).await
        }
    }
    let specs = match repo_specs(&services.store, &task.repos).await {
        Ok(specs) => specs,
        Err(failure) => return failed(task, &model_name, failure),
    };
    let transcript = match transcript(&services.store, task).await {
        Ok(transcript) => transcript,
        Err(failure) => return failed(task, &model_name, failure),
    };

    // Pinning, snapshots and the sandbox run git and set up namespaces: blocking work.
    let config = Arc::clone(&services.config);
    let repo_store = services.repos.clone();
    let scratch = run_scratch(&config.home, &task.id, claim.run_number);
    let scratch_for_setup = scratch.clone();
    let sandboxes = repo_sandboxes(&services.store, &task.repos).await;
    let task_id = task.id.to_string();
    let setup = tokio::task::spawn_blocking(move || {
        let mut repos = question::pin_all(&repo_store, &specs, &|line| tracing::debug!("{line}"))?;
        for (repo, sandbox) in repos.iter_mut().zip(sandboxes) {
            repo.sandbox = sandbox;
        }
        let sandbox = TaskSandbox::open(&config, &task_id, &repos, &scratch_for_setup);
        Ok::<_, SetupError>((repos, sandbox))
    })
    .await;
    let (mut repos, sandbox) = match setup {
        Ok(Ok(setup)) => setup,
        Ok(Err(error)) => return failed(task, &model_name, setup_failure(error)),
        Err(error) => {
            return failed(
                task,
                &model_name,
                Failure {
                    code: FailureCode::Infrastructure,
                    message: format!("repository setup failed: {error}"),
                },
            )
        }
    };

    stored_notices(task, &mut repos);
    // Record the commits, so every later run of this task uses the same ones.
    if task.repos.iter().any(|r| r.commit.is_none()) {
        let pinned: Vec<TaskRepo> = task
            .repos
            .iter()
            .zip(&repos)
            .map(|(stored, repo)| TaskRepo {
                commit: Some(repo.pinned.commit.clone()),
                ..stored.clone()
            })
            .collect();
        let run = claim.run();
        if let Err(error) = services
            .store
            .call("recording the pinned commits", |store| {
                store.pin_task_repos(&run, &options.name, pinned.clone())
            })
            .await
        {
            if let Ok(sandbox) = sandbox {
                sandbox.close();
            }
            return match error {
                StoreError::LeaseLost { .. } => Ending::LeaseLost,
                other => failed(
                    task,
                    &model_name,
                    Failure {
                        code: FailureCode::Infrastructure,
                        message: format!("cannot record the pinned commits: {other}"),
                    },
                ),
            };
        }
    }

    let (events, drain) = store_events(
        services.store.clone(),
        task.id.clone(),
        services.redactor.clone(),
    );
    events.emit(Event::TaskStarted {
        task_id: task.id.clone(),
        kind: task.kind,
        model: model_name.clone(),
        manifest: question::manifest(&repos),
    });

    let ending = match sandbox {
        Ok(sandbox) => {
            // Cancelling the task kills the commands running in its sandbox at once.
            if let Some(control) = services.running.control(&task.id) {
                control.on_stop(sandbox.canceller());
            }
            let ending = run_question(
                services,
                claim,
                &repos,
                &sandbox,
                &transcript,
                &events,
                cancel,
            )
            .await;
            sandbox.close();
            ending
        }
        Err(failure) => failed(task, &model_name, failure),
    };
    end_run(ending, events, drain, &scratch).await
}

/// Ends a run's setup: its scratch directory is removed and the run's events are all stored
/// before it is finished (the store stores its `task_finished`, terminal or waiting for a
/// person, in the transaction that finishes it).
async fn end_run(
    ending: Ending,
    events: crate::journal::StoreEvents,
    drain: crate::journal::EventDrain,
    scratch: &std::path::Path,
) -> Ending {
    let _ = warden_sandbox::remove_scratch(scratch);
    drain.finish(events).await;
    ending
}

#[allow(clippy::too_many_arguments)]
async fn run_question(
    services: &RunServices,
    claim: &Claim,
    repos: &[question::TaskRepo],
    sandbox: &TaskSandbox,
    transcript: &[TranscriptEntry],
    events: &crate::journal::StoreEvents,
    cancel: CancelFlag,
) -> Ending {
    let task = &claim.task;
    let run = claim.run();
    let model_name = services.model.name();
    let mut tools = match question::question_tools(&services.config, repos, sandbox) {
        Ok(tools) => tools,
        Err(error) => return failed(task, &model_name, setup_failure(error)),
    };
    // The operator's MCP servers, in this task's view; ended before the view closes.
    let mcp = match sandbox.start_mcp(&services.config).await {
        Ok(mcp) => mcp,
        Err(failure) => return failed(task, &model_name, failure),
    };
    tools.extend(mcp.tools());
    let (inbox, plumbing) = match run_plumbing(services, task, &run).await {
        Ok(mut plumbing) => (plumbing.inbox(&services.store, task), plumbing),
        Err(message) => {
            return failed(
                task,
                &model_name,
                Failure {
                    code: FailureCode::Infrastructure,
                    message,
                },
            )
        }
    };
    let RunPlumbing {
        model,
        ledger,
        mut journal,
        replaying,
        ..
    } = plumbing;
    if replaying > 0 {
        tracing::info!(%run, replaying, "resuming from the journal of an earlier run");
    }
    // The conversation ends with what this run answers: the prompt, or the latest answer.
    let (request, earlier) = match transcript.split_last() {
        Some((last, earlier)) if last.role == Role::User => (last.text.as_str(), earlier),
        _ => (task.prompt.as_str(), transcript),
    };
    let report: RunReport = question::run_question(
        QuestionRun {
            config: &services.config,
            model: &model,
            task_id: &task.id,
            follow_up_to: task.follow_up_to.as_ref(),
            repos,
            transcript: earlier,
            question: request,
            journal: &mut journal,
            events,
            clock: &SystemClock,
            cancel,
            ledger: Some(&ledger),
            inbox: Some(&inbox),
        },
        &tools,
    )
    .await;
    drop(tools);
    mcp.shutdown().await;
    let mut report = question::question_report(&task.id, &model, Some(sandbox.backend), report);
    report
        .result
        .notices
        .splice(0..0, question::repo_notices(repos));
    let result = services
        .redactor
        .json(serde_json::to_value(&report.result).unwrap_or(Value::Null));
    Ending::Finished {
        status: report.status,
        result,
    }
}

/// What a run of any kind talks through: the model (answering from an earlier run's journaled
/// decisions first), the ledger checking budgets before every call, and the run's journal.
pub(crate) struct RunPlumbing {
    pub model: ReplayModel,
    pub ledger: StoreLedger,
    pub journal: StoreJournal,
    /// Decisions an earlier run journaled that this one replays.
    pub replaying: usize,
    /// Where the replayed run delivered the messages sent to the task.
    pub deliveries: crate::inbox::Deliveries,
}

impl RunPlumbing {
    /// The run's inbox: the messages sent to the task, delivered where the replayed run
    /// delivered them, the others once its decisions are used up.
    pub(crate) fn inbox(&mut self, store: &RunStore, task: &Task) -> crate::inbox::StoreInbox {
        crate::inbox::StoreInbox::new(
            store.clone(),
            task.id.clone(),
            Arc::clone(&self.journal.model_calls),
            std::mem::take(&mut self.deliveries),
            self.replaying as u64,
        )
    }
}

pub(crate) async fn run_plumbing(
    services: &RunServices,
    task: &Task,
    run: &RunRef,
) -> Result<RunPlumbing, String> {
    let (recorded, deliveries) = earlier_decisions(&services.store, run).await?;
    let replaying = recorded.len();
    let model = ReplayModel::new(Arc::clone(&services.model), recorded);
    let ledger = StoreLedger {
        store: services.store.clone(),
        clock: Arc::new(warden_store::SystemClock),
        task: task.id.clone(),
        run_number: run.number,
        per_task: Budget {
            max_tokens: services.config.limits.max_tokens,
            max_cost_micro_usd: services.config.limits.max_cost_micro_usd,
        },
        per_day: Budget {
            max_tokens: services.service_config.serve.max_tokens_per_day,
            max_cost_micro_usd: services.service_config.serve.max_cost_micro_usd_per_day,
        },
        replayed: Arc::clone(&model.replayed),
        seen: AtomicU64::new(0),
    };
    let journal = RunJournal::open(services.store.clone(), run.clone())
        .await
        .map_err(|error| format!("cannot open the run journal: {error}"))?;
    Ok(RunPlumbing {
        model,
        ledger,
        journal: StoreJournal::new(journal, services.redactor.clone()),
        replaying,
        deliveries,
    })
}

/// The longest clean run of model decisions journaled by an earlier run of the task. A journal
/// the store cannot read now (an outage that outlasted the lease) stops the run rather than
/// paying for its decisions again.
async fn earlier_decisions(
    store: &RunStore,
    run: &RunRef,
) -> Result<(Vec<RecordedDecision>, crate::inbox::Deliveries), String> {
    let mut best = (Vec::new(), crate::inbox::Deliveries::new());
    for number in 1..run.number {
        let earlier = RunRef {
            task: run.task.clone(),
            number,
        };
        match store
            .call("reading an earlier run's journal", |store| {
                store.journal(&earlier)
            })
            .await
        {
            Ok(entries) => {
                if warden_store::journal::verify_chain(&entries).is_err() {
                    continue;
                }
                let decisions = recorded_decisions(&entries);
                if decisions.len() > best.0.len() {
                    best = (decisions, crate::inbox::recorded_deliveries(&entries));
                }
            }
            Err(error) if error.is_retryable() => {
                return Err(format!("cannot read the journal of run {earlier}: {error}"))
            }
            Err(error) => tracing::warn!(run = %earlier, %error, "cannot read an earlier journal"),
        }
    }
    Ok(best)
}

/// The registered repositories' own mounts and prepare commands, in the task's order
/// (none for one that cannot be read: pinning reports that).
async fn repo_sandboxes(
    store: &RunStore,
    repos: &[TaskRepo],
) -> Vec<warden_engine::toolchain::RepoSandbox> {
    let mut sandboxes = Vec::with_capacity(repos.len());
    for repo in repos {
        let registered = store
            .call("reading a repository", |store| store.get_repo(&repo.name))
            .await;
        sandboxes.push(match registered {
            Ok(Some(registered)) => warden_engine::toolchain::RepoSandbox {
                mounts: registered.mounts,
                prepare: registered.prepare,
            },
            _ => warden_engine::toolchain::RepoSandbox::default(),
        });
    }
    sandboxes
}

/// The notices the front door stored with the task go with its first repository (the
/// result lists every repository's notices in order).
pub(crate) fn stored_notices(task: &Task, repos: &mut [question::TaskRepo]) {
    let notices = warden_engine::change::ChangeOptions::from_metadata(&task.metadata)
        .map(|options| options.notices)
        .unwrap_or_default();
    if let Some(first) = repos.first_mut() {
        first.notices.splice(0..0, notices);
    }
}

/// The task's conversation, oldest first, ending with what this run answers: each earlier
/// task of the follow-up chain (its request, the questions and answers of its conversation,
/// the agent's final reply), then this task's request and conversation. A retry carries the
/// conversation of the task it repeats. A question the agent asked that nobody answered yet
/// (a run interrupted right after asking) is left out: the run asks again.
async fn transcript<C: StoreCalls + ?Sized>(
    store: &C,
    task: &Task,
) -> Result<Vec<TranscriptEntry>, Failure> {
    let mut entries = chain_transcript(store, task).await?;
    entries.push(TranscriptEntry {
        role: Role::User,
        text: task.prompt.clone(),
    });
    entries.extend(conversation(store, task, true).await?);
    while entries.last().is_some_and(|e| e.role == Role::Agent) {
        entries.pop();
    }
    Ok(entries)
}

/// The conversation of the tasks `task` follows up, oldest first: each one's request, the
/// questions and answers of its conversation, and the agent's final reply.
pub(crate) async fn chain_transcript<C: StoreCalls + ?Sized>(
    store: &C,
    task: &Task,
) -> Result<Vec<TranscriptEntry>, Failure> {
    let infrastructure = |message: String| Failure {
        code: FailureCode::Infrastructure,
        message,
    };
    let mut chain = Vec::new();
    let mut next = task.follow_up_to.clone();
    while let Some(id) = next.take() {
        if chain.len() >= MAX_CHAIN {
            break;
        }
        let earlier = store
            .call("reading an earlier task", |store| store.get_task(&id))
            .await
            .map_err(|e| infrastructure(format!("cannot read task {id}: {e}")))?
            .ok_or_else(|| infrastructure(format!("the task {id} this one follows up is gone")))?;
        next = earlier.follow_up_to.clone();
        chain.push(earlier);
    }
    let mut entries = Vec::new();
    for earlier in chain.iter().rev() {
        entries.push(TranscriptEntry {
            role: Role::User,
            text: earlier.prompt.clone(),
        });
        entries.extend(conversation(store, earlier, false).await?);
        if let Some(reply) = earlier.result.as_ref().and_then(reply_of) {
            if entries.last().is_none_or(|e| e.text != reply) {
                entries.push(TranscriptEntry {
                    role: Role::Agent,
                    text: reply,
                });
            }
        }
    }
    Ok(entries)
}

/// Follow-up chains and retry chains longer than this are cut (oldest first).
const MAX_CHAIN: usize = 50;

/// The messages of a task's conversation (questions asked, answers given, messages sent while
/// it ran), after those of the tasks it retries. For the task's `own_run`, the messages sent
/// to it while it ran are left to its inbox.
async fn conversation<C: StoreCalls + ?Sized>(
    store: &C,
    task: &Task,
    own_run: bool,
) -> Result<Vec<TranscriptEntry>, Failure> {
    let mut retried = vec![task.id.clone()];
    let mut next = task.retry_of.clone();
    while let Some(id) = next.take() {
        if retried.len() >= MAX_CHAIN {
            break;
        }
        next = store
            .call("reading a retried task", |store| store.get_task(&id))
            .await
            .ok()
            .flatten()
            .and_then(|t| t.retry_of);
        retried.push(id);
    }
    let mut entries = Vec::new();
    for id in retried.iter().rev() {
        let messages = store
            .call("reading a task's conversation", |store| {
                store.task_messages(id)
            })
            .await
            .map_err(|e| Failure {
                code: FailureCode::Infrastructure,
                message: format!("cannot read the conversation of task {id}: {e}"),
            })?;
        // The task's own messages sent while it ran reach its run through its inbox, where
        // an earlier run delivered them; those of the tasks it retries are conversation.
        let own = own_run && *id == task.id;
        entries.extend(
            messages
                .into_iter()
                .filter(|m| !(own && m.role == MESSAGE_STEER))
                .map(|m| TranscriptEntry {
                    role: if m.role == MESSAGE_AGENT {
                        Role::Agent
                    } else {
                        Role::User
                    },
                    text: m.text,
                }),
        );
    }
    Ok(entries)
}

/// The agent's reply in a result: the answer's or the change's summary, or the clarifying
/// question.
fn reply_of(result: &Value) -> Option<String> {
    result
        .pointer("/answer/summary")
        .or_else(|| result.pointer("/proposal/summary"))
        .or_else(|| result.pointer("/summary"))
        .or_else(|| result.pointer("/clarification/question"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A worker name unique to this process (`warden worker`).
pub fn process_worker_name() -> String {
    let mut random = [0u8; 4];
    let _ = getrandom::fill(&mut random);
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    format!(
        "worker-{host}-{}-{}",
        std::process::id(),
        hex::encode(random)
    )
}

/// Whether workers can run tasks of this kind (all of them: questions, changes and
/// maintenance).
pub fn runnable(kind: TaskKind) -> bool {
    match kind {
        TaskKind::Question | TaskKind::Change | TaskKind::Maintain => true,
    }
}

/// The scratch directory of run `run` of `task` under `home`. The directories of its earlier
/// runs are removed first: a run only starts again once the earlier one is over (its worker
/// died or its lease was lost), and a killed Warden leaves its views there, mounts included
/// ([`warden_sandbox::remove_scratch`] detaches them).
pub(crate) fn run_scratch(
    home: &std::path::Path,
    task: &warden_protocol::TaskId,
    run: u32,
) -> std::path::PathBuf {
    let scratch = home.join("scratch");
    for earlier in 1..run {
        let dir = scratch.join(format!("{task}-{earlier}"));
        if let Err(error) = warden_sandbox::remove_scratch(&dir) {
            tracing::warn!(%error, "cannot remove the scratch of an earlier run");
        }
    }
    scratch.join(format!("{task}-{run}"))
}

#[cfg(test)]
mod scratch_tests {
    use super::*;

    #[test]
    fn a_runs_scratch_replaces_the_earlier_runs_left_behind() {
        let home = tempfile::tempdir().unwrap();
        let task: warden_protocol::TaskId = "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9".parse().unwrap();
        for run in [1, 2] {
            let left = home
                .path()
                .join("scratch")
                .join(format!("{task}-{run}/view"));
            std::fs::create_dir_all(&left).unwrap();
            std::fs::write(left.join("file"), "left by a killed run").unwrap();
        }
        let other = home.path().join("scratch/tsk_01HZY8Q6K9V2M3N4P5R6S7T8VA-1");
        std::fs::create_dir_all(&other).unwrap();
        let scratch = run_scratch(home.path(), &task, 3);
        assert_eq!(
            scratch,
            home.path().join("scratch").join(format!("{task}-3"))
        );
        for run in [1, 2] {
            assert!(!home
                .path()
                .join("scratch")
                .join(format!("{task}-{run}"))
                .exists());
        }
        assert!(other.exists(), "another task's scratch is left alone");
    }
}

#[cfg(test)]
mod conversation_tests {
    use super::*;
    use serde_json::json;
    use warden_store::{ClaimFilter, NewTask};

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("w.db").display());
        let store = warden_store::open(&url).await.unwrap();
        store
            .register_repo(warden_store::NewRepo {
                name: "app".into(),
                source: dir.path().display().to_string(),
                branch: None,
                checks: vec![],
                mounts: vec![],
                prepare: vec![],
                created_by: "root".into(),
            })
            .await
            .unwrap();
        (dir, store)
    }

    async fn create(
        store: &dyn Store,
        id: &str,
        prompt: &str,
        follow_up_to: Option<&Task>,
        retry_of: Option<&Task>,
    ) -> Task {
        store
            .create_task(
                NewTask {
                    id: id.parse().unwrap(),
                    kind: TaskKind::Question,
                    owner: "alice".into(),
                    prompt: prompt.into(),
                    repos: vec![TaskRepo::named("app")],
                    priority: 0,
                    follow_up_to: follow_up_to.map(|t| t.id.clone()),
                    retry_of: retry_of.map(|t| t.id.clone()),
                    metadata: json!({}),
                    callback_url: None,
                },
                None,
            )
            .await
            .unwrap()
            .task()
            .clone()
    }

    /// Runs the task once into `status`.
    async fn run(store: &dyn Store, status: TaskStatus, result: Value) -> Task {
        let claim = store
            .claim("w", Duration::from_secs(30), &ClaimFilter::default())
            .await
            .unwrap()
            .unwrap();
        store
            .finish_run(&claim.run(), "w", status, Some(result))
            .await
            .unwrap()
    }

    fn texts(entries: &[TranscriptEntry]) -> Vec<(Role, &str)> {
        entries.iter().map(|e| (e.role, e.text.as_str())).collect()
    }

    #[tokio::test]
    async fn answers_retries_and_follow_ups_carry_the_whole_conversation() {
        let (_dir, store) = store().await;
        let store = store.as_ref();
        let first = create(
            store,
            "tsk_01M8VBQV37BCXJMMGC5Y911WE0",
            "deploy?",
            None,
            None,
        )
        .await;
        assert_eq!(
            texts(&transcript(store, &first).await.unwrap()),
            [(Role::User, "deploy?")]
        );
        // The agent asks, the owner answers, the next run fails.
        run(
            store,
            TaskStatus::WaitingInput,
            json!({"clarification": {"question": "which env?"}}),
        )
        .await;
        store
            .append_task_message(&first.id, MESSAGE_AGENT, "which env?", "m")
            .await
            .unwrap();
        let answered = store
            .answer_task(&first.id, "staging", "alice")
            .await
            .unwrap();
        let resumed = [
            (Role::User, "deploy?"),
            (Role::Agent, "which env?"),
            (Role::User, "staging"),
        ];
        assert_eq!(texts(&transcript(store, &answered).await.unwrap()), resumed);
        let failed = run(store, TaskStatus::Failed, json!({})).await;
        // A retry repeats the request with its conversation.
        let retry = create(
            store,
            "tsk_01M8VBQV37BCXJMMGC5Y911WE1",
            "deploy?",
            None,
            Some(&failed),
        )
        .await;
        assert_eq!(texts(&transcript(store, &retry).await.unwrap()), resumed);
        // The retry asks again; until the answer comes, that question is left out.
        run(
            store,
            TaskStatus::WaitingInput,
            json!({"clarification": {"question": "sure?"}}),
        )
        .await;
        store
            .append_task_message(&retry.id, MESSAGE_AGENT, "sure?", "m")
            .await
            .unwrap();
        assert_eq!(texts(&transcript(store, &retry).await.unwrap()), resumed);
        let retry = store.answer_task(&retry.id, "yes", "alice").await.unwrap();
        assert_eq!(
            texts(&transcript(store, &retry).await.unwrap()).last(),
            Some(&(Role::User, "yes"))
        );
        run(
            store,
            TaskStatus::Completed,
            json!({"answer": {"summary": "run make deploy"}}),
        )
        .await;
        let done = store.get_task(&retry.id).await.unwrap().unwrap();
        // A follow-up sees all of it, then its own question.
        let follow_up = create(
            store,
            "tsk_01M8VBQV37BCXJMMGC5Y911WE2",
            "and prod?",
            Some(&done),
            None,
        )
        .await;
        assert_eq!(
            texts(&transcript(store, &follow_up).await.unwrap()),
            [
                (Role::User, "deploy?"),
                (Role::Agent, "which env?"),
                (Role::User, "staging"),
                (Role::Agent, "sure?"),
                (Role::User, "yes"),
                (Role::Agent, "run make deploy"),
                (Role::User, "and prod?"),
            ]
        );
    }
}
