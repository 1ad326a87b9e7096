//! The cache budget of mirrors, snapshots and dependency caches: last-use times, in-use locks
//! and eviction.
//!
//! - **Last use** of a mirror is the modification time of `mirrors/<mirror>.use`, of a snapshot
//!   that of `snapshots/<mirror>/<commit>.use`; [`RepoStore::hold_mirror`] and
//!   [`RepoStore::hold_snapshot`] touch them. Without one (a store used without holding), the
//!   mirror directory's or the `.done` marker's time stands in.
//! - **In use**: the same calls take a shared `flock` on that file, kept by the returned
//!   [`InUse`] for as long as the task runs. Eviction takes the exclusive lock without waiting
//!   and skips what it cannot get; a process that dies releases its locks with it, so a crash
//!   never pins the cache and never lets eviction take what a live task holds. A holder that
//!   arrives during an eviction waits for it, then finds the snapshot gone and rebuilds it.
//! - **Eviction** ([`RepoStore::gc`]) removes, oldest last use first, what is neither in use,
//!   nor used within [`CachePolicy::keep_recent`], nor (for mirrors) holding proposals
//!   (`refs/warden/proposals/*`: a decision or a follow-up may still need them), nor
//!   [`Retained`] (what tasks still need: the store itself cannot know, the service tells it
//!   through [`RepoStore::set_retained`]), until the total is at most
//!   [`CachePolicy::max_bytes`]. A mirror can hold commits that exist nowhere else — a
//!   `PATH@worktree` snapshot, marked under `refs/warden/worktree/` — so evicting one a retry
//!   or a follow-up pins into would lose them for good: a mirror is kept for every task that
//!   is not finished, and for a finished one (which can still be retried or followed up) while
//!   it holds the task's commit as such a snapshot; other commits are fetched again from the
//!   source. A snapshot can be rebuilt, but is kept for unfinished tasks on the same grounds. A snapshot loses its `.done` marker first, so a crash half-way
//!   leaves debris the next materialization clears, never a snapshot taken for complete. The
//!   `.use` and `.lock` files stay (empty): deleting a lock file someone waits on would let two
//!   processes hold "the" lock at once.
//! - **Dependency caches** (`caches/<key>`, written by the engine's toolchain module) count
//!   toward the same limit and go the same way: their one lock, `caches/<key>.lock`, is held
//!   shared by every task using the cache and exclusively by the prepare filling it (eviction
//!   skips either); its modification time is the last use; `caches/<key>.complete` goes
//!   first.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use crate::cache::CachePolicy;
use crate::cache::{disk_usage, record_size, remove_tree};
use crate::error::RepoError;
use crate::retained::Retained;
use crate::spec::RepoSpec;
use crate::store::{PinnedRepo, RepoStore};

/// What a cache entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GcKind {
    Mirror,
    Snapshot,
    /// A dependency cache (`caches/<key>`).
    Cache,
}

/// One mirror or snapshot as eviction saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GcEntry {
    pub kind: GcKind,
    pub path: PathBuf,
    /// Bytes on disk (allocated blocks).
    pub bytes: u64,
    /// Last use, seconds since the epoch.
    pub last_used: u64,
    /// Why it was kept (`in_use`, `recent`, `holds_proposals`, `needed_by_task`), absent for removed entries and
    /// for entries not needed to get under the limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<&'static str>,
}

/// What [`RepoStore::gc`] did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub max_bytes: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub freed_bytes: u64,
    pub removed: Vec<GcEntry>,
    /// Entries eviction wanted but had to keep, with the reason.
    pub kept: Vec<GcEntry>,
}

/// Whether `retained` keeps `entry` from eviction.
fn keeps(retained: &Retained, entry: &GcEntry) -> bool {
    match entry.kind {
        GcKind::Mirror => {
            retained.mirrors.contains(&entry.path)
                || retained
                    .commits
                    .get(&entry.path)
                    .is_some_and(|commits| holds_work_tree_commit(&entry.path, commits))
        }
        GcKind::Snapshot => retained.snapshots.contains(&entry.path),
        // A dependency cache is keyed by what prepare reads and filled again when missing;
        // a task records no key to keep.
        GcKind::Cache => false,
    }
}

/// Shared locks keeping a task's mirror and snapshots from eviction until dropped.
#[derive(Debug, Default)]
pub struct InUse {
    files: Vec<File>,
}

