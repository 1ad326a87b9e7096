//! The one hardened git helper. Every git process Warden starts goes through [`Git`]: a fixed
//! absolute binary (never a `PATH` lookup), a cleared environment, `-c` overrides that switch off
//! everything a repository's own config could make git execute, an allow-list of transport
//! protocols, and a deadline after which git and everything it started are killed.
//!
//! What is deliberately not neutralised here, and why:
//! - `diff.external` and textconv: an empty `-c diff.external=` makes porcelain `git diff` try to
//!   run an empty command. Warden only uses plumbing (`diff-tree`, `cat-file`), which never runs
//!   external diff drivers or textconv; porcelain diff callers must pass `--no-ext-diff --no-textconv`.
//! - `core.gitProxy`: git keeps the first value it reads, and repository config is read before
//!   `-c`, so an override cannot win; it only applies to `git://`, which the allow-list refuses.
//! - `uploadpack.packObjectsHook`: git honours it only from system, global or command-line config,
//!   and system and global config are switched off; an empty override would make upload-pack try
//!   to run an empty command.
//! - `safe.directory`: left at git's default. A repository owned by another user is refused by
//!   git ("dubious ownership") rather than trusted wholesale; run Warden as the repository's owner.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use crate::error::{redact_credentials, RepoError};

/// Where git is looked for, in order. Never `PATH`: a repository or a user's shell set-up must not
/// be able to substitute its own `git`.
const GIT_LOCATIONS: [&str; 3] = ["/usr/bin/git", "/usr/local/bin/git", "/bin/git"];

/// The ssh command git may use: never asks for anything interactively, and overrides any
/// `core.sshCommand` a repository sets.
const SSH_COMMAND: &str = "ssh -o BatchMode=yes";

/// The whole environment of a git process (plus `SSH_AUTH_SOCK` when Warden has one, so ssh URLs
/// can use the operator's agent). `HOME` points nowhere so no user config or credential store is
/// found; system and global config are off; prompts fail instead of waiting. Pathspecs are
/// literal: a file name from a repository is never read as a glob or `:(magic)`.
const HARDENED_ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/bin:/bin"),
    ("HOME", "/nonexistent"),
    ("LANG", "C"),
    ("LC_ALL", "C"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_SYSTEM", "/dev/null"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_ATTR_NOSYSTEM", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_ASKPASS", "/bin/false"),
    ("GIT_SSH_COMMAND", SSH_COMMAND),
    ("GIT_ALLOW_PROTOCOL", "file:https:ssh"),
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    ("GIT_NO_LAZY_FETCH", "1"),
    ("GIT_PAGER", "cat"),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_LITERAL_PATHSPECS", "1"),
];

/// `-c` overrides given before every subcommand. Command-line config is read last, so these win
/// over anything in the repository's `.git/config`.
const HARDENED_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=ssh -o BatchMode=yes",
    "credential.helper=",
    "core.askPass=",
    "core.pager=cat",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "transfer.fsckObjects=true",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// How long git may run before it is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GitTimeouts {
    /// Local queries (`rev-parse`, `config`, `update-ref`, ...).
    pub local: Duration,
    /// Fetches and bulk object streams.
    pub transfer: Duration,
}

impl Default for GitTimeouts {
    fn default() -> GitTimeouts {
        GitTimeouts {
            local: Duration::from_secs(120),
            transfer: Duration::from_secs(600),
        }
    }
}

/// A located, hardened git.
#[derive(Debug, Clone)]
pub struct Git {
    program: PathBuf,
    timeouts: GitTimeouts,
}

/// What a successful git call printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitOutput {
    pub stdout: Vec<u8>,
    /// Standard error, lossily decoded, credentials redacted.
    pub stderr: String,
}

impl GitOutput {
    /// Standard output as text with surrounding whitespace removed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
}

impl Git {
    /// Finds git at the first fixed location that exists and runs, with default timeouts.
    pub fn locate() -> Result<Git, RepoError> {
        Git::locate_with(GitTimeouts::default())
    }

    /// Like [`Git::locate`] with explicit timeouts.
    pub fn locate_with(timeouts: GitTimeouts) -> Result<Git, RepoError> {
        for location in GIT_LOCATIONS {
            let git = Git {
                program: PathBuf::from(location),
                timeouts,
            };
            if git.program.is_file()
                && git
                    .version()
                    .is_ok_and(|version| version.starts_with("git version"))
            {
                return Ok(git);
            }
        }
        Err(RepoError::GitNotFound {
            tried: GIT_LOCATIONS.join(", "),
        })
    }

