//! The worker side of `warden serve` and `warden worker`, composed: the store from
//! `WARDEN_DATABASE_URL` (default `sqlite://$WARDEN_HOME/warden.db`), the model, the repository
//! store and the workers' shared services, and the loop that runs only workers. The HTTP API
//! is added on top by `warden_api::serve`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::{watch, Notify};
pub use warden_store::Store;

use crate::config::ServiceConfig;
use crate::worker::{self, Services, WorkerOptions};
use warden_engine::config::Config;
use warden_engine::question;

/// `WARDEN_DATABASE_URL`, or the embedded SQLite database under `home`.
pub fn database_url(explicit: Option<String>, home: &Path) -> String {
    explicit.unwrap_or_else(|| format!("sqlite://{}", home.join("warden.db").display()))
}

/// Opens (creating and migrating) the store `url` names.
pub async fn open_store(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    warden_store::open(url)
        .await
        .context("cannot open the database")
}

/// A setup problem the operator must fix (exit 2), as opposed to a failure while running.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ServeUsageError(pub String);

/// Writes `text` to `path`, readable by this user only (mode 0600).
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

/// This home's stable worker identity (created once in `home/worker-id`).
pub fn home_worker_name(home: &Path) -> anyhow::Result<String> {
    let path = home.join("worker-id");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        if !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(format!("serve-{id}"));
        }
    }
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let id = hex::encode(random);
    write_private(&path, &id)?;
    Ok(format!("serve-{id}"))
}

pub use crate::worker::process_worker_name;

/// Everything the workers share, built from the configuration.
pub async fn services(
    config: Arc<Config>,
    service_config: Arc<ServiceConfig>,
    store: Arc<dyn Store>,
) -> anyhow::Result<Arc<Services>> {
    // No model configured at all: a server for baseline-mode maintenance (schedules, API);
    // its front door refuses what needs a model. A model configured wrongly stops the start.
    let (model, model_missing) = match question::build_model(&config) {
        Ok(model) => (model, None),
        Err(error) if matches!(config.model, warden_engine::config::ModelChoice::Missing) => {
            let reason = error.to_string();
            (
                Arc::new(crate::worker::NoModel(reason.clone())) as Arc<dyn warden_runtime::Model>,
                Some(reason),
            )
        }
        Err(error) => return Err(ServeUsageError(error.to_string()).into()),
    };
    // Claims an earlier life of this Warden left on the cluster: no task of it holds one now.
    if config.sandbox.backend == warden_sandbox::Backend::Kubernetes {
        let reaping = config.clone();
        match tokio::task::spawn_blocking(move || {
            warden_engine::sandbox_backend::reap_orphans(&reaping)
        })
        .await?
        {
            Ok(reaped) if reaped.is_empty() => {}
            Ok(reaped) => tracing::info!(claims = ?reaped, "deleted sandbox claims left behind"),
            Err(error) => tracing::warn!(%error, "cannot reap sandbox claims left behind"),
        }
    }
    let home = config.home.clone();
    let storage = config.storage;
    let repos = tokio::task::spawn_blocking(move || storage.open_repos(&home))
        .await?
        .context("cannot open the repository store")?;
    // Every event the workers store reaches this process's SSE subscribers at once.
    let hub = crate::hub::instrument(&store, crate::hub::HubOptions::default());
    Ok(Arc::new(Services {
        model_missing,
        hub,
        // The service's secrets are in `config.redactor()` already when both came from one
        // `config::load`; added again here so a mismatched pair cannot drop them.
        redactor: config.redactor().with_secrets(service_config.secrets()),
        config,
        service_config,
        store,
        repos,
        model,
        wake: Arc::new(Notify::new()),
        running: Arc::default(),
    }))
}

/// Resolves when SIGTERM or SIGINT arrives.
///
/// The listeners are registered when this is called, not when the future is first polled: a
/// signal that arrives in between (say, right after the start-up lines were printed) is not
/// lost. Must be called inside the runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let terminate = signal(SignalKind::terminate()).ok();
    let interrupt = signal(SignalKind::interrupt()).ok();
    async move {
        let wait = |listener: Option<tokio::signal::unix::Signal>| async move {
            match listener {
                Some(mut listener) => {
                    listener.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(terminate) => {}
            _ = wait(interrupt) => {}
        }
    }
}

/// Runs only the workers until `shutdown` resolves (`warden worker`).
pub async fn work(
    services: Arc<Services>,
    worker_name: String,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop, stopped) = watch::channel(false);
    let options = WorkerOptions::from_config(worker_name, &services.service_config);
    // The in-process tasks of this home share its mirrors.
    let local = crate::local::database_url(&services.config.home);
    crate::storage::spawn_eviction(&services, vec![local], stopped.clone());
    let workers = tokio::spawn(worker::run_workers(services, options, stopped));
    shutdown.await;
    crate::say!("warden: shutting down: no new tasks are claimed");
    let _ = stop.send(true);
    workers.await.context("the workers failed")?;
    Ok(())
}
