//! The store-backed [`Ledger`] of a service run: every model response is appended to the usage
//! ledger, and before every model call the task's spend across all its runs (against
//! `[limits]`) and everyone's spend this UTC day (against `[serve]`'s per-day budgets) are read
//! back from it. A run that would exceed either stops before the call with `budget_exceeded`
//! saying what was spent. Responses replayed from an earlier run's journal were recorded when
//! they were first received and are not recorded again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use warden_protocol::{Failure, FailureCode, TaskId};
use warden_runtime::{BoxFuture, Cost, Ledger, ModelResponse, Role};
use warden_store::{Clock, Spend, UsageEntry, UtcDay};

use crate::outage::{RunStore, StoreCalls};

/// Token and money bounds; `None` means unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub max_tokens: Option<u64>,
    pub max_cost_micro_usd: Option<u64>,
}

impl Budget {
    fn is_unbounded(&self) -> bool {
        self.max_tokens.is_none() && self.max_cost_micro_usd.is_none()
    }

    /// `Err` with a message naming `scope` when `spend` has reached a bound.
    fn check(&self, scope: &str, spend: &Spend) -> Result<(), Failure> {
        let tokens = spend.input_tokens + spend.output_tokens;
        if let Some(max) = self.max_tokens {
            if tokens >= max {
                return Err(budget(format!(
                    "{scope} token budget of {max} reached ({tokens} tokens spent over {} model \
                     calls)",
                    spend.entries
                )));
            }
        }
        if let Some(max) = self.max_cost_micro_usd {
            if spend.cost_unknown {
                return Err(budget(format!(
                    "{scope} money budget is set but a model's price is unknown, so spend \
                     (${:.6} known) cannot be checked",
                    spend.cost_micro_usd as f64 / 1e6
                )));
            }
            if spend.cost_micro_usd >= max {
                return Err(budget(format!(
                    "{scope} cost budget of ${:.6} reached (${:.6} spent over {} model calls)",
                    max as f64 / 1e6,
                    spend.cost_micro_usd as f64 / 1e6,
                    spend.entries
                )));
            }
        }
        Ok(())
    }
}

fn budget(message: String) -> Failure {
    Failure {
        code: FailureCode::BudgetExceeded,
        message,
    }
}

fn infrastructure(what: &str, error: impl std::fmt::Display) -> Failure {
    Failure {
        code: FailureCode::Infrastructure,
        message: format!("cannot {what} the usage ledger: {error}"),
    }
}

/// The ledger of one run of one task.
pub struct StoreLedger {
    /// The run's store: budget reads retry through outages, records land once.
    pub store: RunStore,
    pub clock: Arc<dyn Clock>,
    pub task: TaskId,
    pub run_number: u32,
    /// Checked against the task's spend over all its runs.
    pub per_task: Budget,
    /// Checked against all tasks' spend in the current UTC day.
    pub per_day: Budget,
    /// How many responses so far were replayed from an earlier run (shared with the replaying
    /// model): those are not recorded again.
    pub replayed: Arc<AtomicU64>,
    /// Responses this ledger was told about.
    pub seen: AtomicU64,
}

impl Ledger for StoreLedger {
    fn before_model_call(&self) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async move {
            if !self.per_task.is_unbounded() {
                let spend = self
                    .store
                    .call("reading the task's spend", |store| {
                        store.spend_for_task(&self.task)
                    })
                    .await
                    .map_err(|e| infrastructure("read", e))?;
                self.per_task.check("per-task", &spend)?;
            }
            if !self.per_day.is_unbounded() {
                let day = UtcDay::of_ms(self.clock.now_ms());
                let spend = self
                    .store
                    .call("reading the day's spend", move |store| {
                        store.spend_for_day(day)
                    })
                    .await
                    .map_err(|e| infrastructure("read", e))?;
                self.per_day.check(&format!("daily ({day})"), &spend)?;
            }
            Ok(())
        })
    }

    fn record<'a>(
        &'a self,
        response: &'a ModelResponse,
        role: Role,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let seen = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if seen <= self.replayed.load(Ordering::SeqCst) {
                return Ok(());
            }
            let usage = response.usage.unwrap_or_default();
            let entry = UsageEntry {
                task: self.task.clone(),
                run_number: Some(self.run_number),
                model: response.model.clone(),
                role: role.as_str().to_string(),
                input_tokens: usage.input_tokens,
                cached_input_tokens: usage.cached_input_tokens,
                output_tokens: usage.output_tokens,
                cost_micro_usd: match response.cost {
                    Cost::Known { micro_usd } => Some(micro_usd),
                    Cost::Unknown => None,
                },
            };
            self.store
                .record_usage(entry)
                .await
                .map_err(|e| infrastructure("append to", e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_stop_at_their_bound_and_say_what_was_spent() {
        let budget = Budget {
            max_tokens: Some(100),
            max_cost_micro_usd: Some(1_000),
        };
        let spend = |tokens: u64, cost: u64, unknown: bool| Spend {
            input_tokens: tokens / 2,
            output_tokens: tokens - tokens / 2,
            cost_micro_usd: cost,
            cost_unknown: unknown,
            entries: 3,
            ..Spend::default()
        };
        assert!(budget.check("per-task", &spend(99, 999, false)).is_ok());
        let failure = budget.check("per-task", &spend(100, 0, false)).unwrap_err();
        assert_eq!(failure.code, FailureCode::BudgetExceeded);
        assert!(
            failure.message.contains("100 tokens spent"),
            "{}",
            failure.message
        );
        let failure = budget.check("daily", &spend(0, 1_000, false)).unwrap_err();
        assert!(
            failure.message.contains("$0.001000 spent"),
            "{}",
            failure.message
        );
        assert!(budget.check("daily", &spend(0, 0, true)).is_err());
        assert!(Budget::default()
            .check("x", &spend(1 << 40, 1 << 40, true))
            .is_ok());
    }
}