    /// The absolute path of the git binary in use.
    pub fn program(&self) -> &Path {
        &self.program
    }

    pub fn timeouts(&self) -> GitTimeouts {
        self.timeouts
    }

    /// `git --version`, e.g. `git version 2.47.3`.
    pub fn version(&self) -> Result<String, RepoError> {
        Ok(self.run(Path::new("/"), &["--version"])?.text())
    }

    /// Runs a local git query in `cwd` with the local timeout. A non-zero exit is an error
    /// carrying git's standard error.
    pub fn run(&self, cwd: &Path, args: &[&str]) -> Result<GitOutput, RepoError> {
        self.run_with_timeout(cwd, args, self.timeouts.local)
    }

    /// Runs a network or bulk operation (fetch) with the transfer timeout.
    pub fn run_transfer(&self, cwd: &Path, args: &[&str]) -> Result<GitOutput, RepoError> {
        self.run_with_timeout(cwd, args, self.timeouts.transfer)
    }

    pub fn run_with_timeout(
        &self,
        cwd: &Path,
        args: &[&str],
        timeout: Duration,
    ) -> Result<GitOutput, RepoError> {
        self.run_env(cwd, args, None, timeout)
    }

    /// Runs a local git command against a temporary index (`GIT_INDEX_FILE`), the only
    /// variable a caller may add to the hardened environment: it names a file Warden owns and
    /// makes git run nothing.
    pub fn run_with_index(
        &self,
        cwd: &Path,
        index_file: &Path,
        args: &[&str],
    ) -> Result<GitOutput, RepoError> {
        self.run_env(cwd, args, Some(index_file), self.timeouts.local)
    }

    fn run_env(
        &self,
        cwd: &Path,
        args: &[&str],
        index_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<GitOutput, RepoError> {
        let mut process = self.start(cwd, args, Stdio::null(), timeout, index_file, None)?;
        let mut stdout = Vec::new();
        let read = match process.child.stdout.take() {
            Some(mut pipe) => pipe.read_to_end(&mut stdout).map(drop),
            None => Ok(()),
        };
        let stderr = process.wait()?;
        read.map_err(|source| RepoError::Spawn {
            args: process.args.clone(),
            source,
        })?;
        Ok(GitOutput { stdout, stderr })
    }

    /// Runs a network or bulk operation (fetch with `--progress`) with the transfer timeout,
    /// passing each line git writes to its standard error (progress lines end in `\r` or
    /// `\n`) to `on_line` as it comes. Everything git writes there is also in the result.
    pub fn run_transfer_with_progress(
        &self,
        cwd: &Path,
        args: &[&str],
        on_line: &mut dyn FnMut(&str),
    ) -> Result<GitOutput, RepoError> {
        let (lines, received) = std::sync::mpsc::channel();
        let mut process = self.start(
            cwd,
            args,
            Stdio::null(),
            self.timeouts.transfer,
            None,
            Some(lines),
        )?;
        let stdout_reader = process.child.stdout.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut buffer = Vec::new();
                pipe.read_to_end(&mut buffer).map(|_| buffer)
            })
        });
        // Ends when git closes its standard error (it exited, or the watchdog killed it).
        for line in received {
            on_line(&line);
        }
        let stderr = process.wait()?;
        let stdout = match stdout_reader.map(JoinHandle::join) {
            Some(Ok(Ok(bytes))) => bytes,
            Some(Ok(Err(source))) => {
                return Err(RepoError::Spawn {
                    args: process.args.clone(),
                    source,
                })
            }
            _ => Vec::new(),
        };
        Ok(GitOutput { stdout, stderr })
    }

    /// Starts git with piped standard input and output for a conversation such as
    /// `cat-file --batch`, under the transfer timeout. Call [`GitStream::finish`] to collect the
    /// exit status; dropping the stream kills git.
    pub fn stream(&self, cwd: &Path, args: &[&str]) -> Result<GitStream, RepoError> {
        let process = self.start(
            cwd,
            args,
            Stdio::piped(),
            self.timeouts.transfer,
            None,
            None,
        )?;
        Ok(GitStream {
            process: Some(process),
        })
    }

    fn start(
        &self,
        cwd: &Path,
        args: &[&str],
        stdin: Stdio,
        timeout: Duration,
        index_file: Option<&Path>,
        lines: Option<std::sync::mpsc::Sender<String>>,
    ) -> Result<Supervised, RepoError> {
        let display = display_args(args);
        // The one place Warden constructs a git process: the binary, environment and config
        // overrides are fixed here so no caller can forget them.
        #[allow(clippy::disallowed_methods)]
        let mut command = Command::new(&self.program);
        command.env_clear().envs(HARDENED_ENV.iter().copied());
        if let Some(agent) = std::env::var_os("SSH_AUTH_SOCK") {
            command.env("SSH_AUTH_SOCK", agent);
        }
        if let Some(index_file) = index_file {
            command.env("GIT_INDEX_FILE", index_file);
        }
        for setting in HARDENED_CONFIG {
            command.arg("-c").arg(setting);
        }
        command
            .args(args)
            .current_dir(cwd)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills ssh and helpers along with git.
            .process_group(0);
        let mut child = command.spawn().map_err(|source| RepoError::Spawn {
            args: display.clone(),
            source,
        })?;
        let pid = Pid::from_child(&child);
        let stderr_reader = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut buffer = Vec::new();
                match lines {
                    None => {
                        let _ = pipe.read_to_end(&mut buffer);
                    }
                    Some(lines) => {
                        // What the error of a failed run keeps: the lines that end in `\n`,
                        // not every `\r` update of a progress meter.
                        let mut kept = Vec::new();
                        let mut chunk = [0u8; 4096];
                        while let Ok(read) = pipe.read(&mut chunk) {
                            if read == 0 {
                                break;
                            }
                            buffer.extend_from_slice(&chunk[..read]);
                            while let Some(end) =
                                buffer.iter().position(|b| matches!(b, b'\r' | b'\n'))
                            {
                                let line: Vec<u8> = buffer.drain(..=end).collect();
                                if line.last() == Some(&b'\n') {
                                    kept.extend_from_slice(&line);
                                }
                                let text = String::from_utf8_lossy(&line);
                                let text = redact_credentials(text.trim());
                                if !text.is_empty() {
                                    let _ = lines.send(text);
                                }
                            }
                        }
                        kept.append(&mut buffer);
                        buffer = kept;
                    }
                }
                buffer
            })
        });
        Ok(Supervised {
            child,
            pid,
            watchdog: Watchdog::start(pid, timeout),
            stderr_reader,
            args: display,
            timeout,
        })
    }
}

