//! Executing a question task: pin the repositories and build their snapshots, give the agent
//! the read/search tools plus `submit_answer` (citations checked against the pinned commits) and
//! `ask_user`, run the loop, and turn its outcome into the result JSON of SPEC §5.

use crate::config::{Config, ModelChoice};
use crate::prompt;
use std::path::Path;
use std::sync::Arc;
use warden_protocol::{
    Clarification, Failure, FailureCode, ManifestEntry, QuestionOutcome, QuestionResult, Role,
    TaskId, TaskKind, TaskStatus, TranscriptEntry,
};
use warden_repo::evidence::PinnedCheckout;
use warden_repo::{
    CheckoutRoot, InUse, PinnedRepo, RepoError, RepoSpec, RepoStore, Snapshot, WorkTree,
};
use warden_runtime::{
    Agent, AgentConfig, AllowAll, CancelFlag, Clock, EventSink, Finish, Journal, Ledger, Message,
    Model, RunInput, RunOutcome, RunReport, Tool,
};
use warden_sandbox::{Backend, SandboxView, ViewSpec};
use warden_tools::faux::{FauxModel, FAUX_LABEL};
use warden_tools::shell::Shell;
use warden_tools::submit::{AskUser, SubmitAnswer};
use warden_tools::Workspace;

/// Why a task could not be set up. `Usage` means the request itself is wrong (exit 2, HTTP 4xx).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The request names something that does not exist or cannot be used.
    #[error("{0}")]
    Usage(String),
    /// Warden could not do its part (fetch, snapshot, I/O).
    #[error("{0}")]
    Infrastructure(String),
    /// A disk budget would be exceeded (a snapshot past `[storage]` limits): the task fails
    /// with `quota_exceeded`.
    #[error("{0}")]
    Quota(String),
}

/// The model client the configuration names.
pub fn build_model(config: &Config) -> Result<Arc<dyn Model>, SetupError> {
    // Before anything is pinned or queued: the first model call would only fail with a 401.
    if let Some(missing) = config.model.missing_key() {
        return Err(SetupError::Usage(missing));
    }
    let model: Arc<dyn Model> =
        match &config.model {
            ModelChoice::Faux => Arc::new(FauxModel),
            ModelChoice::Remote { primary, fallback } => warden_models::build(
                (**primary).clone(),
                fallback.as_deref().cloned(),
                config.prices.clone(),
            )
            .map_err(|e| SetupError::Usage(e.to_string()))?,
            ModelChoice::Missing => return Err(SetupError::Usage(
                "no model configured: set WARDEN_MODEL (e.g. openai:gpt-5.1 with OPENAI_API_KEY, \
                 anthropic:claude-sonnet-4-5 with ANTHROPIC_API_KEY) or WARDEN_MODEL=faux for \
                 the deterministic no-model runner"
                    .into(),
            )),
        };
    // A refused key says which variable holds it.
    let model: Arc<dyn Model> = match &config.model {
        ModelChoice::Remote { primary, fallback } => {
            let mut variables = vec![crate::config::key_variable(primary.provider)];
            let mut base_variables = vec![crate::config::base_url_variable(primary.provider)];
            if let Some(fallback) = fallback {
                let variable = crate::config::key_variable(fallback.provider);
                if !variables.contains(&variable) {
                    variables.push(variable);
                }
                let variable = crate::config::base_url_variable(fallback.provider);
                if !base_variables.contains(&variable) {
                    base_variables.push(variable);
                }
            }
            Arc::new(KeyHint {
                inner: model,
                variables: variables.join(" or "),
                base_variables: base_variables.join(" or "),
            })
        }
        ModelChoice::Faux | ModelChoice::Missing => model,
    };
    if config.limits.max_cost_micro_usd.is_some() && !model.has_price() {
        return Err(SetupError::Usage(format!(
            "a money budget (limits.max_cost_usd) is set but {} has no price; add it under \
             [[prices]] in warden.toml",
            model.name()
        )));
    }
    Ok(model)
}

