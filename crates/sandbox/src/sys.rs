//! Thin, safe wrappers over the Linux system calls the host side of the sandbox needs: pipes,
//! pidfds, `poll`, `waitpid`, and reading a child's output under a deadline. Code that runs in
//! a forked child lives in `linux::child` instead (no allocation, async-signal-safe calls only).

use crate::output::Collector;
use crate::Stream;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

fn check_long(result: libc::c_long) -> io::Result<libc::c_long> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// `prctl(PR_SET_DUMPABLE)`.
pub(crate) fn set_dumpable(dumpable: bool) -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes an integer argument and touches no memory of ours.
    check(unsafe {
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            libc::c_ulong::from(dumpable),
            0,
            0,
            0,
        )
    })?;
    Ok(())
}

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Gives SIGPIPE its default action back (Rust starts programs with it ignored).
pub(crate) fn default_sigpipe() -> io::Result<()> {
    // SAFETY: signal(2) with SIG_DFL installs no handler of ours and touches no memory.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends SIGKILL to the process group `group` leads; a group that is gone is fine. Groups 0
/// and 1 (and anything negative) are refused: `kill(-0)` is our own group, `kill(-1)` is every
/// process we may signal, and no group Warden started can have either id.
pub(crate) fn kill_process_group(group: libc::pid_t) -> bool {
    if group <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory involved.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
    true
}

/// A close-on-exec pipe: `(read end, write end)`.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid, writable array of two ints, as pipe2 requires.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Receives one descriptor sent with `SCM_RIGHTS` on the unix socket `socket` (blocking);
/// `None` when the peer closed without sending one. The descriptor arrives close-on-exec.
pub(crate) fn recv_fd(socket: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    let mut control = Control([0; 64]);
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain old data; all-zero is a valid value, filled in below with
    // pointers to locals that outlive the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.0.as_mut_ptr().cast();
    message.msg_controllen = control.0.len() as _;
    let received = loop {
        // SAFETY: `message` points at valid buffers for the whole call.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    let mut found = None;
    // SAFETY: the CMSG_* helpers walk the control buffer the kernel just filled, within
    // `msg_controllen`; every descriptor found is taken into an `OwnedFd` exactly once.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<libc::c_int>();
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for index in 0..bytes / std::mem::size_of::<libc::c_int>() {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(index)));
                    if found.is_none() {
                        found = Some(fd);
                    }
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    if received == 0 && found.is_none() {
        return Ok(None);
    }
    Ok(found)
}

/// Makes reads on `fd` return `EAGAIN` instead of blocking.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we borrow; no pointers involved.
    unsafe {
        let flags = check(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
        check(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_SETFL,
            flags | libc::O_NONBLOCK,
        ))?;
    }
    Ok(())
}

/// `pidfd_open(2)`: a descriptor that becomes readable when the process exits, and through
/// which it can be signalled without pid-reuse races.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = check_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(2)`.
pub(crate) fn pidfd_kill(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a null siginfo pointer is allowed and means "as kill(2) would".
    check_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })?;
    Ok(())
}

/// Reaps `pid`, blocking until it has exited; returns the raw wait status.
pub(crate) fn wait_for(pid: libc::pid_t) -> io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; `pid` is our own child.
        let result = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if result == pid {
            return Ok(status);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Splits a raw wait status into `(exit code, signal)`.
pub(crate) fn decode_status(status: libc::c_int) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    }
}

/// `poll(2)` for readability (or hang-up) on `fds`; returns which became ready. A `None`
/// timeout waits forever.
pub(crate) fn poll_readable(
    fds: &[BorrowedFd<'_>],
    timeout: Option<Duration>,
) -> io::Result<Vec<bool>> {
    let mut pollfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout_ms = match timeout {
        None => -1,
        Some(timeout) => {
            // Round up so a sub-millisecond remainder does not spin.
            let millis = timeout.as_micros().div_ceil(1000);
            libc::c_int::try_from(millis).unwrap_or(libc::c_int::MAX)
        }
    };
    // SAFETY: `pollfds` is a valid array of `pollfds.len()` entries for the duration of the call.
    let result = unsafe {
        libc::poll(
            pollfds.as_mut_ptr(),
            pollfds.len() as libc::nfds_t,
            timeout_ms,
        )
    };
    if result < 0 {
        let error = io::Error::last_os_error();
        if error.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(error);
    }
    Ok(pollfds.iter().map(|pollfd| pollfd.revents != 0).collect())
}

/// Reads whatever is available on a non-blocking `fd`; returns true at end of file.
pub(crate) fn read_available(fd: BorrowedFd<'_>, into: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        // SAFETY: `buffer` is valid for writes of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        if n == 0 {
            return Ok(true);
        }
        if n < 0 {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::WouldBlock => return Ok(false),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(error),
            }
        }
        into(&buffer[..n as usize]);
    }
}

