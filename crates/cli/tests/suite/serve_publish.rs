//! Publication by `warden serve`, as an operator drives it over HTTP: a change task submitted
//! with `publish: true` waits for its approval; `POST /v1/approvals/{id}` with the proposal hash
//! (an admin token) queues it and a worker pushes `warden/<task>` to the repository's remote (a
//! local bare repository) and opens one pull request on a local fake of GitHub's pulls API. A
//! wrong hash is 409 and moves nothing; `serve` dying right after the push or right after GitHub
//! opened the pull request (`WARDEN_FAILPOINT`) and started again still ends with exactly one
//! branch and one pull request; a rejection ends the task with its proposal kept and nothing
//! pushed; approving the approval of a cancelled task is 409; a pull request that cannot be
//! opened (no token) fails the task with the reason and the pushed branch recorded.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::github_fake::GithubFake;
use warden_test_support::model_server::ScriptedModelServer;

use super::publish::bare_git;
use super::server_harness::{
    call, change_repo, settled, uppercase_beta, GithubRemote, Server, Token, ADMIN, ALICE,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];
const TOKEN: &str = "ghp_serve_fake_token_0123456789ab";

/// A registered repository `app` whose `origin` is a bare remote holding `main`, a GitHub fake
/// for `acme/widgets` over that remote, and a model that makes the same checked edit for each
/// of `tasks` change tasks.
struct Setup {
    repo: TempRepo,
    _remote_dir: tempfile::TempDir,
    remote: PathBuf,
    fake: GithubFake,
    _model: ScriptedModelServer,
    warden: Warden,
}

impl Setup {
    fn new(tasks: usize) -> Setup {
        let repo = change_repo();
        let GithubRemote {
            dir: remote_dir,
            path: remote,
            fake,
        } = GithubRemote::for_repo(&repo, TOKEN);
        let mut script = Vec::new();
        for _ in 0..tasks {
            script.push(uppercase_beta());
            script.push(call(
                "submit_change",
                json!({"summary": "Uppercase beta\n\nThe check wants BETA."}),
            ));
        }
        let model = ScriptedModelServer::start_blocking(script);
        let warden = Warden::openai(&model.url())
            .with("WARDEN_GITHUB_API_URL", &fake.url())
            .with("WARDEN_GITHUB_TOKEN", TOKEN);
        // No base: the remote's default branch (its HEAD, `main`).
        std::fs::write(
            warden.home.path().join("warden.toml"),
            "[[publish]]\nrepo = \"app\"\ngithub = \"acme/widgets\"\n",
        )
        .unwrap();
        Setup {
            repo,
            _remote_dir: remote_dir,
            remote,
            fake,
            _model: model,
            warden,
        }
    }

    /// `warden serve` with the repository registered ([`Setup::register`]).
    fn serve(&self) -> Server {
        let server = Server::start(&self.warden, TOKENS);
        self.register(&server);
        server
    }

    /// Registers the repository on `server` as `app`, checked by `bash check.sh`.
    fn register(&self, server: &Server) {
        server.register_with_checks("app", &self.repo, &["bash check.sh"]);
    }

    /// Submits a change with `publish: true` and waits for it to ask for approval: the task id,
    /// the approval id and the hash it is bound to.
    fn waiting_task(&self, server: &Server) -> (String, String, String) {
        let id = server.submit_change(
            ALICE,
            &json!({"kind": "change", "repo": "app",
                    "prompt": "make beta uppercase", "publish": true}),
        );
        let task = server.wait_until(ALICE, &id, settled);
        assert_eq!(
            task["status"],
            "waiting_approval",
            "{task}\n{}",
            server.stderr()
        );
        let approval = &task["result"]["approval"];
        assert_eq!(approval["kind"], "publish", "{task}");
        assert_eq!(approval["subject_hash"], task["result"]["proposal"]["hash"]);
        (
            id,
            approval["id"].as_str().unwrap().to_string(),
            approval["subject_hash"].as_str().unwrap().to_string(),
        )
    }

    /// Every `refs/heads/warden/*` on the remote, with its commit.
    fn remote_branches(&self) -> Vec<String> {
        remote_branches(&self.remote)
    }

    /// Exactly one branch for the task at its proposal commit and one pull request for it, the
    /// task completed with the publication recorded as opened.
    fn assert_published_once(&self, server: &Server, id: &str) {
        let task = server.wait_until(ALICE, id, settled);
        assert_eq!(task["status"], "completed", "{task}\n{}", server.stderr());
        let result = &task["result"];
        assert_eq!(result["outcome"], "proposal", "{result}");
        let commit = result["proposal"]["commit"].as_str().unwrap();
        let branch = format!("warden/{id}");
        let ours: Vec<String> = self
            .remote_branches()
            .into_iter()
            .filter(|b| b.starts_with(&format!("refs/heads/{branch} ")))
            .collect();
        assert_eq!(ours, [format!("refs/heads/{branch} {commit}")]);
        let pulls: Vec<Value> = self
            .fake
            .pulls()
            .into_iter()
            .filter(|p| p["head"]["ref"] == branch.as_str())
            .collect();
        assert_eq!(pulls.len(), 1, "{pulls:#?}");
        assert_eq!(pulls[0]["head"]["sha"], commit);
        assert_eq!(pulls[0]["base"]["ref"], "main");
        let publication = &result["publication"];
        assert_eq!(publication["status"], "pr_opened", "{result}");
        assert_eq!(publication["pr_url"], pulls[0]["html_url"]);
        assert_eq!(publication["branch"], branch.as_str());
        assert_eq!(result["approval"]["status"], "approved", "{result}");
        assert_eq!(result["approval"]["decided_by"], "root", "{result}");
    }
}