/// A model whose refusals for the key (401, 403) name the variable that holds it, so the fix
/// is in the message: "… the API key was refused: check OPENAI_API_KEY"; and whose endpoint,
/// when no connection to it could be made, names the variable that sets it.
struct KeyHint {
    inner: Arc<dyn Model>,
    variables: String,
    base_variables: String,
}

impl Model for KeyHint {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn complete<'a>(
        &'a self,
        request: &'a warden_runtime::ModelRequest,
        events: &'a dyn EventSink,
    ) -> warden_runtime::BoxFuture<
        'a,
        Result<warden_runtime::ModelResponse, warden_runtime::ModelError>,
    > {
        Box::pin(async move {
            match self.inner.complete(request, events).await {
                Err(warden_runtime::ModelError::Permanent {
                    status: Some(status @ (401 | 403)),
                    message,
                }) => Err(warden_runtime::ModelError::Permanent {
                    status: Some(status),
                    message: format!(
                        "{message} — the API key was refused: check {}",
                        self.variables
                    ),
                }),
                Err(warden_runtime::ModelError::Exhausted { attempts, message })
                    if message.starts_with(warden_models::CONNECT_FAILED) =>
                {
                    Err(warden_runtime::ModelError::Exhausted {
                        attempts,
                        message: format!(
                            "{message} — is the model server running? check {} (`warden \
                             doctor` checks the endpoint)",
                            self.base_variables
                        ),
                    })
                }
                other => other,
            }
        })
    }

    fn has_price(&self) -> bool {
        self.inner.has_price()
    }
}

/// One repository of a task, pinned and materialized.
#[derive(Debug, Clone)]
pub struct TaskRepo {
    pub pinned: PinnedRepo,
    pub snapshot: Snapshot,
    /// Keeps the mirror and snapshot from eviction while the task uses them.
    pub in_use: Arc<InUse>,
    /// The registered repository's own mounts and prepare commands (none in-process).
    pub sandbox: crate::toolchain::RepoSandbox,
    /// What the person should know about how their `--repo` was read (the enclosing
    /// repository of a directory, uncommitted files left out, a work-tree snapshot): shown as
    /// progress while pinning, and as notices of the result.
    pub notices: Vec<String>,
}

