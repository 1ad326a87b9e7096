//! Who is calling, for every interface: [`Access`] turns a credential (an API token, a web
//! password, a web session's cookie secret) into a [`Principal`], and owns the rules of
//! managing them — API tokens (`warden token`, `/v1/tokens`), web console users
//! (`warden web passwd`) and web sessions (`warden web sessions`, `/v1/sessions`, the console).
//!
//! - **Tokens.** Bootstrap tokens (`WARDEN_API_TOKENS`, [`Tokens`]) are compared in memory in
//!   constant time; stored tokens are looked up by SHA-256 digest, unrevoked only. Only admins
//!   create, list and revoke stored tokens.
//! - **Passwords.** Argon2id PHC strings (`password.rs`), 12 to 1024 characters, names as token
//!   names. A sign-in with an unknown name is verified against a dummy hash of the same cost,
//!   and a wrong name and a wrong password are the same error. At most
//!   [`MAX_CONCURRENT_HASHES`] hashes run at once (each holds 19 MiB), on blocking threads.
//! - **Sessions.** A sign-in (password, or an API token pasted once) stores a session keyed by
//!   the SHA-256 digest of a random secret (`wds_` + 64 hex, the cookie value) that expires
//!   after [`Access::session_lifetime`] by the store's clock. The principal is re-derived on
//!   every use: a password session needs its web user still there (with its current role; a
//!   new password revokes the user's password sessions), a token session needs its token to
//!   still identify (a revoked token, or a bootstrap token no longer configured, ends it).
//!   Admins list and revoke every session, others their own (another's does not exist for
//!   them).
//! - **Revocations** are announced as they happen ([`revocations`]): whatever holds a
//!   credential open (an event stream) watches for its principal's name
//!   ([`Access::watch_revocations`]) and re-checks at once.
//!
//! Every refusal is an [`AccessError`] whose variants map onto HTTP statuses one to one.

mod password;
pub mod revocations;
mod tokens;

pub use password::{MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS};
pub use revocations::{RevocationWatch, Revocations, DEFAULT_REVOCATION_POLL};
pub use tokens::{
    digest, mint_token, token_digest, valid_token_name, MintError, Tokens, MIN_BOOTSTRAP_TOKEN_LEN,
};

use std::sync::Arc;
use std::time::Duration;
use warden_protocol::views::Timestamp;
pub use warden_protocol::views::{SessionView, SignInMethod, TokenView, WebUserView};

use tokio::sync::Semaphore;
use warden_store::{
    ApiToken, NewWebSession, Store, StoreError, WebSession, WebUser, WEB_CREDENTIAL_PASSWORD,
};

use crate::tasks::{Principal, Role};

/// How long a web session lasts unless [`Access::with_session_lifetime`] says otherwise.
pub const DEFAULT_SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Password hashes computed at once; more sign-ins wait their turn.
pub const MAX_CONCURRENT_HASHES: usize = 4;

/// A stored user agent is cut to this many characters.
pub const MAX_USER_AGENT_CHARS: usize = 200;

/// Presented API tokens longer than this (in bytes) identify no one.
pub const MAX_TOKEN_BYTES: usize = 512;

/// Why [`Access`] refused or failed. Each variant has one meaning across interfaces (the API
/// maps each to one status); the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The credential identifies no one (an unknown or revoked token, a wrong name or
    /// password).
    #[error("{0}")]
    Unauthorized(String),
    /// The principal's role may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// No such token, user or session (another's session does not exist for a non-admin).
    #[error("{0}")]
    NotFound(String),
    /// The input is not acceptable (a role, a name, a password).
    #[error("{0}")]
    Invalid(String),
    /// What was to be created exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
    /// Warden itself failed (no randomness, a colliding random id).
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for AccessError {
    fn from(error: StoreError) -> AccessError {
        match error {
            StoreError::AlreadyExists { .. } => AccessError::AlreadyExists(error.to_string()),
            other => AccessError::Store(other),
        }
    }
}

impl From<MintError> for AccessError {
    fn from(error: MintError) -> AccessError {
        match error {
            MintError::InvalidName(_) => AccessError::Invalid(error.to_string()),
            MintError::NoRandomness(_) => AccessError::Internal(error.to_string()),
        }
    }
}

/// A token just created: the stored row and the secret, shown only now.
#[derive(Debug, Clone)]
pub struct CreatedToken {
    pub token: TokenView,
    pub secret: String,
}

