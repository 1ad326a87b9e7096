//! `warden doctor`: tells a person what works on this machine — the configuration, git, the
//! state directory, the model (its configuration, and its endpoint with one request that
//! costs nothing: the provider's model list), the sandbox backends and their layers, whether
//! each backend's commands can list the working root (`ls -la`, `stat`, `find`, `du`; gVisor
//! releases before `warden_sandbox::MIN_RUNSC_RELEASE` cannot, and the check names the release
//! to install), the server named by `WARDEN_SERVER`, the toolchains installed here (with the
//! exact `[sandbox] toolchains` line that shows them to the sandbox), the egress allow-list of
//! the prepare step (and one connection to a listed registry, made as Warden's proxy makes it)
//! — and `[maintain]`'s advisory databases (that each loads, and how long ago it was fetched
//! when a git checkout records it), and what to do about what does not. A setup for
//! baseline-mode maintenance alone (an advisory database or a schedule, no model) does not
//! fail the model check. Every check is shown even when an earlier one fails
//! (a bad `WARDEN_MODEL` included); the exit code is 1 when any check fails.

use std::time::Duration;

use serde_json::json;
use warden_engine::config::{Config, ModelChoice};
use warden_service::config::{Loaded, ServiceConfig};

use crate::remote::RemoteOptions;

struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

/// How long the endpoint and server checks wait.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What to check besides the machine.
pub struct DoctorOptions<'a> {
    pub as_json: bool,
    /// Make no network request (model endpoint, server).
    pub offline: bool,
    /// Why the configuration could not be loaded; the checks then run on the defaults.
    pub config_error: Option<String>,
    /// The configuration file to edit (read, or where one would be read).
    pub config_file: std::path::PathBuf,
    pub remote: &'a RemoteOptions,
}

