//! The decision loop. Each turn: check limits, ask the model for a decision, journal it verbatim,
//! then for every tool call: parse and validate the arguments against the tool's schema, ask the
//! policy, execute, journal the observation and feed it back. Failures the agent can fix (bad
//! arguments, denials, rejected submissions) go back to the model as tool errors; only limits,
//! model failures, policy aborts and too many rejections end the run.

use crate::journal::{Journal, RecordKind};
use crate::limits::{Limits, Spend};
use crate::model::{Cost, Message, Model, ModelRequest, ModelResponse, ToolCall};
use crate::schema;
use crate::tool::{Finish, Policy, Tool, ToolOutput, Verdict};
use crate::{BoxFuture, Clock, EventSink};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use warden_protocol::{Event, Failure, FailureCode, Usage};

/// Tunables of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub limits: Limits,
    /// Final submissions rejected this many times fail the task with `invalid_submission`.
    pub max_rejected_submissions: u32,
    /// Replies without any tool call tolerated (each answered with a reminder) before failing.
    pub max_replies_without_tool: u32,
    pub max_output_tokens: u32,
    /// Tool calls executed from one model reply; the rest are answered with an error.
    pub max_tool_calls_per_turn: usize,
    /// Tool calls rejected in a row (unknown tool, invalid arguments, denied by policy) before
    /// the run fails with `invalid_tool_calls` instead of spending its remaining turns.
    pub max_consecutive_rejected_calls: u32,
    /// [`ModelRequest::cache_key`] of every request of the run.
    pub cache_key: Option<String>,
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            limits: Limits::default(),
            max_rejected_submissions: 3,
            max_replies_without_tool: 2,
            max_output_tokens: 8192,
            max_tool_calls_per_turn: 32,
            max_consecutive_rejected_calls: 8,
            cache_key: None,
        }
    }
}

/// Set from outside to stop a run at its next step.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What starts a run. Closed: resuming from a journal and answering a clarification arrive as
/// new variants, not as flags.
#[derive(Debug, Clone, PartialEq)]
pub enum RunInput {
    /// A fresh conversation: system prompt, earlier transcript if any, and the request.
    /// `context` (task id, manifest, …) is journaled with the start of the run.
    Start {
        messages: Vec<Message>,
        context: Value,
    },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    Finished(Finish),
    Failed(Failure),
    /// The policy wants a human to approve a tool call before anything else happens.
    AwaitingApproval {
        tool: String,
        reason: String,
        subject_hash: String,
    },
}

/// The result of a run: outcome, spend and the whole conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub outcome: RunOutcome,
    pub usage: Usage,
    pub messages: Vec<Message>,
}

/// One run of the loop, borrowing everything it drives.
pub struct Agent<'a> {
    pub model: &'a dyn Model,
    pub tools: &'a [Arc<dyn Tool>],
    pub policy: &'a dyn Policy,
    pub journal: &'a mut dyn Journal,
    pub events: &'a dyn EventSink,
    pub clock: &'a dyn Clock,
    pub cancel: CancelFlag,
    pub config: AgentConfig,
    /// Spend kept outside the run (per-task across runs, per-day): asked before every model
    /// call and told about every response. `None` for one-shot runs with only run limits.
    pub ledger: Option<&'a dyn Ledger>,
}

/// A durable record of spend with budgets that span runs and tasks (per task, per day).
pub trait Ledger: Send + Sync {
    /// `Err` stops the run before the model call (`budget_exceeded`, or `infrastructure` when
    /// spend cannot be read).
    fn before_model_call(&self) -> BoxFuture<'_, Result<(), Failure>>;

    /// Records one response's usage and cost. `Err` ends the run: spend that cannot be
    /// recorded cannot be enforced.
    fn record<'a>(&'a self, response: &'a ModelResponse) -> BoxFuture<'a, Result<(), Failure>>;
}

/// The mutable state of a run.
struct RunState {
    messages: Vec<Message>,
    spend: Spend,
    /// When the run started, on the clock's monotonic scale: its wall time is measured from
    /// here, never from the wall clock, which can be stepped.
    started_monotonic_ms: u64,
    usage: Usage,
    rejected_submissions: u32,
    replies_without_tool: u32,
    /// Tool calls rejected since the last one that ran.
    rejected_calls_in_a_row: u32,
}

