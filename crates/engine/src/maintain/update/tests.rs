//! `warden advisories update` against a local git remote (RustSec) and a local archive server
//! (OSV, through Warden's egress proxy), with real published records.

use super::*;
use crate::egress::{EgressPolicy, EgressSettings, HostRule};
use crate::maintain_config::MaintainConfig;
use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

const DAY_MS: u64 = 86_400_000;
/// 2026-05-01T00:00:00Z.
const NOW_MS: u64 = 1_777_593_600_000;

fn fixture(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/maintain/fixtures")
            .join(path),
    )
    .unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let git = warden_repo::Git::locate().unwrap();
    let mut all = vec![
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "-c",
        "commit.gpgsign=false",
    ];
    all.extend_from_slice(args);
    git.run(dir, &all).unwrap().text()
}

/// A git repository in advisory-db's layout holding `records` (`package`, file name).
fn rustsec_remote(dir: &Path, records: &[(&str, &str)]) -> String {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "--quiet", "--initial-branch=main"]);
    add_records(dir, records);
    format!("file://{}", dir.display())
}

fn add_records(dir: &Path, records: &[(&str, &str)]) {
    for (package, file) in records {
        let crate_dir = dir.join("crates").join(package);
        std::fs::create_dir_all(&crate_dir).unwrap();
        std::fs::write(crate_dir.join(file), fixture(&format!("rustsec/{file}"))).unwrap();
    }
    git(dir, &["add", "--all"]);
    git(dir, &["commit", "--quiet", "-m", "advisories"]);
}

fn no_network() -> EgressPolicy {
    EgressPolicy::new(EgressSettings::default())
}

fn run(maintain: &MaintainConfig, policy: EgressPolicy, now_ms: u64) -> UpdateReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(update_through(maintain, policy, &|| now_ms, &|_| {}))
        .unwrap()
}

fn only_outcome(report: &UpdateReport) -> &UpdateOutcome {
    assert_eq!(report.databases.len(), 1, "{report:?}");
    &report.databases[0].outcome
}

/// Every file under `dir` with its contents, for "left as it was".
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Names in `dir` that start with a dot and hold `.update-`: staging left behind.
fn staging_left(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".update-"))
        .collect()
}

#[test]
fn the_rustsec_database_is_fetched_then_refreshed_and_dated() {
    let dir = tempfile::tempdir().unwrap();
    let url = rustsec_remote(
        &dir.path().join("remote"),
        &[("smallvec", "RUSTSEC-2021-0003.md")],
    );
    let target = dir.path().join("dbs/advisory-db");
    let maintain = MaintainConfig {
        advisory_db: Some(target.clone()),
        advisory_db_url: url.clone(),
        ..MaintainConfig::default()
    };

    // First fetch: there was no copy.
    let report = run(&maintain, no_network(), NOW_MS);
    let UpdateOutcome::Updated(fetched) = only_outcome(&report) else {
        panic!("{report:?}");
    };
    let head = git(&dir.path().join("remote"), &["rev-parse", "HEAD"]);
    assert_eq!(fetched.snapshot, format!("git:{head}"));
    assert_eq!(fetched.advisories, 1);
    assert_eq!(fetched.fetched_at, "2026-05-01T00:00:00Z");
    assert_eq!(fetched.source, url);
    let db = AdvisoryDb::open(&target).unwrap();
    assert_eq!(db.snapshot, format!("git:{head}"));
    assert_eq!(read_record(&target).as_ref(), Some(fetched));

    // Refreshed: the remote moved on; the new copy replaces the old one.
    add_records(
        &dir.path().join("remote"),
        &[("ansi_term", "RUSTSEC-2021-0139.md")],
    );
    let later = NOW_MS + 3 * DAY_MS;
    let report = run(&maintain, no_network(), later);
    let UpdateOutcome::Updated(fetched) = only_outcome(&report) else {
        panic!("{report:?}");
    };
    let head = git(&dir.path().join("remote"), &["rev-parse", "HEAD"]);
    assert_eq!(fetched.snapshot, format!("git:{head}"));
    assert_eq!(AdvisoryDb::open(&target).unwrap().advisories.len(), 2);
    assert!(staging_left(&dir.path().join("dbs")).is_empty());

    // Dated by its record, warned about past the maximum.
    let age = age(&target, later + 2 * DAY_MS, 7);
    assert_eq!(age.age_days, Some(2));
    assert_eq!(age.recorded_by, "warden advisories update");
    assert!(!age.stale);
    assert_eq!(
        age.describe(),
        "fetched 2 days ago, at 2026-05-04T00:00:00Z"
    );
    assert_eq!(age.warning(), None);
    let old = super::age(&target, later + 8 * DAY_MS, 7);
    assert!(old.stale);
    let warning = old.warning().unwrap();
    assert!(
        warning.contains("was fetched 8 days ago, more than [maintain] max_advisory_age_days (7)")
            && warning.contains("warden advisories update"),
        "{warning}"
    );
    // Exactly the maximum is not past it; one day is said in the singular.
    assert!(!super::age(&target, later + 7 * DAY_MS, 7).stale);
    assert!(super::age(&target, later + DAY_MS, 7)
        .describe()
        .starts_with("fetched 1 day ago"));
}

