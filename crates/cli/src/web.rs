//! `warden web passwd|users|remove|sessions|revoke`: the web console's users and sessions in
//! the database `warden serve` uses (`WARDEN_DATABASE_URL`, else `WARDEN_HOME/warden.db`), as
//! `warden token` does for API tokens. Passwords are read from the terminal without echo (typed
//! twice), or as one line from stdin when it is not a terminal; only an Argon2id hash is
//! stored. Every rule is `warden_service::access`'s; the command line acts as a local admin.
//! A running server sees changes at once: it looks sessions and users up on every request.

use std::io::{BufRead, IsTerminal, Write};

use clap::Subcommand;
use serde_json::json;
use warden_engine::config::Config;
use warden_service::access::{SessionView, WebUserView};
use warden_service::tasks::{Principal, Role};

use crate::text::one_line;
use crate::token::{access_error, open_access};
use crate::usage;

#[derive(Debug, Subcommand)]
pub enum WebCommand {
    /// Set a web console user's password (and role), creating the user if needed; the
    /// user's earlier password sessions are signed out
    Passwd {
        /// The user's name (1-64 letters, digits, - _ . @; owner of the tasks it submits)
        name: String,
        /// admin, operator or viewer
        #[arg(long, default_value = "operator")]
        role: String,
    },
    /// List the web console's users (never their passwords)
    Users {
        /// Print the users as JSON
        #[arg(long)]
        json: bool,
    },
    /// Remove a web console user; its password sessions end at once
    Remove {
        /// The user's name
        name: String,
    },
    /// List the active web console sessions (never their secrets)
    Sessions {
        /// Print the sessions as JSON
        #[arg(long)]
        json: bool,
    },
    /// Revoke a web console session by id; it stops working at once
    Revoke {
        /// The session's id (ses_…, from `warden web sessions`)
        id: String,
    },
}

/// Whoever runs `warden web` next to the server's database acts as its admin.
fn local_admin() -> Principal {
    Principal {
        name: "cli".into(),
        role: Role::Admin,
    }
}

pub async fn web(config: &Config, command: WebCommand) -> anyhow::Result<u8> {
    match command {
        WebCommand::Passwd { name, role } => {
            // What can be checked before a password is asked for, is.
            if Role::parse(&role).is_none() {
                return Err(usage(anyhow::anyhow!(
                    "unknown role {role:?}: expected admin, operator or viewer"
                )));
            }
            let password = read_password(&name)?;
            let access = open_access(config).await?;
            let user = access
                .set_password(&name, &role, &password)
                .await
                .map_err(access_error)?;
            eprintln!(
                "warden: password set for {} (role {}); their earlier password sessions are \
                 signed out",
                user.name, user.role
            );
            Ok(0)
        }
        WebCommand::Users { json } => {
            let users = open_access(config)
                .await?
                .web_users()
                .await
                .map_err(access_error)?;
            print_users(&users, json)?;
            Ok(0)
        }
        WebCommand::Remove { name } => {
            open_access(config)
                .await?
                .remove_web_user(&name)
                .await
                .map_err(access_error)?;
            eprintln!("warden: removed web user {name}; their password sessions are signed out");
            Ok(0)
        }
        WebCommand::Sessions { json } => {
            let sessions = open_access(config)
                .await?
                .sessions(&local_admin())
                .await
                .map_err(access_error)?;
            print_sessions(&sessions, json)?;
            Ok(0)
        }
        WebCommand::Revoke { id } => {
            let session = open_access(config)
                .await?
                .revoke_session(&local_admin(), &id)
                .await
                .map_err(access_error)?;
            eprintln!("warden: revoked session {} ({})", session.id, session.name);
            Ok(0)
        }
    }
}

fn print_users(users: &[WebUserView], as_json: bool) -> anyhow::Result<()> {
    if as_json {
        let rows: Vec<_> = users
            .iter()
            .map(|u| {
                json!({
                    "name": u.name,
                    "role": u.role,
                    "created_at": u.created_at.to_string(),
                    "updated_at": u.updated_at.to_string(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for u in users {
            println!(
                "{:<20} {:<8} created {}  password set {}",
                u.name, u.role, u.created_at, u.updated_at
            );
        }
    }
    Ok(())
}

fn print_sessions(sessions: &[SessionView], as_json: bool) -> anyhow::Result<()> {
    if as_json {
        let rows: Vec<_> = sessions
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "name": s.name,
                    "role_at_sign_in": s.role_at_sign_in,
                    "method": s.method.as_str(),
                    "address": s.address,
                    "user_agent": s.user_agent,
                    "created_at": s.created_at.to_string(),
                    "expires_at": s.expires_at.to_string(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for s in sessions {
            println!(
                "{}  {:<20} {:<8} {:<8} {:<15} signed in {}  expires {}  {}",
                s.id,
                s.name,
                s.role_at_sign_in,
                s.method.as_str(),
                s.address.as_deref().unwrap_or("-"),
                s.created_at,
                s.expires_at,
                one_line(s.user_agent.as_deref().unwrap_or(""))
            );
        }
    }
    Ok(())
}

/// The new password: typed twice without echo on a terminal, else the first line of stdin.
fn read_password(name: &str) -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        let password = line.strip_suffix('\n').unwrap_or(&line);
        return Ok(password.strip_suffix('\r').unwrap_or(password).to_string());
    }
    let first = prompt_hidden(&format!("New web password for {name}: "))?;
    let second = prompt_hidden("Again: ")?;
    if first != second {
        return Err(usage(anyhow::anyhow!(
            "the two passwords differ; nothing was changed"
        )));
    }
    Ok(first)
}

/// Reads one line from the terminal on stdin with echo off (restored however this ends,
/// short of a signal).
fn prompt_hidden(prompt: &str) -> anyhow::Result<String> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};

    /// Puts the terminal's settings back when dropped.
    struct Restore(rustix::termios::Termios);

    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &self.0);
        }
    }

    let mut stderr = std::io::stderr();
    write!(stderr, "{prompt}")?;
    stderr.flush()?;
    let saved = tcgetattr(std::io::stdin())?;
    let mut hidden = saved.clone();
    hidden.local_modes.remove(LocalModes::ECHO);
    hidden.local_modes.insert(LocalModes::ECHONL);
    let restore = Restore(saved);
    tcsetattr(std::io::stdin(), OptionalActions::Now, &hidden)?;
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    drop(restore);
    read?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    Ok(password.strip_suffix('\r').unwrap_or(password).to_string())
}
