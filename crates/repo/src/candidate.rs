//! The candidate tree of a change task: what the agent wrote into its copy-on-write view, turned
//! into a git tree in Warden's mirror (never the user's repository).
//!
//! - [`WritableRoot`] is the only way Warden's own tools write into the view: every path is
//!   checked lexically (no absolute path, no `..` above the root, no `.git` component) and then
//!   opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` below a descriptor of the
//!   root, so no symlink, whoever planted it, can carry a write elsewhere.
//! - [`build_candidate_tree`] finds what changed from the overlay's upper directory (files
//!   written, copied up, whiteouts, opaque or redirected directories) but reads every state from
//!   the merged view, which is the truth overlayfs presents: a whiteout, an opaque directory and
//!   a metacopy-only copy-up all read as what they mean. A temporary index (`GIT_INDEX_FILE` in
//!   the task's scratch directory) is seeded from the base tree, changed blobs are written with
//!   `hash-object --no-filters` from private copies whose ids Warden computed itself (every blob
//!   verified), deletions are removed, and `write-tree` gives the candidate tree.
//!
//! **What may enter.** Every path tracked in the base tree may be modified or deleted. A new
//! path enters unless git's ignore rules, as they stand in the candidate (its `.gitignore` files,
//! exactly what `git add` would honour in the user's checkout), exclude it; so build output and
//! caches a check produced stay out. Paths with a `.git` component, special files (fifos,
//! sockets, devices) and new paths with control characters, quotes or backslashes in their names
//! are never added; they are reported in [`Candidate::skipped`].

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use sha1::Digest;

use crate::confine::{lexical_relative, ConfineError};
use crate::error::RepoError;
use crate::git::Git;
use crate::materialize::{materialize, ObjectFormat};

/// Why a tool's write was refused or failed; messages are meant for the model.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The path is absolute, climbs out, names `.git` or is not a usable name.
    #[error("{0}")]
    Confined(#[from] ConfineError),
    /// A component of the path is a symlink (writes never follow symlinks).
    #[error("path {0:?} goes through a symlink; write to the real path inside the repository")]
    Symlink(String),
    /// Nothing exists at the path (reads and edits).
    #[error("path {0:?} does not exist")]
    NotFound(String),
    /// The path names a directory.
    #[error("path {0:?} is a directory")]
    IsDirectory(String),
    /// Any other file-system failure.
    #[error("cannot write {path:?}: {source}")]
    Io {
        /// The path as given.
        path: String,
        source: std::io::Error,
    },
}

/// The merged root of a writable view, opened once; all writes resolve beneath it.
#[derive(Debug)]
pub struct WritableRoot {
    root: OwnedFd,
    path: PathBuf,
}

impl WritableRoot {
    pub fn open(path: &Path) -> std::io::Result<WritableRoot> {
        let root = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(WritableRoot {
            root,
            path: path.to_path_buf(),
        })
    }

