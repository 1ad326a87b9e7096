//! `warden ask`: runs a question task in-process (pinning, snapshots, the agent loop and
//! citation checks live in `warden_server::question`), shows live progress on stderr, keeps the
//! task record and journal under `WARDEN_HOME/tasks/`, and prints the result — human-readable,
//! or the exact JSON with `--json`.

use crate::progress::StderrProgress;
use crate::records::{self, RepoRecord, TaskRecord};
use crate::{text, usage};
use anyhow::Context;
use std::path::PathBuf;
use warden_protocol::{
    Event, Failure, FailureCode, QuestionOutcome, QuestionResult, Role, TaskId, TaskKind,
    TaskStatus, TranscriptEntry,
};
use warden_repo::{RepoSpec, Source};
use warden_runtime::{
    CancelFlag, Clock, EventSink, FileJournal, Journal, RecordKind, RunOutcome, RunReport,
    SystemClock,
};
use warden_server::config::Config;
use warden_server::question::{self, QuestionReport, QuestionRun, SetupError, TaskSandbox};
use warden_server::redact::RedactingJournal;

/// How long a cancelled run may take to stop by itself before it is abandoned.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// A repository: local path or git URL, optionally `@REV` (`PATH@worktree`: the work tree,
    /// uncommitted files included) (repeatable); with --server, the name of a repository
    /// registered on the server
    #[arg(long = "repo", value_name = "PATH|URL[@REV]")]
    pub repos: Vec<String>,
    /// Print the result as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Continue the conversation of an earlier task (its repositories and commits are reused
    /// unless --repo is given)
    #[arg(long, value_name = "TASK")]
    pub follow_up: Option<String>,
    /// The question
    pub question: String,
}

