//! Compaction over the real wire formats, against the scripted model server: a question pushed
//! past `[model] context_tokens` (by the usage the provider reports) is compacted — one call
//! with the fixed hand-off template, then the agent goes on from the request and Warden's own
//! record — and finishes; one whose request and tools alone fill the window stops with
//! `context_exhausted` after three compactions, never looping.

use serde_json::{json, Value};
use warden_test_support::model_server::{anthropic, openai, Reply, ScriptedModelServer};

use super::mcp::{sample_repo, submit};
use super::support::Warden;

fn with_window(warden: Warden, tokens: u64) -> Warden {
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("[model]\ncontext_tokens = {tokens}\n"),
    )
    .unwrap();
    warden
}

/// The text of an OpenAI message (`content` as a string).
fn content(message: &Value) -> &str {
    message["content"].as_str().unwrap_or_default()
}

#[test]
fn an_openai_question_past_its_window_is_compacted_and_finishes() {
    let repo = sample_repo();
    let measured = |reply: Reply, prompt: u64| {
        reply.map_json(|body| body["usage"] = openai::usage(prompt, 0, 50))
    };
    let server = ScriptedModelServer::start_blocking(vec![
        measured(
            openai::tool_call("read_file", &json!({"path": "src/lib.rs"}).to_string()),
            3_000,
        ),
        // 17,000 of a 20,000 window: past the 80 % trigger.
        measured(
            openai::tool_call("search", &json!({"pattern": "retry"}).to_string()),
            17_000,
        ),
        measured(
            openai::text("retry_with_backoff is at src/lib.rs:31-33; submit that."),
            17_100,
        ),
        measured(openai::tool_call("submit_answer", &submit(33)), 2_500),
    ]);
    let warden = with_window(Warden::openai(&server.url()), 20_000);
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["ask", "--repo", path, "--json", "how does retry work?"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("context compacted (1)"),
        "{}",
        run.stderr
    );
    let result = run.json();
    assert_eq!(result["outcome"], "answer", "{result}");
    assert_eq!(
        result["usage"]["model_calls"], 4,
        "the compaction call is counted"
    );

    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 4);
    let asked = bodies[2]["messages"].as_array().unwrap();
    assert!(
        content(asked.last().unwrap()).contains("about to be compacted"),
        "{asked:#?}"
    );
    // The same tools and cache key as the turns before: the cached prefix still serves.
    assert_eq!(bodies[2]["tools"], bodies[1]["tools"]);
    assert_eq!(bodies[2]["prompt_cache_key"], bodies[1]["prompt_cache_key"]);
    // Then: the system prompt, the request, and one message with Warden's record and the note.
    let after = bodies[3]["messages"].as_array().unwrap();
    assert_eq!(after.len(), 3, "{after:#?}");
    assert_eq!(after[0], bodies[0]["messages"][0]);
    assert_eq!(after[1], bodies[0]["messages"][1]);
    let compacted = content(&after[2]);
    for expected in [
        "compaction 1",
        "Tool calls (2 in all)",
        "src/lib.rs",
        "retry_with_backoff is at src/lib.rs:31-33; submit that.",
    ] {
        assert!(compacted.contains(expected), "{expected:?}: {compacted}");
    }
}

#[test]
fn an_anthropic_question_whose_request_fills_the_window_stops_with_context_exhausted() {
    let repo = sample_repo();
    let server = ScriptedModelServer::start_blocking(vec![
        anthropic::text("note 1"),
        anthropic::text("note 2"),
        anthropic::text("note 3"),
        anthropic::tool_use("submit_answer", serde_json::from_str(&submit(33)).unwrap()),
    ]);
    // 1,000 tokens: the system prompt and the tools alone are past 800.
    let warden = with_window(Warden::anthropic(&server.url()), 1_000);
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["ask", "--repo", path, "--json", "how does retry work?"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "context_exhausted", "{result}");
    assert!(
        result["failure"]["message"]
            .as_str()
            .unwrap()
            .contains("[model] context_tokens"),
        "{result}"
    );
    // Three compaction calls, none of the agent's, and the fourth reply never asked for.
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 1);
    for request in server.requests() {
        let messages = request.body["messages"].as_array().unwrap().clone();
        let last = messages.last().unwrap().to_string();
        assert!(last.contains("about to be compacted"), "{last}");
    }
}

#[test]
fn a_window_below_the_smallest_is_refused_when_the_configuration_loads() {
    let warden = with_window(Warden::openai("http://127.0.0.1:9"), 999);
    let run = warden.run(&["ask", "--repo", ".", "anything"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("model.context_tokens 999: expected at least 1000"),
        "{}",
        run.stderr
    );
}
