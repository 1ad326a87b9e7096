//! The commands run against a Warden server when `--server URL` (or `WARDEN_SERVER`) is given:
//! `ask` and `run` submit a task and follow its events live on stderr, then print the result
//! exactly as the in-process path does (`--json`: the result JSON) with the same exit codes;
//! `tasks`, `show`, `logs [--follow]`, `cancel`, `retry`, `answer`, `approve` and `reject` go to
//! the API. Ctrl-C while following stops following only: the task goes on on the server, and
//! `warden logs TASK --follow` picks it up again (exit code 130).

use crate::progress::StderrProgress;
use crate::remote::{self, Remote, RemoteOptions};
use crate::{render, text, usage, Command};
use anyhow::Context;
use serde_json::{json, Value};
use warden_protocol::{TaskId, TaskStatus};
use warden_runtime::EventSink;

/// Exit code when Ctrl-C stopped following (the shell's convention for SIGINT).
use crate::interrupt::INTERRUPTED;

/// `warden repos add`.
#[derive(Debug, clap::Subcommand)]
pub enum ReposCommand {
    /// Register a repository on the server (admin token)
    Add {
        /// 1-100 letters, digits, `.`, `_` or `-`
        name: String,
        /// An absolute path on the server, or a git URL
        source: String,
        /// The branch tasks use when they name no revision
        #[arg(long)]
        branch: Option<String>,
        /// A check command for change tasks (repeatable)
        #[arg(long = "check", value_name = "CMD")]
        checks: Vec<String>,
        /// An absolute directory on the server shown read-only in this repository's sandboxes,
        /// e.g. a toolchain (repeatable)
        #[arg(long = "mount", value_name = "PATH")]
        mounts: Vec<String>,
        /// A command filling this repository's dependency cache before a change task's agent,
        /// replacing `[sandbox] prepare` (repeatable)
        #[arg(long = "prepare", value_name = "CMD")]
        prepare: Vec<String>,
        /// Print the registered repository as JSON
        #[arg(long)]
        json: bool,
        /// Return once it is registered, without following the server as it fetches the
        /// repository and writes its first snapshot
        #[arg(long)]
        no_wait: bool,
    },
}

/// What became of a command: handled against the server, or left to run locally.
pub enum Dispatch {
    Done(u8),
    Local(Command),
}

/// Runs the command against the server when one is configured and the command talks to one.
pub fn dispatch(options: &RemoteOptions, command: Command) -> anyhow::Result<Dispatch> {
    let Some(server) = options.server() else {
        return Ok(Dispatch::Local(command));
    };
    let command = match command {
        command @ (Command::Ask(_)
        | Command::Run(_)
        | Command::Maintain(_)
        | Command::Approve(_)
        | Command::Reject(_)
        | Command::Show { .. }
        | Command::Diff(_)
        | Command::Tasks { .. }
        | Command::Logs { .. }
        | Command::Cancel { .. }
        | Command::Retry { .. }
        | Command::Answer { .. }
        | Command::Say { .. }
        | Command::Repos { .. }
        | Command::Apply(_)) => command,
        other => return Ok(Dispatch::Local(other)),
    };
    let remote = Remote::new(server, options.token.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime
        .block_on(execute(&remote, command))
        .map(Dispatch::Done)
}

async fn execute(remote: &Remote, command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Ask(args) => ask_remote(remote, args).await,
        Command::Run(args) => run_remote(remote, args).await,
        Command::Maintain(args) => maintain_remote(remote, args).await,
        Command::Show { task, json } => show(remote, &task_id(&task)?, json).await,
        Command::Diff(args) => diff(remote, &args).await,
        Command::Apply(args) => apply(remote, args).await,
        Command::Tasks { json } => tasks(remote, json).await,
        Command::Logs { task, follow, json } => {
            let id = task_id(&task)?;
            if follow {
                follow_and_print(remote, &id, None, json).await
            } else {
                journal(remote, &id, json).await
            }
        }
        Command::Cancel { task, json } => cancel(remote, &task_id(&task)?, json).await,
        Command::Retry { task, json } => {
            let id = task_id(&task)?;
            let new = remote
                .post(&format!("/v1/tasks/{id}/retry"), &json!({}))
                .await?;
            let new_id = remote::task_id_of(&new)?;
            eprintln!("warden: retrying {id} as {new_id}");
            follow_and_print(remote, &new_id, None, json).await
        }
        Command::Answer { task, text, json } => answer(remote, &task_id(&task)?, &text, json).await,
        Command::Say { task, text, json } => {
            let id = task_id(&task)?;
            let before = remote::status_of(&remote.task(&id).await?);
            let task = remote
                .post(&format!("/v1/tasks/{id}/messages"), &json!({"text": text}))
                .await
                .map_err(invalid_is_usage)?;
            crate::render::print_said(&id, before, &task, json)
        }
        Command::Repos { command, json } => repos(remote, command, json).await,
        Command::Approve(args) => {
            let id = approval_id(&args.id)?;
            let reply = remote
                .post(
                    &format!("/v1/approvals/{id}"),
                    &json!({"decision": "approve", "hash": args.hash}),
                )
                .await?;
            println!("approved {id}{}", decision_detail(&reply));
            Ok(0)
        }
        Command::Reject(args) => {
            let id = approval_id(&args.id)?;
            // A decision names the hash it is about; rejecting is about whatever is pending.
            let approval = remote.get(&format!("/v1/approvals/{id}")).await?;
            let hash = approval["subject_hash"].as_str().unwrap_or_default();
            let reply = remote
                .post(
                    &format!("/v1/approvals/{id}"),
                    &json!({"decision": "reject", "hash": hash}),
                )
                .await?;
            println!(
                "rejected {id}: nothing is published{}",
                decision_detail(&reply)
            );
            Ok(0)
        }
        other => Err(anyhow::anyhow!("{other:?} does not talk to a server")),
    }
}

