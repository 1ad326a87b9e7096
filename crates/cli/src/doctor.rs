//! `warden doctor`: tells a person what works on this machine — git, the state directory, the
//! model configuration — and what to do about what does not.

use serde_json::json;
use warden_server::config::{Config, ModelChoice};

struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

pub fn doctor(config: &Config, as_json: bool) -> anyhow::Result<u8> {
    let mut checks = Vec::new();
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
    checks.push(match &config.model {
        ModelChoice::Faux => Check {
            name: "model",
            ok: true,
            detail: "faux: the deterministic no-model runner (demos and tests only)".into(),
        },
        ModelChoice::Remote { primary, fallback } => Check {
            name: "model",
            // Local compatible servers (Ollama, llama.cpp) need no key; the official APIs do.
            ok: primary.api_key.is_some() || primary.base_url != official_base_url(primary),
            detail: format!(
                "{}:{} at {}{}{}",
                match primary.provider {
                    warden_models::Provider::OpenAi => "openai",
                    warden_models::Provider::Anthropic => "anthropic",
                },
                primary.model,
                warden_repo::redact_credentials(&primary.base_url),
                if primary.api_key.is_some() {
                    " (key set)"
                } else {
                    " (no API key set)"
                },
                fallback
                    .as_ref()
                    .map(|f| format!("; fallback {}", f.model))
                    .unwrap_or_default()
            ),
        },
        ModelChoice::Missing => Check {
            name: "model",
            ok: false,
            detail: "no model configured; set WARDEN_MODEL=openai:MODEL (OPENAI_API_KEY, \
                     OPENAI_BASE_URL for compatible servers) or WARDEN_MODEL=faux"
                .into(),
        },
    });
    let reports = warden_sandbox::probe_with(&config.sandbox.config);
    let chosen = config.sandbox.backend;
    let chosen_ok = reports
        .iter()
        .filter(|r| r.backend == chosen)
        .all(|r| r.available);
    checks.push(Check {
        name: "sandbox",
        ok: chosen_ok,
        detail: if chosen_ok {
            format!("{} backend: every layer available", chosen.as_str())
        } else {
            format!(
                "{} backend unavailable: tasks will fail with sandbox_error (see the layers below)",
                chosen.as_str()
            )
        },
    });
    let layer_checks: Vec<Check> = reports
        .iter()
        .map(|r| Check {
            name: "",
            ok: r.available,
            detail: format!("{} {}: {}", r.backend.as_str(), r.layer.as_str(), r.detail),
        })
        .collect();

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
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"checks": list, "sandbox_layers": layers}))?
        );
    } else {
        for check in &checks {
            println!(
                "{} {:<16} {}",
                if check.ok { "ok  " } else { "FAIL" },
                check.name,
                check.detail
            );
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
    }
    // git, the state directory and the chosen sandbox are what every task needs.
    let essential_ok = checks
        .iter()
        .filter(|c| matches!(c.name, "git" | "state directory" | "sandbox"))
        .all(|c| c.ok);
    Ok(if essential_ok { 0 } else { 1 })
}

fn official_base_url(config: &warden_models::ModelConfig) -> String {
    match config.provider {
        warden_models::Provider::OpenAi => {
            warden_models::ModelConfig::openai(&config.model).base_url
        }
        warden_models::Provider::Anthropic => {
            warden_models::ModelConfig::anthropic(&config.model).base_url
        }
    }
}
