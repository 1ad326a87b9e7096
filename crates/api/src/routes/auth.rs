//! Bearer tokens, roles, per-token rate limits and the throttling of failed authentications.
//!
//! A request's token is hashed (SHA-256) once; who holds it is the service's
//! ([`warden_service::access::Access`]): the digest is compared in constant time with the
//! bootstrap tokens of `WARDEN_API_TOKENS` (each at least [`MIN_BOOTSTRAP_TOKEN_LEN`]
//! characters: shorter ones are refused at start-up), then looked up among the store's tokens
//! (created by `warden token create` or `POST /v1/tokens`, kept only as digests, revocable).
//! This module keeps what is HTTP's: reading the header, the rate limits and the throttle.
//! Roles: a viewer reads, an operator also creates, cancels and answers tasks, an admin also
//! manages repositories, tokens and approvals and sees every task. Each authenticated request
//! then takes one unit from its token's bucket (in memory, per process); an empty bucket is a
//! 429 with `Retry-After`.
//!
//! A failed authentication (no token, a malformed header, an unknown or revoked token) takes
//! one unit from its client address's bucket ([`AuthThrottle`]: IPv4 addresses, IPv6 /64
//! prefixes; at most [`MAX_THROTTLED_ADDRESSES`] of them, beyond which new addresses share
//! one bucket); once it is empty, failures are 429 with `Retry-After` instead of 401. A valid
//! token is never throttled this way, whatever its address did: the address's bucket is only
//! looked at after the token failed. The address is the TCP peer's, or, when the peer is one of
//! `[serve] trusted_proxies`, the client its `X-Forwarded-For`/`Forwarded` header names
//! (`forwarded.rs`); behind an untrusted proxy its clients' failures share one bucket (their
//! valid tokens still pass). The console's sign-ins are throttled per address and per account
//! name, and wait for their turn rather than being refused ([`SignInThrottle`]).
//!
//! Handlers take a [`Caller`] (an extractor) right after the state, before their path and
//! body: a request is authenticated and charged once, before anything of its input is read.
//! Open event streams re-check their token with [`identify`], which charges nothing.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use utoipa::openapi::{Content, HeaderBuilder, ObjectBuilder, OpenApi, Ref, ResponseBuilder, Type};

use super::{ApiError, ApiState, ErrorCode};
use crate::connections::address_key;
use warden_service::access::{digest, MAX_TOKEN_BYTES};
use warden_service::config::serve::RateLimit;

pub use warden_service::access::{Tokens, MIN_BOOTSTRAP_TOKEN_LEN};
pub(crate) use warden_service::tasks::Principal;
pub use warden_service::tasks::Role as ApiRole;

/// Who made a request, and what their token may do: the task service's principal and role
/// (one type for every interface), authenticated here from a bearer token. A handler passes it
/// on as the `&Principal` it derefs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub Principal);

impl std::ops::Deref for Caller {
    type Target = Principal;

    fn deref(&self) -> &Principal {
        &self.0
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(limit: RateLimit, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(limit.burst),
            at: now,
        }
    }

    /// Refills for the time since it was last used, up to the burst.
    fn refill(&mut self, limit: RateLimit, now: Instant) {
        let per_second = f64::from(limit.per_minute) / 60.0;
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * per_second).min(f64::from(limit.burst));
        self.at = now;
    }

    /// Takes one unit, or says in how many whole seconds one is back.
    fn take(&mut self, limit: RateLimit, now: Instant) -> Result<(), u64> {
        self.refill(limit, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let per_second = f64::from(limit.per_minute) / 60.0;
            let wait = ((1.0 - self.tokens) / per_second).ceil();
            // At most a minute per unit at the slowest allowed rate (1 per minute).
            Err((wait as u64).clamp(1, 60))
        }
    }

    /// Takes one unit now or, when none is left, the next one not yet promised (the bucket
    /// goes below zero, so reservations are served in the order they were made), and says how
    /// long to wait for it; when that is longer than `max_wait`, reserves nothing and says in
    /// how many whole seconds to come back.
    fn reserve(
        &mut self,
        limit: RateLimit,
        now: Instant,
        max_wait: Duration,
    ) -> Result<Duration, u64> {
        self.refill(limit, now);
        let per_second = f64::from(limit.per_minute) / 60.0;
        let wait = if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / per_second)
        };
        if wait > max_wait {
            let back = (wait - max_wait).as_secs_f64().ceil();
            return Err((back as u64).max(1));
        }
        self.tokens -= 1.0;
        Ok(wait)
    }

    /// Gives a reserved unit back (the attempt succeeded).
    fn refund(&mut self, limit: RateLimit, now: Instant) {
        self.refill(limit, now);
        self.tokens = (self.tokens + 1.0).min(f64::from(limit.burst));
    }
}

