//! Cgroups for the memory, pids and cpu limits of each command: version 1 (one hierarchy per
//! controller, as on these machines) or version 2 (the unified hierarchy), whichever holds the
//! controller. Each command gets `<our cgroup>/warden/run-<pid>-<n>` in every hierarchy; the
//! relay process joins it before forking the sandboxed process, and it is removed afterwards.
//!
//! An unprivileged Warden can only do this where its cgroup was delegated to it (the directory
//! is owned by the Warden user, as systemd's `Delegate=yes` or an administrator's `chown` does);
//! otherwise the layer is unavailable and, unless the configuration disables it, nothing runs.
//! On v2 a cgroup passes controllers to its children only while it holds no processes, and
//! Warden's holds Warden: Warden moves itself (with its descendants, nothing else) into the
//! leaf [`SUPERVISOR`] of its cgroup first, and `warden/` sits beside that leaf.

use crate::Layer;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A controller we limit with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub(crate) const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }

    pub(crate) fn layer(self) -> Layer {
        match self {
            Controller::Memory => Layer::CgroupMemory,
            Controller::Pids => Layer::CgroupPids,
            Controller::Cpu => Layer::CgroupCpu,
        }
    }
}

/// Where one controller's `warden` directory lives.
#[derive(Debug, Clone)]
pub(crate) struct Hierarchy {
    pub(crate) controller: Controller,
    pub(crate) v2: bool,
    /// `<mount>/<our cgroup>/warden`.
    pub(crate) parent: PathBuf,
}

/// The limits of one command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) memory_bytes: u64,
    pub(crate) pids: u32,
    pub(crate) cpu_millis: Option<u32>,
}

/// One command's cgroups.
pub(crate) struct RunCgroups {
    dirs: Vec<(Hierarchy, PathBuf)>,
    procs: Vec<OwnedFd>,
}

struct Mount {
    point: PathBuf,
    root: String,
    v2: bool,
    options: Vec<String>,
}

fn mounts() -> io::Result<Vec<Mount>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut found = Vec::new();
    for line in text.lines() {
        // id parent major:minor root mountpoint options [optional...] - fstype source superopts
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(fstype), Some(superopts)) =
            (left.get(3), left.get(4), right.first(), right.get(2))
        else {
            continue;
        };
        let v2 = *fstype == "cgroup2";
        if !v2 && *fstype != "cgroup" {
            continue;
        }
        found.push(Mount {
            point: PathBuf::from(unescape(point)),
            root: unescape(root),
            v2,
            options: superopts.split(',').map(str::to_owned).collect(),
        });
    }
    Ok(found)
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\'
            && index + 3 < bytes.len()
            && bytes[index + 1..index + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = bytes[index + 1..index + 4]
                .iter()
                .fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
            out.push(value as u8);
            index += 4;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Our cgroup path per hierarchy: `(controllers, path)`; controllers empty for v2.
fn own_cgroups() -> io::Result<Vec<(Vec<String>, String)>> {
    let text = std::fs::read_to_string("/proc/self/cgroup")?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            Some((controllers, path.to_owned()))
        })
        .collect())
}

fn join_cgroup(point: &Path, root: &str, path: &str) -> PathBuf {
    // The mount shows the hierarchy from `root` down; our path is absolute in the hierarchy.
    let relative = path
        .strip_prefix(root)
        .unwrap_or(path)
        .trim_start_matches('/');
    if relative.is_empty() {
        point.to_path_buf()
    } else {
        point.join(relative)
    }
}

