//! Toolchains in the sandbox end to end: a directory configured under `[sandbox] mounts` is
//! visible (read-only, on `PATH`) to checks and agent commands, and a check whose program the
//! sandbox cannot find fails the task before the agent starts, with the sentence naming the fix.

use super::support::Warden;
use serde_json::json;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

const NOT_FOUND: &str = "`faketool`: not found in the sandbox; the operator can add a mount or a \
                         toolchain preset ([sandbox] toolchains / mounts in warden.toml)";

/// A directory outside Warden's home with `bin/faketool`, an executable script.
fn fake_toolchain() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    let tool = dir.path().join("bin/faketool");
    std::fs::write(&tool, "#!/bin/sh\necho faketool checked the tree\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("README.md", "# sample\n");
    repo.commit("initial");
    repo
}

fn with_config(warden: Warden, toml: &str) -> Warden {
    let path = warden.home.path().join("warden.toml");
    std::fs::write(&path, toml).unwrap();
    warden
}

#[test]
fn a_mounted_toolchain_makes_its_check_pass() {
    let toolchain = fake_toolchain();
    let repo = repo();
    let server = ScriptedModelServer::start_blocking(vec![
        // A program nobody mounted: the agent is told how it can be fixed.
        openai::tool_call(
            "shell",
            &json!({"command": "othertool --version"}).to_string(),
        ),
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&server.url()),
        &format!(
            "[sandbox]\nmounts = [{:?}]\n",
            toolchain.path().to_str().unwrap()
        ),
    );
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "faketool",
        "add notes",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let validation = &result["proposal"]["validations"][0];
    assert_eq!(validation["command"], "faketool");
    assert_eq!(validation["exit_code"], 0);
    assert!(
        validation["output_tail"]
            .as_str()
            .unwrap()
            .contains("faketool checked the tree"),
        "{validation}"
    );
    let requests = server.requests();
    let shell_result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    let other = NOT_FOUND.replace("faketool", "othertool");
    assert!(shell_result.contains(&other), "{shell_result}");
    assert!(run.stderr.contains(&other), "{}", run.stderr);
}

#[test]
fn without_the_mount_the_check_fails_up_front_naming_the_fix() {
    let repo = repo();
    // The model is never asked: the failure comes before any agent turn.
    let server = ScriptedModelServer::start_blocking(vec![]);
    let warden = Warden::openai(&server.url());
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "faketool",
        "add notes",
    ]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let result = run.json();
    assert_eq!(result["outcome"], "failure", "{result}");
    assert_eq!(result["failure"]["code"], "baseline_failing", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(message.contains(NOT_FOUND), "{message}");
    assert!(server.requests().is_empty());
}

/// A program a toolchain preset provides (`rustup` comes only with a rustup installation in
/// a home directory, which the sandbox does not show): the failure names the exact
/// `[sandbox] toolchains` line and the file it goes in.
#[test]
fn a_missing_preset_program_names_the_toolchains_line_and_the_file() {
    let repo = repo();
    let warden = Warden::faux();
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "rustup --version",
        "add notes",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "baseline_failing", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    let file = warden.home.path().join("warden.toml");
    assert_eq!(
        message,
        format!(
            "check `rustup --version` cannot run on the base commit: `rustup`: not found in the \
             sandbox; add `toolchains = [\"rust\"]` under [sandbox] in {} (`warden doctor` \
             shows the toolchains installed here)",
            file.display()
        )
    );
}

#[test]
fn a_mount_under_warden_home_is_refused_at_configuration_load() {
    let repo = repo();
    let warden = Warden::faux();
    std::fs::create_dir_all(warden.home.path().join("snapshots")).unwrap();
    let snapshots = warden.home.path().join("snapshots");
    let warden = with_config(
        warden,
        &format!("[sandbox]\nmounts = [{:?}]\n", snapshots.to_str().unwrap()),
    );
    let run = warden.run(&["run", "--repo", repo.path().to_str().unwrap(), "x"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("overlaps WARDEN_HOME"),
        "{}",
        run.stderr
    );
}

#[test]
fn prepare_fills_the_cache_that_checks_and_the_agent_only_read() {
    let repo = repo();
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "shell",
            &json!({"command": "echo poisoned > \"$WARDEN_CACHE/dep\""}).to_string(),
        ),
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&server.url()),
        "[sandbox]\nprepare = [\"echo fetched > \\\"$WARDEN_CACHE/dep\\\"\"]\n",
    );
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "grep -qx fetched \"$WARDEN_CACHE/dep\" && ! touch \"$WARDEN_CACHE/x\"",
        "add notes",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let notices = result["notices"].to_string();
    assert!(notices.contains("prepare ran without network"), "{notices}");
    let caches = warden.home.path().join("caches");
    // The cache directory (its lock file, `<cache>.lock`, sits beside it).
    let cache = std::fs::read_dir(&caches)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.is_dir())
        .unwrap();
    let mut lock = cache.clone().into_os_string();
    lock.push(".lock");
    assert!(std::path::PathBuf::from(lock).is_file());
    assert_eq!(
        std::fs::read_to_string(cache.join("dep")).unwrap(),
        "fetched\n"
    );
    assert!(!cache.join("x").exists());
}

