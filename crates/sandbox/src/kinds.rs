//! The sandbox's small vocabulary, shared by its specifications, errors, output collection and
//! system calls: which backend, which layer of isolation, which output stream. A leaf: it
//! imports nothing of the crate, so everything else may import it.

/// An isolation backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Namespaces, Landlock, seccomp, cgroups and rlimits, set up natively.
    Linux,
    /// gVisor's user-space kernel through `runsc`.
    Gvisor,
    /// No isolation at all: for development, only when chosen explicitly.
    Local,
    /// gVisor pods claimed from an agent-sandbox warm pool; implemented by
    /// `warden-kubernetes`, which the engine composes (this crate's [`crate::select`]
    /// refuses it).
    Kubernetes,
}

impl Backend {
    /// The stable name (`WARDEN_SANDBOX`, result labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Linux => "linux",
            Backend::Gvisor => "gvisor",
            Backend::Local => "local",
            Backend::Kubernetes => "kubernetes",
        }
    }

    /// Parses [`Backend::as_str`] back.
    pub fn from_name(name: &str) -> Option<Backend> {
        match name {
            "linux" => Some(Backend::Linux),
            "gvisor" => Some(Backend::Gvisor),
            "local" => Some(Backend::Local),
            "kubernetes" => Some(Backend::Kubernetes),
            _ => None,
        }
    }

    /// Whether commands run isolated from the host (false only for `local`).
    pub fn isolates(self) -> bool {
        match self {
            Backend::Linux | Backend::Gvisor | Backend::Kubernetes => true,
            Backend::Local => false,
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One layer of isolation; errors and probe reports name the layer that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The operating system itself (wrong kernel or architecture).
    Kernel,
    /// Starting processes, pipes and the like.
    Process,
    /// A user namespace mapping the Warden user to the sandbox user.
    UserNamespace,
    /// A private mount namespace with a new root.
    MountNamespace,
    /// A pid namespace and a fresh `/proc`.
    PidNamespace,
    /// A network namespace holding only `lo`.
    NetNamespace,
    /// An IPC namespace.
    IpcNamespace,
    /// A UTS (hostname) namespace.
    UtsNamespace,
    /// A cgroup namespace.
    CgroupNamespace,
    /// The sandbox file system: tmpfs root, read-only system and snapshot binds, `/dev`, `/etc`.
    Filesystem,
    /// The copy-on-write layer of writable views.
    Overlayfs,
    /// Dropping capabilities (bounding set, ambient set).
    Capabilities,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs,
    /// Landlock file-system (and, where the ABI has them, network and scope) rules.
    Landlock,
    /// The seccomp system-call filter.
    Seccomp,
    /// The memory cgroup controller.
    CgroupMemory,
    /// The pids cgroup controller.
    CgroupPids,
    /// The cpu cgroup controller.
    CgroupCpu,
    /// Resource limits (`setrlimit`).
    Rlimits,
    /// An external runtime (`runsc` for gVisor).
    Runtime,
}

impl Layer {
    /// The stable name used in errors, probe reports and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Kernel => "kernel",
            Layer::Process => "process",
            Layer::UserNamespace => "user_namespace",
            Layer::MountNamespace => "mount_namespace",
            Layer::PidNamespace => "pid_namespace",
            Layer::NetNamespace => "net_namespace",
            Layer::IpcNamespace => "ipc_namespace",
            Layer::UtsNamespace => "uts_namespace",
            Layer::CgroupNamespace => "cgroup_namespace",
            Layer::Filesystem => "filesystem",
            Layer::Overlayfs => "overlayfs",
            Layer::Capabilities => "capabilities",
            Layer::NoNewPrivs => "no_new_privs",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::CgroupMemory => "cgroup_memory",
            Layer::CgroupPids => "cgroup_pids",
            Layer::CgroupCpu => "cgroup_cpu",
            Layer::Rlimits => "rlimits",
            Layer::Runtime => "runtime",
        }
    }

    /// Parses [`Layer::as_str`] back (configuration files name layers this way).
    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL
            .iter()
            .copied()
            .find(|layer| layer.as_str() == name)
    }

    /// Whether a configuration may disable this layer. Only resource accounting may go (rlimits
    /// stay as the backstop); no confinement layer can be switched off.
    pub fn may_be_disabled(self) -> bool {
        matches!(
            self,
            Layer::CgroupMemory | Layer::CgroupPids | Layer::CgroupCpu
        )
    }

    /// Every layer, in set-up order.
    pub const ALL: [Layer; 20] = [
        Layer::Kernel,
        Layer::Process,
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
        Layer::Landlock,
        Layer::Seccomp,
        Layer::CgroupMemory,
        Layer::CgroupPids,
        Layer::CgroupCpu,
        Layer::Rlimits,
        Layer::Runtime,
    ];
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}
