//! Code that runs in processes forked from the (multi-threaded) Warden process, between
//! `clone` and `execve`. Everything it needs is prepared by the parent beforehand in a plan;
//! here there is no allocation, no locking and no panicking — only raw system calls, which are
//! async-signal-safe. A failing step writes `(step code, errno)` to the error pipe and exits;
//! a successful `execve` closes that pipe (close-on-exec), which is how the parent knows the
//! set-up worked.
//!
//! Three kinds of children:
//! - the **view holder** (`holder_main`): pid 1 of a new user + mount + pid namespace; builds
//!   the view's root file system once, pivots into it and `exec`s `cat`, which blocks on a pipe
//!   the Warden process holds (so the holder dies with Warden or at `close`);
//! - the **relay** (`relay_main`): per command; joins the run's cgroups and the view's user and
//!   mount namespaces, unshares fresh mount/pid/net/ipc/uts/cgroup namespaces, forks the
//!   sandboxed process and reports its pid and wait status;
//! - the **sandboxed process** (`sandboxed_main`): pid 1 of the new pid namespace; mounts its
//!   `/proc`, brings up `lo`, for a view with an egress relay opens the relay's listening
//!   socket on `127.0.0.1` and hands it to Warden (`SCM_RIGHTS`) keeping no copy, applies
//!   rlimits, capabilities, `no_new_privs`, Landlock and, last, seccomp, then `execve`s the
//!   command.

use std::ffi::CString;
use std::os::fd::RawFd;

/// Step codes for the fixed steps; plan steps use their index.
pub(crate) mod code {
    pub(crate) const SETGROUPS: u32 = 0x1000;
    pub(crate) const UID_MAP: u32 = 0x1001;
    pub(crate) const GID_MAP: u32 = 0x1002;
    pub(crate) const DUMPABLE: u32 = 0x1003;
    pub(crate) const CGROUP_JOIN: u32 = 0x1100; // + index of the cgroup
    pub(crate) const SETNS_USER: u32 = 0x1200;
    pub(crate) const SETNS_MNT: u32 = 0x1201;
    pub(crate) const UNSHARE: u32 = 0x1202; // + the namespace's position in `UNSHARE_ORDER`
    pub(crate) const LIFELINE: u32 = 0x1210;
    pub(crate) const FORK: u32 = 0x1211;
    pub(crate) const PDEATHSIG: u32 = 0x1300;
    pub(crate) const SETSID: u32 = 0x1301;
    pub(crate) const LOOPBACK: u32 = 0x1302;
    pub(crate) const HOSTNAME: u32 = 0x1303;
    pub(crate) const RLIMIT: u32 = 0x1304;
    pub(crate) const CWD: u32 = 0x1305;
    pub(crate) const STDIO: u32 = 0x1306;
    pub(crate) const CAPABILITIES: u32 = 0x1307;
    pub(crate) const NO_NEW_PRIVS: u32 = 0x1308;
    pub(crate) const LANDLOCK: u32 = 0x1309;
    pub(crate) const CLOSE_FDS: u32 = 0x130a;
    pub(crate) const SECCOMP: u32 = 0x130b;
    pub(crate) const EXEC: u32 = 0x130c;
    pub(crate) const EGRESS: u32 = 0x130d;
}

/// Namespaces unshared per command, in the order a failure is attributed.
pub(crate) const UNSHARE_ORDER: [libc::c_int; 6] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// One file-system operation of a plan.
pub(crate) enum Op {
    Mkdir {
        path: CString,
        mode: libc::mode_t,
    },
    /// Sets a mode exactly (`mkdir` is subject to the umask).
    Chmod {
        path: CString,
        mode: libc::mode_t,
    },
    /// An empty file to bind a file onto.
    Touch {
        path: CString,
    },
    Symlink {
        target: CString,
        path: CString,
    },
    Mount {
        source: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    /// `pivot_root` into `path`, detach the old root, `chdir("/")`.
    PivotRoot {
        path: CString,
    },
}

/// An operation plus how to treat its failure.
pub(crate) struct Step {
    pub op: Op,
    /// A missing path (`ENOENT`) is not an error.
    pub optional: bool,
}

/// The seccomp program as the kernel wants it.
pub(crate) struct Filter<'a> {
    pub instructions: &'a [libc::sock_filter],
}

