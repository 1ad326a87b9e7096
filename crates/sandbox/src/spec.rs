//! The data the [`crate::Sandbox`] trait speaks: backends, layers, view and command
//! specifications, limits, outputs and the sandbox configuration.

use crate::kinds::{Backend, Layer};
use crate::SandboxError;
use std::path::PathBuf;
use std::time::Duration;

/// Where the working root appears inside an isolating sandbox (the `linux` and `gvisor`
/// backends). The `local` backend runs in the host path ([`crate::SandboxView::root`]).
pub const WORKING_ROOT: &str = "/work";

/// One line of [`crate::probe`]: whether a layer of a backend works here, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerReport {
    /// The backend the layer belongs to.
    pub backend: Backend,
    /// The layer.
    pub layer: Layer,
    /// Whether it can be established on this machine, as this user.
    pub available: bool,
    /// What was found, or why it does not work and what to do about it.
    pub detail: String,
}

/// How the sandbox is configured (from `warden.toml`; never from a repository).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Layers the operator explicitly runs without. Only the cgroup layers may be listed (see
    /// [`Layer::may_be_disabled`]); rlimits then remain as the backstop (`RLIMIT_NPROC`,
    /// `RLIMIT_DATA`). Anything not listed is required: if it cannot be established, nothing
    /// runs.
    pub disabled_layers: Vec<Layer>,
    /// The `runsc` binary for the gVisor backend; searched in `/usr/bin`, `/usr/local/bin` and
    /// `/usr/sbin` when unset.
    pub runsc: Option<PathBuf>,
    /// The writable space of one view (see [`DiskQuota`]).
    pub disk: DiskQuota,
}

/// How much one view may write: its copy-on-write upper layer, `/tmp` and `/dev/shm`
/// together, in bytes and in inodes (files, directories, symlinks). The isolating backends keep
/// all three on one tmpfs mounted with `size=` and `nr_inodes=`, so a command that fills it gets
/// `ENOSPC` (and so do host-side writes into the view), and the host's disk is never touched.
/// The space is memory (swappable), not disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskQuota {
    /// Bytes of file data.
    pub bytes: u64,
    /// Inodes.
    pub inodes: u64,
}

impl Default for DiskQuota {
    /// 1 GiB and 100,000 inodes.
    fn default() -> Self {
        DiskQuota {
            bytes: 1 << 30,
            inodes: 100_000,
        }
    }
}

impl DiskQuota {
    /// tmpfs mount options for this quota (`extra_inodes` for the directories Warden makes
    /// itself in it).
    pub(crate) fn tmpfs_options(&self, mode: &str, extra_inodes: u64) -> String {
        format!(
            "mode={mode},size={},nr_inodes={}",
            self.bytes,
            self.inodes.saturating_add(extra_inodes)
        )
    }
}

impl SandboxConfig {
    pub(crate) fn validate(&self) -> Result<(), SandboxError> {
        if self.disk.bytes < 4096 || self.disk.inodes < 16 {
            return Err(SandboxError::InvalidConfig(format!(
                "the writable space of a view must be at least 4096 bytes and 16 inodes (got {} \
                 bytes, {} inodes)",
                self.disk.bytes, self.disk.inodes
            )));
        }
        match self
            .disabled_layers
            .iter()
            .find(|layer| !layer.may_be_disabled())
        {
            Some(layer) => Err(SandboxError::InvalidConfig(format!(
                "layer {layer} cannot be disabled; only cgroup_memory, cgroup_pids and \
                 cgroup_cpu can"
            ))),
            None => Ok(()),
        }
    }

    pub(crate) fn is_disabled(&self, layer: Layer) -> bool {
        self.disabled_layers.contains(&layer)
    }
}