/// A token bucket per API token (keyed by its digest), in memory. Only authenticated tokens
/// get a bucket, so the map is bounded by the number of real tokens.
pub struct RateLimiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<[u8; 32], Bucket>>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    pub fn new(limit: RateLimit) -> RateLimiter {
        RateLimiter {
            limit: RateLimit {
                per_minute: limit.per_minute.max(1),
                burst: limit.burst.max(1),
            },
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `key`'s bucket, or says in how many whole seconds one is back.
    fn take(&self, key: [u8; 32], now: Instant) -> Result<(), u64> {
        // Nothing panics while the lock is held, but a poisoned map is still a valid map.
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(self.limit, now))
            .take(self.limit, now)
    }
}

/// The web console's session cookie over HTTPS (`__Host-`: Secure, Path=/, no Domain).
pub const SECURE_COOKIE: &str = "__Host-warden_session";
/// The web console's session cookie over plain HTTP.
pub const PLAIN_COOKIE: &str = "warden_session";

/// The web session secret the request carries, if any (the secure cookie wins): a credential,
/// read here for the API's callers as for the console's pages.
pub(super) fn session_secret(headers: &HeaderMap) -> Option<String> {
    let mut plain = None;
    for value in headers.get_all(header::COOKIE) {
        let Ok(text) = value.to_str() else { continue };
        for pair in text.split(';') {
            let Some((name, value)) = pair.trim().split_once('=') else {
                continue;
            };
            match name {
                SECURE_COOKIE => return Some(value.to_string()),
                PLAIN_COOKIE => plain = Some(value.to_string()),
                _ => {}
            }
        }
    }
    plain
}

/// Failed authentications one client address may make by default: 30 at once, then 30 a
/// minute.
pub const DEFAULT_AUTH_FAILURE_LIMIT: RateLimit = RateLimit {
    per_minute: 30,
    burst: 30,
};

/// Client addresses [`AuthThrottle`] keeps a bucket for at most.
pub(crate) const MAX_THROTTLED_ADDRESSES: usize = 4096;

/// A token bucket of failed authentications per client address, in memory and bounded: when
/// `MAX_THROTTLED_ADDRESSES` addresses have buckets, those refilled to the full burst (as
/// good as new) are forgotten, and if none is, new addresses share one overflow bucket. An
/// attacker with many addresses thus throttles only other failing addresses, never valid
/// tokens, and cannot grow the table.
pub struct AuthThrottle {
    limit: RateLimit,
    table: Mutex<ThrottleTable<u128>>,
}

/// Buckets by key, bounded: see [`AuthThrottle`].
struct ThrottleTable<K> {
    buckets: HashMap<K, Bucket>,
    overflow: Option<Bucket>,
    pruned_at: Option<Instant>,
}

impl<K: std::hash::Hash + Eq> ThrottleTable<K> {
    fn new() -> ThrottleTable<K> {
        ThrottleTable {
            buckets: HashMap::new(),
            overflow: None,
            pruned_at: None,
        }
    }

    /// `key`'s bucket, made full if new; the shared overflow bucket when the table is full
    /// of buckets that have not refilled (pruned at most once a second).
    fn bucket(&mut self, key: K, limit: RateLimit, now: Instant, max: usize) -> &mut Bucket {
        if !self.buckets.contains_key(&key) && self.buckets.len() >= max {
            if self
                .pruned_at
                .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1))
            {
                self.pruned_at = Some(now);
                self.buckets.retain(|_, bucket| {
                    bucket.refill(limit, now);
                    bucket.tokens < f64::from(limit.burst)
                });
            }
            if self.buckets.len() >= max {
                return self
                    .overflow
                    .get_or_insert_with(|| Bucket::full(limit, now));
            }
        }
        self.buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(limit, now))
    }

    /// `key`'s bucket if it has one (or the overflow bucket when the table is full).
    fn existing(&mut self, key: &K, max: usize) -> Option<&mut Bucket> {
        let full = self.buckets.len() >= max;
        match self.buckets.get_mut(key) {
            Some(bucket) => Some(bucket),
            None if full => self.overflow.as_mut(),
            None => None,
        }
    }
}

