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
//! looked at after the token failed. The address is the TCP peer's (behind a reverse proxy,
//! the proxy's: its clients' failures share one bucket, their valid tokens still pass).
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
use warden_engine::serve_config::RateLimit;
use warden_service::access::{digest, MAX_TOKEN_BYTES};

pub use warden_service::access::{Tokens, MIN_BOOTSTRAP_TOKEN_LEN};
pub use warden_service::tasks::{Principal, Role as ApiRole};

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

/// Failed authentications one client address may make by default: 30 at once, then 30 a
/// minute.
pub const DEFAULT_AUTH_FAILURE_LIMIT: RateLimit = RateLimit {
    per_minute: 30,
    burst: 30,
};

/// Client addresses [`AuthThrottle`] keeps a bucket for at most.
pub const MAX_THROTTLED_ADDRESSES: usize = 4096;

/// A token bucket of failed authentications per client address, in memory and bounded: when
/// [`MAX_THROTTLED_ADDRESSES`] addresses have buckets, those refilled to the full burst (as
/// good as new) are forgotten, and if none is, new addresses share one overflow bucket. An
/// attacker with many addresses thus throttles only other failing addresses, never valid
/// tokens, and cannot grow the table.
pub struct AuthThrottle {
    limit: RateLimit,
    table: Mutex<ThrottleTable>,
}

struct ThrottleTable {
    buckets: HashMap<u128, Bucket>,
    overflow: Option<Bucket>,
    pruned_at: Option<Instant>,
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
            table: Mutex::new(ThrottleTable {
                buckets: HashMap::new(),
                overflow: None,
                pruned_at: None,
            }),
        }
    }

    /// Counts one failed authentication from `address`, or says in how many whole seconds
    /// the address may fail again.
    pub(crate) fn take(&self, address: Option<IpAddr>, now: Instant) -> Result<(), u64> {
        let key = address_key(address);
        let limit = self.limit;
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if !table.buckets.contains_key(&key) && table.buckets.len() >= MAX_THROTTLED_ADDRESSES {
            // Pruning scans the table: at most once a second.
            if table
                .pruned_at
                .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1))
            {
                table.pruned_at = Some(now);
                table.buckets.retain(|_, bucket| {
                    bucket.refill(limit, now);
                    bucket.tokens < f64::from(limit.burst)
                });
            }
            if table.buckets.len() >= MAX_THROTTLED_ADDRESSES {
                return table
                    .overflow
                    .get_or_insert_with(|| Bucket::full(limit, now))
                    .take(limit, now);
            }
        }
        table
            .buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(limit, now))
            .take(limit, now)
    }

    /// Whether `address` has no failures left right now, and for how many whole seconds.
    pub(crate) fn throttled(&self, address: Option<IpAddr>, now: Instant) -> Option<u64> {
        let key = address_key(address);
        let limit = self.limit;
        let mut guard = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let table = &mut *guard;
        let full = table.buckets.len() >= MAX_THROTTLED_ADDRESSES;
        let bucket = match table.buckets.get_mut(&key) {
            Some(bucket) => bucket,
            None if full => table.overflow.as_mut()?,
            None => return None,
        };
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

/// The client address of a request: its connection's peer (see
/// [`crate::connections::ClientConnection`]), or axum's `ConnectInfo` when served otherwise.
pub(super) fn client_address(parts: &Parts) -> Option<IpAddr> {
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
        if let Some(secret) = super::web::session_secret(headers) {
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
                    .throttled(client_address(parts), Instant::now())
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
            let address = client_address(parts);
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
