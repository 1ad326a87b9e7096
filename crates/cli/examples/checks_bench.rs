//! Benchmark of warm checks (not a timed test): a change task's checks against the same
//! `cargo test` run on the host, measured in one run.
//!
//! - **first check**: the base tree's warm-up build in the sandbox vs a cold host `cargo test`
//!   (dependencies already downloaded on both sides; goal ≤ 1.2×);
//! - **check after a one-line edit**: the agent's `run_checks` on the edited tree vs the host's
//!   incremental `cargo test` after the same edit (goal ≤ 1.5×), for the task that built the
//!   seed and for a second task of the same base that finds it complete;
//! - **checks per distinct tree**: check commands run vs trees checked (the submission of the
//!   checked tree is reused, never run again).
//!
//! `--maintain`: `warden maintain` (baseline mode, `--select all`) on a crate whose five direct
//! crates.io dependencies are pinned at old versions, so that five upgrades happen, against
//! the host's one cold `cargo test` plus one incremental `cargo test` after each of the same
//! five upgrades (`cargo update --precise`, not timed) — goal ≤ 2×. The whole maintenance is
//! timed, its networked steps (fetching the base's and the upgrades' packages, the index
//! lookups) included; the host's packages are fetched beforehand.
//!
//! The crate is a real one with crates.io dependencies pinned by its lockfile (serde with
//! derive, serde_json, regex, clap with derive, anyhow, thiserror: a few dozen packages).
//! Warden's prepare fetches them through its egress proxy; the host's `cargo` needs them too
//! (`cargo fetch`, not timed). `--smoke`: a two-crate workspace with path dependencies only,
//! no network, one round — it checks the harness and the figures, not the speed.
//!
//! `cargo run --release -p warden-cli --example checks_bench -- --warden PATH [--smoke | --maintain]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

const MANIFEST: &str = r#"[package]
name = "bench-crate"
version = "0.1.0"
edition = "2021"

[dependencies]
anyhow = "1"
clap = { version = "4", features = ["derive"] }
regex = "1"
serde = { version = "1", features = ["derive"] }
serde_json = "1"
thiserror = "2"
"#;

