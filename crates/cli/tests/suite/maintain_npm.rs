//! `warden maintain` and `warden vulns` for npm projects, end to end: a fixture project
//! depending on `greet@^1.0.0`, a local npm registry this test serves (packuments and tarballs
//! made by the real `npm pack`) holding 1.0.0, 1.0.1 (fixes the advisory) and 1.1.0 (changes the
//! greeting the fixture's test checks), an OSV database with an npm record, and the real Node
//! and npm the `node` preset finds. The registry is the operator's own host on the egress
//! allow-list (`[egress] allow_private`): the sandbox reaches it only through Warden's egress
//! proxy, and it records what it was asked.
//!
//! The tests skip, saying so, when npm is not installed — unless `WARDEN_TEST_REQUIRE` lists
//! `npm`, where that fails them.
#![allow(clippy::disallowed_methods)] // the host's npm packs the fixture's tarballs and lockfile

use super::support::Warden;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::postgres::required;

/// The greeting each version of `greet` returns, and when it was published.
const VERSIONS: [(&str, &str, &str); 3] = [
    ("1.0.0", "hello", "2025-01-01T00:00:00.000Z"),
    ("1.0.1", "hello", "2025-02-01T00:00:00.000Z"),
    ("1.1.0", "hi", "2025-03-01T00:00:00.000Z"),
];

/// Whether npm is here; `false` (said on stderr) when it is not and it is not required.
pub(super) fn npm_installed() -> bool {
    let found = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            !required("npm"),
            "WARDEN_TEST_REQUIRE lists npm but npm is not installed"
        );
        eprintln!("skipped: no npm (WARDEN_TEST_REQUIRE=npm makes this a failure)");
    }
    found
}

/// What the registry serves: path → body.
type Files = Mutex<Vec<(String, Vec<u8>)>>;

/// A registry serving `files` (path → body) on origin-form and absolute-form requests (the
/// latter as an HTTP proxy is asked), recording each request line.
pub(super) struct Registry {
    pub(super) address: String,
    files: Arc<Files>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Registry {
    pub(super) fn start() -> Registry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let files: Arc<Files> = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let (served, seen) = (Arc::clone(&files), Arc::clone(&requests));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (served, seen) = (Arc::clone(&served), Arc::clone(&seen));
                std::thread::spawn(move || serve(client, &served, &seen));
            }
        });
        Registry {
            address,
            files,
            requests,
        }
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn put(&self, path: &str, body: Vec<u8>) {
        self.files.lock().unwrap().push((path.to_string(), body));
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(client: TcpStream, files: &Files, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut client = client;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end().to_string();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                break;
            }
        }
        seen.lock().unwrap().push(line.clone());
        let target = line.split_whitespace().nth(1).unwrap_or("/");
        // Absolute form (asked as a proxy): the path after the authority.
        let path = match target.strip_prefix("http://") {
            Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => target,
        };
        let body = files
            .lock()
            .unwrap()
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, b)| b.clone());
        let head = match &body {
            // As registry.npmjs.org answers: cacheable, with validators (npm stores only what
            // it may reuse, and its offline mode reads only what it stored).
            Some(body) => format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/json\r\n\
                 Cache-Control: public, max-age=300\r\nETag: \"{:x}\"\r\n\
                 Last-Modified: Wed, 01 Jan 2025 00:00:00 GMT\r\n\r\n",
                body.len(),
                body.len()
            ),
            None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string(),
        };
        if client.write_all(head.as_bytes()).is_err() {
            return;
        }
        if let Some(body) = body {
            if client.write_all(&body).is_err() {
                return;
            }
        }
    }
}

/// Packs each version of `greet` with the real `npm pack` and serves its packument and
/// tarballs.
pub(super) fn publish(registry: &Registry) {
    let versions = VERSIONS.map(|(version, greeting, published)| {
        (
            version,
            format!("module.exports = (name) => '{greeting} ' + name;\n"),
            published,
        )
    });
    publish_package(registry, "greet", &versions, &serde_json::json!({}));
}

