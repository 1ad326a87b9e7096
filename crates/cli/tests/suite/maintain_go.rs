//! `warden maintain` and `warden vulns` for Go modules, end to end: a fixture module requiring
//! `example.com/greet v1.0.0`, a local file-based `GOPROXY` (the module proxy protocol's
//! files: `list`, `.info`, `.mod`, `.zip`) holding v1.0.0, v1.0.1 (fixes the advisory) and
//! v1.1.0 (changes the greeting the fixture's test checks), an OSV advisory database in Go's
//! vulnerability database layout, and the real Go toolchain (Debian's `golang-go`) mounted by
//! the `go` preset. `go.sum` is made by the real `go` on the host from the same proxy.
//!
//! The tests skip, saying so, when no Go toolchain is installed — unless `WARDEN_TEST_REQUIRE`
//! lists `go`, where that fails them.
#![allow(clippy::disallowed_methods)] // the host's go finds GOROOT and makes the fixture's go.sum

use super::support::Warden;
use std::path::{Path, PathBuf};
use std::process::Command;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::postgres::required;

const MODULE: &str = "example.com/greet";

/// The Go toolchain's root (`GOROOT`), or `None` (said on stderr) when there is none and `go`
/// is not required.
fn goroot() -> Option<PathBuf> {
    let found = Command::new("go")
        .args(["env", "GOROOT"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|root| root.join("bin/go").is_file());
    if found.is_none() {
        assert!(
            !required("go"),
            "WARDEN_TEST_REQUIRE lists go but no Go toolchain is installed (apt-get install \
             golang-go)"
        );
        eprintln!("skipped: no Go toolchain (WARDEN_TEST_REQUIRE=go makes this a failure)");
    }
    found
}

/// CRC-32 (IEEE), as the zip format wants it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A zip archive of `files`, stored (not compressed): what a module proxy serves.
fn zip(files: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, text) in files {
        let offset = out.len() as u32;
        let (crc, size, name_len) = (crc32(text.as_bytes()), text.len() as u32, name.len() as u16);
        // Version needed 2.0, no flags, stored, 1980-01-01 00:00.
        let fields = |out: &mut Vec<u8>| {
            out.extend(20u16.to_le_bytes());
            out.extend(0u16.to_le_bytes());
            out.extend(0u16.to_le_bytes());
            out.extend(0u16.to_le_bytes());
            out.extend(0x21u16.to_le_bytes());
            out.extend(crc.to_le_bytes());
            out.extend(size.to_le_bytes());
            out.extend(size.to_le_bytes());
            out.extend(name_len.to_le_bytes());
            out.extend(0u16.to_le_bytes());
        };
        out.extend(0x0403_4b50u32.to_le_bytes());
        fields(&mut out);
        out.extend(name.as_bytes());
        out.extend(text.as_bytes());
        central.extend(0x0201_4b50u32.to_le_bytes());
        central.extend(20u16.to_le_bytes());
        fields(&mut central);
        central.extend(0u16.to_le_bytes()); // comment
        central.extend(0u16.to_le_bytes()); // disk
        central.extend(0u16.to_le_bytes()); // internal attributes
        central.extend(0u32.to_le_bytes()); // external attributes
        central.extend(offset.to_le_bytes());
        central.extend(name.as_bytes());
    }
    let (central_offset, central_size) = (out.len() as u32, central.len() as u32);
    out.extend(central);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out.extend((files.len() as u16).to_le_bytes());
    out.extend((files.len() as u16).to_le_bytes());
    out.extend(central_size.to_le_bytes());
    out.extend(central_offset.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

/// The greeting each version of the fixture module returns.
const VERSIONS: [(&str, &str, &str); 3] = [
    ("v1.0.0", "hello", "2025-01-01T00:00:00Z"),
    ("v1.0.1", "hello", "2025-02-01T00:00:00Z"),
    ("v1.1.0", "hi", "2025-03-01T00:00:00Z"),
];

/// A file-based module proxy with [`VERSIONS`] of [`MODULE`].
fn proxy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().join(MODULE).join("@v");
    std::fs::create_dir_all(&at).unwrap();
    let go_mod = format!("module {MODULE}\n\ngo 1.19\n");
    let mut list = String::new();
    for (version, greeting, time) in VERSIONS {
        list.push_str(&format!("{version}\n"));
        std::fs::write(at.join(format!("{version}.mod")), &go_mod).unwrap();
        std::fs::write(
            at.join(format!("{version}.info")),
            format!(r#"{{"Version":"{version}","Time":"{time}"}}"#),
        )
        .unwrap();
        let source = format!(
            "package greet\n\n// Hello greets name.\nfunc Hello(name string) string {{ return \
             \"{greeting} \" + name }}\n"
        );
        let prefix = format!("{MODULE}@{version}");
        std::fs::write(
            at.join(format!("{version}.zip")),
            zip(&[
                (format!("{prefix}/go.mod"), go_mod.clone()),
                (format!("{prefix}/greet.go"), source),
            ]),
        )
        .unwrap();
    }
    std::fs::write(at.join("list"), list).unwrap();
    dir
}

/// An OSV database in vuln.go.dev's layout: GO-2026-0001 against [`MODULE`] before v1.0.1,
/// GO-2026-0002 against the standard library before go1.99 (every installed toolchain), and
/// Go's index files (not records).
fn osv_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("ID")).unwrap();
    std::fs::create_dir_all(dir.path().join("index")).unwrap();
    let record = |id: &str, package: &str, fixed: &str, summary: &str| {
        serde_json::json!({
            "schema_version": "1.3.1",
            "id": id,
            "modified": "2026-01-01T00:00:00Z",
            "published": "2026-01-01T00:00:00Z",
            "aliases": ["CVE-2026-0001"],
            "summary": summary,
            "details": "A fixture advisory.",
            "affected": [{
                "package": {"name": package, "ecosystem": "Go"},
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
                "ecosystem_specific": {"imports": [{"path": package, "symbols": ["Hello"]}]}
            }]
        })
        .to_string()
    };
    std::fs::write(
        dir.path().join("ID/GO-2026-0001.json"),
        record(
            "GO-2026-0001",
            MODULE,
            "1.0.1",
            "Greeting injection in greet",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ID/GO-2026-0002.json"),
        record("GO-2026-0002", "stdlib", "1.99.0", "Everything in net/http"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("index/db.json"),
        r#"{"modified":"2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("index/modules.json"), "[]").unwrap();
    dir
}

/// The fixture module at [`MODULE`] v1.0.0, its `go.sum` made by the host's `go` from `proxy`.
fn fixture(proxy: &Path) -> TempRepo {
    let repo = TempRepo::new();
    repo.write(
        "go.mod",
        &format!("module example.com/app\n\ngo 1.19\n\nrequire {MODULE} v1.0.0\n"),
    );
    repo.write(
        "main.go",
        &format!(
            "package main\n\nimport (\n\t\"fmt\"\n\n\t\"{MODULE}\"\n)\n\nfunc main() {{ \
             fmt.Println(greet.Hello(\"world\")) }}\n"
        ),
    );
    repo.write(
        "main_test.go",
        &format!(
            "package main\n\nimport (\n\t\"testing\"\n\n\t\"{MODULE}\"\n)\n\nfunc TestHello(t \
             *testing.T) {{\n\tif got := greet.Hello(\"x\"); got != \"hello x\" {{\n\t\t\
             t.Fatalf(\"got %q\", got)\n\t}}\n}}\n"
        ),
    );
    let scratch = tempfile::tempdir().unwrap();
    let tidy = Command::new("go")
        .args(["mod", "tidy"])
        .current_dir(repo.path())
        .env("GOPROXY", format!("file://{}", proxy.display()))
        .env("GOSUMDB", "off")
        .env("GOFLAGS", "-mod=mod")
        .env("GOMODCACHE", scratch.path().join("mod"))
        .env("GOCACHE", scratch.path().join("build"))
        .env("HOME", scratch.path())
        .output()
        .unwrap();
    assert!(
        tidy.status.success(),
        "go mod tidy: {}",
        String::from_utf8_lossy(&tidy.stderr)
    );
    // The module cache's files are read-only, as go makes them: writable again to be removed.
    writable(scratch.path());
    repo.commit("fixture requiring greet v1.0.0");
    repo
}

/// Makes everything under `dir` writable by its owner.
fn writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() | 0o200;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
        if meta.is_dir() {
            writable(&path);
        }
    }
}

/// A warden with the go preset, the proxy and the OSV database.
fn go_warden(goroot: &Path, proxy: &Path, db: &Path) -> Warden {
    let warden = Warden::new().with("GOROOT", goroot.to_str().unwrap());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!(
            "[sandbox]\ntoolchains = [\"go\"]\n\n[maintain]\nosv_db = {:?}\ngoproxy = \
             \"file://{}\"\ngosumdb = \"off\"\n",
            db.to_str().unwrap(),
            proxy.display()
        ),
    )
    .unwrap();
    warden
}

