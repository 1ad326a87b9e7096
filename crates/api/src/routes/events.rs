//! `GET /v1/tasks/{id}/events` and `GET /v1/events` (Server-Sent Events) and `GET /metrics`.
//!
//! Each event is one message:
//! `id: N\nevent: <type>\ndata: {"seq","task_seq","task","at","event"}\n\n`, where `N` is the
//! task's own sequence (`task_seq`) on a task's stream and the global `seq` on `/v1/events`.
//! `Last-Event-ID` (or `?after=N`; the header wins, as a reconnecting browser sends both)
//! resumes strictly after `N` with no gap and no repeat. A task's stream starts at its first
//! event and ends once the task is terminal and every stored event was sent (at once for a
//! finished task); `/v1/events` starts at the current end unless a cursor is given
//! (`?after=0` replays everything) and never ends. Idle streams carry `: keep-alive` comments.
//! Admins see every task's events; other tokens their own tasks'.
//!
//! An open stream ends at once when its credential does: it watches the revocations of its
//! principal's name ([`warden_service::access::revocations`]: a token revoked, a console
//! session revoked or signed out, a password set, a web user removed, in this process before
//! the call returns, by other processes within the store poll), and on one that may concern it,
//! or while idle, it checks its credential again before sending anything (one store read,
//! charging no rate limit), and ends without the message at hand if it no longer authenticates
//! as the same caller. Besides, it checks at most every [`ApiState::stream_recheck`] before
//! sending (keep-alives count), which catches what no announcement names. Bootstrap tokens
//! cannot be revoked while the server runs; a store that cannot be read ends the stream too
//! (the client resumes with `Last-Event-ID`).
//!
//! A token holds at most [`ApiState::streams`]' limit of open streams at once (`[serve]
//! max_streams_per_token`, [`warden_service::config::serve::DEFAULT_MAX_STREAMS_PER_TOKEN`] by default,
//! counted per token across both routes): one more is refused with 429 `too_many_streams` (no
//! `Retry-After`: a slot frees when one of the token's streams ends). Failed authentications
//! are throttled per address (see `auth.rs`), so anonymous stream attempts cost a 401 or 429
//! each and hold nothing.
//!
//! `/metrics` needs a token of any role: the counters say what the server is doing (task
//! counts, spend), which is not for anyone who can reach the port. Prometheus sends it with
//! `authorization: {credentials: …}` (or `bearer_token`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{identify_credential, presented_credential, Caller, Credential};
use super::schema::{ErrorBody, StreamMessage};
use super::{ApiError, ApiPath, ApiQuery, ApiState, ErrorCode};
use warden_service::access::RevocationWatch;
use warden_service::hub::{Selection, Subscription};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(task_events))
        .routes(routes!(all_events))
        .routes(routes!(metrics))
}

/// The cursor of a stream request: `Last-Event-ID`, else `?after=`; `None` when neither.
/// The stream routes' query parameters as sent (see [`super::ApiQuery`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamParams {
    after: Option<String>,
}

fn parse_cursor(headers: &HeaderMap, params: StreamParams) -> Result<Option<u64>, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    // Sequences are stored as signed 64-bit integers.
    let id = |text: &str| {
        text.parse::<u64>()
            .ok()
            .filter(|n| i64::try_from(*n).is_ok())
    };
    let after = match params.after {
        None => None,
        Some(value) => Some(id(&value).ok_or_else(|| {
            bad(format!(
                "after must be an event id (0 to 2^63-1), got {value:?}"
            ))
        })?),
    };
    match headers.get("last-event-id") {
        None => Ok(after),
        Some(value) => {
            let text = value.to_str().unwrap_or("\u{0}").trim();
            if text.is_empty() {
                // An empty id resets the browser's last event id: no cursor from the header.
                return Ok(after);
            }
            id(text).map(Some).ok_or_else(|| {
                bad(format!(
                    "Last-Event-ID must be an event id (0 to 2^63-1), got {text:?}"
                ))
            })
        }
    }
}

/// Open event streams per token (by digest). Only authenticated tokens get an entry, and an
/// entry goes when its last stream ends, so the map is bounded by the real tokens.
pub struct StreamCounter {
    limit: u32,
    open: Mutex<HashMap<[u8; 32], u32>>,
}