/// Opens (creating) a use-marker, touches it and takes a shared lock, waiting for an eviction
/// in progress.
fn hold(path: &Path) -> Result<File, RepoError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(RepoError::io("open", path))?;
    file.lock_shared().map_err(RepoError::io("lock", path))?;
    file.set_modified(SystemTime::now())
        .map_err(RepoError::io("touch", path))?;
    Ok(file)
}

impl RepoStore {
    /// Marks the mirror of `spec` as in use (and used now) until the guard is dropped. Take it
    /// before [`RepoStore::pin`], so the mirror cannot go between pinning and use.
    pub fn hold_mirror(&self, spec: &RepoSpec) -> Result<InUse, RepoError> {
        let path = self.mirror_path(spec).with_extension("use");
        Ok(InUse {
            files: vec![hold(&path)?],
        })
    }

    /// Adds `pinned`'s snapshot to `held`. Take it before [`RepoStore::snapshot`].
    pub fn hold_snapshot(&self, pinned: &PinnedRepo, held: &mut InUse) -> Result<(), RepoError> {
        let dir = self.snapshot_dir(pinned)?;
        std::fs::create_dir_all(&dir).map_err(RepoError::io("create directory", &dir))?;
        held.files
            .push(hold(&dir.join(format!("{}.use", pinned.commit)))?);
        Ok(())
    }

    /// Adds `spec`'s mirror, and the snapshot of `commit` when given, to `retained`.
    pub fn retain(&self, spec: &RepoSpec, commit: Option<&str>, retained: &mut Retained) {
        let mirror = self.mirror_path(spec);
        if let Some(commit) = commit {
            let name = mirror
                .file_name()
                .and_then(|n| n.to_str())
                .map(|n| n.strip_suffix(".git").unwrap_or(n));
            // Only a full hex id is a snapshot directory's name.
            if let (Some(name), Some(_)) = (name, crate::materialize::ObjectFormat::of_id(commit)) {
                retained
                    .snapshots
                    .insert(self.home().join("snapshots").join(name).join(commit));
            }
        }
        retained.mirrors.insert(mirror);
    }

    /// Adds `commit` of `spec`'s repository, recorded by a finished task that may still be
    /// retried or followed up, to `retained`: its mirror stays while it holds `commit` as a
    /// `PATH@worktree` snapshot (which exists nowhere else); any other commit can be fetched
    /// again from the source, so it keeps nothing.
    pub fn retain_commit(&self, spec: &RepoSpec, commit: &str, retained: &mut Retained) {
        if crate::materialize::ObjectFormat::of_id(commit).is_none() {
            return;
        }
        retained
            .commits
            .entry(self.mirror_path(spec))
            .or_default()
            .insert(commit.to_string());
    }

    /// Replaces what eviction keeps for tasks ([`RepoStore::gc`] and the eviction before a
    /// snapshot is written, in every clone of this store).
    pub fn set_retained(&self, retained: Retained) {
        match self.retained.lock() {
            Ok(mut held) => *held = retained,
            Err(poisoned) => *poisoned.into_inner() = retained,
        }
    }

