//! `warden run`: runs a change task in-process (`warden_server::change`): pins the repository,
//! opens a writable copy-on-write view over its snapshot, optionally runs the checks on the base
//! (`--baseline`), runs the agent, and prints the change result (a proposal commit in Warden's
//! mirror, `no_change`, a clarification or a failure). The user's checkout is only read.
//! Progress goes to stderr; the record and journal are kept under `WARDEN_HOME/tasks/` like
//! `warden ask`'s.

use crate::ask::setup_error;
use crate::progress::StderrProgress;
use crate::records::{self, RepoRecord, TaskRecord};
use crate::{text, usage};
use anyhow::Context;
use warden_protocol::{
    ApprovalStatus, ChangeOutcome, ChangeResult, Event, Failure, FailureCode, Publication,
    PublicationStatus, Role, TaskKind, TaskStatus, TranscriptEntry, Usage,
};
use warden_repo::{RepoSpec, Source};
use warden_runtime::{
    CancelFlag, Clock, EventSink, FileJournal, Journal, RecordKind, RunOutcome, RunReport,
    SystemClock,
};
use warden_server::change::{self, ChangeRun, ChangeSandbox, ChangeSetup};
use warden_server::config::Config;
use warden_server::question;
use warden_server::redact::RedactingJournal;

const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The repository: local path or git URL, optionally `@REV` (`PATH@worktree`: the work
    /// tree, uncommitted files included); with --server, the name of a repository registered
    /// on the server
    #[arg(
        long = "repo",
        value_name = "PATH|URL[@REV]",
        required_unless_present = "follow_up"
    )]
    pub repo: Option<String>,
    /// Continue an earlier change task (answer its clarification, or ask for more): same
    /// repository, on its proposal when it made one (else the commit it used), same checks
    /// unless --check is given, the earlier conversation included
    #[arg(long, value_name = "TASK", conflicts_with = "repo")]
    pub follow_up: Option<String>,
    /// Print the result as one JSON object
    #[arg(long)]
    pub json: bool,
    /// A check command run with `bash -c` in the sandbox on the candidate tree (repeatable)
    #[arg(long = "check", value_name = "CMD")]
    pub checks: Vec<String>,
    /// Run the checks once on the base commit first; if they fail there, stop with
    /// `baseline_failing`
    #[arg(long)]
    pub baseline: bool,
    /// Publish the proposal to the repository's remote as branch `warden/<task-id>`, after an
    /// approval bound to the proposal hash (`warden approve`); the task waits (exit code 4).
    /// Refused at once when the repository has no remote to push to
    #[arg(long)]
    pub publish: bool,
    /// With a proposal, also fetch it into the (local) repository as branch `warden/<task-id>`
    /// (never touches the work tree, index or current branch)
    #[arg(long)]
    pub apply: bool,
    /// The change request
    pub request: String,
}

impl RunArgs {
    /// `warden answer TASK TEXT` for a change task in-process: a follow-up with its checks.
    pub fn follow_up(task: &str, request: String, json: bool) -> RunArgs {
        RunArgs {
            repo: None,
            follow_up: Some(task.to_string()),
            json,
            checks: Vec::new(),
            baseline: false,
            publish: false,
            apply: false,
            request,
        }
    }
}

