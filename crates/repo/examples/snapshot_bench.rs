//! Benchmark: cold `RepoStore::snapshot` of a 3,000-file repository against
//! `git archive <commit> | tar -x` from the same mirror, measured in the same run, plus the cost
//! of reusing a finished snapshot. Run with
//! `cargo run --release -p warden-repo --example snapshot_bench [iterations] [scratch-dir]`;
//! the scratch dir (default: the system temp dir) holds each iteration's `WARDEN_HOME`, so
//! `/dev/shm` shows the CPU cost without the file system's inode-creation cost. `--smoke`: 200
//! files, one round, 5 reuses. Every round checks the snapshot holds the archive's files.

// The reference pipeline (`git archive | tar -x`) is spawned directly: it is what is measured
// against, not something Warden runs.
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warden_repo::{RepoSpec, RepoStore};
use warden_test_support::git_fixture::TempRepo;

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let positional: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--smoke")
        .collect();
    let iterations: usize = positional
        .first()
        .map(|n| n.parse().expect("iterations must be a number"))
        .unwrap_or(if smoke { 1 } else { 9 });
    let scratch = positional
        .get(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let files = if smoke { 200 } else { 3_000 };
    let reuses = if smoke { 5 } else { 200 };
    let (repo, bytes) = build_repo(files);
    let spec = RepoSpec::parse(repo.path().to_str().unwrap(), Path::new("/")).unwrap();
    println!(
        "repository: {files} files, {:.1} MiB, {iterations} iterations, under {}",
        bytes as f64 / (1024.0 * 1024.0),
        scratch.display()
    );

    let mut warden = Vec::new();
    let mut reference = Vec::new();
    // One untimed round of each first, so both start from a warm page cache.
    for round in 0..=iterations {
        let home = tempfile::tempdir_in(&scratch).unwrap();
        let store = RepoStore::open(home.path()).unwrap();
        let pinned = store.pin(&spec).unwrap();

        let started = Instant::now();
        let snapshot = store.snapshot(&pinned).unwrap();
        let snapshot_time = started.elapsed();
        assert!(!snapshot.reused);

        let out = home.path().join("archive");
        std::fs::create_dir(&out).unwrap();
        let started = Instant::now();
        archive_into(&pinned.mirror, &pinned.commit, &out);
        let archive_time = started.elapsed();
        let listed = list_files(&snapshot.root);
        assert_eq!(listed.len(), files, "files in the snapshot");
        assert_eq!(
            listed,
            list_files(&out),
            "the snapshot differs from git archive"
        );

        if round > 0 {
            warden.push(snapshot_time);
            reference.push(archive_time);
        }
        make_writable(home.path());
    }

    let home = tempfile::tempdir_in(&scratch).unwrap();
    let store = RepoStore::open(home.path()).unwrap();
    let pinned = store.pin(&spec).unwrap();
    store.snapshot(&pinned).unwrap();
    let mut reuse = Vec::new();
    for _ in 0..reuses {
        let started = Instant::now();
        let snapshot = store.snapshot(&pinned).unwrap();
        reuse.push(started.elapsed());
        assert!(snapshot.reused);
    }
    make_writable(home.path());

    let (warden, reference, reuse) = (median(warden), median(reference), median(reuse));
    println!(
        "cold snapshot (median):        {:8.1} ms",
        warden.as_secs_f64() * 1e3
    );
    println!(
        "git archive | tar -x (median): {:8.1} ms",
        reference.as_secs_f64() * 1e3
    );
    println!(
        "ratio snapshot / archive|tar:  {:8.2}x",
        warden.as_secs_f64() / reference.as_secs_f64()
    );
    println!(
        "warm reuse (median):           {:8.1} µs",
        reuse.as_secs_f64() * 1e6
    );
}

/// 3,000 files of 32 B to 64 KiB (log-uniform, like source trees), in nested directories,
/// some executable; deterministic.
fn build_repo(files: usize) -> (TempRepo, u64) {
    let repo = TempRepo::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut total = 0u64;
    for i in 0..files {
        let depth = (next() % 4) as usize;
        let mut path = String::new();
        for level in 0..depth {
            path.push_str(&format!("d{}_{}/", level, next() % 6));
        }
        path.push_str(&format!("file_{i}.rs"));
        // Log-uniform sizes: 2^5 .. 2^16 bytes.
        let size = 1usize << (5 + next() % 11);
        let size = size + (next() as usize % size);
        let line = format!("// line of file {i} with some text to fill it {}\n", next());
        let content: String = line.repeat(size / line.len() + 1)[..size].to_string();
        total += size as u64;
        repo.write(&path, &content);
        if i % 37 == 0 {
            let full = repo.path().join(&path);
            std::fs::set_permissions(full, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    repo.commit("bench");
    (repo, total)
}

fn archive_into(git_dir: &Path, commit: &str, out: &Path) {
    let mut archive = Command::new("/usr/bin/git")
        .arg(format!("--git-dir={}", git_dir.display()))
        .args(["archive", "--format=tar", commit])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(out)
        .stdin(archive.stdout.take().unwrap())
        .status()
        .unwrap();
    assert!(status.success() && archive.wait().unwrap().success());
}

/// Every file under `dir`: its path relative to `dir`, size and whether it is executable.
fn list_files(dir: &Path) -> Vec<(std::path::PathBuf, u64, bool)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().to_path_buf();
                found.push((relative, meta.len(), meta.permissions().mode() & 0o111 != 0));
            }
        }
    }
    found.sort();
    found
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Snapshots are read-only; make them removable again before the temp dir is dropped.
fn make_writable(dir: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if meta.is_dir() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for entry in std::fs::read_dir(dir).unwrap() {
            make_writable(&entry.unwrap().path());
        }
    }
}
