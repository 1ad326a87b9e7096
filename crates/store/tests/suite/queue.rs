//! The claim queue: exactly-once claims under concurrency, priority then FIFO, one writer per
//! repository, kind filters, leases (heartbeat, expiry, re-queue, abandonment) and releases.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use warden_protocol::{TaskKind, TaskStatus};
use warden_store::{ClaimFilter, StoreError, ABANDONED, MAX_INTERRUPTED_RUNS, RUN_INTERRUPTED};

use super::harness::{new_task, Fixture, LEASE};

async fn concurrent_claims_take_each_task_once(f: &Fixture) {
    const TASKS: usize = 60;
    const WORKERS: usize = 8;
    let mut all = HashSet::new();
    for i in 0..TASKS {
        // A mix of kinds on distinct repositories, so every task is claimable at once.
        let kind = [TaskKind::Question, TaskKind::Change, TaskKind::Maintain][i % 3];
        let repo = format!("repo{i}");
        all.insert(f.task(kind, &[&repo]).await.id);
    }
    // Half the workers use a second handle: another process (SQLite) or machine (Postgres).
    let other = f.another_handle().await;
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let store = if w % 2 == 0 {
            f.store.clone()
        } else {
            other.clone()
        };
        let name = format!("worker-{w}");
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(claim) = store
                .claim(&name, LEASE, &ClaimFilter::default())
                .await
                .unwrap()
            {
                assert_eq!(claim.run_number, 1);
                store
                    .finish_run(&claim.run(), &name, TaskStatus::Completed, None)
                    .await
                    .unwrap();
                mine.push(claim.task.id);
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
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].outcome.as_deref(), Some("completed"));
    }
}

async fn priority_then_fifo(f: &Fixture) {
    let create = |priority: i32| {
        let mut task = new_task(TaskKind::Question, &["app"]);
        task.priority = priority;
        task
    };
    // Created in this order, a millisecond apart: (priority, label).
    let order = [
        (0, "a"),
        (5, "b"),
        (0, "c"),
        (9, "d"),
        (5, "e"),
        (-1, "f"),
        (0, "g"),
    ];
    let mut labels = HashMap::new();
    for (priority, label) in order {
        let task = f.store.create_task(create(priority), None).await.unwrap();
        labels.insert(task.task().id.clone(), label);
        f.clock.advance(Duration::from_millis(1));
    }
    // Same priority and same instant: the id breaks the tie.
    let same_instant = [create(0), create(0)];
    for task in same_instant {
        let label = if labels.values().any(|l| *l == "h") {
            "i"
        } else {
            "h"
        };
        labels.insert(task.id.clone(), label);
        f.store.create_task(task, None).await.unwrap();
    }
    let expected = ["d", "b", "e", "a", "c", "g", "h", "i", "f"];
    let mut claimed = Vec::new();
    while let Some(claim) = f.claim("w").await {
        claimed.push(labels[&claim.task.id]);
    }
    assert_eq!(claimed, expected);
}

async fn one_writer_per_repository(f: &Fixture) {
    use TaskKind::{Change, Maintain, Question};
    let a = f.task(Change, &["app"]).await;
    let b = f.task(Change, &["app"]).await;
    let c = f.task(Change, &["lib"]).await;
    let d = f.task(Question, &["app"]).await;
    let e = f.task(Maintain, &["lib", "app"]).await;
    let g = f.task(Question, &["app", "lib"]).await;

    let claim = || async { f.claim("w").await.map(|c| (c.task.id.clone(), c)) };
    let (first, a_claim) = claim().await.unwrap();
    assert_eq!(first, a.id);
    // b (app is held by a) and e (app and lib) wait; c, d and g go.
    let (second, c_claim) = claim().await.unwrap();
    assert_eq!(second, c.id);
    assert_eq!(claim().await.unwrap().0, d.id);
    assert_eq!(claim().await.unwrap().0, g.id);
    assert!(claim().await.is_none());

    // Testing still holds the repository; waiting for an approval does not.
    f.store
        .transition(&a.id, TaskStatus::Running, TaskStatus::Testing, None)
        .await
        .unwrap();
    assert!(claim().await.is_none());
    f.store
        .finish_run(&a_claim.run(), "w", TaskStatus::WaitingApproval, None)
        .await
        .unwrap();
    let (next, b_claim) = claim().await.unwrap();
    assert_eq!(next, b.id);
    f.store
        .finish_run(&b_claim.run(), "w", TaskStatus::Completed, None)
        .await
        .unwrap();
    assert!(claim().await.is_none(), "e still waits for lib");
    f.store
        .finish_run(&c_claim.run(), "w", TaskStatus::Failed, None)
        .await
        .unwrap();
    assert_eq!(claim().await.unwrap().0, e.id);
}

