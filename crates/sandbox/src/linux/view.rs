//! One open view of the `linux` backend: creating its holder (the namespaces and the sandbox
//! root, built once), running commands in it (relay, sandboxed process, output, deadline), and
//! tearing it down.

use super::child::{self, code, EgressPlan, Filter, HolderPlan, RunPlan, UNSHARE_ORDER};
use super::plan::{self, Steps, SystemEntry, DEVICES, SANDBOX_ID};
use super::{
    cgroup, describe_errno, disk_dir, disk_layout, landlock, mount_disk_on_host, mount_on_host,
    unavailable, HostMounts, LinuxSandbox,
};
use crate::cancel::{cancelled_output, Cancellation, Target};
use crate::output::Collector;
use crate::spec::{killed_output, validate_command, view_mounts, ValidatedView};
use crate::sys::{self, OutputPipes, Pumped};
use crate::{
    Backend, CommandOutput, CommandSpec, KillSwitch, Layer, SandboxError, SandboxView, Stream,
    ViewSpec, WORKING_ROOT,
};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where, inside the holder's root, the host finds the working tree of a view it cannot mount
/// itself (see `open`).
const HOST_ENTRY: &str = "/.warden-host";

/// One open view.
pub(super) struct LinuxView {
    root: PathBuf,
    upper: Option<PathBuf>,
    scratch: PathBuf,
    writable: bool,
    holder_pid: libc::pid_t,
    holder: Option<OwnedFd>,
    /// Closing this ends the holder (`cat` reads end of file).
    lifeline: Option<OwnedFd>,
    userns: OwnedFd,
    mntns: OwnedFd,
    ruleset: landlock::Ruleset,
    host_mounts: HostMounts,
    cgroups: Vec<cgroup::Hierarchy>,
    memory_cgroup: bool,
    filter: Vec<libc::sock_filter>,
    last_cap: libc::c_int,
    /// Where each command's egress relay sends its connections (`ViewSpec::egress_proxy`).
    egress_proxy: Option<String>,
    /// The relays of the commands running now, killed by [`SandboxView::cancel`].
    cancellation: Cancellation,
    closed: bool,
}

/// Blocks all signals on this thread while forking, so a signal handler of the Warden process
/// never runs in the child before it has reset them; restores the mask on drop.
struct SignalsBlocked {
    previous: libc::sigset_t,
}

impl SignalsBlocked {
    fn new() -> SignalsBlocked {
        // SAFETY: both sets are valid; pthread_sigmask only changes this thread's mask.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
            SignalsBlocked { previous }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// Forks (with namespace `flags`) and runs `child` in the new process, which must never return
/// and may only make async-signal-safe calls.
fn fork_with(flags: libc::c_int, child: impl FnOnce()) -> io::Result<libc::pid_t> {
    let blocked = SignalsBlocked::new();
    // SAFETY: a fork-like clone (no CLONE_VM, no new stack). In the child only `child` runs; it
    // uses no allocator, no locks and ends in execve or _exit.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid == 0 {
        child();
        // SAFETY: `child` never returns; should it, leave without touching the parent's state.
        unsafe { libc::_exit(127) }
    }
    drop(blocked);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid as libc::pid_t)
}

/// Reads the `(step, errno)` a failed child reported, if any (non-blocking).
fn read_failure(error_pipe: &OwnedFd) -> io::Result<Option<(u32, i32)>> {
    sys::set_nonblocking(error_pipe.as_fd())?;
    let mut bytes = Vec::new();
    sys::read_available(error_pipe.as_fd(), &mut |data| {
        bytes.extend_from_slice(data)
    })?;
    if bytes.len() < 8 {
        return Ok(None);
    }
    let step = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let errno = i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    Ok(Some((step, errno)))
}