    /// The host path of the root (for reading the merged view).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn checked(&self, relative: &str) -> Result<PathBuf, WriteError> {
        let lexical = lexical_relative(relative)?;
        if lexical.as_os_str().is_empty() {
            return Err(WriteError::IsDirectory(relative.to_string()));
        }
        Ok(lexical)
    }

    fn resolve_flags() -> ResolveFlags {
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
    }

    fn map_errno(relative: &str, errno: rustix::io::Errno) -> WriteError {
        match errno {
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => {
                WriteError::Symlink(relative.to_string())
            }
            rustix::io::Errno::NOENT => WriteError::NotFound(relative.to_string()),
            rustix::io::Errno::ISDIR => WriteError::IsDirectory(relative.to_string()),
            other => WriteError::Io {
                path: relative.to_string(),
                source: other.into(),
            },
        }
    }

    /// Opens a directory beneath the root (`""` is the root itself), without symlinks.
    fn open_dir(&self, relative: &str, dir: &Path) -> Result<OwnedFd, WriteError> {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        rustix::fs::openat2(
            &self.root,
            dir,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            WritableRoot::resolve_flags(),
        )
        .map_err(|e| WritableRoot::map_errno(relative, e))
    }

    /// Runs `attempt`; if it is refused with `EACCES`, gives the owner write permission on
    /// `fd` and runs it once more. Snapshots are materialized read-only (files `0444`,
    /// directories `0555`) and a copy-on-write view shows those modes: root writes anyway
    /// (`CAP_DAC_OVERRIDE`), an unprivileged Warden — which owns the files it materialized —
    /// first makes the one file or directory it changes writable in the view's upper layer.
    /// The snapshot itself never changes.
    fn with_owner_write<T>(
        relative: &str,
        fd: impl rustix::fd::AsFd,
        mut attempt: impl FnMut() -> Result<T, rustix::io::Errno>,
    ) -> Result<T, WriteError> {
        match attempt() {
            Err(rustix::io::Errno::ACCESS) => {
                let stat =
                    rustix::fs::fstat(&fd).map_err(|e| WritableRoot::map_errno(relative, e))?;
                let mode = Mode::from_raw_mode(stat.st_mode & 0o7777) | Mode::WUSR;
                rustix::fs::fchmod(&fd, mode).map_err(|e| WritableRoot::map_errno(relative, e))?;
                attempt().map_err(|e| WritableRoot::map_errno(relative, e))
            }
            other => other.map_err(|e| WritableRoot::map_errno(relative, e)),
        }
    }

    /// Reads a file's bytes; the path may not go through any symlink.
    pub fn read(&self, relative: &str) -> Result<Vec<u8>, WriteError> {
        use std::io::Read;
        let lexical = self.checked(relative)?;
        let fd = rustix::fs::openat2(
            &self.root,
            &lexical,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            WritableRoot::resolve_flags(),
        )
        .map_err(|e| WritableRoot::map_errno(relative, e))?;
        let mut file = std::fs::File::from(fd);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|source| match source.raw_os_error() {
                Some(code) if code == rustix::io::Errno::ISDIR.raw_os_error() => {
                    WriteError::IsDirectory(relative.to_string())
                }
                _ => WriteError::Io {
                    path: relative.to_string(),
                    source,
                },
            })?;
        Ok(bytes)
    }

    /// Writes a whole file, creating missing parent directories; an existing file keeps its
    /// mode, a new one is `0644`.
    pub fn write(&self, relative: &str, bytes: &[u8]) -> Result<(), WriteError> {
        use std::io::Write;
        let lexical = self.checked(relative)?;
        let mut prefix = PathBuf::new();
        let components: Vec<&OsStr> = lexical.iter().collect();
        for name in &components[..components.len().saturating_sub(1)] {
            prefix.push(name);
            match rustix::fs::openat2(
                &self.root,
                &prefix,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
                WritableRoot::resolve_flags(),
            ) {
                Ok(_) => {}
                Err(rustix::io::Errno::NOENT) => {
                    // The parent was just resolved beneath the root without symlinks.
                    let parent = prefix.parent().unwrap_or(Path::new(""));
                    let parent_fd = self.open_dir(relative, parent)?;
                    WritableRoot::with_owner_write(relative, &parent_fd, || {
                        match rustix::fs::mkdirat(&parent_fd, *name, Mode::from_raw_mode(0o755)) {
                            Err(rustix::io::Errno::EXIST) => Ok(()),
                            other => other,
                        }
                    })?;
                }
                Err(rustix::io::Errno::NOTDIR) => {
                    return Err(WriteError::Io {
                        path: relative.to_string(),
                        source: std::io::Error::other(format!(
                            "{} is a file, not a directory",
                            prefix.display()
                        )),
                    })
                }
                Err(e) => return Err(WritableRoot::map_errno(relative, e)),
            }
        }
        let open_for_writing = || {
            rustix::fs::openat2(
                &self.root,
                &lexical,
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::CLOEXEC
                    | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o644),
                WritableRoot::resolve_flags(),
            )
        };
        let fd = match open_for_writing() {
            Err(rustix::io::Errno::ACCESS) => {
                // A read-only file (make it writable), or a new file in a read-only directory
                // (make the directory writable).
                let existing = rustix::fs::openat2(
                    &self.root,
                    &lexical,
                    OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                    Mode::empty(),
                    WritableRoot::resolve_flags(),
                );
                match existing {
                    Ok(file) => WritableRoot::with_owner_write(relative, &file, open_for_writing)?,
                    Err(rustix::io::Errno::NOENT) => {
                        let parent = lexical.parent().unwrap_or(Path::new(""));
                        let parent_fd = self.open_dir(relative, parent)?;
                        WritableRoot::with_owner_write(relative, &parent_fd, open_for_writing)?
                    }
                    Err(e) => return Err(WritableRoot::map_errno(relative, e)),
                }
            }
            other => other.map_err(|e| WritableRoot::map_errno(relative, e))?,
        };
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes).map_err(|source| WriteError::Io {
            path: relative.to_string(),
            source,
        })?;
        Ok(())
    }

    /// Removes a file (not a directory); the path may not go through any symlink.
    pub fn remove(&self, relative: &str) -> Result<(), WriteError> {
        let lexical = self.checked(relative)?;
        let parent = lexical.parent().unwrap_or(Path::new(""));
        let name = lexical.file_name().unwrap_or_default();
        let parent_fd = self.open_dir(relative, parent)?;
        WritableRoot::with_owner_write(relative, &parent_fd, || {
            rustix::fs::unlinkat(&parent_fd, name, rustix::fs::AtFlags::empty())
        })
    }
}