fn lib(limit: u32) -> String {
    format!(
        r##"use serde::{{Deserialize, Serialize}};

#[derive(Debug, Serialize, Deserialize, PartialEq, clap::Parser)]
pub struct Options {{
    #[arg(long, default_value_t = {limit})]
    pub limit: u32,
}}

#[derive(Debug, thiserror::Error)]
#[error("too many words: {{0}}")]
pub struct TooMany(pub usize);

pub fn words(text: &str, options: &Options) -> anyhow::Result<Vec<String>> {{
    let found: Vec<String> = regex::Regex::new(r"\w+")?
        .find_iter(text)
        .map(|m| m.as_str().to_string())
        .collect();
    if found.len() > options.limit as usize {{
        return Err(TooMany(found.len()).into());
    }}
    Ok(found)
}}

#[cfg(test)]
mod tests {{
    use super::*;
    use clap::Parser;

    #[test]
    fn words_round_trip() {{
        let options = Options::parse_from(["bench"]);
        let found = words("one two three", &options).unwrap();
        let text = serde_json::to_string(&found).unwrap();
        assert_eq!(text, r#"["one","two","three"]"#);
    }}
}}
"##
    )
}

/// The smoke crate: `app` depending on `dep` by path.
fn smoke_files(repo: &TempRepo, edited: bool) {
    repo.write(
        "Cargo.toml",
        "[workspace]\nmembers = [\"app\", \"dep\"]\nresolver = \"2\"\n",
    );
    repo.write(
        "dep/Cargo.toml",
        "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    repo.write("dep/src/lib.rs", "pub fn base() -> u32 {\n    41\n}\n");
    repo.write(
        "app/Cargo.toml",
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\ndep = { path = \"../dep\" }\n",
    );
    repo.write("app/src/lib.rs", &smoke_lib(edited));
}

fn smoke_lib(edited: bool) -> String {
    format!(
        "pub fn answer() -> u32 {{\n    dep::base() + {}\n}}\n\n#[cfg(test)]\nmod tests {{\n    \
         #[test]\n    fn answer() {{\n        assert!(super::answer() >= 42);\n    }}\n}}\n",
        if edited { 2 } else { 1 }
    )
}

/// The edited file: `(path, content)` of the one-line edit.
fn edit(smoke: bool) -> (&'static str, String) {
    if smoke {
        ("app/src/lib.rs", smoke_lib(true))
    } else {
        ("src/lib.rs", lib(1000))
    }
}

/// The maintenance crate: five direct dependencies, each pinned below its newest compatible
/// version by `cargo update --precise` after the lockfile is generated.
const MAINTAIN_MANIFEST: &str = r#"[package]
name = "bench-maintain"
version = "0.1.0"
edition = "2021"

[dependencies]
anyhow = "1"
log = "0.4"
regex = "1"
serde_json = "1"
smallvec = "1"
"#;

/// `(crate, old version)`: where the lockfile pins each direct dependency.
const MAINTAIN_PINS: [(&str, &str); 5] = [
    ("anyhow", "1.0.75"),
    ("log", "0.4.17"),
    ("regex", "1.9.0"),
    ("serde_json", "1.0.100"),
    ("smallvec", "1.10.0"),
];

const MAINTAIN_LIB: &str = r##"pub fn words(text: &str) -> anyhow::Result<serde_json::Value> {
    let found: smallvec::SmallVec<[String; 4]> = regex::Regex::new(r"\w+")?
        .find_iter(text)
        .map(|m| m.as_str().to_string())
        .collect();
    log::debug!("{} words", found.len());
    Ok(serde_json::json!({ "words": found.to_vec() }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn words() {
        let value = super::words("one two three").unwrap();
        assert_eq!(value.to_string(), r#"{"words":["one","two","three"]}"#);
    }
}
"##;

fn cargo(dir: &Path, args: &[&str]) -> f64 {
    let started = Instant::now();
    let status = Command::new("cargo")
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "cargo {args:?} failed in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&status.stderr)
    );
    started.elapsed().as_secs_f64()
}

/// `[egress] allow_private` for crates.io's hosts when this machine resolves them to
/// addresses that are not public (as some build sandboxes do).
fn private_registries() -> String {
    use std::net::ToSocketAddrs;
    let hosts = ["index.crates.io", "static.crates.io"];
    let private = hosts.iter().any(|host| {
        (*host, 443).to_socket_addrs().is_ok_and(|mut addresses| {
            addresses.any(|a| !warden_engine::address::is_public(a.ip()))
        })
    });
    if private {
        eprintln!("note: crates.io resolves to non-public addresses here: [egress] allow_private");
        format!("\n[egress]\nallow_private = {hosts:?}\n")
    } else {
        String::new()
    }
}

struct TaskFigures {
    /// The warm-up's seconds, when this task built the seed.
    warm_up: Option<f64>,
    /// The check of the edited tree, seconds.
    edited: f64,
    /// Check commands run (not reused) / distinct trees checked.
    runs: usize,
    trees: usize,
    total: f64,
}

fn task(warden: &Path, home: &Path, repo: &Path, smoke: bool) -> TaskFigures {
    let (path, content) = edit(smoke);
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "write_file",
            &json!({"path": path, "content": content}).to_string(),
        ),
        openai::tool_call("run_checks", "{}"),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Raise the limit"}).to_string(),
        ),
    ]);
    let started = Instant::now();
    let output = Command::new(warden)
        .args(["run", "--repo", repo.to_str().unwrap(), "--json"])
        .args(["--check", "cargo test", "raise the limit"])
        .env("WARDEN_HOME", home)
        .env("WARDEN_MODEL", "openai:gpt-bench")
        .env("OPENAI_BASE_URL", format!("{}/v1", server.url()))
        .env("OPENAI_API_KEY", "sk-bench")
        .output()
        .unwrap();
    let total = started.elapsed().as_secs_f64();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "warden run printed no result:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_eq!(result["outcome"], "proposal", "{result}");
    let notices: Vec<String> = result["notices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    let warm_up = notices.iter().find_map(|notice| {
        let rest = notice.split_once("built the base tree once (")?.1;
        rest.split_once(" s")?.0.parse::<f64>().ok()
    });
    assert!(
        warm_up.is_some()
            || notices
                .iter()
                .any(|n| n.contains("start from the base tree's build outputs")),
        "no warm checks notice: {notices:?}"
    );
    let validation = &result["proposal"]["validations"][0];
    assert_eq!(validation["exit_code"], 0, "{result}");
    // What ran: the warm-up (the base tree), the agent's run_checks (its answer to the model
    // says whether the command ran), the submission (its record says whether it was reused).
    let requests = server.requests();
    let checked = requests[2].body["messages"].to_string();
    assert!(checked.contains("$ cargo test"), "{checked}");
    let run_checks_ran = !checked.contains("not run again");
    let submission_ran = validation["reused"] != true;
    let runs =
        usize::from(warm_up.is_some()) + usize::from(run_checks_ran) + usize::from(submission_ran);
    TaskFigures {
        warm_up,
        edited: validation["duration_ms"].as_f64().unwrap() / 1000.0,
        runs,
        trees: usize::from(warm_up.is_some()) + 1,
        total,
    }
}

