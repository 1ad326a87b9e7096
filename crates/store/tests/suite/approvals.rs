//! Approvals: bound to a subject hash, decided once, used once.

use warden_protocol::TaskKind;
use warden_store::{ApprovalStatus, Decision, NewApproval, StoreError};

use super::harness::Fixture;

fn approval(id: &str, task: &warden_protocol::TaskId) -> NewApproval {
    NewApproval {
        id: id.into(),
        task: task.clone(),
        kind: "publish".into(),
        subject_hash: "sha256:proposal-1".into(),
    }
}

async fn approvals_are_single_use(f: &Fixture) {
    let task = f.task(TaskKind::Change, &["app"]).await.id;
    let created = f
        .store
        .create_approval(approval("apr_1", &task))
        .await
        .unwrap();
    assert_eq!(created.status, ApprovalStatus::Pending);
    assert!(matches!(
        f.store.create_approval(approval("apr_1", &task)).await,
        Err(StoreError::AlreadyExists {
            what: "approval",
            ..
        })
    ));
    let pending = f
        .store
        .list_approvals(Some(ApprovalStatus::Pending))
        .await
        .unwrap();
    assert_eq!(pending, vec![created.clone()]);

    // Bound to exactly what it approves; not usable before it is approved.
    assert!(matches!(
        f.store
            .decide_approval("apr_1", "sha256:proposal-2", Decision::Approve, "bob")
            .await,
        Err(StoreError::ApprovalMismatch { .. })
    ));
    assert!(matches!(
        f.store.consume_approval("apr_1", "sha256:proposal-1").await,
        Err(StoreError::ApprovalState {
            actual: ApprovalStatus::Pending,
            ..
        })
    ));
    let approved = f
        .store
        .decide_approval("apr_1", "sha256:proposal-1", Decision::Approve, "bob")
        .await
        .unwrap();
    assert_eq!(approved.status, ApprovalStatus::Approved);
    assert_eq!(approved.decided_by.as_deref(), Some("bob"));
    assert!(approved.decided_at_ms.is_some());
    assert!(matches!(
        f.store
            .decide_approval("apr_1", "sha256:proposal-1", Decision::Reject, "eve")
            .await,
        Err(StoreError::ApprovalState {
            actual: ApprovalStatus::Approved,
            ..
        })
    ));
    assert!(matches!(
        f.store.consume_approval("apr_1", "sha256:other").await,
        Err(StoreError::ApprovalMismatch { .. })
    ));

    // Many executors race to use it: exactly one may act.
    let mut racers = Vec::new();
    for _ in 0..8 {
        let store = f.store.clone();
        racers.push(tokio::spawn(async move {
            store.consume_approval("apr_1", "sha256:proposal-1").await
        }));
    }
    let mut used = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(a) => {
                used += 1;
                assert_eq!(a.status, ApprovalStatus::Consumed);
                assert!(a.consumed_at_ms.is_some());
            }
            Err(StoreError::ApprovalState { actual, .. }) => {
                assert_eq!(actual, ApprovalStatus::Consumed)
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!(used, 1);

    // A rejected approval is never usable.
    f.store
        .create_approval(approval("apr_2", &task))
        .await
        .unwrap();
    f.store
        .decide_approval("apr_2", "sha256:proposal-1", Decision::Reject, "bob")
        .await
        .unwrap();
    assert!(matches!(
        f.store.consume_approval("apr_2", "sha256:proposal-1").await,
        Err(StoreError::ApprovalState {
            actual: ApprovalStatus::Rejected,
            ..
        })
    ));
    assert!(f
        .store
        .list_approvals(Some(ApprovalStatus::Pending))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(f.store.list_approvals(None).await.unwrap().len(), 2);
    assert_eq!(
        f.store.get_approval("apr_2").await.unwrap().unwrap().status,
        ApprovalStatus::Rejected
    );
    assert!(f.store.get_approval("apr_9").await.unwrap().is_none());
    assert!(matches!(
        f.store
            .decide_approval("apr_9", "x", Decision::Approve, "bob")
            .await,
        Err(StoreError::NotFound {
            what: "approval",
            ..
        })
    ));
    let stranger = super::harness::task_id();
    assert!(matches!(
        f.store.create_approval(approval("apr_3", &stranger)).await,
        Err(StoreError::NotFound { what: "task", .. })
    ));
}

conformance!(approvals_are_single_use);