impl std::fmt::Debug for AuthThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthThrottle")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl AuthThrottle {
    pub fn new(limit: RateLimit) -> AuthThrottle {
        AuthThrottle {
            limit: RateLimit {
                per_minute: limit.per_minute.max(1),
                burst: limit.burst.max(1),
            },
            table: Mutex::new(ThrottleTable::new()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, ThrottleTable<u128>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one failed authentication from `address`, or says in how many whole seconds
    /// the address may fail again.
    pub(crate) fn take(&self, address: Option<IpAddr>, now: Instant) -> Result<(), u64> {
        let limit = self.limit;
        self.table()
            .bucket(address_key(address), limit, now, MAX_THROTTLED_ADDRESSES)
            .take(limit, now)
    }

    /// Reserves one failure of `address` for a sign-in about to be checked (see
    /// [`Bucket::reserve`]): how long to wait for it, or in how many seconds to come back.
    pub(crate) fn reserve(
        &self,
        address: Option<IpAddr>,
        now: Instant,
        max_wait: Duration,
    ) -> Result<Duration, u64> {
        let limit = self.limit;
        self.table()
            .bucket(address_key(address), limit, now, MAX_THROTTLED_ADDRESSES)
            .reserve(limit, now, max_wait)
    }

    /// Gives back a failure reserved for a sign-in that succeeded.
    pub(crate) fn refund(&self, address: Option<IpAddr>, now: Instant) {
        let limit = self.limit;
        if let Some(bucket) = self
            .table()
            .existing(&address_key(address), MAX_THROTTLED_ADDRESSES)
        {
            bucket.refund(limit, now);
        }
    }

    /// Whether `address` has no failures left right now, and for how many whole seconds.
    pub(crate) fn throttled(&self, address: Option<IpAddr>, now: Instant) -> Option<u64> {
        let limit = self.limit;
        let mut table = self.table();
        let bucket = table.existing(&address_key(address), MAX_THROTTLED_ADDRESSES)?;
        bucket.refill(limit, now);
        (bucket.tokens < 1.0).then(|| {
            let per_second = f64::from(limit.per_minute) / 60.0;
            ((1.0 - bucket.tokens) / per_second).ceil().max(1.0) as u64
        })
    }

    /// How many addresses have a bucket.
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buckets
            .len()
    }
}

/// Failed password sign-ins one account may take by default, from every address together: 10
/// at once, then 6 a minute.
pub const DEFAULT_ACCOUNT_FAILURE_LIMIT: RateLimit = RateLimit {
    per_minute: 6,
    burst: 10,
};

/// How long a console sign-in waits for its turn at most by default; beyond, 429.
pub const DEFAULT_SIGN_IN_WAIT: Duration = Duration::from_secs(30);

/// Account names [`SignInThrottle`] keeps a bucket for at most (as for addresses).
pub(crate) const MAX_THROTTLED_ACCOUNTS: usize = 4096;

/// The throttle of console sign-ins: a failure costs one unit of its client address's bucket
/// (the [`AuthThrottle`] the API's failed authentications spend too) and, for a password, one
/// of its account name's bucket here, whatever the address. A sign-in whose address or account
/// is out of units is not refused but waits for the next unit not yet promised (served in the
/// order they were asked for), then is checked; a success gives its units back. So guessing
/// is bounded per address and per account, and a correct password is answered after at most
/// the turns already promised, never refused for good. Refused with 429 (`Retry-After`) are
/// only a sign-in whose wait would exceed the longest ([`DEFAULT_SIGN_IN_WAIT`]), and a second
/// sign-in for an account from an address whose previous one for it is still waiting: one
/// address holds at most one place in an account's line, so an attacker with few addresses
/// cannot fill it.
pub struct SignInThrottle {
    account_limit: RateLimit,
    max_wait: Duration,
    accounts: Mutex<ThrottleTable<String>>,
    /// `(account, address key)` of the sign-ins waiting for their turn.
    waiting: Mutex<std::collections::HashSet<(String, u128)>>,
}

impl std::fmt::Debug for SignInThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInThrottle")
            .field("account_limit", &self.account_limit)
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}

/// Why a sign-in was refused its turn, and in how many whole seconds to come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoTurn(pub u64);

/// The account key of a name: names longer than any valid one share one key.
fn account_key(name: &str) -> String {
    if name.len() <= 64 {
        name.to_string()
    } else {
        "\u{0}too long".to_string()
    }
}

