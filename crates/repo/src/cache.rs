//! What the repository cache (mirrors and snapshots under `WARDEN_HOME`) shares between
//! writing it (`store`, `worktree`) and trimming it (`gc`): the trimming policy, the size
//! bookkeeping a new snapshot leaves beside itself, and removing a read-only tree.

use std::fs::Permissions;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// When and how far the cache is trimmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    /// The most mirrors and snapshots may take together (bytes on disk).
    pub max_bytes: u64,
    /// Anything used more recently than this is kept even over the limit.
    pub keep_recent: Duration,
}

/// Bytes allocated on disk under `path` (symlinks not followed).
pub(crate) fn disk_usage(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                total += disk_usage(&entry.path());
            }
        }
    }
    total
}

/// Records a new snapshot's size beside it (`<commit>.size`: bytes on disk), so eviction need
/// not walk it. Best effort: without it, eviction measures.
pub(crate) fn record_size(dir: &Path, commit: &str, staging: &Path) {
    let _ = std::fs::write(
        dir.join(format!("{commit}.size")),
        format!("{}\n", disk_usage(staging)),
    );
}

/// Removes a file or a directory tree, first making read-only directories writable again.
pub(crate) fn remove_tree(path: &Path) -> std::io::Result<()> {
    fn make_writable(dir: &Path) -> std::io::Result<()> {
        std::fs::set_permissions(dir, Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                make_writable(&entry.path())?;
            }
        }
        Ok(())
    }
    let metadata = path.symlink_metadata()?;
    if metadata.is_dir() {
        make_writable(path)?;
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}