pub async fn doctor(loaded: &Loaded, options: DoctorOptions<'_>) -> anyhow::Result<u8> {
    let (config, service) = (&loaded.engine, &loaded.service);
    let as_json = options.as_json;
    let mut checks = Vec::new();
    checks.push(match &options.config_error {
        None if config.file.exists() => Check {
            name: "configuration",
            ok: true,
            detail: format!("loaded {} and the environment", config.file.display()),
        },
        None => Check {
            name: "configuration",
            ok: true,
            detail: format!(
                "no file: the defaults and the environment (settings go in {})",
                config.file.display()
            ),
        },
        Some(error) => Check {
            name: "configuration",
            ok: false,
            detail: format!("{error}; the checks below use the defaults"),
        },
    });
    checks.push(
        match warden_repo::Git::locate().and_then(|git| git.version()) {
            Ok(version) => Check {
                name: "git",
                ok: true,
                detail: version,
            },
            Err(error) => Check {
                name: "git",
                ok: false,
                detail: format!("{error}; install git (e.g. apt-get install git)"),
            },
        },
    );
    checks.push(match std::fs::create_dir_all(&config.home) {
        Ok(()) => {
            let probe = config.home.join(".doctor-probe");
            match std::fs::write(&probe, b"ok").and_then(|()| std::fs::remove_file(&probe)) {
                Ok(()) => Check {
                    name: "state directory",
                    ok: true,
                    detail: format!("{} is writable", config.home.display()),
                },
                Err(error) => Check {
                    name: "state directory",
                    ok: false,
                    detail: format!("{} is not writable: {error}", config.home.display()),
                },
            }
        }
        Err(error) => Check {
            name: "state directory",
            ok: false,
            detail: format!(
                "cannot create {}: {error}; set WARDEN_HOME",
                config.home.display()
            ),
        },
    });
    checks.push(match options.remote.server() {
        // A client: tasks run on the server, whose model is its own business.
        Some(server) if matches!(config.model, ModelChoice::Missing) => Check {
            name: "model",
            ok: true,
            detail: format!(
                "none configured here: tasks run on the server {server}, with its model (`warden \
                 doctor` on the server checks it)"
            ),
        },
        _ => model_check(config, service, options.offline).await,
    });
    checks.push(maintain_check(config, std::time::SystemTime::now()));
    if let Some(server) = options.remote.server() {
        checks.push(server_check(server, options.remote.token.as_deref(), options.offline).await);
    }
    checks.push(toolchain_check(config, &options.config_file));
    checks.push(egress_check(config, options.offline).await);
    let problems = service.problems();
    checks.push(Check {
        name: "interfaces",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            "the secrets `warden serve` needs for the configured interfaces are set".into()
        } else {
            format!(
                "`warden serve` would refuse to start: {}",
                problems.join("; ")
            )
        },
    });
    checks.extend(online_interface_checks(service, options.offline).await);
    let reports = warden_sandbox::probe_with(&config.sandbox.config);
    let chosen = config.sandbox.backend;
    let chosen_ok = reports
        .iter()
        .filter(|r| r.backend == chosen)
        .all(|r| r.available);
    // The kubernetes backend runs nothing on this machine: its check is the cluster's answer.
    let tools = warden_sandbox::probe_tools(&config.sandbox.config);
    if let Some(probed) = kubernetes_probe(config, options.offline).await {
        let kubernetes = &config.kubernetes;
        checks.push(Check {
            name: "sandbox",
            ok: probed.is_ok(),
            detail: match probed {
                Ok(Some(claims)) => format!(
                    "kubernetes backend: the API server answered in namespace {} ({} \
                     claim(s) of owner {}{}); pods come from warm pool {}",
                    kubernetes.namespace,
                    claims.len(),
                    kubernetes.owner,
                    claims_by_task(&claims),
                    kubernetes.warm_pool
                ),
                Ok(None) => format!(
                    "kubernetes backend: settings and credentials readable (namespace {}, \
                     owner {}, warm pool {}); --offline: the API server was not asked",
                    kubernetes.namespace, kubernetes.owner, kubernetes.warm_pool
                ),
                Err(error) => format!(
                    "kubernetes backend unavailable: tasks will fail with sandbox_error: {error}"
                ),
            },
        });
    } else {
        checks.push(Check {
            name: "sandbox",
            ok: chosen_ok,
            detail: if chosen_ok {
                format!("{} backend: every layer available", chosen.as_str())
            } else {
                format!(
                    "{} backend unavailable: tasks will fail with sandbox_error (see the layers \
                     below)",
                    chosen.as_str()
                )
            },
        });
        // The same commands the conformance suite runs, on every backend this machine has: a
        // backend can hold every layer and still fail `ls -l` (gVisor before
        // MIN_RUNSC_RELEASE).
        if chosen_ok {
            if let Some(report) = tools.iter().find(|r| r.backend == chosen) {
                checks.push(Check {
                    name: "sandbox tools",
                    ok: report.works,
                    detail: format!("{} backend: {}", chosen.as_str(), report.detail),
                });
            }
        }
    }
    let layer_checks: Vec<Check> = reports
        .iter()
        .map(|r| Check {
            name: "",
            ok: r.available,
            detail: format!("{} {}: {}", r.backend.as_str(), r.layer.as_str(), r.detail),
        })
        .collect();

    // Not failures: what works but should not be so.
    let mut warnings = Vec::new();
    if rustix::process::geteuid().is_root() {
        warnings.push(
            "running as root: the sandbox's user is then the host's root seen from outside the \
             sandbox; run Warden as a dedicated unprivileged user (docs/operations.md), unless \
             you use the gvisor backend, whose writable views need root"
                .to_string(),
        );
    }
    if as_json {
        let list: Vec<_> = checks
            .iter()
            .map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail}))
            .collect();
        let layers: Vec<_> = reports
            .iter()
            .map(|r| {
                json!({"backend": r.backend.as_str(), "layer": r.layer.as_str(),
                    "available": r.available, "detail": r.detail})
            })
            .collect();
        let tools: Vec<_> = tools
            .iter()
            .map(|r| json!({"backend": r.backend.as_str(), "works": r.works, "detail": r.detail}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"checks": list, "warnings": warnings, "sandbox_layers": layers,
                    "sandbox_tools": tools})
            )?
        );
    } else {
        for check in &checks {
            // Continuation lines (configuration to copy) line up under the detail.
            let detail = check.detail.replace('\n', &format!("\n{:22}", ""));
            println!(
                "{} {:<16} {detail}",
                if check.ok { "ok  " } else { "FAIL" },
                check.name,
            );
        }
        for warning in &warnings {
            println!("WARN {warning}");
        }
    }
    if !as_json {
        println!("\nsandbox layers:");
        for check in &layer_checks {
            println!(
                "  {} {}",
                if check.ok { "ok  " } else { "no  " },
                check.detail
            );
        }
        println!(
            "\nsandbox tools ({} on the working root):",
            warden_sandbox::TOOLS_PROBE.join(", ")
        );
        for report in &tools {
            println!(
                "  {} {}: {}",
                if report.works { "ok  " } else { "no  " },
                report.backend.as_str(),
                report.detail
            );
        }
    }
    Ok(if checks.iter().all(|c| c.ok) { 0 } else { 1 })
}