    fn retained(&self) -> Retained {
        match self.retained.lock() {
            Ok(held) => held.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Removes unused mirrors and snapshots, oldest last use first, until they take at most
    /// `policy.max_bytes`; `dry_run` only reports what would go. What
    /// [`RepoStore::set_retained`] last named stays.
    pub fn gc(&self, policy: &CachePolicy, dry_run: bool) -> Result<GcReport, RepoError> {
        let retained = self.retained();
        let mut entries = self.cache_entries()?;
        let before: u64 = entries.iter().map(|e| e.entry.bytes).sum();
        let mut report = GcReport {
            dry_run,
            max_bytes: policy.max_bytes,
            bytes_before: before,
            bytes_after: before,
            ..GcReport::default()
        };
        entries.sort_by_key(|e| e.entry.last_used);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        for candidate in entries {
            if report.bytes_after <= policy.max_bytes {
                break;
            }
            let mut entry = candidate.entry.clone();
            if now.saturating_sub(entry.last_used) < policy.keep_recent.as_secs() {
                entry.kept = Some("recent");
                report.kept.push(entry);
                continue;
            }
            if entry.kind == GcKind::Mirror && holds_proposals(&entry.path) {
                entry.kept = Some("holds_proposals");
                report.kept.push(entry);
                continue;
            }
            if keeps(&retained, &entry) {
                entry.kept = Some("needed_by_task");
                report.kept.push(entry);
                continue;
            }
            // Nobody holds it, nobody pins into or materializes it: ours until the locks go. A
            // dry run only looks: it creates no lock file (that would change the last use it
            // sorts by).
            if dry_run {
                let built_free = match &candidate.build_lock {
                    Some(lock) => is_free(lock)?,
                    None => true,
                };
                if !(is_free(&candidate.use_file)? && built_free) {
                    entry.kept = Some("in_use");
                    report.kept.push(entry);
                    continue;
                }
            } else {
                let built = match &candidate.build_lock {
                    Some(lock) => try_exclusive(lock)?.map(Some),
                    None => Some(None),
                };
                let locks = match (try_exclusive(&candidate.use_file)?, built) {
                    (Some(used), Some(built)) => (used, built),
                    _ => {
                        entry.kept = Some("in_use");
                        report.kept.push(entry);
                        continue;
                    }
                };
                candidate.remove()?;
                drop(locks);
            }
            report.bytes_after -= entry.bytes;
            report.freed_bytes += entry.bytes;
            report.removed.push(entry);
        }
        Ok(report)
    }

    fn cache_entries(&self) -> Result<Vec<Candidate>, RepoError> {
        let mut found = Vec::new();
        let mirrors = self.home().join("mirrors");
        for path in list(&mirrors)? {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            // Staging mirrors are `.tmp-<name>-<pid>`: only finished ones end in `.git`.
            if !name.ends_with(".git") || !path.is_dir() {
                continue;
            }
            let use_file = path.with_extension("use");
            found.push(Candidate {
                entry: GcEntry {
                    kind: GcKind::Mirror,
                    bytes: disk_usage(&path),
                    last_used: modified(&use_file).or_else(|| modified(&path)).unwrap_or(0),
                    path: path.clone(),
                    kept: None,
                },
                build_lock: Some(path.with_extension("lock")),
                use_file,
                marker: None,
            });
        }
        found.extend(cache_candidates(&self.home().join("caches"))?);
        for dir in list(&self.home().join("snapshots"))? {
            if dir.is_dir() {
                found.extend(snapshot_candidates(&dir)?);
            }
        }
        Ok(found)
    }
}

impl RepoStore {
    /// Removes the snapshots of `pinned`'s repository (its mirror's snapshots) but the `keep`
    /// used most recently and `pinned`'s own, skipping any in use or being written, exactly as
    /// [`RepoStore::gc`] removes one. What was removed.
    pub fn prune_snapshots(
        &self,
        pinned: &PinnedRepo,
        keep: usize,
    ) -> Result<Vec<GcEntry>, RepoError> {
        let own = self.snapshot_dir(pinned)?.join(&pinned.commit);
        let Some(dir) = own.parent() else {
            return Ok(Vec::new());
        };
        let mut candidates = snapshot_candidates(dir)?;
        // Newest first; the pinned snapshot counts as the newest.
        candidates.sort_by_key(|c| {
            (
                std::cmp::Reverse(c.entry.path == own),
                std::cmp::Reverse(c.entry.last_used),
            )
        });
        let mut removed = Vec::new();
        for candidate in candidates.into_iter().skip(keep.max(1)) {
            if candidate.entry.path == own {
                continue;
            }
            let built = match &candidate.build_lock {
                Some(lock) => try_exclusive(lock)?,
                None => None,
            };
            let (Some(used), Some(built)) = (try_exclusive(&candidate.use_file)?, built) else {
                continue;
            };
            candidate.remove()?;
            drop((used, built));
            removed.push(candidate.entry);
        }
        Ok(removed)
    }
}

/// The snapshots in one mirror's snapshot directory.
fn snapshot_candidates(dir: &Path) -> Result<Vec<Candidate>, RepoError> {
    let mut found = Vec::new();
    for path in list(dir)? {
        let Some(commit) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if commit.starts_with('.') || commit.contains('.') || !path.is_dir() {
            continue;
        }
        let marker = dir.join(format!("{commit}.done"));
        let use_file = dir.join(format!("{commit}.use"));
        found.push(Candidate {
            entry: GcEntry {
                kind: GcKind::Snapshot,
                bytes: recorded_size(dir, commit).unwrap_or_else(|| {
                    // Measured once (snapshots from before sizes were recorded).
                    record_size(dir, commit, &path);
                    disk_usage(&path)
                }),
                last_used: modified(&use_file)
                    .or_else(|| modified(&marker))
                    .unwrap_or(0),
                path: path.clone(),
                kept: None,
            },
            build_lock: Some(dir.join(format!("{commit}.lock"))),
            use_file,
            marker: Some(marker),
        });
    }
    Ok(found)
}

/// The dependency caches under `dir` (`WARDEN_HOME/caches`): each `<key>` directory, whose
/// `<key>.lock` its readers hold shared and its prepare exclusively (its modification time is
/// the last use) and whose `<key>.complete` marks it complete.
fn cache_candidates(dir: &Path) -> Result<Vec<Candidate>, RepoError> {
    let mut found = Vec::new();
    for path in list(dir)? {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') || !path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let use_file = dir.join(format!("{name}.lock"));
        let marker = dir.join(format!("{name}.complete"));
        found.push(Candidate {
            entry: GcEntry {
                kind: GcKind::Cache,
                bytes: disk_usage(&path),
                last_used: modified(&use_file)
                    .or_else(|| modified(&marker))
                    .or_else(|| modified(&path))
                    .unwrap_or(0),
                path: path.clone(),
                kept: None,
            },
            use_file,
            build_lock: None,
            marker: Some(marker),
        });
    }
    Ok(found)
}

/// An entry with the files eviction needs.
struct Candidate {
    entry: GcEntry,
    use_file: PathBuf,
    /// The lock pinning (mirrors) or materializing (snapshots) takes; caches have one lock.
    build_lock: Option<PathBuf>,
    /// A snapshot's or a cache's completion marker, removed first.
    marker: Option<PathBuf>,
}

impl Candidate {
    fn remove(&self) -> Result<(), RepoError> {
        if let Some(marker) = &self.marker {
            remove_if_present(marker)?;
            if let Some(size) = size_file(marker) {
                remove_if_present(&size)?;
            }
        }
        let path = &self.entry.path;
        match remove_tree(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RepoError::io("remove", path)(e)),
        }
    }
}

fn remove_if_present(path: &Path) -> Result<(), RepoError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RepoError::io("remove", path)(e)),
        _ => Ok(()),
    }
}

