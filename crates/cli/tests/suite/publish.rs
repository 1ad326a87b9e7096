//! `warden approve` publishing to a local bare remote and a local fake of GitHub's pulls API:
//! one branch and one pull request whatever crashes in between (a planned exit right after the
//! push or right after GitHub opened the pull request, a create whose response is lost, a 502),
//! GitHub's refusals reported clearly without the token, the pull request body carrying the
//! task, summary and validations but no secret, and wrong hashes refused before anything moves.

use super::support::Warden;
use serde_json::json;
use std::path::{Path, PathBuf};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::github_fake::{Fault, GithubFake};
use warden_test_support::model_server::{openai, ScriptedModelServer};

const TOKEN: &str = "ghp_fake_token_0123456789abcdef";
const OWNER: &str = "acme";
const NAME: &str = "widgets";

struct Setup {
    repo: TempRepo,
    _remote_dir: tempfile::TempDir,
    remote: PathBuf,
    fake: GithubFake,
    _model: ScriptedModelServer,
    warden: Warden,
    task_id: String,
    approval: String,
    hash: String,
    commit: String,
}

impl Setup {
    /// A change task run with `--publish` against a repository whose `origin` is a bare
    /// remote holding `main`, with a GitHub fake for `acme/widgets` over that remote.
    fn new() -> Setup {
        let repo = TempRepo::new();
        repo.write("src/lib.txt", "alpha\nbeta\ngamma\n")
            .write("check.sh", "grep -q BETA src/lib.txt\n");
        repo.commit("initial");
        let remote_dir = tempfile::tempdir().unwrap();
        let remote = remote_dir.path().join("widgets.git");
        repo.git(&[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().unwrap(),
        ]);
        repo.git(&["remote", "add", "origin", remote.to_str().unwrap()]);
        repo.git(&["push", "-q", "origin", "main"]);
        let fake = GithubFake::start(&remote, OWNER, NAME, TOKEN);
        let model = ScriptedModelServer::start_blocking(vec![
            openai::tool_call(
                "edit_file",
                &json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}).to_string(),
            ),
            openai::tool_call(
                "submit_change",
                &json!({"summary": "Uppercase beta\n\nThe check wants BETA."}).to_string(),
            ),
        ]);
        let warden = Warden::openai(&model.url())
            .with("WARDEN_GITHUB_API_URL", &fake.url())
            .with("WARDEN_GITHUB_TOKEN", TOKEN);
        let run = warden.run(&[
            "run",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "--check",
            "bash check.sh",
            "--publish",
            "make beta uppercase",
        ]);
        assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
        let result = run.json();
        assert_eq!(result["publication"]["status"], "awaiting_approval");
        Setup {
            task_id: result["task_id"].as_str().unwrap().to_string(),
            approval: result["approval"]["id"].as_str().unwrap().to_string(),
            hash: result["approval"]["subject_hash"]
                .as_str()
                .unwrap()
                .to_string(),
            commit: result["proposal"]["commit"].as_str().unwrap().to_string(),
            repo,
            _remote_dir: remote_dir,
            remote,
            fake,
            _model: model,
            warden,
        }
    }

    fn approve(&self, extra: &[&str]) -> super::support::Run {
        let mut args = vec!["approve", &self.approval, "--hash", &self.hash];
        args.extend_from_slice(extra);
        self.warden.run(&args)
    }

    fn approve_crashing_at(&self, point: &str) {
        let mut command = self.warden.command(&[
            "approve",
            &self.approval,
            "--hash",
            &self.hash,
            "--github",
            "acme/widgets",
        ]);
        command.env("WARDEN_FAILPOINT", point);
        #[allow(clippy::disallowed_methods)]
        let output = command.output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(101),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn branch(&self) -> String {
        format!("warden/{}", self.task_id)
    }

    /// Every `refs/heads/warden/*` on the remote, with its commit.
    fn remote_warden_branches(&self) -> Vec<String> {
        let text = bare_git(
            &self.remote,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname)",
                "refs/heads/warden/",
            ],
        );
        text.lines().map(str::to_string).collect()
    }

    fn publication(&self) -> serde_json::Value {
        let shown = self.warden.run(&["show", &self.task_id, "--json"]);
        let record: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
        record["result"]["publication"].clone()
    }

    /// One branch at the proposal commit and one pull request for it, recorded as opened.
    fn assert_published_once(&self) {
        assert_eq!(
            self.remote_warden_branches(),
            vec![format!("refs/heads/{} {}", self.branch(), self.commit)]
        );
        let pulls = self.fake.pulls();
        assert_eq!(pulls.len(), 1, "{pulls:#?}");
        let pull = &pulls[0];
        assert_eq!(pull["head"]["ref"], self.branch().as_str());
        assert_eq!(pull["head"]["sha"], self.commit.as_str());
        assert_eq!(pull["base"]["ref"], "main");
        let publication = self.publication();
        assert_eq!(publication["status"], "pr_opened", "{publication}");
        assert_eq!(publication["pr_url"], pull["html_url"]);
        assert_eq!(publication["branch"], self.branch().as_str());
        // `warden show` says where it went.
        let shown = self.warden.run(&["show", &self.task_id]);
        let expected = format!(
            "Published: branch {}; pull request {}",
            self.branch(),
            pull["html_url"].as_str().unwrap()
        );
        assert!(shown.stdout.contains(&expected), "{}", shown.stdout);
    }
}