/// `--maintain`: see the module's documentation.
fn maintain(warden: &Path) {
    let repo = TempRepo::new();
    repo.write("Cargo.toml", MAINTAIN_MANIFEST);
    repo.write("src/lib.rs", MAINTAIN_LIB);
    repo.write(".gitignore", "/target\n");
    let status = Command::new("cargo")
        .args(["generate-lockfile", "--quiet"])
        .current_dir(repo.path())
        .status()
        .unwrap();
    assert!(status.success(), "cargo generate-lockfile failed");
    for (name, old) in MAINTAIN_PINS {
        cargo(
            repo.path(),
            &["update", "--quiet", "-p", name, "--precise", old],
        );
    }
    repo.commit("the maintenance benchmark crate, five dependencies behind");

    // Warden first (an empty home: nothing cached, nothing seeded), so the host replays the
    // upgrades it made.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("warden.toml"),
        format!(
            "[sandbox]\ntoolchains = [\"rust\"]\ndisk_mib = 8192\n{}",
            private_registries()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let output = Command::new(warden)
        .args([
            "maintain",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
        ])
        .env("WARDEN_HOME", home.path())
        .env_remove("WARDEN_MODEL")
        .output()
        .unwrap();
    let maintained = started.elapsed().as_secs_f64();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "warden maintain printed no result:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_eq!(result["outcome"], "proposal", "{result}");
    let upgrades: Vec<(String, String, String)> = result["maintenance"]["upgrades"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            let field = |name: &str| u[name].as_str().unwrap().to_string();
            (field("package"), field("from"), field("to"))
        })
        .collect();
    assert_eq!(upgrades.len(), 5, "five upgrades expected: {result}");
    let notices = result["notices"].to_string();
    assert!(
        notices.contains("built the base tree once"),
        "the base tree's warm-up did not run: {notices}"
    );
    let warm_up = result["baseline"][0]["duration_ms"].as_f64().unwrap() / 1000.0;
    let last_check = result["proposal"]["validations"][0]["duration_ms"]
        .as_f64()
        .unwrap()
        / 1000.0;

    // The host: the same commit, its packages fetched (not timed); a cold `cargo test`, then
    // the same upgrades one by one, each followed by an incremental `cargo test`.
    let host = tempfile::tempdir().unwrap();
    let host_dir = host.path().join("crate");
    let status = Command::new("git")
        .args(["clone", "-q", repo.path().to_str().unwrap()])
        .arg(&host_dir)
        .status()
        .unwrap();
    assert!(status.success());
    cargo(&host_dir, &["fetch", "--locked"]);
    let host_cold = cargo(&host_dir, &["test", "--offline", "--locked"]);
    let mut incremental = Vec::new();
    for (package, from, to) in &upgrades {
        cargo(
            &host_dir,
            &[
                "update",
                "--quiet",
                "-p",
                &format!("{package}@{from}"),
                "--precise",
                to,
            ],
        );
        cargo(&host_dir, &["fetch", "--locked"]);
        incremental.push(cargo(&host_dir, &["test", "--offline", "--locked"]));
    }
    let reference = host_cold + incremental.iter().sum::<f64>();

    println!("checks_bench (maintain), seconds; ratios against the host measured in this run");
    println!("  host cold `cargo test`                 {host_cold:8.2}");
    for ((package, from, to), seconds) in upgrades.iter().zip(&incremental) {
        println!("  host `cargo test` after {package} {from} → {to}: {seconds:.2}");
    }
    println!("  host reference (cold + 5 incremental)  {reference:8.2}");
    println!("  warden maintain: base check (warm-up)  {warm_up:8.2}");
    println!("  warden maintain: last upgrade's check  {last_check:8.2}");
    println!(
        "  warden maintain, whole run             {maintained:8.2}  {:.2}× the reference (goal ≤ 2)",
        maintained / reference
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let warden = args
        .iter()
        .position(|a| a == "--warden")
        .map(|i| PathBuf::from(&args[i + 1]))
        .expect("--warden PATH (e.g. target/release/warden) is required");
    assert!(warden.is_file(), "{} is not a file", warden.display());
    if args.iter().any(|a| a == "--maintain") {
        assert!(!smoke, "--maintain has no smoke mode: it needs crates.io");
        maintain(&warden);
        return;
    }

    let repo = TempRepo::new();
    if smoke {
        smoke_files(&repo, false);
    } else {
        repo.write("Cargo.toml", MANIFEST);
        repo.write("src/lib.rs", &lib(100));
    }
    repo.write(".gitignore", "/target\n");
    // The lockfile pins what both sides build.
    let status = Command::new("cargo")
        .args(["generate-lockfile", "--quiet"])
        .current_dir(repo.path())
        .status()
        .unwrap();
    assert!(status.success(), "cargo generate-lockfile failed");
    repo.commit("the benchmark crate");

    // The host: the same commit in a checkout of its own, dependencies fetched (not timed).
    let host = tempfile::tempdir().unwrap();
    let host_dir = host.path().join("crate");
    let status = Command::new("git")
        .args(["clone", "-q", repo.path().to_str().unwrap()])
        .arg(&host_dir)
        .status()
        .unwrap();
    assert!(status.success());
    cargo(&host_dir, &["fetch", "--locked"]);
    let host_cold = cargo(&host_dir, &["test", "--offline", "--locked"]);
    let (path, content) = edit(smoke);
    std::fs::write(host_dir.join(path), content).unwrap();
    let host_incremental = cargo(&host_dir, &["test", "--offline", "--locked"]);

    // Warden: the rust preset and nothing else (plus allow_private where needed).
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("warden.toml"),
        format!(
            "[sandbox]\ntoolchains = [\"rust\"]\ndisk_mib = 8192\n{}",
            if smoke {
                String::new()
            } else {
                private_registries()
            }
        ),
    )
    .unwrap();
    let first = task(&warden, home.path(), repo.path(), smoke);
    let second = task(&warden, home.path(), repo.path(), smoke);
    let warm_up = first
        .warm_up
        .expect("the first task of a base builds its seed");
    assert!(second.warm_up.is_none(), "the second task rebuilt the seed");

    println!(
        "checks_bench ({}), seconds; ratios against the host measured in this run",
        if smoke { "smoke" } else { "real crate" }
    );
    println!("  host cold `cargo test`                 {host_cold:8.2}");
    println!("  host `cargo test` after the edit       {host_incremental:8.2}");
    println!(
        "  first check (warm-up, base tree)       {warm_up:8.2}  {:.2}× host cold (goal ≤ 1.2)",
        warm_up / host_cold
    );
    for (name, figures) in [("seeding task", &first), ("second task", &second)] {
        println!(
            "  {name}: check after the edit      {:8.2}  {:.2}× host incremental (goal ≤ 1.5); \
             {} check runs for {} trees; task {:.2} s",
            figures.edited,
            figures.edited / host_incremental,
            figures.runs,
            figures.trees,
            figures.total
        );
    }
}
