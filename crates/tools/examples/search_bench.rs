//! Benchmark of the `search` tool against ripgrep (`rg`) on the same tree and patterns: the tool
//! is called through the `Tool` trait, output formatting included; rg runs as a process with
//! the same ignore rules (`--hidden --no-require-git --no-ignore-parent --no-ignore-global
//! -g '!.git'`) and its output is read and discarded. Each case reports the median of N runs.
//!
//! ```text
//! cargo run --release -p warden-tools --example search_bench [-- [PATH] [--runs N]]
//! ```
//!
//! Without PATH a tree of ~20,000 source-like files (~200 MB) is generated in a temp directory.
//! Cases with fewer than 200 matches are compared directly (both find and print every match).
//! The capped case (a pattern matching most lines) is not like for like: the tool stops at 200
//! lines and a 10,000-line count, skipping files that cannot change its output, while rg prints
//! everything; it is reported against both `rg -n` and `rg -c` (count only) for scale.
//!
//! On the generated tree the tool's match counts are checked against what was generated (and
//! against rg's when rg is installed); a wrong count fails the run. `--smoke`: a tree of 600
//! files, one run; without rg the comparison is skipped with a line.

// Spawning rg is the point of this example; the hardened process helper is for sandboxed runs.
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use warden_runtime::{Tool, ToolOutput};
use warden_tools::{question_tools, Workspace};

struct Case {
    name: &'static str,
    pattern: &'static str,
    literal: bool,
    /// Also compare against `rg -c` (for the capped case).
    capped: bool,
}

const GENERATED_CASES: &[Case] = &[
    Case {
        name: "literal",
        pattern: "= handle_request(",
        literal: true,
        capped: false,
    },
    Case {
        name: "regex",
        pattern: r"fn \w+_retry\(\w+: u\d+\)",
        literal: false,
        capped: false,
    },
    Case {
        name: "rare",
        pattern: "RareNeedle",
        literal: true,
        capped: false,
    },
    Case {
        name: "common (capped)",
        pattern: "let",
        literal: true,
        capped: true,
    },
];

/// Patterns for an arbitrary tree (e.g. `~/.cargo/registry/src`): rare-ish Rust identifiers.
const PATH_CASES: &[Case] = &[
    Case {
        name: "literal",
        pattern: "fn try_reserve_exact",
        literal: true,
        capped: false,
    },
    Case {
        name: "regex",
        pattern: r"fn \w+_unchecked_mut\(",
        literal: false,
        capped: false,
    },
    Case {
        name: "rare",
        pattern: "WardenRareNeedle",
        literal: true,
        capped: false,
    },
    Case {
        name: "common (capped)",
        pattern: "fn",
        literal: true,
        capped: true,
    },
];

