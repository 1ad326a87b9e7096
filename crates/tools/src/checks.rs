//! Checks and submission of change tasks: [`ChangeSession`] owns the candidate of one task (its
//! writable view's upper and merged directories, the base commit, Warden's mirror) and runs the
//! repository's check commands on exactly a candidate tree; `run_checks` lets the agent iterate
//! and `submit_change` builds the tree, runs the final validation and either finishes the task
//! with a proposal (or `no_change`) or sends the failing checks back as a rejection.
//!
//! **Checks see exactly the tree.** A candidate tree is materialized from the mirror (the same
//! verified walk as snapshots) into `scratch/trees/<tree>` and each check runs in a fresh
//! writable sandbox view over it, so files the tree does not hold (ignored build output,
//! anything the view kept that cannot enter) are not there, and what a check writes never
//! reaches the candidate. The materialization is reused while the tree is unchanged; the base
//! tree is the snapshot itself. Every record names its tree: a later write makes a new tree,
//! and only records of the submitted tree go into the proposal.
//!
//! **A tree is checked once.** A record whose command exited is kept for the session; the same
//! command on the same tree under the same configuration hash and sandbox backend is not run
//! again but reported from it (`reused: true`), so `submit_change` right after `run_checks` on
//! an unchanged tree, the repair model's first `run_checks`, or a follow-up on its parent's
//! proposal tree ([`ChangeSession::seed`]) cost nothing. Only an exact match counts; a timed
//! out or killed check is never reused.
//!
//! **Warm checks** ([`WarmBuild`]). A check view may be given a seed: a read-only directory of
//! build outputs (`target/`) layered below the tree, so a build after an edit is incremental
//! and what it writes stays in the view. The seed is built only from the *base* tree — the
//! first check the base tree runs, before the agent, harvests the outputs from its view — and
//! published once complete under its key (the base tree, the checks, the toolchains), so no
//! agent's tree ever writes what another task builds against. A candidate tree is
//! materialized with the base snapshot's modification times on every file the change did not
//! touch, so tools that compare times (cargo's fingerprints, make) see exactly the changed
//! files as newer than the seed.

use crate::blocking;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use warden_protocol::{ChangedFile, DiffStat, Event, Failure, FailureCode, Proposal, Validation};
use warden_repo::candidate::{build_candidate_tree, materialize_tree, Candidate, CandidateInput};
use warden_repo::proposal::{
    create_proposal_commit, diff_files, proposal_hash, proposal_ref, ProposalInput,
};
use warden_repo::Git;
use warden_runtime::{BoxFuture, EventSink, Finish, Tool, ToolOutput, ToolSpec};
use warden_sandbox::{CommandSpec, Mount, ResourceLimits, Sandbox, SandboxView, ViewSpec};

/// Copies each of `outputs` (folders of the working root at `root`) into `seed`: regular
/// files with their permissions and modification times (hard links kept as links), symbolic
/// links as links, nothing else (a folder `seed` already has is filled as it is). Nothing is followed: an output that is not a real directory
/// (a symbolic link a build planted, say) is refused, so the host's files cannot enter a seed.
/// The view's commands have all ended when this runs.
pub fn harvest_outputs(
    root: &std::path::Path,
    outputs: &[String],
    seed: &std::path::Path,
) -> std::io::Result<()> {
    let mut linked = std::collections::HashMap::new();
    for output in outputs {
        let source = root.join(output);
        match source.symlink_metadata() {
            Ok(meta) if meta.is_dir() => copy_seed(&source, &seed.join(output), &mut linked)?,
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "{output} is not a directory in the view"
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn copy_seed(
    from: &std::path::Path,
    to: &std::path::Path,
    linked: &mut std::collections::HashMap<(u64, u64), PathBuf>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o755).create(to) {
        // An empty folder made beforehand (a dependency cache's) is filled as it is.
        Err(e)
            if e.kind() == std::io::ErrorKind::AlreadyExists
                && to.symlink_metadata().is_ok_and(|meta| meta.is_dir()) => {}
        other => other?,
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let meta = source.symlink_metadata()?;
        if meta.is_dir() {
            copy_seed(&source, &target, linked)?;
        } else if meta.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else if meta.is_file() {
            let identity = (meta.dev(), meta.ino());
            if meta.nlink() > 1 {
                if let Some(first) = linked.get(&identity) {
                    std::fs::hard_link(first, &target)?;
                    continue;
                }
            }
            let mut input = std::fs::File::open(&source)?;
            let mut output = std::fs::File::create(&target)?;
            std::io::copy(&mut input, &mut output)?;
            output.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o755))?;
            output.set_modified(meta.modified()?)?;
            if meta.nlink() > 1 {
                linked.insert(identity, target);
            }
        }
    }
    Ok(())
}

/// Sets the modification time of every regular file under `dest/relative` whose path is not
/// in `changed` to that of the same file in `base` (when it has one).
fn keep_times(
    base: &std::path::Path,
    dest: &std::path::Path,
    relative: &std::path::Path,
    changed: &std::collections::HashSet<&[u8]>,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    for entry in std::fs::read_dir(dest.join(relative))? {
        let entry = entry?;
        let path = relative.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            keep_times(base, dest, &path, changed)?;
        } else if kind.is_file() && !changed.contains(path.as_os_str().as_bytes()) {
            let Ok(original) = base.join(&path).symlink_metadata() else {
                continue;
            };
            if original.is_file() {
                std::fs::File::options()
                    .write(true)
                    .open(dest.join(&path))?
                    .set_modified(original.modified()?)?;
            }
        }
    }
    Ok(())
}

/// Bytes of a check's output kept in its record.
const OUTPUT_TAIL: usize = 4000;
/// The part of a check's output its `check_finished` event carries.
const EVENT_TAIL: usize = 2000;