/// A stand-in for the operator's HTTP proxy: records each request line and answers with a
/// small body.
struct FakeProxy {
    address: String,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FakeProxy {
    fn start() -> FakeProxy {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut line = String::new();
                let _ = std::io::BufReader::new(stream.try_clone().unwrap()).read_line(&mut line);
                seen.lock().unwrap().push(line.trim_end().to_string());
                let _ = stream.write_all(
                    b"HTTP/1.0 200 OK\r\nContent-Length: 22\r\n\r\nfetched-through-proxy\n",
                );
            }
        });
        FakeProxy { address, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// With `[sandbox] prepare_proxy`, prepare fetches through it (the address comes from the
/// `HTTP_PROXY` Warden sets) into the dependency cache; the agent's commands and the checks of
/// the same task reach neither the relay nor the proxy, and see no proxy variables.
#[test]
fn prepare_fetches_through_the_proxy_and_nothing_else_reaches_it() {
    let proxy = FakeProxy::start();
    let repo = repo();
    let reach = "(exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null";
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "shell",
            &json!({"command": format!(
                "{reach} && echo REACHED-$((40 + 2)); echo \"proxy=[$HTTP_PROXY]\""
            )})
            .to_string(),
        ),
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    // Dials the proxy address from HTTP_PROXY and keeps the body of the reply.
    let prepare = r#"p=${HTTP_PROXY#http://}; exec 3<>/dev/tcp/${p%:*}/${p##*:} && printf 'GET http://deps.example/dep HTTP/1.0\r\n\r\n' >&3 && sed '1,/^\r$/d' <&3 > "$WARDEN_CACHE/dep""#;
    let warden = with_config(
        Warden::openai(&server.url()),
        &format!(
            "[sandbox]\nprepare = [{prepare:?}]\nprepare_proxy = {:?}\n\n[egress]\nallow = \
             [\"deps.example\"]\n",
            proxy.address
        ),
    );
    let check = format!(
        "grep -qx fetched-through-proxy \"$WARDEN_CACHE/dep\" && [ -z \"$HTTP_PROXY$https_proxy\" ] \
         && ! {reach}"
    );
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        &check,
        "add notes",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(
        result["proposal"]["validations"][0]["exit_code"], 0,
        "{result}"
    );
    let notices = result["notices"].to_string();
    let through = format!(
        "prepare: network to the allow-listed registries through Warden's egress proxy and the \
         upstream proxy {} (1 connection)",
        proxy.address
    );
    assert!(notices.contains(&through), "{notices}");
    // The connection is one of the task's events, shown on stderr.
    assert!(
        run.stderr.contains("⇄ egress GET deps.example:80"),
        "{}",
        run.stderr
    );
    assert!(!notices.contains("without network"), "{notices}");
    // The agent's command reached nothing and saw no proxy.
    let seen = server.requests()[1].body["messages"].to_string();
    assert!(seen.contains("proxy=[]"), "{seen}");
    assert!(!seen.contains("REACHED-42"), "{seen}");
    // Exactly one request reached the proxy: prepare's.
    assert_eq!(
        proxy.requests(),
        vec!["GET http://deps.example/dep HTTP/1.0".to_string()]
    );
}