/// Pins every repository and builds its snapshot. `progress` receives one line per step.
pub fn pin_all(
    store: &RepoStore,
    specs: &[RepoSpec],
    progress: &dyn Fn(&str),
) -> Result<Vec<TaskRepo>, SetupError> {
    let mut repos: Vec<TaskRepo> = Vec::new();
    for spec in specs {
        if repos.iter().any(|r| r.pinned.name == spec.name) {
            return Err(SetupError::Usage(format!(
                "two repositories are named {:?}; each repository of a task needs its own name",
                spec.name
            )));
        }
        let mut notices = Vec::new();
        if let Some(within) = &spec.within {
            let notice = format!(
                "--repo {} is inside the repository at {}; using the whole repository",
                within.display(),
                spec.source.display_redacted()
            );
            progress(&format!("warden: {notice}"));
            notices.push(notice);
        }
        progress(&format!(
            "warden: pinning {}",
            spec.source.display_redacted()
        ));
        let mut in_use = store.hold_mirror(spec).map_err(|e| {
            SetupError::Infrastructure(format!("cannot mark the mirror in use: {e}"))
        })?;
        let fetching = |line: &str| progress(&format!("warden: fetching {}: {line}", spec.name));
        let pinned = store
            .pin_with_progress(spec, &fetching)
            .map_err(|error| match error {
                // What the person asked for does not exist: a usage error. Anything else (a
                // fetch that failed, a timeout) is an infrastructure failure.
                RepoError::InvalidSpec { .. } | RepoError::RevisionNotFound { .. } => {
                    SetupError::Usage(error.to_string())
                }
                other => SetupError::Infrastructure(format!(
                    "cannot fetch {}: {}{}",
                    spec.source.display_redacted(),
                    other.summary(),
                    if other.is_retryable() {
                        " (check the address, the network and your access to it; trying again \
                         later may work)"
                    } else {
                        ""
                    }
                )),
            })?;
        if let Some(notice) = work_tree_notice(&pinned) {
            progress(&format!("warden: {notice}"));
            notices.push(notice);
        }
        store.hold_snapshot(&pinned, &mut in_use).map_err(|e| {
            SetupError::Infrastructure(format!("cannot mark the snapshot in use: {e}"))
        })?;
        let name = pinned.name.clone();
        let snapshot_progress = |p: warden_repo::SnapshotProgress| {
            progress(&format!(
                "warden: snapshot of {name}: {} files, {:.1} MB so far",
                p.entries,
                p.bytes as f64 / 1e6
            ))
        };
        let snapshot = store
            .snapshot_with_progress(&pinned, &snapshot_progress)
            .map_err(|e| match e {
                RepoError::QuotaExceeded(_) => SetupError::Quota(format!(
                    "the snapshot of {} was refused: {e}; raise [storage] snapshot_max_mib or \
                 snapshot_max_files in warden.toml to allow it",
                    pinned.name
                )),
                e => SetupError::Infrastructure(format!(
                    "cannot build the snapshot of {}: {e}",
                    pinned.name
                )),
            })?;
        progress(&format!(
            "warden: {} @ {} ({})",
            pinned.name,
            &pinned.commit[..12.min(pinned.commit.len())],
            if snapshot.reused {
                "snapshot reused"
            } else {
                "snapshot built and verified"
            }
        ));
        repos.push(TaskRepo {
            pinned,
            snapshot,
            in_use: Arc::new(in_use),
            sandbox: Default::default(),
            notices,
        });
    }
    Ok(repos)
}

/// The sentence saying what a pin of a local work tree left out or took in.
fn work_tree_notice(pinned: &PinnedRepo) -> Option<String> {
    let short = |id: &str| id[..12.min(id.len())].to_string();
    let files = |n: usize| {
        if n == 1 {
            "1 uncommitted or untracked file".to_string()
        } else {
            format!("{n} uncommitted or untracked files")
        }
    };
    Some(match pinned.work_tree.as_ref()? {
        WorkTree::Uncommitted { files: n } => format!(
            "{}: using HEAD {}; {} {} not included (commit them, or use --repo PATH@worktree)",
            pinned.name,
            short(&pinned.commit),
            files(*n),
            if *n == 1 { "is" } else { "are" }
        ),
        WorkTree::Unchecked { reason } => format!(
            "{}: using HEAD {}; the work tree could not be checked for uncommitted files \
             ({reason})",
            pinned.name,
            short(&pinned.commit)
        ),
        WorkTree::Snapshot { head, files: 0, .. } => format!(
            "{}: the work tree has no uncommitted or untracked files; using HEAD {}",
            pinned.name,
            short(head)
        ),
        WorkTree::Snapshot {
            head,
            files: n,
            skipped,
        } => {
            let mut notice = format!(
                "{}: using a snapshot of the work tree, commit {} on top of HEAD {} with {} \
                 (it exists only in Warden's mirror)",
                pinned.name,
                short(&pinned.commit),
                short(head),
                files(*n)
            );
            if !skipped.is_empty() {
                let names: Vec<String> = skipped
                    .iter()
                    .take(5)
                    .map(|(path, why)| format!("{path:?} ({why})"))
                    .collect();
                notice.push_str(&format!(
                    "; left out: {}{}",
                    names.join(", "),
                    if skipped.len() > 5 { ", …" } else { "" }
                ));
            }
            notice
        }
    })
}

/// The notices of every repository of a task, for its result.
pub fn repo_notices(repos: &[TaskRepo]) -> Vec<String> {
    repos
        .iter()
        .flat_map(|r| r.notices.iter().cloned())
        .collect()
}

