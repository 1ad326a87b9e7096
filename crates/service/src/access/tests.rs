//! `Access` over a real SQLite store driven by a manual clock: sign-in by password and by
//! token, the principal re-derived on every use of a session (revoked token, new password,
//! removed user, removed bootstrap token, expiry), and who may manage tokens and sessions.

use std::sync::Arc;
use std::time::Duration;

use warden_store::{ManualClock, Store, StoreOptions};

use super::*;

const ADMIN_TOKEN: &str = "admin-token-0123456789-0123456789";
const START_MS: i64 = 1_796_083_200_000;
const PASSWORD: &str = "correct horse battery";

struct Fixture {
    access: Access,
    store: Arc<dyn Store>,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let store = warden_store::open_with(
        &format!("sqlite://{}", dir.path().join("warden.db").display()),
        StoreOptions {
            clock: Arc::new(clock.clone()),
            postgres_pool_size: 1,
        },
    )
    .await
    .unwrap();
    let bootstrap = Tokens::parse(&format!("root:admin:{ADMIN_TOKEN}")).unwrap();
    Fixture {
        access: Access::new(Arc::clone(&store), bootstrap),
        store,
        clock,
        _dir: dir,
    }
}

fn principal(name: &str, role: Role) -> Principal {
    Principal {
        name: name.into(),
        role,
    }
}

fn admin() -> Principal {
    principal("root", Role::Admin)
}

async fn active(f: &Fixture, secret: &str) -> Option<Principal> {
    f.access.session(secret).await.unwrap().map(|(_, p)| p)
}

#[tokio::test]
async fn a_password_signs_in_and_its_session_acts_with_the_users_current_role() {
    let f = fixture().await;
    let user = f
        .access
        .set_password("alice", "operator", PASSWORD)
        .await
        .unwrap();
    assert_eq!(
        (user.name.as_str(), user.role.as_str()),
        ("alice", "operator")
    );
    let stored = f.store.find_web_user("alice").await.unwrap().unwrap();
    assert!(stored.password_hash.starts_with("$argon2id$"));
    assert!(!stored.password_hash.contains(PASSWORD));

    let signed = f
        .access
        .sign_in_password(
            "alice",
            PASSWORD,
            Some("192.0.2.7"),
            Some("Firefox\u{1b}[31m"),
        )
        .await
        .unwrap();
    assert!(signed.secret.starts_with("wds_") && signed.secret.len() == 4 + 64);
    assert!(signed.session_id.starts_with("ses_") && signed.session_id.len() == 4 + 16);
    assert_eq!(signed.principal, principal("alice", Role::Operator));
    assert_eq!(
        signed.expires_at_ms,
        START_MS + i64::try_from(DEFAULT_SESSION_LIFETIME.as_millis()).unwrap()
    );
    let (view, who) = f.access.session(&signed.secret).await.unwrap().unwrap();
    assert_eq!(who, principal("alice", Role::Operator));
    assert_eq!(view.id, signed.session_id);
    assert_eq!(view.method, SignInMethod::Password);
    assert_eq!(view.address.as_deref(), Some("192.0.2.7"));
    // Control characters never reach a terminal or a page.
    assert_eq!(view.user_agent.as_deref(), Some("Firefox?[31m"));
    // The store keeps the secret's digest, never the secret.
    let row = f.store.list_web_sessions(None).await.unwrap().remove(0);
    assert_eq!(row.digest, token_digest(&signed.secret));
    assert_eq!(row.credential, "password");

    // Wrong password, unknown name, malformed name: one and the same refusal.
    for (name, password) in [
        ("alice", "correct horse batterY"),
        ("nobody", PASSWORD),
        ("not a name", PASSWORD),
        ("alice", ""),
    ] {
        let error = f
            .access
            .sign_in_password(name, password, None, None)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, AccessError::Unauthorized(m) if m == "wrong name or password"),
            "{name}: {error:?}"
        );
    }
    assert!(matches!(
        f.access
            .sign_in_password("alice", &"x".repeat(MAX_PASSWORD_CHARS + 1), None, None)
            .await,
        Err(AccessError::Unauthorized(_))
    ));
}