/// With the kubernetes backend, its settings and credentials and — unless `offline` — the API
/// server's answer ([`warden_engine::sandbox_backend::probe_kubernetes`]), off the async threads
/// (the client blocks) and within [`ONLINE_TIMEOUT`]. `None` for the other backends.
async fn kubernetes_probe(
    config: &Config,
    offline: bool,
) -> Option<Result<Option<Vec<warden_engine::sandbox_backend::ClaimSummary>>, String>> {
    if config.sandbox.backend != warden_sandbox::Backend::Kubernetes {
        return None;
    }
    let settings = config.kubernetes.clone();
    let probe = tokio::task::spawn_blocking(move || {
        warden_engine::sandbox_backend::probe_kubernetes(&settings, !offline)
    });
    Some(match tokio::time::timeout(ONLINE_TIMEOUT, probe).await {
        Ok(Ok(probed)) => probed.map_err(|e| e.to_string()),
        Ok(Err(crashed)) => Err(format!("the check crashed: {crashed}")),
        Err(_) => Err(format!(
            "the API server did not answer within {} s",
            ONLINE_TIMEOUT.as_secs()
        )),
    })
}

/// `: warden-abc (tsk_1), …` — the claims a doctor found and the tasks they serve; nothing
/// when there are none.
fn claims_by_task(claims: &[warden_engine::sandbox_backend::ClaimSummary]) -> String {
    let listed: Vec<String> = claims
        .iter()
        .map(|claim| match &claim.task {
            Some(task) => format!("{} ({task})", claim.name),
            None => claim.name.clone(),
        })
        .collect();
    if listed.is_empty() {
        String::new()
    } else {
        format!(": {}", listed.join(", "))
    }
}

/// How long one interface's online check may take.
const ONLINE_TIMEOUT: Duration = Duration::from_secs(20);

/// Each configured interface's credentials tried once, as `serve` tries them at start-up:
/// Telegram's `getMe`, Slack's `auth.test`, GitHub's `/rate_limit` (a token) or the App's
/// installation. Concurrently, each bounded by [`ONLINE_TIMEOUT`]; nothing with `--offline`.
async fn online_interface_checks(config: &ServiceConfig, offline: bool) -> Vec<Check> {
    if offline {
        return Vec::new();
    }
    let telegram = async {
        match &config.telegram {
            Some(telegram) if telegram.token.is_some() => {
                Some(bounded("telegram", warden_service::telegram::check_online(telegram)).await)
            }
            _ => None,
        }
    };
    let slack = async {
        match &config.slack {
            Some(slack) if slack.bot_token.is_some() => {
                Some(bounded("slack", warden_service::slack::check_online(slack)).await)
            }
            _ => None,
        }
    };
    let github = async {
        let outcome = warden_service::github::check_online(&config.github);
        match config.github.auth() {
            Some(_) => Some(
                bounded("github", async {
                    outcome.await.unwrap_or_else(|| Ok(String::new()))
                })
                .await,
            ),
            None => None,
        }
    };
    let (telegram, slack, github) = tokio::join!(telegram, slack, github);
    [telegram, slack, github].into_iter().flatten().collect()
}

