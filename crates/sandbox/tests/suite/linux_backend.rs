//! Tests specific to the `linux` backend: probe and select agree, failing closed with the
//! layer named, the scratch layout, escapes the seccomp filter and Landlock stop, the
//! hardened Warden process, and the whole suite re-run as uid 65534 (with and without
//! delegated cgroups).

use super::support::{
    bash, config, euid, expect_success, mode, reexec, root_for, text, Fixture, CANARY_KEY,
    DELEGATED, MODE_VAR, UNDELEGATED,
};
use std::path::PathBuf;
use std::time::Duration;
use warden_sandbox::{
    probe_with, select, Backend, CommandSpec, Layer, SandboxConfig, SandboxError,
};

#[test]
fn probe_agrees_with_select() {
    let config = config();
    let reports: Vec<_> = probe_with(&config)
        .into_iter()
        .filter(|r| r.backend == Backend::Linux)
        .collect();
    for report in &reports {
        eprintln!(
            "{:<18} {:<5} {}",
            report.layer.as_str(),
            report.available,
            report.detail
        );
    }
    let missing: Vec<_> = reports
        .iter()
        .filter(|r| !r.available && !config.disabled_layers.contains(&r.layer))
        .collect();
    match select(Backend::Linux, &config) {
        Ok(_) => assert!(
            missing.is_empty(),
            "select succeeded but probe reports {missing:?}"
        ),
        Err(error) => {
            assert!(
                !missing.is_empty(),
                "select failed ({error}) but probe reports every layer"
            );
            let layer = error.layer().expect("an unavailable layer");
            assert!(
                missing.iter().any(|r| r.layer == layer),
                "select names {layer}, probe does not report it: {missing:?}"
            );
        }
    }
}

#[test]
fn only_resource_layers_can_be_disabled() {
    let config = SandboxConfig {
        disabled_layers: vec![Layer::Landlock],
        ..SandboxConfig::default()
    };
    match select(Backend::Linux, &config) {
        Err(SandboxError::InvalidConfig(message)) => {
            assert!(message.contains("landlock"), "{message}")
        }
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
}

/// In the undelegated uid-65534 run: the default configuration fails closed, naming a cgroup
/// layer, and probe reports it.
#[test]
fn fails_closed_naming_the_layer_without_cgroup_delegation() {
    if mode().as_deref() != Some(UNDELEGATED) {
        eprintln!("runs in the uid 65534 child without delegated cgroups (as_nobody_without_cgroup_delegation)");
        return;
    }
    let error = match select(Backend::Linux, &SandboxConfig::default()) {
        Err(error) => error,
        Ok(_) => panic!("the linux backend came up without cgroups; it must fail closed"),
    };
    let message = error.to_string();
    let layer = error.layer().expect("an unavailable layer");
    assert!(
        matches!(
            layer,
            Layer::CgroupMemory | Layer::CgroupPids | Layer::CgroupCpu
        ),
        "{message}"
    );
    assert!(
        message.contains(layer.as_str()) && message.contains("linux"),
        "{message}"
    );
    let report = probe_with(&SandboxConfig::default())
        .into_iter()
        .find(|r| r.backend == Backend::Linux && r.layer == layer)
        .expect("a report for the layer");
    assert!(!report.available, "{report:?}");
}

#[test]
fn copy_up_lands_in_the_scratch_upper_dir() {
    let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
        return;
    };
    let fixture = Fixture::new();
    let before = fixture.snapshot_state();
    let spec = fixture.view(true);
    let view = sandbox.open(&spec).unwrap();
    expect_success(&bash(
        view.as_ref(),
        "echo appended >> README.md && echo new > src/new.rs",
    ));
    let upper = view
        .upper()
        .expect("a writable linux view has an upper layer")
        .to_path_buf();
    assert!(std::fs::read_to_string(upper.join("README.md"))
        .unwrap()
        .ends_with("appended\n"));
    assert_eq!(
        std::fs::read_to_string(upper.join("src/new.rs")).unwrap(),
        "new\n"
    );
    assert!(!upper.join("run.sh").exists(), "untouched files stay below");
    view.close().unwrap();
    assert_eq!(fixture.snapshot_state(), before);
    assert!(
        !spec.scratch_dir.exists(),
        "close deletes the scratch directory"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(spec.scratch_dir.to_str().unwrap()),
        "close leaves no mount behind"
    );
}

