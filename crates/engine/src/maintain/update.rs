//! `warden advisories update`: fetching the advisory databases `[maintain]` names, and how old
//! each one is.
//!
//! **What is fetched.** `advisory_db` from the git repository `advisory_db_url` (RustSec's by
//! default), its default branch (`HEAD`); `osv_db/<ecosystem>/` from
//! `<osv_url>/<ecosystem>/all.zip` (osv.dev's per-ecosystem exports) for each of
//! `osv_ecosystems` — the layout [`super::osv::OsvDb`] already reads: a directory of OSV
//! records, each project reading its own ecosystem's.
//!
//! **Through Warden's egress.** Every network request goes through Warden's own egress proxy
//! ([`crate::egress`]), whose allow-list for the update is the hosts of those two URLs plus the
//! operator's `[egress] allow_private` hosts, through `[egress] upstream` when set (git is told
//! `http.proxy`, the archive download uses it as its proxy). A `file://` git URL is read
//! locally.
//!
//! **Atomically.** Each database is fetched into a directory beside the old one
//! (`.<name>.update-…`, passed over by the readers, whose walks skip dot-directories), loaded
//! with the reader that will scan it (a record that does not parse fails the update), and only
//! then swapped into place with one `renameat2(RENAME_EXCHANGE)`; the old copy is removed after.
//! A failed or interrupted update leaves the old copy as it was (and at most a dot-directory
//! the next update removes). On a file system without `RENAME_EXCHANGE` the old copy is moved
//! aside and the new one renamed in, the old one put back if that fails.
//!
//! **When.** Each database directory gets a [`RECORD`] file (`.warden-fetched`: JSON with the
//! time, the source and the snapshot); [`freshness`] reads it, or for a git checkout Warden did
//! not fetch, the time of its last `git fetch`/`pull`/`clone` (`.git/FETCH_HEAD` or
//! `.git/HEAD`). `warden vulns`, `warden maintain` and `warden doctor` say the age and warn past
//! `[maintain] max_advisory_age_days`.

use super::advisory::AdvisoryDb;
use super::osv::OsvDb;
use crate::config::Config;
use crate::egress::{EgressPolicy, EgressProxy, EgressRecord, EgressSettings, HostRule};
use crate::maintain_config::MaintainConfig;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use super::osv::RECORD;

/// The most entries an OSV archive may hold, and the most bytes they may unpack to.
const MAX_ARCHIVE_ENTRIES: usize = 1_000_000;
const MAX_UNPACKED_BYTES: u64 = 8 << 30;

/// A connection that moves no byte for this long fails the download.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What [`RECORD`] holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fetched {
    /// RFC 3339, UTC.
    pub fetched_at: String,
    /// The URL fetched.
    pub source: String,
    /// The database's snapshot id, as scans record it (`git:<commit>`, `sha256:<digest>`).
    pub snapshot: String,
    /// Advisories it holds (for an OSV database, the records of its ecosystem).
    pub advisories: usize,
}

/// How old a database is, as `vulns`, `maintain` and `doctor` say it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatabaseAge {
    /// The directory read.
    pub path: PathBuf,
    /// When it was fetched (RFC 3339), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<String>,
    /// Whole days since then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_days: Option<u64>,
    /// What says when: `warden advisories update` (its record) or `git` (the checkout's last
    /// fetch); `none` when nothing does.
    pub recorded_by: &'static str,
    /// Older than `[maintain] max_advisory_age_days`.
    pub stale: bool,
    pub max_age_days: u32,
}

impl DatabaseAge {
    /// `fetched 3 days ago, at 2026-05-01T10:00:00Z`, or that it is not recorded.
    pub fn describe(&self) -> String {
        match (&self.fetched_at, self.age_days) {
            (Some(at), Some(days)) => format!("fetched {} ago, at {at}", days_text(days)),
            _ => "when it was fetched is not recorded".to_string(),
        }
    }

    /// The warning past `max_advisory_age_days`, naming the database and the fix.
    pub fn warning(&self) -> Option<String> {
        let days = self.age_days.filter(|_| self.stale)?;
        Some(format!(
            "the advisory database {} was fetched {} ago, more than [maintain] \
             max_advisory_age_days ({}): advisories published since are not known to it; run \
             `warden advisories update`",
            self.path.display(),
            days_text(days),
            self.max_age_days
        ))
    }
}

