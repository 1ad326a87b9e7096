//! Sandbox start-up cost, measured against references in the same run (medians and p90 over
//! interleaved rounds, so load from other processes hits every contender alike):
//!
//! - plain spawn of `true`, `unshare -Urmnp --fork true`, `bwrap --unshare-all … true`;
//! - the linux backend running `true` with every layer (namespaces, Landlock, seccomp, cgroups
//!   where available), in a read-only and in a writable view;
//! - runsc (fewer rounds), opening a view over a warm snapshot, and 50 concurrent sandboxes.
//!
//! `cargo run --release -p warden-sandbox --example sandbox_bench [-- ROUNDS]` (`--smoke`: 3
//! rounds, 4 concurrent sandboxes; a missing `bwrap` or `runsc` is skipped with a line, a
//! failed sandbox fails the run)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_sandbox::{select, Backend, CommandSpec, Sandbox, SandboxConfig, SandboxView, ViewSpec};

fn spawn(argv: &[&str]) -> Duration {
    let started = Instant::now();
    let status = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(status.success(), "{argv:?} failed");
    elapsed
}

fn run_true(view: &dyn SandboxView) -> Duration {
    let mut command = CommandSpec::bash("", Duration::from_secs(30));
    command.argv = vec!["true".into()];
    let started = Instant::now();
    let output = view.run(&command).unwrap();
    let elapsed = started.elapsed();
    assert!(output.success(), "{output:?}");
    elapsed
}

#[derive(Default)]
struct Samples {
    name: String,
    values: Vec<Duration>,
}

