//! `RepoStore`: Warden's own copies of repositories under `WARDEN_HOME`.
//!
//! - `mirrors/<name>-<8 hex of sha256(source)>.git`: a bare mirror Warden owns, filled by fetching
//!   from the source. The user's repository is only ever read (`rev-parse`, `config --get`, and
//!   git's upload-pack serving the fetch); nothing is written into it. Its work tree is read, by
//!   Warden and never by git (`worktree.rs`), only to say what a pin of `HEAD` leaves out and to
//!   snapshot it for `PATH@worktree`.
//! - `snapshots/<mirror>/<commit>/`: one read-only, verified checkout per exact commit, with its
//!   completion marker `<commit>.done` beside it (outside the root), written only after the walk in
//!   `materialize` verified every object. Later calls find the marker and reuse the snapshot.
//!
//! Concurrent pins of one mirror and concurrent snapshots of one commit are serialised with
//! `flock`-style file locks; snapshots are built in a temp dir and renamed into place.
//!
//! **A cache with a budget** (`gc.rs`). A snapshot is at most [`SnapshotLimits`] large, checked
//! while it is written. Mirrors and snapshots are evicted oldest-last-use first by
//! [`RepoStore::gc`]: the last use is the modification time of `<mirror>.git.use` /
//! `<commit>.use`, touched at every use, and a task holds a shared `flock` on those files while
//! it runs ([`InUse`](crate::gc::InUse)), so eviction (which needs the exclusive lock) never
//! takes what a running task uses, and a crashed task's lock goes with its process.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::Digest;

use crate::browse::browse_base;
pub use crate::browse::{evidence_url, BrowseBase};
use crate::cache::remove_tree;
use crate::error::RepoError;
use crate::git::Git;
pub use crate::materialize::SnapshotLimits;
use crate::materialize::{materialize, ObjectFormat};
use crate::spec::{RepoSpec, Source, WORK_TREE_REV};

/// Where the source's `HEAD` is recorded in a mirror; the mirror's own `HEAD` points at it.
const SOURCE_HEAD: &str = "refs/warden/source-head";

/// Where a mirror marks the `PATH@worktree` snapshot commits it made (also under
/// `refs/warden/pinned/`): they exist nowhere else.
pub(crate) const WORK_TREE_REFS: &str = "refs/warden/worktree/";

/// Everything fetched from a source: branches, tags and its `HEAD`.
const MIRROR_REFSPECS: [&str; 3] = [
    "+refs/heads/*:refs/heads/*",
    "+refs/tags/*:refs/tags/*",
    "+HEAD:refs/warden/source-head",
];

/// Mirrors and snapshots under one `WARDEN_HOME`.
#[derive(Debug, Clone)]
pub struct RepoStore {
    home: PathBuf,
    git: Git,
    limits: SnapshotLimits,
    /// Automatic eviction before a new snapshot is written, when set.
    pub(crate) cache: Option<crate::cache::CachePolicy>,
    /// What tasks still need, which eviction keeps (shared by the store's clones; see
    /// [`RepoStore::set_retained`]).
    pub(crate) retained: std::sync::Arc<std::sync::Mutex<crate::retained::Retained>>,
}

/// Where a pin reports a fetch's progress.
type Progress<'a> = &'a dyn Fn(&str);

/// The phases of a fetch the local git reports about its own work (the lines it writes
/// itself; `remote:` lines are the remote's text and never shown).
const FETCH_PHASES: [&str; 3] = [
    "Receiving objects:",
    "Resolving deltas:",
    "Checking objects:",
];

/// Turns git's progress lines into a few: a phase's first and last line, and between them at
/// most one a second.
#[derive(Debug, Default)]
struct FetchMeter {
    phase: Option<&'static str>,
    shown_at: Option<Instant>,
}

impl FetchMeter {
    fn line<'l>(&mut self, line: &'l str, now: Instant) -> Option<&'l str> {
        let phase = FETCH_PHASES.into_iter().find(|p| line.starts_with(p))?;
        let done = line.contains("done");
        let new_phase = self.phase != Some(phase);
        let due = self
            .shown_at
            .is_none_or(|at| now.duration_since(at) >= std::time::Duration::from_secs(1));
        if new_phase || done || due {
            self.phase = Some(phase);
            self.shown_at = Some(now);
            return Some(line);
        }
        None
    }
}

