//! The `maintain` branch of a change run: the same pinned repository, writable view, change
//! session, proposal commit and publication as a change (`change_task.rs` sets them up and
//! publishes), with Warden's pipeline ([`warden_engine::maintain`]) where a change runs the
//! agent. In baseline mode no model is asked; in model mode the agent repairs what an upgrade
//! breaks, with the change run's model (replaying an earlier run's journaled decisions),
//! ledger (budgets) and journal. The run's journal records the pipeline's outcome, and its
//! stages are the task's events (`maintain.<stage>` tool calls).
//!
//! A maintenance run that crashes is run again from the start on the same pinned commit:
//! every stage is deterministic given the index and the advisory database, and the proposal
//! hash covers the check records a new run makes anew (an approval an interrupted run created
//! for another hash is superseded, as for a change).

use std::sync::Arc;

use warden_engine::change::{self, ChangeSandbox, ChangeSetup, MaintainOptions};
use warden_engine::maintain::{self, MaintainReport, MaintainRun};
use warden_engine::question;
use warden_protocol::TaskStatus;
use warden_runtime::{Clock, Journal, RecordKind, SystemClock};
use warden_store::{Claim, RunJournal};

use super::change_end::{change_failed, finished, infrastructure, request_publication};
use super::{setup_failure, Ending, RunServices};
use crate::journal::{StoreEvents, StoreJournal};

/// What a maintenance run works on; the view comes back to be closed.
pub(super) struct MaintainInput {
    pub repo: question::TaskRepo,
    pub sandbox: ChangeSandbox,
    pub scratch: std::path::PathBuf,
    pub checks: Vec<String>,
    pub publish: bool,
    pub events: StoreEvents,
    pub options: MaintainOptions,
    /// Stops a model-mode repair at its next step.
    pub cancel: warden_runtime::CancelFlag,
}

/// Runs the pipeline on a blocking thread, journals its outcome, and (with `publish`) asks
/// for the approval its proposal's publication waits for. Returns the ending and the view
/// (`None` if the pipeline's thread panicked with it).
pub(super) async fn run_maintain(
    services: &RunServices,
    claim: &Claim,
    input: MaintainInput,
) -> (Ending, Option<ChangeSandbox>) {
    let task = &claim.task;
    let model_mode = input.options.model();
    let model_name = if model_mode {
        services.model.name()
    } else {
        maintain::NO_MODEL.to_string()
    };
    let model_name = model_name.as_str();
    let MaintainInput {
        repo,
        mut sandbox,
        scratch,
        checks,
        publish,
        events,
        options,
        cancel,
    } = input;
    // A project with no checks of its own is maintained with its ecosystem's tests
    // (`cargo test`, `go test`), read from the pinned snapshot.
    let checks = if checks.is_empty() {
        maintain::ecosystem::Ecosystem::default_checks(&repo.snapshot.root)
    } else {
        checks
    };
    // What every command of the task sees (the checks' included), such as the npm registry
    // its cache is keyed by.
    sandbox
        .toolchains
        .env
        .extend(maintain::task_env(&services.config));
    let (session, tools) = {
        let setup = ChangeSetup {
            config: &services.config,
            task_id: &task.id,
            repo: &repo,
            sandbox: &sandbox,
            scratch_dir: &scratch,
            checks: &checks,
            created_at_ms: u64::try_from(task.created_at_ms).unwrap_or(0),
            co_authors: Vec::new(),
        };
        let session = match change::change_session(&setup) {
            Ok(session) => session,
            Err(error) => {
                return (
                    change_failed(task, model_name, setup_failure(error)),
                    Some(sandbox),
                )
            }
        };
        // Each check on the task's timeline as it runs.
        session.report_checks(Arc::new(events.clone()));
        // Model mode repairs with the change task's tools (no MCP servers: the repair is
        // scoped to the upgrade).
        let tools = if model_mode {
            match change::change_tools(&setup, &session) {
                Ok(tools) => maintain::repair::repair_tools(tools),
                Err(error) => {
                    return (
                        change_failed(task, model_name, setup_failure(error)),
                        Some(sandbox),
                    )
                }
            }
        } else {
            Vec::new()
        };
        (session, tools)
    };
    // Cancelling the task kills a check or prepare command running in a view of its own.
    if let Some(control) = services.running.control(&task.id) {
        let session = Arc::downgrade(&session);
        control.on_stop(move || {
            if let Some(session) = session.upgrade() {
                session.cancel_checks();
            }
        });
    }
    // The model, ledger and journal of a change run; baseline mode needs only the journal.
    let (mut journal, plumbing) = if model_mode {
        match super::run_plumbing(services, task, &claim.run()).await {
            Ok(super::RunPlumbing {
                model,
                ledger,
                journal,
                ..
            }) => (journal, Some((model, ledger))),
            Err(message) => {
                return (
                    change_failed(task, model_name, infrastructure(message)),
                    Some(sandbox),
                )
            }
        }
    } else {
        match RunJournal::open(services.store.clone(), claim.run()).await {
            Ok(journal) => (StoreJournal::new(journal, services.redactor.clone()), None),
            Err(error) => {
                return (
                    change_failed(
                        task,
                        model_name,
                        infrastructure(format!("cannot open the run journal: {error}")),
                    ),
                    Some(sandbox),
                )
            }
        }
    };
    let config = Arc::clone(&services.config);
    let task_id = task.id.clone();
    let notices = change::preflight_notices(&repo);
    let joined = tokio::task::spawn_blocking(move || {
        let report = {
            let repair = plumbing.as_ref().map(|(model, ledger)| {
                std::cell::RefCell::new(maintain::repair::RepairAgent {
                    model,
                    journal: &mut journal,
                    ledger: Some(ledger),
                    clock: &SystemClock,
                    cancel,
                    session: Arc::clone(&session),
                    tools,
                    usage: warden_protocol::Usage {
                        cost_usd: Some(0.0),
                        ..warden_protocol::Usage::default()
                    },
                })
            });
            maintain::run_maintenance(MaintainRun {
                config: &config,
                task_id: &task_id,
                session: &session,
                sandbox: &sandbox,
                options: &options,
                events: &events,
                notices,
                now_ms: SystemClock.now_ms(),
                repair,
            })
        };
        drop(session);
        (report, sandbox, journal)
    })
    .await;
    let (MaintainReport { mut result, status }, sandbox, mut journal) = match joined {
        Ok(done) => done,
        Err(error) => {
            return (
                change_failed(
                    task,
                    model_name,
                    infrastructure(format!("the maintenance run crashed: {error}")),
                ),
                None,
            )
        }
    };
    let record = serde_json::json!({
        "outcome": serde_json::to_value(&result.outcome).unwrap_or_default(),
        "baseline": result.baseline,
        "maintenance": result.maintenance,
    });
    if let Err(error) = journal
        .append(SystemClock.now_ms(), RecordKind::RunFinished, record)
        .await
    {
        return (
            change_failed(
                task,
                model_name,
                infrastructure(format!("cannot journal the maintenance run: {error}")),
            ),
            Some(sandbox),
        );
    }
    let mut status = status;
    if publish && status == TaskStatus::Completed {
        match request_publication(&services.store, task, claim.run_number, &mut result).await {
            Ok(true) => status = TaskStatus::WaitingApproval,
            Ok(false) => {}
            Err(failure) => return (change_failed(task, model_name, failure), Some(sandbox)),
        }
    }
    (finished(services, status, &result), Some(sandbox))
}
