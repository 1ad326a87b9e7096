//! Riding out store outages during a run. A run's lease is the time it may keep working
//! without telling the store it is alive; a store that cannot be reached must neither fail the
//! task nor let the run go on past its lease while another worker may claim the task.
//!
//! - [`RunLease`] tracks when the run's lease was last renewed. Its deadline is the renewal
//!   plus the lease minus a margin ([`lease_margin`]): past it, the run is lost and stops
//!   itself without recording anything; the task is then re-queued (released by the worker
//!   once the store answers again, or by lease expiry like any interrupted run), never failed.
//! - [`RunStore`] is the [`Store`] a run talks through: every call that fails with a retryable
//!   error (connection refused or reset, pool timeout, serialization failure) is retried with
//!   backoff until the deadline; then the run is lost and the error returned. A journal append
//!   or a usage record whose commit may have landed before the connection broke is checked
//!   against the store before it is retried, so a decision is journaled and charged once.
//!   Claims, heartbeats, re-queueing and the other calls of the worker loop pass straight
//!   through. Every method forwards to the wrapped store; a new method of the trait needs a
//!   forwarder here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use warden_protocol::{Event, TaskId, TaskStatus};
use warden_store::{
    ApiToken, Approval, ApprovalStatus, BoxFuture, Claim, ClaimFilter, Completion, Created,
    Decision, EventRecord, EventStream, Finished, IdempotencyKey, Intent, JournalEntry,
    NewApiToken, NewApproval, NewIntent, NewRepo, NewTask, Repository, Requeued, Run, RunRef,
    Spend, Store, StoreError, Task, TaskMessage, TaskQuery, TaskRepo, UsageEntry, UsageQuery,
    UsageSummary, UtcDay,
};

/// The first pause before a failed store call is tried again; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How long before its lease expires a run whose lease could not be renewed stops: a fifth of
/// the lease, but at least the time a stopped run may take to wind down (2 s, plus a second)
/// where the lease leaves room for it (up to half of it), so a stopping run is gone before
/// another worker can claim the task.
pub fn lease_margin(lease: Duration) -> Duration {
    const WIND_DOWN: Duration = Duration::from_secs(3);
    (lease / 5).max(WIND_DOWN.min(lease / 2))
}

/// Why a run stopped without a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The store said the run is no longer this worker's (re-queued, cancelled, finished).
    Taken,
    /// The store could not be reached before the lease would expire.
    Outage,
}

/// One run's lease as this process knows it (see the module docs).
pub struct RunLease {
    lease: Duration,
    margin: Duration,
    renewed: Mutex<Instant>,
    lost: Mutex<Option<Lost>>,
    is_lost: AtomicBool,
    wake: Notify,
}

impl std::fmt::Debug for RunLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLease")
            .field("lease", &self.lease)
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

impl RunLease {
    /// A lease of length `lease` granted (claimed or renewed) no earlier than `granted`.
    pub fn new(lease: Duration, granted: Instant) -> Arc<RunLease> {
        Arc::new(RunLease {
            lease,
            margin: lease_margin(lease),
            renewed: Mutex::new(granted),
            lost: Mutex::new(None),
            is_lost: AtomicBool::new(false),
            wake: Notify::new(),
        })
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// A renewal asked for at `at` succeeded (the store's expiry is at least `at` + lease).
    pub fn renewed(&self, at: Instant) {
        let mut renewed = self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        *renewed = (*renewed).max(at);
    }

    /// When the run must have stopped unless the lease is renewed before.
    pub fn deadline(&self) -> Instant {
        let renewed = *self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        renewed + self.lease.saturating_sub(self.margin)
    }

    /// Marks the run lost (the first reason stays) and wakes whoever waits in [`Self::lost_now`].
    pub fn lose(&self, why: Lost) {
        let mut lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner);
        if lost.is_none() {
            *lost = Some(why);
        }
        self.is_lost.store(true, Ordering::SeqCst);
        self.wake.notify_waiters();
    }

