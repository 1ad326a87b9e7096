//! API tokens: stored by digest, unique by id and by digest, found only while unrevoked,
//! revoked idempotently.

use std::time::Duration;

use warden_store::{NewApiToken, StoreError};

use super::harness::{Fixture, START_MS};

fn token(id: &str, digest: &str) -> NewApiToken {
    NewApiToken {
        id: id.into(),
        name: format!("{id}-name"),
        role: "operator".into(),
        digest: digest.into(),
        created_by: "root".into(),
    }
}

async fn tokens_are_found_by_digest_until_revoked(f: &Fixture) {
    let a = f
        .store
        .create_api_token(token("tok_a", &"a".repeat(64)))
        .await
        .unwrap();
    assert_eq!(a.name, "tok_a-name");
    assert_eq!(a.role, "operator");
    assert_eq!(a.created_by, "root");
    assert_eq!(a.created_at_ms, START_MS);
    assert_eq!(a.revoked_at_ms, None);
    f.clock.advance(Duration::from_secs(1));
    let b = f
        .store
        .create_api_token(token("tok_b", &"b".repeat(64)))
        .await
        .unwrap();

    assert_eq!(
        f.store.find_api_token(&"a".repeat(64)).await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(f.store.find_api_token(&"c".repeat(64)).await.unwrap(), None);
    assert_eq!(
        f.store.list_api_tokens().await.unwrap(),
        [a.clone(), b.clone()]
    );

    f.clock.advance(Duration::from_secs(1));
    let revoked = f.store.revoke_api_token("tok_a").await.unwrap();
    assert_eq!(revoked.revoked_at_ms, Some(START_MS + 2_000));
    assert_eq!(f.store.find_api_token(&"a".repeat(64)).await.unwrap(), None);
    // Still listed, and the other token is untouched.
    let listed = f.store.list_api_tokens().await.unwrap();
    assert_eq!(listed, [revoked.clone(), b.clone()]);
    assert_eq!(
        f.store.find_api_token(&"b".repeat(64)).await.unwrap(),
        Some(b)
    );

    // Revoking again keeps the first revocation time.
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.store.revoke_api_token("tok_a").await.unwrap(), revoked);
    assert!(matches!(
        f.store.revoke_api_token("tok_nope").await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn token_ids_and_digests_are_unique(f: &Fixture) {
    f.store
        .create_api_token(token("tok_a", &"a".repeat(64)))
        .await
        .unwrap();
    assert!(matches!(
        f.store
            .create_api_token(token("tok_a", &"d".repeat(64)))
            .await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert!(matches!(
        f.store
            .create_api_token(token("tok_b", &"a".repeat(64)))
            .await,
        Err(StoreError::AlreadyExists { .. })
    ));
    // A revoked token's digest stays taken: a leaked secret cannot come back to life.
    f.store.revoke_api_token("tok_a").await.unwrap();
    assert!(matches!(
        f.store
            .create_api_token(token("tok_c", &"a".repeat(64)))
            .await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(f.store.list_api_tokens().await.unwrap().len(), 1);
}

conformance!(
    tokens_are_found_by_digest_until_revoked,
    token_ids_and_digests_are_unique,
);
