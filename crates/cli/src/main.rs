//! The `warden` command: parses the command line, loads configuration, builds the tokio runtime
//! and dispatches. Errors print as `warden: error: …` with their causes; exit codes follow SPEC §2.

// The commands' doc comments are their `--help` text, which names tables as `[sandbox]`: text,
// not links.
#![allow(rustdoc::broken_intra_doc_links)]

mod advisories;
mod apply;
mod approve;
mod ask;
mod backup;
mod diff;
mod doctor;
mod gc;
mod interrupt;
mod k8s;
mod local_cli;
mod maintain;
mod mcp;
mod otlp;
mod progress;
mod remote;
mod remote_cli;
mod render;
mod review;
mod run;
mod serve;
mod telemetry_config;
mod text;
mod timeline;
mod token;
mod vulns;
mod web;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "warden",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("WARDEN_COMMIT"), ")"),
    about = "Hand coding questions and changes to AI agents, safely"
)]
struct Cli {
    /// Configuration file (default: WARDEN_CONFIG, else WARDEN_HOME/warden.toml)
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(flatten)]
    remote: remote::RemoteOptions,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Ask a question about one or more repositories and get an answer with checked citations
    Ask(ask::AskArgs),
    /// Ask for a change; get a proposal commit proven by the checks (never touches your checkout)
    Run(run::RunArgs),
    /// Upgrade a Cargo project's, Go module's or npm project's dependencies (all, vulnerable
    /// ones, or named ones), proven by its checks; get a proposal commit (deterministic baseline
    /// mode, or --mode model to have the agent repair what an upgrade breaks)
    Maintain(maintain::MaintainArgs),
    /// Report the known vulnerabilities of a Cargo.lock, go.mod or package-lock.json (against
    /// [maintain] advisory_db or osv_db) without changing anything; exit 1 when there are any
    Vulns(vulns::VulnsArgs),
    /// Review a commit range (--repo R BASE..HEAD) or a change task's proposal with the
    /// reviewer; exit 1 on blocking (P0/P1) findings
    Review(review::ReviewArgs),
    /// The advisory databases [maintain] names: `update` fetches or refreshes them through
    /// Warden's egress proxy
    Advisories {
        #[command(subcommand)]
        command: advisories::AdvisoriesCommand,
    },
    /// Show a change task's proposal: stat, sensitive files and the redacted diff
    Diff(diff::DiffArgs),
    /// Fetch a change task's proposal into your repository as a branch (work tree untouched)
    Apply(apply::ApplyArgs),
    /// Approve what an approval is bound to (its hash), e.g. publishing a proposal
    Approve(approve::ApproveArgs),
    /// Reject an approval: nothing is published
    Reject(approve::RejectArgs),
    /// Show a task and its result
    Show {
        /// The task id (tsk_…)
        task: String,
        /// Print the task as JSON (the object of GET /v1/tasks/{id})
        #[arg(long)]
        json: bool,
    },
    /// List tasks
    Tasks {
        /// Print the tasks as JSON
        #[arg(long)]
        json: bool,
    },
    /// Print a task's run journal as a timeline (turns, tool calls with durations, rejections,
    /// checks, spend), verifying its hash chain; with --follow, follow its events live and print
    /// its result (in-process: run it here if it waits for a worker, e.g. after a crash)
    Logs {
        /// The task id (tsk_…)
        task: String,
        /// Follow the task's events until it settles, then print its result
        #[arg(long)]
        follow: bool,
        /// The raw journal records, one JSON object a line (with --follow: the result as one
        /// JSON object)
        #[arg(long)]
        json: bool,
    },
    /// Cancel an unfinished task (its run stops within about a second)
    Cancel {
        /// The task id (tsk_…)
        task: String,
        /// Print the result as JSON
        #[arg(long)]
        json: bool,
    },
    /// Run a finished task again as a new task on the same commits and follow it
    Retry {
        /// The task id (tsk_…)
        task: String,
        /// Print the result as JSON
        #[arg(long)]
        json: bool,
    },
    /// Answer a task's clarification and follow it as it resumes (the same task); on a finished
    /// task, start a follow-up of its kind on the same commits (a change on its proposal)
    Answer {
        /// The task id (tsk_…)
        task: String,
        /// The answer
        text: String,
        /// Print the result as JSON
        #[arg(long)]
        json: bool,
    },
    /// Send a message to a task: a queued or running question or change reads it before its
    /// next model call; a task waiting for input takes it as its answer; a finished one is
    /// followed up. Prints what happened and returns (`logs --follow` watches)
    Say {
        /// The task id (tsk_…)
        task: String,
        /// The message
        text: String,
        /// Print the task as JSON
        #[arg(long)]
        json: bool,
    },
    /// List the repositories registered on the server; `repos add` registers one (needs --server)
    Repos {
        #[command(subcommand)]
        command: Option<remote_cli::ReposCommand>,
        /// Print the repositories as JSON
        #[arg(long)]
        json: bool,
    },
    /// Run the HTTP API and workers (one instance per WARDEN_HOME)
    Serve,
    /// Run workers only, against a shared Postgres (WARDEN_DATABASE_URL)
    Worker,
    /// Manage the API tokens `warden serve` accepts (in its database)
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// Manage the web console's users and sessions `warden serve` accepts (in its database)
    Web {
        #[command(subcommand)]
        command: web::WebCommand,
    },
    /// Report what works on this machine: configuration (and the file settings go in), git,
    /// state directory, the model and its endpoint, the toolchains installed here (with the
    /// [sandbox] toolchains line that shows them to the sandbox), sandbox backends and layers,
    /// and the server (WARDEN_SERVER); exit 1 if anything fails
    Doctor {
        /// Print the checks as one JSON object
        #[arg(long)]
        json: bool,
        /// Make no network request (the model endpoint, the server and the prepare proxy are
        /// not checked)
        #[arg(long)]
        offline: bool,
    },
    /// Evict unused mirrors, snapshots and caches down to [storage] max_bytes
    Gc(gc::GcArgs),
    /// Online copies of this WARDEN_HOME's SQLite databases (warden.db, local.db) into DIR
    Backup(backup::BackupArgs),
    /// What the kubernetes sandbox backend needs in a cluster (`warden k8s render | kubectl
    /// apply -f -`)
    K8s {
        #[command(subcommand)]
        command: k8s::K8sCommand,
    },
    /// Serve the Model Context Protocol on stdin/stdout for other agents and editors: ask,
    /// run_change, task_status, task_result, task_diff, answer, cancel, list_repos (tasks run
    /// in-process; no tool approves)
    Mcp(mcp::McpArgs),
}

