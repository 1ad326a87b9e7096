//! The `kubernetes` backend end to end: the real `warden` binary with `[sandbox] backend =
//! "kubernetes"` against warden-kubernetes' fake API server (whose pods are `linux` sandbox
//! views), and the same scripted question and change on the `linux` backend: the same answer,
//! the same tool observations, the same proposal tree. No real cluster runs here; docs/kubernetes.md
//! says how the live test runs against one (`WARDEN_K8S_LIVE=1`).

use super::support::Warden;
use serde_json::json;
use warden_kubernetes::fake::{FakeCluster, FakeOptions};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

/// The fake with linux pods, or `None` where the linux backend is unavailable (unless CI
/// requires it).
fn fake(dir: &std::path::Path) -> Option<FakeCluster> {
    match warden_sandbox::select(
        warden_sandbox::Backend::Linux,
        &warden_sandbox::SandboxConfig::default(),
    ) {
        Ok(runtime) => Some(FakeCluster::start(runtime, dir, FakeOptions::default()).unwrap()),
        Err(error) => {
            assert!(
                !std::env::var("WARDEN_SANDBOX_TEST_REQUIRE")
                    .unwrap_or_default()
                    .contains("linux"),
                "the fake cluster's pods need the linux backend: {error}"
            );
            eprintln!("SKIP: the fake cluster's pods need the linux backend: {error}");
            None
        }
    }
}

/// A Warden configured for the fake.
fn on_fake(warden: Warden, fake: &FakeCluster) -> Warden {
    let kubeconfig = warden.home.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig).unwrap();
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!(
            "[sandbox]\nbackend = \"kubernetes\"\n\n[kubernetes]\nkubeconfig = \"{}\"\nowner = \"cli-test\"\n",
            kubeconfig.display()
        ),
    )
    .unwrap();
    warden
}

fn call(name: &str, arguments: serde_json::Value) -> warden_test_support::model_server::Reply {
    openai::tool_call(name, &arguments.to_string())
}

/// The tool results the model saw, in order.
fn observations(server: &ScriptedModelServer) -> Vec<String> {
    let requests = server.requests();
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_question_runs_through_the_kubernetes_backend_like_linux() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(fake) = fake(&scratch.path().join("cluster")) else {
        return;
    };
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "// one\npub fn retry() -> u32 {\n    3\n}\n")
        .write("README.md", "# sample\n");
    repo.commit("initial");
    let script = || {
        vec![
            call(
                "shell",
                json!({"command": "pwd; grep -n 'fn retry' src/lib.rs; wc -l < README.md; ls -1"}),
            ),
            call(
                "submit_answer",
                json!({"summary": "retry returns 3",
                       "claims": [{"text": "retry returns 3", "basis": "observed",
                                   "evidence": [{"repo": repo.path().file_name().unwrap().to_str().unwrap(),
                                                 "path": "src/lib.rs", "start_line": 2, "end_line": 4}]}]}),
            ),
        ]
    };
    let mut results = Vec::new();
    for backend in ["linux", "kubernetes"] {
        let server = ScriptedModelServer::start_blocking(script());
        let warden = Warden::openai(&server.url());
        let warden = if backend == "kubernetes" {
            on_fake(warden, &fake)
        } else {
            warden.with("WARDEN_SANDBOX", "linux")
        };
        let run = warden.run(&[
            "ask",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "what does retry return?",
        ]);
        assert_eq!(run.code, 0, "{backend}: {}\n{}", run.stdout, run.stderr);
        let result = run.json();
        assert_eq!(result["outcome"], "answer", "{backend}: {result}");
        assert_eq!(result["sandbox"], backend, "{result}");
        results.push((result, observations(&server)));
    }
    let (linux, kubernetes) = (&results[0], &results[1]);
    assert_eq!(linux.0["answer"], kubernetes.0["answer"]);
    assert_eq!(linux.1, kubernetes.1, "the shell saw the same tree");
    assert!(kubernetes.1[0].contains("/work"), "{:?}", kubernetes.1);
    assert!(
        fake.claims().is_empty(),
        "the task's claim was deleted: {:?}",
        fake.claims()
    );
    let claims_created = fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.target.ends_with("/sandboxclaims"))
        .count();
    assert_eq!(claims_created, 1, "one claim for the task's one view");
    // The claim said whose it was: the owner, and the task (for a label selector).
    let labels = fake.created_claim_labels();
    assert_eq!(
        labels.last().unwrap()["warden.dev/task"],
        kubernetes.0["task_id"],
        "{labels:?}"
    );
}