/// `1 day`, `3 days`.
fn days_text(days: u64) -> String {
    match days {
        1 => "1 day".into(),
        n => format!("{n} days"),
    }
}

/// When the database at `dir` was fetched (ms since the epoch) and what says it: its
/// [`RECORD`], else its git checkout's last fetch, pull or clone.
pub fn freshness(dir: &Path) -> Option<(u64, &'static str)> {
    if let Some(fetched) = read_record(dir) {
        if let Some(ms) = warden_time::parse_rfc3339_since_epoch(&fetched.fetched_at) {
            return Some((ms, "warden advisories update"));
        }
    }
    let git = dir.join(".git");
    ["FETCH_HEAD", "HEAD"]
        .iter()
        .filter_map(|name| {
            std::fs::metadata(git.join(name))
                .and_then(|m| m.modified())
                .ok()
        })
        .filter_map(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        .max()
        .map(|ms| (ms, "git"))
}

/// The [`RECORD`] of `dir`, when it has a readable one.
pub fn read_record(dir: &Path) -> Option<Fetched> {
    let text = std::fs::read_to_string(dir.join(RECORD)).ok()?;
    serde_json::from_str(&text).ok()
}

/// How old the database at `dir` is at `now_ms`.
pub fn age(dir: &Path, now_ms: u64, max_age_days: u32) -> DatabaseAge {
    match freshness(dir) {
        Some((at, recorded_by)) => {
            let days = now_ms.saturating_sub(at) / warden_time::MS_PER_DAY.unsigned_abs();
            DatabaseAge {
                path: dir.to_path_buf(),
                fetched_at: Some(warden_time::rfc3339_seconds(
                    i64::try_from(at).unwrap_or(i64::MAX),
                )),
                age_days: Some(days),
                recorded_by,
                stale: days > u64::from(max_age_days),
                max_age_days,
            }
        }
        None => DatabaseAge {
            path: dir.to_path_buf(),
            fetched_at: None,
            age_days: None,
            recorded_by: "none",
            stale: false,
            max_age_days,
        },
    }
}

/// The directory an OSV database of `ecosystem` under `osv_db` is dated by: the ecosystem's
/// own directory when `warden advisories update` wrote one, else `osv_db` itself.
pub fn osv_dir(osv_db: &Path, ecosystem: &str) -> PathBuf {
    let own = osv_db.join(ecosystem);
    if own.join(RECORD).is_file() {
        own
    } else {
        osv_db.to_path_buf()
    }
}

/// One database's update.
#[derive(Debug, Clone, Serialize)]
pub struct DatabaseUpdate {
    /// `RustSec`, `OSV Go`, `OSV npm`.
    pub name: String,
    pub path: PathBuf,
    pub source: String,
    /// What was fetched, or why the old copy was kept.
    #[serde(flatten)]
    pub outcome: UpdateOutcome,
}

/// Whether a database was replaced.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum UpdateOutcome {
    Updated(Fetched),
    /// The old copy (if any) is left as it was.
    Failed {
        error: String,
    },
}

/// Every database's update and the connections made through Warden's egress proxy.
#[derive(Debug, Clone)]
pub struct UpdateReport {
    pub databases: Vec<DatabaseUpdate>,
    pub connections: Vec<EgressRecord>,
}

impl UpdateReport {
    pub fn failed(&self) -> usize {
        self.databases
            .iter()
            .filter(|d| matches!(d.outcome, UpdateOutcome::Failed { .. }))
            .count()
    }
}

/// The egress allow-list of an update: the hosts of `advisory_db_url` (when `advisory_db` is
/// set) and `osv_url` (when `osv_db` is), plus the operator's private hosts and upstream proxy.
/// A host that is an IP address must be listed under `[egress] allow_private`.
pub fn egress_settings(config: &Config) -> EgressSettings {
    let maintain = &config.maintain;
    let operator = &config.sandbox.toolchains.egress;
    let mut settings = EgressSettings {
        allow: Vec::new(),
        allow_private: operator.allow_private.clone(),
        upstream: operator.upstream.clone(),
        max_bytes: operator.max_bytes,
    };
    let urls = [
        maintain
            .advisory_db
            .as_ref()
            .map(|_| maintain.advisory_db_url.as_str()),
        maintain.osv_db.as_ref().map(|_| maintain.osv_url.as_str()),
    ];
    for url in urls.into_iter().flatten() {
        if let Some(Ok(rule)) = authority(url).map(|a| HostRule::parse(a, false)) {
            settings.add(rule);
        }
    }
    settings
}

