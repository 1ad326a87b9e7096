//! `warden web` as an operator runs it next to `warden serve`'s database: a password set from
//! stdin signs in (through the same service the console uses), only its hash is stored, users
//! and sessions are listed without secrets, a session revoked on the command line stops
//! working, a new password or a removed user ends the user's sessions, and bad input is a
//! usage error that changes nothing.

#![allow(clippy::disallowed_methods)] // the tests spawn the binary under test

use std::sync::Arc;

use warden_service::access::{Access, Tokens};

use super::support::Warden;

const PASSWORD: &str = "correct horse battery staple";

/// The identity service over the database the CLI wrote, as `warden serve` would open it.
fn access(warden: &Warden) -> (tokio::runtime::Runtime, Access) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = format!(
        "sqlite://{}",
        warden.home.path().join("warden.db").display()
    );
    let store = runtime.block_on(warden_store::open(&url)).unwrap();
    (runtime, Access::new(Arc::clone(&store), Tokens::default()))
}

fn database_contains(warden: &Warden, needle: &str) -> bool {
    std::fs::read_dir(warden.home.path())
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("warden.db"))
        .any(|entry| {
            std::fs::read(entry.path())
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
        })
}

#[test]
fn a_password_set_from_stdin_signs_in_and_sessions_are_listed_and_revoked() {
    let warden = Warden::faux();
    let set = warden.run_with_stdin(
        &["web", "passwd", "alice", "--role", "admin"],
        &format!("{PASSWORD}\n"),
    );
    assert_eq!(set.code, 0, "{}", set.stderr);
    assert!(
        set.stderr.contains("password set for alice (role admin)"),
        "{}",
        set.stderr
    );
    assert!(set.stdout.is_empty(), "{}", set.stdout);
    // The default role is operator.
    let bob = warden.run_with_stdin(&["web", "passwd", "bob"], &format!("{PASSWORD}\r\n"));
    assert_eq!(bob.code, 0, "{}", bob.stderr);

    let users = warden.run(&["web", "users", "--json"]);
    assert_eq!(users.code, 0, "{}", users.stderr);
    let users = users.json();
    assert_eq!(users[0]["name"], "alice");
    assert_eq!(users[0]["role"], "admin");
    assert_eq!(users[1]["name"], "bob");
    assert_eq!(users[1]["role"], "operator");
    assert!(!users.to_string().contains("argon2"), "{users}");
    let listed = warden.run(&["web", "users"]);
    assert!(listed.stdout.contains("alice") && listed.stdout.contains("bob"));

    // The password (with its line ending stripped) signs in through the service.
    let (runtime, access) = access(&warden);
    let signed = runtime
        .block_on(access.sign_in_password("alice", PASSWORD, Some("192.0.2.9"), Some("curl")))
        .unwrap();
    let bob_signed = runtime
        .block_on(access.sign_in_password("bob", PASSWORD, None, None))
        .unwrap();
    let sessions = warden.run(&["web", "sessions", "--json"]);
    assert_eq!(sessions.code, 0, "{}", sessions.stderr);
    let sessions = sessions.json();
    let rows = sessions.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{sessions}");
    assert_eq!(rows[0]["id"], signed.session_id.as_str());
    assert_eq!(rows[0]["method"], "password");
    assert_eq!(rows[0]["address"], "192.0.2.9");
    assert!(!sessions.to_string().contains(&signed.secret[4..]));
    let text = warden.run(&["web", "sessions"]);
    assert!(text.stdout.contains(&signed.session_id), "{}", text.stdout);

    let revoked = warden.run(&["web", "revoke", &signed.session_id]);
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    assert!(runtime
        .block_on(access.session(&signed.secret))
        .unwrap()
        .is_none());
    assert!(runtime
        .block_on(access.session(&bob_signed.secret))
        .unwrap()
        .is_some());
    // Revoked already, or never there: nothing to revoke.
    assert_eq!(warden.run(&["web", "revoke", &signed.session_id]).code, 2);

    // A new password for bob ends his session; removing him leaves no user.
    let again = warden.run_with_stdin(&["web", "passwd", "bob"], "another long passphrase\n");
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(runtime
        .block_on(access.session(&bob_signed.secret))
        .unwrap()
        .is_none());
    let removed = warden.run(&["web", "remove", "bob"]);
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    let users = warden.run(&["web", "users", "--json"]).json();
    assert_eq!(users.as_array().unwrap().len(), 1, "{users}");

    // Only once this process's store is closed: reading the files here closes descriptors,
    // and closing one drops every POSIX lock this process holds on the file (SQLite's too).
    drop(access);
    drop(runtime);
    assert!(
        !database_contains(&warden, PASSWORD),
        "plaintext password in the database"
    );
    assert!(
        !database_contains(&warden, &signed.secret[4..]),
        "a session secret in the database"
    );
}

#[test]
fn bad_web_commands_are_usage_errors_that_change_nothing() {
    let warden = Warden::faux();
    let short = warden.run_with_stdin(&["web", "passwd", "alice"], "too short\n");
    assert_eq!(short.code, 2, "{}", short.stderr);
    assert!(short.stderr.contains("at least 12"), "{}", short.stderr);
    let role = warden.run_with_stdin(
        &["web", "passwd", "alice", "--role", "root"],
        &format!("{PASSWORD}\n"),
    );
    assert_eq!(role.code, 2, "{}", role.stderr);
    assert!(role.stderr.contains("root"), "{}", role.stderr);
    let name = warden.run_with_stdin(&["web", "passwd", "a b"], &format!("{PASSWORD}\n"));
    assert_eq!(name.code, 2, "{}", name.stderr);
    assert_eq!(warden.run(&["web", "remove", "nobody"]).code, 2);
    assert_eq!(
        warden.run(&["web", "revoke", "ses_0000000000000000"]).code,
        2
    );
    let users = warden.run(&["web", "users", "--json"]);
    assert_eq!(users.code, 0, "{}", users.stderr);
    assert_eq!(users.json(), serde_json::json!([]));
    let sessions = warden.run(&["web", "sessions", "--json"]);
    assert_eq!(sessions.json(), serde_json::json!([]));
    let help = warden.run(&["web", "--help"]);
    for command in ["passwd", "users", "remove", "sessions", "revoke"] {
        assert!(help.stdout.contains(command), "{}", help.stdout);
    }
}