impl SignInThrottle {
    pub fn new(account_limit: RateLimit, max_wait: Duration) -> SignInThrottle {
        SignInThrottle {
            account_limit: RateLimit {
                per_minute: account_limit.per_minute.max(1),
                burst: account_limit.burst.max(1),
            },
            max_wait,
            accounts: Mutex::new(ThrottleTable::new()),
            waiting: Mutex::new(std::collections::HashSet::new()),
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<(String, u128)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A sign-in's turn from `address` for `account` (a password's name; `None` for a token),
    /// reserving one unit of each bucket; wait for it with [`Turn::wait`].
    pub(crate) fn turn<'a>(
        &'a self,
        addresses: &'a AuthThrottle,
        address: Option<IpAddr>,
        account: Option<&str>,
    ) -> Result<Turn<'a>, NoTurn> {
        let now = Instant::now();
        let account = account.map(account_key);
        let place = account.clone().map(|a| (a, address_key(address)));
        if let Some(place) = &place {
            if self.waiting().contains(place) {
                let per_unit = 60 / u64::from(self.account_limit.per_minute);
                return Err(NoTurn(per_unit.max(1)));
            }
        }
        let by_address = addresses
            .reserve(address, now, self.max_wait)
            .map_err(NoTurn)?;
        let by_account = match &account {
            None => Duration::ZERO,
            Some(account) => {
                let limit = self.account_limit;
                let reserved = self
                    .accounts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .bucket(account.clone(), limit, now, MAX_THROTTLED_ACCOUNTS)
                    .reserve(limit, now, self.max_wait);
                match reserved {
                    Ok(wait) => wait,
                    Err(secs) => {
                        addresses.refund(address, now);
                        return Err(NoTurn(secs));
                    }
                }
            }
        };
        let wait = by_address.max(by_account);
        let place = place.filter(|_| !wait.is_zero());
        if let Some(place) = &place {
            self.waiting().insert(place.clone());
        }
        Ok(Turn {
            throttle: self,
            addresses,
            address,
            account,
            place,
            wait,
        })
    }
}

/// A sign-in's reserved units: kept (as the failure's cost) unless [`Turn::succeeded`].
pub(crate) struct Turn<'a> {
    throttle: &'a SignInThrottle,
    addresses: &'a AuthThrottle,
    address: Option<IpAddr>,
    account: Option<String>,
    /// Its place in an account's line while it waits.
    place: Option<(String, u128)>,
    wait: Duration,
}

impl Turn<'_> {
    /// Waits until the units are there (at once unless throttled).
    pub(crate) async fn wait(&self) {
        if !self.wait.is_zero() {
            tokio::time::sleep(self.wait).await;
        }
    }

    /// The sign-in succeeded (or was not checked): its units go back.
    pub(crate) fn succeeded(self) {
        let now = Instant::now();
        self.addresses.refund(self.address, now);
        if let Some(account) = &self.account {
            let limit = self.throttle.account_limit;
            if let Some(bucket) = self
                .throttle
                .accounts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .existing(account, MAX_THROTTLED_ACCOUNTS)
            {
                bucket.refund(limit, now);
            }
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            self.throttle.waiting().remove(&place);
        }
    }
}

/// The SHA-256 digest of the request's bearer token, or why the request has none.
pub(super) fn presented_digest(headers: &HeaderMap) -> Result<[u8; 32], ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "missing bearer token"))?;
    let text = value
        .to_str()
        .map_err(|_| ApiError::new(ErrorCode::Unauthorized, "malformed Authorization header"))?;
    let token = match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "the Authorization header must be `Bearer <token>`",
            ))
        }
    };
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(invalid_token());
    }
    Ok(digest(token))
}

fn invalid_token() -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, "invalid token")
}

/// Who holds the token with digest `presented` (bootstrap tokens first, then the store's
/// unrevoked tokens), charging nothing: for [`authenticate`] and for open event streams, which
/// check now and then that their token still holds.
pub(super) async fn identify(state: &ApiState, presented: &[u8; 32]) -> Result<Caller, ApiError> {
    Ok(Caller(state.access.identify_token(presented).await?))
}

/// Takes one request from the bucket of the token with digest `presented` (429 when empty).
pub(super) fn charge(state: &ApiState, presented: &[u8; 32]) -> Result<(), ApiError> {
    state
        .limiter
        .take(*presented, Instant::now())
        .map_err(|secs| ApiError {
            retry_after_secs: Some(secs),
            ..ApiError::new(
                ErrorCode::RateLimited,
                format!("too many requests for this token; retry in {secs} s"),
            )
        })
}

