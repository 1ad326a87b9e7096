//! Writes one commit's tree into a directory straight from the object store, verifying as it goes.
//!
//! A single `git cat-file --batch` process streams the commit, its trees and its blobs. Each
//! object is hashed as it is read (`<type> <size>\0<content>`) and compared with the id it was
//! requested by, starting from the pinned commit id: a Merkle walk, so a snapshot that was written
//! is byte-for-byte the pinned tree, with no second pass. Nothing here runs filters, smudge,
//! textconv or checkout; modes come from the tree (`100644`, `100755`, symlinks, gitlinks as empty
//! directories) and every file is made read-only as it is closed.
//!
//! Entries are only ever created inside directories this walk created itself, with exclusive
//! creation, so a hostile tree (duplicate names, `a` as a symlink and `a/x` as a file, `..`,
//! `.git`) cannot write outside the destination.
//!
//! **Budgets.** [`SnapshotLimits`] are checked as the walk goes: an entry is counted when its
//! tree is parsed (before anything is created for it) and a blob's size when its header arrives
//! (before a byte of it is written), so a small repository that expands to gigabytes or to
//! millions of files is refused after writing at most the limit.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use sha1::Digest;

use crate::error::RepoError;
use crate::git::Git;

/// Longest symlink target accepted (Linux `PATH_MAX` less the terminator).
const MAX_SYMLINK_TARGET: usize = 4095;

/// The hash function a repository's object ids use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectFormat {
    Sha1,
    Sha256,
}

impl ObjectFormat {
    pub(crate) fn from_name(name: &str) -> Result<ObjectFormat, RepoError> {
        match name {
            "sha1" => Ok(ObjectFormat::Sha1),
            "sha256" => Ok(ObjectFormat::Sha256),
            other => Err(RepoError::UnsupportedObjectFormat(other.to_string())),
        }
    }

    /// The format of a full, lowercase hex object id, or `None` if `id` is not one.
    pub(crate) fn of_id(id: &str) -> Option<ObjectFormat> {
        let hex = id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        match id.len() {
            40 if hex => Some(ObjectFormat::Sha1),
            64 if hex => Some(ObjectFormat::Sha256),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ObjectFormat::Sha1 => "sha1",
            ObjectFormat::Sha256 => "sha256",
        }
    }

    pub(crate) fn raw_len(self) -> usize {
        match self {
            ObjectFormat::Sha1 => 20,
            ObjectFormat::Sha256 => 32,
        }
    }

    pub(crate) fn hasher(self) -> ObjectHasher {
        match self {
            ObjectFormat::Sha1 => ObjectHasher::Sha1(sha1::Sha1::new()),
            ObjectFormat::Sha256 => ObjectHasher::Sha256(sha2::Sha256::new()),
        }
    }
}

pub(crate) enum ObjectHasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl ObjectHasher {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            ObjectHasher::Sha1(hasher) => hasher.update(bytes),
            ObjectHasher::Sha256(hasher) => hasher.update(bytes),
        }
    }

    pub(crate) fn finish_hex(self) -> String {
        match self {
            ObjectHasher::Sha1(hasher) => hex::encode(hasher.finalize()),
            ObjectHasher::Sha256(hasher) => hex::encode(hasher.finalize()),
        }
    }
}

/// How large one snapshot may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// Bytes of file contents and symlink targets.
    pub max_bytes: u64,
    /// Entries: files, directories and symlinks.
    pub max_files: u64,
}

impl Default for SnapshotLimits {
    /// 1 GiB and 100,000 entries.
    fn default() -> Self {
        SnapshotLimits {
            max_bytes: 1 << 30,
            max_files: 100_000,
        }
    }
}

/// What the walk has written so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Usage {
    bytes: u64,
    entries: u64,
}

/// How far a snapshot being written has got, reported about once a second for long ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotProgress {
    /// Files, directories and links written.
    pub entries: u64,
    /// File content written, in bytes.
    pub bytes: u64,
}