fn web_user_view(user: WebUser) -> WebUserView {
    WebUserView {
        name: user.name,
        role: user.role,
        created_at: Timestamp(user.created_at_ms),
        updated_at: Timestamp(user.updated_at_ms),
    }
}

fn token_view(token: &ApiToken) -> TokenView {
    TokenView {
        id: token.id.clone(),
        name: token.name.clone(),
        role: token.role.clone(),
        created_by: token.created_by.clone(),
        created_at: Timestamp(token.created_at_ms),
        revoked_at: token.revoked_at_ms.map(Timestamp),
    }
}

fn session_view(session: WebSession) -> SessionView {
    SessionView {
        method: if session.credential == WEB_CREDENTIAL_PASSWORD {
            SignInMethod::Password
        } else {
            SignInMethod::Token
        },
        id: session.id,
        name: session.name,
        role_at_sign_in: session.role_at_sign_in,
        address: session.address,
        user_agent: session.user_agent,
        created_at: Timestamp(session.created_at_ms),
        expires_at: Timestamp(session.expires_at_ms),
        revoked_at: session.revoked_at_ms.map(Timestamp),
    }
}

/// A sign-in that succeeded: the new session and its secret, the cookie's value (shown only
/// now; the store keeps its digest).
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub session_id: String,
    /// `wds_` + 64 hex digits.
    pub secret: String,
    pub principal: Principal,
    pub expires_at_ms: i64,
}

/// Identity for every interface: tokens, web users and web sessions over one store. Cheap to
/// clone (clones share the bootstrap tokens and the hashing permits).
#[derive(Clone)]
pub struct Access {
    store: Arc<dyn Store>,
    bootstrap: Arc<Tokens>,
    hashing: Arc<Semaphore>,
    revocations: Arc<Revocations>,
    /// How long a new web session lasts ([`DEFAULT_SESSION_LIFETIME`] unless set).
    pub session_lifetime: Duration,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("bootstrap", &self.bootstrap)
            .field("session_lifetime", &self.session_lifetime)
            .finish_non_exhaustive()
    }
}

/// Which of `admin`, `operator` or `viewer` `role` names.
fn parse_role(role: &str) -> Result<Role, AccessError> {
    Role::parse(role).ok_or_else(|| {
        AccessError::Invalid(format!(
            "unknown role {role:?}: expected admin, operator or viewer"
        ))
    })
}

fn require_admin(caller: &Principal, action: &str) -> Result<(), AccessError> {
    match caller.role {
        Role::Admin => Ok(()),
        Role::Operator | Role::Viewer => Err(AccessError::Forbidden(format!(
            "only admin tokens {action}"
        ))),
    }
}

fn invalid_token() -> AccessError {
    AccessError::Unauthorized("invalid token".into())
}

fn wrong_password() -> AccessError {
    AccessError::Unauthorized("wrong name or password".into())
}

/// The SHA-256 digest a well-formed session secret (`wds_` + 64 lowercase hex) stands for.
fn session_digest(secret: &str) -> Option<String> {
    let hex_part = secret.strip_prefix("wds_")?;
    let well_formed = hex_part.len() == 64
        && hex_part
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    well_formed.then(|| token_digest(secret))
}