/// Names the layer and step a fixed child step code stands for.
fn describe_fixed(step: u32) -> (Layer, String) {
    let (layer, what) = match step {
        code::SETGROUPS => (Layer::UserNamespace, "deny setgroups"),
        code::UID_MAP => (Layer::UserNamespace, "write the uid map"),
        code::GID_MAP => (Layer::UserNamespace, "write the gid map"),
        code::DUMPABLE => (Layer::UserNamespace, "toggle dumpable around the id maps"),
        code::SETNS_USER => (Layer::UserNamespace, "join the view's user namespace"),
        code::SETNS_MNT => (Layer::MountNamespace, "join the view's mount namespace"),
        code::LIFELINE
        | code::FORK
        | code::STDIO
        | code::CLOSE_FDS
        | code::PDEATHSIG
        | code::SETSID => (Layer::Process, "set up the sandboxed process"),
        code::LOOPBACK => (Layer::NetNamespace, "bring up lo"),
        code::HOSTNAME => (Layer::UtsNamespace, "set the hostname"),
        code::RLIMIT => (Layer::Rlimits, "set resource limits"),
        code::CAPABILITIES => (Layer::Capabilities, "drop capabilities"),
        code::NO_NEW_PRIVS => (Layer::NoNewPrivs, "set no_new_privs"),
        code::LANDLOCK => (Layer::Landlock, "apply the landlock ruleset"),
        code::SECCOMP => (Layer::Seccomp, "install the seccomp filter"),
        code::EXEC => (Layer::Process, "execute"),
        code::EGRESS => (Layer::NetNamespace, "open the egress relay's listener"),
        code::CWD => (Layer::Filesystem, "enter the working directory"),
        step if (code::CGROUP_JOIN..code::CGROUP_JOIN + 8).contains(&step) => {
            (Layer::CgroupMemory, "join the command's cgroup")
        }
        step if (code::UNSHARE..code::UNSHARE + UNSHARE_ORDER.len() as u32).contains(&step) => {
            let layer = match UNSHARE_ORDER[(step - code::UNSHARE) as usize] {
                libc::CLONE_NEWNS => Layer::MountNamespace,
                libc::CLONE_NEWPID => Layer::PidNamespace,
                libc::CLONE_NEWNET => Layer::NetNamespace,
                libc::CLONE_NEWIPC => Layer::IpcNamespace,
                libc::CLONE_NEWUTS => Layer::UtsNamespace,
                _ => Layer::CgroupNamespace,
            };
            (layer, "create the command's namespaces")
        }
        _ => (Layer::Process, "set up the sandbox"),
    };
    (layer, what.to_owned())
}

