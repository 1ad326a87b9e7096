//! A task's conversation: messages in order per task, and answering a task waiting for input
//! (message and re-queue in one transaction, only from `waiting_input`).

use std::time::Duration;

use warden_protocol::{TaskKind, TaskStatus};
use warden_store::{StoreError, MESSAGE_AGENT, MESSAGE_USER};

use super::harness::{task_id, Fixture, START_MS};

async fn messages_are_kept_in_order_per_task(f: &Fixture) {
    let a = f.task(TaskKind::Question, &["app"]).await.id;
    let b = f.task(TaskKind::Question, &["app"]).await.id;
    assert!(f.store.task_messages(&a).await.unwrap().is_empty());
    let first = f
        .store
        .append_task_message(&a, MESSAGE_AGENT, "which branch?", "openai:gpt-test")
        .await
        .unwrap();
    assert_eq!(first.seq, 1);
    assert_eq!(first.at_ms, START_MS);
    f.clock.advance(Duration::from_secs(5));
    f.store
        .append_task_message(&b, MESSAGE_USER, "other task", "bob")
        .await
        .unwrap();
    let second = f
        .store
        .append_task_message(&a, MESSAGE_USER, "main", "alice")
        .await
        .unwrap();
    assert_eq!(second.seq, 2);
    let messages = f.store.task_messages(&a).await.unwrap();
    assert_eq!(messages, [first, second]);
    assert_eq!(messages[1].role, "user");
    assert_eq!(messages[1].author, "alice");
    assert_eq!(messages[1].at_ms, START_MS + 5_000);
    assert_eq!(f.store.task_messages(&b).await.unwrap().len(), 1);

    assert!(matches!(
        f.store
            .append_task_message(&task_id(), MESSAGE_USER, "x", "alice")
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(f
        .store
        .append_task_message(&a, "system", "x", "alice")
        .await
        .is_err());
    assert_eq!(f.store.task_messages(&a).await.unwrap().len(), 2);
}

async fn answering_requeues_a_waiting_task(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await;
    // Not waiting yet: refused, and nothing is recorded.
    assert!(matches!(
        f.store.answer_task(&task.id, "too early", "alice").await,
        Err(StoreError::StatusConflict {
            actual: TaskStatus::Queued,
            ..
        })
    ));
    assert!(f.store.task_messages(&task.id).await.unwrap().is_empty());

    let claim = f.claim("w1").await.unwrap();
    f.store
        .append_task_message(&task.id, MESSAGE_AGENT, "which branch?", "model")
        .await
        .unwrap();
    f.store
        .finish_run(&claim.run(), "w1", TaskStatus::WaitingInput, None)
        .await
        .unwrap();
    let answered = f
        .store
        .answer_task(&task.id, "main", "alice")
        .await
        .unwrap();
    assert_eq!(answered.status, TaskStatus::Queued);
    let messages = f.store.task_messages(&task.id).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].role, MESSAGE_USER);
    assert_eq!(messages[1].text, "main");
    assert_eq!(messages[1].author, "alice");

    // Answered once: a second answer conflicts; a worker claims the task again.
    assert!(matches!(
        f.store.answer_task(&task.id, "again", "alice").await,
        Err(StoreError::StatusConflict { .. })
    ));
    let again = f.claim("w2").await.unwrap();
    assert_eq!(again.task.id, task.id);
    assert_eq!(again.run_number, 2);
    assert!(matches!(
        f.store.answer_task(&task_id(), "x", "alice").await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn answering_a_task_parked_with_its_run_open_ends_the_run(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await;
    let claim = f.claim("w1").await.unwrap();
    f.store
        .transition(
            &task.id,
            TaskStatus::Running,
            TaskStatus::WaitingInput,
            None,
        )
        .await
        .unwrap();
    f.store.answer_task(&task.id, "yes", "alice").await.unwrap();
    let runs = f.store.list_runs(&task.id).await.unwrap();
    assert!(runs[0].ended_at_ms.is_some());
    assert!(matches!(
        f.store
            .heartbeat(&claim.run(), "w1", super::harness::LEASE)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
}

conformance!(
    messages_are_kept_in_order_per_task,
    answering_requeues_a_waiting_task,
    answering_a_task_parked_with_its_run_open_ends_the_run,
);