/// What the view holder does.
pub(crate) struct HolderPlan<'a> {
    /// Descriptors the child keeps, sorted; every other one (copies of the Warden process's,
    /// including other views' and commands' pipes) is closed first thing.
    pub keep_fds: &'a [RawFd],
    /// `"deny"`, `"1000 <uid> 1"`, `"1000 <gid> 1"`.
    pub setgroups: &'a [u8],
    pub uid_map: &'a [u8],
    pub gid_map: &'a [u8],
    pub steps: &'a [Step],
    /// Read end of the pipe whose closing ends the holder.
    pub lifeline: RawFd,
    pub error_fd: RawFd,
    pub dev_null: &'a CString,
    pub program: &'a CString,
    pub argv: &'a [*const libc::c_char],
    pub envp: &'a [*const libc::c_char],
    pub filter: Filter<'a>,
}

/// The egress relay's listener, opened by the sandboxed process in its network namespace.
pub(crate) struct EgressPlan {
    /// `127.0.0.1:<port>`.
    pub address: libc::sockaddr_in,
    /// One end of a unix socket pair; Warden holds the other and receives the listener there.
    pub channel: RawFd,
}

/// What the relay and the sandboxed process do for one command.
pub(crate) struct RunPlan<'a> {
    /// As in [`HolderPlan::keep_fds`].
    pub keep_fds: &'a [RawFd],
    /// The Warden process; the relay dies with the thread that forked it.
    pub parent_pid: libc::pid_t,
    pub cgroup_procs: &'a [RawFd],
    pub userns: RawFd,
    pub mntns: RawFd,
    pub status_fd: RawFd,
    pub error_fd: RawFd,
    pub proc_steps: &'a [Step],
    pub loopback: libc::ifreq,
    pub egress: Option<EgressPlan>,
    pub hostname: &'a [u8],
    pub rlimits: &'a [(libc::__rlimit_resource_t, libc::rlim_t)],
    pub cwd: &'a CString,
    pub dev_null: &'a CString,
    /// The command's stdin (a pipe's read end the caller writes), or -1 for `/dev/null`.
    pub stdin_fd: RawFd,
    pub stdout_fd: RawFd,
    pub stderr_fd: RawFd,
    /// Keep `CAP_DAC_OVERRIDE` (ambient) so writable views can change files whose snapshot
    /// modes are read-only; the capability only covers inodes owned by the mapped user.
    pub keep_dac_override: bool,
    pub last_cap: libc::c_int,
    pub ruleset_fd: RawFd,
    pub filter: Filter<'a>,
    pub candidates: &'a [CString],
    pub argv: &'a [*const libc::c_char],
    pub envp: &'a [*const libc::c_char],
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Reports a failed step to the parent and exits.
fn fail(error_fd: RawFd, step: u32, error: i32) -> ! {
    let mut message = [0u8; 8];
    message[..4].copy_from_slice(&step.to_ne_bytes());
    message[4..].copy_from_slice(&error.to_ne_bytes());
    // SAFETY: writing a local buffer to a descriptor, then exiting without running any
    // destructor or atexit handler of the copied parent state.
    unsafe {
        libc::write(error_fd, message.as_ptr().cast(), message.len());
        libc::_exit(127)
    }
}

fn check(error_fd: RawFd, step: u32, result: libc::c_long) {
    if result < 0 {
        fail(error_fd, step, errno());
    }
}

fn write_file(path: &[u8], data: &[u8]) -> Result<(), i32> {
    // SAFETY: `path` is NUL-terminated (checked by the caller's constants) and `data` is valid
    // for its length.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let error = errno();
        libc::close(fd);
        if written != data.len() as isize {
            return Err(if written < 0 { error } else { libc::EIO });
        }
    }
    Ok(())
}

