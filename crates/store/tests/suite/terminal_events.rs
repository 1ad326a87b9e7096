//! Every move of a task to a terminal status stores its `task_finished` event in the same
//! transaction, whichever path takes it there (a run finishing, a cancel, a task abandoned
//! after too many interrupted runs), and a move that fails stores none. So does a run that
//! hands its task to people (waiting for an answer or an approval): a follower of the task's
//! stream never sees the event before the status, nor one without the other. A run released
//! to the queue stores none.

use serde_json::json;
use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};
use warden_store::{EventStream, StoreError, MAX_INTERRUPTED_RUNS};

use super::harness::{Fixture, LEASE};

/// The task's `task_finished` events, in order, as `(status, outcome)`.
async fn finished_events(f: &Fixture, task: &TaskId) -> Vec<(TaskStatus, String)> {
    f.store
        .events_after(&EventStream::Task(task.clone()), 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|record| match record.event {
            Event::TaskFinished { status, outcome } => Some((status, outcome)),
            _ => None,
        })
        .collect()
}

async fn finishing_a_run_stores_task_finished_with_it(f: &Fixture) {
    for (to, result, outcome) in [
        (
            TaskStatus::Completed,
            Some(json!({"outcome": "answer"})),
            "answer",
        ),
        (
            TaskStatus::Failed,
            Some(json!({"outcome": "failure"})),
            "failure",
        ),
        (
            TaskStatus::TimedOut,
            Some(json!({"outcome": "failure"})),
            "failure",
        ),
        (
            TaskStatus::Cancelled,
            Some(json!({"outcome": "failure"})),
            "failure",
        ),
        // No result: the transaction path, which reads none either.
        (TaskStatus::Failed, None, "failure"),
    ] {
        let task = f.task(TaskKind::Question, &["app"]).await;
        let claim = f.claim("w1").await.unwrap();
        assert_eq!(claim.task.id, task.id);
        // Someone else's finish is refused and stores nothing.
        assert!(matches!(
            f.store
                .finish_run(&claim.run(), "w2", to, result.clone())
                .await,
            Err(StoreError::LeaseLost { .. })
        ));
        assert!(finished_events(f, &task.id).await.is_empty());
        f.store
            .finish_run(&claim.run(), "w1", to, result)
            .await
            .unwrap();
        assert_eq!(
            finished_events(f, &task.id).await,
            [(to, outcome.to_string())],
            "{to:?}"
        );
        // A second finish of the same run fails and stores nothing more.
        assert!(f
            .store
            .finish_run(&claim.run(), "w1", to, None)
            .await
            .is_err());
        assert_eq!(finished_events(f, &task.id).await.len(), 1);
    }
}

async fn releasing_a_run_stores_no_task_finished_and_parking_one_stores_it(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w1").await.unwrap();
    f.store
        .finish_run(&claim.run(), "w1", TaskStatus::Queued, None)
        .await
        .unwrap();
    assert!(finished_events(f, &task.id).await.is_empty());
    // Waiting for an answer, with the result's outcome.
    let claim = f.claim("w1").await.unwrap();
    f.store
        .finish_run(
            &claim.run(),
            "w1",
            TaskStatus::WaitingInput,
            Some(json!({"outcome": "clarification"})),
        )
        .await
        .unwrap();
    assert_eq!(
        finished_events(f, &task.id).await,
        [(TaskStatus::WaitingInput, "clarification".to_string())]
    );
    // Answered, run again, waiting for an approval without a new result: the stored one's.
    f.store
        .transition(&task.id, TaskStatus::WaitingInput, TaskStatus::Queued, None)
        .await
        .unwrap();
    let claim = f.claim("w1").await.unwrap();
    f.store
        .finish_run(&claim.run(), "w1", TaskStatus::WaitingApproval, None)
        .await
        .unwrap();
    assert_eq!(
        finished_events(f, &task.id).await,
        [
            (TaskStatus::WaitingInput, "clarification".to_string()),
            (TaskStatus::WaitingApproval, "clarification".to_string()),
        ]
    );
    // Leaving the wait stores nothing.
    f.store
        .transition(
            &task.id,
            TaskStatus::WaitingApproval,
            TaskStatus::Queued,
            None,
        )
        .await
        .unwrap();
    assert_eq!(finished_events(f, &task.id).await.len(), 2);
}

