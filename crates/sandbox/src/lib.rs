//! Warden's isolation layer: every agent command runs behind the [`Sandbox`] trait.
//!
//! A [`Sandbox`] is a backend ([`Backend::Linux`], [`Backend::Gvisor`] or the explicit
//! no-isolation [`Backend::Local`]). It opens a [`SandboxView`] of one or several read-only
//! snapshots ([`ViewSpec`]), optionally writable through a copy-on-write layer, and runs
//! [`CommandSpec`]s in it with limits, returning a [`CommandOutput`].
//!
//! **Fail closed.** [`select`] never falls back: if the requested backend or any layer of it
//! cannot be established it returns [`SandboxError::Unavailable`] naming the [`Layer`]. The only
//! way to run with less isolation is to ask for it: [`Backend::Local`], or a layer listed in
//! [`SandboxConfig::disabled_layers`] (only the cgroup layers may be disabled; rlimits remain as
//! the backstop).
//!
//! **Nothing of the host enters.** A command sees exactly the environment in
//! [`CommandSpec::env`]; [`harden_current_process`] makes the Warden process non-dumpable so
//! that the model key in its memory cannot be read through `/proc` or ptrace.
//!
//! [`probe`] reports, layer by layer, what works on this machine (for `warden doctor`), and
//! [`probe_tools`] whether each backend's commands can list the working root (`ls -la`, `stat`,
//! `find`, `du`): a backend may hold every layer and still fail there (old gVisor releases, see
//! [`MIN_RUNSC_RELEASE`]).
//!
//! # Decisions worth knowing
//!
//! - **Who the command is.** The Warden user is mapped to uid/gid 1000 (`sandbox`) in the
//!   sandbox's user namespace, nothing else is mapped. Snapshots, owned by the Warden user, are
//!   therefore readable, and overlayfs copy-up works (an unmapped owner would fail with
//!   `EOVERFLOW`). Commands keep no capability, except `CAP_DAC_OVERRIDE` in writable views, so
//!   the snapshot's read-only modes (files `0444`, directories `0555`) do not stop edits; it
//!   only covers inodes owned by the mapped user. When Warden runs as root, the sandbox user is
//!   host root seen from outside: every confinement layer still applies, but prefer a dedicated
//!   user.
//! - **Cgroups fail closed.** An unprivileged Warden without a delegated cgroup cannot limit
//!   memory and processes through cgroups; the `linux` backend is then unavailable (layer
//!   `cgroup_memory`), unless the operator lists the cgroup layers in
//!   [`SandboxConfig::disabled_layers`], in which case `RLIMIT_NPROC` and `RLIMIT_DATA` are the
//!   limits.
//! - **The process tree.** The command is pid 1 of its own pid namespace: when it exits or is
//!   killed (timeout), the kernel kills everything it started, including daemons that
//!   double-forked or ignore signals. If Warden dies, running sandboxes die with it.
//! - **Disk is a budget.** Writable space (the upper layer, `/tmp`, `/dev/shm`) is one tmpfs per
//!   view with `size=` and `nr_inodes=` from [`SandboxConfig::disk`]: a command that fills it
//!   gets `ENOSPC` as a shell would (output, not an error), and so does a host-side write
//!   through [`SandboxView::root`]. When Warden may mount, it mounts the tmpfs under the scratch
//!   directory; otherwise the view holder mounts it in its own mount namespace. The `local`
//!   backend has no quota.
//! - **No network, but one relay when asked.** Commands have loopback only. A view opened with
//!   [`ViewSpec::egress_proxy`] (a change task's `prepare` step, with an operator-run proxy)
//!   also finds, on the `linux` backend, a relay at [`SandboxView::egress_address`]: every
//!   connection to it goes to that one proxy, from Warden's process; the command cannot dial
//!   anything else. Backends that cannot do this say so ([`Sandbox::relays_egress`]) and refuse
//!   the view.
//! - **`root()` of writable (and multi-repository) views** is an ordinary path when Warden may
//!   mount (root). An unprivileged Warden cannot mount on the host, so it is
//!   `/proc/<holder pid>/root/.warden-host/<id>`: files open fine under it, but `realpath`
//!   cannot follow the `/proc/<pid>/root` link into another mount namespace, so canonicalizing
//!   it fails (`ENOENT`) rather than resolving anywhere else. Confine paths relative to it
//!   (e.g. `openat2` with `RESOLVE_IN_ROOT`) instead of canonicalizing.