/// The `host[:port]` of an `http(s)://` URL.
fn authority(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    // No credentials in an advisory URL: the part after `@` is the host.
    Some(authority.rsplit('@').next().unwrap_or(authority))
}

/// Fetches every database `[maintain]` configures (`advisory_db`, and `osv_db` per
/// `osv_ecosystems`), each on its own: one that fails keeps its old copy and does not stop the
/// others. `Err` only when nothing is configured or the egress proxy cannot start.
pub async fn update(
    config: &Config,
    now_ms: &(dyn Fn() -> u64 + Sync),
    progress: &(dyn Fn(&str) + Sync),
) -> Result<UpdateReport, String> {
    if config.maintain.advisory_db.is_none() && config.maintain.osv_db.is_none() {
        return Err(format!(
            "no advisory database to update: set `advisory_db = \"/path/to/advisory-db\"` \
             (RustSec, for Cargo) and/or `osv_db = \"/path/to/osv\"` (OSV, for Go and npm) \
             under [maintain] in {}",
            config.file.display()
        ));
    }
    let policy = EgressPolicy::new(egress_settings(config));
    update_through(&config.maintain, policy, now_ms, progress).await
}

/// [`update`] of `maintain`'s databases under `policy` (tests: the operator's private hosts).
pub async fn update_through(
    maintain: &MaintainConfig,
    policy: EgressPolicy,
    now_ms: &(dyn Fn() -> u64 + Sync),
    progress: &(dyn Fn(&str) + Sync),
) -> Result<UpdateReport, String> {
    let mut proxy = EgressProxy::start(policy)
        .map_err(|e| format!("Warden's egress proxy could not start: {e}"))?;
    let proxy_url = format!("http://{}", proxy.address());
    let mut databases = Vec::new();
    if let Some(path) = &maintain.advisory_db {
        progress(&format!(
            "warden: fetching the RustSec advisory database from {} into {}",
            maintain.advisory_db_url,
            path.display()
        ));
        let (target, url, proxy) = (
            path.clone(),
            maintain.advisory_db_url.clone(),
            proxy_url.clone(),
        );
        let now = now_ms();
        let outcome =
            tokio::task::spawn_blocking(move || update_rustsec(&target, &url, &proxy, now))
                .await
                .unwrap_or_else(|e| Err(format!("the update crashed: {e}")));
        databases.push(report("RustSec", path, &maintain.advisory_db_url, outcome));
    }
    if let Some(osv_db) = &maintain.osv_db {
        let client = client(&proxy_url);
        for ecosystem in &maintain.osv_ecosystems {
            let url = format!("{}/{ecosystem}/all.zip", maintain.osv_url);
            let target = osv_db.join(ecosystem);
            progress(&format!(
                "warden: fetching OSV's {ecosystem} records from {url} into {}",
                target.display()
            ));
            let outcome = match &client {
                Ok(client) => update_osv(client, osv_db, ecosystem, &url, now_ms()).await,
                Err(error) => Err(error.clone()),
            };
            databases.push(report(&format!("OSV {ecosystem}"), &target, &url, outcome));
        }
    }
    let connections = proxy.stop();
    Ok(UpdateReport {
        databases,
        connections,
    })
}

fn report(
    name: &str,
    path: &Path,
    source: &str,
    outcome: Result<Fetched, String>,
) -> DatabaseUpdate {
    DatabaseUpdate {
        name: name.to_string(),
        path: path.to_path_buf(),
        source: source.to_string(),
        outcome: match outcome {
            Ok(fetched) => UpdateOutcome::Updated(fetched),
            Err(error) => UpdateOutcome::Failed { error },
        },
    }
}

/// The HTTP client of the downloads: every request through Warden's proxy at `proxy_url`, the
/// system's CA bundle trusted as the index's client trusts it.
fn client(proxy_url: &str) -> Result<reqwest::Client, String> {
    let proxy = reqwest::Proxy::all(proxy_url).map_err(|e| format!("the egress proxy: {e}"))?;
    let mut builder = reqwest::Client::builder()
        .proxy(proxy)
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(READ_TIMEOUT);
    for certificate in super::index::system_certificates()? {
        builder = builder.add_root_certificate(certificate);
    }
    builder.build().map_err(|e| format!("HTTP client: {e}"))
}

