//! The work tree of a local repository, compared with the commit being pinned and, for
//! `PATH@worktree`, snapshotted as a commit in Warden's mirror.
//!
//! **No repository code runs, and nothing of the user's is written.** Git's own comparison
//! (`status`, `diff-files`, `add`) re-reads files through the repository's clean filters, which
//! a hostile repository points at its own programs; so no git command runs in the user's
//! repository here. Warden reads the work tree itself, byte for byte: every path of the pinned
//! tree is looked at with `lstat` (no symlink followed, not even in a parent directory) and its
//! raw content hashed as a blob; the rest of the tree is walked with git's ignore rules (the
//! repository's `.gitignore` files and `.git/info/exclude`; nested repositories and submodules
//! are not entered) to find untracked files. A snapshot writes private copies of the changed
//! files into the mirror with `hash-object --no-filters` (every id checked against Warden's own
//! hash), builds the tree in a temporary index (`GIT_INDEX_FILE`, seeded from the pinned tree)
//! in the mirror, and writes the commit object byte for byte: the user's index, `HEAD`, refs,
//! objects and work tree are never touched.
//!
//! Because the comparison is raw, a file the repository converts on checkout (a smudge filter
//! such as Git LFS, `eol=crlf`, `ident`) counts as changed, and a snapshot holds it as it is on
//! disk.
//!
//! **Two comparisons, for two purposes.** [`compare_for_snapshot`] (for `PATH@worktree`) reads
//! and hashes every tracked file, always. [`count_for_notice`] (for the notice of a pin of
//! `HEAD`, "N uncommitted files are not included") may skip reading a tracked file that git's
//! own index vouches for: the index, read by Warden (`index.rs`, no git command), holds the
//! pinned tree's id for the path at stage 0 with no assume-unchanged, skip-worktree or
//! intent-to-add flag, the file's `lstat` matches the entry's recorded stat (change and
//! modification times to the nanosecond, inode, owner, group, size, and the mode Warden
//! derives), and the entry is not racily clean (modified strictly before the index was
//! written). That is the shortcut `git status` takes; it trusts what git recorded when it last
//! hashed the file, which is good enough for a count but not for taking content: a snapshot
//! never uses it. An index that is missing, malformed, split, of an unknown version or too
//! large is simply not used, and every file is hashed.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rustix::fd::OwnedFd;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::cache::remove_tree;
use crate::candidate::{list_tree, write_commit, CommitIdentity, TreeEntry};
use crate::error::RepoError;
use crate::git::Git;
use crate::index::{Stat, StatCache};
use crate::materialize::ObjectFormat;

/// How the work tree differs from a commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Modified, retyped and untracked (not ignored) files and symlinks, by path.
    pub(crate) written: Vec<Written>,
    /// Paths of the commit that are gone (or replaced by a directory).
    pub(crate) deleted: Vec<String>,
    /// Paths that cannot be taken over, with the reason (special files, unusual names).
    pub(crate) skipped: Vec<(String, String)>,
}

impl Changes {
    /// How many files the work tree has that the commit does not (changed, new or deleted).
    pub(crate) fn files(&self) -> usize {
        self.written.len() + self.deleted.len()
    }
}

/// One changed or new path as it is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) path: String,
    pub(crate) mode: &'static str,
    /// The blob id of the raw content (or symlink target).
    pub(crate) id: String,
    /// `None` for a regular file (read again from the work tree), the target for a symlink.
    pub(crate) symlink: Option<Vec<u8>>,
}

/// Compares the work tree at `root` with `tree` (in `mirror`), reading and hashing every file:
/// what a `PATH@worktree` snapshot is built from. Never takes git's index into account.
pub(crate) fn compare_for_snapshot(
    git: &Git,
    mirror: &Path,
    tree: &str,
    root: &Path,
) -> Result<Changes, RepoError> {
    compare(git, mirror, tree, root, None).map(|(changes, _)| changes)
}

/// What the notice of a pin of `HEAD` reports: how many files differ, and how the count was
/// reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NoticeCount {
    /// Files the work tree has that the commit does not (changed, new or deleted), as
    /// [`Changes::files`] counts them.
    pub(crate) files: usize,
    /// Tracked files taken as unchanged on the index's word, without being read.
    pub(crate) unread: usize,
    /// Why the index was not used (every file was hashed), if it was not.
    pub(crate) index_unused: Option<String>,
}

