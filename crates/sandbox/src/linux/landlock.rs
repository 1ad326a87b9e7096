//! Landlock through its three system calls. The ruleset is built once per view on the host
//! side (rules name inodes, opened through the view holder's root) and applied in each
//! sandboxed process with `landlock_restrict_self` just before seccomp and `execve`.
//!
//! Every file-system right the kernel's ABI knows is handled: reading and executing is allowed
//! under the sandbox root, writing only under the writable directories (`/tmp`, `/dev/shm` and,
//! for writable views, the working root) and to the device nodes. From ABI 4 all TCP `bind` and
//! `connect` is denied, except `connect` to the egress relay's port in a view that has one
//! ([`Ruleset::allow_connect`]); from ABI 6 abstract unix sockets and signals are scoped to the
//! sandbox.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;
const RULE_NET_PORT: u32 = 2;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;
const IOCTL_DEV: u64 = 1 << 15;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

#[repr(C, packed)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

/// The Landlock ABI version of the running kernel.
pub(crate) fn abi() -> io::Result<u32> {
    // SAFETY: the version query takes a null attribute pointer and size 0.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(version as u32)
}

fn handled_fs(abi: u32) -> u64 {
    let mut rights = EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        rights |= REFER;
    }
    if abi >= 3 {
        rights |= TRUNCATE;
    }
    if abi >= 5 {
        rights |= IOCTL_DEV;
    }
    rights
}

/// What a rule grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read files, list directories, execute.
    ReadExecute,
    /// Everything under a writable directory.
    Write,
    /// Read, write and ioctl on a device node.
    Device,
}

/// A ruleset under construction, then ready to be applied.
pub(crate) struct Ruleset {
    fd: OwnedFd,
    abi: u32,
}

impl Ruleset {
    pub(crate) fn new(abi: u32) -> io::Result<Ruleset> {
        let attr = RulesetAttr {
            handled_access_fs: handled_fs(abi),
            handled_access_net: if abi >= 4 {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if abi >= 6 {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
        };
        // The structure grew with the ABI; pass the size this kernel understands.
        let size = match abi {
            1..=3 => 8,
            4..=5 => 16,
            _ => std::mem::size_of::<RulesetAttr>(),
        };
        // SAFETY: `attr` is valid for `size` bytes (size <= its real size).
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(Ruleset { fd, abi })
    }

    /// Grants `access` beneath `path` (opened `O_PATH`, so it may go through
    /// `/proc/<holder>/root`).
    pub(crate) fn allow(&mut self, path: &Path, access: Access) -> io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let file_rights = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
        let handled = handled_fs(self.abi);
        let wanted = match access {
            Access::ReadExecute => EXECUTE | READ_FILE | READ_DIR,
            Access::Write => handled,
            Access::Device => READ_FILE | WRITE_FILE | IOCTL_DEV,
        };
        let is_dir = file.metadata()?.is_dir();
        let allowed = wanted & handled & if is_dir { u64::MAX } else { file_rights };
        let attr = PathBeneathAttr {
            allowed_access: allowed,
            parent_fd: file.as_raw_fd(),
        };
        // SAFETY: `attr` is a valid packed path-beneath attribute; `file` stays open across the
        // call.
        let result = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if result < 0 {
            let error = io::Error::last_os_error();
            return Err(io::Error::new(
                error.kind(),
                format!("{}: {error}", path.display()),
            ));
        }
        Ok(())
    }

    /// Allows TCP `connect` to `port` (any address: the command's network namespace holds only
    /// `lo`). Without network rules (ABI < 4) there is nothing to add: TCP is not handled.
    pub(crate) fn allow_connect(&mut self, port: u16) -> io::Result<()> {
        if self.abi < 4 {
            return Ok(());
        }
        let attr = NetPortAttr {
            allowed_access: NET_CONNECT_TCP,
            port: u64::from(port),
        };
        // SAFETY: `attr` is a valid packed net-port attribute alive across the call.
        let result = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_NET_PORT,
                &attr as *const NetPortAttr,
                0u32,
            )
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

use std::os::unix::fs::OpenOptionsExt;