async fn concurrent_writers_on_one_repository_start_one_at_a_time(f: &Fixture) {
    const TASKS: usize = 12;
    for _ in 0..TASKS {
        f.task(TaskKind::Change, &["app"]).await;
    }
    let other = f.another_handle().await;
    let mut rounds = 0;
    let mut done = 0;
    while done < TASKS {
        rounds += 1;
        assert!(rounds <= TASKS, "the queue stalled");
        // Eight workers race for the repository; exactly one may win.
        let mut racers = Vec::new();
        for w in 0..8 {
            let store = if w % 2 == 0 {
                f.store.clone()
            } else {
                other.clone()
            };
            racers.push(tokio::spawn(async move {
                let name = format!("w{w}");
                let claim = store
                    .claim(&name, LEASE, &ClaimFilter::default())
                    .await
                    .unwrap();
                claim.map(|c| (name, c))
            }));
        }
        let mut winners = Vec::new();
        for racer in racers {
            if let Some(won) = racer.await.unwrap() {
                winners.push(won);
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {rounds}: {} writers started",
            winners.len()
        );
        let (name, claim) = winners.pop().unwrap();
        f.store
            .finish_run(&claim.run(), &name, TaskStatus::Completed, None)
            .await
            .unwrap();
        done += 1;
    }
}

async fn claims_honour_the_kind_filter(f: &Fixture) {
    let change = f.task(TaskKind::Change, &["app"]).await;
    let question = f.task(TaskKind::Question, &["app"]).await;
    let only_questions = ClaimFilter {
        kinds: vec![TaskKind::Question],
        ..ClaimFilter::default()
    };
    let claim = f
        .store
        .claim("w", LEASE, &only_questions)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.task.id, question.id);
    assert!(f
        .store
        .claim("w", LEASE, &only_questions)
        .await
        .unwrap()
        .is_none());
    let claim = f.claim("w").await.unwrap();
    assert_eq!(claim.task.id, change.id);
}

/// An in-process worker claims its own task and nobody else's, through every claim path.
async fn claims_honour_the_task_filter(f: &Fixture) {
    let first = f.task(TaskKind::Question, &["app"]).await;
    let second = f.task(TaskKind::Question, &["app"]).await;
    let change = f.task(TaskKind::Change, &["lib"]).await;
    let only = |task: &warden_store::Task| ClaimFilter {
        task: Some(task.id.clone()),
        ..ClaimFilter::default()
    };
    // The oldest task is first in line, but a filter on the second skips it.
    let claim = f
        .store
        .claim("w", LEASE, &only(&second))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.task.id, second.id);
    assert!(f
        .store
        .claim("w", LEASE, &only(&second))
        .await
        .unwrap()
        .is_none());
    let batch = f
        .store
        .claim_batch("w", LEASE, &only(&change), 8)
        .await
        .unwrap();
    assert_eq!(batch.len(), 1, "only the named task");
    assert_eq!(batch[0].task.id, change.id);
    let claim = f.claim("w").await.unwrap();
    assert_eq!(claim.task.id, first.id);
}

