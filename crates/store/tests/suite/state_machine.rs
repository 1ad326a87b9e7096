//! The task state machine: every (from, to) pair tried against the store, terminal statuses
//! immutable, transitions as compare-and-set, cancellation reaching the worker, retries as new
//! linked tasks.

use warden_protocol::{TaskKind, TaskStatus};
use warden_store::state::ALL_STATUSES;
use warden_store::{transition_allowed, StoreError, Task};

use super::harness::{new_task, Fixture, LEASE};

/// The allowed transitions, written out: the table the store must implement (SPEC §6).
const ALLOWED: &[(TaskStatus, &[TaskStatus])] = {
    use TaskStatus::*;
    &[
        (
            Queued,
            &[Running, WaitingApproval, Cancelled, Failed, TimedOut],
        ),
        (
            Running,
            &[
                Queued,
                Testing,
                WaitingInput,
                WaitingApproval,
                Completed,
                Failed,
                Cancelled,
                TimedOut,
            ],
        ),
        (
            Testing,
            &[
                Queued,
                Running,
                WaitingApproval,
                Completed,
                Failed,
                Cancelled,
                TimedOut,
            ],
        ),
        (WaitingInput, &[Queued, Running, Cancelled, TimedOut]),
        (WaitingApproval, &[Queued, Running, Cancelled, TimedOut]),
        (Completed, &[]),
        (Failed, &[]),
        (Cancelled, &[]),
        (TimedOut, &[]),
    ]
};

fn expected(from: TaskStatus, to: TaskStatus) -> bool {
    ALLOWED
        .iter()
        .any(|(f, tos)| *f == from && tos.contains(&to))
}

#[test]
fn the_table_is_the_documented_one() {
    for from in ALL_STATUSES {
        for to in ALL_STATUSES {
            assert_eq!(
                transition_allowed(from, to),
                expected(from, to),
                "{from:?} -> {to:?}"
            );
        }
    }
}

/// Brings a fresh question task to `status` the way the service would, leaving it the only
/// queued task (so `claim` takes it).
async fn task_in(f: &Fixture, status: TaskStatus) -> Task {
    use TaskStatus::*;
    let task = f.task(TaskKind::Question, &["app"]).await;
    if status == Queued {
        return task;
    }
    let claim = f.claim("w1").await.expect("the fresh task is claimable");
    assert_eq!(claim.task.id, task.id);
    let run = claim.run();
    let store = &f.store;
    match status {
        Queued => unreachable!(),
        Running => claim.task,
        // Parked while the worker keeps its run, so `-> running` can continue it.
        Testing | WaitingInput | WaitingApproval => store
            .transition(&task.id, Running, status, None)
            .await
            .unwrap(),
        Completed | Failed | Cancelled | TimedOut => store
            .finish_run(
                &run,
                "w1",
                status,
                Some(serde_json::json!({"outcome": "x"})),
            )
            .await
            .unwrap(),
    }
}

/// Leaves no queued task behind for the next `task_in`.
async fn drain_queue(f: &Fixture, task: &Task) {
    let current = f.store.get_task(&task.id).await.unwrap().unwrap();
    if current.status == TaskStatus::Queued {
        f.store
            .transition(&task.id, TaskStatus::Queued, TaskStatus::Cancelled, None)
            .await
            .unwrap();
    }
}

