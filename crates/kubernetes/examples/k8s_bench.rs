//! Claim-to-first-command latency and requests per task of the kubernetes backend, through the
//! fake API server (its pods are `linux` sandbox views on this machine; it binds a claim as soon
//! as it is created, like a warm pool with a ready pod).
//!
//! `cargo run --example k8s_bench -p warden-kubernetes [-- --rounds N] [--smoke]`
//!
//! For each round: open a read-only view of a 200-file snapshot (claim, watch until bound, read
//! the sandbox, deliver the tree) and run its first command — that is the claim-to-first-command
//! time — then four more commands and close it (a question task's view); then the same with a
//! writable view (a change task's: every command is followed by a sync, and a command after a
//! host-side edit by a push). Prints medians and the requests each view made; times are reported,
//! never asserted. `--smoke` runs 2 rounds and fails only on a wrong result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};
use warden_kubernetes::fake::{FakeCluster, FakeOptions};
use warden_kubernetes::{Credentials, KubernetesConfig, KubernetesSandbox};
use warden_sandbox::{Backend, CommandSpec, Sandbox, SandboxConfig, ViewSpec};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(if smoke { 2 } else { 20 });
    let runtime = match warden_sandbox::select(Backend::Linux, &SandboxConfig::default()) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("k8s_bench: the fake's pods need the linux backend: {error}");
            std::process::exit(if smoke { 0 } else { 1 });
        }
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let fake = FakeCluster::start(
        runtime,
        &dir.path().join("cluster"),
        FakeOptions {
            bind_delay: Duration::ZERO,
            ..FakeOptions::default()
        },
    )
    .expect("the fake API server");
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig).expect("a kubeconfig");
    let config = KubernetesConfig {
        credentials: Credentials::Kubeconfig {
            path: kubeconfig,
            context: None,
        },
        owner: "bench".into(),
        ..KubernetesConfig::default()
    };
    let sandbox = KubernetesSandbox::connect(&config).expect("the backend");
    let snapshot = dir.path().join("snapshot");
    for index in 0..200 {
        let file = snapshot.join(format!("src/m{}/f{index}.rs", index % 10));
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("a directory");
        std::fs::write(&file, format!("pub fn f{index}() -> u32 {{ {index} }}\n")).expect("a file");
    }

    let mut first_command = Vec::new();
    let mut open_times = Vec::new();
    let mut question_requests = Vec::new();
    let mut change_requests = Vec::new();
    let mut change_command = Vec::new();
    for round in 0..rounds {
        for writable in [false, true] {
            let before = sandbox.requests();
            let started = Instant::now();
            let view = sandbox
                .open(&ViewSpec {
                    lower: vec![("app".into(), snapshot.clone())],
                    writable,
                    scratch_dir: dir.path().join(format!("scratch-{round}-{writable}")),
                    mounts: Vec::new(),
                    egress_proxy: None,
                    seed: None,
                })
                .expect("a view");
            let opened = started.elapsed();
            let output = view
                .run(&CommandSpec::bash(
                    "cat src/m3/f13.rs",
                    Duration::from_secs(30),
                ))
                .expect("the first command");
            let first = started.elapsed();
            assert_eq!(
                String::from_utf8_lossy(&output.stdout),
                "pub fn f13() -> u32 { 13 }\n",
                "the first command read the snapshot"
            );
            for index in 0..4 {
                let script = if writable {
                    format!("echo {index} >> src/m1/f1.rs")
                } else {
                    "ls src | wc -l".to_string()
                };
                let command_started = Instant::now();
                let output = view
                    .run(&CommandSpec::bash(&script, Duration::from_secs(30)))
                    .expect("a command");
                assert!(output.success(), "{output:?}");
                if writable {
                    change_command.push(command_started.elapsed());
                }
            }
            if writable {
                // A host-side edit (the edit tools) reaches the pod before the next command.
                std::fs::write(view.root().join("src/m2/f2.rs"), "edited\n").expect("an edit");
                let output = view
                    .run(&CommandSpec::bash(
                        "cat src/m2/f2.rs",
                        Duration::from_secs(30),
                    ))
                    .expect("a command after an edit");
                assert_eq!(String::from_utf8_lossy(&output.stdout), "edited\n");
                let synced = std::fs::read_to_string(view.root().join("src/m1/f1.rs"))
                    .expect("the synced file");
                assert!(synced.ends_with("0\n1\n2\n3\n"), "{synced}");
            }
            view.close().expect("close");
            let requests = sandbox.requests() - before;
            if writable {
                change_requests.push(requests);
            } else {
                question_requests.push(requests);
                open_times.push(opened);
                first_command.push(first);
            }
        }
    }
    assert!(fake.claims().is_empty(), "every claim was deleted");
    println!("k8s_bench: {rounds} rounds through the fake API server (pods: linux views on this machine)");
    println!(
        "  claim-to-first-command (read-only view, 200 files): median {:.1} ms, max {:.1} ms (of which open: median {:.1} ms)",
        ms(median(&mut first_command)),
        ms(*first_command.iter().max().unwrap_or(&Duration::ZERO)),
        ms(median(&mut open_times)),
    );
    println!(
        "  a writable view's command (exec + sync back): median {:.1} ms",
        ms(median(&mut change_command))
    );
    println!(
        "  requests: question view with 5 commands {} (claim, watch, sandbox, upload, 5 exec, delete); change view with 6 commands and one host edit {}",
        question_requests.first().copied().unwrap_or(0),
        change_requests.first().copied().unwrap_or(0)
    );
}

fn median(values: &mut [Duration]) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
