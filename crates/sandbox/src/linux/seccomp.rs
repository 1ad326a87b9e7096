//! The seccomp filter installed last, right before `execve`: a deny-list over the system calls
//! a sandboxed command has no business making. It is written as classic BPF by hand (a few
//! dozen instructions) because it needs two things filter generators make awkward: killing the
//! x32 ABI (`nr & 0x40000000`) and inspecting `socket`'s domain and `clone`'s flags.
//!
//! - wrong architecture or an x32 system call: the process is killed;
//! - `socket` with any domain but `AF_UNIX`: `EAFNOSUPPORT` (no IPv4, IPv6, netlink, packet,
//!   vsock, …). The one exception is the filter of a view with an egress relay
//!   ([`crate::ViewSpec::egress_proxy`]), which also allows `AF_INET` stream sockets, so its
//!   commands can dial the relay on their loopback (the command's network namespace holds only
//!   `lo`, and Landlock, where it has network rules, lets TCP connect to the relay's port
//!   only); other `AF_INET` types fail with `ESOCKTNOSUPPORT`;
//! - `clone` with a namespace flag, `clone3` (its flags are behind a pointer): `EPERM` /
//!   `ENOSYS` (libc falls back to `clone`);
//! - ptrace and cross-process memory access, mounting and pivoting, namespaces, bpf, keyrings,
//!   io_uring, perf events, userfaultfd, kexec and modules, and assorted administrative calls:
//!   `EPERM`.

/// `AUDIT_ARCH_*` of the architecture we are built for.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// Whether a filter exists for this architecture.
pub(crate) const SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Offsets into `struct seccomp_data`.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0_LOW: u32 = 16;
const OFFSET_ARG1_LOW: u32 = 24;

/// The socket type bits of `socket`'s second argument (the rest are `SOCK_CLOEXEC` and
/// `SOCK_NONBLOCK`).
const SOCK_TYPE_MASK: u32 = 0xf;

const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP) as u32;

/// System calls that fail with `EPERM`.
fn denied() -> Vec<libc::c_long> {
    #[allow(unused_mut)]
    let mut calls = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_kcmp,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_syslog,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_vhangup,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_uselib,
        libc::SYS_modify_ldt,
    ]);
    calls
}

fn statement(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

fn load(offset: u32) -> libc::sock_filter {
    statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset)
}

fn ret(action: u32) -> libc::sock_filter {
    statement(libc::BPF_RET | libc::BPF_K, action)
}

fn errno(error: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (error as u32 & libc::SECCOMP_RET_DATA)
}

/// What `socket` may create: `AF_UNIX` always, `AF_INET` streams when `inet_stream` (a view
/// with an egress relay).
fn socket_block(inet_stream: bool) -> Vec<libc::sock_filter> {
    let eq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let allow = libc::SECCOMP_RET_ALLOW;
    if !inet_stream {
        return vec![
            load(OFFSET_ARG0_LOW),
            jump(eq, libc::AF_UNIX as u32, 0, 1),
            ret(allow),
            ret(errno(libc::EAFNOSUPPORT)),
        ];
    }
    vec![
        load(OFFSET_ARG0_LOW),
        // AF_UNIX -> allow
        jump(eq, libc::AF_UNIX as u32, 4, 0),
        // anything but AF_INET -> EAFNOSUPPORT
        jump(eq, libc::AF_INET as u32, 0, 5),
        load(OFFSET_ARG1_LOW),
        statement(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, SOCK_TYPE_MASK),
        jump(eq, libc::SOCK_STREAM as u32, 0, 1),
        ret(allow),
        ret(errno(libc::ESOCKTNOSUPPORT)),
        ret(errno(libc::EAFNOSUPPORT)),
    ]
}

