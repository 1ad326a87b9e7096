//! Test support: snapshot fixtures (read-only like real snapshots), backend selection that
//! skips only where `probe` agrees the machine lacks a layer, re-executing this test binary
//! (as uid 65534, with a canary key in its environment), and small run helpers.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use warden_sandbox::{
    probe_with, select, Backend, CommandOutput, CommandSpec, Layer, Sandbox, SandboxConfig,
    SandboxView, ViewSpec,
};

/// Set by the re-executing tests for the child test process.
pub const MODE_VAR: &str = "WARDEN_SANDBOX_TEST_MODE";
/// `nobody-undelegated`: uid 65534 without cgroup delegation, cgroup layers disabled
/// explicitly. `nobody-delegated`: uid 65534 in delegated cgroups, every layer on.
pub const UNDELEGATED: &str = "nobody-undelegated";
pub const DELEGATED: &str = "nobody-delegated";
/// A comma-separated list of backends that must not be skipped (for CI).
pub const REQUIRE_VAR: &str = "WARDEN_SANDBOX_TEST_REQUIRE";
/// The canary model key the re-executed key tests carry in their environment.
pub const CANARY_KEY: &str = "sk-warden-canary-7f3c1e";

pub fn mode() -> Option<String> {
    std::env::var(MODE_VAR).ok()
}

/// The configuration the suite runs with: in the undelegated mode the cgroup layers are
/// disabled explicitly (rlimits remain), which is what an operator must do there.
pub fn config() -> SandboxConfig {
    let mut config = SandboxConfig::default();
    if mode().as_deref() == Some(UNDELEGATED) {
        config.disabled_layers = vec![Layer::CgroupMemory, Layer::CgroupPids, Layer::CgroupCpu];
    }
    config
}

/// Whether this run is root, as a test that needs root to `what` asks: when not, it says it
/// skips — or fails when `WARDEN_TEST_REQUIRE` lists `root` (CI does, so a CI that stopped
/// running as root shows instead of quietly skipping these tests).
pub fn root_for(what: &str) -> bool {
    if euid() == 0 {
        return true;
    }
    let required = std::env::var("WARDEN_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|name| name.trim() == "root");
    assert!(
        !required,
        "WARDEN_TEST_REQUIRE lists root, but this run is uid {}: cannot {what}",
        euid()
    );
    eprintln!("skipped: needs root to {what} (uid {})", euid());
    false
}

/// Whether `WARDEN_SANDBOX_TEST_REQUIRE` lists `backend`: then nothing of it may skip.
pub fn required(backend: Backend) -> bool {
    std::env::var(REQUIRE_VAR)
        .unwrap_or_default()
        .split(',')
        .any(|name| name.trim() == backend.as_str())
}

/// The backend, or `None` (with the reason printed) when this machine lacks it — and then
/// `probe` must report a layer of it unavailable.
pub fn sandbox(backend: Backend) -> Option<Arc<dyn Sandbox>> {
    static LINUX: OnceLock<Option<Arc<dyn Sandbox>>> = OnceLock::new();
    static GVISOR: OnceLock<Option<Arc<dyn Sandbox>>> = OnceLock::new();
    static LOCAL: OnceLock<Option<Arc<dyn Sandbox>>> = OnceLock::new();
    let cell = match backend {
        Backend::Linux => &LINUX,
        Backend::Gvisor => &GVISOR,
        Backend::Local => &LOCAL,
        Backend::Kubernetes => return kubernetes(),
    };
    cell.get_or_init(|| match select(backend, &config()) {
        Ok(sandbox) => Some(sandbox),
        Err(error) => {
            let reports = probe_with(&config());
            let missing: Vec<String> = reports
                .iter()
                .filter(|r| {
                    r.backend == backend
                        && !r.available
                        && !config().disabled_layers.contains(&r.layer)
                })
                .map(|r| format!("{}: {}", r.layer, r.detail))
                .collect();
            assert!(
                !missing.is_empty(),
                "select({backend}) failed but probe reports every layer available: {error}"
            );
            assert!(
                !required(backend),
                "{backend} is required here ({REQUIRE_VAR}) but: {error}"
            );
            eprintln!("SKIP {backend} backend on this machine: {error}; probe: {missing:?}");
            None
        }
    })
    .clone()
}

/// A temporary directory with a snapshot in it, laid out and locked down like the ones
/// `warden-repo` materializes (files 0444/0555, directories 0555, owned by this user).
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub snapshot: PathBuf,
}

pub fn snapshot_at(path: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(path).unwrap();
    for (name, content) in files {
        let file = path.join(name);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, content).unwrap();
    }
    lock_down(path);
}

fn lock_down(path: &Path) {
    for entry in std::fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            lock_down(&entry.path());
        } else {
            let mode = if entry.file_name().to_string_lossy().ends_with(".sh") {
                0o555
            } else {
                0o444
            };
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555)).unwrap();
}

