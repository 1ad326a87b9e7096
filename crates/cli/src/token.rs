//! `warden token create|list|revoke`: API tokens in the database `warden serve` uses
//! (`WARDEN_DATABASE_URL`, else `WARDEN_HOME/warden.db`). A new token is printed once, on stdout
//! alone (details go to stderr), and only its SHA-256 digest is stored; listing never shows a
//! token. A running server sees new and revoked tokens at once: it looks them up per request.
//! The rules (roles, names, minting) are `warden_service::access`'s, the same as
//! `POST /v1/tokens`'s; the command line acts as a local admin.

use clap::Subcommand;
use serde_json::json;
use warden_config::{Env, ProcessEnv};
use warden_engine::config::Config;
use warden_service::access::{Access, AccessError, Tokens};
use warden_service::compose as service;
use warden_service::tasks::{Principal, Role};

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

/// The identity service over the database `warden serve` uses, with no bootstrap tokens
/// (those live in the server's environment).
pub(crate) async fn open_access(config: &Config) -> anyhow::Result<Access> {
    let url = service::database_url(ProcessEnv.var("WARDEN_DATABASE_URL"), &config.home);
    let store = service::open_store(&url).await.map_err(usage)?;
    for notice in store.notices() {
        eprintln!("warden: {notice}");
    }
    Ok(Access::new(store, Tokens::default()))
}

/// A refusal of the identity service as the command line reports it: what the user typed is
/// wrong (exit 2), or Warden failed.
pub(crate) fn access_error(error: AccessError) -> anyhow::Error {
    match error {
        AccessError::Invalid(_)
        | AccessError::AlreadyExists(_)
        | AccessError::NotFound(_)
        | AccessError::Forbidden(_)
        | AccessError::Unauthorized(_) => usage(anyhow::Error::new(error)),
        AccessError::Store(_) | AccessError::Internal(_) => anyhow::Error::new(error),
    }
}

/// Whoever runs `warden token` next to the server's database acts as its admin.
fn local_admin() -> Principal {
    Principal {
        name: creator(),
        role: Role::Admin,
    }
}

pub async fn token(config: &Config, command: TokenCommand) -> anyhow::Result<u8> {
    match command {
        TokenCommand::Create { role, name, json } => {
            // The role is checked before the database is opened.
            if Role::parse(&role).is_none() {
                return Err(usage(anyhow::anyhow!(
                    "unknown role {role:?}: expected admin, operator or viewer"
                )));
            }
            let access = open_access(config).await?;
            let created = access
                .create_token(&local_admin(), &role, name.as_deref())
                .await
                .map_err(access_error)?;
            let (stored, secret) = (created.token, created.secret);
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "id": stored.id,
                        "name": stored.name,
                        "role": stored.role,
                        "token": secret,
                        "created_at": stored.created_at.to_string(),
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
            let access = open_access(config).await?;
            let tokens = access
                .list_tokens(&local_admin())
                .await
                .map_err(access_error)?;
            if json {
                let rows: Vec<_> = tokens
                    .iter()
                    .map(|t| {
                        json!({
                            "id": t.id,
                            "name": t.name,
                            "role": t.role,
                            "created_by": t.created_by,
                            "created_at": t.created_at.to_string(),
                            "revoked_at": t.revoked_at.map(|at| at.to_string()),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for t in &tokens {
                    let state = match t.revoked_at {
                        Some(at) => format!("revoked {at}"),
                        None => "active".to_string(),
                    };
                    println!(
                        "{}  {:<8} {:<20} {}  {}",
                        t.id, t.role, t.name, t.created_at, state
                    );
                }
            }
            Ok(0)
        }
        TokenCommand::Revoke { id } => {
            let access = open_access(config).await?;
            let token = access
                .revoke_token(&local_admin(), &id)
                .await
                .map_err(access_error)?;
            eprintln!("warden: revoked token {} ({})", token.id, token.name);
            Ok(0)
        }
    }
}
