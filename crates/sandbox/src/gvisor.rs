//! The `gvisor` backend: each command runs in a fresh gVisor sandbox (`runsc run` on an OCI
//! bundle), so the command talks to gVisor's user-space kernel, never to the host's.
//!
//! The bundle mirrors the linux backend's view: a read-only root with `/usr` (and the usrmerge
//! links), the generated `/etc`, the view's `/tmp`, and the working root at `/work` — the
//! snapshot bound read-only, or for writable views the copy-on-write tree the linux backend's
//! host-side overlay provides (which needs a Warden that may mount, i.e. root; an unprivileged
//! Warden gets [`Layer::Overlayfs`] unavailable for writable gVisor views). `--network=none`
//! leaves only loopback (so a view asking for an egress relay is refused: nothing of Warden's
//! can listen in gVisor's netstack); an OCI seccomp profile (`--oci-seccomp`) refuses non-unix sockets,
//! ptrace, mounts, namespaces, bpf, keyrings, io_uring and the rest of the linux backend's list
//! (gVisor of this vintage ignores `errnoRet`, so they fail with `EPERM`). Memory is limited by
//! the sandbox's host cgroup (runsc does this when it runs as root; rootless runsc cannot, so
//! that layer is unavailable unless disabled, and `RLIMIT_AS` is the backstop); processes by
//! `RLIMIT_NPROC`, which the sentry enforces.
//!
//! Known defect of old runsc, detected by [`crate::probe_tools`] and named by
//! [`runsc_statx_defect`]: gVisor before release-20230227.0 ([`MIN_RUNSC_RELEASE`]; Debian
//! bookworm ships 0.0~20221219.0) fails `statx` with `EINVAL` when `AT_NO_AUTOMOUNT` is set,
//! which GNU `ls -l` and `stat` always set, so they fail with "Invalid argument" (a bare `ls`,
//! `find` and `du` do not use the flag and work). It is runsc's own check (a bare
//! `runsc do stat /` fails the same way, without this profile); upstream commit 7a0c4b5 drops the
//! flag. Nothing Warden configures can repair it: a seccomp rule can only refuse the call, not
//! drop the flag; this vintage ignores `errnoRet` (`EPERM` always), and even `ENOSYS` would only
//! send glibc to `newfstatat` with the same flag, which gVisor refuses too until
//! release-20231030.0.

use crate::cancel::{cancelled_output, Cancellation, Target};
use crate::output::Collector;
use crate::spec::{killed_output, validate_command, validate_view, view_mounts, ValidatedView};
use crate::sys::{self, OutputPipes, Pumped};
use crate::{
    Backend, CommandOutput, CommandSpec, KillSwitch, Layer, LayerReport, Sandbox, SandboxConfig,
    SandboxError, SandboxView, Stream, ViewSpec, WORKING_ROOT,
};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use crate::linux::{
    disk_dir, disk_layout, mount_disk_on_host, mount_on_host, HostMounts, SystemEntry, SystemLayout,
};

fn unavailable(layer: Layer, reason: impl Into<String>) -> SandboxError {
    SandboxError::Unavailable {
        backend: Backend::Gvisor,
        layer,
        reason: reason.into(),
    }
}

/// The first gVisor release whose `statx` accepts `AT_NO_AUTOMOUNT`, so that GNU `ls -l` and
/// `stat` work (Debian names it `0.0~20230227.0`).
pub const MIN_RUNSC_RELEASE: &str = "release-20230227.0";

/// [`MIN_RUNSC_RELEASE`] as the date in its name.
const MIN_RUNSC_DATE: u32 = 20230227;

/// The date a runsc version string names (`release-20230227.0`, `0.0~20221219.0`): its first
/// run of exactly eight digits.
fn release_date(version: &str) -> Option<u32> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .find(|digits| digits.len() == 8)
        .and_then(|digits| digits.parse().ok())
}