#[test]
fn a_vulnerable_module_is_upgraded_to_the_lowest_version_that_clears_it() {
    let Some(goroot) = goroot() else {
        return;
    };
    let (proxy, db) = (proxy(), osv_db());
    let warden = go_warden(&goroot, proxy.path(), db.path());
    let repo = fixture(proxy.path());
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
    assert_eq!(maintenance["ecosystem"], "go", "{result}");
    // v1.0.1 clears it; v1.1.0 is newer but not the lowest that does.
    assert_eq!(
        maintenance["upgrades"],
        serde_json::json!([{"package": MODULE, "from": "v1.0.0", "to": "v1.0.1",
                            "advisories": ["GO-2026-0001"]}]),
        "{result}"
    );
    assert_eq!(
        maintenance["advisories_cleared"],
        serde_json::json!(["GO-2026-0001"])
    );
    let proposal = &result["proposal"];
    let tree = proposal["tree"].as_str().unwrap();
    let scans = maintenance["scans"].as_array().unwrap();
    assert_eq!(scans.len(), 2, "{result}");
    assert_eq!(scans[0]["findings"][0]["advisory"], "GO-2026-0001");
    assert_eq!(scans[0]["findings"][0]["version"], "v1.0.0");
    assert_eq!(scans[1]["stage"], "candidate");
    assert_eq!(scans[1]["tree"], tree);
    assert_eq!(scans[1]["findings"], serde_json::json!([]));
    assert!(scans[1]["scanner"]
        .as_str()
        .unwrap()
        .starts_with("warden-osv/"));
    // `go test ./...` passed offline in the sandbox on the base and on exactly the proposal.
    assert_eq!(result["baseline"][0]["exit_code"], 0, "{result}");
    let validation = &proposal["validations"][0];
    assert_eq!(validation["command"], "go test ./...");
    assert_eq!(validation["exit_code"], 0, "{result}");
    assert_eq!(validation["tree"], tree);
    assert_eq!(validation["sandbox"], "linux");
    // go.mod and go.sum changed, nothing else.
    assert_eq!(
        super::support::proposal_paths(proposal),
        ["go.mod", "go.sum"],
        "{result}"
    );
    let summary = proposal["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Upgrade example.com/greet v1.0.0 → v1.0.1 (GO-2026-0001)"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "- example.com/greet v1.0.0 → v1.0.1: GO-2026-0001 (Greeting injection in greet)"
        ),
        "{summary}"
    );
    // A private (here: file) proxy's pages are not guessed.
    assert!(!summary.contains("Release pages"), "{summary}");
    // The standard library's advisory is said, not acted on.
    assert!(
        result["notices"]
            .to_string()
            .contains("the Go standard library at go"),
        "{result}"
    );
    for stage in [
        "→ profile: go.mod, go.sum",
        "→ acquire: go mod download",
        "→ apply: example.com/greet v1.0.0 → v1.0.1",
        "→ readiness: ",
    ] {
        assert!(run.stderr.contains(stage), "{stage}: {}", run.stderr);
    }
    let task = result["task_id"].as_str().unwrap();
    let diff = warden.run(&["diff", task]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert!(
        diff.stdout.contains("+require example.com/greet v1.0.1"),
        "{}",
        diff.stdout
    );
}

