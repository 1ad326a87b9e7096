//! Host-side preparation of a view: what the host system looks like (which of `/bin`, `/lib`, …
//! are usrmerge symlinks), the generated `/etc`, and the list of file-system steps the view
//! holder executes to build the sandbox root. Each step carries the [`Layer`] its failure is
//! reported as and a description for the error message.

use super::child::{Op, Step};
use crate::Layer;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The in-sandbox user and group id Warden's own user is mapped to.
pub(crate) const SANDBOX_ID: u32 = 1000;

/// How a top-level system directory exists on the host.
#[derive(Debug, Clone)]
pub(crate) enum SystemEntry {
    /// A usrmerge symlink (`/bin -> usr/bin`): recreated as the same symlink.
    Symlink(PathBuf),
    /// A real directory: bind-mounted read-only.
    Directory,
}

/// The host system directories exposed read-only.
#[derive(Debug, Clone)]
pub(crate) struct SystemLayout {
    pub(crate) entries: Vec<(String, SystemEntry)>,
    /// `/etc` entries bound read-only into the generated `/etc`: `(relative path, is dir)`.
    pub(crate) etc_binds: Vec<(String, bool)>,
    /// `/etc` symlinks copied as symlinks (`localtime`).
    pub(crate) etc_links: Vec<(String, PathBuf)>,
    /// The program the view holder waits in (`cat`).
    pub(crate) holder_program: PathBuf,
}

/// Public, non-secret `/etc` entries a toolchain needs. Never `/etc` wholesale: it holds
/// `shadow`, `ssl/private`, credentials of host services.
const ETC_BINDS: [&str; 6] = [
    "ssl/certs",
    "ssl/openssl.cnf",
    "alternatives",
    "ld.so.cache",
    "services",
    "protocols",
];

/// The devices a sandbox gets.
pub(crate) const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];

impl SystemLayout {
    pub(crate) fn detect() -> Result<SystemLayout, String> {
        if !Path::new("/usr").is_dir() {
            return Err("/usr is not a directory".into());
        }
        let mut entries = vec![("usr".to_owned(), SystemEntry::Directory)];
        for name in ["bin", "sbin", "lib", "lib64", "lib32", "libx32"] {
            let path = Path::new("/").join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&path)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    entries.push((name.to_owned(), SystemEntry::Symlink(target)));
                }
                Ok(meta) if meta.is_dir() => {
                    entries.push((name.to_owned(), SystemEntry::Directory))
                }
                _ => {}
            }
        }
        let mut etc_binds = Vec::new();
        for relative in ETC_BINDS {
            let path = Path::new("/etc").join(relative);
            if let Ok(meta) = std::fs::metadata(&path) {
                etc_binds.push((relative.to_owned(), meta.is_dir()));
            }
        }
        let mut etc_links = Vec::new();
        if let Ok(target) = std::fs::read_link("/etc/localtime") {
            etc_links.push(("localtime".to_owned(), target));
        }
        let holder_program = ["/usr/bin/cat", "/bin/cat"]
            .iter()
            .map(PathBuf::from)
            .find(|path| path.is_file())
            .ok_or_else(|| "no cat binary in /usr/bin or /bin".to_owned())?;
        Ok(SystemLayout {
            entries,
            etc_binds,
            etc_links,
            holder_program,
        })
    }
}