#[test]
fn a_bad_prepare_proxy_is_refused_at_configuration_load() {
    let repo = repo();
    let warden = with_config(
        Warden::faux(),
        "[sandbox]\nprepare_proxy = \"http://squid:3128\"\n",
    );
    let run = warden.run(&["run", "--repo", repo.path().to_str().unwrap(), "x"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains(
            "sandbox.prepare_proxy must be host:port, the address of an HTTP proxy such as squid \
             (got \"http://squid:3128\")"
        ),
        "{}",
        run.stderr
    );
}

/// `doctor` shows the egress allow-list and makes one connection to its first host as Warden's
/// proxy would: straight to an operator's own host, or through the upstream's `CONNECT`.
#[test]
fn doctor_shows_the_egress_allow_list_and_tries_a_listed_host() {
    let proxy = FakeProxy::start();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let check = |toml: &str| {
        let warden = with_config(Warden::faux(), toml);
        let run = warden.run(&["doctor", "--json"]);
        let report: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "egress")
            .unwrap_or_else(|| panic!("{report}"))
            .clone()
    };
    let detail = |check: &serde_json::Value| check["detail"].as_str().unwrap().to_string();
    // An operator's own host that listens.
    let reached = check(&format!(
        "[egress]\nallow_private = [{:?}]\n",
        proxy.address
    ));
    assert_eq!(reached["ok"], true, "{reached}");
    assert!(
        detail(&reached).contains(&format!("reached {0} at {0}", proxy.address)),
        "{reached}"
    );
    // One that does not.
    let refused = check(&format!("[egress]\nallow_private = [{closed:?}]\n"));
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(detail(&refused).contains("not reached"), "{refused}");
    // A listed name through the upstream proxy (the older key names it too): a CONNECT.
    let chained = check(&format!(
        "[sandbox]\nprepare_proxy = {:?}\n\n[egress]\nallow = [\"deps.example\"]\n",
        proxy.address
    ));
    assert_eq!(chained["ok"], true, "{chained}");
    assert!(
        detail(&chained).contains(&format!(
            "allow-list: deps.example; through the upstream proxy {}; reached deps.example:443 \
             through {}",
            proxy.address, proxy.address
        )),
        "{chained}"
    );
    assert!(
        proxy
            .requests()
            .contains(&"CONNECT deps.example:443 HTTP/1.1".to_string()),
        "{:?}",
        proxy.requests()
    );
    // Nothing listed: prepare has no network, which is fine.
    let nothing = check("");
    assert_eq!(nothing["ok"], true, "{nothing}");
    assert!(
        detail(&nothing).contains("nothing (prepare has no network)"),
        "{nothing}"
    );
}

#[test]
fn doctor_suggests_the_rust_preset_when_rustup_is_installed() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".rustup/toolchains")).unwrap();
    std::fs::create_dir_all(home.path().join(".cargo/bin")).unwrap();
    let cargo = home.path().join(".cargo/bin/cargo");
    std::fs::write(&cargo, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Only rustup: a Go this machine has (Debian's /usr/lib/go) is kept out of the suggestion.
    let warden = Warden::faux()
        .with("HOME", home.path().to_str().unwrap())
        .with("GOROOT", home.path().join("no-go").to_str().unwrap());
    let run = warden.run(&["doctor", "--json", "--offline"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "toolchains")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(check["ok"], true);
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("found rust: rustup at"), "{detail}");
    // The line, and the file it goes in (WARDEN_HOME/warden.toml, which does not exist yet).
    // A system node (in the directories the sandbox shows anyway) is suggested too: its
    // preset brings npm's cache and registry.
    let line = if detail.contains("found node: system node") {
        "toolchains = [\"rust\", \"node\"]"
    } else {
        "toolchains = [\"rust\"]"
    };
    let file = warden.home.path().join("warden.toml");
    assert!(
        detail.contains(&format!("add to {}:\n[sandbox]\n{line}", file.display())),
        "{detail}"
    );
    let configuration = &report["checks"][0];
    assert_eq!(
        configuration["detail"],
        format!(
            "no file: the defaults and the environment (settings go in {})",
            file.display()
        ),
        "{report}"
    );

    // Once configured, the sandbox sees it and the suggestion is gone.
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("[sandbox]\n{line}\n"),
    )
    .unwrap();
    let run = warden.run(&["doctor", "--json", "--offline"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let detail = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "toolchains")
        .unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains("configured: rust"), "{detail}");
    assert!(!detail.contains("add to"), "{detail}");
    assert_eq!(
        report["checks"][0]["detail"],
        format!("loaded {} and the environment", file.display()),
        "{report}"
    );
}

/// A registered repository's own mounts reach the sandboxes of its served tasks (checks and
/// agent commands), and only from under `[sandbox] repo_mount_roots`.
#[test]
fn a_registered_repository_mount_reaches_its_served_tasks() {
    use super::server_harness::{settled, Server, Token, ALICE};
    const TOKENS: &[Token] = &[("alice", "admin", ALICE)];
    use std::os::unix::fs::PermissionsExt;
    // The operator's root for repository mounts, with one toolchain in it.
    let roots = tempfile::tempdir().unwrap();
    let toolchain = roots.path().join("faketool-1.0");
    std::fs::create_dir_all(toolchain.join("bin")).unwrap();
    let tool = toolchain.join("bin/faketool");
    std::fs::write(&tool, "#!/bin/sh\necho faketool checked the tree\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("shell", &json!({"command": "faketool"}).to_string()),
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&model.url()),
        &format!(
            "[sandbox]\nrepo_mount_roots = [{:?}]\n",
            roots.path().to_str().unwrap()
        ),
    );
    let server = Server::start(&warden, TOKENS);
    let mount = toolchain.to_str().unwrap();
    let source = repo.path().to_str().unwrap();
    // A mount outside the roots is refused at registration.
    let (status, body) = server.request(
        "POST",
        "/v1/repos",
        Some(ALICE),
        Some(&json!({"name": "bad", "source": source, "mounts": ["/etc"]})),
    );
    assert_eq!(status, 422, "{body}");
    server.register_repo(&json!({
        "name": "app", "source": source, "checks": ["faketool"], "mounts": [mount],
    }));
    let task = server.submit(
        ALICE,
        &json!({"kind": "change", "repo": "app", "prompt": "add notes"}),
    );
    let id = task["id"].as_str().unwrap();
    let task = server.wait_until(ALICE, id, settled);
    assert_eq!(task["status"], "completed", "{task}\n{}", server.stderr());
    let result = &task["result"];
    let validation = &result["proposal"]["validations"][0];
    assert_eq!(validation["command"], "faketool", "{result}");
    assert_eq!(validation["exit_code"], 0, "{result}");
    // The agent's own command found it too.
    let seen = model.requests()[1].body["messages"].to_string();
    assert!(seen.contains("faketool checked the tree"), "{seen}");
    server.terminate();
}

