//! Executing a `maintain` task for Cargo projects, Go modules and npm projects (what differs
//! between them is [`ecosystem::Ecosystem`]), in deterministic baseline mode (no model) or in
//! model mode (an agent repairs what an upgrade breaks, [`repair`]). Described for Cargo:
//!
//! 1. **Profile** the pinned base tree ([`cargo::profile`]): a root `Cargo.toml` and a committed
//!    `Cargo.lock`; vendored or replaced sources, `[patch]`/`[replace]` and submodules are
//!    refused (`unsupported_project`, naming the reason).
//! 2. **Acquire**: `cargo fetch --locked` (then the repository's own prepare commands) through
//!    the change pipeline's prepare step — the dependency cache writable and network to the
//!    egress allow-list only, through Warden's proxy (`crate::egress`) — over the manifests and
//!    the lockfile alone ([`ecosystem::Ecosystem::fetch_tree`]: never the repository's
//!    `.cargo/config.toml`, whose `rustc-wrapper` would run there). Every later command runs
//!    offline (`CARGO_NET_OFFLINE=true`, the cache read-only).
//! 3. **Baseline**: the checks on the base tree; failing is `baseline_failing`, a check that
//!    timed out or was killed is `baseline_inconclusive`.
//! 4. **Scan** (`--select vulnerable`, or whenever `[maintain] advisory_db` is set): the base
//!    tree's `Cargo.lock` against the local advisory database, recorded with the tree, the
//!    scanner's version, the database's snapshot id and the time.
//! 5. **Discover** candidate versions from the sparse index (host side, `[maintain] index`) and
//!    keep those the policy allows ([`index::Policy`]): semver-compatible and inside the
//!    manifest's requirement unless majors are allowed, not yanked, not a pre-release, older
//!    than the cooldown, allowed and not denied. `vulnerable` targets the lowest eligible
//!    version that clears every advisory found for the package, else the lowest that clears
//!    the most (what remains is a notice); otherwise the newest.
//! 6. **Fetch and apply** in dependency order (a package before those depending on it), each
//!    upgrade re-resolved on the lockfile the ones before it left: the chosen versions'
//!    packages are fetched in one more networked,
//!    prepare-like view over the manifests (`cargo update --precise` + `cargo fetch`, the cache
//!    writable, its lockfile thrown away); then each upgrade is applied offline in the task's
//!    own writable view (`cargo update --offline -p NAME@OLD --precise NEW`) and the checks run
//!    on exactly the resulting candidate tree. An upgrade the package manager refuses, or that
//!    breaks a check in baseline mode, drops only itself (the view is put back to the tree
//!    before it, exactly, and a notice names it); in model mode the change
//!    agent loop repairs the code ([`repair`]), its submission refused unless its `Cargo.lock`
//!    keeps to the upgrade and the checks pass on exactly its tree.
//! 7. **Readiness** ([`readiness`]): every validation and the post-scan must be bound to the
//!    exact candidate tree, the checks must pass, the post-scan must not find a targeted
//!    advisory and the candidate's `Cargo.lock` must hold every upgrade at its target version;
//!    anything else refuses, naming it.
//! 8. **Proposal** through the change pipeline's proposal commit, whose summary (the commit
//!    message and pull-request body) lists each upgrade old → new, the advisories cleared and
//!    the validations. Publication is the change pipeline's hash-bound approval.

pub mod advisory;
pub mod cargo;
pub mod ecosystem;
pub mod gomod;
pub mod goproxy;
pub mod index;
pub mod npm;
pub mod osv;
pub mod repair;
pub mod update;

use ecosystem::{Database, Ecosystem};

use crate::change::{self, ChangeSandbox, MaintainOptions, PrepareNetwork};
use crate::config::Config;
use std::time::Duration;
use warden_protocol::{
    ChangeOutcome, ChangeResult, Event, Failure, FailureCode, Finding, Maintenance, Proposal,
    Publication, PublicationStatus, Scan, TaskId, TaskKind, TaskStatus, Upgrade, Usage, Validation,
};
use warden_runtime::EventSink;
use warden_tools::checks::ChangeSession;

/// The checks a Cargo project is maintained with when neither the task nor the repository
/// names any.
pub const DEFAULT_CARGO_CHECKS: [&str; 1] = ["cargo test --locked --offline"];

/// The checks a Go module is maintained with when neither the task nor the repository names
/// any (offline: the Go preset's `GOPROXY=off`, `GOFLAGS=-mod=mod`).
pub const DEFAULT_GO_CHECKS: [&str; 1] = ["go test ./..."];

/// The checks an npm project is maintained with when neither the task nor the repository names
/// any: its dependencies installed from the cache (no network, no lifecycle scripts), then its
/// `test` script. npm cannot read a read-only cache (its cache library rewrites an index bucket
/// on every lookup and takes a failed write for a miss), so the command first copies the
/// repository's cache into the sandbox's own `/tmp`; the cache itself stays read-only.
pub const DEFAULT_NPM_CHECKS: [&str; 1] = [
    "rm -rf /tmp/npm-cache && cp -R \"$npm_config_cache\" /tmp/npm-cache && \
     export npm_config_cache=/tmp/npm-cache && \
     npm ci --offline --ignore-scripts --no-audit --no-fund && npm test",
];

/// How long applying one upgrade in the task's view may run.
const APPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// Variables every command of a maintenance task gets, its checks' included: the npm registry
/// (npm keys its cache by it, so the offline commands must name the registry the networked
/// steps filled the cache from).
pub fn task_env(config: &Config) -> Vec<(String, String)> {
    vec![(
        "npm_config_registry".into(),
        config.maintain.npm_registry.clone(),
    )]
}

/// The `model` a baseline-mode result names: none was asked.
pub const NO_MODEL: &str = "none";

/// Everything one maintenance run needs.
pub struct MaintainRun<'a> {
    pub config: &'a Config,
    pub task_id: &'a TaskId,
    pub session: &'a ChangeSession,
    pub sandbox: &'a ChangeSandbox,
    pub options: &'a MaintainOptions,
    pub events: &'a dyn EventSink,
    /// Notices gathered before the run (pinning, ignored agent configuration).
    pub notices: Vec<String>,
    /// Now, ms since the epoch (the cooldown's and the scans' clock).
    pub now_ms: u64,
    /// `--mode model`: what repairs the code an upgrade breaks; `None` in baseline mode,
    /// which drops an upgrade that breaks a check.
    pub repair: Option<std::cell::RefCell<repair::RepairAgent<'a>>>,
}

/// A finished maintenance run: its result (the change result with `kind: maintain` and
/// `maintenance`) and the task status it implies.
#[derive(Debug, Clone)]
pub struct MaintainReport {
    pub result: ChangeResult,
    pub status: TaskStatus,
}

/// What the pipeline builds up as it goes, kept in the result whatever the ending.
struct State {
    baseline: Vec<Validation>,
    notices: Vec<String>,
    /// Why each vulnerable package instance that stays is not (fully) fixed, for the proposal.
    held: Vec<Held>,
    maintenance: Maintenance,
    step: u32,
    /// What the model repaired (model mode), for the proposal's summary.
    repairs: Vec<String>,
}

/// How the pipeline ended, short of a failure.
enum Done {
    Proposal(Box<Proposal>),
    NoChange(String),
}

/// Runs the pipeline of the module documentation. Blocking: call it on a blocking thread
/// inside a tokio runtime (the index is read with the runtime's HTTP client).
pub fn run_maintenance(run: MaintainRun<'_>) -> MaintainReport {
    let mut state = State {
        baseline: Vec::new(),
        held: Vec::new(),
        notices: run.notices.clone(),
        maintenance: Maintenance {
            ecosystem: "cargo".into(),
            mode: if run.repair.is_some() {
                "model".into()
            } else {
                "baseline".into()
            },
            select: run.options.selection(),
            upgrades: Vec::new(),
            advisories_cleared: Vec::new(),
            scans: Vec::new(),
        },
        step: 0,
        repairs: Vec::new(),
    };
    let ending = pipeline(&run, &mut state).map_err(|failure| {
        // A cancelled task's checks and commands stop with errors of their own.
        if run.session.is_cancelled() {
            Failure {
                code: FailureCode::Cancelled,
                message: "the task was cancelled".into(),
            }
        } else {
            failure
        }
    });
    if run.sandbox.backend == warden_sandbox::Backend::Local {
        state.notices.push(
            "no isolation: commands ran directly on the host (WARDEN_SANDBOX=local, for \
             development only)"
                .into(),
        );
    }
    let (model, usage) = match &run.repair {
        Some(agent) => {
            let agent = agent.borrow();
            (agent.model.name(), agent.usage.clone())
        }
        None => (
            NO_MODEL.to_string(),
            Usage {
                cost_usd: Some(0.0),
                ..Usage::default()
            },
        ),
    };
    state.notices.extend(
        usage
            .unpriced_models
            .iter()
            .map(|model| crate::config::unpriced_notice(model)),
    );
    let (outcome, status) = match ending {
        Ok(Done::Proposal(mut proposal)) => {
            proposal.sensitive_files =
                crate::sensitive::sensitive_paths(proposal.files.iter().map(|f| f.path.as_str()));
            state.notices.extend(crate::sensitive::sensitive_notice(
                &proposal.sensitive_files,
            ));
            (
                ChangeOutcome::Proposal {
                    proposal,
                    publication: Publication {
                        status: PublicationStatus::NotRequested,
                        branch: None,
                        pr_url: None,
                    },
                },
                TaskStatus::Completed,
            )
        }
        Ok(Done::NoChange(summary)) => (ChangeOutcome::NoChange { summary }, TaskStatus::Completed),
        Err(failure) => {
            let status = match failure.code {
                FailureCode::Cancelled => TaskStatus::Cancelled,
                FailureCode::TimedOut => TaskStatus::TimedOut,
                _ => TaskStatus::Failed,
            };
            (ChangeOutcome::Failure { failure }, status)
        }
    };
    MaintainReport {
        result: ChangeResult {
            task_id: run.task_id.clone(),
            kind: TaskKind::Maintain,
            outcome,
            baseline: state.baseline,
            approval: None,
            usage,
            model,
            sandbox: Some(run.sandbox.backend.as_str().to_string()),
            notices: state.notices,
            maintenance: Some(state.maintenance),
            gate: None,
            review: None,
        },
        status,
    }
}

