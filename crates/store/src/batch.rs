//! Claiming and finishing many runs per transaction, for a worker process with N slots:
//! [`Completion`] and [`Finished`] (the rows of [`QueueStore::finish_runs`](crate::QueueStore::finish_runs) and
//! [`QueueStore::finish_and_claim`](crate::QueueStore::finish_and_claim)), [`ClaimQueue`] (claims taken in batches, handed out one at a
//! time, renewed while they wait) and [`CompletionBatcher`] (group commit: completions arriving
//! together end in one transaction, each acknowledged only once that transaction is durable).
//!
//! A queued claim is an ordinary run with a lease: if the process dies with claims queued,
//! they expire and come back through [`QueueStore::requeue_expired`](crate::QueueStore::requeue_expired) like any crashed run. They are
//! never lost, and never handed out twice while alive: a claim that sat long is renewed with a
//! heartbeat before it is handed out, and dropped if its lease was lost meanwhile.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use warden_protocol::TaskStatus;

use crate::clock::duration_ms;
use crate::{Claim, ClaimFilter, Clock, EventRecord, RunRef, Store, StoreError, Task};

/// One run to end: what [`QueueStore::finish_run`](crate::QueueStore::finish_run) takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub run: RunRef,
    pub worker: String,
    /// A terminal status, a waiting status, or `queued` (released).
    pub status: TaskStatus,
    pub result: Option<serde_json::Value>,
}

impl Completion {
    pub fn new(
        run: RunRef,
        worker: &str,
        status: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> Completion {
        Completion {
            run,
            worker: worker.to_string(),
            status,
            result,
        }
    }
}

/// A run that ended: its task as stored, and the events stored with it (the `task_finished` of a
/// terminal status, as [`QueueStore::finish_run`](crate::QueueStore::finish_run) stores it), for a caller that publishes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub task: Task,
    pub events: Vec<EventRecord>,
}

/// The only outcome of a one-completion [`QueueStore::finish_runs`](crate::QueueStore::finish_runs).
pub(crate) fn single(outcomes: Vec<Result<Finished, StoreError>>) -> Result<Finished, StoreError> {
    outcomes
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(StoreError::invalid_data("finish_runs returned no outcome")))
}

/// Claims for one worker process, taken [`QueueStore::claim_batch`](crate::QueueStore::claim_batch) at a time and handed out one by
/// one. Owned by the loop that starts runs (share it behind a `tokio::sync::Mutex` otherwise).
///
/// A claim's lease starts when it is claimed. One handed out more than a third of its lease
/// after it was granted (by the monotonic clock), or with less than two thirds of it left by the
/// store's wall clock (after a step forward), is renewed first (a heartbeat), and one whose
/// lease was lost (it expired and was re-queued) is dropped; [`ClaimQueue::keep_alive`] does
/// the same for every waiting claim, for a process that keeps claims queued longer than a third
/// of the lease. Dropping the queue leaves its claims to expire; [`ClaimQueue::release`] gives
/// them back at once.
pub struct ClaimQueue {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    worker: String,
    filter: ClaimFilter,
    lease: Duration,
    refill: usize,
    queued: VecDeque<LeasedClaim>,
}

/// A claim as a [`ClaimQueue`] hands it out: with when its lease was granted or last renewed.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedClaim {
    pub claim: Claim,
    /// No later than the store granted (or last renewed) the lease, on the queue's clock's
    /// monotonic scale ([`Clock::monotonic_ms`]): what a run measures its lease from, untouched
    /// by steps of the wall clock.
    pub granted_monotonic_ms: i64,
}

impl std::fmt::Debug for ClaimQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimQueue")
            .field("worker", &self.worker)
            .field("lease", &self.lease)
            .field("refill", &self.refill)
            .field("queued", &self.queued.len())
            .finish_non_exhaustive()
    }
}