fn main() {
    let mut args = std::env::args().skip(1);
    let mut path: Option<PathBuf> = None;
    let mut runs = 7usize;
    let mut smoke = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            "--smoke" => {
                smoke = true;
                runs = 1;
            }
            _ => path = Some(PathBuf::from(arg)),
        }
    }
    let (_temp, root, cases, generated) = match path {
        Some(path) => (None, path, PATH_CASES, None),
        None => {
            let temp = tempfile::tempdir().expect("temp dir");
            let started = Instant::now();
            let (files, bytes, counts) = generate(temp.path(), if smoke { 3 } else { 100 });
            eprintln!(
                "generated {files} files, {:.0} MB in {:.1?}",
                bytes as f64 / 1e6,
                started.elapsed()
            );
            let root = temp.path().to_path_buf();
            (Some(temp), root, GENERATED_CASES, Some(counts))
        }
    };
    let workspace = Arc::new(Workspace::new(vec![("bench".into(), root.clone())]).unwrap());
    let tools = question_tools(workspace);
    let search = tools.iter().find(|t| t.spec().name == "search").unwrap();
    let have_rg = Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_rg {
        println!("skipped: rg is not installed (apt-get install ripgrep), the tool is timed alone");
    }
    let mut wrong = 0;
    println!(
        "tree: {}  threads: {}  runs: {runs} (median)",
        root.display(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:<16} {:>9} {:>9} {:>7} {:>9}  {:<24}  notes",
        "case", "tool", "rg -n", "ratio", "rg -c", "best of runs (tool/rg)"
    );
    for (index, case) in cases.iter().enumerate() {
        let arguments = json!({"pattern": case.pattern, "literal": case.literal});
        // Warm the page cache and check the answers before timing.
        let ours = tool_output(search.as_ref(), &arguments);
        let our_lines = if ours.starts_with("no matches") {
            0
        } else {
            ours.lines().filter(|l| !l.starts_with("[... ")).count()
        };
        let rg_lines = have_rg.then(|| run_rg(&root, case, false));
        let expected = generated.and_then(|counts| counts.get(index).copied().flatten());
        if let Some(expected) = expected {
            if our_lines != expected {
                eprintln!(
                    "FAILED: {}: the tool found {our_lines} lines, {expected} were generated",
                    case.name
                );
                wrong += 1;
            }
        }
        let note = match rg_lines {
            Some(rg_lines) if case.capped => format!("tool shows {our_lines} of {rg_lines} lines"),
            Some(rg_lines) => {
                if our_lines != rg_lines {
                    // On the generated tree this is a wrong answer; on another tree, a note.
                    eprintln!(
                        "{}: {}: tool {our_lines} lines, rg {rg_lines}",
                        if generated.is_some() {
                            "FAILED"
                        } else {
                            "warning"
                        },
                        case.name
                    );
                    wrong += usize::from(generated.is_some());
                }
                format!("{rg_lines} matches")
            }
            None => format!("tool shows {our_lines} lines"),
        };
        // Interleaved, so load from other processes falls on both sides alike.
        let (mut tool_times, mut rg_times, mut count_times) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs.max(1) {
            tool_times.push(time(|| {
                tool_output(search.as_ref(), &arguments);
            }));
            if !have_rg {
                continue;
            }
            rg_times.push(time(|| {
                run_rg(&root, case, false);
            }));
            if case.capped {
                count_times.push(time(|| {
                    run_rg(&root, case, true);
                }));
            }
        }
        let tool_time = median(&mut tool_times);
        if !have_rg {
            println!(
                "{:<16} {:>7.1}ms {:>9} {:>7} {:>9}  {:<24}  {note}",
                case.name,
                ms(tool_time),
                "-",
                "-",
                "-",
                "-"
            );
            continue;
        }
        let rg_time = median(&mut rg_times);
        let rg_count = if case.capped {
            format!("{:>7.1}ms", ms(median(&mut count_times)))
        } else {
            "-".into()
        };
        let best = format!(
            "{:.1}/{:.1}ms = {:.2}x",
            ms(tool_times[0]),
            ms(rg_times[0]),
            tool_times[0].as_secs_f64() / rg_times[0].as_secs_f64()
        );
        println!(
            "{:<16} {:>7.1}ms {:>7.1}ms {:>6.2}x {:>9}  {:<24}  {note}",
            case.name,
            ms(tool_time),
            ms(rg_time),
            tool_time.as_secs_f64() / rg_time.as_secs_f64(),
            rg_count,
            best,
        );
    }
    if wrong > 0 {
        eprintln!("FAILED: {wrong} wrong answers");
        std::process::exit(1);
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn time(f: impl FnOnce()) -> Duration {
    let started = Instant::now();
    f();
    started.elapsed()
}

/// Sorts `times` (so `times[0]` is the best) and returns the median.
fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn tool_output(search: &dyn Tool, arguments: &serde_json::Value) -> String {
    match block_on(search.call(arguments.clone())) {
        ToolOutput::Ok(text) => text,
        other => panic!("search failed: {other:?}"),
    }
}

/// Runs rg in `root`; returns the number of output lines (matches, or files with `count`).
fn run_rg(root: &Path, case: &Case, count: bool) -> usize {
    let mut command = Command::new("rg");
    command
        .current_dir(root)
        .args([
            "--hidden",
            "--no-require-git",
            "--no-ignore-parent",
            "--no-ignore-global",
        ])
        .args(["-g", "!.git", "--no-messages"])
        .arg(if count { "-c" } else { "-n" });
    if case.literal {
        command.arg("-F");
    }
    let output = command
        .arg("-e")
        .arg(case.pattern)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("rg is installed (apt-get install ripgrep)");
    output.stdout.iter().filter(|&&b| b == b'\n').count()
}

/// Writes 200 files of Rust-like text (~2 MB) in each of `dirs` directories (100: ~20,000
/// files, ~200 MB); returns (files, bytes, the lines each of `GENERATED_CASES` matches where
/// known: the capped case's is not counted).
fn generate(root: &Path, dirs: usize) -> (usize, usize, [Option<usize>; 4]) {
    const WORDS: &[&str] = &[
        "request", "response", "buffer", "config", "handle", "state", "count", "index", "value",
        "result", "error", "client", "server", "stream", "token", "cache", "entry", "table",
        "socket", "parser", "writer", "reader", "queue", "worker", "event", "timer", "path",
    ];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let (mut files, mut bytes) = (0, 0);
    let (mut requests, mut retries, mut needles) = (0, 0, 0);
    for dir in 0..dirs {
        let dir_path = root.join(format!("crate_{dir:03}/src/module_{}", dir % 7));
        std::fs::create_dir_all(&dir_path).unwrap();
        for file in 0..200 {
            let mut text = String::with_capacity(12 * 1024);
            let lines = 130 + next(150);
            for line in 0..lines {
                let a = WORDS[next(WORDS.len())];
                let b = WORDS[next(WORDS.len())];
                match next(100_000) {
                    0 => {
                        requests += 1;
                        text.push_str(&format!("    let {a} = handle_request({b}, {line});\n"))
                    }
                    1 => {
                        retries += 1;
                        text.push_str(&format!(
                            "fn {a}_retry({b}: u{}) -> bool {{\n",
                            8 << next(3)
                        ))
                    }
                    2..=40_000 => {
                        text.push_str(&format!("    let {a}_{b} = {b}.{a}({line}, \"{a}\");\n"))
                    }
                    40_001..=60_000 => {
                        text.push_str(&format!("    // {a} the {b} before {a}ing it again\n"))
                    }
                    60_001..=70_000 => text.push_str(&format!(
                        "fn {a}_{b}(&mut self, {b}: &{a}) -> Result<(), Error> {{\n"
                    )),
                    _ => text.push_str(&format!("        self.{a}.{b}(&mut {a}_{b}, {line})?;\n")),
                }
            }
            if (dir * 200 + file) % 2003 == 0 {
                needles += 1;
                text.push_str("// RareNeedle: the only place this word appears\n");
            }
            bytes += text.len();
            files += 1;
            std::fs::write(dir_path.join(format!("file_{file:03}.rs")), text).unwrap();
        }
    }
    (
        files,
        bytes,
        [Some(requests), Some(retries), Some(needles), None],
    )
}

fn block_on<F: Future>(future: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
        std::thread::park();
    }
}