/// How often a long snapshot reports its progress.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Materializes `commit` (whose tree must be `tree`) from the bare repository `git_dir` into
/// `dest`, an empty directory that ends up read-only. Stops with [`RepoError::QuotaExceeded`]
/// as soon as the tree outgrows `limits`.
pub(crate) fn materialize(
    git: &Git,
    git_dir: &Path,
    commit: &str,
    tree: &str,
    dest: &Path,
    limits: SnapshotLimits,
    progress: &dyn Fn(SnapshotProgress),
) -> Result<(), RepoError> {
    let format = ObjectFormat::of_id(commit)
        .ok_or_else(|| RepoError::Corrupt(format!("{commit:?} is not a full object id")))?;
    let git_dir_arg = format!("--git-dir={}", git_dir.display());
    let mut stream = git.stream(git_dir, &[&git_dir_arg, "cat-file", "--batch"])?;
    let (stdin, stdout) = match (stream.take_stdin(), stream.take_stdout()) {
        (Some(stdin), Some(stdout)) => (stdin, stdout),
        _ => return Err(RepoError::UnexpectedOutput("cat-file has no pipes".into())),
    };
    // Requests go out on their own thread so git never waits for us to read while we wait for
    // it to read: ids are queued as soon as their parent tree is parsed.
    let (requests, queued) = mpsc::channel::<String>();
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut stdin = BufWriter::with_capacity(64 * 1024, stdin);
        while let Ok(first) = queued.recv() {
            writeln!(stdin, "{first}")?;
            while let Ok(next) = queued.try_recv() {
                writeln!(stdin, "{next}")?;
            }
            stdin.flush()?;
        }
        Ok(())
    });
    let mut responses = BufReader::with_capacity(256 * 1024, stdout);
    let mut request = |id: &str| {
        requests
            .send(id.to_string())
            .map_err(|_| RepoError::UnexpectedOutput("cat-file stopped reading requests".into()))
    };
    let walked =
        Walk::new(dest, format, limits, progress).run(commit, tree, &mut request, &mut responses);
    drop(requests);
    match walked {
        Ok(()) => {
            drop(responses);
            let written = writer.join();
            stream.finish()?;
            match written {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(RepoError::UnexpectedOutput(format!(
                    "writing to cat-file failed: {e}"
                ))),
                Err(_) => Err(RepoError::UnexpectedOutput(
                    "cat-file writer panicked".into(),
                )),
            }
        }
        Err(e) => {
            // Dropping our end of its output makes git stop; the stream's drop kills and reaps it.
            drop(responses);
            drop(stream);
            let _ = writer.join();
            Err(e)
        }
    }
}

/// What a queued request is for; responses arrive in request order.
enum Pending {
    Tree { rel: PathBuf },
    File { rel: PathBuf, executable: bool },
    Symlink { rel: PathBuf },
}

/// One verified walk from a commit down to every blob.
struct Walk<'a> {
    dest: &'a Path,
    format: ObjectFormat,
    /// Directories created, parents before children.
    dirs: Vec<PathBuf>,
    header: Vec<u8>,
    limits: SnapshotLimits,
    usage: Usage,
    progress: &'a dyn Fn(SnapshotProgress),
    progress_every: std::time::Duration,
    reported: std::time::Instant,
}

