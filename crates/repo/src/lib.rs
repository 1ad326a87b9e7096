//! Everything Warden does with repositories: the one hardened git helper, mirrors under
//! `WARDEN_HOME`, verified read-only snapshots of exact commits, task manifests, path confinement
//! and evidence validation.

pub mod confine;

pub use confine::{CheckoutRoot, ConfineError};