/// The version runsc reports (`runsc --version`'s first line, without `runsc version `).
fn runsc_version(runsc: &Path) -> Option<String> {
    // The gVisor runtime is an external program by nature; its environment is cleared.
    #[allow(clippy::disallowed_methods)]
    let output = std::process::Command::new(runsc)
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let first = stdout.lines().next()?.trim();
    Some(
        first
            .strip_prefix("runsc version ")
            .unwrap_or(first)
            .to_owned(),
    )
}

/// When the configured runsc predates [`MIN_RUNSC_RELEASE`]: what is installed, what fails in
/// it and what to install. `None` for a newer runsc, without runsc, or when its version names no
/// date.
pub fn runsc_statx_defect(config: &SandboxConfig) -> Option<String> {
    let runsc = find_runsc(config).ok()?;
    let version = runsc_version(&runsc)?;
    (release_date(&version)? < MIN_RUNSC_DATE).then(|| {
        format!(
            "runsc {version} ({}) predates {MIN_RUNSC_RELEASE}, the first gVisor release whose \
             statx accepts AT_NO_AUTOMOUNT, which GNU ls -l and stat pass: install runsc \
             {MIN_RUNSC_RELEASE} or newer",
            runsc.display()
        )
    })
}

/// System calls the OCI profile refuses (the linux backend's list, by name).
const DENIED: [&str; 49] = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "perf_event_open",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "syslog",
    "open_by_handle_at",
    "name_to_handle_at",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "iopl",
    "ioperm",
    "uselib",
    "modify_ldt",
];