/// A revision resolved in a mirror: the commit, the browse base, and what the work tree had.
type Resolved = (String, Option<BrowseBase>, Option<WorkTree>);

/// A repository pinned to one exact commit, present in Warden's mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedRepo {
    pub name: String,
    pub source: Source,
    /// Full commit id (40 hex, or 64 for SHA-256 repositories).
    pub commit: String,
    /// The commit's tree id.
    pub tree: String,
    /// The bare mirror holding the commit.
    pub mirror: PathBuf,
    pub browse: Option<BrowseBase>,
    /// What the pin of a local repository's work tree left out or took in; `None` for URLs,
    /// explicit revisions and repositories without a work tree.
    pub work_tree: Option<WorkTree>,
}

/// How a local repository's work tree relates to its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkTree {
    /// Pinned at `HEAD` (no revision given), and `files` files of the work tree differ from it
    /// (modified, deleted, or untracked and not ignored): they are not in the pin.
    Uncommitted { files: usize },
    /// Pinned at `HEAD`, but the work tree could not be compared with it.
    Unchecked { reason: String },
    /// `PATH@worktree`: the pinned commit is a snapshot of the work tree whose parent is
    /// `head`, taking in `files` files that differ from it (none: the commit is `head`).
    /// `skipped` are paths left out, with the reason.
    Snapshot {
        head: String,
        files: usize,
        skipped: Vec<(String, String)>,
    },
}

/// A verified, read-only checkout of one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub root: PathBuf,
    pub commit: String,
    pub tree: String,
    /// True when an earlier call had already materialized it.
    pub reused: bool,
}

impl RepoStore {
    /// Opens (creating if needed) the store under `home`, with git found by [`Git::locate`].
    pub fn open(home: &Path) -> Result<RepoStore, RepoError> {
        RepoStore::open_with(home, Git::locate()?)
    }

    /// Like [`RepoStore::open`] with a given git (e.g. other timeouts).
    pub fn open_with(home: &Path, git: Git) -> Result<RepoStore, RepoError> {
        for sub in ["mirrors", "snapshots"] {
            let dir = home.join(sub);
            std::fs::create_dir_all(&dir).map_err(RepoError::io("create directory", &dir))?;
        }
        let home = home
            .canonicalize()
            .map_err(RepoError::io("resolve", home))?;
        Ok(RepoStore {
            home,
            git,
            limits: SnapshotLimits::default(),
            cache: None,
            retained: std::sync::Arc::default(),
        })
    }

    /// The same store with other snapshot limits (checked while materializing).
    pub fn with_snapshot_limits(mut self, limits: SnapshotLimits) -> RepoStore {
        self.limits = limits;
        self
    }

    /// The same store, evicting unused mirrors and snapshots under `policy` before it writes a
    /// new snapshot (see [`RepoStore::gc`]).
    pub fn with_cache_policy(mut self, policy: crate::cache::CachePolicy) -> RepoStore {
        self.cache = Some(policy);
        self
    }