fn failure(code: FailureCode, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// One stage as the task's events show it (a tool call named `maintain.<stage>`).
fn stage<T>(
    run: &MaintainRun<'_>,
    state: &mut State,
    name: &str,
    summary: &str,
    work: impl FnOnce(&mut State) -> Result<(T, String), Failure>,
) -> Result<T, Failure> {
    state.step += 1;
    let call_id = format!("maintain-{}", state.step);
    let tool = format!("maintain.{name}");
    run.events.emit(Event::ToolStarted {
        call_id: call_id.clone(),
        tool: tool.clone(),
        summary: format!("{name}: {summary}"),
    });
    let outcome = work(state);
    let (ok, summary) = match &outcome {
        Ok((_, summary)) => (true, summary.clone()),
        Err(failure) => (
            false,
            format!("{}: {}", failure.code, first_line(&failure.message)),
        ),
    };
    run.events.emit(Event::ToolFinished {
        call_id,
        tool,
        ok,
        summary,
        note: None,
    });
    outcome.map(|(value, _)| value)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

fn pipeline(run: &MaintainRun<'_>, state: &mut State) -> Result<Done, Failure> {
    let session = run.session;
    let base_tree = session.config.base_tree.clone();
    let maintain = &run.config.maintain;

    // 1. Profile.
    let files = match Ecosystem::detect(&session.config.snapshot) {
        Ok(Ecosystem::Cargo) => "Cargo.toml, Cargo.lock",
        Ok(Ecosystem::Go) => "go.mod, go.sum",
        Ok(Ecosystem::Npm) => "package.json, package-lock.json",
        Err(_) => "the manifests and the lockfile",
    };
    let profile = stage(run, state, "profile", files, |state| {
        let profile = ecosystem::profile(&session.config.snapshot)
            .map_err(|reason| failure(FailureCode::UnsupportedProject, reason))?;
        state.maintenance.ecosystem = profile.ecosystem.name().into();
        let direct = profile.direct.len();
        let summary = match profile.ecosystem {
            Ecosystem::Cargo => format!("cargo project, {direct} direct crates.io dependencies"),
            Ecosystem::Go => format!("Go module, {direct} direct module requirements"),
            Ecosystem::Npm => format!("npm project, {direct} direct registry dependencies"),
        };
        Ok((profile, summary))
    })?;
    let eco = profile.ecosystem;
    let (preset, cache_var) = eco.preset();
    if !run
        .sandbox
        .toolchains
        .cache_env
        .iter()
        .any(|(name, _)| name == cache_var)
    {
        return Err(failure(
            FailureCode::UnsupportedProject,
            format!(
                "maintaining {} needs the {preset} toolchain preset and its per-repository \
                 dependency cache: add `toolchains = [\"{preset}\"]` under [sandbox] in {}",
                eco.packages_noun(),
                run.config.file.display()
            ),
        ));
    }

    // 2. Acquire: the one networked step for the base's packages, over the manifests and
    // the lockfile alone; then the repository's prepare commands.
    let toolchains = networked_toolchains(run, eco)?;
    // Held to the end: the key's cache stays where the check views' seed expects it.
    let key = key_cache(run, eco);
    let notices = stage(run, state, "acquire", eco.acquire(), |_| {
        if let Some(key) = &key {
            return warm_acquire(run, key);
        }
        let tree = crate::fetch_tree::FetchTree::new(session, eco.manifests(), "acquire")?;
        let notices = change::before_agent_with(
            session,
            run.config,
            &toolchains,
            Some((eco.acquire(), tree.root())),
            &|line| tracing::info!("{line}"),
            &|record| run.events.emit(record.event()),
        )?;
        let failed = notices
            .iter()
            .any(|n| n.starts_with("prepare `") && n.contains("failed"));
        let summary = if failed {
            "a prepare command failed (see the notices)".to_string()
        } else {
            "dependencies fetched into the repository's cache".to_string()
        };
        Ok((notices, summary))
    })?;
    state.notices.extend(notices);

    // 3. Baseline.
    stage(
        run,
        state,
        "baseline",
        "the checks on the base tree",
        |state| {
            let validations = session
                .run_checks(&base_tree)
                .map_err(|message| failure(FailureCode::SandboxError, message))?;
            state.baseline = validations.clone();
            baseline_verdict(&validations, &session.config.base_commit)?;
            let count = validations.len();
            Ok((
                (),
                format!(
                    "{} on the base tree",
                    counted(count, "check passed", "checks passed")
                ),
            ))
        },
    )?;

    // 4. The base scan.
    let vulnerable = run.options.vulnerable();
    let database = Database::open(run.config, eco)
        .map_err(|message| failure(FailureCode::Infrastructure, message))?;
    if database.is_none() && vulnerable {
        return Err(failure(
            FailureCode::Infrastructure,
            Database::missing(run.config, eco, "--select vulnerable"),
        ));
    }
    let lock_name = eco.lock_name();
    let base_findings = match &database {
        Some(db) => stage(
            run,
            state,
            "scan",
            &format!("{lock_name} of the base tree"),
            |state| {
                let scan = scan_tree(session, eco, db, &base_tree, "base", run.now_ms)?;
                if !scan.unevaluated.is_empty() {
                    state.notices.extend(scan.unevaluated.iter().cloned());
                    let count = scan.unevaluated.len();
                    state.maintenance.scans.push(scan);
                    return Err(failure(
                        FailureCode::Infrastructure,
                        format!(
                            "the advisory database {} has {} of {lock_name}'s packages that \
                             cannot be evaluated (see the notices): a scan that passed over them \
                             could read as clean",
                            db.path().display(),
                            counted(count, "advisory", "advisories")
                        ),
                    ));
                }
                let findings = scan.findings.clone();
                let age = db.age(maintain.max_advisory_age_days, run.now_ms);
                state.notices.extend(age.warning());
                let summary = format!(
                    "{} to the base tree (database {}, {})",
                    counted(findings.len(), "advisory applies", "advisories apply"),
                    db.snapshot(),
                    age.describe()
                );
                state.maintenance.scans.push(scan);
                if let (Database::Osv(osv), Ecosystem::Go) = (db, eco) {
                    state.notices.extend(stdlib_notice(
                        osv,
                        run,
                        profile.named_go_version.as_deref(),
                    ));
                }
                Ok((findings, summary))
            },
        )?,
        None => Vec::new(),
    };

    // 5. Discover.
    let policy = index::Policy {
        allow_major: maintain.allow_major,
        cooldown_days: maintain.cooldown_days,
        allow: maintain.allow.clone(),
        deny: maintain.deny.clone(),
        now_ms: run.now_ms,
    };
    let upgrades = stage(run, state, "discover", eco.source(maintain), |state| {
        let upgrades = discover(
            run,
            state,
            &profile,
            &policy,
            &base_findings,
            database.as_ref(),
        )?;
        let summary = match upgrades.len() {
            0 => "nothing to upgrade".to_string(),
            n => format!(
                "{}: {}",
                counted(n, "upgrade", "upgrades"),
                upgrade_list(&upgrades)
            ),
        };
        Ok((upgrades, summary))
    })?;
    // A package before the packages that depend on it, so that an upgrade rarely moves a
    // package a later one names at its old version (re-resolved below when it does).
    let upgrades = dependency_order(&profile.lockfile, upgrades);
    if upgrades.is_empty() {
        let summary = if vulnerable && base_findings.is_empty() {
            format!("No known vulnerabilities in {lock_name}: nothing to upgrade.")
        } else {
            "Nothing to upgrade: no eligible newer version (see the notices).".to_string()
        };
        return Ok(Done::NoChange(summary));
    }

    // 6. Fetch the candidates' packages (networked), then apply offline and check. When
    // fetching them together fails, each is fetched alone and one that still fails drops
    // only itself.
    let together = stage(run, state, "fetch", &upgrade_list(&upgrades), |_| {
        fetch_candidates(run, eco, &upgrades)?;
        Ok(((), "candidate packages fetched into the cache".to_string()))
    });
    let upgrades = match together {
        Ok(()) => upgrades,
        Err(failed)
            if failed.code == FailureCode::UpgradeFailed
                && upgrades.len() > 1
                && !session.is_cancelled() =>
        {
            let mut fetched = Vec::new();
            for upgrade in upgrades {
                let label = format!("{} {} → {}", upgrade.package, upgrade.from, upgrade.to);
                let alone = stage(run, state, "fetch", &label, |_| {
                    fetch_candidates(run, eco, std::slice::from_ref(&upgrade))?;
                    Ok(((), "fetched alone".to_string()))
                });
                match alone {
                    Ok(()) => fetched.push(upgrade),
                    Err(f) if f.code == FailureCode::UpgradeFailed => {
                        let why = first_line(&f.message).trim_end_matches(':').to_string();
                        state.held.push(Held::dropped(&upgrade, &why));
                        state
                            .notices
                            .push(format!("{why}; dropped, the other upgrades go on"));
                    }
                    Err(f) => return Err(f),
                }
            }
            if fetched.is_empty() {
                return Err(failed);
            }
            fetched
        }
        Err(failed) => return Err(failed),
    };
    // The cache the checks build against changed: no earlier record speaks for it.
    session.forget_checks();
    // Baseline mode: each candidate is the one before plus a lockfile change Warden applied,
    // so its checks build on the one before's outputs. (A model's repair is code of its own:
    // its candidates build on the base's seed only.)
    if run.repair.is_none() {
        session.chain_outputs();
    }
    let mut tree = base_tree.clone();
    let mut validations: Vec<Validation> = Vec::new();
    // The upgrades dropped because they could not be applied or broke a check (baseline
    // mode), with why: each drops only itself.
    let mut dropped: Vec<Failure> = Vec::new();
    for upgrade in &upgrades {
        let label = format!("{} {} → {}", upgrade.package, upgrade.from, upgrade.to);
        // Re-resolved on the view as the upgrades before it left it: Cargo names the copy to
        // move by its version, and Go's `go get` of a module an earlier upgrade raised past
        // the target would lower it again. (npm's direct upgrades do not move each other.)
        let mut applying = upgrade.clone();
        if eco != Ecosystem::Npm && tree != base_tree {
            let lock = repair::tree_lockfile(session, eco, &tree)
                .map_err(|message| failure(FailureCode::Infrastructure, message))?;
            match resolve_from(eco, &lock, upgrade) {
                Some(from) => applying.from = from,
                None => {
                    state.notices.push(format!(
                        "{label}: the upgrades before it already moved {} to {} or beyond; \
                         nothing left to apply",
                        upgrade.package, upgrade.to
                    ));
                    continue;
                }
            }
        }
        let applied = stage(run, state, "apply", &label, |_| {
            apply_upgrade(run, eco, &applying)?;
            let candidate = session
                .candidate()
                .map_err(|message| failure(FailureCode::Infrastructure, message))?;
            let checked = session
                .run_checks(&candidate.tree)
                .map_err(|message| failure(FailureCode::SandboxError, message))?;
            if let Some(v) = checked.iter().find(|v| !v.passed()) {
                if run.repair.is_some() {
                    let summary = format!("check `{}` fails: the model repairs", v.command);
                    return Ok(((candidate.tree, checked), summary));
                }
                return Err(failure(
                    FailureCode::ChecksFailed,
                    format!(
                        "upgrading {label} breaks check `{}` ({}) on tree {} (baseline mode \
                         does not repair):\n{}",
                        v.command,
                        v.exit_code
                            .map_or("killed or timed out".to_string(), |c| format!(
                                "exit code {c}"
                            )),
                        v.tree,
                        tail_lines(&v.output_tail, 20)
                    ),
                ));
            }
            let n = checked.len();
            Ok((
                (candidate.tree, checked),
                format!(
                    "{} on the candidate",
                    counted(n, "check passed", "checks passed")
                ),
            ))
        });
        let (next, checked) = match applied {
            Ok(applied) => applied,
            Err(failed) if droppable(&failed) && !session.is_cancelled() => {
                // The view goes back to the tree before this upgrade, exactly, or the task
                // stops: a later upgrade must not apply on top of a half-undone one.
                stage(run, state, "drop", &label, |_| {
                    restore_view(session, eco, &tree).map_err(|reason| {
                        failure(
                            failed.code,
                            format!(
                                "{}\n(and the upgrade could not be dropped: {reason})",
                                failed.message
                            ),
                        )
                    })?;
                    Ok(((), format!("the view is back to tree {tree}")))
                })?;
                let why = first_line(&failed.message)
                    .trim_end_matches(':')
                    .to_string();
                state.held.push(Held::dropped(upgrade, &why));
                state
                    .notices
                    .push(format!("{why}; dropped, the other upgrades go on"));
                dropped.push(failed);
                continue;
            }
            Err(failed) => return Err(failed),
        };
        let (next, checked) = match checked.iter().find(|v| !v.passed()).cloned() {
            None => (next, checked),
            Some(failing) => {
                let mut applied = state.maintenance.upgrades.clone();
                applied.push(upgrade.clone());
                stage(run, state, "repair", &label, |state| {
                    let accepted = repair_upgrade(run, eco, &next, &failing, upgrade, &applied)?;
                    state.notices.push(format!(
                        "upgrading {label} broke check `{}`; the model repaired it on tree {}: \
                         {}",
                        failing.command,
                        accepted.tree,
                        first_line(&accepted.summary)
                    ));
                    state.repairs.push(format!(
                        "{label}: `{}` failed after the upgrade; repaired: {}",
                        failing.command,
                        first_line(&accepted.summary)
                    ));
                    let n = accepted.validations.len();
                    Ok((
                        (accepted.tree, accepted.validations),
                        format!(
                            "{} on the repaired candidate",
                            counted(n, "check passed", "checks passed")
                        ),
                    ))
                })?
            }
        };
        tree = next;
        session.accept_outputs(&tree);
        validations = checked;
        state.maintenance.upgrades.push(upgrade.clone());
    }
    if state.maintenance.upgrades.is_empty() {
        if let Some(first) = dropped.into_iter().next() {
            let message = if upgrades.len() == 1 {
                format!("{}; no proposal", first.message)
            } else {
                format!(
                    "every upgrade was dropped; no proposal. The first: {}",
                    first.message
                )
            };
            return Err(failure(first.code, message));
        }
    }
    if tree == base_tree {
        return Ok(Done::NoChange(format!(
            "The upgrades left {lock_name} as it was: nothing to propose."
        )));
    }

    // 7. The post-scan and readiness.
    let mut remaining: Vec<Finding> = Vec::new();
    if let Some(db) = &database {
        let post = stage(
            run,
            state,
            "scan",
            &format!("{lock_name} of the candidate tree"),
            |state| {
                let scan = scan_tree(session, eco, db, &tree, "candidate", run.now_ms)?;
                let summary = format!(
                    "{} to the candidate",
                    counted(scan.findings.len(), "advisory applies", "advisories apply")
                );
                state.maintenance.scans.push(scan.clone());
                Ok((scan, summary))
            },
        )?;
        let mut cleared: Vec<String> = base_findings
            .iter()
            .map(|f| f.advisory.clone())
            .filter(|id| !post.findings.iter().any(|f| &f.advisory == id))
            .collect();
        cleared.sort();
        cleared.dedup();
        state.maintenance.advisories_cleared = cleared;
        // What stays vulnerable on another copy than the one an upgrade moved (minimist under
        // optimist, beside an upgraded direct minimist) is said, not a reason to lose the
        // upgrades; an upgraded copy still vulnerable is readiness's to refuse.
        remaining = post
            .findings
            .iter()
            .filter(|f| !on_upgraded_copy(f, &state.maintenance.upgrades))
            .cloned()
            .collect();
        for finding in &remaining {
            state.notices.push(format!(
                "{} remains in the candidate: {} (this proposal does not clear it)",
                finding.advisory,
                instance(finding)
            ));
        }
        moved_past_notices(
            &mut state.notices,
            &state.held,
            &base_findings,
            &post.findings,
        );
    }
    stage(run, state, "readiness", &tree, |state| {
        let candidate_scans: Vec<&Scan> = state
            .maintenance
            .scans
            .iter()
            .filter(|s| s.stage == "candidate")
            .collect();
        let mut reasons = readiness(
            &tree,
            &validations,
            database.is_some(),
            &candidate_scans,
            &state.maintenance.upgrades,
        )
        .err()
        .unwrap_or_default();
        // Whatever repaired it, the candidate's lockfile still holds every upgrade.
        let lock = repair::tree_lockfile(session, eco, &tree)
            .map_err(|message| failure(FailureCode::Infrastructure, message))?;
        reasons.extend(repair::upgrades_in_lock(
            eco,
            &lock,
            &state.maintenance.upgrades,
        ));
        let ready = if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        };
        ready.map_err(|reasons| {
            failure(
                FailureCode::ChecksFailed,
                format!("the candidate is not ready: {}", reasons.join("; ")),
            )
        })?;
        // An upgrade a later one moved on: said, so the record's target is not read as where
        // the package ended.
        for upgrade in &state.maintenance.upgrades {
            let copies: Vec<&str> = lock
                .packages
                .iter()
                .filter(|p| p.source.is_some() && p.name == upgrade.package)
                .map(|p| p.version.as_str())
                .collect();
            if !copies.is_empty() && !copies.contains(&upgrade.to.as_str()) {
                state.notices.push(format!(
                    "{} ends at {}, past its upgrade's {}: the upgrades after it moved it on",
                    upgrade.package,
                    copies.join(", "),
                    upgrade.to
                ));
            }
        }
        Ok((
            (),
            "validations and post-scan bound to the candidate tree".to_string(),
        ))
    })?;

    // 8. The proposal.
    let pages: Vec<String> = state
        .maintenance
        .upgrades
        .iter()
        .filter_map(|u| eco.release_page(&run.config.maintain, u))
        .collect();
    let remaining: Vec<(Finding, String)> = remaining
        .into_iter()
        .map(|finding| {
            let why = remaining_reason(
                &finding,
                &state.held,
                &state.maintenance.upgrades,
                &profile.direct,
                run.options.vulnerable(),
            );
            (finding, why)
        })
        .collect();
    let mut summary = proposal_summary(
        eco,
        &state.maintenance,
        database.as_ref(),
        &base_findings,
        &remaining,
        &tree,
        &validations,
        &pages,
    );
    if run.options.informational {
        if let Some(db) = &database {
            let lock_of = |tree: &str| {
                repair::tree_lockfile(session, eco, tree)
                    .map_err(|message| failure(FailureCode::Infrastructure, message))
            };
            let base = db.informational(&lock_of(&session.config.base_tree)?);
            let candidate = db.informational(&lock_of(&tree)?);
            summary = with_informational(&summary, &base, &candidate);
        }
    }
    if let Some(agent) = &run.repair {
        let made = "\nMade by `warden maintain` in baseline mode (deterministic, no model).\n";
        let mut by = format!(
            "\nMade by `warden maintain` in model mode ({}).\n",
            agent.borrow().model.name()
        );
        if !state.repairs.is_empty() {
            by.push_str("\nRepairs by the model:\n");
            for line in &state.repairs {
                by.push_str(&format!("- {line}\n"));
            }
        }
        summary = summary.replace(made, &by);
    }
    let proposal = stage(run, state, "propose", first_line(&summary), |_| {
        let proposal = session
            .propose(&tree, &summary, validations.clone())
            .map_err(|message| failure(FailureCode::Infrastructure, message))?;
        let short = proposal.commit.chars().take(12).collect::<String>();
        Ok((proposal, format!("proposal commit {short}")))
    })?;
    Ok(Done::Proposal(Box::new(proposal)))
}

/// Runs the repairing agent on the upgraded `tree` whose check `failing` failed: its accepted
/// submission (a tree whose lockfile keeps to `applied` and whose checks passed), or the
/// failure that ends the maintenance with no proposal.
fn repair_upgrade(
    run: &MaintainRun<'_>,
    eco: Ecosystem,
    tree: &str,
    failing: &Validation,
    upgrade: &Upgrade,
    applied: &[Upgrade],
) -> Result<repair::Accepted, Failure> {
    let Some(agent) = &run.repair else {
        return Err(failure(FailureCode::Infrastructure, "no repair agent"));
    };
    let mut agent = agent.borrow_mut();
    let session = run.session;
    let upgraded_lock = repair::tree_lockfile(session, eco, tree)
        .map_err(|message| failure(FailureCode::Infrastructure, message))?;
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let mut tools = agent.tools.clone();
    tools.push(std::sync::Arc::new(repair::SubmitRepair {
        ecosystem: eco,
        session: std::sync::Arc::clone(&agent.session),
        upgraded_tree: tree.to_string(),
        upgraded_lock,
        upgrades: applied.to_vec(),
        accepted: std::sync::Arc::clone(&accepted),
    }));
    let messages = vec![
        warden_runtime::Message::System {
            text: repair::repair_system_prompt(eco, &session.config.checks),
        },
        warden_runtime::Message::User {
            text: repair::repair_prompt(eco, upgrade, failing),
        },
    ];
    let context = serde_json::json!({
        "task_id": run.task_id,
        "kind": TaskKind::Maintain,
        "repair": upgrade,
        "tree": tree,
        "checks": session.config.checks,
    });
    let handle = tokio::runtime::Handle::try_current().map_err(|e| {
        failure(
            FailureCode::Infrastructure,
            format!("no runtime to run the repair with: {e}"),
        )
    })?;
    let repair::RepairAgent {
        model,
        journal,
        ledger,
        clock,
        cancel,
        ..
    } = &mut *agent;
    let report = handle.block_on(
        warden_runtime::Agent {
            model: *model,
            tools: &tools,
            policy: &warden_runtime::AllowAll,
            journal: &mut **journal,
            events: run.events,
            clock: *clock,
            cancel: cancel.clone(),
            config: warden_runtime::AgentConfig {
                limits: run.config.limits.clone(),
                max_output_tokens: run.config.max_output_tokens,
                cache_key: Some(crate::prompt::cache_key(
                    "repair",
                    &[session.config.repo.as_str()],
                )),
                ..warden_runtime::AgentConfig::default()
            },
            ledger: *ledger,
            inbox: None,
            explorers: None,
        }
        .run(warden_runtime::RunInput::Start { messages, context }),
    );
    drop(tools);
    repair::add_usage(&mut agent.usage, &report.usage);
    let label = format!("{} {} → {}", upgrade.package, upgrade.from, upgrade.to);
    match report.outcome {
        warden_runtime::RunOutcome::Finished(warden_runtime::Finish::Change { .. }) => accepted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or_else(|| {
                failure(
                    FailureCode::Infrastructure,
                    "the repair finished unaccepted",
                )
            }),
        warden_runtime::RunOutcome::Finished(_) => Err(failure(
            FailureCode::InvalidSubmission,
            "a repair can only submit_repair",
        )),
        warden_runtime::RunOutcome::Failed(f) if f.code == FailureCode::InvalidSubmission => {
            Err(failure(
                FailureCode::ChecksFailed,
                format!(
                    "upgrading {label} breaks check `{}` on tree {tree}, and the model did not \
                     repair it; no proposal: {}",
                    failing.command, f.message
                ),
            ))
        }
        warden_runtime::RunOutcome::Failed(f) => Err(f),
        warden_runtime::RunOutcome::AwaitingApproval { tool, reason, .. } => Err(failure(
            FailureCode::PolicyAbort,
            format!("{tool} needs an approval, which is not supported yet: {reason}"),
        )),
    }
}

/// Whether the base tree's check runs give something to prove an upgrade against: a check
/// that timed out or was killed is `baseline_inconclusive`, a failing one `baseline_failing`.
pub fn baseline_verdict(validations: &[Validation], base_commit: &str) -> Result<(), Failure> {
    if let Some(v) = validations.iter().find(|v| v.exit_code.is_none()) {
        return Err(failure(
            FailureCode::BaselineInconclusive,
            format!(
                "check `{}` timed out or was killed on the base commit {base_commit}: there is \
                 nothing to prove an upgrade against",
                v.command
            ),
        ));
    }
    let failing: Vec<&str> = validations
        .iter()
        .filter(|v| !v.passed())
        .map(|v| v.command.as_str())
        .collect();
    if failing.is_empty() {
        return Ok(());
    }
    Err(failure(
        FailureCode::BaselineFailing,
        format!(
            "the checks already fail on the base commit {base_commit} before any upgrade: {}",
            failing.join(", ")
        ),
    ))
}

/// `name a → b, …`.
fn upgrade_list(upgrades: &[Upgrade]) -> String {
    upgrades
        .iter()
        .map(|u| format!("{} {} → {}", u.package, u.from, u.to))
        .collect::<Vec<_>>()
        .join(", ")
}

fn tail_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Scans the lockfile of exactly `tree` (the snapshot, or its verified materialization).
fn scan_tree(
    session: &ChangeSession,
    eco: Ecosystem,
    db: &Database,
    tree: &str,
    stage: &str,
    now_ms: u64,
) -> Result<Scan, Failure> {
    let root = session
        .tree_root(tree)
        .map_err(|message| failure(FailureCode::Infrastructure, message))?;
    scan_lockfile(eco, db, &root, tree, stage, now_ms)
}

/// The stage of the scan `warden vulns` makes.
pub const VULNS_STAGE: &str = "base";

/// What `warden vulns` found: the scan of the lockfile (bound to the tree) and, for a Go
/// module, the standard library's findings apart.
#[derive(Debug, Clone)]
pub struct Vulnerabilities {
    pub ecosystem: Ecosystem,
    pub scan: Scan,
    /// Go: the standard library's version scanned, and where it comes from.
    pub stdlib: Option<Stdlib>,
    /// How old the database scanned against is.
    pub database_age: update::DatabaseAge,
    /// The informational advisories (unmaintained, unsound) of the lockfile's packages: not
    /// vulnerabilities, shown when asked.
    pub informational: Vec<advisory::InformationalFinding>,
}

/// The standard library's scan of a Go module.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stdlib {
    /// `1.19.8`.
    pub go_version: String,
    /// What says the version: the sandbox's toolchain or the `go.mod`.
    pub source: String,
    pub findings: Vec<Finding>,
}