impl Agent<'_> {
    pub async fn run(mut self, input: RunInput) -> RunReport {
        let RunInput::Start { messages, context } = input;
        let mut state = RunState {
            messages,
            spend: Spend::default(),
            started_monotonic_ms: self.clock.monotonic_ms(),
            usage: Usage {
                cost_usd: Some(0.0),
                ..Usage::default()
            },
            rejected_submissions: 0,
            replies_without_tool: 0,
            rejected_calls_in_a_row: 0,
        };
        let outcome = match self
            .record(
                RecordKind::RunStarted,
                json!({
                    "context": context,
                    "model": self.model.name(),
                    "tools": self.tools.iter().map(|t| t.spec().name).collect::<Vec<_>>(),
                    "limits": {
                        "max_turns": self.config.limits.max_turns,
                        "max_tokens": self.config.limits.max_tokens,
                        "max_cost_micro_usd": self.config.limits.max_cost_micro_usd,
                        "max_wall_ms": self.config.limits.max_wall_ms,
                    },
                    "messages": state.messages,
                }),
            )
            .await
        {
            Ok(()) => self.drive(&mut state).await,
            Err(failure) => RunOutcome::Failed(failure),
        };
        let finished = json!({ "outcome": outcome_summary(&outcome), "usage": state.usage });
        // A journal that cannot record the end is reported, but the outcome stands.
        let outcome = match self.record(RecordKind::RunFinished, finished).await {
            Ok(()) => outcome,
            Err(failure) => match outcome {
                RunOutcome::Failed(_) => outcome,
                _ => RunOutcome::Failed(failure),
            },
        };
        RunReport {
            outcome,
            usage: state.usage,
            messages: state.messages,
        }
    }

    async fn drive(&mut self, state: &mut RunState) -> RunOutcome {
        loop {
            if self.cancel.is_cancelled() {
                return cancelled();
            }
            if let Err(failure) = self
                .config
                .limits
                .check(&state.spend, self.elapsed_ms(state))
            {
                if let Err(journal_failure) = self
                    .record(RecordKind::LimitReached, json!({ "failure": failure }))
                    .await
                {
                    return RunOutcome::Failed(journal_failure);
                }
                return RunOutcome::Failed(failure);
            }
            if let Some(ledger) = self.ledger {
                if let Err(failure) = ledger.before_model_call().await {
                    if let Err(journal_failure) = self
                        .record(RecordKind::LimitReached, json!({ "failure": failure }))
                        .await
                    {
                        return RunOutcome::Failed(journal_failure);
                    }
                    return RunOutcome::Failed(failure);
                }
            }
            let turn = state.spend.turns + 1;
            let request = ModelRequest {
                messages: state.messages.clone(),
                tools: self.tools.iter().map(|t| t.spec()).collect(),
                max_output_tokens: self.config.max_output_tokens,
                cache_key: self.config.cache_key.clone(),
            };
            if let Err(failure) = self
                .record(
                    RecordKind::ModelRequested,
                    json!({ "turn": turn, "messages": request.messages.len() }),
                )
                .await
            {
                return RunOutcome::Failed(failure);
            }
            self.events.emit(Event::ModelRequested {
                turn,
                model: self.model.name(),
            });
            state.spend.turns = turn;
            let response = match self.model.complete(&request, self.events).await {
                Ok(response) => response,
                Err(error) => {
                    let failure = Failure {
                        code: FailureCode::ModelError,
                        message: error.to_string(),
                    };
                    if let Err(journal_failure) = self
                        .record(
                            RecordKind::ModelFailed,
                            json!({ "error": error.to_string() }),
                        )
                        .await
                    {
                        return RunOutcome::Failed(journal_failure);
                    }
                    return RunOutcome::Failed(failure);
                }
            };
            if let Err(failure) = self
                .record(RecordKind::ModelDecision, json!(response))
                .await
            {
                return RunOutcome::Failed(failure);
            }
            if let Some(ledger) = self.ledger {
                if let Err(failure) = ledger.record(&response).await {
                    return RunOutcome::Failed(failure);
                }
            }
            if let Some(failure) = account(state, &response, &self.config.limits) {
                return RunOutcome::Failed(failure);
            }
            self.events.emit(Event::ModelResponded {
                turn,
                model: response.model.clone(),
                tool_calls: response.tool_calls.len() as u32,
                input_tokens: response.usage.map_or(0, |u| u.input_tokens),
                output_tokens: response.usage.map_or(0, |u| u.output_tokens),
            });
            if let Some(text) = response.text.as_ref().filter(|t| !t.trim().is_empty()) {
                self.events.emit(Event::AgentMessage { text: text.clone() });
            }
            state.messages.push(Message::Assistant {
                text: response.text.clone(),
                tool_calls: response.tool_calls.clone(),
            });

            if response.tool_calls.is_empty() {
                state.replies_without_tool += 1;
                if state.replies_without_tool > self.config.max_replies_without_tool {
                    return RunOutcome::Failed(Failure {
                        code: FailureCode::NoSubmission,
                        message: format!(
                            "the agent replied {} times without calling a tool or submitting",
                            state.replies_without_tool
                        ),
                    });
                }
                state.messages.push(Message::User {
                    text: "Continue by calling a tool. When you are done, call the tool that \
                           submits your result; if the request is ambiguous, call ask_user."
                        .into(),
                });
                continue;
            }

            let cap = self.config.max_tool_calls_per_turn;
            for (index, call) in response.tool_calls.iter().enumerate() {
                if self.cancel.is_cancelled() {
                    return cancelled();
                }
                // Time keeps running while tools do; stop between calls too.
                if let Err(failure) = self.config.limits.check_wall_time(self.elapsed_ms(state)) {
                    if let Err(journal_failure) = self
                        .record(RecordKind::LimitReached, json!({ "failure": failure }))
                        .await
                    {
                        return RunOutcome::Failed(journal_failure);
                    }
                    return RunOutcome::Failed(failure);
                }
                if index >= cap {
                    // Every call still needs a result, or the provider rejects the next request.
                    let message = format!(
                        "not run: at most {cap} tool calls are executed per reply; call it again"
                    );
                    push_tool_result(state, call, message, true);
                    continue;
                }
                state.usage.tool_calls += 1;
                let span = tracing::info_span!("tool.call", tool.name = %call.name);
                match tracing::Instrument::instrument(self.execute(call, state), span).await {
                    Ok(None) => {}
                    Ok(Some(outcome)) => return outcome,
                    Err(failure) => return RunOutcome::Failed(failure),
                }
            }
        }
    }

    /// Runs one tool call. `Ok(Some(_))` ends the run.
    async fn execute(
        &mut self,
        call: &ToolCall,
        state: &mut RunState,
    ) -> Result<Option<RunOutcome>, Failure> {
        let Some(tool) = self
            .tools
            .iter()
            .find(|t| t.spec().name == call.name)
            .cloned()
        else {
            let names: Vec<String> = self.tools.iter().map(|t| t.spec().name).collect();
            let message = format!(
                "unknown tool {:?}; available tools: {}",
                call.name,
                names.join(", ")
            );
            self.record(
                RecordKind::ArgumentsRejected,
                json!({ "call_id": call.id, "tool": call.name, "errors": [message] }),
            )
            .await?;
            return Ok(self.rejected_call(state, call, message));
        };
        let spec = tool.spec();
        let arguments = match parse_arguments(&call.arguments)
            .and_then(|value| schema::validate(&value, &spec.parameters).map(|()| value))
        {
            Ok(value) => value,
            Err(errors) => {
                self.record(
                    RecordKind::ArgumentsRejected,
                    json!({ "call_id": call.id, "tool": call.name, "errors": errors }),
                )
                .await?;
                let message = format!(
                    "invalid arguments for {}: {}. Fix them and call the tool again.",
                    call.name,
                    errors.join("; ")
                );
                return Ok(self.rejected_call(state, call, message));
            }
        };

        let verdict = match self.policy.check(&call.name, &arguments) {
            Verdict::Allow => tool.verdict(&arguments),
            refused => refused,
        };
        self.record(
            RecordKind::PolicyVerdict,
            json!({ "call_id": call.id, "tool": call.name, "verdict": verdict_json(&verdict) }),
        )
        .await?;
        match verdict {
            Verdict::Allow => {}
            Verdict::Deny(reason) => {
                self.events.emit(Event::PolicyDenied {
                    tool: call.name.clone(),
                    reason: reason.clone(),
                });
                state.rejected_calls_in_a_row += 1;
                push_tool_result(state, call, format!("denied by policy: {reason}"), true);
                return Ok(self.too_many_rejected_calls(state, &reason));
            }
            Verdict::Abort(reason) => {
                return Ok(Some(RunOutcome::Failed(Failure {
                    code: FailureCode::PolicyAbort,
                    message: reason,
                })))
            }
            Verdict::RequireApproval {
                reason,
                subject_hash,
            } => {
                return Ok(Some(RunOutcome::AwaitingApproval {
                    tool: call.name.clone(),
                    reason,
                    subject_hash,
                }))
            }
        }

        state.rejected_calls_in_a_row = 0;
        let summary = tool.describe(&arguments);
        self.events.emit(Event::ToolStarted {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            summary: summary.clone(),
        });
        let output = tool.call(arguments).await;
        self.record(
            RecordKind::ToolObservation,
            json!({ "call_id": call.id, "tool": call.name, "output": output_json(&output) }),
        )
        .await?;
        let ok = matches!(output, ToolOutput::Ok(_) | ToolOutput::Finish(_));
        self.events.emit(Event::ToolFinished {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            ok,
            summary,
            note: tool.note(&output),
        });
        match output {
            ToolOutput::Ok(text) => push_tool_result(state, call, text, false),
            ToolOutput::Error(text) => push_tool_result(state, call, text, true),
            ToolOutput::Rejected(errors) => {
                state.rejected_submissions += 1;
                let attempt = state.rejected_submissions;
                self.record(
                    RecordKind::SubmissionRejected,
                    json!({ "attempt": attempt, "errors": errors }),
                )
                .await?;
                self.events.emit(Event::SubmissionRejected {
                    attempt,
                    errors: errors.clone(),
                });
                if attempt >= self.config.max_rejected_submissions {
                    return Ok(Some(RunOutcome::Failed(Failure {
                        code: FailureCode::InvalidSubmission,
                        message: format!(
                            "the submission was rejected {attempt} times; last errors: {}",
                            errors.join("; ")
                        ),
                    })));
                }
                let remaining = self.config.max_rejected_submissions - attempt;
                let message = format!(
                    "submission rejected (attempt {attempt}; {remaining} left):\n- {}\nFix \
                     these problems and submit again.",
                    errors.join("\n- ")
                );
                push_tool_result(state, call, message, true);
            }
            ToolOutput::Finish(finish) => {
                push_tool_result(state, call, "accepted".into(), false);
                return Ok(Some(RunOutcome::Finished(finish)));
            }
            ToolOutput::Stop(failure) => {
                push_tool_result(state, call, failure.message.clone(), true);
                return Ok(Some(RunOutcome::Failed(failure)));
            }
        }
        Ok(None)
    }

    /// A call that did not run (unknown tool, invalid arguments): the model is told why, the
    /// person following sees it, and too many in a row end the run.
    fn rejected_call(
        &self,
        state: &mut RunState,
        call: &ToolCall,
        message: String,
    ) -> Option<RunOutcome> {
        state.rejected_calls_in_a_row += 1;
        self.events.emit(Event::ToolCallRejected {
            tool: call.name.clone(),
            reason: message.clone(),
            consecutive: state.rejected_calls_in_a_row,
        });
        push_tool_result(state, call, message.clone(), true);
        self.too_many_rejected_calls(state, &message)
    }

    fn too_many_rejected_calls(&self, state: &RunState, last: &str) -> Option<RunOutcome> {
        let count = state.rejected_calls_in_a_row;
        (count >= self.config.max_consecutive_rejected_calls).then(|| {
            RunOutcome::Failed(Failure {
                code: FailureCode::InvalidToolCalls,
                message: format!(
                    "the agent's last {count} tool calls were rejected (unknown tool, invalid \
                     arguments or denied by policy); last: {last}"
                ),
            })
        })
    }

    /// How long the run has taken so far, by the monotonic clock.
    fn elapsed_ms(&self, state: &RunState) -> u64 {
        self.clock
            .monotonic_ms()
            .saturating_sub(state.started_monotonic_ms)
    }

    /// Journals a record, stamped with the wall clock (for display only).
    async fn record(&mut self, kind: RecordKind, payload: Value) -> Result<(), Failure> {
        self.journal
            .append(self.clock.now_ms(), kind, payload)
            .await
            .map_err(|error| Failure {
                code: FailureCode::Infrastructure,
                message: format!("could not write the run journal: {error}"),
            })
    }
}