    pub fn lost(&self) -> Option<Lost> {
        *self.lost.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn is_lost(&self) -> bool {
        self.is_lost.load(Ordering::SeqCst)
    }

    /// Resolves once the run is lost.
    pub async fn lost_now(&self) {
        loop {
            let notified = self.wake.notified();
            if self.is_lost() {
                return;
            }
            notified.await;
        }
    }

    /// Runs `op` until it succeeds, fails for good, or the deadline passes on retryable
    /// errors (then the run is lost and the last error returned). A call still pending at the
    /// deadline is abandoned the same way.
    pub async fn retry<'a, T, F>(&self, what: &str, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut() -> BoxFuture<'a, Result<T, StoreError>>,
    {
        let mut delay = FIRST_BACKOFF;
        loop {
            match self.attempt(what, op()).await {
                Ok(value) => return Ok(value),
                Err(error) if error.is_retryable() => self.pause(what, error, &mut delay).await?,
                Err(error) => return Err(error),
            }
        }
    }

    /// One call, abandoned (and the run lost) if it is still pending at the deadline.
    async fn attempt<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if self.is_lost() {
            return Err(lost_error(what));
        }
        match tokio::time::timeout_at(self.deadline(), call).await {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(what, "a store call outlived the run's lease; the run stops");
                self.lose(Lost::Outage);
                Err(lost_error(what))
            }
        }
    }

    /// After a retryable `error`: waits `delay` (doubling it for next time) if the deadline
    /// allows, else loses the run and returns the error.
    async fn pause(
        &self,
        what: &str,
        error: StoreError,
        delay: &mut Duration,
    ) -> Result<(), StoreError> {
        let now = Instant::now();
        let deadline = self.deadline();
        if self.is_lost() || now >= deadline {
            if !self.is_lost() {
                tracing::warn!(what, %error, "the store stayed unreachable until the run's lease would expire; the run stops");
                self.lose(Lost::Outage);
            }
            return Err(error);
        }
        tracing::debug!(what, %error, "store call failed; retrying");
        tokio::select! {
            _ = tokio::time::sleep((*delay).min(deadline - now)) => {}
            _ = self.lost_now() => {}
        }
        *delay = (*delay * 2).min(MAX_BACKOFF);
        Ok(())
    }
}

/// What a store call of a lost run fails with.
fn lost_error(what: &str) -> StoreError {
    StoreError::Database {
        backend: "store",
        message: format!("{what}: the run lost its lease"),
        retryable: true,
        source: None,
    }
}

/// The store as one run sees it (see the module docs).
pub struct RunStore {
    inner: Arc<dyn Store>,
    lease: Arc<RunLease>,
}

impl RunStore {
    pub fn new(inner: Arc<dyn Store>, lease: Arc<RunLease>) -> RunStore {
        RunStore { inner, lease }
    }

    fn retry<'a, T: Send + 'a>(
        &'a self,
        op: impl FnMut() -> BoxFuture<'a, Result<T, StoreError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        Box::pin(async move { self.lease.retry("store call", op).await })
    }

    /// Appends a journal record once: after an attempt failed, the run's stored chain says
    /// whether it landed anyway (its commit acknowledgement lost) before it is sent again.
    async fn append_journal_once(
        &self,
        run: &RunRef,
        entry: JournalEntry,
    ) -> Result<(), StoreError> {
        const WHAT: &str = "appending to the run journal";
        let lease = &self.lease;
        let mut delay = FIRST_BACKOFF;
        loop {
            match lease
                .attempt(WHAT, self.inner.append_journal(run, entry.clone()))
                .await
            {
                Ok(()) => return Ok(()),
                Err(error) if error.is_retryable() => lease.pause(WHAT, error, &mut delay).await?,
                Err(error) => return Err(error),
            }
            let stored = lease
                .retry("reading the run journal", || self.inner.journal(run))
                .await?;
            if stored
                .iter()
                .any(|e| e.seq == entry.seq && e.hash == entry.hash)
            {
                return Ok(());
            }
        }
    }

