//! `warden serve` (API + workers, one per `WARDEN_HOME`) and `warden worker` (workers only,
//! against a shared Postgres): reads the environment, takes the home lock, opens the store and
//! hands over to `warden_api::serve` (or, for workers only, `warden_service::compose`). Prints
//! `warden: listening on http://ADDR` on stderr once the API accepts connections. A `warden`
//! built without the `serve` feature has no HTTP API: `warden serve` says so.

use std::sync::Arc;

use warden_config::{Env, ProcessEnv};
use warden_service::compose::{self as service, ServeUsageError};
use warden_service::config::Loaded;
#[cfg(feature = "serve")]
use warden_service::config::ServiceConfig;

use crate::usage;

fn usage_or(error: anyhow::Error) -> anyhow::Error {
    if error.downcast_ref::<ServeUsageError>().is_some() {
        usage(error)
    } else {
        error
    }
}

async fn open_store(url: &str) -> anyhow::Result<Arc<dyn service::Store>> {
    let store = service::open_store(url).await.map_err(usage)?;
    for notice in store.notices() {
        warden_service::say!("warden: {notice}");
    }
    Ok(store)
}

#[cfg(not(feature = "serve"))]
pub async fn serve(_config: Loaded) -> anyhow::Result<u8> {
    Err(usage(anyhow::anyhow!(
        "this warden was built without the HTTP API (cargo feature `serve`): `warden serve` is \
         not available; `warden worker` runs workers without it"
    )))
}

#[cfg(feature = "serve")]
pub async fn serve(loaded: Loaded) -> anyhow::Result<u8> {
    use anyhow::Context;
    let env = ProcessEnv;
    refuse_problems(&loaded.service)?;
    let Loaded {
        engine: config,
        service: service_config,
        ..
    } = loaded;
    let _lock = warden_service::lock::lock_home(&config.home).map_err(usage)?;
    let (tokens, token_file) =
        warden_api::serve::api_tokens(env.var("WARDEN_API_TOKENS"), &config.home)
            .map_err(usage_or)?;
    let address = warden_api::serve::listen_address(env.var("WARDEN_LISTEN")).map_err(usage_or)?;
    let url = service::database_url(env.var("WARDEN_DATABASE_URL"), &config.home);
    let store = open_store(&url).await?;
    let worker_name = service::home_worker_name(&config.home)?;
    let services = service::services(Arc::new(config), Arc::new(service_config), store)
        .await
        .map_err(usage_or)?;
    let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (another program listens there: stop it, or set WARDEN_LISTEN to another \
                 address, e.g. WARDEN_LISTEN=127.0.0.1:8788)"
        } else {
            " (set WARDEN_LISTEN to an address this machine has)"
        };
        usage(anyhow::Error::new(e).context(format!("cannot listen on {address}{hint}")))
    })?;
    let local = listener.local_addr().context("no local address")?;
    // Listening for SIGTERM/SIGINT starts now, before anything says the server is up.
    let shutdown = service::shutdown_signal();
    if let Some(path) = token_file {
        warden_service::say!(
            "warden: WARDEN_API_TOKENS is not set; the admin token is in {}",
            path.display()
        );
    }
    warden_service::say!(
        "warden: {} concurrent runs, {} store, model {}",
        services.service_config.serve.workers,
        services.store.backend(),
        match &services.model_missing {
            None => services.model.name(),
            Some(_) => "none (no WARDEN_MODEL: only baseline-mode maintenance runs; questions, \
                        changes and model-mode maintenance are refused)"
                .to_string(),
        }
    );
    warden_service::say!("warden: listening on http://{local}");
    if services.service_config.serve.web.enabled {
        warden_service::say!(
            "warden: web console at http://{local}/ (sign in with an API token, or set a \
             password with `warden web passwd NAME`)"
        );
    }
    warden_api::serve::serve(services, tokens, listener, worker_name, shutdown).await?;
    warden_service::say!("warden: stopped");
    Ok(0)
}

/// Refuses to start, before anything listens, with every secret the configured interfaces
/// need and the environment lacks (all of them at once, exit 2).
#[cfg(feature = "serve")]
fn refuse_problems(config: &ServiceConfig) -> anyhow::Result<()> {
    let problems = config.problems();
    if problems.is_empty() {
        return Ok(());
    }
    Err(usage(anyhow::anyhow!(
        "warden serve cannot start ({} problem{}; `warden doctor` lists them too):\n  - {}",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        problems.join("\n  - ")
    )))
}

pub async fn worker(loaded: Loaded) -> anyhow::Result<u8> {
    let env = ProcessEnv;
    let Some(url) = env.var("WARDEN_DATABASE_URL") else {
        return Err(usage(anyhow::anyhow!(
            "warden worker needs a shared database: set WARDEN_DATABASE_URL=postgres://…"
        )));
    };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(usage(anyhow::anyhow!(
            "warden worker needs a shared Postgres database (WARDEN_DATABASE_URL=postgres://…); \
             with SQLite run `warden serve`, which includes the workers"
        )));
    }
    let store = open_store(&url).await?;
    let services = service::services(Arc::new(loaded.engine), Arc::new(loaded.service), store)
        .await
        .map_err(usage_or)?;
    let name = service::process_worker_name();
    let shutdown = service::shutdown_signal();
    warden_service::say!(
        "warden: worker {name}: {} concurrent runs",
        services.service_config.serve.workers
    );
    service::work(services, name, shutdown).await?;
    warden_service::say!("warden: stopped");
    Ok(0)
}