pub async fn run(config: &Config, args: RunArgs) -> anyhow::Result<u8> {
    let request = args.request.trim().to_string();
    if request.is_empty() {
        return Err(usage(anyhow::anyhow!("the change request is empty")));
    }
    if let Some(empty) = args.checks.iter().find(|c| c.trim().is_empty()) {
        return Err(usage(anyhow::anyhow!("empty --check command {empty:?}")));
    }
    let model = question::build_model(config).map_err(setup_error)?;
    let earlier = match &args.follow_up {
        Some(id) => Some(earlier_change(config, id)?),
        None => None,
    };
    let spec = match (&args.repo, &earlier) {
        (Some(text), _) => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            RepoSpec::parse(text, &cwd).map_err(usage)?
        }
        (None, Some(earlier)) => follow_up_spec(earlier)?,
        (None, None) => {
            return Err(usage(anyhow::anyhow!(
                "name the repository with --repo PATH|URL[@REV] (or continue a task with \
                 --follow-up TASK)"
            )))
        }
    };
    // A follow-up runs the checks its task ran, unless new ones are given.
    let checks: Vec<String> = match (&earlier, args.checks.is_empty()) {
        (Some(earlier), true) => earlier.checks.clone(),
        _ => args.checks.clone(),
    };
    let conversation: Vec<TranscriptEntry> = earlier
        .as_ref()
        .map(|e| e.transcript.clone())
        .unwrap_or_default();

    let progress = StderrProgress::new();
    let store = config
        .storage
        .open_repos(&config.home)
        .context("cannot open the repository store")?;
    if args.publish {
        // Refused before anything is pinned or asked of a model.
        if spec.wants_work_tree() {
            return Err(usage(anyhow::anyhow!(
                "cannot publish a change made on @worktree: the snapshot's uncommitted files \
                 would be pushed without review; commit them and run on HEAD, or leave out \
                 --publish"
            )));
        }
        warden_server::publish::publish_remote(store.git(), &spec.source)
            .map_err(|message| usage(anyhow::anyhow!(message)))?;
    }
    let mut repos = question::pin_all(&store, std::slice::from_ref(&spec), &|line| {
        progress.line(line)
    })
    .map_err(setup_error)?;
    let repo = repos
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no repository was pinned"))?;
    let clock = SystemClock;
    let now = clock.now_ms();
    let task_id = warden_store::new_task_id_at(now)?;
    let scratch = config.home.join("scratch").join(task_id.as_str());
    let mut record = TaskRecord {
        id: task_id.clone(),
        kind: TaskKind::Change,
        status: TaskStatus::Running,
        prompt: request.clone(),
        created_at: records::rfc3339(now),
        follow_up_to: earlier.as_ref().map(|e| e.id.clone()),
        repos: vec![RepoRecord {
            name: repo.pinned.name.clone(),
            source_kind: match repo.pinned.source {
                Source::Path(_) => "path".into(),
                Source::Url(_) => "url".into(),
            },
            source: repo.pinned.source.display_redacted(),
            commit: repo.pinned.commit.clone(),
            tree: repo.pinned.tree.clone(),
            root: repo.snapshot.root.display().to_string(),
        }],
        transcript: conversation.clone(),
        result: None,
        change_result: None,
        checks: checks.clone(),
    };
    let redactor = config.redactor();
    let mut file_journal = FileJournal::create(&records::journal_path(&config.home, &task_id, 1))
        .context("cannot create the run journal")?;
    records::save(&config.home, &record, &redactor)?;
    progress.emit(Event::TaskStarted {
        task_id: task_id.clone(),
        kind: TaskKind::Change,
        model: model.name(),
        manifest: question::manifest(std::slice::from_ref(&repo)),
    });
    let mut journal = RedactingJournal {
        inner: &mut file_journal,
        redactor: &redactor,
    };

    let mut baseline = Vec::new();
    let mut prepared = Vec::new();
    let (report, backend) = match ChangeSandbox::open(config, &repo, &scratch) {
        Ok(sandbox) => {
            let setup = ChangeSetup {
                config,
                task_id: &task_id,
                repo: &repo,
                sandbox: &sandbox,
                scratch_dir: &scratch,
                checks: &checks,
                created_at_ms: now,
            };
            let session = change::change_session(&setup).map_err(setup_error)?;
            let before = {
                let (session, toolchains) = (session.clone(), sandbox.toolchains.clone());
                tokio::task::spawn_blocking(move || {
                    change::before_agent(&session, &toolchains, &|l| StderrProgress::new().line(l))
                })
                .await
            };
            let before_failure = match before {
                Ok(Ok(notices)) => {
                    prepared = notices;
                    None
                }
                Ok(Err(failure)) => Some(failure),
                Err(error) => Some(Failure {
                    code: FailureCode::Infrastructure,
                    message: format!("preparing the task crashed: {error}"),
                }),
            };
            let baseline_failure = if before_failure.is_some() {
                before_failure
            } else if args.baseline && !checks.is_empty() {
                progress.line("warden: running the checks on the base commit");
                let session = session.clone();
                match tokio::task::spawn_blocking(move || change::run_baseline(&session)).await {
                    Ok(Ok(validations)) => {
                        baseline = validations;
                        None
                    }
                    Ok(Err((failure, validations))) => {
                        baseline = validations;
                        Some(failure)
                    }
                    Err(error) => Some(Failure {
                        code: FailureCode::Infrastructure,
                        message: format!("the baseline run crashed: {error}"),
                    }),
                }
            } else {
                None
            };
            let report = match baseline_failure {
                Some(failure) => {
                    let _ = journal
                        .append(
                            clock.now_ms(),
                            RecordKind::RunFinished,
                            serde_json::json!({
                                "outcome": { "failure": failure },
                                "baseline": baseline,
                            }),
                        )
                        .await;
                    failed_report(failure)
                }
                None => {
                    let tools = change::change_tools(&setup, &session).map_err(setup_error)?;
                    let cancel = CancelFlag::default();
                    let run = ChangeRun {
                        config,
                        model: model.as_ref(),
                        task_id: &task_id,
                        repo: &repo,
                        checks: &checks,
                        request: &request,
                        conversation: &conversation,
                        journal: &mut journal,
                        events: &progress,
                        clock: &clock,
                        cancel: cancel.clone(),
                        ledger: None,
                    };
                    let report = {
                        let mut future = Box::pin(change::run_change(run, &tools));
                        tokio::select! {
                            report = &mut future => Some(report),
                            _ = crate::interrupt::ctrl_c() => {
                                progress.line("warden: cancelling (Ctrl-C; press it again to exit at once)");
                                cancel.cancel();
                                tokio::time::timeout(CANCEL_GRACE, &mut future).await.ok()
                            }
                        }
                    };
                    drop(tools);
                    match report {
                        Some(report) => report,
                        None => {
                            let failure = Failure {
                                code: FailureCode::Cancelled,
                                message: "the task was cancelled while the model was answering"
                                    .into(),
                            };
                            let _ = journal
                                .append(
                                    clock.now_ms(),
                                    RecordKind::RunFinished,
                                    serde_json::json!({ "outcome": { "failure": failure } }),
                                )
                                .await;
                            failed_report(failure)
                        }
                    }
                }
            };
            drop(session);
            let backend = sandbox.backend;
            sandbox.close();
            (report, Some(backend))
        }
        Err(failure) => {
            let _ = journal
                .append(
                    clock.now_ms(),
                    RecordKind::RunFinished,
                    serde_json::json!({ "outcome": { "failure": failure } }),
                )
                .await;
            (failed_report(failure), None)
        }
    };
    let _ = warden_sandbox::remove_scratch(&scratch);
    let change::ChangeReport {
        mut result,
        mut status,
        reply,
    } = change::change_report(
        &task_id,
        model.as_ref(),
        backend,
        &checks,
        baseline,
        [change::preflight_notices(&repo), prepared].concat(),
        report,
    );
    if args.publish {
        // A diff touching sensitive files waits for a publish_sensitive approval instead.
        let approval_id = change::publication_approval_id(&task_id);
        if change::await_publication(&mut result, approval_id).is_some() {
            status = TaskStatus::WaitingApproval;
        }
    }
    record.transcript.push(TranscriptEntry {
        role: Role::User,
        text: request,
    });
    if let Some(reply) = reply {
        record.transcript.push(TranscriptEntry {
            role: Role::Agent,
            text: reply,
        });
    }
    record.status = status;
    record.change_result = Some(result.clone());
    records::save(&config.home, &record, &redactor)?;
    progress.emit(Event::TaskFinished {
        status,
        outcome: finish_line(&result),
    });
    if args.apply {
        if let (ChangeOutcome::Proposal { .. }, Source::Path(path)) =
            (&result.outcome, &repo.pinned.source)
        {
            let branch = format!("warden/{task_id}");
            match warden_repo::proposal::fetch_proposal_into(
                store.git(),
                &repo.pinned.mirror,
                task_id.as_str(),
                path,
                &branch,
            ) {
                Ok(_) => progress.line(&format!(
                    "warden: branch {branch} created in {} (work tree untouched)",
                    path.display()
                )),
                Err(error) => progress.line(&format!("warden: --apply failed: {error}")),
            }
        } else if matches!(result.outcome, ChangeOutcome::Proposal { .. }) {
            progress.line("warden: --apply needs a local repository; use warden apply --repo");
        }
    }
    if args.json {
        println!("{}", redactor.json(serde_json::to_value(&result)?));
        // Exit 3 always says how to answer, on stderr where it cannot break the JSON.
        if matches!(result.outcome, ChangeOutcome::Clarification { .. }) {
            eprintln!("warden: answer it with: warden answer {task_id} \"…\"");
        }
    } else {
        print!("{}", redactor.text(&render_change(&result)));
    }
    Ok(result.exit_code() as u8)
}