pub fn manifest(repos: &[TaskRepo]) -> Vec<ManifestEntry> {
    repos
        .iter()
        .map(|r| ManifestEntry {
            repo: r.pinned.name.clone(),
            commit: r.pinned.commit.clone(),
            root: r.snapshot.root.display().to_string(),
        })
        .collect()
}

/// Everything one run of a question needs.
pub struct QuestionRun<'a> {
    pub config: &'a Config,
    pub model: &'a dyn Model,
    pub task_id: &'a TaskId,
    pub follow_up_to: Option<&'a TaskId>,
    pub repos: &'a [TaskRepo],
    /// The conversation before this question, oldest first.
    pub transcript: &'a [TranscriptEntry],
    pub question: &'a str,
    pub journal: &'a mut dyn Journal,
    pub events: &'a dyn EventSink,
    pub clock: &'a dyn Clock,
    pub cancel: CancelFlag,
    pub ledger: Option<&'a dyn Ledger>,
    /// Messages people send while the run goes on; `None`: nobody can.
    pub inbox: Option<&'a dyn warden_runtime::Inbox>,
}

/// A task's sandbox view over its snapshots, shared by the `shell` tool while the run lasts.
pub struct TaskSandbox {
    pub backend: Backend,
    view: Arc<Box<dyn SandboxView>>,
    /// Toolchain mounts and environment of the task's commands.
    pub toolchains: crate::toolchain::TaskToolchains,
}

impl TaskSandbox {
    /// Opens a read-only view over the task's snapshots with the configured backend. Fails
    /// closed: if any layer cannot be established the task fails with `sandbox_error` naming
    /// it, and nothing runs with less isolation.
    pub fn open(
        config: &Config,
        task: &str,
        repos: &[TaskRepo],
        scratch_dir: &Path,
    ) -> Result<TaskSandbox, Failure> {
        let _timing = crate::timing::time_sandbox_start("question");
        let failure = |error: warden_sandbox::SandboxError| Failure {
            code: FailureCode::SandboxError,
            message: format!(
                "the {} sandbox could not be established: {error}",
                config.sandbox.backend.as_str()
            ),
        };
        if let Some(parent) = scratch_dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Failure {
                code: FailureCode::Infrastructure,
                message: format!("cannot create {}: {e}", parent.display()),
            })?;
        }
        let toolchains = task_toolchains(config, repos, false, false, false)?;
        let sandbox = crate::sandbox_backend::select(config, task).map_err(failure)?;
        let view = sandbox
            .open(&ViewSpec {
                lower: repos
                    .iter()
                    .map(|r| (r.pinned.name.clone(), r.snapshot.root.clone()))
                    .collect(),
                writable: false,
                scratch_dir: scratch_dir.to_path_buf(),
                mounts: toolchains.mounts(false),
                egress_proxy: None,
                seed: None,
            })
            .map_err(failure)?;
        Ok(TaskSandbox {
            backend: config.sandbox.backend,
            view: Arc::new(view),
            toolchains,
        })
    }

    /// Kills the commands running in the view and refuses later ones (the task was
    /// cancelled). The returned function does not keep the view open.
    pub fn canceller(&self) -> impl Fn() + Send + Sync + 'static {
        let view = Arc::downgrade(&self.view);
        move || {
            if let Some(view) = view.upgrade() {
                view.cancel();
            }
        }
    }

    /// Starts the configured MCP servers (`[[mcp.servers]]`) in this view; none configured:
    /// none started. End them with [`crate::mcp_client::McpServers::shutdown`] before closing.
    pub async fn start_mcp(
        &self,
        config: &Config,
    ) -> Result<crate::mcp_client::McpServers, Failure> {
        crate::mcp_client::McpServers::for_task(config, &self.view, &self.toolchains).await
    }

    /// Closes the view once no tool holds it any more (the tools are dropped with the run).
    pub fn close(self) {
        match Arc::try_unwrap(self.view) {
            Ok(view) => {
                if let Err(error) = view.close() {
                    tracing::warn!(%error, "closing a sandbox view failed");
                }
            }
            // Still shared: the view is torn down when the last holder drops it.
            Err(_) => tracing::warn!("sandbox view still in use at close"),
        }
    }
}