impl Samples {
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.values.clone();
        sorted.sort();
        let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[index]
    }
    fn median(&self) -> Duration {
        self.percentile(0.5)
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn snapshot(dir: &Path) -> std::path::PathBuf {
    let snapshot = dir.join("snapshot");
    std::fs::create_dir_all(snapshot.join("src")).unwrap();
    for index in 0..200 {
        std::fs::write(
            snapshot.join("src").join(format!("f{index}.rs")),
            "fn main() {}\n",
        )
        .unwrap();
    }
    snapshot
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let rounds: usize = std::env::args()
        .skip(1)
        .find(|a| a != "--smoke")
        .map_or(if smoke { 3 } else { 200 }, |a| {
            a.parse().expect("ROUNDS must be a number")
        });
    let concurrency = if smoke { 4 } else { 50 };
    let base = tempfile::tempdir().unwrap();
    let snapshot = snapshot(base.path());
    for report in warden_sandbox::probe()
        .iter()
        .filter(|r| r.backend == Backend::Linux)
    {
        println!(
            "{:<17} {:<5} {}",
            report.layer.as_str(),
            report.available,
            report.detail
        );
    }
    let linux = match select(Backend::Linux, &SandboxConfig::default()) {
        Ok(sandbox) => sandbox,
        Err(error) => {
            println!("skipped: the linux backend is unavailable: {error}");
            return;
        }
    };
    let view = |sandbox: &Arc<dyn Sandbox>, writable: bool, name: &str| {
        sandbox
            .open(&ViewSpec {
                lower: vec![("repo".into(), snapshot.clone())],
                writable,
                scratch_dir: base.path().join(name),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            })
            .unwrap()
    };
    let read_only = view(&linux, false, "ro");
    let writable = view(&linux, true, "rw");
    let bwrap = Path::new("/usr/bin/bwrap").exists();
    if !bwrap {
        println!("skipped: bwrap is not installed (/usr/bin/bwrap), no bwrap reference");
    }
    let bwrap_argv: Vec<&str> = {
        let mut argv = vec!["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr"];
        for name in ["bin", "lib", "lib64", "sbin"] {
            let path = Path::new("/").join(name);
            if let Ok(target) = std::fs::read_link(&path) {
                argv.extend([
                    "--symlink",
                    Box::leak(target.to_string_lossy().into_owned().into_boxed_str()),
                    Box::leak(format!("/{name}").into_boxed_str()),
                ]);
            }
        }
        argv.extend([
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "true",
        ]);
        argv
    };

    let mut plain = Samples {
        name: "spawn `true`".into(),
        ..Default::default()
    };
    let mut unshare = Samples {
        name: "unshare -Urmnp --fork true".into(),
        ..Default::default()
    };
    let mut bwrap_samples = Samples {
        name: "bwrap --unshare-all true".into(),
        ..Default::default()
    };
    let mut ours_ro = Samples {
        name: "linux backend, read-only view".into(),
        ..Default::default()
    };
    let mut ours_rw = Samples {
        name: "linux backend, writable view".into(),
        ..Default::default()
    };
    // Warm-up.
    for _ in 0..5 {
        run_true(read_only.as_ref());
        run_true(writable.as_ref());
    }
    for round in 0..rounds {
        // Rotate the order so no contender always follows the same one.
        for slot in 0..5 {
            match (slot + round) % 5 {
                0 => plain.values.push(spawn(&["true"])),
                1 => unshare
                    .values
                    .push(spawn(&["unshare", "-Urmnp", "--fork", "true"])),
                2 if bwrap => bwrap_samples.values.push(spawn(&bwrap_argv)),
                3 => ours_ro.values.push(run_true(read_only.as_ref())),
                4 => ours_rw.values.push(run_true(writable.as_ref())),
                _ => {}
            }
        }
    }

    // Opening a view over a warm snapshot (read-only and writable), and closing it.
    let mut open_ro = Samples {
        name: "open read-only view".into(),
        ..Default::default()
    };
    let mut open_rw = Samples {
        name: "open writable view".into(),
        ..Default::default()
    };
    let mut close = Samples {
        name: "close view".into(),
        ..Default::default()
    };
    for index in 0..rounds.min(100) {
        for (writable, samples) in [(false, &mut open_ro), (true, &mut open_rw)] {
            let started = Instant::now();
            let opened = view(&linux, writable, &format!("open-{index}-{writable}"));
            samples.values.push(started.elapsed());
            let started = Instant::now();
            opened.close().unwrap();
            close.values.push(started.elapsed());
        }
    }

    // runsc, fewer rounds.
    let mut gvisor = Samples {
        name: "gvisor backend, read-only view".into(),
        ..Default::default()
    };
    match select(Backend::Gvisor, &SandboxConfig::default()) {
        Ok(sandbox) => {
            let gvisor_view = view(&sandbox, false, "gvisor");
            for _ in 0..rounds.min(20) {
                gvisor.values.push(run_true(gvisor_view.as_ref()));
            }
            gvisor_view.close().unwrap();
        }
        Err(error) => println!("skipped: the gvisor backend is unavailable: {error}"),
    }

    // `concurrency` concurrent sandboxes: each its own view and command.
    let started = Instant::now();
    let failures: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..concurrency)
            .map(|index| {
                let linux = &linux;
                let view = &view;
                scope.spawn(move || {
                    let opened = view(linux, index % 2 == 0, &format!("concurrent-{index}"));
                    let output = opened.run(&CommandSpec::bash(
                        "echo $$ > /tmp/pid; ls /work > /dev/null; sleep 0.2",
                        Duration::from_secs(60),
                    ));
                    let ok = matches!(&output, Ok(o) if o.success());
                    if let Err(error) = &output {
                        eprintln!("concurrent sandbox {index}: {error}");
                    }
                    opened.close().is_ok() && ok
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(false))
            .filter(|ok| !ok)
            .count()
    });
    let concurrent = started.elapsed();

    println!(
        "{rounds} interleaved rounds ({} build; ratios against references from the same run)\n",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!("{:<34} {:>10} {:>10}", "", "median", "p90");
    let rows = [
        &plain,
        &unshare,
        &bwrap_samples,
        &ours_ro,
        &ours_rw,
        &gvisor,
        &open_ro,
        &open_rw,
        &close,
    ];
    for samples in rows {
        if samples.values.is_empty() {
            continue;
        }
        println!(
            "{:<34} {:>8.2}ms {:>8.2}ms",
            samples.name,
            ms(samples.median()),
            ms(samples.percentile(0.9))
        );
    }
    println!();
    let ratio = |a: &Samples, b: &Samples| ms(a.median()) / ms(b.median());
    for ours in [&ours_ro, &ours_rw] {
        println!("{} / plain spawn:  {:.2}x", ours.name, ratio(ours, &plain));
        println!(
            "{} / unshare:      {:.2}x   (stretch goal <= 1.3x)",
            ours.name,
            ratio(ours, &unshare)
        );
        if !bwrap_samples.values.is_empty() {
            println!(
                "{} / bwrap:        {:.2}x   (goal <= 1.0x)",
                ours.name,
                ratio(ours, &bwrap_samples)
            );
        }
    }
    if !gvisor.values.is_empty() {
        println!("gvisor / linux backend:  {:.1}x", ratio(&gvisor, &ours_ro));
    }
    println!(
        "open writable view: median {:.2}ms (goal <= 20ms)",
        ms(open_rw.median())
    );
    println!(
        "{concurrency} concurrent sandboxes (open, run, close): {failures} failures, {:.0}ms wall",
        ms(concurrent)
    );
    read_only.close().unwrap();
    writable.close().unwrap();
    if failures > 0 {
        eprintln!("FAILED: {failures} of {concurrency} concurrent sandboxes failed");
        std::process::exit(1);
    }
}