#[test]
fn a_failed_rustsec_update_leaves_the_old_copy_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let url = rustsec_remote(&remote, &[("smallvec", "RUSTSEC-2021-0003.md")]);
    let target = dir.path().join("advisory-db");
    let maintain = MaintainConfig {
        advisory_db: Some(target.clone()),
        advisory_db_url: url,
        ..MaintainConfig::default()
    };
    assert!(matches!(
        only_outcome(&run(&maintain, no_network(), NOW_MS)),
        UpdateOutcome::Updated(_)
    ));
    let before = contents(&target);

    // The remote now holds a record that does not parse: the new copy does not load.
    std::fs::write(
        remote.join("crates/smallvec/RUSTSEC-2099-0001.md"),
        "no front matter",
    )
    .unwrap();
    git(&remote, &["add", "--all"]);
    git(&remote, &["commit", "--quiet", "-m", "broken"]);
    let report = run(&maintain, no_network(), NOW_MS + DAY_MS);
    let UpdateOutcome::Failed { error } = only_outcome(&report) else {
        panic!("{report:?}");
    };
    assert!(
        error.contains("does not load") && error.contains("RUSTSEC-2099-0001.md"),
        "{error}"
    );
    assert_eq!(contents(&target), before);

    // A remote that is not there.
    let gone = MaintainConfig {
        advisory_db_url: format!("file://{}", dir.path().join("nowhere").display()),
        ..maintain.clone()
    };
    let report = run(&gone, no_network(), NOW_MS + DAY_MS);
    let UpdateOutcome::Failed { error } = only_outcome(&report) else {
        panic!("{report:?}");
    };
    assert!(error.contains("fetching file://"), "{error}");
    assert_eq!(contents(&target), before);
    assert!(staging_left(dir.path()).is_empty());

    // An update interrupted midway left its staging: the readers pass over it, the next
    // update removes it.
    let interrupted = dir.path().join(".advisory-db.update-1-2/new/crates/x");
    std::fs::create_dir_all(&interrupted).unwrap();
    std::fs::write(interrupted.join("RUSTSEC-2099-0002.md"), "half written").unwrap();
    assert_eq!(AdvisoryDb::open(&target).unwrap().advisories.len(), 1);
    let report = run(&gone, no_network(), NOW_MS + DAY_MS);
    assert!(matches!(
        only_outcome(&report),
        UpdateOutcome::Failed { .. }
    ));
    assert!(staging_left(dir.path()).is_empty());
    assert_eq!(contents(&target), before);
}