/// A JSON string literal.
fn json(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_list<T>(items: impl IntoIterator<Item = T>, render: impl Fn(T) -> String) -> String {
    let rendered: Vec<String> = items.into_iter().map(render).collect();
    format!("[{}]", rendered.join(","))
}

/// The OCI seccomp profile.
fn seccomp_profile() -> String {
    let mut rules = vec![format!(
        "{{\"names\":{},\"action\":\"SCMP_ACT_ERRNO\"}}",
        json_list(DENIED, json)
    )];
    rules.push(format!(
        "{{\"names\":[\"socket\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{{\"index\":0,\"value\":{},\"op\":\"SCMP_CMP_NE\"}}]}}",
        libc::AF_UNIX
    ));
    for flag in [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ] {
        rules.push(format!(
            "{{\"names\":[\"clone\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{{\"index\":0,\"value\":{flag},\"valueTwo\":{flag},\"op\":\"SCMP_CMP_MASKED_EQ\"}}]}}"
        ));
    }
    format!(
        "{{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{}]}}",
        rules.join(",")
    )
}

fn find_runsc(config: &SandboxConfig) -> Result<PathBuf, SandboxError> {
    if let Some(path) = &config.runsc {
        return if path.is_file() {
            Ok(path.clone())
        } else {
            Err(unavailable(
                Layer::Runtime,
                format!("the configured runsc {} does not exist", path.display()),
            ))
        };
    }
    ["/usr/bin/runsc", "/usr/local/bin/runsc", "/usr/sbin/runsc"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .ok_or_else(|| {
            unavailable(
                Layer::Runtime,
                "runsc not found in /usr/bin, /usr/local/bin or /usr/sbin; install it \
                 (Debian: apt-get install runsc)",
            )
        })
}

/// The established `gvisor` backend.
pub(crate) struct GvisorSandbox {
    runsc: PathBuf,
    rootless: bool,
    memory_cgroup: bool,
    #[cfg(target_os = "linux")]
    layout: SystemLayout,
    profile: String,
    disk: crate::DiskQuota,
}

impl GvisorSandbox {
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn establish(_config: &SandboxConfig) -> Result<GvisorSandbox, SandboxError> {
        Err(unavailable(Layer::Kernel, "gVisor runs on Linux only"))
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn establish(config: &SandboxConfig) -> Result<GvisorSandbox, SandboxError> {
        let sandbox = GvisorSandbox::prepare(config)?;
        sandbox.trial()?;
        Ok(sandbox)
    }

    #[cfg(target_os = "linux")]
    fn prepare(config: &SandboxConfig) -> Result<GvisorSandbox, SandboxError> {
        let runsc = find_runsc(config)?;
        let rootless = crate::sys::euid() != 0;
        if rootless && !config.is_disabled(Layer::CgroupMemory) {
            return Err(unavailable(
                Layer::CgroupMemory,
                "rootless runsc cannot put the sandbox in a memory cgroup; run warden as root \
                 or disable the layer explicitly (RLIMIT_AS remains)",
            ));
        }
        let layout =
            SystemLayout::detect().map_err(|reason| unavailable(Layer::Filesystem, reason))?;
        Ok(GvisorSandbox {
            runsc,
            rootless,
            memory_cgroup: !rootless && !config.is_disabled(Layer::CgroupMemory),
            disk: config.disk,
            layout,
            profile: seccomp_profile(),
        })
    }

    /// Runs `true` in a throwaway read-only view.
    #[cfg(target_os = "linux")]
    fn trial(&self) -> Result<(), SandboxError> {
        let output = self.trial_command("grep -q '^Seccomp:.*2' /proc/self/status")?;
        if output.success() {
            Ok(())
        } else {
            Err(unavailable(
                if String::from_utf8_lossy(&output.stderr).contains("runsc") {
                    Layer::Runtime
                } else {
                    Layer::Seccomp
                },
                format!(
                    "a trial command failed (exit {:?}): {}",
                    output.exit_code,
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            ))
        }
    }

    #[cfg(target_os = "linux")]
    fn trial_command(&self, script: &str) -> Result<CommandOutput, SandboxError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir().join(format!(
            "warden-gvisor-trial-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // A directory by this name is a dead process's (its pid reused by this one) that was
        // killed during its own trial: stale, and in the way of an empty scratch directory.
        let _ = crate::spec::remove_scratch(&base);
        let snapshot = base.join("snapshot");
        std::fs::create_dir_all(&snapshot)
            .map_err(|e| SandboxError::io(format!("cannot create {}", snapshot.display()), e))?;
        let result = (|| {
            let view = self.open(&ViewSpec {
                lower: vec![("trial".into(), snapshot.clone())],
                writable: false,
                scratch_dir: base.join("scratch"),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            })?;
            let output = view.run(&CommandSpec::bash(script, Duration::from_secs(60)));
            view.close()?;
            output
        })();
        let _ = crate::spec::remove_scratch(&base);
        result
    }
}

impl Sandbox for GvisorSandbox {
    fn backend(&self) -> Backend {
        Backend::Gvisor
    }

    fn moves_mounts(&self) -> bool {
        true
    }

    #[cfg(not(target_os = "linux"))]
    fn open(&self, _view: &ViewSpec) -> Result<Box<dyn SandboxView>, SandboxError> {
        Err(unavailable(Layer::Kernel, "gVisor runs on Linux only"))
    }

    #[cfg(target_os = "linux")]
    fn open(&self, spec: &ViewSpec) -> Result<Box<dyn SandboxView>, SandboxError> {
        let validated = validate_view(spec)?;
        if spec.egress_proxy.is_some() {
            // `--network=none` leaves gVisor's netstack with loopback only, and nothing of
            // Warden's can listen there: refuse rather than give the view any other network.
            return Err(unavailable(
                Layer::NetNamespace,
                "the gvisor backend cannot relay to an egress proxy (its sandboxes run with \
                 --network=none)",
            ));
        }
        crate::spec::prepare_scratch(&spec.scratch_dir)?;
        match GvisorView::open(self, &validated, spec) {
            Ok(view) => Ok(Box::new(view)),
            Err(error) => {
                let _ = crate::spec::remove_scratch(&spec.scratch_dir);
                Err(error)
            }
        }
    }
}

#[cfg(target_os = "linux")]
struct GvisorView {
    runsc: PathBuf,
    rootless: bool,
    memory_cgroup: bool,
    scratch: PathBuf,
    root: PathBuf,
    upper: Option<PathBuf>,
    writable: bool,
    /// The OCI `root` and `mounts` entries, rendered once.
    root_and_mounts: String,
    profile: String,
    host_mounts: HostMounts,
    /// The `runsc` process groups of the commands running now, killed by
    /// [`SandboxView::cancel`] (the container is deleted after each command anyway).
    cancellation: Cancellation,
    closed: bool,
}

#[cfg(target_os = "linux")]
fn bind(destination: &str, source: &Path, writable: bool) -> String {
    format!(
        "{{\"destination\":{},\"type\":\"bind\",\"source\":{},\"options\":[\"rbind\",\"{}\",\"nosuid\",\"nodev\"]}}",
        json(destination),
        json(&source.to_string_lossy()),
        if writable { "rw" } else { "ro" }
    )
}

#[cfg(target_os = "linux")]
impl GvisorView {
    fn open(
        sandbox: &GvisorSandbox,
        validated: &ValidatedView,
        spec: &ViewSpec,
    ) -> Result<GvisorView, SandboxError> {
        let scratch = spec.scratch_dir.clone();
        let io_error = |what: &str, e| {
            SandboxError::io(format!("cannot prepare {what} in {}", scratch.display()), e)
        };
        let rootfs = scratch.join("rootfs");
        let multi = matches!(validated, ValidatedView::Multi(_));
        let seed = crate::spec::validate_seed(spec)?;
        for dir in ["rootfs", "state", "bundles"] {
            std::fs::create_dir(scratch.join(dir)).map_err(|e| io_error(dir, e))?;
        }
        crate::linux::write_etc(&scratch.join("etc"), &sandbox.layout)
            .map_err(|e| io_error("etc", e))?;
        // /dev is gVisor's own (an in-sandbox tmpfs with its device nodes); a read-only /dev
        // there would refuse writes to /dev/null as well.
        let mut mounts =
            vec!["{\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\"}".to_owned()];
        for dir in [
            "etc",
            "tmp",
            "proc",
            "dev",
            WORKING_ROOT.trim_start_matches('/'),
        ] {
            std::fs::create_dir_all(rootfs.join(dir)).map_err(|e| io_error(dir, e))?;
        }
        for (name, entry) in &sandbox.layout.entries {
            match entry {
                SystemEntry::Symlink(target) => {
                    std::os::unix::fs::symlink(target, rootfs.join(name))
                        .map_err(|e| io_error(name, e))?;
                }
                SystemEntry::Directory => {
                    std::fs::create_dir(rootfs.join(name)).map_err(|e| io_error(name, e))?;
                    mounts.push(bind(&format!("/{name}"), &Path::new("/").join(name), false));
                }
            }
        }
        mounts.push(bind("/etc", &scratch.join("etc"), false));
        for (relative, _) in &sandbox.layout.etc_binds {
            mounts.push(bind(
                &format!("/etc/{relative}"),
                &Path::new("/etc").join(relative),
                false,
            ));
        }

        // The writable space (/tmp and the upper layer): a tmpfs with the quota on the host
        // when Warden may mount (root); otherwise /tmp is a tmpfs of gVisor's own with the
        // same size (there is no writable view then, see below).
        let mut host_mounts = HostMounts::default();
        let single_read_only = !spec.writable && !multi;
        let disk = disk_dir(&scratch);
        let disk_on_host = mount_disk_on_host(
            Backend::Gvisor,
            &scratch,
            &disk_layout(validated, spec.writable),
            &sandbox.disk,
            &mut host_mounts,
        )?;
        if disk_on_host {
            mounts.push(bind("/tmp", &disk.join("tmp"), true));
            mounts.push(bind("/dev/shm", &disk.join("shm"), true));
        } else {
            mounts.push(format!(
                "{{\"destination\":\"/tmp\",\"type\":\"tmpfs\",\"source\":\"tmpfs\",\
                 \"options\":[\"nosuid\",\"nodev\",\"mode=1777\",\"size={}\"]}}",
                sandbox.disk.bytes
            ));
        }
        let on_host = disk_on_host
            && !single_read_only
            && mount_on_host(
                Backend::Gvisor,
                validated,
                spec.writable,
                seed.as_deref(),
                &scratch,
                &mut host_mounts,
            )?;
        if spec.writable && !on_host {
            return Err(unavailable(
                Layer::Overlayfs,
                "writable gVisor views need the copy-on-write layer mounted on the host, which \
                 takes a warden running as root",
            ));
        }
        let root = match validated {
            ValidatedView::Single(snapshot) if single_read_only => {
                mounts.push(bind(WORKING_ROOT, snapshot, false));
                snapshot.clone()
            }
            ValidatedView::Single(_) => {
                mounts.push(bind(WORKING_ROOT, &scratch.join("merged"), spec.writable));
                scratch.join("merged")
            }
            ValidatedView::Multi(repos) => {
                for (name, snapshot) in repos {
                    let destination = format!("{WORKING_ROOT}/{name}");
                    std::fs::create_dir(rootfs.join(destination.trim_start_matches('/')))
                        .map_err(|e| io_error(name, e))?;
                    if on_host {
                        mounts.push(bind(
                            &destination,
                            &scratch.join("merged").join(name),
                            spec.writable,
                        ));
                    } else {
                        mounts.push(bind(&destination, snapshot, false));
                    }
                }
                if on_host {
                    scratch.join("merged")
                } else {
                    // Host-side tools need one folder per name; links suffice read-only.
                    let links = scratch.join("links");
                    std::fs::create_dir(&links).map_err(|e| io_error("links", e))?;
                    for (name, snapshot) in repos {
                        std::os::unix::fs::symlink(snapshot, links.join(name))
                            .map_err(|e| io_error(name, e))?;
                    }
                    links
                }
            }
        };
        for mount in view_mounts(spec, validated)? {
            let top = mount.top();
            if sandbox.layout.entries.iter().any(|(name, _)| *name == top) {
                if mount.moved {
                    return Err(SandboxError::InvalidRequest(format!(
                        "mount {} of another directory is inside the system directory /{top}",
                        mount.target.display()
                    )));
                }
                if mount.writable {
                    return Err(SandboxError::InvalidRequest(format!(
                        "writable mount {} is inside the read-only system directory /{top}",
                        mount.target.display()
                    )));
                }
                continue;
            }
            // Mount points outside /tmp (a tmpfs of the sandbox's, where runsc makes them)
            // are made in the read-only root file system.
            if top != "tmp" {
                std::fs::create_dir_all(rootfs.join(mount.relative()))
                    .map_err(|e| io_error("a mount point", e))?;
            }
            mounts.push(bind(
                &mount.target.to_string_lossy(),
                &mount.source,
                mount.writable,
            ));
        }
        let root_and_mounts = format!(
            "\"root\":{{\"path\":{},\"readonly\":true}},\"mounts\":[{}]",
            json(&rootfs.to_string_lossy()),
            mounts.join(",")
        );
        Ok(GvisorView {
            runsc: sandbox.runsc.clone(),
            rootless: sandbox.rootless,
            memory_cgroup: sandbox.memory_cgroup,
            scratch,
            root,
            upper: spec.writable.then(|| disk.join("upper")),
            writable: spec.writable,
            root_and_mounts,
            profile: sandbox.profile.clone(),
            host_mounts,
            cancellation: Cancellation::default(),
            closed: false,
        })
    }

    fn config(&self, command: &CommandSpec, cwd: &str) -> String {
        let limits = command.limits;
        let mut rlimits = vec![
            ("RLIMIT_NPROC", u64::from(limits.pids)),
            ("RLIMIT_FSIZE", limits.file_size_bytes),
            ("RLIMIT_CORE", 0),
        ];
        if !self.memory_cgroup {
            rlimits.push(("RLIMIT_AS", limits.memory_bytes));
        }
        let capabilities = if self.writable {
            "[\"CAP_DAC_OVERRIDE\"]"
        } else {
            "[]"
        };
        let resources = if self.memory_cgroup {
            format!(
                ",\"resources\":{{\"memory\":{{\"limit\":{}}}{}}}",
                limits.memory_bytes,
                limits
                    .cpu_millis
                    .map(|millis| format!(
                        ",\"cpu\":{{\"quota\":{},\"period\":100000}}",
                        u64::from(millis.max(1)) * 100
                    ))
                    .unwrap_or_default()
            )
        } else {
            String::new()
        };
        format!(
            "{{\"ociVersion\":\"1.0.2\",\"process\":{{\"terminal\":false,\"user\":{{\"uid\":0,\"gid\":0}},\
             \"args\":{},\"env\":{},\"cwd\":{},\"noNewPrivileges\":true,\
             \"capabilities\":{{\"bounding\":{caps},\"effective\":{caps},\"permitted\":{caps},\"inheritable\":[],\"ambient\":[]}},\
             \"rlimits\":{}}},{},\"hostname\":\"sandbox\",\
             \"linux\":{{\"namespaces\":[{{\"type\":\"pid\"}},{{\"type\":\"network\"}},{{\"type\":\"ipc\"}},{{\"type\":\"uts\"}},{{\"type\":\"mount\"}}],\
             \"seccomp\":{}{resources}}}}}",
            json_list(&command.argv, |arg| json(arg)),
            json_list(&command.env, |(name, value)| json(&format!("{name}={value}"))),
            json(cwd),
            json_list(rlimits, |(kind, value)| format!(
                "{{\"type\":\"{kind}\",\"hard\":{value},\"soft\":{value}}}"
            )),
            self.root_and_mounts,
            self.profile,
            caps = capabilities,
        )
    }

    /// A `runsc` invocation with this view's global flags.
    fn runsc(&self, args: &[&str]) -> std::process::Command {
        // The gVisor runtime is an external program by nature; its environment is cleared.
        #[allow(clippy::disallowed_methods)]
        let mut command = std::process::Command::new(&self.runsc);
        command
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .arg("--root")
            .arg(self.scratch.join("state"))
            .args(["--network=none", "--oci-seccomp"]);
        if self.rootless {
            command.args(["--rootless", "--ignore-cgroups"]);
        }
        command.args(args);
        command
    }

    fn shutdown(&mut self) -> Result<(), SandboxError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.host_mounts.unmount();
        crate::spec::remove_scratch(&self.scratch)
    }
}

#[cfg(target_os = "linux")]
impl Drop for GvisorView {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[cfg(target_os = "linux")]
impl SandboxView for GvisorView {
    fn root(&self) -> &Path {
        &self.root
    }

    fn upper(&self) -> Option<&Path> {
        self.upper.as_deref()
    }

    fn run_streaming(
        &self,
        command: &CommandSpec,
        on_output: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<CommandOutput, SandboxError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let cwd = validate_command(command)?;
        let cwd = if cwd.is_empty() {
            WORKING_ROOT.to_owned()
        } else {
            format!("{WORKING_ROOT}/{cwd}")
        };
        let started = Instant::now();
        if self.cancellation.is_cancelled() {
            return Ok(cancelled_output(vec![], vec![], false, started.elapsed()));
        }
        let deadline = started + command.timeout;
        let id = format!(
            "warden-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let bundle = self.scratch.join("bundles").join(&id);
        std::fs::create_dir(&bundle)
            .and_then(|()| std::fs::write(bundle.join("config.json"), self.config(command, &cwd)))
            .map_err(|e| SandboxError::io(format!("cannot write {}", bundle.display()), e))?;
        let bundle_arg = bundle.to_string_lossy().into_owned();
        let stdin = match &command.stdin {
            Some(stdin) => Stdio::from(
                stdin
                    .0
                    .try_clone()
                    .map_err(|e| SandboxError::io("cannot duplicate the command's stdin", e))?,
            ),
            None => Stdio::null(),
        };
        let mut process = self.runsc(&["run", "--bundle", &bundle_arg, &id]);
        process
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = process.spawn().map_err(|error| {
            unavailable(
                Layer::Runtime,
                format!("cannot start {}: {error}", self.runsc.display()),
            )
        })?;
        let pid = child.id() as libc::pid_t;
        let mut collector = Collector::new(command.output_limit, on_output);
        let tracked = self.cancellation.track(Target::Group(pid));
        if let Some(switch) = &command.kill {
            // As a cancellation does: runsc's group dies, and the container with it
            // (`runsc delete --force` below).
            switch.arm(Box::new(move || {
                let _ = sys::kill_process_group(pid);
            }));
        }
        let supervised = (|| -> std::io::Result<(libc::c_int, bool)> {
            let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
                return Err(std::io::Error::other("missing output pipes"));
            };
            let mut pipes = OutputPipes::new(OwnedFd::from(out), OwnedFd::from(err))?;
            let pidfd = sys::pidfd_open(pid)?;
            let mut timed_out = false;
            if pipes.pump_until(&mut collector, &[pidfd.as_fd()], deadline)? == Pumped::Deadline {
                timed_out = true;
                // Kill every process of the container; runsc then exits.
                let _ = self.runsc(&["kill", "--all", &id, "KILL"]).output();
                let grace = Instant::now() + Duration::from_secs(5);
                if pipes.pump_until(&mut collector, &[pidfd.as_fd()], grace)? == Pumped::Deadline {
                    sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL)?;
                }
            }
            // Deregistered before runsc is reaped: its pid may be reused after.
            drop(tracked);
            if let Some(switch) = &command.kill {
                switch.disarm();
            }
            let status = sys::wait_for(pid)?;
            pipes.read_to_end(&mut collector, Instant::now() + Duration::from_millis(500))?;
            Ok((status, timed_out))
        })();
        // Whatever happened, the container must not outlive the call.
        let _ = self.runsc(&["delete", "--force", &id]).output();
        let _ = crate::spec::remove_scratch(&bundle);
        let (status, timed_out) = match supervised {
            Ok(done) => done,
            Err(error) => {
                if let Some(switch) = &command.kill {
                    switch.disarm();
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(SandboxError::io("cannot supervise runsc", error));
            }
        };
        let (exit_code, signal) = match sys::decode_status(status) {
            // runsc exits 128+N when the container's init died of signal N.
            (Some(code), None) if code > 128 && code <= 128 + 64 => (None, Some(code - 128)),
            other => other,
        };
        let (stdout, stderr, truncated) = collector.finish();
        if command.kill.as_ref().is_some_and(KillSwitch::fired) && !timed_out {
            return Ok(killed_output(stdout, stderr, truncated, started.elapsed()));
        }
        if self.cancellation.is_cancelled() && !timed_out {
            return Ok(cancelled_output(
                stdout,
                stderr,
                truncated,
                started.elapsed(),
            ));
        }
        // runsc resolves the program itself and reports a missing one as its own failure (128);
        // report it the way a shell would.
        let exit_code = match exit_code {
            Some(128) if String::from_utf8_lossy(&stderr).contains("error finding executable") => {
                Some(127)
            }
            other => other,
        };
        Ok(CommandOutput {
            exit_code: if timed_out { None } else { exit_code },
            signal: if timed_out {
                Some(libc::SIGKILL)
            } else {
                signal
            },
            stdout,
            stderr,
            truncated,
            timed_out,
            duration: started.elapsed(),
            egress_connections: 0,
        })
    }

    fn cancel(&self) {
        self.cancellation.cancel();
    }

    fn close(mut self: Box<Self>) -> Result<(), SandboxError> {
        self.shutdown()
    }
}

/// Probe reports for the `gvisor` backend.
pub(crate) fn probe(config: &SandboxConfig) -> Vec<LayerReport> {
    let report = |layer: Layer, available: bool, detail: String| LayerReport {
        backend: Backend::Gvisor,
        layer,
        available,
        detail,
    };
    let runsc = match find_runsc(config) {
        Ok(path) => path,
        Err(error) => return vec![report(Layer::Runtime, false, error.to_string())],
    };
    #[cfg(not(target_os = "linux"))]
    {
        let _ = runsc;
        vec![report(
            Layer::Kernel,
            false,
            "gVisor runs on Linux only".into(),
        )]
    }
    #[cfg(target_os = "linux")]
    {
        let rootless = crate::sys::euid() != 0;
        let mut reports = Vec::new();
        let mut trial_config = config.clone();
        trial_config.disabled_layers.push(Layer::CgroupMemory);
        let sandbox = match GvisorSandbox::prepare(&trial_config) {
            Ok(sandbox) => sandbox,
            Err(error) => {
                return vec![report(
                    error.layer().unwrap_or(Layer::Runtime),
                    false,
                    error.to_string(),
                )]
            }
        };
        match sandbox.trial() {
            Ok(()) => {
                // Whether the everyday file tools work is probe_tools's report; the version is
                // named here too, for comparison with MIN_RUNSC_RELEASE.
                reports.push(report(
                    Layer::Runtime,
                    true,
                    format!(
                        "{} (version {}) runs sandboxes",
                        runsc.display(),
                        runsc_version(&runsc).as_deref().unwrap_or("unknown")
                    ),
                ));
                reports.push(report(
                    Layer::Seccomp,
                    true,
                    "OCI profile applied inside the sandbox (--oci-seccomp)".into(),
                ));
                reports.push(report(
                    Layer::NetNamespace,
                    true,
                    "--network=none: loopback only, and non-unix sockets refused".into(),
                ));
                reports.push(report(
                    Layer::CgroupPids,
                    true,
                    "processes limited by RLIMIT_NPROC, enforced by the sentry".into(),
                ));
            }
            Err(error) => reports.push(report(
                error.layer().unwrap_or(Layer::Runtime),
                false,
                error.to_string(),
            )),
        }
        reports.push(if config.is_disabled(Layer::CgroupMemory) {
            report(
                Layer::CgroupMemory,
                false,
                "disabled by configuration (RLIMIT_AS only)".into(),
            )
        } else if rootless {
            report(
                Layer::CgroupMemory,
                false,
                "rootless runsc cannot use cgroups; run warden as root or disable the layer".into(),
            )
        } else {
            report(
                Layer::CgroupMemory,
                true,
                "runsc puts each sandbox in a memory cgroup".into(),
            )
        });
        reports.push(report(
            Layer::Overlayfs,
            !rootless,
            if rootless {
                "writable views need the copy-on-write layer mounted on the host (warden as root)"
                    .into()
            } else {
                "copy-on-write layer mounted on the host, bound into the sandbox".into()
            },
        ));
        reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_dates_are_read_from_upstream_and_debian_versions() {
        assert_eq!(release_date("release-20230227.0"), Some(20230227));
        assert_eq!(release_date("0.0~20221219.0"), Some(20221219));
        assert_eq!(
            release_date("release-20231030.0-12-gabcdef0"),
            Some(20231030)
        );
        assert_eq!(release_date("VERSION_MISSING"), None);
        assert_eq!(release_date("1.2.3"), None);
        assert!(release_date(MIN_RUNSC_RELEASE) == Some(MIN_RUNSC_DATE));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
