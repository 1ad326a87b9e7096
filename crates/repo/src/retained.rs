//! What eviction must keep for tasks that are not finished ([`Retained`]): a leaf, so the
//! repository store can hold it without importing eviction.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// The mirrors and snapshots tasks that are not finished still need (a queued retry pins the
/// commit it recorded; a follow-up pins into the same mirror), which eviction keeps whatever
/// their age.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retained {
    pub(crate) mirrors: BTreeSet<PathBuf>,
    pub(crate) snapshots: BTreeSet<PathBuf>,
}

impl Retained {
    pub fn is_empty(&self) -> bool {
        self.mirrors.is_empty() && self.snapshots.is_empty()
    }
}