/// Why [`OutputPipes::pump_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pumped {
    /// The watched descriptor with this index became readable.
    Watched(usize),
    /// The deadline passed.
    Deadline,
    /// Nothing was watched and both pipes reached end of file.
    Closed,
}

/// A command's stdout and stderr pipes being read into a [`Collector`].
pub(crate) struct OutputPipes {
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl OutputPipes {
    /// Takes the read ends; they are switched to non-blocking mode.
    pub(crate) fn new(stdout: OwnedFd, stderr: OwnedFd) -> io::Result<OutputPipes> {
        set_nonblocking(stdout.as_fd())?;
        set_nonblocking(stderr.as_fd())?;
        Ok(OutputPipes {
            stdout: Some(stdout),
            stderr: Some(stderr),
        })
    }

    /// Reads output until one of `watch` becomes readable, `deadline` passes, or (with nothing
    /// to watch) both pipes are at end of file.
    pub(crate) fn pump_until(
        &mut self,
        collector: &mut Collector<'_>,
        watch: &[BorrowedFd<'_>],
        deadline: Instant,
    ) -> io::Result<Pumped> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(Pumped::Deadline);
            }
            if watch.is_empty() && self.stdout.is_none() && self.stderr.is_none() {
                return Ok(Pumped::Closed);
            }
            let mut fds: Vec<BorrowedFd<'_>> = watch.to_vec();
            let open: Vec<Stream> = [
                (Stream::Stdout, &self.stdout),
                (Stream::Stderr, &self.stderr),
            ]
            .into_iter()
            .filter_map(|(stream, fd)| {
                fd.as_ref().map(|fd| {
                    fds.push(fd.as_fd());
                    stream
                })
            })
            .collect();
            let ready = poll_readable(&fds, Some(deadline - now))?;
            let fired = ready[..watch.len()].iter().position(|&ready| ready);
            for (index, stream) in open.iter().enumerate() {
                if ready[watch.len() + index] {
                    self.read_stream(collector, *stream)?;
                }
            }
            if let Some(index) = fired {
                return Ok(Pumped::Watched(index));
            }
        }
    }

    /// Reads everything already in the pipes without waiting for end of file (other processes
    /// may briefly hold copies of the write ends).
    pub(crate) fn drain(&mut self, collector: &mut Collector<'_>) -> io::Result<()> {
        self.read_stream(collector, Stream::Stdout)?;
        self.read_stream(collector, Stream::Stderr)
    }

    /// Reads until both pipes reach end of file or `deadline` passes.
    pub(crate) fn read_to_end(
        &mut self,
        collector: &mut Collector<'_>,
        deadline: Instant,
    ) -> io::Result<()> {
        self.pump_until(collector, &[], deadline)?;
        Ok(())
    }

    fn read_stream(&mut self, collector: &mut Collector<'_>, stream: Stream) -> io::Result<()> {
        let slot = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        if let Some(fd) = slot {
            let eof = read_available(fd.as_fd(), &mut |data| collector.push(stream, data))?;
            if eof {
                *slot = None;
            }
        }
        Ok(())
    }
}

/// Detaches the mount at `point` (`umount2` with `MNT_DETACH`); failure (not a mount point, no
/// right to unmount) changes nothing and is not reported.
pub(crate) fn detach_mount(point: &std::path::Path) {
    let Ok(path) = std::ffi::CString::new(point.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: umount2 with a NUL-terminated path; it only reads the string.
    unsafe {
        libc::umount2(path.as_ptr(), libc::MNT_DETACH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_groups_0_and_1_and_negative_ones_are_never_signalled() {
        // kill(-0) would kill this test's own group and kill(-1) every process we may signal:
        // surviving this test is the assertion as much as the return values are.
        for group in [0, 1, -1, -4242] {
            assert!(!kill_process_group(group), "group {group} was signalled");
        }
    }
}
