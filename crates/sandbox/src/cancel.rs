//! Cancelling a view ([`crate::SandboxView::cancel`]): every backend registers the process
//! behind each running command here, and cancelling kills them all at once and refuses the
//! commands started afterwards. Registering and cancelling take the same lock, so a command
//! that starts while the view is being cancelled is killed too, never missed.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, PoisonError};

use crate::sys;

/// How to kill one running command.
pub(crate) enum Target {
    /// A process whose death takes the command with it (the `linux` relay: the sandbox's
    /// init has it as its parent-death signal, and its pid namespace dies with the init).
    Process(OwnedFd),
    /// A process group (`local`, `runsc`).
    Group(libc::pid_t),
}

impl Target {
    fn kill(&self) {
        match self {
            Target::Process(pidfd) => {
                let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
            }
            Target::Group(group) => {
                let _ = sys::kill_process_group(*group);
            }
        }
    }
}

/// What a command killed or refused by [`Cancellation::cancel`] returns: killed by `SIGKILL`,
/// with a note on stderr after whatever it printed.
pub(crate) fn cancelled_output(
    stdout: Vec<u8>,
    mut stderr: Vec<u8>,
    truncated: bool,
    duration: std::time::Duration,
) -> crate::CommandOutput {
    stderr.extend_from_slice(b"warden-sandbox: killed: the task was cancelled\n");
    crate::CommandOutput {
        exit_code: None,
        signal: Some(9),
        stdout,
        stderr,
        truncated,
        timed_out: false,
        duration,
        egress_connections: 0,
    }
}

#[derive(Default)]
struct State {
    cancelled: bool,
    next: u64,
    running: HashMap<u64, Target>,
}

/// The running commands of one view.
#[derive(Default)]
pub(crate) struct Cancellation {
    state: Mutex<State>,
}

/// A registered command; dropping it deregisters the command. Drop it before reaping the
/// process (a reaped pid may be reused).
pub(crate) struct Tracked<'a> {
    owner: &'a Cancellation,
    id: u64,
}

impl Cancellation {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.lock().cancelled
    }

    /// Registers a started command; kills it at once when the view is already cancelled.
    pub(crate) fn track(&self, target: Target) -> Tracked<'_> {
        let mut state = self.lock();
        if state.cancelled {
            target.kill();
        }
        state.next += 1;
        let id = state.next;
        state.running.insert(id, target);
        Tracked { owner: self, id }
    }

    /// Kills every registered command; later ones are killed as they register.
    pub(crate) fn cancel(&self) {
        let mut state = self.lock();
        state.cancelled = true;
        for target in state.running.values() {
            target.kill();
        }
    }
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.owner.lock().running.remove(&self.id);
    }
}