/// Counts how the work tree at `root` differs from `tree` (in `mirror`) for the notice of a pin
/// of `HEAD`, taking git's stat shortcut from the index file at `index` (the work tree's own,
/// `<git dir>/index`) where it applies. Only a count comes out: nothing of it can be
/// snapshotted.
pub(crate) fn count_for_notice(
    git: &Git,
    mirror: &Path,
    tree: &str,
    root: &Path,
    index: &Path,
) -> Result<NoticeCount, RepoError> {
    let format = ObjectFormat::of_id(tree)
        .ok_or_else(|| RepoError::Corrupt(format!("{tree:?} is not a tree id")))?;
    let (cache, index_unused) = match crate::index::read(index, format) {
        Ok(parsed) => (Some(StatCache::new(parsed)), None),
        Err(error) => (None, Some(error.to_string())),
    };
    let (changes, unread) = compare(git, mirror, tree, root, cache.as_ref())?;
    Ok(NoticeCount {
        files: changes.files(),
        unread,
        index_unused,
    })
}

/// Compares the work tree with `tree`; a tracked file `trusted` vouches for is not read.
/// Returns the changes and how many files were taken on the cache's word.
fn compare(
    git: &Git,
    mirror: &Path,
    tree: &str,
    root: &Path,
    trusted: Option<&StatCache>,
) -> Result<(Changes, usize), RepoError> {
    let format = ObjectFormat::of_id(tree)
        .ok_or_else(|| RepoError::Corrupt(format!("{tree:?} is not a tree id")))?;
    let git_dir = format!("--git-dir={}", mirror.display());
    let base = list_tree(git, mirror, &git_dir, tree)?;
    let mut changes = Changes::default();
    let mut real_dirs: HashMap<String, bool> = HashMap::new();
    let mut unread = 0;
    for (path, entry) in &base {
        if compare_tracked(
            root,
            format,
            path,
            entry,
            trusted,
            &mut real_dirs,
            &mut changes,
        )? {
            unread += 1;
        }
    }
    find_untracked(root, format, &base, &mut changes)?;
    changes.written.sort_by(|a, b| a.path.cmp(&b.path));
    changes.deleted.sort();
    Ok((changes, unread))
}

/// One path of the commit against the work tree. Returns whether the file was taken as
/// unchanged on `trusted`'s word, without being read.
fn compare_tracked(
    root: &Path,
    format: ObjectFormat,
    path: &str,
    entry: &TreeEntry,
    trusted: Option<&StatCache>,
    real_dirs: &mut HashMap<String, bool>,
    changes: &mut Changes,
) -> Result<bool, RepoError> {
    // A submodule stays as committed; a name git listed lossily cannot be looked up.
    if entry.mode == "160000" {
        return Ok(false);
    }
    if path.contains(char::REPLACEMENT_CHARACTER) {
        changes
            .skipped
            .push((path.to_string(), "file name is not UTF-8".into()));
        return Ok(false);
    }
    // Through a symlinked or missing parent the file is not there, as git sees it.
    let mut parent = String::new();
    for component in path
        .split('/')
        .collect::<Vec<_>>()
        .split_last()
        .map_or(&[][..], |(_, p)| p)
    {
        if !parent.is_empty() {
            parent.push('/');
        }
        parent.push_str(component);
        let is_dir = *real_dirs.entry(parent.clone()).or_insert_with(|| {
            std::fs::symlink_metadata(root.join(&parent)).is_ok_and(|m| m.file_type().is_dir())
        });
        if !is_dir {
            changes.deleted.push(path.to_string());
            return Ok(false);
        }
    }
    let on_disk = root.join(path);
    let meta = match std::fs::symlink_metadata(&on_disk) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            changes.deleted.push(path.to_string());
            return Ok(false);
        }
        Err(e) => return Err(RepoError::io("read", &on_disk)(e)),
    };
    let kind = meta.file_type();
    if kind.is_file() {
        if trusted
            .is_some_and(|cache| cache.vouches(path, &entry.id, &entry.mode, &Stat::of(&meta)))
        {
            return Ok(true);
        }
        let (id, mode) = hash_file(root, Path::new(path), format, None)?;
        if id != entry.id || mode != entry.mode {
            changes.written.push(Written {
                path: path.to_string(),
                mode,
                id,
                symlink: None,
            });
        }
    } else if kind.is_symlink() {
        let target = read_link(root, Path::new(path))?;
        let id = blob_id(format, &target);
        if id != entry.id || entry.mode != "120000" {
            changes.written.push(Written {
                path: path.to_string(),
                mode: "120000",
                id,
                symlink: Some(target),
            });
        }
    } else {
        // A directory's contents are found by the walk; anything else cannot be taken.
        if !kind.is_dir() {
            changes
                .skipped
                .push((path.to_string(), "not a regular file or symlink".into()));
        }
        changes.deleted.push(path.to_string());
    }
    Ok(false)
}