/// Replaces registered secrets in text shown or stored.
pub type Redact = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The setting that lets a package manager (`cargo`, `npm`, `go`: what
/// [`crate::offline::offline_failure`] names) find the project's dependencies offline.
pub type OfflineFix = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Everything a change task's checks and submission need.
pub struct ChangeSessionConfig {
    pub git: Git,
    pub repo: String,
    /// Warden's bare mirror; candidate blobs, trees and the proposal commit are written here.
    pub mirror: PathBuf,
    pub base_commit: String,
    pub base_tree: String,
    /// The read-only snapshot of the base commit.
    pub snapshot: PathBuf,
    /// The writable view's overlay upper directory and merged root.
    pub upper: PathBuf,
    pub merged: PathBuf,
    /// A directory of this task only (temporary index, materializations, check views).
    pub scratch: PathBuf,
    pub task_id: String,
    /// Seconds since the epoch for the proposal commit's dates.
    pub commit_time: u64,
    /// `Name <email>` of the proposal commit's co-authors (the requester, where known).
    pub co_authors: Vec<String>,
    pub sandbox: Arc<dyn Sandbox>,
    pub checks: Vec<String>,
    pub check_timeout: Duration,
    pub limits: ResourceLimits,
    pub redact: Redact,
    /// The environment of check commands (the sandbox baseline plus the toolchains').
    pub env: Vec<(String, String)>,
    /// Host directories the check views show (toolchains, the dependency cache read-only).
    pub mounts: Vec<Mount>,
    /// What to say when a check fails because its dependencies cannot be fetched offline.
    pub offline_fix: OfflineFix,
}

/// Publishes (`true`) or abandons (`false`) the fill of a warm seed.
pub type FinishFill = Arc<dyn Fn(bool) -> std::io::Result<()> + Send + Sync>;

/// A warm seed of build outputs: complete (layered under every check view) or, when `fill` is
/// set, empty and this session's to fill from the base tree's first check.
pub struct WarmBuild {
    /// The seed directory (its key's, under Warden's caches).
    pub seed: PathBuf,
    /// Folders of the working root harvested into the seed (`target` for Rust,
    /// `node_modules` for node).
    pub outputs: Vec<String>,
    /// Commands the warm-up runs in its view before the check (`npm ci --offline …`): what
    /// they put in the tree is harvested with the build's outputs. One that fails leaves the
    /// seed unfilled.
    pub install: Vec<String>,
    /// Set while this session holds the seed to fill: called once the harvest ends.
    pub fill: Option<FinishFill>,
    /// Keeps the seed's lease (its lock, held shared: `warden gc` leaves it) for the session.
    pub hold: Arc<dyn std::any::Any + Send + Sync>,
}

/// sha256 of the check list, timeout, sandbox backend and Warden version: what a validation's
/// result depends on besides the tree (and what a warm seed's key takes of the checks).
pub fn check_config_hash(checks: &[String], backend: &str, timeout: Duration) -> String {
    use sha2::Digest;
    let text = json!({
        "checks": checks,
        "sandbox": backend,
        "timeout_ms": timeout.as_millis() as u64,
        // The sandbox implementation ships with Warden: its version is the backend's.
        "warden": env!("CARGO_PKG_VERSION"),
    })
    .to_string();
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    )
}

/// A change task's candidate, checks and proposal, shared by `run_checks` and `submit_change`.
pub struct ChangeSession {
    pub config: ChangeSessionConfig,
    state: Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    /// The tree currently materialized under `scratch/trees/`.
    materialized: Option<(String, PathBuf)>,
    views_opened: u64,
    /// The check view running a command now, for [`ChangeSession::cancel_checks`].
    running: Option<Weak<Box<dyn SandboxView>>>,
    /// The task was cancelled: no further check starts.
    cancelled: bool,
    /// Every record of a check that exited, for [`reusable`].
    checked: Vec<Validation>,
    /// Warm build outputs for the check views ([`ChangeSession::use_warm`]); `None`: every
    /// check builds from nothing.
    warm: Option<Arc<WarmBuild>>,
    /// The warm seed is complete: check views show it.
    seed_ready: bool,
    /// The warm seed waits for this session's first check of the base tree.
    seed_to_fill: bool,
    /// How long copying the warm-up's outputs into the seed took.
    harvest_ms: Option<u64>,
    /// The host directories check views show from now on, instead of the configuration's
    /// ([`ChangeSession::use_mounts`]).
    mounts: Option<Vec<Mount>>,
    /// Chained outputs are on ([`ChangeSession::chain_outputs`]).
    chaining: bool,
    /// The outputs of the last accepted candidate's first check, the seed of later check
    /// views instead of the base's (task-private, under the scratch directory).
    chained: Option<PathBuf>,
    /// The outputs of the last candidate whose first check passed, with its tree: chained
    /// once the caller accepts that tree ([`ChangeSession::accept_outputs`]).
    pending: Option<(String, PathBuf)>,
    /// Directories made for chained outputs so far (their names).
    chain_dirs: u64,
    /// The writable view's upper and merged directories, once it was opened again
    /// ([`ChangeSession::attach_view`]).
    view: Option<(PathBuf, PathBuf)>,
    /// Where each check's start and end are reported ([`ChangeSession::report_checks`]).
    events: Option<Arc<dyn EventSink>>,
}

impl ChangeSession {
    pub fn new(config: ChangeSessionConfig) -> ChangeSession {
        ChangeSession {
            config,
            state: Mutex::new(SessionState::default()),
        }
    }