/// The tools of a question task over its pinned repositories, `shell` running in `sandbox`.
pub fn question_tools(
    config: &Config,
    repos: &[TaskRepo],
    sandbox: &TaskSandbox,
) -> Result<Vec<Arc<dyn Tool>>, SetupError> {
    let infrastructure = |e: std::io::Error| {
        SetupError::Infrastructure(format!("cannot open the task's snapshots: {e}"))
    };
    let (workspace, checkouts) = pinned_views(repos).map_err(infrastructure)?;
    let mut tools = warden_tools::question_tools(Arc::new(workspace));
    tools.push(Arc::new(
        Shell::new(sandbox.view.clone(), config.sandbox.limits)
            .with_env(sandbox.toolchains.command_env(true)),
    ));
    tools.push(Arc::new(SubmitAnswer::new(Arc::new(checkouts))));
    tools.push(Arc::new(AskUser));
    Ok(tools)
}

/// The read-only workspace over `repos`' pinned snapshots and their checkouts (what answer
/// citations are checked against).
fn pinned_views(repos: &[TaskRepo]) -> std::io::Result<(Workspace, Vec<PinnedCheckout>)> {
    let checkouts = repos
        .iter()
        .map(|r| {
            Ok(PinnedCheckout {
                repo: r.pinned.name.clone(),
                commit: r.pinned.commit.clone(),
                root: CheckoutRoot::new(&r.snapshot.root)?,
                browse: r.pinned.browse.clone(),
            })
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let workspace = Workspace::new(
        repos
            .iter()
            .map(|r| (r.pinned.name.clone(), r.snapshot.root.clone()))
            .collect(),
    )?;
    Ok((workspace, checkouts))
}

/// The explorers' tools over `repos`' pinned snapshots: the read-only question tools and
/// `submit_answer` with its citations checked — no shell, no `ask_user`. Empty (no explorers)
/// when `[roles] max_explorers` is 0 or the snapshots cannot be opened (logged).
pub fn explorer_tools(config: &Config, repos: &[TaskRepo]) -> Vec<Arc<dyn Tool>> {
    if config.explorers.max == 0 {
        return Vec::new();
    }
    match pinned_views(repos) {
        Ok((workspace, checkouts)) => {
            let mut tools = warden_tools::question_tools(Arc::new(workspace));
            tools.push(Arc::new(SubmitAnswer::new(Arc::new(checkouts))));
            tools
        }
        Err(error) => {
            tracing::warn!(%error, "no explorers: the task's snapshots cannot be opened for them");
            Vec::new()
        }
    }
}

/// What a run's explorers are, over `tools` ([`explorer_tools`]); `None` without tools.
pub fn explorers<'a>(
    config: &Config,
    manifest: &[ManifestEntry],
    tools: &'a [Arc<dyn Tool>],
) -> Option<warden_runtime::Explorers<'a>> {
    (!tools.is_empty()).then(|| warden_runtime::Explorers {
        tools,
        system_prompt: prompt::explorer_system_prompt(manifest),
        max: config.explorers.max,
        max_turns: config.explorers.max_turns,
        cache_key: Some(prompt::cache_key(
            "explorer",
            &manifest.iter().map(|m| m.repo.as_str()).collect::<Vec<_>>(),
        )),
    })
}

/// The conversation a run starts from: system prompt, earlier transcript, the question.
pub fn initial_messages(
    manifest: &[ManifestEntry],
    transcript: &[TranscriptEntry],
    question: &str,
) -> Vec<Message> {
    let mut messages = vec![Message::System {
        text: prompt::question_system_prompt(manifest),
    }];
    for entry in transcript {
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
        text: question.to_string(),
    });
    messages
}

