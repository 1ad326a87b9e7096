//! A bounded, defensive reader of a user's git index (`.git/index`), read by Warden itself:
//! no git command runs in the user's repository for it.
//!
//! It serves one purpose: git's stat shortcut for the notice of a pin of `HEAD` ("N uncommitted
//! files are not included"). An index entry records the `lstat` data a file had when git last
//! hashed it; a file whose `lstat` still matches, and whose entry holds the pinned tree's object
//! id, has not changed since, so its content need not be read ([`StatCache::vouches`]). A
//! `PATH@worktree` snapshot never relies on it: it reads every file (see `worktree.rs`).
//!
//! Formats read: versions 2, 3 (extended flags) and 4 (path prefix compression), SHA-1 and
//! SHA-256 object ids. Optional extensions (`TREE`, `REUC`, `UNTR`, `FSMN`, `EOIE`, `IEOT`, …)
//! are skipped by their length; the sparse-index extension `sdir` is accepted (its directory
//! entries are skip-worktree, never trusted); a split index (`link`) and any other required
//! extension are refused. The trailing checksum is verified (an all-zero trailer, written with
//! `index.skipHash`, is accepted as git accepts it). Anything malformed, truncated, of another
//! version or larger than [`MAX_INDEX_BYTES`] is an [`IndexError`], and the caller hashes every
//! file instead.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::materialize::ObjectFormat;

/// The largest index read (a 100,000-file repository's index is about 10 MiB).
pub(crate) const MAX_INDEX_BYTES: u64 = 256 * 1024 * 1024;

/// Entry flag: `assume-unchanged` (git calls it assume-valid).
const FLAG_ASSUME_VALID: u16 = 0x8000;
/// Entry flag: a second, extended flags word follows (versions 3 and 4).
const FLAG_EXTENDED: u16 = 0x4000;
const FLAG_STAGE_MASK: u16 = 0x3000;
const FLAG_NAME_MASK: u16 = 0x0fff;
const EXTENDED_SKIP_WORKTREE: u16 = 0x4000;
const EXTENDED_INTENT_TO_ADD: u16 = 0x2000;
/// `st_mode`'s file type bits, and their value for a regular file.
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;

/// Why an index was not used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IndexError {
    #[error("cannot read the index {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the index is not a regular file")]
    NotAFile,
    #[error("the index is {0} bytes, more than Warden reads")]
    TooLarge(u64),
    #[error("the index is malformed: {0}")]
    Malformed(&'static str),
    #[error("the index uses {0}, which Warden does not read")]
    Unsupported(String),
}

/// A timestamp as the index stores it: seconds and nanoseconds, each truncated to 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Time {
    pub(crate) sec: u32,
    pub(crate) nsec: u32,
}

impl Time {
    /// Truncated the way git truncates when it records a stat (`(unsigned int) st_mtime`).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub(crate) fn of(sec: i64, nsec: i64) -> Time {
        Time {
            sec: sec as u32,
            nsec: nsec as u32,
        }
    }
}

/// One index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The path as stored (bytes; git does not require UTF-8).
    pub(crate) path: Vec<u8>,
    pub(crate) ctime: Time,
    pub(crate) mtime: Time,
    /// Not compared (git does not compare it either: it may change across a reboot).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) dev: u32,
    pub(crate) ino: u32,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// The size, truncated to 32 bits (0 when git smudged a racily clean entry).
    pub(crate) size: u32,
    /// The object id, lowercase hex.
    pub(crate) id: String,
    /// 0, or 1–3 for the sides of a merge conflict.
    pub(crate) stage: u8,
    pub(crate) assume_valid: bool,
    pub(crate) skip_worktree: bool,
    pub(crate) intent_to_add: bool,
}

/// A parsed index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Index {
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) version: u32,
    pub(crate) entries: Vec<Entry>,
    /// The index file's own modification time: entries not older than it are racily clean.
    pub(crate) written: Time,
}