    pub fn snapshot_limits(&self) -> SnapshotLimits {
        self.limits
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    pub fn git(&self) -> &Git {
        &self.git
    }

    /// Where the mirror of `spec`'s source lives (whether or not it exists yet).
    pub fn mirror_path(&self, spec: &RepoSpec) -> PathBuf {
        let digest = sha2::Sha256::digest(spec.source.as_text().as_bytes());
        let short = hex::encode(&digest[..4]);
        self.home
            .join("mirrors")
            .join(format!("{}-{short}.git", spec.name))
    }

    /// Brings the mirror up to date with the source and resolves `spec.rev` (default: the
    /// source's `HEAD`) to a commit held in the mirror.
    pub fn pin(&self, spec: &RepoSpec) -> Result<PinnedRepo, RepoError> {
        self.pin_with_progress(spec, &|_| {})
    }

    /// [`RepoStore::pin`], reporting a fetch's progress (objects received and resolved, bytes
    /// so far) through `progress`, at most about once a second per phase. Only the lines the
    /// local git writes about its own work are passed on, never text from the remote.
    pub fn pin_with_progress(
        &self,
        spec: &RepoSpec,
        progress: &dyn Fn(&str),
    ) -> Result<PinnedRepo, RepoError> {
        let mirror = self.mirror_path(spec);
        let _lock = lock(&mirror.with_extension("lock"))?;
        let (commit, browse, work_tree) = match self.already_pinned(spec, &mirror)? {
            Some(known) => known,
            None => self.fetch_and_resolve(spec, &mirror, progress)?,
        };
        let tree = self
            .in_mirror(
                &mirror,
                &[
                    "rev-parse",
                    "--verify",
                    "--end-of-options",
                    &format!("{commit}^{{tree}}"),
                ],
            )?
            .text();
        if ObjectFormat::of_id(&tree).is_none() {
            return Err(RepoError::UnexpectedOutput(format!("tree id {tree:?}")));
        }
        Ok(PinnedRepo {
            name: spec.name.clone(),
            source: spec.source.clone(),
            commit,
            tree,
            mirror,
            browse,
            work_tree,
        })
    }

    /// A full commit id the mirror already holds pinned (or as a proposal) needs no fetch:
    /// a commit never changes, and a task's later runs (or an in-process task pinned before it
    /// was submitted) name their commits exactly.
    fn already_pinned(
        &self,
        spec: &RepoSpec,
        mirror: &Path,
    ) -> Result<Option<Resolved>, RepoError> {
        let Some(rev) = spec.rev.as_deref() else {
            return Ok(None);
        };
        if spec.wants_work_tree()
            || ObjectFormat::of_id(rev).is_none()
            || !self.is_pinned_in_mirror(mirror, rev)?
        {
            return Ok(None);
        }
        let browse = match &spec.source {
            Source::Path(path) => self.local_browse(path).ok().flatten(),
            Source::Url(url) => browse_base(url),
        };
        Ok(Some((rev.to_string(), browse, None)))
    }

    /// Brings the mirror up to date with the source and resolves the revision.
    fn fetch_and_resolve(
        &self,
        spec: &RepoSpec,
        mirror: &Path,
        progress: Progress<'_>,
    ) -> Result<Resolved, RepoError> {
        Ok(match &spec.source {
            Source::Path(path) => self.pin_local(spec, path, mirror, progress)?,
            Source::Url(url) => {
                let (commit, browse) = self.pin_url(spec, url, mirror, progress)?;
                (commit, browse, None)
            }
        })
    }

    /// Resolves the revision in the user's repository (read-only), then fetches everything plus
    /// the exact commit into the mirror.
    ///
    /// Without a revision the work tree is compared with `HEAD` ([`WorkTree::Uncommitted`]);
    /// with `@worktree` it is snapshotted on top of `HEAD` ([`WorkTree::Snapshot`]). A full
    /// commit id the user's repository lacks but the mirror holds pinned or as a proposal (a
    /// snapshot or a proposal, named again by a follow-up) is taken from the mirror.
    fn pin_local(
        &self,
        spec: &RepoSpec,
        path: &Path,
        mirror: &Path,
        progress: Progress<'_>,
    ) -> Result<(String, Option<BrowseBase>, Option<WorkTree>), RepoError> {
        let wants_work_tree = spec.wants_work_tree();
        let rev = match spec.rev.as_deref() {
            Some(rev) if !wants_work_tree => rev,
            _ => "HEAD",
        };
        let resolved = match self.git.run(
            path,
            &[
                "rev-parse",
                "--path-format=absolute",
                "--git-common-dir",
                "--absolute-git-dir",
                "--show-object-format",
                "--verify",
                "--end-of-options",
                &format!("{rev}^{{commit}}"),
            ],
        ) {
            Ok(output) => output.text(),
            Err(error) => {
                if ObjectFormat::of_id(rev).is_some()
                    && self.is_pinned_in_mirror(mirror, rev).unwrap_or(false)
                {
                    // The repository may be gone since; the mirror is enough.
                    let browse = self.local_browse(path).ok().flatten();
                    return Ok((rev.to_string(), browse, None));
                }
                return Err(local_error(error, rev, &spec.name, path));
            }
        };
        let mut lines = resolved.lines();
        let (git_dir, own_git_dir, format, commit) =
            match (lines.next(), lines.next(), lines.next(), lines.next()) {
                (Some(dir), Some(own), Some(format), Some(commit)) => {
                    (dir, own, format, commit.to_string())
                }
                _ => {
                    return Err(RepoError::UnexpectedOutput(format!(
                        "rev-parse printed {resolved:?}"
                    )))
                }
            };
        let format = ObjectFormat::from_name(format)?;
        if ObjectFormat::of_id(&commit) != Some(format) {
            return Err(RepoError::UnexpectedOutput(format!("commit id {commit:?}")));
        }
        self.ensure_mirror(mirror, format)?;
        // The exact commit is fetched by id as well: it may be reachable only from a ref the
        // mirror does not copy (a remote-tracking branch, a stash, a detached HEAD).
        let pin_refspec = format!("+{commit}:refs/warden/pinned/{commit}");
        let mut refspecs = MIRROR_REFSPECS.to_vec();
        refspecs.push(&pin_refspec);
        self.fetch(mirror, git_dir, &refspecs, progress)?;
        let browse = self.local_browse(path)?;
        // Only a checkout's top level has a work tree to speak of (a bare repository and a
        // `.git` directory named directly have none).
        let has_work_tree = path.join(".git").symlink_metadata().is_ok();
        if wants_work_tree {
            if !has_work_tree {
                return Err(RepoError::InvalidSpec {
                    spec: format!("{}@{WORK_TREE_REV}", path.display()),
                    reason: "it has no work tree to snapshot; give the path of a checkout".into(),
                });
            }
            let (snapshot, work_tree) = self.snapshot_work_tree(mirror, path, &commit)?;
            return Ok((snapshot, browse, Some(work_tree)));
        }
        // The work tree's own index (a linked worktree's lives in its own git dir), read by
        // Warden for git's stat shortcut; only the count uses it.
        let index = Path::new(own_git_dir).join("index");
        let work_tree = (spec.rev.is_none() && has_work_tree).then(|| {
            match self.commit_tree(mirror, &commit).and_then(|tree| {
                crate::worktree::count_for_notice(&self.git, mirror, &tree, path, &index)
            }) {
                Ok(count) => WorkTree::Uncommitted { files: count.files },
                Err(error) => WorkTree::Unchecked {
                    reason: error.to_string(),
                },
            }
        });
        let work_tree = work_tree.filter(|w| *w != WorkTree::Uncommitted { files: 0 });
        Ok((commit, browse, work_tree))
    }

    /// The browse base of a local repository's `origin`, if it has one on a known host.
    fn local_browse(&self, path: &Path) -> Result<Option<BrowseBase>, RepoError> {
        let origin = match self
            .git
            .run(path, &["config", "--get", "remote.origin.url"])
        {
            Ok(output) => Some(output.text()),
            Err(RepoError::GitFailed { code: Some(1), .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(origin.as_deref().and_then(browse_base))
    }

    /// Whether the mirror holds `commit` under `refs/warden/pinned/` or as a proposal under
    /// `refs/warden/proposals/`.
    fn is_pinned_in_mirror(&self, mirror: &Path, commit: &str) -> Result<bool, RepoError> {
        if !mirror.join("HEAD").is_file() {
            return Ok(false);
        }
        match self.in_mirror(
            mirror,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("refs/warden/pinned/{commit}^{{commit}}"),
            ],
        ) {
            Ok(output) if output.text() == commit => Ok(true),
            Ok(_) | Err(RepoError::GitFailed { code: Some(1), .. }) => {
                // A proposal Warden made (a change task followed up on its proposal) counts
                // too: it exists only in the mirror.
                let proposals = self.in_mirror(
                    mirror,
                    &[
                        "for-each-ref",
                        "--format=%(refname)",
                        &format!("--points-at={commit}"),
                        "refs/warden/proposals/",
                    ],
                )?;
                Ok(!proposals.text().trim().is_empty())
            }
            Err(e) => Err(e),
        }
    }

    fn commit_tree(&self, mirror: &Path, commit: &str) -> Result<String, RepoError> {
        let tree = self
            .in_mirror(
                mirror,
                &[
                    "rev-parse",
                    "--verify",
                    "--end-of-options",
                    &format!("{commit}^{{tree}}"),
                ],
            )?
            .text();
        if ObjectFormat::of_id(&tree).is_none() {
            return Err(RepoError::UnexpectedOutput(format!("tree id {tree:?}")));
        }
        Ok(tree)
    }

    /// Snapshots the work tree at `path` on top of `head` as a commit in the mirror (kept under
    /// `refs/warden/pinned/`); a work tree without changes is `head` itself.
    fn snapshot_work_tree(
        &self,
        mirror: &Path,
        path: &Path,
        head: &str,
    ) -> Result<(String, WorkTree), RepoError> {
        let tree = self.commit_tree(mirror, head)?;
        let changes = crate::worktree::compare_for_snapshot(&self.git, mirror, &tree, path)?;
        let files = changes.files();
        let commit = if files == 0 {
            head.to_string()
        } else {
            // The mirror's lock is held: the scratch directory beside it is this pin's alone.
            let scratch = mirror.with_extension("worktree");
            let commit = crate::worktree::snapshot_commit(
                &self.git, mirror, &scratch, path, head, &tree, &changes,
            )?;
            self.in_mirror(
                mirror,
                &[
                    "update-ref",
                    &format!("refs/warden/pinned/{commit}"),
                    &commit,
                ],
            )?;
            // Marks it as a commit only this mirror holds, which eviction must not lose while
            // a task that recorded it can be retried or followed up (`crate::gc`).
            self.in_mirror(
                mirror,
                &["update-ref", &format!("{WORK_TREE_REFS}{commit}"), &commit],
            )?;
            commit
        };
        Ok((
            commit,
            WorkTree::Snapshot {
                head: head.to_string(),
                files,
                skipped: changes.skipped,
            },
        ))
    }

    /// Fetches from the URL, then resolves the revision inside the mirror.
    fn pin_url(
        &self,
        spec: &RepoSpec,
        url: &str,
        mirror: &Path,
        progress: Progress<'_>,
    ) -> Result<(String, Option<BrowseBase>), RepoError> {
        let created = self.ensure_mirror(mirror, ObjectFormat::Sha1)?;
        match self.fetch(mirror, url, &MIRROR_REFSPECS, progress) {
            // A new mirror guessed SHA-1; the server says otherwise: start over in its format.
            Err(RepoError::GitFailed { stderr, .. })
                if created && stderr.contains("mismatched algorithms") =>
            {
                let format = stderr
                    .rsplit("server ")
                    .next()
                    .map(|rest| rest.trim().trim_end_matches(['.', '\'']))
                    .unwrap_or_default();
                let format = ObjectFormat::from_name(format)?;
                remove_tree(mirror).map_err(RepoError::io("remove", mirror))?;
                self.ensure_mirror(mirror, format)?;
                self.fetch(mirror, url, &MIRROR_REFSPECS, progress)?;
            }
            other => other?,
        }
        // The mirror's HEAD is a symbolic ref to the source's HEAD, so `HEAD~1` means what it
        // means in the source.
        let rev = spec.rev.as_deref().unwrap_or("HEAD");
        let commit = match self.resolve_in_mirror(mirror, rev) {
            Ok(commit) => commit,
            Err(e) => {
                // A full commit id no ref points at can still be fetched by id.
                if ObjectFormat::of_id(rev).is_none() {
                    return Err(revision_error(e, rev, &spec.name));
                }
                let refspec = format!("+{rev}:refs/warden/pinned/{rev}");
                self.fetch(mirror, url, &[&refspec], progress)
                    .map_err(|e| revision_error(e, rev, &spec.name))?;
                self.resolve_in_mirror(mirror, rev)
                    .map_err(|e| revision_error(e, rev, &spec.name))?
            }
        };
        self.in_mirror(
            mirror,
            &[
                "update-ref",
                &format!("refs/warden/pinned/{commit}"),
                &commit,
            ],
        )?;
        Ok((commit, browse_base(url)))
    }

    fn resolve_in_mirror(&self, mirror: &Path, rev: &str) -> Result<String, RepoError> {
        let commit = self
            .in_mirror(
                mirror,
                &[
                    "rev-parse",
                    "--verify",
                    "--end-of-options",
                    &format!("{rev}^{{commit}}"),
                ],
            )?
            .text();
        if ObjectFormat::of_id(&commit).is_none() {
            return Err(RepoError::UnexpectedOutput(format!("commit id {commit:?}")));
        }
        Ok(commit)
    }

    /// Creates the bare mirror if it does not exist; returns whether it did not.
    fn ensure_mirror(&self, mirror: &Path, format: ObjectFormat) -> Result<bool, RepoError> {
        if mirror.join("HEAD").is_file() {
            return Ok(false);
        }
        let parent = self.home.join("mirrors");
        // Built aside and renamed, so a half-initialised mirror is never mistaken for one.
        let staging = parent.join(format!(
            ".tmp-{}-{}",
            mirror
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("mirror"),
            std::process::id()
        ));
        if staging.exists() {
            remove_tree(&staging).map_err(RepoError::io("remove", &staging))?;
        }
        let staging_text = staging.to_string_lossy();
        self.git.run(
            &parent,
            &[
                "init",
                "--quiet",
                "--bare",
                &format!("--object-format={}", format.name()),
                "--end-of-options",
                &staging_text,
            ],
        )?;
        let git_dir = format!("--git-dir={staging_text}");
        self.git
            .run(&staging, &[&git_dir, "symbolic-ref", "HEAD", SOURCE_HEAD])?;
        if mirror.exists() {
            // Left over from a crash (no HEAD): replace it.
            remove_tree(mirror).map_err(RepoError::io("remove", mirror))?;
        }
        std::fs::rename(&staging, mirror).map_err(RepoError::io("create mirror", mirror))?;
        Ok(true)
    }

    fn fetch(
        &self,
        mirror: &Path,
        source: &str,
        refspecs: &[&str],
        progress: Progress<'_>,
    ) -> Result<(), RepoError> {
        let git_dir = format!("--git-dir={}", mirror.display());
        let mut args = vec![
            git_dir.as_str(),
            "fetch",
            "--progress",
            "--no-tags",
            "--prune",
            "--no-write-fetch-head",
            "--no-auto-maintenance",
            "--no-recurse-submodules",
            "--end-of-options",
            source,
        ];
        args.extend_from_slice(refspecs);
        let mut meter = FetchMeter::default();
        self.git
            .run_transfer_with_progress(mirror, &args, &mut |line| {
                if let Some(shown) = meter.line(line, Instant::now()) {
                    progress(shown);
                }
            })?;
        Ok(())
    }

    fn in_mirror(&self, mirror: &Path, args: &[&str]) -> Result<crate::git::GitOutput, RepoError> {
        let git_dir = format!("--git-dir={}", mirror.display());
        let mut full = vec![git_dir.as_str()];
        full.extend_from_slice(args);
        self.git.run(mirror, &full)
    }

    /// The read-only, verified checkout of `pinned.commit`, materialized on first use.
    /// The directory holding `pinned`'s snapshots (one per commit), after checking that the
    /// ids can safely be path components.
    pub(crate) fn snapshot_dir(&self, pinned: &PinnedRepo) -> Result<PathBuf, RepoError> {
        // Both ids become path components: accept nothing but full hex ids of one format.
        let format = ObjectFormat::of_id(&pinned.commit);
        if format.is_none() || ObjectFormat::of_id(&pinned.tree) != format {
            return Err(RepoError::Corrupt(format!(
                "{:?} / {:?} are not a commit and tree id",
                pinned.commit, pinned.tree
            )));
        }
        let mirror_name = pinned
            .mirror
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.strip_suffix(".git").unwrap_or(n))
            .filter(|n| !matches!(*n, "" | "." | ".."))
            .ok_or_else(|| RepoError::Corrupt(format!("mirror path {:?}", pinned.mirror)))?;
        Ok(self.home.join("snapshots").join(mirror_name))
    }

    pub fn snapshot(&self, pinned: &PinnedRepo) -> Result<Snapshot, RepoError> {
        self.snapshot_with_progress(pinned, &|_| {})
    }

    /// [`RepoStore::snapshot`], telling `progress` how far a long one has got (about once a
    /// second while it writes).
    pub fn snapshot_with_progress(
        &self,
        pinned: &PinnedRepo,
        progress: &dyn Fn(crate::materialize::SnapshotProgress),
    ) -> Result<Snapshot, RepoError> {
        let dir = self.snapshot_dir(pinned)?;
        let root = dir.join(&pinned.commit);
        let marker = dir.join(format!("{}.done", pinned.commit));
        let expected = format!("{} {}\n", pinned.commit, pinned.tree);
        let snapshot = |reused| Snapshot {
            root: root.clone(),
            commit: pinned.commit.clone(),
            tree: pinned.tree.clone(),
            reused,
        };
        if is_complete(&marker, &expected, &root) {
            return Ok(snapshot(true));
        }
        std::fs::create_dir_all(&dir).map_err(RepoError::io("create directory", &dir))?;
        let _lock = lock(&dir.join(format!("{}.lock", pinned.commit)))?;
        if is_complete(&marker, &expected, &root) {
            return Ok(snapshot(true));
        }
        // Holding the lock, anything else for this commit is debris from a crash.
        let staging_prefix = format!(".tmp-{}-", pinned.commit);
        for entry in std::fs::read_dir(&dir).map_err(RepoError::io("list", &dir))? {
            let entry = entry.map_err(RepoError::io("list", &dir))?;
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(&staging_prefix)
            {
                remove_tree(&entry.path()).map_err(RepoError::io("remove", entry.path()))?;
            }
        }
        for stale in [&marker, &root] {
            if stale.symlink_metadata().is_ok() {
                remove_tree(stale).map_err(RepoError::io("remove", stale))?;
            }
        }
        if let Some(policy) = &self.cache {
            // Make room first; a failing eviction must not stop the task.
            let _ = self.gc(policy, false);
        }
        let staging = dir.join(format!("{staging_prefix}{}", std::process::id()));
        std::fs::create_dir(&staging).map_err(RepoError::io("create directory", &staging))?;
        if let Err(e) = materialize(
            &self.git,
            &pinned.mirror,
            &pinned.commit,
            &pinned.tree,
            &staging,
            self.limits,
            progress,
        ) {
            let _ = remove_tree(&staging);
            return Err(e);
        }
        crate::cache::record_size(&dir, &pinned.commit, &staging);
        std::fs::rename(&staging, &root).map_err(RepoError::io("rename snapshot into", &root))?;
        let marker_staging = dir.join(format!("{staging_prefix}{}.done", std::process::id()));
        std::fs::write(&marker_staging, &expected)
            .map_err(RepoError::io("write", &marker_staging))?;
        std::fs::rename(&marker_staging, &marker).map_err(RepoError::io("write", &marker))?;
        Ok(snapshot(false))
    }
}

/// Maps "not a commit" failures of `rev-parse` to [`RepoError::RevisionNotFound`].
/// A local path that is no git repository is the person's mistake: one sentence saying what to give instead, not git's command line.
/// So is a repository without a commit (`git init` and nothing committed yet): its `HEAD`
/// names no commit.
fn local_error(error: RepoError, rev: &str, repo: &str, path: &Path) -> RepoError {
    match error {
        RepoError::GitFailed { stderr, .. } if stderr.contains("not a git repository") => {
            RepoError::InvalidSpec {
                spec: path.display().to_string(),
                reason: "not a git repository; give the path of a git checkout (or a git URL)"
                    .into(),
            }
        }
        RepoError::GitFailed { stderr, .. }
            if rev == "HEAD" && stderr.contains("Needed a single revision") =>
        {
            RepoError::InvalidSpec {
                spec: path.display().to_string(),
                reason: format!(
                    "the repository has no commit yet; commit your files first (git -C {0} add \
                     -A && git -C {0} commit -m initial)",
                    path.display()
                ),
            }
        }
        other => revision_error(other, rev, repo),
    }
}

fn revision_error(error: RepoError, rev: &str, repo: &str) -> RepoError {
    match error {
        RepoError::GitFailed { stderr, .. }
            if [
                "Needed a single revision",
                "unknown revision",
                "bad revision",
                "couldn't find remote ref",
                "not our ref",
                "upload-pack: not our ref",
            ]
            .iter()
            .any(|needle| stderr.contains(needle)) =>
        {
            RepoError::RevisionNotFound {
                rev: rev.to_string(),
                repo: repo.to_string(),
                detail: stderr,
            }
        }
        other => other,
    }
}

pub(crate) fn is_complete(marker: &Path, expected: &str, root: &Path) -> bool {
    std::fs::read_to_string(marker).is_ok_and(|content| content == expected) && root.is_dir()
}

/// An exclusive lock held until the returned file is dropped.
pub(crate) fn lock(path: &Path) -> Result<File, RepoError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(RepoError::io("open lock", path))?;
    file.lock().map_err(RepoError::io("lock", path))?;
    Ok(file)
}