/// `warden vulns`: profiles the verified, read-only tree at `root` (git tree `tree`) as the
/// pipeline's first stage does and scans its lockfile against the ecosystem's advisory
/// database exactly as the pipeline's base scan does (the scan record is the same, stage
/// `base`); a Go module's standard library is scanned too, apart. Nothing runs and nothing is
/// fetched: the lockfile is read, not resolved. `Err` says why there is no scan: no advisory
/// database configured (`Infrastructure`), one that does not load (`Infrastructure`), or a
/// project the profile refuses (`UnsupportedProject`).
pub fn vulnerabilities(
    config: &Config,
    root: &std::path::Path,
    tree: &str,
    now_ms: u64,
) -> Result<Vulnerabilities, Failure> {
    let profile = ecosystem::profile(root)
        .map_err(|reason| failure(FailureCode::UnsupportedProject, reason))?;
    let eco = profile.ecosystem;
    let db = Database::open(config, eco)
        .map_err(|message| failure(FailureCode::Infrastructure, message))?
        .ok_or_else(|| {
            failure(
                FailureCode::Infrastructure,
                Database::missing(config, eco, "warden vulns"),
            )
        })?;
    let scan = scan_lockfile(eco, &db, root, tree, VULNS_STAGE, now_ms)?;
    // Read again only for what the scan record does not hold (it read cleanly just now).
    let informational = eco
        .read_lock(root)
        .map(|lock| db.informational(&lock))
        .unwrap_or_default();
    // The standard library is Go's alone (an npm project's OSV database has none to scan).
    let stdlib = match &db {
        Database::Osv(osv) if eco == Ecosystem::Go => stdlib_version(
            &config.sandbox.toolchains.env,
            profile.named_go_version.as_deref(),
        )
        .map(|(go_version, source)| Stdlib {
            findings: osv.scan_stdlib(&go_version),
            go_version,
            source,
        }),
        Database::Osv(_) | Database::RustSec(_) | Database::RustSecAndOsv(_) => None,
    };
    Ok(Vulnerabilities {
        ecosystem: eco,
        scan,
        stdlib,
        database_age: db.age(config.maintain.max_advisory_age_days, now_ms),
        informational,
    })
}