/// What a view shows: the snapshots and whether the working root is writable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewSpec {
    /// `(name, read-only snapshot root)`. One entry: it *is* the working root. Several: the
    /// working root holds one folder per name.
    pub lower: Vec<(String, PathBuf)>,
    /// Change tasks: a copy-on-write (overlayfs) layer over the snapshots; writes land in its
    /// upper directory ([`crate::SandboxView::upper`]), within the [`DiskQuota`], and never in
    /// a snapshot.
    pub writable: bool,
    /// A host directory Warden owns for this view (upper and work directories, `/tmp`, the
    /// generated `/etc`). Created if missing, must be empty, deleted at close.
    pub scratch_dir: PathBuf,
    /// Host directories shown at the same path inside the view (toolchains, dependency
    /// caches). Nothing else of the host's file system is visible beyond the system
    /// directories.
    pub mounts: Vec<Mount>,
    /// The one way out of the view's commands, when set: an HTTP proxy the operator runs,
    /// `host:port`, reached by Warden (in the host's network) on their behalf. Inside, commands
    /// find a relay at [`crate::SandboxView::egress_address`]; every connection to it is
    /// relayed to this address and nowhere else (Warden relays bytes, it does not read HTTP).
    /// Backends that cannot relay refuse it ([`crate::Sandbox::relays_egress`]). `None`: no
    /// network at all, the default.
    pub egress_proxy: Option<String>,
    /// Writable single-repository views only: a read-only host directory layered *below* the
    /// snapshot (overlayfs' lowest `lowerdir`), so what it holds shows through wherever the
    /// snapshot has nothing, and a command's writes to it are copied up into the view's upper
    /// layer like any other write: the directory itself is never written. Warden's warm build
    /// outputs (a `target/` built from the base tree) reach check views this way.
    pub seed: Option<PathBuf>,
}

/// A host directory bound into a view at the same absolute path (or, with `source`, another
/// host directory shown at `path`): read-only (and `nosuid`, `nodev`) unless `writable`.
/// Symbolic links in the host directory's path are resolved on the host; the mount point is
/// `path` as written. Refused: `/`, anything under `/proc`, `/dev`, `/sys`, `/etc` or the
/// working root, a directory that overlaps a snapshot or the scratch directory, and one mount
/// inside another. A mount inside a system directory that views already show (`/usr`, …) is
/// visible anyway and is not mounted again (and one with a `source` there is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// An absolute path: where the directory appears in the view, and the host directory
    /// itself unless `source` names another.
    pub path: PathBuf,
    /// Writable (a dependency cache being filled); read-only otherwise.
    pub writable: bool,
    /// The host directory shown at `path`, when it is not `path` itself (a task's own
    /// dependency cache shown where the shared one would be, so tools that record absolute
    /// paths, like cargo's fingerprints, see the same paths). Only backends whose views have
    /// a file system of their own can ([`crate::Sandbox::moves_mounts`]); others refuse it.
    pub source: Option<PathBuf>,
}

impl Mount {
    /// A read-only mount of `path`.
    pub fn read_only(path: impl Into<PathBuf>) -> Mount {
        Mount {
            path: path.into(),
            writable: false,
            source: None,
        }
    }

    /// The host directory this mount shows: `source`, else `path`.
    pub fn host_dir(&self) -> &std::path::Path {
        self.source.as_deref().unwrap_or(&self.path)
    }
}

/// Resource limits of one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Memory (cgroup `memory.max`; `RLIMIT_DATA` when the memory cgroup is disabled).
    pub memory_bytes: u64,
    /// Processes and threads (cgroup `pids.max`; `RLIMIT_NPROC` as the backstop).
    pub pids: u32,
    /// CPU bandwidth in thousandths of a CPU (1000 = one core); `None` leaves it unlimited.
    pub cpu_millis: Option<u32>,
    /// Largest file a command may write (`RLIMIT_FSIZE`).
    pub file_size_bytes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            memory_bytes: 2 << 30,
            pids: 512,
            cpu_millis: None,
            file_size_bytes: 1 << 30,
        }
    }
}

/// One command to run in a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// Program and arguments; a program without `/` is searched in the `PATH` of `env` (or a
    /// default system path) inside the sandbox.
    pub argv: Vec<String>,
    /// The complete environment, allow-listed by the caller; the sandbox adds nothing from the
    /// host.
    pub env: Vec<(String, String)>,
    /// Working directory relative to the working root (`""` or `"."` for the root itself).
    pub cwd: String,
    /// Wall-clock limit; the whole process tree is killed when it passes.
    pub timeout: Duration,
    /// Bytes of stdout and stderr kept (together); the rest is dropped and a marker line
    /// `[output truncated at N bytes]` is appended.
    pub output_limit: usize,
    /// Memory, processes, CPU and file size.
    pub limits: ResourceLimits,
    /// The command's standard input; `None`: `/dev/null`. A long-lived server speaking over
    /// its stdin and stdout (an MCP server) gets the read end of a pipe its caller writes, and
    /// its stdout through `run_streaming`'s callback as it comes.
    pub stdin: Option<Stdin>,
    /// Stops this one command (its whole process tree) when its caller asks; `None`: only its
    /// timeout and the view's cancellation or closing stop it.
    pub kill: Option<KillSwitch>,
}