impl LinuxView {
    pub(super) fn open(
        sandbox: &LinuxSandbox,
        validated: &ValidatedView,
        spec: &ViewSpec,
    ) -> Result<LinuxView, SandboxError> {
        let scratch = spec.scratch_dir.clone();
        let io_error = |what: &str, e| {
            SandboxError::io(format!("cannot prepare {what} in {}", scratch.display()), e)
        };
        let root_dir = scratch.join("root");
        let disk = disk_dir(&scratch);
        for dir in ["root", "disk"] {
            std::fs::create_dir(scratch.join(dir)).map_err(|e| io_error(dir, e))?;
        }
        plan::write_etc(&scratch.join("etc"), &sandbox.layout).map_err(|e| io_error("etc", e))?;
        let multi = matches!(validated, ValidatedView::Multi(_));
        let seed = crate::spec::validate_seed(spec)?;
        // The writable space: /tmp and /dev/shm (writable by the sandbox user — the Warden
        // user, mapped — and sticky), and the copy-on-write layer's directories.
        let layout = disk_layout(validated, spec.writable);

        // The writable space and the working tree: on the host when we may mount there, else in
        // the holder.
        let mut host_mounts = HostMounts {
            mounted: Vec::new(),
        };
        let single_read_only = !spec.writable && !multi;
        let on_host = !single_read_only
            && mount_disk_on_host(
                Backend::Linux,
                &scratch,
                &layout,
                &sandbox.disk,
                &mut host_mounts,
            )?;
        let on_host = on_host
            && match mount_on_host(
                Backend::Linux,
                validated,
                spec.writable,
                seed.as_deref(),
                &scratch,
                &mut host_mounts,
            ) {
                Ok(true) => true,
                Ok(false) => {
                    host_mounts.unmount();
                    false
                }
                Err(error) => {
                    host_mounts.unmount();
                    return Err(error);
                }
            };

        let mut steps = Steps::default();
        steps.mount(
            Layer::MountNamespace,
            "make all mounts private".into(),
            None,
            Path::new("/"),
            None,
            libc::MS_REC | libc::MS_PRIVATE,
            None,
            false,
        );
        if !on_host {
            steps.mount(
                Layer::Filesystem,
                format!(
                    "mount the view's writable space (tmpfs of {} bytes, {} inodes)",
                    sandbox.disk.bytes, sandbox.disk.inodes
                ),
                Some(Path::new("tmpfs")),
                &disk,
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&sandbox.disk.tmpfs_options("0755", layout.len() as u64 + 1)),
                false,
            );
            for (relative, mode) in &layout {
                steps.mkdir_mode(&disk.join(relative), *mode);
            }
        }
        steps.mount(
            Layer::Filesystem,
            "mount the sandbox root tmpfs".into(),
            Some(Path::new("tmpfs")),
            &root_dir,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=0755,size=1m,nr_inodes=4096"),
            false,
        );
        for (name, entry) in &sandbox.layout.entries {
            let target = root_dir.join(name);
            match entry {
                SystemEntry::Symlink(link) => steps.symlink(link, &target),
                SystemEntry::Directory => {
                    steps.mkdir(&target);
                    steps.bind(&Path::new("/").join(name), &target, false, false);
                }
            }
        }
        let etc = root_dir.join("etc");
        steps.mkdir(&etc);
        steps.bind(&scratch.join("etc"), &etc, false, false);
        for (relative, _) in &sandbox.layout.etc_binds {
            steps.bind(
                &Path::new("/etc").join(relative),
                &etc.join(relative),
                false,
                false,
            );
        }
        let dev = root_dir.join("dev");
        steps.mkdir(&dev);
        steps.mount(
            Layer::Filesystem,
            "mount the /dev tmpfs".into(),
            Some(Path::new("tmpfs")),
            &dev,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some("mode=0755,size=64k,nr_inodes=64"),
            false,
        );
        for device in DEVICES {
            let target = dev.join(device);
            steps.touch(&target);
            steps.mount(
                Layer::Filesystem,
                format!("bind /dev/{device}"),
                Some(&Path::new("/dev").join(device)),
                &target,
                None,
                libc::MS_BIND,
                None,
                false,
            );
        }
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            steps.symlink(Path::new(target), &dev.join(name));
        }
        steps.mkdir(&dev.join("shm"));
        steps.bind(&disk.join("shm"), &dev.join("shm"), true, false);
        steps.remount(Path::new("/dev"), &dev, false);
        let tmp = root_dir.join("tmp");
        steps.mkdir(&tmp);
        steps.bind(&disk.join("tmp"), &tmp, true, false);
        mount_host_directories(
            &mut steps,
            sandbox,
            &root_dir,
            &view_mounts(spec, validated)?,
        )?;

        let work = root_dir.join(WORKING_ROOT.trim_start_matches('/'));
        steps.mkdir(&work);
        if single_read_only {
            if let ValidatedView::Single(snapshot) = validated {
                steps.bind(snapshot, &work, false, false);
            }
        } else if on_host {
            steps.mount(
                Layer::Filesystem,
                "bind the working tree".into(),
                Some(&scratch.join("merged")),
                &work,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
                false,
            );
            if multi {
                // The folder holding the repositories: nobody adds to it.
                steps.remount(&scratch, &work, false);
            }
        } else {
            let layers: Vec<(PathBuf, &Path, PathBuf, PathBuf)> = match validated {
                ValidatedView::Single(snapshot) => {
                    vec![(
                        work.clone(),
                        snapshot.as_path(),
                        disk.join("upper"),
                        disk.join("work"),
                    )]
                }
                ValidatedView::Multi(repos) => repos
                    .iter()
                    .map(|(name, snapshot)| {
                        (
                            work.join(name),
                            snapshot.as_path(),
                            disk.join("upper").join(name),
                            disk.join("work").join(name),
                        )
                    })
                    .collect(),
            };
            for (target, snapshot, upper, workdir) in &layers {
                if multi {
                    steps.mkdir(target);
                }
                if spec.writable {
                    steps.mount(
                        Layer::Overlayfs,
                        format!("mount the copy-on-write layer at {}", target.display()),
                        Some(Path::new("overlay")),
                        target,
                        Some("overlay"),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        Some(&plan::overlay_options(
                            snapshot,
                            seed.as_deref(),
                            upper,
                            workdir,
                            true,
                        )),
                        false,
                    );
                } else {
                    steps.bind(snapshot, target, false, false);
                }
            }
        }
        // Without host mounts, the host reaches the tree through /proc/<holder>/root. Give it a
        // path there that cannot resolve to anything on the host: `realpath` turns the magic
        // link into `/`, and `/work` of the *host* (it exists on some machines) must never be
        // mistaken for the view.
        let mut upper_entry = None;
        let host_entry = if !single_read_only && !on_host {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let unique = format!(
                "{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let entry = Path::new(HOST_ENTRY).join(unique);
            steps.mkdir(&root_dir.join(HOST_ENTRY.trim_start_matches('/')));
            let target = root_dir.join(entry.strip_prefix("/").unwrap_or(&entry));
            steps.mkdir(&target);
            steps.mount(
                Layer::Filesystem,
                "bind the working tree for the host".into(),
                Some(&work),
                &target,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
                false,
            );
            if spec.writable {
                // What the view changed, read-only, for building the candidate tree.
                let entry = entry.with_extension("upper");
                let target = root_dir.join(entry.strip_prefix("/").unwrap_or(&entry));
                steps.mkdir(&target);
                steps.bind(&disk.join("upper"), &target, false, false);
                upper_entry = Some(entry);
            }
            Some(entry)
        } else {
            None
        };
        let proc_dir = root_dir.join("proc");
        steps.mkdir(&proc_dir);
        steps.mount(
            Layer::PidNamespace,
            "mount /proc of the view's pid namespace".into(),
            Some(Path::new("proc")),
            &proc_dir,
            Some("proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
            false,
        );
        steps.mount(
            Layer::Filesystem,
            "make the sandbox root read-only".into(),
            None,
            &root_dir,
            None,
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            None,
            false,
        );
        steps.pivot(&root_dir);

        let mut view = LinuxView::spawn_holder(
            sandbox,
            &steps,
            host_mounts,
            spec,
            host_entry,
            single_read_only,
            validated,
        )?;
        if spec.writable {
            view.upper = Some(match upper_entry {
                Some(entry) => PathBuf::from(format!("/proc/{}/root", view.holder_pid))
                    .join(entry.strip_prefix("/").unwrap_or(&entry)),
                None => disk.join("upper"),
            });
        }
        Ok(view)
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn_holder(
        sandbox: &LinuxSandbox,
        steps: &Steps,
        mut host_mounts: HostMounts,
        spec: &ViewSpec,
        host_entry: Option<PathBuf>,
        single_read_only: bool,
        validated: &ValidatedView,
    ) -> Result<LinuxView, SandboxError> {
        let scratch = spec.scratch_dir.clone();
        let uid_map = format!("{SANDBOX_ID} {} 1\n", sandbox.uid);
        let gid_map = format!("{SANDBOX_ID} {} 1\n", sandbox.gid);
        let program = plan::cstring(&sandbox.layout.holder_program);
        let argv = [program.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null()];
        let dev_null = c"/dev/null".to_owned();
        let pipes = (|| Ok::<_, io::Error>((sys::pipe()?, sys::pipe()?)))();
        let ((lifeline_read, lifeline_write), (error_read, error_write)) = match pipes {
            Ok(pipes) => pipes,
            Err(error) => {
                host_mounts.unmount();
                return Err(SandboxError::io("cannot create pipes", error));
            }
        };
        let mut keep_fds = vec![lifeline_read.as_raw_fd(), error_write.as_raw_fd()];
        keep_fds.sort_unstable();
        let holder_plan = HolderPlan {
            keep_fds: &keep_fds,
            setgroups: b"deny",
            uid_map: uid_map.as_bytes(),
            gid_map: gid_map.as_bytes(),
            steps: &steps.steps,
            lifeline: lifeline_read.as_raw_fd(),
            error_fd: error_write.as_raw_fd(),
            dev_null: &dev_null,
            program: &program,
            argv: &argv,
            envp: &envp,
            filter: Filter {
                instructions: &sandbox.filter,
            },
        };
        let spawned = fork_with(
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID,
            || child::holder_main(&holder_plan),
        );
        drop(lifeline_read);
        drop(error_write);
        let pid = match spawned {
            Ok(pid) => pid,
            Err(error) => {
                host_mounts.unmount();
                let layer = match error.raw_os_error() {
                    Some(libc::EPERM) | Some(libc::ENOSPC) | Some(libc::EUSERS) => {
                        Layer::UserNamespace
                    }
                    _ => Layer::Process,
                };
                return Err(unavailable(
                    layer,
                    format!("cannot create the view's user, mount and pid namespaces: {error}"),
                ));
            }
        };
        let holder = sys::pidfd_open(pid);
        // Blocks until the holder has exec'd `cat` (end of file) or reported a failure.
        let mut report = Vec::new();
        let wait = (|| {
            loop {
                let mut buffer = [0u8; 64];
                // SAFETY: reading into a local buffer from our pipe.
                let n = unsafe {
                    libc::read(
                        error_read.as_raw_fd(),
                        buffer.as_mut_ptr().cast(),
                        buffer.len(),
                    )
                };
                if n == 0 {
                    return Ok(());
                }
                if n < 0 {
                    let error = io::Error::last_os_error();
                    if error.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(error);
                }
                report.extend_from_slice(&buffer[..n as usize]);
            }
        })();
        let failure = if report.len() >= 8 {
            let step = u32::from_ne_bytes([report[0], report[1], report[2], report[3]]);
            let errno = i32::from_ne_bytes([report[4], report[5], report[6], report[7]]);
            Some((step, errno))
        } else {
            None
        };
        let mut view = LinuxView {
            root: PathBuf::new(),
            upper: None,
            scratch: scratch.clone(),
            writable: spec.writable,
            holder_pid: pid,
            holder: holder.ok(),
            lifeline: Some(lifeline_write),
            // Placeholders until the namespaces are opened below.
            userns: error_read
                .try_clone()
                .map_err(|e| SandboxError::io("dup", e))?,
            mntns: error_read,
            ruleset: landlock::Ruleset::new(sandbox.landlock_abi).map_err(|error| {
                unavailable(Layer::Landlock, format!("cannot create a ruleset: {error}"))
            })?,
            host_mounts,
            cgroups: sandbox.cgroups.clone(),
            memory_cgroup: sandbox.memory_cgroup,
            filter: if spec.egress_proxy.is_some() {
                sandbox.egress_filter.clone()
            } else {
                sandbox.filter.clone()
            },
            last_cap: sandbox.last_cap,
            egress_proxy: spec.egress_proxy.clone(),
            cancellation: Cancellation::default(),
            closed: false,
        };
        if let Err(error) = wait {
            let _ = view.shutdown();
            return Err(SandboxError::io("cannot wait for the view holder", error));
        }
        if let Some((step, errno)) = failure {
            let (layer, what) = match steps.described.get(step as usize) {
                Some((layer, what)) => (*layer, what.clone()),
                None => describe_fixed(step),
            };
            let _ = view.shutdown();
            return Err(unavailable(
                layer,
                format!("{what}: {}", describe_errno(errno)),
            ));
        }
        let proc_root = PathBuf::from(format!("/proc/{pid}/root"));
        let open_ns =
            |name: &str| std::fs::File::open(format!("/proc/{pid}/ns/{name}")).map(OwnedFd::from);
        match (open_ns("user"), open_ns("mnt")) {
            (Ok(user), Ok(mnt)) => {
                view.userns = user;
                view.mntns = mnt;
            }
            (Err(error), _) | (_, Err(error)) => {
                let _ = view.shutdown();
                return Err(unavailable(
                    Layer::UserNamespace,
                    format!("cannot open the view holder's namespaces: {error}"),
                ));
            }
        }
        let work_inside = proc_root.join(WORKING_ROOT.trim_start_matches('/'));
        let mut rules: Vec<(PathBuf, landlock::Access)> = vec![
            (proc_root.clone(), landlock::Access::ReadExecute),
            (proc_root.join("tmp"), landlock::Access::Write),
            (proc_root.join("dev/shm"), landlock::Access::Write),
        ];
        for device in DEVICES {
            rules.push((Path::new("/dev").join(device), landlock::Access::Device));
        }
        for mount in spec.mounts.iter().filter(|mount| mount.writable) {
            let relative = mount.path.strip_prefix("/").unwrap_or(&mount.path);
            rules.push((proc_root.join(relative), landlock::Access::Write));
        }
        if spec.writable {
            match validated {
                ValidatedView::Single(_) => {
                    rules.push((work_inside.clone(), landlock::Access::Write))
                }
                ValidatedView::Multi(repos) => {
                    for (name, _) in repos {
                        rules.push((work_inside.join(name), landlock::Access::Write));
                    }
                }
            }
        }
        for (path, access) in rules {
            if let Err(error) = view.ruleset.allow(&path, access) {
                let _ = view.shutdown();
                return Err(unavailable(
                    Layer::Landlock,
                    format!("cannot add a rule: {error}"),
                ));
            }
        }
        if spec.egress_proxy.is_some() {
            if let Err(error) = view.ruleset.allow_connect(crate::egress::PORT) {
                let _ = view.shutdown();
                return Err(unavailable(
                    Layer::Landlock,
                    format!("cannot allow connecting to the egress relay: {error}"),
                ));
            }
        }
        view.root = match (validated, host_entry) {
            (ValidatedView::Single(snapshot), _) if single_read_only => snapshot.clone(),
            (_, Some(entry)) => proc_root.join(entry.strip_prefix("/").unwrap_or(&entry)),
            (_, None) => scratch.join("merged"),
        };
        Ok(view)
    }

    /// Stops the holder, undoes host mounts, deletes the scratch directory.
    fn shutdown(&mut self) -> Result<(), SandboxError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.lifeline = None;
        match &self.holder {
            Some(pidfd) => {
                let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
            }
            None => {
                // SAFETY: the holder is our unreaped child, so its pid cannot have been reused.
                unsafe {
                    libc::kill(self.holder_pid, libc::SIGKILL);
                }
            }
        }
        let _ = sys::wait_for(self.holder_pid);
        self.holder = None;
        self.host_mounts.unmount();
        crate::spec::remove_scratch(&self.scratch)
    }
}