    /// Gives the check views warm build outputs from now on: `warm`'s seed when it is
    /// complete, else (it is this session's to fill) once [`ChangeSession::warm_up`] built it.
    pub fn use_warm(&self, warm: WarmBuild) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.seed_ready = warm.fill.is_none();
        state.seed_to_fill = warm.fill.is_some();
        state.warm = Some(Arc::new(warm));
    }

    /// Reports each check as it runs to `events` from now on: `check_started` before its view
    /// opens, `check_finished` when it ended (or could not run), `check_finished` with
    /// `reused` for a record that stands for it.
    pub fn report_checks(&self, events: Arc<dyn EventSink>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .events = Some(events);
    }

    fn report(&self, event: Event) {
        let events = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .events
            .clone();
        if let Some(events) = events {
            events.emit(event);
        }
    }

    /// `check_finished` for `validation`.
    fn report_finished(&self, validation: &Validation) {
        self.report(Event::CheckFinished {
            command: validation.command.clone(),
            tree: validation.tree.clone(),
            exit_code: validation.exit_code,
            duration_ms: validation.duration_ms,
            reused: validation.reused,
            output_tail: tail(&validation.output_tail, EVENT_TAIL),
        });
    }

    /// `check_finished` for a check that could not run: no exit code, why as its output.
    fn report_not_run(&self, command: &str, tree: &str, started: Instant, why: &str) {
        self.report(Event::CheckFinished {
            command: command.to_string(),
            tree: tree.to_string(),
            exit_code: None,
            duration_ms: started.elapsed().as_millis() as u64,
            reused: false,
            output_tail: tail(&(self.config.redact)(why), EVENT_TAIL),
        });
    }

    /// Whether check views show a complete warm seed now.
    pub fn seed_ready(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seed_ready
    }

    /// How long copying the warm-up's build outputs into the seed took, once it ran.
    pub fn harvest_ms(&self) -> Option<u64> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .harvest_ms
    }

    /// Whether the warm seed waits for a build of the base tree ([`ChangeSession::warm_up`]).
    pub fn seed_to_fill(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seed_to_fill
    }

    /// Fills the warm seed when it waits for one: the first check on the base tree, its build
    /// outputs harvested from its view (a record like any other, reused by a baseline or a
    /// submission of the unchanged tree). `None` when there was nothing to fill.
    pub fn warm_up(&self) -> Option<Result<Validation, String>> {
        if !self.seed_to_fill() {
            return None;
        }
        let first = self.config.checks.first()?.clone();
        Some(
            self.run_commands(&self.config.base_tree, std::slice::from_ref(&first))
                .map(|mut records| records.remove(0)),
        )
    }

    /// Kills the check command running now and starts no other (the task was cancelled). A
    /// check runs in its own view, which the canceller of the agent's view does not reach;
    /// without this a cancelled task's check ran on to its end (up to the check timeout), and
    /// an in-process command that exited meanwhile left the check view mounted.
    pub fn cancel_checks(&self) {
        let running = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.cancelled = true;
            state.running.as_ref().and_then(Weak::upgrade)
        };
        if let Some(view) = running {
            view.cancel();
        }
    }

    /// Whether the task was cancelled ([`ChangeSession::cancel_checks`]): no command of the
    /// session's own views starts any more.
    pub fn is_cancelled(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cancelled
    }

    /// Runs `spec` in `view`, a view of the session's own (a check, a prepare command, the
    /// program lookup), where [`ChangeSession::cancel_checks`] reaches it, then closes the
    /// view.
    pub fn run_cancellable(
        &self,
        view: Box<dyn SandboxView>,
        spec: &CommandSpec,
    ) -> Result<warden_sandbox::CommandOutput, warden_sandbox::SandboxError> {
        self.run_in_view(view, spec, &mut |_| {}, &mut |_, _| {})
    }

    /// [`ChangeSession::run_cancellable`], with `before` called on the view before the
    /// command (where the canceller reaches what it runs), and `after` on the view and the
    /// command's output (when it ran) before the view closes.
    fn run_in_view(
        &self,
        view: Box<dyn SandboxView>,
        spec: &CommandSpec,
        before: &mut dyn FnMut(&dyn SandboxView),
        after: &mut dyn FnMut(&dyn SandboxView, &warden_sandbox::CommandOutput),
    ) -> Result<warden_sandbox::CommandOutput, warden_sandbox::SandboxError> {
        let view = Arc::new(view);
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.running = Some(Arc::downgrade(&view));
            // Cancelled while the view was opened: the command starts killed.
            if state.cancelled {
                view.cancel();
            }
        }
        before(view.as_ref().as_ref());
        let output = view.run(spec);
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .running = None;
        if let Ok(output) = &output {
            after(view.as_ref().as_ref(), output);
        }
        // A view that fails to close leaves only its scratch directory, which the task's
        // scratch removal takes with it. (A canceller holding it this instant drops it right
        // after; the view's own drop then takes its mounts down.)
        if let Ok(view) = Arc::try_unwrap(view) {
            let _ = view.close();
        }
        output
    }

    /// [`check_config_hash`] of this session's checks.
    pub fn config_hash(&self) -> String {
        check_config_hash(
            &self.config.checks,
            self.config.sandbox.backend().as_str(),
            self.config.check_timeout,
        )
    }

    /// Builds the candidate tree of the view as it is now.
    pub fn candidate(&self) -> Result<Candidate, String> {
        let (upper, merged) = self.view_dirs();
        build_candidate_tree(CandidateInput {
            git: &self.config.git,
            mirror: &self.config.mirror,
            base_tree: &self.config.base_tree,
            upper: &upper,
            merged: &merged,
            scratch: &self.config.scratch.join("candidate"),
        })
        .map_err(|e| format!("cannot build the candidate tree: {e}"))
    }

    /// Records of earlier runs (a follow-up's parent proposal's) that later checks may reuse
    /// when they match exactly (`reusable`); those of another configuration never do.
    pub fn seed(&self, validations: &[Validation]) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for v in validations {
            if v.exit_code.is_some() && !state.checked.contains(v) {
                state.checked.push(Validation {
                    reused: false,
                    ..v.clone()
                });
            }
        }
    }

    /// Forgets every record: what the checks build against changed (maintenance fetched into
    /// the dependency cache), so an earlier result of a tree no longer says what a run would.
    pub fn forget_checks(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .checked
            .clear();
    }

    /// Shows `mounts` in the check views from now on instead of the configuration's (a
    /// maintenance task checks the base tree against its key's shared dependency cache, then
    /// its upgrades against a copy of it shown at the same path). The records stay: the caller
    /// forgets them ([`ChangeSession::forget_checks`]) when what the mounts hold differs.
    pub fn use_mounts(&self, mounts: Vec<Mount>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .mounts = Some(mounts);
    }

    /// The complete warm seed the check views show, if any.
    pub fn warm_seed(&self) -> Option<PathBuf> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .warm
            .as_ref()
            .filter(|_| state.seed_ready)
            .map(|warm| warm.seed.clone())
    }

    /// The writable view was opened again (with a seed, before the agent): its `upper` and
    /// `merged` directories replace the configuration's.
    pub fn attach_view(&self, upper: PathBuf, merged: PathBuf) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .view = Some((upper, merged));
    }

    /// The writable view's upper and merged directories.
    fn view_dirs(&self) -> (PathBuf, PathBuf) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .view
            .clone()
            .unwrap_or_else(|| (self.config.upper.clone(), self.config.merged.clone()))
    }

    /// The host path of the writable view's merged working root.
    pub fn merged(&self) -> PathBuf {
        self.view_dirs().1
    }

    /// Chains build outputs from one accepted candidate to the next (a maintenance task in
    /// baseline mode, whose candidates differ only by the lockfile changes Warden itself
    /// applies, each on the one before): from now on the first check of a candidate tree that
    /// passes keeps its view's outputs ([`WarmBuild::outputs`]) in a directory of this
    /// session's scratch, and once the caller accepts that tree
    /// ([`ChangeSession::accept_outputs`]) later check views start from them instead of the
    /// base's seed, so each check after an upgrade builds only what that upgrade changed, as
    /// `cargo update` and an incremental `cargo test` would on one machine. Never shared: the
    /// directories go with the task's scratch, and the base's seed is never written. Needs a
    /// warm seed ([`ChangeSession::use_warm`]); without one, nothing is kept.
    pub fn chain_outputs(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .chaining = true;
    }

    /// Accepts `tree` as the candidate later ones build on: its kept outputs, when its first
    /// check passed and kept them, become the seed of later check views (the earlier chained
    /// directory is removed). Anything else kept is dropped.
    pub fn accept_outputs(&self, tree: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.pending.take() {
            Some((kept, dir)) if kept == tree => {
                if let Some(old) = state.chained.replace(dir) {
                    let _ = warden_sandbox::remove_scratch(&old);
                }
            }
            Some((_, dir)) => {
                let _ = warden_sandbox::remove_scratch(&dir);
            }
            None => {}
        }
    }

    /// The host directories check views show now.
    fn mounts(&self) -> Vec<Mount> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .mounts
            .clone()
            .unwrap_or_else(|| self.config.mounts.clone())
    }

    /// Runs every check on `tree`, each in a fresh writable view over its materialization; a
    /// check already run on exactly this tree and configuration is reported from that run.
    pub fn run_checks(&self, tree: &str) -> Result<Vec<Validation>, String> {
        self.run_commands(tree, &self.config.checks)
    }

    fn run_commands(&self, tree: &str, commands: &[String]) -> Result<Vec<Validation>, String> {
        let config_hash = self.config_hash();
        let backend = self.config.sandbox.backend().as_str().to_string();
        let mut validations = Vec::new();
        let mut lower = None;
        for command in commands {
            let earlier = reusable(
                &self
                    .state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .checked,
                tree,
                command,
                &config_hash,
                &backend,
            );
            if let Some(earlier) = earlier {
                self.report_finished(&earlier);
                validations.push(earlier);
                continue;
            }
            let lower = match &lower {
                Some(lower) => lower,
                None => lower.insert(self.tree_root(tree)?),
            };
            std::fs::create_dir_all(&self.config.scratch)
                .map_err(|e| format!("cannot create {}: {e}", self.config.scratch.display()))?;
            let (scratch_dir, seed, harvest, chain) = {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.cancelled {
                    return Err("the task was cancelled: its checks were stopped".into());
                }
                state.views_opened += 1;
                let warm = state.warm.clone();
                // Only the base tree's build fills the seed, and only once.
                let harvest = state.seed_to_fill && tree == self.config.base_tree;
                if harvest {
                    state.seed_to_fill = false;
                }
                let seed = match &state.chained {
                    Some(chained) => Some(chained.clone()),
                    None => warm
                        .as_ref()
                        .filter(|_| state.seed_ready)
                        .map(|w| w.seed.clone()),
                };
                // A candidate's first check keeps its outputs for the next, when chaining.
                let chain = (state.chaining
                    && seed.is_some()
                    && tree != self.config.base_tree
                    && Some(command) == commands.first())
                .then(|| {
                    state.chain_dirs += 1;
                    self.config
                        .scratch
                        .join(format!("chained-{}", state.chain_dirs))
                })
                .zip(warm.as_ref().map(|w| w.outputs.clone()));
                (
                    self.config
                        .scratch
                        .join(format!("check-{}", state.views_opened)),
                    seed,
                    warm.filter(|_| harvest),
                    chain,
                )
            };
            self.report(Event::CheckStarted {
                command: command.clone(),
                tree: tree.to_string(),
            });
            let opening = Instant::now();
            let view = self
                .config
                .sandbox
                .open(&ViewSpec {
                    lower: vec![(self.config.repo.clone(), lower.clone())],
                    writable: true,
                    scratch_dir,
                    mounts: self.mounts(),
                    egress_proxy: None,
                    seed,
                })
                .map_err(|e| format!("sandbox error: the check view could not be opened: {e}"));
            let view = match view {
                Ok(view) => view,
                Err(error) => {
                    if let Some(warm) = &harvest {
                        self.end_fill(warm, false);
                    }
                    self.report_not_run(command, tree, opening, &error);
                    return Err(error);
                }
            };
            // One stream: what the check wrote to stdout and stderr stays in the order it was
            // written (two pipes read apart cannot say which came first).
            let mut spec =
                CommandSpec::bash(&format!("exec 2>&1\n{command}"), self.config.check_timeout);
            spec.limits = self.config.limits;
            spec.env = self.config.env.clone();
            spec.output_limit = 256 * 1024;
            // The warm-up first installs what the checks need in the tree (node_modules):
            // later views get it from the seed.
            let installed = std::cell::Cell::new(true);
            let mut install = |view: &dyn SandboxView| {
                for command in harvest.iter().flat_map(|warm| &warm.install) {
                    let mut install = CommandSpec::bash(command, self.config.check_timeout);
                    install.limits = self.config.limits;
                    install.env = self.config.env.clone();
                    install.output_limit = 64 * 1024;
                    let ok = view.run(&install).is_ok_and(|output| output.success());
                    installed.set(installed.get() && ok);
                }
            };
            let started = Instant::now();
            let mut ran_ms = None;
            let mut harvested = false;
            let output = self.run_in_view(view, &spec, &mut install, &mut |view, output| {
                // The command's own time, without the harvest and the view's closing.
                ran_ms = Some(started.elapsed().as_millis() as u64);
                if let (Some((dir, outputs)), true) = (&chain, output.success()) {
                    let kept = std::fs::create_dir_all(dir)
                        .and_then(|()| harvest_outputs(view.root(), outputs, dir));
                    let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    let old = match kept {
                        Ok(()) => state.pending.replace((tree.to_string(), dir.clone())),
                        Err(_) => Some((String::new(), dir.clone())),
                    };
                    if let Some((_, old)) = old {
                        let _ = warden_sandbox::remove_scratch(&old);
                    }
                }
                if let Some(warm) = &harvest {
                    // A build that ran to its end (passing or not) left consistent outputs;
                    // a killed or timed-out one may not have.
                    let copying = Instant::now();
                    harvested = installed.get()
                        && output.exit_code.is_some()
                        && !output.timed_out
                        && harvest_outputs(view.root(), &warm.outputs, &warm.seed).is_ok();
                    self.state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .harvest_ms = Some(copying.elapsed().as_millis() as u64);
                }
            });
            if let Some(warm) = &harvest {
                self.end_fill(warm, harvested);
            }
            let duration_ms = ran_ms.unwrap_or_else(|| started.elapsed().as_millis() as u64);
            let output = match output {
                Ok(output) => output,
                Err(error) => {
                    let error = format!("sandbox error running {command:?}: {error}");
                    self.report_not_run(command, tree, started, &error);
                    return Err(error);
                }
            };
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            if !output.stderr.is_empty() {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&String::from_utf8_lossy(&output.stderr));
            }
            // The shell's "command not found" is in the one stream now.
            let note = crate::not_found_note(output.exit_code, &text);
            if !note.is_empty() {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&note);
            }
            if output.timed_out {
                text.push_str(&format!(
                    "\n[timed out after {} ms]",
                    self.config.check_timeout.as_millis()
                ));
            }
            let validation = Validation {
                command: command.clone(),
                exit_code: if output.timed_out {
                    None
                } else {
                    output.exit_code
                },
                tree: tree.to_string(),
                config_hash: config_hash.clone(),
                sandbox: backend.clone(),
                duration_ms,
                output_tail: (self.config.redact)(&tail(&text, OUTPUT_TAIL)),
                reused: false,
            };
            if validation.exit_code.is_some() {
                self.state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .checked
                    .push(validation.clone());
            }
            self.report_finished(&validation);
            validations.push(validation);
        }
        Ok(validations)
    }

    /// The programs the checks name that the sandbox cannot find on the base tree, as
    /// `(check, program)`: one `command -v` per program in a read-only view, so a check that
    /// can never run fails the task before the agent works. Only names looked up on `PATH`
    /// are checked (not `./script`, nor functions the check defines).
    pub fn missing_programs(&self) -> Result<Vec<(String, String)>, String> {
        let mut wanted: Vec<(String, String)> = Vec::new();
        for check in &self.config.checks {
            for program in check_programs(check) {
                if !wanted.iter().any(|(_, p)| *p == program) {
                    wanted.push((check.clone(), program));
                }
            }
        }
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let quoted: Vec<String> = wanted
            .iter()
            .map(|(_, program)| format!("'{}'", program.replace('\'', "'\\''")))
            .collect();
        let script = format!(
            "for p in {}; do command -v -- \"$p\" >/dev/null 2>&1 || printf '%s\\n' \"$p\"; done",
            quoted.join(" ")
        );
        std::fs::create_dir_all(&self.config.scratch)
            .map_err(|e| format!("cannot create {}: {e}", self.config.scratch.display()))?;
        let view = self
            .config
            .sandbox
            .open(&ViewSpec {
                lower: vec![(self.config.repo.clone(), self.config.snapshot.clone())],
                writable: false,
                scratch_dir: self.config.scratch.join("probe"),
                mounts: self.mounts(),
                egress_proxy: None,
                seed: None,
            })
            .map_err(|e| format!("sandbox error: the check view could not be opened: {e}"))?;
        let mut spec = CommandSpec::bash(&script, Duration::from_secs(60));
        spec.limits = self.config.limits;
        spec.env = self.config.env.clone();
        let output = self
            .run_cancellable(view, &spec)
            .map_err(|e| format!("sandbox error looking up the checks' programs: {e}"))?;
        if !output.success() {
            return Err(format!(
                "looking up the checks' programs failed (exit {:?}): {}",
                output.exit_code,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let missing: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        Ok(wanted
            .into_iter()
            .filter(|(_, program)| missing.contains(program))
            .collect())
    }

    /// Why `validations` fail for a reason outside the change, if they do: the first failing
    /// check whose output shows a package manager unable to fetch a dependency offline, with
    /// the setting that fixes it.
    pub fn offline_reason(&self, validations: &[Validation]) -> Option<String> {
        validations.iter().filter(|v| !v.passed()).find_map(|v| {
            let program = crate::offline::offline_failure(&v.output_tail)?;
            Some(format!(
                "check `{}` cannot fetch the project's dependencies: checks run offline, with \
                 only what the dependency cache holds; {}",
                v.command,
                (self.config.offline_fix)(program)
            ))
        })
    }

    /// Ends this session's fill of the warm seed: published when `harvested`, else abandoned
    /// (the next task that may fill it empties it first). Check views show it from then on.
    fn end_fill(&self, warm: &WarmBuild, harvested: bool) {
        let Some(finish) = &warm.fill else {
            return;
        };
        let published = finish(harvested).is_ok() && harvested;
        if published {
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .seed_ready = true;
        }
    }

    /// The host directory holding exactly `tree`: the snapshot for the base tree, else its
    /// verified materialization (the one checks run over). What Warden reads of a candidate
    /// (`warden maintain`'s post-scan of its lockfile) is read here, so it is bound to the tree.
    pub fn tree_root(&self, tree: &str) -> Result<PathBuf, String> {
        if tree == self.config.base_tree {
            Ok(self.config.snapshot.clone())
        } else {
            self.materialize(tree)
        }
    }

    fn materialize(&self, tree: &str) -> Result<PathBuf, String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((current, path)) = &state.materialized {
            if current == tree {
                return Ok(path.clone());
            }
        }
        if let Some((_, old)) = state.materialized.take() {
            let _ = warden_sandbox::remove_scratch(&old);
        }
        let dest = self.config.scratch.join("trees").join(tree);
        if dest.exists() {
            let _ = warden_sandbox::remove_scratch(&dest);
        }
        materialize_tree(
            &self.config.git,
            &self.config.mirror,
            &self.config.scratch.join("candidate"),
            &self.config.base_commit,
            tree,
            &dest,
        )
        .map_err(|e| format!("cannot materialize the candidate tree: {e}"))?;
        if state.warm.is_some() {
            self.keep_base_times(tree, &dest)?;
        }
        state.materialized = Some((tree.to_string(), dest.clone()));
        Ok(dest)
    }

    /// Gives every file of the materialized `tree` at `dest` that the change did not touch
    /// the modification time it has in the base snapshot, so the warm seed (built from the
    /// snapshot, after it was written) is newer than every unchanged input and older than
    /// every changed one, as a build on the user's machine would find it.
    fn keep_base_times(&self, tree: &str, dest: &std::path::Path) -> Result<(), String> {
        let git_dir = format!("--git-dir={}", self.config.mirror.display());
        let changed = self
            .config
            .git
            .run(
                &self.config.mirror,
                &[
                    &git_dir,
                    "diff-tree",
                    "-r",
                    "-z",
                    "--no-renames",
                    "--name-only",
                    &self.config.base_tree,
                    tree,
                ],
            )
            .map_err(|e| format!("cannot list the candidate's changes: {e}"))?;
        let changed: std::collections::HashSet<&[u8]> = changed
            .stdout
            .split(|&b| b == 0)
            .filter(|path| !path.is_empty())
            .collect();
        keep_times(
            &self.config.snapshot,
            dest,
            std::path::Path::new(""),
            &changed,
        )
        .map_err(|e| format!("cannot set the candidate's file times: {e}"))
    }

    /// Creates the proposal commit and ref for `tree` with its passing validations.
    pub fn propose(
        &self,
        tree: &str,
        summary: &str,
        validations: Vec<Validation>,
    ) -> Result<Proposal, String> {
        let commit = create_proposal_commit(ProposalInput {
            git: &self.config.git,
            mirror: &self.config.mirror,
            scratch: &self.config.scratch.join("candidate"),
            task_id: &self.config.task_id,
            base_commit: &self.config.base_commit,
            tree,
            summary,
            time: self.config.commit_time,
            co_authors: &self.config.co_authors,
        })
        .map_err(|e| format!("cannot create the proposal commit: {e}"))?;
        let stats = diff_files(
            &self.config.git,
            &self.config.mirror,
            &self.config.base_commit,
            &commit,
        )
        .map_err(|e| format!("cannot compute the proposal's diff: {e}"))?;
        let files: Vec<ChangedFile> = stats
            .into_iter()
            .map(|s| ChangedFile {
                path: s.path,
                status: s.status,
                additions: s.additions,
                deletions: s.deletions,
            })
            .collect();
        let diff_stat = DiffStat {
            files_changed: files.len() as u64,
            additions: files.iter().filter_map(|f| f.additions).sum(),
            deletions: files.iter().filter_map(|f| f.deletions).sum(),
        };
        let validations_json = serde_json::to_value(&validations)
            .map_err(|e| format!("cannot serialise validations: {e}"))?;
        let hash = proposal_hash(&self.config.base_commit, tree, &commit, &validations_json);
        Ok(Proposal {
            id: format!(
                "prp_{}",
                self.config
                    .task_id
                    .strip_prefix("tsk_")
                    .unwrap_or(self.config.task_id.as_str())
            ),
            repo: self.config.repo.clone(),
            base_commit: self.config.base_commit.clone(),
            commit,
            tree: tree.to_string(),
            reference: proposal_ref(&self.config.task_id),
            diff_stat,
            files,
            summary: summary.to_string(),
            hash,
            validations,
            // Filled in by the server's change report, which owns the sensitive-path rules.
            sensitive_files: Vec::new(),
        })
    }
}

/// The programs a check looks up on `PATH`: the command name of each simple command (after
/// assignments and `env`-like wrappers are not followed), without `/`, not a function the check
/// defines. A check the parser cannot follow names none.
fn check_programs(check: &str) -> Vec<String> {
    let Ok(commands) = crate::shell::simple_commands(check) else {
        return Vec::new();
    };
    let defined = |name: &str| {
        check.contains(&format!("{name}()"))
            || check.contains(&format!("{name} ()"))
            || check.contains(&format!("function {name}"))
    };
    let mut programs = Vec::new();
    for argv in commands {
        // A redirection written before the program (`>&2 echo`) is not the program.
        let redirection = |w: &str| {
            w.trim_start_matches(|c: char| c.is_ascii_digit())
                .starts_with(['>', '<'])
                || w.starts_with("&>")
        };
        let Some(program) = argv
            .iter()
            .find(|w| !crate::shell::is_assignment(w) && !redirection(w))
        else {
            continue;
        };
        let usable = !program.is_empty()
            && !program.contains(['/', '$', '*', '?', '[', '=', '~', '>', '<', '&'])
            && program != "function"
            && !defined(program);
        if usable && !programs.contains(program) {
            programs.push(program.clone());
        }
    }
    programs
}

/// The record among `checked` that a run of `command` on `tree` under `config_hash` and
/// `sandbox` would repeat, marked reused: all four match exactly and the command exited (a
/// timed out or killed run says nothing about the next).
fn reusable(
    checked: &[Validation],
    tree: &str,
    command: &str,
    config_hash: &str,
    sandbox: &str,
) -> Option<Validation> {
    checked
        .iter()
        .rev()
        .find(|v| {
            v.tree == tree
                && v.command == command
                && v.config_hash == config_hash
                && v.sandbox == sandbox
                && v.exit_code.is_some()
        })
        .map(|v| Validation {
            reused: true,
            ..v.clone()
        })
}

/// The last `max` bytes of `text` on a character boundary.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

fn render(validations: &[Validation]) -> String {
    let mut out = String::new();
    for v in validations {
        let status = match v.exit_code {
            Some(0) => "passed".to_string(),
            Some(code) => format!("FAILED (exit code {code})"),
            None => "FAILED (killed or timed out)".to_string(),
        };
        let reused = if v.reused {
            " (not run again: this tree was already checked)"
        } else {
            ""
        };
        out.push_str(&format!(
            "$ {}\n{status} in {} ms{reused}\n",
            v.command, v.duration_ms
        ));
        if !v.output_tail.trim().is_empty() && v.exit_code != Some(0) {
            out.push_str(&format!(
                "--- output (tail) ---\n{}\n",
                v.output_tail.trim_end()
            ));
        }
    }
    out
}

/// Each check's verdict and duration in one line: `bash check.sh passed in 0.4 s`.
fn check_verdicts(validations: &[Validation]) -> Vec<String> {
    validations
        .iter()
        .map(|v| {
            let verdict = match v.exit_code {
                Some(0) => "passed".to_string(),
                Some(code) => format!("failed (exit code {code})"),
                None => "failed (killed or timed out)".to_string(),
            };
            let reused = if v.reused { ", not run again" } else { "" };
            format!(
                "{} {verdict} in {:.1} s{reused}",
                v.command.replace(['\r', '\n'], " "),
                v.duration_ms as f64 / 1000.0
            )
        })
        .collect()
}

/// `run_checks`: builds the candidate tree and runs the checks on it.
pub struct RunChecks {
    session: Arc<ChangeSession>,
    /// The verdicts of the last call, one line per check ([`check_verdicts`]), for its note.
    last: Arc<Mutex<Vec<String>>>,
}

impl RunChecks {
    pub fn new(session: Arc<ChangeSession>) -> RunChecks {
        RunChecks {
            session,
            last: Arc::default(),
        }
    }
}

impl Tool for RunChecks {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "run_checks".into(),
            description: "Run the repository's check commands (tests, linters) in the sandbox \
                on exactly the files your change would commit. Use it to iterate before \
                submit_change."
                .into(),
            parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        }
    }

    fn describe(&self, _arguments: &Value) -> String {
        "run_checks".into()
    }

    /// Each check's verdict and duration, for the person following the task, and a program
    /// the sandbox lacks.
    fn note(&self, output: &ToolOutput) -> Option<String> {
        if !matches!(output, ToolOutput::Ok(_) | ToolOutput::Error(_)) {
            return None;
        }
        let mut lines =
            std::mem::take(&mut *self.last.lock().unwrap_or_else(PoisonError::into_inner));
        if let ToolOutput::Error(text) = output {
            lines.extend(crate::not_found_lines(text));
        }
        (!lines.is_empty()).then(|| lines.join("; "))
    }

    fn call<'a>(&'a self, _arguments: Value) -> BoxFuture<'a, ToolOutput> {
        let session = self.session.clone();
        let last = Arc::clone(&self.last);
        Box::pin(async move {
            let result = blocking::run(move || {
                if session.config.checks.is_empty() {
                    return Ok(ToolOutput::Ok(
                        "no check commands are configured for this repository".into(),
                    ));
                }
                let candidate = session.candidate()?;
                let validations = session.run_checks(&candidate.tree)?;
                *last.lock().unwrap_or_else(PoisonError::into_inner) = check_verdicts(&validations);
                let failed = validations.iter().filter(|v| !v.passed()).count();
                let offline = session.offline_reason(&validations);
                let mut text = format!(
                    "candidate tree {} ({} files changed, {} deleted)\n{}",
                    &candidate.tree[..12.min(candidate.tree.len())],
                    candidate.written.len(),
                    candidate.deleted.len(),
                    render(&validations)
                );
                for (path, reason) in &candidate.skipped {
                    text.push_str(&format!("not in the candidate: {path} ({reason})\n"));
                }
                match offline {
                    // Nothing changed yet: the base itself cannot be checked, and no
                    // submission can change that. The task stops before the agent spends more.
                    Some(reason) if candidate.tree == session.config.base_tree => {
                        Ok(ToolOutput::Stop(Failure {
                            code: FailureCode::BaselineFailing,
                            message: format!(
                                "the checks cannot run on the base commit {}: {reason}",
                                session.config.base_commit
                            ),
                        }))
                    }
                    Some(reason) => {
                        text.push_str(&format!("{reason}\n"));
                        Err(text)
                    }
                    None if failed > 0 => Err(text),
                    None => Ok(ToolOutput::Ok(text)),
                }
            })
            .await;
            match result {
                None => ToolOutput::Error("the checks crashed Warden's worker thread".into()),
                Some(Ok(output)) => output,
                Some(Err(text)) => ToolOutput::Error(text),
            }
        })
    }
}

