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

    /// Like [`TempRepo::git`], with `input` on git's standard input.
    pub fn git_with_input(&self, args: &[&str], input: &[u8]) -> String {
        use std::io::Write;
        let mut child = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run git {args:?}: {e}"));
        let Some(mut stdin) = child.stdin.take() else {
            panic!("git {args:?} has no standard input");
        };
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let output = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait for git {args:?}: {e}"));
        match writer.join() {
            Ok(written) => written.unwrap_or_else(|e| panic!("write to git {args:?}: {e}")),
            Err(_) => panic!("the writer of git {args:?}'s input panicked"),
        }
        assert!(
            output.status.success(),
            "git {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// Adds two hostile branches that are small in git and huge when checked out, without ever
    /// writing their expanded size anywhere: `zeros`, one commit whose tree holds a blob of
    /// `zero_bytes` zero bytes (hashed from a sparse file; it compresses to a few MB), and
    /// `many`, one commit whose tree holds `files` entries that all share one tiny blob. Returns
    /// their commit ids `(zeros, many)`.
    pub fn add_disk_bombs(&self, zero_bytes: u64, files: usize) -> (String, String) {
        let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let sparse = scratch.path().join("zeros");
        std::fs::File::create(&sparse)
            .and_then(|file| file.set_len(zero_bytes))
            .unwrap_or_else(|e| panic!("create a sparse file: {e}"));
        let blob = self.git(&[
            "-c",
            "core.compression=1",
            "hash-object",
            "-w",
            "--no-filters",
            &sparse.to_string_lossy(),
        ]);
        let tree = self.git_with_input(
            &["mktree"],
            format!("100644 blob {blob}\tzeros.bin\n").as_bytes(),
        );
        let zeros = self.git(&["commit-tree", &tree, "-m", "a blob of zeros"]);
        self.git(&["update-ref", "refs/heads/zeros", &zeros]);
        let small = self.git_with_input(&["hash-object", "-w", "--stdin"], b"x\n");
        let mut listing = String::with_capacity(files * 64);
        for index in 0..files {
            listing.push_str(&format!("100644 blob {small}\tf{index:07}\n"));
        }
        let tree = self.git_with_input(&["mktree"], listing.as_bytes());
        let many = self.git(&["commit-tree", &tree, "-m", "many files"]);
        self.git(&["update-ref", "refs/heads/many", &many]);
        (zeros, many)
    }
}