async fn a_cancel_stores_task_finished_with_it(f: &Fixture) {
    // A queued task and a running one.
    let queued = f.task(TaskKind::Question, &["app"]).await;
    f.store
        .transition(
            &queued.id,
            TaskStatus::Queued,
            TaskStatus::Cancelled,
            Some(json!({"outcome": "failure"})),
        )
        .await
        .unwrap();
    assert_eq!(
        finished_events(f, &queued.id).await,
        [(TaskStatus::Cancelled, "failure".to_string())]
    );
    let running = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w1").await.unwrap();
    assert_eq!(claim.task.id, running.id);
    // A compare-and-set that loses stores nothing.
    assert!(matches!(
        f.store
            .transition(&running.id, TaskStatus::Queued, TaskStatus::Cancelled, None)
            .await,
        Err(StoreError::StatusConflict { .. })
    ));
    assert!(finished_events(f, &running.id).await.is_empty());
    f.store
        .transition(
            &running.id,
            TaskStatus::Running,
            TaskStatus::Cancelled,
            Some(json!({"outcome": "failure"})),
        )
        .await
        .unwrap();
    assert_eq!(
        finished_events(f, &running.id).await,
        [(TaskStatus::Cancelled, "failure".to_string())]
    );
    // The run it stopped cannot finish it again.
    assert!(f
        .store
        .finish_run(
            &claim.run(),
            "w1",
            TaskStatus::Completed,
            Some(json!({"outcome": "answer"}))
        )
        .await
        .is_err());
    assert_eq!(finished_events(f, &running.id).await.len(), 1);
}

async fn an_abandoned_task_stores_task_finished_once(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await;
    for interrupted in 1..=MAX_INTERRUPTED_RUNS {
        f.claim("w1").await.unwrap();
        f.clock.advance(LEASE);
        let requeued = f.store.requeue_expired().await.unwrap();
        assert_eq!(requeued.len(), 1);
        let expected: &[(TaskStatus, String)] = if interrupted < MAX_INTERRUPTED_RUNS {
            assert_eq!(requeued[0].status, TaskStatus::Queued);
            &[]
        } else {
            assert_eq!(requeued[0].status, TaskStatus::Failed);
            &[(TaskStatus::Failed, String::new())]
        };
        let events = finished_events(f, &task.id).await;
        assert_eq!(events.len(), expected.len(), "{events:?}");
        if let Some((status, outcome)) = events.first() {
            assert_eq!(*status, TaskStatus::Failed);
            assert_eq!(outcome, "failure");
        }
    }
    assert!(f.store.requeue_expired().await.unwrap().is_empty());
    assert_eq!(finished_events(f, &task.id).await.len(), 1);
}

async fn a_restarted_workers_abandoned_task_stores_task_finished(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await;
    for _ in 0..MAX_INTERRUPTED_RUNS {
        f.claim("serve-a").await.unwrap();
        f.store.interrupt_worker_runs("serve-a").await.unwrap();
    }
    let stored = f.store.get_task(&task.id).await.unwrap().unwrap();
    assert_eq!(stored.status, TaskStatus::Failed);
    assert_eq!(
        finished_events(f, &task.id).await,
        [(TaskStatus::Failed, "failure".to_string())]
    );
}

conformance!(
    finishing_a_run_stores_task_finished_with_it,
    releasing_a_run_stores_no_task_finished_and_parking_one_stores_it,
    a_cancel_stores_task_finished_with_it,
    an_abandoned_task_stores_task_finished_once,
    a_restarted_workers_abandoned_task_stores_task_finished
);
