//! The backend against the fake API server: a claim per view, bound from the warm pool,
//! commands over exec, a writable view synced both ways, expiry pushed forward by commands and
//! while one runs, a lost pod failing cleanly, orphans reaped, a dropped watch survived, the
//! claim deleted at close.

use super::support::{cluster, snapshot};
use std::time::{Duration, Instant};
use warden_kubernetes::fake::FakeOptions;
use warden_sandbox::{CommandSpec, Sandbox, SandboxError, ViewSpec};

fn bash(view: &dyn warden_sandbox::SandboxView, script: &str) -> warden_sandbox::CommandOutput {
    view.run(&CommandSpec::bash(script, Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_read_only_view_is_a_claim_that_runs_commands_and_goes_at_close() {
    let Some(cluster) = cluster(FakeOptions::default()) else {
        return;
    };
    let snap = snapshot(
        &cluster.path("snap"),
        &[
            ("README.md", "# hi\n"),
            ("src/lib.rs", "pub fn answer() -> u32 { 42 }\n"),
        ],
    );
    let sandbox = cluster.sandbox();
    let view = sandbox
        .open(&ViewSpec {
            lower: vec![("app".into(), snap.clone())],
            writable: false,
            scratch_dir: cluster.path("scratch"),
            mounts: vec![],
            egress_proxy: None,
            seed: None,
        })
        .unwrap();
    assert_eq!(view.root(), snap.as_path());
    assert_eq!(cluster.fake.claims().len(), 1);
    let claim = cluster.fake.claim(&cluster.fake.claims()[0]).unwrap();
    assert_eq!(
        claim["metadata"]["labels"]["warden.dev/owner"],
        "test-worker"
    );
    assert!(claim["spec"]["env"].is_null());
    let output = bash(view.as_ref(), "pwd; cat src/lib.rs; echo err >&2; exit 3");
    assert_eq!(output.exit_code, Some(3));
    assert_eq!(
        text(&output.stdout),
        "/work\npub fn answer() -> u32 { 42 }\n"
    );
    assert_eq!(text(&output.stderr), "err\n");
    // bash itself adds PWD, SHLVL and _.
    let mut env = CommandSpec::bash(
        "env | grep -v -e ^PWD= -e ^SHLVL= -e ^_= | sort",
        Duration::from_secs(10),
    );
    env.env = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("ONLY".into(), "this".into()),
    ];
    let listed = text(&view.run(&env).unwrap().stdout);
    assert_eq!(
        listed, "ONLY=this\nPATH=/usr/bin:/bin\n",
        "the environment is the allow-list"
    );
    view.close().unwrap();
    assert!(
        cluster.fake.claims().is_empty(),
        "closing deletes the claim"
    );
}

#[test]
fn a_writable_view_syncs_both_ways() {
    let Some(cluster) = cluster(FakeOptions::default()) else {
        return;
    };
    let snap = snapshot(
        &cluster.path("snap"),
        &[
            ("README.md", "# hi\n"),
            ("src/lib.rs", "42\n"),
            ("old/gone.txt", "x\n"),
        ],
    );
    let sandbox = cluster.sandbox();
    let view = sandbox
        .open(&ViewSpec {
            lower: vec![("app".into(), snap.clone())],
            writable: true,
            scratch_dir: cluster.path("scratch"),
            mounts: vec![],
            egress_proxy: None,
            seed: None,
        })
        .unwrap();
    let root = view.root().to_path_buf();
    let output = bash(
        view.as_ref(),
        "set -e; echo changed >> README.md; sed -i s/42/43/ src/lib.rs; mkdir -p docs/deep; \
         echo doc > docs/deep/a.md; rm -r old; ln -s README.md link; \
         mkdir -p \"$(printf 'd%.0s' $(seq 1 60))/$(printf 'e%.0s' $(seq 1 60))\"; \
         echo long > \"$(printf 'd%.0s' $(seq 1 60))/$(printf 'e%.0s' $(seq 1 60))/f\"",
    );
    assert!(output.success(), "{}", text(&output.stderr));
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "# hi\nchanged\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("src/lib.rs")).unwrap(),
        "43\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("docs/deep/a.md")).unwrap(),
        "doc\n"
    );
    assert!(!root.join("old").exists());
    assert_eq!(
        std::fs::read_link(root.join("link")).unwrap().to_str(),
        Some("README.md")
    );
    let long = format!("{}/{}/f", "d".repeat(60), "e".repeat(60));
    assert_eq!(std::fs::read_to_string(root.join(&long)).unwrap(), "long\n");
    // Warden's own edits (the edit tools write through root()) reach the pod.
    std::fs::write(root.join("src/lib.rs"), "44\n").unwrap();
    std::fs::remove_file(root.join("docs/deep/a.md")).unwrap();
    std::fs::write(root.join("new.txt"), "from warden\n").unwrap();
    let output = bash(
        view.as_ref(),
        "cat src/lib.rs new.txt; test ! -e docs/deep/a.md && echo deleted",
    );
    assert_eq!(
        text(&output.stdout),
        "44\nfrom warden\ndeleted\n",
        "{}",
        text(&output.stderr)
    );
    // The snapshot itself never changes.
    assert_eq!(
        std::fs::read_to_string(snap.join("src/lib.rs")).unwrap(),
        "42\n"
    );
    view.close().unwrap();
}

#[test]
fn a_lost_pod_fails_the_running_command_and_the_next_cleanly() {
    let Some(cluster) = cluster(FakeOptions::default()) else {
        return;
    };
    let snap = snapshot(&cluster.path("snap"), &[("a", "a\n")]);
    let sandbox = cluster.sandbox();
    let view = std::sync::Arc::new(
        sandbox
            .open(&ViewSpec {
                lower: vec![("app".into(), snap)],
                writable: false,
                scratch_dir: cluster.path("scratch"),
                mounts: vec![],
                egress_proxy: None,
                seed: None,
            })
            .unwrap(),
    );
    let claim = cluster.fake.claims()[0].clone();
    let running = view.clone();
    let started = Instant::now();
    let command = std::thread::spawn(move || {
        running.run(&CommandSpec::bash("sleep 60", Duration::from_secs(120)))
    });
    std::thread::sleep(Duration::from_millis(500));
    cluster.fake.lose_pod(&claim);
    let result = command.join().unwrap();
    assert!(
        matches!(result, Err(SandboxError::Lost { .. })),
        "the running command: {result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "it did not hang"
    );
    let next = view.run(&CommandSpec::bash("true", Duration::from_secs(10)));
    assert!(
        matches!(next, Err(SandboxError::Lost { .. })),
        "the next one: {next:?}"
    );
}

#[test]
fn an_expired_claim_is_lost() {
    let Some(cluster) = cluster(FakeOptions::default()) else {
        return;
    };
    let snap = snapshot(&cluster.path("snap"), &[("a", "a\n")]);
    let sandbox = cluster.sandbox();
    let view = sandbox
        .open(&ViewSpec {
            lower: vec![("app".into(), snap)],
            writable: false,
            scratch_dir: cluster.path("scratch"),
            mounts: vec![],
            egress_proxy: None,
            seed: None,
        })
        .unwrap();
    let claim = cluster.fake.claims()[0].clone();
    let first = cluster.fake.claim(&claim).unwrap()["spec"]["lifecycle"]["shutdownTime"].clone();
    assert!(first.as_str().unwrap().ends_with('Z'));
    cluster.fake.expire_now(&claim);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        cluster.fake.claims().is_empty(),
        "the controller deleted the expired claim"
    );
    let result = view.run(&CommandSpec::bash("true", Duration::from_secs(10)));
    assert!(
        matches!(result, Err(SandboxError::Lost { .. })),
        "{result:?}"
    );
}

