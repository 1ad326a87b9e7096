//! `warden serve` (API + workers, one per `WARDEN_HOME`) and `warden worker` (workers only,
//! against a shared Postgres): reads the environment, takes the home lock, opens the store and
//! hands over to `warden_server::serve`. Prints `warden: listening on http://ADDR` on stderr once
//! the API accepts connections.

use std::sync::Arc;

use anyhow::Context;
use warden_server::config::{Config, Env, ProcessEnv};
use warden_server::serve::{self as service, ServeUsageError};

use crate::usage;

fn usage_or(error: anyhow::Error) -> anyhow::Error {
    if error.downcast_ref::<ServeUsageError>().is_some() {
        usage(error)
    } else {
        error
    }
}

async fn open_store(url: &str) -> anyhow::Result<Arc<dyn warden_server::serve::Store>> {
    let store = service::open_store(url).await.map_err(usage)?;
    for notice in store.notices() {
        eprintln!("warden: {notice}");
    }
    Ok(store)
}

pub async fn serve(config: Config) -> anyhow::Result<u8> {
    let env = ProcessEnv;
    let _lock = warden_server::lock::lock_home(&config.home).map_err(usage)?;
    let (tokens, token_file) =
        service::api_tokens(env.var("WARDEN_API_TOKENS"), &config.home).map_err(usage_or)?;
    let address = service::listen_address(env.var("WARDEN_LISTEN")).map_err(usage_or)?;
    let url = service::database_url(env.var("WARDEN_DATABASE_URL"), &config.home);
    let store = open_store(&url).await?;
    let worker_name = service::home_worker_name(&config.home)?;
    let services = service::services(Arc::new(config), store)
        .await
        .map_err(usage_or)?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| usage(anyhow::Error::new(e).context(format!("cannot listen on {address}"))))?;
    let local = listener.local_addr().context("no local address")?;
    if let Some(path) = token_file {
        eprintln!(
            "warden: WARDEN_API_TOKENS is not set; the admin token is in {}",
            path.display()
        );
    }
    eprintln!(
        "warden: {} concurrent runs, {} store, model {}",
        services.config.serve.workers,
        services.store.backend(),
        services.model.name()
    );
    eprintln!("warden: listening on http://{local}");
    service::serve(
        services,
        tokens,
        listener,
        worker_name,
        service::shutdown_signal(),
    )
    .await?;
    eprintln!("warden: stopped");
    Ok(0)
}

pub async fn worker(config: Config) -> anyhow::Result<u8> {
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
    let services = service::services(Arc::new(config), store)
        .await
        .map_err(usage_or)?;
    let name = service::process_worker_name();
    eprintln!(
        "warden: worker {name}: {} concurrent runs",
        services.config.serve.workers
    );
    service::work(services, name, service::shutdown_signal()).await?;
    eprintln!("warden: stopped");
    Ok(0)
}