#![warn(unreachable_pub)]
#[cfg(target_os = "linux")]
mod cancel;
#[cfg(target_os = "linux")]
mod egress;
mod error;
mod gvisor;
mod kinds;
pub mod kit;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod linux;
mod local;
mod output;
mod spec;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod sys;
mod tools;

use std::path::Path;
use std::sync::Arc;

pub use error::SandboxError;
pub use gvisor::{runsc_statx_defect, MIN_RUNSC_RELEASE};
pub use kinds::{Backend, Layer, Stream};
pub use spec::{
    baseline_env, remove_scratch, CommandOutput, CommandSpec, DiskQuota, KillSwitch, LayerReport,
    Mount, ResourceLimits, SandboxConfig, Stdin, ViewSpec, WORKING_ROOT,
};
pub use tools::{ToolsReport, TOOLS_PROBE};

/// An isolation backend. Opening a view is the expensive part (namespaces, mounts, rulesets);
/// running a command in an open view is cheap.
///
/// Synchronous by design: async callers use `spawn_blocking`. Nothing here names a Linux type,
/// so a remote backend (Kubernetes) can implement it.
pub trait Sandbox: Send + Sync {
    /// Which backend this is; results are labelled with it.
    fn backend(&self) -> Backend;
    /// Opens a task's view of its snapshots.
    fn open(&self, view: &ViewSpec) -> Result<Box<dyn SandboxView>, SandboxError>;

    /// Whether views may ask for an egress relay to a proxy ([`ViewSpec::egress_proxy`]); a
    /// backend that cannot relay refuses such a view instead of giving it wider network.
    fn relays_egress(&self) -> bool {
        false
    }

    /// Whether a view may show a host directory at another path ([`Mount::source`]); a
    /// backend whose commands see the host's own file system refuses such a mount.
    fn moves_mounts(&self) -> bool {
        false
    }
}

/// One task's view: the snapshots (read-only, or writable through a copy-on-write layer), a
/// private `/tmp`, and nothing else of the host.
pub trait SandboxView: Send + Sync {
    /// The host path of the working root the agent sees: the snapshot itself for a read-only
    /// single-repository view, otherwise a directory holding the merged (copy-on-write) tree or
    /// one folder per repository name. Writes through it land in the view like the sandbox's
    /// own. For an unprivileged Warden's writable or multi-repository `linux` view this is a
    /// `/proc/<pid>/root/...` path: valid for opening files, while canonicalizing it fails
    /// (see the crate documentation).
    fn root(&self) -> &Path;

    /// The host path of the copy-on-write layer's upper directory — what the view changed —
    /// for writable views that have one (`None`: compare the whole tree). Read it only; like
    /// [`SandboxView::root`] it may be a `/proc/<pid>/root/...` path.
    fn upper(&self) -> Option<&Path> {
        None
    }

    /// Where the view's commands reach the egress proxy, `host:port` as they must dial it
    /// (for `HTTP_PROXY`), when the view was opened with [`ViewSpec::egress_proxy`]: a relay on
    /// the sandbox's own loopback for isolating backends.
    fn egress_address(&self) -> Option<String> {
        None
    }

    /// Runs one command to completion (or to its timeout) and collects its output.
    fn run(&self, command: &CommandSpec) -> Result<CommandOutput, SandboxError> {
        self.run_streaming(command, &mut |_, _| {})
    }