#[test]
fn a_change_runs_through_the_kubernetes_backend_like_linux() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(fake) = fake(&scratch.path().join("cluster")) else {
        return;
    };
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\ngamma\n")
        .write("old.txt", "to be deleted\n")
        .write(
            "check.sh",
            "grep -q BETA src/lib.txt && test ! -e old.txt\n",
        );
    repo.commit("initial");
    let script = || {
        vec![
            call(
                "shell",
                json!({"command": "sed -i 's/beta/BETA/' src/lib.txt && rm old.txt && mkdir -p docs && echo made > docs/by-shell.txt"}),
            ),
            // An edit tool writes the host side of the view; the next command must see it.
            call(
                "write_file",
                json!({"path": "docs/by-tool.txt", "content": "written by warden\n"}),
            ),
            call(
                "shell",
                json!({"command": "cat docs/by-tool.txt docs/by-shell.txt"}),
            ),
            call("run_checks", json!({})),
            call("submit_change", json!({"summary": "BETA, without old.txt"})),
        ]
    };
    let mut results = Vec::new();
    for backend in ["linux", "kubernetes"] {
        let server = ScriptedModelServer::start_blocking(script());
        let warden = Warden::openai(&server.url());
        let warden = if backend == "kubernetes" {
            on_fake(warden, &fake)
        } else {
            warden.with("WARDEN_SANDBOX", "linux")
        };
        let run = warden.run(&[
            "run",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "--check",
            "bash check.sh",
            "make beta uppercase",
        ]);
        assert_eq!(run.code, 0, "{backend}: {}\n{}", run.stdout, run.stderr);
        let result = run.json();
        assert_eq!(result["outcome"], "proposal", "{backend}: {result}");
        results.push((result, observations(&server)));
    }
    let (linux, kubernetes) = (&results[0], &results[1]);
    for key in ["tree", "files", "diff_stat", "base_commit"] {
        assert_eq!(
            linux.0["proposal"][key], kubernetes.0["proposal"][key],
            "proposal {key}"
        );
    }
    assert_eq!(
        kubernetes.0["proposal"]["validations"][0]["exit_code"], 0,
        "{}",
        kubernetes.0
    );
    assert_eq!(
        linux.1[2], kubernetes.1[2],
        "the shell saw the tool's write"
    );
    assert!(
        kubernetes.1[2].contains("written by warden"),
        "{:?}",
        kubernetes.1
    );
    assert!(
        fake.claims().is_empty(),
        "every claim was deleted: {:?}",
        fake.claims()
    );
}