/// Everything the walk finds that the commit does not have and the ignore rules let in.
fn find_untracked(
    root: &Path,
    format: ObjectFormat,
    base: &BTreeMap<String, TreeEntry>,
    changes: &mut Changes,
) -> Result<(), RepoError> {
    let mut walk = ignore::WalkBuilder::new(root);
    walk.standard_filters(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .parents(false)
        .follow_links(false)
        .filter_entry(|entry| {
            if entry.file_name() == ".git" {
                return false;
            }
            // A nested repository or a submodule's checkout is not part of this repository.
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            !(is_dir && entry.depth() > 0 && entry.path().join(".git").symlink_metadata().is_ok())
        });
    for found in walk.build() {
        let entry = found.map_err(|e| RepoError::Io {
            action: "walk",
            path: root.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if entry.depth() == 0 || kind.is_dir() {
            continue;
        }
        let relative = entry.path().strip_prefix(root).unwrap_or(entry.path());
        let Some(path) = relative.to_str() else {
            changes.skipped.push((
                relative.to_string_lossy().into_owned(),
                "file name is not UTF-8".into(),
            ));
            continue;
        };
        if base.contains_key(path) {
            continue;
        }
        if path.chars().any(|c| c.is_control() || c == '\\') {
            changes
                .skipped
                .push((path.to_string(), "unusual file name".into()));
            continue;
        }
        if kind.is_symlink() {
            let target = read_link(root, relative)?;
            changes.written.push(Written {
                path: path.to_string(),
                mode: "120000",
                id: blob_id(format, &target),
                symlink: Some(target),
            });
        } else if kind.is_file() {
            let (id, mode) = hash_file(root, relative, format, None)?;
            changes.written.push(Written {
                path: path.to_string(),
                mode,
                id,
                symlink: None,
            });
        } else {
            changes
                .skipped
                .push((path.to_string(), "not a regular file or symlink".into()));
        }
    }
    Ok(())
}

/// Writes the work tree as a commit on top of `head` (whose tree is `tree`) into `mirror`,
/// using `scratch` (created, and removed afterwards) for private copies and the temporary
/// index. Returns the commit id.
pub(crate) fn snapshot_commit(
    git: &Git,
    mirror: &Path,
    scratch: &Path,
    root: &Path,
    head: &str,
    tree: &str,
    changes: &Changes,
) -> Result<String, RepoError> {
    if scratch.symlink_metadata().is_ok() {
        remove_tree(scratch).map_err(RepoError::io("remove", scratch))?;
    }
    std::fs::create_dir_all(scratch).map_err(RepoError::io("create", scratch))?;
    let result = build_snapshot(git, mirror, scratch, root, head, tree, changes);
    let _ = remove_tree(scratch);
    result
}

fn build_snapshot(
    git: &Git,
    mirror: &Path,
    scratch: &Path,
    root: &Path,
    head: &str,
    tree: &str,
    changes: &Changes,
) -> Result<String, RepoError> {
    let format = ObjectFormat::of_id(tree)
        .ok_or_else(|| RepoError::Corrupt(format!("{tree:?} is not a tree id")))?;
    let git_dir = format!("--git-dir={}", mirror.display());

    // 1. Private copies, hashed again while copied: a file that changed since the comparison
    //    stops the snapshot rather than entering half-read.
    let blobs = scratch.join("blobs");
    std::fs::create_dir_all(&blobs).map_err(RepoError::io("create", &blobs))?;
    let mut copies: Vec<(PathBuf, &str)> = Vec::new();
    for (index, written) in changes.written.iter().enumerate() {
        let copy = blobs.join(index.to_string());
        match &written.symlink {
            Some(target) => std::fs::write(&copy, target).map_err(RepoError::io("write", &copy))?,
            None => {
                let mut out = File::create(&copy).map_err(RepoError::io("write", &copy))?;
                let on_disk = root.join(&written.path);
                let (id, mode) = hash_file(root, Path::new(&written.path), format, Some(&mut out))?;
                if id != written.id || mode != written.mode {
                    return Err(RepoError::Io {
                        action: "snapshot",
                        path: on_disk,
                        source: std::io::Error::other(
                            "the file changed while Warden read it; try again",
                        ),
                    });
                }
            }
        }
        copies.push((copy, &written.id));
    }
    for chunk in copies.chunks(256) {
        let mut args: Vec<String> = vec![
            git_dir.clone(),
            "hash-object".into(),
            "-w".into(),
            "--no-filters".into(),
            "--".into(),
        ];
        args.extend(chunk.iter().map(|(p, _)| p.display().to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = git.run(mirror, &refs)?.text();
        let ids: Vec<&str> = output.lines().collect();
        if ids.len() != chunk.len() {
            return Err(RepoError::UnexpectedOutput(format!(
                "hash-object wrote {} objects for {} files",
                ids.len(),
                chunk.len()
            )));
        }
        for ((_, expected), got) in chunk.iter().zip(ids) {
            if *expected != got {
                return Err(RepoError::Corrupt(format!(
                    "blob written as {got}, expected {expected}"
                )));
            }
        }
    }

    // 2. The tree, in a temporary index seeded from the pinned tree.
    let index = scratch.join("index");
    let empty_work_tree = scratch.join("empty-work-tree");
    std::fs::create_dir_all(&empty_work_tree).map_err(RepoError::io("create", &empty_work_tree))?;
    let work_tree = format!("--work-tree={}", empty_work_tree.display());
    git.run_with_index(mirror, &index, &[&git_dir, "read-tree", tree])?;
    for chunk in changes.deleted.chunks(256) {
        let mut args: Vec<&str> =
            vec![&git_dir, &work_tree, "update-index", "--force-remove", "--"];
        args.extend(chunk.iter().map(String::as_str));
        git.run_with_index(&empty_work_tree, &index, &args)?;
    }
    let cacheinfo: Vec<String> = changes
        .written
        .iter()
        .map(|w| format!("{},{},{}", w.mode, w.id, w.path))
        .collect();
    for chunk in cacheinfo.chunks(256) {
        let mut args: Vec<&str> = vec![&git_dir, "update-index", "--add", "--replace"];
        for info in chunk {
            args.push("--cacheinfo");
            args.push(info);
        }
        git.run_with_index(mirror, &index, &args)?;
    }
    let new_tree = git
        .run_with_index(mirror, &index, &[&git_dir, "write-tree"])?
        .text();
    if ObjectFormat::of_id(&new_tree) != Some(format) {
        return Err(RepoError::UnexpectedOutput(format!(
            "write-tree printed {new_tree:?}"
        )));
    }

    // 3. The commit: dated like `head`, so the same work tree on the same `head` is the same
    //    commit (and its snapshot is reused).
    let head_object = git.run(mirror, &[&git_dir, "cat-file", "commit", head])?;
    let time = String::from_utf8_lossy(&head_object.stdout)
        .lines()
        .take_while(|line| !line.is_empty())
        .find_map(|line| line.strip_prefix("committer "))
        .and_then(|committer| committer.rsplit(' ').nth(1))
        .and_then(|seconds| seconds.parse::<u64>().ok())
        .unwrap_or(0);
    let place: String = root
        .display()
        .to_string()
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let message = format!(
        "Warden snapshot of the work tree at {place}\n\nThe uncommitted and untracked files of \
         the work tree, on top of\n{head}.\nTaken for `--repo PATH@worktree`; this commit exists \
         only in Warden's mirror.\n"
    );
    write_commit(
        git,
        mirror,
        scratch,
        &new_tree,
        head,
        &message,
        &CommitIdentity::warden(time),
    )
}

/// The target of the symlink at `path`, as bytes.
/// Opens `relative` beneath the work tree `root` without following a symlink anywhere on the
/// way (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`): a parent directory swapped for a
/// symlink after it was looked at cannot send the read elsewhere.
fn open_beneath(root: &Path, relative: &Path, flags: OFlags) -> Result<OwnedFd, RepoError> {
    let path = root.join(relative);
    let dir = rustix::fs::open(
        root,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| RepoError::io("open", root)(e.into()))?;
    rustix::fs::openat2(
        &dir,
        relative,
        flags | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    )
    .map_err(|e| RepoError::io("open", &path)(e.into()))
}

/// A symlink's target, read beneath `root` without following a symlink on the way to it.
fn read_link(root: &Path, relative: &Path) -> Result<Vec<u8>, RepoError> {
    let path = root.join(relative);
    let parent = relative.parent().unwrap_or(Path::new(""));
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let name = relative
        .file_name()
        .ok_or_else(|| RepoError::io("read", &path)(std::io::ErrorKind::InvalidInput.into()))?;
    let dir = open_beneath(root, parent, OFlags::DIRECTORY | OFlags::RDONLY)?;
    rustix::fs::readlinkat(&dir, name, Vec::new())
        .map(|target| target.into_bytes())
        .map_err(|e| RepoError::io("read", &path)(e.into()))
}

/// Hashes the regular file at `relative` beneath `root` as a blob (and copies it into `copy`),
/// returning its id and mode. The file is opened without following a symlink (on the way to it
/// either) and without blocking (a fifo put
/// there since it was listed cannot stall the read); anything but a regular file of the size it
/// had when opened is an error.
fn hash_file(
    root: &Path,
    relative: &Path,
    format: ObjectFormat,
    mut copy: Option<&mut File>,
) -> Result<(String, &'static str), RepoError> {
    let full = root.join(relative);
    let path = full.as_path();
    let fd = open_beneath(root, relative, OFlags::RDONLY | OFlags::NONBLOCK)?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| RepoError::io("stat", path)(e.into()))?;
    let changed = |why: &str| RepoError::Io {
        action: "read",
        path: path.to_path_buf(),
        source: std::io::Error::other(format!("{why}; try again")),
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(changed("it is no longer a regular file"));
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    let mode = if stat.st_mode & 0o111 != 0 {
        "100755"
    } else {
        "100644"
    };
    let mut file = File::from(fd);
    let mut hasher = format.hasher();
    hasher.update(format!("blob {size}\0").as_bytes());
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    loop {
        let read = file
            .read(&mut buffer)
            .map_err(RepoError::io("read", path))?;
        if read == 0 {
            break;
        }
        total += read as u64;
        if total > size {
            return Err(changed("the file grew while Warden read it"));
        }
        hasher.update(&buffer[..read]);
        if let Some(out) = copy.as_mut() {
            out.write_all(&buffer[..read])
                .map_err(RepoError::io("write", path))?;
        }
    }
    if total != size {
        return Err(changed("the file shrank while Warden read it"));
    }
    Ok((hasher.finish_hex(), mode))
}

/// The git blob id of `bytes`.
fn blob_id(format: ObjectFormat, bytes: &[u8]) -> String {
    let mut hasher = format.hasher();
    hasher.update(format!("blob {}\0", bytes.len()).as_bytes());
    hasher.update(bytes);
    hasher.finish_hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parent directory that is (or became) a symlink never lets a read leave the work tree:
    /// neither a file's content nor a symlink's target is read through it.
    #[test]
    fn reads_never_follow_a_symlinked_parent_out_of_the_work_tree() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "host secret\n").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", outside.path().join("link")).unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("real")).unwrap();
        std::fs::write(root.path().join("real/file"), "mine\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("dir")).unwrap();

        let (id, mode) = hash_file(
            root.path(),
            Path::new("real/file"),
            ObjectFormat::Sha1,
            None,
        )
        .unwrap();
        assert_eq!(id, blob_id(ObjectFormat::Sha1, b"mine\n"));
        assert_eq!(mode, "100644");
        assert!(hash_file(
            root.path(),
            Path::new("dir/secret"),
            ObjectFormat::Sha1,
            None
        )
        .is_err());
        assert!(read_link(root.path(), Path::new("dir/link")).is_err());
        // A symlink in the work tree itself is read as a link, its target as bytes.
        assert_eq!(
            read_link(root.path(), Path::new("dir")).unwrap(),
            outside.path().as_os_str().as_encoded_bytes()
        );
        // And a file reached through `..` is refused.
        assert!(hash_file(
            &root.path().join("real"),
            Path::new("../real/file"),
            ObjectFormat::Sha1,
            None
        )
        .is_err());
    }

    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::{Duration, SystemTime};
    use warden_test_support::git_fixture::TempRepo;

    /// Sets `path`'s modification time to an hour ago: a file git then adds is not racily
    /// clean, however fast the test runs.
    fn backdate(path: &Path) {
        let file = File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
    }

    /// A repository with `files` committed files `f00`… (`f00` executable), backdated before
    /// they were added.
    fn committed(files: usize) -> TempRepo {
        let repo = TempRepo::new();
        for n in 0..files {
            repo.write(&format!("dir/f{n:02}"), &format!("file {n}\n"));
        }
        std::fs::set_permissions(
            repo.path().join("dir/f00"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        for n in 0..files {
            backdate(&repo.path().join(format!("dir/f{n:02}")));
        }
        repo.commit("first");
        repo
    }

    fn count(repo: &TempRepo) -> NoticeCount {
        let tree = repo.git(&["rev-parse", "HEAD^{tree}"]);
        let git = Git::locate().unwrap();
        let dot_git = repo.path().join(".git");
        count_for_notice(&git, &dot_git, &tree, repo.path(), &dot_git.join("index")).unwrap()
    }

    fn snapshot_changes(repo: &TempRepo) -> Changes {
        let tree = repo.git(&["rev-parse", "HEAD^{tree}"]);
        let git = Git::locate().unwrap();
        compare_for_snapshot(&git, &repo.path().join(".git"), &tree, repo.path()).unwrap()
    }

    /// The notice count reads no file the index vouches for, and every other one; it agrees
    /// with the full comparison, and without a usable index it hashes everything.
    #[test]
    fn the_notice_count_reads_only_what_the_index_cannot_vouch_for() {
        let repo = committed(20);
        assert_eq!(
            count(&repo),
            NoticeCount {
                files: 0,
                unread: 20,
                index_unused: None
            }
        );

        repo.write("dir/f01", "FILE 1\n") // same size, other content
            .write("dir/f02", "longer now\n")
            .write("untracked", "new\n");
        std::fs::remove_file(repo.path().join("dir/f03")).unwrap();
        std::fs::set_permissions(
            repo.path().join("dir/f04"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        // Touched but unchanged: its stat no longer matches, so it is read, and is the same.
        backdate(&repo.path().join("dir/f05"));
        let notice = count(&repo);
        assert_eq!(notice.files, 5);
        assert_eq!(notice.unread, 20 - 5, "f01 to f05 are read");
        assert_eq!(snapshot_changes(&repo).files(), 5);

        // A truncated index, a missing one: every file is hashed, and the count is the same.
        let index = repo.path().join(".git/index");
        let raw = std::fs::read(&index).unwrap();
        std::fs::write(&index, &raw[..raw.len() / 2]).unwrap();
        let notice = count(&repo);
        assert_eq!((notice.files, notice.unread), (5, 0));
        assert!(notice.index_unused.is_some());
        std::fs::remove_file(&index).unwrap();
        let notice = count(&repo);
        assert_eq!((notice.files, notice.unread), (5, 0));
    }

    /// The same in a SHA-256 repository, whose index holds 32-byte ids.
    #[test]
    fn a_sha256_index_vouches_too() {
        let repo = TempRepo::new();
        std::fs::remove_dir_all(repo.path().join(".git")).unwrap();
        repo.git(&["init", "-q", "--object-format=sha256", "-b", "main"]);
        repo.git(&["config", "user.name", "Warden Test"]);
        repo.git(&["config", "user.email", "test@warden.invalid"]);
        for name in ["a", "b/c", "b/d"] {
            repo.write(name, name);
            backdate(&repo.path().join(name));
        }
        repo.commit("first");
        repo.git(&["update-index", "--index-version", "4"]);
        assert_eq!(
            count(&repo),
            NoticeCount {
                files: 0,
                unread: 3,
                index_unused: None
            }
        );
        repo.write("b/c", "C");
        let notice = count(&repo);
        assert_eq!((notice.files, notice.unread), (1, 2));
    }

    /// Rewrites the stat data of the index entry at offset 12 (a one-file version 2 SHA-1
    /// index) with `meta`'s, as if git had recorded it after the file changed; then sets the
    /// index file's modification time to `written`.
    fn record_stat(index: &Path, meta: &std::fs::Metadata, written: SystemTime) {
        let mut raw = std::fs::read(index).unwrap();
        let mut put = |at: usize, value: i64| {
            raw[at..at + 4].copy_from_slice(&(value as u32).to_be_bytes());
        };
        put(12, meta.ctime());
        put(16, meta.ctime_nsec());
        put(20, meta.mtime());
        put(24, meta.mtime_nsec());
        put(32, meta.ino() as i64);
        put(48, meta.size() as i64);
        let body = raw.len() - 20;
        let mut hasher = ObjectFormat::Sha1.hasher();
        hasher.update(&raw[..body]);
        raw[body..].copy_from_slice(&hex::decode(hasher.finish_hex()).unwrap());
        std::fs::write(index, &raw).unwrap();
        File::options()
            .write(true)
            .open(index)
            .unwrap()
            .set_modified(written)
            .unwrap();
    }

    /// An index entry whose stat matches a changed file is trusted only when the index was
    /// written after the file's modification time; in the same tick it is racily clean and
    /// the file is read. Git decides the same way (`diff-files`). A snapshot never trusts it.
    #[test]
    fn a_racily_clean_entry_is_read_and_a_snapshot_never_trusts_the_index() {
        let repo = TempRepo::new();
        repo.write("f", "one\n");
        backdate(&repo.path().join("f"));
        repo.commit("first");
        repo.write("f", "two\n");
        let meta = std::fs::symlink_metadata(repo.path().join("f")).unwrap();
        let modified = meta.modified().unwrap();
        let index = repo.path().join(".git/index");

        // Written in the same tick as the file: racily clean.
        record_stat(&index, &meta, modified);
        assert_eq!(repo.git(&["diff-files", "--name-only"]), "f");
        let notice = count(&repo);
        assert_eq!((notice.files, notice.unread), (1, 0));

        // Written a second later: the index vouches for the file, for git and for the count.
        record_stat(&index, &meta, modified + Duration::from_secs(1));
        assert_eq!(repo.git(&["diff-files", "--name-only"]), "");
        let notice = count(&repo);
        assert_eq!((notice.files, notice.unread), (0, 1));
        // The snapshot reads the file as it is.
        let changes = snapshot_changes(&repo);
        assert_eq!(changes.files(), 1);
        assert_eq!(changes.written[0].id, blob_id(ObjectFormat::Sha1, b"two\n"));
    }

    /// A linked worktree's index lives in its own git dir (`.git` is a `gitdir:` file).
    #[test]
    fn a_linked_worktrees_own_index_vouches() {
        let repo = committed(6);
        let place = tempfile::tempdir().unwrap();
        let linked = place.path().join("linked");
        repo.git(&[
            "worktree",
            "add",
            "-q",
            linked.to_str().unwrap(),
            "-b",
            "side",
        ]);
        for n in 0..6 {
            backdate(&linked.join(format!("dir/f{n:02}")));
        }
        let in_linked = |args: &[&str]| {
            let mut full = vec!["-C", linked.to_str().unwrap()];
            full.extend_from_slice(args);
            repo.git(&full)
        };
        in_linked(&["update-index", "-q", "--refresh"]);
        std::fs::write(linked.join("dir/f01"), "changed\n").unwrap();
        let git_dir = PathBuf::from(in_linked(&["rev-parse", "--absolute-git-dir"]));
        assert!(linked.join(".git").is_file());
        let tree = repo.git(&["rev-parse", "HEAD^{tree}"]);
        let git = Git::locate().unwrap();
        let notice = count_for_notice(
            &git,
            &repo.path().join(".git"),
            &tree,
            &linked,
            &git_dir.join("index"),
        )
        .unwrap();
        assert_eq!((notice.files, notice.unread), (1, 5), "{notice:?}");
    }
}