/// `warden apply` against a server: the proposal as a bundle, written into `--repo` (default:
/// the current directory; the server's repository is not this machine's) as in-process.
async fn apply(remote: &Remote, args: crate::apply::ApplyArgs) -> anyhow::Result<u8> {
    let id = task_id(&args.task)?;
    let (headers, bundle) = remote
        .get_bytes(
            &format!("/v1/tasks/{id}/proposal"),
            warden_engine::diff::MAX_BUNDLE_BYTES,
        )
        .await?;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|v| matches!(v.len(), 40 | 64) && v.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("{} sent no {name} with the proposal", remote.base()))
    };
    let (base, commit) = (header("x-warden-base-commit")?, header("x-warden-commit")?);
    let target = match args.repo {
        Some(path) => path,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let branch = args.branch.unwrap_or_else(|| format!("warden/{id}"));
    tokio::task::spawn_blocking(move || {
        let git = warden_repo::Git::locate().context("cannot find git")?;
        crate::apply::fetch_bundle(&git, &bundle, &id, (&base, &commit), &target, &branch)
    })
    .await
    .context("applying the proposal crashed")?
}

fn task_id(text: &str) -> anyhow::Result<TaskId> {
    text.trim().parse().map_err(usage)
}

/// Approval ids go into a URL path: only their documented characters.
fn approval_id(text: &str) -> anyhow::Result<String> {
    let id = text.trim();
    let valid = !id.is_empty()
        && id.len() <= 100
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(id.to_string())
    } else {
        Err(usage(anyhow::anyhow!(
            "{} is not an approval id (apr_…)",
            text::one_line(text)
        )))
    }
}

/// What the server said about a decision, in a few words.
fn decision_detail(reply: &Value) -> String {
    let pick = |key: &str| reply.get(key).and_then(Value::as_str).map(text::one_line);
    match (pick("status"), pick("task_id").or_else(|| pick("task"))) {
        (Some(status), Some(task)) => format!(" ({status}; task {task})"),
        (Some(status), None) => format!(" ({status})"),
        (None, Some(task)) => format!(" (task {task})"),
        (None, None) => String::new(),
    }
}

/// With a server, `--repo` names repositories registered there (`NAME[@REV]`), never a local
/// path or URL: the server cannot read this machine.
fn registered_repos(arguments: &[String]) -> anyhow::Result<Vec<String>> {
    arguments
        .iter()
        .map(|argument| {
            let (name, rev) = match argument.split_once('@') {
                Some((name, rev)) => (name, Some(rev)),
                None => (argument.as_str(), None),
            };
            let name_ok = !name.is_empty()
                && name.len() <= 100
                && !name.starts_with(['.', '-'])
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            let rev_ok = rev.is_none_or(|rev| {
                !rev.is_empty()
                    && !rev.starts_with('-')
                    && !rev.chars().any(|c| c.is_control() || c == ' ')
            });
            if name_ok && rev_ok {
                Ok(argument.clone())
            } else {
                Err(usage(anyhow::anyhow!(
                    "with --server, --repo names a repository registered on the server \
                     (NAME[@REV]), not a local path or URL: {}. Register it first (admin \
                     token): warden repos add NAME SOURCE (POST /v1/repos), where SOURCE is a \
                     path on the server or a git URL",
                    text::one_line(argument)
                )))
            }
        })
        .collect()
}