/// A pod lost while the agent's command runs in it: the question ends, promptly, failed with
/// `sandbox_error` naming the lost sandbox, the model is not asked again, and the claim is
/// cleaned up; nothing hangs.
#[test]
fn a_pod_lost_mid_task_fails_the_task_cleanly_and_promptly() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(fake) = fake(&scratch.path().join("cluster")) else {
        return;
    };
    let repo = TempRepo::new();
    repo.write("README.md", "# sample\n");
    repo.commit("initial");
    let server = ScriptedModelServer::start_blocking(vec![
        call("shell", json!({"command": "sleep 60; echo never"})),
        call("shell", json!({"command": "echo unreachable"})),
    ]);
    let warden = on_fake(Warden::openai(&server.url()), &fake);
    let child = warden
        .command(&[
            "ask",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "what is here?",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the command runs in the task's pod, the pod goes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        if server.requests().len() == 1 && !fake.claims().is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(700));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lost_at = std::time::Instant::now();
    for claim in fake.claims() {
        fake.lose_pod(&claim);
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        lost_at.elapsed() < std::time::Duration::from_secs(30),
        "the task took {:?} to end after the pod went",
        lost_at.elapsed()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["outcome"], "failure", "{result}");
    assert_eq!(result["failure"]["code"], "sandbox_error", "{result}");
    let message = result["failure"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("lost"), "{message}");
    // The agent never ran another command in a sandbox that is gone.
    assert_eq!(server.requests().len(), 1, "{result}");
    assert!(
        fake.claims().is_empty(),
        "the lost sandbox's claim was deleted: {:?}",
        fake.claims()
    );
}

/// Runs `warden args…` and loses the pod the first command printing `marker` runs in, once
/// that command is running; the run's outcome. A run still going long after the pod went (the
/// command sleeps for minutes) is killed and fails the test as hung.
fn run_losing_the_pod(
    warden: &Warden,
    fake: &FakeCluster,
    args: &[&str],
    marker: &str,
) -> super::support::Run {
    use std::time::{Duration, Instant};
    let mut child = warden
        .command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("warden runs");
    // The exec's query carries the command: wait for it, then let it start in the pod.
    let watchdog = Instant::now() + Duration::from_secs(120);
    let pod = loop {
        let exec = fake
            .requests()
            .into_iter()
            .find(|r| r.target.contains("/exec?") && r.target.contains(marker));
        if let Some(exec) = exec {
            let pod = exec.target.split("/pods/").nth(1).unwrap();
            break pod.split('/').next().unwrap().to_string();
        }
        if let Some(status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().unwrap();
            panic!(
                "warden ended ({status}) before running the marked command:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        if Instant::now() >= watchdog {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the marked command never ran:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let claim = pod
        .strip_suffix("-pod")
        .expect("the fake names pods CLAIM-pod");
    std::thread::sleep(Duration::from_millis(300));
    fake.lose_pod(claim);
    // Not a timing claim: a backstop against a hang, far beyond anything a clean end takes and
    // far below the command's own 280 s.
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "warden hung after its pod was lost:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    super::support::Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A change whose pod is lost while the agent's command runs ends with `sandbox_error`, no
/// proposal, the model not asked again, and the claim deleted.
#[test]
fn a_change_whose_pod_is_lost_mid_command_fails_cleanly() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(fake) = fake(&scratch.path().join("cluster")) else {
        return;
    };
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\n")
        .write("check.sh", "grep -q BETA src/lib.txt\n");
    repo.commit("initial");
    let server = ScriptedModelServer::start_blocking(vec![
        call(
            "shell",
            json!({"command": "sed -i 's/beta/BETA/' src/lib.txt"}),
        ),
        call(
            "shell",
            json!({"command": "echo lose-this-pod; sleep 280", "timeout_ms": 600000}),
        ),
        // Reached only if the run went on after losing its sandbox.
        call("run_checks", json!({})),
        call("submit_change", json!({"summary": "went on"})),
    ]);
    let warden = on_fake(Warden::openai(&server.url()), &fake);
    let run = run_losing_the_pod(
        &warden,
        &fake,
        &[
            "run",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "--check",
            "bash check.sh",
            "make beta uppercase",
        ],
        "lose-this-pod",
    );
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "failure", "{result}");
    assert_eq!(result["failure"]["code"], "sandbox_error", "{result}");
    let message = result["failure"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("lost"), "{message}");
    assert!(
        result
            .get("proposal")
            .is_none_or(serde_json::Value::is_null),
        "no proposal from a lost sandbox: {result}"
    );
    assert_eq!(
        server.requests().len(),
        2,
        "the model was not asked again after the sandbox went"
    );
    assert!(fake.claims().is_empty(), "{:?}", fake.claims());
}

/// A check whose pod is lost is reported to the agent as that check's failure; its next
/// `run_checks` gets a new claim and the change goes through.
#[test]
fn a_check_whose_pod_is_lost_is_reported_and_the_agent_runs_the_checks_again() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(fake) = fake(&scratch.path().join("cluster")) else {
        return;
    };
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\n");
    repo.commit("initial");
    // The first run of the check (before the agent writes `again`) is where the pod goes.
    let check =
        "if [ ! -e again ]; then echo lose-this-pod; sleep 280; fi; grep -q BETA src/lib.txt";
    let server = ScriptedModelServer::start_blocking(vec![
        call(
            "shell",
            json!({"command": "sed -i 's/beta/BETA/' src/lib.txt"}),
        ),
        call("run_checks", json!({})),
        call("write_file", json!({"path": "again", "content": "\n"})),
        call("run_checks", json!({})),
        call("submit_change", json!({"summary": "BETA"})),
    ]);
    let warden = on_fake(Warden::openai(&server.url()), &fake);
    let run = run_losing_the_pod(
        &warden,
        &fake,
        &[
            "run",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "--check",
            check,
            "make beta uppercase",
        ],
        "lose-this-pod",
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let seen = observations(&server);
    assert!(
        seen.get(1).is_some_and(|o| o.contains("lost")),
        "the agent was told its check's sandbox was lost: {seen:?}"
    );
    assert_eq!(
        result["proposal"]["validations"][0]["exit_code"], 0,
        "{result}"
    );
    assert!(fake.claims().is_empty(), "{:?}", fake.claims());
}

/// The same question on a real cluster, when asked for: `WARDEN_K8S_LIVE=1`, with
/// `WARDEN_K8S_KUBECONFIG` (else `KUBECONFIG`) naming a kubeconfig whose cluster has the
/// manifests of `warden k8s render` applied (and `WARDEN_K8S_NAMESPACE`, `WARDEN_K8S_IMAGE`
/// when they are not the defaults). docs/kubernetes.md says how to set one up with kind and
/// gVisor. Skipped, saying so, everywhere else: no cluster runs on these machines.
#[test]
fn a_question_runs_on_a_live_cluster_when_asked() {
    if std::env::var("WARDEN_K8S_LIVE").as_deref() != Ok("1") {
        eprintln!(
            "SKIP: set WARDEN_K8S_LIVE=1 (and WARDEN_K8S_KUBECONFIG) to run against a cluster"
        );
        return;
    }
    let kubeconfig = std::env::var("WARDEN_K8S_KUBECONFIG")
        .or_else(|_| std::env::var("KUBECONFIG"))
        .expect("WARDEN_K8S_LIVE=1 needs WARDEN_K8S_KUBECONFIG or KUBECONFIG");
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "// one\npub fn retry() -> u32 {\n    3\n}\n");
    repo.commit("initial");
    let server = ScriptedModelServer::start_blocking(vec![
        call("shell", json!({"command": "grep -n 'fn retry' src/lib.rs"})),
        call(
            "submit_answer",
            json!({"summary": "retry returns 3",
                   "claims": [{"text": "retry returns 3", "basis": "observed",
                               "evidence": [{"path": "src/lib.rs", "start_line": 2, "end_line": 4}]}]}),
        ),
    ]);
    let warden = Warden::openai(&server.url());
    let mut settings = format!(
        "[sandbox]\nbackend = \"kubernetes\"\n\n[kubernetes]\nkubeconfig = {kubeconfig:?}\n"
    );
    for (variable, key) in [
        ("WARDEN_K8S_NAMESPACE", "namespace"),
        ("WARDEN_K8S_IMAGE", "image"),
    ] {
        if let Ok(value) = std::env::var(variable) {
            settings.push_str(&format!("{key} = {value:?}\n"));
        }
    }
    std::fs::write(warden.home.path().join("warden.toml"), settings).unwrap();
    let run = warden.run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "what does retry return?",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "answer", "{result}");
    assert_eq!(result["sandbox"], "kubernetes", "{result}");
    let seen = observations(&server);
    assert!(seen[0].contains("2:pub fn retry"), "{seen:?}");
}

/// `warden doctor` with the kubernetes backend asks the cluster (listing this Warden's claims,
/// changing nothing) instead of probing this machine's layers: ok against the fake; with
/// `--offline` only the settings and credentials are read, the server is not asked; a token the
/// server refuses, or a cluster that is not there, fail it saying what to do.
#[test]
fn doctor_asks_the_cluster() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(fake) = fake(&scratch.path().join("cluster")) else {
        return;
    };
    let sandbox_check = |warden: &Warden, offline: bool| -> serde_json::Value {
        let mut args = vec!["doctor", "--json"];
        if offline {
            args.push("--offline");
        }
        let run = warden.run(&args);
        let report: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "sandbox")
            .cloned()
            .unwrap()
    };
    let warden = on_fake(Warden::faux(), &fake);
    let check = sandbox_check(&warden, false);
    assert_eq!(check["ok"], true, "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains(
            "the API server answered in namespace warden-sandboxes (0 claim(s) of owner cli-test)"
        ),
        "{check}"
    );
    let asked = fake.requests();
    assert!(
        asked
            .iter()
            .any(|r| r.method == "GET" && r.target.contains("labelSelector=")),
        "it listed the claims: {asked:?}"
    );
    assert!(
        asked.iter().all(|r| r.method == "GET"),
        "doctor changed nothing"
    );

    // The claims it finds are listed with the tasks they serve; another owner's are not.
    fake.add_claim(
        "warden-held",
        json!({"app.kubernetes.io/managed-by": "warden", "warden.dev/owner": "cli-test",
               "warden.dev/task": "tsk_01held"}),
    );
    fake.add_claim(
        "warden-theirs",
        json!({"app.kubernetes.io/managed-by": "warden", "warden.dev/owner": "elsewhere",
               "warden.dev/task": "tsk_01theirs"}),
    );
    let check = sandbox_check(&warden, false);
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("(1 claim(s) of owner cli-test: warden-held (tsk_01held))"),
        "{check}"
    );
    assert!(!detail.contains("theirs"), "{check}");

    // Offline: the credentials are read, the server is not asked.
    fake.clear_requests();
    let check = sandbox_check(&warden, true);
    assert_eq!(check["ok"], true, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("settings and credentials readable"),
        "{check}"
    );
    assert!(fake.requests().is_empty(), "{:?}", fake.requests());

    // A token the server refuses: what to apply.
    let refused = on_fake(Warden::faux(), &fake);
    let kubeconfig = refused.home.path().join("kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let token = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("token: "))
        .unwrap_or_else(|| panic!("no token in the kubeconfig:\n{text}"))
        .to_string();
    std::fs::write(&kubeconfig, text.replace(&token, "not-the-token")).unwrap();
    let check = sandbox_check(&refused, false);
    assert_eq!(check["ok"], false, "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("401") && detail.contains("RoleBinding"),
        "{check}"
    );

    // A cluster that is not there.
    let unreachable = on_fake(Warden::faux(), &fake);
    let kubeconfig = unreachable.home.path().join("kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let port = text
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap()
        .to_string();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port().to_string();
    drop(closed);
    std::fs::write(&kubeconfig, text.replace(&port, &closed_port)).unwrap();
    let check = sandbox_check(&unreachable, false);
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("kubernetes backend unavailable: tasks will fail with sandbox_error"),
        "{check}"
    );
}