/// The loop for one question, ready to await. Tools are built by the caller
/// ([`question_tools`]) so a setup failure is reported before the run starts.
pub async fn run_question(run: QuestionRun<'_>, tools: &[Arc<dyn Tool>]) -> RunReport {
    let manifest = manifest(run.repos);
    let explorer_tools = explorer_tools(run.config, run.repos);
    let explorers = explorers(run.config, &manifest, &explorer_tools);
    let context = serde_json::json!({
        "task_id": run.task_id,
        "kind": TaskKind::Question,
        "follow_up_to": run.follow_up_to,
        "manifest": manifest,
    });
    Agent {
        model: run.model,
        tools,
        policy: &AllowAll,
        journal: run.journal,
        events: run.events,
        clock: run.clock,
        cancel: run.cancel,
        config: AgentConfig {
            limits: run.config.limits.clone(),
            max_output_tokens: run.config.max_output_tokens,
            cache_key: Some(crate::prompt::cache_key(
                "question",
                &manifest.iter().map(|m| m.repo.as_str()).collect::<Vec<_>>(),
            )),
            context_tokens: run.config.context_tokens,
            ..AgentConfig::default()
        },
        ledger: run.ledger,
        inbox: run.inbox,
        explorers: explorers.as_ref(),
    }
    .run(RunInput::Start {
        messages: initial_messages(&manifest, run.transcript, run.question),
        context,
    })
    .await
}

/// A finished question: its result, the task status it implies, and the agent's reply for the
/// transcript (none on failure).
#[derive(Debug, Clone)]
pub struct QuestionReport {
    pub result: QuestionResult,
    pub status: TaskStatus,
    pub reply: Option<String>,
}

