//! The task commands without a server: the same tasks as `warden serve` runs, kept in the
//! in-process store under `WARDEN_HOME` and run by a worker in this process
//! ([`warden_service::local`]). This module parses what the person typed, submits, follows the
//! task's events on stderr and prints with the renderers `--server` uses ([`crate::render`]);
//! the checks and the running are `warden-service`'s.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;
use warden_protocol::{ChangeOutcome, ChangeResult, TaskId, TaskKind};
use warden_repo::{RepoSpec, Source};
use warden_runtime::EventSink;
use warden_service::config::Loaded;
use warden_service::local::{self, Local, LocalError, Submission};

use crate::progress::StderrProgress;
use crate::{render, text, usage};

/// A front-door error as the CLI reports it: refusals exit 2.
fn cli_error(error: LocalError) -> anyhow::Error {
    match error {
        LocalError::Usage(message) => usage(anyhow::anyhow!(message)),
        LocalError::Failed(error) => error,
    }
}

pub(crate) async fn open(config: Loaded) -> anyhow::Result<Local> {
    let old_records = config.engine.home.join("tasks");
    if old_records.is_dir() {
        // Earlier versions kept in-process tasks as files; they are not read any more.
        eprintln!(
            "warden: note: {} holds task records of an earlier version, which are not read; \
             in-process tasks are kept in {} (delete the old directory to silence this)",
            old_records.display(),
            config.engine.home.join(local::DATABASE_FILE).display()
        );
    }
    Local::open(Arc::new(config.engine), Arc::new(config.service))
        .await
        .map_err(cli_error)
}

fn task_id(text: &str) -> anyhow::Result<TaskId> {
    text.trim().parse().map_err(usage)
}

fn parse_repos(arguments: &[String]) -> anyhow::Result<Vec<RepoSpec>> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    arguments
        .iter()
        .map(|text| RepoSpec::parse(text, &cwd).map_err(usage))
        .collect()
}

/// `warden ask`.
pub async fn ask(config: Loaded, args: crate::ask::AskArgs) -> anyhow::Result<u8> {
    let follow_up_to = args.follow_up.as_deref().map(task_id).transpose()?;
    let repos = parse_repos(&args.repos)?;
    let local = open(config).await?;
    // A model that cannot be built (a missing key) is refused before anything is pinned.
    local.services().await.map_err(cli_error)?;
    let progress = StderrProgress::new();
    let submission = Submission {
        kind: TaskKind::Question,
        prompt: args.question,
        repos,
        follow_up_to,
        checks: None,
        baseline: false,
        publish: false,
        maintain: None,
    };
    let task = local
        .submit(submission, &|line| progress.line(line))
        .await
        .map_err(cli_error)?;
    follow_and_print(&local, &task.id, args.json, &progress).await
}

/// `warden run`.
pub async fn run(config: Loaded, args: crate::run::RunArgs) -> anyhow::Result<u8> {
    if let Some(empty) = args.checks.iter().find(|c| c.trim().is_empty()) {
        return Err(usage(anyhow::anyhow!("empty --check command {empty:?}")));
    }
    let follow_up_to = args.follow_up.as_deref().map(task_id).transpose()?;
    let repos = parse_repos(args.repo.as_slice())?;
    let local = open(config).await?;
    local.services().await.map_err(cli_error)?;
    let progress = StderrProgress::new();
    let submission = Submission {
        kind: TaskKind::Change,
        prompt: args.request,
        repos,
        follow_up_to,
        checks: (!args.checks.is_empty() || args.follow_up.is_none()).then(|| args.checks.clone()),
        baseline: args.baseline,
        publish: args.publish,
        maintain: None,
    };
    let task = local
        .submit(submission, &|line| progress.line(line))
        .await
        .map_err(cli_error)?;
    let code = follow_and_print(&local, &task.id, args.json, &progress).await?;
    if args.apply {
        apply_after_run(&local, &task.id, &progress).await?;
    }
    Ok(code)
}

