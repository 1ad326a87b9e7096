//! Claiming and finishing in batches: `claim_batch`, `finish_and_claim` and `finish_runs` keep
//! every check of `claim` and `finish_run` (exactly-once claims, one writer per repository,
//! leases checked per row, terminal statuses immutable) and store a terminal move's
//! `task_finished` once, with its run's end and only then; `ClaimQueue` never hands out a claim whose lease was lost, and
//! the claims of a process that died come back through lease expiry.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};
use warden_store::{
    Claim, ClaimFilter, ClaimQueue, Clock, Completion, CompletionBatcher, EventStream, Store,
    StoreError, RUN_INTERRUPTED,
};

use super::harness::{Fixture, LEASE};

fn finished(status: TaskStatus) -> Event {
    Event::TaskFinished {
        status,
        outcome: "answer".into(),
    }
}

fn completion(claim: &Claim, worker: &str, status: TaskStatus) -> Completion {
    Completion::new(
        claim.run(),
        worker,
        status,
        Some(serde_json::json!({"outcome": "answer"})),
    )
}

async fn events_of(store: &dyn Store, task: &TaskId) -> Vec<Event> {
    store
        .events_after(&EventStream::Task(task.clone()), 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.event)
        .collect()
}

fn queue(f: &Fixture, store: Arc<dyn Store>, worker: &str, refill: usize) -> ClaimQueue {
    ClaimQueue::new(
        store,
        Arc::new(f.clock.clone()),
        worker,
        ClaimFilter::default(),
        LEASE,
        refill,
    )
}

/// Eight workers on two handles, each with another way of working (a `ClaimQueue` with a
/// `CompletionBatcher`, `finish_and_claim`, `claim_batch` with `finish_runs`): every task is
/// claimed once, finished once, with one `task_finished` event.
async fn batch_claims_take_each_task_once(f: &Fixture) {
    const TASKS: usize = 160;
    const WORKERS: usize = 8;
    let mut all = HashSet::new();
    for i in 0..TASKS {
        // Questions on a shared repository, writers on repositories of their own.
        let kind = [TaskKind::Question, TaskKind::Change, TaskKind::Maintain][i % 3];
        let repo = if kind == TaskKind::Question {
            "shared".to_string()
        } else {
            format!("repo{i}")
        };
        all.insert(f.task(kind, &[&repo]).await.id);
    }
    let other = f.another_handle().await;
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let store = if w % 2 == 0 {
            f.store.clone()
        } else {
            other.clone()
        };
        let name = format!("worker-{w}");
        let mut claims = queue(f, store.clone(), &name, 3);
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            match w % 3 {
                0 => {
                    let batcher =
                        CompletionBatcher::start(store.clone(), Duration::from_millis(1), 16);
                    while let Some(claim) = claims.next().await.unwrap() {
                        let done = batcher
                            .finish(completion(&claim, &name, TaskStatus::Completed))
                            .await
                            .unwrap();
                        assert_eq!(done.task.status, TaskStatus::Completed);
                        mine.push(claim.task.id);
                    }
                }
                1 => {
                    let mut next = store.claim(&name, LEASE, &ClaimFilter::default()).await;
                    while let Some(claim) = next.unwrap() {
                        let (done, claimed) = store
                            .finish_and_claim(
                                completion(&claim, &name, TaskStatus::Completed),
                                LEASE,
                                &ClaimFilter::default(),
                            )
                            .await
                            .unwrap();
                        assert_eq!(done.task.id, claim.task.id);
                        assert_eq!(done.events.len(), 1);
                        mine.push(claim.task.id);
                        next = Ok(claimed);
                    }
                }
                _ => loop {
                    let batch = store
                        .claim_batch(&name, LEASE, &ClaimFilter::default(), 5)
                        .await
                        .unwrap();
                    if batch.is_empty() {
                        break;
                    }
                    let completions = batch
                        .iter()
                        .map(|c| completion(c, &name, TaskStatus::Completed))
                        .collect();
                    for outcome in store.finish_runs(completions).await.unwrap() {
                        outcome.unwrap();
                    }
                    mine.extend(batch.into_iter().map(|c| c.task.id));
                },
            }
            mine
        }));
    }
    let mut seen: HashMap<_, usize> = HashMap::new();
    for worker in workers {
        for id in worker.await.unwrap() {
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), TASKS);
    assert!(seen.values().all(|n| *n == 1), "a task was claimed twice");
    assert_eq!(seen.keys().cloned().collect::<HashSet<_>>(), all);
    for id in &all {
        let runs = f.store.list_runs(id).await.unwrap();
        assert_eq!(runs.len(), 1, "{id}");
        assert_eq!(runs[0].outcome.as_deref(), Some("completed"));
        assert_eq!(
            events_of(f.store.as_ref(), id).await,
            [finished(TaskStatus::Completed)]
        );
    }
    // Global sequences have no gaps.
    let every = f
        .store
        .events_after(&EventStream::All, 0, 1000)
        .await
        .unwrap();
    assert_eq!(
        every.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=TASKS as u64).collect::<Vec<_>>()
    );
}

