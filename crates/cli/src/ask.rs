//! `warden ask`: pin the repositories, build read-only snapshots, run the question agent with the
//! read/search tools and `submit_answer` (whose citations are checked against the pinned
//! commits), then print the result — human-readable, or the exact JSON with `--json`.

use crate::config::{Config, ModelChoice};
use crate::progress::StderrProgress;
use crate::records::{self, RepoRecord, TaskRecord};
use crate::redact::RedactingJournal;
use crate::{ids, prompt, text, usage};
use anyhow::Context;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use warden_protocol::{
    Event, Failure, FailureCode, ManifestEntry, QuestionOutcome, QuestionResult, Role, TaskId,
    TaskKind, TaskStatus, TranscriptEntry,
};
use warden_repo::evidence::PinnedCheckout;
use warden_repo::{CheckoutRoot, RepoError, RepoSpec, RepoStore, Source};
use warden_runtime::{
    Agent, AgentConfig, AllowAll, CancelFlag, Clock, EventSink, FileJournal, Finish, Journal,
    Message, Model, RecordKind, RunInput, RunOutcome, RunReport, SystemClock, Tool,
};
use warden_tools::faux::{FauxModel, FAUX_LABEL};
use warden_tools::submit::{AskUser, SubmitAnswer};
use warden_tools::Workspace;