fn with_repos(mut body: Value, repos: Vec<String>) -> Value {
    match repos.len() {
        0 => {}
        1 => body["repo"] = json!(repos[0]),
        _ => body["repos"] = json!(repos),
    }
    body
}

async fn ask_remote(remote: &Remote, args: crate::ask::AskArgs) -> anyhow::Result<u8> {
    let repos = registered_repos(&args.repos)?;
    // The server refuses an empty question with the service's own sentence.
    let mut body = json!({"kind": "question", "prompt": args.question});
    match &args.follow_up {
        Some(earlier) => body["follow_up_to"] = json!(task_id(earlier)?),
        None if repos.is_empty() => {
            return Err(usage(anyhow::anyhow!(
                "name at least one registered repository with --repo NAME[@REV]"
            )))
        }
        None => {}
    }
    submit_and_follow(remote, with_repos(body, repos), args.json).await
}

async fn run_remote(remote: &Remote, args: crate::run::RunArgs) -> anyhow::Result<u8> {
    if args.apply {
        return Err(usage(anyhow::anyhow!(
            "--apply fetches the proposal from a local mirror; with --server the proposal is on \
             the server (see GET /v1/tasks/TASK/diff)"
        )));
    }
    if args.baseline {
        return Err(usage(anyhow::anyhow!(
            "--baseline is not supported with --server yet"
        )));
    }
    if let Some(empty) = args.checks.iter().find(|c| c.trim().is_empty()) {
        return Err(usage(anyhow::anyhow!("empty --check command {empty:?}")));
    }
    let mut body = json!({"kind": "change", "prompt": args.request});
    let repos = match (&args.follow_up, &args.repo) {
        // A follow-up continues on the earlier change's proposal (its checks unless new ones
        // are given), as in-process.
        (Some(earlier), _) => {
            body["follow_up_to"] = json!(task_id(earlier)?);
            Vec::new()
        }
        (None, Some(repo)) => registered_repos(std::slice::from_ref(repo))?,
        (None, None) => {
            return Err(usage(anyhow::anyhow!(
                "name the registered repository with --repo NAME"
            )))
        }
    };
    if !args.checks.is_empty() {
        body["checks"] = json!(args.checks);
    }
    if args.publish {
        body["publish"] = json!(true);
    }
    submit_and_follow(remote, with_repos(body, repos), args.json).await
}

async fn maintain_remote(
    remote: &Remote,
    args: crate::maintain::MaintainArgs,
) -> anyhow::Result<u8> {
    let options = args.options().map_err(|e| usage(anyhow::anyhow!(e)))?;
    let mut body = json!({"kind": "maintain", "prompt": options.prompt()});
    if !options.select.is_empty() {
        body["select"] = json!(options.select);
    }
    if let Some(mode) = &options.mode {
        body["mode"] = json!(mode);
    }
    if !args.checks.is_empty() {
        body["checks"] = json!(args.checks);
    }
    if args.publish {
        body["publish"] = json!(true);
    }
    let repos = registered_repos(std::slice::from_ref(&args.repo))?;
    submit_and_follow(remote, with_repos(body, repos), args.json).await
}

/// A request the server found invalid is a usage error here too (exit 2), as the same request
/// made in-process is; the sentence is the server's.
fn invalid_is_usage(error: anyhow::Error) -> anyhow::Error {
    match remote::api_failure(&error) {
        Some(failure) if matches!(failure.status, 400 | 422) => usage(error),
        _ => error,
    }
}

async fn submit_and_follow(remote: &Remote, body: Value, json: bool) -> anyhow::Result<u8> {
    let task = remote.submit(&body).await.map_err(invalid_is_usage)?;
    let id = remote::task_id_of(&task)?;
    eprintln!(
        "warden: submitted {id} to {} ({})",
        remote.base(),
        text::one_line(task["status"].as_str().unwrap_or("queued"))
    );
    follow_and_print(remote, &id, None, json).await
}