/// The client address of a request: its connection's peer, or, from a peer among `[serve]
/// trusted_proxies`, the client its forwarding header names (see [`super::forwarded`]).
pub(super) fn client_address(state: &ApiState, parts: &Parts) -> Option<IpAddr> {
    peer_address(parts)
        .map(|peer| super::forwarded::client_address(peer, &parts.headers, &state.trusted_proxies))
}

/// The TCP peer of a request: its connection's (see [`crate::connections::ClientConnection`]),
/// or axum's `ConnectInfo` when served otherwise.
pub(super) fn peer_address(parts: &Parts) -> Option<IpAddr> {
    if let Some(connection) = parts
        .extensions
        .get::<crate::connections::ClientConnection>()
    {
        return Some(connection.peer.ip());
    }
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}

/// 429 for an address out of failed authentications.
fn throttled(secs: u64) -> ApiError {
    ApiError {
        retry_after_secs: Some(secs),
        ..ApiError::new(
            ErrorCode::RateLimited,
            format!("too many failed authentications from this address; retry in {secs} s"),
        )
    }
}

/// What a request authenticates with: a bearer token (by its digest), or, for reads only, the
/// web console's session cookie (the console's pages read the API's event stream with it).
#[derive(Clone)]
pub(super) enum Credential {
    Token([u8; 32]),
    Session(String),
}

impl Credential {
    /// The key its rate limit and its event-stream slots are counted under.
    pub(super) fn key(&self) -> [u8; 32] {
        match self {
            Credential::Token(presented) => *presented,
            Credential::Session(secret) => digest(secret),
        }
    }
}

/// The request's credential: its bearer token; without one, on a `GET` or `HEAD`, the
/// console's session cookie while the console is served. A state-changing request needs a
/// bearer token whatever cookies it carries, so a cross-site form cannot change anything
/// through the API.
pub(super) fn presented_credential(
    state: &ApiState,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Credential, ApiError> {
    let reading = matches!(*method, Method::GET | Method::HEAD);
    if state.web_enabled && !headers.contains_key(header::AUTHORIZATION) && reading {
        if let Some(secret) = session_secret(headers) {
            return Ok(Credential::Session(secret));
        }
    }
    presented_digest(headers).map(Credential::Token)
}

/// Who holds `credential`, charging nothing (see [`identify`]); a console session that ended
/// is a 401 like a revoked token.
pub(super) async fn identify_credential(
    state: &ApiState,
    credential: &Credential,
) -> Result<Caller, ApiError> {
    match credential {
        Credential::Token(presented) => identify(state, presented).await,
        Credential::Session(secret) => match state.access.session(secret).await? {
            Some((_, principal)) => Ok(Caller(principal)),
            None => Err(ApiError::new(
                ErrorCode::Unauthorized,
                "the console session ended; sign in again",
            )),
        },
    }
}

/// The caller presenting the request's credential (a bearer token; a console session for
/// reads), after charging its rate limit once. A failure is charged to the client address
/// instead (429 once that is spent).
pub(super) async fn authenticate(state: &ApiState, parts: &Parts) -> Result<Caller, ApiError> {
    let identified = match presented_credential(state, &parts.method, &parts.headers) {
        Ok(credential) => match &credential {
            // Bootstrap tokens are checked in memory: never throttled, never queued.
            Credential::Token(presented)
                if state
                    .access
                    .bootstrap()
                    .authenticate_digest(presented)
                    .is_some() =>
            {
                identify(state, presented)
                    .await
                    .map(|caller| (credential, caller))
            }
            _ => {
                // An address out of failures gets its store lookups (one query each) only a
                // few at a time, so a flood of made-up credentials cannot load the database
                // that every valid request needs; a valid stored one still gets through.
                let _permit = match state
                    .auth_failures
                    .throttled(client_address(state, parts), Instant::now())
                {
                    Some(secs) => match state.throttled_lookups.try_acquire() {
                        Ok(permit) => Some(permit),
                        Err(_) => return Err(throttled(secs)),
                    },
                    None => None,
                };
                identify_credential(state, &credential)
                    .await
                    .map(|caller| (credential, caller))
            }
        },
        Err(error) => Err(error),
    };
    let (credential, caller) = match identified {
        Ok(found) => found,
        Err(error) if error.code == ErrorCode::Unauthorized => {
            let address = client_address(state, parts);
            return Err(match state.auth_failures.take(address, Instant::now()) {
                Ok(()) => error,
                Err(secs) => throttled(secs),
            });
        }
        Err(error) => return Err(error),
    };
    if let Some(connection) = parts
        .extensions
        .get::<crate::connections::ClientConnection>()
    {
        connection.mark_authenticated();
    }
    charge(state, &credential.key())?;
    Ok(caller)
}

/// Every route that needs a token takes a [`Caller`] as its first extractor after the state,
/// so the request is authenticated (and charged, once) before its path parameters and body are
/// looked at: an anonymous caller learns nothing about the route's input and gets no body
/// parsed.
impl FromRequestParts<Arc<ApiState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Caller, ApiError> {
        authenticate(state, parts).await
    }
}

