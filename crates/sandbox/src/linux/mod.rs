//! The `linux` backend, set up natively with system calls (no helper binary, no bubblewrap).
//!
//! **Per view** (`open`): a *view holder* process is cloned into new user, mount and pid
//! namespaces. The Warden user (uid/gid of this process) is mapped to uid/gid 1000 inside — the
//! owner of the snapshots, so they are readable and overlayfs copy-up works. The holder builds
//! the sandbox root once: a tmpfs with read-only binds of `/usr` (and `/bin`, `/lib`, … or
//! their usrmerge symlinks), a generated `/etc` (plus `ssl/certs`, `alternatives`, …), a
//! minimal `/dev`, the view's private `/tmp` and `/dev/shm` (in the scratch directory), and the
//! working root at `/work`: the snapshot bound read-only, or an overlayfs (snapshot below, the
//! scratch `upper/` above) for writable views. It pivots into that root, `exec`s `cat` on a
//! pipe only Warden holds, and waits there until the view is closed or Warden exits.
//!
//! **Per command** (`run`): a relay process joins the command's cgroups and the holder's user
//! and mount namespaces, unshares fresh mount, pid, net, ipc, uts and cgroup namespaces and
//! forks the sandboxed process, which is pid 1 of its pid namespace: it mounts its `/proc`,
//! brings up `lo` (the only interface), sets rlimits, drops capabilities, sets
//! `no_new_privs`, applies the view's Landlock ruleset and, last, the seccomp filter, then
//! `execve`s. The whole process tree dies with it (pid-namespace semantics); the wall-clock
//! timeout kills it.
//!
//! **Egress** (a view opened with [`crate::ViewSpec::egress_proxy`]): the sandboxed process,
//! once `lo` is up, opens a listening socket on `127.0.0.1:3128` of its own network namespace
//! and passes it to Warden over a unix socket pair (`SCM_RIGHTS`), keeping no copy; Warden
//! accepts there and relays every connection to the proxy (`crate::egress`). Such a view's
//! commands get a seccomp filter that also allows `AF_INET` stream sockets and, where Landlock
//! has network rules (ABI ≥ 4), a ruleset allowing TCP `connect` to that port only (`bind`
//! stays denied). Joining the namespace from Warden (`setns`) is not an option: it needs
//! `CAP_SYS_ADMIN` in Warden's own user namespace.
//!
//! **Where the merged tree is visible on the host.** When Warden may mount in its own mount
//! namespace (it runs as root), the copy-on-write layer is mounted there, under the scratch
//! directory, and [`crate::SandboxView::root`] is an ordinary path. An unprivileged Warden
//! cannot mount on the host: then the overlay lives only in the view's namespace and `root()` is
//! `/proc/<holder pid>/root/.warden-host/<id>` — fine for opening files; canonicalizing it
//! fails, because `realpath` resolves the `/proc/<pid>/root` magic link to `/` and
//! `/.warden-host/<id>` exists nowhere on the host.

mod cgroup;
mod child;
mod landlock;
mod plan;
mod seccomp;
mod view;

use view::LinuxView;

use crate::spec::{validate_view, ValidatedView};
use crate::{
    Backend, CommandSpec, Layer, LayerReport, Sandbox, SandboxConfig, SandboxError, SandboxView,
    ViewSpec,
};
pub(crate) use plan::{write_etc, SystemEntry, SystemLayout};
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The established `linux` backend.
pub(crate) struct LinuxSandbox {
    cgroups: Vec<cgroup::Hierarchy>,
    memory_cgroup: bool,
    landlock_abi: u32,
    filter: Vec<libc::sock_filter>,
    /// The filter of commands in a view with an egress relay (adds `AF_INET` streams).
    egress_filter: Vec<libc::sock_filter>,
    layout: SystemLayout,
    uid: u32,
    gid: u32,
    last_cap: libc::c_int,
    disk: crate::DiskQuota,
}

fn unavailable(layer: Layer, reason: impl Into<String>) -> SandboxError {
    SandboxError::Unavailable {
        backend: Backend::Linux,
        layer,
        reason: reason.into(),
    }
}

fn describe_errno(error: i32) -> String {
    io::Error::from_raw_os_error(error).to_string()
}

