//! Prompt caching over both wire formats, against the scripted model server: successive
//! requests of one task keep a byte-stable prefix (tools, system prompt, then the conversation
//! growing append-only); OpenAI requests carry one `prompt_cache_key` per repository, role and
//! prompt version; Anthropic requests put the tools and system prompt under a 1-hour breakpoint
//! and at most two 5-minute ones on the conversation; the result reports cache reads, writes and
//! the hit rate, and costs 1-hour writes at twice the input price.

use serde_json::{json, Value};
use warden_test_support::model_server::{anthropic, openai, Reply, ScriptedModelServer};

use super::mcp::{sample_repo, submit};
use super::support::Warden;

/// `value` without any `cache_control` field (breakpoints move each turn; the content must not).
fn without_breakpoints(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| *key != "cache_control")
                .map(|(key, value)| (key.clone(), without_breakpoints(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_breakpoints).collect()),
        other => other.clone(),
    }
}

/// How many `cache_control` breakpoints `value` holds.
fn breakpoints(value: &Value) -> usize {
    match value {
        Value::Object(map) => {
            usize::from(map.contains_key("cache_control"))
                + map.values().map(breakpoints).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(breakpoints).sum(),
        _ => 0,
    }
}

/// Each request's messages start with the previous request's, element for element.
fn assert_append_only(bodies: &[Value]) {
    for pair in bodies.windows(2) {
        let before = pair[0]["messages"].as_array().unwrap();
        let after = pair[1]["messages"].as_array().unwrap();
        assert!(after.len() > before.len(), "the conversation did not grow");
        for (index, message) in before.iter().enumerate() {
            assert_eq!(
                without_breakpoints(message),
                without_breakpoints(&after[index]),
                "message {index} changed between two requests of one task"
            );
        }
        assert_eq!(pair[0]["tools"], pair[1]["tools"], "the tools changed");
        assert_eq!(
            pair[0]["system"], pair[1]["system"],
            "the system prompt changed"
        );
    }
}

/// A question that takes four turns: a read, a search, a submission the checker rejects (an
/// out-of-range citation) and one it accepts.
fn script(read: Reply, search: Reply, rejected: Reply, accepted: Reply) -> Vec<Reply> {
    vec![read, search, rejected, accepted]
}

#[test]
fn openai_requests_keep_an_append_only_prefix_and_one_cache_key() {
    let repo = sample_repo();
    let with_usage = |reply: Reply, prompt: u64, cached: u64| {
        reply.map_json(|body| body["usage"] = openai::usage(prompt, cached, 50))
    };
    let server = ScriptedModelServer::start_blocking(script(
        with_usage(
            openai::tool_call("read_file", &json!({"path": "src/lib.rs"}).to_string()),
            2_000,
            0,
        ),
        with_usage(
            openai::tool_call("search", &json!({"pattern": "retry"}).to_string()),
            3_000,
            1_920,
        ),
        with_usage(
            openai::tool_call("submit_answer", &submit(99)),
            4_000,
            2_944,
        ),
        with_usage(
            openai::tool_call("submit_answer", &submit(33)),
            5_000,
            3_968,
        ),
    ));
    let warden = Warden::openai(&server.url());
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["ask", "--repo", path, "--json", "how does retry work?"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let usage = run.json()["usage"].clone();
    assert!(
        !run.stdout.contains("prompt cache never read"),
        "{}",
        run.stdout
    );

    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 4);
    assert_append_only(&bodies);
    let key = bodies[0]["prompt_cache_key"].as_str().unwrap().to_string();
    assert!(key.starts_with("warden-p1-question-"), "{key}");
    assert!(!key.contains("tsk_"), "no task id in the key: {key}");
    for body in &bodies {
        assert_eq!(body["prompt_cache_key"], key.as_str());
        assert!(body.get("prompt_cache_retention").is_none(), "{body}");
    }

    // Another task on the same repository shares the key; the retention is sent when set.
    let server =
        ScriptedModelServer::start_blocking(vec![openai::tool_call("submit_answer", &submit(33))]);
    let again = Warden::openai(&server.url());
    std::fs::write(
        again.home.path().join("warden.toml"),
        "[model]\nprompt_cache_retention = \"24h\"\n",
    )
    .unwrap();
    let run = again.run(&["ask", "--repo", path, "where is retry?"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let body = &server.requests()[0].body;
    assert_eq!(body["prompt_cache_key"], key.as_str());
    assert_eq!(body["prompt_cache_retention"], "24h");

    // The result: every prompt token, the part read from the cache, and the hit rate.
    assert_eq!(usage["input_tokens"], 14_000);
    assert_eq!(usage["cached_input_tokens"], 8_832);
    assert_eq!(usage["cache_hit_rate"], 0.6309);
}

#[test]
fn anthropic_requests_cache_tools_and_system_for_an_hour_and_cost_the_writes() {
    let repo = sample_repo();
    let with_usage = |reply: Reply, input: u64, written: u64, written_1h: u64, read: u64| {
        reply.map_json(|body| {
            let mut usage = anthropic::usage(input, written, read, 50);
            usage["cache_creation"] = json!({
                "ephemeral_5m_input_tokens": written - written_1h,
                "ephemeral_1h_input_tokens": written_1h,
            });
            body["usage"] = usage;
        })
    };
    let server = ScriptedModelServer::start_blocking(script(
        with_usage(
            anthropic::tool_use("read_file", json!({"path": "src/lib.rs"})),
            10,
            2_000,
            1_500,
            0,
        ),
        with_usage(
            anthropic::tool_use("search", json!({"pattern": "retry"})),
            10,
            500,
            0,
            2_000,
        ),
        with_usage(
            anthropic::tool_use("submit_answer", serde_json::from_str(&submit(99)).unwrap()),
            10,
            500,
            0,
            2_500,
        ),
        with_usage(
            anthropic::tool_use("submit_answer", serde_json::from_str(&submit(33)).unwrap()),
            10,
            500,
            0,
            3_000,
        ),
    ));
    let warden = Warden::anthropic(&server.url());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[[prices]]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\ninput = 3.0\n\
         cached_input = 0.3\ncache_write = 3.75\noutput = 15.0\n",
    )
    .unwrap();
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["ask", "--repo", path, "--json", "how does retry work?"]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 4);
    assert_append_only(&bodies);
    for (turn, body) in bodies.iter().enumerate() {
        assert_eq!(
            body["system"][0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"}),
            "turn {turn}"
        );
        let on_messages = breakpoints(&body["messages"]);
        assert_eq!(
            on_messages,
            if turn == 0 { 1 } else { 2 },
            "turn {turn}: {body}"
        );
        assert!(breakpoints(body) <= 4);
        let last = body["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(
            last["content"].as_array().unwrap().last().unwrap()["cache_control"],
            json!({"type": "ephemeral"})
        );
    }

    let result = run.json();
    let usage = &result["usage"];
    // Prompt tokens: 4 * 10 uncached + 3500 written + 7500 read.
    assert_eq!(usage["input_tokens"], 11_040);
    assert_eq!(usage["cached_input_tokens"], 7_500);
    assert_eq!(usage["cache_write_tokens"], 3_500);
    assert_eq!(usage["cache_hit_rate"], 0.6793);
    // 40*3 + 7500*0.3 + 2000*3.75 (5 min) + 1500*6 (1 h) + 200*15, in micro-dollars.
    let expected =
        (40.0 * 3.0 + 7_500.0 * 0.3 + 2_000.0 * 3.75 + 1_500.0 * 6.0 + 200.0 * 15.0) / 1_000_000.0;
    let cost = usage["cost_usd"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-9, "{cost} != {expected}");
}

#[test]
fn long_prompts_never_read_from_the_cache_are_a_notice() {
    let repo = sample_repo();
    let uncached =
        |reply: Reply| reply.map_json(|body| body["usage"] = openai::usage(6_000, 0, 50));
    let server = ScriptedModelServer::start_blocking(script(
        uncached(openai::tool_call(
            "read_file",
            &json!({"path": "src/lib.rs"}).to_string(),
        )),
        uncached(openai::tool_call(
            "search",
            &json!({"pattern": "retry"}).to_string(),
        )),
        uncached(openai::tool_call("submit_answer", &submit(99))),
        uncached(openai::tool_call("submit_answer", &submit(33))),
    ));
    let path = repo.path().to_str().unwrap();
    let run = Warden::openai(&server.url()).run(&["ask", "--repo", path, "--json", "how?"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = run.json();
    let notices: Vec<&str> = result["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        notices.iter().any(|n| n.starts_with(
            "prompt cache never read: 4 model calls sent 6000 prompt tokens each on average"
        )),
        "{notices:?}"
    );
    assert_eq!(result["usage"]["cache_hit_rate"], 0.0);
}