pub(super) fn bare_git(dir: &Path, args: &[&str]) -> String {
    #[allow(clippy::disallowed_methods)]
    let output = std::process::Command::new("git")
        .arg(format!("--git-dir={}", dir.display()))
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[test]
fn approval_pushes_the_branch_and_opens_one_pull_request_with_the_facts_and_no_secret() {
    let setup = Setup::new();
    // Nothing left the machine before the approval.
    assert!(setup.remote_warden_branches().is_empty());
    assert!(setup.fake.requests().is_empty());
    // The target comes from [[publish]] for this repository's name.
    let repo_name = setup
        .repo
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    std::fs::write(
        setup.warden.home.path().join("warden.toml"),
        format!("[[publish]]\nrepo = {repo_name:?}\ngithub = \"acme/widgets\"\nbase = \"main\"\n"),
    )
    .unwrap();

    let approved = setup.approve(&[]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    setup.assert_published_once();
    // Only publishing is shown, not the run that made the proposal again.
    assert!(
        !approved.stderr.contains("thinking (turn"),
        "{}",
        approved.stderr
    );
    assert!(
        !approved.stderr.contains("→ edit_file"),
        "{}",
        approved.stderr
    );
    let pull = &setup.fake.pulls()[0];
    assert!(
        approved.stdout.contains(pull["html_url"].as_str().unwrap()),
        "{}",
        approved.stdout
    );
    assert_eq!(pull["title"], "Uppercase beta");
    let body = pull["body"].as_str().unwrap();
    for expected in [
        setup.task_id.as_str(),
        "The check wants BETA.",
        "| `bash check.sh` | 0 |",
        setup.hash.as_str(),
        "src/lib.txt",
    ] {
        assert!(
            body.contains(expected),
            "{expected:?} missing from:\n{body}"
        );
    }
    // The requests carry GitHub's headers; no request or journal holds a secret.
    let requests = setup.fake.requests();
    assert!(requests.iter().any(|r| r.method == "GET"
        && r.query.contains("head=acme%3Awarden%2F")
        && r.query.contains("state=all")));
    for request in &requests {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert_eq!(
            request.header("accept"),
            Some("application/vnd.github+json")
        );
        assert_eq!(request.header("x-github-api-version"), Some("2022-11-28"));
        assert!(request.header("user-agent").unwrap().starts_with("warden/"));
        let body = request.body.to_string();
        assert!(
            !body.contains(TOKEN) && !body.contains("sk-test-key"),
            "{body}"
        );
    }
    // Nothing Warden keeps (the task store, its journals, mirrors) holds the token.
    let home = setup.warden.home.path();
    for entry in walk(home) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
            "{} holds the token",
            entry.display()
        );
    }
    // The publishing run's journal: the decision it acts on, then each side effect's intent
    // before its outcome.
    let logs = setup.warden.run(&["logs", &setup.task_id, "--json"]);
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    let journal: String = logs
        .stdout
        .lines()
        .skip_while(|l| !l.contains("approval_decided"))
        .map(|l| format!("{l}\n"))
        .collect();
    let kinds: Vec<String> = journal
        .lines()
        .map(|l| {
            let record: serde_json::Value = serde_json::from_str(l).unwrap();
            let payload = &record["payload"];
            let what = ["push", "open_pr"]
                .into_iter()
                .find(|k| payload.get(*k).is_some())
                .unwrap_or("-");
            format!("{} {what}", record["kind"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "approval_decided -",
            "side_effect_intent push",
            "side_effect_outcome push",
            "side_effect_intent open_pr",
            "side_effect_outcome open_pr",
        ],
        "{journal}"
    );

    // Single use.
    let again = setup.approve(&[]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert_eq!(setup.fake.pulls().len(), 1);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn a_crash_between_push_and_record_ends_with_one_branch_and_one_pull_request() {
    let setup = Setup::new();
    setup.approve_crashing_at("publish_after_push");
    assert_eq!(setup.remote_warden_branches().len(), 1);
    assert!(setup.fake.pulls().is_empty());
    assert_eq!(setup.publication()["status"], "awaiting_approval");

    let resumed = setup.approve(&["--github", "acme/widgets"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed.stdout.contains("already there"),
        "{}",
        resumed.stdout
    );
    setup.assert_published_once();
}

#[test]
fn a_crash_between_opening_the_pull_request_and_recording_it_is_reconciled_by_asking_github() {
    let setup = Setup::new();
    setup.approve_crashing_at("publish_after_pr");
    assert_eq!(setup.fake.pulls().len(), 1);
    // The task does not know about the pull request yet (its journal holds the intent).
    assert_ne!(setup.publication()["status"], "pr_opened");
    // Someone closes it meanwhile: GitHub would accept a new one for the branch, but the
    // closed one is the publication and no second one is opened.
    setup.fake.close(1);

    let resumed = setup.approve(&["--github", "acme/widgets"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed.stdout.contains("already there"),
        "{}",
        resumed.stdout
    );
    setup.assert_published_once();
    // The second run asked, and never tried to create again.
    let creates = setup
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(creates, 1);
}

#[test]
fn a_lost_response_and_a_bad_gateway_are_reconciled_without_a_second_pull_request() {
    let setup = Setup::new();
    // First create: 502, nothing created. Second: created, but the response is cut.
    setup.fake.inject(Fault::FailCreate(502));
    setup.fake.inject(Fault::CreateThenDrop);
    let approved = setup.approve(&["--github", "acme/widgets"]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    setup.assert_published_once();
    let creates = setup
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(creates, 2);
}

#[test]
fn a_create_that_went_through_behind_a_502_is_found_not_repeated() {
    let setup = Setup::new();
    setup.fake.inject(Fault::CreateThenFail);
    let approved = setup.approve(&["--github", "acme/widgets"]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    setup.assert_published_once();
}

#[test]
fn refusals_are_reported_without_the_token_and_the_same_approval_resumes() {
    let setup = Setup::new();
    // A wrong hash moves nothing.
    let wrong = setup.warden.run(&[
        "approve",
        &setup.approval,
        "--hash",
        &format!("sha256:{}", "0".repeat(64)),
        "--github",
        "acme/widgets",
    ]);
    assert_eq!(wrong.code, 2, "{}", wrong.stderr);
    assert!(setup.remote_warden_branches().is_empty());
    assert!(setup.fake.requests().is_empty());

    // A revoked token: the branch is pushed, GitHub says 401, publication failed.
    let revoked = "ghp_revoked_token_9876543210";
    let refused = setup
        .warden
        .command(&[
            "approve",
            &setup.approval,
            "--hash",
            &setup.hash,
            "--github",
            "acme/widgets",
        ])
        .env("WARDEN_GITHUB_TOKEN", revoked)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("Bad credentials"),
        "{stderr}"
    );
    assert!(!stderr.contains(revoked), "{stderr}");
    assert_eq!(setup.publication()["status"], "failed");
    assert_eq!(setup.remote_warden_branches().len(), 1);
    assert!(setup.fake.pulls().is_empty());

    // An unknown repository: 404, named as such.
    let missing = setup.approve(&["--github", "acme/nothing"]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(missing.stderr.contains("404"), "{}", missing.stderr);
    assert!(setup.fake.pulls().is_empty());

    // Fixed: the same approval completes publication.
    let resumed = setup.approve(&["--github", "acme/widgets"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    setup.assert_published_once();
}

#[test]
fn without_a_github_target_publication_stops_at_the_push() {
    let setup = Setup::new();
    let approved = setup.approve(&[]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    assert!(
        approved.stdout.contains("no pull request"),
        "{}",
        approved.stdout
    );
    assert_eq!(setup.remote_warden_branches().len(), 1);
    assert!(setup.fake.requests().is_empty());
    assert_eq!(setup.publication()["status"], "pushed");
}
