//! Benchmark of the agent economy (not a timed test): a scripted 40-turn change task, on each
//! wire format (OpenAI chat completions, Anthropic messages), run by the `warden` binary against
//! the scripted model server, measured from the requests Warden actually sent.
//!
//! - **bytes sent**: the request bodies, in all and per request;
//! - **cacheable prefix**: per request, the part of its prompt (tools, system prompt, then the
//!   conversation message by message, cache markers left out) that equals the previous
//!   request's prompt from the start — what a provider's prefix cache can serve — as a share of
//!   all prompt tokens from turn 3 on (goal ≥ 95 %), the lowest single request, and how many
//!   prompts start with the whole previous one (every one, without compaction: asserted);
//! - **tokens with and without compaction**: the same script with `[model] context_tokens`
//!   unset (no compaction) and set low enough that the conversation is compacted along the way;
//!   prompt tokens are estimated as bytes / 4 (the scripted replies carry no usage, so Warden's
//!   own trigger uses the same estimate);
//! - **cost with and without caching** at Warden's built-in list prices (`gpt-5.1`,
//!   `claude-sonnet-4-5`): with caching, the prefix is read from the cache (OpenAI: cached input;
//!   Anthropic: cache reads, the new part written for 5 minutes and the tools and system prompt
//!   for an hour on the first request); without, every prompt token is input. Output is taken
//!   as 60 tokens a turn.
//!
//! - **a review's overhead**: the same script with `[gates] review = "report"` (the reviewer
//!   answers at once with no findings): the requests, prompt tokens and cost it adds.
//!
//! `cargo run --release -p warden-cli --example economy_bench -- --warden PATH [--smoke]`
//! (`--smoke`: 10 turns, every figure computed and checked for sense, no goal asserted).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use warden_models::{PriceTable, Provider};
use warden_runtime::{Cost, TokenUsage};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{anthropic, openai, Reply, ScriptedModelServer};

/// Source files the agent reads, each about 3 KB.
const FILES: usize = 12;
/// Output tokens assumed per model call.
const OUTPUT_TOKENS: u64 = 60;

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
}

impl Wire {
    fn name(self) -> &'static str {
        match self {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
        }
    }

    /// The model the costs are priced as.
    fn priced_as(self) -> (Provider, &'static str) {
        match self {
            Wire::OpenAi => (Provider::OpenAi, "gpt-5.1"),
            Wire::Anthropic => (Provider::Anthropic, "claude-sonnet-4-5"),
        }
    }

    /// A tool call reply without usage (the harness measures the requests itself).
    fn call(self, name: &str, arguments: Value) -> Reply {
        let reply = match self {
            Wire::OpenAi => openai::tool_call(name, &arguments.to_string()),
            Wire::Anthropic => anthropic::tool_use(name, arguments),
        };
        reply.map_json(|body| {
            body.as_object_mut().unwrap().remove("usage");
        })
    }

    fn note(self) -> Reply {
        let text = "Read the modules; lib.txt line 2 holds beta; next: uppercase it and submit.";
        let reply = match self {
            Wire::OpenAi => openai::text(text),
            Wire::Anthropic => anthropic::text(text),
        };
        reply.map_json(|body| {
            body.as_object_mut().unwrap().remove("usage");
        })
    }
}

fn repo() -> TempRepo {
    let repo = TempRepo::new();
    for file in 0..FILES {
        let mut text = String::new();
        for function in 0..24 {
            text.push_str(&format!(
                "/// Handles request kind {function} of module {file}.\npub fn handler_{file}_{function}(input: u32) -> u32 {{\n    input.wrapping_mul({}) ^ {}\n}}\n\n",
                function + 3,
                file * 31 + function
            ));
        }
        repo.write(&format!("src/module_{file}.rs"), &text);
    }
    repo.write("src/lib.txt", "alpha\nbeta\ngamma\n")
        .write("check.sh", "grep -q BETA src/lib.txt\n");
    repo.commit("initial");
    repo
}

/// `turns` replies: reads and searches, then the edit and the submission.
fn script(wire: Wire, turns: usize) -> Vec<Reply> {
    let mut replies = Vec::new();
    for turn in 0..turns - 2 {
        replies.push(if turn % 3 == 2 {
            wire.call(
                "search",
                json!({"pattern": format!("handler_{}_", turn % FILES)}),
            )
        } else {
            wire.call(
                "read_file",
                json!({"path": format!("src/module_{}.rs", turn % FILES)}),
            )
        });
    }
    replies.push(wire.call(
        "edit_file",
        json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
    ));
    replies.push(wire.call("submit_change", json!({"summary": "Uppercase beta"})));
    replies
}