/// An error in how Warden was invoked or configured: exit code 2.
#[derive(Debug)]
pub struct UsageError(pub anyhow::Error);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for UsageError {}

/// Wraps an error as a usage error.
pub fn usage(error: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(UsageError(error.into()))
}

/// The log filter without `WARDEN_LOG`. `serve` and `worker` log every warning. The other
/// commands show a task's model retries, fallbacks and refusals as progress and in its result,
/// so the model client's own warnings about them would only repeat those lines, timestamped, in
/// the middle of the progress.
fn default_log_filter(command: &Command) -> &'static str {
    match command {
        Command::Serve | Command::Worker => "warn",
        _ => "warn,warden_models=error",
    }
}

/// Log lines on stderr, filtered by `WARDEN_LOG` (default [`default_log_filter`]): text, or one
/// JSON object per line (`timestamp`, `level`, `message`, the event's fields, `target`) with
/// `WARDEN_LOG_FORMAT=json`, for log shippers.
fn init_logging(default_filter: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let format = std::env::var("WARDEN_LOG_FORMAT");
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format.as_deref() {
        Ok("json") => lines
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .boxed(),
        _ => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        // Spans for OpenTelemetry export: nothing until `[telemetry]` starts it.
        .with(otlp::OtlpLayer.with_filter(otlp::filter()))
        .init();
    if let Ok(format) = format {
        if format != "json" && format != "text" {
            tracing::warn!(%format, "WARDEN_LOG_FORMAT is json or text; logging text");
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(default_log_filter(&cli.command));
    // The model key lives in this process: make it non-dumpable so nothing of the same user
    // (a sandboxed command included) can ptrace it or read its memory through /proc.
    if let Err(error) = warden_sandbox::harden_current_process() {
        eprintln!("warden: error: {error}");
        return ExitCode::from(1);
    }
    // Commands that only print end quietly when their reader goes away (`| head`).
    if matches!(
        cli.command,
        Command::Tasks { .. }
            | Command::Show { .. }
            | Command::Diff(_)
            | Command::Doctor { .. }
            | Command::K8s { .. }
            | Command::Logs { follow: false, .. }
    ) {
        warden_sandbox::quiet_on_closed_output();
    }
    let outcome = run(cli);
    // Spans still queued for export go out before the process ends.
    otlp::flush(std::time::Duration::from_secs(5));
    match outcome {
        // A task cancelled by Ctrl-C printed its cancelled result; the command was interrupted.
        Ok(_) if interrupt::interrupted() => ExitCode::from(interrupt::INTERRUPTED),
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("warden: error: {error:#}");
            if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let cli = match remote_cli::dispatch(&cli.remote, cli.command)? {
        remote_cli::Dispatch::Done(code) => return Ok(code),
        remote_cli::Dispatch::Local(command) => Cli { command, ..cli },
    };
    if matches!(cli.command, Command::Mcp(_)) && cli.remote.server().is_some() {
        // Refused rather than ignored: the client would otherwise get another store's tasks.
        return Err(usage(anyhow::anyhow!(
            "warden mcp runs tasks in-process and does not talk to a server yet: unset \
             WARDEN_SERVER (or leave out --server) in the MCP client's configuration"
        )));
    }
    if matches!(cli.command, Command::Vulns(_)) && cli.remote.server().is_some() {
        // Refused rather than run here: with a server, `--repo` names a registered repository,
        // which this process cannot read.
        return Err(usage(anyhow::anyhow!(
            "warden vulns reads the repository in-process and does not talk to a server yet: \
             unset WARDEN_SERVER (or leave out --server) and give a path or URL"
        )));
    }
    if let Command::Doctor { json, offline } = cli.command {
        // Every check, even when the configuration does not load.
        return doctor_anyway(cli.config.as_deref(), &cli.remote, json, offline);
    }
    let (config, telemetry) =
        load_config(cli.config.as_deref(), &warden_config::ProcessEnv).map_err(usage)?;
    if let Some(telemetry) = &telemetry {
        otlp::start(telemetry).map_err(usage)?;
    }
    match cli.command {
        Command::Ask(args) => tokio_runtime()?.block_on(local_cli::ask(config, args)),
        Command::Run(args) => tokio_runtime()?.block_on(local_cli::run(config, args)),
        Command::Maintain(args) => tokio_runtime()?.block_on(local_cli::maintain(config, args)),
        Command::Vulns(args) => tokio_runtime()?.block_on(local_cli::vulns(config, args)),
        Command::Review(args) => {
            // With a server, a task's proposal comes from it; the reviewer runs here.
            let server = cli
                .remote
                .server()
                .map(|server| remote::Remote::new(server, cli.remote.token.as_deref()))
                .transpose()?;
            tokio_runtime()?.block_on(local_cli::review(config, args, server))
        }
        Command::Advisories { command } => {
            tokio_runtime()?.block_on(advisories::advisories(config.engine, command))
        }
        Command::Diff(args) => tokio_runtime()?.block_on(local_cli::diff(config, &args)),
        Command::Apply(args) => tokio_runtime()?.block_on(local_cli::apply(config, args)),
        Command::Approve(args) => tokio_runtime()?.block_on(local_cli::approve(config, args)),
        Command::Reject(args) => tokio_runtime()?.block_on(local_cli::reject(config, args)),
        Command::Show { task, json } => {
            tokio_runtime()?.block_on(local_cli::show(config, &task, json))
        }
        Command::Tasks { json } => tokio_runtime()?.block_on(local_cli::tasks(config, json)),
        Command::Logs { task, follow, json } => {
            tokio_runtime()?.block_on(local_cli::logs(config, &task, follow, json))
        }
        Command::Cancel { task, json } => {
            tokio_runtime()?.block_on(local_cli::cancel(config, &task, json))
        }
        Command::Retry { task, json } => {
            tokio_runtime()?.block_on(local_cli::retry(config, &task, json))
        }
        Command::Answer { task, text, json } => {
            tokio_runtime()?.block_on(local_cli::answer(config, &task, &text, json))
        }
        Command::Say { task, text, json } => {
            tokio_runtime()?.block_on(local_cli::say(config, &task, &text, json))
        }
        Command::Repos { .. } => Err(needs_server("repos")),
        // Normally answered above, before the configuration had to load.
        Command::Doctor { json, offline } => {
            doctor_anyway(cli.config.as_deref(), &cli.remote, json, offline)
        }
        Command::Gc(args) => tokio_runtime()?.block_on(gc::gc(&config.engine, args)),
        Command::Backup(args) => backup::backup(&config.engine, args),
        Command::K8s { command } => k8s::k8s(&config.engine, command),
        Command::Serve => tokio_runtime()?.block_on(serve::serve(config)),
        Command::Worker => tokio_runtime()?.block_on(serve::worker(config)),
        Command::Token { command } => {
            tokio_runtime()?.block_on(token::token(&config.engine, command))
        }
        Command::Web { command } => tokio_runtime()?.block_on(web::web(&config.engine, command)),
        Command::Mcp(args) => tokio_runtime()?.block_on(mcp::serve(config, args)),
    }
}

/// The configuration every command runs with: the engine's and the service's sections
/// (`warden_service::config::load`) and the binary's own `[telemetry]`, so that a mistake in
/// any section stops every command, and every redactor hides the collector's headers too.
fn load_config(
    explicit: Option<&std::path::Path>,
    env: &dyn warden_config::Env,
) -> anyhow::Result<(
    warden_service::config::Loaded,
    Option<telemetry_config::TelemetryConfig>,
)> {
    let mut config = warden_service::config::load(explicit, env)?;
    let telemetry =
        telemetry_config::TelemetryConfig::resolve(&config.file.sections.telemetry, env)?;
    // The collector's headers (an API key) are secrets like the others.
    if let Some(telemetry) = &telemetry {
        let values = telemetry.headers.iter().map(|(_, value)| value.clone());
        config.engine.other_secrets =
            std::mem::take(&mut config.engine.other_secrets).with_secrets(values);
    }
    Ok((config, telemetry))
}

/// `warden doctor` runs every check even when the configuration does not load (a bad
/// `WARDEN_MODEL`, an unknown key in warden.toml): it reports that failure first and checks the
/// rest with the defaults.
fn doctor_anyway(
    explicit: Option<&std::path::Path>,
    remote: &remote::RemoteOptions,
    json: bool,
    offline: bool,
) -> anyhow::Result<u8> {
    use warden_config::{ConfigFile, ProcessEnv};
    let (config, config_error) = match load_config(explicit, &ProcessEnv) {
        Ok((config, _telemetry)) => (config, None),
        Err(error) => {
            let defaults =
                warden_service::config::load(Some(std::path::Path::new("/dev/null")), &HomeOnly)
                    .map_err(usage)?;
            (defaults, Some(format!("{error:#}")))
        }
    };
    let config_file =
        ConfigFile::path_of(explicit, &ProcessEnv).unwrap_or(config.engine.file.clone());
    let options = doctor::DoctorOptions {
        as_json: json,
        offline,
        config_error,
        config_file,
        remote,
    };
    tokio_runtime()?.block_on(doctor::doctor(&config, options))
}

/// The environment as far as it says where Warden's state lives, and nothing else.
struct HomeOnly;

impl warden_config::Env for HomeOnly {
    fn var(&self, name: &str) -> Option<String> {
        matches!(name, "WARDEN_HOME" | "HOME")
            .then(|| std::env::var(name).ok())
            .flatten()
            .filter(|v| !v.is_empty())
    }
}

/// A command that only exists against a server.
fn needs_server(command: &str) -> anyhow::Error {
    usage(anyhow::anyhow!(
        "warden {command} needs a server: give --server URL or set WARDEN_SERVER (with the token \
         in WARDEN_TOKEN)"
    ))
}

fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