/// `warden maintain`.
pub async fn maintain(config: Loaded, args: crate::maintain::MaintainArgs) -> anyhow::Result<u8> {
    let options = args.options().map_err(|e| usage(anyhow::anyhow!(e)))?;
    // Which database is the project's is known once it is pinned; with none configured,
    // neither can be.
    if options.vulnerable()
        && config.engine.maintain.advisory_db.is_none()
        && config.engine.maintain.osv_db.is_none()
    {
        return Err(usage(anyhow::anyhow!(
            "--select vulnerable needs a local advisory database: set `advisory_db = \
             \"/path/to/advisory-db\"` (RustSec, for Cargo) or `osv_db = \"/path/to/go-vulndb\"` \
             (OSV, for Go) under [maintain] in {}",
            config.engine.file.display()
        )));
    }
    let repos = parse_repos(std::slice::from_ref(&args.repo))?;
    let local = open(config).await?;
    // Baseline mode asks no model: none needs to be configured. Model mode does.
    if options.model() {
        local.services().await.map_err(cli_error)?;
    } else {
        local.services_without_model().await.map_err(cli_error)?;
    }
    let progress = StderrProgress::new();
    let submission = Submission {
        kind: TaskKind::Maintain,
        prompt: options.prompt(),
        repos,
        follow_up_to: None,
        checks: Some(args.checks.clone()),
        baseline: false,
        publish: args.publish,
        maintain: Some(options),
    };
    let task = local
        .submit(submission, &|line| progress.line(line))
        .await
        .map_err(cli_error)?;
    follow_and_print(&local, &task.id, args.json, &progress).await
}

