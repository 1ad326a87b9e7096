//! The cost of one call of an operator-configured MCP server's tool (`[[mcp.servers]]`), the
//! server running inside the task's linux sandbox view, measured against references in the same
//! run, interleaved round by round so load from other processes hits every contender alike:
//!
//! - a plain spawn of `true` on the host;
//! - the sandbox running `true` in the same view: what every `shell` tool call pays;
//! - one `tools/call` round trip through Warden's MCP client to a small stdio server (a Python
//!   echo written here, newline-delimited JSON-RPC) started once in that view, including the
//!   client's checks: the tool-list re-read before each call, argument validation, bounding and
//!   redaction of the output.
//!
//! `cargo run --release -p warden-engine --example mcp_bench [-- ROUNDS]` (`--smoke`: 3 rounds;
//! skipped with a line where the linux backend is unavailable)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use warden_engine::mcp_client::McpServers;
use warden_engine::mcp_config::McpServerConfig;
use warden_runtime::ToolOutput;
use warden_sandbox::{
    select, Backend, CommandSpec, ResourceLimits, SandboxConfig, SandboxView, ViewSpec,
};

const ECHO_SERVER: &str = r#"import json, sys
TOOL = {"name": "echo", "description": "Echoes its text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                        "required": ["text"], "additionalProperties": False}}
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "echo", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": message["params"]["arguments"]["text"]}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
    sys.stdout.flush()
"#;

fn median(values: &mut [Duration]) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn p90(values: &mut [Duration]) -> Duration {
    values.sort();
    values[((values.len() as f64 - 1.0) * 0.9).round() as usize]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let rounds: usize = std::env::args()
        .skip(1)
        .find(|a| a != "--smoke")
        .map_or(if smoke { 3 } else { 200 }, |a| {
            a.parse().expect("ROUNDS must be a number")
        });
    let base = tempfile::tempdir().unwrap();
    let snapshot = base.path().join("snapshot");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::write(snapshot.join("echo_server.py"), ECHO_SERVER).unwrap();
    let sandbox = match select(Backend::Linux, &SandboxConfig::default()) {
        Ok(sandbox) => sandbox,
        Err(error) => {
            println!("skipped: the linux backend is unavailable: {error}");
            return;
        }
    };
    let view: Arc<Box<dyn SandboxView>> = Arc::new(
        sandbox
            .open(&ViewSpec {
                lower: vec![("repo".into(), snapshot.clone())],
                writable: false,
                scratch_dir: base.path().join("scratch"),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            })
            .unwrap(),
    );
    let config = McpServerConfig {
        name: "echo".into(),
        command: "python3".into(),
        args: vec!["echo_server.py".into()],
        env: Vec::new(),
        read_only: true,
        allow_tools: None,
        call_timeout: Duration::from_secs(30),
    };
    let started = Instant::now();
    let servers = McpServers::start(
        &[config],
        &view,
        &[],
        ResourceLimits::default(),
        Duration::from_secs(3600),
        warden_engine::redact::Redactor::new(Vec::new()),
    )
    .await
    .unwrap_or_else(|failure| panic!("the echo server did not start: {}", failure.message));
    let start_up = started.elapsed();
    let tool = servers.tools().into_iter().next().expect("the echo tool");

    let mut spawn = Vec::with_capacity(rounds);
    let mut sandboxed = Vec::with_capacity(rounds);
    let mut mcp = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let status = std::process::Command::new("true").status().unwrap();
        spawn.push(started.elapsed());
        assert!(status.success());

        let mut command = CommandSpec::bash("", Duration::from_secs(30));
        command.argv = vec!["true".into()];
        let started = Instant::now();
        let output = view.run(&command).unwrap();
        sandboxed.push(started.elapsed());
        assert!(output.success(), "{output:?}");

        let started = Instant::now();
        let output = tool.call(json!({"text": "hello"})).await;
        mcp.push(started.elapsed());
        match output {
            ToolOutput::Ok(text) => assert!(text.contains("hello"), "{text}"),
            other => panic!("the echo call failed: {other:?}"),
        }
    }
    servers.shutdown().await;
    drop(tool);
    if let Ok(view) = Arc::try_unwrap(view) {
        view.close().unwrap();
    }

    let spawn_median = median(&mut spawn);
    println!("MCP tool calls, {rounds} rounds (median / p90; ratio of medians to a plain spawn):");
    println!("  echo server start-up in the view: {:.2} ms", ms(start_up));
    for (name, values) in [
        ("spawn `true` (host)", &mut spawn),
        ("sandboxed `true` (a shell call)", &mut sandboxed),
        ("MCP tools/call, echo", &mut mcp),
    ] {
        let (m, p) = (median(values), p90(values));
        println!(
            "  {name:<34} {:>8.3} ms {:>8.3} ms  {:>6.1}x",
            ms(m),
            ms(p),
            m.as_secs_f64() / spawn_median.as_secs_f64()
        );
    }
}
