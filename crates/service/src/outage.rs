//! Riding out store outages during a run. A run's lease is the time it may keep working
//! without telling the store it is alive; a store that cannot be reached must neither fail the
//! task nor let the run go on past its lease while another worker may claim the task.
//!
//! - [`RunLease`] tracks when the run's lease was last renewed. Its deadline is the renewal
//!   plus the lease minus a margin ([`lease_margin`]): past it, the run is lost and stops
//!   itself without recording anything; the task is then re-queued (released by the worker
//!   once the store answers again, or by lease expiry like any interrupted run), never failed.
//! - [`RunStore`] is what a run talks to the store through (the run's services hold it instead
//!   of the store): every call ([`StoreCalls::call`]) that fails with a retryable error
//!   (connection refused or reset, pool timeout, serialization failure) is retried with
//!   backoff until the deadline; then the run is lost and the error returned. A journal append
//!   or a usage record whose commit may have landed before the connection broke is checked
//!   against the store before it is retried, so a decision is journaled and charged once.
//!   Claims, heartbeats and re-queueing are the worker loop's, on the store itself. Code shared
//!   with callers outside a run takes any [`StoreCalls`] (a `&dyn Store` makes each call once),
//!   so nothing forwards the [`Store`] trait method by method.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use warden_store::{BoxFuture, JournalEntry, JournalStore, RunRef, Store, StoreError, UsageEntry};

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

/// Makes store calls, for code that runs inside a run and outside one: straight on a [`Store`]
/// (`&dyn Store`), or through a [`RunStore`], which retries them through outages.
pub trait StoreCalls: Send + Sync {
    /// The call `op` makes on the store; `what` names it in logs. A [`RunStore`] makes it
    /// again after a retryable failure, until its run's lease would expire.
    fn call<'a, T, F>(&'a self, what: &'static str, op: F) -> BoxFuture<'a, Result<T, StoreError>>
    where
        T: Send + 'a,
        F: FnMut(&'a dyn Store) -> BoxFuture<'a, Result<T, StoreError>> + Send + 'a;
}

impl StoreCalls for dyn Store + '_ {
    fn call<'a, T, F>(
        &'a self,
        _what: &'static str,
        mut op: F,
    ) -> BoxFuture<'a, Result<T, StoreError>>
    where
        T: Send + 'a,
        F: FnMut(&'a dyn Store) -> BoxFuture<'a, Result<T, StoreError>> + Send + 'a,
    {
        op(self)
    }
}

impl<C: StoreCalls + ?Sized> StoreCalls for Arc<C> {
    fn call<'a, T, F>(&'a self, what: &'static str, op: F) -> BoxFuture<'a, Result<T, StoreError>>
    where
        T: Send + 'a,
        F: FnMut(&'a dyn Store) -> BoxFuture<'a, Result<T, StoreError>> + Send + 'a,
    {
        C::call(self, what, op)
    }
}

/// The store as one run sees it (see the module docs). Not a [`Store`]: a run makes its calls
/// through [`StoreCalls::call`], which retries any of them, and through the two calls that must
/// not land twice ([`RunStore::append_journal`], [`RunStore::record_usage`]).
#[derive(Clone)]
pub struct RunStore {
    inner: Arc<dyn Store>,
    lease: Arc<RunLease>,
}

impl std::fmt::Debug for RunStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStore")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl StoreCalls for RunStore {
    fn call<'a, T, F>(
        &'a self,
        what: &'static str,
        mut op: F,
    ) -> BoxFuture<'a, Result<T, StoreError>>
    where
        T: Send + 'a,
        F: FnMut(&'a dyn Store) -> BoxFuture<'a, Result<T, StoreError>> + Send + 'a,
    {
        let store = self.inner.as_ref();
        Box::pin(async move { self.lease.retry(what, || op(store)).await })
    }
}

impl RunStore {
    pub fn new(inner: Arc<dyn Store>, lease: Arc<RunLease>) -> RunStore {
        RunStore { inner, lease }
    }

    /// Appends a journal record once: after an attempt failed, the run's stored chain says
    /// whether it landed anyway (its commit acknowledgement lost) before it is sent again.
    pub async fn append_journal(
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
    pub async fn record_usage(&self, entry: UsageEntry) -> Result<(), StoreError> {
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

/// The run's journal ([`warden_store::RunJournal`]) reads through the retries and appends once.
impl JournalStore for RunStore {
    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        self.call("reading the run journal", move |store| store.journal(run))
    }

    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(RunStore::append_journal(self, run, entry))
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

    /// Fails retryably `failures` times before it reads the store; counts its attempts.
    fn flaky_read<'a>(
        store: &'a dyn Store,
        task: &'a warden_protocol::TaskId,
        failures: u32,
        calls: &'a AtomicU32,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            if calls.fetch_add(1, Ordering::SeqCst) < failures {
                return Err(unreachable());
            }
            Ok(store.get_task(task).await?.is_none())
        })
    }

    #[tokio::test]
    async fn a_runs_calls_are_retried_and_the_stores_own_are_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("w.db").display());
        let store = warden_store::open(&url).await.unwrap();
        let task = warden_store::new_task_id().unwrap();
        let run = RunStore::new(
            Arc::clone(&store),
            RunLease::new(Duration::from_secs(30), Instant::now()),
        );
        let calls = AtomicU32::new(0);
        let read = run.call("read", |s| flaky_read(s, &task, 2, &calls)).await;
        assert!(read.unwrap(), "the store was reached");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        // The store itself (code shared with callers outside a run) tries once.
        let calls = AtomicU32::new(0);
        let direct = store
            .call("read", |s| flaky_read(s, &task, 2, &calls))
            .await;
        assert!(direct.is_err_and(|e| e.is_retryable()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
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