/// Packs each version of package `name` (its `index.js`, its publication time) depending on
/// `dependencies` with the real `npm pack`, and serves its packument and tarballs.
fn publish_package(
    registry: &Registry,
    name: &str,
    published_versions: &[(&str, String, &str)],
    dependencies: &serde_json::Value,
) {
    let work = tempfile::tempdir().unwrap();
    let mut versions = serde_json::Map::new();
    let mut time = serde_json::Map::new();
    let mut latest = "";
    for (version, index, published) in published_versions {
        let (version, published) = (*version, *published);
        latest = version;
        let dir = work.path().join(version);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("package.json"),
            serde_json::json!({"name": name, "version": version, "main": "index.js",
                               "dependencies": dependencies})
            .to_string(),
        )
        .unwrap();
        std::fs::write(dir.join("index.js"), index).unwrap();
        let packed = Command::new("npm")
            .args(["pack", "--json", "--pack-destination"])
            .arg(work.path())
            .current_dir(&dir)
            .env("npm_config_cache", work.path().join("cache"))
            .output()
            .unwrap();
        assert!(
            packed.status.success(),
            "npm pack: {}",
            String::from_utf8_lossy(&packed.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&packed.stdout).unwrap();
        let file = format!("{name}-{version}.tgz");
        let tarball = std::fs::read(work.path().join(&file)).unwrap();
        let path = format!("/{name}/-/{file}");
        registry.put(&path, tarball);
        versions.insert(
            version.into(),
            serde_json::json!({
                "name": name, "version": version, "main": "index.js",
                "dependencies": dependencies,
                "dist": {"tarball": format!("{}{path}", registry.url()),
                         "integrity": report[0]["integrity"], "shasum": report[0]["shasum"]}
            }),
        );
        time.insert(version.into(), published.into());
    }
    let packument = serde_json::json!({
        "name": name, "dist-tags": {"latest": latest}, "versions": versions, "time": time
    });
    registry.put(&format!("/{name}"), packument.to_string().into_bytes());
}

/// An OSV database with GHSA-test-0001 against npm's `greet` before 1.0.1, and a Go record
/// (another ecosystem's: not read for an npm project).
fn osv_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let record = |id: &str, ecosystem: &str, name: &str| {
        serde_json::json!({
            "schema_version": "1.6.0", "id": id, "modified": "2026-01-01T00:00:00Z",
            "summary": format!("Greeting injection in {name}"),
            "affected": [{"package": {"ecosystem": ecosystem, "name": name},
                          "ranges": [{"type": "SEMVER",
                                      "events": [{"introduced": "0"}, {"fixed": "1.0.1"}]}]}]
        })
        .to_string()
    };
    std::fs::write(
        dir.path().join("GHSA-test-0001.json"),
        record("GHSA-test-0001", "npm", "greet"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("GO-2026-0001.json"),
        record("GO-2026-0001", "Go", "greet"),
    )
    .unwrap();
    dir
}

/// The fixture project on `greet@^1.0.0`, its lockfile made by the host's npm from `registry`.
pub(super) fn fixture(registry: &Registry) -> TempRepo {
    fixture_of(
        registry,
        &serde_json::json!({"greet": "^1.0.0"}),
        &["greet@1.0.0"],
    )
}

/// A fixture project on `dependencies`, locked by the host's npm installing `install` from
/// `registry`; its test checks `greet`'s greeting.
fn fixture_of(registry: &Registry, dependencies: &serde_json::Value, install: &[&str]) -> TempRepo {
    let repo = TempRepo::new();
    repo.write(
        "package.json",
        &serde_json::json!({
            "name": "app", "version": "1.0.0", "private": true,
            "dependencies": dependencies,
            "scripts": {"test": "node test.js"}
        })
        .to_string(),
    );
    repo.write(
        "test.js",
        "const greet = require('greet');\nconst got = greet('x');\nif (got !== 'hello x') {\n  \
         console.error(`got ${JSON.stringify(got)}`);\n  process.exit(1);\n}\n",
    );
    repo.write(".gitignore", "node_modules/\n");
    let cache = tempfile::tempdir().unwrap();
    let locked = Command::new("npm")
        .args([
            "install",
            "--package-lock-only",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--save-prefix=^",
        ])
        .args(install)
        .current_dir(repo.path())
        .env("npm_config_registry", registry.url())
        .env("npm_config_cache", cache.path())
        .output()
        .unwrap();
    assert!(
        locked.status.success(),
        "npm install: {}",
        String::from_utf8_lossy(&locked.stderr)
    );
    repo.commit("fixture on greet 1.0.0");
    repo
}