/// Reads the index at `path` of a repository in `format`: opened without following a symlink
/// and without blocking, a regular file of at most [`MAX_INDEX_BYTES`].
pub(crate) fn read(path: &Path, format: ObjectFormat) -> Result<Index, IndexError> {
    let io = |source: std::io::Error| IndexError::Io {
        path: path.to_path_buf(),
        source,
    };
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(IndexError::NotAFile);
    }
    if meta.len() > MAX_INDEX_BYTES {
        return Err(IndexError::TooLarge(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_INDEX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_INDEX_BYTES {
        return Err(IndexError::TooLarge(bytes.len() as u64));
    }
    // The file read is the one whose time this is: git replaces an index by renaming a new
    // file over it, never by writing into it.
    parse(&bytes, format, Stat::of(&meta).mtime)
}

/// Parses the bytes of an index (whose file was last written at `written`).
pub(crate) fn parse(
    bytes: &[u8],
    format: ObjectFormat,
    written: Time,
) -> Result<Index, IndexError> {
    let hash_len = format.raw_len();
    if bytes.len() < 12 + hash_len {
        return Err(IndexError::Malformed(
            "shorter than a header and a checksum",
        ));
    }
    if &bytes[..4] != b"DIRC" {
        return Err(IndexError::Malformed("no DIRC signature"));
    }
    let body_end = bytes.len() - hash_len;
    verify_checksum(&bytes[..body_end], &bytes[body_end..], format)?;
    let version = be32(bytes, 4).ok_or(IndexError::Malformed("short header"))?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Unsupported(format!("index version {version}")));
    }
    let count = be32(bytes, 8).ok_or(IndexError::Malformed("short header"))?;
    // Every entry takes at least its fixed fields and a one-byte name: a count that could not
    // fit is refused before anything is allocated for it.
    let fixed = 40 + hash_len + 2;
    let smallest = if version == 4 { fixed + 2 } else { fixed + 8 };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if count > (body_end - 12) / smallest {
        return Err(IndexError::Malformed("more entries than the file can hold"));
    }
    let mut entries = Vec::with_capacity(count);
    let mut pos = 12;
    let mut previous: Vec<u8> = Vec::new();
    let body = &bytes[..body_end];
    for _ in 0..count {
        let (entry, next) = parse_entry(body, pos, version, format, &previous)?;
        pos = next;
        if version == 4 {
            previous.clone_from(&entry.path);
        }
        entries.push(entry);
    }
    skip_extensions(body, pos)?;
    Ok(Index {
        version,
        entries,
        written,
    })
}

/// The trailer is the hash of everything before it, or all zeros (`index.skipHash`).
fn verify_checksum(body: &[u8], trailer: &[u8], format: ObjectFormat) -> Result<(), IndexError> {
    if trailer.iter().all(|&b| b == 0) {
        return Ok(());
    }
    let mut hasher = format.hasher();
    hasher.update(body);
    if hasher.finish_hex() != hex::encode(trailer) {
        return Err(IndexError::Malformed("checksum mismatch"));
    }
    Ok(())
}

fn parse_entry(
    body: &[u8],
    start: usize,
    version: u32,
    format: ObjectFormat,
    previous: &[u8],
) -> Result<(Entry, usize), IndexError> {
    let short = IndexError::Malformed("truncated entry");
    let hash_len = format.raw_len();
    let word = |i: usize| be32(body, start + 4 * i).ok_or(IndexError::Malformed("truncated entry"));
    let id_at = start + 40;
    let id = body.get(id_at..id_at + hash_len).ok_or(short)?;
    let flags = be16(body, id_at + hash_len).ok_or(IndexError::Malformed("truncated entry"))?;
    let mut pos = id_at + hash_len + 2;
    let mut extended = 0u16;
    if flags & FLAG_EXTENDED != 0 {
        if version < 3 {
            return Err(IndexError::Malformed("extended flags in a version 2 index"));
        }
        extended = be16(body, pos).ok_or(IndexError::Malformed("truncated entry"))?;
        if extended & !(EXTENDED_SKIP_WORKTREE | EXTENDED_INTENT_TO_ADD) != 0 {
            return Err(IndexError::Malformed("unknown extended flags"));
        }
        pos += 2;
    }
    let path = if version == 4 {
        let strip =
            decode_varint(body, &mut pos).ok_or(IndexError::Malformed("bad path prefix length"))?;
        let keep = previous
            .len()
            .checked_sub(strip)
            .ok_or(IndexError::Malformed(
                "path prefix longer than the previous path",
            ))?;
        let nul = find_nul(body, pos)?;
        let mut path = Vec::with_capacity(keep + (nul - pos));
        path.extend_from_slice(&previous[..keep]);
        path.extend_from_slice(&body[pos..nul]);
        pos = nul + 1;
        path
    } else {
        let nul = find_nul(body, pos)?;
        let path = body[pos..nul].to_vec();
        // Versions 2 and 3 pad each entry with 1–8 NULs to a multiple of eight bytes.
        let end = start + ((pos - start + path.len() + 8) & !7);
        match body.get(nul..end) {
            Some(padding) if padding.iter().all(|&b| b == 0) => {}
            _ => return Err(IndexError::Malformed("bad entry padding")),
        }
        pos = end;
        path
    };
    // (An empty path is a split index's replacement entry; the `link` extension is refused
    // once the entries are read.)
    let name_len = usize::from(flags & FLAG_NAME_MASK);
    if name_len < usize::from(FLAG_NAME_MASK) && name_len != path.len() {
        return Err(IndexError::Malformed(
            "path length does not match the flags",
        ));
    }
    let entry = Entry {
        path,
        ctime: Time {
            sec: word(0)?,
            nsec: word(1)?,
        },
        mtime: Time {
            sec: word(2)?,
            nsec: word(3)?,
        },
        dev: word(4)?,
        ino: word(5)?,
        mode: word(6)?,
        uid: word(7)?,
        gid: word(8)?,
        size: word(9)?,
        id: hex::encode(id),
        // Two bits: always below 4.
        stage: u8::try_from((flags & FLAG_STAGE_MASK) >> 12).unwrap_or(u8::MAX),
        assume_valid: flags & FLAG_ASSUME_VALID != 0,
        skip_worktree: extended & EXTENDED_SKIP_WORKTREE != 0,
        intent_to_add: extended & EXTENDED_INTENT_TO_ADD != 0,
    };
    Ok((entry, pos))
}