/// Whether nobody holds the lock on `path`, without creating it (a missing file is held by
/// nobody: a holder creates it).
fn is_free(path: &Path) -> Result<bool, RepoError> {
    let file = match OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(RepoError::io("open lock", path)(e)),
    };
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(RepoError::io("lock", path)(e)),
    }
}

/// The exclusive lock on `path` if nobody holds it, `None` if somebody does.
fn try_exclusive(path: &Path) -> Result<Option<File>, RepoError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(RepoError::io("open lock", path))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(RepoError::io("lock", path)(e)),
    }
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, RepoError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RepoError::io("list", dir)(e)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        paths.push(entry.map_err(RepoError::io("list", dir))?.path());
    }
    paths.sort();
    Ok(paths)
}

fn modified(path: &Path) -> Option<u64> {
    let time = std::fs::metadata(path).ok()?.modified().ok()?;
    time.duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

fn size_file(marker: &Path) -> Option<PathBuf> {
    let name = marker.file_name()?.to_str()?.strip_suffix(".done")?;
    Some(marker.with_file_name(format!("{name}.size")))
}

fn recorded_size(dir: &Path, commit: &str) -> Option<u64> {
    std::fs::read_to_string(dir.join(format!("{commit}.size")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether `mirror` marks one of `commits` as a `PATH@worktree` snapshot it made (a loose or
/// packed ref under `refs/warden/worktree/`).
fn holds_work_tree_commit(mirror: &Path, commits: &BTreeSet<String>) -> bool {
    let loose = mirror.join(crate::store::WORK_TREE_REFS);
    if commits.iter().any(|commit| loose.join(commit).is_file()) {
        return true;
    }
    std::fs::read_to_string(mirror.join("packed-refs")).is_ok_and(|refs| {
        refs.lines().any(|line| {
            line.split_once(' ')
                .and_then(|(_, name)| name.strip_prefix(crate::store::WORK_TREE_REFS))
                .is_some_and(|commit| commits.contains(commit))
        })
    })
}

/// Whether a mirror holds proposal refs (loose or packed).
fn holds_proposals(mirror: &Path) -> bool {
    let loose = mirror.join("refs/warden/proposals");
    let has_loose = std::fs::read_dir(&loose).is_ok_and(|mut entries| entries.next().is_some());
    has_loose
        || std::fs::read_to_string(mirror.join("packed-refs"))
            .is_ok_and(|refs| refs.contains(" refs/warden/proposals/"))
}