impl LinuxSandbox {
    /// Checks every layer (including a trial command in a throwaway view) and returns the
    /// backend, or the first layer that cannot be established.
    pub(crate) fn establish(config: &SandboxConfig) -> Result<LinuxSandbox, SandboxError> {
        let sandbox = LinuxSandbox::prepare(config)?;
        sandbox.trial()?;
        Ok(sandbox)
    }

    /// Everything but the trial.
    fn prepare(config: &SandboxConfig) -> Result<LinuxSandbox, SandboxError> {
        if !seccomp::SUPPORTED {
            return Err(unavailable(
                Layer::Seccomp,
                "no seccomp filter for this architecture (x86_64 and aarch64 only)",
            ));
        }
        let landlock_abi = landlock::abi().map_err(|error| {
            unavailable(
                Layer::Landlock,
                format!(
                    "{error}; the kernel needs CONFIG_SECURITY_LANDLOCK and `landlock` in its lsm= list"
                ),
            )
        })?;
        let mut cgroups = Vec::new();
        for controller in cgroup::Controller::ALL {
            if config.is_disabled(controller.layer()) {
                continue;
            }
            let hierarchy = cgroup::discover(controller)
                .map_err(|reason| unavailable(controller.layer(), reason))?;
            cgroup::prepare(&hierarchy).map_err(|error| {
                unavailable(
                    controller.layer(),
                    format!(
                        "{error}; delegate a cgroup to the warden user or disable the layer \
                         explicitly (rlimits remain as a backstop)"
                    ),
                )
            })?;
            cgroups.push(hierarchy);
        }
        let layout =
            SystemLayout::detect().map_err(|reason| unavailable(Layer::Filesystem, reason))?;
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(63);
        Ok(LinuxSandbox {
            memory_cgroup: cgroups
                .iter()
                .any(|h| h.controller == cgroup::Controller::Memory),
            cgroups,
            landlock_abi,
            filter: seccomp::program(false),
            egress_filter: seccomp::program(true),
            layout,
            // SAFETY: getuid/getgid cannot fail.
            uid: unsafe { libc::getuid() },
            // SAFETY: as above.
            gid: unsafe { libc::getgid() },
            last_cap,
            disk: config.disk,
        })
    }

    /// Opens a writable view over a one-file snapshot and runs `true` in it.
    fn trial(&self) -> Result<(), SandboxError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir().join(format!(
            "warden-sandbox-trial-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let snapshot = prepare_trial(&base)?;
        let result = (|| {
            let view = self.open(&ViewSpec {
                lower: vec![("trial".into(), snapshot.clone())],
                writable: true,
                scratch_dir: base.join("scratch"),
                mounts: Vec::new(),
                egress_proxy: None,
                seed: None,
            })?;
            let mut command = CommandSpec::bash("", Duration::from_secs(30));
            command.argv = vec!["true".into()];
            let output = view.run(&command);
            let closed = view.close();
            let output = output?;
            closed?;
            if output.success() {
                Ok(())
            } else {
                Err(unavailable(
                    Layer::Process,
                    format!(
                        "a trial `true` did not succeed (exit {:?}, signal {:?}): {}",
                        output.exit_code,
                        output.signal,
                        String::from_utf8_lossy(&output.stderr).trim()
                    ),
                ))
            }
        })();
        let _ = crate::spec::remove_scratch(&base);
        result
    }
}

/// The trial's directory at `base`, with a one-file snapshot and no scratch directory yet. A
/// directory by this name is a dead process's (its pid reused by this one) that was killed
/// during its own trial: stale, and removed first, or its scratch would be in the way.
fn prepare_trial(base: &std::path::Path) -> Result<std::path::PathBuf, SandboxError> {
    let _ = crate::spec::remove_scratch(base);
    let snapshot = base.join("snapshot");
    std::fs::create_dir_all(&snapshot)
        .and_then(|()| std::fs::write(snapshot.join("file"), b"trial\n"))
        .map_err(|e| SandboxError::io(format!("cannot create {}", snapshot.display()), e))?;
    Ok(snapshot)
}

impl Sandbox for LinuxSandbox {
    fn backend(&self) -> Backend {
        Backend::Linux
    }

    fn relays_egress(&self) -> bool {
        true
    }

