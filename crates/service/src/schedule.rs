//! `[[schedules]]`: maintenance `warden serve` submits on its own. Each minute (UTC) the
//! scheduler finds the entries whose cron expression is due and, for each, submits a `maintain`
//! task through [`TaskService::submit`] as the system principal [`PRINCIPAL`] (an operator),
//! unless the repository already has `max_open_proposals` maintenance tasks open — queued or
//! running (a proposal on its way), or waiting for approval (a proposal not decided, or a
//! publication that failed and waits) — in which case the run is skipped with a warning. With
//! `refresh`, the repository's mirror is fetched and the snapshot of its default branch written
//! (what registering it does, [`crate::warm`]), keeping its newest [`KEEP_SNAPSHOTS`] snapshots.
//!
//! Exactly once per due minute without any state of its own: the submission carries the
//! idempotency key `schedule/<index>/<repo>/<minute>`, and the store keeps idempotency keys
//! durably, per owner, shared by every process on the database (a primary key, so concurrent
//! submissions with one key make one task). Two `warden serve` processes on one Postgres, or a
//! restart within the due minute, submit one task. A process that was down (or so busy that it
//! overslept) catches up on the minutes of the last hour it missed since it last looked, never
//! on the time before it started.
//!
//! An `advisories_update` entry submits no task: when due it runs `warden advisories update`
//! in this process (`warden_engine::maintain::update`), each database replaced only once its
//! new copy loads, and logs what each did. Two processes on one database each update their own
//! copies (a lock beside each database keeps two updates of one directory apart).
//!
//! A task the schedule submitted is owned by [`PRINCIPAL`], which no token or web user can be
//! (`:` is not allowed in their names): only an admin sees it and decides its approval, and a
//! publishing schedule therefore only ever waits for an admin's hash-bound approval.

use std::sync::Arc;

use crate::config::schedule::{minute_text, Schedule, ScheduleAction};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use warden_engine::config::Config;
use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_store::{Store, StoreError, TaskQuery};

use crate::tasks::{Idempotency, Principal, Role, Submission, TaskService};

/// The owner of the tasks schedules submit: an operator no token or web user can be.
pub const PRINCIPAL: &str = "warden:schedule";

/// Snapshots of a refreshed repository kept: the new one and the one before.
pub const KEEP_SNAPSHOTS: usize = 2;

/// How far back a scheduler catches up on minutes it missed, in minutes.
pub const MAX_CATCH_UP_MINUTES: i64 = 60;

/// What one due entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRun {
    /// The entry's index in `[[schedules]]`.
    pub index: usize,
    pub repo: String,
    /// The due minute (minutes since the Unix epoch, UTC).
    pub minute: i64,
    pub outcome: RunOutcome,
    /// The refresh's commit and snapshots removed, or why it failed; `None` without `refresh`.
    pub refreshed: Option<Result<crate::warm::Refreshed, String>>,
}

/// Whether a due entry submitted its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Submitted; `replayed`: the due minute's task existed already (another process, or this
    /// one before a restart, submitted it).
    Submitted { task: TaskId, replayed: bool },
    /// The repository had `open` maintenance tasks open, at least `max_open_proposals`.
    Skipped { open: u32 },
    /// The submission was refused (e.g. the repository is not registered), or the store failed.
    Failed(String),
    /// An `advisories_update` entry ran: how many databases were replaced, and how many kept
    /// their old copy because the update failed.
    AdvisoriesUpdated { updated: usize, failed: usize },
}

/// Runs `[[schedules]]` over a [`TaskService`].
pub struct Scheduler {
    tasks: TaskService,
    schedules: Arc<Vec<Schedule>>,
    principal: Principal,
    /// The last minute looked at.
    last_minute: Option<i64>,
    /// What `advisories_update` entries update (`[maintain]`, `[egress]`).
    config: Option<Arc<Config>>,
}

impl Scheduler {
    pub fn new(tasks: TaskService, schedules: Vec<Schedule>) -> Scheduler {
        Scheduler {
            tasks,
            schedules: Arc::new(schedules),
            principal: Principal {
                name: PRINCIPAL.into(),
                role: Role::Operator,
            },
            last_minute: None,
            config: None,
        }
    }

    /// The configuration `advisories_update` entries read their databases from; without it
    /// such an entry fails.
    pub fn with_config(mut self, config: Arc<Config>) -> Scheduler {
        self.config = Some(config);
        self
    }