async fn claim_batch_keeps_one_writer_per_repository_and_order(f: &Fixture) {
    use TaskKind::{Change, Maintain, Question};
    let a = f.task(Change, &["app"]).await.id;
    let b = f.task(Change, &["app"]).await.id;
    let c = f.task(Question, &["app"]).await.id;
    let d = f.task(Maintain, &["lib", "app"]).await.id;
    let e = f.task(Change, &["lib"]).await.id;
    let g = f.task(Question, &["lib"]).await.id;
    let claims = f
        .store
        .claim_batch("w", LEASE, &ClaimFilter::default(), 10)
        .await
        .unwrap();
    let ids: HashSet<_> = claims.iter().map(|c| c.task.id.clone()).collect();
    // b and d wait for a (app); e takes lib.
    assert_eq!(ids, HashSet::from([a.clone(), c, e, g]));
    for claim in &claims {
        assert_eq!(claim.task.status, TaskStatus::Running);
        assert_eq!(claim.run_number, 1);
    }
    assert!(f
        .store
        .claim_batch("w", LEASE, &ClaimFilter::default(), 10)
        .await
        .unwrap()
        .is_empty());
    // Ending a's run lets b start (oldest first), not d (lib is held by e).
    let a_claim = claims.iter().find(|c| c.task.id == a).unwrap();
    let (_, next) = f
        .store
        .finish_and_claim(
            completion(a_claim, "w", TaskStatus::Completed),
            LEASE,
            &ClaimFilter::default(),
        )
        .await
        .unwrap();
    assert_eq!(next.unwrap().task.id, b);
    assert!(f.claim("w").await.is_none());
    assert_eq!(
        f.store.get_task(&d).await.unwrap().unwrap().status,
        TaskStatus::Queued
    );
    // A batch of zero claims nothing.
    f.task(Question, &["app"]).await;
    assert!(f
        .store
        .claim_batch("w", LEASE, &ClaimFilter::default(), 0)
        .await
        .unwrap()
        .is_empty());
}

async fn finish_and_claim_ends_the_run_and_claims_the_next(f: &Fixture) {
    let a = f.task(TaskKind::Question, &["app"]).await;
    let b = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w").await.unwrap();
    assert_eq!(claim.task.id, a.id);
    let (done, next) = f
        .store
        .finish_and_claim(
            completion(&claim, "w", TaskStatus::Completed),
            LEASE,
            &ClaimFilter::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.task.status, TaskStatus::Completed);
    assert_eq!(
        done.task.result,
        Some(serde_json::json!({"outcome": "answer"}))
    );
    assert_eq!(done.events.len(), 1);
    assert_eq!(done.events[0].task_seq, 1);
    assert_eq!(done.events[0].event, finished(TaskStatus::Completed));
    let next = next.unwrap();
    assert_eq!(next.task.id, b.id);
    assert_eq!(next.task.status, TaskStatus::Running);
    let runs = f.store.list_runs(&b.id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].worker, "w");
    assert_eq!(runs[0].lease_expires_at_ms, next.lease_expires_at_ms);
    // Nothing left: the run still ends.
    let (done, none) = f
        .store
        .finish_and_claim(
            Completion::new(next.run(), "w", TaskStatus::Failed, None),
            LEASE,
            &ClaimFilter::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.task.status, TaskStatus::Failed);
    // Without a result the outcome is `failure`, as `finish_run` stores it.
    let stored: Vec<Event> = done.events.iter().map(|e| e.event.clone()).collect();
    assert_eq!(
        stored,
        [Event::TaskFinished {
            status: TaskStatus::Failed,
            outcome: "failure".into()
        }]
    );
    assert!(none.is_none());
}