    fn moves_mounts(&self) -> bool {
        true
    }

    fn open(&self, view: &ViewSpec) -> Result<Box<dyn SandboxView>, SandboxError> {
        let validated = validate_view(view)?;
        crate::spec::prepare_scratch(&view.scratch_dir)?;
        match LinuxView::open(self, &validated, view) {
            Ok(opened) => Ok(Box::new(opened)),
            Err(error) => {
                let _ = crate::spec::remove_scratch(&view.scratch_dir);
                Err(error)
            }
        }
    }
}

/// Mounts made in Warden's own mount namespace (root only), undone at close.
#[derive(Default)]
pub(crate) struct HostMounts {
    mounted: Vec<PathBuf>,
}

impl Drop for HostMounts {
    /// Error paths of `open` need not undo mounts one by one.
    fn drop(&mut self) {
        self.unmount();
    }
}

impl HostMounts {
    pub(crate) fn unmount(&mut self) {
        for path in self.mounted.drain(..).rev() {
            let path = plan::cstring(&path);
            // SAFETY: umount2 with a NUL-terminated path of a mount we made.
            unsafe {
                libc::umount2(path.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// Where a view's writable space (one tmpfs, see [`crate::DiskQuota`]) is mounted: it holds
/// the overlayfs `upper/` and `work/` directories, `tmp/` and `shm/`.
pub(crate) fn disk_dir(scratch: &Path) -> PathBuf {
    scratch.join("disk")
}

/// The directories made in the writable space, parents first, with their modes: `tmp/` and
/// `shm/` (sticky, writable by the sandbox user), and for writable views `upper/` and `work/`
/// (one of each per repository for several).
pub(crate) fn disk_layout(validated: &ValidatedView, writable: bool) -> Vec<(PathBuf, u32)> {
    let mut dirs = vec![
        (PathBuf::from("tmp"), 0o1777),
        (PathBuf::from("shm"), 0o1777),
    ];
    if writable {
        for dir in ["upper", "work"] {
            dirs.push((PathBuf::from(dir), 0o755));
            if let ValidatedView::Multi(repos) = validated {
                for (name, _) in repos {
                    dirs.push((Path::new(dir).join(name), 0o755));
                }
            }
        }
    }
    dirs
}

/// `mount(2)` with optional pieces.
fn mount_raw(
    source: &CString,
    target: &Path,
    fstype: Option<&CString>,
    flags: libc::c_ulong,
    data: Option<&CString>,
) -> io::Result<()> {
    let target = plan::cstring(target);
    // SAFETY: all pointers are NUL-terminated strings alive across the call.
    let result = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), |f| f.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Tries to mount the view's writable space (a tmpfs of `quota`) at [`disk_dir`] in Warden's
/// own mount namespace and to create `layout` in it. `Ok(false)` when this process may not
/// mount (unprivileged): the holder mounts it in its namespace instead.
pub(crate) fn mount_disk_on_host(
    backend: Backend,
    scratch: &Path,
    layout: &[(PathBuf, u32)],
    quota: &crate::DiskQuota,
    mounts: &mut HostMounts,
) -> Result<bool, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let disk = disk_dir(scratch);
    std::fs::create_dir_all(&disk)
        .map_err(|e| SandboxError::io(format!("cannot create {}", disk.display()), e))?;
    let disk_c = plan::cstring(&disk);
    // Private first (see `mount_on_host`), so the tmpfs does not propagate.
    match mount_raw(&disk_c, &disk, None, libc::MS_BIND, None) {
        Ok(()) => mounts.mounted.push(disk.clone()),
        Err(error) if error.raw_os_error() == Some(libc::EPERM) => return Ok(false),
        Err(error) => {
            return Err(SandboxError::Unavailable {
                backend,
                layer: Layer::Filesystem,
                reason: format!("cannot bind {}: {error}", disk.display()),
            })
        }
    }
    let tmpfs = c"tmpfs".to_owned();
    let data = plan::cstring(Path::new(
        &quota.tmpfs_options("0755", layout.len() as u64 + 1),
    ));
    let mounted = mount_raw(&disk_c, &disk, None, libc::MS_PRIVATE, None).and_then(|()| {
        mount_raw(
            &tmpfs,
            &disk,
            Some(&tmpfs),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&data),
        )
    });
    if let Err(error) = mounted {
        mounts.unmount();
        return Err(SandboxError::Unavailable {
            backend,
            layer: Layer::Filesystem,
            reason: format!(
                "cannot mount the view's writable space (tmpfs) at {}: {error}",
                disk.display()
            ),
        });
    }
    mounts.mounted.push(disk.clone());
    for (relative, mode) in layout {
        let path = disk.join(relative);
        let made = std::fs::create_dir(&path)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)));
        if let Err(e) = made {
            mounts.unmount();
            return Err(SandboxError::io(
                format!("cannot create {}", path.display()),
                e,
            ));
        }
    }
    Ok(true)
}

/// Tries to mount the view's working tree in Warden's own mount namespace. `Ok(false)` when
/// this process may not mount (unprivileged): the holder mounts it in its namespace instead.
pub(crate) fn mount_on_host(
    backend: Backend,
    validated: &ValidatedView,
    writable: bool,
    seed: Option<&Path>,
    scratch: &Path,
    mounts: &mut HostMounts,
) -> Result<bool, SandboxError> {
    let merged = scratch.join("merged");
    let disk = disk_dir(scratch);
    let mount = mount_raw;
    let overlay = c"overlay".to_owned();
    let layers: Vec<(PathBuf, &Path, PathBuf, PathBuf)> = match validated {
        ValidatedView::Single(snapshot) => vec![(
            merged.clone(),
            snapshot.as_path(),
            disk.join("upper"),
            disk.join("work"),
        )],
        ValidatedView::Multi(repos) => repos
            .iter()
            .map(|(name, snapshot)| {
                (
                    merged.join(name),
                    snapshot.as_path(),
                    disk.join("upper").join(name),
                    disk.join("work").join(name),
                )
            })
            .collect(),
    };
    // A private bind of the directory onto itself first: on hosts whose mounts are shared
    // (systemd), the view's mounts then do not propagate to other mount namespaces.
    std::fs::create_dir_all(&merged)
        .map_err(|e| SandboxError::io(format!("cannot create {}", merged.display()), e))?;
    let merged_c = plan::cstring(&merged);
    match mount(&merged_c, &merged, None, libc::MS_BIND, None) {
        Ok(()) => mounts.mounted.push(merged.clone()),
        Err(error) if error.raw_os_error() == Some(libc::EPERM) => return Ok(false),
        Err(error) => {
            return Err(SandboxError::Unavailable {
                backend,
                layer: Layer::Filesystem,
                reason: format!("cannot bind {}: {error}", merged.display()),
            })
        }
    }
    if let Err(error) = mount(&merged_c, &merged, None, libc::MS_PRIVATE, None) {
        mounts.unmount();
        return Err(SandboxError::Unavailable {
            backend,
            layer: Layer::Filesystem,
            reason: format!("cannot make {} private: {error}", merged.display()),
        });
    }
    for (target, snapshot, upper, work) in &layers {
        std::fs::create_dir_all(target)
            .map_err(|e| SandboxError::io(format!("cannot create {}", target.display()), e))?;
        let result = if writable {
            let data = plan::cstring(Path::new(&plan::overlay_options(
                snapshot, seed, upper, work, false,
            )));
            mount(
                &overlay,
                target,
                Some(&overlay),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&data),
            )
        } else {
            let source = plan::cstring(snapshot);
            mount(&source, target, None, libc::MS_BIND, None).and_then(|()| {
                mount(
                    &source,
                    target,
                    None,
                    libc::MS_BIND
                        | libc::MS_REMOUNT
                        | libc::MS_RDONLY
                        | libc::MS_NOSUID
                        | libc::MS_NODEV,
                    None,
                )
            })
        };
        match result {
            Ok(()) => mounts.mounted.push(target.clone()),
            Err(error) => {
                mounts.unmount();
                return Err(SandboxError::Unavailable {
                    backend,
                    layer: if writable {
                        Layer::Overlayfs
                    } else {
                        Layer::Filesystem
                    },
                    reason: format!("cannot mount {}: {error}", target.display()),
                });
            }
        }
    }
    Ok(true)
}

