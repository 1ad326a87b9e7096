//! Which backend a task's sandbox views come from: the local ones through
//! `warden_sandbox::select`, `kubernetes` through `warden-kubernetes` with the `[kubernetes]`
//! settings. Never a fallback: what is configured is established or refused.

use crate::config::Config;
use std::sync::Arc;
use warden_sandbox::{Backend, Sandbox, SandboxError};

/// The configured backend, ready to open views.
pub fn select(config: &Config) -> Result<Arc<dyn Sandbox>, SandboxError> {
    match config.sandbox.backend {
        Backend::Kubernetes => Ok(Arc::new(warden_kubernetes::KubernetesSandbox::connect(
            &config.kubernetes,
        )?)),
        backend => warden_sandbox::select(backend, &config.sandbox.config),
    }
}

/// At a server's or worker's start-up, with the kubernetes backend: deletes the claims this
/// Warden (`[kubernetes] owner`) left behind — it holds none yet. Their names; nothing for
/// the other backends.
pub fn reap_orphans(config: &Config) -> Result<Vec<String>, SandboxError> {
    match config.sandbox.backend {
        Backend::Kubernetes => {
            warden_kubernetes::KubernetesSandbox::connect(&config.kubernetes)?.reap_orphans()
        }
        Backend::Linux | Backend::Gvisor | Backend::Local => Ok(Vec::new()),
    }
}

/// With the kubernetes backend, what `warden doctor` asks the cluster, changing nothing: how
/// many claims of this Warden's owner it lists ([`warden_kubernetes::KubernetesSandbox::probe`]).
/// `None` for the other backends, whose layers are probed on this machine.
pub fn probe_cluster(config: &Config) -> Option<Result<usize, SandboxError>> {
    match config.sandbox.backend {
        Backend::Kubernetes => Some(
            warden_kubernetes::KubernetesSandbox::connect(&config.kubernetes)
                .and_then(|sandbox| sandbox.probe()),
        ),
        Backend::Linux | Backend::Gvisor | Backend::Local => None,
    }
}
