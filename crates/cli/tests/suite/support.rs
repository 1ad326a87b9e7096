//! Running the `warden` binary in a clean environment with its own `WARDEN_HOME`.

#![allow(clippy::disallowed_methods)] // the tests spawn the binary under test

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Warden {
    pub home: tempfile::TempDir,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

impl Warden {
    pub fn new() -> Warden {
        Warden {
            home: tempfile::tempdir().unwrap(),
            env: vec![],
            cwd: None,
        }
    }

    pub fn faux() -> Warden {
        Warden::new().with("WARDEN_MODEL", "faux")
    }

    /// A warden talking to a scripted OpenAI-compatible server.
    pub fn openai(base: &str) -> Warden {
        Warden::new()
            .with("WARDEN_MODEL", "openai:gpt-test")
            .with("OPENAI_BASE_URL", &format!("{base}/v1"))
            .with("OPENAI_API_KEY", "sk-test-key")
            .with("WARDEN_RETRY_BASE_MS", "5")
    }

    pub fn anthropic(base: &str) -> Warden {
        Warden::new()
            .with("WARDEN_MODEL", "anthropic:claude-test")
            .with("ANTHROPIC_BASE_URL", base)
            .with("ANTHROPIC_API_KEY", "sk-ant-test")
            .with("WARDEN_RETRY_BASE_MS", "5")
    }

    pub fn with(mut self, key: &str, value: &str) -> Warden {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn in_dir(mut self, dir: &Path) -> Warden {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let Output {
            status,
            stdout,
            stderr,
        } = self.command(args).output().expect("warden runs");
        Run {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// Runs `warden args…` with `input` on stdin (a pipe, not a terminal).
    pub fn run_with_stdin(&self, args: &[&str], input: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("warden runs");
        child
            .stdin
            .take()
            .expect("a stdin pipe")
            .write_all(input.as_bytes())
            .expect("write stdin");
        let output = child.wait_with_output().expect("warden runs");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs `warden args…` with a terminal as its standard input and output (a pseudo-terminal
    /// opened by util-linux `script`) and `env` added; the output as the terminal showed it.
    pub fn run_on_terminal(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_warden"))
            .chain(args.iter().copied())
            .map(|arg| format!("'{}'", arg.replace('\'', "'\\''")))
            .collect();
        let mut command = Command::new("script");
        command.args(["-qec", &quoted.join(" "), "/dev/null"]);
        let mut command = self.configure(command);
        command.envs(env.iter().copied());
        let Output {
            status,
            stdout,
            stderr,
        } = command
            .stdin(std::process::Stdio::null())
            .output()
            .expect("script runs (util-linux)");
        Run {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).replace("\r\n", "\n"),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// The command, ready to spawn, for tests that need the process itself.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command.args(args);
        self.configure(command)
    }

    /// [`Warden::command`] started through `sh` with its open-file limit (soft and hard) set
    /// to `limit` first.
    pub fn command_with_open_files(&self, args: &[&str], limit: u64) -> Command {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_warden"))
            .args(args);
        self.configure(command)
    }

    fn configure(&self, mut command: Command) -> Command {
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("WARDEN_HOME", self.home.path())
            .env("HOME", self.home.path());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        command
    }
}

/// Sends SIGINT to a process, as Ctrl-C in a terminal would.
pub fn interrupt(pid: u32) {
    signal(pid, "INT");
}

/// Sends signal `name` (`TERM`, `INT`) to a process.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The paths a proposal (a result's `proposal`) changes, sorted.
pub fn proposal_paths(proposal: &serde_json::Value) -> Vec<String> {
    let mut paths: Vec<String> = proposal["files"]
        .as_array()
        .unwrap_or_else(|| panic!("a proposal without files: {proposal}"))
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    paths
}

/// How many model calls the in-process store's usage ledger holds per role, by role.
pub fn ledger_roles(warden: &Warden) -> Vec<(String, i64)> {
    let db = rusqlite::Connection::open(warden.home.path().join("local.db")).unwrap();
    let mut statement = db
        .prepare("SELECT role, COUNT(*) FROM usage_ledger GROUP BY role ORDER BY role")
        .unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}