/// Writes the generated `/etc` into `dir` (with mount points for the read-only binds).
pub(crate) fn write_etc(dir: &Path, layout: &SystemLayout) -> std::io::Result<()> {
    let files: [(&str, &str); 6] = [
        (
            "passwd",
            "root:x:0:0:root:/root:/usr/sbin/nologin\n\
             sandbox:x:1000:1000:sandbox:/tmp:/bin/bash\n\
             nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        ),
        ("group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"),
        (
            "hosts",
            "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        ),
        ("hostname", "sandbox\n"),
        (
            "nsswitch.conf",
            "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n\
             protocols: files\nservices: files\n",
        ),
        // No name servers: there is no network to reach them over.
        ("resolv.conf", ""),
    ];
    std::fs::create_dir_all(dir)?;
    for (name, content) in files {
        std::fs::write(dir.join(name), content)?;
    }
    for (relative, is_dir) in &layout.etc_binds {
        let target = dir.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if *is_dir {
            std::fs::create_dir(&target)?;
        } else {
            std::fs::write(&target, b"")?;
        }
    }
    for (relative, link) in &layout.etc_links {
        std::os::unix::fs::symlink(link, dir.join(relative))?;
    }
    Ok(())
}

pub(crate) fn cstring(path: &Path) -> CString {
    // Paths come from validated specs and our own layout; an interior NUL was rejected there.
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

fn text(value: &str) -> CString {
    CString::new(value).unwrap_or_default()
}

/// Flags a bind mount must keep when remounted: a mount copied from a more privileged
/// namespace has its `nosuid`, `nodev`, `noexec` and atime flags locked.
pub(crate) fn locked_flags(path: &Path) -> libc::c_ulong {
    let Ok(path) = CString::new(path.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: `stat` is a valid out-parameter and `path` is NUL-terminated.
    let flags = unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut stat) != 0 {
            return 0;
        }
        stat.f_flag
    };
    let mut locked = 0;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if flags & st != 0 {
            locked |= ms;
        }
    }
    locked
}

/// Accumulates steps together with their layer and description.
#[derive(Default)]
pub(crate) struct Steps {
    pub(crate) steps: Vec<Step>,
    pub(crate) described: Vec<(Layer, String)>,
}

impl Steps {
    fn push(&mut self, layer: Layer, what: String, op: Op, optional: bool) {
        self.steps.push(Step { op, optional });
        self.described.push((layer, what));
    }

    pub(crate) fn mkdir(&mut self, path: &Path) {
        self.push(
            Layer::Filesystem,
            format!("create {}", path.display()),
            Op::Mkdir {
                path: cstring(path),
                mode: 0o755,
            },
            false,
        );
    }

    /// A directory with exactly `mode`.
    pub(crate) fn mkdir_mode(&mut self, path: &Path, mode: u32) {
        self.mkdir(path);
        self.push(
            Layer::Filesystem,
            format!("set the mode of {}", path.display()),
            Op::Chmod {
                path: cstring(path),
                mode,
            },
            false,
        );
    }

    pub(crate) fn touch(&mut self, path: &Path) {
        self.push(
            Layer::Filesystem,
            format!("create {}", path.display()),
            Op::Touch {
                path: cstring(path),
            },
            false,
        );
    }

    pub(crate) fn symlink(&mut self, target: &Path, path: &Path) {
        self.push(
            Layer::Filesystem,
            format!("link {} -> {}", path.display(), target.display()),
            Op::Symlink {
                target: cstring(target),
                path: cstring(path),
            },
            false,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mount(
        &mut self,
        layer: Layer,
        what: String,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: libc::c_ulong,
        data: Option<&str>,
        optional: bool,
    ) {
        self.push(
            layer,
            what,
            Op::Mount {
                source: source.map(cstring),
                target: cstring(target),
                fstype: fstype.map(text),
                flags,
                data: data.map(text),
            },
            optional,
        );
    }

    /// A bind mount, made read-only (or just `nosuid,nodev` when `writable`).
    pub(crate) fn bind(&mut self, source: &Path, target: &Path, writable: bool, recursive: bool) {
        let rec = if recursive { libc::MS_REC } else { 0 };
        self.mount(
            Layer::Filesystem,
            format!("bind {} at {}", source.display(), target.display()),
            Some(source),
            target,
            None,
            libc::MS_BIND | rec,
            None,
            false,
        );
        self.remount(source, target, writable);
    }

    pub(crate) fn remount(&mut self, source: &Path, target: &Path, writable: bool) {
        let readonly = if writable { 0 } else { libc::MS_RDONLY };
        self.mount(
            Layer::Filesystem,
            format!(
                "remount {} {}",
                target.display(),
                if writable {
                    "nosuid,nodev"
                } else {
                    "read-only"
                }
            ),
            None,
            target,
            None,
            libc::MS_BIND
                | libc::MS_REMOUNT
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | readonly
                | locked_flags(source),
            None,
            false,
        );
    }

    pub(crate) fn pivot(&mut self, root: &Path) {
        self.push(
            Layer::MountNamespace,
            format!("pivot_root into {}", root.display()),
            Op::PivotRoot {
                path: cstring(root),
            },
            false,
        );
    }
}

/// Overlayfs mount options: `lower` over `seed` (the lowest layer, [`crate::ViewSpec::seed`]).
/// `userxattr` when mounted inside a user namespace (the kernel refuses `trusted.*` xattrs
/// there).
pub(crate) fn overlay_options(
    lower: &Path,
    seed: Option<&Path>,
    upper: &Path,
    work: &Path,
    in_user_namespace: bool,
) -> String {
    format!(
        "lowerdir={}{},upperdir={},workdir={}{}",
        lower.display(),
        seed.map(|seed| format!(":{}", seed.display()))
            .unwrap_or_default(),
        upper.display(),
        work.display(),
        if in_user_namespace { ",userxattr" } else { "" }
    )
}

/// The steps of a command's own mount namespace: a `/proc` of its pid namespace, with the
/// kernel-tuning parts read-only.
pub(crate) fn proc_steps() -> Steps {
    let mut steps = Steps::default();
    let proc_path = Path::new("/proc");
    steps.mount(
        Layer::PidNamespace,
        "mount /proc of the command's pid namespace".into(),
        Some(Path::new("proc")),
        proc_path,
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
        false,
    );
    for part in ["sys", "sysrq-trigger", "irq", "bus"] {
        let path = proc_path.join(part);
        steps.mount(
            Layer::Filesystem,
            format!("bind {}", path.display()),
            Some(&path),
            &path,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
            true,
        );
        steps.mount(
            Layer::Filesystem,
            format!("make {} read-only", path.display()),
            None,
            &path,
            None,
            libc::MS_BIND
                | libc::MS_REMOUNT
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC,
            None,
            true,
        );
    }
    steps
}
