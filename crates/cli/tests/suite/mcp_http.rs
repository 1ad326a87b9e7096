//! `/mcp` on the real `warden serve`, driven by the official MCP Python SDK's Streamable HTTP
//! client (`tests/mcp_client.py`) with bearer tokens, on both protocol revisions: an operator
//! asks about a registered repository and reads the checked citation; the code tools read the
//! registered repository at a pinned commit; a viewer's token reads code but cannot ask (the
//! service's refusal); no token is a 401; there is no approve tool; `/mcp` is not in the
//! OpenAPI document. Skipped without the SDK unless `WARDEN_TEST_REQUIRE` lists `mcp`.

use serde_json::{json, Value};
use warden_test_support::mcp_python;
use warden_test_support::model_server::{openai, ScriptedModelServer};

use super::mcp::{assert_code_tools, run_client, sample_repo, submit};
use super::server_harness::{Server, Token, ADMIN, ALICE, BOB};
use super::support::Warden;

const TOKENS: &[Token] = &[
    ("root", "admin", ADMIN),
    ("alice", "operator", ALICE),
    ("bob", "viewer", BOB),
];

fn check(mode: &str, protocol_version: &str) {
    let Some(python) = mcp_python::python() else {
        return;
    };
    let repo = sample_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "read_file",
            &json!({"path": "src/lib.rs", "start_line": 31, "end_line": 33}).to_string(),
        ),
        openai::tool_call("submit_answer", &submit(99)),
        openai::tool_call("submit_answer", &submit(33)),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let url = format!("{}/mcp", server.url());
    let scenario = |token: &str, viewer: bool| {
        json!({
            "url": url, "token": token, "mode": mode, "repo": "app", "viewer": viewer,
            "abandon": false, "question": "how does retry_with_backoff work?",
        })
    };

    let report = run_client(&python, &scenario(ALICE, false));
    let seen = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(report["protocol_version"], protocol_version, "{seen}");
    let names: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"ask") && names.contains(&"read_file"),
        "{seen}"
    );
    assert!(
        report["approve"]
            .as_str()
            .unwrap()
            .starts_with("refused: unknown tool \"approve\""),
        "{seen}"
    );

    // The answer, with the citation Warden checked against the pinned commit.
    let ask = &report["ask"];
    assert_eq!(ask["is_error"], false, "{seen}\n{}", server.stderr());
    let citation = format!("app/src/lib.rs:31-33 @ {head}");
    assert_eq!(ask["structured"]["citations"], json!([citation]), "{seen}");
    assert!(ask["text"].as_str().unwrap().contains(&citation), "{seen}");
    let messages: Vec<&str> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap_or(""))
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("submission 1 rejected")),
        "{seen}"
    );
    // The task is the operator's, on the server, read back through the API too.
    let task_id = ask["structured"]["task_id"].as_str().unwrap();
    assert_eq!(
        report["task_status"]["structured"]["owner"], "alice",
        "{seen}"
    );
    assert_eq!(server.task(ALICE, task_id)["status"], "completed");
    assert_eq!(
        report["list_repos"]["structured"]["repos"],
        json!([{"name": "app", "branch": null}]),
        "{seen}"
    );
    assert_code_tools(&report, "app", &head);
    // Arguments outside the schema are refused before the service sees them.
    assert_eq!(report["unknown_argument"]["is_error"], true, "{seen}");
    let unknown_repo = &report["unknown_repo"];
    assert_eq!(unknown_repo["is_error"], true, "{seen}");
    assert!(
        unknown_repo["text"]
            .as_str()
            .unwrap()
            .contains("\"nowhere\" is not registered"),
        "{seen}"
    );

    // A viewer reads code, but asking is the service's refusal.
    let viewer = run_client(&python, &scenario(BOB, true));
    let seen = serde_json::to_string_pretty(&viewer).unwrap();
    assert_eq!(viewer["ask"]["is_error"], true, "{seen}");
    assert_eq!(
        viewer["ask"]["text"], "viewer tokens can only read",
        "{seen}"
    );
    assert_code_tools(&viewer, "app", &head);
    // Only the operator's question reached the model.
    assert_eq!(model.requests().len(), 3);
}

#[test]
fn an_mcp_client_over_http_on_the_stateless_revision_asks_with_its_token() {
    check("auto", "2026-07-28");
}

#[test]
fn an_mcp_client_over_http_on_the_handshake_revision_asks_with_its_token() {
    check("legacy", "2025-11-25");
}

#[test]
fn mcp_over_http_needs_a_token_and_is_not_in_the_openapi_document() {
    let warden = Warden::new().with("WARDEN_MODEL", "faux");
    let server = Server::start(&warden, TOKENS);
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let (status, body) = server.request("POST", "/mcp", None, Some(&message));
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, body) = server.request("POST", "/mcp", Some("not-a-token"), Some(&message));
    assert_eq!(status, 401, "{body}");
    // No sessions: no server-initiated stream to open.
    let (status, _) = server.request_with(
        "GET",
        "/mcp",
        Some(ALICE),
        None,
        &[("Accept", "text/event-stream")],
    );
    assert_eq!(status, 405);
    let (status, document): (u16, Value) = server.request("GET", "/openapi.json", None, None);
    assert_eq!(status, 200);
    assert!(document["paths"].get("/mcp").is_none(), "{document}");
}
