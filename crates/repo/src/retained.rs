//! What eviction must keep for tasks ([`Retained`]): a leaf, so the repository store can hold
//! it without importing eviction.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The mirrors and snapshots tasks that are not finished still need (a queued retry pins the
/// commit it recorded; a follow-up pins into the same mirror), which eviction keeps whatever
/// their age; and the commits finished tasks recorded, which a retry or a follow-up pins
/// again: a mirror holding one of them as a `PATH@worktree` snapshot (a commit that exists
/// nowhere else) is kept too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retained {
    pub(crate) mirrors: BTreeSet<PathBuf>,
    pub(crate) snapshots: BTreeSet<PathBuf>,
    /// Per mirror, the commits finished tasks recorded.
    pub(crate) commits: BTreeMap<PathBuf, BTreeSet<String>>,
}

impl Retained {
    pub fn is_empty(&self) -> bool {
        self.mirrors.is_empty() && self.snapshots.is_empty() && self.commits.is_empty()
    }
}