/// Adds a response's usage and cost to the run. Returns a failure when a token or money budget
/// can no longer be enforced: a second response without any usage while such a budget is set.
/// Without one, missing usage is only counted (and flagged in the result).
fn account(state: &mut RunState, response: &ModelResponse, limits: &Limits) -> Option<Failure> {
    state.usage.model_calls += 1;
    match response.usage {
        Some(usage) => {
            state.usage.input_tokens += usage.input_tokens;
            state.usage.cached_input_tokens += usage.cached_input_tokens;
            state.usage.cache_write_tokens += usage.cache_write_tokens;
            state.usage.output_tokens += usage.output_tokens;
            state.usage.reasoning_tokens += usage.reasoning_tokens;
            state.usage.cache_hit_rate = warden_protocol::cache_hit_rate(
                state.usage.cached_input_tokens,
                state.usage.input_tokens,
            );
            state.spend.tokens += usage.input_tokens + usage.output_tokens;
        }
        None => {
            state.usage.responses_without_usage += 1;
            let budgeted = limits.max_tokens.is_some() || limits.max_cost_micro_usd.is_some();
            if budgeted && state.usage.responses_without_usage >= 2 {
                return Some(Failure {
                    code: FailureCode::BudgetExceeded,
                    message: "the model reported no token usage on two responses, so budgets \
                              cannot be enforced"
                        .into(),
                });
            }
        }
    }
    match response.cost {
        Cost::Known { micro_usd } => state.spend.cost_micro_usd += micro_usd,
        Cost::Unknown => {
            state.spend.cost_unknown = true;
            if !state.usage.unpriced_models.contains(&response.model) {
                state.usage.unpriced_models.push(response.model.clone());
            }
        }
    }
    state.usage.cost_usd = if state.spend.cost_unknown {
        None
    } else {
        Some(state.spend.cost_micro_usd as f64 / 1e6)
    };
    None
}