#[tokio::test]
async fn a_new_password_ends_the_users_sessions_and_a_removed_user_has_none() {
    let f = fixture().await;
    f.access
        .set_password("alice", "viewer", PASSWORD)
        .await
        .unwrap();
    let first = f
        .access
        .sign_in_password("alice", PASSWORD, None, None)
        .await
        .unwrap();
    assert_eq!(
        active(&f, &first.secret).await,
        Some(principal("alice", Role::Viewer))
    );
    // A new password (here with a new role): the old session ends, the old password fails.
    f.access
        .set_password("alice", "admin", "a different passphrase")
        .await
        .unwrap();
    assert_eq!(active(&f, &first.secret).await, None);
    assert!(f
        .access
        .sign_in_password("alice", PASSWORD, None, None)
        .await
        .is_err());
    let second = f
        .access
        .sign_in_password("alice", "a different passphrase", None, None)
        .await
        .unwrap();
    assert_eq!(
        active(&f, &second.secret).await,
        Some(principal("alice", Role::Admin))
    );

    f.access.remove_web_user("alice").await.unwrap();
    assert_eq!(active(&f, &second.secret).await, None);
    assert!(f.access.web_users().await.unwrap().is_empty());
    assert!(matches!(
        f.access.remove_web_user("alice").await,
        Err(AccessError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_token_session_lasts_while_its_token_identifies() {
    let f = fixture().await;
    let created = f
        .access
        .create_token(&admin(), "operator", Some("ci-bot"))
        .await
        .unwrap();
    let signed = f
        .access
        .sign_in_token(&format!(" {} ", created.secret), None, None)
        .await
        .unwrap();
    assert_eq!(signed.principal, principal("ci-bot", Role::Operator));
    let (view, _) = f.access.session(&signed.secret).await.unwrap().unwrap();
    assert_eq!(view.method, SignInMethod::Token);
    // The session's credential is the token's digest, never the token.
    let row = f.store.list_web_sessions(None).await.unwrap().remove(0);
    assert_eq!(row.credential, token_digest(&created.secret));

    f.access
        .revoke_token(&admin(), &created.token.id)
        .await
        .unwrap();
    assert_eq!(active(&f, &signed.secret).await, None);
    // Its sessions are revoked with it, so no list shows them as active.
    assert!(f.access.sessions(&admin()).await.unwrap().is_empty());
    assert!(matches!(
        f.access.sign_in_token(&created.secret, None, None).await,
        Err(AccessError::Unauthorized(_))
    ));

    // A bootstrap token's session ends when the server no longer has that token.
    let root = f
        .access
        .sign_in_token(ADMIN_TOKEN, None, None)
        .await
        .unwrap();
    assert_eq!(active(&f, &root.secret).await, Some(admin()));
    let restarted = Access::new(Arc::clone(&f.store), Tokens::default());
    assert!(restarted.session(&root.secret).await.unwrap().is_none());

    for bad in ["", "wdn_nope", &"x".repeat(MAX_TOKEN_BYTES + 1)] {
        assert!(matches!(
            f.access.sign_in_token(bad, None, None).await,
            Err(AccessError::Unauthorized(_))
        ));
    }
}

#[tokio::test]
async fn sessions_expire_by_the_store_clock_and_sign_out_ends_them() {
    let f = fixture().await;
    let access = f
        .access
        .clone()
        .with_session_lifetime(Duration::from_secs(60));
    let signed = access.sign_in_token(ADMIN_TOKEN, None, None).await.unwrap();
    assert_eq!(signed.expires_at_ms, START_MS + 60_000);
    f.clock.advance(Duration::from_secs(59));
    assert!(access.session(&signed.secret).await.unwrap().is_some());
    f.clock.advance(Duration::from_secs(1));
    assert!(access.session(&signed.secret).await.unwrap().is_none());

    let other = access.sign_in_token(ADMIN_TOKEN, None, None).await.unwrap();
    access.sign_out(&other.secret).await.unwrap();
    assert!(access.session(&other.secret).await.unwrap().is_none());
    // Signing out twice, or with nonsense, is no error.
    access.sign_out(&other.secret).await.unwrap();
    access.sign_out("garbage").await.unwrap();
    // Malformed secrets are refused before the store is asked.
    for malformed in [
        "",
        "wds_",
        &format!("wds_{}", "A".repeat(64)),
        &format!("wds_{}", "a".repeat(63)),
        &format!("wdn_{}", "a".repeat(64)),
    ] {
        assert!(access.session(malformed).await.unwrap().is_none());
    }
}

#[tokio::test]
async fn admins_see_and_revoke_every_session_others_only_their_own() {
    let f = fixture().await;
    f.access
        .set_password("alice", "operator", PASSWORD)
        .await
        .unwrap();
    f.access
        .set_password("bob", "viewer", PASSWORD)
        .await
        .unwrap();
    let alice = f
        .access
        .sign_in_password("alice", PASSWORD, None, None)
        .await
        .unwrap();
    let bob = f
        .access
        .sign_in_password("bob", PASSWORD, None, None)
        .await
        .unwrap();
    let root = f
        .access
        .sign_in_token(ADMIN_TOKEN, None, None)
        .await
        .unwrap();
    let ids = |views: Vec<SessionView>| views.into_iter().map(|v| v.id).collect::<Vec<_>>();
    let as_alice = principal("alice", Role::Operator);
    let as_bob = principal("bob", Role::Viewer);
    assert_eq!(
        ids(f.access.sessions(&as_alice).await.unwrap()),
        vec![alice.session_id.clone()]
    );
    assert_eq!(f.access.sessions(&admin()).await.unwrap().len(), 3);

    // Another's session does not exist for a non-admin.
    assert!(matches!(
        f.access.revoke_session(&as_alice, &bob.session_id).await,
        Err(AccessError::NotFound(_))
    ));
    assert!(active(&f, &bob.secret).await.is_some());
    // Their own they may end.
    let revoked = f
        .access
        .revoke_session(&as_bob, &bob.session_id)
        .await
        .unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(active(&f, &bob.secret).await.is_none());
    // An admin ends anyone's; an ended or unknown one is not found.
    f.access
        .revoke_session(&admin(), &alice.session_id)
        .await
        .unwrap();
    assert!(active(&f, &alice.secret).await.is_none());
    for gone in [alice.session_id.as_str(), "ses_0000000000000000"] {
        assert!(matches!(
            f.access.revoke_session(&admin(), gone).await,
            Err(AccessError::NotFound(_))
        ));
    }
    assert_eq!(
        ids(f.access.sessions(&admin()).await.unwrap()),
        [root.session_id]
    );
}

#[tokio::test]
async fn only_admins_manage_tokens_and_inputs_are_checked() {
    let f = fixture().await;
    for role in [Role::Operator, Role::Viewer] {
        let caller = principal("olga", role);
        for refused in [
            f.access.create_token(&caller, "viewer", None).await.err(),
            f.access.list_tokens(&caller).await.err(),
            f.access
                .revoke_token(&caller, "tok_0000000000000000")
                .await
                .err(),
        ] {
            assert!(
                matches!(&refused, Some(AccessError::Forbidden(m)) if m == "only admin tokens manage tokens"),
                "{refused:?}"
            );
        }
    }
    assert!(f.access.list_tokens(&admin()).await.unwrap().is_empty());
    let created = f
        .access
        .create_token(&admin(), "viewer", None)
        .await
        .unwrap();
    assert_eq!(created.token.name, created.token.id);
    assert_eq!(created.token.created_by, "root");
    let identified = f
        .access
        .identify_token(&digest(&created.secret))
        .await
        .unwrap();
    assert_eq!(identified.role, Role::Viewer);
    assert!(matches!(
        f.access.create_token(&admin(), "root", None).await,
        Err(AccessError::Invalid(m)) if m.contains("unknown role \"root\"")
    ));
    assert!(matches!(
        f.access.create_token(&admin(), "viewer", Some("a b")).await,
        Err(AccessError::Invalid(_))
    ));
    assert!(matches!(
        f.access.revoke_token(&admin(), "tok_nope").await,
        Err(AccessError::NotFound(_))
    ));
    assert_eq!(f.access.list_tokens(&admin()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn passwords_and_names_are_checked_before_anything_is_stored() {
    let f = fixture().await;
    let check = |result: Result<WebUserView, AccessError>, expected: &str| match result {
        Err(AccessError::Invalid(message)) => {
            assert!(message.contains(expected), "{message}")
        }
        other => panic!("{other:?}"),
    };
    check(
        f.access.set_password("alice", "operator", "short").await,
        "at least 12",
    );
    check(
        f.access
            .set_password("alice", "operator", &"x".repeat(MAX_PASSWORD_CHARS + 1))
            .await,
        "at most 1024",
    );
    check(
        f.access.set_password("a b", "operator", PASSWORD).await,
        "invalid user name",
    );
    check(
        f.access.set_password("alice", "root", PASSWORD).await,
        "unknown role",
    );
    assert!(f.access.web_users().await.unwrap().is_empty());
}