async fn expired_leases_requeue_and_the_third_interruption_abandons(f: &Fixture) {
    let task = f.task(TaskKind::Change, &["app"]).await;
    for attempt in 1..=MAX_INTERRUPTED_RUNS {
        let claim = f.claim("w").await.unwrap();
        assert_eq!(claim.task.id, task.id);
        assert_eq!(claim.run_number, attempt);
        assert_eq!(
            claim.lease_expires_at_ms,
            f.clock_now() + i64::try_from(LEASE.as_millis()).unwrap()
        );

        // Heartbeats keep the run alive past its first lease.
        f.clock.advance(LEASE - Duration::from_secs(1));
        let extended = f.store.heartbeat(&claim.run(), "w", LEASE).await.unwrap();
        assert!(extended > claim.lease_expires_at_ms);
        f.clock.advance(Duration::from_secs(5));
        assert!(f.store.requeue_expired().await.unwrap().is_empty());
        assert!(matches!(
            f.store.heartbeat(&claim.run(), "intruder", LEASE).await,
            Err(StoreError::LeaseLost { .. })
        ));

        // Then the worker dies.
        f.clock.advance(LEASE);
        let requeued = f.store.requeue_expired().await.unwrap();
        assert_eq!(requeued.len(), 1);
        assert_eq!(requeued[0].run, claim.run());
        let after = f.store.get_task(&task.id).await.unwrap().unwrap();
        assert_eq!(after.interrupted_runs, attempt);
        if attempt < MAX_INTERRUPTED_RUNS {
            assert_eq!(requeued[0].status, TaskStatus::Queued);
            assert_eq!(after.status, TaskStatus::Queued);
            assert_eq!(after.result, None);
        } else {
            assert_eq!(requeued[0].status, TaskStatus::Failed);
            assert_eq!(after.status, TaskStatus::Failed);
            let result = after.result.unwrap();
            assert_eq!(result["outcome"], "failure");
            assert_eq!(result["failure"]["code"], ABANDONED);
            assert_eq!(result["task_id"], task.id.as_str());
        }
        // The dead worker, back from a pause, may not touch the run.
        assert!(matches!(
            f.store.heartbeat(&claim.run(), "w", LEASE).await,
            Err(StoreError::LeaseLost { .. })
        ));
        assert!(matches!(
            f.store
                .finish_run(&claim.run(), "w", TaskStatus::Completed, None)
                .await,
            Err(StoreError::LeaseLost { .. })
        ));
        assert!(f.store.requeue_expired().await.unwrap().is_empty());
    }
    assert!(f.claim("w").await.is_none());
    let runs = f.store.list_runs(&task.id).await.unwrap();
    assert_eq!(runs.len(), 3);
    assert!(runs
        .iter()
        .all(|r| r.outcome.as_deref() == Some(RUN_INTERRUPTED) && r.worker == "w"));
}

async fn a_waiting_task_is_not_abandoned_by_its_worker(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w").await.unwrap();
    // Parked with the run still open: lease expiry does not touch a task waiting for a human.
    f.store
        .transition(
            &task.id,
            TaskStatus::Running,
            TaskStatus::WaitingInput,
            None,
        )
        .await
        .unwrap();
    f.clock.advance(LEASE * 10);
    assert!(f.store.requeue_expired().await.unwrap().is_empty());
    // The answer re-queues it; the old run ends and the next claim opens run 2.
    f.store
        .transition(&task.id, TaskStatus::WaitingInput, TaskStatus::Queued, None)
        .await
        .unwrap();
    let next = f.claim("w2").await.unwrap();
    assert_eq!(next.run_number, 2);
    let runs = f.store.list_runs(&task.id).await.unwrap();
    assert_eq!(runs[0].outcome.as_deref(), Some("queued"));
    assert_eq!(runs[0].number, claim.run_number);
    assert_eq!(runs[1].ended_at_ms, None);
}

async fn a_released_run_is_not_an_interruption(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w").await.unwrap();
    // Graceful shutdown: the worker gives the task back.
    let released = f
        .store
        .finish_run(&claim.run(), "w", TaskStatus::Queued, None)
        .await
        .unwrap();
    assert_eq!(released.status, TaskStatus::Queued);
    assert_eq!(released.interrupted_runs, 0);
    let again = f.claim("w").await.unwrap();
    assert_eq!((again.task.id.clone(), again.run_number), (task.id, 2));
    // Only the holder may finish, and only into a status the table allows.
    assert!(matches!(
        f.store
            .finish_run(&again.run(), "someone-else", TaskStatus::Completed, None)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        f.store
            .finish_run(&again.run(), "w", TaskStatus::Testing, None)
            .await,
        Err(StoreError::InvalidTransition { .. })
    ));
    let result = serde_json::json!({"outcome": "answer"});
    let done = f
        .store
        .finish_run(
            &again.run(),
            "w",
            TaskStatus::Completed,
            Some(result.clone()),
        )
        .await
        .unwrap();
    assert_eq!(done.result, Some(result));
    let missing = warden_store::RunRef {
        task: again.task.id.clone(),
        number: 9,
    };
    assert!(matches!(
        f.store.heartbeat(&missing, "w", LEASE).await,
        Err(StoreError::NotFound { what: "run", .. })
    ));
}

impl Fixture {
    fn clock_now(&self) -> i64 {
        use warden_store::Clock;
        self.clock.now_ms()
    }
}

conformance!(
    concurrent_claims_take_each_task_once,
    priority_then_fifo,
    one_writer_per_repository,
    concurrent_writers_on_one_repository_start_one_at_a_time,
    claims_honour_the_kind_filter,
    claims_honour_the_task_filter,
    expired_leases_requeue_and_the_third_interruption_abandons,
    a_waiting_task_is_not_abandoned_by_its_worker,
    a_released_run_is_not_an_interruption,
);