#[test]
fn orphans_of_this_warden_are_reaped_and_no_one_elses() {
    let Some(cluster) = cluster(FakeOptions::default()) else {
        return;
    };
    let ours = serde_json::json!({"app.kubernetes.io/managed-by": "warden", "warden.dev/owner": "test-worker"});
    let theirs = serde_json::json!({"app.kubernetes.io/managed-by": "warden", "warden.dev/owner": "other-worker"});
    cluster.fake.add_claim("warden-left-behind", ours);
    cluster.fake.add_claim("warden-of-another", theirs);
    cluster
        .fake
        .add_claim("not-wardens", serde_json::json!({"app": "x"}));
    let reaped = cluster.sandbox().reap_orphans().unwrap();
    assert_eq!(reaped, vec!["warden-left-behind".to_string()]);
    assert_eq!(
        cluster.fake.claims(),
        vec!["not-wardens".to_string(), "warden-of-another".to_string()]
    );
}

#[test]
fn a_watch_that_drops_is_resumed_and_a_claim_never_bound_fails_closed() {
    let Some(cluster) = cluster(FakeOptions {
        bind_delay: Duration::from_millis(400),
        ..FakeOptions::default()
    }) else {
        return;
    };
    let snap = snapshot(&cluster.path("snap"), &[("a", "a\n")]);
    cluster.fake.drop_next_watches(2);
    let sandbox = cluster.sandbox();
    let spec = ViewSpec {
        lower: vec![("app".into(), snap)],
        writable: false,
        scratch_dir: cluster.path("scratch"),
        mounts: vec![],
        egress_proxy: None,
        seed: None,
    };
    let view = sandbox.open(&spec).unwrap();
    assert!(bash(view.as_ref(), "cat a").success());
    view.close().unwrap();

    // A warm pool that does not exist: the claim is refused, the task fails with the layer.
    let mut config = cluster.config.clone();
    config.warm_pool = "no-such-pool".into();
    let sandbox = warden_kubernetes::KubernetesSandbox::connect(&config).unwrap();
    let error = sandbox
        .open(&ViewSpec {
            scratch_dir: cluster.path("scratch-2"),
            ..spec.clone()
        })
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        error.layer(),
        Some(warden_sandbox::Layer::Runtime),
        "{error}"
    );
    assert!(error.to_string().contains("no-such-pool"), "{error}");

    // Host directories cannot reach a pod: refused, naming the layer.
    let mut with_mount = spec.clone();
    with_mount.scratch_dir = cluster.path("scratch-3");
    with_mount.mounts = vec![warden_sandbox::Mount::read_only("/usr/share")];
    let error = cluster.sandbox().open(&with_mount).map(|_| ()).unwrap_err();
    assert_eq!(
        error.layer(),
        Some(warden_sandbox::Layer::Filesystem),
        "{error}"
    );
}