impl<'a> Walk<'a> {
    fn new(
        dest: &'a Path,
        format: ObjectFormat,
        limits: SnapshotLimits,
        progress: &'a dyn Fn(SnapshotProgress),
    ) -> Walk<'a> {
        Walk {
            dest,
            format,
            dirs: Vec::new(),
            header: Vec::with_capacity(128),
            limits,
            usage: Usage::default(),
            progress,
            progress_every: PROGRESS_EVERY,
            reported: std::time::Instant::now(),
        }
    }

    /// Counts one more entry, refusing it past the limit.
    fn count_entry(&mut self, rel: &Path) -> Result<(), RepoError> {
        self.usage.entries += 1;
        if self.usage.entries > self.limits.max_files {
            return Err(RepoError::QuotaExceeded(format!(
                "the snapshot would hold more than {} files and directories (stopped at {})",
                self.limits.max_files,
                rel.display()
            )));
        }
        Ok(())
    }

    /// Counts `size` more bytes, refusing them past the limit (before they are written).
    fn count_bytes(&mut self, size: usize, rel: &Path) -> Result<(), RepoError> {
        self.usage.bytes = self.usage.bytes.saturating_add(size as u64);
        if self.reported.elapsed() >= self.progress_every {
            self.reported = std::time::Instant::now();
            (self.progress)(SnapshotProgress {
                entries: self.usage.entries,
                bytes: self.usage.bytes,
            });
        }
        if self.usage.bytes > self.limits.max_bytes {
            return Err(RepoError::QuotaExceeded(format!(
                "the snapshot would exceed {} bytes ({} is {size} bytes)",
                self.limits.max_bytes,
                rel.display()
            )));
        }
        Ok(())
    }

    fn run(
        mut self,
        commit: &str,
        expected_tree: &str,
        request: &mut dyn FnMut(&str) -> Result<(), RepoError>,
        responses: &mut impl BufRead,
    ) -> Result<(), RepoError> {
        request(commit)?;
        let body = self.read_whole(responses, commit, "commit", None)?;
        let tree = body
            .strip_prefix(b"tree ")
            .and_then(|rest| rest.split(|&b| b == b'\n').next())
            .map(|id| String::from_utf8_lossy(id).into_owned())
            .ok_or_else(|| RepoError::Corrupt(format!("commit {commit} has no tree line")))?;
        if tree != expected_tree {
            return Err(RepoError::Corrupt(format!(
                "commit {commit} has tree {tree}, expected {expected_tree}"
            )));
        }
        let mut queue = VecDeque::new();
        request(&tree)?;
        queue.push_back((
            tree,
            Pending::Tree {
                rel: PathBuf::new(),
            },
        ));
        while let Some((id, pending)) = queue.pop_front() {
            match pending {
                Pending::Tree { rel } => {
                    let body = self.read_whole(responses, &id, "tree", None)?;
                    for entry in parse_tree(&body, self.format, &rel)? {
                        let child = rel.join(OsStr::from_bytes(entry.name));
                        self.count_entry(&child)?;
                        match entry.kind {
                            EntryKind::Tree => {
                                self.create_dir(&child)?;
                                request(&entry.id)?;
                                queue.push_back((entry.id, Pending::Tree { rel: child }));
                            }
                            EntryKind::File { executable } => {
                                request(&entry.id)?;
                                queue.push_back((
                                    entry.id,
                                    Pending::File {
                                        rel: child,
                                        executable,
                                    },
                                ));
                            }
                            EntryKind::Symlink => {
                                request(&entry.id)?;
                                queue.push_back((entry.id, Pending::Symlink { rel: child }));
                            }
                            // A submodule's commit is not in this repository: an empty directory
                            // marks where it would be, as `git archive` does.
                            EntryKind::Gitlink => self.create_dir(&child)?,
                        }
                    }
                }
                Pending::File { rel, executable } => {
                    self.write_file(responses, &id, &rel, executable)?;
                }
                Pending::Symlink { rel } => {
                    let target = self.read_whole(responses, &id, "blob", Some(&rel))?;
                    if target.is_empty() || target.len() > MAX_SYMLINK_TARGET || target.contains(&0)
                    {
                        return Err(unsafe_entry(
                            &rel,
                            "symlink target is empty, too long or contains NUL",
                        ));
                    }
                    let path = self.dest.join(&rel);
                    std::os::unix::fs::symlink(OsStr::from_bytes(&target), &path)
                        .map_err(RepoError::io("create symlink", &path))?;
                }
            }
        }
        for dir in self
            .dirs
            .iter()
            .rev()
            .map(PathBuf::as_path)
            .chain([self.dest])
        {
            std::fs::set_permissions(dir, Permissions::from_mode(0o555))
                .map_err(RepoError::io("make read-only", dir))?;
        }
        Ok(())
    }

    fn create_dir(&mut self, rel: &Path) -> Result<(), RepoError> {
        let path = self.dest.join(rel);
        // `create_dir` fails on anything already there (a symlink included), so a duplicate name
        // can never redirect later writes.
        std::fs::create_dir(&path).map_err(RepoError::io("create directory", &path))?;
        self.dirs.push(path);
        Ok(())
    }

    /// Reads the response header for `id` and returns the object's size.
    fn read_header(
        &mut self,
        responses: &mut impl BufRead,
        id: &str,
        kind: &str,
    ) -> Result<usize, RepoError> {
        self.header.clear();
        responses
            .read_until(b'\n', &mut self.header)
            .map_err(|e| RepoError::UnexpectedOutput(format!("reading cat-file: {e}")))?;
        let line = std::str::from_utf8(&self.header)
            .map_err(|_| RepoError::UnexpectedOutput("non-utf-8 cat-file header".into()))?
            .trim_end_matches('\n');
        let mut fields = line.split(' ');
        let (got_id, got_kind, size) = (fields.next(), fields.next(), fields.next());
        if got_id != Some(id) {
            return Err(RepoError::UnexpectedOutput(format!(
                "asked cat-file for {id}, got {line:?}"
            )));
        }
        if got_kind == Some("missing") {
            return Err(RepoError::Corrupt(format!(
                "object {id} is missing from the mirror"
            )));
        }
        if got_kind != Some(kind) {
            return Err(RepoError::Corrupt(format!(
                "object {id} is a {}, expected a {kind}",
                got_kind.unwrap_or("nothing")
            )));
        }
        size.and_then(|s| s.parse().ok())
            .ok_or_else(|| RepoError::UnexpectedOutput(format!("bad cat-file header {line:?}")))
    }

    /// Reads a whole object (commit, tree, symlink target) and verifies its id. A symlink
    /// target (`counted` names its path) counts towards the byte limit, checked before it is
    /// read; a commit or tree is held in memory only, bounded by what git stores.
    fn read_whole(
        &mut self,
        responses: &mut impl BufRead,
        id: &str,
        kind: &str,
        counted: Option<&Path>,
    ) -> Result<Vec<u8>, RepoError> {
        let size = self.read_header(responses, id, kind)?;
        if let Some(rel) = counted {
            self.count_bytes(size, rel)?;
        }
        let mut body = vec![0u8; size];
        responses
            .read_exact(&mut body)
            .map_err(|e| RepoError::UnexpectedOutput(format!("reading {kind} {id}: {e}")))?;
        expect_newline(responses, id)?;
        let mut hasher = self.format.hasher();
        hasher.update(format!("{kind} {size}\0").as_bytes());
        hasher.update(&body);
        verify(hasher, id, kind)?;
        Ok(body)
    }

    /// Streams a blob into a new read-only file, hashing it on the way.
    fn write_file(
        &mut self,
        responses: &mut impl BufRead,
        id: &str,
        rel: &Path,
        executable: bool,
    ) -> Result<(), RepoError> {
        let size = self.read_header(responses, id, "blob")?;
        self.count_bytes(size, rel)?;
        let path = self.dest.join(rel);
        let mode = if executable { 0o555 } else { 0o444 };
        // Exclusive creation never follows or replaces an existing entry (symlinks included).
        let mut file: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(RepoError::io("create file", &path))?;
        let mut hasher = self.format.hasher();
        hasher.update(format!("blob {size}\0").as_bytes());
        let mut remaining = size;
        while remaining > 0 {
            let available = responses
                .fill_buf()
                .map_err(|e| RepoError::UnexpectedOutput(format!("reading blob {id}: {e}")))?;
            if available.is_empty() {
                return Err(RepoError::UnexpectedOutput(format!(
                    "cat-file ended inside blob {id}"
                )));
            }
            let take = available.len().min(remaining);
            hasher.update(&available[..take]);
            file.write_all(&available[..take])
                .map_err(RepoError::io("write file", &path))?;
            responses.consume(take);
            remaining -= take;
        }
        expect_newline(responses, id)?;
        verify(hasher, id, "blob").map_err(|e| match e {
            RepoError::Corrupt(message) => {
                RepoError::Corrupt(format!("{message} (at {})", rel.display()))
            }
            other => other,
        })?;
        // The umask may have narrowed the creation mode; state it exactly.
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(RepoError::io("make read-only", &path))?;
        Ok(())
    }
}