/// A running git process with piped standard input and output.
#[derive(Debug)]
pub struct GitStream {
    process: Option<Supervised>,
}

impl GitStream {
    /// Git's standard input; dropping it tells git there is nothing more to read.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.process.as_mut()?.child.stdin.take()
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.process.as_mut()?.child.stdout.take()
    }

    /// Closes git's standard input if still held, waits for git to exit and returns its
    /// standard error; a non-zero exit or a timeout is an error.
    pub fn finish(mut self) -> Result<String, RepoError> {
        match self.process.take() {
            Some(mut process) => {
                drop(process.child.stdin.take());
                process.wait()
            }
            None => Ok(String::new()),
        }
    }
}

impl Drop for GitStream {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }
}

/// A git child under a deadline.
#[derive(Debug)]
struct Supervised {
    child: Child,
    pid: Pid,
    watchdog: Watchdog,
    stderr_reader: Option<JoinHandle<Vec<u8>>>,
    args: String,
    timeout: Duration,
}

impl Supervised {
    /// Waits for exit, reaps the child and turns its status into a result.
    fn wait(&mut self) -> Result<String, RepoError> {
        let timed_out = self.watchdog.child_exited(self.pid);
        let status = self.child.wait();
        let stderr = self
            .stderr_reader
            .take()
            .and_then(|reader| reader.join().ok())
            .map(|bytes| redact_credentials(String::from_utf8_lossy(&bytes).trim()))
            .unwrap_or_default();
        if timed_out {
            return Err(RepoError::Timeout {
                args: self.args.clone(),
                timeout: self.timeout,
            });
        }
        let status = status.map_err(|source| RepoError::Spawn {
            args: self.args.clone(),
            source,
        })?;
        if status.success() {
            Ok(stderr)
        } else {
            Err(RepoError::GitFailed {
                args: self.args.clone(),
                code: status.code(),
                status: status.to_string(),
                stderr,
            })
        }
    }

    /// Kills git's process group (unless it already exited) and reaps it.
    fn kill(&mut self) {
        self.watchdog.kill_now(self.pid);
        drop(self.child.stdin.take());
        drop(self.child.stdout.take());
        let _ = self.wait();
    }
}