/// Extensions run from the end of the entries to the checksum, each a four-byte signature, a
/// four-byte length and that many bytes.
fn skip_extensions(body: &[u8], mut pos: usize) -> Result<(), IndexError> {
    while pos < body.len() {
        let signature = body
            .get(pos..pos + 4)
            .ok_or(IndexError::Malformed("truncated extension"))?;
        let len = be32(body, pos + 4).ok_or(IndexError::Malformed("truncated extension"))?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| (pos + 8).checked_add(len))
            .filter(|&end| end <= body.len())
            .ok_or(IndexError::Malformed("extension longer than the file"))?;
        // An extension whose signature starts with an upper-case letter is optional; any
        // other must be understood.
        if !signature[0].is_ascii_uppercase() && signature != b"sdir" {
            return Err(IndexError::Unsupported(format!(
                "the {:?} extension{}",
                String::from_utf8_lossy(signature),
                if signature == b"link" {
                    " (a split index)"
                } else {
                    ""
                }
            )));
        }
        pos = end;
    }
    Ok(())
}

/// The NUL ending a path that starts at `from`.
fn find_nul(body: &[u8], from: usize) -> Result<usize, IndexError> {
    body.get(from..)
        .and_then(|rest| rest.iter().position(|&b| b == 0))
        .map(|at| from + at)
        .ok_or(IndexError::Malformed("unterminated path"))
}

/// Git's offset varint (`varint.c`): seven bits a byte, most significant first, each
/// continuation adding one.
fn decode_varint(bytes: &[u8], pos: &mut usize) -> Option<usize> {
    let mut byte = *bytes.get(*pos)?;
    *pos += 1;
    let mut value = u64::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        value = value.checked_add(1)?;
        if value >> 57 != 0 {
            return None;
        }
        byte = *bytes.get(*pos)?;
        *pos += 1;
        value = (value << 7) | u64::from(byte & 0x7f);
    }
    usize::try_from(value).ok()
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// What `lstat` says of a work-tree file, as far as the shortcut looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) ctime: Time,
    pub(crate) mtime: Time,
    pub(crate) ino: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) size: u64,
    /// `st_mode`: type and permission bits.
    pub(crate) mode: u32,
}

impl Stat {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        Stat {
            ctime: Time::of(meta.ctime(), meta.ctime_nsec()),
            mtime: Time::of(meta.mtime(), meta.mtime_nsec()),
            ino: meta.ino(),
            uid: meta.uid(),
            gid: meta.gid(),
            size: meta.size(),
            mode: meta.mode(),
        }
    }
}