fn remote_branches(remote: &Path) -> Vec<String> {
    bare_git(
        remote,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/heads/warden/",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

fn decide(server: &Server, approval: &str, decision: &str, hash: &str) -> (u16, Value) {
    server.request(
        "POST",
        &format!("/v1/approvals/{approval}"),
        Some(ADMIN),
        Some(&json!({"decision": decision, "hash": hash})),
    )
}

#[test]
fn an_approved_change_is_published_once_by_serve_and_a_wrong_hash_moves_nothing() {
    let setup = Setup::new(1);
    let server = setup.serve();
    let (id, approval, hash) = setup.waiting_task(&server);
    // Nothing left the machine before the approval.
    assert!(setup.remote_branches().is_empty());
    assert!(setup.fake.requests().is_empty());

    // A well-formed hash that is not the proposal's: 409, nothing decided, nothing pushed.
    let wrong = format!("sha256:{}", "0".repeat(64));
    assert_ne!(wrong, hash);
    let (status, body) = decide(&server, &approval, "approve", &wrong);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "hash_mismatch");
    let task = server.task(ALICE, &id);
    assert_eq!(task["status"], "waiting_approval", "{task}");
    let shown = server.get(ALICE, &format!("/v1/approvals/{approval}"));
    assert_eq!(shown["status"], "pending", "{shown}");
    assert!(setup.remote_branches().is_empty());
    assert!(setup.fake.requests().is_empty());
    // The owner (an operator) may not decide.
    let (status, body) = server.request(
        "POST",
        &format!("/v1/approvals/{approval}"),
        Some(ALICE),
        Some(&json!({"decision": "approve", "hash": hash})),
    );
    assert_eq!(status, 403, "{body}");

    let (status, body) = decide(&server, &approval, "approve", &hash);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "approved");
    setup.assert_published_once(&server, &id);
    // The approval authorised one publication: it is used up, and deciding again is refused.
    let shown = server.get(ALICE, &format!("/v1/approvals/{approval}"));
    assert_eq!(shown["status"], "consumed", "{shown}");
    let (status, body) = decide(&server, &approval, "approve", &hash);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "already_decided");
    // The pull request carries the task and the summary, not the token.
    let pull = &setup.fake.pulls()[0];
    assert_eq!(pull["title"], "Uppercase beta");
    let text = pull["body"].as_str().unwrap();
    assert!(text.contains(&id), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    // The publication run's journal records each side effect before its outcome.
    let journal = server.get(ALICE, &format!("/v1/tasks/{id}/journal?run=2"));
    let shown = journal.to_string();
    let push = shown
        .find("\"push\"")
        .expect("the push intent is journaled");
    let open = shown.find("\"open_pr\"").expect("the pull request intent");
    assert!(push < open, "{shown}");
    assert!(!shown.contains(TOKEN), "{shown}");
    server.terminate();
}

#[test]
fn serve_crashing_after_the_push_or_after_the_pull_request_still_publishes_exactly_once() {
    let setup = Setup::new(2);
    let mut published = Vec::new();
    for point in ["publish_after_push", "publish_after_pr"] {
        let server = Server::start_with(&setup.warden, TOKENS, &[("WARDEN_FAILPOINT", point)]);
        if published.is_empty() {
            setup.register(&server);
        }
        let (id, approval, hash) = setup.waiting_task(&server);
        let (status, body) = decide(&server, &approval, "approve", &hash);
        assert_eq!(status, 200, "{body}");
        // The worker publishes and the process dies at the crash point, nothing recorded.
        let code = server.wait_exit();
        assert_eq!(code, Some(101), "serve did not stop at {point}");
        let branch = format!("refs/heads/warden/{id} ");
        assert!(
            setup
                .remote_branches()
                .iter()
                .any(|b| b.starts_with(&branch)),
            "{point}: the push happened before the crash"
        );
        let expected_pulls = published.len() + usize::from(point == "publish_after_pr");
        assert_eq!(setup.fake.pulls().len(), expected_pulls, "{point}");

        // Started again: the run is interrupted, re-claimed, and publication resumes by asking
        // the remote and GitHub what is there.
        let server = Server::start(&setup.warden, TOKENS);
        setup.assert_published_once(&server, &id);
        let task = server.task(ALICE, &id);
        assert_eq!(task["runs"], 3, "{task}");
        server.terminate();
        published.push(id);
    }
    // Across both: one branch and one pull request per task, nothing else.
    assert_eq!(setup.remote_branches().len(), 2);
    assert_eq!(setup.fake.pulls().len(), 2);
    let creates = setup
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(creates, 2);
}