    /// Like [`SandboxView::run`], and also hands each chunk of output to `on_output` as it
    /// arrives (only what is kept: the output limit applies to the stream too).
    fn run_streaming(
        &self,
        command: &CommandSpec,
        on_output: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<CommandOutput, SandboxError>;

    /// Kills every command running in the view now and refuses the ones started afterwards
    /// (their task was cancelled): both return as killed by `SIGKILL`, with a note on stderr.
    /// The view stays open until [`SandboxView::close`].
    fn cancel(&self);

    /// Stops everything still running in the view and deletes the scratch directory.
    fn close(self: Box<Self>) -> Result<(), SandboxError>;
}

/// Returns the requested backend, or [`SandboxError::Unavailable`] naming the first layer of it
/// that cannot be established here. Never falls back to another backend.
pub fn select(
    requested: Backend,
    config: &SandboxConfig,
) -> Result<Arc<dyn Sandbox>, SandboxError> {
    config.validate()?;
    match requested {
        Backend::Local => Ok(Arc::new(local::LocalSandbox::new())),
        #[cfg(target_os = "linux")]
        Backend::Linux => Ok(Arc::new(linux::LinuxSandbox::establish(config)?)),
        #[cfg(not(target_os = "linux"))]
        Backend::Linux => Err(SandboxError::Unavailable {
            backend: Backend::Linux,
            layer: Layer::Kernel,
            reason: "the linux backend needs a Linux kernel".into(),
        }),
        Backend::Gvisor => Ok(Arc::new(gvisor::GvisorSandbox::establish(config)?)),
        Backend::Kubernetes => Err(SandboxError::Unavailable {
            backend: Backend::Kubernetes,
            layer: Layer::Runtime,
            reason: "the kubernetes backend needs its [kubernetes] settings: it is opened \
                     through warden-kubernetes, not selected here"
                .into(),
        }),
    }
}

/// What works on this machine, layer by layer, for every backend (for `warden doctor`). Uses
/// the default [`SandboxConfig`]; see [`probe_with`].
pub fn probe() -> Vec<LayerReport> {
    probe_with(&SandboxConfig::default())
}

/// Like [`probe`], with a configuration (a disabled layer is reported as such).
pub fn probe_with(config: &SandboxConfig) -> Vec<LayerReport> {
    let mut reports = Vec::new();
    #[cfg(target_os = "linux")]
    reports.extend(linux::probe(config));
    #[cfg(not(target_os = "linux"))]
    reports.push(LayerReport {
        backend: Backend::Linux,
        layer: Layer::Kernel,
        available: false,
        detail: "the linux backend needs a Linux kernel".into(),
    });
    reports.extend(gvisor::probe(config));
    reports.push(LayerReport {
        backend: Backend::Local,
        layer: Layer::Process,
        available: true,
        detail: "no isolation: commands run as the Warden user on the host (development only, \
                 never chosen by fallback)"
            .into(),
    });
    reports
}

/// Whether each backend's commands can use the everyday file tools ([`TOOLS_PROBE`]: `ls -la`,
/// `stat`, `find`, `du`) on the working root: one command in a read-only view of a throwaway
/// snapshot per backend that [`select`] establishes with `config` (for `warden doctor`; the
/// conformance suite runs the same commands). A failing gVisor backend names the runsc release
/// it needs ([`MIN_RUNSC_RELEASE`]).
pub fn probe_tools(config: &SandboxConfig) -> Vec<ToolsReport> {
    tools::probe(config)
}

/// For commands that only print (`warden tasks | head`): a closed standard output ends the
/// process quietly, as it does for other Unix tools, instead of a failed write. Not for
/// processes that write to pipes of their own children (git, sandboxed commands), which must
/// see `EPIPE` as an error rather than die.
pub fn quiet_on_closed_output() {
    #[cfg(target_os = "linux")]
    {
        let _ = sys::default_sigpipe();
    }
}

/// Hardens the Warden process itself: not dumpable (so `/proc/<pid>/mem`, `environ` and ptrace
/// are closed to other processes of the same user, and no core file can carry the model key).
/// The CLI calls this at start-up, before reading any secret.
pub fn harden_current_process() -> Result<(), SandboxError> {
    #[cfg(target_os = "linux")]
    {
        sys::set_dumpable(false).map_err(|source| SandboxError::Io {
            context: "cannot make the warden process non-dumpable".into(),
            source,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}
