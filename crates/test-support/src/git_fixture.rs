//! Temporary git repositories built with the system git, for tests. Each one lives in its own
//! temp dir with a local identity and no signing, and ignores the machine's system and global git
//! config so tests behave the same everywhere.

// Test-only code: it drives the system git directly on purpose, to build fixtures independently
// of the hardened helper under test.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

/// A real git repository in a temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempRepo {
    dir: tempfile::TempDir,
}

impl Default for TempRepo {
    fn default() -> TempRepo {
        TempRepo::new()
    }
}

impl TempRepo {
    /// `git init -q -b main` with `user.name`, `user.email` and `commit.gpgsign=false` set locally.
    pub fn new() -> TempRepo {
        let repo = TempRepo {
            dir: tempfile::tempdir()
                .unwrap_or_else(|e| panic!("create a temp dir for a git repository: {e}")),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.git(&["config", "user.name", "Warden Test"]);
        repo.git(&["config", "user.email", "test@warden.invalid"]);
        repo.git(&["config", "commit.gpgsign", "false"]);
        repo.git(&["config", "tag.gpgsign", "false"]);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `content` to `rel` (relative to the work tree), creating parent directories.
    pub fn write(&self, rel: &str, content: &str) -> &Self {
        let path = self.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("create parent directories of {rel}: {e}"));
        }
        std::fs::write(&path, content).unwrap_or_else(|e| panic!("write {rel}: {e}"));
        self
    }

    /// `git add -A` then `git commit`; returns the new commit's full id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// Runs git in the repository and returns its standard output, trimmed. Panics on failure.
    pub fn git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .output()
            .unwrap_or_else(|e| panic!("run git {args:?}: {e}"));
        assert!(
            output.status.success(),
            "git {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }
}