/// The filter program; `inet_stream` for the commands of a view with an egress relay.
pub(crate) fn program(inet_stream: bool) -> Vec<libc::sock_filter> {
    let eq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let ge = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
    let set = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
    let kill = libc::SECCOMP_RET_KILL_PROCESS;
    let allow = libc::SECCOMP_RET_ALLOW;
    let denied = denied();
    let sock = socket_block(inet_stream);
    let sock_len = sock.len();

    let mut program = vec![
        load(OFFSET_ARCH),
        jump(eq, AUDIT_ARCH, 1, 0),
        ret(kill),
        load(OFFSET_NR),
    ];
    if cfg!(target_arch = "x86_64") {
        program.push(jump(ge, X32_SYSCALL_BIT, 0, 1));
        program.push(ret(kill));
    }
    // Layout after the per-call comparisons:
    //   [deny]  ret EPERM
    //   [sock]  `socket_block`: ld arg0; jeq AF_UNIX; ret ALLOW; ret EAFNOSUPPORT (or more)
    //   [clone] ld arg0; jset NAMESPACE_FLAGS; ret EPERM; ret ALLOW
    //   [clone3] ret ENOSYS
    //   ...
    // Each comparison jumps forward over the remaining comparisons to its target.
    let comparisons = denied.len() + 3; // + socket, clone, clone3
    for (index, &nr) in denied.iter().enumerate() {
        let remaining = comparisons - index - 1;
        // Jump over the remaining comparisons and the final ALLOW to `deny`.
        program.push(jump(eq, nr as u32, (remaining + 1) as u8, 0));
    }
    // socket -> sock (over: clone cmp, clone3 cmp, allow, deny)
    program.push(jump(eq, libc::SYS_socket as u32, 4, 0));
    // clone -> clone block (over: clone3 cmp, allow, deny, sock block)
    program.push(jump(eq, libc::SYS_clone as u32, (3 + sock_len) as u8, 0));
    // clone3 -> ENOSYS (over: allow, deny, sock block, clone block of 4)
    program.push(jump(
        eq,
        libc::SYS_clone3 as u32,
        (2 + sock_len + 4) as u8,
        0,
    ));
    program.push(ret(allow));
    // deny
    program.push(ret(errno(libc::EPERM)));
    // sock
    program.extend(sock);
    // clone
    program.push(load(OFFSET_ARG0_LOW));
    program.push(jump(set, NAMESPACE_FLAGS, 0, 1));
    program.push(ret(errno(libc::EPERM)));
    program.push(ret(allow));
    // clone3
    program.push(ret(errno(libc::ENOSYS)));
    program
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny classic-BPF interpreter for the subset the program uses, to check the layout.
    fn evaluate(program: &[libc::sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
        evaluate_with(program, arch, nr, arg0, 0)
    }

    fn evaluate_with(
        program: &[libc::sock_filter],
        arch: u32,
        nr: u32,
        arg0: u64,
        arg1: u64,
    ) -> u32 {
        let mut accumulator = 0u32;
        let mut pc = 0usize;
        loop {
            let instruction = program[pc];
            let code = u32::from(instruction.code);
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    accumulator = match instruction.k {
                        OFFSET_NR => nr,
                        OFFSET_ARCH => arch,
                        OFFSET_ARG0_LOW => arg0 as u32,
                        OFFSET_ARG1_LOW => arg1 as u32,
                        other => panic!("unexpected offset {other}"),
                    };
                    pc += 1;
                }
                c if c == libc::BPF_RET | libc::BPF_K => return instruction.k,
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => {
                    accumulator &= instruction.k;
                    pc += 1;
                }
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        op if op == libc::BPF_JEQ => accumulator == instruction.k,
                        op if op == libc::BPF_JGE => accumulator >= instruction.k,
                        op if op == libc::BPF_JSET => accumulator & instruction.k != 0,
                        other => panic!("unexpected jump {other:#x}"),
                    };
                    pc += 1 + usize::from(if taken {
                        instruction.jt
                    } else {
                        instruction.jf
                    });
                }
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    fn check(nr: libc::c_long, arg0: u64, expect: u32) {
        for inet_stream in [false, true] {
            let program = program(inet_stream);
            // AF_INET is the only socket call the two filters answer differently.
            if nr == libc::SYS_socket && arg0 == libc::AF_INET as u64 && inet_stream {
                continue;
            }
            assert_eq!(
                evaluate(&program, AUDIT_ARCH, nr as u32, arg0),
                expect,
                "syscall {nr} arg0 {arg0:#x} (inet_stream: {inet_stream})"
            );
        }
    }

    fn socket(inet_stream: bool, domain: i32, kind: i32) -> u32 {
        evaluate_with(
            &program(inet_stream),
            AUDIT_ARCH,
            libc::SYS_socket as u32,
            domain as u64,
            kind as u64,
        )
    }

    #[test]
    fn an_egress_view_may_make_inet_stream_sockets_and_nothing_more() {
        let allow = libc::SECCOMP_RET_ALLOW;
        let stream = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
        assert_eq!(socket(true, libc::AF_INET, stream), allow);
        assert_eq!(socket(true, libc::AF_INET, libc::SOCK_STREAM), allow);
        assert_eq!(socket(true, libc::AF_UNIX, libc::SOCK_DGRAM), allow);
        for kind in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_SEQPACKET] {
            assert_eq!(
                socket(true, libc::AF_INET, kind | libc::SOCK_CLOEXEC),
                errno(libc::ESOCKTNOSUPPORT)
            );
        }
        for domain in [libc::AF_INET6, libc::AF_NETLINK, libc::AF_PACKET] {
            assert_eq!(
                socket(true, domain, libc::SOCK_STREAM),
                errno(libc::EAFNOSUPPORT)
            );
        }
        // Every other view: no AF_INET at all.
        assert_eq!(
            socket(false, libc::AF_INET, libc::SOCK_STREAM),
            errno(libc::EAFNOSUPPORT)
        );
        // The clone rules still follow the longer socket block.
        let program = program(true);
        assert_eq!(
            evaluate(
                &program,
                AUDIT_ARCH,
                libc::SYS_clone as u32,
                libc::SIGCHLD as u64
            ),
            allow
        );
        assert_eq!(
            evaluate(
                &program,
                AUDIT_ARCH,
                libc::SYS_clone as u32,
                (libc::CLONE_NEWNET | libc::SIGCHLD) as u64
            ),
            errno(libc::EPERM)
        );
        assert_eq!(
            evaluate(&program, AUDIT_ARCH, libc::SYS_clone3 as u32, 0),
            errno(libc::ENOSYS)
        );
    }

    #[test]
    fn allows_ordinary_calls() {
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_execve,
            libc::SYS_openat,
            libc::SYS_wait4,
        ] {
            check(nr, 0, libc::SECCOMP_RET_ALLOW);
        }
    }

    #[test]
    fn denies_the_list() {
        for nr in denied() {
            check(nr, 0, errno(libc::EPERM));
        }
    }

    #[test]
    fn only_unix_sockets() {
        check(
            libc::SYS_socket,
            libc::AF_UNIX as u64,
            libc::SECCOMP_RET_ALLOW,
        );
        for domain in [
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_VSOCK,
        ] {
            check(libc::SYS_socket, domain as u64, errno(libc::EAFNOSUPPORT));
        }
    }

    #[test]
    fn clone_without_namespaces_only() {
        check(
            libc::SYS_clone,
            libc::SIGCHLD as u64,
            libc::SECCOMP_RET_ALLOW,
        );
        check(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64,
            errno(libc::EPERM),
        );
        check(libc::SYS_clone3, 0, errno(libc::ENOSYS));
    }

    #[test]
    fn kills_foreign_architectures_and_x32() {
        let program = program(false);
        assert_eq!(
            evaluate(&program, 0x4000_0003, 0, 0),
            libc::SECCOMP_RET_KILL_PROCESS
        );
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                evaluate(&program, AUDIT_ARCH, X32_SYSCALL_BIT | 1, 0),
                libc::SECCOMP_RET_KILL_PROCESS
            );
        }
    }
}