/// The Go version the standard library is scanned at, and what says it: the sandbox's `go`
/// toolchain (what builds and tests the module) when the preset is configured, else the
/// version `go.mod` names (its `toolchain`, else its `go` line: a minimum, the build may use a
/// newer one).
fn stdlib_version(env: &[(String, String)], named: Option<&str>) -> Option<(String, String)> {
    if let Some(version) = ecosystem::sandbox_go_version(env) {
        return Some((version, "the sandbox's go toolchain".into()));
    }
    named.map(|v| {
        (
            v.to_string(),
            "go.mod (a minimum; the toolchain that builds may be newer)".into(),
        )
    })
}

/// The notice a Go module's maintenance gives about its standard library: `maintain` upgrades
/// modules, not the Go toolchain.
fn stdlib_notice(db: &osv::OsvDb, run: &MaintainRun<'_>, named: Option<&str>) -> Option<String> {
    let (version, source) = stdlib_version(&run.sandbox.toolchains.env, named)?;
    let findings = db.scan_stdlib(&version);
    if findings.is_empty() {
        return None;
    }
    let ids: Vec<String> = findings.iter().map(|f| f.advisory.clone()).collect();
    Some(format!(
        "the Go standard library at go{version} ({source}) has {} known vulnerabilities ({}): \
         upgrading the Go toolchain is not something maintain proposes",
        findings.len(),
        ids.join(", ")
    ))
}

/// Scans the lockfile under `root`, the files of git tree `tree`.
fn scan_lockfile(
    eco: Ecosystem,
    db: &Database,
    root: &std::path::Path,
    tree: &str,
    stage: &str,
    now_ms: u64,
) -> Result<Scan, Failure> {
    let lock = eco.read_lock(root).map_err(|message| {
        failure(
            FailureCode::UnsupportedProject,
            format!("tree {tree}: {message}"),
        )
    })?;
    Ok(Scan {
        stage: stage.into(),
        tree: tree.into(),
        scanner: db.scanner(),
        database: db.path().display().to_string(),
        database_snapshot: db.snapshot().to_string(),
        scanned_at: warden_time::rfc3339_seconds(i64::try_from(now_ms).unwrap_or(i64::MAX)),
        findings: db.scan(&lock),
        unevaluated: db.unevaluated(&lock),
    })
}

