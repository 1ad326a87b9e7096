//! Limits on a run (turns, tokens, money, wall time) and the spend they are checked against.
//! The check runs before every model call, never after: a run that would exceed a limit stops
//! without making the call. Wall time is the time the run has taken so far, as the caller
//! measured it on a monotonic clock ([`crate::Clock::monotonic_ms`]): a step of the wall clock
//! neither spends nor refunds it.

use warden_protocol::{Failure, FailureCode};

/// Per-run limits. `None` means no limit of that kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_turns: u32,
    pub max_tokens: Option<u64>,
    pub max_cost_micro_usd: Option<u64>,
    pub max_wall_ms: Option<u64>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_turns: 40,
            max_tokens: None,
            max_cost_micro_usd: None,
            max_wall_ms: Some(30 * 60 * 1000),
        }
    }
}

/// What a run has spent so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spend {
    pub turns: u32,
    pub tokens: u64,
    pub cost_micro_usd: u64,
    /// A model call had no known price, so `cost_micro_usd` is a lower bound.
    pub cost_unknown: bool,
}

impl Limits {
    /// Whether another model call may be made now, `elapsed_ms` into the run.
    pub fn check(&self, spend: &Spend, elapsed_ms: u64) -> Result<(), Failure> {
        self.check_wall_time(elapsed_ms)?;
        self.check_budgets(spend)
    }

    /// Whether a run that has taken `elapsed_ms` so far is still within its wall-time limit.
    pub fn check_wall_time(&self, elapsed_ms: u64) -> Result<(), Failure> {
        if let Some(max_wall_ms) = self.max_wall_ms {
            if elapsed_ms >= max_wall_ms {
                return Err(Failure {
                    code: FailureCode::TimedOut,
                    message: format!(
                        "wall-time limit of {} s reached after {} s",
                        max_wall_ms / 1000,
                        elapsed_ms / 1000
                    ),
                });
            }
        }
        Ok(())
    }

    fn check_budgets(&self, spend: &Spend) -> Result<(), Failure> {
        if spend.turns >= self.max_turns {
            return Err(budget(format!(
                "turn limit of {} reached; the agent did not finish in time",
                self.max_turns
            )));
        }
        if let Some(max_tokens) = self.max_tokens {
            if spend.tokens >= max_tokens {
                return Err(budget(format!(
                    "token budget of {max_tokens} reached ({} spent)",
                    spend.tokens
                )));
            }
        }
        if let Some(max_cost) = self.max_cost_micro_usd {
            if spend.cost_unknown {
                return Err(budget(
                    "a money budget is set but the model's price is unknown, so spend cannot be \
                     checked; add the model to the price table"
                        .into(),
                ));
            }
            if spend.cost_micro_usd >= max_cost {
                return Err(budget(format!(
                    "cost budget of ${:.6} reached (${:.6} spent)",
                    max_cost as f64 / 1e6,
                    spend.cost_micro_usd as f64 / 1e6
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limits: Limits, spend: Spend, elapsed_ms: u64, expect: Option<FailureCode>) {
        assert_eq!(
            limits.check(&spend, elapsed_ms).err().map(|f| f.code),
            expect,
            "{limits:?} {spend:?} after {elapsed_ms} ms"
        );
    }

    #[test]
    fn each_limit_stops_at_its_bound() {
        let base = Limits {
            max_turns: 5,
            max_tokens: Some(1000),
            max_cost_micro_usd: Some(500),
            max_wall_ms: Some(10_000),
        };
        let fresh = Spend::default();
        check(base.clone(), fresh.clone(), 0, None);
        check(
            base.clone(),
            Spend {
                turns: 4,
                tokens: 999,
                cost_micro_usd: 499,
                ..fresh.clone()
            },
            9_999,
            None,
        );
        check(
            base.clone(),
            Spend {
                turns: 5,
                ..fresh.clone()
            },
            0,
            Some(FailureCode::BudgetExceeded),
        );
        check(
            base.clone(),
            Spend {
                tokens: 1000,
                ..fresh.clone()
            },
            0,
            Some(FailureCode::BudgetExceeded),
        );
        check(
            base.clone(),
            Spend {
                cost_micro_usd: 500,
                ..fresh.clone()
            },
            0,
            Some(FailureCode::BudgetExceeded),
        );
        check(
            base.clone(),
            Spend {
                cost_unknown: true,
                ..fresh.clone()
            },
            0,
            Some(FailureCode::BudgetExceeded),
        );
        check(base, fresh.clone(), 10_000, Some(FailureCode::TimedOut));
        // Unknown cost without a money budget does not stop the run.
        check(
            Limits::default(),
            Spend {
                cost_unknown: true,
                ..fresh
            },
            0,
            None,
        );
    }
}
