//! What the kubernetes backend is configured with (`[kubernetes]` in `warden.toml`, resolved by
//! `warden-engine`): where the sandboxes live, the template and warm pool they come from, how
//! Warden reaches the API server, and how long an idle sandbox lives.

use std::path::PathBuf;
use std::time::Duration;

/// The resolved `[kubernetes]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// The namespace of the claims, sandboxes and pods (and of the Role Warden gets there).
    pub namespace: String,
    /// The `SandboxTemplate` the warm pool's pods are made from.
    pub template: String,
    /// The `SandboxWarmPool` a task's `SandboxClaim` draws from.
    pub warm_pool: String,
    /// Pods kept warm (`SandboxWarmPool.spec.replicas`).
    pub warm_pool_replicas: u32,
    /// The sandbox container's image: it brings the toolchains, `bash`, GNU `tar`, `find` and
    /// coreutils (nothing of the host is mounted into a pod).
    pub image: String,
    /// The `RuntimeClass` of the pods; its handler is `runsc` (gVisor).
    pub runtime_class: String,
    /// CPU of one sandbox, in thousandths of a core (requests and limits).
    pub cpu_millis: u32,
    /// How Warden authenticates to the API server.
    pub credentials: Credentials,
    /// A claim nothing touched for this long expires (its `lifecycle.shutdownTime` is pushed
    /// forward by the commands run in it).
    pub idle_timeout: Duration,
    /// How long Warden waits for a claim to be bound to a ready pod before the task fails
    /// with `sandbox_error`.
    pub claim_timeout: Duration,
    /// The service account Warden runs as (the subject of the rendered RoleBinding).
    pub service_account: String,
    /// The namespace Warden runs in (the service account's, and the egress proxy's).
    pub warden_namespace: String,
    /// The port of Warden's egress proxy, when `prepare` may reach it from a sandbox: the
    /// template's network policy then allows that one destination (Warden's pods) and
    /// nothing else. `None`: no egress at all.
    pub egress_proxy_port: Option<u16>,
    /// Who this Warden is among the processes sharing the namespace (a worker's name): its
    /// claims carry it as a label, and at start-up it deletes the ones it left behind.
    pub owner: String,
}

/// How Warden authenticates to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// The pod's own service account: `KUBERNETES_SERVICE_HOST`/`_PORT`, the token and CA under
    /// `/var/run/secrets/kubernetes.io/serviceaccount/` (the token is read again for every
    /// connection, since the kubelet rotates it).
    InCluster,
    /// A kubeconfig file (JSON or the YAML kubectl writes) and, optionally, a context other
    /// than its `current-context`.
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The context; `None`: the file's `current-context`.
        context: Option<String>,
    },
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            namespace: "warden-sandboxes".into(),
            template: "warden".into(),
            warm_pool: "warden".into(),
            warm_pool_replicas: 2,
            image: "docker.io/library/debian:trixie-slim".into(),
            runtime_class: "gvisor".into(),
            cpu_millis: 2000,
            credentials: Credentials::InCluster,
            idle_timeout: Duration::from_secs(600),
            claim_timeout: Duration::from_secs(120),
            service_account: "warden".into(),
            warden_namespace: "warden".into(),
            egress_proxy_port: None,
            owner: "warden".into(),
        }
    }
}

impl KubernetesConfig {
    /// Checks names against what the API server accepts (DNS labels of at most 63
    /// characters, label values), so a wrong name stops start-up instead of every task.
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("namespace", &self.namespace),
            ("template", &self.template),
            ("warm_pool", &self.warm_pool),
            ("runtime_class", &self.runtime_class),
            ("service_account", &self.service_account),
            ("warden_namespace", &self.warden_namespace),
        ] {
            if !crate::names::is_dns_label(value) {
                return Err(format!(
                    "kubernetes.{key} {value:?} must be a DNS label: at most 63 lowercase \
                     letters, digits and '-', starting and ending with a letter or digit"
                ));
            }
        }
        if self.owner.is_empty() || !crate::names::is_label_value(&self.owner) {
            return Err(format!(
                "kubernetes.owner {:?} must be a label value: at most 63 letters, digits, '-', \
                 '_' and '.', starting and ending with a letter or digit",
                self.owner
            ));
        }
        if self.image.trim().is_empty() || self.image.chars().any(char::is_whitespace) {
            return Err(format!(
                "kubernetes.image {:?} is not an image reference",
                self.image
            ));
        }
        if self.cpu_millis == 0 {
            return Err("kubernetes.cpu_millis must be at least 1".into());
        }
        if self.idle_timeout < Duration::from_secs(60) {
            return Err("kubernetes.idle_timeout_secs must be at least 60".into());
        }
        if self.claim_timeout.is_zero() {
            return Err("kubernetes.claim_timeout_secs must be at least 1".into());
        }
        Ok(())
    }
}