fn failed_report(failure: Failure) -> RunReport {
    RunReport {
        outcome: RunOutcome::Failed(failure),
        usage: Usage {
            cost_usd: Some(0.0),
            ..Usage::default()
        },
        messages: vec![],
    }
}

fn finish_line(result: &ChangeResult) -> String {
    match &result.outcome {
        ChangeOutcome::Proposal { proposal, .. } => format!(
            "proposal {} ({} files, +{} -{}), {} checks passed",
            crate::text::short_commit(&proposal.commit),
            proposal.diff_stat.files_changed,
            proposal.diff_stat.additions,
            proposal.diff_stat.deletions,
            proposal.validations.len()
        ),
        ChangeOutcome::NoChange { .. } => "no change: the agent left the tree as it was".into(),
        ChangeOutcome::Clarification { .. } => "the agent needs a clarification".into(),
        ChangeOutcome::Failure { failure } => {
            format!("failed ({}): {}", failure.code, failure.message)
        }
    }
}

/// The human-readable form of a change result. Model and repository text is escaped.
/// Where publication stands, once it was asked for: the branch pushed, the pull request.
fn render_publication(publication: &Publication) -> String {
    let branch = publication
        .branch
        .as_deref()
        .map(|b| format!(" branch {}", text::one_line(b)))
        .unwrap_or_default();
    let pull_request = publication
        .pr_url
        .as_deref()
        .map(|url| format!("; pull request {}", text::one_line(url)))
        .unwrap_or_default();
    match publication.status {
        PublicationStatus::NotRequested => String::new(),
        PublicationStatus::AwaitingApproval => {
            format!("Publication ({}) waits for an approval.\n", branch.trim())
        }
        PublicationStatus::Pushed => format!("Published:{branch} pushed{pull_request}\n"),
        PublicationStatus::PrOpened => format!("Published:{branch}{pull_request}\n"),
        PublicationStatus::Failed => {
            format!("Publication failed:{branch}{pull_request} (see the notices)\n")
        }
    }
}