/// The `PATCH`es of a claim the fake received.
fn patches(cluster: &super::support::Cluster, claim: &str) -> usize {
    cluster
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.target.ends_with(&format!("/sandboxclaims/{claim}")))
        .count()
}

fn read_only(cluster: &super::support::Cluster) -> ViewSpec {
    ViewSpec {
        lower: vec![(
            "app".into(),
            snapshot(&cluster.path("snap"), &[("a", "a\n")]),
        )],
        writable: false,
        scratch_dir: cluster.path("scratch"),
        mounts: vec![],
        egress_proxy: None,
        seed: None,
    }
}

#[test]
fn commands_push_the_claims_expiry_forward_once_per_quarter_of_the_idle_time() {
    let Some(cluster) = cluster(FakeOptions::default()) else {
        return;
    };
    // The default cadence (a quarter of the 600 s idle timeout): a burst of commands sends
    // no PATCH at all — the claim was created with a fresh expiry.
    let view = cluster.sandbox().open(&read_only(&cluster)).unwrap();
    let claim = cluster.fake.claims()[0].clone();
    for _ in 0..3 {
        assert!(bash(view.as_ref(), "true").success());
    }
    assert_eq!(patches(&cluster, &claim), 0);
    view.close().unwrap();

    // Every command, when the cadence has passed: its expiry moves forward before it runs.
    let sandbox = warden_kubernetes::KubernetesSandbox::connect(&cluster.config)
        .unwrap()
        .with_keep_alive_every(Duration::ZERO);
    let view = sandbox
        .open(&ViewSpec {
            scratch_dir: cluster.path("scratch-2"),
            ..read_only(&cluster)
        })
        .unwrap();
    let claim = cluster.fake.claims()[0].clone();
    let expiry = |cluster: &super::support::Cluster| {
        cluster.fake.claim(&claim).unwrap()["spec"]["lifecycle"]["shutdownTime"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first = expiry(&cluster);
    // Expiries have whole seconds: let one pass.
    std::thread::sleep(Duration::from_millis(1100));
    assert!(bash(view.as_ref(), "true").success());
    assert!(patches(&cluster, &claim) >= 1);
    let second = expiry(&cluster);
    // The same RFC 3339 shape: later sorts later.
    assert!(second > first, "{first} → {second}");
    assert_eq!(
        cluster.fake.claim(&claim).unwrap()["spec"]["lifecycle"]["shutdownPolicy"],
        "Delete",
        "the patch moved the time alone"
    );
    view.close().unwrap();
}

/// The claim stays alive for as long as its view is open — while a command runs (a build may
/// take longer than the idle timeout) and between commands (a model turn may too) — and the
/// heartbeat stops when the view is closed.
#[test]
fn an_open_view_keeps_its_claim_alive_until_it_is_closed() {
    let Some(cluster) = cluster(FakeOptions::default()) else {
        return;
    };
    let sandbox = warden_kubernetes::KubernetesSandbox::connect(&cluster.config)
        .unwrap()
        .with_keep_alive_every(Duration::from_millis(200));
    let view = std::sync::Arc::new(sandbox.open(&read_only(&cluster)).unwrap());
    let claim = cluster.fake.claims()[0].clone();
    let wait_for_patches = |at_least: usize, what: &str| {
        let watchdog = Instant::now() + Duration::from_secs(50);
        while patches(&cluster, &claim) < at_least {
            assert!(Instant::now() < watchdog, "no heartbeat {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Between commands (no command has run yet).
    wait_for_patches(2, "while the view was idle");
    // While a command runs.
    let running = view.clone();
    let command = std::thread::spawn(move || {
        running.run(&CommandSpec::bash("sleep 60", Duration::from_secs(120)))
    });
    let before = patches(&cluster, &claim);
    wait_for_patches(before + 2, "while the command ran");
    assert!(!command.is_finished());
    view.cancel();
    let output = command.join().unwrap().unwrap();
    assert!(!output.success());
    // After the command, as long as the view is open.
    let after = patches(&cluster, &claim);
    wait_for_patches(after + 2, "after the command ended");
    // Closed: the claim is deleted and nothing more is sent for it.
    let view =
        std::sync::Arc::try_unwrap(view).unwrap_or_else(|_| panic!("the view is still shared"));
    view.close().unwrap();
    let seen = patches(&cluster, &claim);
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        patches(&cluster, &claim) <= seen + 1,
        "the heartbeat stopped with the view"
    );
    assert!(
        cluster.fake.claim(&claim).is_none(),
        "the claim was deleted"
    );
}
