//! The `[maintain]` section of `warden.toml`: where `warden maintain` looks for candidate
//! versions (a Cargo sparse index, a Go module proxy), the local advisory databases
//! `--select vulnerable` scans against (RustSec's for Cargo, OSV for Go), and the upgrade policy (major upgrades opt-in, a cooldown in days, allow and
//! deny lists).

use anyhow::bail;
use std::path::PathBuf;
use warden_config::MaintainSection;

/// crates.io's sparse index.
pub const DEFAULT_INDEX: &str = "https://index.crates.io";

/// npm's public registry.
pub const DEFAULT_NPM_REGISTRY: &str = "https://registry.npmjs.org";

/// Go's public module proxy.
pub const DEFAULT_GOPROXY: &str = "https://proxy.golang.org";

/// RustSec's advisory database, the git repository `warden advisories update` fetches.
pub const DEFAULT_ADVISORY_DB_URL: &str = "https://github.com/rustsec/advisory-db.git";

/// osv.dev's exports: `<osv_url>/<ecosystem>/all.zip`, one archive of OSV records per ecosystem.
pub const DEFAULT_OSV_URL: &str = "https://osv-vulnerabilities.storage.googleapis.com";

/// The ecosystems whose OSV records Warden reads, as OSV names them: what
/// `warden advisories update` fetches by default.
pub const OSV_ECOSYSTEMS: [&str; 2] = ["Go", "npm"];

/// The OSV ecosystems `[maintain] osv_ecosystems` may name: the defaults and `crates.io` (for
/// Cargo projects without a RustSec database).
pub const OSV_ECOSYSTEMS_READ: [&str; 3] = ["Go", "npm", "crates.io"];

/// Days after which an advisory database is old enough to warn about (default).
pub const DEFAULT_MAX_ADVISORY_AGE_DAYS: u32 = 7;

/// `[maintain]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainConfig {
    pub index: String,
    pub advisory_db: Option<PathBuf>,
    pub osv_db: Option<PathBuf>,
    pub advisory_db_url: String,
    pub osv_url: String,
    pub osv_ecosystems: Vec<String>,
    pub max_advisory_age_days: u32,
    pub goproxy: String,
    pub gosumdb: Option<String>,
    pub npm_registry: String,
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
            osv_db: None,
            advisory_db_url: DEFAULT_ADVISORY_DB_URL.into(),
            osv_url: DEFAULT_OSV_URL.into(),
            osv_ecosystems: OSV_ECOSYSTEMS.iter().map(|e| e.to_string()).collect(),
            max_advisory_age_days: DEFAULT_MAX_ADVISORY_AGE_DAYS,
            goproxy: DEFAULT_GOPROXY.into(),
            gosumdb: None,
            npm_registry: DEFAULT_NPM_REGISTRY.into(),
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
        for (key, db) in [
            ("advisory_db", &section.advisory_db),
            ("osv_db", &section.osv_db),
        ] {
            if let Some(db) = db {
                if !db.is_absolute() {
                    bail!(
                        "maintain.{key} must be an absolute path (got {})",
                        db.display()
                    );
                }
            }
        }
        let goproxy = section
            .goproxy
            .clone()
            .unwrap_or_else(|| DEFAULT_GOPROXY.into());
        GoProxy::parse(&goproxy).map_err(|reason| anyhow::anyhow!("maintain.goproxy: {reason}"))?;
        let npm_registry = section
            .npm_registry
            .clone()
            .unwrap_or_else(|| DEFAULT_NPM_REGISTRY.into())
            .trim_end_matches('/')
            .to_string();
        if !(npm_registry.starts_with("https://") || npm_registry.starts_with("http://")) {
            bail!("maintain.npm_registry must be an http(s) URL of an npm registry (got {npm_registry:?})");
        }
        if let Some(sumdb) = &section.gosumdb {
            if sumdb.trim().is_empty() || sumdb.contains(['\n', '\0']) {
                bail!("maintain.gosumdb must be a GOSUMDB value such as \"sum.golang.org\" or \"off\"");
            }
        }
        let advisory_db_url = section
            .advisory_db_url
            .clone()
            .unwrap_or_else(|| DEFAULT_ADVISORY_DB_URL.into());
        if !(advisory_db_url.starts_with("https://") || advisory_db_url.starts_with("file:///")) {
            bail!(
                "maintain.advisory_db_url must be an https:// or file:/// URL of a git repository \
                 (got {advisory_db_url:?})"
            );
        }
        let osv_url = section
            .osv_url
            .clone()
            .unwrap_or_else(|| DEFAULT_OSV_URL.into())
            .trim_end_matches('/')
            .to_string();
        if !(osv_url.starts_with("https://") || osv_url.starts_with("http://")) {
            bail!("maintain.osv_url must be an http(s) URL (got {osv_url:?})");
        }
        let osv_ecosystems = match &section.osv_ecosystems {
            None => OSV_ECOSYSTEMS.iter().map(|e| e.to_string()).collect(),
            Some(list) => {
                for name in list {
                    if !OSV_ECOSYSTEMS_READ.contains(&name.as_str()) {
                        bail!(
                            "maintain.osv_ecosystems: {name:?} is not an ecosystem Warden reads \
                             OSV records of (one of {})",
                            OSV_ECOSYSTEMS_READ.join(", ")
                        );
                    }
                }
                let mut list = list.clone();
                list.dedup();
                list
            }
        };
        let max_advisory_age_days = section
            .max_advisory_age_days
            .unwrap_or(DEFAULT_MAX_ADVISORY_AGE_DAYS);
        if max_advisory_age_days == 0 {
            bail!("maintain.max_advisory_age_days must be at least 1");
        }
        Ok(MaintainConfig {
            index,
            advisory_db: section.advisory_db.clone(),
            osv_db: section.osv_db.clone(),
            advisory_db_url,
            osv_url,
            osv_ecosystems,
            max_advisory_age_days,
            goproxy: goproxy.trim_end_matches('/').to_string(),
            gosumdb: section.gosumdb.clone(),
            npm_registry,
            cooldown_days: section.cooldown_days.unwrap_or(0),
            allow_major: section.allow_major.unwrap_or(false),
            allow: section.allow.clone(),
            deny: section.deny.clone(),
        })
    }
}

/// A Go module proxy: an HTTP(S) base URL or a local directory (`file:///dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoProxy {
    Http(String),
    Dir(PathBuf),
}

impl GoProxy {
    /// `https://…`, `http://…` or `file:///absolute/dir`.
    pub fn parse(text: &str) -> Result<GoProxy, String> {
        let text = text.trim_end_matches('/');
        if let Some(path) = text.strip_prefix("file://") {
            let path = PathBuf::from(path);
            if !path.is_absolute() {
                return Err(format!(
                    "a file:// module proxy needs an absolute path (got {text:?})"
                ));
            }
            return Ok(GoProxy::Dir(path));
        }
        if text.starts_with("https://") || text.starts_with("http://") {
            return Ok(GoProxy::Http(text.to_string()));
        }
        Err(format!(
            "the Go module proxy must be an http(s):// URL or a file:// directory (got {text:?}; \
             `direct` and `off` are not proxies Warden can read versions from)"
        ))
    }
}