/// Finds where each controller can be used; `Err` carries why a controller cannot.
pub(crate) fn discover(controller: Controller) -> Result<Hierarchy, String> {
    let mounts = mounts().map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let own = own_cgroups().map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let name = controller.name();
    if let Some(mount) = mounts
        .iter()
        .find(|m| !m.v2 && m.options.iter().any(|o| o == name))
    {
        let path = own
            .iter()
            .find(|(controllers, _)| controllers.iter().any(|c| c == name))
            .map(|(_, path)| path.as_str())
            .ok_or_else(|| {
                format!("the {name} hierarchy is mounted but /proc/self/cgroup has no entry for it")
            })?;
        let own_dir = join_cgroup(&mount.point, &mount.root, path);
        return Ok(Hierarchy {
            controller,
            v2: false,
            parent: own_dir.join("warden"),
        });
    }
    let Some(mount) = mounts.iter().find(|m| m.v2) else {
        return Err(format!("no cgroup hierarchy has the {name} controller"));
    };
    let path = own
        .iter()
        .find(|(controllers, _)| controllers.is_empty())
        .map(|(_, path)| path.as_str())
        .ok_or_else(|| "cgroup2 is mounted but /proc/self/cgroup has no 0:: entry".to_owned())?;
    let own_dir = v2_own_dir(join_cgroup(&mount.point, &mount.root, path));
    let available = std::fs::read_to_string(own_dir.join("cgroup.controllers")).unwrap_or_default();
    if !available.split_whitespace().any(|c| c == name) {
        return Err(format!(
            "the {name} controller is neither in a cgroup v1 hierarchy nor enabled for our cgroup \
             {} in cgroup v2",
            own_dir.display()
        ));
    }
    Ok(Hierarchy {
        controller,
        v2: true,
        parent: own_dir.join("warden"),
    })
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).open(path)?;
    file.write_all(value.as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Creates `warden/` under our cgroup (enabling the controller for its children on v2).
pub(crate) fn prepare(hierarchy: &Hierarchy) -> io::Result<()> {
    match std::fs::create_dir(&hierarchy.parent) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(io::Error::new(
                error.kind(),
                format!("cannot create {}: {error}", hierarchy.parent.display()),
            ))
        }
    }
    sweep_stale(&hierarchy.parent);
    if hierarchy.v2 {
        let name = hierarchy.controller.name();
        // Our own cgroup must pass the controller down to `warden/`, which passes it on to the
        // run cgroups.
        if let Some(own) = hierarchy.parent.parent() {
            let enabled =
                std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == name) {
                pass_down(own, name)?;
            }
        }
        write(
            &hierarchy.parent.join("cgroup.subtree_control"),
            &format!("+{name}"),
        )?;
    }
    Ok(())
}

/// The leaf of its cgroup Warden moves itself into on cgroup v2, so that its cgroup can pass
/// controllers down to `warden/` (what systemd's `DelegateSubgroup=` does for a service; with
/// `Delegate=yes` alone, or a cgroup delegated by hand, Warden does it).
pub(crate) const SUPERVISOR: &str = "warden-supervisor";

/// Our cgroup on v2: the one `/proc/self/cgroup` names, or the one above once this process
/// moved into its [`SUPERVISOR`] leaf.
fn v2_own_dir(dir: PathBuf) -> PathBuf {
    match (dir.file_name(), dir.parent()) {
        (Some(name), Some(parent)) if name == SUPERVISOR => parent.to_path_buf(),
        _ => dir,
    }
}

/// Enables controller `name` for the children of `own` (cgroup v2). The kernel refuses that
/// while `own` holds processes (`EBUSY`, the "no internal processes" rule), and Warden's own
/// cgroup holds Warden: when nothing but this process and its descendants is there, they move
/// into the [`SUPERVISOR`] leaf and the write is tried again (children forked meanwhile are
/// moved on the next try). Another process there is not Warden's to move: the refusal stands,
/// with what to do.
fn pass_down(own: &Path, name: &str) -> io::Result<()> {
    let control = own.join("cgroup.subtree_control");
    let us = std::process::id();
    for attempt in 0..3 {
        let error = match write(&control, &format!("+{name}")) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::ResourceBusy => error,
            Err(error) => return Err(error),
        };
        let members = std::fs::read_to_string(own.join("cgroup.procs")).unwrap_or_default();
        let members: Vec<u32> = members
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
        let strangers: Vec<u32> = members
            .iter()
            .copied()
            .filter(|&pid| pid != us && is_stranger(pid, us))
            .take(8)
            .collect();
        if attempt == 2 || !strangers.is_empty() {
            return Err(io::Error::new(
                error.kind(),
                format!(
                    "{error}; cgroup v2 passes controllers only from a cgroup without processes,                      and {} holds processes other than Warden's ({strangers:?}): give Warden a                      cgroup of its own (systemd: Delegate=yes) or run it in a leaf of its                      delegated subtree (DelegateSubgroup=)",
                    own.display()
                ),
            ));
        }
        let leaf = own.join(SUPERVISOR);
        match std::fs::create_dir(&leaf) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => {
                return Err(io::Error::new(
                    error.kind(),
                    format!("cannot create {}: {error}", leaf.display()),
                ))
            }
        }
        for pid in members {
            match write(&leaf.join("cgroup.procs"), &pid.to_string()) {
                Ok(()) => {}
                // Exited meanwhile.
                Err(_) if !Path::new("/proc").join(pid.to_string()).exists() => {}
                Err(error) => return Err(error),
            }
        }
    }
    Err(io::Error::other(format!(
        "cannot enable {name} for the children of {}",
        own.display()
    )))
}