#[test]
fn git_fetches_an_https_remote_through_wardens_egress_proxy() {
    // A listener that is not a git server: git's CONNECT reaches it through the proxy (the
    // operator's private host, admitted), TLS then fails, and the old copy stays.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reached = Arc::new(Mutex::new(0usize));
    let counted = Arc::clone(&reached);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            *counted.lock().unwrap() += 1;
            drop(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("advisory-db");
    std::fs::create_dir_all(target.join("crates/smallvec")).unwrap();
    std::fs::write(
        target.join("crates/smallvec/RUSTSEC-2021-0003.md"),
        fixture("rustsec/RUSTSEC-2021-0003.md"),
    )
    .unwrap();
    let before = contents(&target);
    let maintain = MaintainConfig {
        advisory_db: Some(target.clone()),
        advisory_db_url: format!("https://127.0.0.1:{port}/rustsec/advisory-db.git"),
        ..MaintainConfig::default()
    };
    let policy = EgressPolicy::new(EgressSettings {
        allow_private: vec![HostRule::parse(&format!("127.0.0.1:{port}"), true).unwrap()],
        ..EgressSettings::default()
    });
    let report = run(&maintain, policy, NOW_MS);
    assert!(matches!(
        only_outcome(&report),
        UpdateOutcome::Failed { .. }
    ));
    assert!(
        report
            .connections
            .iter()
            .any(|c| c.method == "CONNECT" && c.host == "127.0.0.1" && c.port == port && c.allowed),
        "{:?}",
        report.connections
    );
    assert!(*reached.lock().unwrap() >= 1);
    assert_eq!(contents(&target), before);

    // Not admitted: refused by the proxy, never dialled.
    let before_count = *reached.lock().unwrap();
    let report = run(&maintain, no_network(), NOW_MS);
    assert!(matches!(
        only_outcome(&report),
        UpdateOutcome::Failed { .. }
    ));
    assert!(
        report.connections.iter().all(|c| !c.allowed),
        "{:?}",
        report.connections
    );
    assert_eq!(*reached.lock().unwrap(), before_count);
    assert_eq!(contents(&target), before);
}

/// What a path answers: status and body.
type Served = Arc<Mutex<HashMap<String, (u16, Vec<u8>)>>>;

/// Serves `files` (path → status and body) over plain HTTP.
struct ArchiveServer {
    port: u16,
    files: Served,
}

impl ArchiveServer {
    fn start() -> ArchiveServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let files: Served = Arc::default();
        let served = Arc::clone(&files);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let served = Arc::clone(&served);
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if stream.read(&mut byte).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    let (status, body) = served
                        .lock()
                        .unwrap()
                        .get(&path)
                        .cloned()
                        .unwrap_or((404, b"not found".to_vec()));
                    let _ = stream.write_all(
                        format!(
                            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    );
                    let _ = stream.write_all(&body);
                });
            }
        });
        ArchiveServer { port, files }
    }

    fn serve(&self, path: &str, status: u16, body: Vec<u8>) {
        self.files
            .lock()
            .unwrap()
            .insert(path.to_string(), (status, body));
    }

    fn policy(&self) -> EgressPolicy {
        EgressPolicy::new(EgressSettings {
            allow_private: vec![HostRule::parse(&format!("127.0.0.1:{}", self.port), true).unwrap()],
            ..EgressSettings::default()
        })
    }
}

