//! Benchmark: the work-tree comparison behind the notice of a pin of `HEAD` ("N uncommitted
//! files are not included"), with git's index stat shortcut and without it (the index moved
//! aside, so every tracked file is hashed as a `PATH@worktree` snapshot hashes it), measured in
//! the same run on a generated repository, interleaved round by round. A pin with an explicit
//! revision (`PATH@HEAD`, no comparison at all) is the baseline the comparison's own cost is
//! taken from. Run with
//! `cargo run --release -p warden-repo --example worktree_bench [files] [mean-bytes] [rounds] [scratch-dir]`
//! (defaults: 20,000 files of 8 KiB on average, 7 rounds, the system temp dir). The page cache
//! is warm for every variant (one untimed round of each first): a cold cache makes hashing
//! slower still, the shortcut reads no file content at all. `--smoke`: 200 files of 1 KiB, one
//! round; a notice that differs with and without the index fails the run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use warden_repo::{RepoSpec, RepoStore, WorkTree};
use warden_test_support::git_fixture::TempRepo;

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let positional: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--smoke")
        .collect();
    let arg = |n: usize| positional.get(n - 1);
    let (files, mean, rounds) = if smoke {
        (200, 1024, 1)
    } else {
        (20_000, 8192, 7)
    };
    let files: usize = arg(1).map_or(files, |n| n.parse().expect("files must be a number"));
    let mean: usize = arg(2).map_or(mean, |n| n.parse().expect("mean-bytes must be a number"));
    let rounds: usize = arg(3).map_or(rounds, |n| n.parse().expect("rounds must be a number"));
    let scratch = arg(4).map_or_else(std::env::temp_dir, std::path::PathBuf::from);

    let started = Instant::now();
    let (repo, bytes) = build_repo(files, mean);
    println!(
        "repository: {files} files, {:.1} MiB, built in {:.1} s; {rounds} rounds",
        bytes as f64 / (1024.0 * 1024.0),
        started.elapsed().as_secs_f64()
    );
    let path = repo.path().to_str().unwrap().to_string();
    let head = RepoSpec::parse(&path, Path::new("/")).unwrap();
    let explicit = RepoSpec::parse(&format!("{path}@HEAD"), Path::new("/")).unwrap();
    let index = repo.path().join(".git/index");
    let aside = repo.path().join(".git/index.aside");

    let home = tempfile::tempdir_in(&scratch).unwrap();
    let store = RepoStore::open(home.path()).unwrap();
    let pin = |spec: &RepoSpec| {
        let started = Instant::now();
        let pinned = store.pin(spec).unwrap();
        (started.elapsed(), pinned.work_tree)
    };
    let (mut shortcut, mut hashed, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
    let (mut with_index, mut without_index) = (None, None);
    // Round 0 is untimed: the mirror is filled and the page cache warmed for every variant.
    for round in 0..=rounds {
        let (time, work_tree) = pin(&head);
        with_index = Some(work_tree);
        let shortcut_time = time;

        std::fs::rename(&index, &aside).unwrap();
        let (time, work_tree) = pin(&head);
        std::fs::rename(&aside, &index).unwrap();
        without_index = Some(work_tree);
        let hashed_time = time;

        let (baseline_time, _) = pin(&explicit);
        if round > 0 {
            shortcut.push(shortcut_time);
            hashed.push(hashed_time);
            baseline.push(baseline_time);
        }
    }
    let show = |w: &Option<Option<WorkTree>>| format!("{:?}", w.as_ref().unwrap());
    println!(
        "notice with the index:    {}\nnotice without the index: {}",
        show(&with_index),
        show(&without_index)
    );
    if with_index != without_index {
        eprintln!("FAILED: the notices with and without the index differ");
        std::process::exit(1);
    }
    // build_repo modifies 10 committed files and adds 5.
    let expected = WorkTree::Uncommitted {
        files: files.min(10) + 5,
    };
    if with_index != Some(Some(expected.clone())) {
        eprintln!("FAILED: the notice should be {expected:?}");
        std::process::exit(1);
    }

    let (shortcut, hashed, baseline) = (median(shortcut), median(hashed), median(baseline));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "pin of PATH@HEAD, no comparison (median):   {:8.1} ms",
        ms(baseline)
    );
    println!(
        "pin of PATH, index shortcut (median):       {:8.1} ms",
        ms(shortcut)
    );
    println!(
        "pin of PATH, every file hashed (median):    {:8.1} ms",
        ms(hashed)
    );
    let compare_shortcut = shortcut.saturating_sub(baseline);
    let compare_hashed = hashed.saturating_sub(baseline);
    println!(
        "comparison alone (pin minus baseline):      {:8.1} ms with the shortcut, {:.1} ms hashing",
        ms(compare_shortcut),
        ms(compare_hashed)
    );
    println!(
        "ratio, same run: whole pin {:.2}x, comparison alone {:.2}x",
        hashed.as_secs_f64() / shortcut.as_secs_f64(),
        compare_hashed.as_secs_f64() / compare_shortcut.as_secs_f64().max(1e-6)
    );
}

/// `files` files in directories of 100, of 1 to `2 * mean` bytes of pseudo-random text,
/// committed; then 10 modified and 5 new, so the notice has something to count.
fn build_repo(files: usize, mean: usize) -> (TempRepo, u64) {
    let repo = TempRepo::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut total = 0u64;
    let mut content = |next: &mut dyn FnMut() -> u64| {
        let len = 1 + (next() as usize) % (2 * mean.max(1));
        let text: String = (0..len)
            .map(|_| char::from(b'a' + (next() % 26) as u8))
            .collect();
        total += len as u64;
        text
    };
    for n in 0..files {
        let text = content(&mut next);
        repo.write(&format!("d{:03}/f{n:06}.txt", n / 100), &text);
    }
    repo.commit("generated");
    for n in (0..files).step_by((files / 10).max(1)).take(10) {
        let text = content(&mut next);
        repo.write(&format!("d{:03}/f{n:06}.txt", n / 100), &text);
    }
    for n in 0..5 {
        repo.write(&format!("new/untracked{n}.txt"), "new\n");
    }
    (repo, total)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}
