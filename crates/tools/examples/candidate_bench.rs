//! Benchmark: opening a change task's copy-on-write view (linux backend) over the snapshot of a
//! 3,000-file repository, writing 10 files through `WritableRoot`, and building the candidate
//! tree (temporary index seeded from the base tree, blobs verified, `write-tree`); then, for
//! checks, materializing that candidate tree. Run with
//! `cargo run --release -p warden-tools --example candidate_bench [iterations]` (needs the
//! linux sandbox backend available, like `warden doctor` reports). `--smoke`: 300 files, one
//! timed round, skipped with a line where the linux backend is unavailable; every round checks
//! the materialized tree holds the round's writes.

#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use warden_repo::candidate::{
    build_candidate_tree, materialize_tree, CandidateInput, WritableRoot,
};
use warden_repo::{RepoSpec, RepoStore};
use warden_sandbox::{Backend, SandboxConfig, ViewSpec};
use warden_test_support::git_fixture::TempRepo;

const CHANGED: usize = 10;

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let iterations: usize = std::env::args()
        .skip(1)
        .find(|a| a != "--smoke")
        .map(|n| n.parse().expect("iterations must be a number"))
        .unwrap_or(if smoke { 1 } else { 15 });
    let files = if smoke { 300 } else { 3_000 };
    let sandbox = match warden_sandbox::select(Backend::Linux, &SandboxConfig::default()) {
        Ok(sandbox) => sandbox,
        Err(error) if smoke => {
            println!("skipped: the linux backend is unavailable: {error}");
            return;
        }
        Err(error) => panic!("the linux sandbox backend is needed for this benchmark: {error}"),
    };
    let repo = build_repo(files);
    let home = tempfile::tempdir().unwrap();
    let store = RepoStore::open(home.path()).unwrap();
    let spec = RepoSpec::parse(repo.path().to_str().unwrap(), Path::new("/")).unwrap();
    let pinned = store.pin(&spec).unwrap();
    let snapshot = store.snapshot(&pinned).unwrap();

    let (mut open_times, mut build_times, mut totals, mut materialize_times) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=iterations {
        let scratch = home.path().join(format!("task-{round}"));
        std::fs::create_dir_all(&scratch).unwrap();
        let started = Instant::now();
        let view = sandbox
            .open(&ViewSpec {
                lower: vec![("bench".into(), snapshot.root.clone())],
                writable: true,
                scratch_dir: scratch.join("view"),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            })
            .unwrap();
        let opened = started.elapsed();
        let root = WritableRoot::open(view.root()).unwrap();
        // Half modify existing top-level files, half add new ones in a new directory.
        for i in 0..CHANGED / 2 {
            root.write(
                &format!("file_{}.rs", i * 97),
                format!("// changed {round} {i}\n").as_bytes(),
            )
            .unwrap();
            root.write(&format!("new/dir_{i}/added.rs"), b"// new\n")
                .unwrap();
        }
        let build_started = Instant::now();
        let candidate = build_candidate_tree(CandidateInput {
            git: store.git(),
            mirror: &pinned.mirror,
            base_tree: &pinned.tree,
            upper: &scratch.join("view/upper"),
            merged: view.root(),
            scratch: &scratch.join("work"),
        })
        .unwrap();
        let built = build_started.elapsed();
        let total = started.elapsed();
        assert_eq!(candidate.written.len(), CHANGED, "{candidate:?}");
        let materialize_started = Instant::now();
        materialize_tree(
            store.git(),
            &pinned.mirror,
            &scratch.join("work"),
            &pinned.commit,
            &candidate.tree,
            &scratch.join("tree"),
        )
        .unwrap();
        let materialized = materialize_started.elapsed();
        let tree = scratch.join("tree");
        assert_eq!(
            std::fs::read_to_string(tree.join("file_0.rs")).unwrap(),
            format!("// changed {round} 0\n")
        );
        assert_eq!(
            std::fs::read_to_string(tree.join("new/dir_0/added.rs")).unwrap(),
            "// new\n"
        );
        view.close().unwrap();
        if round > 0 {
            open_times.push(opened);
            build_times.push(built);
            totals.push(total);
            materialize_times.push(materialized);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("repository: {files} files, {CHANGED} changed files per round, {iterations} rounds");
    println!(
        "open writable view (median):           {:7.1} ms",
        ms(median(open_times))
    );
    println!(
        "build candidate tree (median):         {:7.1} ms",
        ms(median(build_times))
    );
    println!(
        "open + writes + candidate (median):    {:7.1} ms",
        ms(median(totals))
    );
    println!(
        "materialize candidate for checks (median): {:7.1} ms",
        ms(median(materialize_times))
    );
    make_writable(home.path());
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&entry.path());
            }
        }
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// `files` files (32 B to 8 KiB) in nested directories; deterministic.
fn build_repo(files: usize) -> TempRepo {
    let repo = TempRepo::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..files {
        let depth = if i % 97 == 0 {
            0
        } else {
            (next() % 4) as usize
        };
        let mut path = String::new();
        for level in 0..depth {
            path.push_str(&format!("d{}_{}/", level, next() % 6));
        }
        path.push_str(&format!("file_{i}.rs"));
        let size = 32 + (next() as usize % 8192);
        let line = format!("// line of file {i} {}\n", next());
        repo.write(&path, &line.repeat(size / line.len() + 1)[..size]);
    }
    repo.commit("bench");
    repo
}