impl ClaimQueue {
    /// A queue claiming up to `refill` tasks at a time for `worker`. `clock` must be the one
    /// the store was opened with (leases are in its time).
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        worker: &str,
        filter: ClaimFilter,
        lease: Duration,
        refill: usize,
    ) -> ClaimQueue {
        ClaimQueue {
            store,
            clock,
            worker: worker.to_string(),
            filter,
            lease,
            refill: refill.max(1),
            queued: VecDeque::new(),
        }
    }

    /// How many tasks the next refill claims at most (at least one): a worker sets it to its
    /// free slots, so claims do not wait for a slot while other workers could run them.
    pub fn set_refill(&mut self, refill: usize) {
        self.refill = refill.max(1);
    }

    /// Claims waiting to be handed out.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Queues a claim obtained elsewhere (the one [`QueueStore::finish_and_claim`](crate::QueueStore::finish_and_claim) returned, with
    /// the monotonic time read before asking for it) to be handed out next.
    pub fn push_front(&mut self, claim: LeasedClaim) {
        self.queued.push_front(claim);
    }

    /// The next claim to start, with at least two thirds of its lease left; refills with one
    /// [`QueueStore::claim_batch`](crate::QueueStore::claim_batch) when empty. `None` when nothing is claimable.
    pub async fn next(&mut self) -> Result<Option<Claim>, StoreError> {
        Ok(self.next_leased().await?.map(|leased| leased.claim))
    }

    /// [`ClaimQueue::next`], with when the claim's lease was granted.
    pub async fn next_leased(&mut self) -> Result<Option<LeasedClaim>, StoreError> {
        loop {
            if self.queued.is_empty() {
                let asked = self.clock.monotonic_ms();
                let claims = self
                    .store
                    .claim_batch(&self.worker, self.lease, &self.filter, self.refill)
                    .await?;
                if claims.is_empty() {
                    return Ok(None);
                }
                self.queued
                    .extend(claims.into_iter().map(|claim| LeasedClaim {
                        claim,
                        granted_monotonic_ms: asked,
                    }));
            }
            let Some(claim) = self.queued.pop_front() else {
                continue;
            };
            if let Some(claim) = self.renewed(claim).await? {
                return Ok(Some(claim));
            }
        }
    }

    /// Renews every queued claim with less than two thirds of its lease left and drops those
    /// whose lease was lost. Call it at least every third of the lease while claims wait.
    pub async fn keep_alive(&mut self) -> Result<(), StoreError> {
        let mut kept = VecDeque::with_capacity(self.queued.len());
        while let Some(claim) = self.queued.pop_front() {
            match self.renewed(claim).await {
                Ok(Some(claim)) => kept.push_back(claim),
                Ok(None) => {}
                Err(error) => {
                    kept.append(&mut self.queued);
                    self.queued = kept;
                    return Err(error);
                }
            }
        }
        self.queued = kept;
        Ok(())
    }

    /// Gives every queued claim back to the queue (`queued`, not counted as an interruption)
    /// in one transaction, e.g. at shutdown.
    pub async fn release(&mut self) -> Result<(), StoreError> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let completions = self
            .queued
            .iter()
            .map(|queued| {
                Completion::new(queued.claim.run(), &self.worker, TaskStatus::Queued, None)
            })
            .collect();
        // A claim whose lease was lost meanwhile is someone else's now: nothing to give back.
        self.store.finish_runs(completions).await?;
        self.queued.clear();
        Ok(())
    }

    /// The claim, renewed if it has less than two thirds of its lease left — by its age on the
    /// monotonic clock (what the run measures its lease by), or by the store's wall clock
    /// (what other workers re-queue it by, which a step forward moves); `None` when its lease
    /// was lost. On a store error the claim goes back to the front of the queue.
    async fn renewed(
        &mut self,
        mut queued: LeasedClaim,
    ) -> Result<Option<LeasedClaim>, StoreError> {
        let lease_ms = duration_ms(self.lease);
        let age = self
            .clock
            .monotonic_ms()
            .saturating_sub(queued.granted_monotonic_ms);
        let left = queued
            .claim
            .lease_expires_at_ms
            .saturating_sub(self.clock.now_ms());
        if age <= lease_ms / 3 && left >= lease_ms - lease_ms / 3 {
            return Ok(Some(queued));
        }
        let asked = self.clock.monotonic_ms();
        match self
            .store
            .heartbeat(&queued.claim.run(), &self.worker, self.lease)
            .await
        {
            Ok(expires) => {
                queued.claim.lease_expires_at_ms = expires;
                queued.granted_monotonic_ms = asked;
                Ok(Some(queued))
            }
            Err(StoreError::LeaseLost { .. } | StoreError::NotFound { .. }) => Ok(None),
            Err(error) => {
                self.queued.push_front(queued);
                Err(error)
            }
        }
    }
}