/// Whether live process `pid` is no descendant of process `us` (a process that is gone is
/// nobody's).
fn is_stranger(pid: u32, us: u32) -> bool {
    let mut at = pid;
    // Deep enough for any chain Warden forks (relay, shell, command).
    for _ in 0..64 {
        match parent_pid(at) {
            None => return at != pid,
            Some(parent) if parent == us => return false,
            Some(parent) if parent <= 1 => return true,
            Some(parent) => at = parent,
        }
    }
    true
}

/// The parent of process `pid`, from `/proc/<pid>/stat`; `None` when it is gone.
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses; the last `)` ends it.
    let (_, after) = stat.rsplit_once(')')?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Removes `run-<pid>-<n>` cgroups left by a Warden process that died mid-command (its
/// commands died with it; the empty directories stay). A live pid's are left alone.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("run-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            // Fails harmlessly if something still runs in it.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

impl RunCgroups {
    /// Creates the command's cgroups with their limits and opens their `cgroup.procs`.
    pub(crate) fn create(
        hierarchies: &[Hierarchy],
        limits: Limits,
    ) -> Result<RunCgroups, (Layer, io::Error)> {
        let name = format!(
            "run-{}-{}",
            std::process::id(),
            NEXT_RUN.fetch_add(1, Ordering::Relaxed)
        );
        let mut cgroups = RunCgroups {
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        for hierarchy in hierarchies {
            // Joining a v1 hierarchy costs a migration; without a CPU limit there is nothing
            // to join the cpu one for.
            if hierarchy.controller == Controller::Cpu
                && !hierarchy.v2
                && limits.cpu_millis.is_none()
            {
                continue;
            }
            let layer = hierarchy.controller.layer();
            // v2 hierarchies are shared by all controllers: one directory serves them all.
            let dir = hierarchy.parent.join(&name);
            let existing = cgroups.dirs.iter().any(|(_, d)| *d == dir);
            if !existing {
                std::fs::create_dir(&dir).map_err(|e| {
                    (
                        layer,
                        io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())),
                    )
                })?;
                cgroups.dirs.push((hierarchy.clone(), dir.clone()));
            }
            set_limits(hierarchy, &dir, limits).map_err(|e| (layer, e))?;
            if !existing {
                let procs = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    // v1: move the relay's one thread through `tasks`; moving "0" (ourselves)
                    // as a single thread skips the global threadgroup lock that a whole-process
                    // move through `cgroup.procs` takes, and with it an RCU grace period.
                    .open(dir.join(if hierarchy.v2 {
                        "cgroup.procs"
                    } else {
                        "tasks"
                    }))
                    .map_err(|e| (layer, e))?;
                cgroups.procs.push(OwnedFd::from(procs));
            }
        }
        Ok(cgroups)
    }

    /// `cgroup.procs` (v2) or `tasks` (v1) descriptors the relay writes `0` to.
    pub(crate) fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Whether the kernel's OOM killer struck inside the memory cgroup.
    pub(crate) fn oom_killed(&self) -> bool {
        self.dirs.iter().any(|(hierarchy, dir)| {
            let file = if hierarchy.v2 {
                "memory.events"
            } else {
                "memory.oom_control"
            };
            (hierarchy.controller == Controller::Memory || hierarchy.v2)
                && std::fs::read_to_string(dir.join(file))
                    .ok()
                    .and_then(|text| {
                        text.lines().find_map(|line| {
                            line.strip_prefix("oom_kill ").map(|n| n.trim() != "0")
                        })
                    })
                    .unwrap_or(false)
        })
    }

    /// Kills whatever is left in the cgroups (normally nothing: the pid namespace died with its
    /// init) and removes them. Where the kernel has `cgroup.kill` (cgroup v2, Linux ≥ 5.14) one
    /// write kills every process in the cgroup atomically, forks in flight included; cgroup v1
    /// has no such file, so there the pids listed in `cgroup.procs` are killed one by one (never
    /// pid 0 or 1, which `kill(2)` would read as "our group" or "init").
    pub(crate) fn remove(self) {
        drop(self.procs);
        for (_, dir) in &self.dirs {
            let kill_file = dir.join("cgroup.kill");
            for attempt in 0..50 {
                if !(kill_file.exists() && write(&kill_file, "1").is_ok()) {
                    kill_listed(dir);
                }
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(error) if error.kind() == io::ErrorKind::NotFound => break,
                    Err(_) if attempt < 49 => std::thread::sleep(Duration::from_millis(2)),
                    Err(_) => {}
                }
            }
        }
    }
}