pub async fn ask(config: &Config, args: AskArgs) -> anyhow::Result<u8> {
    let question = args.question.trim().to_string();
    if question.is_empty() {
        return Err(usage(anyhow::anyhow!("the question is empty")));
    }
    let model = question::build_model(config).map_err(setup_error)?;
    let earlier = match &args.follow_up {
        Some(id) => {
            let id: TaskId = id.parse().map_err(usage)?;
            let earlier = records::load(&config.home, &id).map_err(usage)?;
            if earlier.kind != TaskKind::Question {
                return Err(usage(anyhow::anyhow!(
                    "task {id} is a change task: continue it with `warden run --follow-up {id} \
                     \"…\"` (or `warden answer {id} \"…\"`)"
                )));
            }
            Some(earlier)
        }
        None => None,
    };
    let specs = repo_specs(&args.repos, earlier.as_ref())?;

    let progress = StderrProgress::new();
    let store = config
        .storage
        .open_repos(&config.home)
        .context("cannot open the repository store")?;
    let clock = SystemClock;
    let repos = match question::pin_all(&store, &specs, &|line| progress.line(line)) {
        Ok(repos) => repos,
        // A disk budget refused the repository: the task fails visibly, with a result.
        Err(SetupError::Quota(message)) => {
            let now = clock.now_ms();
            let record = TaskRecord {
                id: warden_store::new_task_id_at(now)?,
                kind: TaskKind::Question,
                status: TaskStatus::Running,
                prompt: question.clone(),
                created_at: records::rfc3339(now),
                follow_up_to: earlier.as_ref().map(|e| e.id.clone()),
                repos: Vec::new(),
                transcript: Vec::new(),
                result: None,
                change_result: None,
                checks: Vec::new(),
            };
            let failure = Failure {
                code: FailureCode::QuotaExceeded,
                message,
            };
            return finish_failed(config, &args, model.as_ref(), record, failure, &progress);
        }
        Err(error) => return Err(setup_error(error)),
    };
    let now = clock.now_ms();
    let task_id = warden_store::new_task_id_at(now)?;
    let scratch = config.home.join("scratch").join(task_id.as_str());
    let sandbox = TaskSandbox::open(config, &repos, &scratch);
    let manifest = question::manifest(&repos);
    let earlier_transcript = earlier
        .as_ref()
        .map(|e| e.transcript.clone())
        .unwrap_or_default();
    let mut record = TaskRecord {
        id: task_id.clone(),
        kind: TaskKind::Question,
        status: TaskStatus::Running,
        prompt: question.clone(),
        created_at: records::rfc3339(now),
        follow_up_to: earlier.as_ref().map(|e| e.id.clone()),
        repos: repos
            .iter()
            .map(|r| RepoRecord {
                name: r.pinned.name.clone(),
                source_kind: match r.pinned.source {
                    Source::Path(_) => "path".into(),
                    Source::Url(_) => "url".into(),
                },
                // Credentials never reach the stored record; a follow-up on a credentialed URL
                // needs --repo again.
                source: r.pinned.source.display_redacted(),
                commit: r.pinned.commit.clone(),
                tree: r.pinned.tree.clone(),
                root: r.snapshot.root.display().to_string(),
            })
            .collect(),
        transcript: earlier_transcript.clone(),
        result: None,
        change_result: None,
        checks: Vec::new(),
    };

    let redactor = config.redactor();
    // The journal exists before the record says the task runs, so a record never points at a
    // run that has no journal.
    let mut file_journal = FileJournal::create(&records::journal_path(&config.home, &task_id, 1))
        .context("cannot create the run journal")?;
    records::save(&config.home, &record, &redactor)?;

    progress.emit(Event::TaskStarted {
        task_id: task_id.clone(),
        kind: TaskKind::Question,
        model: model.name(),
        manifest,
    });
    let mut journal = RedactingJournal {
        inner: &mut file_journal,
        redactor: &redactor,
    };
    let (report, backend) = match sandbox {
        Ok(sandbox) => {
            let tools = question::question_tools(config, &repos, &sandbox).map_err(setup_error)?;
            let report = run_with_ctrl_c(
                QuestionRun {
                    config,
                    model: model.as_ref(),
                    task_id: &task_id,
                    follow_up_to: record.follow_up_to.as_ref(),
                    repos: &repos,
                    transcript: &earlier_transcript,
                    question: &question,
                    journal: &mut journal,
                    events: &progress,
                    clock: &clock,
                    cancel: CancelFlag::default(),
                    ledger: None,
                },
                &tools,
                &progress,
            )
            .await;
            drop(tools);
            let report = match report {
                Some(report) => report,
                None => {
                    let failure = Failure {
                        code: FailureCode::Cancelled,
                        message: "the task was cancelled while the model was answering".into(),
                    };
                    // The loop was abandoned; its end is journaled here.
                    let _ = journal
                        .append(
                            clock.now_ms(),
                            RecordKind::RunFinished,
                            serde_json::json!({ "outcome": { "failure": failure } }),
                        )
                        .await;
                    RunReport {
                        outcome: RunOutcome::Failed(failure),
                        usage: warden_protocol::Usage::default(),
                        messages: vec![],
                    }
                }
            };
            let backend = sandbox.backend;
            sandbox.close();
            (report, Some(backend))
        }
        Err(failure) => {
            // Isolation could not be established: the task fails visibly, nothing runs.
            let _ = journal
                .append(
                    clock.now_ms(),
                    RecordKind::RunFinished,
                    serde_json::json!({ "outcome": { "failure": failure } }),
                )
                .await;
            let report = RunReport {
                outcome: RunOutcome::Failed(failure),
                usage: warden_protocol::Usage {
                    cost_usd: Some(0.0),
                    ..warden_protocol::Usage::default()
                },
                messages: vec![],
            };
            (report, None)
        }
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let QuestionReport {
        mut result,
        status,
        reply,
    } = question::question_report(&task_id, model.as_ref(), backend, report);
    result.notices.splice(0..0, question::repo_notices(&repos));

    let mut transcript = earlier_transcript;
    transcript.push(TranscriptEntry {
        role: Role::User,
        text: question,
    });
    if let Some(reply) = reply {
        transcript.push(TranscriptEntry {
            role: Role::Agent,
            text: reply,
        });
    }
    record.status = status;
    record.transcript = transcript;
    record.result = Some(result.clone());
    records::save(&config.home, &record, &redactor)?;
    progress.emit(Event::TaskFinished {
        status,
        outcome: finish_line(&result),
    });

    if args.json {
        println!("{}", redactor.json(serde_json::to_value(&result)?));
        // Exit 3 always says how to answer, on stderr where it cannot break the JSON.
        if matches!(result.outcome, QuestionOutcome::Clarification { .. }) {
            eprintln!("warden: answer it with: warden ask --follow-up {task_id} \"…\"");
        }
    } else {
        print!("{}", redactor.text(&render_result(&result)));
    }
    Ok(result.exit_code() as u8)
}

/// Runs the question; Ctrl-C cancels it. The loop stops at its next step; a model call in
/// flight is abandoned after a short grace period, and then `None` is returned.
async fn run_with_ctrl_c(
    run: QuestionRun<'_>,
    tools: &[std::sync::Arc<dyn warden_runtime::Tool>],
    progress: &StderrProgress,
) -> Option<RunReport> {
    let cancel = run.cancel.clone();
    let mut future = Box::pin(question::run_question(run, tools));
    tokio::select! {
        report = &mut future => Some(report),
        _ = crate::interrupt::ctrl_c() => {
            progress.line("warden: cancelling (Ctrl-C; press it again to exit at once)");
            cancel.cancel();
            tokio::time::timeout(CANCEL_GRACE, &mut future).await.ok()
        }
    }
}

pub(crate) fn setup_error(error: SetupError) -> anyhow::Error {
    match error {
        SetupError::Usage(message) => usage(anyhow::anyhow!(message)),
        SetupError::Infrastructure(message) | SetupError::Quota(message) => {
            anyhow::anyhow!(message)
        }
    }
}

/// Ends a question that failed before it could run (nothing was journaled, nothing spent):
/// the record, the finish line and the result.
fn finish_failed(
    config: &Config,
    args: &AskArgs,
    model: &dyn warden_runtime::Model,
    mut record: TaskRecord,
    failure: Failure,
    progress: &StderrProgress,
) -> anyhow::Result<u8> {
    let redactor = config.redactor();
    let report = RunReport {
        outcome: RunOutcome::Failed(failure),
        usage: warden_protocol::Usage {
            cost_usd: Some(0.0),
            ..warden_protocol::Usage::default()
        },
        messages: vec![],
    };
    let QuestionReport { result, status, .. } =
        question::question_report(&record.id, model, None, report);
    record.status = status;
    record.transcript.push(TranscriptEntry {
        role: Role::User,
        text: record.prompt.clone(),
    });
    record.result = Some(result.clone());
    records::save(&config.home, &record, &redactor)?;
    progress.emit(Event::TaskFinished {
        status,
        outcome: finish_line(&result),
    });
    if args.json {
        println!("{}", redactor.json(serde_json::to_value(&result)?));
    } else {
        print!("{}", redactor.text(&render_result(&result)));
    }
    Ok(result.exit_code() as u8)
}

/// The repositories of the task a follow-up continues, at the commits it used.
pub(crate) fn earlier_specs(earlier: &TaskRecord) -> Vec<RepoSpec> {
    earlier
        .repos
        .iter()
        .map(|repo| RepoSpec {
            source: if repo.source_kind == "url" {
                Source::Url(repo.source.clone())
            } else {
                Source::Path(PathBuf::from(&repo.source))
            },
            rev: Some(repo.commit.clone()),
            name: repo.name.clone(),
            within: None,
        })
        .collect()
}

fn repo_specs(arguments: &[String], earlier: Option<&TaskRecord>) -> anyhow::Result<Vec<RepoSpec>> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    if !arguments.is_empty() {
        return arguments
            .iter()
            .map(|text| RepoSpec::parse(text, &cwd).map_err(usage))
            .collect();
    }
    match earlier {
        // A follow-up keeps the exact commits of the task it continues.
        Some(earlier) => Ok(earlier_specs(earlier)),
        None => Err(usage(anyhow::anyhow!(
            "name at least one repository with --repo PATH|URL[@REV]"
        ))),
    }
}