/// The entries of an index that can vouch for a file: stage 0, not assume-unchanged,
/// skip-worktree or intent-to-add, a UTF-8 path listed once.
#[derive(Debug, Clone)]
pub(crate) struct StatCache {
    entries: HashMap<String, Entry>,
    written: Time,
}

impl StatCache {
    pub(crate) fn new(index: Index) -> StatCache {
        let mut entries = HashMap::with_capacity(index.entries.len());
        let mut repeated = HashSet::new();
        for entry in index.entries {
            let usable = entry.stage == 0
                && !entry.assume_valid
                && !entry.skip_worktree
                && !entry.intent_to_add;
            let Ok(path) = String::from_utf8(entry.path.clone()) else {
                continue;
            };
            if entries.contains_key(&path) || repeated.contains(&path) || !usable {
                entries.remove(&path);
                repeated.insert(path);
                continue;
            }
            entries.insert(path, entry);
        }
        StatCache {
            entries,
            written: index.written,
        }
    }

    /// Whether the regular file at `path`, whose `lstat` is `stat`, is certainly the blob `id`
    /// with the tree mode `mode` without reading it: its index entry holds `id` and `mode`, its
    /// `lstat` matches the entry (change and modification times to the nanosecond, inode, owner,
    /// group and size, as git compares them; the device is left out, as git leaves it out), the
    /// mode Warden would derive from `stat` is `mode`, and the entry is not racily clean (its
    /// modification time is strictly before the index was written: a file changed in the same
    /// clock tick as the index write could still match).
    pub(crate) fn vouches(&self, path: &str, id: &str, mode: &str, stat: &Stat) -> bool {
        let Some(entry) = self.entries.get(path) else {
            return false;
        };
        let Ok(tree_mode) = u32::from_str_radix(mode, 8) else {
            return false;
        };
        let on_disk_mode = if stat.mode & 0o111 != 0 {
            0o100_755
        } else {
            0o100_644
        };
        #[allow(clippy::cast_possible_truncation)]
        let (ino, size) = (stat.ino as u32, stat.size as u32);
        entry.id == id
            && entry.mode == tree_mode
            && matches!(tree_mode, 0o100_644 | 0o100_755)
            && stat.mode & S_IFMT == S_IFREG
            && on_disk_mode == tree_mode
            && entry.mtime == stat.mtime
            && entry.ctime == stat.ctime
            && entry.ino == ino
            && entry.uid == stat.uid
            && entry.gid == stat.gid
            && entry.size == size
            && entry.mtime < self.written
    }

    /// How many entries can vouch.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_test_support::git_fixture::TempRepo;

    fn sha256_repo() -> TempRepo {
        let repo = TempRepo::new();
        std::fs::remove_dir_all(repo.path().join(".git")).unwrap();
        repo.git(&["init", "-q", "--object-format=sha256", "-b", "main"]);
        repo.git(&["config", "user.name", "Warden Test"]);
        repo.git(&["config", "user.email", "test@warden.invalid"]);
        repo
    }

    fn repo_in(format: ObjectFormat) -> TempRepo {
        match format {
            ObjectFormat::Sha1 => TempRepo::new(),
            ObjectFormat::Sha256 => sha256_repo(),
        }
    }

    fn index_of(repo: &TempRepo, format: ObjectFormat) -> Index {
        read(&repo.path().join(".git/index"), format).unwrap()
    }

    /// The index as git itself reads it: `git ls-files -s --debug --sparse`.
    fn git_view(repo: &TempRepo) -> Vec<Entry> {
        let listing = repo.git(&["ls-files", "-s", "--debug", "--sparse"]);
        let mut lines = listing.lines();
        let mut entries = Vec::new();
        let pair = |text: &str| -> Time {
            let (sec, nsec) = text.split_once(':').unwrap();
            Time {
                sec: sec.parse().unwrap(),
                nsec: nsec.parse().unwrap(),
            }
        };
        while let Some(head) = lines.next() {
            let (meta, path) = head.split_once('\t').unwrap();
            let mut meta = meta.split(' ');
            let mode = u32::from_str_radix(meta.next().unwrap(), 8).unwrap();
            let id = meta.next().unwrap().to_string();
            let stage: u8 = meta.next().unwrap().parse().unwrap();
            let mut fields = HashMap::new();
            for _ in 0..5 {
                for field in lines.next().unwrap().trim().split('\t') {
                    let (name, value) = field.split_once(": ").unwrap();
                    fields.insert(name.to_string(), value.to_string());
                }
            }
            let number = |name: &str| -> u32 { fields[name].parse().unwrap() };
            let flags = u32::from_str_radix(&fields["flags"], 16).unwrap();
            entries.push(Entry {
                path: path.as_bytes().to_vec(),
                ctime: pair(&fields["ctime"]),
                mtime: pair(&fields["mtime"]),
                dev: number("dev"),
                ino: number("ino"),
                mode,
                uid: number("uid"),
                gid: number("gid"),
                size: number("size"),
                id,
                stage,
                // In memory git keeps skip-worktree and intent-to-add as bits 30 and 29.
                assume_valid: flags & 0x8000 != 0,
                skip_worktree: flags & (1 << 30) != 0,
                intent_to_add: flags & (1 << 29) != 0,
            });
        }
        entries
    }