#[test]
fn an_upgrade_that_breaks_the_tests_stops_with_no_proposal_in_baseline_mode() {
    let Some(goroot) = goroot() else {
        return;
    };
    let (proxy, db) = (proxy(), osv_db());
    let warden = go_warden(&goroot, proxy.path(), db.path());
    let repo = fixture(proxy.path());
    // `all` picks the newest compatible version, v1.1.0, whose greeting the test refuses.
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "checks_failed", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(
        message
            .contains("upgrading example.com/greet v1.0.0 → v1.1.0 breaks check `go test ./...`"),
        "{message}"
    );
    assert!(message.contains("got \"hi x\""), "{message}");
    assert!(result.get("proposal").is_none(), "{result}");
}

/// `--select` takes Go module paths: the named module is upgraded (to the newest compatible
/// version, whose greeting the test refuses), a path that is no requirement is a notice, and a
/// name no ecosystem allows is still a usage error.
#[test]
fn select_names_go_modules_by_their_path() {
    let Some(goroot) = goroot() else {
        return;
    };
    let (proxy, db) = (proxy(), osv_db());
    let warden = go_warden(&goroot, proxy.path(), db.path());
    let repo = fixture(proxy.path());
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["maintain", "--repo", path, "--select", MODULE, "--json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["maintenance"]["select"], serde_json::json!([MODULE]));
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(
        message.contains("upgrading example.com/greet v1.0.0 → v1.1.0 breaks check"),
        "{message}"
    );
    let run = warden.run(&[
        "maintain",
        "--repo",
        path,
        "--select",
        "golang.org/x/text",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "no_change", "{result}");
    assert!(
        result["notices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "--select golang.org/x/text: not a direct requirement in go.mod"),
        "{result}"
    );
    let run = warden.run(&["maintain", "--repo", path, "--select", "../greet"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("is not a package name"),
        "{}",
        run.stderr
    );
}

#[test]
fn vulns_reports_third_party_modules_and_the_standard_library_apart() {
    let Some(goroot) = goroot() else {
        return;
    };
    let (proxy, db) = (proxy(), osv_db());
    let warden = go_warden(&goroot, proxy.path(), db.path());
    let repo = fixture(proxy.path());
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["vulns", "--repo", path, "--json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["ecosystem"], "go", "{report}");
    assert_eq!(report["lockfile"], "go.mod");
    assert_eq!(
        report["scan"]["findings"],
        serde_json::json!([{"advisory": "GO-2026-0001", "package": MODULE, "version": "v1.0.0",
                            "title": "Greeting injection in greet", "patched": [">= v1.0.1"]}]),
        "{report}"
    );
    let stdlib = &report["stdlib"];
    assert_eq!(stdlib["source"], "the sandbox's go toolchain", "{report}");
    assert_eq!(
        stdlib["findings"][0]["advisory"], "GO-2026-0002",
        "{report}"
    );
    assert_eq!(stdlib["findings"][0]["package"], "stdlib");
    let version = stdlib["go_version"].as_str().unwrap();
    assert_eq!(
        stdlib["findings"][0]["version"].as_str().unwrap(),
        format!("go{version}")
    );
    let text = warden.run(&["vulns", "--repo", path]);
    assert_eq!(text.code, 1, "{}", text.stderr);
    assert!(
        text.stdout.contains("1 vulnerability in go.mod of "),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!(
            "1 vulnerability in the Go standard library at go{version} (the sandbox's go \
             toolchain)"
        )),
        "{}",
        text.stdout
    );

    // Without GOROOT the preset finds a toolchain where distributions put it (Debian's
    // golang-go is /usr/lib/go, a link to the versioned directory): the same report.
    let distributed = ["/usr/local/go", "/usr/lib/go"]
        .iter()
        .filter_map(|root| std::fs::canonicalize(root).ok())
        .find(|root| root.join("bin/go").is_file());
    if distributed.as_deref() == std::fs::canonicalize(&goroot).ok().as_deref() {
        let bare = Warden::new();
        std::fs::copy(
            warden.home.path().join("warden.toml"),
            bare.home.path().join("warden.toml"),
        )
        .unwrap();
        let run = bare.run(&["vulns", "--repo", path, "--json"]);
        assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
        assert_eq!(
            run.json()["stdlib"]["go_version"],
            version,
            "{}",
            run.stdout
        );
    }

    // A local replacement is refused as maintain refuses it: exit 2, naming it.
    repo.write(
        "go.mod",
        &format!(
            "module example.com/app\n\ngo 1.19\n\nrequire {MODULE} v1.0.0\n\nreplace {MODULE} => \
             ../greet\n"
        ),
    );
    repo.commit("replace");
    let run = warden.run(&["vulns", "--repo", path]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("replaces example.com/greet with the local directory ../greet"),
        "{}",
        run.stderr
    );
}

fn call(name: &str, arguments: serde_json::Value) -> warden_test_support::model_server::Reply {
    warden_test_support::model_server::openai::tool_call(name, &arguments.to_string())
}

/// `--mode model` on a Go module: v1.1.0 changes the greeting the test checks. A repair that
/// undoes the upgrade in go.mod is refused before any check runs; the model puts it back and
/// repairs the test, and the proposal is that tree, its checks and post-scan bound to it.
#[test]
fn in_model_mode_the_model_repairs_the_test_an_upgrade_breaks_and_may_not_undo_it() {
    let Some(goroot) = goroot() else {
        return;
    };
    let (proxy, db) = (proxy(), osv_db());
    let server = warden_test_support::model_server::ScriptedModelServer::start_blocking(vec![
        call(
            "edit_file",
            serde_json::json!({"path": "go.mod", "old": "greet v1.1.0", "new": "greet v1.0.0"}),
        ),
        call(
            "submit_repair",
            serde_json::json!({"summary": "Pin greet back"}),
        ),
        call(
            "edit_file",
            serde_json::json!({"path": "go.mod", "old": "greet v1.0.0", "new": "greet v1.1.0"}),
        ),
        call(
            "edit_file",
            serde_json::json!({"path": "main_test.go", "old": "\"hello x\"", "new": "\"hi x\""}),
        ),
        call(
            "submit_repair",
            serde_json::json!({"summary": "Expect the new greeting\n\ngreet v1.1.0 says hi."}),
        ),
    ]);
    let warden = go_warden(&goroot, proxy.path(), db.path())
        .with("WARDEN_MODEL", "openai:gpt-test")
        .with("OPENAI_BASE_URL", &format!("{}/v1", server.url()))
        .with("OPENAI_API_KEY", "sk-test-key")
        .with("WARDEN_RETRY_BASE_MS", "5");
    let repo = fixture(proxy.path());
    let run = warden.run(&[
        "maintain",
        "--repo",
        repo.path().to_str().unwrap(),
        "--mode",
        "model",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let maintenance = &result["maintenance"];
    assert_eq!(maintenance["ecosystem"], "go");
    assert_eq!(maintenance["mode"], "model");
    assert_eq!(maintenance["upgrades"][0]["to"], "v1.1.0", "{result}");
    let proposal = &result["proposal"];
    let tree = proposal["tree"].as_str().unwrap();
    assert_eq!(
        super::support::proposal_paths(proposal),
        ["go.mod", "go.sum", "main_test.go"],
        "{result}"
    );
    let validation = &proposal["validations"][0];
    assert_eq!(validation["command"], "go test ./...");
    assert_eq!(validation["exit_code"], 0, "{result}");
    assert_eq!(validation["tree"], tree);
    let scans = maintenance["scans"].as_array().unwrap();
    assert_eq!(scans[1]["tree"], tree, "{result}");
    // The first submission came back refused, naming the undone upgrade.
    let requests = server.requests();
    let refused = requests[2].body["messages"].to_string();
    assert!(
        refused.contains(
            "example.com/greet is at v1.0.0 in the repaired go.mod, not at the upgrade's v1.1.0"
        ),
        "{refused}"
    );
    let told = requests[0].body["messages"].to_string();
    for expected in [
        // The newest version clears the module's advisory, and the model is told so.
        "upgraded the dependency `example.com/greet` from v1.0.0 to v1.1.0 (it clears \
         GO-2026-0001) in go.mod",
        "the check `go test ./...` now fails",
        "Do not run `go get` or `go mod tidy`",
    ] {
        assert!(told.contains(expected), "{expected:?} in {told}");
    }
    let summary = proposal["summary"].as_str().unwrap();
    assert!(
        summary.contains("repaired: Expect the new greeting"),
        "{summary}"
    );
}