fn expect_newline(responses: &mut impl BufRead, id: &str) -> Result<(), RepoError> {
    let mut newline = [0u8; 1];
    responses
        .read_exact(&mut newline)
        .map_err(|e| RepoError::UnexpectedOutput(format!("reading after {id}: {e}")))?;
    if newline != *b"\n" {
        return Err(RepoError::UnexpectedOutput(format!(
            "no newline after object {id}"
        )));
    }
    Ok(())
}

fn verify(hasher: ObjectHasher, id: &str, kind: &str) -> Result<(), RepoError> {
    let actual = hasher.finish_hex();
    if actual == id {
        Ok(())
    } else {
        Err(RepoError::Corrupt(format!(
            "{kind} {id} hashes to {actual}"
        )))
    }
}

#[derive(Debug, PartialEq, Eq)]
enum EntryKind {
    Tree,
    File { executable: bool },
    Symlink,
    Gitlink,
}

#[derive(Debug)]
struct TreeEntry<'a> {
    kind: EntryKind,
    name: &'a [u8],
    id: String,
}

/// Parses a raw tree object (`<octal mode> <name>\0<raw id>`*), refusing names that must never
/// be written.
fn parse_tree<'a>(
    body: &'a [u8],
    format: ObjectFormat,
    parent: &Path,
) -> Result<Vec<TreeEntry<'a>>, RepoError> {
    let mut entries = Vec::new();
    let mut rest = body;
    let malformed = || {
        RepoError::Corrupt(format!(
            "malformed tree at {:?}",
            parent.display().to_string()
        ))
    };
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ').ok_or_else(malformed)?;
        let mode = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .ok_or_else(malformed)?;
        rest = &rest[space + 1..];
        let nul = rest.iter().position(|&b| b == 0).ok_or_else(malformed)?;
        let name = &rest[..nul];
        rest = &rest[nul + 1..];
        if rest.len() < format.raw_len() {
            return Err(malformed());
        }
        let id = hex::encode(&rest[..format.raw_len()]);
        rest = &rest[format.raw_len()..];
        let rel = parent.join(OsStr::from_bytes(name));
        if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
            return Err(unsafe_entry(&rel, "not a single path component"));
        }
        if name.eq_ignore_ascii_case(b".git") {
            return Err(unsafe_entry(&rel, "a checkout never contains .git"));
        }
        let kind = match mode & 0o170000 {
            0o040000 => EntryKind::Tree,
            0o100000 => EntryKind::File {
                executable: mode & 0o100 != 0,
            },
            0o120000 => EntryKind::Symlink,
            0o160000 => EntryKind::Gitlink,
            _ => return Err(unsafe_entry(&rel, &format!("unknown mode {mode:o}"))),
        };
        entries.push(TreeEntry { kind, name, id });
    }
    Ok(entries)
}