/// A request's prompt as blocks: the tools, the system prompt, then each message, with cache
/// markers removed (they move from turn to turn; the content must not).
fn blocks(wire: Wire, body: &Value) -> Vec<String> {
    let mut blocks = vec![strip(&body["tools"]).to_string()];
    let mut messages = body["messages"].as_array().cloned().unwrap_or_default();
    match wire {
        Wire::Anthropic => blocks.push(strip(&body["system"]).to_string()),
        // The system prompt is the first message.
        Wire::OpenAi => {
            if !messages.is_empty() {
                blocks.push(strip(&messages.remove(0)).to_string());
            }
        }
    }
    blocks.extend(messages.iter().map(|m| strip(m).to_string()));
    blocks
}

fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| *key != "cache_control")
                .map(|(key, value)| (key.clone(), strip(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}

/// What one run of the script sent.
struct Measured {
    requests: usize,
    bytes: u64,
    /// Per request: prompt bytes, the bytes of its leading blocks equal to the previous
    /// request's, and the bytes of the tools and system prompt.
    prompts: Vec<(u64, u64, u64)>,
    compactions: usize,
    reviews: usize,
    outcome: String,
}

fn run(
    warden: &Path,
    wire: Wire,
    turns: usize,
    context_tokens: Option<u64>,
    review: bool,
) -> Measured {
    let repo = repo();
    let model = ScriptedModelServer::start_blocking(script(wire, turns));
    model.always_answer("about to be compacted", wire.note());
    model.always_answer(
        "You are Warden's reviewer",
        wire.call(
            "submit_review",
            json!({"overall_correctness": "patch is correct",
                   "explanation": "beta is uppercase and the check passes", "findings": []}),
        ),
    );
    let home = tempfile::tempdir().unwrap();
    // Compaction calls are turns too: room for them beyond the script's.
    let mut config = String::from("[limits]\nmax_turns = 100\n");
    if let Some(tokens) = context_tokens {
        config.push_str(&format!("[model]\ncontext_tokens = {tokens}\n"));
    }
    if review {
        config.push_str("[gates]\nreview = \"report\"\n");
    }
    std::fs::write(home.path().join("warden.toml"), config).unwrap();
    let mut command = Command::new(warden);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("WARDEN_HOME", home.path())
        .env("WARDEN_RETRY_BASE_MS", "5");
    match wire {
        Wire::OpenAi => command
            .env("WARDEN_MODEL", "openai:gpt-bench")
            .env("OPENAI_BASE_URL", model.openai_base_url())
            .env("OPENAI_API_KEY", "sk-bench"),
        Wire::Anthropic => command
            .env("WARDEN_MODEL", "anthropic:claude-bench")
            .env("ANTHROPIC_BASE_URL", model.anthropic_base_url())
            .env("ANTHROPIC_API_KEY", "sk-ant-bench"),
    };
    let output = command
        .args([
            "run",
            "--repo",
            repo.path().to_str().unwrap(),
            "--check",
            "bash check.sh",
            "--json",
            "make beta uppercase in src/lib.txt",
        ])
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "warden run printed no result:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let outcome = result["outcome"].as_str().unwrap_or("?").to_string();
    assert_eq!(
        outcome,
        "proposal",
        "{result}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bodies: Vec<Value> = model.requests().into_iter().map(|r| r.body).collect();
    let mut prompts = Vec::new();
    let mut previous: Vec<String> = Vec::new();
    let mut compactions = 0;
    let mut reviews = 0;
    for body in &bodies {
        let text = body.to_string();
        if text.contains("about to be compacted") {
            compactions += 1;
        }
        if text.contains("You are Warden's reviewer") {
            reviews += 1;
        }
        let blocks = blocks(wire, body);
        let total: u64 = blocks.iter().map(|b| b.len() as u64).sum();
        let prefix: u64 = blocks
            .iter()
            .zip(&previous)
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a.len() as u64)
            .sum();
        let fixed = blocks.iter().take(2).map(|b| b.len() as u64).sum();
        prompts.push((total, prefix, fixed));
        previous = blocks;
    }
    Measured {
        requests: bodies.len(),
        bytes: bodies.iter().map(|b| b.to_string().len() as u64).sum(),
        prompts,
        compactions,
        reviews,
        outcome,
    }
}

fn micro_usd(cost: Cost) -> u64 {
    match cost {
        Cost::Known { micro_usd } => micro_usd,
        Cost::Unknown => panic!("no built-in price"),
    }
}

/// The run's cost at list prices, with and without prompt caching, in dollars.
fn costs(wire: Wire, measured: &Measured) -> (f64, f64) {
    let table = PriceTable::builtin();
    let (provider, model) = wire.priced_as();
    let (mut cached, mut uncached) = (0, 0);
    for (index, (total, prefix, fixed)) in measured.prompts.iter().enumerate() {
        let tokens = total / 4;
        let read = prefix / 4;
        let plain = TokenUsage {
            input_tokens: tokens,
            output_tokens: OUTPUT_TOKENS,
            ..TokenUsage::default()
        };
        uncached += micro_usd(table.cost(provider, model, &plain));
        let with_cache = match wire {
            Wire::OpenAi => TokenUsage {
                cached_input_tokens: read,
                ..plain
            },
            Wire::Anthropic => {
                let written = tokens - read;
                TokenUsage {
                    cached_input_tokens: read,
                    cache_write_tokens: written,
                    cache_write_1h_tokens: if index == 0 { fixed / 4 } else { 0 },
                    ..plain
                }
            }
        };
        cached += micro_usd(table.cost(provider, model, &with_cache));
    }
    (cached as f64 / 1e6, uncached as f64 / 1e6)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut warden: Option<PathBuf> = None;
    let mut smoke = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--warden" => warden = args.next().map(PathBuf::from),
            "--smoke" => smoke = true,
            other => panic!("unknown argument {other:?} (--warden PATH [--smoke])"),
        }
    }
    let warden = warden.expect("--warden PATH: the warden binary to measure");
    let turns = if smoke { 10 } else { 40 };
    println!("economy_bench: a scripted {turns}-turn change task per wire format");
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let plain = run(&warden, wire, turns, None, false);
        // A window the conversation outgrows about halfway through.
        let window = {
            let (total, ..) = plain.prompts[plain.prompts.len() / 2];
            (total / 4) * 100 / 80
        }
        .max(1_000);
        let compacting = run(&warden, wire, turns, Some(window), false);
        let reviewed = run(&warden, wire, turns, None, true);
        assert_eq!(reviewed.reviews, 1, "one review of the proposal");
        assert_eq!(plain.requests, turns, "one request a turn");
        assert_eq!(plain.compactions, 0);
        assert!(
            compacting.compactions >= 1,
            "a {window}-token window compacted nothing"
        );
        let later = &plain.prompts[2..];
        let share = later.iter().map(|(_, prefix, _)| prefix).sum::<u64>() as f64
            / later.iter().map(|(total, ..)| total).sum::<u64>() as f64;
        let min = later
            .iter()
            .map(|(total, prefix, _)| *prefix as f64 / *total as f64)
            .fold(f64::INFINITY, f64::min);
        // Append-only: each prompt starts with the whole previous one.
        let appended = plain
            .prompts
            .windows(2)
            .filter(|pair| pair[1].1 == pair[0].0)
            .count();
        let tokens = |m: &Measured| m.prompts.iter().map(|(t, ..)| t / 4).sum::<u64>();
        let (with_cache, without_cache) = costs(wire, &plain);
        let (compacted_with_cache, _) = costs(wire, &compacting);
        println!("{}:", wire.name());
        println!(
            "  bytes sent: {} in {} requests ({} per request on average; the last {})",
            plain.bytes,
            plain.requests,
            plain.bytes / plain.requests as u64,
            plain.prompts.last().map_or(0, |p| p.0)
        );
        println!(
            "  cacheable prefix from turn 3: {:.1} % of the prompt tokens (goal >= 95 %; the \
             lowest request {:.1} %); {appended} of {} prompts start with the whole previous one",
            share * 100.0,
            min * 100.0,
            plain.requests - 1
        );
        println!(
            "  prompt tokens: {} without compaction; {} with a {window}-token window ({} \
             compactions, {} requests, outcome {})",
            tokens(&plain),
            tokens(&compacting),
            compacting.compactions,
            compacting.requests,
            compacting.outcome
        );
        println!(
            "  cost at {} list prices: ${with_cache:.4} with caching, ${without_cache:.4} \
             without ({:.2}x); ${compacted_with_cache:.4} with caching and compaction",
            wire.priced_as().1,
            without_cache / with_cache
        );
        let (reviewed_cost, _) = costs(wire, &reviewed);
        println!(
            "  a review ([gates] review = \"report\"): +{} request, +{} prompt tokens ({:+.1} %), \
             cost ${reviewed_cost:.4} with caching ({:+.1} %)",
            reviewed.requests - plain.requests,
            tokens(&reviewed) - tokens(&plain),
            (tokens(&reviewed) as f64 / tokens(&plain) as f64 - 1.0) * 100.0,
            (reviewed_cost / with_cache - 1.0) * 100.0
        );
        assert_eq!(
            appended,
            plain.requests - 1,
            "{}: a prompt did not start with the previous one",
            wire.name()
        );
        assert!(min > 0.0 && share <= 1.0 && with_cache > 0.0 && without_cache >= with_cache);
        if !smoke {
            assert!(
                share >= 0.95,
                "{}: from turn 3 on only {:.1} % of the prompt tokens were a cacheable prefix",
                wire.name(),
                share * 100.0
            );
        }
    }
}