/// Turns a run's report into the result JSON and the task's status. `sandbox` is the backend
/// shell commands ran in (`None` when the task failed before one was opened).
pub fn question_report(
    task_id: &TaskId,
    model: &dyn Model,
    sandbox: Option<Backend>,
    report: RunReport,
) -> QuestionReport {
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
                clarification: Clarification {
                    question: question.clone(),
                },
            },
            TaskStatus::WaitingInput,
            Some(question),
        ),
        RunOutcome::Finished(Finish::Change { .. } | Finish::Review(_)) => (
            // Question tasks have no change or review tools; such a submission cannot happen.
            QuestionOutcome::Failure {
                failure: Failure {
                    code: FailureCode::InvalidSubmission,
                    message: "a question task cannot submit a change".into(),
                },
            },
            TaskStatus::Failed,
            None,
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
    notices.extend(
        report
            .usage
            .unpriced_models
            .iter()
            .map(|model| crate::config::unpriced_notice(model)),
    );
    if sandbox == Some(Backend::Local) {
        notices.push(
            "no isolation: shell commands ran directly on the host (WARDEN_SANDBOX=local, for \
             development only)"
                .into(),
        );
    }
    notices.extend(crate::config::cache_notice(&report.usage));
    if report.usage.responses_without_usage > 0 {
        notices.push(format!(
            "{} model response(s) reported no token usage",
            report.usage.responses_without_usage
        ));
    }
    QuestionReport {
        result: QuestionResult {
            task_id: task_id.clone(),
            kind: TaskKind::Question,
            outcome,
            usage: report.usage,
            model: model.name(),
            sandbox: sandbox.map(|b| b.as_str().to_string()),
            notices,
        },
        status,
        reply,
    }
}
/// The toolchains of a task over `repos`: the configured ones, every repository's own mounts,
/// and the first repository's cache and prepare commands; in a multi-repository task, each
/// cache variable (`CARGO_HOME`, `npm_config_cache`, `GOMODCACHE`) names the cache of the first
/// repository whose base has that preset's lockfile (`Cargo.lock`, `package-lock.json`,
/// `go.sum`), each repository's under its own key, read-only. The cache is the one of its key
/// ([`crate::toolchain::cache_key`]: the repository, by its mirror's name, the toolchains, the
/// prepare commands and what they read of the base tree), taken as
/// [`crate::toolchain::TaskToolchains::open_cache`] says: `fill` when the task runs prepare,
/// `private` for a cache of the task alone (shown at the key's path when `at_key_path`). A
/// refused or vanished mount fails the task with `sandbox_error`.
pub fn task_toolchains(
    config: &Config,
    repos: &[TaskRepo],
    fill: bool,
    private: bool,
    at_key_path: bool,
) -> Result<crate::toolchain::TaskToolchains, warden_protocol::Failure> {
    let first = repos.first();
    let repo_name = first
        .and_then(|repo| repo.pinned.mirror.file_name())
        .map(|name| name.to_string_lossy().trim_end_matches(".git").to_string())
        .unwrap_or_else(|| "default".into());
    let mounts: Vec<String> = repos
        .iter()
        .flat_map(|repo| repo.sandbox.mounts.iter().cloned())
        .collect();
    let prepare = first
        .map(|repo| repo.sandbox.prepare.clone())
        .unwrap_or_default();
    let key = match first {
        Some(repo) => crate::toolchain::cache_key(
            &config.sandbox.toolchains,
            &repo_name,
            &prepare,
            &repo.pinned.tree,
            &repo.snapshot.root,
        ),
        None => repo_name,
    };
    let mut toolchains = config
        .sandbox
        .toolchains
        .for_repo(&config.home, &key, &mounts, &prepare)
        .map_err(|reason| warden_protocol::Failure {
            code: warden_protocol::FailureCode::SandboxError,
            message: format!("a repository's sandbox mount was refused: {reason}"),
        })?;
    toolchains
        .open_cache(fill, private, at_key_path)
        .map_err(|error| warden_protocol::Failure {
            code: warden_protocol::FailureCode::Infrastructure,
            message: format!("cannot take the repository's dependency cache: {error}"),
        })?;
    // The other repositories' caches, for the variables of the presets whose lockfile the
    // first repository lacks and one of them has.
    let has = |repo: &TaskRepo, lockfile: &str| {
        repo.snapshot
            .root
            .join(lockfile)
            .symlink_metadata()
            .is_ok_and(|meta| meta.is_file())
    };
    for (index, repo) in repos.iter().enumerate().skip(1) {
        let variables: Vec<&str> = config
            .sandbox
            .toolchains
            .presets
            .iter()
            .filter_map(|preset| Some((preset.cache_var(), preset.default_prepare()?.0)))
            .filter(|(_, lockfile)| {
                has(repo, lockfile) && !repos[..index].iter().any(|r| has(r, lockfile))
            })
            .map(|(variable, _)| variable)
            .collect();
        if variables.is_empty() {
            continue;
        }
        let name = repo
            .pinned
            .mirror
            .file_name()
            .map(|name| name.to_string_lossy().trim_end_matches(".git").to_string())
            .unwrap_or_else(|| repo.pinned.name.clone());
        let key = crate::toolchain::cache_key(
            &config.sandbox.toolchains,
            &name,
            &repo.sandbox.prepare,
            &repo.pinned.tree,
            &repo.snapshot.root,
        );
        let mut other = config
            .sandbox
            .toolchains
            .for_repo(&config.home, &key, &[], &repo.sandbox.prepare)
            .map_err(|reason| warden_protocol::Failure {
                code: warden_protocol::FailureCode::SandboxError,
                message: format!("a repository's sandbox mount was refused: {reason}"),
            })?;
        other
            .open_cache(false, false, false)
            .map_err(|error| warden_protocol::Failure {
                code: warden_protocol::FailureCode::Infrastructure,
                message: format!(
                    "cannot take repository {}'s dependency cache: {error}",
                    repo.pinned.name
                ),
            })?;
        toolchains.take_variables_from(&other, &variables);
    }
    Ok(toolchains)
}
