//! `GET /v1/tasks/{id}/journal`: a task's run journals, a page at a time.
//!
//! The page is [`warden_service::tasks::TaskService::journal_page`]'s, the one reader `warden
//! logs` shares: records of every run (or of one, `run=N`), at most `limit` (1-200, default 50),
//! `next_cursor` naming the last record sent (`<run>.<seq>`); each record says whether it
//! continues its run's hash chain (checked against the stored record before it, whichever page
//! that is on), and is redacted for display from what was recorded with it, so page N costs
//! what page 1 does.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::schema::ErrorBody;
use super::{ApiError, ApiPath, ApiQuery, ApiState, ErrorCode};
use warden_protocol::views::{JournalCursor, JournalPage};
use warden_service::tasks::JournalPageQuery;

/// Records a page holds unless `limit` says otherwise.
const DEFAULT_PAGE: u32 = 50;
/// The most records a page holds (raw model responses can be large).
const MAX_PAGE: u32 = 200;

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(task_journal))
}

/// `run`, `cursor` and `limit` of a journal request.
#[derive(Debug, PartialEq, Eq)]
struct JournalQuery {
    run: Option<u32>,
    /// The last record of the previous page.
    after: Option<JournalCursor>,
    limit: u32,
}

/// The journal route's query parameters as sent (see [`super::ApiQuery`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JournalParams {
    run: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

fn journal_query(params: JournalParams) -> Result<JournalQuery, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    let mut parsed = JournalQuery {
        run: None,
        after: None,
        limit: DEFAULT_PAGE,
    };
    if let Some(value) = params.run {
        parsed.run = Some(
            value
                .parse::<u32>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| bad(format!("run must be a run number, got {value:?}")))?,
        );
    }
    if let Some(value) = params.cursor.filter(|c| !c.is_empty()) {
        parsed.after = Some(value.parse::<JournalCursor>().map_err(bad)?);
    }
    if let Some(value) = params.limit {
        parsed.limit = value
            .parse()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| bad(format!("limit must be 1-{MAX_PAGE}, got {value:?}")))?;
    }
    Ok(parsed)
}

/// A page of the journal of every run of a task (or of one, with `run`).
#[utoipa::path(get, path = "/v1/tasks/{id}/journal", tag = "tasks",
    params(
        ("id" = String, Path, description = "The task id"),
        // A run number is a u32: `int64` with a maximum, as `int32` would stop at 2^31 - 1.
        ("run" = Option<i64>, Query, minimum = 1, maximum = 4294967295_i64,
            description = "Only this run (from 1); no runs when it does not exist"),
        ("cursor" = Option<String>, Query, pattern = r"^([0-9]+\.[0-9]+)?$",
            description = "`next_cursor` of the previous page (`<run>.<seq>`)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200,
            description = "Records a page holds: 1-200, default 50"),
    ),
    responses(
        (status = 200, description = "A page of the task's journal records, each with whether it continues the chain", body = JournalPage),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token", body = ErrorBody),
    ))]
async fn task_journal(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<JournalParams>,
) -> Result<Json<JournalPage>, ApiError> {
    let query = journal_query(params)?;
    let page = state
        .tasks
        .journal_page(
            &caller,
            &id,
            JournalPageQuery {
                run: query.run,
                after: query.after,
                limit: query.limit,
            },
        )
        .await?;
    Ok(Json(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_query(query: Option<&str>) -> Result<JournalQuery, ApiError> {
        journal_query(crate::routes::decode_query(query)?)
    }

    #[test]
    fn journal_queries() {
        let parsed = parse_query(None).unwrap();
        assert_eq!(
            parsed,
            JournalQuery {
                run: None,
                after: None,
                limit: DEFAULT_PAGE
            }
        );
        let parsed = parse_query(Some("run=2&cursor=2.17&limit=200")).unwrap();
        assert_eq!(
            parsed,
            JournalQuery {
                run: Some(2),
                after: Some(JournalCursor { run: 2, seq: 17 }),
                limit: 200
            }
        );
        assert_eq!(parse_query(Some("cursor=")).unwrap().after, None);
        for bad in [
            "run=0",
            "run=x",
            "limit=0",
            "limit=201",
            "limit=-1",
            "cursor=x",
            "cursor=1",
            "cursor=0.3",
            "cursor=1.",
            "cursor=.3",
            "cursor=1.-3",
            "cursor=1.+3",
            "cursor=1.99999999999999999999",
            "page=2",
            "run=1&run=2",
        ] {
            assert!(parse_query(Some(bad)).is_err(), "{bad}");
        }
        // Percent-encoded like any query string (a client encoding the `.` is not wrong).
        assert_eq!(
            parse_query(Some("cursor=2%2E17&limit=%35")).unwrap(),
            JournalQuery {
                run: None,
                after: Some(JournalCursor { run: 2, seq: 17 }),
                limit: 5
            }
        );
    }
}
