//! `warden serve`, composed: the workers' services (`warden_service::compose`: the store from
//! `WARDEN_DATABASE_URL`, the model, the repository store), the workers, callback delivery, the
//! Telegram bot when `[telegram]` is configured, the Slack app when `[slack]` is, the GitHub webhook when `[github.webhook]` is, the `[[schedules]]` of maintenance, and the HTTP API on `WARDEN_LISTEN`. This is
//! the composition root; nothing in the crate refers to it. `serve` holds the `WARDEN_HOME`
//! lock, so its worker name is stable across restarts and the runs a killed predecessor left open are interrupted
//! at once instead of waiting for their leases. The API's connections are held by
//! [`crate::connections`] (a cap from the open-file limit, raised to its hard limit at start,
//! header and keep-alive timeouts). Shutdown on SIGTERM/SIGINT: stop accepting and claiming,
//! let runs finish within the grace period, release the rest, return.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;
use warden_service::compose::{write_private, ServeUsageError};
use warden_service::tasks::TaskService;
use warden_service::worker::{self, Services, WorkerOptions};

use crate::connections::{self, ConnectionLimits};
use crate::routes::{self as api, ApiState, HostPolicy, Tokens};

/// Where `serve` listens unless `WARDEN_LISTEN` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// The API tokens: `WARDEN_API_TOKENS`, or else one admin token generated once and kept in
/// `home/api-token` (mode 0600), whose path is returned for the start-up message.
pub fn api_tokens(
    explicit: Option<String>,
    home: &Path,
) -> anyhow::Result<(Tokens, Option<std::path::PathBuf>)> {
    if let Some(text) = explicit {
        let tokens = Tokens::parse(&text).map_err(ServeUsageError)?;
        if tokens.is_empty() {
            return Err(ServeUsageError("WARDEN_API_TOKENS names no token".into()).into());
        }
        return Ok((tokens, None));
    }
    let path = home.join("api-token");
    let token = match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().len() >= api::MIN_BOOTSTRAP_TOKEN_LEN => text.trim().to_string(),
        _ => {
            let mut random = [0u8; 24];
            getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            let token = format!("wdn_{}", hex::encode(random));
            write_private(&path, &token)?;
            token
        }
    };
    let tokens = Tokens::parse(&format!("admin:admin:{token}")).map_err(ServeUsageError)?;
    Ok((tokens, Some(path)))
}

