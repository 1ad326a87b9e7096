//! `GET /v1/usage[?since=YYYY-MM-DD]`: the usage ledger summed per UTC day, per task, per
//! model and per role. Admins see everyone's spend; other tokens the spend of their own tasks.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::views::Spend;
use warden_time::UtcDay;

use super::auth::Caller;
use super::schema::ErrorBody;
use super::{ApiError, ApiQuery, ApiState, ErrorCode};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(usage))
}

/// Sums over ledger entries.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SpendView {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    /// `cached_input_tokens / input_tokens` (4 places); absent without input tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<f64>,
    pub output_tokens: u64,
    /// Dollars of the entries with a known price.
    pub cost_usd: f64,
    /// Some entry's model had no price: the true cost is higher than `cost_usd`.
    pub cost_unknown: bool,
    /// Model calls recorded (one ledger entry each).
    pub model_calls: u64,
}

impl From<Spend> for SpendView {
    fn from(spend: Spend) -> SpendView {
        SpendView {
            input_tokens: spend.input_tokens,
            cached_input_tokens: spend.cached_input_tokens,
            cache_hit_rate: warden_protocol::cache_hit_rate(
                spend.cached_input_tokens,
                spend.input_tokens,
            ),
            output_tokens: spend.output_tokens,
            cost_usd: spend.cost_micro_usd as f64 / 1e6,
            cost_unknown: spend.cost_unknown,
            model_calls: spend.entries,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DaySpend {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    #[serde(flatten)]
    pub spend: SpendView,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TaskSpend {
    pub task_id: String,
    #[serde(flatten)]
    pub spend: SpendView,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ModelSpend {
    pub model: String,
    #[serde(flatten)]
    pub spend: SpendView,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RoleSpend {
    /// Who made the calls: `agent` (the task's own loop, compaction included), `explorer`
    /// (the explorers it sent) or `reviewer`.
    pub role: String,
    #[serde(flatten)]
    pub spend: SpendView,
}

/// Spend four ways, each sorted by its key.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UsageView {
    pub by_day: Vec<DaySpend>,
    pub by_task: Vec<TaskSpend>,
    pub by_model: Vec<ModelSpend>,
    pub by_role: Vec<RoleSpend>,
}

/// The usage route's query parameters as sent (see [`super::ApiQuery`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageParams {
    since: Option<String>,
}

fn parse_since(params: UsageParams) -> Result<Option<UtcDay>, ApiError> {
    match params.since {
        None => Ok(None),
        Some(value) => UtcDay::parse(&value)
            .map(Some)
            .map_err(|e| ApiError::new(ErrorCode::BadRequest, format!("since: {e}"))),
    }
}

/// Spend per UTC day, per task, per model and per role (agent, explorer, reviewer).
#[utoipa::path(get, path = "/v1/usage", tag = "usage",
    params(("since" = Option<String>, Query, format = Date,
        description = "Only spend recorded on or after this UTC day (`YYYY-MM-DD`)")),
    responses(
        (status = 200, description = "Spend of the token's tasks (everyone's for an admin)", body = UsageView),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
    ))]
async fn usage(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiQuery(params): ApiQuery<UsageParams>,
) -> Result<Json<UsageView>, ApiError> {
    let since = parse_since(params)?;
    let summary = state
        .tasks
        .usage(&caller, since.map(UtcDay::start_ms))
        .await?;
    Ok(Json(UsageView {
        by_day: summary
            .by_day
            .into_iter()
            .map(|(day, spend)| DaySpend {
                day: day.to_string(),
                spend: spend.into(),
            })
            .collect(),
        by_task: summary
            .by_task
            .into_iter()
            .map(|(task, spend)| TaskSpend {
                task_id: task.to_string(),
                spend: spend.into(),
            })
            .collect(),
        by_model: summary
            .by_model
            .into_iter()
            .map(|(model, spend)| ModelSpend {
                model,
                spend: spend.into(),
            })
            .collect(),
        by_role: summary
            .by_role
            .into_iter()
            .map(|(role, spend)| RoleSpend {
                role,
                spend: spend.into(),
            })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_since(query: Option<&str>) -> Result<Option<UtcDay>, ApiError> {
        super::parse_since(crate::routes::decode_query(query)?)
    }

    #[test]
    fn since_queries() {
        assert_eq!(parse_since(None).unwrap(), None);
        assert_eq!(
            parse_since(Some("since=2026-12-01")).unwrap(),
            UtcDay::from_ymd(2026, 12, 1)
        );
        for bad in [
            "since=2026-13-01",
            "since=2026-02-30",
            "since=26-12-01",
            "since=2026-12-1",
            "since=+026-12-01",
            "since=",
            "day=2026-12-01",
        ] {
            assert!(parse_since(Some(bad)).is_err(), "{bad}");
        }
    }
}