async fn finish_and_claim_with_a_lost_lease_claims_nothing(f: &Fixture) {
    let a = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w1").await.unwrap();
    // w1's lease expires; a goes back to the queue and w2 takes it.
    f.clock.advance(LEASE + Duration::from_secs(1));
    f.store.requeue_expired().await.unwrap();
    let b = f.task(TaskKind::Question, &["app"]).await;
    let taken = f.claim("w2").await.unwrap();
    assert_eq!(taken.task.id, a.id);
    let error = f
        .store
        .finish_and_claim(
            completion(&claim, "w1", TaskStatus::Completed),
            LEASE,
            &ClaimFilter::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::LeaseLost { .. }), "{error:?}");
    // Nothing changed: a is w2's, b still queued, no event written.
    let a_now = f.store.get_task(&a.id).await.unwrap().unwrap();
    assert_eq!(a_now.status, TaskStatus::Running);
    assert_eq!(a_now.result, None);
    assert_eq!(
        f.store.get_task(&b.id).await.unwrap().unwrap().status,
        TaskStatus::Queued
    );
    assert!(f.store.list_runs(&b.id).await.unwrap().is_empty());
    assert!(events_of(f.store.as_ref(), &a.id).await.is_empty());
    // A status a run cannot finish with claims nothing either.
    let error = f
        .store
        .finish_and_claim(
            Completion::new(taken.run(), "w2", TaskStatus::Running, None),
            LEASE,
            &ClaimFilter::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::InvalidTransition { .. }),
        "{error:?}"
    );
    assert_eq!(
        f.store.get_task(&b.id).await.unwrap().unwrap().status,
        TaskStatus::Queued
    );
}