/// Follows the task live on stderr, then prints it as `ask`/`run` would. Ctrl-C stops
/// following and says how to pick it up again.
async fn follow_and_print(
    remote: &Remote,
    id: &TaskId,
    after: Option<u64>,
    json: bool,
) -> anyhow::Result<u8> {
    let progress = StderrProgress::new();
    let show_event = |event| progress.emit(event);
    let show_line = |line: &str| progress.line(line);
    let followed = tokio::select! {
        task = remote.follow(id, after, &show_event, &show_line) => task?,
        _ = tokio::signal::ctrl_c() => {
            progress.line(&format!(
                "warden: stopped following {id}; it goes on on the server. Follow it again \
                 with: warden logs {id} --follow --server {}",
                remote.base()
            ));
            return Ok(INTERRUPTED);
        }
    };
    render::print_outcome(&followed, json)
}

async fn repos(remote: &Remote, command: Option<ReposCommand>, json: bool) -> anyhow::Result<u8> {
    match command {
        None => {
            let page = remote.get("/v1/repos").await?;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            if json {
                println!("{}", text::json_pretty(&data)?);
            } else {
                for repo in &data {
                    println!(
                        "{}  {}",
                        text::one_line(repo["name"].as_str().unwrap_or("?")),
                        text::one_line(repo["source"].as_str().unwrap_or("?"))
                    );
                }
            }
            Ok(0)
        }
        Some(ReposCommand::Add {
            name,
            source,
            branch,
            checks,
            mounts,
            prepare,
            json: json_out,
            no_wait,
        }) => {
            let mut body = json!({"name": name, "source": source, "checks": checks});
            if !mounts.is_empty() {
                body["mounts"] = json!(mounts);
            }
            if !prepare.is_empty() {
                body["prepare"] = json!(prepare);
            }
            if let Some(branch) = branch {
                body["branch"] = json!(branch);
            }
            let mut repo = remote.post("/v1/repos", &body).await?;
            eprintln!(
                "warden: registered {} ({}) on {}",
                text::one_line(repo["name"].as_str().unwrap_or(&name)),
                text::one_line(repo["source"].as_str().unwrap_or(&source)),
                remote.base()
            );
            let mut code = 0;
            if !no_wait && repo["warm"].is_object() {
                (repo, code) = follow_warming(remote, &name, repo).await?;
            }
            if json || json_out {
                println!("{}", text::json_line(&repo));
            } else {
                println!(
                    "{}  {}",
                    text::one_line(repo["name"].as_str().unwrap_or(&name)),
                    text::one_line(repo["source"].as_str().unwrap_or(&source))
                );
            }
            Ok(code)
        }
    }
}

/// Follows the server as it fetches a newly registered repository and writes its first
/// snapshot, printing its progress on stderr; the repository as it ends, and exit code 1 when
/// warming failed (it stays registered: tasks pin it when they start).
async fn follow_warming(
    remote: &Remote,
    name: &str,
    mut repo: Value,
) -> anyhow::Result<(Value, u8)> {
    let progress = StderrProgress::new();
    let mut last = String::new();
    loop {
        let warm = &repo["warm"];
        if let Some(line) = warm["progress"].as_str().filter(|l| *l != last) {
            progress.line(&format!("warden: {line}"));
            last = line.to_string();
        }
        match warm["state"].as_str() {
            Some("ready") => {
                progress.line(&format!(
                    "warden: {name} is ready at {}",
                    text::short_commit(warm["commit"].as_str().unwrap_or("?"))
                ));
                return Ok((repo, 0));
            }
            Some("failed") => {
                progress.line(&format!(
                    "warden: fetching {name} failed: {}; it stays registered and tasks fetch it \
                     when they start",
                    warm["error"].as_str().unwrap_or("?")
                ));
                return Ok((repo, 1));
            }
            Some("warming") => {}
            _ => return Ok((repo, 0)),
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(300)) => {}
            _ = tokio::signal::ctrl_c() => {
                progress.line("warden: stopped following; the server goes on fetching");
                return Ok((repo, INTERRUPTED));
            }
        }
        repo = remote.get(&format!("/v1/repos/{name}")).await?;
    }
}

async fn show(remote: &Remote, id: &TaskId, json: bool) -> anyhow::Result<u8> {
    let task = remote.task(id).await?;
    render::print_task(&task, json)
}