/// How long a cancelled run may take to stop by itself before it is abandoned.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// A repository: local path or git URL, optionally `@REV` (repeatable)
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
    let model: Arc<dyn Model> = match &config.model {
        ModelChoice::Faux => Arc::new(FauxModel),
        ModelChoice::Remote { primary, fallback } => warden_models::build(
            (**primary).clone(),
            fallback.as_deref().cloned(),
            config.prices.clone(),
        )
        .map_err(usage)?,
        ModelChoice::Missing => {
            return Err(usage(anyhow::anyhow!(
                "no model configured: set WARDEN_MODEL (e.g. openai:gpt-5.1 with OPENAI_API_KEY, \
                 anthropic:claude-sonnet-4-5 with ANTHROPIC_API_KEY) or WARDEN_MODEL=faux for the \
                 deterministic no-model runner"
            )))
        }
    };
    if config.limits.max_cost_micro_usd.is_some() && !model.has_price() {
        return Err(usage(anyhow::anyhow!(
            "a money budget (limits.max_cost_usd) is set but {} has no price; add it under \
             [[prices]] in warden.toml",
            model.name()
        )));
    }

    let earlier = match &args.follow_up {
        Some(id) => {
            let id: TaskId = id.parse().map_err(usage)?;
            Some(records::load(&config.home, &id).map_err(usage)?)
        }
        None => None,
    };
    let specs = repo_specs(&args.repos, earlier.as_ref())?;

    let progress = StderrProgress::new();
    let store = RepoStore::open(&config.home).context("cannot open the repository store")?;
    let mut pinned_repos = Vec::new();
    let mut names = BTreeSet::new();
    for spec in &specs {
        if !names.insert(spec.name.clone()) {
            return Err(usage(anyhow::anyhow!(
                "two repositories are named {:?}; each repository of a task needs its own name",
                spec.name
            )));
        }
        progress.line(&format!(
            "warden: pinning {}",
            describe_source(&spec.source)
        ));
        let pinned = store.pin(spec).map_err(|error| match error {
            // What the person asked for does not exist: a usage error. Anything else (a
            // fetch that failed, a timeout) is an infrastructure failure.
            RepoError::InvalidSpec { .. } | RepoError::RevisionNotFound { .. } => usage(error),
            other => anyhow::Error::new(other).context("cannot pin the repository"),
        })?;
        let snapshot = store
            .snapshot(&pinned)
            .with_context(|| format!("cannot build the snapshot of {}", pinned.name))?;
        progress.line(&format!(
            "warden: {} @ {} ({})",
            pinned.name,
            &pinned.commit[..12],
            if snapshot.reused {
                "snapshot reused"
            } else {
                "snapshot built and verified"
            }
        ));
        pinned_repos.push((pinned, snapshot));
    }

    let clock = SystemClock;
    let now = clock.now_ms();
    let task_id = ids::new_task_id(now)?;
    let manifest: Vec<ManifestEntry> = pinned_repos
        .iter()
        .map(|(pinned, snapshot)| ManifestEntry {
            repo: pinned.name.clone(),
            commit: pinned.commit.clone(),
            root: snapshot.root.display().to_string(),
        })
        .collect();
    let checkouts = pinned_repos
        .iter()
        .map(|(pinned, snapshot)| {
            Ok(PinnedCheckout {
                repo: pinned.name.clone(),
                commit: pinned.commit.clone(),
                root: CheckoutRoot::new(&snapshot.root)?,
                browse: pinned.browse.clone(),
            })
        })
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot open a snapshot")?;
    let workspace = Workspace::new(
        pinned_repos
            .iter()
            .map(|(pinned, snapshot)| (pinned.name.clone(), snapshot.root.clone()))
            .collect(),
    )
    .context("cannot open the task's working root")?;
    let mut tools: Vec<Arc<dyn Tool>> = warden_tools::question_tools(Arc::new(workspace));
    tools.push(Arc::new(SubmitAnswer::new(Arc::new(checkouts))));
    tools.push(Arc::new(AskUser));

    let mut transcript = earlier
        .as_ref()
        .map(|e| e.transcript.clone())
        .unwrap_or_default();
    let mut messages = vec![Message::System {
        text: prompt::question_system_prompt(&manifest),
    }];
    for entry in &transcript {
        messages.push(match entry.role {
            Role::User => Message::User {
                text: entry.text.clone(),
            },
            Role::Agent => Message::Assistant {
                text: Some(entry.text.clone()),
                tool_calls: vec![],
            },
        });
    }
    messages.push(Message::User {
        text: question.clone(),
    });

    let mut record = TaskRecord {
        id: task_id.clone(),
        kind: TaskKind::Question,
        status: TaskStatus::Running,
        prompt: question.clone(),
        created_at: records::rfc3339(now),
        follow_up_to: earlier.as_ref().map(|e| e.id.clone()),
        repos: pinned_repos
            .iter()
            .map(|(pinned, snapshot)| RepoRecord {
                name: pinned.name.clone(),
                source_kind: match pinned.source {
                    Source::Path(_) => "path".into(),
                    Source::Url(_) => "url".into(),
                },
                source: describe_source(&pinned.source),
                commit: pinned.commit.clone(),
                tree: pinned.tree.clone(),
                root: snapshot.root.display().to_string(),
            })
            .collect(),
        transcript: transcript.clone(),
        result: None,
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
        manifest: manifest.clone(),
    });
    let cancel = CancelFlag::default();
    let mut journal = RedactingJournal {
        inner: &mut file_journal,
        redactor: &redactor,
    };
    let context = serde_json::json!({
        "task_id": task_id,
        "kind": TaskKind::Question,
        "follow_up_to": record.follow_up_to,
        "manifest": manifest,
    });
    let mut run = Box::pin(
        Agent {
            model: model.as_ref(),
            tools: &tools,
            policy: &AllowAll,
            journal: &mut journal,
            events: &progress,
            clock: &clock,
            cancel: cancel.clone(),
            config: AgentConfig {
                limits: config.limits.clone(),
                max_output_tokens: config.max_output_tokens,
                ..AgentConfig::default()
            },
            ledger: None,
        }
        .run(RunInput::Start { messages, context }),
    );
    let finished = tokio::select! {
        report = &mut run => Some(report),
        _ = tokio::signal::ctrl_c() => {
            progress.line("warden: cancelling (Ctrl-C)");
            cancel.cancel();
            // The loop stops at its next step; a model call in flight is abandoned after a
            // short grace period.
            tokio::time::timeout(CANCEL_GRACE, &mut run).await.ok()
        }
    };
    drop(run);
    let report = match finished {
        Some(report) => report,
        None => {
            let failure = Failure {
                code: FailureCode::Cancelled,
                message: "the task was cancelled while the model was answering".into(),
            };
            // Best effort: the run's end is journaled even though the loop was abandoned.
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

    let (outcome, status, reply) = match report.outcome {
        RunOutcome::Finished(Finish::Answer(answer)) => {
            let reply = answer.summary.clone();
            (
                QuestionOutcome::Answer { answer },
                TaskStatus::Completed,
                Some(reply),
            )
        }
        RunOutcome::Finished(Finish::Clarification { question }) => (
            QuestionOutcome::Clarification {
                clarification: warden_protocol::Clarification {
                    question: question.clone(),
                },
            },
            TaskStatus::WaitingInput,
            Some(question),
        ),
        RunOutcome::Failed(failure) => {
            let status = match failure.code {
                FailureCode::TimedOut => TaskStatus::TimedOut,
                FailureCode::Cancelled => TaskStatus::Cancelled,
                _ => TaskStatus::Failed,
            };
            (QuestionOutcome::Failure { failure }, status, None)
        }
        RunOutcome::AwaitingApproval { tool, reason, .. } => (
            // Question tasks have no tool that needs approval; treat one as a policy failure.
            QuestionOutcome::Failure {
                failure: Failure {
                    code: FailureCode::PolicyAbort,
                    message: format!(
                        "{tool} needs an approval, which question tasks cannot wait for: {reason}"
                    ),
                },
            },
            TaskStatus::Failed,
            None,
        ),
    };
    let mut notices = Vec::new();
    if model.name() == "faux" {
        notices.push(format!(
            "{FAUX_LABEL}: this answer comes from the deterministic demo runner, not a model"
        ));
    }
    for unpriced in &report.usage.unpriced_models {
        notices.push(format!(
            "cost unknown: no price for {unpriced}; add it under [[prices]] in warden.toml"
        ));
        tracing::warn!(model = %unpriced, "model has no price; cost reported as unknown");
    }
    if report.usage.responses_without_usage > 0 {
        notices.push(format!(
            "{} model response(s) reported no token usage",
            report.usage.responses_without_usage
        ));
    }
    let result = QuestionResult {
        task_id: task_id.clone(),
        kind: TaskKind::Question,
        outcome,
        usage: report.usage,
        model: model.name(),
        sandbox: None,
        notices,
    };

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
    } else {
        print!("{}", redactor.text(&render_result(&result)));
    }
    Ok(result.exit_code() as u8)
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
        Some(earlier) => Ok(earlier
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
            })
            .collect()),
        None => Err(usage(anyhow::anyhow!(
            "name at least one repository with --repo PATH|URL[@REV]"
        ))),
    }
}

/// Credentials in a URL never reach progress output or the stored task record; a follow-up on
/// a credentialed URL therefore needs `--repo` again.
fn describe_source(source: &Source) -> String {
    source.display_redacted()
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
                        &evidence.commit[..12.min(evidence.commit.len())]
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
    let usage = &result.usage;
    let cost = match usage.cost_usd {
        Some(cost) => format!("${cost:.4}"),
        None => "cost unknown".into(),
    };
    out.push_str(&format!(
        "\n[{} · {} · {} model calls · {} tool calls · {} in / {} out tokens · {cost}]\n",
        result.task_id,
        text::one_line(&result.model),
        usage.model_calls,
        usage.tool_calls,
        usage.input_tokens,
        usage.output_tokens
    ));
    for notice in &result.notices {
        out.push_str(&format!("note: {}\n", text::one_line(notice)));
    }
    out
}
