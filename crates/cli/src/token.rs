//! `warden token create|list|revoke`: API tokens in the database `warden serve` uses
//! (`WARDEN_DATABASE_URL`, else `WARDEN_HOME/warden.db`). A new token is printed once, on stdout
//! alone (details go to stderr), and only its SHA-256 digest is stored; listing never shows a
//! token. A running server sees new and revoked tokens at once: it looks them up per request.

use clap::Subcommand;
use serde_json::json;
use warden_engine::config::{Config, Env, ProcessEnv};
use warden_service::compose::{self as service, Store};
use warden_service::tasks::Role as ApiRole;
use warden_service::time::rfc3339;
use warden_service::tokens::mint_token;

use crate::usage;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it (once: only its digest is stored)
    Create {
        /// admin, operator or viewer
        #[arg(long)]
        role: String,
        /// Who the token acts as (owner of its tasks); default: the token's id
        #[arg(long)]
        name: Option<String>,
        /// Print {id, name, role, token, created_at} as JSON
        #[arg(long)]
        json: bool,
    },
    /// List the stored tokens (never their secrets)
    List {
        /// Print the tokens as JSON
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id; it stops working at once
    Revoke {
        /// The token's id (from `warden token list`)
        id: String,
    },
}

/// Who `created_by` names for tokens made on the command line.
fn creator() -> String {
    let user = ProcessEnv
        .var("USER")
        .filter(|u| !u.is_empty() && u.len() <= 64);
    match user {
        Some(user) => format!("cli:{user}"),
        None => "cli".to_string(),
    }
}

async fn open(config: &Config) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    let url = service::database_url(ProcessEnv.var("WARDEN_DATABASE_URL"), &config.home);
    let store = service::open_store(&url).await.map_err(usage)?;
    for notice in store.notices() {
        eprintln!("warden: {notice}");
    }
    Ok(store)
}

pub async fn token(config: &Config, command: TokenCommand) -> anyhow::Result<u8> {
    match command {
        TokenCommand::Create { role, name, json } => {
            let role = ApiRole::parse(&role).ok_or_else(|| {
                usage(anyhow::anyhow!(
                    "unknown role {role:?}: expected admin, operator or viewer"
                ))
            })?;
            let (row, secret) = mint_token(name.as_deref(), role, &creator())
                .map_err(|e| usage(anyhow::anyhow!(e)))?;
            let store = open(config).await?;
            let stored = store.create_api_token(row).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "id": stored.id,
                        "name": stored.name,
                        "role": stored.role,
                        "token": secret,
                        "created_at": rfc3339(stored.created_at_ms),
                    }))?
                );
            } else {
                eprintln!(
                    "warden: created token {} (name {}, role {}); it is shown only now",
                    stored.id, stored.name, stored.role
                );
                println!("{secret}");
            }
            Ok(0)
        }
        TokenCommand::List { json } => {
            let store = open(config).await?;
            let tokens = store.list_api_tokens().await?;
            if json {
                let rows: Vec<_> = tokens
                    .iter()
                    .map(|t| {
                        json!({
                            "id": t.id,
                            "name": t.name,
                            "role": t.role,
                            "created_by": t.created_by,
                            "created_at": rfc3339(t.created_at_ms),
                            "revoked_at": t.revoked_at_ms.map(rfc3339),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for t in &tokens {
                    let state = match t.revoked_at_ms {
                        Some(at) => format!("revoked {}", rfc3339(at)),
                        None => "active".to_string(),
                    };
                    println!(
                        "{}  {:<8} {:<20} {}  {}",
                        t.id,
                        t.role,
                        t.name,
                        rfc3339(t.created_at_ms),
                        state
                    );
                }
            }
            Ok(0)
        }
        TokenCommand::Revoke { id } => {
            let store = open(config).await?;
            // Tokens are never deleted, so one that is listed now can be revoked next.
            if !store.list_api_tokens().await?.iter().any(|t| t.id == id) {
                return Err(usage(anyhow::anyhow!("no token {id:?}")));
            }
            let token = store.revoke_api_token(&id).await?;
            eprintln!("warden: revoked token {} ({})", token.id, token.name);
            Ok(0)
        }
    }
}