    /// Records one usage entry once: the task's ledger entries are counted before, and after
    /// an attempt failed, so an entry whose commit landed anyway is not recorded again. Only
    /// the task's one live run records usage for it.
    async fn record_usage_once(&self, entry: UsageEntry) -> Result<(), StoreError> {
        const WHAT: &str = "recording usage";
        let lease = &self.lease;
        let count = || {
            lease.retry("reading the usage ledger", || {
                self.inner.spend_for_task(&entry.task)
            })
        };
        let before = count().await?.entries;
        let mut delay = FIRST_BACKOFF;
        loop {
            match lease
                .attempt(WHAT, self.inner.record_usage(entry.clone()))
                .await
            {
                Ok(()) => return Ok(()),
                Err(error) if error.is_retryable() => lease.pause(WHAT, error, &mut delay).await?,
                Err(error) => return Err(error),
            }
            if count().await?.entries > before {
                return Ok(());
            }
        }
    }
}

impl Store for RunStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn notices(&self) -> Vec<String> {
        self.inner.notices()
    }

    fn add_observer(&self, observer: std::sync::Weak<dyn warden_store::StoreObserver>) {
        self.inner.add_observer(observer);
    }

    fn check_integrity(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.retry(move || self.inner.check_integrity())
    }

    fn create_task(
        &self,
        task: NewTask,
        idempotency: Option<IdempotencyKey>,
    ) -> BoxFuture<'_, Result<Created, StoreError>> {
        self.inner.create_task(task, idempotency)
    }

    fn get_task<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<Task>, StoreError>> {
        self.retry(move || self.inner.get_task(id))
    }

    fn list_tasks(&self, query: TaskQuery) -> BoxFuture<'_, Result<Vec<Task>, StoreError>> {
        self.retry(move || self.inner.list_tasks(query.clone()))
    }

    fn transition<'a>(
        &'a self,
        id: &'a TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        self.retry(move || self.inner.transition(id, from, to, result.clone()))
    }

    fn claim<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<Option<Claim>, StoreError>> {
        self.inner.claim(worker, lease, filter)
    }

    fn claim_batch<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        filter: &'a ClaimFilter,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Claim>, StoreError>> {
        self.inner.claim_batch(worker, lease, filter, max)
    }

    fn finish_and_claim<'a>(
        &'a self,
        completion: Completion,
        lease: Duration,
        filter: &'a ClaimFilter,
    ) -> BoxFuture<'a, Result<(Finished, Option<Claim>), StoreError>> {
        self.inner.finish_and_claim(completion, lease, filter)
    }

    fn finish_runs(
        &self,
        completions: Vec<Completion>,
    ) -> BoxFuture<'_, Result<Vec<Result<Finished, StoreError>>, StoreError>> {
        self.inner.finish_runs(completions)
    }

    fn heartbeat<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<i64, StoreError>> {
        self.inner.heartbeat(run, worker, lease)
    }

    fn finish_run<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        self.retry(move || self.inner.finish_run(run, worker, to, result.clone()))
    }

    fn requeue_expired(&self) -> BoxFuture<'_, Result<Vec<Requeued>, StoreError>> {
        self.inner.requeue_expired()
    }

    fn interrupt_worker_runs<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Requeued>, StoreError>> {
        self.inner.interrupt_worker_runs(worker)
    }

    fn pin_task_repos<'a>(
        &'a self,
        run: &'a RunRef,
        worker: &'a str,
        repos: Vec<TaskRepo>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        self.retry(move || self.inner.pin_task_repos(run, worker, repos.clone()))
    }

    fn list_runs<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Vec<Run>, StoreError>> {
        self.retry(move || self.inner.list_runs(task))
    }

    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.append_journal_once(run, entry).await })
    }

    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        self.retry(move || self.inner.journal(run))
    }

    fn append_event<'a>(
        &'a self,
        task: &'a TaskId,
        event: Event,
    ) -> BoxFuture<'a, Result<EventRecord, StoreError>> {
        // A commit whose acknowledgement was lost is stored twice: a repeated progress event
        // is harmless (`task_finished` is stored by the terminal move itself).
        self.retry(move || self.inner.append_event(task, event.clone()))
    }

    fn events_after<'a>(
        &'a self,
        stream: &'a EventStream,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        self.retry(move || self.inner.events_after(stream, after, limit))
    }

    fn record_usage(&self, entry: UsageEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move { self.record_usage_once(entry).await })
    }

    fn spend_for_task<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Spend, StoreError>> {
        self.retry(move || self.inner.spend_for_task(task))
    }

    fn spend_for_day(&self, day: UtcDay) -> BoxFuture<'_, Result<Spend, StoreError>> {
        self.retry(move || self.inner.spend_for_day(day))
    }

    fn register_repo(&self, repo: NewRepo) -> BoxFuture<'_, Result<Repository, StoreError>> {
        self.retry(move || self.inner.register_repo(repo.clone()))
    }

    fn get_repo<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Repository>, StoreError>> {
        self.retry(move || self.inner.get_repo(name))
    }

    fn list_repos(&self) -> BoxFuture<'_, Result<Vec<Repository>, StoreError>> {
        self.retry(move || self.inner.list_repos())
    }

    fn create_approval(
        &self,
        approval: NewApproval,
    ) -> BoxFuture<'_, Result<Approval, StoreError>> {
        self.retry(move || self.inner.create_approval(approval.clone()))
    }

    fn get_approval<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Approval>, StoreError>> {
        self.retry(move || self.inner.get_approval(id))
    }

    fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> BoxFuture<'_, Result<Vec<Approval>, StoreError>> {
        self.retry(move || self.inner.list_approvals(status))
    }

    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
        decision: Decision,
        decided_by: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        self.retry(move || {
            self.inner
                .decide_approval(id, subject_hash, decision, decided_by)
        })
    }

    fn consume_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        self.retry(move || self.inner.consume_approval(id, subject_hash))
    }

    fn enqueue_intent(&self, intent: NewIntent) -> BoxFuture<'_, Result<Intent, StoreError>> {
        self.retry(move || self.inner.enqueue_intent(intent.clone()))
    }

    fn claim_intent<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        kinds: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Option<Intent>, StoreError>> {
        self.inner.claim_intent(worker, lease, kinds)
    }

    fn complete_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        self.retry(move || self.inner.complete_intent(id, worker))
    }

    fn fail_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        self.retry(move || self.inner.fail_intent(id, worker, error, retry_at_ms))
    }

    fn list_intents<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<Intent>, StoreError>> {
        self.retry(move || self.inner.list_intents(task))
    }

    fn create_api_token(&self, token: NewApiToken) -> BoxFuture<'_, Result<ApiToken, StoreError>> {
        self.inner.create_api_token(token)
    }

    fn find_api_token<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiToken>, StoreError>> {
        self.retry(move || self.inner.find_api_token(digest))
    }

    fn list_api_tokens(&self) -> BoxFuture<'_, Result<Vec<ApiToken>, StoreError>> {
        self.retry(move || self.inner.list_api_tokens())
    }

    fn revoke_api_token<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApiToken, StoreError>> {
        self.retry(move || self.inner.revoke_api_token(id))
    }

    fn append_task_message<'a>(
        &'a self,
        task: &'a TaskId,
        role: &'a str,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<TaskMessage, StoreError>> {
        self.retry(move || self.inner.append_task_message(task, role, text, author))
    }

    fn task_messages<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<TaskMessage>, StoreError>> {
        self.retry(move || self.inner.task_messages(task))
    }

    fn answer_task<'a>(
        &'a self,
        task: &'a TaskId,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        self.retry(move || self.inner.answer_task(task, text, author))
    }

    fn usage_summary(&self, query: UsageQuery) -> BoxFuture<'_, Result<UsageSummary, StoreError>> {
        self.retry(move || self.inner.usage_summary(query.clone()))
    }

    fn count_tasks_by_status(&self) -> BoxFuture<'_, Result<Vec<(TaskStatus, u64)>, StoreError>> {
        self.retry(move || self.inner.count_tasks_by_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn unreachable() -> StoreError {
        StoreError::Database {
            backend: "postgres",
            message: "connection refused".into(),
            retryable: true,
            source: None,
        }
    }

    /// A call that fails retryably `failures` times, then answers; counts its attempts.
    fn flaky(failures: u32, calls: &AtomicU32) -> BoxFuture<'_, Result<u32, StoreError>> {
        Box::pin(async move {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if call <= failures {
                Err(unreachable())
            } else {
                Ok(call)
            }
        })
    }

    #[tokio::test]
    async fn transient_failures_are_retried_within_the_lease() {
        let lease = RunLease::new(Duration::from_secs(30), Instant::now());
        let calls = AtomicU32::new(0);
        assert_eq!(lease.retry("read", || flaky(3, &calls)).await.unwrap(), 4);
        assert!(!lease.is_lost());
        // A failure that retrying cannot fix is returned at once.
        let calls = AtomicU32::new(0);
        let refused = lease
            .retry("read", || {
                calls.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { Err::<(), _>(StoreError::InvalidData("bad".into())) })
            })
            .await;
        assert!(matches!(refused, Err(StoreError::InvalidData(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(!lease.is_lost());
    }

    #[tokio::test]
    async fn an_outage_past_the_deadline_loses_the_run_before_the_lease_expires() {
        let length = Duration::from_millis(600);
        let granted = Instant::now();
        let lease = RunLease::new(length, granted);
        let calls = AtomicU32::new(0);
        let result = lease.retry("append", || flaky(u32::MAX, &calls)).await;
        assert!(result.is_err_and(|e| e.is_retryable()));
        assert_eq!(lease.lost(), Some(Lost::Outage));
        assert!(
            calls.load(Ordering::SeqCst) >= 2,
            "retried before giving up"
        );
        let stopped = Instant::now();
        assert!(stopped >= lease.deadline());
        // Once lost, nothing is tried any more; the first reason stays.
        let calls = AtomicU32::new(0);
        assert!(lease.retry("read", || flaky(0, &calls)).await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        lease.lose(Lost::Taken);
        assert_eq!(lease.lost(), Some(Lost::Outage));
    }

    #[tokio::test]
    async fn a_call_hanging_past_the_deadline_loses_the_run() {
        let lease = RunLease::new(Duration::from_millis(300), Instant::now());
        let hung = lease
            .retry("read", || {
                Box::pin(std::future::pending::<Result<(), StoreError>>())
            })
            .await;
        assert!(hung.is_err());
        assert!(lease.is_lost());
    }

    #[tokio::test]
    async fn renewals_move_the_deadline() {
        let granted = Instant::now();
        // A 30 s lease: a fifth of it (6 s) is the margin.
        let lease = RunLease::new(Duration::from_secs(30), granted);
        assert_eq!(lease.deadline(), granted + Duration::from_secs(24));
        lease.renewed(granted + Duration::from_secs(5));
        // An older renewal answered late does not move it back.
        lease.renewed(granted + Duration::from_secs(1));
        assert_eq!(lease.deadline(), granted + Duration::from_secs(29));
    }

    #[test]
    fn the_margin_leaves_a_stopped_run_time_to_wind_down() {
        // A fifth of the lease, at least 3 s where the lease allows (at most half of it).
        assert_eq!(
            lease_margin(Duration::from_secs(30)),
            Duration::from_secs(6)
        );
        assert_eq!(
            lease_margin(Duration::from_secs(10)),
            Duration::from_secs(3)
        );
        assert_eq!(lease_margin(Duration::from_secs(4)), Duration::from_secs(2));
    }
}