/// `warden review`: the reviewer on a commit range or a task's proposal (see `review.rs`).
pub async fn review(
    config: Loaded,
    args: crate::review::ReviewArgs,
    server: Option<crate::remote::Remote>,
) -> anyhow::Result<u8> {
    use warden_engine::review::{self, ReviewRun, ReviewSubject};
    let target = args.target.clone().unwrap_or_else(|| "HEAD~1..HEAD".into());
    let Loaded {
        engine, service, ..
    } = config;
    let config = Arc::new(engine);
    let local = Local::open(Arc::clone(&config), Arc::new(service))
        .await
        .map_err(|error| usage(cli_error(error)))?;
    let services = Arc::clone(local.services().await.map_err(cli_error)?);
    let progress = StderrProgress::new();
    let redactor = config.redactor();
    // What is reviewed: (repo, base, head, tree root, browse, request, diff, validations, task).
    let (repo, base, head, root, browse, request, diff, validations, task) =
        if let Some((base, head)) = target.split_once("..") {
            let Some(repo) = &args.repo else {
                return Err(usage(anyhow::anyhow!(
                    "warden review {target} needs --repo PATH|URL"
                )));
            };
            if repo.contains('@') {
                return Err(usage(anyhow::anyhow!(
                    "--repo takes no @REV here: name the range as BASE..HEAD"
                )));
            }
            let head = if head.is_empty() { "HEAD" } else { head };
            let mut spec = parse_repos(std::slice::from_ref(repo))?.remove(0);
            if head != "HEAD" {
                spec = parse_repos(&[format!("{repo}@{head}")])?.remove(0);
            }
            let pinned = local
                .pin_to_read(&spec, &|line| progress.line(line))
                .await
                .map_err(|error| usage(cli_error(error)))?;
            let (git, mirror, head_commit, base_rev) = (
                local.repos.git().clone(),
                pinned.pinned.mirror.clone(),
                pinned.pinned.commit.clone(),
                base.to_string(),
            );
            let reading = redactor.clone();
            let material = tokio::task::spawn_blocking(move || {
                review::range_material(&git, &mirror, &base_rev, &head_commit, &reading)
            })
            .await
            .context("reading the range crashed")?
            .map_err(|message| usage(anyhow::anyhow!(message)))?;
            (
                pinned.pinned.name.clone(),
                material.base,
                pinned.pinned.commit.clone(),
                pinned.snapshot.root.clone(),
                pinned.pinned.browse.clone(),
                material.messages,
                material.diff,
                Vec::new(),
                None,
            )
        } else if let Some(server) = &server {
            // A server's task: its proposal as a bundle, unpacked beside the user's clone
            // (which holds the base), read like Warden's mirror.
            let id = task_id(&target)?;
            let found = server.get(&format!("/v1/tasks/{id}")).await?;
            let Some(proposal) = found
                .pointer("/result/proposal")
                .and_then(|p| serde_json::from_value::<warden_protocol::Proposal>(p.clone()).ok())
            else {
                return Err(usage(anyhow::anyhow!(
                    "task {id} has no proposal to review"
                )));
            };
            let (_, bundle) = server
                .get_bytes(
                    &format!("/v1/tasks/{id}/proposal"),
                    warden_engine::diff::MAX_BUNDLE_BYTES,
                )
                .await?;
            let clone = match &args.repo {
                Some(path) => std::path::PathBuf::from(path),
                None => std::env::current_dir().context("cannot read the current directory")?,
            };
            let (git, repos, reading, task_text, subject) = (
                local.repos.git().clone(),
                local.repos.clone(),
                redactor.clone(),
                id.to_string(),
                proposal.clone(),
            );
            let (root, diff) = tokio::task::spawn_blocking(move || {
                let unbundled = warden_repo::proposal::unbundle_proposal(
                    &git,
                    &bundle,
                    &task_text,
                    &subject.base_commit,
                    &clone,
                )
                .map_err(|e| e.to_string())?;
                let pinned = warden_repo::PinnedRepo {
                    name: subject.repo.clone(),
                    source: warden_repo::Source::Path(clone.clone()),
                    commit: subject.commit.clone(),
                    tree: subject.tree.clone(),
                    mirror: unbundled.repo().to_path_buf(),
                    browse: None,
                    work_tree: None,
                };
                let snapshot = repos
                    .snapshot(&pinned)
                    .map_err(|e| format!("cannot read the proposal's tree: {e}"))?;
                let material = warden_engine::review::range_material(
                    &git,
                    unbundled.repo(),
                    &subject.base_commit,
                    &subject.commit,
                    &reading,
                )?;
                Ok::<_, String>((snapshot.root, material.diff))
            })
            .await
            .context("reading the proposal crashed")?
            .map_err(|message| usage(anyhow::anyhow!(message)))?;
            (
                proposal.repo.clone(),
                proposal.base_commit.clone(),
                proposal.commit.clone(),
                root,
                None,
                found["prompt"].as_str().unwrap_or_default().to_string(),
                diff,
                proposal.validations.clone(),
                Some(id.to_string()),
            )
        } else {
            let id = task_id(&target)?;
            let found = local.task(&id).await.map_err(cli_error)?;
            let Some(proposal) = proposal_of(found.result.as_ref()) else {
                return Err(usage(anyhow::anyhow!(
                    "task {id} has no proposal to review"
                )));
            };
            let (spec, mirror) = local.mirror(&found).await.map_err(cli_error)?;
            let pinned = warden_repo::PinnedRepo {
                name: proposal.repo.clone(),
                source: spec.source.clone(),
                commit: proposal.commit.clone(),
                tree: proposal.tree.clone(),
                mirror: mirror.clone(),
                browse: None,
                work_tree: None,
            };
            let (repos, git, reading, task_text, subject) = (
                local.repos.clone(),
                local.repos.git().clone(),
                redactor.clone(),
                id.to_string(),
                proposal.clone(),
            );
            let (root, diff) = tokio::task::spawn_blocking(move || {
                let snapshot = repos
                    .snapshot(&pinned)
                    .map_err(|e| format!("cannot read the proposal's tree: {e}"))?;
                let diff = warden_engine::diff::redacted_proposal_diff(
                    &git, &mirror, &task_text, &subject, &reading,
                )?
                .map(|(diff, _)| diff)
                .ok_or_else(|| "the proposal is no longer in Warden's mirror".to_string())?;
                Ok::<_, String>((snapshot.root, diff))
            })
            .await
            .context("reading the proposal crashed")?
            .map_err(|message| anyhow::anyhow!(message))?;
            (
                proposal.repo.clone(),
                proposal.base_commit.clone(),
                proposal.commit.clone(),
                root,
                None,
                found.prompt.clone(),
                diff,
                proposal.validations.clone(),
                Some(id.to_string()),
            )
        };
    let own_model = match review::reviewer_model(&config) {
        None => None,
        Some(Ok(model)) => Some(model),
        Some(Err(message)) => return Err(usage(anyhow::anyhow!(message))),
    };
    let model: &dyn warden_runtime::Model = own_model.as_deref().unwrap_or(services.model.as_ref());
    let mut journal = warden_runtime::MemoryJournal::default();
    let reviewed = review::review(
        ReviewRun {
            config: &config,
            model,
            journal: &mut journal,
            events: &progress,
            clock: &warden_runtime::SystemClock,
            cancel: warden_runtime::CancelFlag::default(),
            ledger: None,
        },
        &ReviewSubject {
            repo: &repo,
            commit: &head,
            tree_root: &root,
            browse,
            request: &request,
            diff: &diff,
            validations: &validations,
            earlier: &[],
        },
    )
    .await;
    let reviewed = match reviewed {
        Ok(reviewed) => reviewed,
        Err((failure, _)) => {
            return Err(anyhow::anyhow!(
                "the review failed ({}): {}",
                failure.code,
                text::one_line(&failure.message)
            ))
        }
    };
    let blocking = reviewed
        .findings
        .iter()
        .any(|f| review::blocks(f, config.gates.review_confidence));
    let report = crate::review::ReviewReport {
        repo,
        base,
        head,
        task,
        review: warden_protocol::Review {
            verdict: if blocking { "blocked" } else { "pass" }.into(),
            explanation: reviewed.explanation,
            findings: reviewed.findings,
            rounds: 1,
            model: model.name(),
            usage: reviewed.usage,
        },
    };
    if args.json {
        println!("{}", text::json_line(&serde_json::to_value(&report)?));
    } else {
        print!("{}", text::lines(&crate::review::render(&report)));
    }
    Ok(report.exit_code())
}

