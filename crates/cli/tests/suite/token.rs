//! `warden token` as an operator runs it next to `warden serve`: a created token is printed
//! once and authenticates against the running server with its role, a revoked one stops
//! working at once, listing never shows secrets, and the database holds no plaintext token.

use serde_json::json;

use super::server_harness::{Server, Token, ADMIN};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN)];

/// Every byte of the server's database files (`warden.db` and its WAL, if any).
fn database_bytes(warden: &Warden) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(warden.home.path()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with("warden.db") {
            bytes.extend(std::fs::read(entry.path()).unwrap());
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_created_token_authenticates_against_serve_and_is_stored_only_as_a_digest() {
    let warden = Warden::faux();
    let created = warden.run(&["token", "create", "--role", "operator", "--name", "ci-bot"]);
    assert_eq!(created.code, 0, "{}", created.stderr);
    let operator = created.stdout.trim().to_string();
    assert_eq!(created.stdout.lines().count(), 1, "{}", created.stdout);
    assert!(
        operator.starts_with("wdn_") && operator.len() >= 68,
        "{operator}"
    );
    assert!(created.stderr.contains("shown only"), "{}", created.stderr);

    let viewer_run = warden.run(&["token", "create", "--role", "viewer", "--json"]);
    assert_eq!(viewer_run.code, 0, "{}", viewer_run.stderr);
    let viewer = viewer_run.json();
    assert_eq!(viewer["role"], "viewer");
    let viewer_token = viewer["token"].as_str().unwrap().to_string();
    assert_ne!(viewer_token, operator);

    let server = Server::start(&warden, TOKENS);
    let (status, body) = server.request("GET", "/v1/tasks", Some(&operator), None);
    assert_eq!(status, 200, "{body}");
    // The operator may write (this task is refused for its repository, not for its role).
    let (status, body) = server.request(
        "POST",
        "/v1/tasks",
        Some(&operator),
        Some(&json!({"kind": "question", "repo": "nope", "prompt": "p"})),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "unknown_repository");
    let (status, body) = server.request(
        "POST",
        "/v1/tasks",
        Some(&viewer_token),
        Some(&json!({"kind": "question", "repo": "nope", "prompt": "p"})),
    );
    assert_eq!(status, 403, "{body}");
    let (status, _) = server.request(
        "GET",
        "/v1/tasks",
        Some("wdn_not-a-real-token-at-all"),
        None,
    );
    assert_eq!(status, 401);

    // Listing shows ids, names and roles, never a secret.
    let listed = warden.run(&["token", "list"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(listed.stdout.contains("ci-bot"), "{}", listed.stdout);
    assert!(!listed.stdout.contains(&operator[4..]), "{}", listed.stdout);
    let listed = warden.run(&["token", "list", "--json"]).json();
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(!listed.to_string().contains(&viewer_token[4..]));
    let id = rows
        .iter()
        .find(|r| r["name"] == "ci-bot")
        .and_then(|r| r["id"].as_str())
        .unwrap()
        .to_string();

    // Revoked while the server runs: refused at once.
    let revoked = warden.run(&["token", "revoke", &id]);
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    let (status, _) = server.request("GET", "/v1/tasks", Some(&operator), None);
    assert_eq!(status, 401);
    let (status, _) = server.request("GET", "/v1/tasks", Some(&viewer_token), None);
    assert_eq!(status, 200);
    // The server's admin sees the CLI's tokens, without secrets.
    let (status, body) = server.request("GET", "/v1/tokens", Some(ADMIN), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    server.terminate();

    let bytes = database_bytes(&warden);
    assert!(contains(&bytes, &id), "the token row is in this database");
    for secret in [&operator, &viewer_token] {
        assert!(!contains(&bytes, secret), "plaintext token in the database");
        assert!(!contains(&bytes, &secret[4..]));
    }
}

#[test]
fn bad_token_commands_are_usage_errors() {
    let warden = Warden::faux();
    let bad_role = warden.run(&["token", "create", "--role", "root"]);
    assert_eq!(bad_role.code, 2, "{}", bad_role.stderr);
    assert!(bad_role.stderr.contains("root"), "{}", bad_role.stderr);
    assert!(bad_role.stdout.is_empty());
    let bad_name = warden.run(&["token", "create", "--role", "viewer", "--name", "a b"]);
    assert_eq!(bad_name.code, 2, "{}", bad_name.stderr);
    let unknown = warden.run(&["token", "revoke", "tok_0000000000000000"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
    let empty = warden.run(&["token", "list", "--json"]);
    assert_eq!(empty.code, 0, "{}", empty.stderr);
    assert_eq!(empty.json(), json!([]));
}