fn finish_line(result: &QuestionResult) -> String {
    match &result.outcome {
        QuestionOutcome::Answer { answer } => {
            let citations: usize = answer.claims.iter().map(|c| c.evidence.len()).sum();
            format!(
                "answered with {} claims and {citations} checked citations",
                answer.claims.len()
            )
        }
        QuestionOutcome::Clarification { .. } => "the agent needs a clarification".into(),
        QuestionOutcome::Failure { failure } => {
            format!("failed ({}): {}", failure.code, failure.message)
        }
    }
}

/// The human-readable form of a result for stdout. Everything that came from the model, the
/// repository or a provider is escaped and indented (`text`), so it cannot forge a citation line
/// or drive the terminal.
pub fn render_result(result: &QuestionResult) -> String {
    let mut out = String::new();
    match &result.outcome {
        QuestionOutcome::Answer { answer } => {
            out.push_str(&text::block(&answer.summary, ""));
            out.push('\n');
            for (index, claim) in answer.claims.iter().enumerate() {
                let basis = match claim.basis {
                    warden_protocol::Basis::Observed => "observed",
                    warden_protocol::Basis::Inferred => "inferred",
                };
                out.push_str(&format!(
                    "\n{}. [{basis}] {}\n",
                    index + 1,
                    text::block(&claim.text, "      ")
                ));
                for evidence in &claim.evidence {
                    out.push_str(&format!(
                        "   ✓ {}:{}:{}-{} @ {}",
                        text::one_line(&evidence.repo),
                        text::one_line(&evidence.path),
                        evidence.start_line,
                        evidence.end_line,
                        crate::text::short_commit(&evidence.commit)
                    ));
                    if let Some(url) = &evidence.url {
                        out.push_str(&format!("  {}", text::one_line(url)));
                    }
                    out.push('\n');
                }
            }
            if !answer.not_established.is_empty() {
                out.push_str("\nNot established:\n");
                for item in &answer.not_established {
                    out.push_str(&format!("- {}\n", text::block(item, "  ")));
                }
            }
        }
        QuestionOutcome::Clarification { clarification } => {
            out.push_str(&format!(
                "The agent needs a clarification:\n{}\n\nAnswer with: warden ask --follow-up {} \"…\"\n",
                text::block(&clarification.question, "  "),
                result.task_id
            ));
        }
        QuestionOutcome::Failure { failure } => {
            out.push_str(&format!(
                "Task failed ({}): {}\n",
                failure.code,
                text::block(&failure.message, "  ")
            ));
        }
    }
    out.push_str(&text::result_footer(
        &result.task_id,
        &result.model,
        &result.usage,
        &result.notices,
    ));
    out
}