/// `warden vulns`: pins the repository as `ask` does, then profiles and scans the pinned
/// tree (no task). Every way of not scanning is exit 2, so that 1 always means findings.
pub async fn vulns(config: Loaded, args: crate::vulns::VulnsArgs) -> anyhow::Result<u8> {
    let Loaded {
        engine: config,
        service,
        ..
    } = config;
    if config.maintain.advisory_db.is_none() && config.maintain.osv_db.is_none() {
        return Err(usage(anyhow::anyhow!(
            "warden vulns needs a local advisory database: set `advisory_db = \
             \"/path/to/advisory-db\"` (RustSec, for Cargo) or `osv_db = \"/path/to/go-vulndb\"` \
             (OSV, for Go) under [maintain] in {}",
            config.file.display()
        )));
    }
    let spec = parse_repos(std::slice::from_ref(&args.repo))?.remove(0);
    let config = Arc::new(config);
    let local = Local::open(Arc::clone(&config), Arc::new(service))
        .await
        .map_err(|error| usage(cli_error(error)))?;
    let progress = StderrProgress::new();
    let repo = local
        .pin_to_read(&spec, &|line| progress.line(line))
        .await
        .map_err(|error| usage(cli_error(error)))?;
    let (root, tree) = (repo.snapshot.root.clone(), repo.snapshot.tree.clone());
    let now_ms = warden_runtime::Clock::now_ms(&warden_runtime::SystemClock);
    let scanning = Arc::clone(&config);
    let found = tokio::task::spawn_blocking(move || {
        warden_engine::maintain::vulnerabilities(&scanning, &root, &tree, now_ms)
    })
    .await
    .context("the scan crashed")?
    .map_err(|failure| match failure.code {
        warden_protocol::FailureCode::UnsupportedProject => {
            usage(anyhow::anyhow!("{}: {}", failure.code, failure.message))
        }
        _ => usage(anyhow::anyhow!(failure.message)),
    })?;
    let report = crate::vulns::VulnsReport {
        repo: repo.pinned.name.clone(),
        commit: repo.pinned.commit.clone(),
        ecosystem: found.ecosystem.name(),
        lockfile: found.ecosystem.lock_name(),
        scan: found.scan,
        stdlib: found.stdlib,
        database_age: found.database_age,
        informational: (args.informational || args.deny_informational)
            .then_some(found.informational),
        deny_informational: args.deny_informational,
        notices: repo.notices.clone(),
    };
    if args.json {
        if let Some(warning) = report.database_age.warning() {
            progress.line(&format!("warden: warning: {warning}"));
        }
        println!("{}", text::json_pretty(&report)?);
    } else {
        print!("{}", text::lines(&crate::vulns::render(&report)));
    }
    Ok(report.exit_code())
}