/// Adds the 429 answer (with `Retry-After`) to every operation that needs a token: every such
/// route takes a [`Caller`], whose extraction charges the rate limit.
pub(super) fn document_rate_limit(document: &mut OpenApi) {
    for item in document.paths.paths.values_mut() {
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            // `security(())` (an empty requirement) marks a route without a token.
            let public = operation
                .security
                .as_ref()
                .is_some_and(|s| s.iter().all(|r| r == &Default::default()));
            if public {
                continue;
            }
            let response = ResponseBuilder::new()
                .description(
                    "Too many requests for this token, or too many failed authentications from \
                     this address; retry after Retry-After seconds",
                )
                .header(
                    "Retry-After",
                    HeaderBuilder::new()
                        .schema(ObjectBuilder::new().schema_type(Type::Integer))
                        .description(Some("Seconds until a request is allowed again"))
                        .build(),
                )
                .content(
                    "application/json",
                    Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                )
                .build();
            operation
                .responses
                .responses
                .entry("429".to_string())
                .or_insert_with(|| response.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_a_burst_and_refill_per_token() {
        let limiter = RateLimiter::new(RateLimit {
            per_minute: 60,
            burst: 2,
        });
        let start = Instant::now();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert_eq!(limiter.take(a, start), Ok(()));
        assert_eq!(limiter.take(a, start), Ok(()));
        assert_eq!(limiter.take(a, start), Err(1));
        // Another token has its own bucket.
        assert_eq!(limiter.take(b, start), Ok(()));
        // One per second comes back, never more than the burst.
        let later = start + std::time::Duration::from_secs(1);
        assert_eq!(limiter.take(a, later), Ok(()));
        assert_eq!(limiter.take(a, later), Err(1));
        let much_later = start + std::time::Duration::from_secs(3600);
        assert_eq!(limiter.take(a, much_later), Ok(()));
        assert_eq!(limiter.take(a, much_later), Ok(()));
        assert!(limiter.take(a, much_later).is_err());
        let slow = RateLimiter::new(RateLimit {
            per_minute: 1,
            burst: 1,
        });
        assert_eq!(slow.take(a, start), Ok(()));
        assert_eq!(slow.take(a, start), Err(60));
    }

    #[test]
    fn failed_authentications_are_throttled_per_address_in_a_bounded_table() {
        let limiter = AuthThrottle::new(RateLimit {
            per_minute: 60,
            burst: 2,
        });
        let start = Instant::now();
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(limiter.take(Some(one), start), Ok(()));
        assert_eq!(limiter.take(Some(mapped), start), Ok(()));
        assert_eq!(limiter.take(Some(one), start), Err(1));
        assert_eq!(limiter.take(Some(other), start), Ok(()));
        // One IPv6 /64 is one client.
        let v6a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(limiter.take(Some(v6a), start), Ok(()));
        assert_eq!(limiter.take(Some(v6b), start), Ok(()));
        assert!(limiter.take(Some(v6a), start).is_err());
        assert_eq!(
            limiter.take(Some(one), start + Duration::from_secs(1)),
            Ok(())
        );
        // Many addresses failing at once: the table stops growing, newcomers share a bucket.
        for n in 0..(MAX_THROTTLED_ADDRESSES as u32 + 1000) {
            let address = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            let _ = limiter.take(Some(address), start);
        }
        assert_eq!(limiter.addresses(), MAX_THROTTLED_ADDRESSES);
        let fresh = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7));
        assert!(limiter.take(Some(fresh), start).is_err());
        // Once the buckets have refilled they are forgotten and new addresses get their own.
        let later = start + Duration::from_secs(3600);
        assert_eq!(limiter.take(Some(fresh), later), Ok(()));
        assert!(limiter.addresses() < 10);
    }
}
