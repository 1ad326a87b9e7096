//! `warden advisories update` end to end: RustSec's database fetched from a local git remote
//! (a real published record), dated, refreshed, kept when an update fails; `warden vulns` says
//! its age and warns past `[maintain] max_advisory_age_days` without changing its exit code.

use super::maintain::fixture;
use super::support::Warden;
use std::path::Path;
use warden_test_support::git_fixture::TempRepo;

fn record(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../engine/src/maintain/fixtures/rustsec")
            .join(name),
    )
    .unwrap()
}

#[test]
fn advisories_update_fetches_the_database_vulns_dates_it_and_a_failed_update_keeps_it() {
    let remote = TempRepo::new();
    remote.write(
        "crates/smallvec/RUSTSEC-2021-0003.md",
        &record("RUSTSEC-2021-0003.md"),
    );
    let head = remote.commit("smallvec");
    let dbs = tempfile::tempdir().unwrap();
    let db = dbs.path().join("advisory-db");
    let warden = Warden::new();
    let config = warden.home.path().join("warden.toml");
    let write_config = |url: &str, max_age: u32| {
        std::fs::write(
            &config,
            format!(
                "[maintain]\nadvisory_db = {:?}\nadvisory_db_url = \"{url}\"\n\
                 max_advisory_age_days = {max_age}\n",
                db.to_str().unwrap()
            ),
        )
        .unwrap();
    };
    let url = format!("file://{}", remote.path().display());
    write_config(&url, 7);

    let run = warden.run(&["advisories", "update"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "RustSec {}: updated from {url}: 1 advisory (git:{head})\n",
            db.display()
        )
    );
    assert!(
        run.stderr
            .contains("fetching the RustSec advisory database"),
        "{}",
        run.stderr
    );

    // vulns scans the fetched copy and says how old it is.
    let project = fixture();
    let path = project.path().to_str().unwrap();
    let text = warden.run(&["vulns", "--repo", path]);
    assert_eq!(text.code, 1, "{}\n{}", text.stdout, text.stderr);
    assert!(
        text.stdout.contains("smallvec 1.6.0  RUSTSEC-2021-0003")
            && text.stdout.contains(&format!(
                "Advisory database {}: fetched 0 days ago, at ",
                db.display()
            ))
            && !text.stdout.contains("warning:"),
        "{}",
        text.stdout
    );

    // 104 days later (the record rewritten): a warning, the same exit code.
    let record_path = db.join(".warden-fetched");
    let mut fetched: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(104 * 86_400 + 60);
    let old_s = old.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    fetched["fetched_at"] =
        warden_time::rfc3339_seconds(i64::try_from(old_s).unwrap() * 1000).into();
    std::fs::write(&record_path, fetched.to_string()).unwrap();
    let text = warden.run(&["vulns", "--repo", path]);
    assert_eq!(text.code, 1, "{}\n{}", text.stdout, text.stderr);
    assert!(
        text.stdout.contains(&format!(
            "warning: the advisory database {} was fetched 104 days ago, more than [maintain] \
             max_advisory_age_days (7)",
            db.display()
        )),
        "{}",
        text.stdout
    );
    let json = warden.run(&["vulns", "--repo", path, "--json"]);
    assert_eq!(json.code, 1, "{}", json.stderr);
    assert_eq!(json.json()["database_age"]["stale"], true);
    assert_eq!(json.json()["database_age"]["age_days"], 104);
    assert!(
        json.stderr
            .contains("warden: warning: the advisory database"),
        "{}",
        json.stderr
    );
    let before = std::fs::read_to_string(&record_path).unwrap();

    // An update that fails (the remote is gone) keeps the old copy: exit 1, said.
    let gone = format!("file://{}", dbs.path().join("nowhere").display());
    write_config(&gone, 7);
    let run = warden.run(&["advisories", "update"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.starts_with(&format!(
            "RustSec {}: not updated, the old copy is kept: fetching {gone}",
            db.display()
        )),
        "{}",
        run.stdout
    );
    assert_eq!(std::fs::read_to_string(&record_path).unwrap(), before);
    assert_eq!(
        warden.run(&["vulns", "--repo", path]).code,
        1,
        "the old copy still scans"
    );

    // Refreshed from the remote that moved on: the new advisory, a new date.
    write_config(&url, 7);
    remote.write(
        "crates/ansi_term/RUSTSEC-2021-0139.md",
        &record("RUSTSEC-2021-0139.md"),
    );
    let head = remote.commit("ansi_term");
    let run = warden.run(&["advisories", "update", "--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["databases"][0]["outcome"], "updated", "{report}");
    assert_eq!(report["databases"][0]["snapshot"], format!("git:{head}"));
    assert_eq!(report["databases"][0]["advisories"], 2);
    let text = warden.run(&["vulns", "--repo", path]);
    assert!(
        text.stdout.contains("fetched 0 days ago"),
        "{}",
        text.stdout
    );

    // A project on ansi_term, which RustSec marks unmaintained (an informational advisory):
    // no finding; shown with --informational as a warning, exit 0; exit 1 only when denied.
    let unmaintained = TempRepo::new();
    unmaintained.write(
        "Cargo.toml",
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nansi_term = \"0.12.1\"\n",
    );
    unmaintained.write(
        "Cargo.lock",
        "version = 4\n\n[[package]]\nname = \"ansi_term\"\nversion = \"0.12.1\"\nsource = \
         \"registry+https://github.com/rust-lang/crates.io-index\"\n\n[[package]]\nname = \
         \"app\"\nversion = \"0.1.0\"\ndependencies = [\n \"ansi_term\",\n]\n",
    );
    unmaintained.write("src/lib.rs", "");
    unmaintained.commit("app on ansi_term");
    let app = unmaintained.path().to_str().unwrap();
    let plain = warden.run(&["vulns", "--repo", app]);
    assert_eq!(plain.code, 0, "{}\n{}", plain.stdout, plain.stderr);
    assert!(
        !plain.stdout.contains("RUSTSEC-2021-0139"),
        "{}",
        plain.stdout
    );
    let shown = warden.run(&["vulns", "--repo", app, "--informational"]);
    assert_eq!(shown.code, 0, "{}\n{}", shown.stdout, shown.stderr);
    assert!(
        shown.stdout.starts_with(
            "warning: ansi_term 0.12.1  RUSTSEC-2021-0139  unmaintained  ansi_term is \
             Unmaintained\n1 informational advisory (not vulnerabilities; they do not change \
             the exit code)\n\nNo known vulnerabilities in Cargo.lock"
        ),
        "{}",
        shown.stdout
    );
    let denied = warden.run(&["vulns", "--repo", app, "--deny-informational", "--json"]);
    assert_eq!(denied.code, 1, "{}\n{}", denied.stdout, denied.stderr);
    let report = denied.json();
    assert_eq!(
        report["informational"][0]["kind"], "unmaintained",
        "{report}"
    );
    assert_eq!(report["informational"][0]["advisory"], "RUSTSEC-2021-0139");
    assert_eq!(report["scan"]["findings"], serde_json::json!([]));

    // Nothing configured: a usage error.
    std::fs::remove_file(&config).unwrap();
    let run = warden.run(&["advisories", "update"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("no advisory database to update"),
        "{}",
        run.stderr
    );
}