/// One completion waiting for its batch, and where its outcome goes.
type Pending = (Completion, oneshot::Sender<Result<Finished, StoreError>>);

/// Group commit of completions: [`CompletionBatcher::finish`] queues a completion; a task ends
/// everything queued (up to `max_batch`) with one [`QueueStore::finish_runs`](crate::QueueStore::finish_runs), one batch at a time,
/// so completions arriving while a batch commits go together in the next. `window` > 0 also
/// waits that long after the first completion of a batch for more. Each caller is answered
/// only after its batch's transaction committed (durably: the store's own guarantee), with
/// its own outcome. Cheap to clone; the task ends once every clone is dropped and the
/// completions queued before are finished.
#[derive(Clone)]
pub struct CompletionBatcher {
    sender: mpsc::UnboundedSender<Pending>,
    backend: &'static str,
}

impl std::fmt::Debug for CompletionBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionBatcher")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl CompletionBatcher {
    /// Starts the batching task on the current tokio runtime.
    pub fn start(store: Arc<dyn Store>, window: Duration, max_batch: usize) -> CompletionBatcher {
        let (sender, receiver) = mpsc::unbounded_channel();
        let backend = store.backend();
        tokio::spawn(run_batches(store, receiver, window, max_batch.max(1)));
        CompletionBatcher { sender, backend }
    }

    /// Ends the run as [`QueueStore::finish_run`](crate::QueueStore::finish_run) would (with the completion's events), together
    /// with whatever else is finishing at the same time.
    pub async fn finish(&self, completion: Completion) -> Result<Finished, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.sender
            .send((completion, answer))
            .map_err(|_| self.stopped())?;
        answered.await.map_err(|_| self.stopped())?
    }

    fn stopped(&self) -> StoreError {
        StoreError::Database {
            backend: self.backend,
            message: "the completion batcher stopped before answering".into(),
            retryable: false,
            source: None,
        }
    }
}

async fn run_batches(
    store: Arc<dyn Store>,
    mut receiver: mpsc::UnboundedReceiver<Pending>,
    window: Duration,
    max_batch: usize,
) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + window;
        while batch.len() < max_batch {
            match receiver.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) if window.is_zero() => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, receiver.recv()).await {
                        Ok(Some(pending)) => batch.push(pending),
                        Ok(None) | Err(_) => break,
                    }
                }
            }
        }
        let (completions, answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        match store.finish_runs(completions).await {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for answer in answers {
                    let outcome = outcomes.next().unwrap_or_else(|| {
                        Err(StoreError::invalid_data(
                            "finish_runs returned too few outcomes",
                        ))
                    });
                    let _ = answer.send(outcome);
                }
            }
            Err(error) => {
                for answer in answers {
                    let _ = answer.send(Err(StoreError::Database {
                        backend: store.backend(),
                        message: error.to_string(),
                        retryable: error.is_retryable(),
                        source: None,
                    }));
                }
            }
        }
    }
}