fn parse_arguments(text: &str) -> Result<Value, Vec<String>> {
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(text).map_err(|e| vec![format!("arguments are not valid JSON: {e}")])
}

fn push_tool_result(state: &mut RunState, call: &ToolCall, content: String, is_error: bool) {
    state.messages.push(Message::Tool {
        call_id: call.id.clone(),
        content,
        is_error,
    });
}

fn cancelled() -> RunOutcome {
    RunOutcome::Failed(Failure {
        code: FailureCode::Cancelled,
        message: "the task was cancelled".into(),
    })
}

fn verdict_json(verdict: &Verdict) -> Value {
    match verdict {
        Verdict::Allow => json!({ "allow": true }),
        Verdict::Deny(reason) => json!({ "deny": reason }),
        Verdict::Abort(reason) => json!({ "abort": reason }),
        Verdict::RequireApproval {
            reason,
            subject_hash,
        } => json!({ "require_approval": reason, "subject_hash": subject_hash }),
    }
}

fn output_json(output: &ToolOutput) -> Value {
    match output {
        ToolOutput::Ok(text) => json!({ "ok": text }),
        ToolOutput::Error(text) => json!({ "error": text }),
        ToolOutput::Rejected(errors) => json!({ "rejected": errors }),
        ToolOutput::Stop(failure) => json!({ "stop": failure }),
        ToolOutput::Finish(Finish::Answer(answer)) => json!({ "answer": answer }),
        ToolOutput::Finish(Finish::Clarification { question }) => {
            json!({ "clarification": question })
        }
        ToolOutput::Finish(Finish::Change { summary, proposal }) => {
            json!({ "change": { "summary": summary, "proposal": proposal } })
        }
        ToolOutput::Finish(Finish::Review(review)) => json!({ "review": review }),
    }
}

fn outcome_summary(outcome: &RunOutcome) -> Value {
    match outcome {
        RunOutcome::Finished(Finish::Answer(answer)) => json!({ "answer": answer }),
        RunOutcome::Finished(Finish::Clarification { question }) => {
            json!({ "clarification": question })
        }
        RunOutcome::Finished(Finish::Change { summary, proposal }) => {
            json!({ "change": { "summary": summary, "proposal": proposal } })
        }
        RunOutcome::Finished(Finish::Review(review)) => json!({ "review": review }),
        RunOutcome::Failed(failure) => json!({ "failure": failure }),
        RunOutcome::AwaitingApproval {
            tool,
            reason,
            subject_hash,
        } => {
            json!({ "awaiting_approval": { "tool": tool, "reason": reason, "subject_hash": subject_hash } })
        }
    }
}