/// Probe reports for the `linux` backend.
pub(crate) fn probe(config: &SandboxConfig) -> Vec<LayerReport> {
    let report = |layer: Layer, available: bool, detail: String| LayerReport {
        backend: Backend::Linux,
        layer,
        available,
        detail,
    };
    let mut reports = Vec::new();
    reports.push(report(
        Layer::Seccomp,
        seccomp::SUPPORTED,
        if seccomp::SUPPORTED {
            format!("filter for {}", std::env::consts::ARCH)
        } else {
            format!("no filter for {}", std::env::consts::ARCH)
        },
    ));
    reports.push(match landlock::abi() {
        Ok(abi) => report(
            Layer::Landlock,
            true,
            format!(
                "ABI {abi}{}{}",
                if abi >= 4 {
                    "; TCP bind/connect denied"
                } else {
                    "; no network rules (ABI < 4)"
                },
                if abi >= 6 {
                    "; signals and abstract sockets scoped"
                } else {
                    ""
                }
            ),
        ),
        Err(error) => report(
            Layer::Landlock,
            false,
            format!("{error}; needs CONFIG_SECURITY_LANDLOCK and lsm=landlock"),
        ),
    });
    for controller in cgroup::Controller::ALL {
        let layer = controller.layer();
        if config.is_disabled(layer) {
            reports.push(report(
                layer,
                false,
                "disabled by configuration (rlimits only)".into(),
            ));
            continue;
        }
        reports.push(match cgroup::discover(controller) {
            Ok(hierarchy) => match cgroup::trial(&hierarchy) {
                Ok(()) => report(
                    layer,
                    true,
                    format!(
                        "cgroup {} at {}",
                        if hierarchy.v2 { "v2" } else { "v1" },
                        hierarchy.parent.display()
                    ),
                ),
                Err(error) => report(
                    layer,
                    false,
                    format!(
                        "{error}; delegate a cgroup to this user or disable the layer explicitly"
                    ),
                ),
            },
            Err(reason) => report(layer, false, reason),
        });
    }
    // Everything else is checked by really doing it: a trial view and command.
    let staged = [
        Layer::UserNamespace,
        Layer::MountNamespace,
        Layer::PidNamespace,
        Layer::NetNamespace,
        Layer::IpcNamespace,
        Layer::UtsNamespace,
        Layer::CgroupNamespace,
        Layer::Filesystem,
        Layer::Overlayfs,
        Layer::Capabilities,
        Layer::NoNewPrivs,
        Layer::Rlimits,
    ];
    let mut trial_config = config.clone();
    for controller in cgroup::Controller::ALL {
        // Cgroups were reported above; do not let them hide the other layers.
        trial_config.disabled_layers.push(controller.layer());
    }
    let outcome = LinuxSandbox::prepare(&trial_config).and_then(|sandbox| sandbox.trial());
    for layer in staged {
        reports.push(match &outcome {
            Ok(()) => report(layer, true, "established by a trial command".into()),
            Err(error) if error.layer() == Some(layer) => report(layer, false, error.to_string()),
            Err(error) => report(
                layer,
                false,
                format!(
                    "not checked: the trial stopped at layer {}",
                    error.layer().map_or("(none)", Layer::as_str)
                ),
            ),
        });
    }
    let order = |layer: &Layer| {
        Layer::ALL
            .iter()
            .position(|l| l == layer)
            .unwrap_or(usize::MAX)
    };
    reports.sort_by_key(|r| order(&r.layer));
    reports
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<LinuxView>();
}

#[cfg(test)]
mod trial_tests {
    use super::*;

    #[test]
    fn a_dead_processs_trial_directory_is_cleared_before_a_trial() {
        let home = tempfile::tempdir().unwrap();
        let base = home.path().join("warden-sandbox-trial-1-0");
        std::fs::create_dir_all(base.join("scratch/upper")).unwrap();
        std::fs::write(base.join("scratch/upper/left"), b"x").unwrap();
        std::fs::create_dir_all(base.join("snapshot")).unwrap();
        std::fs::write(base.join("snapshot/file"), b"old\n").unwrap();
        let snapshot = prepare_trial(&base).unwrap();
        assert!(!base.join("scratch").exists(), "the stale scratch is gone");
        assert_eq!(std::fs::read(snapshot.join("file")).unwrap(), b"trial\n");
    }
}
