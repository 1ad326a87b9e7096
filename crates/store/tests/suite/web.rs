//! Web console users and sessions: a user's password is replaced in place and ends the
//! sessions it signed in; deleting a user ends them too; sessions are found by digest only
//! while unrevoked and unexpired at the store clock's now, listed active only, revoked
//! idempotently, and deleted a day after they ended.

use std::time::Duration;

use warden_store::{NewWebSession, StoreError, WEB_CREDENTIAL_PASSWORD};

use super::harness::{Fixture, START_MS};

const HOUR: Duration = Duration::from_secs(3600);

fn session(id: &str, name: &str, credential: &str) -> NewWebSession {
    NewWebSession {
        id: id.into(),
        digest: format!("{id:0>64}"),
        name: name.into(),
        role_at_sign_in: "operator".into(),
        credential: credential.into(),
        address: Some("192.0.2.1".into()),
        user_agent: None,
        lifetime: HOUR,
    }
}

fn digest(id: &str) -> String {
    format!("{id:0>64}")
}

async fn web_users_are_put_found_listed_and_deleted(f: &Fixture) {
    let alice = f
        .store
        .put_web_user("alice", "operator", "$argon2id$one")
        .await
        .unwrap();
    assert_eq!(
        (
            alice.name.as_str(),
            alice.role.as_str(),
            alice.password_hash.as_str()
        ),
        ("alice", "operator", "$argon2id$one")
    );
    assert_eq!(
        (alice.created_at_ms, alice.updated_at_ms),
        (START_MS, START_MS)
    );
    f.clock.advance(Duration::from_secs(5));
    f.store
        .put_web_user("bob", "viewer", "$argon2id$bob")
        .await
        .unwrap();
    // Put again: role and hash replaced, creation time kept.
    let replaced = f
        .store
        .put_web_user("alice", "admin", "$argon2id$two")
        .await
        .unwrap();
    assert_eq!(replaced.role, "admin");
    assert_eq!(replaced.password_hash, "$argon2id$two");
    assert_eq!(replaced.created_at_ms, START_MS);
    assert_eq!(replaced.updated_at_ms, START_MS + 5_000);
    assert_eq!(
        f.store.find_web_user("alice").await.unwrap(),
        Some(replaced.clone())
    );
    assert_eq!(f.store.find_web_user("carol").await.unwrap(), None);
    let names: Vec<_> = f
        .store
        .list_web_users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(names, ["alice", "bob"]);

    f.store.delete_web_user("alice").await.unwrap();
    assert_eq!(f.store.find_web_user("alice").await.unwrap(), None);
    assert!(matches!(
        f.store.delete_web_user("alice").await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(f.store.list_web_users().await.unwrap().len(), 1);
}

async fn web_sessions_are_found_only_while_active(f: &Fixture) {
    let created = f
        .store
        .create_web_session(session("ses_a", "alice", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    assert_eq!(created.created_at_ms, START_MS);
    assert_eq!(created.expires_at_ms, START_MS + 3_600_000);
    assert_eq!(created.revoked_at_ms, None);
    assert_eq!(created.address.as_deref(), Some("192.0.2.1"));
    assert_eq!(created.user_agent, None);
    assert_eq!(
        f.store.find_web_session(&digest("ses_a")).await.unwrap(),
        Some(created.clone())
    );
    assert_eq!(
        f.store.find_web_session(&digest("ses_x")).await.unwrap(),
        None
    );
    // Ids and digests are unique.
    assert!(matches!(
        f.store
            .create_web_session(NewWebSession {
                digest: digest("ses_other"),
                ..session("ses_a", "bob", "password")
            })
            .await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert!(matches!(
        f.store
            .create_web_session(NewWebSession {
                id: "ses_b".into(),
                ..session("ses_a", "bob", "password")
            })
            .await,
        Err(StoreError::AlreadyExists { .. })
    ));

    // Expiry is the store clock's: found just before, not at the instant it expires.
    f.clock.advance(HOUR - Duration::from_millis(1));
    assert!(f
        .store
        .find_web_session(&digest("ses_a"))
        .await
        .unwrap()
        .is_some());
    f.clock.advance(Duration::from_millis(1));
    assert_eq!(
        f.store.find_web_session(&digest("ses_a")).await.unwrap(),
        None
    );
    assert!(f.store.list_web_sessions(None).await.unwrap().is_empty());
}

async fn web_sessions_are_listed_and_revoked(f: &Fixture) {
    let a = f
        .store
        .create_web_session(session("ses_a", "alice", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    f.clock.advance(Duration::from_secs(1));
    let b = f
        .store
        .create_web_session(session("ses_b", "bob", &"d".repeat(64)))
        .await
        .unwrap();
    assert_eq!(
        f.store.list_web_sessions(None).await.unwrap(),
        [a.clone(), b.clone()]
    );
    assert_eq!(
        f.store.list_web_sessions(Some("bob")).await.unwrap(),
        vec![b.clone()]
    );
    assert!(f
        .store
        .list_web_sessions(Some("carol"))
        .await
        .unwrap()
        .is_empty());

    f.clock.advance(Duration::from_secs(1));
    let revoked = f.store.revoke_web_session("ses_a").await.unwrap();
    assert_eq!(revoked.revoked_at_ms, Some(START_MS + 2_000));
    assert_eq!(
        f.store.find_web_session(&digest("ses_a")).await.unwrap(),
        None
    );
    assert_eq!(f.store.list_web_sessions(None).await.unwrap(), vec![b]);
    // Again: unchanged. Unknown: not found.
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.store.revoke_web_session("ses_a").await.unwrap(), revoked);
    assert!(matches!(
        f.store.revoke_web_session("ses_nope").await,
        Err(StoreError::NotFound { .. })
    ));
}

/// The ids of the active sessions, oldest first.
async fn active(f: &Fixture) -> Vec<String> {
    f.store
        .list_web_sessions(None)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect()
}

async fn a_new_password_or_a_deleted_user_ends_its_password_sessions_only(f: &Fixture) {
    f.store
        .put_web_user("alice", "operator", "$argon2id$one")
        .await
        .unwrap();
    let token_credential = "e".repeat(64);
    for (id, name, credential) in [
        ("ses_p1", "alice", WEB_CREDENTIAL_PASSWORD),
        ("ses_p2", "alice", WEB_CREDENTIAL_PASSWORD),
        ("ses_t", "alice", token_credential.as_str()),
        ("ses_bob", "bob", WEB_CREDENTIAL_PASSWORD),
    ] {
        f.store
            .create_web_session(session(id, name, credential))
            .await
            .unwrap();
    }
    f.clock.advance(Duration::from_secs(1));
    f.store
        .put_web_user("alice", "operator", "$argon2id$two")
        .await
        .unwrap();
    // Alice's password sessions ended; her token session and Bob's did not (listed by
    // creation time, then id).
    assert_eq!(active(f).await, ["ses_bob", "ses_t"]);
    f.store
        .create_web_session(session("ses_p3", "alice", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    f.store.delete_web_user("alice").await.unwrap();
    assert_eq!(active(f).await, ["ses_bob", "ses_t"]);
    assert_eq!(
        f.store.find_web_session(&digest("ses_p3")).await.unwrap(),
        None
    );
}

async fn sessions_ended_more_than_a_day_ago_are_deleted(f: &Fixture) {
    f.store
        .create_web_session(session("ses_old", "alice", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    f.store
        .create_web_session(session("ses_revoked", "alice", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    f.store.revoke_web_session("ses_revoked").await.unwrap();
    // A day after it expired the expired one is still there (revocable, not found)...
    f.clock.advance(HOUR + Duration::from_secs(86_400));
    f.store
        .create_web_session(session("ses_new", "bob", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    assert!(f.store.revoke_web_session("ses_old").await.is_ok());
    // ...and gone once a later session is created.
    f.clock.advance(Duration::from_secs(1));
    f.store
        .create_web_session(session("ses_newer", "bob", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    for gone in ["ses_old", "ses_revoked"] {
        assert!(
            matches!(
                f.store.revoke_web_session(gone).await,
                Err(StoreError::NotFound { .. })
            ),
            "{gone}"
        );
    }
    assert_eq!(
        f.store.list_web_sessions(Some("bob")).await.unwrap().len(),
        2
    );
}

/// Another process's store sees a session end as soon as the new password is stored.
async fn another_handle_sees_sessions_end_at_once(f: &Fixture) {
    let other = f.another_handle().await;
    f.store
        .put_web_user("alice", "operator", "$argon2id$one")
        .await
        .unwrap();
    f.store
        .create_web_session(session("ses_a", "alice", WEB_CREDENTIAL_PASSWORD))
        .await
        .unwrap();
    assert!(other
        .find_web_session(&digest("ses_a"))
        .await
        .unwrap()
        .is_some());
    assert!(other.find_web_user("alice").await.unwrap().is_some());
    f.store
        .put_web_user("alice", "operator", "$argon2id$two")
        .await
        .unwrap();
    assert_eq!(
        other.find_web_session(&digest("ses_a")).await.unwrap(),
        None
    );
}

conformance!(
    web_users_are_put_found_listed_and_deleted,
    web_sessions_are_found_only_while_active,
    web_sessions_are_listed_and_revoked,
    a_new_password_or_a_deleted_user_ends_its_password_sessions_only,
    sessions_ended_more_than_a_day_ago_are_deleted,
    another_handle_sees_sessions_end_at_once,
);