async fn tasks(remote: &Remote, json: bool) -> anyhow::Result<u8> {
    let page = remote.get("/v1/tasks?limit=200").await?;
    let data = page["data"].as_array().cloned().unwrap_or_default();
    render::print_tasks(&data, json)?;
    if page["next_cursor"].is_string() {
        eprintln!(
            "warden: the {} newest tasks; more are on the server",
            data.len()
        );
    }
    Ok(0)
}

/// Each run's journal records, one JSON object a line, as the local `logs` prints them; the
/// server verified each record's link in its run's hash chain and says so. Read a page at a
/// time (`cursor`), printed as it comes.
/// `warden logs TASK`: every page of the task's journal; a timeline per run, or with `json`
/// the records one a line as a local journal holds them.
async fn journal(remote: &Remote, id: &TaskId, json: bool) -> anyhow::Result<u8> {
    let mut runs = None;
    // The current run's records, for its timeline.
    let mut run_records: Vec<Value> = Vec::new();
    let mut run_number: Option<Value> = None;
    let mut broken: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/v1/tasks/{id}/journal?limit=200&cursor={cursor}"),
            None => format!("/v1/tasks/{id}/journal?limit=200"),
        };
        let page = remote.get(&path).await?;
        if runs.is_none() {
            runs = Some(page["runs"].as_array().map_or(0, Vec::len));
        }
        for record in page["data"].as_array().into_iter().flatten() {
            // The record as the local journal holds it: without the page's `run`/`chain_ok`.
            let mut entry = serde_json::Map::new();
            for field in ["seq", "kind", "at", "hash", "prev_hash", "payload"] {
                entry.insert(field.to_string(), record[field].clone());
            }
            if json {
                println!("{}", text::json_line(&Value::Object(entry)));
            } else {
                if run_number.as_ref() != Some(&record["run"]) {
                    render::print_run_timeline(id, run_number.as_ref(), &run_records);
                    run_records.clear();
                    run_number = Some(record["run"].clone());
                }
                run_records.push(Value::Object(entry));
            }
            let run = text::json_line(&record["run"]);
            if record["chain_ok"] != json!(true) && !broken.contains(&run) {
                broken.push(run);
            }
        }
        let next = page["next_cursor"]
            .as_str()
            .filter(|next| !next.is_empty())
            .map(|next| {
                // A cursor is `<run>.<seq>`; anything else is not put in a URL.
                if next.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                    Ok(next.to_string())
                } else {
                    Err(anyhow::anyhow!("the server sent an invalid journal cursor"))
                }
            })
            .transpose()?;
        match next {
            Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                anyhow::bail!("the server repeated a journal page of {id}")
            }
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    render::print_run_timeline(id, run_number.as_ref(), &run_records);
    let runs = runs.unwrap_or(0);
    if !broken.is_empty() {
        anyhow::bail!(
            "the server reports a broken journal hash chain in run {} of {id}",
            broken.join(", ")
        );
    }
    eprintln!(
        "warden: {runs} run journal(s); hash chains verified by {}",
        remote.base()
    );
    Ok(0)
}

/// `warden diff TASK` against the server: its diff route, with the stat from the task's result.
async fn diff(remote: &Remote, args: &crate::diff::DiffArgs) -> anyhow::Result<u8> {
    let id = task_id(&args.task)?;
    let view = remote.get(&format!("/v1/tasks/{id}/diff")).await?;
    let task = remote.task(&id).await?;
    let proposal: Option<warden_protocol::Proposal> = task
        .pointer("/result/proposal")
        .and_then(|p| serde_json::from_value(p.clone()).ok());
    crate::diff::print_diff(&view, proposal.as_ref(), args);
    Ok(0)
}

async fn cancel(remote: &Remote, id: &TaskId, json: bool) -> anyhow::Result<u8> {
    let task = remote
        .post(&format!("/v1/tasks/{id}/cancel"), &json!({}))
        .await?;
    if json {
        println!("{}", text::json_line(&task));
        return Ok(0);
    }
    let status = task["status"].as_str().unwrap_or("unknown");
    if remote::status_of(&task).is_some_and(TaskStatus::is_terminal) {
        println!("{id}: {}", text::one_line(status));
    } else {
        println!(
            "{id}: {} (cancellation requested; the run stops at its next step)",
            text::one_line(status)
        );
    }
    Ok(0)
}