/// Kills a process group when its deadline passes. The state lock orders the kill against the
/// reap: the watchdog only signals while the child is known not to have been reaped, so the id
/// it signals cannot have been reused.
#[derive(Debug)]
struct Watchdog {
    shared: Arc<(Mutex<WatchState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct WatchState {
    /// The child has exited (observed without reaping it).
    exited: bool,
    timed_out: bool,
}

impl Watchdog {
    fn start(pid: Pid, timeout: Duration) -> Watchdog {
        let shared = Arc::new((Mutex::new(WatchState::default()), Condvar::new()));
        let watched = Arc::clone(&shared);
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + timeout;
            let (lock, wake) = &*watched;
            let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
            while !state.exited {
                let now = Instant::now();
                if now >= deadline {
                    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                    state.timed_out = true;
                    return;
                }
                state = wake
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        });
        Watchdog {
            shared,
            thread: Some(thread),
        }
    }

    /// Blocks until the child has exited, leaving it unreaped, then stops the watchdog.
    /// Returns whether the deadline passed first.
    fn child_exited(&mut self, pid: Pid) -> bool {
        // Success or ECHILD (already reaped) both mean it is gone; only a signal interrupts.
        while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {}
        self.stop()
    }

    /// Kills the group now unless the child has already been seen to exit.
    fn kill_now(&mut self, pid: Pid) {
        let (lock, _) = &*self.shared;
        let state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.exited {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
    }

    fn stop(&mut self) -> bool {
        let (lock, wake) = &*self.shared;
        let timed_out = {
            let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
            state.exited = true;
            wake.notify_all();
            state.timed_out
        };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        timed_out
    }
}

fn display_args(args: &[&str]) -> String {
    redact_credentials(&args.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git() -> Git {
        Git::locate().unwrap()
    }

    #[test]
    fn locates_an_absolute_git_that_runs() {
        let git = git();
        assert!(git.program().is_absolute());
        assert!(git.version().unwrap().starts_with("git version "));
    }

    #[test]
    fn non_zero_exit_is_an_error_with_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let err = git()
            .run(dir.path(), &["rev-parse", "--verify", "HEAD"])
            .unwrap_err();
        match err {
            RepoError::GitFailed { code, stderr, .. } => {
                assert_eq!(code, Some(128));
                assert!(stderr.contains("not a git repository"), "{stderr}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn environment_and_config_are_hardened() {
        let dir = tempfile::tempdir().unwrap();
        let git = git();
        let config = git.run(dir.path(), &["config", "--list"]).unwrap().text();
        for setting in HARDENED_CONFIG {
            let (key, value) = setting.split_once('=').unwrap();
            let line = format!("{}={value}", key.to_ascii_lowercase());
            assert!(
                config.lines().any(|l| l == line),
                "{line} missing in {config}"
            );
        }
        // A shell alias prints the environment git hands to anything it runs.
        let env = git
            .run(dir.path(), &["-c", "alias.showenv=!env", "showenv"])
            .unwrap()
            .text();
        for (key, value) in HARDENED_ENV {
            let line = format!("{key}={value}");
            // git puts its own exec-path in front of PATH for what it runs.
            let found = env.lines().any(|l| {
                l == line
                    || (*key == "PATH"
                        && l.starts_with("PATH=")
                        && l.ends_with(&format!(":{value}")))
            });
            assert!(found, "{line} missing in {env}");
        }
        // Nothing of the caller's environment leaks through (cargo sets these for tests).
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(!env.contains("CARGO_"), "{env}");
    }

    #[test]
    fn a_timeout_kills_git_and_everything_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let err = git()
            .run_with_timeout(
                dir.path(),
                &["-c", "alias.slow=!sleep 30", "slow"],
                Duration::from_millis(300),
            )
            .unwrap_err();
        assert!(matches!(err, RepoError::Timeout { .. }), "{err:?}");
        // The shell alias holds stdout open through `sleep`: returning at all means the whole
        // process group died, not just git.
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_dropped_stream_kills_git() {
        let dir = tempfile::tempdir().unwrap();
        let mut stream = git()
            .stream(dir.path(), &["-c", "alias.slow=!sleep 30", "slow"])
            .unwrap();
        let stdout = stream.take_stdout().unwrap();
        let started = Instant::now();
        drop(stream);
        drop(stdout);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn disallowed_protocols_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let git = git();
        git.run(dir.path(), &["init", "-q", "--bare", "m.git"])
            .unwrap();
        let mirror = dir.path().join("m.git");
        for url in [
            "ext::sh -c true",
            "http://127.0.0.1:9/x",
            "git://127.0.0.1:9/x",
        ] {
            let err = git
                .run(&mirror, &["fetch", "--end-of-options", url, "HEAD"])
                .unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("not allowed") || text.contains("unsupported"),
                "{url}: {text}"
            );
        }
    }
}