/// Runs the task here until it settles, showing its events, then prints it. The first Ctrl-C
/// cancels the task (its cancelled result is printed; the command exits 130); a second one
/// exits at once.
async fn follow_and_print(
    local: &Local,
    id: &TaskId,
    json: bool,
    progress: &StderrProgress,
) -> anyhow::Result<u8> {
    follow_and_print_after(local, id, 0, json, progress).await
}

/// [`follow_and_print`], showing only the events after the task's event `after`.
async fn follow_and_print_after(
    local: &Local,
    id: &TaskId,
    after: u64,
    json: bool,
    progress: &StderrProgress,
) -> anyhow::Result<u8> {
    let interrupt = async {
        crate::interrupt::ctrl_c().await;
        progress.line("warden: cancelling (Ctrl-C; press it again to exit at once)");
    };
    let task = local
        .drive_after(id, after, &|event| progress.emit(event), interrupt)
        .await
        .map_err(cli_error)?;
    render::print_outcome(&local::task_json(&task), json)
}

/// `--apply`: the proposal fetched into the (local) repository as branch `warden/<task-id>`.
async fn apply_after_run(
    local: &Local,
    id: &TaskId,
    progress: &StderrProgress,
) -> anyhow::Result<()> {
    let task = local.task(id).await.map_err(cli_error)?;
    if proposal_of(task.result.as_ref()).is_none() {
        return Ok(());
    }
    let (spec, mirror) = local.mirror(&task).await.map_err(cli_error)?;
    let Source::Path(path) = &spec.source else {
        progress.line("warden: --apply needs a local repository; use warden apply --repo");
        return Ok(());
    };
    let branch = format!("warden/{id}");
    match warden_repo::proposal::fetch_proposal_into(
        local.repos.git(),
        &mirror,
        id.as_str(),
        path,
        &branch,
    ) {
        Ok(_) => progress.line(&format!(
            "warden: branch {branch} created in {} (work tree untouched)",
            path.display()
        )),
        Err(error) => progress.line(&format!("warden: --apply failed: {error}")),
    }
    Ok(())
}

/// The proposal of a task's result (`task.result`), if it made one.
fn proposal_of(result: Option<&serde_json::Value>) -> Option<warden_protocol::Proposal> {
    let result: ChangeResult = serde_json::from_value(result?.clone()).ok()?;
    match result.outcome {
        ChangeOutcome::Proposal { proposal, .. } => Some(*proposal),
        _ => None,
    }
}

/// `warden answer TASK TEXT`: a task waiting for input resumes with the answer; a finished one
/// is continued by a follow-up of its kind (a change on its proposal).
pub async fn answer(config: Loaded, task: &str, reply: &str, json: bool) -> anyhow::Result<u8> {
    let id = task_id(task)?;
    let local = open(config).await?;
    // Only what happens from the answer on is shown.
    let after = local.last_event(&id).await.map_err(cli_error)?;
    let next = local.answer(&id, reply).await.map_err(cli_error)?;
    let progress = StderrProgress::new();
    if next.id == id {
        eprintln!("warden: {id} resumes");
        follow_and_print_after(&local, &next.id, after, json, &progress).await
    } else {
        eprintln!("warden: {id} had ended; the answer started {}", next.id);
        follow_and_print(&local, &next.id, json, &progress).await
    }
}

/// `warden say TASK TEXT`: the message goes through the front door (to a running task's next
/// turn, as an answer, or as a follow-up) and what became of it is printed; nothing is
/// followed.
pub async fn say(config: Loaded, task: &str, text: &str, json: bool) -> anyhow::Result<u8> {
    let id = task_id(task)?;
    let local = open(config).await?;
    let before = local.task(&id).await.map_err(cli_error)?.status;
    let next = local.answer(&id, text).await.map_err(cli_error)?;
    crate::render::print_said(
        &id,
        Some(before),
        &warden_service::task_view::view_json(&next),
        json,
    )
}