/// A directory beside `target` that the update fills; removed when dropped (after a swap it
/// holds the old copy). Holds the lock file beside `target` (`.<name>.update.lock`,
/// exclusively, for as long as it lives), so two updates of one database (two `warden serve`
/// processes' schedules, or one by hand) run one after the other.
struct Staging {
    dir: PathBuf,
    _lock: std::fs::File,
}

impl Staging {
    fn beside(target: &Path) -> Result<Staging, String> {
        let parent = target
            .parent()
            .ok_or_else(|| format!("{} has no parent directory", target.display()))?;
        let name = target
            .file_name()
            .ok_or_else(|| format!("{} has no name", target.display()))?
            .to_string_lossy()
            .into_owned();
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        let lock_path = parent.join(format!(".{name}.update.lock"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
        // Earlier updates that were interrupted leave their staging behind: removed now.
        if let Ok(entries) = std::fs::read_dir(parent) {
            let prefix = format!(".{name}.update-");
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = parent.join(format!(".{name}.update-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Staging { dir, _lock: lock })
    }

    /// Where the new copy is built.
    fn new_copy(&self) -> PathBuf {
        self.dir.join("new")
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Puts `new` (a directory) at `target` in one step: exchanged with the old copy (which ends
/// at `new`'s path), or renamed into place when there is none.
fn swap_into_place(new: &Path, target: &Path) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("cannot put {} in place: {e}", target.display());
    if std::fs::symlink_metadata(target).is_err() {
        return std::fs::rename(new, target).map_err(failed);
    }
    match rustix::fs::renameat_with(
        rustix::fs::CWD,
        new,
        rustix::fs::CWD,
        target,
        rustix::fs::RenameFlags::EXCHANGE,
    ) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP) => {
            // No RENAME_EXCHANGE here: the old copy aside, the new one in, the old one back
            // if that fails.
            let aside = new.with_extension("old");
            std::fs::rename(target, &aside).map_err(failed)?;
            if let Err(error) = std::fs::rename(new, target) {
                let _ = std::fs::rename(&aside, target);
                return Err(failed(error));
            }
            Ok(())
        }
        Err(errno) => Err(failed(errno.into())),
    }
}

fn write_record(dir: &Path, fetched: &Fetched) -> Result<(), String> {
    let text = serde_json::to_string_pretty(fetched).map_err(|e| e.to_string())?;
    std::fs::write(dir.join(RECORD), text + "\n")
        .map_err(|e| format!("cannot write {}: {e}", dir.join(RECORD).display()))
}

/// Fetches the RustSec database at `url` into a new checkout beside `target` (reusing the old
/// checkout's objects when it is one, so only what is new crosses the network), loads it, and
/// swaps it in.
fn update_rustsec(
    target: &Path,
    url: &str,
    proxy_url: &str,
    now_ms: u64,
) -> Result<Fetched, String> {
    let git = warden_repo::Git::locate().map_err(|e| e.to_string())?;
    let staging = Staging::beside(target)?;
    let new = staging.new_copy();
    std::fs::create_dir(&new).map_err(|e| format!("cannot create {}: {e}", new.display()))?;
    let run = |args: &[&str]| git.run(&new, args).map_err(|e| e.to_string());
    run(&["init", "--quiet"])?;
    if target.join(".git").is_dir() {
        // Best effort: a broken old checkout only means a full fetch.
        let old = target.to_string_lossy();
        let _ = git.run(&new, &["fetch", "--quiet", "--no-tags", &old, "HEAD"]);
    }
    let proxy = format!("http.proxy={proxy_url}");
    git.run_transfer(
        &new,
        &["-c", &proxy, "fetch", "--quiet", "--no-tags", url, "HEAD"],
    )
    .map_err(|e| format!("fetching {url}: {e}"))?;
    run(&["checkout", "--quiet", "--detach", "FETCH_HEAD"])?;
    let db =
        AdvisoryDb::open(&new).map_err(|e| format!("the fetched database does not load: {e}"))?;
    let fetched = Fetched {
        fetched_at: warden_time::rfc3339_seconds(i64::try_from(now_ms).unwrap_or(i64::MAX)),
        source: url.to_string(),
        snapshot: db.snapshot.clone(),
        advisories: db.advisories.len(),
    };
    write_record(&new, &fetched)?;
    swap_into_place(&new, target)?;
    Ok(fetched)
}

/// Downloads `url` (an OSV `all.zip`) into a staging directory beside `osv_db/<ecosystem>`,
/// unpacks its records, loads them, and swaps them in.
async fn update_osv(
    client: &reqwest::Client,
    osv_db: &Path,
    ecosystem: &str,
    url: &str,
    now_ms: u64,
) -> Result<Fetched, String> {
    let target = osv_db.join(ecosystem);
    let staging = Staging::beside(&target)?;
    let archive = staging.dir.join("all.zip");
    download(client, url, &archive).await?;
    let new = staging.new_copy();
    let (ecosystem, url_owned, target_owned) = (
        super::osv::ecosystem_name(ecosystem)
            .ok_or_else(|| format!("{ecosystem:?} is not an ecosystem Warden reads"))?,
        url.to_string(),
        target.clone(),
    );
    tokio::task::spawn_blocking(move || {
        unpack(&archive, &new)?;
        let db = OsvDb::open(&new, ecosystem)
            .map_err(|e| format!("the fetched records do not load: {e}"))?;
        let fetched = Fetched {
            fetched_at: warden_time::rfc3339_seconds(i64::try_from(now_ms).unwrap_or(i64::MAX)),
            source: url_owned,
            snapshot: db.snapshot.clone(),
            advisories: db.record_count(),
        };
        write_record(&new, &fetched)?;
        swap_into_place(&new, &target_owned)?;
        drop(staging);
        Ok(fetched)
    })
    .await
    .unwrap_or_else(|e| Err(format!("the update crashed: {e}")))
}

/// GETs `url` into the file `to`, streamed; anything but 200 is an error.
async fn download(client: &reqwest::Client, url: &str, to: &Path) -> Result<(), String> {
    let mut response = client
        .get(url)
        .header(
            reqwest::header::USER_AGENT,
            format!("warden/{} (advisories update)", env!("CARGO_PKG_VERSION")),
        )
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {}", super::index::chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    let mut file =
        std::fs::File::create(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading {url}: {}", super::index::chain(&e)))?
    {
        file.write_all(&chunk)
            .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
    }
    file.sync_all()
        .map_err(|e| format!("cannot write {}: {e}", to.display()))
}

/// Unpacks an OSV export (`all.zip`: one `ID.json` per record, no directories) into the new
/// directory `to`. An entry with a path, a name that is not `*.json`, a link, or an archive
/// past [`MAX_ARCHIVE_ENTRIES`] or [`MAX_UNPACKED_BYTES`] fails the update.
fn unpack(archive: &Path, to: &Path) -> Result<(), String> {
    let file = std::fs::File::open(archive)
        .map_err(|e| format!("cannot open {}: {e}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| format!("the archive does not read as a zip: {e}"))?;
    if zip.len() > MAX_ARCHIVE_ENTRIES {
        return Err(format!(
            "the archive has {} entries, more than {MAX_ARCHIVE_ENTRIES}",
            zip.len()
        ));
    }
    std::fs::create_dir(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut unpacked: u64 = 0;
    let mut buffer = Vec::new();
    for index in 0..zip.len() {
        let mut entry = zip
            .by_index(index)
            .map_err(|e| format!("archive entry {index}: {e}"))?;
        if entry.is_dir() {
            continue;
        }
        let name = entry
            .name()
            .map_err(|e| format!("archive entry {index}: {e}"))?
            .into_owned();
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && !name.contains(['/', '\\', '\0'])
            && name.ends_with(".json");
        if !plain || entry.is_symlink() {
            return Err(format!(
                "archive entry {name:?} is not an OSV record (ID.json with no directory)"
            ));
        }
        buffer.clear();
        let left = MAX_UNPACKED_BYTES - unpacked;
        let read = (&mut entry)
            .take(left + 1)
            .read_to_end(&mut buffer)
            .map_err(|e| format!("archive entry {name:?}: {e}"))?;
        unpacked += read as u64;
        if unpacked > MAX_UNPACKED_BYTES {
            return Err(format!(
                "the archive unpacks to more than {} GiB",
                MAX_UNPACKED_BYTES >> 30
            ));
        }
        let path = to.join(&name);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        out.write_all(&buffer)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