    /// Runs what is due at `now_ms` (milliseconds since the epoch): the current minute the
    /// first time, afterwards every minute since the last call (at most
    /// [`MAX_CATCH_UP_MINUTES`]), each once.
    pub async fn tick(&mut self, now_ms: i64) -> Vec<ScheduleRun> {
        let minute = now_ms.div_euclid(60_000);
        let first = match self.last_minute {
            None => minute,
            Some(last) if last >= minute => return Vec::new(),
            Some(last) => (last + 1).max(minute - MAX_CATCH_UP_MINUTES + 1),
        };
        self.last_minute = Some(minute);
        let mut runs = Vec::new();
        for due in first..=minute {
            runs.extend(self.run_minute(due).await);
        }
        runs
    }

    /// Runs the entries due in `minute` (minutes since the epoch): every submission first,
    /// then the refreshes.
    pub async fn run_minute(&self, minute: i64) -> Vec<ScheduleRun> {
        let mut runs = Vec::new();
        for (index, schedule) in self.schedules.iter().enumerate() {
            if !schedule.cron.matches_minute(minute) {
                continue;
            }
            let outcome = match schedule.action {
                ScheduleAction::Maintain => self.submit(index, schedule, minute).await,
                ScheduleAction::AdvisoriesUpdate => self.update_advisories().await,
            };
            match &outcome {
                RunOutcome::Submitted { task, replayed } => tracing::info!(
                    schedule = index,
                    repo = %schedule.repo,
                    due = %minute_text(minute),
                    task = %task,
                    replayed,
                    "scheduled maintenance submitted"
                ),
                RunOutcome::Skipped { open } => tracing::warn!(
                    schedule = index,
                    repo = %schedule.repo,
                    due = %minute_text(minute),
                    open,
                    max_open_proposals = schedule.max_open_proposals,
                    "scheduled maintenance skipped: the repository has as many maintenance \
                     proposals open as allowed (decide them)"
                ),
                RunOutcome::Failed(error) => tracing::warn!(
                    schedule = index,
                    repo = %schedule.repo,
                    due = %minute_text(minute),
                    %error,
                    "scheduled maintenance could not be submitted"
                ),
                RunOutcome::AdvisoriesUpdated { updated, failed } => tracing::info!(
                    schedule = index,
                    due = %minute_text(minute),
                    updated,
                    failed,
                    "scheduled advisory database update ran"
                ),
            }
            runs.push(ScheduleRun {
                index,
                repo: schedule.repo.clone(),
                minute,
                outcome,
                refreshed: None,
            });
        }
        for run in &mut runs {
            let schedule = &self.schedules[run.index];
            if schedule.refresh && schedule.action == ScheduleAction::Maintain {
                let refreshed = self.refresh(&schedule.repo).await;
                match &refreshed {
                    Ok(done) => tracing::info!(
                        repo = %schedule.repo,
                        commit = %done.commit,
                        removed_snapshots = done.removed_snapshots,
                        "repository refreshed"
                    ),
                    Err(error) => {
                        tracing::warn!(repo = %schedule.repo, %error, "refreshing failed")
                    }
                }
                run.refreshed = Some(refreshed);
            }
        }
        runs
    }

    async fn submit(&self, index: usize, schedule: &Schedule, minute: i64) -> RunOutcome {
        let store = self.tasks.store();
        match open_maintenance(store.as_ref(), &schedule.repo).await {
            Ok(open) if open >= schedule.max_open_proposals => {
                return RunOutcome::Skipped { open };
            }
            Ok(_) => {}
            Err(error) => return RunOutcome::Failed(format!("counting open proposals: {error}")),
        }
        let mut submission = Submission::new(
            TaskKind::Maintain,
            schedule.maintain.prompt(),
            vec![schedule.repo.clone()],
        );
        submission.checks = schedule.checks.clone();
        submission.publish = Some(schedule.publish);
        submission.maintain = Some(schedule.maintain.clone());
        submission.metadata = Some(json!({
            "schedule": {"index": index, "due": minute_text(minute)}
        }));
        // What the key stands for: this entry's request in this minute.
        let request = json!({
            "repo": schedule.repo,
            "select": schedule.maintain.selection(),
            "checks": schedule.checks,
            "publish": schedule.publish,
            "due": minute_text(minute),
        });
        let key = format!("schedule/{index}/{}/{}", schedule.repo, minute_text(minute));
        let idempotency = Idempotency::new(key, request.to_string().as_bytes());
        match self
            .tasks
            .submit(&self.principal, submission, Some(idempotency))
            .await
        {
            Ok(submitted) => RunOutcome::Submitted {
                task: submitted.task.id,
                replayed: submitted.replayed,
            },
            Err(error) => RunOutcome::Failed(error.to_string()),
        }
    }