/// The earlier change task a follow-up continues.
fn earlier_change(config: &Config, id: &str) -> anyhow::Result<TaskRecord> {
    let id: warden_protocol::TaskId = id.parse().map_err(usage)?;
    let earlier = records::load(&config.home, &id).map_err(usage)?;
    if earlier.kind != TaskKind::Change {
        return Err(usage(anyhow::anyhow!(
            "task {id} is a question: continue it with `warden ask --follow-up {id} \"…\"`"
        )));
    }
    if !earlier.status.is_terminal() && earlier.status != TaskStatus::WaitingInput {
        return Err(usage(anyhow::anyhow!(
            "task {id} is still {:?}: follow it up once it has ended",
            earlier.status
        )));
    }
    Ok(earlier)
}

/// The repository of a follow-up: the earlier task's, on its proposal when it made one (the
/// proposal commit is in Warden's mirror), else at the commit it used.
fn follow_up_spec(earlier: &TaskRecord) -> anyhow::Result<RepoSpec> {
    let mut spec = crate::ask::earlier_specs(earlier)
        .pop()
        .ok_or_else(|| usage(anyhow::anyhow!("task {} names no repository", earlier.id)))?;
    if let Some(ChangeOutcome::Proposal { proposal, .. }) =
        earlier.change_result.as_ref().map(|r| &r.outcome)
    {
        spec.rev = Some(proposal.commit.clone());
    }
    Ok(spec)
}