/// `warden approve ID --hash H`: decided through the front door, then the task runs here:
/// its proposal is published. Approving again with the same hash resumes a publication a
/// crash interrupted.
pub async fn approve(config: Loaded, args: crate::approve::ApproveArgs) -> anyhow::Result<u8> {
    let mut config = config;
    if let Some(text) = &args.github {
        let github = warden_service::github_client::GithubRepo::parse(text)
            .ok_or_else(|| usage(anyhow::anyhow!("--github {text:?} is not owner/name")))?;
        // This process publishes: the repository's target is the one given.
        let repos = Local::approval_repos(&config.engine.home, args.id.trim())
            .await
            .map_err(cli_error)?;
        for repo in repos {
            config.service.github.targets.retain(|t| t.repo != repo);
            config
                .service
                .github
                .targets
                .push(warden_service::config::PublishTarget {
                    repo,
                    github: github.clone(),
                    base: None,
                });
        }
    }
    let local = open(config).await?;
    let approved = local
        .approve(args.id.trim(), args.hash.trim())
        .await
        .map_err(cli_error)?;
    let decided = approved.approval;
    // A run approval (the risk gate's `approve_before_run`): the change runs now, here.
    if decided.kind == warden_engine::gates::RUN_APPROVAL_KIND {
        eprintln!(
            "warden: approved {}; running task {}",
            decided.id, decided.task_id
        );
        local.services().await.map_err(cli_error)?;
        let last = local
            .last_event(&decided.task_id)
            .await
            .map_err(cli_error)?;
        let progress = StderrProgress::new();
        return follow_and_print_after(&local, &decided.task_id, last, false, &progress).await;
    }
    if approved.resumed {
        eprintln!(
            "warden: resuming the publication approved by {}",
            decided.id
        );
    }
    eprintln!(
        "warden: approved {}; publishing task {}",
        decided.id, decided.task_id
    );
    let progress = StderrProgress::new();
    let task = local
        .drive_publication(&decided.task_id, &|event| progress.emit(event))
        .await
        .map_err(cli_error)?;
    let code = render::print_outcome(&local::task_json(&task), false)?;
    // A publication that failed says why on stderr too, and how to finish it.
    let task = local.task(&decided.task_id).await.map_err(cli_error)?;
    match Local::publication_failure(&task) {
        Some(notice) => Err(anyhow::anyhow!("{}", text::one_line(&notice))),
        None => Ok(code),
    }
}

/// `warden reject ID`: nothing is published; the task ends with its proposal unpublished.
pub async fn reject(config: Loaded, args: crate::approve::RejectArgs) -> anyhow::Result<u8> {
    let local = open(config).await?;
    let decided = local
        .decide(args.id.trim(), warden_protocol::Decision::Reject, None)
        .await
        .map_err(cli_error)?;
    let progress = StderrProgress::new();
    local
        .drive_publication(&decided.task_id, &|event| progress.emit(event))
        .await
        .map_err(cli_error)?;
    if decided.kind == warden_engine::gates::RUN_APPROVAL_KIND {
        println!(
            "rejected {}: task {} ends with nothing run",
            decided.id, decided.task_id
        );
    } else {
        println!("rejected {}: nothing was published", decided.id);
    }
    Ok(0)
}

/// `warden cancel TASK`: the task is cancelled; a run of it in another process stops within
/// about a second.
pub async fn cancel(config: Loaded, task: &str, json: bool) -> anyhow::Result<u8> {
    let id = task_id(task)?;
    let local = open(config).await?;
    let cancelled = local.cancel(&id).await.map_err(cli_error)?;
    let view = local::task_json(&cancelled);
    if json {
        println!("{}", text::json_line(&view));
    } else {
        println!(
            "{id}: {}",
            text::one_line(view["status"].as_str().unwrap_or("unknown"))
        );
    }
    Ok(0)
}