/// A warden with the node preset, the registry as npm's registry and the operator's own host
/// on the egress allow-list (Warden's proxy connects to it directly), and the OSV database.
fn npm_warden(registry: &Registry, db: &Path) -> Warden {
    let warden = Warden::new();
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!(
            "[sandbox]\ntoolchains = [\"node\"]\n\n[egress]\nallow_private = [{:?}]\n\n\
             [maintain]\nosv_db = {:?}\nnpm_registry = {:?}\n",
            registry.address,
            db.to_str().unwrap(),
            registry.url()
        ),
    )
    .unwrap();
    warden
}

#[test]
fn a_vulnerable_package_is_upgraded_to_the_lowest_version_that_clears_it() {
    if !npm_installed() {
        return;
    }
    let registry = Registry::start();
    publish(&registry);
    let db = osv_db();
    let warden = npm_warden(&registry, db.path());
    let repo = fixture(&registry);
    let before = registry.requests().len();
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--select",
        "vulnerable",
        "--json",
    ]);
    assert_eq!(
        run.code,
        0,
        "{}\n{}\nregistry: {:?}",
        run.stdout,
        run.stderr,
        registry.requests()
    );
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let maintenance = &result["maintenance"];
    assert_eq!(maintenance["ecosystem"], "npm", "{result}");
    assert_eq!(
        maintenance["upgrades"],
        serde_json::json!([{"package": "greet", "from": "1.0.0", "to": "1.0.1",
                            "advisories": ["GHSA-test-0001"]}]),
        "{result}"
    );
    let proposal = &result["proposal"];
    let tree = proposal["tree"].as_str().unwrap();
    let scans = maintenance["scans"].as_array().unwrap();
    assert_eq!(scans[0]["findings"][0]["advisory"], "GHSA-test-0001");
    assert_eq!(
        scans[0]["findings"][0]["patched"],
        serde_json::json!([">= 1.0.1"])
    );
    assert_eq!(scans[1]["tree"], tree);
    assert_eq!(scans[1]["findings"], serde_json::json!([]));
    // The checks installed from the cache, offline, and ran the project's test on the tree.
    let validation = &proposal["validations"][0];
    assert_eq!(
        validation["command"],
        warden_engine::maintain::DEFAULT_NPM_CHECKS[0]
    );
    assert_eq!(validation["exit_code"], 0, "{result}");
    assert_eq!(validation["tree"], tree);
    assert_eq!(
        super::support::proposal_paths(proposal),
        ["package-lock.json", "package.json"],
        "{result}"
    );
    // The sandbox's npm reached the registry through Warden's egress proxy, which sent the
    // requests on in origin form, and each connection is one of the task's events.
    let asked: Vec<String> = registry.requests()[before..].to_vec();
    assert!(
        !asked.is_empty() && asked.iter().all(|r| r.starts_with("GET /")),
        "the sandbox went through Warden's proxy: {asked:?}"
    );
    assert!(
        run.stderr
            .contains(&format!("⇄ egress GET {}", registry.address)),
        "{}",
        run.stderr
    );
    let task = result["task_id"].as_str().unwrap();
    let diff = warden.run(&["diff", task]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert!(diff.stdout.contains("greet-1.0.1.tgz"), "{}", diff.stdout);
}