fn run_step(step: &Step) -> Result<(), i32> {
    // SAFETY: every pointer comes from a CString owned by the plan, alive for the whole child.
    let result = unsafe {
        match &step.op {
            Op::Mkdir { path, mode } => libc::mkdir(path.as_ptr(), *mode),
            Op::Chmod { path, mode } => libc::chmod(path.as_ptr(), *mode),
            Op::Touch { path } => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                    0o444,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd
            }
            Op::Symlink { target, path } => libc::symlink(target.as_ptr(), path.as_ptr()),
            Op::Mount {
                source,
                target,
                fstype,
                flags,
                data,
            } => libc::mount(
                source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                target.as_ptr(),
                fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                *flags,
                data.as_ref()
                    .map_or(std::ptr::null(), |s| s.as_ptr().cast()),
            ),
            Op::PivotRoot { path } => {
                let dot = c".".as_ptr();
                if libc::chdir(path.as_ptr()) < 0
                    || libc::syscall(libc::SYS_pivot_root, dot, dot) < 0
                    || libc::umount2(dot, libc::MNT_DETACH) < 0
                    || libc::chdir(c"/".as_ptr()) < 0
                {
                    -1
                } else {
                    0
                }
            }
        }
    };
    if result < 0 {
        let error = errno();
        if step.optional && error == libc::ENOENT {
            return Ok(());
        }
        return Err(error);
    }
    Ok(())
}

fn run_steps(error_fd: RawFd, steps: &[Step]) {
    for (index, step) in steps.iter().enumerate() {
        if let Err(error) = run_step(step) {
            fail(error_fd, index as u32, error);
        }
    }
}

/// Points stdin at `stdin`, stdout and stderr at the given descriptors, moves the error pipe to
/// descriptor 3 and closes everything else (nothing of the Warden process leaks in). Returns the
/// new error descriptor.
fn arrange_fds(error_fd: RawFd, stdin: RawFd, stdout: RawFd, stderr: RawFd) -> RawFd {
    // SAFETY: dup/close on descriptors; the source descriptors are all >= 3 (created after
    // stdio by the parent), so the dup2 targets never clobber a source before it is copied,
    // except `error_fd`, which is moved out of the way first.
    unsafe {
        let error_fd = if error_fd < 10 {
            let moved = libc::fcntl(error_fd, libc::F_DUPFD_CLOEXEC, 10);
            if moved < 0 {
                fail(error_fd, code::STDIO, errno());
            }
            moved
        } else {
            error_fd
        };
        for (from, to) in [(stdin, 0), (stdout, 1), (stderr, 2)] {
            if from != to && libc::dup2(from, to) < 0 {
                fail(error_fd, code::STDIO, errno());
            }
        }
        if libc::dup3(error_fd, 3, libc::O_CLOEXEC) < 0 {
            fail(error_fd, code::STDIO, errno());
        }
    }
    close_range(3, 4, u32::MAX);
    3
}

/// Closes every descriptor above 2 that is not in `keep` (sorted ascending).
fn close_others(error_fd: RawFd, keep: &[RawFd]) {
    let mut first: u32 = 3;
    for &fd in keep {
        let fd = fd as u32;
        if fd < first {
            continue;
        }
        if fd > first {
            close_range(error_fd, first, fd - 1);
        }
        first = fd + 1;
    }
    close_range(error_fd, first, u32::MAX);
}

fn close_range(error_fd: RawFd, first: u32, last: u32) {
    // SAFETY: close_range on descriptor numbers; closing what nobody in this process uses.
    check(error_fd, code::CLOSE_FDS, unsafe {
        libc::syscall(libc::SYS_close_range, first, last, 0u32)
    });
}

fn no_new_privs(error_fd: RawFd) {
    // SAFETY: prctl with integer arguments only.
    check(error_fd, code::NO_NEW_PRIVS, unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into()
    });
}

fn install_filter(error_fd: RawFd, filter: &Filter<'_>) {
    let program = libc::sock_fprog {
        len: filter.instructions.len() as libc::c_ushort,
        filter: filter.instructions.as_ptr().cast_mut(),
    };
    // SAFETY: `program` points at the plan's instructions, alive until exec; the kernel copies
    // them during the call.
    check(error_fd, code::SECCOMP, unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &program as *const libc::sock_fprog,
        )
    });
}