impl Drop for LinuxView {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Binds the view's host directories ([`crate::Mount`]) at their paths under the sandbox root,
/// creating the mount points (parents first) in the root tmpfs or the view's `/tmp`. One inside
/// a system directory the root already shows is visible as it is.
fn mount_host_directories(
    steps: &mut Steps,
    sandbox: &LinuxSandbox,
    root_dir: &Path,
    mounts: &[crate::spec::ValidatedMount],
) -> Result<(), SandboxError> {
    let mut made: std::collections::HashSet<PathBuf> = [PathBuf::from("tmp")].into();
    for mount in mounts {
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
        let mut dir = PathBuf::new();
        for component in mount.relative().components() {
            dir.push(component);
            if made.insert(dir.clone()) {
                steps.mkdir(&root_dir.join(&dir));
            }
        }
        steps.bind(
            &mount.source,
            &root_dir.join(mount.relative()),
            mount.writable,
            false,
        );
    }
    Ok(())
}

/// The argv entries a program name may resolve to, searched like `execvp` but in the sandbox's
/// `PATH` (from the command's environment, or a default).
fn exec_candidates(command: &CommandSpec) -> Vec<CString> {
    let program = &command.argv[0];
    if program.contains('/') {
        return vec![CString::new(program.as_bytes()).unwrap_or_default()];
    }
    let path = command
        .env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin");
    path.split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| {
            CString::new(format!("{}/{program}", dir.trim_end_matches('/'))).unwrap_or_default()
        })
        .collect()
}

