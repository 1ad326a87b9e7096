//! The `[maintain]` section of `warden.toml`: where `warden maintain` looks for candidate
//! versions (a Cargo sparse index), the local RustSec advisory database `--select vulnerable`
//! scans against, and the upgrade policy (major upgrades opt-in, a cooldown in days, allow and
//! deny lists).

use anyhow::bail;
use serde::Deserialize;
use std::path::PathBuf;

/// crates.io's sparse index.
pub const DEFAULT_INDEX: &str = "https://index.crates.io";

/// `[maintain]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintainSection {
    /// The Cargo sparse index candidate versions come from (default crates.io's).
    pub index: Option<String>,
    /// A local RustSec advisory database (`advisory-db`'s layout), for `--select vulnerable`.
    pub advisory_db: Option<PathBuf>,
    /// Minimum age of a version, in days (default 0).
    pub cooldown_days: Option<u32>,
    /// Allow semver-incompatible (major) upgrades (default false).
    pub allow_major: Option<bool>,
    /// Only these packages are upgraded (default: all).
    #[serde(default)]
    pub allow: Vec<String>,
    /// These packages are never upgraded.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `[maintain]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainConfig {
    pub index: String,
    pub advisory_db: Option<PathBuf>,
    pub cooldown_days: u32,
    pub allow_major: bool,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl Default for MaintainConfig {
    fn default() -> MaintainConfig {
        MaintainConfig {
            index: DEFAULT_INDEX.into(),
            advisory_db: None,
            cooldown_days: 0,
            allow_major: false,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

impl MaintainConfig {
    pub fn resolve(section: &MaintainSection) -> anyhow::Result<MaintainConfig> {
        let index = section
            .index
            .clone()
            .unwrap_or_else(|| DEFAULT_INDEX.into())
            .trim_end_matches('/')
            .to_string();
        if !(index.starts_with("https://") || index.starts_with("http://")) {
            bail!("maintain.index must be an http(s) URL of a Cargo sparse index (got {index:?})");
        }
        if let Some(db) = &section.advisory_db {
            if !db.is_absolute() {
                bail!(
                    "maintain.advisory_db must be an absolute path (got {})",
                    db.display()
                );
            }
        }
        Ok(MaintainConfig {
            index,
            advisory_db: section.advisory_db.clone(),
            cooldown_days: section.cooldown_days.unwrap_or(0),
            allow_major: section.allow_major.unwrap_or(false),
            allow: section.allow.clone(),
            deny: section.deny.clone(),
        })
    }
}