/// SIGKILL to every process `dir/cgroup.procs` lists (cgroup v1, which has no `cgroup.kill`).
fn kill_listed(dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in text
        .lines()
        .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
        .filter(|&pid| pid > 1)
    {
        // SAFETY: kill(2) on a positive pid (> 1) read from our own run cgroup.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

fn set_limits(hierarchy: &Hierarchy, dir: &Path, limits: Limits) -> io::Result<()> {
    match (hierarchy.controller, hierarchy.v2) {
        (Controller::Memory, false) => {
            write(
                &dir.join("memory.limit_in_bytes"),
                &limits.memory_bytes.to_string(),
            )?;
            let swap = dir.join("memory.memsw.limit_in_bytes");
            if swap.exists() {
                write(&swap, &limits.memory_bytes.to_string())?;
            }
        }
        (Controller::Memory, true) => {
            write(&dir.join("memory.max"), &limits.memory_bytes.to_string())?;
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
            }
        }
        // The relay process is in the cgroup too: one more than the command's limit.
        (Controller::Pids, _) => write(
            &dir.join("pids.max"),
            &(u64::from(limits.pids) + 1).to_string(),
        )?,
        (Controller::Cpu, false) => {
            if let Some(millis) = limits.cpu_millis {
                write(&dir.join("cpu.cfs_period_us"), "100000")?;
                write(
                    &dir.join("cpu.cfs_quota_us"),
                    &(u64::from(millis.max(1)) * 100).to_string(),
                )?;
            }
        }
        (Controller::Cpu, true) => {
            if let Some(millis) = limits.cpu_millis {
                write(
                    &dir.join("cpu.max"),
                    &format!("{} 100000", u64::from(millis.max(1)) * 100),
                )?;
            }
        }
    }
    Ok(())
}

/// Checks that a command cgroup can be created and removed under `hierarchy` (for probing).
pub(crate) fn trial(hierarchy: &Hierarchy) -> io::Result<()> {
    prepare(hierarchy)?;
    let cgroups = RunCgroups::create(
        std::slice::from_ref(hierarchy),
        Limits {
            memory_bytes: 1 << 30,
            pids: 64,
            cpu_millis: Some(1000),
        },
    )
    .map_err(|(_, e)| e)?;
    cgroups.remove();
    Ok(())
}

use std::os::unix::fs::OpenOptionsExt;

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> std::process::Child {
        #[allow(clippy::disallowed_methods)]
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap()
    }

    fn fake_cgroup(dir: &Path, procs: &str, kill_file: bool) -> RunCgroups {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), procs).unwrap();
        if kill_file {
            std::fs::write(dir.join("cgroup.kill"), "").unwrap();
        }
        let hierarchy = Hierarchy {
            controller: Controller::Pids,
            v2: kill_file,
            parent: dir.to_path_buf(),
        };
        RunCgroups {
            dirs: vec![(hierarchy, dir.to_path_buf())],
            procs: Vec::new(),
        }
    }

    #[test]
    fn removal_writes_cgroup_kill_where_it_exists_instead_of_signalling_listed_pids() {
        let temp = tempfile::tempdir().unwrap();
        let mut child = sleeper();
        let dir = temp.path().join("v2");
        fake_cgroup(&dir, &format!("{}\n", child.id()), true).remove();
        assert_eq!(
            std::fs::read_to_string(dir.join("cgroup.kill")).unwrap(),
            "1"
        );
        // The listed pid was left to the kernel's cgroup.kill, not signalled by pid.
        assert!(child.try_wait().unwrap().is_none(), "signalled by pid");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn removal_without_cgroup_kill_signals_listed_pids_but_never_0_or_1() {
        let temp = tempfile::tempdir().unwrap();
        let mut child = sleeper();
        // kill(0) would be this test's own process group, kill(1) init.
        fake_cgroup(
            &temp.path().join("v1"),
            &format!("0\n1\n-1\n{}\n", child.id()),
            false,
        )
        .remove();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn only_descendants_of_this_process_are_its_own() {
        let us = std::process::id();
        let mut child = sleeper();
        assert!(!is_stranger(child.id(), us));
        // A grandchild, through a shell.
        #[allow(clippy::disallowed_methods)]
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(shell.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        assert_eq!(parent_pid(grandchild), Some(shell.id()));
        assert!(!is_stranger(grandchild, us));
        // Init, and our own parent, are not ours.
        assert!(is_stranger(1, us));
        assert!(is_stranger(std::os::unix::process::parent_id(), us));
        // A process that is gone is nobody's.
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_stranger(child.id(), us));
        #[allow(clippy::disallowed_methods)]
        let _ = std::process::Command::new("kill")
            .arg(grandchild.to_string())
            .status();
        shell.kill().unwrap();
        shell.wait().unwrap();
    }

    /// Set for the re-executed child of [`delegated_v2_cgroups_pass_controllers_down`]:
    /// `pass` or `refuse`, the delegated cgroup and the controller, one a line.
    const V2_CHILD: &str = "WARDEN_SANDBOX_CGROUP_V2_CHILD";

    /// The cgroup v2 mount at the hierarchy's root, and a controller its root can give
    /// children (any will do: the rule tested is the kernel's for every controller).
    fn v2_root() -> Result<(PathBuf, String), String> {
        let mount = mounts()
            .map_err(|e| e.to_string())?
            .into_iter()
            .find(|m| m.v2 && m.root == "/")
            .ok_or("no cgroup2 mount")?;
        let controllers =
            std::fs::read_to_string(mount.point.join("cgroup.controllers")).unwrap_or_default();
        let controller = ["pids", "hugetlb", "memory", "cpu", "io"]
            .into_iter()
            .find(|c| controllers.split_whitespace().any(|have| have == *c))
            .ok_or_else(|| format!("no controller at the cgroup2 root ({controllers:?})"))?;
        Ok((mount.point, controller.to_string()))
    }

    /// This process's cgroup v2 path (`0::PATH`).
    fn own_v2_path() -> String {
        std::fs::read_to_string("/proc/self/cgroup")
            .unwrap()
            .lines()
            .find_map(|line| line.strip_prefix("0::").map(str::to_string))
            .unwrap()
    }

    /// In the uid-65534 child, inside the cgroup delegated to it.
    fn v2_child(spec: &str) {
        let mut lines = spec.lines();
        let (mode, dir, controller) = (
            lines.next().unwrap(),
            PathBuf::from(lines.next().unwrap()),
            lines.next().unwrap(),
        );
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            own_v2_path().ends_with(&format!("/{name}")),
            "{}",
            own_v2_path()
        );
        let result = pass_down(&dir, controller);
        if mode == "refuse" {
            // Another user's process shares the cgroup: not Warden's to move.
            let message = result.unwrap_err().to_string();
            assert!(
                message.contains("holds processes other than Warden's")
                    && message.contains("DelegateSubgroup="),
                "{message}"
            );
            assert!(own_v2_path().ends_with(&format!("/{name}")), "moved anyway");
            return;
        }
        result.unwrap();
        // This process moved into its leaf; its cgroup is still the one above.
        let own = own_v2_path();
        assert!(own.ends_with(&format!("/{name}/{SUPERVISOR}")), "{own}");
        let mapped = v2_own_dir(PathBuf::from(&own));
        assert!(mapped.ends_with(&name), "{}", mapped.display());
        let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap();
        assert!(
            enabled.split_whitespace().any(|c| c == controller),
            "{enabled}"
        );
        // Already passed: a second time changes nothing.
        pass_down(&dir, controller).unwrap();
        // `warden/` passes it on, and a child joins a run cgroup below it as the relay does.
        let warden = dir.join("warden");
        std::fs::create_dir(&warden).unwrap();
        write(
            &warden.join("cgroup.subtree_control"),
            &format!("+{controller}"),
        )
        .unwrap();
        let run = warden.join("run-1");
        std::fs::create_dir(&run).unwrap();
        assert!(std::fs::read_to_string(run.join("cgroup.controllers"))
            .unwrap()
            .contains(controller));
        #[allow(clippy::disallowed_methods)]
        let joined = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo 0 > {}/cgroup.procs && grep ^0:: /proc/self/cgroup",
                run.display()
            ))
            .output()
            .unwrap();
        let joined = String::from_utf8_lossy(&joined.stdout).into_owned();
        assert!(
            joined.trim().ends_with(&format!("/{name}/warden/run-1")),
            "{joined}"
        );
    }

    /// Regression (cgroup v2): Warden's cgroup holds Warden, so writing `+CONTROLLER` to its
    /// `cgroup.subtree_control` always failed (`EBUSY`, the "no internal processes" rule) and
    /// the cgroup layers never came up below a delegated cgroup (systemd's `Delegate=yes`).
    /// As uid 65534 in a cgroup delegated to it, [`pass_down`] moves this process into its
    /// [`SUPERVISOR`] leaf and passes the controller down, and a child joins a run cgroup; with
    /// another user's process in the cgroup it refuses, moving nothing. Needs root to delegate
    /// (fails under `WARDEN_TEST_REQUIRE=root` otherwise) and a cgroup2 mount (a hybrid
    /// host's `unified` one will do).
    #[test]
    fn delegated_v2_cgroups_pass_controllers_down() {
        if let Ok(spec) = std::env::var(V2_CHILD) {
            v2_child(&spec);
            return;
        }
        if crate::sys::euid() != 0 {
            let required = std::env::var("WARDEN_TEST_REQUIRE")
                .unwrap_or_default()
                .split(',')
                .any(|name| name.trim() == "root");
            assert!(
                !required,
                "WARDEN_TEST_REQUIRE lists root, but this run is not root"
            );
            eprintln!("skipped: needs root to delegate a cgroup");
            return;
        }
        let (root, controller) = match v2_root() {
            Ok(found) => found,
            Err(reason) => {
                eprintln!("skipped: {reason}");
                return;
            }
        };
        let control = root.join("cgroup.subtree_control");
        let enabled_before = std::fs::read_to_string(&control)
            .unwrap_or_default()
            .split_whitespace()
            .any(|c| c == controller);
        if !enabled_before {
            if let Err(error) = write(&control, &format!("+{controller}")) {
                eprintln!("skipped: cannot enable {controller} at the cgroup2 root: {error}");
                return;
            }
        }
        let mut stranger = sleeper();
        let mut outcomes = Vec::new();
        for mode in ["refuse", "pass"] {
            let dir = root.join(format!("warden-test-v2-{mode}-{}", std::process::id()));
            std::fs::create_dir(&dir).unwrap();
            // The kernel's delegation: the directory and these three files.
            for file in [
                "",
                "cgroup.procs",
                "cgroup.subtree_control",
                "cgroup.threads",
            ] {
                std::os::unix::fs::chown(dir.join(file), Some(65534), Some(65534)).unwrap();
            }
            if mode == "refuse" {
                write(&dir.join("cgroup.procs"), &stranger.id().to_string()).unwrap();
            }
            #[allow(clippy::disallowed_methods)]
            let output = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "echo $$ > {}/cgroup.procs && exec setpriv --reuid=65534 --regid=65534 \
                     --clear-groups -- \"$@\"",
                    dir.display()
                ))
                .arg("sh")
                .arg(std::env::current_exe().unwrap())
                .args([
                    "linux::cgroup::tests::delegated_v2_cgroups_pass_controllers_down",
                    "--exact",
                    "--nocapture",
                ])
                .env(V2_CHILD, format!("{mode}\n{}\n{controller}", dir.display()))
                .output()
                .unwrap();
            outcomes.push((
                mode,
                output.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            ));
            stranger.kill().unwrap();
            stranger.wait().unwrap();
            stranger = sleeper();
            for leaf in ["warden/run-1", "warden", SUPERVISOR, ""] {
                let _ = std::fs::remove_dir(dir.join(leaf));
            }
        }
        stranger.kill().unwrap();
        stranger.wait().unwrap();
        if !enabled_before {
            let _ = write(&control, &format!("-{controller}"));
        }
        for (mode, success, log) in outcomes {
            assert!(
                success && log.contains("1 passed"),
                "{mode} ({controller}):\n{log}"
            );
        }
    }

    #[test]
    fn unescapes_mountinfo_fields() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn joins_cgroup_paths_under_the_mount_root() {
        assert_eq!(
            join_cgroup(Path::new("/sys/fs/cgroup/memory"), "/", "/a/b"),
            PathBuf::from("/sys/fs/cgroup/memory/a/b")
        );
        assert_eq!(
            join_cgroup(Path::new("/sys/fs/cgroup"), "/a", "/a/b"),
            PathBuf::from("/sys/fs/cgroup/b")
        );
        assert_eq!(
            join_cgroup(Path::new("/sys/fs/cgroup"), "/", "/"),
            PathBuf::from("/sys/fs/cgroup")
        );
    }
}
