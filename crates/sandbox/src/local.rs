//! The `local` backend: no isolation at all. Commands run as the Warden user on the host with
//! the caller's environment allow-list, in the snapshot (read-only views) or in a plain copy of
//! it under the scratch directory (writable views). Only the timeout (the whole process group
//! is killed) and the output limit apply. It exists for development on machines without the
//! kernel features; it is only ever used when asked for by name, and every result is labelled
//! `local`.

use crate::cancel::{cancelled_output, Cancellation, Target};
use crate::output::Collector;
use crate::spec::{killed_output, validate_command, validate_view, ValidatedView};
use crate::sys::{self, OutputPipes, Pumped};
use crate::{
    Backend, CommandOutput, CommandSpec, KillSwitch, Sandbox, SandboxError, SandboxView, Stream,
    ViewSpec,
};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

pub(crate) struct LocalSandbox;

impl LocalSandbox {
    pub(crate) fn new() -> LocalSandbox {
        LocalSandbox
    }
}

impl Sandbox for LocalSandbox {
    fn backend(&self) -> Backend {
        Backend::Local
    }

    /// No isolation: commands reach the proxy (and everything else) directly.
    fn relays_egress(&self) -> bool {
        true
    }

    fn open(&self, view: &ViewSpec) -> Result<Box<dyn SandboxView>, SandboxError> {
        let validated = validate_view(view)?;
        if let Some(mount) = view.mounts.iter().find(|mount| mount.source.is_some()) {
            return Err(SandboxError::InvalidRequest(format!(
                "the local backend runs commands on the host's own files: it cannot show \
                 another directory at {}",
                mount.path.display()
            )));
        }
        let seed = crate::spec::validate_seed(view)?;
        crate::spec::prepare_scratch(&view.scratch_dir)?;
        let root = match (&validated, view.writable) {
            (ValidatedView::Single(snapshot), false) => snapshot.clone(),
            (ValidatedView::Single(snapshot), true) => {
                let root = view.scratch_dir.join("work");
                // The seed first, the snapshot over it: what both hold is the snapshot's.
                if let Some(seed) = &seed {
                    copy_tree(seed, &root)?;
                }
                copy_tree(snapshot, &root)?;
                root
            }
            (ValidatedView::Multi(repos), writable) => {
                let root = view.scratch_dir.join("work");
                std::fs::create_dir(&root).map_err(|e| {
                    SandboxError::io(format!("cannot create {}", root.display()), e)
                })?;
                for (name, snapshot) in repos {
                    let target = root.join(name);
                    if writable {
                        copy_tree(snapshot, &target)?;
                    } else {
                        std::os::unix::fs::symlink(snapshot, &target).map_err(|e| {
                            SandboxError::io(format!("cannot link {}", target.display()), e)
                        })?;
                    }
                }
                root
            }
        };
        Ok(Box::new(LocalView {
            root,
            scratch: view.scratch_dir.clone(),
            egress_proxy: view.egress_proxy.clone(),
            cancellation: Cancellation::default(),
        }))
    }
}

struct LocalView {
    root: PathBuf,
    scratch: PathBuf,
    /// The proxy itself: a local command has the host's network, there is nothing to relay.
    egress_proxy: Option<String>,
    /// The process groups of the commands running now, killed by [`SandboxView::cancel`].
    cancellation: Cancellation,
}

impl SandboxView for LocalView {
    fn root(&self) -> &Path {
        &self.root
    }