/// A descriptor a command reads as its standard input (shared: a [`CommandSpec`] is `Clone`).
/// Only this descriptor enters the sandbox; the caller keeps the other end.
#[derive(Debug, Clone)]
pub struct Stdin(pub std::sync::Arc<std::os::fd::OwnedFd>);

impl PartialEq for Stdin {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Stdin {}

/// Stops one running command on demand: [`KillSwitch::kill`] kills the command's process tree
/// now if it runs, or as soon as it starts; the command then returns as killed by `SIGKILL`
/// with a note on stderr. Clones share the switch.
#[derive(Clone, Default)]
pub struct KillSwitch(std::sync::Arc<std::sync::Mutex<KillState>>);

#[derive(Default)]
struct KillState {
    fired: bool,
    target: Option<Box<dyn Fn() + Send>>,
}

impl KillSwitch {
    pub fn new() -> KillSwitch {
        KillSwitch::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KillState> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kills the command (now, or when it starts).
    pub fn kill(&self) {
        let mut state = self.lock();
        state.fired = true;
        if let Some(target) = &state.target {
            target();
        }
    }

    /// Whether [`KillSwitch::kill`] was called.
    pub fn fired(&self) -> bool {
        self.lock().fired
    }

    /// A backend registers how to kill the command it started (killed at once when the switch
    /// already fired); [`KillSwitch::disarm`] it before the process is reaped.
    #[allow(dead_code)]
    pub(crate) fn arm(&self, target: Box<dyn Fn() + Send>) {
        let mut state = self.lock();
        if state.fired {
            target();
        }
        state.target = Some(target);
    }

    #[allow(dead_code)]
    pub(crate) fn disarm(&self) {
        self.lock().target = None;
    }
}

impl std::fmt::Debug for KillSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KillSwitch")
            .field("fired", &self.fired())
            .finish()
    }
}