async fn batched_completions_check_each_lease(f: &Fixture) {
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(f.task(TaskKind::Question, &["app"]).await.id);
    }
    // An event before the run ends: the completion's event follows it in the task's stream.
    f.store
        .append_event(
            &ids[0],
            Event::AgentMessage {
                text: "looking".into(),
            },
        )
        .await
        .unwrap();
    let claims = f
        .store
        .claim_batch("w", LEASE, &ClaimFilter::default(), 6)
        .await
        .unwrap();
    assert_eq!(
        claims.iter().map(|c| c.task.id.clone()).collect::<Vec<_>>(),
        ids
    );
    // Task 2 is cancelled (terminal); task 3's run is given to another worker after expiry.
    f.store
        .transition(&ids[2], TaskStatus::Running, TaskStatus::Cancelled, None)
        .await
        .unwrap();
    f.clock.advance(LEASE + Duration::from_secs(1));
    f.store
        .heartbeat(&claims[0].run(), "w", LEASE)
        .await
        .unwrap();
    f.store
        .heartbeat(&claims[1].run(), "w", LEASE)
        .await
        .unwrap();
    f.store
        .heartbeat(&claims[4].run(), "w", LEASE)
        .await
        .unwrap();
    f.store
        .heartbeat(&claims[5].run(), "w", LEASE)
        .await
        .unwrap();
    f.store.requeue_expired().await.unwrap();
    let stolen = f.claim("thief").await.unwrap();
    assert_eq!(stolen.task.id, ids[3]);

    // Without a result: its outcome is read from the stored one.
    let two = Completion::new(claims[1].run(), "w", TaskStatus::Failed, None);
    let outcomes = f
        .store
        .finish_runs(vec![
            completion(&claims[0], "w", TaskStatus::Completed),
            two,
            completion(&claims[2], "w", TaskStatus::Completed),
            completion(&claims[3], "w", TaskStatus::Completed),
            // Not this worker's run.
            completion(&claims[4], "someone", TaskStatus::Completed),
            // Waiting for an answer is not terminal, but the run ends all the same (and says
            // so: the task waits for a person).
            completion(&claims[5], "w", TaskStatus::WaitingInput),
            // The same run twice: the second finds it ended.
            completion(&claims[0], "w", TaskStatus::Failed),
            // A status a run cannot finish with.
            Completion::new(claims[4].run(), "w", TaskStatus::Testing, None),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 8);
    let zero = outcomes[0].as_ref().unwrap();
    assert_eq!(zero.task.status, TaskStatus::Completed);
    assert_eq!(zero.events.len(), 1);
    assert_eq!(zero.events[0].task_seq, 2);
    let one = outcomes[1].as_ref().unwrap();
    assert_eq!(one.task.status, TaskStatus::Failed);
    assert_eq!(one.events.len(), 1);
    assert_eq!(one.events[0].task_seq, 1);
    assert_eq!(
        one.events[0].event,
        Event::TaskFinished {
            status: TaskStatus::Failed,
            outcome: "failure".into()
        }
    );
    let five = outcomes[5].as_ref().unwrap();
    assert_eq!(five.task.status, TaskStatus::WaitingInput);
    assert_eq!(
        five.events.iter().map(|e| &e.event).collect::<Vec<_>>(),
        [&Event::TaskFinished {
            status: TaskStatus::WaitingInput,
            outcome: "answer".into()
        }]
    );
    for lost in [2, 3, 4, 6] {
        assert!(
            matches!(outcomes[lost], Err(StoreError::LeaseLost { .. })),
            "{lost}: {:?}",
            outcomes[lost]
        );
    }
    assert_eq!(
        outcomes[5].as_ref().unwrap().task.status,
        TaskStatus::WaitingInput
    );
    assert!(
        matches!(outcomes[7], Err(StoreError::InvalidTransition { .. })),
        "{:?}",
        outcomes[7]
    );

    // What is stored: each applied row once, nothing of the others.
    let status = |i: usize| {
        let store = f.store.clone();
        let id = ids[i].clone();
        async move { store.get_task(&id).await.unwrap().unwrap().status }
    };
    assert_eq!(status(0).await, TaskStatus::Completed);
    assert_eq!(status(1).await, TaskStatus::Failed);
    assert_eq!(status(2).await, TaskStatus::Cancelled);
    assert_eq!(status(3).await, TaskStatus::Running);
    assert_eq!(status(4).await, TaskStatus::Running);
    assert_eq!(status(5).await, TaskStatus::WaitingInput);
    assert_eq!(
        events_of(f.store.as_ref(), &ids[0]).await,
        [
            Event::AgentMessage {
                text: "looking".into()
            },
            finished(TaskStatus::Completed)
        ]
    );
    assert_eq!(events_of(f.store.as_ref(), &ids[1]).await.len(), 1);
    // The cancel stored its own `task_finished`; the batch added nothing to 2, 3 or 4, and to
    // 5 the `task_finished` of its wait.
    assert_eq!(
        events_of(f.store.as_ref(), &ids[2]).await,
        [Event::TaskFinished {
            status: TaskStatus::Cancelled,
            outcome: "failure".into()
        }]
    );
    assert_eq!(
        events_of(f.store.as_ref(), &ids[5]).await,
        [Event::TaskFinished {
            status: TaskStatus::WaitingInput,
            outcome: "answer".into()
        }]
    );
    for untouched in [3, 4] {
        assert!(events_of(f.store.as_ref(), &ids[untouched])
            .await
            .is_empty());
    }
    let runs = f.store.list_runs(&ids[3]).await.unwrap();
    assert_eq!(runs[0].outcome.as_deref(), Some(RUN_INTERRUPTED));
    assert_eq!(runs[1].worker, "thief");
    assert_eq!(runs[1].ended_at_ms, None);
    f.store
        .heartbeat(&claims[4].run(), "w", LEASE)
        .await
        .unwrap();

    // Retrying the whole batch (its commit's answer was lost) applies nothing twice.
    let again = f
        .store
        .finish_runs(vec![completion(&claims[0], "w", TaskStatus::Completed)])
        .await
        .unwrap();
    assert!(matches!(again[0], Err(StoreError::LeaseLost { .. })));
    assert_eq!(events_of(f.store.as_ref(), &ids[0]).await.len(), 2);
    assert!(f.store.finish_runs(Vec::new()).await.unwrap().is_empty());
}