/// `warden retry TASK`: the finished task again as a new task on the same commits, run here.
pub async fn retry(config: Loaded, task: &str, json: bool) -> anyhow::Result<u8> {
    let id = task_id(task)?;
    let local = open(config).await?;
    local.services().await.map_err(cli_error)?;
    let retried = local.retry(&id).await.map_err(cli_error)?;
    eprintln!("warden: retrying {id} as {}", retried.id);
    let progress = StderrProgress::new();
    follow_and_print(&local, &retried.id, json, &progress).await
}

/// `warden show`.
pub async fn show(config: Loaded, task: &str, json: bool) -> anyhow::Result<u8> {
    let id = task_id(task)?;
    let local = open(config).await?;
    let task = local.task(&id).await.map_err(cli_error)?;
    render::print_task(&local::task_json(&task), json)
}

/// `warden tasks`.
pub async fn tasks(config: Loaded, json: bool) -> anyhow::Result<u8> {
    let local = open(config).await?;
    let tasks: Vec<_> = local
        .list(200)
        .await
        .map_err(cli_error)?
        .iter()
        .map(local::task_json)
        .collect();
    render::print_tasks(&tasks, json)?;
    Ok(0)
}

/// `warden logs TASK`: every run's journal, its hash chain verified; `--follow` runs the task
/// here if it still waits for a worker (a run of a process that died is re-queued once its
/// lease expires and resumes from its journal) and prints its result.
pub async fn logs(config: Loaded, task: &str, follow: bool, json: bool) -> anyhow::Result<u8> {
    let id = task_id(task)?;
    let local = open(config).await?;
    if follow {
        let progress = StderrProgress::new();
        return follow_and_print(&local, &id, json, &progress).await;
    }
    let journals = local.journals(&id).await.map_err(cli_error)?;
    let mut broken = Vec::new();
    for journal in &journals {
        if json {
            for record in &journal.records {
                println!("{}", text::json_line(record));
            }
        } else {
            render::print_run_timeline(&id, Some(&json!(journal.run)), &journal.records);
        }
        if !journal.chain_ok {
            broken.push(journal.run.to_string());
        }
    }
    if !broken.is_empty() {
        anyhow::bail!(
            "journal hash chain broken in run {} of {id}: a record was changed, removed or \
             inserted after it was written",
            broken.join(", ")
        );
    }
    eprintln!("warden: journal hash chain verified");
    Ok(0)
}

/// `warden diff TASK`.
pub async fn diff(config: Loaded, args: &crate::diff::DiffArgs) -> anyhow::Result<u8> {
    let id = task_id(&args.task)?;
    let local = open(config).await?;
    let (proposal, diff, truncated) = local.diff(&id).await.map_err(cli_error)?;
    let view = json!({
        "task_id": id.as_str(),
        "repo": proposal.repo,
        "base_commit": proposal.base_commit,
        "commit": proposal.commit,
        "hash": proposal.hash,
        "diff": diff,
        "truncated": truncated,
        "sensitive_files": proposal.sensitive_files,
    });
    crate::diff::print_diff(&view, Some(&proposal), args);
    Ok(0)
}

/// `warden apply TASK`: the proposal fetched into a repository as a branch.
pub async fn apply(config: Loaded, args: crate::apply::ApplyArgs) -> anyhow::Result<u8> {
    let id = task_id(&args.task)?;
    let local = open(config).await?;
    let task = local.task(&id).await.map_err(cli_error)?;
    if task.kind != TaskKind::Change {
        return Err(usage(anyhow::anyhow!("task {id} is not a change task")));
    }
    let Some(proposal) = proposal_of(task.result.as_ref()) else {
        return Err(usage(anyhow::anyhow!(
            "task {id} has no proposal (status {})",
            render::wire_name(&json!(task.status))
        )));
    };
    let (spec, mirror) = local.mirror(&task).await.map_err(cli_error)?;
    let target: PathBuf = match (&args.repo, &spec.source) {
        (Some(path), _) => path.clone(),
        (None, Source::Path(path)) => path.clone(),
        _ => std::env::current_dir().context("cannot read the current directory")?,
    };
    let branch = args
        .branch
        .clone()
        .unwrap_or_else(|| format!("warden/{id}"));
    crate::apply::fetch(local.repos.git(), &mirror, &id, &proposal, &target, &branch)
}