/// A user agent fit to store and show: control characters replaced, at most
/// [`MAX_USER_AGENT_CHARS`] characters; `None` when empty.
fn clean_user_agent(user_agent: Option<&str>) -> Option<String> {
    let cleaned: String = user_agent?
        .chars()
        .take(MAX_USER_AGENT_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    (!cleaned.trim().is_empty()).then_some(cleaned)
}

impl Access {
    /// Who may call, over the store of `tasks`: bootstrap `tokens`, stored tokens, web users
    /// and sessions (what an interface beside the service authenticates with).
    pub fn over(tasks: &crate::tasks::TaskService, bootstrap: Tokens) -> Access {
        Access::new(Arc::clone(tasks.store()), bootstrap)
    }

    /// Identity over `store`, with the bootstrap tokens of `WARDEN_API_TOKENS` (empty where
    /// there are none, e.g. the CLI's own commands).
    pub fn new(store: Arc<dyn Store>, bootstrap: Tokens) -> Access {
        Access {
            store,
            bootstrap: Arc::new(bootstrap),
            hashing: Arc::new(Semaphore::new(MAX_CONCURRENT_HASHES)),
            revocations: Arc::new(Revocations::new(DEFAULT_REVOCATION_POLL)),
            session_lifetime: DEFAULT_SESSION_LIFETIME,
        }
    }

    /// Sets how often the store is compared for revocations other processes made (while
    /// someone watches; [`DEFAULT_REVOCATION_POLL`] by default). Call before anything watches:
    /// the clones made before keep the old setting.
    pub fn with_revocation_poll(mut self, every: Duration) -> Access {
        self.revocations = Arc::new(Revocations::new(every));
        self
    }

    /// Watches for revocations that may concern `name`'s credentials (see [`revocations`]).
    /// Needs a Tokio runtime: the first watch starts the store poller.
    pub fn watch_revocations(&self, name: &str) -> RevocationWatch {
        self.revocations.watch(name, &self.store)
    }

    /// Sets how long new web sessions last.
    pub fn with_session_lifetime(mut self, lifetime: Duration) -> Access {
        self.session_lifetime = lifetime;
        self
    }

    /// The bootstrap tokens, checked in memory (the API checks them before any throttling or
    /// store lookup).
    pub fn bootstrap(&self) -> &Tokens {
        &self.bootstrap
    }

    // --- API tokens ---

    /// Who holds the token with SHA-256 digest `presented`: a bootstrap token first, then the
    /// store's unrevoked tokens. Charges nothing.
    pub async fn identify_token(&self, presented: &[u8; 32]) -> Result<Principal, AccessError> {
        if let Some(principal) = self.bootstrap.authenticate_digest(presented) {
            return Ok(principal);
        }
        let stored = self
            .store
            .find_api_token(&hex::encode(presented))
            .await?
            .ok_or_else(invalid_token)?;
        let Some(role) = Role::parse(&stored.role) else {
            tracing::warn!(token = %stored.id, role = %stored.role, "stored token has an unknown role");
            return Err(invalid_token());
        };
        Ok(Principal {
            name: stored.name,
            role,
        })
    }

    /// Creates a stored token acting as `name` (default: its id) with `role`; its secret is in
    /// the answer and nowhere else. Admins only.
    pub async fn create_token(
        &self,
        caller: &Principal,
        role: &str,
        name: Option<&str>,
    ) -> Result<CreatedToken, AccessError> {
        require_admin(caller, "manage tokens")?;
        let role = parse_role(role)?;
        let (row, secret) = mint_token(name, role, &caller.name)?;
        let token = match self.store.create_api_token(row).await {
            Ok(token) => token,
            // 64 random bits of id or 256 of secret colliding: not the caller's fault.
            Err(error @ StoreError::AlreadyExists { .. }) => {
                return Err(AccessError::Internal(error.to_string()))
            }
            Err(error) => return Err(error.into()),
        };
        tracing::info!(token = %token.id, name = %token.name, role = %token.role, by = %caller.name, "api token created");
        Ok(CreatedToken {
            token: token_view(&token),
            secret,
        })
    }

    /// Every stored token, revoked ones included, oldest first. Admins only.
    pub async fn list_tokens(&self, caller: &Principal) -> Result<Vec<TokenView>, AccessError> {
        require_admin(caller, "manage tokens")?;
        let tokens = self.store.list_api_tokens().await?;
        Ok(tokens.iter().map(token_view).collect())
    }

    /// Revokes a stored token for good (again: harmless). Its web sessions end with it.
    /// Admins only.
    pub async fn revoke_token(
        &self,
        caller: &Principal,
        id: &str,
    ) -> Result<TokenView, AccessError> {
        require_admin(caller, "manage tokens")?;
        match self.store.revoke_api_token(id).await {
            Ok(token) => {
                tracing::info!(token = %token.id, by = %caller.name, "api token revoked");
                // What holds it open (its streams, its sessions' streams) looks again now.
                self.revocations.announce(&token.name);
                // The console sessions it signed in end with it (they would no longer
                // identify anyone; this takes them off the lists too).
                for session in self.store.list_web_sessions(None).await? {
                    if session.credential == token.digest {
                        match self.store.revoke_web_session(&session.id).await {
                            Ok(_) | Err(StoreError::NotFound { .. }) => {}
                            Err(error) => return Err(error.into()),
                        }
                    }
                }
                Ok(token_view(&token))
            }
            Err(StoreError::NotFound { .. }) => {
                Err(AccessError::NotFound(format!("token {id:?} not found")))
            }
            Err(error) => Err(error.into()),
        }
    }

    // --- web users ---

    /// Creates web user `name` with `role` and `password`, or replaces its role and password;
    /// either way its password sessions end. For `warden web passwd`, run by whoever may open
    /// the server's database.
    pub async fn set_password(
        &self,
        name: &str,
        role: &str,
        password: &str,
    ) -> Result<WebUserView, AccessError> {
        let role = parse_role(role)?;
        if !valid_token_name(name) {
            return Err(AccessError::Invalid(format!(
                "invalid user name {name:?}: 1-64 letters, digits, '-', '_', '.' or '@'"
            )));
        }
        if let Some(problem) = password::password_problem(password) {
            return Err(AccessError::Invalid(problem));
        }
        let password = password.to_string();
        let hash = self
            .hash_blocking(move || password::hash_password(&password))
            .await?
            .map_err(AccessError::Internal)?;
        let user = self.store.put_web_user(name, role.as_str(), &hash).await?;
        self.revocations.announce(&user.name);
        tracing::info!(user = %user.name, role = %user.role, "web password set");
        Ok(web_user_view(user))
    }

    /// Every web user, by name.
    pub async fn web_users(&self) -> Result<Vec<WebUserView>, AccessError> {
        Ok(self
            .store
            .list_web_users()
            .await?
            .into_iter()
            .map(web_user_view)
            .collect())
    }

    /// Removes web user `name`; its password sessions end.
    pub async fn remove_web_user(&self, name: &str) -> Result<(), AccessError> {
        match self.store.delete_web_user(name).await {
            Ok(()) => {
                self.revocations.announce(name);
                tracing::info!(user = %name, "web user removed");
                Ok(())
            }
            Err(StoreError::NotFound { .. }) => Err(AccessError::NotFound(format!(
                "no web user {name:?} (warden web users lists them)"
            ))),
            Err(error) => Err(error.into()),
        }
    }

    // --- sign-in and sessions ---

    /// Signs web user `name` in with `password`. An unknown name costs one verification
    /// against a dummy hash, and fails with the same error as a wrong password.
    pub async fn sign_in_password(
        &self,
        name: &str,
        password: &str,
        address: Option<&str>,
        user_agent: Option<&str>,
    ) -> Result<SignedIn, AccessError> {
        if password.chars().count() > MAX_PASSWORD_CHARS {
            return Err(wrong_password());
        }
        let user = if valid_token_name(name) {
            self.store.find_web_user(name).await?
        } else {
            None
        };
        let hash = user.as_ref().map_or_else(
            || password::dummy_hash().to_string(),
            |u| u.password_hash.clone(),
        );
        let presented = password.to_string();
        let matches = self
            .hash_blocking(move || password::verify_password(&hash, &presented))
            .await?;
        let Some(user) = user.filter(|_| matches) else {
            return Err(wrong_password());
        };
        let Some(role) = Role::parse(&user.role) else {
            tracing::warn!(user = %user.name, role = %user.role, "web user has an unknown role");
            return Err(wrong_password());
        };
        let principal = Principal {
            name: user.name,
            role,
        };
        self.open_session(
            principal,
            WEB_CREDENTIAL_PASSWORD.into(),
            address,
            user_agent,
        )
        .await
    }

    /// Signs in with an API token (bootstrap or stored), pasted once: the session lasts while
    /// the token identifies.
    pub async fn sign_in_token(
        &self,
        token: &str,
        address: Option<&str>,
        user_agent: Option<&str>,
    ) -> Result<SignedIn, AccessError> {
        let token = token.trim();
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(invalid_token());
        }
        let presented = digest(token);
        let principal = self.identify_token(&presented).await?;
        self.open_session(principal, hex::encode(presented), address, user_agent)
            .await
    }

    async fn open_session(
        &self,
        principal: Principal,
        credential: String,
        address: Option<&str>,
        user_agent: Option<&str>,
    ) -> Result<SignedIn, AccessError> {
        let secret = tokens::random_secret("wds_")?;
        let session = self
            .store
            .create_web_session(NewWebSession {
                id: tokens::random_id("ses_")?,
                digest: token_digest(&secret),
                name: principal.name.clone(),
                role_at_sign_in: principal.role.as_str().to_string(),
                credential,
                address: address.map(str::to_string),
                user_agent: clean_user_agent(user_agent),
                lifetime: self.session_lifetime,
            })
            .await
            .map_err(|error| match error {
                // 64 random bits of id or 256 of secret colliding: not the caller's fault.
                StoreError::AlreadyExists { .. } => AccessError::Internal(error.to_string()),
                other => AccessError::Store(other),
            })?;
        tracing::info!(session = %session.id, name = %session.name, method = session_view(session.clone()).method.as_str(), "web session opened");
        Ok(SignedIn {
            session_id: session.id,
            secret,
            principal,
            expires_at_ms: session.expires_at_ms,
        })
    }

    /// The active session whose cookie secret this is, and who it acts as now: `None` when
    /// the secret is malformed (no store query), unknown, revoked or expired, or when its
    /// credential no longer holds (its web user is gone, its token revoked).
    pub async fn session(
        &self,
        secret: &str,
    ) -> Result<Option<(SessionView, Principal)>, AccessError> {
        let Some(digest) = session_digest(secret) else {
            return Ok(None);
        };
        let Some(session) = self.store.find_web_session(&digest).await? else {
            return Ok(None);
        };
        let principal = if session.credential == WEB_CREDENTIAL_PASSWORD {
            let Some(user) = self.store.find_web_user(&session.name).await? else {
                return Ok(None);
            };
            match Role::parse(&user.role) {
                Some(role) => Principal {
                    name: user.name,
                    role,
                },
                None => return Ok(None),
            }
        } else {
            let mut presented = [0u8; 32];
            if hex::decode_to_slice(&session.credential, &mut presented).is_err() {
                tracing::warn!(session = %session.id, "web session has a malformed credential");
                return Ok(None);
            }
            match self.identify_token(&presented).await {
                Ok(principal) => principal,
                Err(AccessError::Unauthorized(_)) => return Ok(None),
                Err(error) => return Err(error),
            }
        };
        Ok(Some((session_view(session), principal)))
    }

    /// Ends the session whose cookie secret this is; nothing to end is no error.
    pub async fn sign_out(&self, secret: &str) -> Result<(), AccessError> {
        let Some(digest) = session_digest(secret) else {
            return Ok(());
        };
        if let Some(session) = self.store.find_web_session(&digest).await? {
            match self.store.revoke_web_session(&session.id).await {
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
            self.revocations.announce(&session.name);
            tracing::info!(session = %session.id, name = %session.name, "web session signed out");
        }
        Ok(())
    }

    /// The active sessions `caller` may see, oldest first: an admin every one, others their
    /// own name's.
    pub async fn sessions(&self, caller: &Principal) -> Result<Vec<SessionView>, AccessError> {
        let sessions = self.store.list_web_sessions(caller.owner_scope()).await?;
        Ok(sessions.into_iter().map(session_view).collect())
    }

    /// Revokes an active session `caller` may see (an admin any, others their own); an
    /// ended, unknown or another's session is not found.
    pub async fn revoke_session(
        &self,
        caller: &Principal,
        id: &str,
    ) -> Result<SessionView, AccessError> {
        let visible = self
            .store
            .list_web_sessions(caller.owner_scope())
            .await?
            .into_iter()
            .any(|s| s.id == id);
        if !visible {
            return Err(AccessError::NotFound(format!(
                "no active session {id:?} (GET /v1/sessions or warden web sessions lists them)"
            )));
        }
        let revoked = match self.store.revoke_web_session(id).await {
            Ok(session) => session,
            Err(StoreError::NotFound { .. }) => {
                return Err(AccessError::NotFound(format!("no active session {id:?}")))
            }
            Err(error) => return Err(error.into()),
        };
        self.revocations.announce(&revoked.name);
        tracing::info!(session = %revoked.id, name = %revoked.name, by = %caller.name, "web session revoked");
        Ok(session_view(revoked))
    }

    /// Runs a password hash or verification on a blocking thread, at most
    /// [`MAX_CONCURRENT_HASHES`] at once.
    async fn hash_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, AccessError> {
        let _permit = self
            .hashing
            .acquire()
            .await
            .map_err(|e| AccessError::Internal(format!("password hashing stopped: {e}")))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| AccessError::Internal(format!("password hashing failed: {e}")))
    }
}

#[cfg(test)]
mod tests;