/// One online check, bounded by [`ONLINE_TIMEOUT`].
async fn bounded(
    name: &'static str,
    check: impl std::future::Future<Output = Result<String, String>>,
) -> Check {
    let outcome = match tokio::time::timeout(ONLINE_TIMEOUT, check).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("no answer within {} s", ONLINE_TIMEOUT.as_secs())),
    };
    match outcome {
        Ok(detail) => Check {
            name,
            ok: true,
            detail,
        },
        Err(detail) => Check {
            name,
            ok: false,
            detail: crate::text::one_line(&detail),
        },
    }
}

/// How long the egress check may take (resolving, connecting, the upstream's answer).
const EGRESS_TIMEOUT: Duration = Duration::from_secs(20);

/// What prepare reaches through Warden's egress proxy: the allow-list, whether the backend can
/// relay to the proxy, and one connection to the first listed host, made as the proxy makes it
/// (resolved and checked here, or through the upstream's `CONNECT`).
async fn egress_check(config: &Config, offline: bool) -> Check {
    let name = "egress";
    let settings = config.sandbox.toolchains.egress.clone();
    let listed = settings.describe();
    if !settings.admits_anything() {
        return Check {
            name,
            ok: true,
            detail: format!(
                "prepare reaches {listed}; a toolchain preset brings its registries, [egress] \
                 allow adds hosts"
            ),
        };
    }
    match config.sandbox.backend {
        // The linux backend relays to the proxy; `local` commands reach it directly.
        warden_sandbox::Backend::Linux | warden_sandbox::Backend::Local => {}
        warden_sandbox::Backend::Kubernetes => {
            return Check {
                name,
                ok: false,
                detail: format!(
                    "the kubernetes backend does not relay to Warden's egress proxy yet, so \
                     prepare runs without network (allow-list: {listed}); put what prepare \
                     would fetch in the template's image"
                ),
            }
        }
        warden_sandbox::Backend::Gvisor => {
            return Check {
                name,
                ok: false,
                detail: format!(
                    "the gvisor backend cannot relay to Warden's egress proxy, so prepare runs \
                     without network (allow-list: {listed}); use the linux backend for a \
                     prepare step that fetches"
                ),
            }
        }
    }
    let Some((host, port)) = settings.probe_target() else {
        return Check {
            name,
            ok: true,
            detail: format!("allow-list: {listed} (no single host to try)"),
        };
    };
    if offline {
        return Check {
            name,
            ok: true,
            detail: format!("allow-list: {listed} (not tried: --offline)"),
        };
    }
    let policy = warden_engine::egress::EgressPolicy::new(settings);
    let tried = {
        let host = host.clone();
        tokio::time::timeout(
            EGRESS_TIMEOUT,
            tokio::task::spawn_blocking(move || policy.probe(&host, port)),
        )
        .await
    };
    match tried {
        Ok(Ok(Ok(reached))) => Check {
            name,
            ok: true,
            detail: format!("allow-list: {listed}; reached {reached}"),
        },
        Ok(Ok(Err(error))) => Check {
            name,
            ok: false,
            detail: format!(
                "allow-list: {listed}; {host}:{port} not reached: {error}; prepare commands \
                 will fail to fetch"
            ),
        },
        Ok(Err(error)) => Check {
            name,
            ok: false,
            detail: format!("allow-list: {listed}; the check crashed: {error}"),
        },
        Err(_) => Check {
            name,
            ok: false,
            detail: format!(
                "allow-list: {listed}; {host}:{port} gave no answer within {} s; prepare \
                 commands will fail to fetch",
                EGRESS_TIMEOUT.as_secs()
            ),
        },
    }
}