async fn the_batcher_answers_each_completion_with_its_own_outcome(f: &Fixture) {
    const TASKS: usize = 24;
    for _ in 0..TASKS {
        f.task(TaskKind::Question, &["app"]).await;
    }
    let claims = f
        .store
        .claim_batch("w", LEASE, &ClaimFilter::default(), TASKS)
        .await
        .unwrap();
    assert_eq!(claims.len(), TASKS);
    let batcher = CompletionBatcher::start(f.store.clone(), Duration::from_millis(5), 8);
    let mut finishing = Vec::new();
    for (i, claim) in claims.iter().enumerate() {
        // Every fourth completion names the wrong worker: its lease check fails alone.
        let worker = if i % 4 == 3 { "other" } else { "w" };
        let batcher = batcher.clone();
        let completion = completion(claim, worker, TaskStatus::Completed);
        finishing.push(tokio::spawn(
            async move { batcher.finish(completion).await },
        ));
    }
    for (i, (claim, finishing)) in claims.iter().zip(finishing).enumerate() {
        let outcome = finishing.await.unwrap();
        let stored = f.store.get_task(&claim.task.id).await.unwrap().unwrap();
        let events = events_of(f.store.as_ref(), &claim.task.id).await;
        if i % 4 == 3 {
            assert!(matches!(outcome, Err(StoreError::LeaseLost { .. })), "{i}");
            assert_eq!(stored.status, TaskStatus::Running);
            assert!(events.is_empty());
        } else {
            let done = outcome.unwrap();
            assert_eq!(done.task.id, claim.task.id);
            assert_eq!(stored.status, TaskStatus::Completed);
            assert_eq!(events, [finished(TaskStatus::Completed)]);
        }
    }
}

async fn queued_claims_of_a_dead_process_come_back_after_lease_expiry(f: &Fixture) {
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(f.task(TaskKind::Question, &["app"]).await.id);
    }
    {
        let mut claims = queue(f, f.store.clone(), "w1", 4);
        let started = claims.next().await.unwrap().unwrap();
        assert_eq!(started.task.id, ids[0]);
        assert_eq!(claims.len(), 3);
        // The process dies: its queue goes without a word to the store.
    }
    // While their leases last, the queued claims are nobody else's.
    let other = f.another_handle().await;
    let rest = other
        .claim_batch("w2", LEASE, &ClaimFilter::default(), 10)
        .await
        .unwrap();
    assert_eq!(
        rest.iter().map(|c| c.task.id.clone()).collect::<Vec<_>>(),
        ids[4..]
    );
    f.clock.advance(LEASE + Duration::from_secs(1));
    // w2's runs were renewed; w1's expired, like a crashed run's.
    for claim in &rest {
        other.heartbeat(&claim.run(), "w2", LEASE).await.unwrap();
    }
    let requeued = f.store.requeue_expired().await.unwrap();
    let mut back: Vec<_> = requeued.iter().map(|r| r.run.task.clone()).collect();
    back.sort();
    assert_eq!(back, ids[..4]);
    assert!(requeued.iter().all(|r| r.status == TaskStatus::Queued));
    let again = other
        .claim_batch("w2", LEASE, &ClaimFilter::default(), 10)
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(|c| c.task.id.clone()).collect::<Vec<_>>(),
        ids[..4]
    );
    for claim in &again {
        assert_eq!(claim.run_number, 2);
        let runs = f.store.list_runs(&claim.task.id).await.unwrap();
        assert_eq!(runs[0].outcome.as_deref(), Some(RUN_INTERRUPTED));
        assert_eq!(claim.task.interrupted_runs, 1);
    }
}

async fn a_queue_never_hands_out_a_claim_whose_lease_was_lost(f: &Fixture) {
    for _ in 0..3 {
        f.task(TaskKind::Question, &["app"]).await;
    }
    // A paused process: its queued claims expire and another worker takes them.
    let mut paused = queue(f, f.store.clone(), "w1", 3);
    let first = paused.next().await.unwrap().unwrap();
    f.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(f.store.requeue_expired().await.unwrap().len(), 3);
    let taken = f
        .store
        .claim_batch("w2", LEASE, &ClaimFilter::default(), 3)
        .await
        .unwrap();
    assert_eq!(taken.len(), 3);
    assert!(taken.iter().any(|c| c.task.id == first.task.id));
    // Waking up, it finds its queued claims lost and nothing else to do.
    assert_eq!(paused.len(), 2);
    assert!(paused.next().await.unwrap().is_none());
    assert!(paused.is_empty());
    for claim in &taken {
        f.store.heartbeat(&claim.run(), "w2", LEASE).await.unwrap();
    }
}