fn unsafe_entry(rel: &Path, reason: &str) -> RepoError {
    RepoError::UnsafeEntry {
        path: rel.display().to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A tiny object store: objects by id, rendered as `cat-file --batch` responses.
    #[derive(Default)]
    struct Objects {
        stream: Vec<u8>,
    }

    fn id_of(kind: &str, body: &[u8]) -> String {
        let mut hasher = ObjectFormat::Sha1.hasher();
        hasher.update(format!("{kind} {}\0", body.len()).as_bytes());
        hasher.update(body);
        hasher.finish_hex()
    }

    fn tree_body(entries: &[(&str, &str, &str)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (mode, name, id) in entries {
            body.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            body.extend_from_slice(&hex::decode(id).unwrap());
        }
        body
    }

    impl Objects {
        /// Appends a response claiming `id` for `body` (which need not hash to it).
        fn respond(&mut self, id: &str, kind: &str, body: &[u8]) {
            self.stream
                .extend_from_slice(format!("{id} {kind} {}\n", body.len()).as_bytes());
            self.stream.extend_from_slice(body);
            self.stream.push(b'\n');
        }
    }

    struct Repo {
        commit: String,
        tree: String,
        objects: Objects,
    }

    /// commit -> tree { a.txt, run.sh (exec), link -> a.txt, sub/ { b.txt } }, with `tamper`
    /// applied to the response stream for one object.
    fn sample(tamper: impl Fn(&str, &[u8]) -> Option<Vec<u8>>) -> Repo {
        let a = b"hello\n".to_vec();
        let run = b"#!/bin/sh\necho hi\n".to_vec();
        let link = b"a.txt".to_vec();
        let b = b"bee\n".to_vec();
        let (a_id, run_id, link_id, b_id) = (
            id_of("blob", &a),
            id_of("blob", &run),
            id_of("blob", &link),
            id_of("blob", &b),
        );
        let sub = tree_body(&[("100644", "b.txt", &b_id)]);
        let sub_id = id_of("tree", &sub);
        let root = tree_body(&[
            ("100644", "a.txt", &a_id),
            ("120000", "link", &link_id),
            ("100755", "run.sh", &run_id),
            ("40000", "sub", &sub_id),
        ]);
        let tree = id_of("tree", &root);
        let commit_body =
            format!("tree {tree}\nauthor a <a> 0 +0000\ncommitter a <a> 0 +0000\n\nm\n");
        let commit = id_of("commit", commit_body.as_bytes());
        let mut objects = Objects::default();
        // Breadth-first request order, as the walk asks.
        for (id, kind, body) in [
            (&commit, "commit", commit_body.as_bytes().to_vec()),
            (&tree, "tree", root),
            (&a_id, "blob", a),
            (&link_id, "blob", link),
            (&run_id, "blob", run),
            (&sub_id, "tree", sub),
            (&b_id, "blob", b),
        ] {
            let body = tamper(id, &body).unwrap_or(body);
            objects.respond(id, kind, &body);
        }
        Repo {
            commit,
            tree,
            objects,
        }
    }

    fn walk(repo: &Repo, dest: &Path) -> Result<Vec<String>, RepoError> {
        walk_reporting(repo, dest, &|_| {}, PROGRESS_EVERY)
    }

    fn walk_reporting(
        repo: &Repo,
        dest: &Path,
        progress: &dyn Fn(SnapshotProgress),
        every: std::time::Duration,
    ) -> Result<Vec<String>, RepoError> {
        let mut asked = Vec::new();
        let mut request = |id: &str| {
            asked.push(id.to_string());
            Ok(())
        };
        let mut walk = Walk::new(
            dest,
            ObjectFormat::Sha1,
            SnapshotLimits::default(),
            progress,
        );
        walk.progress_every = every;
        walk.run(
            &repo.commit,
            &repo.tree,
            &mut request,
            &mut Cursor::new(repo.objects.stream.clone()),
        )?;
        Ok(asked)
    }

    #[test]
    fn a_long_snapshot_reports_files_and_bytes_as_it_goes() {
        let repo = sample(|_, _| None);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        std::fs::create_dir(&dest).unwrap();
        let reports = std::cell::RefCell::new(Vec::new());
        walk_reporting(
            &repo,
            &dest,
            &|p| reports.borrow_mut().push(p),
            std::time::Duration::ZERO,
        )
        .unwrap();
        make_writable(&dest);
        let reports = reports.into_inner();
        assert!(!reports.is_empty());
        // Growing counts, ending at what was written.
        assert!(reports
            .windows(2)
            .all(|w| w[0].bytes <= w[1].bytes && w[0].entries <= w[1].entries));
        let last = reports.last().unwrap();
        assert!(last.bytes > 0 && last.entries > 0, "{last:?}");
    }

    fn make_writable(dir: &Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                make_writable(&entry.path());
            }
        }
        std::fs::set_permissions(dir, Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn writes_a_verified_read_only_tree() {
        let repo = sample(|_, _| None);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        std::fs::create_dir(&dest).unwrap();
        let asked = walk(&repo, &dest).unwrap();
        assert_eq!(asked.len(), 7);
        assert_eq!(
            std::fs::read_to_string(dest.join("a.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(
            std::fs::read_to_string(dest.join("sub/b.txt")).unwrap(),
            "bee\n"
        );
        assert_eq!(
            std::fs::read_link(dest.join("link")).unwrap(),
            Path::new("a.txt")
        );
        let mode = |p: &str| {
            std::fs::metadata(dest.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("a.txt"), 0o444);
        assert_eq!(mode("run.sh"), 0o555);
        assert_eq!(mode("sub"), 0o555);
        assert_eq!(mode(""), 0o555);
        make_writable(&dest);
    }

    fn expect_error(repo: Repo, needle: &str) {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        std::fs::create_dir(&dest).unwrap();
        let err = walk(&repo, &dest).unwrap_err().to_string();
        assert!(err.contains(needle), "{err}");
        make_writable(&dest);
    }

    #[test]
    fn detects_a_blob_whose_content_does_not_match_its_id() {
        let bee = id_of("blob", b"bee\n");
        let repo = sample(|id, _| (id == bee).then(|| b"bee?\n".to_vec()));
        expect_error(
            repo,
            &format!("snapshot verification failed: blob {bee} hashes to"),
        );
    }

    #[test]
    fn detects_a_tampered_tree_and_commit() {
        let repo = sample(|_, body| {
            body.starts_with(b"100644 b.txt").then(|| {
                let mut changed = body.to_vec();
                changed[3] = b'7'; // 100744: same shape, different bytes
                changed
            })
        });
        expect_error(repo, "hashes to");
        let repo = sample(|_, body| body.starts_with(b"tree ").then(|| [body, b"x"].concat()));
        expect_error(repo, "hashes to");
    }

    #[test]
    fn refuses_a_commit_whose_tree_is_not_the_pinned_one() {
        let mut repo = sample(|_, _| None);
        repo.tree = "f".repeat(40);
        expect_error(repo, "expected ffff");
    }

    #[test]
    fn refuses_missing_objects_and_wrong_types() {
        let mut repo = sample(|_, _| None);
        let text = String::from_utf8_lossy(&repo.objects.stream).into_owned();
        let commit = repo.commit.clone();
        repo.objects.stream = format!("{commit} missing\n").into_bytes();
        expect_error(repo, "is missing from the mirror");
        let mut repo = sample(|_, _| None);
        repo.objects.stream = text.replacen(" commit ", " blob ", 1).into_bytes();
        expect_error(repo, "is a blob, expected a commit");
    }

    #[test]
    fn refuses_hostile_entry_names() {
        for name in [".git", ".GIT", "..", "."] {
            let body = tree_body(&[("100644", name, &"a".repeat(40))]);
            let err = parse_tree(&body, ObjectFormat::Sha1, Path::new("x")).unwrap_err();
            assert!(
                matches!(err, RepoError::UnsafeEntry { .. }),
                "{name}: {err}"
            );
        }
        let body = tree_body(&[
            ("100644", "ok", &"a".repeat(40)),
            ("100644", "", &"a".repeat(40)),
        ]);
        assert!(parse_tree(&body, ObjectFormat::Sha1, Path::new("")).is_err());
        let body = tree_body(&[("170000", "odd", &"a".repeat(40))]);
        assert!(parse_tree(&body, ObjectFormat::Sha1, Path::new("")).is_err());
    }

    #[test]
    fn a_duplicate_name_cannot_redirect_writes_through_a_symlink() {
        // `sub` as a symlink to an outside directory, then `sub` as a tree holding a file.
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().to_str().unwrap().as_bytes().to_vec();
        let target_id = id_of("blob", &target);
        let file = b"pwned\n".to_vec();
        let file_id = id_of("blob", &file);
        let sub = tree_body(&[("100644", "x", &file_id)]);
        let sub_id = id_of("tree", &sub);
        let root = tree_body(&[("120000", "sub", &target_id), ("40000", "sub", &sub_id)]);
        let tree = id_of("tree", &root);
        let commit_body = format!("tree {tree}\n\nm\n");
        let commit = id_of("commit", commit_body.as_bytes());
        let mut objects = Objects::default();
        objects.respond(&commit, "commit", commit_body.as_bytes());
        objects.respond(&tree, "tree", &root);
        objects.respond(&target_id, "blob", &target);
        objects.respond(&sub_id, "tree", &sub);
        objects.respond(&file_id, "blob", &file);
        let repo = Repo {
            commit,
            tree,
            objects,
        };
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        std::fs::create_dir(&dest).unwrap();
        assert!(walk(&repo, &dest).is_err());
        assert!(!outside.path().join("x").exists());
        make_writable(&dest);
    }
}