pub fn render_change(result: &ChangeResult) -> String {
    let mut out = String::new();
    match &result.outcome {
        ChangeOutcome::Proposal {
            proposal,
            publication,
        } => {
            out.push_str(&text::block(&proposal.summary, ""));
            out.push_str(&format!(
                "\n\nProposal {} on {} @ {}\n  commit {}\n  ref    {}\n  hash   {}\n",
                proposal.id,
                text::one_line(&proposal.repo),
                crate::text::short_commit(&proposal.base_commit),
                proposal.commit,
                proposal.reference,
                proposal.hash
            ));
            for file in &proposal.files {
                let counts = match (file.additions, file.deletions) {
                    (Some(a), Some(d)) => format!("+{a} -{d}"),
                    _ => "binary".into(),
                };
                out.push_str(&format!(
                    "  {:<8} {} ({counts})\n",
                    file.status,
                    text::one_line(&file.path)
                ));
            }
            if !proposal.sensitive_files.is_empty() {
                out.push_str(
                    "  sensitive files (publishing needs a publish_sensitive approval):\n",
                );
                for path in &proposal.sensitive_files {
                    out.push_str(&format!("    ! {}\n", text::one_line(path)));
                }
            }
            for v in &proposal.validations {
                out.push_str(&format!(
                    "  ✓ {} ({} ms, {})\n",
                    text::one_line(&v.command),
                    v.duration_ms,
                    v.sandbox
                ));
            }
            out.push_str(&format!(
                "\nSee the diff with: warden diff {}\nGet it as a branch with: warden apply {}\n",
                result.task_id, result.task_id
            ));
            out.push_str(&render_publication(publication));
            if let Some(approval) = &result.approval {
                if approval.status == ApprovalStatus::Pending {
                    out.push_str(&format!(
                        "Publishing waits for your approval ({}) of exactly this proposal:\n  \
                         warden approve {} --hash {}\n",
                        approval.kind, approval.id, approval.subject_hash
                    ));
                }
            }
        }
        ChangeOutcome::NoChange { summary } => {
            out.push_str(&format!(
                "No change was needed:\n{}\n",
                text::block(summary, "  ")
            ));
        }
        ChangeOutcome::Clarification { clarification } => {
            out.push_str(&format!(
                "The agent needs a clarification:\n{}\n\nAnswer with: warden answer {} \"…\"\n",
                text::block(&clarification.question, "  "),
                result.task_id
            ));
        }
        ChangeOutcome::Failure { failure } => {
            out.push_str(&format!(
                "Task failed ({}): {}\n",
                failure.code,
                text::block(&failure.message, "  ")
            ));
        }
    }
    for v in result.baseline.iter().filter(|v| !v.passed()) {
        out.push_str(&format!(
            "baseline ✗ {} (exit {:?})\n{}\n",
            text::one_line(&v.command),
            v.exit_code,
            text::block(&v.output_tail, "    ")
        ));
    }
    out.push_str(&text::result_footer(
        &result.task_id,
        &result.model,
        &result.usage,
        &result.notices,
    ));
    out
}