/// Runs the API on `listener` and the workers until `shutdown` resolves, then drains both.
pub async fn serve(
    services: Arc<Services>,
    tokens: Tokens,
    listener: tokio::net::TcpListener,
    worker_name: String,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let interrupted = services
        .store
        .interrupt_worker_runs(&worker_name)
        .await
        .context("cannot recover the runs of the previous instance")?;
    for requeued in &interrupted {
        tracing::info!(run = %requeued.run, status = ?requeued.status, "run of the previous instance interrupted");
    }
    tracing::info!(
        workers = services.service_config.serve.workers,
        store = services.store.backend(),
        "serving the API and running the workers"
    );
    let callback_worker = format!("{worker_name}-callbacks");
    let (stop, stopped) = watch::channel(false);
    let options = WorkerOptions::from_config(worker_name, &services.service_config);
    let workers = tokio::spawn(worker::run_workers(
        Arc::clone(&services),
        options,
        stopped.clone(),
    ));
    let serve_config = &services.service_config.serve;
    let open_files = connections::raise_open_files_limit();
    let computed_cap = connections::connection_cap(open_files, serve_config.workers);
    let max_connections = match serve_config.max_connections {
        Some(max) if max > computed_cap => {
            tracing::warn!(
                max,
                computed_cap,
                open_files,
                "serve.max_connections is above what the open-file limit allows; using the latter"
            );
            computed_cap
        }
        Some(max) => max,
        None => computed_cap,
    };
    let limits = ConnectionLimits {
        max_connections,
        header_timeout: serve_config.header_timeout,
        keep_alive: serve_config.keep_alive,
    };
    tracing::info!(max_connections, open_files, "connection cap");
    // The in-process tasks of this home share its mirrors.
    let local = warden_service::local::database_url(&services.config.home);
    warden_service::storage::spawn_eviction(&services, vec![local], stopped.clone());
    // The front door every interface calls; the API is one of them.
    let tasks = TaskService::new(Arc::clone(&services.store), Arc::clone(&services.wake))
        .with_repos(services.repos.clone(), services.redactor.clone())
        .with_running(Arc::clone(&services.running))
        .with_callbacks(services.service_config.callbacks.clone())
        .with_repo_mount_roots(services.config.sandbox.toolchains.repo_mount_roots.clone())
        .with_model_missing(services.model_missing.clone())
        .with_warming();
    // Where an interface that cannot start is reported: the other chats.
    let alerts = warden_service::chat::Alerts::new(Arc::clone(&services.store), {
        let mut destinations =
            warden_service::telegram::alert_destinations(services.service_config.telegram.as_ref());
        destinations.extend(warden_service::slack::alert_destinations(
            services.service_config.slack.as_ref(),
        ));
        destinations
    });
    // GitHub's credentials, checked once: a refusal is reported like a chat's.
    let _github_checked =
        warden_service::github::check_at_start(&services.service_config.github, alerts.clone());
    // The Telegram bot, when configured: polling on its own, or its webhook among the routes.
    let telegram = warden_service::telegram::spawn(
        services.service_config.telegram.as_ref(),
        tasks.clone(),
        alerts.clone(),
        stopped.clone(),
    )
    .context("cannot start the Telegram bot")?;
    let (telegram_bot, telegram) = telegram.unzip();
    // The Slack app, when configured: its webhooks are API routes, its replies a delivery loop.
    let slack = warden_service::slack::spawn(
        services.service_config.slack.as_ref(),
        tasks.clone(),
        alerts.clone(),
        stopped.clone(),
    )
    .context("cannot start the Slack app")?;
    let (slack_app, slack) = slack.unzip();
    // The GitHub interface, when `[github.webhook]` is configured: the same shape as Slack's.
    let github = warden_service::github::spawn(
        &services.service_config.github,
        tasks.clone(),
        stopped.clone(),
    )
    .context("cannot start the GitHub webhook")?;
    let (github_hook, github) = github.unzip();
    // `[[schedules]]`: maintenance submitted through the same front door, on cron.
    let schedules = warden_service::schedule::spawn(
        tasks.clone(),
        Arc::clone(&services.config),
        services.service_config.schedules.clone(),
        stopped.clone(),
    );
    let app = api::router(Arc::new(
        ApiState::new(tasks, tokens)
            .with_rate_limit(serve_config.rate_limit)
            .with_max_streams_per_token(serve_config.max_streams_per_token)
            .with_trusted_proxies(serve_config.trusted_proxies.clone())
            .with_hosts(HostPolicy {
                listen: listener.local_addr().ok(),
                public_names: serve_config.public_names.clone(),
            })
            .with_hub(Arc::clone(&services.hub))
            .with_session_lifetime(serve_config.web.session_lifetime)
            .with_web(
                serve_config.web.enabled,
                api::web::Budgets {
                    max_tokens_per_day: serve_config.max_tokens_per_day,
                    max_cost_micro_usd_per_day: serve_config.max_cost_micro_usd_per_day,
                },
            )
            .with_slack(slack_app)
            .with_telegram(telegram_bot)
            .with_github(github_hook),
    ));
    let callbacks = warden_service::callback::spawn(
        Arc::clone(&services.store),
        &services.service_config.callbacks,
        callback_worker,
        stopped.clone(),
    )
    .context("cannot start callback delivery")?;
    let mut api_stopped = stopped;
    let (signalled, signal_seen) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = signalled.send(true);
    });
    let mut signal_seen_api = signal_seen.clone();
    let hub = Arc::clone(&services.hub);
    let server = connections::serve_connections(listener, app, limits, async move {
        tokio::select! {
            _ = signal_seen_api.wait_for(|s| *s) => {}
            _ = api_stopped.wait_for(|s| *s) => {}
        }
        // Event streams never end by themselves: end them so the server can drain.
        hub.close();
    });
    let api = tokio::spawn(server);
    let mut signal_seen = signal_seen;
    let _ = signal_seen.wait_for(|s| *s).await;
    warden_service::say!(
        "warden: shutting down: no new tasks are claimed; running tasks get {} s to finish",
        services.service_config.serve.shutdown_grace.as_secs()
    );
    let _ = stop.send(true);
    workers.await.context("the workers failed")?;
    if let Some(callbacks) = callbacks {
        let _ = callbacks.await;
    }
    if let Some(telegram) = telegram {
        let _ = telegram.await;
    }
    if let Some(slack) = slack {
        let _ = slack.await;
    }
    if let Some(github) = github {
        let _ = github.await;
    }
    if let Some(schedules) = schedules {
        // A refresh in progress (a fetch) is not waited for: the repository store survives
        // being left half-way.
        schedules.abort();
    }
    match api.await {
        Ok(result) => result.context("the API server failed")?,
        Err(error) => return Err(error).context("the API server failed"),
    }
    Ok(())
}

/// The address to bind: `WARDEN_LISTEN` or [`DEFAULT_LISTEN`].
pub fn listen_address(explicit: Option<String>) -> anyhow::Result<SocketAddr> {
    let text = explicit.unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    text.parse().map_err(|_| {
        ServeUsageError(format!(
            "WARDEN_LISTEN {text:?} is not an address like 127.0.0.1:8787"
        ))
        .into()
    })
}