/// A zip of `entries` (name, contents), deflated, as osv.dev's `all.zip` is.
fn zip_of(entries: &[(&str, String)]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, text) in entries {
        writer.start_file(*name, options).unwrap();
        writer.write_all(text.as_bytes()).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

fn npm_records() -> Vec<(&'static str, String)> {
    ["GHSA-35jh-r3h4-6jhm.json", "GHSA-xvch-5gv4-984h.json"]
        .into_iter()
        .map(|name| (name, fixture(&format!("osv/{name}"))))
        .collect()
}

#[test]
fn osv_exports_are_downloaded_through_the_proxy_unpacked_and_swapped_in() {
    let server = ArchiveServer::start();
    server.serve("/npm/all.zip", 200, zip_of(&npm_records()));
    let dir = tempfile::tempdir().unwrap();
    let osv_db = dir.path().join("osv");
    // A copy laid out by hand before: records at the top stay, read alongside; a record
    // both there and in the export is read once, the later copy.
    std::fs::create_dir_all(&osv_db).unwrap();
    std::fs::write(
        osv_db.join("GHSA-35jh-r3h4-6jhm.json"),
        fixture("osv/GHSA-35jh-r3h4-6jhm.json")
            .replace("2022-02-08T21:35:09Z", "2021-01-01T00:00:00Z")
            .replace("Command Injection in lodash", "an older copy"),
    )
    .unwrap();
    // Another ecosystem's directory, as the update writes it, is not read for npm.
    std::fs::create_dir_all(osv_db.join("Go")).unwrap();
    std::fs::write(osv_db.join("Go").join(RECORD), "{}").unwrap();
    std::fs::write(osv_db.join("Go/GO-2099-0001.json"), "not json").unwrap();
    let maintain = MaintainConfig {
        osv_db: Some(osv_db.clone()),
        osv_url: format!("http://127.0.0.1:{}", server.port),
        osv_ecosystems: vec!["npm".into()],
        ..MaintainConfig::default()
    };
    let report = run(&maintain, server.policy(), NOW_MS);
    let UpdateOutcome::Updated(fetched) = only_outcome(&report) else {
        panic!("{report:?}");
    };
    assert_eq!(report.databases[0].name, "OSV npm");
    assert_eq!(fetched.advisories, 2);
    assert!(fetched.snapshot.starts_with("sha256:"), "{fetched:?}");
    // Through Warden's proxy: one admitted GET to the archive server.
    assert!(
        report.connections.iter().any(|c| c.method == "GET"
            && c.host == "127.0.0.1"
            && c.port == server.port
            && c.allowed
            && c.bytes_received > 0),
        "{:?}",
        report.connections
    );
    let db = OsvDb::open(&osv_db, super::super::osv::NPM).unwrap();
    // lodash's record names lodash and lodash-es.
    assert_eq!(db.advisories.len(), 3);
    assert_eq!(db.record_count(), 2);
    assert!(
        db.advisories
            .iter()
            .any(|a| a.title == "Command Injection in lodash")
            && db.advisories.iter().all(|a| a.title != "an older copy"),
        "{:?}",
        db.advisories
    );
    assert_eq!(osv_dir(&osv_db, "npm"), osv_db.join("npm"));
    assert_eq!(osv_dir(&osv_db, "Go"), osv_db.join("Go"));
    assert_eq!(osv_dir(&osv_db, "crates.io"), osv_db);
    assert_eq!(age(&osv_dir(&osv_db, "npm"), NOW_MS, 7).age_days, Some(0));

    // A newer export replaces the old one whole.
    let mut records = npm_records();
    records.truncate(1);
    server.serve("/npm/all.zip", 200, zip_of(&records));
    let report = run(&maintain, server.policy(), NOW_MS + DAY_MS);
    assert!(matches!(only_outcome(&report), UpdateOutcome::Updated(f) if f.advisories == 1));
    assert_eq!(OsvDb::open(&osv_db, "npm").unwrap().record_count(), 1);
    assert!(staging_left(&osv_db).is_empty());
}

#[test]
fn a_failed_osv_download_or_a_bad_archive_leaves_the_old_copy_as_it_was() {
    let server = ArchiveServer::start();
    server.serve("/npm/all.zip", 200, zip_of(&npm_records()));
    let dir = tempfile::tempdir().unwrap();
    let osv_db = dir.path().join("osv");
    let maintain = MaintainConfig {
        osv_db: Some(osv_db.clone()),
        osv_url: format!("http://127.0.0.1:{}", server.port),
        osv_ecosystems: vec!["npm".into()],
        ..MaintainConfig::default()
    };
    assert!(matches!(
        only_outcome(&run(&maintain, server.policy(), NOW_MS)),
        UpdateOutcome::Updated(_)
    ));
    let before = contents(&osv_db);
    let fails = |body: (u16, Vec<u8>), expected: &str| {
        server.serve("/npm/all.zip", body.0, body.1);
        let report = run(&maintain, server.policy(), NOW_MS + DAY_MS);
        let UpdateOutcome::Failed { error } = only_outcome(&report) else {
            panic!("{report:?}");
        };
        assert!(error.contains(expected), "{expected:?} in {error}");
        assert_eq!(contents(&osv_db), before);
        assert!(staging_left(&osv_db).is_empty());
    };
    fails((500, b"down".to_vec()), "answered 500");
    fails((200, b"PK not a zip".to_vec()), "does not read as a zip");
    // Cut short: the archive's directory (at its end) is missing.
    let whole = zip_of(&npm_records());
    fails(
        (200, whole[..whole.len() / 2].to_vec()),
        "does not read as a zip",
    );
    fails(
        (200, zip_of(&[("../escape.json", "{}".into())])),
        "is not an OSV record",
    );
    fails(
        (
            200,
            zip_of(&[(
                "GHSA-bad.json",
                "{\"id\": \"GHSA-bad\", \"affected\": 3}".into(),
            )]),
        ),
        "do not load",
    );
    // Not admitted by the egress allow-list: refused, nothing fetched.
    server.serve("/npm/all.zip", 200, zip_of(&npm_records()));
    let report = run(&maintain, no_network(), NOW_MS + DAY_MS);
    let UpdateOutcome::Failed { error } = only_outcome(&report) else {
        panic!("{report:?}");
    };
    assert!(error.contains("403"), "{error}");
    assert_eq!(contents(&osv_db), before);
}

#[test]
fn the_allow_list_is_the_configured_sources_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warden.toml");
    std::fs::write(
        &path,
        format!(
            "[maintain]\nadvisory_db = {:?}\nosv_db = {:?}\nosv_url = \"https://osv.example.org/exports\"\n\n[egress]\nallow_private = [\"10.0.0.5:8080\"]\n",
            dir.path().join("a").display().to_string(),
            dir.path().join("o").display().to_string()
        ),
    )
    .unwrap();
    struct Home(String);
    impl warden_config::Env for Home {
        fn var(&self, name: &str) -> Option<String> {
            (name == "WARDEN_HOME").then(|| self.0.clone())
        }
    }
    let env = Home(dir.path().display().to_string());
    let file = warden_config::ConfigFile::load(Some(&path), &env).unwrap();
    let config = crate::config::Config::resolve(&file, &env).unwrap();
    let settings = egress_settings(&config);
    assert_eq!(
        settings.describe(),
        "github.com, osv.example.org, 10.0.0.5:8080 (private)"
    );
}