/// The upgrades the selection and the policy allow, with the versions read from the index.
fn discover(
    run: &MaintainRun<'_>,
    state: &mut State,
    profile: &ecosystem::Profile,
    policy: &index::Policy,
    findings: &[Finding],
    database: Option<&Database>,
) -> Result<Vec<Upgrade>, Failure> {
    let eco = profile.ecosystem;
    let direct = &profile.direct;
    // (package, version in the lockfile, advisories to clear)
    let mut wanted: Vec<(String, String, Vec<String>)> = Vec::new();
    let names = run.options.names();
    if run.options.vulnerable() {
        wanted = vulnerable_wanted(eco, direct, findings, &mut state.notices, &mut state.held);
    } else if !names.is_empty() {
        for name in &names {
            let matching: Vec<_> = direct.iter().filter(|p| &p.name == name).collect();
            if matching.is_empty() {
                state.notices.push(match eco {
                    Ecosystem::Cargo => {
                        format!("--select {name}: not a direct crates.io dependency in Cargo.lock")
                    }
                    Ecosystem::Go => {
                        format!("--select {name}: not a direct requirement in go.mod")
                    }
                    Ecosystem::Npm => {
                        format!("--select {name}: not a direct dependency in package.json")
                    }
                });
            }
            for package in matching {
                wanted.push((package.name.clone(), package.version.clone(), Vec::new()));
            }
        }
    } else {
        for package in direct {
            wanted.push((package.name.clone(), package.version.clone(), Vec::new()));
        }
    }
    let client =
        index::client().map_err(|message| failure(FailureCode::Infrastructure, message))?;
    let handle = tokio::runtime::Handle::try_current().map_err(|e| {
        failure(
            FailureCode::Infrastructure,
            format!("no runtime to read the index with: {e}"),
        )
    })?;
    let mut upgrades = Vec::new();
    for (name, from, advisories) in wanted {
        if let Err(reason) = policy.package(&name) {
            state
                .notices
                .push(format!("{name} {from} not upgraded: {reason}"));
            state
                .held
                .push(Held::new(&name, &from, &format!("not upgraded: {reason}")));
            continue;
        }
        let Some(current) = eco.semver(&from) else {
            state
                .notices
                .push(format!("{name} {from}: not a semver version, not upgraded"));
            state.held.push(Held::new(
                &name,
                &from,
                "not a semver version, not upgraded",
            ));
            continue;
        };
        let source = eco.source(&run.config.maintain);
        let versions = match eco {
            Ecosystem::Cargo => handle.block_on(index::fetch_versions(&client, source, &name)),
            Ecosystem::Go => {
                let proxy = goproxy::Proxy::parse(source)
                    .map_err(|message| failure(FailureCode::Infrastructure, message))?;
                handle.block_on(goproxy::fetch_versions(&client, &proxy, &name, &current))
            }
            Ecosystem::Npm => {
                handle.block_on(npm::fetch_versions(&client, source, &name, &current))
            }
        }
        .map_err(|message| failure(FailureCode::Infrastructure, message))?;
        let requirements = profile.requirements.get(&name).cloned().unwrap_or_default();
        let is_direct = direct.iter().any(|p| p.name == name && p.version == from);
        let mut eligible: Vec<&index::IndexVersion> = Vec::new();
        let mut passed_over: Vec<String> = Vec::new();
        for candidate in &versions {
            match policy.eligible(
                eco.versioning(),
                &current,
                &requirements,
                candidate,
                is_direct,
            ) {
                Ok(()) => eligible.push(candidate),
                Err(reason) if candidate.version > current => passed_over.push(reason),
                Err(_) => {}
            }
        }
        eligible.sort_by(|a, b| a.version.cmp(&b.version));
        let why = passed_over
            .last()
            .map(|r| format!(" (newest passed over: {r})"))
            .unwrap_or_default();
        let chosen = if advisories.is_empty() {
            // The newest: it clears whatever advisories of this copy it is past (named in the
            // record, as for a vulnerable selection).
            eligible.last().map(|v| {
                let mut cleared: Vec<String> = findings
                    .iter()
                    .filter(|f| f.package == name && f.version == from)
                    .filter(|f| {
                        database.is_some_and(|db| !db.affects(&f.advisory, &name, &v.version))
                    })
                    .map(|f| f.advisory.clone())
                    .collect();
                cleared.sort();
                cleared.dedup();
                (*v, cleared)
            })
        } else {
            choose_fix(&eligible, &advisories, |id, v| {
                database.is_some_and(|db| db.affects(id, &name, v))
            })
            .map(|fix| (fix.version, fix.cleared))
        };
        match chosen {
            Some((version, cleared)) => {
                let to = eco.version_text(&version.version);
                let remaining: Vec<&String> = advisories
                    .iter()
                    .filter(|id| !cleared.contains(id))
                    .collect();
                if !remaining.is_empty() {
                    state.held.push(Held::new(
                        &name,
                        &to,
                        &format!(
                            "no eligible version clears it; {to} is the lowest that clears the \
                             most{why}"
                        ),
                    ));
                    state.notices.push(format!(
                        "{name} {from}: no eligible version clears every advisory; {to} is the \
                         lowest that clears the most ({}); still affected: {}{why}",
                        cleared.join(", "),
                        remaining
                            .iter()
                            .map(|id| id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                upgrades.push(Upgrade {
                    package: name,
                    from,
                    to,
                    advisories: cleared,
                });
            }
            None => {
                let what = if advisories.is_empty() {
                    "no eligible newer version".to_string()
                } else {
                    format!("no eligible version clears {}", advisories.join(", "))
                };
                state.notices.push(format!("{name} {from}: {what}{why}"));
                let held = if advisories.is_empty() {
                    format!("no eligible newer version{why}")
                } else {
                    format!("no eligible version clears it{why}")
                };
                state.held.push(Held::new(&name, &from, &held));
            }
        }
    }
    Ok(upgrades)
}

/// The version a vulnerable package moves to, and what it clears.
#[derive(Debug, Clone, PartialEq)]
struct Fix<'a> {
    version: &'a index::IndexVersion,
    /// The advisories it clears, in the order asked.
    cleared: Vec<String>,
}

/// The version among `eligible` (ascending) that fixes the most of `advisories`: the lowest
/// that clears every one; else, when none does, the lowest that clears the most (a partial
/// fix: what remains is the caller's to report); `None` when no eligible version clears any.
/// `affects(id, version)` says whether advisory `id` affects `version`.
fn choose_fix<'a>(
    eligible: &[&'a index::IndexVersion],
    advisories: &[String],
    affects: impl Fn(&str, &semver::Version) -> bool,
) -> Option<Fix<'a>> {
    let mut best: Option<Fix<'a>> = None;
    for candidate in eligible {
        let cleared: Vec<String> = advisories
            .iter()
            .filter(|id| !affects(id, &candidate.version))
            .cloned()
            .collect();
        if cleared.len() == advisories.len() {
            return Some(Fix {
                version: candidate,
                cleared,
            });
        }
        // Strictly more: of equals, the lowest stays.
        if !cleared.is_empty()
            && best
                .as_ref()
                .is_none_or(|b| cleared.len() > b.cleared.len())
        {
            best = Some(Fix {
                version: candidate,
                cleared,
            });
        }
    }
    best
}

/// What `--select vulnerable` upgrades: (package, locked version, advisories to clear) for
/// each vulnerable copy it can move. npm upgrades its direct dependencies only, and a direct
/// dependency is the copy at the root's `node_modules/<name>`: another copy of the same name
/// nested under a dependent (minimist under optimist) is its dependent's to move (or an
/// `overrides` entry's, which maintain does not write), a notice here, never a reason to move
/// the direct copy to its version.
fn vulnerable_wanted(
    eco: Ecosystem,
    direct: &[cargo::LockedPackage],
    findings: &[Finding],
    notices: &mut Vec<String>,
    held: &mut Vec<Held>,
) -> Vec<(String, String, Vec<String>)> {
    let mut wanted: Vec<(String, String, Vec<String>)> = Vec::new();
    for finding in findings {
        let direct_copy = direct
            .iter()
            .any(|p| p.name == finding.package && p.version == finding.version)
            && finding
                .path
                .as_deref()
                .is_none_or(|path| path == format!("node_modules/{}", finding.package));
        if eco == Ecosystem::Npm && !direct_copy {
            notices.push(format!(
                "{} ({}): a transitive dependency, not upgraded (maintain upgrades npm \
                 projects' direct dependencies)",
                instance(finding),
                finding.advisory
            ));
            held.push(Held::new(
                &finding.package,
                &finding.version,
                "transitive: maintain upgrades an npm project's direct dependencies (its \
                 dependent's upgrade, or an `overrides` entry, moves this copy)",
            ));
            continue;
        }
        match wanted
            .iter_mut()
            .find(|(n, v, _)| *n == finding.package && *v == finding.version)
        {
            Some((_, _, ids)) => {
                if !ids.contains(&finding.advisory) {
                    ids.push(finding.advisory.clone());
                }
            }
            None => wanted.push((
                finding.package.clone(),
                finding.version.clone(),
                vec![finding.advisory.clone()],
            )),
        }
    }
    wanted
}

/// The key's shared dependency cache (taken as a change task takes it, filled by the key's
/// own prepare when incomplete), when this task's checks can be warm: warm checks are on, the
/// task's private cache is shown at the key's path (so cargo's fingerprints of the base's
/// build hold for it), and the key's prepare is the presets' default for the ecosystem, which
/// fetches what the acquire would (Cargo and npm). `None`: the acquire fetches into the task's own
/// cache.
fn key_cache(run: &MaintainRun<'_>, eco: Ecosystem) -> Option<crate::toolchain::TaskToolchains> {
    let own = &run.sandbox.toolchains;
    let default_prepare = own.prepare.is_empty()
        && own
            .default_prepare(&run.session.config.snapshot)
            .iter()
            .any(|(_, command)| *command == eco.acquire());
    // Go's networked steps fetch from `[maintain] goproxy`, the key's prepare does not (and Go
    // keeps no build outputs in a seed).
    if eco == Ecosystem::Go
        || !run.config.sandbox.warm_checks
        || !own.cache_moved
        || !default_prepare
    {
        return None;
    }
    match own.key_cache(true) {
        // Ours to read or to fill; another task's fill in progress leaves a cache elsewhere.
        Ok(key) if key.cache == key.shared_cache => Some(key),
        Ok(_) => None,
        Err(error) => {
            tracing::warn!(%error, "maintenance cannot take its key's dependency cache");
            None
        }
    }
}

/// The acquire of a maintenance task whose checks are warm ([`key_cache`]): the key's prepare
/// (skipped when its cache is complete) and the warm-up exactly as a change task's, the check
/// views showing the key's cache, so the base tree's warm seed is filled only from the key's
/// complete cache by the base tree's check; then the key's cache is copied into the task's
/// own, which the check views show from then on at the same path and which alone takes the
/// candidates' packages.
fn warm_acquire(
    run: &MaintainRun<'_>,
    key: &crate::toolchain::TaskToolchains,
) -> Result<(Vec<String>, String), Failure> {
    let session = run.session;
    session.use_mounts(key.mounts(false));
    let notices = change::before_agent(
        session,
        run.config,
        key,
        &|line| tracing::info!("{line}"),
        &|record| run.events.emit(record.event()),
    );
    session.use_mounts(run.sandbox.toolchains.mounts(false));
    let mut notices = notices?;
    let complete = key.cache_state() == Some(crate::toolchain::CacheState::Complete);
    let copying = std::time::Instant::now();
    run.sandbox
        .toolchains
        .copy_cache_from(key)
        .map_err(|error| {
            failure(
                FailureCode::Infrastructure,
                format!("cannot copy the dependency cache into the task's own: {error}"),
            )
        })?;
    notices.push(format!(
        "maintenance: the base's dependencies copied from its {} cache into the task's own ({:.1} s), which alone takes the upgrades' packages",
        if complete { "complete" } else { "unpublished" },
        copying.elapsed().as_secs_f64()
    ));
    let summary = if complete {
        "dependencies of the base taken from its complete cache".to_string()
    } else {
        "a prepare command failed (see the notices)".to_string()
    };
    Ok((notices, summary))
}

/// The toolchains of the networked steps (acquire, fetch): the task's, with Go's module
/// proxy (`[maintain] goproxy`, a `file://` directory mounted read-only) and checksum database
/// (`[maintain] gosumdb`) for a Go module.
fn networked_toolchains(
    run: &MaintainRun<'_>,
    eco: Ecosystem,
) -> Result<crate::toolchain::TaskToolchains, Failure> {
    let mut toolchains = run.sandbox.toolchains.clone();
    let maintain = &run.config.maintain;
    match eco {
        Ecosystem::Cargo => return Ok(toolchains),
        // The npm registry is in every command's environment ([`task_env`]).
        Ecosystem::Npm => return Ok(toolchains),
        Ecosystem::Go => {}
    }
    let proxy = goproxy::Proxy::parse(&maintain.goproxy)
        .map_err(|message| failure(FailureCode::Infrastructure, message))?;
    if let goproxy::Proxy::Dir(dir) = &proxy {
        let checked =
            crate::toolchain::check_mount(&dir.display().to_string(), None, Some(&run.config.home))
                .map_err(|reason| {
                    failure(
                        FailureCode::Infrastructure,
                        format!("maintain.goproxy: {reason}"),
                    )
                })?;
        if !toolchains.mounts.contains(&checked) {
            toolchains.mounts.push(checked);
        }
    }
    toolchains
        .env
        .push(("GOPROXY".into(), maintain.goproxy.clone()));
    if let Some(sumdb) = &maintain.gosumdb {
        toolchains.env.push(("GOSUMDB".into(), sumdb.clone()));
    }
    Ok(toolchains)
}

/// Fetches the packages of the upgraded lockfile into the cache: the upgrades applied in a
/// networked, prepare-like view over the base whose files are thrown away.
fn fetch_candidates(
    run: &MaintainRun<'_>,
    eco: Ecosystem,
    upgrades: &[Upgrade],
) -> Result<(), Failure> {
    let session = run.session;
    let toolchains = networked_toolchains(run, eco)?;
    // The task's own cache (maintenance takes a private one): the upgraded lockfile's
    // packages reach no other task.
    let script = eco.fetch_script(upgrades);
    let network = PrepareNetwork::of(session.config.sandbox.as_ref(), &toolchains);
    let tree = crate::fetch_tree::FetchTree::new(session, eco.manifests(), "fetch-candidates")?;
    let output = change::prepare_command(
        session,
        &toolchains,
        &network,
        "fetch-candidates",
        &script,
        tree.root(),
        &|line| tracing::info!("{line}"),
    )?;
    let records = network.take_records();
    let refused = records.iter().filter(|record| !record.allowed).count();
    for record in &records {
        run.events.emit(record.event());
    }
    if output.success() {
        return Ok(());
    }
    let admitted = u32::try_from(records.len() - refused).unwrap_or(u32::MAX);
    Err(failure(
        FailureCode::UpgradeFailed,
        format!(
            "fetching {} failed ({}; {}):\n{}",
            upgrade_list(upgrades),
            output
                .exit_code
                .map_or("killed or timed out".to_string(), |c| format!(
                    "exit code {c}"
                )),
            network.notice(admitted, u32::try_from(refused).unwrap_or(u32::MAX)),
            (session.config.redact)(&tail_lines(&String::from_utf8_lossy(&output.stderr), 15))
        ),
    ))
}

/// `upgrades` in dependency order, by the base lockfile `lock`: a package before the packages
/// that depend on it (tokio before hyper), so that an upgrade does not move a package a later
/// upgrade names at its old version; otherwise in the order given. A cycle keeps the order
/// given for the packages in it.
fn dependency_order(lock: &cargo::Lockfile, upgrades: Vec<Upgrade>) -> Vec<Upgrade> {
    let mut left = upgrades;
    let mut ordered = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let ready = (0..left.len())
            .find(|&i| {
                !left.iter().enumerate().any(|(j, other)| {
                    j != i && lock.depends_on(&left[i].package, &left[i].from, &other.package)
                })
            })
            .unwrap_or(0);
        ordered.push(left.remove(ready));
    }
    ordered
}

/// Where `upgrade` applies in the view's lockfile `lock`, after the upgrades before it:
/// `Some(version)` the copy to move (its `from`, or the one copy of the package an earlier
/// upgrade moved below the target); `None` when an earlier upgrade already moved the package
/// to its target or beyond (nothing left to do). With several copies and none at `from`,
/// `from` as it was (the package manager says what it makes of it).
fn resolve_from(eco: Ecosystem, lock: &cargo::Lockfile, upgrade: &Upgrade) -> Option<String> {
    let copies: Vec<&cargo::LockedPackage> = lock
        .packages
        .iter()
        .filter(|p| p.source.is_some() && p.name == upgrade.package)
        .collect();
    if copies.iter().any(|p| p.version == upgrade.from) {
        return Some(upgrade.from.clone());
    }
    let (Some(from), Some(to)) = (eco.semver(&upgrade.from), eco.semver(&upgrade.to)) else {
        return Some(upgrade.from.clone());
    };
    // The copies an earlier upgrade moved up from `from`.
    let moved: Vec<(&cargo::LockedPackage, semver::Version)> = copies
        .iter()
        .filter_map(|p| Some((*p, eco.semver(&p.version)?)))
        .filter(|(_, v)| *v > from)
        .collect();
    if moved.iter().any(|(_, v)| *v >= to) {
        return None;
    }
    match moved.as_slice() {
        [(one, _)] => Some(one.version.clone()),
        _ => Some(upgrade.from.clone()),
    }
}

/// Whether a failed upgrade drops only itself: its package manager refused it, or (in
/// baseline mode, where nothing repairs) it broke a check.
fn droppable(failed: &Failure) -> bool {
    matches!(
        failed.code,
        FailureCode::UpgradeFailed | FailureCode::ChecksFailed
    )
}

/// Puts the task's writable view back to `tree` after an upgrade that is dropped: the files an
/// upgrade's command rewrites ([`Ecosystem::upgrade_files`]) are written from `tree` (or
/// removed, when `tree` has none), and the view must then be exactly `tree` again, or `Err`
/// says what differs. Only regular files are read and written (never through a symbolic
/// link: the view's files are the repository's).
fn restore_view(session: &ChangeSession, eco: Ecosystem, tree: &str) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags};
    let source = session.tree_root(tree)?;
    let root = &session.merged();
    for name in eco.upgrade_files() {
        let (from, to) = (source.join(name), root.join(name));
        let exists = |path: &std::path::Path| -> Result<bool, String> {
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.is_file() => Ok(true),
                Ok(_) => Err(format!("{name} is not a regular file")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(format!("cannot read {name}: {e}")),
            }
        };
        if !exists(&from)? {
            if exists(&to)? {
                std::fs::remove_file(&to).map_err(|e| format!("cannot remove {name}: {e}"))?;
            }
            continue;
        }
        let bytes = std::fs::read(&from).map_err(|e| format!("cannot read {name}: {e}"))?;
        let fd = rustix::fs::open(
            &to,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| format!("cannot write {name}: {e}"))?;
        let mut file = std::fs::File::from(fd);
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(format!("{name} is not a regular file"));
        }
        std::io::Write::write_all(&mut file, &bytes)
            .map_err(|e| format!("cannot write {name}: {e}"))?;
    }
    let now = session.candidate()?.tree;
    if now == tree {
        Ok(())
    } else {
        Err(format!(
            "after restoring {}, the view is tree {now}, not {tree}",
            eco.upgrade_files().join(", ")
        ))
    }
}

/// Applies one upgrade offline in the task's writable view.
fn apply_upgrade(run: &MaintainRun<'_>, eco: Ecosystem, upgrade: &Upgrade) -> Result<(), Failure> {
    let script = eco.apply_script(upgrade);
    let output = run
        .sandbox
        .run(&script, APPLY_TIMEOUT, run.config.sandbox.limits)
        .map_err(|e| {
            failure(
                FailureCode::SandboxError,
                format!("sandbox error running `{script}`: {e}"),
            )
        })?;
    if output.success() {
        return Ok(());
    }
    Err(failure(
        FailureCode::UpgradeFailed,
        format!(
            "upgrading {} {} → {} could not be applied: `{script}` failed ({}):\n{}",
            upgrade.package,
            upgrade.from,
            upgrade.to,
            output
                .exit_code
                .map_or("killed or timed out".to_string(), |c| format!(
                    "exit code {c}"
                )),
            (run.session.config.redact)(&tail_lines(&String::from_utf8_lossy(&output.stderr), 15))
        ),
    ))
}

/// Whether `finding` is on a copy an upgrade moved and is one of the advisories it targets:
/// the package at the upgrade's target version. Another copy of the package (npm's nested
/// ones, another major in `Cargo.lock`) is another instance of the lockfile.
fn on_upgraded_copy(finding: &Finding, upgrades: &[Upgrade]) -> bool {
    upgrades.iter().any(|u| {
        u.package == finding.package
            && u.to == finding.version
            && u.advisories.contains(&finding.advisory)
    })
}

/// A finding's package instance in words: `minimist 0.0.10 at
/// node_modules/optimist/node_modules/minimist`.
fn instance(finding: &Finding) -> String {
    match &finding.path {
        Some(path) => format!("{} {} at {path}", finding.package, finding.version),
        None => format!("{} {}", finding.package, finding.version),
    }
}