async fn a_queue_keeps_its_claims_alive_and_releases_them(f: &Fixture) {
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(f.task(TaskKind::Question, &["app"]).await.id);
    }
    let mut claims = queue(f, f.store.clone(), "w", 3);
    let first = claims.next().await.unwrap().unwrap();
    // Two thirds of the lease later the waiting claims are renewed; past the first lease they
    // are still alive.
    for _ in 0..3 {
        f.clock.advance(LEASE / 2);
        claims.keep_alive().await.unwrap();
        f.store.heartbeat(&first.run(), "w", LEASE).await.unwrap();
    }
    assert!(f.store.requeue_expired().await.unwrap().is_empty());
    assert_eq!(claims.len(), 2);
    // A claim handed out after waiting comes with a renewed lease.
    f.clock.advance(LEASE / 2);
    let second = claims.next().await.unwrap().unwrap();
    assert_eq!(second.task.id, ids[1]);
    let run = &f.store.list_runs(&ids[1]).await.unwrap()[0];
    assert_eq!(run.lease_expires_at_ms, second.lease_expires_at_ms);
    assert_eq!(
        second.lease_expires_at_ms,
        f.clock.now_ms() + LEASE.as_millis() as i64
    );
    // Released at shutdown: queued again at once, not an interruption.
    claims.release().await.unwrap();
    assert!(claims.is_empty());
    let third = f.store.get_task(&ids[2]).await.unwrap().unwrap();
    assert_eq!(third.status, TaskStatus::Queued);
    assert_eq!(third.interrupted_runs, 0);
    let runs = f.store.list_runs(&ids[2]).await.unwrap();
    assert_eq!(runs[0].outcome.as_deref(), Some("queued"));
    // The queue can be shared by the slots of a process.
    let shared = Arc::new(Mutex::new(queue(f, f.store.clone(), "w", 2)));
    let claim = shared.lock().await.next().await.unwrap().unwrap();
    assert_eq!(claim.task.id, ids[2]);
}