/// Which toolchain presets this machine has, which are configured, and the line to add for
/// the others. Informational: the sandbox works without any.
fn toolchain_check(config: &Config, file: &std::path::Path) -> Check {
    use warden_engine::toolchain::{detect, Preset};
    let name = "toolchains";
    let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from) else {
        return Check {
            name,
            ok: true,
            detail: "HOME is not set: cannot look for rustup, nvm, pyenv or go".into(),
        };
    };
    let configured = &config.sandbox.toolchains.presets;
    let env = warden_config::ProcessEnv;
    // A toolchain in the system directories the sandbox shows anyway still wants its preset
    // when the preset fetches without configuration: it brings the dependency cache, its
    // registries on the egress allow-list, the default prepare and the warm install (an npm
    // project's checks need them). Python's needs a configured prepare: only said.
    let mut found = Vec::new();
    let mut system = Vec::new();
    for preset in Preset::ALL {
        match detect(preset, &home, &env) {
            Ok(setup) if setup.mounts.is_empty() && preset.default_prepare().is_none() => {
                system.push(format!("{} ({})", preset.as_str(), setup.found))
            }
            Ok(setup) if setup.mounts.is_empty() => found.push((
                preset,
                format!(
                    "{} (in the system directories the sandbox shows; the preset adds its \
                     dependency cache and registries)",
                    setup.found
                ),
            )),
            Ok(setup) => found.push((preset, setup.found)),
            Err(_) => {}
        }
    }
    let mut lines = Vec::new();
    if !configured.is_empty() {
        let names: Vec<&str> = configured.iter().map(|p| p.as_str()).collect();
        lines.push(format!("configured: {}", names.join(", ")));
    }
    let missing: Vec<&(Preset, String)> = found
        .iter()
        .filter(|(preset, _)| !configured.contains(preset))
        .collect();
    if !missing.is_empty() {
        for (preset, what) in &missing {
            lines.push(format!("found {}: {what}", preset.as_str()));
        }
        let all: Vec<String> = configured
            .iter()
            .chain(missing.iter().map(|(preset, _)| preset))
            .map(|preset| format!("{:?}", preset.as_str()))
            .collect();
        lines.push(format!(
            "not configured yet; add to {}:\n[sandbox]\ntoolchains = [{}]",
            file.display(),
            all.join(", ")
        ));
    }
    if !system.is_empty() {
        lines.push(format!(
            "in the system directories the sandbox already shows: {}",
            system.join(", ")
        ));
    }
    if lines.is_empty() {
        lines.push(format!(
            "no rustup, nvm, pyenv or go found; list toolchain directories under [sandbox] \
                 mounts in {}",
            file.display()
        ));
    }
    Check {
        name,
        ok: true,
        detail: lines.join("\n"),
    }
}

async fn model_check(config: &Config, service: &ServiceConfig, offline: bool) -> Check {
    let (primary, fallback) = match &config.model {
        ModelChoice::Faux => {
            return Check {
                name: "model",
                ok: true,
                detail: "faux: the deterministic no-model runner (demos and tests only)".into(),
            }
        }
        // Maintenance in baseline mode needs no model: a setup for it alone is complete.
        ModelChoice::Missing if maintenance_configured(config, service) => {
            return Check {
                name: "model",
                ok: true,
                detail: "none configured: baseline-mode maintenance only (`warden maintain`, \
                         `warden vulns`, [[schedules]]); questions, changes and `--mode model` \
                         need WARDEN_MODEL=openai:MODEL or anthropic:MODEL"
                    .into(),
            }
        }
        ModelChoice::Missing => {
            return Check {
                name: "model",
                ok: false,
                detail: "no model configured; set WARDEN_MODEL=openai:MODEL (OPENAI_API_KEY, \
                         OPENAI_BASE_URL for compatible servers), anthropic:MODEL \
                         (ANTHROPIC_API_KEY) or WARDEN_MODEL=faux"
                    .into(),
            }
        }
        ModelChoice::Remote { primary, fallback } => (primary, fallback),
    };
    let described = format!(
        "{}:{} at {}{}",
        primary.provider.as_str(),
        primary.model,
        warden_repo::redact_credentials(&primary.base_url),
        fallback
            .as_ref()
            .map(|f| format!("; fallback {}:{}", f.provider.as_str(), f.model))
            .unwrap_or_default()
    );
    if let Some(missing) = config.model.missing_key() {
        return Check {
            name: "model",
            ok: false,
            detail: format!("{described}: {missing}"),
        };
    }
    if offline {
        return Check {
            name: "model",
            ok: true,
            detail: format!("{described}; endpoint not checked (--offline)"),
        };
    }
    let (ok, verdict) = probe_endpoint(primary).await;
    Check {
        name: "model",
        ok,
        detail: format!("{described}: {verdict}"),
    }
}

