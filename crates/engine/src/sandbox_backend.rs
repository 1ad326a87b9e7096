//! Which backend a task's sandbox views come from: the local ones through
//! `warden_sandbox::select`, `kubernetes` through `warden-kubernetes` with the `[kubernetes]`
//! settings. Never a fallback: what is configured is established or refused.

use crate::config::Config;
use std::sync::Arc;
use warden_sandbox::{Backend, Sandbox, SandboxError};

pub use warden_kubernetes::ClaimSummary;

/// The configured backend, ready to open the views of `task` (the kubernetes backend labels
/// their claims with it).
pub fn select(config: &Config, task: &str) -> Result<Arc<dyn Sandbox>, SandboxError> {
    match config.sandbox.backend {
        Backend::Kubernetes => Ok(Arc::new(
            warden_kubernetes::KubernetesSandbox::connect(&config.kubernetes)?.for_task(task),
        )),
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

/// What `warden doctor` checks of the kubernetes backend, changing nothing: `settings` and
/// their credentials, read as a task reads them, and — `online` — the claims of this Warden's
/// owner the API server lists, with their tasks ([`warden_kubernetes::KubernetesSandbox::probe`];
/// `None` offline, when it is not asked).
pub fn probe_kubernetes(
    settings: &warden_kubernetes::KubernetesConfig,
    online: bool,
) -> Result<Option<Vec<ClaimSummary>>, SandboxError> {
    let sandbox = warden_kubernetes::KubernetesSandbox::connect(settings)?;
    if online {
        sandbox.probe().map(Some)
    } else {
        Ok(None)
    }
}