/// Issue 22's poisoning test: a hostile branch whose prepare plants a different package in
/// the dependency cache cannot change what another branch's checks build against. The
/// configured prepare runs the branch's own `fetch-deps.sh` and, like `cargo fetch`, leaves a
/// package already in the cache alone; the hostile branch's script plants one first. Both
/// branches have the same lockfile: the cache is keyed by everything prepare reads (for a
/// configured command, the whole base tree), so each base gets its own. A later task of the
/// same base finds its cache complete and skips prepare, and `warden gc` evicts caches like
/// snapshots.
#[test]
fn a_hostile_branchs_prepare_cannot_poison_another_branchs_checks() {
    let repo = TempRepo::new();
    repo.write("Cargo.lock", "# the same pins on every branch\n");
    repo.write(
        "fetch-deps.sh",
        "[ -f \"$WARDEN_CACHE/dep\" ] || echo genuine > \"$WARDEN_CACHE/dep\"\n",
    );
    repo.commit("initial");
    repo.git(&["checkout", "-q", "-b", "hostile"]);
    repo.write(
        "fetch-deps.sh",
        "echo planted > \"$WARDEN_CACHE/dep\"; echo planted > \"$WARDEN_CACHE/extra\"\n",
    );
    repo.commit("plant a crate");
    repo.git(&["checkout", "-q", "main"]);
    let turns = || {
        vec![
            openai::tool_call(
                "write_file",
                &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
            ),
            openai::tool_call(
                "submit_change",
                &json!({"summary": "Add notes"}).to_string(),
            ),
        ]
    };
    let server = ScriptedModelServer::start_blocking([turns(), turns(), turns()].concat());
    let warden = with_config(
        Warden::openai(&server.url()),
        "[sandbox]\nprepare = [\"sh fetch-deps.sh\"]\n\n[storage]\nkeep_recent_mins = 0\n",
    );
    let run = |rev: &str, check: &str| {
        let run = warden.run(&[
            "run",
            "--repo",
            &format!("{}@{rev}", repo.path().display()),
            "--json",
            "--check",
            check,
            "add notes",
        ]);
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.json()["outcome"], "proposal", "{}", run.stdout);
        run
    };
    let hostile = run("hostile", "grep -qx planted \"$WARDEN_CACHE/dep\"");
    let skipped = |run: &super::support::Run| {
        run.json()["notices"]
            .to_string()
            .contains("prepare skipped: the dependency cache of this base is complete")
    };
    assert!(!skipped(&hostile), "{}", hostile.stdout);
    let genuine = "grep -qx genuine \"$WARDEN_CACHE/dep\" && test ! -e \"$WARDEN_CACHE/extra\"";
    let main = run("main", genuine);
    assert!(!skipped(&main), "{}", main.stdout);
    // The same base again: its cache is complete, prepare does not run.
    let again = run("main", genuine);
    assert!(skipped(&again), "{}", again.stdout);

    let caches = warden.home.path().join("caches");
    let complete: Vec<_> = std::fs::read_dir(&caches)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "complete"))
        .collect();
    assert_eq!(complete.len(), 2, "{complete:?}");
    // Nothing holds them now: gc evicts both, marker first.
    let gc = warden.run(&["gc", "--max-bytes", "0", "--json"]);
    assert_eq!(gc.code, 0, "{}\n{}", gc.stdout, gc.stderr);
    let report = gc.json();
    let evicted = report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["kind"] == "cache")
        .count();
    assert_eq!(evicted, 2, "{report}");
    assert!(std::fs::read_dir(&caches)
        .unwrap()
        .all(|entry| !entry.unwrap().path().is_dir()));
    assert!(complete.iter().all(|marker| !marker.exists()));
}