/// Whether the configuration sets up maintenance: an advisory database or a schedule.
fn maintenance_configured(config: &Config, service: &ServiceConfig) -> bool {
    config.maintain.advisory_db.is_some()
        || config.maintain.osv_db.is_some()
        || !service.schedules.is_empty()
}

/// `[maintain]`'s advisory databases: each configured one loads (how many advisories, which
/// snapshot) and how long ago it was fetched (`warden advisories update`'s record, else the git
/// checkout's last fetch); one fetched longer ago than `[maintain] max_advisory_age_days` fails
/// the check, naming `warden advisories update`.
fn maintain_check(config: &Config, now: std::time::SystemTime) -> Check {
    use warden_engine::maintain::{advisory, osv, update};
    let maintain = &config.maintain;
    let now_ms = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut parts = Vec::new();
    let mut ok = true;
    let mut dated = |dir: &std::path::Path| {
        let age = update::age(dir, now_ms, maintain.max_advisory_age_days);
        if age.stale {
            ok = false;
        }
        match age.warning() {
            Some(warning) => warning,
            None => age.describe(),
        }
    };
    let mut failed = Vec::new();
    if let Some(path) = &maintain.advisory_db {
        match advisory::AdvisoryDb::open(path) {
            Ok(db) => parts.push(format!(
                "advisory_db {}: {} ({}), {}",
                path.display(),
                crate::text::count(
                    db.advisories.len() as u64,
                    "RustSec advisory",
                    "RustSec advisories"
                ),
                db.snapshot,
                dated(path)
            )),
            Err(error) => failed.push(format!("advisory_db: {error}")),
        }
    }
    if let Some(path) = &maintain.osv_db {
        let mut undated = false;
        // crates.io records are shown when there are some (they are optional: RustSec's
        // database is Cargo's usual one).
        let counts: Result<Vec<Option<String>>, String> = [osv::GO, osv::NPM, osv::CRATES_IO]
            .into_iter()
            .map(|ecosystem| {
                let db = osv::OsvDb::open(path, ecosystem)?;
                if ecosystem == osv::CRATES_IO && db.record_count() == 0 {
                    return Ok(None);
                }
                let count = crate::text::count(
                    db.record_count() as u64,
                    &format!("{ecosystem} advisory"),
                    &format!("{ecosystem} advisories"),
                );
                let dir = update::osv_dir(path, ecosystem);
                if dir == *path {
                    undated = true;
                    return Ok(Some(count));
                }
                Ok(Some(format!("{count} ({})", dated(&dir))))
            })
            .collect();
        match counts.map(|counts| counts.into_iter().flatten().collect::<Vec<_>>()) {
            Ok(counts) => {
                let mut line = format!("osv_db {}: {}", path.display(), counts.join(", "));
                if undated {
                    line.push_str(&format!(", {}", dated(path)));
                }
                parts.push(line);
            }
            Err(error) => failed.push(format!("osv_db: {error}")),
        }
    }
    if !failed.is_empty() {
        ok = false;
        parts.extend(failed);
    }
    if parts.is_empty() {
        parts.push(
            "no advisory database: `warden vulns` and `--select vulnerable` need [maintain] \
             advisory_db (a RustSec checkout, for Cargo) or osv_db (OSV records, for Go and npm); \
             `warden advisories update` fetches them"
                .into(),
        );
    }
    Check {
        name: "maintain",
        ok,
        detail: parts.join("; "),
    }
}