/// Leases are wall-clock times in the store, the one clock the processes sharing it have in
/// common; a queue measures how long ago it was granted a lease on the monotonic clock, so a
/// step of the wall clock either way neither keeps it from renewing nor loses a claim that
/// still holds its lease.
async fn a_queue_renews_by_monotonic_age_and_the_stores_wall_clock(f: &Fixture) {
    const HOUR_MS: i64 = 3_600_000;
    for _ in 0..3 {
        f.task(TaskKind::Question, &["app"]).await;
    }
    let mut claims = queue(f, f.store.clone(), "w", 3);
    let first = claims.next_leased().await.unwrap().unwrap();
    assert_eq!(first.granted_monotonic_ms, f.clock.monotonic_ms());
    // The wall clock is stepped back an hour while half a lease passes: by the wall clock the
    // waiting claims have more than their whole lease left, but they are half a lease old.
    f.clock.step(-HOUR_MS);
    f.clock.advance(LEASE / 2);
    claims.keep_alive().await.unwrap();
    let second = claims.next_leased().await.unwrap().unwrap();
    assert_eq!(second.granted_monotonic_ms, f.clock.monotonic_ms());
    assert_eq!(
        second.claim.lease_expires_at_ms,
        f.clock.now_ms() + LEASE.as_millis() as i64,
        "renewed by the stepped clock"
    );
    // Two hours forward at once: the last claim is new by the monotonic clock, but its lease
    // looks expired in the store, where another worker would re-queue it; it is renewed first.
    f.clock.step(2 * HOUR_MS);
    let third = claims.next_leased().await.unwrap().unwrap();
    assert_eq!(
        third.claim.lease_expires_at_ms,
        f.clock.now_ms() + LEASE.as_millis() as i64
    );
    // A live run's heartbeat renews a lease that only looks expired after the step, as long as
    // nobody re-queued it first: what a worker that sees the step waits a lease for.
    f.store
        .heartbeat(&first.claim.run(), "w", LEASE)
        .await
        .unwrap();
    f.store
        .heartbeat(&second.claim.run(), "w", LEASE)
        .await
        .unwrap();
    assert!(f.store.requeue_expired().await.unwrap().is_empty());
    // Without that heartbeat, a step forward past the lease re-queues a live run (an
    // interruption): the store has no other clock to tell.
    f.clock.step(2 * HOUR_MS);
    let requeued = f.store.requeue_expired().await.unwrap();
    assert_eq!(requeued.len(), 3);
    let task = f
        .store
        .get_task(&first.claim.task.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(task.interrupted_runs, 1);
}

conformance!(
    batch_claims_take_each_task_once,
    claim_batch_keeps_one_writer_per_repository_and_order,
    finish_and_claim_ends_the_run_and_claims_the_next,
    finish_and_claim_with_a_lost_lease_claims_nothing,
    batched_completions_check_each_lease,
    the_batcher_answers_each_completion_with_its_own_outcome,
    queued_claims_of_a_dead_process_come_back_after_lease_expiry,
    a_queue_never_hands_out_a_claim_whose_lease_was_lost,
    a_queue_keeps_its_claims_alive_and_releases_them,
    a_queue_renews_by_monotonic_age_and_the_stores_wall_clock,
);

/// Other events of the same tasks are appended while their runs finish (the completion's
/// events then race them for the tasks' next sequence numbers): every append and every
/// completion succeeds, and both sequences stay gap-free.
async fn completion_events_interleave_with_concurrent_events(f: &Fixture) {
    const TASKS: usize = 16;
    const APPENDS: usize = 40;
    let mut ids = Vec::new();
    for _ in 0..TASKS {
        ids.push(f.task(TaskKind::Question, &["app"]).await.id);
    }
    let claims = f
        .store
        .claim_batch("w", LEASE, &ClaimFilter::default(), TASKS)
        .await
        .unwrap();
    let mut writers = Vec::new();
    for writer in 0..4 {
        let store = f.store.clone();
        let ids = ids.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..APPENDS {
                let task = &ids[(i * 7 + writer) % ids.len()];
                let text = format!("{writer}/{i}");
                store
                    .append_event(task, Event::AgentMessage { text })
                    .await
                    .unwrap();
            }
        }));
    }
    let mut finishing = Vec::new();
    for (n, chunk) in claims.chunks(4).enumerate() {
        let store = f.store.clone();
        let chunk = chunk.to_vec();
        finishing.push(tokio::spawn(async move {
            if n % 2 == 0 {
                let completions = chunk
                    .iter()
                    .map(|c| completion(c, "w", TaskStatus::Completed))
                    .collect();
                for outcome in store.finish_runs(completions).await.unwrap() {
                    outcome.unwrap();
                }
            } else {
                for claim in &chunk {
                    store
                        .finish_and_claim(
                            completion(claim, "w", TaskStatus::Completed),
                            LEASE,
                            &ClaimFilter::default(),
                        )
                        .await
                        .unwrap();
                }
            }
        }));
    }
    for handle in writers.into_iter().chain(finishing) {
        handle.await.unwrap();
    }
    let mut total = 0;
    for id in &ids {
        let records = f
            .store
            .events_after(&EventStream::Task(id.clone()), 0, 1000)
            .await
            .unwrap();
        assert_eq!(
            records.iter().map(|r| r.task_seq).collect::<Vec<_>>(),
            (1..=records.len() as u64).collect::<Vec<_>>()
        );
        let finished_events = records
            .iter()
            .filter(|r| matches!(r.event, Event::TaskFinished { .. }))
            .count();
        assert_eq!(finished_events, 1, "{id}");
        total += records.len();
    }
    assert_eq!(total, TASKS + 4 * APPENDS);
    let every = f
        .store
        .events_after(&EventStream::All, 0, 1000)
        .await
        .unwrap();
    assert_eq!(
        every.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=total as u64).collect::<Vec<_>>()
    );
}

conformance!(completion_events_interleave_with_concurrent_events);