/// `submit_change`: the final validation and, if it passes, the proposal.
pub struct SubmitChange {
    session: Arc<ChangeSession>,
}

impl SubmitChange {
    pub fn new(session: Arc<ChangeSession>) -> SubmitChange {
        SubmitChange { session }
    }
}

impl Tool for SubmitChange {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "submit_change".into(),
            description: "Submit your change. Warden builds the commit from the files you \
                wrote, runs the checks on exactly that tree, and proposes it if they pass; \
                failing checks come back to you (at most 3 submissions). `summary` becomes the \
                commit message: a short first line, then details."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "summary": {"type": "string", "minLength": 1, "maxLength": 20000}
                },
                "required": ["summary"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, _arguments: &Value) -> String {
        "submit_change".into()
    }

    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        let session = self.session.clone();
        let summary = arguments["summary"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        Box::pin(async move {
            let result = blocking::run(move || submit(&session, summary)).await;
            result.unwrap_or_else(|| {
                ToolOutput::Error("the submission crashed Warden's worker thread".into())
            })
        })
    }
}

fn submit(session: &ChangeSession, summary: String) -> ToolOutput {
    let candidate = match session.candidate() {
        Ok(candidate) => candidate,
        Err(text) => return ToolOutput::Error(text),
    };
    if candidate.tree == session.config.base_tree {
        return ToolOutput::Finish(Finish::Change {
            summary,
            proposal: None,
        });
    }
    let validations = match session.run_checks(&candidate.tree) {
        Ok(validations) => validations,
        Err(text) => return ToolOutput::Error(text),
    };
    let failed: Vec<&Validation> = validations.iter().filter(|v| !v.passed()).collect();
    if !failed.is_empty() {
        let offline = session.offline_reason(&validations);
        return ToolOutput::Rejected(
            failed
                .iter()
                .map(|v| {
                    format!(
                        "check `{}` failed ({}) on tree {}{}:\n{}",
                        v.command,
                        v.exit_code
                            .map_or("killed or timed out".to_string(), |c| format!(
                                "exit code {c}"
                            )),
                        &v.tree[..12.min(v.tree.len())],
                        if v.reused {
                            " (not run again: this tree was already checked)"
                        } else {
                            ""
                        },
                        v.output_tail.trim_end()
                    )
                })
                .chain(offline)
                .collect(),
        );
    }
    match session.propose(&candidate.tree, &summary, validations) {
        Ok(proposal) => ToolOutput::Finish(Finish::Change {
            summary,
            proposal: Some(Box::new(proposal)),
        }),
        Err(text) => ToolOutput::Error(text),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn each_checks_verdict_and_duration_reads_in_one_line() {
        let validations = [
            Validation {
                command: "bash check.sh".into(),
                exit_code: Some(0),
                tree: "t".into(),
                config_hash: "h".into(),
                sandbox: "linux".into(),
                duration_ms: 420,
                output_tail: String::new(),
                reused: false,
            },
            Validation {
                command: "cargo test".into(),
                exit_code: Some(101),
                tree: "t".into(),
                config_hash: "h".into(),
                sandbox: "linux".into(),
                duration_ms: 12_345,
                output_tail: "$ not a command\nfailed in 3 ms".into(),
                reused: true,
            },
        ];
        assert_eq!(
            check_verdicts(&validations),
            [
                "bash check.sh passed in 0.4 s",
                "cargo test failed (exit code 101) in 12.3 s, not run again",
            ]
        );
    }

    use super::*;

    fn record(tree: &str, command: &str, exit_code: Option<i32>) -> Validation {
        Validation {
            command: command.into(),
            exit_code,
            tree: tree.into(),
            config_hash: "sha256:c".into(),
            sandbox: "linux".into(),
            duration_ms: 7,
            output_tail: format!("{command} on {tree}"),
            reused: false,
        }
    }

    #[test]
    fn only_an_exact_match_of_an_exited_check_is_reused() {
        let checked = vec![
            record("t1", "cargo test", Some(0)),
            record("t1", "make lint", Some(2)),
            record("t2", "cargo test", None),
        ];
        let found = reusable(&checked, "t1", "cargo test", "sha256:c", "linux").unwrap();
        assert!(found.reused);
        assert_eq!(
            found,
            Validation {
                reused: true,
                ..checked[0].clone()
            }
        );
        // A failure that exited is a result of the tree too.
        let failed = reusable(&checked, "t1", "make lint", "sha256:c", "linux").unwrap();
        assert_eq!(failed.exit_code, Some(2));
        // Another tree, command, configuration or backend is no match.
        assert_eq!(
            reusable(&checked, "t3", "cargo test", "sha256:c", "linux"),
            None
        );
        assert_eq!(
            reusable(&checked, "t1", "cargo test --all", "sha256:c", "linux"),
            None
        );
        assert_eq!(
            reusable(&checked, "t1", "cargo test", "sha256:d", "linux"),
            None
        );
        assert_eq!(
            reusable(&checked, "t1", "cargo test", "sha256:c", "gvisor"),
            None
        );
        // A timed out or killed run is never reused.
        assert_eq!(
            reusable(&checked, "t2", "cargo test", "sha256:c", "linux"),
            None
        );
    }

    #[test]
    fn check_programs_are_the_path_lookups() {
        let check =
            |text: &str, expect: &[&str]| assert_eq!(check_programs(text), expect, "{text}");
        check("cargo test", &["cargo"]);
        check(
            "cd sub && RUST_LOG=1 cargo test --all | tee log",
            &["cd", "cargo", "tee"],
        );
        check("./scripts/test.sh && make", &["make"]);
        check("t() { faketool; }; t", &["faketool"]);
        check("'unterminated", &[]);
        // Redirections are not commands: `2>&1` runs nothing called `1`.
        check("cargo test 2>&1 | tail -n 5", &["cargo", "tail"]);
        check("make &>log; >&2 echo done", &["make", "echo"]);
        check("sleep 1 & wait", &["sleep", "wait"]);
    }
}