/// Restores default signal dispositions (the Warden process ignores `SIGPIPE`, for example)
/// and unblocks everything; the parent blocked all signals around `clone`.
fn reset_signals() {
    // SAFETY: signal() and sigprocmask() with valid arguments; failures for the signals glibc
    // reserves are expected and harmless.
    unsafe {
        for signal in 1..libc::SIGRTMAX() {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// The view holder. Never returns.
pub(crate) fn holder_main(plan: &HolderPlan<'_>) -> ! {
    let error_fd = plan.error_fd;
    close_others(error_fd, plan.keep_fds);
    // A process forked from a non-dumpable Warden owns its /proc files as root, so it could not
    // write its own uid map; be dumpable for the three writes below, and only for them.
    // SAFETY: prctl with integer arguments only.
    let was_dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } == 1;
    if !was_dumpable {
        // SAFETY: as above.
        check(error_fd, code::DUMPABLE, unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0).into()
        });
    }
    let maps = [
        (
            code::SETGROUPS,
            &b"/proc/self/setgroups\0"[..],
            plan.setgroups,
        ),
        (code::UID_MAP, &b"/proc/self/uid_map\0"[..], plan.uid_map),
        (code::GID_MAP, &b"/proc/self/gid_map\0"[..], plan.gid_map),
    ];
    for (step, path, data) in maps {
        if let Err(error) = write_file(path, data) {
            fail(error_fd, step, error);
        }
    }
    if !was_dumpable {
        // SAFETY: as above.
        check(error_fd, code::DUMPABLE, unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0).into()
        });
    }
    run_steps(error_fd, plan.steps);
    // SAFETY: opening /dev/null of the new root with a NUL-terminated path.
    let null = unsafe { libc::open(plan.dev_null.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if null < 0 {
        fail(error_fd, code::STDIO, errno());
    }
    let error_fd = arrange_fds(error_fd, plan.lifeline, null, null);
    // SAFETY: setsid takes no arguments.
    check(error_fd, code::SETSID, unsafe { libc::setsid().into() });
    no_new_privs(error_fd);
    reset_signals();
    install_filter(error_fd, &plan.filter);
    // SAFETY: program, argv and envp are NUL-terminated strings / null-terminated arrays of
    // pointers into the plan.
    unsafe {
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
    }
    fail(error_fd, code::EXEC, errno())
}

/// The relay: joins cgroups and the view's namespaces, forks the sandboxed process and reports
/// `pid` then the raw wait status on the status pipe. Never returns.
pub(crate) fn relay_main(plan: &RunPlan<'_>) -> ! {
    let error_fd = plan.error_fd;
    // If Warden dies, so does the relay, and with it (its death signal) the sandbox. The
    // thread that forked us supervises us until we exit, so it cannot end first on its own.
    // SAFETY: integer-only prctl and getppid.
    unsafe {
        check(
            error_fd,
            code::PDEATHSIG,
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into(),
        );
        if libc::getppid() != plan.parent_pid {
            libc::_exit(127);
        }
    }
    // The relay lives as long as the command: holding copies of other pipes would keep their
    // readers from ever seeing end of file.
    close_others(error_fd, plan.keep_fds);
    for (index, &fd) in plan.cgroup_procs.iter().enumerate() {
        // SAFETY: writing a constant to a descriptor the plan owns.
        let written = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        if written != 1 {
            fail(error_fd, code::CGROUP_JOIN + index as u32, errno());
        }
    }
    // SAFETY: setns on namespace descriptors the plan owns.
    check(error_fd, code::SETNS_USER, unsafe {
        libc::setns(plan.userns, libc::CLONE_NEWUSER).into()
    });
    // SAFETY: as above.
    check(error_fd, code::SETNS_MNT, unsafe {
        libc::setns(plan.mntns, libc::CLONE_NEWNS).into()
    });
    let all = UNSHARE_ORDER.iter().fold(0, |flags, flag| flags | flag);
    // SAFETY: unshare with namespace flags only.
    if unsafe { libc::unshare(all) } < 0 {
        // Attribute the failure to the first namespace that cannot be created on its own.
        for (index, &flag) in UNSHARE_ORDER.iter().enumerate() {
            // SAFETY: as above.
            if unsafe { libc::unshare(flag) } < 0 {
                fail(error_fd, code::UNSHARE + index as u32, errno());
            }
        }
        fail(error_fd, code::UNSHARE, errno());
    }
    let mut lifeline = [0 as libc::c_int; 2];
    // SAFETY: `lifeline` is a valid array of two ints.
    check(error_fd, code::LIFELINE, unsafe {
        libc::pipe2(lifeline.as_mut_ptr(), libc::O_CLOEXEC).into()
    });
    // SAFETY: a fork-like clone; the child continues below with only async-signal-safe calls.
    let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
    if pid < 0 {
        fail(error_fd, code::FORK, errno());
    }
    if pid == 0 {
        sandboxed_main(plan, lifeline)
    }
    let pid = pid as libc::pid_t;
    // SAFETY: closing our copy of the read end, then writing local buffers to the status pipe
    // and reaping our own child.
    unsafe {
        libc::close(lifeline[0]);
        if let Some(egress) = &plan.egress {
            // Only the sandboxed process sends on it; Warden sees end of file if it dies first.
            libc::close(egress.channel);
        }
        libc::write(plan.status_fd, pid.to_ne_bytes().as_ptr().cast(), 4);
        let mut status = 0;
        loop {
            let reaped = libc::waitpid(pid, &mut status, libc::__WALL);
            if reaped == pid {
                break;
            }
            if reaped < 0 && errno() != libc::EINTR {
                status = 0x7f00; // "exited 127": the parent sees that something went wrong.
                break;
            }
        }
        libc::write(plan.status_fd, status.to_ne_bytes().as_ptr().cast(), 4);
        libc::_exit(0)
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_DAC_OVERRIDE: libc::c_int = 1;

fn drop_capabilities(error_fd: RawFd, keep_dac_override: bool, last_cap: libc::c_int) {
    for cap in 0..=last_cap {
        if keep_dac_override && cap == CAP_DAC_OVERRIDE {
            continue;
        }
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } < 0
            && errno() != libc::EINVAL
        {
            fail(error_fd, code::CAPABILITIES, errno());
        }
    }
    if !keep_dac_override {
        // Exec as a non-zero uid clears the remaining capabilities.
        return;
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget/capset with a version-3 header and two data slots, as the ABI requires.
    unsafe {
        if libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        ) < 0
        {
            fail(error_fd, code::CAPABILITIES, errno());
        }
        data[0].inheritable = 1 << CAP_DAC_OVERRIDE;
        data[1].inheritable = 0;
        if libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        ) < 0
        {
            fail(error_fd, code::CAPABILITIES, errno());
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            CAP_DAC_OVERRIDE as libc::c_ulong,
            0,
            0,
        ) < 0
        {
            fail(error_fd, code::CAPABILITIES, errno());
        }
    }
}

/// Opens the egress relay's listening socket on the (now up) loopback of this network
/// namespace, sends it to Warden over the plan's channel and closes both: the command keeps no
/// descriptor of it, so only Warden accepts (and relays) what connects there. Runs before
/// Landlock and seccomp, which then deny the command any `bind` and any socket but this kind.
fn open_egress_listener(error_fd: RawFd, egress: &EgressPlan) {
    // A control buffer for one descriptor, aligned for `cmsghdr`; 32 bytes hold
    // CMSG_SPACE(4) on every 64-bit and 32-bit target.
    #[repr(C, align(8))]
    struct Control([u8; 32]);
    // SAFETY: socket/bind/listen/sendmsg/close on descriptors this process owns, with a local
    // address from the plan and local buffers; the CMSG_* helpers only compute offsets into
    // `control`, whose size is checked against CMSG_SPACE first. No allocation.
    unsafe {
        let listener = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if listener < 0 {
            fail(error_fd, code::EGRESS, errno());
        }
        check(
            error_fd,
            code::EGRESS,
            libc::bind(
                listener,
                (&egress.address as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
            .into(),
        );
        check(error_fd, code::EGRESS, libc::listen(listener, 64).into());
        let space = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
        let mut control = Control([0; 32]);
        if space > control.0.len() {
            fail(error_fd, code::EGRESS, libc::EINVAL);
        }
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.0.as_mut_ptr().cast();
        message.msg_controllen = space as _;
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null() {
            fail(error_fd, code::EGRESS, libc::EINVAL);
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), listener);
        if libc::sendmsg(egress.channel, &message, libc::MSG_NOSIGNAL) != 1 {
            fail(error_fd, code::EGRESS, errno());
        }
        libc::close(listener);
        libc::close(egress.channel);
    }
}

/// The sandboxed process: pid 1 of its own pid namespace. Never returns.
fn sandboxed_main(plan: &RunPlan<'_>, lifeline: [libc::c_int; 2]) -> ! {
    let error_fd = plan.error_fd;
    // SAFETY: integer-only prctl/close/poll/setsid calls on descriptors we own.
    unsafe {
        libc::close(lifeline[1]);
        check(
            error_fd,
            code::PDEATHSIG,
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into(),
        );
        // If the relay died before the death signal was armed, stop here: nobody would kill us.
        let mut pollfd = libc::pollfd {
            fd: lifeline[0],
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut pollfd, 1, 0) != 0 {
            libc::_exit(127);
        }
        libc::close(lifeline[0]);
        check(error_fd, code::SETSID, libc::setsid().into());
    }
    for (index, step) in plan.proc_steps.iter().enumerate() {
        if let Err(error) = run_step(step) {
            fail(error_fd, index as u32, error);
        }
    }
    // SAFETY: a socket for the interface ioctls and a copy of the prepared `ifreq`.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if socket < 0 {
            fail(error_fd, code::LOOPBACK, errno());
        }
        let mut request = plan.loopback;
        if libc::ioctl(socket, libc::SIOCGIFFLAGS, &mut request) < 0 {
            fail(error_fd, code::LOOPBACK, errno());
        }
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket, libc::SIOCSIFFLAGS, &request) < 0 {
            fail(error_fd, code::LOOPBACK, errno());
        }
        libc::close(socket);
        if let Some(egress) = &plan.egress {
            open_egress_listener(error_fd, egress);
        }
        check(
            error_fd,
            code::HOSTNAME,
            libc::sethostname(plan.hostname.as_ptr().cast(), plan.hostname.len()).into(),
        );
        for &(resource, value) in plan.rlimits {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            check(
                error_fd,
                code::RLIMIT,
                libc::setrlimit(resource, &limit).into(),
            );
        }
        check(error_fd, code::CWD, libc::chdir(plan.cwd.as_ptr()).into());
    }
    // SAFETY: opening /dev/null of the sandbox root with a NUL-terminated path.
    let null = unsafe { libc::open(plan.dev_null.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null < 0 {
        fail(error_fd, code::STDIO, errno());
    }
    // The ruleset descriptor must survive until it is applied: apply Landlock before closing.
    drop_capabilities(error_fd, plan.keep_dac_override, plan.last_cap);
    no_new_privs(error_fd);
    // SAFETY: landlock_restrict_self on the plan's ruleset descriptor, no flags.
    check(error_fd, code::LANDLOCK, unsafe {
        libc::syscall(libc::SYS_landlock_restrict_self, plan.ruleset_fd, 0u32)
    });
    let stdin = if plan.stdin_fd >= 0 {
        plan.stdin_fd
    } else {
        null
    };
    let error_fd = arrange_fds(error_fd, stdin, plan.stdout_fd, plan.stderr_fd);
    reset_signals();
    install_filter(error_fd, &plan.filter);
    let mut error = libc::ENOENT;
    for candidate in plan.candidates {
        // SAFETY: NUL-terminated path and null-terminated argv/envp arrays from the plan.
        unsafe {
            libc::execve(candidate.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
        }
        let this = errno();
        // Keep searching past "not here"; remember anything more telling (EACCES, ENOEXEC).
        if this != libc::ENOENT && this != libc::ENOTDIR {
            error = this;
        }
    }
    fail(error_fd, code::EXEC, error)
}