impl std::fmt::Debug for StreamCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamCounter")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl StreamCounter {
    pub fn new(limit: u32) -> StreamCounter {
        StreamCounter {
            limit: limit.max(1),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], u32>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one more stream of `token`, or refuses it at the limit.
    fn open(&self, token: [u8; 32]) -> Result<(), ApiError> {
        let mut open = self.lock();
        let count = open.entry(token).or_insert(0);
        if *count >= self.limit {
            return Err(ApiError::new(
                ErrorCode::TooManyStreams,
                format!(
                    "this token has {} event streams open already (serve.max_streams_per_token); \
                     close one first",
                    self.limit
                ),
            ));
        }
        *count += 1;
        Ok(())
    }

    fn close(&self, token: [u8; 32]) {
        let mut open = self.lock();
        if let Some(count) = open.get_mut(&token) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&token);
            }
        }
    }
}

/// The credential behind an open stream (a token, or a console session), checked again on a
/// revocation that may concern it and now and then. It holds one of the credential's stream
/// slots until dropped (when the stream ends or the client goes away).
struct TokenCheck {
    state: Arc<ApiState>,
    credential: Credential,
    caller: Caller,
    revocations: RevocationWatch,
    every: Duration,
    next: Instant,
}

impl TokenCheck {
    /// Takes one of the credential's stream slots (429 `too_many_streams` when none is left).
    fn new(state: &Arc<ApiState>, headers: &HeaderMap, caller: &Caller) -> Result<Self, ApiError> {
        let every = state.stream_recheck;
        let credential = presented_credential(state, &Method::GET, headers)?;
        state.streams.open(credential.key())?;
        Ok(TokenCheck {
            credential,
            revocations: state.access.watch_revocations(&caller.name),
            caller: caller.clone(),
            state: Arc::clone(state),
            every,
            next: Instant::now() + every,
        })
    }

    /// Whether the credential still authenticates as the same caller: looked up after a
    /// revocation that may concern it, else at most every `every`; without charging its rate
    /// limit.
    async fn holds(&mut self) -> bool {
        let now = Instant::now();
        if !self.revocations.concerns() && now < self.next {
            return true;
        }
        self.next = now + self.every;
        match identify_credential(&self.state, &self.credential).await {
            Ok(caller) if caller == self.caller => true,
            Ok(_) | Err(_) => {
                tracing::info!(caller = %self.caller.name, "an event stream's credential no longer authenticates; ending it");
                false
            }
        }
    }
}

impl Drop for TokenCheck {
    fn drop(&mut self) {
        self.state.streams.close(self.credential.key());
    }
}

fn event_stream(subscription: Subscription, check: TokenCheck) -> Response {
    // A revocation wakes the waiting subscription (an empty chunk) to look at once.
    let subscription = subscription.with_interrupt(check.revocations.signal());
    let stream = futures_util::stream::unfold(
        (subscription, check),
        |(mut subscription, mut check)| async move {
            loop {
                let chunk = subscription.next_chunk().await?;
                // Checked after the wait, so a credential revoked while the stream was idle
                // (or while this chunk was read) gets nothing more.
                if !check.holds().await {
                    return None;
                }
                if !chunk.is_empty() {
                    return Some((
                        Ok::<_, std::convert::Infallible>(chunk),
                        (subscription, check),
                    ));
                }
            }
        },
    );
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Reverse proxies (nginx) must pass each message on at once.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One task's events as Server-Sent Events; ends once the task is terminal and all were sent.
#[utoipa::path(get, path = "/v1/tasks/{id}/events", tag = "events",
    params(
        ("id" = String, Path, description = "The task id"),
        ("after" = Option<u64>, Query, maximum = 9223372036854775807_u64,
            description = "Resume after this task sequence number"),
        // Trimmed, then read as a u64, which takes a leading `+`.
        ("Last-Event-ID" = Option<String>, Header, pattern = r"^[\t ]*(\+?[0-9]+)?[\t ]*$",
            description = "Resume after this id, 0 to 2^63-1 (wins over `after`; empty: none)"),
    ),
    responses(
        (status = 200, description = "`id: <task_seq>`, `event: <type>`, `data: {seq, task_seq, task, at, event}` messages and `: keep-alive` comments",
            content_type = "text/event-stream", body = StreamMessage),
        (status = 400, description = "A malformed cursor or query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token", body = ErrorBody),
        (status = 429, description = "Too many requests or failed authentications (with Retry-After), or `too_many_streams`: the token holds serve.max_streams_per_token open streams already", body = ErrorBody),
    ))]