/// Whether the candidate `tree` may be proposed: every validation ran on exactly `tree` and
/// passed (there is at least one); with an advisory database, one post-scan read exactly
/// `tree`, evaluated every advisory of its packages, and found none of the advisories an
/// upgrade targets on the copy it upgraded (other copies that stay vulnerable are notices,
/// not reasons). `Err` names every reason.
pub fn readiness(
    tree: &str,
    validations: &[Validation],
    scanned: bool,
    candidate_scans: &[&Scan],
    upgrades: &[Upgrade],
) -> Result<(), Vec<String>> {
    let mut reasons = Vec::new();
    if validations.is_empty() {
        reasons.push("no validation ran on the candidate".to_string());
    }
    for v in validations {
        if v.tree != tree {
            reasons.push(format!(
                "validation `{}` is bound to tree {}, not the candidate {tree}",
                v.command, v.tree
            ));
        } else if !v.passed() {
            reasons.push(format!("check `{}` did not pass", v.command));
        }
    }
    if scanned {
        match candidate_scans {
            [] => reasons.push("no post-scan of the candidate".to_string()),
            scans => {
                for scan in scans {
                    if scan.tree != tree {
                        reasons.push(format!(
                            "the post-scan is bound to tree {}, not the candidate {tree}",
                            scan.tree
                        ));
                    }
                    for line in &scan.unevaluated {
                        reasons.push(format!("the post-scan cannot evaluate: {line}"));
                    }
                    for finding in &scan.findings {
                        if on_upgraded_copy(finding, upgrades) {
                            reasons.push(format!(
                                "the post-scan still finds {} in the upgraded {}",
                                finding.advisory,
                                instance(finding)
                            ));
                        }
                    }
                }
            }
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons)
    }
}

/// Why a vulnerable package instance is not (fully) fixed: what the pipeline held back and why
/// (no eligible version, the cooldown or a major upgrade passing over the newest, a policy, a
/// transitive copy, an upgrade dropped), for the proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    package: String,
    /// The version that stays (after a partial fix, the version moved to).
    version: String,
    why: String,
}

impl Held {
    fn new(package: &str, version: &str, why: &str) -> Held {
        Held {
            package: package.to_string(),
            version: version.to_string(),
            why: why.to_string(),
        }
    }

    /// An upgrade dropped because it could not be fetched or applied, or broke a check.
    fn dropped(upgrade: &Upgrade, why: &str) -> Held {
        Held::new(
            &upgrade.package,
            &upgrade.from,
            &format!("the upgrade to {} was dropped: {why}", upgrade.to),
        )
    }
}

/// Why `finding` remains after the upgrades: what was held back for its package instance, else
/// what the selection left out.
fn remaining_reason(
    finding: &Finding,
    held: &[Held],
    upgrades: &[Upgrade],
    direct: &[cargo::LockedPackage],
    vulnerable: bool,
) -> String {
    if let Some(held) = held
        .iter()
        .find(|h| h.package == finding.package && h.version == finding.version)
    {
        return held.why.clone();
    }
    if let Some(upgrade) = upgrades
        .iter()
        .find(|u| u.package == finding.package && u.to == finding.version)
    {
        return format!(
            "{} is the newest eligible version and is still affected",
            upgrade.to
        );
    }
    let is_direct = direct
        .iter()
        .any(|p| p.name == finding.package && p.version == finding.version);
    match (vulnerable, is_direct) {
        (false, false) => {
            "transitive: this selection upgrades direct dependencies (`--select vulnerable` \
             targets vulnerable packages)"
                .to_string()
        }
        (false, true) => "not selected".to_string(),
        (true, _) => "an upgrade of another package moved it to this version".to_string(),
    }
}

/// `summary` with the informational advisories (`--informational`) before its validations:
/// each of the base's, and whether the proposal clears it (none of the candidate's copies of the
/// package is affected any more); any the candidate brings in.
fn with_informational(
    summary: &str,
    base: &[advisory::InformationalFinding],
    candidate: &[advisory::InformationalFinding],
) -> String {
    let same = |a: &advisory::InformationalFinding, b: &advisory::InformationalFinding| {
        a.finding.advisory == b.finding.advisory
            && a.finding.package == b.finding.package
            && a.finding.path == b.finding.path
    };
    let line = |item: &advisory::InformationalFinding| {
        let mut line = format!(
            "- {} {}: {} ({})",
            item.finding.package, item.finding.version, item.finding.advisory, item.kind
        );
        if !item.finding.title.is_empty() {
            line.push_str(&format!(" — {}", item.finding.title));
        }
        line
    };
    let mut section =
        String::from("\nInformational advisories (not vulnerabilities; --informational):\n");
    if base.is_empty() && candidate.is_empty() {
        section.push_str("- none\n");
    }
    for item in base {
        let stays = candidate.iter().any(|c| same(c, item));
        section.push_str(&format!(
            "{}; {}\n",
            line(item),
            if stays {
                "remains"
            } else {
                "cleared by this proposal"
            }
        ));
    }
    for item in candidate
        .iter()
        .filter(|c| !base.iter().any(|b| same(b, c)))
    {
        section.push_str(&format!("{}; new in the candidate\n", line(item)));
    }
    match summary.find("\nValidations on tree ") {
        Some(at) => format!("{}{section}{}", &summary[..at], &summary[at..]),
        None => format!("{summary}{section}"),
    }
}

/// Rewrites the notice of a package discover found no fix for when the other upgrades moved it
/// past its advisories (mio, taken on by tokio's upgrade): it is in `base` and `held`, and no
/// finding of it is left in `post`.
fn moved_past_notices(notices: &mut [String], held: &[Held], base: &[Finding], post: &[Finding]) {
    for held in held {
        let moved_past = base.iter().any(|f| f.package == held.package)
            && !post.iter().any(|f| f.package == held.package);
        if !moved_past {
            continue;
        }
        let prefix = format!(
            "{} {}: no eligible version clears",
            held.package, held.version
        );
        for notice in notices.iter_mut().filter(|n| n.starts_with(&prefix)) {
            *notice = format!(
                "{} {}: no eligible version of its own cleared its advisories; the other \
                 upgrades moved it past them",
                held.package, held.version
            );
        }
    }
}

/// What was fixed, by package instance: `smallvec 1.6.0 → 1.6.1` with each advisory (and its
/// title) the upgrades cleared; a package no upgrade named (moved by another's) says so.
fn fixed_by_package(
    base_findings: &[Finding],
    cleared: &[String],
    upgrades: &[Upgrade],
) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for finding in base_findings
        .iter()
        .filter(|f| cleared.contains(&f.advisory))
    {
        let package = match upgrades
            .iter()
            .find(|u| u.package == finding.package && u.from == finding.version)
        {
            Some(u) => format!("{} {} → {}", u.package, u.from, u.to),
            None => format!("{} (moved by the other upgrades)", instance(finding)),
        };
        let advisory = titled(finding);
        match out.iter_mut().find(|(p, _)| *p == package) {
            Some((_, list)) if !list.contains(&advisory) => list.push(advisory),
            Some(_) => {}
            None => out.push((package, vec![advisory])),
        }
    }
    out
}

/// What remains, by package instance, with why.
fn remaining_by_package(remaining: &[(Finding, String)]) -> Vec<(String, Vec<String>, String)> {
    let mut out: Vec<(String, Vec<String>, String)> = Vec::new();
    for (finding, why) in remaining {
        let package = instance(finding);
        let advisory = titled(finding);
        match out.iter_mut().find(|(p, _, w)| *p == package && w == why) {
            Some((_, list, _)) if !list.contains(&advisory) => list.push(advisory),
            Some(_) => {}
            None => out.push((package, vec![advisory], why.clone())),
        }
    }
    out
}