#[test]
fn escapes_are_refused() {
    let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
        return;
    };
    let fixture = Fixture::new();
    for writable in [false, true] {
        let view = sandbox.open(&fixture.view(writable)).unwrap();
        for script in [
            "unshare -U true",
            "unshare -r true",
            "unshare -n true",
            "mount -t tmpfs none /tmp",
            "umount /proc",
            "python3 -c 'import os; os.chroot(\"/tmp\")'",
            "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); assert l.syscall(425, 8, 0) >= 0'",
            "echo 1 > /proc/sys/kernel/ns_last_pid",
            "echo c > /proc/sysrq-trigger",
            "ls /sys/fs/cgroup",
            "cat /etc/shadow",
            "ls /etc/ssl/private",
        ] {
            let output = bash(view.as_ref(), script);
            assert!(!output.success(), "{script} succeeded (writable: {writable})");
        }
        let interfaces = expect_success(&bash(view.as_ref(), "tail -n +3 /proc/net/dev"));
        let names: Vec<&str> = interfaces
            .lines()
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(names, ["lo"], "{interfaces}");
        // lo is up: with IPv6 in the kernel, an up lo has ::1, listed without any socket.
        if std::path::Path::new("/proc/net/if_inet6").exists() {
            let addresses = expect_success(&bash(view.as_ref(), "cat /proc/net/if_inet6"));
            assert!(addresses.contains(" lo"), "lo is not up: {addresses:?}");
        }
        let status = expect_success(&bash(
            view.as_ref(),
            "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status",
        ));
        assert!(
            status.contains("NoNewPrivs:\t1") && status.contains("Seccomp:\t2"),
            "{status}"
        );
        // Read-only views keep no capability at all; writable ones only CAP_DAC_OVERRIDE, for
        // the snapshot's read-only modes (it covers only files owned by the mapped user).
        let expect = if writable {
            "0000000000000002"
        } else {
            "0000000000000000"
        };
        assert!(status.contains(&format!("CapEff:\t{expect}")), "{status}");
        assert!(status.contains(&format!("CapBnd:\t{expect}")), "{status}");
        view.close().unwrap();
    }
}

#[allow(unsafe_code)]
fn dumpable() -> bool {
    // SAFETY: PR_GET_DUMPABLE reads a flag of this process.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1 }
}

/// The Warden process, hardened, is not dumpable, its environment cannot be read through
/// /proc by other processes of its user, and sandboxes still work from it.
#[test]
fn hardened_warden_process() {
    const FLAG: &str = "WARDEN_SANDBOX_TEST_HARDENED";
    if std::env::var(FLAG).is_err() {
        reexec(
            "suite::linux_backend::hardened_warden_process",
            true,
            &[(FLAG, "1"), ("OPENAI_API_KEY", CANARY_KEY)],
            false,
            &[],
        );
        return;
    }
    // Before hardening: afterwards /proc/self belongs to root.
    let uid = euid();
    warden_sandbox::harden_current_process().unwrap();
    assert!(!dumpable());
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let environ = format!("/proc/{}/environ", std::process::id());
    if uid != 0 {
        // Another process of the same user cannot read the environment any more.
        #[allow(clippy::disallowed_methods)]
        let other = std::process::Command::new("cat")
            .arg(&environ)
            .output()
            .unwrap();
        assert!(!other.status.success(), "{}", text(&other.stdout));
    } else {
        eprintln!("note: as root, other root processes can read {environ} anyway; checked non-dumpable only ({})", status.lines().count());
    }
    if let Some(sandbox) = super::support::sandbox(Backend::Linux) {
        let fixture = Fixture::new();
        let view = sandbox.open(&fixture.view(true)).unwrap();
        let stdout = expect_success(&bash(
            view.as_ref(),
            "cat /proc/*/environ | tr '\\0' '\\n'; env",
        ));
        assert!(!stdout.contains(CANARY_KEY), "{stdout}");
        view.close().unwrap();
    }
}

fn run_as_nobody(mode_value: &str, wrapper: &[String]) {
    let log = reexec(
        "suite::linux",
        false,
        &[(MODE_VAR, mode_value)],
        true,
        wrapper,
    );
    let summary: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.starts_with("test ")
                || l.contains("test result")
                || l.contains("SKIP")
                || l.contains("note:")
        })
        .collect();
    eprintln!("uid 65534 ({mode_value}):\n{}", summary.join("\n"));
    assert!(
        !log.contains("SKIP linux"),
        "the linux backend was skipped as uid 65534:\n{log}"
    );
}

