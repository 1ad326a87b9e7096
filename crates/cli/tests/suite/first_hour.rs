//! The mistakes a new user makes in the first hour, each answered with one sentence that names
//! the fix: `warden doctor` shows every check (even with a bad `WARDEN_MODEL`), checks the model
//! endpoint with one request that costs nothing and the server `WARDEN_SERVER` names, and exits
//! 1 when anything fails; a missing API key stops a task before anything is pinned; a directory
//! that is not a git repository is a usage error without git's command line.

use super::support::Warden;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use warden_test_support::git_fixture::TempRepo;

/// A one-route HTTP server: every request gets `status` with `body`; the request lines and
/// headers it saw are kept.
struct Endpoint {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

fn endpoint(status: &'static str, body: &'static str) -> Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            log.lock().unwrap().push(head);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Endpoint { url, seen }
}

fn checks_of(run: &super::support::Run) -> serde_json::Value {
    let json = run.json();
    let mut by_name = serde_json::Map::new();
    for check in json["checks"].as_array().unwrap() {
        by_name.insert(check["check"].as_str().unwrap().to_string(), check.clone());
    }
    serde_json::Value::Object(by_name)
}

#[test]
fn doctor_shows_every_check_when_the_model_setting_is_bad_and_exits_1() {
    let run = Warden::new()
        .with("WARDEN_MODEL", "bogus")
        .run(&["doctor", "--json", "--offline"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let checks = checks_of(&run);
    assert_eq!(checks["configuration"]["ok"], false);
    assert!(checks["configuration"]["detail"]
        .as_str()
        .unwrap()
        .contains("invalid model \"bogus\""));
    for name in ["git", "state directory", "model", "sandbox"] {
        assert!(checks.get(name).is_some(), "{name} missing: {checks}");
    }
    assert_eq!(checks["git"]["ok"], true);
    assert!(!run.json()["sandbox_layers"].as_array().unwrap().is_empty());
}

/// A mistake in a section another layer resolves (the service's `[github]`, the binary's
/// `[telemetry]`) is the configuration check's failure too, and stops any other command.
#[test]
fn doctor_and_every_command_report_a_bad_setting_of_any_layer() {
    for (variable, value, expected) in [
        (
            "WARDEN_GITHUB_API_URL",
            "ftp://example.com",
            "github.api_url",
        ),
        (
            "WARDEN_OTLP_ENDPOINT",
            "ftp://collector:4318",
            "telemetry.otlp_endpoint",
        ),
    ] {
        let warden = Warden::faux().with(variable, value);
        let run = warden.run(&["doctor", "--json", "--offline"]);
        assert_eq!(run.code, 1, "{variable}: {}", run.stderr);
        let detail = checks_of(&run)["configuration"]["detail"].to_string();
        assert!(detail.contains(expected), "{variable}: {detail}");
        let tasks = warden.run(&["tasks"]);
        assert_eq!(tasks.code, 2, "{variable}: {}", tasks.stderr);
        assert!(
            tasks.stderr.contains(expected),
            "{variable}: {}",
            tasks.stderr
        );
    }
}

/// The file-tools probe runs on every backend; with gVisor chosen, an old runsc (whose
/// `ls -l` and `stat` fail) is a failing check that names the release to install.
#[test]
fn doctor_lists_the_working_root_on_every_backend_and_names_the_runsc_gvisor_needs() {
    let run =
        Warden::new()
            .with("WARDEN_SANDBOX", "gvisor")
            .run(&["doctor", "--json", "--offline"]);
    let json = run.json();
    let tools = json["sandbox_tools"].as_array().unwrap();
    let backends: Vec<&str> = tools
        .iter()
        .map(|t| t["backend"].as_str().unwrap())
        .collect();
    assert_eq!(backends, ["linux", "gvisor", "local"], "{json}");
    assert_eq!(tools[2]["works"], true, "{json}");
    let checks = checks_of(&run);
    if checks["sandbox"]["ok"] != true {
        eprintln!("SKIP gvisor is unavailable here: {}", checks["sandbox"]);
        return;
    }
    let gvisor = &tools[1];
    let check = &checks["sandbox tools"];
    match warden_sandbox::runsc_statx_defect(&warden_sandbox::SandboxConfig::default()) {
        Some(defect) => {
            let detail = gvisor["detail"].as_str().unwrap();
            assert_eq!(gvisor["works"], false, "{json}");
            assert!(
                detail.contains("`ls -la .`: ls: cannot access '.': Invalid argument")
                    && detail.contains("`stat .`")
                    && !detail.contains("`find .`")
                    && detail.contains(warden_sandbox::MIN_RUNSC_RELEASE),
                "{detail}"
            );
            assert!(detail.contains(&defect), "{detail}");
            assert_eq!(check["ok"], false, "{checks}");
            assert!(
                check["detail"]
                    .as_str()
                    .unwrap()
                    .contains(warden_sandbox::MIN_RUNSC_RELEASE),
                "{checks}"
            );
            assert_eq!(run.code, 1);
        }
        None => {
            assert_eq!(gvisor["works"], true, "{json}");
            assert_eq!(check["ok"], true, "{checks}");
        }
    }
}

#[test]
fn doctor_checks_the_model_endpoint_with_the_key() {
    let accepting = endpoint("200 OK", r#"{"object":"list","data":[]}"#);
    let run = Warden::new()
        .with("WARDEN_MODEL", "openai:gpt-test")
        .with("OPENAI_BASE_URL", &format!("{}/v1", accepting.url))
        .with("OPENAI_API_KEY", "sk-doctor-key")
        .run(&["doctor", "--json"]);
    let checks = checks_of(&run);
    assert_eq!(checks["model"]["ok"], true, "{checks}");
    assert!(checks["model"]["detail"]
        .as_str()
        .unwrap()
        .contains("accepts the key"));
    let seen = accepting.seen.lock().unwrap().join("\n");
    assert!(seen.starts_with("GET /v1/models "), "{seen}");
    assert!(seen.contains("Bearer sk-doctor-key"), "{seen}");
    // Nothing else fails on a machine where the sandbox works, so the exit code is the model's.
    let sandbox_ok = checks["sandbox"]["ok"] == true;
    assert_eq!(run.code == 0, sandbox_ok, "{}", run.stdout);

    let refusing = endpoint(
        "401 Unauthorized",
        r#"{"error":{"message":"Incorrect API key","code":"invalid_api_key"}}"#,
    );
    let run = Warden::new()
        .with("WARDEN_MODEL", "openai:gpt-test")
        .with("OPENAI_BASE_URL", &format!("{}/v1", refusing.url))
        .with("OPENAI_API_KEY", "sk-wrong")
        .run(&["doctor"]);
    assert_eq!(run.code, 1);
    let model_line = run
        .stdout
        .lines()
        .find(|l| l.contains("model"))
        .unwrap()
        .to_string();
    assert!(model_line.starts_with("FAIL"), "{model_line}");
    assert!(model_line.contains("refused the key"), "{model_line}");
    assert!(model_line.contains("OPENAI_API_KEY"), "{model_line}");
    assert!(!run.stdout.contains("sk-wrong"), "{}", run.stdout);

    // A compatible server that needs no key: no key is claimed to be accepted.
    let keyless = endpoint("200 OK", r#"{"object":"list","data":[]}"#);
    let run = Warden::new()
        .with("WARDEN_MODEL", "openai:qwen3")
        .with("OPENAI_BASE_URL", &format!("{}/v1", keyless.url))
        .run(&["doctor", "--json"]);
    let checks = checks_of(&run);
    assert_eq!(checks["model"]["ok"], true, "{checks}");
    let detail = checks["model"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("endpoint answers without a key (OPENAI_API_KEY is not set;"),
        "{detail}"
    );
    assert!(!keyless.seen.lock().unwrap().join("\n").contains("Bearer"));
}

#[test]
fn doctor_checks_the_server_it_is_pointed_at() {
    // A port nothing listens on: bind, note it, close.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let warden = Warden::faux()
        .with("WARDEN_SERVER", &closed)
        .with("WARDEN_TOKEN", "wdn_not_checked");
    let run = warden.run(&["doctor", "--json"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let checks = checks_of(&run);
    assert_eq!(checks["server"]["ok"], false);
    assert!(checks["server"]["detail"]
        .as_str()
        .unwrap()
        .contains("warden serve"));
    // --offline makes no request and does not fail on the server.
    let run = warden.run(&["doctor", "--json", "--offline"]);
    assert_eq!(checks_of(&run)["server"]["ok"], true);
}

/// doctor warns (without failing) when it runs as root, and only then.
#[test]
fn doctor_warns_when_run_as_root() {
    let run = Warden::faux().run(&["doctor", "--json", "--offline"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let warnings = report["warnings"].as_array().expect("a warnings list");
    let root = rustix::process::geteuid().is_root();
    assert_eq!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("running as root")),
        root,
        "{}",
        run.stdout
    );
    let text = Warden::faux().run(&["doctor", "--offline"]);
    assert_eq!(
        text.stdout.contains("WARN running as root"),
        root,
        "{}",
        text.stdout
    );
}

/// A client machine (`WARDEN_SERVER` set, no model of its own): tasks run on the server, so
/// doctor does not fail "model" there; without the server, the same setup still fails it.
#[test]
fn doctor_on_a_client_needs_no_model_of_its_own() {
    let warden = Warden::new()
        .with("WARDEN_SERVER", "http://127.0.0.1:9")
        .with("WARDEN_TOKEN", "wdn_not_checked");
    let run = warden.run(&["doctor", "--json", "--offline"]);
    let checks = checks_of(&run);
    assert_eq!(checks["model"]["ok"], true, "{}", run.stdout);
    assert!(
        checks["model"]["detail"]
            .as_str()
            .unwrap()
            .contains("tasks run on the server http://127.0.0.1:9"),
        "{}",
        run.stdout
    );
    let run = Warden::new().run(&["doctor", "--json", "--offline"]);
    assert_eq!(checks_of(&run)["model"]["ok"], false, "{}", run.stdout);
}

#[test]
fn a_missing_api_key_stops_the_task_before_anything_is_pinned() {
    let repo = TempRepo::new();
    repo.write("a.txt", "alpha\n");
    repo.commit("initial");
    let run = Warden::new().with("WARDEN_MODEL", "openai:gpt-5.1").run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "what is alpha?",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("OPENAI_API_KEY is not set"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("pinning"), "{}", run.stderr);
    let run = Warden::new()
        .with("WARDEN_MODEL", "anthropic:claude-sonnet-4-5")
        .run(&["run", "--repo", repo.path().to_str().unwrap(), "change it"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("ANTHROPIC_API_KEY is not set"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_refused_key_names_the_variable_once_without_log_lines_in_the_progress() {
    let repo = TempRepo::new();
    repo.write("README.md", "# sample\n");
    repo.commit("initial");
    let refusing = endpoint(
        "401 Unauthorized",
        r#"{"error":{"message":"Incorrect API key","code":"invalid_api_key"}}"#,
    );
    let run = Warden::new()
        .with("WARDEN_MODEL", "openai:gpt-test")
        .with("OPENAI_BASE_URL", &format!("{}/v1", refusing.url))
        .with("OPENAI_API_KEY", "sk-wrong")
        .run(&["ask", "--repo", repo.path().to_str().unwrap(), "what?"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the API key was refused: check OPENAI_API_KEY"),
        "{}",
        run.stderr
    );
    // The model client's own warning about the refusal (and the unknown price) would repeat
    // it as a timestamped log line; `serve` and `worker` still log it.
    assert!(!run.stderr.contains(" WARN "), "{}", run.stderr);
    assert!(!run.stderr.contains("sk-wrong"), "{}", run.stderr);
}

#[test]
fn a_model_server_that_is_not_running_names_the_base_url_variable() {
    let repo = TempRepo::new();
    repo.write("README.md", "# sample\n");
    repo.commit("initial");
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = Warden::new()
        .with("WARDEN_MODEL", "openai:qwen3")
        .with("OPENAI_BASE_URL", &format!("http://127.0.0.1:{port}/v1"))
        .with("WARDEN_RETRY_BASE_MS", "5")
        .run(&[
            "ask",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "what?",
        ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "model_error", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "cannot connect to http://127.0.0.1:{port}/v1/chat/completions: "
        )),
        "{message}"
    );
    assert!(
        message.ends_with(
            " — is the model server running? check OPENAI_BASE_URL (`warden doctor` checks the \
             endpoint)"
        ),
        "{message}"
    );
    assert!(!message.contains("error sending request"), "{message}");
}

#[test]
fn a_directory_that_is_not_a_git_repository_is_one_sentence_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    let run = Warden::faux().run(&["ask", "--repo", dir.path().to_str().unwrap(), "what?"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let error: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("warden: error"))
        .collect();
    assert_eq!(error.len(), 1, "{}", run.stderr);
    assert!(error[0].contains("not a git repository"), "{}", error[0]);
    assert!(!run.stderr.contains("rev-parse"), "{}", run.stderr);
}

#[test]
fn a_repository_without_a_commit_is_one_sentence_naming_the_commit_to_make() {
    let repo = TempRepo::new();
    repo.write("notes.txt", "hello\n");
    let path = repo.path().to_str().unwrap();
    for spec in [path.to_string(), format!("{path}@worktree")] {
        let run = Warden::faux().run(&["run", "--repo", &spec, "--check", "true", "change it"]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        let error: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.starts_with("warden: error"))
            .collect();
        assert_eq!(
            error,
            [format!(
                "warden: error: invalid repository {path:?}: the repository has no commit yet; \
                 commit your files first (git -C {path} add -A && git -C {path} commit -m initial)"
            )],
            "{}",
            run.stderr
        );
    }
}

#[test]
fn output_cut_short_by_the_reader_ends_quietly() {
    use std::io::Read;
    let warden = Warden::new().with("WARDEN_MODEL", "faux");
    let mut child = warden
        .command(&["doctor", "--offline"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before doctor prints (like `warden doctor | head -0`).
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(13), "SIGPIPE: {status:?} {stderr}");
}

/// A setup for baseline-mode maintenance alone (advisory databases, no model) is complete:
/// the model check does not fail it, and `[maintain]` says what each database holds and, for
/// a git checkout, how long ago it was fetched.
#[test]
fn doctor_passes_a_baseline_only_maintenance_setup_and_reports_its_advisory_databases() {
    let warden = Warden::new();
    let rustsec = tempfile::tempdir().unwrap();
    let crates = rustsec.path().join("crates/smallvec");
    std::fs::create_dir_all(&crates).unwrap();
    std::fs::write(
        crates.join("RUSTSEC-2021-0003.md"),
        "```toml\n[advisory]\nid = \"RUSTSEC-2021-0003\"\npackage = \"smallvec\"\n\n\
         [versions]\npatched = [\">= 1.6.1\"]\n```\n\n# Buffer overflow in SmallVec::insert_many\n",
    )
    .unwrap();
    std::fs::create_dir_all(rustsec.path().join(".git")).unwrap();
    let fetch_head = std::fs::File::create(rustsec.path().join(".git/FETCH_HEAD")).unwrap();
    let fetched = std::time::SystemTime::now() - std::time::Duration::from_secs(104 * 86_400 + 60);
    fetch_head.set_modified(fetched).unwrap();
    let osv = tempfile::tempdir().unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/src/maintain/fixtures/osv");
    for entry in std::fs::read_dir(fixtures).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), osv.path().join(entry.file_name())).unwrap();
    }
    let config = warden.home.path().join("warden.toml");
    std::fs::write(
        &config,
        format!(
            "[maintain]\nadvisory_db = {:?}\nosv_db = {:?}\n",
            rustsec.path().to_str().unwrap(),
            osv.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let run = warden.run(&["doctor", "--json", "--offline"]);
    let checks = checks_of(&run);
    assert_eq!(checks["model"]["ok"], true, "{checks}");
    assert!(
        checks["model"]["detail"]
            .as_str()
            .unwrap()
            .contains("baseline-mode maintenance only"),
        "{checks}"
    );
    // 104 days is past [maintain] max_advisory_age_days (7 by default): the check fails and
    // says how to refresh it.
    assert_eq!(checks["maintain"]["ok"], false, "{checks}");
    let detail = checks["maintain"]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!(
            "advisory_db {}: 1 RustSec advisory (sha256:",
            rustsec.path().display()
        )) && detail
            .contains("was fetched 104 days ago, more than [maintain] max_advisory_age_days (7)")
            && detail.contains("run `warden advisories update`"),
        "{detail}"
    );
    assert!(
        detail.contains(&format!(
            "osv_db {}: 2 Go advisories, 2 npm advisories, when it was fetched is not recorded",
            osv.path().display()
        )),
        "{detail}"
    );
    // Within the configured age, it passes and says the age.
    std::fs::write(
        &config,
        format!(
            "[maintain]\nadvisory_db = {:?}\nosv_db = {:?}\nmax_advisory_age_days = 120\n",
            rustsec.path().to_str().unwrap(),
            osv.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let checks = checks_of(&warden.run(&["doctor", "--json", "--offline"]));
    assert_eq!(checks["maintain"]["ok"], true, "{checks}");
    let detail = checks["maintain"]["detail"].as_str().unwrap();
    assert!(detail.contains("fetched 104 days ago, at "), "{detail}");

    // A database that does not load fails the check, naming it.
    std::fs::write(
        &config,
        format!(
            "[maintain]\nadvisory_db = {:?}\n",
            osv.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let checks = checks_of(&warden.run(&["doctor", "--json", "--offline"]));
    assert_eq!(checks["maintain"]["ok"], false, "{checks}");
    assert!(
        checks["maintain"]["detail"]
            .as_str()
            .unwrap()
            .contains("cannot read"),
        "{checks}"
    );

    // With neither a model nor maintenance, the model check still fails.
    std::fs::remove_file(&config).unwrap();
    let checks = checks_of(&warden.run(&["doctor", "--json", "--offline"]));
    assert_eq!(checks["model"]["ok"], false, "{checks}");
    assert_eq!(checks["maintain"]["ok"], true, "{checks}");
    assert!(
        checks["maintain"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("no advisory database"),
        "{checks}"
    );
}