#[test]
fn a_rejection_keeps_the_proposal_unpublished_and_an_approval_after_cancel_is_refused() {
    let setup = Setup::new(2);
    let server = setup.serve();

    let (id, approval, hash) = setup.waiting_task(&server);
    let (status, body) = decide(&server, &approval, "reject", &hash);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "rejected");
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(task["status"], "completed", "{task}\n{}", server.stderr());
    let result = &task["result"];
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(result["publication"]["status"], "not_requested", "{result}");
    assert!(result["publication"].get("branch").is_none(), "{result}");
    assert_eq!(result["approval"]["status"], "rejected", "{result}");
    assert_eq!(result["approval"]["decided_by"], "root", "{result}");
    // The proposal is still there to apply by hand.
    let diff = server.get(ALICE, &format!("/v1/tasks/{id}/diff"));
    assert_eq!(diff["hash"].as_str(), Some(hash.as_str()));
    // Decided once: approving now is refused.
    let (status, body) = decide(&server, &approval, "approve", &hash);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "already_decided");

    // A task cancelled while it waits: its approval is rejected in the canceller's name and
    // approving it is 409.
    let (other, other_approval, other_hash) = setup.waiting_task(&server);
    let (status, body) = server.request(
        "POST",
        &format!("/v1/tasks/{other}/cancel"),
        Some(ALICE),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    let shown = server.get(ALICE, &format!("/v1/approvals/{other_approval}"));
    assert_eq!(shown["status"], "rejected", "{shown}");
    assert_eq!(shown["decided_by"], "alice", "{shown}");
    let (status, body) = decide(&server, &other_approval, "approve", &other_hash);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "already_decided");
    let task = server.task(ALICE, &other);
    assert_eq!(task["status"], "cancelled", "{task}");

    // Nothing was ever pushed or opened.
    assert!(setup.remote_branches().is_empty());
    assert!(setup.fake.requests().is_empty());
    server.terminate();
}

#[test]
fn a_publication_that_cannot_open_its_pull_request_waits_with_the_reason_and_resumes() {
    let mut setup = Setup::new(1);
    // No GitHub token in serve's environment: the push works, the pull request cannot.
    setup
        .warden
        .env
        .retain(|(key, _)| key != "WARDEN_GITHUB_TOKEN");
    let server = setup.serve();
    let (id, approval, hash) = setup.waiting_task(&server);
    let (status, body) = decide(&server, &approval, "approve", &hash);
    assert_eq!(status, 200, "{body}");
    let failed_publication = |task: &Value| {
        task["status"] == "waiting_approval" && task["result"]["publication"]["status"] == "failed"
    };
    let wait = |done: &dyn Fn(&Value) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let task = server.task(ALICE, &id);
            if done(&task) {
                return task;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{task}\n{}",
                server.stderr()
            );
            // Polled gently: the token's rate limit applies to tests too.
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    };
    let task = wait(&failed_publication);
    let result = &task["result"];
    assert_eq!(result["outcome"], "proposal", "{result}");
    // The branch is on the remote and the result says so; no pull request was opened.
    assert_eq!(
        result["publication"]["branch"],
        format!("warden/{id}").as_str()
    );
    assert_eq!(setup.remote_branches().len(), 1);
    assert!(setup.fake.requests().is_empty());
    let notices = result["notices"].to_string();
    assert!(
        notices.contains("publication failed")
            && notices.contains("WARDEN_GITHUB_TOKEN")
            && notices.contains("approve again with the same hash"),
        "{notices}"
    );
    // The task waits; it is not queued again by itself (no retry loop).
    std::thread::sleep(std::time::Duration::from_secs(2));
    let still = server.task(ALICE, &id);
    assert_eq!(still["status"], "waiting_approval", "{still}");
    // Approving again with the same hash resumes publication: the branch is found on the
    // remote, not pushed twice; without a token it stops at the pull request again.
    let (status, body) = decide(&server, &approval, "approve", &hash);
    assert_eq!(status, 200, "{body}");
    let runs = task["runs"].as_u64().unwrap();
    let again =
        wait(&|task: &Value| failed_publication(task) && task["runs"].as_u64().unwrap() > runs);
    assert_eq!(again["result"]["publication"]["status"], "failed");
    assert_eq!(again["result"]["approval"]["status"], "approved", "{again}");
    let failures = again["result"]["notices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n.as_str().unwrap().starts_with("publication failed"))
        .count();
    assert_eq!(failures, 1, "{again}");
    assert_eq!(setup.remote_branches().len(), 1);
    // Any other hash is still refused.
    let (status, _) = decide(
        &server,
        &approval,
        "approve",
        &format!("sha256:{}", "0".repeat(64)),
    );
    assert_eq!(status, 409);
    server.terminate();
}
