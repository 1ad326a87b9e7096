//! The outbox of side-effect intents: claimed under a lease by one worker at a time, marked
//! done exactly once, retried at a set time or failed for good; each consumer claims only the
//! kinds it names.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use warden_protocol::TaskKind;
use warden_store::{IntentStatus, NewIntent, StoreError};

use super::harness::{Fixture, LEASE};

/// The kind the tests enqueue, as a claim filter.
const PUSH: &[&str] = &["push"];

fn intent(id: &str, task: &warden_protocol::TaskId) -> NewIntent {
    of_kind(id, task, "push")
}

fn of_kind(id: &str, task: &warden_protocol::TaskId, kind: &str) -> NewIntent {
    NewIntent {
        id: id.into(),
        task: task.clone(),
        kind: kind.into(),
        payload: json!({"branch": "warden/x", "commit": "abc"}),
    }
}

async fn intents_are_claimed_once_and_done_once(f: &Fixture) {
    let task = f.task(TaskKind::Change, &["app"]).await.id;
    const INTENTS: usize = 20;
    for i in 0..INTENTS {
        let created = f
            .store
            .enqueue_intent(intent(&format!("int_{i:02}"), &task))
            .await
            .unwrap();
        assert_eq!(
            (created.status, created.attempts),
            (IntentStatus::Pending, 0)
        );
    }
    assert!(matches!(
        f.store.enqueue_intent(intent("int_00", &task)).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    let other = f.another_handle().await;
    let mut workers = Vec::new();
    for w in 0..4 {
        let store = if w % 2 == 0 {
            f.store.clone()
        } else {
            other.clone()
        };
        workers.push(tokio::spawn(async move {
            let name = format!("w{w}");
            let mut done = Vec::new();
            while let Some(claimed) = store.claim_intent(&name, LEASE, PUSH).await.unwrap() {
                assert_eq!(claimed.lease_owner.as_deref(), Some(name.as_str()));
                let finished = store.complete_intent(&claimed.id, &name).await.unwrap();
                assert_eq!(finished.status, IntentStatus::Done);
                done.push(claimed.id);
            }
            done
        }));
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for worker in workers {
        for id in worker.await.unwrap() {
            *counts.entry(id).or_default() += 1;
        }
    }
    assert_eq!(counts.len(), INTENTS);
    assert!(counts.values().all(|n| *n == 1));
    // Done exactly once: a second completion is refused.
    assert!(matches!(
        f.store.complete_intent("int_00", "w0").await,
        Err(StoreError::IntentState {
            status: IntentStatus::Done,
            ..
        })
    ));
    let listed = f.store.list_intents(&task).await.unwrap();
    assert_eq!(listed.len(), INTENTS);
    assert!(listed
        .iter()
        .all(|i| i.status == IntentStatus::Done && i.attempts == 1 && i.done_at_ms.is_some()));
    assert_eq!(
        listed[0].payload,
        json!({"branch": "warden/x", "commit": "abc"})
    );
}

async fn leases_expire_and_failures_retry(f: &Fixture) {
    let task = f.task(TaskKind::Change, &["app"]).await.id;
    f.store
        .enqueue_intent(intent("int_a", &task))
        .await
        .unwrap();
    let first = f
        .store
        .claim_intent("w1", LEASE, PUSH)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.attempts, 1);
    assert!(f
        .store
        .claim_intent("w2", LEASE, PUSH)
        .await
        .unwrap()
        .is_none());

    // w1 stalls past its lease; w2 takes over, and w1 may no longer complete it.
    f.clock.advance(LEASE + Duration::from_secs(1));
    let second = f
        .store
        .claim_intent("w2", LEASE, PUSH)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((second.id.as_str(), second.attempts), ("int_a", 2));
    assert!(matches!(
        f.store.complete_intent("int_a", "w1").await,
        Err(StoreError::IntentLeaseLost { .. })
    ));

    // w2 fails and asks for a retry in a minute: not claimable before then.
    let retry_at = second.lease_expires_at_ms.unwrap() + 60_000;
    let failed = f
        .store
        .fail_intent("int_a", "w2", "remote said 502", Some(retry_at))
        .await
        .unwrap();
    assert_eq!(failed.status, IntentStatus::Pending);
    assert_eq!(failed.last_error.as_deref(), Some("remote said 502"));
    assert_eq!(failed.lease_owner, None);
    assert!(f
        .store
        .claim_intent("w3", LEASE, PUSH)
        .await
        .unwrap()
        .is_none());
    f.clock.advance(LEASE + Duration::from_secs(60));
    let third = f
        .store
        .claim_intent("w3", LEASE, PUSH)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.attempts, 3);

    // Failing for good is final.
    let dead = f
        .store
        .fail_intent("int_a", "w3", "permission denied", None)
        .await
        .unwrap();
    assert_eq!(dead.status, IntentStatus::Failed);
    assert!(f
        .store
        .claim_intent("w3", LEASE, PUSH)
        .await
        .unwrap()
        .is_none());
    assert!(matches!(
        f.store.complete_intent("int_a", "w3").await,
        Err(StoreError::IntentState {
            status: IntentStatus::Failed,
            ..
        })
    ));
    assert!(matches!(
        f.store.complete_intent("int_zz", "w3").await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn consumers_claim_only_their_own_kinds(f: &Fixture) {
    let task = f.task(TaskKind::Change, &["app"]).await.id;
    // Oldest first overall: another consumer's intent is due before each of ours.
    for (id, kind) in [
        ("int_1", "publish"),
        ("int_2", "callback"),
        ("int_3", "publish"),
        // A kind that would match a naive separator-joined list of "callback" and "publish".
        ("int_4", "callback,publish"),
        ("int_5", "callback"),
    ] {
        f.store
            .enqueue_intent(of_kind(id, &task, kind))
            .await
            .unwrap();
    }
    let mut callbacks = Vec::new();
    while let Some(claimed) = f
        .store
        .claim_intent("cb", LEASE, &["callback"])
        .await
        .unwrap()
    {
        assert_eq!(claimed.kind, "callback", "{claimed:?}");
        f.store.complete_intent(&claimed.id, "cb").await.unwrap();
        callbacks.push(claimed.id);
    }
    assert_eq!(callbacks, ["int_2", "int_5"]);
    // Nothing else was touched: no lease taken, no attempt counted.
    let listed = f.store.list_intents(&task).await.unwrap();
    for other in listed.iter().filter(|i| i.kind != "callback") {
        assert_eq!(
            (other.status, other.attempts, other.lease_owner.as_deref()),
            (IntentStatus::Pending, 0, None),
            "{other:?}"
        );
    }
    // An empty filter claims nothing; several kinds claim any of them, oldest first.
    assert!(f
        .store
        .claim_intent("x", LEASE, &[])
        .await
        .unwrap()
        .is_none());
    let both = ["publish", "callback,publish"];
    let mut rest = Vec::new();
    while let Some(claimed) = f.store.claim_intent("p", LEASE, &both).await.unwrap() {
        rest.push(claimed.id);
    }
    assert_eq!(rest, ["int_1", "int_3", "int_4"]);
}

conformance!(
    intents_are_claimed_once_and_done_once,
    leases_expire_and_failures_retry,
    consumers_claim_only_their_own_kinds
);