/// Answers a clarification: the task resumes (or, for a finished task, a follow-up starts) and
/// is followed like `ask`, showing only what happens from now on.
async fn answer(remote: &Remote, id: &TaskId, reply: &str, json: bool) -> anyhow::Result<u8> {
    let before = remote.task(id).await?;
    let after = if remote::status_of(&before) == Some(TaskStatus::WaitingInput) {
        remote.last_event(id).await?
    } else {
        None
    };
    let task = remote
        .post(&format!("/v1/tasks/{id}/messages"), &json!({"text": reply}))
        .await
        .map_err(invalid_is_usage)?;
    let next = remote::task_id_of(&task)?;
    if &next == id {
        eprintln!("warden: {id} resumes");
        follow_and_print(remote, id, after, json).await
    } else {
        eprintln!("warden: {id} had ended; the answer started {next}");
        follow_and_print(remote, &next, None, json).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{exit_code, render};
    use warden_protocol::{ChangeResult, TaskKind};

    #[test]
    fn exit_codes_follow_the_spec_and_the_typed_results() {
        assert_eq!(exit_code(&json!({"outcome": "answer"})), 0);
        assert_eq!(exit_code(&json!({"outcome": "no_change"})), 0);
        assert_eq!(
            exit_code(&json!({"outcome": "proposal", "publication": {"status": "not_requested"}})),
            0
        );
        assert_eq!(
            exit_code(
                &json!({"outcome": "proposal", "publication": {"status": "awaiting_approval"}})
            ),
            4
        );
        assert_eq!(exit_code(&json!({"outcome": "clarification"})), 3);
        assert_eq!(exit_code(&json!({"outcome": "failure"})), 1);
        assert_eq!(exit_code(&json!({})), 1);
    }

    #[test]
    fn only_registered_names_go_to_the_server() {
        let ok = |s: &str| registered_repos(&[s.to_string()]).is_ok();
        assert!(ok("app"));
        assert!(ok("app@v1.2"));
        assert!(ok("my_repo-2@main"));
        for bad in [
            "./app",
            "/srv/app",
            "../app",
            "https://x/y.git",
            "a b",
            "app@",
            "-x",
            ".",
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        // Global --server/--token must not clash with any subcommand's arguments.
        <crate::Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn server_fields_the_renderers_print_as_they_are_are_escaped_too() {
        use warden_protocol::{
            ChangeOutcome, ChangedFile, DiffStat, Proposal, Publication, PublicationStatus, Usage,
        };
        let task_id: TaskId = "tsk_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().unwrap();
        let result = ChangeResult {
            task_id: task_id.clone(),
            kind: TaskKind::Change,
            outcome: ChangeOutcome::Proposal {
                proposal: Box::new(Proposal {
                    id: "prp_\u{9b}2J".into(),
                    repo: "app".into(),
                    base_commit: "b".repeat(40),
                    commit: "c\u{202e}".into(),
                    tree: "0".repeat(40),
                    reference: "refs/warden/proposals/\u{7f}x".into(),
                    diff_stat: DiffStat::default(),
                    files: vec![ChangedFile {
                        path: "src/a.rs".into(),
                        status: "added\u{1b}[2J".into(),
                        additions: Some(1),
                        deletions: Some(0),
                    }],
                    summary: "line one\nline two".into(),
                    hash: format!("sha256:{}", "a".repeat(64)),
                    validations: vec![],
                    sensitive_files: vec![],
                }),
                publication: Publication {
                    status: PublicationStatus::NotRequested,
                    branch: None,
                    pr_url: None,
                },
            },
            baseline: vec![],
            approval: None,
            usage: Usage::default(),
            model: "m".into(),
            sandbox: None,
            notices: vec![],
            maintenance: None,
            gate: None,
            review: None,
        };
        let task = json!({"id": task_id.to_string(), "kind": "change"});
        let shown = render(&task, &serde_json::to_value(&result).unwrap());
        for raw in ['\u{9b}', '\u{202e}', '\u{7f}', '\u{1b}'] {
            assert!(!shown.contains(raw), "{raw:?} raw in:\n{shown}");
        }
        assert!(shown.contains("Proposal prp_\\u{9b}2J on app"), "{shown}");
        assert!(shown.contains("added\\u{1b}[2J"), "{shown}");
        assert!(shown.starts_with("line one\nline two\n"), "{shown}");
    }

    #[test]
    fn approval_ids_cannot_leave_their_path() {
        assert!(approval_id("apr_01ABC").is_ok());
        for bad in ["../tasks", "apr/x", "", "apr?x=1"] {
            assert!(approval_id(bad).is_err(), "{bad}");
        }
    }
}