async fn every_transition_is_checked(f: &Fixture) {
    for from in ALL_STATUSES {
        for to in ALL_STATUSES {
            let task = task_in(f, from).await;
            assert_eq!(task.status, from);
            let outcome = f.store.transition(&task.id, from, to, None).await;
            let after = f.store.get_task(&task.id).await.unwrap().unwrap();
            match outcome {
                Ok(changed) => {
                    assert!(expected(from, to), "{from:?} -> {to:?} was allowed");
                    assert_eq!(changed.status, to);
                    assert_eq!(after.status, to);
                }
                // Allowed by the table, but a queued task starts only through `claim`.
                Err(StoreError::NoOpenRun { .. }) => {
                    assert_eq!((from, to), (TaskStatus::Queued, TaskStatus::Running));
                    assert_eq!(after.status, from);
                    let claim = f.claim("w2").await.unwrap();
                    assert_eq!(claim.task.id, task.id);
                    assert_eq!(claim.task.status, TaskStatus::Running);
                }
                Err(StoreError::InvalidTransition { from: f1, to: t1 }) => {
                    assert!(!expected(from, to), "{from:?} -> {to:?} was refused");
                    assert_eq!((f1, t1), (from, to));
                    assert_eq!(after, task, "a refused transition changed the task");
                }
                Err(other) => panic!("{from:?} -> {to:?}: unexpected {other}"),
            }
            drain_queue(f, &task).await;
        }
    }
}

async fn terminal_statuses_are_immutable(f: &Fixture) {
    use TaskStatus::*;
    for terminal in [Completed, Failed, Cancelled, TimedOut] {
        let task = task_in(f, terminal).await;
        let run = f.store.list_runs(&task.id).await.unwrap()[0].clone();
        assert_eq!(
            run.outcome.as_deref(),
            Some(warden_store::state::status_name(terminal))
        );
        for to in ALL_STATUSES {
            let refused = f
                .store
                .transition(
                    &task.id,
                    terminal,
                    to,
                    Some(serde_json::json!({"changed": true})),
                )
                .await;
            assert!(
                matches!(refused, Err(StoreError::InvalidTransition { .. })),
                "{to:?}"
            );
        }
        let run_ref = warden_store::RunRef {
            task: task.id.clone(),
            number: 1,
        };
        for to in ALL_STATUSES {
            let refused = f.store.finish_run(&run_ref, "w1", to, None).await;
            assert!(
                matches!(refused, Err(StoreError::LeaseLost { .. })),
                "{to:?}"
            );
        }
        assert!(matches!(
            f.store.heartbeat(&run_ref, "w1", LEASE).await,
            Err(StoreError::LeaseLost { .. })
        ));
        assert_eq!(f.store.get_task(&task.id).await.unwrap().unwrap(), task);
        assert!(f.claim("w1").await.is_none());
    }
}

async fn transition_is_compare_and_set(f: &Fixture) {
    use TaskStatus::*;
    let task = f.task(TaskKind::Question, &["app"]).await;
    let stale = f.store.transition(&task.id, Running, Completed, None).await;
    assert!(matches!(
        stale,
        Err(StoreError::StatusConflict {
            expected: Running,
            actual: Queued,
            ..
        })
    ));

    // Many cancellers race; exactly one wins, the rest see the new status.
    let mut racers = Vec::new();
    for _ in 0..8 {
        let store = f.store.clone();
        let id = task.id.clone();
        racers.push(tokio::spawn(async move {
            store.transition(&id, Queued, Cancelled, None).await
        }));
    }
    let mut won = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(t) => {
                won += 1;
                assert_eq!(t.status, Cancelled);
            }
            Err(StoreError::StatusConflict { actual, .. }) => assert_eq!(actual, Cancelled),
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!(won, 1);

    let missing = super::harness::task_id();
    assert!(matches!(
        f.store.transition(&missing, Queued, Cancelled, None).await,
        Err(StoreError::NotFound { what: "task", .. })
    ));
}