impl PartialEq for KillSwitch {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for KillSwitch {}

/// What a command stopped through its [`KillSwitch`] returns: killed by `SIGKILL`, with a note.
#[allow(dead_code)]
pub(crate) fn killed_output(
    stdout: Vec<u8>,
    mut stderr: Vec<u8>,
    truncated: bool,
    duration: Duration,
) -> CommandOutput {
    stderr.extend_from_slice(b"warden-sandbox: killed: stopped by its caller\n");
    CommandOutput {
        exit_code: None,
        signal: Some(9),
        stdout,
        stderr,
        truncated,
        timed_out: false,
        duration,
        egress_connections: 0,
    }
}

impl CommandSpec {
    /// `bash -c <script>` in the working root with [`baseline_env`] and default limits: the
    /// shape of the agent's `shell` tool.
    pub fn bash(script: &str, timeout: Duration) -> CommandSpec {
        CommandSpec {
            argv: vec!["bash".into(), "-c".into(), script.into()],
            env: baseline_env(),
            cwd: String::new(),
            timeout,
            output_limit: 64 * 1024,
            limits: ResourceLimits::default(),
            stdin: None,
            kill: None,
        }
    }
}

/// The environment a shell command needs and nothing taken from the host: a system `PATH`,
/// `HOME` and `TMPDIR` in the sandbox's private `/tmp`, a UTF-8 locale.
pub fn baseline_env() -> Vec<(String, String)> {
    [
        (
            "PATH",
            "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        ),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("USER", "sandbox"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect()
}

/// What a command did. A failing command is data, not an error.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandOutput {
    /// The exit status, when the command exited normally.
    pub exit_code: Option<i32>,
    /// The signal that killed the command (`9` after a timeout or an out-of-memory kill).
    pub signal: Option<i32>,
    /// Standard output as kept (see [`CommandSpec::output_limit`]).
    pub stdout: Vec<u8>,
    /// Standard error as kept.
    pub stderr: Vec<u8>,
    /// Whether output was dropped (the kept streams end with the marker line).
    pub truncated: bool,
    /// Whether the wall-clock limit killed the command.
    pub timed_out: bool,
    /// Wall-clock time from start to the end of the last process.
    pub duration: Duration,
    /// Connections relayed to the view's egress proxy ([`ViewSpec::egress_proxy`]) while the
    /// command ran; `0` without one.
    pub egress_connections: u32,
}

impl CommandOutput {
    /// True when the command exited with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// A [`ViewSpec`] after validation: canonical snapshot paths.
#[derive(Debug, Clone)]
pub enum ValidatedView {
    /// One snapshot: it is the working root.
    Single(PathBuf),
    /// Several: `(folder name, snapshot)`, sorted by name.
    Multi(Vec<(String, PathBuf)>),
}

/// Characters that cannot appear in a path handed to overlayfs (option separators) or to the
/// kernel (NUL).
fn unmountable(path: &std::path::Path) -> bool {
    path.as_os_str()
        .as_encoded_bytes()
        .iter()
        .any(|byte| matches!(byte, b',' | b':' | b'\\' | 0))
}

pub(crate) fn validate_view(view: &ViewSpec) -> Result<ValidatedView, SandboxError> {
    let invalid = |message: String| Err(SandboxError::InvalidRequest(message));
    if view.lower.is_empty() {
        return invalid("a view needs at least one snapshot".into());
    }
    if !view.scratch_dir.is_absolute() || unmountable(&view.scratch_dir) {
        return invalid(format!(
            "scratch directory {} must be absolute and free of ',', ':', '\\'",
            view.scratch_dir.display()
        ));
    }
    let mut repos = Vec::with_capacity(view.lower.len());
    for (name, snapshot) in &view.lower {
        if view.lower.len() > 1
            && (name.is_empty()
                || name == "."
                || name == ".."
                || name.contains(['/', '\0', ',', ':', '\\']))
        {
            return invalid(format!(
                "repository name {name:?} cannot be a folder of the working root"
            ));
        }
        if !snapshot.is_absolute() {
            return invalid(format!(
                "snapshot {} is not an absolute path",
                snapshot.display()
            ));
        }
        let canonical = snapshot.canonicalize().map_err(|error| {
            SandboxError::InvalidRequest(format!("snapshot {}: {error}", snapshot.display()))
        })?;
        if !canonical.is_dir() {
            return invalid(format!(
                "snapshot {} is not a directory",
                snapshot.display()
            ));
        }
        if unmountable(&canonical) {
            return invalid(format!(
                "snapshot path {} contains ',', ':' or '\\'",
                canonical.display()
            ));
        }
        repos.push((name.clone(), canonical));
    }
    validate_mounts(view, &repos)?;
    if let Some(proxy) = &view.egress_proxy {
        validate_egress_proxy(proxy)?;
    }
    if repos.len() == 1 {
        let (_, snapshot) = repos.remove(0);
        return Ok(ValidatedView::Single(snapshot));
    }
    repos.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = repos.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return invalid(format!("repository name {:?} is given twice", pair[0].0));
    }
    Ok(ValidatedView::Multi(repos))
}

/// Checks [`ViewSpec::seed`] and returns its canonical path: only for a writable view of one
/// snapshot, an absolute path of a directory free of overlayfs' separators.
pub(crate) fn validate_seed(view: &ViewSpec) -> Result<Option<PathBuf>, SandboxError> {
    let Some(seed) = &view.seed else {
        return Ok(None);
    };
    let invalid = |message: String| Err(SandboxError::InvalidRequest(message));
    if !view.writable || view.lower.len() != 1 {
        return invalid("a seed layer is only for a writable view of one snapshot".into());
    }
    if !seed.is_absolute() {
        return invalid(format!("seed {} is not an absolute path", seed.display()));
    }
    let canonical = seed.canonicalize().map_err(|error| {
        SandboxError::InvalidRequest(format!("seed {}: {error}", seed.display()))
    })?;
    if !canonical.is_dir() || unmountable(&canonical) {
        return invalid(format!(
            "seed {} must be a directory whose path has no ',', ':' or '\\'",
            canonical.display()
        ));
    }
    Ok(Some(canonical))
}

/// Checks an egress proxy address: `host:port` (an IPv6 literal in brackets), port 1–65535.
pub(crate) fn validate_egress_proxy(proxy: &str) -> Result<(), SandboxError> {
    let valid = proxy.rsplit_once(':').is_some_and(|(host, port)| {
        let host_ok = match host.strip_prefix('[') {
            Some(rest) => rest
                .strip_suffix(']')
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
            None => {
                !host.is_empty()
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            }
        };
        host_ok && port.parse::<u16>().is_ok_and(|port| port != 0)
    });
    if valid {
        Ok(())
    } else {
        Err(SandboxError::InvalidRequest(format!(
            "egress proxy {proxy:?} must be host:port"
        )))
    }
}

/// A [`Mount`] after validation.
#[derive(Debug, Clone)]
pub(crate) struct ValidatedMount {
    /// The canonical host directory.
    pub(crate) source: PathBuf,
    /// Where it appears in the view: the path as given, absolute and normal.
    pub(crate) target: PathBuf,
    pub(crate) writable: bool,
    /// The host directory is not the target itself ([`Mount::source`]).
    pub(crate) moved: bool,
}

impl ValidatedMount {
    /// The target relative to `/`.
    pub(crate) fn relative(&self) -> &std::path::Path {
        self.target.strip_prefix("/").unwrap_or(&self.target)
    }

    /// The first component of the target (`home` of `/home/u/.cargo`).
    pub(crate) fn top(&self) -> String {
        self.relative()
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Top-level directories of a view that Warden builds itself: nothing may be mounted there.
const RESERVED_TOPS: [&str; 6] = ["proc", "dev", "sys", "etc", "work", ".warden-host"];

/// Checks a view's mounts (see [`Mount`]) against its snapshots (`repos`, canonical) and
/// scratch directory; sorted by target, parents first.
fn validate_mounts(
    view: &ViewSpec,
    repos: &[(String, PathBuf)],
) -> Result<Vec<ValidatedMount>, SandboxError> {
    use std::path::Component;
    let invalid = |message: String| Err(SandboxError::InvalidRequest(message));
    let overlaps = |a: &std::path::Path, b: &std::path::Path| a.starts_with(b) || b.starts_with(a);
    let scratch = view
        .scratch_dir
        .parent()
        .and_then(|parent| parent.canonicalize().ok())
        .zip(view.scratch_dir.file_name())
        .map(|(parent, name)| parent.join(name))
        .unwrap_or_else(|| view.scratch_dir.clone());
    let mut mounts: Vec<ValidatedMount> = Vec::with_capacity(view.mounts.len());
    for mount in &view.mounts {
        let path = &mount.path;
        let shown = path.display();
        let normal = path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !normal || path.as_os_str().as_encoded_bytes().contains(&0) {
            return invalid(format!(
                "mount {shown} must be an absolute path without '.' or '..'"
            ));
        }
        if path.parent().is_none() {
            return invalid("mount / would show the whole host: name directories".into());
        }
        let validated = ValidatedMount {
            source: PathBuf::new(),
            target: path.components().collect(),
            writable: mount.writable,
            moved: mount.source.is_some(),
        };
        let top = validated.top();
        if RESERVED_TOPS.contains(&top.as_str())
            || WORKING_ROOT == format!("/{top}")
            || validated.target == std::path::Path::new("/tmp")
        {
            return invalid(format!(
                "mount {shown} is under /{top}, which the sandbox builds itself"
            ));
        }
        if let Some(source) = &mount.source {
            if !source.is_absolute() {
                return invalid(format!(
                    "mount {shown}: its source {} is not an absolute path",
                    source.display()
                ));
            }
        }
        let source = mount.host_dir().canonicalize().map_err(|error| {
            SandboxError::InvalidRequest(format!(
                "mount {shown}: {}: {error}",
                mount.host_dir().display()
            ))
        })?;
        if !source.is_dir() {
            return invalid(format!("mount {shown} is not a directory"));
        }
        if source.parent().is_none() {
            return invalid(format!("mount {shown} resolves to /"));
        }
        for (name, snapshot) in repos {
            if overlaps(&source, snapshot) || overlaps(&validated.target, snapshot) {
                return invalid(format!(
                    "mount {shown} overlaps the snapshot of {name} ({})",
                    snapshot.display()
                ));
            }
        }
        if overlaps(&source, &scratch) || overlaps(&validated.target, &scratch) {
            return invalid(format!(
                "mount {shown} overlaps the view's scratch directory {}",
                scratch.display()
            ));
        }
        mounts.push(ValidatedMount {
            source,
            ..validated
        });
    }
    mounts.sort_by(|a, b| a.target.cmp(&b.target));
    for pair in mounts.windows(2) {
        if pair[1].target.starts_with(&pair[0].target) {
            return invalid(format!(
                "mount {} is inside mount {}: list only one of them",
                pair[1].target.display(),
                pair[0].target.display()
            ));
        }
    }
    Ok(mounts)
}

/// The validated mounts of a view whose snapshots were validated already.
pub(crate) fn view_mounts(
    view: &ViewSpec,
    validated: &ValidatedView,
) -> Result<Vec<ValidatedMount>, SandboxError> {
    match validated {
        ValidatedView::Single(snapshot) => {
            validate_mounts(view, &[(String::new(), snapshot.clone())])
        }
        ValidatedView::Multi(repos) => validate_mounts(view, repos),
    }
}

/// Checks a command and returns its working directory relative to the working root,
/// normalized (`""` for the root itself).
pub(crate) fn validate_command(command: &CommandSpec) -> Result<String, SandboxError> {
    let invalid = |message: String| Err(SandboxError::InvalidRequest(message));
    match command.argv.first() {
        None => return invalid("argv is empty".into()),
        Some(program) if program.is_empty() => return invalid("the program name is empty".into()),
        Some(_) => {}
    }
    if let Some(arg) = command.argv.iter().find(|arg| arg.contains('\0')) {
        return invalid(format!("argument {arg:?} contains a NUL byte"));
    }
    for (name, value) in &command.env {
        if name.is_empty() || name.contains(['=', '\0']) {
            return invalid(format!("environment name {name:?} is not valid"));
        }
        if value.contains('\0') {
            return invalid(format!("environment variable {name} contains a NUL byte"));
        }
    }
    if command.cwd.starts_with('/') || command.cwd.contains('\0') {
        return invalid(format!(
            "cwd {:?} must be relative to the working root",
            command.cwd
        ));
    }
    let mut parts = Vec::new();
    for part in command.cwd.split('/') {
        match part {
            "" | "." => {}
            ".." => return invalid(format!("cwd {:?} leaves the working root", command.cwd)),
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// Creates the scratch directory (private to the Warden user) or checks that it is empty.
pub(crate) fn prepare_scratch(dir: &std::path::Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut entries = std::fs::read_dir(dir).map_err(|e| {
                SandboxError::io(
                    format!("cannot read scratch directory {}", dir.display()),
                    e,
                )
            })?;
            if entries.next().is_some() {
                return Err(SandboxError::InvalidRequest(format!(
                    "scratch directory {} is not empty",
                    dir.display()
                )));
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
                SandboxError::io(
                    format!("cannot restrict scratch directory {}", dir.display()),
                    e,
                )
            })
        }
        Err(error) => Err(SandboxError::io(
            format!("cannot create scratch directory {}", dir.display()),
            error,
        )),
    }
}

/// Deletes a scratch directory, including directories the sandbox left without write or
/// search permission (copied-up snapshot directories are `0555`, overlayfs leaves a `000`
/// work directory, materialized trees are read-only). Never follows symbolic links; a missing
/// directory is not an error. The one scratch remover of the workspace: the server, the CLI
/// and the tools use it too.
pub fn remove_scratch(dir: &std::path::Path) -> Result<(), SandboxError> {
    detach_mounts_under(dir);
    fn remove(path: &std::path::Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        };
        if !meta.is_dir() {
            return std::fs::remove_file(path);
        }
        if meta.permissions().mode() & 0o700 != 0o700 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
        }
        for entry in std::fs::read_dir(path)? {
            remove(&entry?.path())?;
        }
        std::fs::remove_dir(path)
    }
    remove(dir).map_err(|e| {
        SandboxError::io(
            format!("cannot remove scratch directory {}", dir.display()),
            e,
        )
    })
}

/// Detaches every mount at or below `dir` in this process's mount namespace, deepest first:
/// views of a Warden that was killed (root mounts them in its own namespace) would otherwise
/// outlive it, and removing their directories would reach into them. Best effort: without the
/// right to unmount (an unprivileged Warden, whose views never mount here) nothing happens.
fn detach_mounts_under(dir: &std::path::Path) {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<std::path::PathBuf> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| std::path::PathBuf::from(unescape_mount_point(field)))
        .filter(|point| point.starts_with(dir))
        .collect();
    // Deepest first; a path mounted over twice is detached as often as it is listed.
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        #[cfg(target_os = "linux")]
        crate::sys::detach_mount(&point);
    }
}