/// One entry of a git tree listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    pub(crate) mode: String,
    pub(crate) id: String,
}

/// A built candidate tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The tree id in the mirror.
    pub tree: String,
    /// Paths whose content or mode differs from the base, added or modified.
    pub written: Vec<String>,
    /// Base paths no longer present.
    pub deleted: Vec<String>,
    /// Paths that changed in the view but cannot enter, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// Where a candidate is built.
#[derive(Debug, Clone, Copy)]
pub struct CandidateInput<'a> {
    pub git: &'a Git,
    /// Warden's bare mirror holding the base commit; blobs are written here.
    pub mirror: &'a Path,
    pub base_tree: &'a str,
    /// The overlay's upper directory (what the view changed).
    pub upper: &'a Path,
    /// The merged view (what the agent sees).
    pub merged: &'a Path,
    /// A private directory for the temporary index and blob copies.
    pub scratch: &'a Path,
}

/// Builds the candidate tree for the view's current state.
pub fn build_candidate_tree(input: CandidateInput<'_>) -> Result<Candidate, RepoError> {
    let format = ObjectFormat::of_id(input.base_tree)
        .ok_or_else(|| RepoError::Corrupt(format!("{:?} is not a tree id", input.base_tree)))?;
    std::fs::create_dir_all(input.scratch).map_err(RepoError::io("create", input.scratch))?;
    let git_dir = format!("--git-dir={}", input.mirror.display());
    let base = list_tree(input.git, input.mirror, &git_dir, input.base_tree)?;
    let base_dirs: BTreeSet<String> = base
        .keys()
        .flat_map(|path| {
            let mut dirs = Vec::new();
            let mut rest = path.as_str();
            while let Some((dir, _)) = rest.rsplit_once('/') {
                dirs.push(dir.to_string());
                rest = dir;
            }
            dirs
        })
        .collect();

    // 1. What the upper layer says was touched.
    let mut touched: BTreeSet<String> = BTreeSet::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    if input.upper.exists() {
        walk_upper(
            input.upper,
            "",
            &base_dirs,
            &base,
            input.merged,
            &mut touched,
            &mut skipped,
        )?;
    } else {
        // No copy-on-write layer (a plain copy, e.g. the `local` backend): compare everything.
        touched.extend(base.keys().cloned());
        walk_merged(input.merged, "", &mut touched, &mut skipped)?;
    }

    // 2. The state of every touched path in the merged view. Submodules (gitlinks) are
    // materialized as empty directories: they stay as they are, and nothing enters below them.
    let gitlinks: Vec<&String> = base
        .iter()
        .filter(|(_, entry)| entry.mode == "160000")
        .map(|(path, _)| path)
        .collect();
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let mut present: BTreeMap<String, (String, Vec<u8>)> = BTreeMap::new();
    for path in &touched {
        if gitlinks.iter().any(|link| {
            path.strip_prefix(link.as_str())
                .is_some_and(|r| r.starts_with('/'))
        }) {
            skipped.push((path.clone(), "inside a submodule".into()));
            continue;
        }
        let on_disk = input.merged.join(path);
        let remove_base_under = |deleted: &mut BTreeSet<String>| {
            let prefix = format!("{path}/");
            for key in base.keys() {
                if key == path || key.starts_with(&prefix) {
                    deleted.insert(key.clone());
                }
            }
        };
        match std::fs::symlink_metadata(&on_disk) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => remove_base_under(&mut deleted),
            Err(e) => return Err(RepoError::io("read", &on_disk)(e)),
            Ok(meta) => {
                let kind = meta.file_type();
                if kind.is_file() {
                    let prefix = format!("{path}/");
                    for key in base.keys().filter(|k| k.starts_with(&prefix)) {
                        deleted.insert(key.clone());
                    }
                    let mode = if meta.permissions().mode() & 0o111 != 0 {
                        "100755"
                    } else {
                        "100644"
                    };
                    let bytes = std::fs::read(&on_disk).map_err(RepoError::io("read", &on_disk))?;
                    present.insert(path.clone(), (mode.to_string(), bytes));
                } else if kind.is_symlink() {
                    let prefix = format!("{path}/");
                    for key in base.keys().filter(|k| k.starts_with(&prefix)) {
                        deleted.insert(key.clone());
                    }
                    let target =
                        std::fs::read_link(&on_disk).map_err(RepoError::io("read", &on_disk))?;
                    present.insert(
                        path.clone(),
                        ("120000".to_string(), target.as_os_str().as_bytes().to_vec()),
                    );
                } else if kind.is_dir() {
                    // A directory where the base had a file: the file is gone; the directory's
                    // contents were listed by the walk.
                    if base.get(path).is_some_and(|entry| entry.mode != "160000") {
                        deleted.insert(path.clone());
                    }
                } else {
                    skipped.push((path.clone(), "not a regular file or symlink".into()));
                    remove_base_under(&mut deleted);
                }
            }
        }
    }

    // 3. New paths: drop what the candidate's ignore rules exclude and odd names.
    let new_paths: Vec<String> = present
        .keys()
        .filter(|p| !base.contains_key(*p))
        .cloned()
        .collect();
    let mut refused: BTreeSet<String> = BTreeSet::new();
    for path in &new_paths {
        if path
            .chars()
            .any(|c| c.is_control() || c == '"' || c == '\\')
        {
            skipped.push((path.clone(), "unusual file name".into()));
            refused.insert(path.clone());
        }
    }
    let checkable: Vec<&str> = new_paths
        .iter()
        .filter(|p| !refused.contains(*p))
        .map(String::as_str)
        .collect();
    for ignored in ignored_paths(input.merged, &checkable) {
        skipped.push((ignored.clone(), "ignored by .gitignore".into()));
        refused.insert(ignored);
    }
    for path in &refused {
        present.remove(path);
    }

    // 4. Blobs: private copies hashed by Warden, written by git, ids compared.
    let blob_dir = input.scratch.join("blobs");
    if blob_dir.exists() {
        std::fs::remove_dir_all(&blob_dir).map_err(RepoError::io("remove", &blob_dir))?;
    }
    std::fs::create_dir_all(&blob_dir).map_err(RepoError::io("create", &blob_dir))?;
    let mut updates: Vec<(String, String, String)> = Vec::new();
    let mut to_write: Vec<(PathBuf, String)> = Vec::new();
    for (index, (path, (mode, bytes))) in present.iter().enumerate() {
        let id = blob_id(format, bytes);
        let unchanged = base
            .get(path)
            .is_some_and(|entry| entry.id == id && &entry.mode == mode);
        if unchanged {
            continue;
        }
        let copy = blob_dir.join(index.to_string());
        std::fs::write(&copy, bytes).map_err(RepoError::io("write", &copy))?;
        to_write.push((copy, id.clone()));
        updates.push((path.clone(), mode.clone(), id));
    }
    for chunk in to_write.chunks(256) {
        let mut args: Vec<String> = vec![
            git_dir.clone(),
            "hash-object".into(),
            "-w".into(),
            "--no-filters".into(),
            "--".into(),
        ];
        args.extend(chunk.iter().map(|(p, _)| p.display().to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = input.git.run(input.mirror, &refs)?.text();
        let written: Vec<&str> = output.lines().collect();
        if written.len() != chunk.len() {
            return Err(RepoError::UnexpectedOutput(format!(
                "hash-object wrote {} objects for {} files",
                written.len(),
                chunk.len()
            )));
        }
        for ((_, expected), got) in chunk.iter().zip(written) {
            if expected != got {
                return Err(RepoError::Corrupt(format!(
                    "blob written as {got}, expected {expected}"
                )));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&blob_dir);
    deleted.retain(|path| !present.contains_key(path));

    // 5. The temporary index, seeded from the base tree.
    let index = input.scratch.join("candidate.index");
    let _ = std::fs::remove_file(&index);
    let empty_work_tree = input.scratch.join("empty-work-tree");
    std::fs::create_dir_all(&empty_work_tree).map_err(RepoError::io("create", &empty_work_tree))?;
    let work_tree = format!("--work-tree={}", empty_work_tree.display());
    input.git.run_with_index(
        input.mirror,
        &index,
        &[&git_dir, "read-tree", input.base_tree],
    )?;
    let deleted_list: Vec<String> = deleted.iter().cloned().collect();
    for chunk in deleted_list.chunks(256) {
        let mut args: Vec<&str> =
            vec![&git_dir, &work_tree, "update-index", "--force-remove", "--"];
        args.extend(chunk.iter().map(String::as_str));
        input.git.run_with_index(&empty_work_tree, &index, &args)?;
    }
    let cacheinfo: Vec<String> = updates
        .iter()
        .map(|(path, mode, id)| format!("{mode},{id},{path}"))
        .collect();
    for chunk in cacheinfo.chunks(256) {
        let mut args: Vec<&str> = vec![&git_dir, "update-index", "--add", "--replace"];
        for info in chunk {
            args.push("--cacheinfo");
            args.push(info);
        }
        input.git.run_with_index(input.mirror, &index, &args)?;
    }
    let tree = input
        .git
        .run_with_index(input.mirror, &index, &[&git_dir, "write-tree"])?
        .text();
    let _ = std::fs::remove_file(&index);
    if ObjectFormat::of_id(&tree) != Some(format) {
        return Err(RepoError::UnexpectedOutput(format!(
            "write-tree printed {tree:?}"
        )));
    }
    Ok(Candidate {
        tree,
        written: updates.into_iter().map(|(path, _, _)| path).collect(),
        deleted: deleted_list,
        skipped,
    })
}

/// `ls-tree -r` of a tree: path → (mode, id).
pub(crate) fn list_tree(
    git: &Git,
    mirror: &Path,
    git_dir: &str,
    tree: &str,
) -> Result<BTreeMap<String, TreeEntry>, RepoError> {
    let output = git.run(
        mirror,
        &[git_dir, "ls-tree", "-r", "-z", "--full-tree", tree],
    )?;
    let mut entries = BTreeMap::new();
    for record in output.stdout.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let text = String::from_utf8_lossy(record);
        let (meta, path) = text
            .split_once('\t')
            .ok_or_else(|| RepoError::UnexpectedOutput(format!("ls-tree line {text:?}")))?;
        let mut parts = meta.split(' ');
        let (mode, _kind, id) = match (parts.next(), parts.next(), parts.next()) {
            (Some(mode), Some(kind), Some(id)) => (mode, kind, id),
            _ => {
                return Err(RepoError::UnexpectedOutput(format!(
                    "ls-tree line {text:?}"
                )))
            }
        };
        entries.insert(
            path.to_string(),
            TreeEntry {
                mode: mode.to_string(),
                id: id.to_string(),
            },
        );
    }
    Ok(entries)
}

fn is_git_name(name: &str) -> bool {
    name.eq_ignore_ascii_case(".git")
}

/// Whether an upper directory hides or replaces the lower one (opaque, or renamed with
/// `redirect_dir`): then its lower contents cannot be trusted to be unchanged.
fn replaces_lower(dir: &Path) -> bool {
    let mut buffer = [0u8; 256];
    [
        "trusted.overlay.opaque",
        "user.overlay.opaque",
        "trusted.overlay.redirect",
        "user.overlay.redirect",
    ]
    .iter()
    .any(|name| rustix::fs::lgetxattr(dir, *name, &mut buffer).is_ok())
}

/// Walks the upper directory: every non-directory is a touched path; a directory that is new,
/// or replaces the lower one, has its whole merged subtree (and every base path under it)
/// touched.
fn walk_upper(
    upper: &Path,
    relative: &str,
    base_dirs: &BTreeSet<String>,
    base: &BTreeMap<String, TreeEntry>,
    merged: &Path,
    touched: &mut BTreeSet<String>,
    skipped: &mut Vec<(String, String)>,
) -> Result<(), RepoError> {
    let dir = upper.join(relative);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RepoError::io("list", &dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(RepoError::io("list", &dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            skipped.push((
                format!("{relative}/{}", name.to_string_lossy()),
                "file name is not UTF-8".into(),
            ));
            continue;
        };
        let path = if relative.is_empty() {
            name.to_string()
        } else {
            format!("{relative}/{name}")
        };
        if is_git_name(name) {
            skipped.push((path, "inside .git".into()));
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(RepoError::io("stat", entry.path()))?;
        if kind.is_dir() {
            if !base_dirs.contains(&path) || replaces_lower(&entry.path()) {
                touched.insert(path.clone());
                let prefix = format!("{path}/");
                touched.extend(base.keys().filter(|k| k.starts_with(&prefix)).cloned());
                walk_merged(merged, &path, touched, skipped)?;
            } else {
                walk_upper(upper, &path, base_dirs, base, merged, touched, skipped)?;
            }
        } else if kind.is_char_device() || kind.is_file() || kind.is_symlink() {
            // Whiteouts (0/0 character devices) are read back as missing from the merged view.
            touched.insert(path);
        } else {
            touched.insert(path);
        }
    }
    Ok(())
}

/// Every path below `relative` in the merged view.
fn walk_merged(
    merged: &Path,
    relative: &str,
    touched: &mut BTreeSet<String>,
    skipped: &mut Vec<(String, String)>,
) -> Result<(), RepoError> {
    let dir = merged.join(relative);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RepoError::io("list", &dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(RepoError::io("list", &dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            skipped.push((
                format!("{relative}/{}", name.to_string_lossy()),
                "file name is not UTF-8".into(),
            ));
            continue;
        };
        let path = if relative.is_empty() {
            name.to_string()
        } else {
            format!("{relative}/{name}")
        };
        if is_git_name(name) {
            skipped.push((path, "inside .git".into()));
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(RepoError::io("stat", entry.path()))?;
        if kind.is_dir() {
            walk_merged(merged, &path, touched, skipped)?;
        } else {
            touched.insert(path);
        }
    }
    Ok(())
}

/// The subset of `paths` (relative to `work_tree`) that the `.gitignore` files in `work_tree`
/// exclude. Each directory's `.gitignore` is read from the work tree (the candidate); deeper
/// files override shallower ones, and a path under an ignored directory is ignored, as in git.
/// Repository-wide exclude files outside the tree (`info/exclude`, `core.excludesFile`) are
/// not consulted: they are not part of the repository.
fn ignored_paths(work_tree: &Path, paths: &[&str]) -> Vec<String> {
    use ignore::gitignore::{Gitignore, GitignoreBuilder};
    let mut cache: BTreeMap<String, Option<Gitignore>> = BTreeMap::new();
    let mut load = |dir: &str| -> Option<Gitignore> {
        cache
            .entry(dir.to_string())
            .or_insert_with(|| {
                let base = work_tree.join(dir);
                let file = base.join(".gitignore");
                // Only a regular file counts (a symlinked .gitignore is ignored by git too).
                let is_file = std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file());
                if !is_file {
                    return None;
                }
                let mut builder = GitignoreBuilder::new(&base);
                if builder.add(&file).is_some() {
                    return None;
                }
                builder.build().ok()
            })
            .clone()
    };
    let mut ignored = Vec::new();
    for path in paths {
        let full = work_tree.join(path);
        let mut verdict = false;
        let mut dirs = vec![String::new()];
        let mut prefix = String::new();
        let components: Vec<&str> = path.split('/').collect();
        for component in &components[..components.len().saturating_sub(1)] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(component);
            dirs.push(prefix.clone());
        }
        for dir in &dirs {
            if let Some(rules) = load(dir) {
                let matched = rules.matched_path_or_any_parents(&full, false);
                if matched.is_ignore() {
                    verdict = true;
                } else if matched.is_whitelist() {
                    verdict = false;
                }
            }
        }
        if verdict {
            ignored.push(path.to_string());
        }
    }
    ignored
}

/// The git blob id of `bytes`.
fn blob_id(format: ObjectFormat, bytes: &[u8]) -> String {
    let header = format!("blob {}\0", bytes.len());
    match format {
        ObjectFormat::Sha1 => {
            let mut hasher = sha1::Sha1::new();
            hasher.update(header.as_bytes());
            hasher.update(bytes);
            hex::encode(hasher.finalize())
        }
        ObjectFormat::Sha256 => {
            let mut hasher = sha2::Sha256::new();
            hasher.update(header.as_bytes());
            hasher.update(bytes);
            hex::encode(hasher.finalize())
        }
    }
}

/// A fixed identity and time for objects Warden creates, so their ids depend only on content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitIdentity {
    pub name: String,
    pub email: String,
    /// Seconds since the Unix epoch (UTC).
    pub time: u64,
}

impl CommitIdentity {
    pub fn warden(time: u64) -> CommitIdentity {
        CommitIdentity {
            name: "Warden".into(),
            email: "warden@localhost".into(),
            time,
        }
    }
}

/// Writes a commit object (tree on top of `parent`) into the mirror and returns its id. The
/// object is built byte for byte here, so its id is a function of its inputs.
pub fn write_commit(
    git: &Git,
    mirror: &Path,
    scratch: &Path,
    tree: &str,
    parent: &str,
    message: &str,
    identity: &CommitIdentity,
) -> Result<String, RepoError> {
    let format = ObjectFormat::of_id(tree)
        .ok_or_else(|| RepoError::Corrupt(format!("{tree:?} is not a tree id")))?;
    if ObjectFormat::of_id(parent) != Some(format) {
        return Err(RepoError::Corrupt(format!("{parent:?} is not a commit id")));
    }
    let clean = |text: &str| text.replace(['<', '>', '\n'], "");
    let signature = format!(
        "{} <{}> {} +0000",
        clean(&identity.name),
        clean(&identity.email),
        identity.time
    );
    let mut message = message.replace('\r', "");
    if !message.ends_with('\n') {
        message.push('\n');
    }
    let body = format!(
        "tree {tree}\nparent {parent}\nauthor {signature}\ncommitter {signature}\n\n{message}"
    );
    std::fs::create_dir_all(scratch).map_err(RepoError::io("create", scratch))?;
    let file = scratch.join("commit.txt");
    std::fs::write(&file, body.as_bytes()).map_err(RepoError::io("write", &file))?;
    let git_dir = format!("--git-dir={}", mirror.display());
    let file_text = file.display().to_string();
    let commit = git
        .run(
            mirror,
            &[
                &git_dir,
                "hash-object",
                "-t",
                "commit",
                "-w",
                "--no-filters",
                "--",
                &file_text,
            ],
        )?
        .text();
    let _ = std::fs::remove_file(&file);
    let expected = {
        let header = format!("commit {}\0", body.len());
        match format {
            ObjectFormat::Sha1 => {
                let mut hasher = sha1::Sha1::new();
                hasher.update(header.as_bytes());
                hasher.update(body.as_bytes());
                hex::encode(hasher.finalize())
            }
            ObjectFormat::Sha256 => {
                let mut hasher = sha2::Sha256::new();
                hasher.update(header.as_bytes());
                hasher.update(body.as_bytes());
                hex::encode(hasher.finalize())
            }
        }
    };
    if commit != expected {
        return Err(RepoError::Corrupt(format!(
            "commit written as {commit}, expected {expected}"
        )));
    }
    Ok(commit)
}

/// Materializes `tree` (on top of `parent`, through a throwaway commit object) into `dest`, an
/// empty directory, with the same verified walk as snapshots. The result is read-only.
pub fn materialize_tree(
    git: &Git,
    mirror: &Path,
    scratch: &Path,
    parent: &str,
    tree: &str,
    dest: &Path,
) -> Result<(), RepoError> {
    let commit = write_commit(
        git,
        mirror,
        scratch,
        tree,
        parent,
        "warden candidate",
        &CommitIdentity::warden(0),
    )?;
    std::fs::create_dir_all(dest).map_err(RepoError::io("create", dest))?;
    // Bounded already: the base is a snapshot within its limits, the changes came through the
    // view's writable space, which has its own quota.
    let unbounded = crate::materialize::SnapshotLimits {
        max_bytes: u64::MAX,
        max_files: u64::MAX,
    };
    materialize(git, mirror, &commit, tree, dest, unbounded, &|_| {})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RepoSpec, RepoStore};
    use std::os::unix::fs::symlink;
    use warden_test_support::git_fixture::TempRepo;

    fn writable_fixture() -> (tempfile::TempDir, tempfile::TempDir, WritableRoot) {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "fn main() {}\n").unwrap();
        symlink(outside.path(), root.join("escape")).unwrap();
        symlink("src", root.join("inside")).unwrap();
        symlink("src/lib.rs", root.join("file_link")).unwrap();
        let writable = WritableRoot::open(root).unwrap();
        (dir, outside, writable)
    }

    #[test]
    fn writes_stay_beneath_the_root_and_never_follow_symlinks() {
        let (dir, outside, root) = writable_fixture();
        for ok in ["src/lib.rs", "new/deep/file.txt", "./src/../top.txt"] {
            root.write(ok, b"x").unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(std::fs::read(dir.path().join("top.txt")).unwrap(), b"x");
        type Expect = fn(&WriteError) -> bool;
        let refused: &[(&str, Expect)] = &[
            ("/etc/passwd", |e| {
                matches!(e, WriteError::Confined(ConfineError::Absolute(_)))
            }),
            ("../x", |e| {
                matches!(e, WriteError::Confined(ConfineError::Escapes(_)))
            }),
            (".git/hooks/x", |e| {
                matches!(e, WriteError::Confined(ConfineError::GitDir(_)))
            }),
            ("src/.GIT/x", |e| {
                matches!(e, WriteError::Confined(ConfineError::GitDir(_)))
            }),
            ("escape/x", |e| matches!(e, WriteError::Symlink(_))),
            ("inside/x", |e| matches!(e, WriteError::Symlink(_))),
            ("file_link", |e| matches!(e, WriteError::Symlink(_))),
            ("", |e| matches!(e, WriteError::IsDirectory(_))),
            ("src", |e| {
                matches!(e, WriteError::IsDirectory(_) | WriteError::Io { .. })
            }),
            ("src/lib.rs/x", |e| matches!(e, WriteError::Io { .. })),
        ];
        for (path, expected) in refused {
            let error = root.write(path, b"x").unwrap_err();
            assert!(expected(&error), "{path}: {error:?}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(root.read("escape/anything").is_err());
        assert!(root.read("file_link").is_err());
        assert_eq!(root.read("src/lib.rs").unwrap(), b"x");
    }

    proptest::proptest! {
        #[test]
        fn no_write_lands_outside_or_in_git(parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("..".to_string()),
                proptest::strategy::Just(".".to_string()),
                proptest::strategy::Just(".git".to_string()),
                proptest::strategy::Just("escape".to_string()),
                proptest::strategy::Just("inside".to_string()),
                proptest::strategy::Just("file_link".to_string()),
                proptest::strategy::Just("src".to_string()),
                "[a-z./]{0,6}",
            ], 1..6)) {
            let (dir, outside, root) = writable_fixture();
            let joined = parts.join("/");
            let _ = root.write(&joined, b"x");
            proptest::prop_assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
            proptest::prop_assert!(!dir.path().join(".git").exists(), "{}", joined);
            // The symlinks themselves were never replaced.
            for link in ["escape", "inside", "file_link"] {
                let meta = std::fs::symlink_metadata(dir.path().join(link)).unwrap();
                proptest::prop_assert!(meta.file_type().is_symlink(), "{} after {}", link, joined);
            }
        }
    }

    /// Without an upper directory (a plain copy, as the `local` backend makes) every path is
    /// compared; ignored new files and `.git` stay out; deletions and modes are picked up.
    #[test]
    fn builds_the_tree_of_a_plain_copy() {
        let repo = TempRepo::new();
        repo.write("a.txt", "a\n")
            .write("dir/b.txt", "b\n")
            .write("gone.txt", "bye\n")
            .write(".gitignore", "*.log\n");
        // A submodule (gitlink) whose checkout is an empty directory.
        std::fs::create_dir(repo.path().join("sub")).unwrap();
        repo.git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{},sub", "1".repeat(40)),
        ]);
        let base_commit = repo.commit("base");
        let home = tempfile::tempdir().unwrap();
        let store = RepoStore::open(home.path()).unwrap();
        let spec = RepoSpec::parse(repo.path().to_str().unwrap(), Path::new("/")).unwrap();
        let pinned = store.pin(&spec).unwrap();
        assert_eq!(pinned.commit, base_commit);

        let merged = tempfile::tempdir().unwrap();
        let m = merged.path();
        std::fs::create_dir_all(m.join("dir")).unwrap();
        std::fs::create_dir_all(m.join(".git")).unwrap();
        std::fs::write(m.join("a.txt"), "A\n").unwrap();
        std::fs::write(m.join("dir/b.txt"), "b\n").unwrap();
        std::fs::write(m.join(".gitignore"), "*.log\n").unwrap();
        std::fs::write(m.join("new.txt"), "new\n").unwrap();
        std::fs::write(m.join("noise.log"), "noise\n").unwrap();
        std::fs::write(m.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(m.join("sub")).unwrap();
        std::fs::write(m.join("sub/inside.txt"), "x\n").unwrap();
        std::fs::set_permissions(m.join("dir/b.txt"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let candidate = build_candidate_tree(CandidateInput {
            git: store.git(),
            mirror: &pinned.mirror,
            base_tree: &pinned.tree,
            upper: &m.join("no-upper-here"),
            merged: m,
            scratch: scratch.path(),
        })
        .unwrap();
        assert_eq!(candidate.written, ["a.txt", "dir/b.txt", "new.txt"]);
        assert_eq!(candidate.deleted, ["gone.txt"]);
        assert!(candidate
            .skipped
            .iter()
            .any(|(p, why)| p == "noise.log" && why.contains("gitignore")));
        assert!(candidate.skipped.iter().any(|(p, _)| p == ".git"));
        assert!(candidate
            .skipped
            .iter()
            .any(|(p, why)| p == "sub/inside.txt" && why.contains("submodule")));
        let git_dir = format!("--git-dir={}", pinned.mirror.display());
        let listing = store
            .git()
            .run(
                &pinned.mirror,
                &[&git_dir, "ls-tree", "-r", &candidate.tree],
            )
            .unwrap()
            .text();
        let entries: Vec<(&str, &str)> = listing
            .lines()
            .map(|l| {
                let (meta, path) = l.split_once('\t').unwrap();
                (meta.split(' ').next().unwrap(), path)
            })
            .collect();
        assert_eq!(
            entries,
            [
                ("100644", ".gitignore"),
                ("100644", "a.txt"),
                ("100755", "dir/b.txt"),
                ("100644", "new.txt"),
                ("160000", "sub")
            ]
        );

        // Same state again: the same tree. The base itself: the base tree.
        let again = build_candidate_tree(CandidateInput {
            git: store.git(),
            mirror: &pinned.mirror,
            base_tree: &pinned.tree,
            upper: &m.join("no-upper-here"),
            merged: m,
            scratch: scratch.path(),
        })
        .unwrap();
        assert_eq!(again.tree, candidate.tree);

        // The commit is deterministic and materializes to exactly the tree.
        let identity = CommitIdentity::warden(1_700_000_000);
        let one = write_commit(
            store.git(),
            &pinned.mirror,
            scratch.path(),
            &candidate.tree,
            &pinned.commit,
            "m",
            &identity,
        )
        .unwrap();
        let two = write_commit(
            store.git(),
            &pinned.mirror,
            scratch.path(),
            &candidate.tree,
            &pinned.commit,
            "m",
            &identity,
        )
        .unwrap();
        assert_eq!(one, two);
        let dest = scratch.path().join("tree");
        materialize_tree(
            store.git(),
            &pinned.mirror,
            scratch.path(),
            &pinned.commit,
            &candidate.tree,
            &dest,
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("a.txt")).unwrap(), "A\n");
        assert!(!dest.join("noise.log").exists() && !dest.join("gone.txt").exists());
        // Materializations and snapshots are read-only; open them up so the temp dirs go.
        for dir in [scratch.path(), home.path()] {
            open_up(dir);
        }
    }

    fn open_up(dir: &Path) {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&entry.path());
            }
        }
    }
}