async fn cancelling_a_running_task_ends_its_run(f: &Fixture) {
    use TaskStatus::*;
    let task = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w1").await.unwrap();
    let result = serde_json::json!({"outcome": "failure", "failure": {"code": "cancelled"}});
    let cancelled = f
        .store
        .transition(&task.id, Running, Cancelled, Some(result.clone()))
        .await
        .unwrap();
    assert_eq!(cancelled.result, Some(result));
    // The worker learns at its next heartbeat and cannot overwrite the outcome.
    assert!(matches!(
        f.store.heartbeat(&claim.run(), "w1", LEASE).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        f.store
            .finish_run(&claim.run(), "w1", Completed, None)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    let runs = f.store.list_runs(&task.id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome.as_deref(), Some("cancelled"));
    assert!(runs[0].ended_at_ms.is_some());
}

async fn a_retry_is_a_new_linked_task(f: &Fixture) {
    use TaskStatus::*;
    let original = f.task(TaskKind::Change, &["app"]).await;
    let mut retry = new_task(TaskKind::Change, &["app"]);
    retry.retry_of = Some(original.id.clone());
    assert!(matches!(
        f.store.create_task(retry.clone(), None).await,
        Err(StoreError::NotRetryable { status: Queued, .. })
    ));

    let claim = f.claim("w1").await.unwrap();
    f.store
        .finish_run(&claim.run(), "w1", Failed, None)
        .await
        .unwrap();
    let created = f.store.create_task(retry.clone(), None).await.unwrap();
    let created = created.task();
    assert_ne!(created.id, original.id);
    assert_eq!(created.status, Queued);
    assert_eq!(created.retry_of.as_ref(), Some(&original.id));
    assert_eq!(created.runs, 0);
    assert_eq!(
        f.store
            .get_task(&original.id)
            .await
            .unwrap()
            .unwrap()
            .status,
        Failed
    );

    // The same id twice is refused; an unknown parent is refused.
    assert!(matches!(
        f.store.create_task(retry, None).await,
        Err(StoreError::AlreadyExists { what: "task", .. })
    ));
    let mut orphan = new_task(TaskKind::Question, &["app"]);
    orphan.follow_up_to = Some(super::harness::task_id());
    assert!(matches!(
        f.store.create_task(orphan, None).await,
        Err(StoreError::NotFound { what: "task", .. })
    ));
}

async fn tasks_list_newest_first_with_a_cursor(f: &Fixture) {
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut task = new_task(TaskKind::Question, &["app"]);
        if i % 2 == 1 {
            task.owner = "bob".into();
        }
        ids.push(
            f.store
                .create_task(task, None)
                .await
                .unwrap()
                .into_task()
                .id,
        );
    }
    let page = |before, owner: Option<&str>, limit| warden_store::TaskQuery {
        owner: owner.map(str::to_string),
        status: None,
        before,
        limit,
    };
    let first = f.store.list_tasks(page(None, None, 2)).await.unwrap();
    assert_eq!(
        first.iter().map(|t| &t.id).collect::<Vec<_>>(),
        [&ids[4], &ids[3]]
    );
    let second = f
        .store
        .list_tasks(page(Some(first[1].id.clone()), None, 10))
        .await
        .unwrap();
    assert_eq!(
        second.iter().map(|t| &t.id).collect::<Vec<_>>(),
        [&ids[2], &ids[1], &ids[0]]
    );
    let bobs = f
        .store
        .list_tasks(page(None, Some("bob"), 10))
        .await
        .unwrap();
    assert_eq!(
        bobs.iter().map(|t| &t.id).collect::<Vec<_>>(),
        [&ids[3], &ids[1]]
    );
    let mut by_status = page(None, None, 10);
    by_status.status = Some(TaskStatus::Queued);
    assert_eq!(f.store.list_tasks(by_status).await.unwrap().len(), 5);
    // The stored task round-trips every field.
    let stored = f.store.get_task(&ids[0]).await.unwrap().unwrap();
    assert_eq!(stored.prompt, "do the thing");
    assert_eq!(stored.metadata, serde_json::json!({"source": "test"}));
    assert_eq!(stored.repos, vec![warden_store::TaskRepo::named("app")]);
    assert_eq!(stored.created_at_ms, super::harness::START_MS);
}

conformance!(
    every_transition_is_checked,
    terminal_statuses_are_immutable,
    transition_is_compare_and_set,
    cancelling_a_running_task_ends_its_run,
    a_retry_is_a_new_linked_task,
    tasks_list_newest_first_with_a_cursor,
);