/// One request that spends nothing: the provider's model list, with the key. Says whether the
/// endpoint answers and the key is accepted; a server without the list route is reachable but
/// its key unchecked.
async fn probe_endpoint(model: &warden_models::ModelConfig) -> (bool, String) {
    let base = model.base_url.trim_end_matches('/');
    let client = match reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(error) => return (false, format!("cannot build an HTTP client: {error}")),
    };
    let (url, request) = match model.provider {
        warden_models::Provider::OpenAi => {
            let url = format!("{base}/models");
            let request = client.get(&url);
            let request = match &model.api_key {
                Some(key) => request.bearer_auth(key),
                None => request,
            };
            (url, request)
        }
        warden_models::Provider::Anthropic => {
            let url = format!("{base}/v1/models");
            let request = client.get(&url).header("anthropic-version", "2023-06-01");
            let request = match &model.api_key {
                Some(key) => request.header("x-api-key", key),
                None => request,
            };
            (url, request)
        }
    };
    let shown = warden_repo::redact_credentials(&url);
    let key_variable = warden_engine::config::key_variable(model.provider);
    match request.send().await {
        Ok(response) => match response.status().as_u16() {
            200..=299 if model.api_key.is_none() => (
                true,
                format!("endpoint answers without a key ({key_variable} is not set; GET {shown})"),
            ),
            200..=299 => (
                true,
                format!("endpoint answers and accepts the key (GET {shown})"),
            ),
            401 | 403 => (
                false,
                format!(
                    "the endpoint refused the key (GET {shown}: {}); check {key_variable}",
                    response.status()
                ),
            ),
            404 | 405 => (
                true,
                format!(
                    "endpoint reachable, but it has no model list (GET {shown}: {}), so the key \
                     was not checked",
                    response.status()
                ),
            ),
            _ => (
                false,
                format!(
                    "the endpoint answered GET {shown} with {}",
                    response.status()
                ),
            ),
        },
        Err(error) => (
            false,
            format!(
                "cannot reach {shown}: {}; check the base URL and the network",
                error_chain(&error)
            ),
        ),
    }
}

/// The server `WARDEN_SERVER` names: reachable (`/healthz`) and the token accepted.
async fn server_check(server: &str, token: Option<&str>, offline: bool) -> Check {
    let shown = crate::text::one_line(server);
    if offline {
        return Check {
            name: "server",
            ok: true,
            detail: format!("{shown}: not checked (--offline)"),
        };
    }
    let remote = match crate::remote::Remote::new(server, token) {
        Ok(remote) => remote,
        Err(error) => {
            return Check {
                name: "server",
                ok: false,
                detail: format!("{error:#}"),
            }
        }
    };
    let health = tokio::time::timeout(PROBE_TIMEOUT, remote.get("/healthz")).await;
    if let Err(error) = health.unwrap_or_else(|_| Err(anyhow::anyhow!("no answer in 10 s"))) {
        return Check {
            name: "server",
            ok: false,
            // A refused connection names the server and what to do already.
            detail: if crate::remote::is_unreachable(&error) {
                format!("{error:#}")
            } else {
                format!("{shown}: {error:#}; is `warden serve` running there?")
            },
        };
    }
    if token.is_none() {
        return Check {
            name: "server",
            ok: false,
            detail: format!("{shown} answers, but WARDEN_TOKEN is not set"),
        };
    }
    let tasks = tokio::time::timeout(PROBE_TIMEOUT, remote.get("/v1/tasks?limit=1")).await;
    match tasks.unwrap_or_else(|_| Err(anyhow::anyhow!("no answer in 10 s"))) {
        Ok(_) => Check {
            name: "server",
            ok: true,
            detail: format!("{shown} answers and accepts the token"),
        },
        Err(error) => Check {
            name: "server",
            ok: false,
            detail: format!("{shown} answers, but: {error:#}; check WARDEN_TOKEN"),
        },
    }
}

/// An error with its causes, on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