/// `1 upgrade`, `2 upgrades`.
fn counted(n: usize, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

/// `RUSTSEC-2021-0003 (Buffer overflow in SmallVec::insert_many)`.
fn titled(finding: &Finding) -> String {
    match finding.title.as_str() {
        "" => finding.advisory.clone(),
        title => format!("{} ({title})", finding.advisory),
    }
}

/// The proposal's commit message and pull-request body: the upgrades old → new, what was fixed
/// and what `remaining` stays vulnerable (with why), by package, the scans and the validations.
#[allow(clippy::too_many_arguments)] // one caller; each argument is a different record
fn proposal_summary(
    eco: Ecosystem,
    maintenance: &Maintenance,
    database: Option<&Database>,
    base_findings: &[Finding],
    remaining: &[(Finding, String)],
    tree: &str,
    validations: &[Validation],
    pages: &[String],
) -> String {
    let upgrades = &maintenance.upgrades;
    let subject = match upgrades.as_slice() {
        [one] if !one.advisories.is_empty() => format!(
            "Upgrade {} {} → {} ({})",
            one.package,
            one.from,
            one.to,
            one.advisories.join(", ")
        ),
        [one] => format!("Upgrade {} {} → {}", one.package, one.from, one.to),
        many => format!("Upgrade {} {}", many.len(), eco.packages_noun()),
    };
    let mut body = format!("{subject}\n\nUpgrades:\n");
    for u in upgrades {
        body.push_str(&format!("- {} {} → {}", u.package, u.from, u.to));
        if !u.advisories.is_empty() {
            body.push_str(&format!(" (clears {})", u.advisories.join(", ")));
        }
        body.push('\n');
    }
    if !pages.is_empty() {
        // None of the registries serves release notes; their version pages link to them.
        body.push_str("\nRelease pages:\n");
        for page in pages {
            body.push_str(&format!("- {page}\n"));
        }
    }
    if let Some(db) = database {
        body.push_str("\nFixed, by package:\n");
        let fixed = fixed_by_package(base_findings, &maintenance.advisories_cleared, upgrades);
        if fixed.is_empty() {
            body.push_str("- none\n");
        }
        for (package, advisories) in &fixed {
            body.push_str(&format!("- {package}: {}\n", advisories.join("; ")));
        }
        if !remaining.is_empty() {
            body.push_str("\nRemaining (not cleared by this proposal), by package, and why:\n");
            for (package, advisories, why) in remaining_by_package(remaining) {
                body.push_str(&format!(
                    "- {package}: {}\n  why: {why}\n",
                    advisories.join("; ")
                ));
            }
        }
        let remaining = maintenance
            .scans
            .iter()
            .rfind(|s| s.stage == "candidate")
            .map_or(0, |s| s.findings.len());
        let findings = |n: usize| counted(n, "finding", "findings");
        body.push_str(&format!(
            "\nScans ({}, advisory database {}): base {}, candidate tree {tree} {}.\n",
            db.scanner(),
            db.snapshot(),
            findings(base_findings.len()),
            findings(remaining)
        ));
    }
    body.push_str(&format!("\nValidations on tree {tree}:\n"));
    for v in validations {
        body.push_str(&format!(
            "- `{}`: passed ({} ms, {} sandbox)\n",
            v.command, v.duration_ms, v.sandbox
        ));
    }
    body.push_str("\nMade by `warden maintain` in baseline mode (deterministic, no model).\n");
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    /// mio had no fix of its own, tokio's upgrade moved it past RUSTSEC-2024-0019: its notice
    /// says so; h2, still affected, keeps its own.
    #[test]
    fn a_package_the_other_upgrades_moved_past_its_advisories_is_said_so() {
        let finding = |package: &str, version: &str, advisory: &str| Finding {
            advisory: advisory.into(),
            package: package.into(),
            version: version.into(),
            title: String::new(),
            patched: vec![],
            path: None,
        };
        let base = [
            finding("mio", "0.7.14", "RUSTSEC-2024-0019"),
            finding("h2", "0.3.3", "RUSTSEC-2026-0258"),
        ];
        let post = [finding("h2", "0.3.26", "RUSTSEC-2026-0258")];
        let held = [
            Held::new("mio", "0.7.14", "no eligible version clears it"),
            Held::new("h2", "0.3.26", "no eligible version clears it"),
        ];
        let mut notices = vec![
            "mio 0.7.14: no eligible version clears RUSTSEC-2024-0019 (newest passed over: …)"
                .to_string(),
            "h2 0.3.26: no eligible version clears every advisory; …".to_string(),
        ];
        moved_past_notices(&mut notices, &held, &base, &post);
        assert_eq!(
            notices,
            [
                "mio 0.7.14: no eligible version of its own cleared its advisories; the other \
                 upgrades moved it past them",
                "h2 0.3.26: no eligible version clears every advisory; …",
            ]
        );
    }

    /// RustSec's real informational records (ansi_term unmaintained, atty unsound) as the
    /// proposal lists them: each of the base's, cleared or remaining; new ones named.
    #[test]
    fn informational_advisories_are_listed_before_the_validations() {
        let item = |advisory: &str, package: &str, version: &str, kind: &str| {
            advisory::InformationalFinding {
                kind: kind.into(),
                finding: Finding {
                    advisory: advisory.into(),
                    package: package.into(),
                    version: version.into(),
                    title: String::new(),
                    patched: vec![],
                    path: None,
                },
            }
        };
        let summary = "Upgrade 2 crates\n\nUpgrades:\n- a\n\nValidations on tree t:\n- ok\n";
        let base = [
            item("RUSTSEC-2021-0139", "ansi_term", "0.12.1", "unmaintained"),
            item("RUSTSEC-2021-0145", "atty", "0.2.14", "unsound"),
        ];
        let candidate = [
            item("RUSTSEC-2021-0139", "ansi_term", "0.12.1", "unmaintained"),
            item("RUSTSEC-2024-0375", "atty", "0.2.14", "unmaintained"),
        ];
        assert_eq!(
            with_informational(summary, &base, &candidate),
            "Upgrade 2 crates\n\nUpgrades:\n- a\n\n\
             Informational advisories (not vulnerabilities; --informational):\n\
             - ansi_term 0.12.1: RUSTSEC-2021-0139 (unmaintained); remains\n\
             - atty 0.2.14: RUSTSEC-2021-0145 (unsound); cleared by this proposal\n\
             - atty 0.2.14: RUSTSEC-2024-0375 (unmaintained); new in the candidate\n\
             \nValidations on tree t:\n- ok\n"
        );
        assert!(with_informational(summary, &[], &[]).contains("--informational):\n- none\n"));
    }

    fn validation(tree: &str, exit: i32) -> Validation {
        Validation {
            command: "cargo test --locked --offline".into(),
            exit_code: Some(exit),
            tree: tree.into(),
            config_hash: "sha256:x".into(),
            sandbox: "linux".into(),
            duration_ms: 10,
            output_tail: String::new(),
            reused: false,
        }
    }

    fn scan(tree: &str, findings: &[&str]) -> Scan {
        Scan {
            stage: "candidate".into(),
            tree: tree.into(),
            scanner: advisory::scanner(),
            database: "/db".into(),
            database_snapshot: "git:abc".into(),
            scanned_at: "2026-01-01T00:00:00Z".into(),
            unevaluated: vec![],
            findings: findings
                .iter()
                .map(|id| Finding {
                    advisory: id.to_string(),
                    package: "smallvec".into(),
                    version: "1.6.0".into(),
                    title: String::new(),
                    patched: vec![],
                    path: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_candidate_is_ready_only_with_passing_checks_and_a_clean_post_scan_of_its_tree() {
        let targeted = vec![Upgrade {
            package: "smallvec".into(),
            from: "1.6.0".into(),
            to: "1.6.1".into(),
            advisories: vec!["RUSTSEC-2021-0003".into()],
        }];
        let clean = scan("cand", &[]);
        assert_eq!(
            readiness("cand", &[validation("cand", 0)], true, &[&clean], &targeted),
            Ok(())
        );
        // A scan bound to another tree is refused.
        let other = scan("base", &[]);
        let reasons =
            readiness("cand", &[validation("cand", 0)], true, &[&other], &targeted).unwrap_err();
        assert_eq!(
            reasons,
            ["the post-scan is bound to tree base, not the candidate cand"]
        );
        // So is a validation of another tree, a failing one, none at all, a missing post-scan
        // and a post-scan that still finds a targeted advisory.
        let reasons =
            readiness("cand", &[validation("base", 0)], true, &[&clean], &targeted).unwrap_err();
        assert!(reasons[0].contains("bound to tree base"), "{reasons:?}");
        let reasons = readiness(
            "cand",
            &[validation("cand", 101)],
            true,
            &[&clean],
            &targeted,
        )
        .unwrap_err();
        assert!(reasons[0].contains("did not pass"), "{reasons:?}");
        let reasons = readiness("cand", &[], true, &[&clean], &targeted).unwrap_err();
        assert!(reasons[0].contains("no validation"), "{reasons:?}");
        let reasons =
            readiness("cand", &[validation("cand", 0)], true, &[], &targeted).unwrap_err();
        assert!(reasons[0].contains("no post-scan"), "{reasons:?}");
        let mut dirty = scan("cand", &["RUSTSEC-2021-0003"]);
        dirty.findings[0].version = "1.6.1".into();
        let reasons =
            readiness("cand", &[validation("cand", 0)], true, &[&dirty], &targeted).unwrap_err();
        assert_eq!(
            reasons,
            ["the post-scan still finds RUSTSEC-2021-0003 in the upgraded smallvec 1.6.1"]
        );
        // Another copy of the package that stays vulnerable (smallvec 1.6.0 is the scan's
        // finding: here, another copy than the upgraded one) is not the upgrade's to clear.
        let other_copy = scan("cand", &["RUSTSEC-2021-0003"]);
        assert_eq!(
            readiness(
                "cand",
                &[validation("cand", 0)],
                true,
                &[&other_copy],
                &targeted
            ),
            Ok(())
        );
        // Nor is a post-scan that could not evaluate an advisory of the candidate's packages.
        let mut inconclusive = scan("cand", &[]);
        inconclusive.unevaluated = vec!["greet 1.0.1: advisory X cannot be evaluated".into()];
        let reasons = readiness(
            "cand",
            &[validation("cand", 0)],
            true,
            &[&inconclusive],
            &targeted,
        )
        .unwrap_err();
        assert_eq!(
            reasons,
            ["the post-scan cannot evaluate: greet 1.0.1: advisory X cannot be evaluated"]
        );
        // Without an advisory database there is no post-scan to ask for.
        assert_eq!(
            readiness("cand", &[validation("cand", 0)], false, &[], &[]),
            Ok(())
        );
    }

    #[test]
    fn a_nested_npm_copy_of_a_direct_dependency_is_a_notice_not_an_upgrade_of_the_direct_one() {
        let finding = |version: &str, path: &str, advisory: &str| Finding {
            advisory: advisory.into(),
            package: "minimist".into(),
            version: version.into(),
            title: "Prototype Pollution in minimist".into(),
            patched: vec![">= 0.2.4, < 1.0.0".into(), ">= 1.2.6".into()],
            path: Some(path.into()),
        };
        let direct = vec![cargo::LockedPackage {
            name: "minimist".into(),
            version: "1.2.5".into(),
            source: Some(npm::NPM_SOURCE.into()),
            dependencies: vec![],
            path: Some("node_modules/minimist".into()),
        }];
        let findings = [
            finding(
                "0.0.10",
                "node_modules/optimist/node_modules/minimist",
                "GHSA-xvch-5gv4-984h",
            ),
            finding("1.2.5", "node_modules/minimist", "GHSA-xvch-5gv4-984h"),
            // The same name and version hoisted under another dependent: the direct copy's
            // version, and so not the direct copy.
            finding(
                "1.2.5",
                "node_modules/mkdirp/node_modules/minimist",
                "GHSA-xvch-5gv4-984h",
            ),
        ];
        let (mut notices, mut held) = (Vec::new(), Vec::new());
        let wanted = vulnerable_wanted(Ecosystem::Npm, &direct, &findings, &mut notices, &mut held);
        assert_eq!(held.len(), 2, "{held:?}");
        assert!(held[0].why.starts_with("transitive: "), "{held:?}");
        assert_eq!(
            wanted,
            [(
                "minimist".to_string(),
                "1.2.5".to_string(),
                vec!["GHSA-xvch-5gv4-984h".to_string()]
            )]
        );
        assert_eq!(
            notices,
            [
                "minimist 0.0.10 at node_modules/optimist/node_modules/minimist \
                 (GHSA-xvch-5gv4-984h): a transitive dependency, not upgraded (maintain upgrades \
                 npm projects' direct dependencies)",
                "minimist 1.2.5 at node_modules/mkdirp/node_modules/minimist \
                 (GHSA-xvch-5gv4-984h): a transitive dependency, not upgraded (maintain upgrades \
                 npm projects' direct dependencies)",
            ]
        );
        // After the direct copy's upgrade, the nested one that stays vulnerable is not the
        // upgrade's: the candidate is ready, and the proposal says what remains.
        let upgrade = Upgrade {
            package: "minimist".into(),
            from: "1.2.5".into(),
            to: "1.2.6".into(),
            advisories: vec!["GHSA-xvch-5gv4-984h".into()],
        };
        let mut post = scan("cand", &[]);
        post.findings = vec![findings[0].clone()];
        assert_eq!(
            readiness(
                "cand",
                &[validation("cand", 0)],
                true,
                &[&post],
                std::slice::from_ref(&upgrade)
            ),
            Ok(())
        );
        let maintenance = Maintenance {
            ecosystem: "npm".into(),
            mode: "baseline".into(),
            select: vec!["vulnerable".into()],
            upgrades: vec![upgrade],
            advisories_cleared: vec![],
            scans: vec![post.clone()],
        };
        let db = Database::Osv(osv::OsvDb {
            path: "/db".into(),
            ecosystem: osv::NPM,
            advisories: vec![],
            unevaluable: vec![],
            snapshot: "sha256:abc".into(),
        });
        let text = proposal_summary(
            Ecosystem::Npm,
            &maintenance,
            Some(&db),
            &findings[..2],
            &post
                .findings
                .iter()
                .map(|f| (f.clone(), held[0].why.clone()))
                .collect::<Vec<_>>(),
            "cand",
            &[validation("cand", 0)],
            &[],
        );
        assert!(
            text.contains(
                "\nRemaining (not cleared by this proposal), by package, and why:\n\
                 - minimist 0.0.10 at node_modules/optimist/node_modules/minimist: \
                 GHSA-xvch-5gv4-984h (Prototype Pollution in minimist)\n  why: transitive: \
                 maintain upgrades an npm project's direct dependencies (its dependent's \
                 upgrade, or an `overrides` entry, moves this copy)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("- minimist 1.2.5 → 1.2.6 (clears GHSA-xvch-5gv4-984h)"),
            "{text}"
        );
    }

    #[test]
    fn a_vulnerable_package_moves_to_the_lowest_version_that_clears_the_most_advisories() {
        let versions: Vec<index::IndexVersion> = ["0.3.17", "0.3.18", "0.3.19", "0.3.20"]
            .iter()
            .map(|v| index::IndexVersion {
                version: semver::Version::parse(v).unwrap(),
                yanked: false,
                published_ms: None,
            })
            .collect();
        let eligible: Vec<&index::IndexVersion> = versions.iter().collect();
        // Each advisory's first fixed version; D has none.
        let fixed_in = |id: &str| match id {
            "A" => Some("0.3.17"),
            "B" | "C" => Some("0.3.18"),
            "E" => Some("0.3.20"),
            _ => None,
        };
        let affects = |id: &str, v: &semver::Version| {
            fixed_in(id).is_none_or(|f| *v < semver::Version::parse(f).unwrap())
        };
        let ids = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Every advisory cleared by some version: the lowest that clears them all.
        let fix = choose_fix(&eligible, &ids(&["A", "B", "C"]), affects).unwrap();
        assert_eq!(fix.version.version.to_string(), "0.3.18");
        assert_eq!(fix.cleared, ["A", "B", "C"]);
        // D is fixed in no version: the lowest that clears the most (3 of 4), not nothing.
        let fix = choose_fix(&eligible, &ids(&["A", "B", "C", "D"]), affects).unwrap();
        assert_eq!(fix.version.version.to_string(), "0.3.18");
        assert_eq!(fix.cleared, ["A", "B", "C"]);
        let fix = choose_fix(&eligible, &ids(&["D", "E", "A"]), affects).unwrap();
        assert_eq!(fix.version.version.to_string(), "0.3.20");
        assert_eq!(fix.cleared, ["E", "A"]);
        // Nothing cleared by any eligible version: no upgrade.
        assert_eq!(choose_fix(&eligible, &ids(&["D"]), affects), None);
        assert_eq!(choose_fix(&[], &ids(&["A"]), affects), None);
    }

    const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

    fn cargo_lock(packages: &[(&str, &str, &[&str])]) -> cargo::Lockfile {
        let mut text = String::from("version = 4\n");
        for (name, version, dependencies) in packages {
            text.push_str(&format!(
                "\n[[package]]\nname = \"{name}\"\nversion = \"{version}\"\nsource = \"{CRATES_IO}\"\n\
                 dependencies = [{}]\n",
                dependencies
                    .iter()
                    .map(|d| format!("\"{d}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        cargo::Lockfile::parse(&text).unwrap()
    }

    fn upgrade(package: &str, from: &str, to: &str) -> Upgrade {
        Upgrade {
            package: package.into(),
            from: from.into(),
            to: to.into(),
            advisories: vec![],
        }
    }

    #[test]
    fn upgrades_apply_dependencies_first_and_re_resolve_what_an_earlier_one_moved() {
        // hyper depends on tokio through h2, and directly.
        let lock = cargo_lock(&[
            ("hyper", "0.14.10", &["h2", "tokio"]),
            ("h2", "0.3.3", &["tokio"]),
            ("tokio", "1.8.0", &[]),
            ("smallvec", "1.6.0", &[]),
        ]);
        let order = |names: &[&str]| {
            let upgrades = names
                .iter()
                .map(|n| {
                    let from = lock.packages.iter().find(|p| p.name == *n).unwrap();
                    upgrade(n, &from.version, "9.9.9")
                })
                .collect();
            dependency_order(&lock, upgrades)
                .into_iter()
                .map(|u| u.package)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            order(&["hyper", "smallvec", "tokio"]),
            ["smallvec", "tokio", "hyper"]
        );
        assert_eq!(order(&["hyper", "h2", "tokio"]), ["tokio", "h2", "hyper"]);
        assert_eq!(
            order(&["smallvec", "h2"]),
            ["smallvec", "h2"],
            "independent"
        );

        let tokio = upgrade("tokio", "1.8.0", "1.38.0");
        let moved = |version: &str| cargo_lock(&[("tokio", version, &[])]);
        assert_eq!(
            resolve_from(Ecosystem::Cargo, &moved("1.8.0"), &tokio).as_deref(),
            Some("1.8.0")
        );
        // hyper's upgrade moved tokio to 1.20.0: the copy to move is that one.
        assert_eq!(
            resolve_from(Ecosystem::Cargo, &moved("1.20.0"), &tokio).as_deref(),
            Some("1.20.0")
        );
        // ... or past the target: nothing left to do.
        assert_eq!(
            resolve_from(Ecosystem::Cargo, &moved("1.40.0"), &tokio),
            None
        );
        assert_eq!(
            resolve_from(Ecosystem::Cargo, &moved("1.38.0"), &tokio),
            None
        );
        // An older copy (another major) is not the one moved.
        let two = cargo_lock(&[("tokio", "0.2.25", &[]), ("tokio", "1.20.0", &[])]);
        assert_eq!(
            resolve_from(Ecosystem::Cargo, &two, &tokio).as_deref(),
            Some("1.20.0")
        );
        // Go: an earlier `go get` raised golang.org/x/text past the target.
        let go_mod = gomod::GoMod::parse(
            "module a\ngo 1.21\nrequire golang.org/x/text v0.14.0 // indirect\n",
        )
        .unwrap()
        .lockfile();
        let text = upgrade("golang.org/x/text", "v0.3.7", "v0.3.8");
        assert_eq!(resolve_from(Ecosystem::Go, &go_mod, &text), None);
    }

    #[test]
    fn a_baseline_that_timed_out_is_inconclusive_and_one_that_fails_is_failing() {
        assert_eq!(baseline_verdict(&[validation("base", 0)], "c0ffee"), Ok(()));
        let failing = baseline_verdict(&[validation("base", 0), validation("base", 101)], "c0ffee")
            .unwrap_err();
        assert_eq!(failing.code, FailureCode::BaselineFailing);
        assert!(
            failing.message.contains("base commit c0ffee"),
            "{}",
            failing.message
        );
        let timed_out = Validation {
            exit_code: None,
            ..validation("base", 0)
        };
        // A timeout says nothing either way, even beside a failure.
        let inconclusive =
            baseline_verdict(&[validation("base", 101), timed_out], "c0ffee").unwrap_err();
        assert_eq!(inconclusive.code, FailureCode::BaselineInconclusive);
        assert!(
            inconclusive.message.contains("timed out or was killed"),
            "{}",
            inconclusive.message
        );
    }

    #[test]
    fn the_summary_lists_upgrades_advisories_and_validations() {
        let maintenance = Maintenance {
            ecosystem: "cargo".into(),
            mode: "baseline".into(),
            select: vec!["vulnerable".into()],
            upgrades: vec![Upgrade {
                package: "smallvec".into(),
                from: "1.6.0".into(),
                to: "1.6.1".into(),
                advisories: vec!["RUSTSEC-2021-0003".into()],
            }],
            advisories_cleared: vec!["RUSTSEC-2021-0003".into()],
            scans: vec![scan("cand", &[])],
        };
        let db = Database::RustSec(advisory::AdvisoryDb {
            path: "/db".into(),
            advisories: vec![],
            snapshot: "git:abc".into(),
        });
        let base = scan("base", &["RUSTSEC-2021-0003"]).findings;
        let text = proposal_summary(
            Ecosystem::Cargo,
            &maintenance,
            Some(&db),
            &base,
            &[],
            "cand",
            &[validation("cand", 0)],
            &["https://crates.io/crates/smallvec/1.6.1".to_string()],
        );
        assert!(
            text.contains("\nRelease pages:\n- https://crates.io/crates/smallvec/1.6.1\n"),
            "{text}"
        );
        assert!(
            text.starts_with("Upgrade smallvec 1.6.0 → 1.6.1 (RUSTSEC-2021-0003)\n\n"),
            "{text}"
        );
        assert!(
            text.contains("- smallvec 1.6.0 → 1.6.1 (clears RUSTSEC-2021-0003)"),
            "{text}"
        );
        assert!(
            text.contains("Fixed, by package:\n- smallvec 1.6.0 → 1.6.1: RUSTSEC-2021-0003\n"),
            "{text}"
        );
        assert!(!text.contains("Remaining"), "{text}");
        assert!(text.contains("advisory database git:abc"), "{text}");
        assert!(
            text.contains("- `cargo test --locked --offline`: passed (10 ms, linux sandbox)"),
            "{text}"
        );
    }

    fn cargo_finding(package: &str, version: &str, advisory: &str, title: &str) -> Finding {
        Finding {
            advisory: advisory.into(),
            package: package.into(),
            version: version.into(),
            title: title.into(),
            patched: vec![],
            path: None,
        }
    }

    /// The proposal's body, exactly: what was fixed and what remains, by package, with why
    /// (no eligible version, the cooldown, a major, transitive, a dropped upgrade).
    #[test]
    fn the_proposal_says_what_was_fixed_and_what_remains_and_why_by_package() {
        let upgrade = |package: &str, from: &str, to: &str, advisories: &[&str]| Upgrade {
            package: package.into(),
            from: from.into(),
            to: to.into(),
            advisories: advisories.iter().map(|a| a.to_string()).collect(),
        };
        let upgrades = vec![
            upgrade("smallvec", "1.6.0", "1.6.1", &["RUSTSEC-2021-0003"]),
            upgrade(
                "h2",
                "0.3.0",
                "0.3.24",
                &["RUSTSEC-2019-0034", "RUSTSEC-2024-0003"],
            ),
        ];
        let base = vec![
            cargo_finding("h2", "0.3.0", "RUSTSEC-2019-0034", "Memory exhaustion"),
            cargo_finding("h2", "0.3.0", "RUSTSEC-2024-0003", "Resource exhaustion"),
            cargo_finding("h2", "0.3.0", "RUSTSEC-2024-0332", "Degradation of service"),
            cargo_finding("hyper", "0.14.9", "RUSTSEC-2021-0078", "Lenient parsing"),
            cargo_finding(
                "regex",
                "1.5.4",
                "RUSTSEC-2022-0013",
                "Regexes with large repetitions",
            ),
            cargo_finding("smallvec", "1.6.0", "RUSTSEC-2021-0003", "Buffer overflow"),
            cargo_finding("time", "0.1.43", "RUSTSEC-2020-0071", "Segfault"),
            cargo_finding("tokio", "1.8.0", "RUSTSEC-2021-0124", "Data race"),
        ];
        let held = vec![
            Held::new(
                "h2",
                "0.3.24",
                "no eligible version clears it; 0.3.24 is the lowest that clears the most \
                 (newest passed over: 0.3.26 is 2 days old, inside the 7-day cooldown)",
            ),
            Held::new(
                "hyper",
                "0.14.9",
                "no eligible version clears it (newest passed over: 1.0.0 is a major upgrade \
                 and allow_major is off)",
            ),
            Held::dropped(
                &upgrade("regex", "1.5.4", "1.5.5", &["RUSTSEC-2022-0013"]),
                "upgrading regex 1.5.4 → 1.5.5 breaks check `cargo test` (exit code 101) on \
                 tree cand (baseline mode does not repair)",
            ),
        ];
        let direct = [
            ("h2", "0.3.0"),
            ("hyper", "0.14.9"),
            ("regex", "1.5.4"),
            ("smallvec", "1.6.0"),
            ("tokio", "1.8.0"),
        ]
        .map(|(name, version)| cargo::LockedPackage {
            name: name.into(),
            version: version.into(),
            source: Some(CRATES_IO.into()),
            dependencies: vec![],
            path: None,
        });
        let post = [
            cargo_finding(
                "h2",
                "0.3.24",
                "RUSTSEC-2024-0332",
                "Degradation of service",
            ),
            cargo_finding("hyper", "0.14.9", "RUSTSEC-2021-0078", "Lenient parsing"),
            cargo_finding(
                "regex",
                "1.5.4",
                "RUSTSEC-2022-0013",
                "Regexes with large repetitions",
            ),
            cargo_finding("time", "0.1.43", "RUSTSEC-2020-0071", "Segfault"),
        ];
        // Under `--select all` a transitive package is not selected.
        let remaining: Vec<(Finding, String)> = post
            .iter()
            .map(|f| {
                let why = remaining_reason(f, &held, &upgrades, &direct, false);
                (f.clone(), why)
            })
            .collect();
        let maintenance = Maintenance {
            ecosystem: "cargo".into(),
            mode: "baseline".into(),
            select: vec!["all".into()],
            upgrades,
            advisories_cleared: vec![
                "RUSTSEC-2019-0034".into(),
                "RUSTSEC-2021-0003".into(),
                "RUSTSEC-2021-0124".into(),
                "RUSTSEC-2024-0003".into(),
            ],
            scans: vec![scan("cand", &["A", "B", "C", "D"])],
        };
        let db = Database::RustSec(advisory::AdvisoryDb {
            path: "/db".into(),
            advisories: vec![],
            snapshot: "git:abc".into(),
        });
        let text = proposal_summary(
            Ecosystem::Cargo,
            &maintenance,
            Some(&db),
            &base,
            &remaining,
            "cand",
            &[validation("cand", 0)],
            &[],
        );
        let scanner = advisory::scanner();
        assert_eq!(
            text,
            format!(
                "Upgrade 2 Cargo dependencies

Upgrades:
- smallvec 1.6.0 → 1.6.1 (clears RUSTSEC-2021-0003)
- h2 0.3.0 → 0.3.24 (clears RUSTSEC-2019-0034, RUSTSEC-2024-0003)

Fixed, by package:
- h2 0.3.0 → 0.3.24: RUSTSEC-2019-0034 (Memory exhaustion); RUSTSEC-2024-0003 (Resource exhaustion)
- smallvec 1.6.0 → 1.6.1: RUSTSEC-2021-0003 (Buffer overflow)
- tokio 1.8.0 (moved by the other upgrades): RUSTSEC-2021-0124 (Data race)

Remaining (not cleared by this proposal), by package, and why:
- h2 0.3.24: RUSTSEC-2024-0332 (Degradation of service)
  why: no eligible version clears it; 0.3.24 is the lowest that clears the most (newest passed over: 0.3.26 is 2 days old, inside the 7-day cooldown)
- hyper 0.14.9: RUSTSEC-2021-0078 (Lenient parsing)
  why: no eligible version clears it (newest passed over: 1.0.0 is a major upgrade and allow_major is off)
- regex 1.5.4: RUSTSEC-2022-0013 (Regexes with large repetitions)
  why: the upgrade to 1.5.5 was dropped: upgrading regex 1.5.4 → 1.5.5 breaks check `cargo test` (exit code 101) on tree cand (baseline mode does not repair)
- time 0.1.43: RUSTSEC-2020-0071 (Segfault)
  why: transitive: this selection upgrades direct dependencies (`--select vulnerable` targets vulnerable packages)

Scans ({scanner}, advisory database git:abc): base 8 findings, candidate tree cand 4 findings.

Validations on tree cand:
- `cargo test --locked --offline`: passed (10 ms, linux sandbox)

Made by `warden maintain` in baseline mode (deterministic, no model).
"
            )
        );
    }
}
