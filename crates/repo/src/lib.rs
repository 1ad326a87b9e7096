//! Everything Warden does with repositories: the one hardened git helper, mirrors under
//! `WARDEN_HOME`, verified read-only snapshots of exact commits, task manifests, path confinement
//! and evidence validation.

#![warn(unreachable_pub)]
mod browse;
mod cache;
pub mod candidate;
pub mod confine;
pub mod error;
pub mod evidence;
mod gc;
pub mod git;
mod index;
mod materialize;
pub mod proposal;
mod retained;
pub mod spec;
pub mod store;
mod worktree;

pub use confine::{CheckoutRoot, ConfineError};
pub use error::{redact_credentials, RepoError};
pub use evidence::{validate_evidence, EvidenceClaim, EvidenceError, PinnedCheckout};
pub use gc::{CachePolicy, GcEntry, GcKind, GcReport, InUse};
pub use git::{Git, GitOutput, GitStream, GitTimeouts};
pub use materialize::SnapshotProgress;
pub use retained::Retained;
pub use spec::{RepoSpec, Source, WORK_TREE_REV};
pub use store::{
    evidence_url, BrowseBase, PinnedRepo, RepoStore, Snapshot, SnapshotLimits, WorkTree,
};