/// The whole linux suite as uid 65534 where cgroups are not delegated: the cgroup layers are
/// disabled explicitly (rlimits remain), and the default configuration fails closed.
#[test]
fn as_nobody_without_cgroup_delegation() {
    // The uid-65534 child runs the suite without it (mode set).
    if mode().is_some() || !root_for("switch to uid 65534") {
        return;
    }
    run_as_nobody(UNDELEGATED, &[]);
}

/// The whole linux suite as uid 65534 inside cgroups delegated to it: every layer on. Each
/// controller is delegated where the sandbox will find it: in its cgroup v1 hierarchy when it
/// has one (a directory under this process's cgroup there), else in cgroup v2 (one directory
/// under the hierarchy's root with the kernel's delegation: it and its `cgroup.procs`,
/// `cgroup.subtree_control` and `cgroup.threads` chowned, the controllers enabled for it). A
/// host where neither can be done skips, saying why — or fails under
/// `WARDEN_TEST_REQUIRE=root`, like a run that is not root.
#[test]
fn as_nobody_with_delegated_cgroups() {
    if mode().is_some() || !root_for("delegate cgroups and switch to uid 65534") {
        return;
    }
    let delegated = match Delegated::create() {
        Ok(delegated) => delegated,
        Err(reason) => {
            let required = std::env::var("WARDEN_TEST_REQUIRE")
                .unwrap_or_default()
                .split(',')
                .any(|name| name.trim() == "root");
            assert!(
                !required,
                "WARDEN_TEST_REQUIRE lists root, but no cgroup can be delegated here: {reason}"
            );
            eprintln!("skipped: cannot delegate cgroups: {reason}");
            return;
        }
    };
    let joins: Vec<String> = delegated
        .joined
        .iter()
        .map(|dir| format!("echo $$ > {}/cgroup.procs", dir.display()))
        .collect();
    let wrapper = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("{} && exec \"$@\"", joins.join(" && ")),
        "sh".to_string(),
    ];
    let result = std::panic::catch_unwind(|| run_as_nobody(DELEGATED, &wrapper));
    drop(delegated);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Cgroups delegated to uid 65534 for one child run; removed (and controllers this test
/// enabled at the cgroup v2 root disabled again) when dropped.
struct Delegated {
    /// The cgroups the child joins before it drops to uid 65534.
    joined: Vec<PathBuf>,
    /// The v2 root's `cgroup.subtree_control` and what this test enabled in it.
    enabled: Option<(PathBuf, Vec<&'static str>)>,
}

impl Delegated {
    fn create() -> Result<Delegated, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let mut delegated = Delegated {
            joined: Vec::new(),
            enabled: None,
        };
        let mut in_v2 = Vec::new();
        for controller in ["memory", "pids", "cpu"] {
            let mount = PathBuf::from("/sys/fs/cgroup").join(controller);
            let path = own.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then(|| path.to_owned())
            });
            let (Some(path), true) = (path, mount.join("cgroup.procs").exists()) else {
                in_v2.push(controller);
                continue;
            };
            let dir = mount
                .join(path.trim_start_matches('/'))
                .join(format!("warden-test-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            delegated.joined.push(dir.clone());
            for file in [dir.clone(), dir.join("cgroup.procs")] {
                std::os::unix::fs::chown(&file, Some(65534), Some(65534))
                    .map_err(|e| format!("chown {}: {e}", file.display()))?;
            }
        }
        if !in_v2.is_empty() {
            delegated.delegate_v2(&in_v2)?;
        }
        Ok(delegated)
    }

    /// One cgroup under the cgroup v2 root for `controllers` (the hierarchy's root is exempt
    /// from the "no internal processes" rule, so it can pass them down while it holds
    /// processes; the sandbox itself then moves into a leaf of the delegated cgroup).
    fn delegate_v2(&mut self, controllers: &[&'static str]) -> Result<(), String> {
        let mountinfo =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let root = mountinfo
            .lines()
            .find_map(|line| {
                let (left, right) = line.split_once(" - ")?;
                let fields: Vec<&str> = left.split(' ').collect();
                let point = fields.get(4)?;
                (right.starts_with("cgroup2 ") && fields.get(3) == Some(&"/"))
                    .then(|| PathBuf::from(point))
            })
            .ok_or_else(|| {
                format!("no cgroup v1 hierarchy and no cgroup2 mount for {controllers:?}")
            })?;
        let available =
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        let missing: Vec<&&str> = controllers
            .iter()
            .filter(|c| !available.split_whitespace().any(|have| have == **c))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{missing:?} neither in a cgroup v1 hierarchy nor available at the cgroup2 root {} \
                 ({available:?})",
                root.display()
            ));
        }
        let control = root.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&control).unwrap_or_default();
        let mut newly = Vec::new();
        for controller in controllers {
            if enabled.split_whitespace().any(|c| c == *controller) {
                continue;
            }
            std::fs::write(&control, format!("+{controller}"))
                .map_err(|e| format!("enabling {controller} in {}: {e}", control.display()))?;
            newly.push(*controller);
        }
        self.enabled = Some((control, newly));
        let dir = root.join(format!("warden-test-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        self.joined.push(dir.clone());
        for file in [
            "",
            "cgroup.procs",
            "cgroup.subtree_control",
            "cgroup.threads",
        ] {
            let file = dir.join(file);
            std::os::unix::fs::chown(&file, Some(65534), Some(65534))
                .map_err(|e| format!("chown {}: {e}", file.display()))?;
        }
        Ok(())
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for dir in &self.joined {
            let warden = dir.join("warden");
            if let Ok(runs) = std::fs::read_dir(&warden) {
                for run in runs
                    .flatten()
                    .filter(|r| r.file_type().is_ok_and(|t| t.is_dir()))
                {
                    let _ = std::fs::remove_dir(run.path());
                }
            }
            let _ = std::fs::remove_dir(&warden);
            // The sandbox's own leaf on cgroup v2 (empty once the child exited).
            let _ = std::fs::remove_dir(dir.join("warden-supervisor"));
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some((control, newly)) = &self.enabled {
            for controller in newly {
                let _ = std::fs::write(control, format!("-{controller}"));
            }
        }
    }
}

/// In the delegated uid-65534 run, every layer is available, cgroups included.
#[test]
fn delegated_cgroups_are_used() {
    if mode().as_deref() != Some(DELEGATED) {
        eprintln!(
            "runs in the uid 65534 child with delegated cgroups (as_nobody_with_delegated_cgroups)"
        );
        return;
    }
    for report in probe_with(&SandboxConfig::default())
        .into_iter()
        .filter(|r| r.backend == Backend::Linux)
    {
        assert!(report.available, "{report:?}");
    }
    let sandbox = select(Backend::Linux, &SandboxConfig::default()).unwrap();
    let fixture = Fixture::new();
    let view = sandbox.open(&fixture.view(false)).unwrap();
    let mut command = CommandSpec::bash("cat /proc/self/cgroup", Duration::from_secs(10));
    command.limits.pids = 16;
    let stdout = expect_success(&view.run(&command).unwrap());
    view.close().unwrap();
    // The cgroup namespace hides the host path; the command sits at its own root.
    assert!(stdout.lines().all(|l| l.ends_with(":/")), "{stdout}");
}

/// Regression: relay processes (copies of the Warden process) used to keep every inherited
/// descriptor open, among them the set-up pipe of a view being opened at that moment, so the
/// open waited for an unrelated long command to finish.
#[test]
fn open_is_not_held_up_by_a_running_command() {
    let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
        return;
    };
    let fixture = Fixture::new();
    let busy = sandbox.open(&fixture.view(false)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let slowest = std::thread::scope(|scope| {
        let busy = &busy;
        let stop = &stop;
        let commands: Vec<_> = (0..6u64)
            .map(|index| {
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(50 + 80 * index));
                    bash(busy.as_ref(), "sleep 3")
                })
            })
            .collect();
        let opener = scope.spawn(move || {
            let mut slowest = Duration::ZERO;
            let mut index = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut spec = fixture.view(false);
                spec.scratch_dir = fixture.scratch(&format!("open-{index}"));
                index += 1;
                let started = std::time::Instant::now();
                let view = sandbox.open(&spec).unwrap();
                slowest = slowest.max(started.elapsed());
                view.close().unwrap();
            }
            slowest
        });
        std::thread::sleep(Duration::from_millis(800));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let slowest = opener.join().unwrap();
        for command in commands {
            expect_success(&command.join().unwrap());
        }
        slowest
    });
    busy.close().unwrap();
    assert!(
        slowest < Duration::from_millis(1500),
        "an open took {slowest:?}"
    );
}

fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// If the Warden process dies mid-command, the sandboxed processes die with it.
#[test]
fn sandbox_dies_with_warden() {
    const FLAG: &str = "WARDEN_SANDBOX_TEST_DIE_WITH";
    if let Ok(needle) = std::env::var(FLAG) {
        let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
            return;
        };
        let base = PathBuf::from(std::env::var("WARDEN_SANDBOX_TEST_BASE").unwrap());
        let snapshot = base.join("snapshot");
        super::support::snapshot_at(&snapshot, &[("a", "a\n")]);
        let view = sandbox
            .open(&warden_sandbox::ViewSpec {
                lower: vec![("a".into(), snapshot)],
                writable: false,
                scratch_dir: base.join("scratch"),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            })
            .unwrap();
        bash(view.as_ref(), &format!("sleep {needle}"));
        return;
    }
    if super::support::sandbox(Backend::Linux).is_none() {
        return;
    }
    let needle = format!("1000.{}", std::process::id());
    // The killed child cannot clean up after itself: it works in a directory we remove.
    let fixture = Fixture::new();
    let base = fixture.dir.path().join("warden");
    std::fs::create_dir(&base).unwrap();
    // This test plays Warden in a child process and kills it.
    #[allow(clippy::disallowed_methods)]
    let mut warden = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "suite::linux_backend::sandbox_dies_with_warden",
            "--exact",
            "--nocapture",
        ])
        .env(FLAG, &needle)
        .env("WARDEN_SANDBOX_TEST_BASE", &base)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while processes_with(&needle).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the sandboxed sleep never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    warden.kill().unwrap();
    warden.wait().unwrap();
    let killed = std::time::Instant::now();
    while !processes_with(&needle).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the sandbox outlived warden"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Regression: an unprivileged Warden's `root()` went through `/proc/<pid>/root/work`, which