async fn task_events(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiQuery(params): ApiQuery<StreamParams>,
) -> Result<Response, ApiError> {
    let task = state.tasks.task(&caller, &id).await?;
    let after = parse_cursor(&headers, params)?;
    let check = TokenCheck::new(&state, &headers, &caller)?;
    let subscription = Subscription::new(
        Arc::clone(&state.hub),
        Selection::Task(task.id),
        Some(after.unwrap_or(0)),
    )
    .await
    .map_err(ApiError::internal)?;
    Ok(event_stream(subscription, check))
}

/// Every visible task's events as Server-Sent Events, from now on or after a cursor.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(
        ("after" = Option<u64>, Query, maximum = 9223372036854775807_u64,
            description = "Resume after this global sequence number (0: from the beginning); without a cursor the stream starts at the current end"),
        ("Last-Event-ID" = Option<String>, Header, pattern = r"^[\t ]*(\+?[0-9]+)?[\t ]*$",
            description = "Resume after this id, 0 to 2^63-1 (wins over `after`; empty: none)"),
    ),
    responses(
        (status = 200, description = "`id: <seq>`, `event: <type>`, `data: {seq, task_seq, task, at, event}` messages and `: keep-alive` comments; admins see every task, others their own",
            content_type = "text/event-stream", body = StreamMessage),
        (status = 400, description = "A malformed cursor or query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 429, description = "Too many requests or failed authentications (with Retry-After), or `too_many_streams`: the token holds serve.max_streams_per_token open streams already", body = ErrorBody),
    ))]
async fn all_events(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    ApiQuery(params): ApiQuery<StreamParams>,
) -> Result<Response, ApiError> {
    let after = parse_cursor(&headers, params)?;
    let check = TokenCheck::new(&state, &headers, &caller)?;
    let owner = caller.owner_scope().map(str::to_string);
    let subscription = Subscription::new(Arc::clone(&state.hub), Selection::All { owner }, after)
        .await
        .map_err(ApiError::internal)?;
    Ok(event_stream(subscription, check))
}

/// Prometheus metrics (text format 0.0.4, names prefixed `warden_`); any valid token.
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses(
        (status = 200, description = "The metrics", content_type = "text/plain", body = String),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
    ))]
async fn metrics(
    State(state): State<Arc<ApiState>>,
    _caller: Caller,
) -> Result<Response, ApiError> {
    let tasks = state.tasks.task_counts().await?;
    let text = state.hub.metrics.render(&tasks);
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_cursor(headers: &HeaderMap, query: Option<&str>) -> Result<Option<u64>, ApiError> {
        super::parse_cursor(headers, crate::routes::decode_query(query)?)
    }

    #[test]
    fn cursors() {
        let none = HeaderMap::new();
        assert_eq!(parse_cursor(&none, None).unwrap(), None);
        assert_eq!(parse_cursor(&none, Some("after=7")).unwrap(), Some(7));
        let mut resume = HeaderMap::new();
        resume.insert("last-event-id", HeaderValue::from_static("12"));
        assert_eq!(parse_cursor(&resume, Some("after=7")).unwrap(), Some(12));
        let mut empty = HeaderMap::new();
        empty.insert("last-event-id", HeaderValue::from_static(""));
        assert_eq!(parse_cursor(&empty, Some("after=3")).unwrap(), Some(3));
        assert_eq!(
            parse_cursor(&none, Some("after=9223372036854775807")).unwrap(),
            Some(i64::MAX as u64)
        );
        for bad in [
            "after=-1",
            "after=x",
            "after=",
            "limit=2",
            "after=9223372036854775808",
        ] {
            assert!(parse_cursor(&none, Some(bad)).is_err(), "{bad}");
        }
        let mut bad = HeaderMap::new();
        bad.insert("last-event-id", HeaderValue::from_static("abc"));
        assert!(parse_cursor(&bad, None).is_err());
    }
}