#[test]
fn an_upgrade_that_breaks_the_test_stops_with_no_proposal_and_vulns_reads_the_lockfile() {
    if !npm_installed() {
        return;
    }
    let registry = Registry::start();
    publish(&registry);
    let db = osv_db();
    let warden = npm_warden(&registry, db.path());
    let repo = fixture(&registry);
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["maintain", "--repo", path, "--json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "checks_failed", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(
        message.contains("upgrading greet 1.0.0 → 1.1.0 breaks check"),
        "{message}"
    );
    assert!(message.contains("got \"hi x\""), "{message}");

    let run = warden.run(&["vulns", "--repo", path, "--json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["ecosystem"], "npm");
    assert_eq!(report["lockfile"], "package-lock.json");
    assert_eq!(
        report["scan"]["findings"],
        serde_json::json!([{"advisory": "GHSA-test-0001", "package": "greet", "version": "1.0.0",
                            "title": "Greeting injection in greet", "patched": [">= 1.0.1"],
                            "path": "node_modules/greet"}]),
        "{report}"
    );
    assert!(report.get("stdlib").is_none(), "{report}");

    // The standard library is Go's: an npm project is not scanned for it even where the
    // sandbox has a Go toolchain.
    let goroot = Command::new("go")
        .args(["env", "GOROOT"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(goroot) = goroot {
        let config = warden.home.path().join("warden.toml");
        let text = std::fs::read_to_string(&config)
            .unwrap()
            .replace("toolchains = [\"node\"]", "toolchains = [\"node\", \"go\"]");
        std::fs::write(&config, text).unwrap();
        let run = warden
            .with("GOROOT", &goroot)
            .run(&["vulns", "--repo", path, "--json"]);
        assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
        assert!(run.json().get("stdlib").is_none(), "{}", run.stdout);
    }
}

/// The real GitHub advisory records the engine's tests read (lodash's and minimist's, with
/// `ECOSYSTEM` ranges; two Go records another ecosystem's).
fn github_records() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src/maintain/fixtures/osv");
    for entry in std::fs::read_dir(fixtures).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

/// An npm project with lodash 4.17.20 and minimist 1.2.5 direct, and minimist 0.0.10 nested
/// under optimist (as npm locks them), written by hand: `warden vulns` reads, never installs.
fn lodash_minimist_project() -> TempRepo {
    let repo = TempRepo::new();
    repo.write(
        "package.json",
        &serde_json::json!({
            "name": "app", "version": "1.0.0", "private": true,
            "dependencies": {"lodash": "^4.17.20", "minimist": "^1.2.5", "optimist": "^0.6.1"}
        })
        .to_string(),
    );
    let resolved = |name: &str, version: &str| {
        format!("https://registry.npmjs.org/{name}/-/{name}-{version}.tgz")
    };
    repo.write(
        "package-lock.json",
        &serde_json::json!({
            "name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
            "packages": {
                "": {"name": "app", "version": "1.0.0",
                     "dependencies": {"lodash": "^4.17.20", "minimist": "^1.2.5", "optimist": "^0.6.1"}},
                "node_modules/lodash": {"version": "4.17.20", "resolved": resolved("lodash", "4.17.20")},
                "node_modules/minimist": {"version": "1.2.5", "resolved": resolved("minimist", "1.2.5")},
                "node_modules/optimist": {"version": "0.6.1", "resolved": resolved("optimist", "0.6.1"),
                                          "dependencies": {"minimist": "~0.0.1", "wordwrap": "~0.0.2"}},
                "node_modules/optimist/node_modules/minimist": {"version": "0.0.10", "resolved": resolved("minimist", "0.0.10")},
                "node_modules/wordwrap": {"version": "0.0.3", "resolved": resolved("wordwrap", "0.0.3")}
            }
        })
        .to_string(),
    );
    repo.commit("lodash and minimist, direct and nested");
    repo
}

/// A warden whose only configuration is the OSV database: `vulns` needs no sandbox, toolchain
/// or registry.
fn vulns_warden(db: &Path) -> Warden {
    let warden = Warden::new();
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("[maintain]\nosv_db = {:?}\n", db.to_str().unwrap()),
    )
    .unwrap();
    warden
}

#[test]
fn vulns_reads_github_advisory_records_with_ecosystem_ranges_every_copy_of_a_package() {
    let db = github_records();
    let warden = vulns_warden(db.path());
    let repo = lodash_minimist_project();
    let run = warden.run(&["vulns", "--repo", repo.path().to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    let found: Vec<(String, String, String)> = report["scan"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["package"].as_str().unwrap().to_string(),
                f["version"].as_str().unwrap().to_string(),
                f["advisory"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = [
        ("lodash", "4.17.20", "GHSA-35jh-r3h4-6jhm"),
        ("minimist", "0.0.10", "GHSA-xvch-5gv4-984h"),
        ("minimist", "1.2.5", "GHSA-xvch-5gv4-984h"),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(found, expected, "{report}");
    assert!(report["scan"].get("unevaluated").is_none(), "{report}");
    // Read on a terminal, the alternatives cannot be taken for one range: 1.0.0 to 1.2.5 is
    // affected again after 0.2.4's fix.
    let run = warden.run(&["vulns", "--repo", repo.path().to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(
            "minimist 0.0.10  GHSA-xvch-5gv4-984h  Prototype Pollution in minimist\n  \
             patched: >= 0.2.4, < 1.0.0 or >= 1.2.6\n"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn vulns_says_what_it_cannot_evaluate_and_does_not_exit_clean() {
    let db = tempfile::tempdir().unwrap();
    // Only commits: nothing says which of optimist's versions are affected.
    std::fs::write(
        db.path().join("OSV-TEST-0001.json"),
        serde_json::json!({
            "schema_version": "1.6.0", "id": "OSV-TEST-0001", "modified": "2026-01-01T00:00:00Z",
            "summary": "Something in optimist",
            "affected": [{"package": {"ecosystem": "npm", "name": "optimist"},
                          "ranges": [{"type": "GIT", "repo": "https://github.com/substack/node-optimist",
                                      "events": [{"introduced": "0"}, {"fixed": "0123456789abcdef0123456789abcdef01234567"}]}]}]
        })
        .to_string(),
    )
    .unwrap();
    let warden = vulns_warden(db.path());
    let repo = lodash_minimist_project();
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["vulns", "--repo", path, "--json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(
        report["scan"]["findings"],
        serde_json::json!([]),
        "{report}"
    );
    assert_eq!(
        report["scan"]["unevaluated"],
        serde_json::json!([
            "optimist 0.6.1: advisory OSV-TEST-0001 cannot be evaluated (only GIT ranges \
             (commits), no versions); the package may be affected"
        ]),
        "{report}"
    );
    let run = warden.run(&["vulns", "--repo", path]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.starts_with(
            "cannot be evaluated: optimist 0.6.1: advisory OSV-TEST-0001 cannot be evaluated"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "0 vulnerabilities, and 1 advisory that could not be evaluated, in package-lock.json"
        ),
        "{}",
        run.stdout
    );
}

/// A package both direct and nested: `wrap` pins `greet` at 1.0.0, so upgrading the direct
/// `greet` to 1.0.1 leaves wrap's copy at 1.0.0 under `node_modules/wrap/node_modules/greet`.
/// The post-scan matches by the lockfile's copy: the upgraded one is clean, the nested one
/// that stays vulnerable is a notice and a line of the proposal, and the proposal stands.
#[test]
fn a_nested_copy_that_stays_vulnerable_is_a_notice_not_the_loss_of_the_upgrade() {
    if !npm_installed() {
        return;
    }
    let registry = Registry::start();
    publish(&registry);
    publish_package(
        &registry,
        "wrap",
        &[(
            "1.0.0",
            "const greet = require('greet');\nmodule.exports = (name) => `[${greet(name)}]`;\n"
                .to_string(),
            "2025-01-01T00:00:00.000Z",
        )],
        &serde_json::json!({"greet": "1.0.0"}),
    );
    let db = osv_db();
    let warden = npm_warden(&registry, db.path());
    let repo = fixture_of(
        &registry,
        &serde_json::json!({"greet": "^1.0.0", "wrap": "^1.0.0"}),
        &["greet@1.0.0", "wrap@1.0.0"],
    );
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--select",
        "vulnerable",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let maintenance = &result["maintenance"];
    assert_eq!(
        maintenance["upgrades"],
        serde_json::json!([{"package": "greet", "from": "1.0.0", "to": "1.0.1",
                            "advisories": ["GHSA-test-0001"]}]),
        "{result}"
    );
    let candidate = &maintenance["scans"][1];
    assert_eq!(
        candidate["findings"],
        serde_json::json!([{"advisory": "GHSA-test-0001", "package": "greet", "version": "1.0.0",
                            "title": "Greeting injection in greet", "patched": [">= 1.0.1"],
                            "path": "node_modules/wrap/node_modules/greet"}]),
        "{result}"
    );
    let notices: Vec<&str> = result["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notices.contains(
            &"GHSA-test-0001 remains in the candidate: greet 1.0.0 at \
              node_modules/wrap/node_modules/greet (this proposal does not clear it)"
        ),
        "{notices:?}"
    );
    let task = result["task_id"].as_str().unwrap();
    let show = warden.run(&["diff", task]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains("node_modules/wrap/node_modules/greet"),
        "{}",
        show.stdout
    );
}

/// When no version clears every advisory of a package, the lowest that clears the most is
/// proposed and what remains is said: greet 1.0.1 fixes GHSA-test-0001, nothing fixes
/// GHSA-test-0002 (before, nothing was upgraded at all).
#[test]
fn a_partial_fix_is_proposed_and_what_remains_is_said() {
    if !npm_installed() {
        return;
    }
    let registry = Registry::start();
    publish(&registry);
    let db = osv_db();
    std::fs::write(
        db.path().join("GHSA-test-0002.json"),
        serde_json::json!({
            "schema_version": "1.6.0", "id": "GHSA-test-0002", "modified": "2026-01-01T00:00:00Z",
            "summary": "Unfixed thing in greet",
            "affected": [{"package": {"ecosystem": "npm", "name": "greet"},
                          "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}]}]}]
        })
        .to_string(),
    )
    .unwrap();
    let warden = npm_warden(&registry, db.path());
    let repo = fixture(&registry);
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--select",
        "vulnerable",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let maintenance = &result["maintenance"];
    assert_eq!(
        maintenance["upgrades"],
        serde_json::json!([{"package": "greet", "from": "1.0.0", "to": "1.0.1",
                            "advisories": ["GHSA-test-0001"]}]),
        "{result}"
    );
    assert_eq!(
        maintenance["advisories_cleared"],
        serde_json::json!(["GHSA-test-0001"]),
        "{result}"
    );
    let notices: Vec<&str> = result["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notices.contains(
            &"greet 1.0.0: no eligible version clears every advisory; 1.0.1 is the lowest that \
              clears the most (GHSA-test-0001); still affected: GHSA-test-0002"
        ),
        "{notices:?}"
    );
    assert!(
        notices.contains(
            &"GHSA-test-0002 remains in the candidate: greet 1.0.1 at node_modules/greet (this \
              proposal does not clear it)"
        ),
        "{notices:?}"
    );
}

/// An upgrade that breaks a check drops only itself in baseline mode: greet 1.1.0 changes the
/// greeting the test checks, pad 1.0.1 changes nothing it checks; the view goes back to the
/// tree before greet's upgrade, pad's applies on it, and the proposal holds pad's alone.
#[test]
fn an_upgrade_that_breaks_a_check_drops_only_itself() {
    if !npm_installed() {
        return;
    }
    let registry = Registry::start();
    publish(&registry);
    let pad = "module.exports = (text) => ' ' + text;\n".to_string();
    publish_package(
        &registry,
        "pad",
        &[
            ("1.0.0", pad.clone(), "2025-01-01T00:00:00.000Z"),
            ("1.0.1", pad, "2025-02-01T00:00:00.000Z"),
        ],
        &serde_json::json!({}),
    );
    let db = osv_db();
    let warden = npm_warden(&registry, db.path());
    let repo = fixture_of(
        &registry,
        &serde_json::json!({"greet": "^1.0.0", "pad": "^1.0.0"}),
        &["greet@1.0.0", "pad@1.0.0"],
    );
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(
        result["maintenance"]["upgrades"],
        serde_json::json!([{"package": "pad", "from": "1.0.0", "to": "1.0.1"}]),
        "{result}"
    );
    let notices: Vec<&str> = result["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notices.iter().any(|n| n
            .starts_with("upgrading greet 1.0.0 → 1.1.0 breaks check `rm -rf /tmp/npm-cache")
            && n.ends_with("; dropped, the other upgrades go on")),
        "{notices:?}"
    );
    // The proposal's lockfile holds greet where it was and pad upgraded.
    let task = result["task_id"].as_str().unwrap();
    let diff = warden.run(&["diff", task]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert!(diff.stdout.contains("pad-1.0.1.tgz"), "{}", diff.stdout);
    assert!(!diff.stdout.contains("greet-1.1.0.tgz"), "{}", diff.stdout);
}

/// An upgrade whose packages cannot be fetched drops only itself: pad 1.0.1's tarball is
/// gone from the registry, so fetching greet's and pad's upgrades together fails; each is
/// fetched alone, pad's is dropped with a notice, and greet's is proposed.
#[test]
fn an_upgrade_that_cannot_be_fetched_drops_only_itself() {
    if !npm_installed() {
        return;
    }
    let registry = Registry::start();
    publish(&registry);
    let pad = "module.exports = (text) => ' ' + text;\n".to_string();
    publish_package(
        &registry,
        "pad",
        &[
            ("1.0.0", pad.clone(), "2025-01-01T00:00:00.000Z"),
            ("1.0.1", pad, "2025-02-01T00:00:00.000Z"),
        ],
        &serde_json::json!({}),
    );
    let db = osv_db();
    std::fs::write(
        db.path().join("GHSA-test-0003.json"),
        serde_json::json!({
            "schema_version": "1.6.0", "id": "GHSA-test-0003", "modified": "2026-01-01T00:00:00Z",
            "summary": "Padding injection in pad",
            "affected": [{"package": {"ecosystem": "npm", "name": "pad"},
                          "ranges": [{"type": "ECOSYSTEM",
                                      "events": [{"introduced": "0"}, {"fixed": "1.0.1"}]}]}]
        })
        .to_string(),
    )
    .unwrap();
    let warden = npm_warden(&registry, db.path());
    let repo = fixture_of(
        &registry,
        &serde_json::json!({"greet": "^1.0.0", "pad": "^1.0.0"}),
        &["greet@1.0.0", "pad@1.0.0"],
    );
    registry
        .files
        .lock()
        .unwrap()
        .retain(|(path, _)| path != "/pad/-/pad-1.0.1.tgz");
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--select",
        "vulnerable",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(
        result["maintenance"]["upgrades"],
        serde_json::json!([{"package": "greet", "from": "1.0.0", "to": "1.0.1",
                            "advisories": ["GHSA-test-0001"]}]),
        "{result}"
    );
    let notices: Vec<&str> = result["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n.starts_with("fetching pad 1.0.0 → 1.0.1 failed (")
                && n.ends_with("; dropped, the other upgrades go on")),
        "{notices:?}"
    );
    assert!(
        notices.contains(
            &"GHSA-test-0003 remains in the candidate: pad 1.0.0 at node_modules/pad (this \
              proposal does not clear it)"
        ),
        "{notices:?}"
    );
}

/// An advisory of one of the lockfile's packages that cannot be evaluated stops maintenance at
/// the base scan, said in a notice: a scan that passed over it could read as clean.
#[test]
fn maintain_stops_at_an_advisory_it_cannot_evaluate() {
    if !npm_installed() {
        return;
    }
    let registry = Registry::start();
    publish(&registry);
    let db = osv_db();
    std::fs::write(
        db.path().join("OSV-TEST-0004.json"),
        serde_json::json!({
            "schema_version": "1.6.0", "id": "OSV-TEST-0004", "modified": "2026-01-01T00:00:00Z",
            "affected": [{"package": {"ecosystem": "npm", "name": "greet"},
                          "ranges": [{"type": "GIT", "repo": "https://example.com/greet",
                                      "events": [{"introduced": "0"}, {"fixed": "0123456789abcdef0123456789abcdef01234567"}]}]}]
        })
        .to_string(),
    )
    .unwrap();
    let warden = npm_warden(&registry, db.path());
    let repo = fixture(&registry);
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--select",
        "vulnerable",
        "--json",
    ]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "infrastructure", "{result}");
    assert!(
        result["failure"]["message"]
            .as_str()
            .unwrap()
            .contains("1 advisory of package-lock.json's packages that cannot be evaluated"),
        "{result}"
    );
    assert!(
        result["notices"].as_array().unwrap().iter().any(|n| n
            == "greet 1.0.0: advisory OSV-TEST-0004 cannot be evaluated (only GIT ranges \
                (commits), no versions); the package may be affected"),
        "{result}"
    );
    assert_eq!(
        result["maintenance"]["scans"][0]["unevaluated"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{result}"
    );
}