/// `127.0.0.1:port`, where the egress relay listens inside a command's network namespace.
fn relay_address(port: u16) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    let mut address: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    address.sin_family = libc::AF_INET as libc::sa_family_t;
    address.sin_port = port.to_be();
    address.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    address
}

fn loopback_request() -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    request
}

impl SandboxView for LinuxView {
    fn root(&self) -> &Path {
        &self.root
    }

    fn upper(&self) -> Option<&Path> {
        self.upper.as_deref()
    }

    fn egress_address(&self) -> Option<String> {
        self.egress_proxy
            .as_ref()
            .map(|_| format!("127.0.0.1:{}", crate::egress::PORT))
    }

    fn run_streaming(
        &self,
        command: &CommandSpec,
        on_output: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<CommandOutput, SandboxError> {
        let cwd = validate_command(command)?;
        let started = Instant::now();
        if self.cancellation.is_cancelled() {
            return Ok(cancelled_output(vec![], vec![], false, started.elapsed()));
        }
        let deadline = started + command.timeout;
        let inside_cwd = if cwd.is_empty() {
            WORKING_ROOT.to_owned()
        } else {
            format!("{WORKING_ROOT}/{cwd}")
        };
        let inside_cwd = CString::new(inside_cwd).unwrap_or_default();
        let argv_strings: Vec<CString> = command
            .argv
            .iter()
            .map(|arg| CString::new(arg.as_bytes()).unwrap_or_default())
            .collect();
        let env_strings: Vec<CString> = command
            .env
            .iter()
            .map(|(name, value)| CString::new(format!("{name}={value}")).unwrap_or_default())
            .collect();
        let argv: Vec<*const libc::c_char> = argv_strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp: Vec<*const libc::c_char> = env_strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let candidates = exec_candidates(command);
        let limits = command.limits;
        let mut rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)> = vec![
            (libc::RLIMIT_CORE, 0),
            (libc::RLIMIT_FSIZE, limits.file_size_bytes),
            // Counted per user in the view's user namespace; a backstop behind the pids cgroup.
            (libc::RLIMIT_NPROC, u64::from(limits.pids) + 2),
        ];
        if !self.memory_cgroup {
            rlimits.push((libc::RLIMIT_DATA, limits.memory_bytes));
        }
        let cgroups = if self.cgroups.is_empty() {
            None
        } else {
            Some(
                cgroup::RunCgroups::create(
                    &self.cgroups,
                    cgroup::Limits {
                        memory_bytes: limits.memory_bytes,
                        pids: limits.pids,
                        cpu_millis: limits.cpu_millis,
                    },
                )
                .map_err(|(layer, error)| unavailable(layer, error.to_string()))?,
            )
        };
        let procs = cgroups
            .as_ref()
            .map(cgroup::RunCgroups::procs_fds)
            .unwrap_or_default();
        let result = self.run_in(
            command,
            &RunInputs {
                procs: &procs,
                cwd: &inside_cwd,
                argv: &argv,
                envp: &envp,
                candidates: &candidates,
                rlimits: &rlimits,
            },
            started,
            deadline,
            on_output,
        );
        let oom = cgroups.as_ref().is_some_and(cgroup::RunCgroups::oom_killed);
        if let Some(cgroups) = cgroups {
            cgroups.remove();
        }
        let mut output = result?;
        if oom && output.signal == Some(libc::SIGKILL) && !output.timed_out {
            let note = b"warden-sandbox: killed: out of memory (cgroup limit)\n";
            output.stderr.extend_from_slice(note);
        }
        Ok(output)
    }