/// A mount point as `/proc/self/mountinfo` writes it: space, tab, newline and backslash are
/// octal escapes (`\040`).
fn unescape_mount_point(field: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|b| (b'0'..=b'7').contains(b)))
            .and_then(|digits| {
                let value = digits
                    .iter()
                    .fold(0u16, |value, digit| value * 8 + u16::from(digit - b'0'));
                u8::try_from(value).ok()
            });
        if let Some(value) = escaped {
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    std::ffi::OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped_as_mountinfo_writes_them() {
        assert_eq!(
            unescape_mount_point("/tmp/a\\040b/c\\134d"),
            std::ffi::OsString::from("/tmp/a b/c\\d")
        );
        assert_eq!(
            unescape_mount_point("/plain"),
            std::ffi::OsString::from("/plain")
        );
        assert_eq!(
            unescape_mount_point("/end\\04"),
            std::ffi::OsString::from("/end\\04")
        );
    }

    #[test]
    fn names_round_trip() {
        for backend in [
            Backend::Linux,
            Backend::Gvisor,
            Backend::Local,
            Backend::Kubernetes,
        ] {
            assert_eq!(Backend::from_name(backend.as_str()), Some(backend));
        }
        for layer in Layer::ALL {
            assert_eq!(Layer::from_name(layer.as_str()), Some(layer));
        }
    }

    #[test]
    fn scratch_is_removed_with_read_only_and_closed_directories_but_not_through_links() {
        use std::os::unix::fs::PermissionsExt;
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), "kept").unwrap();
        let base = tempfile::tempdir().unwrap();
        let scratch = base.path().join("scratch");
        let tree = scratch.join("trees/abc/src");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("lib.rs"), "fn main() {}").unwrap();
        std::fs::set_permissions(tree.join("lib.rs"), std::fs::Permissions::from_mode(0o444))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), tree.join("link")).unwrap();
        for dir in [tree.as_path(), tree.parent().unwrap()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        let work = scratch.join("work");
        std::fs::create_dir_all(work.join("inner")).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o000)).unwrap();

        remove_scratch(&scratch).unwrap();
        assert!(!scratch.exists());
        assert!(outside.path().join("kept").exists());
        // Already gone is fine.
        remove_scratch(&scratch).unwrap();
    }

    fn cwd(cwd: &str) -> Result<String, String> {
        let mut command = CommandSpec::bash("true", Duration::from_secs(1));
        command.cwd = cwd.into();
        validate_command(&command).map_err(|e| e.to_string())
    }

    #[test]
    fn cwd_stays_inside_the_working_root() {
        assert_eq!(cwd(""), Ok(String::new()));
        assert_eq!(cwd("."), Ok(String::new()));
        assert_eq!(cwd("./src//lib/"), Ok("src/lib".into()));
        assert!(cwd("..").is_err());
        assert!(cwd("src/../..").is_err());
        assert!(cwd("/etc").is_err());
    }

    #[test]
    fn environment_names_are_checked() {
        let mut command = CommandSpec::bash("true", Duration::from_secs(1));
        command.env.push(("A=B".into(), "x".into()));
        assert!(validate_command(&command).is_err());
        command.env.pop();
        command.argv.clear();
        assert!(validate_command(&command).is_err());
    }

    #[test]
    fn only_cgroup_layers_can_be_disabled() {
        let ok = SandboxConfig {
            disabled_layers: vec![Layer::CgroupMemory, Layer::CgroupPids, Layer::CgroupCpu],
            ..SandboxConfig::default()
        };
        assert!(ok.validate().is_ok());
        for layer in [Layer::Landlock, Layer::Seccomp, Layer::UserNamespace] {
            let bad = SandboxConfig {
                disabled_layers: vec![layer],
                ..SandboxConfig::default()
            };
            assert!(bad.validate().is_err(), "{layer}");
        }
    }
}