    fn assert_reads_like_git(repo: &TempRepo, format: ObjectFormat, version: u32) -> Index {
        let index = index_of(repo, format);
        assert_eq!(index.version, version);
        assert_eq!(index.entries, git_view(repo));
        index
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// Versions 2, 3 and 4, both object formats, every flag, conflict stages, a path longer
    /// than the flags can hold, and the extensions git writes: read exactly as git reads them.
    #[test]
    fn reads_what_git_reads_in_every_version_and_object_format() {
        for format in [ObjectFormat::Sha1, ObjectFormat::Sha256] {
            let repo = repo_in(format);
            repo.write("a.txt", "alpha\n")
                .write("run.sh", "echo run\n")
                .write("src/lib.rs", "lib\n")
                .write("src/lib/inner.rs", "inner\n")
                .write("src/libz.rs", "z\n")
                .write("docs/guide.md", "guide\n");
            std::fs::set_permissions(
                repo.path().join("run.sh"),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
            std::os::unix::fs::symlink("a.txt", repo.path().join("link")).unwrap();
            repo.commit("first");
            let index = assert_reads_like_git(&repo, format, 2);
            assert_eq!(index.entries.len(), 7);
            assert!(index
                .entries
                .iter()
                .all(|e| e.id.len() == format.raw_len() * 2));
            let raw = std::fs::read(repo.path().join(".git/index")).unwrap();
            assert!(contains(&raw, b"TREE"), "a commit writes the cache tree");

            // A path of 5,000 bytes (longer than the 12 bits of the flags), in the index only.
            let blob = repo.git_with_input(&["hash-object", "-w", "--stdin"], b"long\n");
            let long = vec!["d".repeat(99); 50].join("/");
            repo.git(&[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("100644,{blob},{long}"),
            ]);
            let index = assert_reads_like_git(&repo, format, 2);
            assert!(index.entries.iter().any(|e| e.path == long.as_bytes()));

            // Extended flags make it version 3; conflict stages; assume-unchanged.
            repo.write("new.txt", "new\n");
            repo.git(&["add", "-N", "new.txt"]);
            repo.git(&["update-index", "--skip-worktree", "a.txt"]);
            repo.git(&["update-index", "--assume-unchanged", "run.sh"]);
            let stages: String = (1..=3)
                .map(|stage| format!("100644 {blob} {stage}\tconflict.txt\n"))
                .collect();
            repo.git_with_input(&["update-index", "--index-info"], stages.as_bytes());
            let index = assert_reads_like_git(&repo, format, 3);
            let by_path = |path: &str| {
                index
                    .entries
                    .iter()
                    .filter(|e| e.path == path.as_bytes())
                    .collect::<Vec<_>>()
            };
            assert!(by_path("a.txt")[0].skip_worktree);
            assert!(by_path("run.sh")[0].assume_valid);
            assert_eq!(by_path("run.sh")[0].mode, 0o100_755);
            assert_eq!(by_path("link")[0].mode, 0o120_000);
            assert!(by_path("new.txt")[0].intent_to_add);
            let conflict: Vec<u8> = by_path("conflict.txt").iter().map(|e| e.stage).collect();
            assert_eq!(conflict, [1, 2, 3]);

            // Version 4: path prefix compression.
            repo.git(&["update-index", "--index-version", "4"]);
            assert_reads_like_git(&repo, format, 4);

            // Optional extensions are skipped: the untracked cache, the end-of-entries marker.
            repo.git(&["update-index", "--untracked-cache"]);
            repo.git(&["status", "--porcelain"]);
            repo.git(&[
                "-c",
                "index.recordEndOfIndexEntries=true",
                "-c",
                "index.threads=2",
                "update-index",
                "--force-write-index",
            ]);
            let raw = std::fs::read(repo.path().join(".git/index")).unwrap();
            assert!(contains(&raw, b"UNTR") && contains(&raw, b"EOIE"));
            assert_reads_like_git(&repo, format, 4);

            // `index.skipHash` (git 2.40 and later) writes an all-zero trailer, which git
            // accepts and so does Warden.
            repo.git(&[
                "-c",
                "index.skipHash=true",
                "update-index",
                "--force-write-index",
            ]);
            assert_reads_like_git(&repo, format, 4);
        }
    }

    /// A sparse index (`sdir`) is read; its directory entries are skip-worktree.
    #[test]
    fn reads_a_sparse_index() {
        let repo = TempRepo::new();
        repo.write("a/1", "1\n")
            .write("b/c/2", "2\n")
            .write("top", "top\n");
        repo.commit("first");
        repo.git(&["sparse-checkout", "init", "--cone", "--sparse-index"]);
        repo.git(&["sparse-checkout", "set", "a"]);
        let raw = std::fs::read(repo.path().join(".git/index")).unwrap();
        assert!(contains(&raw, b"sdir"));
        let index = assert_reads_like_git(&repo, ObjectFormat::Sha1, 3);
        let directory = index.entries.iter().find(|e| e.path == b"b/").unwrap();
        assert_eq!(directory.mode, 0o040_000);
        assert!(directory.skip_worktree);
        let cache = StatCache::new(index);
        assert_eq!(cache.len(), 2, "a/1 and top");
    }

    #[test]
    fn a_split_index_is_refused() {
        let repo = TempRepo::new();
        repo.write("a", "a\n");
        repo.commit("first");
        repo.git(&["update-index", "--split-index"]);
        let error = read(&repo.path().join(".git/index"), ObjectFormat::Sha1).unwrap_err();
        assert!(
            matches!(&error, IndexError::Unsupported(what) if what.contains("link")),
            "{error}"
        );
    }

    /// A valid little index (three entries and a `TREE` extension).
    fn small_index() -> (TempRepo, Vec<u8>) {
        let repo = TempRepo::new();
        repo.write("a", "a\n")
            .write("dir/b", "b\n")
            .write("c", "c\n");
        repo.commit("first");
        let raw = std::fs::read(repo.path().join(".git/index")).unwrap();
        (repo, raw)
    }

    fn parse_sha1(bytes: &[u8]) -> Result<Index, IndexError> {
        parse(bytes, ObjectFormat::Sha1, Time { sec: 0, nsec: 0 })
    }

    fn with_checksum(mut body: Vec<u8>) -> Vec<u8> {
        let mut hasher = ObjectFormat::Sha1.hasher();
        hasher.update(&body);
        body.extend(hex::decode(hasher.finish_hex()).unwrap());
        body
    }

    #[test]
    fn truncated_corrupt_or_foreign_indexes_are_refused() {
        let (_repo, raw) = small_index();
        assert_eq!(parse_sha1(&raw).unwrap().entries.len(), 3);
        // Cut anywhere.
        for len in 0..raw.len() {
            assert!(parse_sha1(&raw[..len]).is_err(), "truncated to {len}");
        }
        // Any byte changed (the checksum catches what the structure does not).
        for at in 0..raw.len() {
            let mut bad = raw.clone();
            bad[at] ^= 0x01;
            assert!(parse_sha1(&bad).is_err(), "byte {at} flipped");
        }
        // An all-zero trailer (`index.skipHash`) is no checksum, and accepted as git accepts
        // it; the structure is still checked.
        let mut unhashed = raw[..raw.len() - 20].to_vec();
        unhashed.extend([0; 20]);
        assert_eq!(parse_sha1(&unhashed).unwrap().entries.len(), 3);
        unhashed[12 + 62] = b'x';
        assert!(
            parse_sha1(&unhashed).is_ok(),
            "a renamed entry is still well-formed"
        );
        unhashed.insert(100, 0);
        assert!(parse_sha1(&unhashed).is_err());
        // The wrong object format.
        assert!(parse(&raw, ObjectFormat::Sha256, Time { sec: 0, nsec: 0 }).is_err());
        let body = &raw[..raw.len() - 20];
        // Structurally wrong with a good checksum: another version, a huge entry count,
        // trailing garbage, an unknown required extension.
        let mut other = body.to_vec();
        other[7] = 5;
        assert!(matches!(
            parse_sha1(&with_checksum(other)),
            Err(IndexError::Unsupported(_))
        ));
        let mut many = body.to_vec();
        many[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            parse_sha1(&with_checksum(many)),
            Err(IndexError::Malformed(_))
        ));
        let mut garbage = body.to_vec();
        garbage.extend_from_slice(b"xyz");
        assert!(parse_sha1(&with_checksum(garbage)).is_err());
        let mut required = body.to_vec();
        required.extend_from_slice(b"abcd\0\0\0\0");
        assert!(matches!(
            parse_sha1(&with_checksum(required)),
            Err(IndexError::Unsupported(_))
        ));
        let mut optional = body.to_vec();
        optional.extend_from_slice(b"Abcd\0\0\0\x02hi");
        assert_eq!(
            parse_sha1(&with_checksum(optional)).unwrap().entries.len(),
            3
        );
    }

    #[test]
    fn only_a_regular_file_within_the_cap_is_read() {
        let (repo, _raw) = small_index();
        let index = repo.path().join(".git/index");
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&index, &link).unwrap();
        assert!(matches!(
            read(&link, ObjectFormat::Sha1),
            Err(IndexError::Io { .. })
        ));
        assert!(matches!(
            read(dir.path(), ObjectFormat::Sha1),
            Err(IndexError::NotAFile)
        ));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            read(&fifo, ObjectFormat::Sha1),
            Err(IndexError::NotAFile)
        ));
        let huge = dir.path().join("huge");
        File::create(&huge)
            .unwrap()
            .set_len(MAX_INDEX_BYTES + 1)
            .unwrap();
        assert!(matches!(
            read(&huge, ObjectFormat::Sha1),
            Err(IndexError::TooLarge(_))
        ));
        assert!(matches!(
            read(&dir.path().join("missing"), ObjectFormat::Sha1),
            Err(IndexError::Io { .. })
        ));
    }

    fn entry(path: &str) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            ctime: Time { sec: 100, nsec: 5 },
            mtime: Time { sec: 100, nsec: 7 },
            dev: 1,
            ino: 42,
            mode: 0o100_644,
            uid: 1000,
            gid: 1000,
            size: 6,
            id: "1".repeat(40),
            stage: 0,
            assume_valid: false,
            skip_worktree: false,
            intent_to_add: false,
        }
    }

    fn matching_stat() -> Stat {
        Stat {
            ctime: Time { sec: 100, nsec: 5 },
            mtime: Time { sec: 100, nsec: 7 },
            ino: 42,
            uid: 1000,
            gid: 1000,
            size: 6,
            mode: 0o100_644,
        }
    }

    fn cache_of(entries: Vec<Entry>, written: Time) -> StatCache {
        StatCache::new(Index {
            version: 2,
            entries,
            written,
        })
    }

    /// Every part of the stat is compared; a racily clean entry, a flagged or conflicted one,
    /// another id or mode never vouch.
    #[test]
    fn only_an_exact_older_stat_match_vouches() {
        let later = Time { sec: 101, nsec: 0 };
        let id = "1".repeat(40);
        let cache = cache_of(vec![entry("f")], later);
        let stat = matching_stat();
        assert!(cache.vouches("f", &id, "100644", &stat));
        assert!(!cache.vouches("g", &id, "100644", &stat));
        assert!(!cache.vouches("f", &"2".repeat(40), "100644", &stat));
        assert!(!cache.vouches("f", &id, "100755", &stat));
        type Change = fn(&mut Stat);
        let changes: [(&str, Change); 10] = [
            ("mtime sec", |s| s.mtime.sec += 1),
            ("mtime nsec", |s| s.mtime.nsec += 1),
            ("ctime sec", |s| s.ctime.sec += 1),
            ("ctime nsec", |s| s.ctime.nsec += 1),
            ("inode", |s| s.ino += 1),
            ("uid", |s| s.uid += 1),
            ("gid", |s| s.gid += 1),
            ("size", |s| s.size += 1),
            ("exec bit", |s| s.mode |= 0o100),
            ("type", |s| s.mode = 0o120_777),
        ];
        for (what, change) in changes {
            let mut changed = stat;
            change(&mut changed);
            assert!(!cache.vouches("f", &id, "100644", &changed), "{what}");
        }
        // The device is not compared (git does not either).
        let mut other_dev = entry("f");
        other_dev.dev = 2;
        assert!(cache_of(vec![other_dev], later).vouches("f", &id, "100644", &stat));
        // Group-executable only: Warden's mode is 100755, so the tree's 100644 is not vouched.
        let mut group_exec = stat;
        group_exec.mode = 0o100_654;
        assert!(!cache.vouches("f", &id, "100644", &group_exec));

        // Racily clean: written in the same tick as the file (or before it) vouches for nothing.
        for written in [Time { sec: 100, nsec: 7 }, Time { sec: 100, nsec: 6 }] {
            assert!(!cache_of(vec![entry("f")], written).vouches("f", &id, "100644", &stat));
        }
        assert!(cache_of(vec![entry("f")], Time { sec: 100, nsec: 8 })
            .vouches("f", &id, "100644", &stat));

        // Flags, stages, repeated paths, non-UTF-8 paths.
        type Flag = fn(&mut Entry);
        let flags: [(&str, Flag); 4] = [
            ("assume-valid", |e| e.assume_valid = true),
            ("skip-worktree", |e| e.skip_worktree = true),
            ("intent-to-add", |e| e.intent_to_add = true),
            ("stage", |e| e.stage = 2),
        ];
        for (what, flag) in flags {
            let mut flagged = entry("f");
            flag(&mut flagged);
            assert!(
                !cache_of(vec![flagged], later).vouches("f", &id, "100644", &stat),
                "{what}"
            );
        }
        let mut conflicted = entry("f");
        conflicted.stage = 1;
        let twice = cache_of(vec![conflicted, entry("f")], later);
        assert!(!twice.vouches("f", &id, "100644", &stat));
        let mut latin1 = entry("f");
        latin1.path = b"caf\xe9".to_vec();
        assert_eq!(cache_of(vec![latin1], later).len(), 0);
    }

    #[test]
    fn varints_decode_as_git_encodes_them() {
        // Git's encoding of 0, 127, 128, 16511 and 16512 (`varint.c`).
        for (bytes, value) in [
            (&[0x00][..], 0usize),
            (&[0x7f], 127),
            (&[0x80, 0x00], 128),
            (&[0xff, 0x7f], 16511),
            (&[0x80, 0x80, 0x00], 16512),
        ] {
            let mut pos = 0;
            assert_eq!(decode_varint(bytes, &mut pos), Some(value));
            assert_eq!(pos, bytes.len());
        }
        let mut pos = 0;
        assert_eq!(decode_varint(&[0x80], &mut pos), None);
        let mut pos = 0;
        assert_eq!(decode_varint(&[0xff; 12], &mut pos), None);
    }

    proptest::proptest! {
        /// Whatever the bytes (with a valid checksum, so the structure itself is exercised), the
        /// reader returns an index or an error, never panics.
        #[test]
        fn any_bytes_with_a_good_checksum_parse_or_fail_cleanly(
            version in 2u32..=4,
            edits in proptest::collection::vec((0usize..400, proptest::num::u8::ANY), 0..8),
            cut in 0usize..400,
        ) {
            let body = small_v4_or_v2_body(version);
            let mut body = body.clone();
            for (at, value) in edits {
                if let Some(byte) = body.get_mut(at) {
                    *byte = value;
                }
            }
            body.truncate(body.len().min(cut.max(12)));
            let _ = parse_sha1(&with_checksum(body));
        }
    }

    /// The body (without checksum) of a real index in `version`, made once per version.
    fn small_v4_or_v2_body(version: u32) -> Vec<u8> {
        use std::sync::OnceLock;
        static BODIES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        let bodies = BODIES.get_or_init(|| {
            (2..=4)
                .map(|version| {
                    let (repo, _) = small_index();
                    if version == 3 {
                        repo.git(&["update-index", "--skip-worktree", "c"]);
                    }
                    repo.git(&["update-index", "--index-version", &version.to_string()]);
                    let raw = std::fs::read(repo.path().join(".git/index")).unwrap();
                    assert_eq!(parse_sha1(&raw).unwrap().version, version);
                    raw[..raw.len() - 20].to_vec()
                })
                .collect()
        });
        bodies[usize::try_from(version - 2).unwrap()].clone()
    }
}