    fn egress_address(&self) -> Option<String> {
        self.egress_proxy.clone()
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
        let stdin = match &command.stdin {
            Some(stdin) => Stdio::from(
                stdin
                    .0
                    .try_clone()
                    .map_err(|e| SandboxError::io("cannot duplicate the command's stdin", e))?,
            ),
            None => Stdio::null(),
        };
        let mut collector = Collector::new(command.output_limit, on_output);
        // The one place the local backend starts a process: no isolation by definition, with
        // the environment cleared and set from the caller's allow-list.
        #[allow(clippy::disallowed_methods)]
        let mut process = std::process::Command::new(&command.argv[0]);
        process
            .args(&command.argv[1..])
            .env_clear()
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.root.join(cwd))
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = match process.spawn() {
            Ok(child) => child,
            Err(error) => {
                let message = format!(
                    "warden-sandbox: cannot run {:?}: {error}\n",
                    command.argv[0]
                );
                collector.push(Stream::Stderr, message.as_bytes());
                let (stdout, stderr, truncated) = collector.finish();
                return Ok(CommandOutput {
                    exit_code: Some(if error.kind() == std::io::ErrorKind::NotFound {
                        127
                    } else {
                        126
                    }),
                    signal: None,
                    stdout,
                    stderr,
                    truncated,
                    timed_out: false,
                    duration: started.elapsed(),
                    egress_connections: 0,
                });
            }
        };
        let pid = child.id() as libc::pid_t;
        let pipes = match (child.stdout.take(), child.stderr.take()) {
            (Some(out), Some(err)) => OutputPipes::new(OwnedFd::from(out), OwnedFd::from(err)),
            _ => Err(std::io::Error::other("missing output pipes")),
        };
        let tracked = self.cancellation.track(Target::Group(pid));
        if let Some(switch) = &command.kill {
            switch.arm(Box::new(move || kill_group(pid)));
        }
        let result = (|| -> std::io::Result<(libc::c_int, bool)> {
            let mut pipes = pipes?;
            let pidfd = sys::pidfd_open(pid)?;
            let timed_out =
                pipes.pump_until(&mut collector, &[pidfd.as_fd()], deadline)? == Pumped::Deadline;
            // Whatever the leader did, nothing of the group outlives the command.
            kill_group(pid);
            // Deregistered before the leader is reaped: its pid may be reused after.
            drop(tracked);
            if let Some(switch) = &command.kill {
                switch.disarm();
            }
            let status = sys::wait_for(pid)?;
            pipes.read_to_end(&mut collector, Instant::now() + Duration::from_millis(200))?;
            Ok((status, timed_out))
        })();
        let (status, timed_out) = match result {
            Ok(done) => done,
            Err(error) => {
                if let Some(switch) = &command.kill {
                    switch.disarm();
                }
                kill_group(pid);
                let _ = child.wait();
                return Err(SandboxError::io("local command", error));
            }
        };
        let (exit_code, signal) = sys::decode_status(status);
        let (stdout, stderr, truncated) = collector.finish();
        if command.kill.as_ref().is_some_and(KillSwitch::fired) && !timed_out {
            return Ok(killed_output(stdout, stderr, truncated, started.elapsed()));
        }
        if self.cancellation.is_cancelled() && !timed_out && signal == Some(libc::SIGKILL) {
            return Ok(cancelled_output(
                stdout,
                stderr,
                truncated,
                started.elapsed(),
            ));
        }
        Ok(CommandOutput {
            exit_code,
            signal,
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

    fn close(self: Box<Self>) -> Result<(), SandboxError> {
        crate::spec::remove_scratch(&self.scratch)
    }
}

fn kill_group(pid: libc::pid_t) {
    let _ = sys::kill_process_group(pid);
}

/// Copies a snapshot into a writable plain directory (owner-writable modes).
fn remove_file_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |path: &Path, e| SandboxError::io(format!("cannot copy {}", path.display()), e);
    match std::fs::create_dir(to) {
        // A seed copied first: the snapshot's entries go over it.
        Err(e)
            if e.kind() == std::io::ErrorKind::AlreadyExists
                && std::fs::symlink_metadata(to).is_ok_and(|meta| meta.is_dir()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            remove_file_if_present(to).map_err(|e| fail(to, e))?;
            std::fs::create_dir(to).map_err(|e| fail(to, e))?;
        }
        other => other.map_err(|e| fail(to, e))?,
    }
    for entry in std::fs::read_dir(from).map_err(|e| fail(from, e))? {
        let entry = entry.map_err(|e| fail(from, e))?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| fail(&source, e))?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_symlink() {
            let link = std::fs::read_link(&source).map_err(|e| fail(&source, e))?;
            remove_file_if_present(&target).map_err(|e| fail(&target, e))?;
            std::os::unix::fs::symlink(link, &target).map_err(|e| fail(&target, e))?;
        } else {
            remove_file_if_present(&target).map_err(|e| fail(&target, e))?;
            std::fs::copy(&source, &target).map_err(|e| fail(&source, e))?;
            let mode = std::fs::metadata(&target)
                .map_err(|e| fail(&target, e))?
                .permissions()
                .mode();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode | 0o200))
                .map_err(|e| fail(&target, e))?;
        }
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).map_err(|e| fail(to, e))
}