    fn cancel(&self) {
        self.cancellation.cancel();
    }

    fn close(mut self: Box<Self>) -> Result<(), SandboxError> {
        self.shutdown()
    }
}

/// Disarms a command's [`KillSwitch`] when its run ends, however it ends.
struct Disarm<'a>(&'a KillSwitch);

impl Drop for Disarm<'_> {
    fn drop(&mut self) {
        self.0.disarm();
    }
}

struct RunInputs<'a> {
    procs: &'a [std::os::fd::RawFd],
    cwd: &'a CString,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    candidates: &'a [CString],
    rlimits: &'a [(libc::__rlimit_resource_t, libc::rlim_t)],
}

impl LinuxView {
    fn run_in(
        &self,
        command: &CommandSpec,
        inputs: &RunInputs<'_>,
        started: Instant,
        deadline: Instant,
        on_output: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<CommandOutput, SandboxError> {
        let pipes =
            (|| Ok::<_, io::Error>((sys::pipe()?, sys::pipe()?, sys::pipe()?, sys::pipe()?)))()
                .map_err(|e| SandboxError::io("cannot create pipes", e))?;
        let (
            (out_read, out_write),
            (err_read, err_write),
            (status_read, status_write),
            (error_read, error_write),
        ) = pipes;
        // The egress relay's channel: the sandboxed process sends its listener on `theirs`.
        let mut egress = None;
        let mut egress_channel = None;
        if let Some(proxy) = &self.egress_proxy {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| SandboxError::io("cannot create the egress relay's channel", e))?;
            egress = Some(
                crate::egress::EgressRelay::start(OwnedFd::from(ours), proxy.clone())
                    .map_err(|e| SandboxError::io("cannot start the egress relay", e))?,
            );
            egress_channel = Some(OwnedFd::from(theirs));
        }
        let proc_steps = plan::proc_steps();
        let dev_null = c"/dev/null".to_owned();
        let mut keep_fds: Vec<std::os::fd::RawFd> = [
            self.userns.as_raw_fd(),
            self.mntns.as_raw_fd(),
            status_write.as_raw_fd(),
            error_write.as_raw_fd(),
            out_write.as_raw_fd(),
            err_write.as_raw_fd(),
            self.ruleset.raw_fd(),
        ]
        .into_iter()
        .chain(inputs.procs.iter().copied())
        .chain(egress_channel.as_ref().map(AsRawFd::as_raw_fd))
        .chain(command.stdin.as_ref().map(|stdin| stdin.0.as_raw_fd()))
        .collect();
        keep_fds.sort_unstable();
        let plan = RunPlan {
            keep_fds: &keep_fds,
            parent_pid: std::process::id() as libc::pid_t,
            cgroup_procs: inputs.procs,
            userns: self.userns.as_raw_fd(),
            mntns: self.mntns.as_raw_fd(),
            status_fd: status_write.as_raw_fd(),
            error_fd: error_write.as_raw_fd(),
            proc_steps: &proc_steps.steps,
            loopback: loopback_request(),
            egress: egress_channel.as_ref().map(|channel| EgressPlan {
                address: relay_address(crate::egress::PORT),
                channel: channel.as_raw_fd(),
            }),
            hostname: b"sandbox",
            rlimits: inputs.rlimits,
            cwd: inputs.cwd,
            dev_null: &dev_null,
            stdin_fd: command
                .stdin
                .as_ref()
                .map_or(-1, |stdin| stdin.0.as_raw_fd()),
            stdout_fd: out_write.as_raw_fd(),
            stderr_fd: err_write.as_raw_fd(),
            keep_dac_override: self.writable,
            last_cap: self.last_cap,
            ruleset_fd: self.ruleset.raw_fd(),
            filter: Filter {
                instructions: &self.filter,
            },
            candidates: inputs.candidates,
            argv: inputs.argv,
            envp: inputs.envp,
        };
        let relay = fork_with(0, || child::relay_main(&plan))
            .map_err(|e| unavailable(Layer::Process, format!("cannot fork: {e}")))?;
        drop((
            out_write,
            err_write,
            status_write,
            error_write,
            egress_channel,
        ));
        let relay_fd = match sys::pidfd_open(relay) {
            Ok(fd) => fd,
            Err(error) => {
                // SAFETY: our unreaped child; its pid cannot have been reused.
                unsafe {
                    libc::kill(relay, libc::SIGKILL);
                }
                let _ = sys::wait_for(relay);
                return Err(SandboxError::io("pidfd_open", error));
            }
        };
        // Killing the relay kills the command: its init dies of the relay's death, and its
        // pid namespace with it. A pidfd cannot hit a reused pid.
        let tracked_fd = match relay_fd.try_clone() {
            Ok(fd) => fd,
            Err(error) => {
                let _ = sys::pidfd_kill(relay_fd.as_fd(), libc::SIGKILL);
                let _ = sys::wait_for(relay);
                return Err(SandboxError::io(
                    "cannot duplicate the relay's pidfd",
                    error,
                ));
            }
        };
        let _tracked = self.cancellation.track(Target::Process(tracked_fd));
        let _armed = match &command.kill {
            Some(switch) => {
                let kill_fd = relay_fd.try_clone().map_err(|error| {
                    let _ = sys::pidfd_kill(relay_fd.as_fd(), libc::SIGKILL);
                    SandboxError::io("cannot duplicate the relay's pidfd", error)
                })?;
                // As a cancellation does: the relay's death takes the command's pid namespace.
                switch.arm(Box::new(move || {
                    let _ = sys::pidfd_kill(kill_fd.as_fd(), libc::SIGKILL);
                }));
                Some(Disarm(switch))
            }
            None => None,
        };
        let mut collector = Collector::new(command.output_limit, on_output);
        let outcome = self.supervise(
            relay,
            &relay_fd,
            out_read,
            err_read,
            &status_read,
            &mut collector,
            deadline,
        );
        let (relay_status, status_bytes, timed_out) = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                let _ = sys::pidfd_kill(relay_fd.as_fd(), libc::SIGKILL);
                let _ = sys::wait_for(relay);
                return Err(SandboxError::io(
                    "cannot supervise the sandboxed command",
                    error,
                ));
            }
        };
        // The command's processes are gone: nothing more can connect, end what is relayed.
        let egress_connections = egress.as_mut().map_or(0, |relay| relay.stop());
        let failure = read_failure(&error_read).map_err(|e| SandboxError::io("error pipe", e))?;
        let duration = started.elapsed();
        if let Some((step, errno)) = failure {
            // Failures the command's author can fix are output, like a shell's.
            if step == code::EXEC || step == code::CWD {
                let message = if step == code::EXEC {
                    format!(
                        "warden-sandbox: cannot execute {:?}: {}\n",
                        command.argv[0],
                        describe_errno(errno)
                    )
                } else {
                    format!(
                        "warden-sandbox: cannot enter working directory {:?}: {}\n",
                        command.cwd,
                        describe_errno(errno)
                    )
                };
                collector.push(Stream::Stderr, message.as_bytes());
                let (stdout, stderr, truncated) = collector.finish();
                let exit_code = match (step, errno) {
                    (code::EXEC, libc::ENOENT) => 127,
                    (code::EXEC, _) => 126,
                    _ => 1,
                };
                return Ok(CommandOutput {
                    exit_code: Some(exit_code),
                    signal: None,
                    stdout,
                    stderr,
                    truncated,
                    timed_out: false,
                    duration,
                    egress_connections,
                });
            }
            let (layer, what) = match proc_steps.described.get(step as usize) {
                Some((layer, what)) => (*layer, what.clone()),
                None => describe_fixed(step),
            };
            let layer = if (code::CGROUP_JOIN..code::CGROUP_JOIN + 8).contains(&step) {
                self.cgroups
                    .get((step - code::CGROUP_JOIN) as usize)
                    .map_or(layer, |h| h.controller.layer())
            } else {
                layer
            };
            return Err(unavailable(
                layer,
                format!("{what}: {}", describe_errno(errno)),
            ));
        }
        let (exit_code, signal) = if status_bytes.len() >= 8 {
            let status = i32::from_ne_bytes([
                status_bytes[4],
                status_bytes[5],
                status_bytes[6],
                status_bytes[7],
            ]);
            sys::decode_status(status)
        } else if timed_out {
            (None, Some(libc::SIGKILL))
        } else if command.kill.as_ref().is_some_and(KillSwitch::fired) {
            let (stdout, stderr, truncated) = collector.finish();
            return Ok(killed_output(stdout, stderr, truncated, duration));
        } else if self.cancellation.is_cancelled() {
            let (stdout, stderr, truncated) = collector.finish();
            return Ok(cancelled_output(stdout, stderr, truncated, duration));
        } else {
            return Err(unavailable(
                Layer::Process,
                format!("the relay process ended without a status (wait status {relay_status:#x})"),
            ));
        };
        let (stdout, stderr, truncated) = collector.finish();
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
            duration,
            egress_connections,
        })
    }

    /// Collects output until the relay exits, enforcing the deadline. Returns the relay's wait
    /// status, what it wrote on the status pipe, and whether the deadline struck.
    #[allow(clippy::too_many_arguments)]
    fn supervise(
        &self,
        relay: libc::pid_t,
        relay_fd: &OwnedFd,
        out_read: OwnedFd,
        err_read: OwnedFd,
        status_read: &OwnedFd,
        collector: &mut Collector<'_>,
        deadline: Instant,
    ) -> io::Result<(libc::c_int, Vec<u8>, bool)> {
        let mut pipes = OutputPipes::new(out_read, err_read)?;
        sys::set_nonblocking(status_read.as_fd())?;
        let mut status = Vec::new();
        let mut status_open = true;
        let mut sandboxed: Option<OwnedFd> = None;
        let mut timed_out = false;
        let read_status = |status: &mut Vec<u8>,
                           sandboxed: &mut Option<OwnedFd>,
                           open: &mut bool|
         -> io::Result<()> {
            let eof = sys::read_available(status_read.as_fd(), &mut |data| {
                status.extend_from_slice(data)
            })?;
            if eof {
                *open = false;
            }
            if sandboxed.is_none() && status.len() >= 4 {
                let pid = i32::from_ne_bytes([status[0], status[1], status[2], status[3]]);
                // The relay reaps the sandboxed process only after it exited, and reports its
                // status right after: open the pidfd now, before that can happen.
                *sandboxed = sys::pidfd_open(pid).ok();
            }
            Ok(())
        };
        let mut current_deadline = deadline;
        loop {
            let watch: Vec<std::os::fd::BorrowedFd<'_>> = if status_open {
                vec![relay_fd.as_fd(), status_read.as_fd()]
            } else {
                vec![relay_fd.as_fd()]
            };
            match pipes.pump_until(collector, &watch, current_deadline)? {
                Pumped::Watched(0) => break,
                Pumped::Watched(_) => read_status(&mut status, &mut sandboxed, &mut status_open)?,
                Pumped::Deadline | Pumped::Closed => {
                    read_status(&mut status, &mut sandboxed, &mut status_open)?;
                    if !timed_out {
                        timed_out = true;
                        // Kill the sandbox's init: the kernel kills its whole pid namespace,
                        // and the relay then reports and exits.
                        if let Some(pidfd) = &sandboxed {
                            let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
                        }
                        current_deadline = Instant::now() + Duration::from_secs(2);
                    } else {
                        // The relay did not finish: kill it; the sandbox's death signal follows.
                        sys::pidfd_kill(relay_fd.as_fd(), libc::SIGKILL)?;
                        current_deadline = Instant::now() + Duration::from_secs(3600);
                    }
                }
            }
        }
        let relay_status = sys::wait_for(relay)?;
        read_status(&mut status, &mut sandboxed, &mut status_open)?;
        pipes.drain(collector)?;
        Ok((relay_status, status, timed_out))
    }
}