/// `realpath` resolves to the host's `/work` — a different, possibly existing directory. The
/// root must canonicalize to itself or not at all.
#[test]
fn root_never_canonicalizes_to_another_directory() {
    let Some(sandbox) = super::support::sandbox(Backend::Linux) else {
        return;
    };
    let fixture = Fixture::new();
    let other = fixture.dir.path().join("other");
    super::support::snapshot_at(&other, &[("README.md", "other\n")]);
    for (index, (multi, writable)) in [(false, false), (false, true), (true, false), (true, true)]
        .into_iter()
        .enumerate()
    {
        let mut spec = fixture.view(writable);
        spec.scratch_dir = fixture.scratch(&format!("canonical-{index}"));
        if multi {
            spec.lower = vec![
                ("a".into(), fixture.snapshot.clone()),
                ("b".into(), other.clone()),
            ];
        }
        let view = sandbox.open(&spec).unwrap();
        let readme = if multi { "a/README.md" } else { "README.md" };
        let through_root = std::fs::read_to_string(view.root().join(readme)).unwrap();
        assert_eq!(through_root, "# fixture\n");
        if let Ok(canonical) = std::fs::canonicalize(view.root()) {
            assert_eq!(
                std::fs::read_to_string(canonical.join(readme))
                    .ok()
                    .as_deref(),
                Some("# fixture\n"),
                "{} canonicalizes to {}, which is not the view",
                view.root().display(),
                canonical.display()
            );
        }
        view.close().unwrap();
    }
}

/// A view's mounts outlive a Warden killed with -9 (as root they are made in its own mount
/// namespace): the one scratch remover detaches whatever is mounted below the scratch directory
/// before deleting it, so a later run's clean-up leaves nothing mounted behind.
#[test]
fn removing_a_scratch_directory_detaches_the_mounts_left_in_it() {
    if mode().is_some() || !root_for("mount") {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let scratch = base.path().join("scratch").join("tsk_x-1");
    let disk = scratch.join("view").join("disk");
    let inner = disk.join("merged");
    std::fs::create_dir_all(&disk).unwrap();
    let mount = |target: &std::path::Path| {
        #[allow(clippy::disallowed_methods)] // a test stands in for a killed Warden's mounts
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(target)
            .status()
            .unwrap();
        assert!(status.success());
    };
    mount(&disk);
    std::fs::create_dir_all(&inner).unwrap();
    mount(&inner);
    std::fs::write(inner.join("file"), "x").unwrap();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|line| line.contains(scratch.to_str().unwrap()))
            .count()
    };
    assert_eq!(mounted(), 2);
    warden_sandbox::remove_scratch(&scratch).unwrap();
    assert_eq!(mounted(), 0);
    assert!(!scratch.exists());
}