fn unlock(path: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755));
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                unlock(&entry.path());
            }
        }
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_files(&[
            ("README.md", "# fixture\n"),
            ("src/lib.rs", "pub fn answer() -> u32 { 42 }\n"),
            ("run.sh", "#!/bin/sh\necho ran\n"),
        ])
    }

    pub fn with_files(files: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("warden-sandbox-test-")
            .tempdir()
            .unwrap();
        let snapshot = dir.path().join("snapshot");
        snapshot_at(&snapshot, files);
        Fixture { dir, snapshot }
    }

    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn view(&self, writable: bool) -> ViewSpec {
        ViewSpec {
            lower: vec![("fixture".into(), self.snapshot.clone())],
            writable,
            scratch_dir: self.scratch(if writable { "scratch-rw" } else { "scratch-ro" }),
            mounts: Vec::new(),
            egress_proxy: None,
            seed: None,
        }
    }

    /// The snapshot's files and contents, to show it did not change.
    pub fn snapshot_state(&self) -> Vec<(String, Vec<u8>, u32)> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>, u32)>) {
            let mut entries: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for path in entries {
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let mode = meta.permissions().mode();
                if meta.is_dir() {
                    out.push((name, Vec::new(), mode));
                    walk(root, &path, out);
                } else {
                    out.push((name, std::fs::read(&path).unwrap(), mode));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.snapshot, &self.snapshot, &mut out);
        out
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        unlock(self.dir.path());
    }
}

/// `bash -c script` with a short timeout and default limits.
pub fn bash(view: &dyn SandboxView, script: &str) -> CommandOutput {
    run(view, CommandSpec::bash(script, Duration::from_secs(30)))
}

pub fn run(view: &dyn SandboxView, command: CommandSpec) -> CommandOutput {
    view.run(&command)
        .unwrap_or_else(|error| panic!("{:?}: {error}", command.argv))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Panics with the command's output unless it exited 0.
pub fn expect_success(output: &CommandOutput) -> String {
    assert!(
        output.success(),
        "exit {:?} signal {:?}\nstdout: {}\nstderr: {}",
        output.exit_code,
        output.signal,
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Re-runs tests of this binary in a child process (`filter` matched exactly when `exact`),
/// optionally as uid/gid 65534, with extra environment variables, and panics unless they pass.
/// `wrapper` prefixes the command (e.g. a shell that joins cgroups first).
pub fn reexec(
    filter: &str,
    exact: bool,
    envs: &[(&str, &str)],
    as_nobody: bool,
    wrapper: &[String],
) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut argv: Vec<String> = wrapper.to_vec();
    if as_nobody {
        argv.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
    }
    argv.push(exe.to_string_lossy().into_owned());
    argv.push(filter.into());
    if exact {
        argv.push("--exact".into());
    }
    argv.extend(["--test-threads=2".to_string(), "--nocapture".to_string()]);
    // The tests re-execute their own binary; this is not product code.
    #[allow(clippy::disallowed_methods)]
    let mut command = std::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .envs(envs.iter().copied())
        .env("RUST_BACKTRACE", "1");
    let output = command.output().unwrap();
    let log = format!("{}\n{}", text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "child test run {argv:?} failed:\n{log}"
    );
    assert!(
        log.contains("test result: ok") && !log.contains(" 0 passed"),
        "child test run {argv:?} ran nothing:\n{log}"
    );
    log
}

/// The effective uid of this process (the owner of its /proc directory).
pub fn euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// The backend once more, with a small writable space per view (the quota checks).
pub fn with_quota(backend: Backend, disk: warden_sandbox::DiskQuota) -> Arc<dyn Sandbox> {
    let mut config = config();
    config.disk = disk;
    select(backend, &config).unwrap_or_else(|error| panic!("{backend} with {disk:?}: {error}"))
}

/// Bytes allocated under `dir` on `dir`'s own file system: what landed on the host's disk
/// (mounts below it, such as a view's tmpfs, are not followed).
pub fn host_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fn walk(path: &Path, dev: u64) -> u64 {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return 0;
        };
        if meta.dev() != dev {
            return 0;
        }
        let mut total = meta.blocks() * 512;
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(path) {
                for entry in entries.flatten() {
                    total += walk(&entry.path(), dev);
                }
            }
        }
        total
    }
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => walk(dir, meta.dev()),
        Err(_) => 0,
    }
}

/// The kubernetes backend against warden-kubernetes' fake API server, whose pods are `linux`
/// views: what this suite can check of it here (no cluster runs on these machines).
fn kubernetes() -> Option<Arc<dyn Sandbox>> {
    static KUBERNETES: OnceLock<Option<Arc<dyn Sandbox>>> = OnceLock::new();
    KUBERNETES
        .get_or_init(|| {
            let runtime = sandbox(Backend::Linux)?;
            let dir = Box::leak(Box::new(
                tempfile::Builder::new()
                    .prefix("warden-sandbox-k8s-")
                    .tempdir()
                    .unwrap(),
            ));
            let fake = Box::leak(Box::new(
                warden_kubernetes::fake::FakeCluster::start(
                    runtime,
                    &dir.path().join("cluster"),
                    warden_kubernetes::fake::FakeOptions::default(),
                )
                .unwrap(),
            ));
            let kubeconfig = dir.path().join("kubeconfig");
            fake.write_kubeconfig(&kubeconfig).unwrap();
            let config = warden_kubernetes::KubernetesConfig {
                credentials: warden_kubernetes::Credentials::Kubeconfig {
                    path: kubeconfig,
                    context: None,
                },
                owner: "conformance".into(),
                ..warden_kubernetes::KubernetesConfig::default()
            };
            let backend = warden_kubernetes::KubernetesSandbox::connect(&config).unwrap();
            Some(Arc::new(backend) as Arc<dyn Sandbox>)
        })
        .clone()
}
