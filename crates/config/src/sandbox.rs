//! `[sandbox]`, `[storage]`, `[kubernetes]` and `[egress]`: where commands run, what they may
//! take, and what `prepare` may reach.

use serde::Deserialize;
use std::path::PathBuf;

/// Where the agent's `shell` commands run.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// `linux` (default), `gvisor`, or `local` (no isolation); `WARDEN_SANDBOX` overrides.
    pub backend: Option<String>,
    /// Layers run without, explicitly (only the cgroup layers may be listed, e.g. on a host
    /// without delegated cgroups); everything else is required.
    #[serde(default)]
    pub disabled_layers: Vec<String>,
    /// The `runsc` binary for the gVisor backend.
    pub runsc: Option<PathBuf>,
    /// Memory limit of one shell command, in MiB.
    pub memory_mib: Option<u64>,
    /// Process limit of one shell command.
    pub pids: Option<u32>,
    /// Writable space of one task's view (upper layer, `/tmp`, `/dev/shm` together), in MiB;
    /// default 1024. Past it, writes fail with `ENOSPC`.
    pub disk_mib: Option<u64>,
    /// Files and directories in that space; default 100000.
    pub disk_inodes: Option<u64>,
    /// Host directories shown read-only in every sandbox at the same path (`~` is the
    /// Warden user's home); their `bin` folders go on `PATH`.
    #[serde(default)]
    pub mounts: Vec<String>,
    /// Toolchain presets: `rust`, `node`, `python`, `go` (see `warden_engine::toolchain`).
    #[serde(default)]
    pub toolchains: Vec<String>,
    /// Commands run before a change task's agent with the repository's cache writable.
    #[serde(default)]
    pub prepare: Vec<String>,
    /// The older name of `[egress] upstream`: an HTTP proxy (`host:port`) that Warden's egress
    /// proxy chains to.
    pub prepare_proxy: Option<String>,
    /// Warm checks (default true): a toolchain's build outputs (`target/` for `rust`), built
    /// once from the base tree by the first check and kept per key, are layered under every
    /// later check view copy-on-write, so a check after an edit builds incrementally.
    pub warm_checks: Option<bool>,
    /// The only directories a registered repository's own mounts (`repos add --mount`) may
    /// lie under; empty (the default): repositories cannot add mounts.
    #[serde(default)]
    pub repo_mount_roots: Vec<String>,
}

/// `[storage]`: how large snapshots may be and how much mirrors, snapshots and dependency
/// caches may take.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSection {
    /// Largest snapshot (file contents), in MiB; default 1024. Larger: `quota_exceeded`.
    pub snapshot_max_mib: Option<u64>,
    /// Most files and directories in one snapshot; default 100000.
    pub snapshot_max_files: Option<u64>,
    /// Mirrors and snapshots together, in bytes; default 20 GiB. `warden serve` evicts unused
    /// ones past it (periodically and before writing a snapshot); `warden gc` on demand.
    pub max_bytes: Option<u64>,
    /// Anything used within this many minutes is never evicted; default 60.
    pub keep_recent_mins: Option<u64>,
}

/// The file's `[kubernetes]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSection {
    /// The sandboxes' namespace; default `warden-sandboxes`.
    pub namespace: Option<String>,
    /// The `SandboxTemplate`; default `warden`.
    pub template: Option<String>,
    /// The `SandboxWarmPool` tasks claim from; default `warden`.
    pub warm_pool: Option<String>,
    /// Pods kept warm; default 2.
    pub warm_pool_replicas: Option<u32>,
    /// The sandbox container's image (toolchains, bash, GNU tar, find, coreutils).
    pub image: Option<String>,
    /// The gVisor `RuntimeClass`; default `gvisor`.
    pub runtime_class: Option<String>,
    /// CPU of one sandbox in thousandths of a core; default 2000.
    pub cpu_millis: Option<u32>,
    /// `in-cluster` (default without `kubeconfig`) or `kubeconfig`.
    pub credentials: Option<String>,
    /// The kubeconfig file (`~` is the Warden user's home); default `KUBECONFIG`, else
    /// `~/.kube/config`.
    pub kubeconfig: Option<String>,
    /// The kubeconfig context; default its `current-context`.
    pub context: Option<String>,
    /// An idle sandbox expires after this many seconds; default 600.
    pub idle_timeout_secs: Option<u64>,
    /// How long a claim may take to be bound to a ready pod; default 120.
    pub claim_timeout_secs: Option<u64>,
    /// Warden's service account (the rendered RoleBinding's subject); default `warden`.
    pub service_account: Option<String>,
    /// Warden's own namespace; default `warden`.
    pub warden_namespace: Option<String>,
    /// The port of Warden's egress proxy, the one destination sandboxes may reach.
    pub egress_proxy_port: Option<u16>,
    /// This Warden's name on its claims (a worker's); default the host name.
    pub owner: Option<String>,
}

/// `[egress]`: what a change's `prepare` step (and only it) reaches through Warden's egress
/// proxy, on top of the toolchain presets' registries (see `warden_engine::egress`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSection {
    /// More hosts (`host`, `*.domain`, `host:port`), reached at public addresses only.
    #[serde(default)]
    pub allow: Vec<String>,
    /// The operator's own hosts (a registry mirror on the LAN): any address, IP literals
    /// included.
    #[serde(default)]
    pub allow_private: Vec<String>,
    /// `false`: the presets' and `[maintain]`'s registries are not admitted, only `allow` and
    /// `allow_private` (default true).
    pub presets: Option<bool>,
    /// An HTTP proxy (`host:port`) that connects for Warden once Warden admitted the host.
    pub upstream: Option<String>,
    /// Bytes one prepare command may move through the proxy, in MiB (default 4096).
    pub max_mib: Option<u64>,
}