    /// `warden advisories update` in this process; each database that fails keeps its old copy
    /// and is logged.
    async fn update_advisories(&self) -> RunOutcome {
        let Some(config) = &self.config else {
            return RunOutcome::Failed("no configuration to update advisory databases from".into());
        };
        let now = || u64::try_from(now_ms()).unwrap_or(0);
        let report = match warden_engine::maintain::update::update(config, &now, &|_| {}).await {
            Ok(report) => report,
            Err(error) => return RunOutcome::Failed(error),
        };
        for database in &report.databases {
            match &database.outcome {
                warden_engine::maintain::update::UpdateOutcome::Updated(fetched) => tracing::info!(
                    database = %database.name,
                    path = %database.path.display(),
                    snapshot = %fetched.snapshot,
                    advisories = fetched.advisories,
                    "advisory database updated"
                ),
                warden_engine::maintain::update::UpdateOutcome::Failed { error } => tracing::warn!(
                    database = %database.name,
                    path = %database.path.display(),
                    %error,
                    "advisory database not updated; its old copy is kept"
                ),
            }
        }
        let failed = report.failed();
        RunOutcome::AdvisoriesUpdated {
            updated: report.databases.len() - failed,
            failed,
        }
    }

    async fn refresh(&self, repo: &str) -> Result<crate::warm::Refreshed, String> {
        let warmer = match self.tasks.warmer() {
            Some(warmer) => warmer.clone(),
            None => match self.tasks.repo_store() {
                Some(repos) => crate::warm::Warmer::new(repos.clone()),
                None => return Err("no repository store to refresh into".into()),
            },
        };
        warmer
            .refresh(self.tasks.store().as_ref(), repo, KEEP_SNAPSHOTS)
            .await
    }
}

/// Maintenance tasks of `repo` (any owner's) that hold or will hold an undecided proposal:
/// queued, running, testing, or waiting for approval.
pub async fn open_maintenance(store: &dyn Store, repo: &str) -> Result<u32, StoreError> {
    let mut open = 0;
    for status in [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Testing,
        TaskStatus::WaitingApproval,
    ] {
        let mut before = None;
        loop {
            let page = store
                .list_tasks(TaskQuery {
                    owner: None,
                    status: Some(status),
                    before: before.clone(),
                    limit: 500,
                })
                .await?;
            open += page
                .iter()
                .filter(|t| t.kind == TaskKind::Maintain && t.repos.iter().any(|r| r.name == repo))
                .count() as u32;
            match page.last() {
                Some(last) if page.len() == 500 => before = Some(last.id.clone()),
                _ => break,
            }
        }
    }
    Ok(open)
}

/// Starts the scheduler of `schedules` (none: nothing to start), looking each minute (UTC)
/// until `stopped` turns true. Warns now of entries naming repositories not registered yet:
/// their runs fail (with a log line) until they are.
pub fn spawn(
    tasks: TaskService,
    config: Arc<Config>,
    schedules: Vec<Schedule>,
    mut stopped: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    if schedules.is_empty() {
        return None;
    }
    Some(tokio::spawn(async move {
        for (index, schedule) in schedules.iter().enumerate() {
            if schedule.action == ScheduleAction::AdvisoriesUpdate {
                let next = schedule.cron.next_after(now_ms().div_euclid(60_000));
                tracing::info!(
                    schedule = index,
                    next = %next.map(minute_text).unwrap_or_default(),
                    "advisory database update scheduled"
                );
                continue;
            }
            match tasks.store().get_repo(&schedule.repo).await {
                Ok(Some(_)) => {}
                Ok(None) => tracing::warn!(
                    schedule = index,
                    repo = %schedule.repo,
                    "schedules[{index}] names a repository that is not registered; its runs \
                     fail until it is"
                ),
                Err(error) => tracing::warn!(%error, "cannot read the registered repositories"),
            }
            let next = schedule.cron.next_after(now_ms().div_euclid(60_000));
            tracing::info!(
                schedule = index,
                repo = %schedule.repo,
                next = %next.map(minute_text).unwrap_or_default(),
                "maintenance scheduled"
            );
        }
        let mut scheduler = Scheduler::new(tasks, schedules).with_config(config);
        loop {
            let now = now_ms();
            scheduler.tick(now).await;
            // A little past the next minute's start, so its minute is the one seen.
            let wait = 60_000 - now_ms().rem_euclid(60_000) + 100;
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(wait as u64)) => {}
                _ = stopped.wait_for(|s| *s) => return,
            }
        }
    }))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
