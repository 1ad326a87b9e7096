//! The decision loop. Each turn: check limits, ask the model for a decision, journal it verbatim,
//! then for every tool call: parse and validate the arguments against the tool's schema, ask the
//! policy, execute, journal the observation and feed it back. Failures the agent can fix (bad
//! arguments, denials, rejected submissions) go back to the model as tool errors; only limits,
//! model failures, policy aborts and too many rejections end the run.

use crate::journal::{Journal, RecordKind};
use crate::limits::{Limits, Spend};
use crate::model::{Cost, Message, Model, ModelRequest, ModelResponse, ToolCall, ToolSpec};
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
    /// The model's context window in tokens (`[model] context_tokens`): a conversation that
    /// reaches [`COMPACT_AT_PERCENT`] of it is compacted before the next call. `None`: never.
    pub context_tokens: Option<u64>,
    /// Whose model calls these are, for the ledger ([`Ledger::record`]).
    pub role: Role,
}

/// Who in a task makes a model call: the agent that answers or changes (and compacts its own
/// conversation), an explorer it sent, or the reviewer of its change. The usage ledger keeps it,
/// so spend is reported per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    #[default]
    Agent,
    Explorer,
    Reviewer,
}

impl Role {
    /// The name the ledger and `/v1/usage` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Explorer => "explorer",
            Role::Reviewer => "reviewer",
        }
    }
}

/// A conversation is compacted once its estimated size reaches this share of the context window.
pub const COMPACT_AT_PERCENT: u64 = 80;
/// Compactions that leave the conversation at or above the trigger before the run stops with
/// `context_exhausted`.
pub const MAX_FUTILE_COMPACTIONS: u32 = 3;

/// What the model is asked for when its conversation is compacted: a fixed template, so a
/// compaction is replayable and never depends on the run.
pub const COMPACTION_REQUEST: &str = "Warden: this conversation is nearing the model's context \
window and is about to be compacted: the turns since the request will be replaced by your \
hand-off note and by what Warden itself recorded of the run (every tool call and its result, \
rejected submissions, messages people sent). Write the hand-off note now, for yourself, to carry \
on from here: what you learned that matters (files, functions, line numbers), what you changed, \
what remains and your plan for it. Be specific and brief (at most about 400 words). Reply with \
the note only; do not call a tool in this reply.";

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
            context_tokens: None,
            role: Role::Agent,
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
    /// What the run spent against its limits (turns, tokens, cost).
    pub spend: Spend,
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
    /// Messages people send while the run goes on, delivered before the next model call.
    /// `None`: nobody can.
    pub inbox: Option<&'a dyn Inbox>,
    /// The read-only explorers the agent may send (the `explore` tool); `None`: none.
    pub explorers: Option<&'a Explorers<'a>>,
}

/// The name of the tool that sends an explorer.
pub const EXPLORE_TOOL: &str = "explore";

/// What an explorer is: a child run of the loop with its own conversation (the system prompt,
/// then the question), read-only tools that end with a checked answer, and a share of the
/// parent's budgets. Depth 1: an explorer sends none.
pub struct Explorers<'a> {
    /// Read-only tools and the answer submission (its citations checked).
    pub tools: &'a [Arc<dyn Tool>],
    pub system_prompt: String,
    /// Explorers one run may send.
    pub max: u32,
    /// Model calls each explorer may make (within what the parent has left).
    pub max_turns: u32,
    /// [`ModelRequest::cache_key`] of the explorers' requests.
    pub cache_key: Option<String>,
}

impl Explorers<'_> {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: EXPLORE_TOOL.into(),
            description: format!(
                "Send a read-only explorer with one question about the repositories. It reads \
                 and searches on its own, in its own conversation (yours stays short), and \
                 comes back with an answer whose citations are checked against the pinned \
                 commits. Use it for a self-contained side question (where is X defined, what \
                 calls Y, how does Z work); at most {} per task, one at a time.",
                self.max
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "minLength": 1, "maxLength": 4000,
                        "description": "What the explorer should find out, self-contained."}
                },
                "required": ["question"],
                "additionalProperties": false
            }),
        }
    }
}

/// A message a person sent to a running task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steer {
    /// Its place in the task's conversation.
    pub seq: u64,
    pub author: String,
    pub text: String,
}

/// Where a run finds the messages sent to it while it goes on.
pub trait Inbox: Send + Sync {
    /// The messages to deliver before model call `turn` (1, 2, …), oldest first, each once.
    /// `Err` ends the run (`infrastructure`): a message that cannot be read cannot be heard.
    fn take(&self, turn: u32) -> BoxFuture<'_, Result<Vec<Steer>, Failure>>;
}

/// A durable record of spend with budgets that span runs and tasks (per task, per day).
pub trait Ledger: Send + Sync {
    /// `Err` stops the run before the model call (`budget_exceeded`, or `infrastructure` when
    /// spend cannot be read).
    fn before_model_call(&self) -> BoxFuture<'_, Result<(), Failure>>;

    /// Records one response's usage and cost, made by `role`. `Err` ends the run: spend that
    /// cannot be recorded cannot be enforced.
    fn record<'a>(
        &'a self,
        response: &'a ModelResponse,
        role: Role,
    ) -> BoxFuture<'a, Result<(), Failure>>;
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
    /// How many messages the run started with (system prompt, earlier conversation, request):
    /// kept verbatim by a compaction.
    head: usize,
    /// What the run did, one line per tool call, from its own records: re-injected after a
    /// compaction instead of trusting the model's summary of it.
    steps: Vec<String>,
    /// The errors of the last rejected submission.
    last_rejection: Vec<String>,
    /// Messages people sent during the run, as delivered.
    delivered: Vec<Steer>,
    /// The conversation's size in tokens as the provider last measured it, and the message
    /// count it covered (the assistant reply included).
    measured: Option<(u64, usize)>,
    compactions: u32,
    futile_compactions: u32,
    explorers_sent: u32,
}

impl Agent<'_> {
    pub async fn run(self, input: RunInput) -> RunReport {
        self.run_as(input, RecordKind::RunStarted, RecordKind::RunFinished)
            .await
    }

    /// The run, journaled between `started` and `finished` records (an explorer's between
    /// its own kinds, inside its parent's run).
    async fn run_as(
        mut self,
        input: RunInput,
        started: RecordKind,
        finished_kind: RecordKind,
    ) -> RunReport {
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
            head: 0,
            steps: Vec::new(),
            last_rejection: Vec::new(),
            delivered: Vec::new(),
            measured: None,
            compactions: 0,
            futile_compactions: 0,
            explorers_sent: 0,
        };
        state.head = state.messages.len();
        let outcome = match self
            .record(
                started,
                json!({
                    "context": context,
                    "model": self.model.name(),
                    "tools": self.tool_specs().into_iter().map(|t| t.name).collect::<Vec<_>>(),
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
        let outcome = match self.record(finished_kind, finished).await {
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
            spend: state.spend,
        }
    }

    async fn drive(&mut self, state: &mut RunState) -> RunOutcome {
        loop {
            if self.cancel.is_cancelled() {
                return cancelled();
            }
            if let Some(outcome) = self.before_model_call(state).await {
                return outcome;
            }
            let turn = state.spend.turns + 1;
            if let Err(failure) = self.deliver_messages(state, turn).await {
                return RunOutcome::Failed(failure);
            }
            match self.compact_if_needed(state).await {
                Ok(false) => {}
                // The budgets are asked again before the agent's own call.
                Ok(true) => continue,
                Err(outcome) => return outcome,
            }
            let messages = state.messages.clone();
            let response = match self.ask_model(state, messages, None).await {
                Ok(response) => response,
                Err(outcome) => return outcome,
            };
            state.measured = response.usage.map(|usage| {
                (
                    usage.input_tokens + usage.output_tokens,
                    state.messages.len() + 1,
                )
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

    /// The budgets asked before every model call: the run's limits, then the ledger's. `Some`
    /// ends the run (the limit reached is journaled).
    async fn before_model_call(&mut self, state: &RunState) -> Option<RunOutcome> {
        let mut refused = self
            .config
            .limits
            .check(&state.spend, self.elapsed_ms(state))
            .err();
        if refused.is_none() {
            if let Some(ledger) = self.ledger {
                refused = ledger.before_model_call().await.err();
            }
        }
        let failure = refused?;
        if let Err(journal_failure) = self
            .record(RecordKind::LimitReached, json!({ "failure": failure }))
            .await
        {
            return Some(RunOutcome::Failed(journal_failure));
        }
        Some(RunOutcome::Failed(failure))
    }

    /// One model call over `messages` (the budgets already asked): journaled before and after,
    /// recorded in the ledger and the run's spend. `purpose` names a call that is not a step
    /// of the agent's (`compaction`). `Err` ends the run.
    async fn ask_model(
        &mut self,
        state: &mut RunState,
        messages: Vec<Message>,
        purpose: Option<&str>,
    ) -> Result<ModelResponse, RunOutcome> {
        let turn = state.spend.turns + 1;
        let request = ModelRequest {
            messages,
            tools: self.tool_specs(),
            max_output_tokens: self.config.max_output_tokens,
            cache_key: self.config.cache_key.clone(),
        };
        let mut requested = json!({ "turn": turn, "messages": request.messages.len() });
        if let Some(purpose) = purpose {
            requested["purpose"] = json!(purpose);
        }
        self.record(RecordKind::ModelRequested, requested)
            .await
            .map_err(RunOutcome::Failed)?;
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
                self.record(
                    RecordKind::ModelFailed,
                    json!({ "error": error.to_string() }),
                )
                .await
                .map_err(RunOutcome::Failed)?;
                return Err(RunOutcome::Failed(failure));
            }
        };
        self.record(RecordKind::ModelDecision, json!(response))
            .await
            .map_err(RunOutcome::Failed)?;
        if let Some(ledger) = self.ledger {
            ledger
                .record(&response, self.config.role)
                .await
                .map_err(RunOutcome::Failed)?;
        }
        if let Some(failure) = account(state, &response, &self.config.limits) {
            return Err(RunOutcome::Failed(failure));
        }
        self.events.emit(Event::ModelResponded {
            turn,
            model: response.model.clone(),
            tool_calls: response.tool_calls.len() as u32,
            input_tokens: response.usage.map_or(0, |u| u.input_tokens),
            output_tokens: response.usage.map_or(0, |u| u.output_tokens),
        });
        Ok(response)
    }

    /// Hands the agent the messages people sent since the last turn, as user messages.
    async fn deliver_messages(&mut self, state: &mut RunState, turn: u32) -> Result<(), Failure> {
        let Some(inbox) = self.inbox else {
            return Ok(());
        };
        for message in inbox.take(turn).await? {
            self.record(
                RecordKind::MessageDelivered,
                json!({ "seq": message.seq, "turn": turn, "author": message.author }),
            )
            .await?;
            self.events.emit(Event::MessageDelivered {
                seq: message.seq,
                turn,
            });
            state.messages.push(Message::User {
                text: steer_text(&message),
            });
            state.delivered.push(message);
        }
        Ok(())
    }

    /// Compacts the conversation when it reached the trigger: the model writes a hand-off
    /// note (one model call, budgeted and journaled like any other), and the conversation
    /// becomes the run's first messages, then what the run recorded and the note. `Some` ends
    /// the run: budgets, a failed call, or [`MAX_FUTILE_COMPACTIONS`] that did not shrink it.
    async fn compact_if_needed(&mut self, state: &mut RunState) -> Result<bool, RunOutcome> {
        let Some(window) = self.config.context_tokens else {
            return Ok(false);
        };
        let trigger = window.saturating_mul(COMPACT_AT_PERCENT) / 100;
        let before = self.context_estimate(state);
        if before < trigger {
            return Ok(false);
        }
        let mut messages = state.messages.clone();
        messages.push(Message::User {
            text: COMPACTION_REQUEST.into(),
        });
        let response = self.ask_model(state, messages, Some("compaction")).await?;
        let note = response
            .text
            .as_deref()
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .unwrap_or("(the model wrote no note)")
            .to_string();
        state.compactions += 1;
        let mut compacted = state.messages[..state.head.min(state.messages.len())].to_vec();
        compacted.push(Message::User {
            text: compacted_state(state, &note),
        });
        state.messages = compacted;
        state.measured = None;
        let after = self.context_estimate(state);
        let shrunk = after < trigger;
        if !shrunk {
            state.futile_compactions += 1;
        }
        let attempt = state.compactions;
        self.record(
            RecordKind::Compacted,
            json!({
                "attempt": attempt,
                "tokens_before": before,
                "tokens_after": after,
                "trigger": trigger,
                "shrunk": shrunk,
                "note": note,
            }),
        )
        .await
        .map_err(RunOutcome::Failed)?;
        self.events.emit(Event::ContextCompacted {
            attempt,
            tokens_before: before,
            tokens_after: after,
            shrunk,
        });
        if state.futile_compactions < MAX_FUTILE_COMPACTIONS {
            return Ok(true);
        }
        Err(RunOutcome::Failed(Failure {
            code: FailureCode::ContextExhausted,
            message: format!(
                "the conversation outgrew the model's context window ({window} tokens): \
                     {futile} compactions left it at or above {trigger} tokens (about {after} \
                     after the last); raise [model] context_tokens if the model has a larger \
                     window, or ask for less at once",
                futile = state.futile_compactions
            ),
        }))
    }

    /// The conversation's size in tokens: what the provider measured for it last, plus an
    /// estimate of what was added since; an estimate of the whole when nothing was measured.
    fn context_estimate(&self, state: &RunState) -> u64 {
        match state.measured {
            Some((tokens, count)) if count <= state.messages.len() => {
                tokens + estimate_tokens(&state.messages[count..])
            }
            _ => estimate_tokens(&state.messages) + json_len(&self.tool_specs()) / 4,
        }
    }

    /// What the model is told it can call: the tools, then `explore` when explorers may be
    /// sent.
    fn tool_specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.iter().map(|t| t.spec()).collect();
        if let Some(explorers) = self.explorers.filter(|e| e.max > 0) {
            specs.push(explorers.spec());
        }
        specs
    }

    /// Sends an explorer: a child run over the explorers' tools with the question, within what
    /// is left of this run's budgets (and at most [`Explorers::max_turns`] calls), journaled
    /// inside this run, its spend counted here. Its checked answer is the call's result; a run
    /// that ends otherwise is a tool error, as is a question past the run's explorers.
    async fn explore(
        &mut self,
        explorers: &Explorers<'_>,
        call: &ToolCall,
        state: &mut RunState,
    ) -> Result<Option<RunOutcome>, Failure> {
        let spec = explorers.spec();
        let arguments = match self.arguments(call, &spec, state).await? {
            Ok(value) => value,
            Err(outcome) => return Ok(outcome),
        };
        let question = arguments["question"].as_str().unwrap_or_default().trim();
        let summary = format!("explore {:?}", shortened(question, 80));
        if state.explorers_sent >= explorers.max {
            let message = format!(
                "no explorer left: a task sends at most {} (ask the question yourself)",
                explorers.max
            );
            push_tool_result(state, call, message, true);
            return Ok(None);
        }
        state.explorers_sent += 1;
        state.rejected_calls_in_a_row = 0;
        self.events.emit(Event::ToolStarted {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            summary: summary.clone(),
        });
        let limits = &self.config.limits;
        let left = |max: Option<u64>, spent: u64| max.map(|max| max.saturating_sub(spent));
        let child_limits = Limits {
            max_turns: explorers
                .max_turns
                .min(limits.max_turns.saturating_sub(state.spend.turns)),
            max_tokens: left(limits.max_tokens, state.spend.tokens),
            max_cost_micro_usd: left(limits.max_cost_micro_usd, state.spend.cost_micro_usd),
            max_wall_ms: left(limits.max_wall_ms, self.elapsed_ms(state)),
        };
        let child = Agent {
            model: self.model,
            tools: explorers.tools,
            policy: self.policy,
            journal: &mut *self.journal,
            events: self.events,
            clock: self.clock,
            cancel: self.cancel.clone(),
            config: AgentConfig {
                limits: child_limits,
                cache_key: explorers.cache_key.clone(),
                role: Role::Explorer,
                ..self.config.clone()
            },
            ledger: self.ledger,
            inbox: None,
            explorers: None,
        };
        let input = RunInput::Start {
            messages: vec![
                Message::System {
                    text: explorers.system_prompt.clone(),
                },
                Message::User {
                    text: question.to_string(),
                },
            ],
            context: json!({ "explorer": state.explorers_sent, "call_id": call.id }),
        };
        let report: RunReport = Box::pin(child.run_as(
            input,
            RecordKind::ExplorerStarted,
            RecordKind::ExplorerFinished,
        ))
        .await;
        add_spend(state, &report);
        let (ok, content) = match &report.outcome {
            RunOutcome::Finished(Finish::Answer(answer)) => (true, explorer_answer(answer)),
            RunOutcome::Failed(failure) => (
                false,
                format!(
                    "the explorer stopped without an answer ({}): {}",
                    failure.code, failure.message
                ),
            ),
            other => (
                false,
                format!(
                    "the explorer stopped without an answer: {}",
                    outcome_summary(other)
                ),
            ),
        };
        self.events.emit(Event::ToolFinished {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            ok,
            summary: summary.clone(),
            note: None,
        });
        state.steps.push(format!(
            "{summary}: {}",
            if ok { "answered" } else { "no answer" }
        ));
        push_tool_result(state, call, content, !ok);
        // A cancelled explorer cancels its parent; a run out of budget stops at its next call.
        if self.cancel.is_cancelled() {
            return Ok(Some(cancelled()));
        }
        Ok(None)
    }

    /// A call's arguments, parsed and checked against `spec`'s schema; `Ok(Err(_))` when they
    /// are not (journaled, told to the model, and the run's end when too many calls in a row
    /// were rejected).
    async fn arguments(
        &mut self,
        call: &ToolCall,
        spec: &ToolSpec,
        state: &mut RunState,
    ) -> Result<Result<Value, Option<RunOutcome>>, Failure> {
        match parse_arguments(&call.arguments)
            .and_then(|value| schema::validate(&value, &spec.parameters).map(|()| value))
        {
            Ok(value) => Ok(Ok(value)),
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
                Ok(Err(self.rejected_call(state, call, message)))
            }
        }
    }

    /// Runs one tool call. `Ok(Some(_))` ends the run.
    async fn execute(
        &mut self,
        call: &ToolCall,
        state: &mut RunState,
    ) -> Result<Option<RunOutcome>, Failure> {
        if let Some(explorers) = self.explorers.filter(|_| call.name == EXPLORE_TOOL) {
            return self.explore(explorers, call, state).await;
        }
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
        let arguments = match self.arguments(call, &spec, state).await? {
            Ok(value) => value,
            Err(outcome) => return Ok(outcome),
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
        state.steps.push(step_line(&summary, &output));
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
                state.last_rejection = errors.clone();
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

/// An explorer's spend, added to its parent's: its calls are the parent's calls.
fn add_spend(state: &mut RunState, report: &RunReport) {
    let (usage, spend) = (&report.usage, &report.spend);
    state.spend.turns = state.spend.turns.saturating_add(spend.turns);
    state.spend.tokens += spend.tokens;
    state.spend.cost_micro_usd += spend.cost_micro_usd;
    state.spend.cost_unknown |= spend.cost_unknown;
    let total = &mut state.usage;
    total.input_tokens += usage.input_tokens;
    total.cached_input_tokens += usage.cached_input_tokens;
    total.cache_write_tokens += usage.cache_write_tokens;
    total.output_tokens += usage.output_tokens;
    total.reasoning_tokens += usage.reasoning_tokens;
    total.model_calls += usage.model_calls;
    total.tool_calls += usage.tool_calls;
    total.responses_without_usage += usage.responses_without_usage;
    for model in &usage.unpriced_models {
        if !total.unpriced_models.contains(model) {
            total.unpriced_models.push(model.clone());
        }
    }
    let explorers = total.explorers.get_or_insert_with(Default::default);
    explorers.sent += 1;
    explorers.model_calls += usage.model_calls;
    explorers.input_tokens += usage.input_tokens;
    explorers.output_tokens += usage.output_tokens;
    explorers.cost_usd = match (explorers.sent, explorers.cost_usd, usage.cost_usd) {
        (1, _, cost) => cost,
        (_, Some(before), Some(cost)) => Some(before + cost),
        _ => None,
    };
    total.cache_hit_rate =
        warden_protocol::cache_hit_rate(total.cached_input_tokens, total.input_tokens);
    total.cost_usd = if state.spend.cost_unknown {
        None
    } else {
        Some(state.spend.cost_micro_usd as f64 / 1e6)
    };
}

/// `text`'s first `chars` characters, with `…` when there were more.
fn shortened(text: &str, chars: usize) -> String {
    let mut short: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        short.push('…');
    }
    short
}

/// An explorer's checked answer as its parent reads it.
fn explorer_answer(answer: &warden_protocol::Answer) -> String {
    let mut text = format!(
        "The explorer's answer (its citations were checked against the pinned commits):\n{}\n",
        answer.summary
    );
    for claim in &answer.claims {
        let cited: Vec<String> = claim
            .evidence
            .iter()
            .map(|e| format!("{} {}:{}-{}", e.repo, e.path, e.start_line, e.end_line))
            .collect();
        text.push_str(&format!("- {} [{}]\n", claim.text, cited.join("; ")));
    }
    if !answer.not_established.is_empty() {
        text.push_str("Not established:\n");
        for item in &answer.not_established {
            text.push_str(&format!("- {item}\n"));
        }
    }
    text
}

/// How a message a person sent during the run reads to the agent.
fn steer_text(message: &Steer) -> String {
    format!(
        "Warden: {} sent a message while you work on this task; take it into account from \
         now on:\n\n{}",
        message.author, message.text
    )
}

/// Lines of a tool's result kept in a step line.
const STEP_RESULT_CHARS: usize = 200;
/// Step lines re-injected after a compaction (the latest).
const MAX_STEPS_KEPT: usize = 80;

/// One line of what the run did: the call as the person following it sees it, and how it
/// ended, with the start of its result.
fn step_line(summary: &str, output: &ToolOutput) -> String {
    let (how, text) = match output {
        ToolOutput::Ok(text) => ("ok", text.as_str()),
        ToolOutput::Error(text) => ("error", text.as_str()),
        ToolOutput::Rejected(_) => ("rejected", ""),
        ToolOutput::Finish(_) => ("accepted", ""),
        ToolOutput::Stop(failure) => ("stopped", failure.message.as_str()),
    };
    let first: String = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("")
        .chars()
        .take(STEP_RESULT_CHARS)
        .collect();
    if first.is_empty() {
        format!("{summary}: {how}")
    } else {
        format!("{summary}: {how}: {first}")
    }
}

/// The message that replaces the compacted turns: what the run recorded (its tool calls and
/// their results, the last rejected submission, the messages people sent), then the model's
/// note.
fn compacted_state(state: &RunState, note: &str) -> String {
    let mut text = format!(
        "Warden: the conversation was compacted (compaction {}) to fit the model's context \
         window. The messages above are as they were; this one replaces every turn after \
         them.\n\n## What Warden recorded of this run\n",
        state.compactions
    );
    let skipped = state.steps.len().saturating_sub(MAX_STEPS_KEPT);
    if state.steps.is_empty() {
        text.push_str("No tool call ran yet.\n");
    } else {
        text.push_str(&format!("Tool calls ({} in all", state.steps.len()));
        if skipped > 0 {
            text.push_str(&format!(", the first {skipped} not shown"));
        }
        text.push_str("), oldest first:\n");
        for step in &state.steps[skipped..] {
            text.push_str(&format!("- {step}\n"));
        }
    }
    if !state.last_rejection.is_empty() {
        text.push_str(&format!(
            "\nYour last submission was rejected ({} so far):\n",
            state.rejected_submissions
        ));
        for error in &state.last_rejection {
            text.push_str(&format!("- {error}\n"));
        }
    }
    if !state.delivered.is_empty() {
        text.push_str("\nMessages people sent while you worked, oldest first:\n");
        for message in &state.delivered {
            text.push_str(&format!("- {}: {}\n", message.author, message.text));
        }
    }
    text.push_str(&format!(
        "\n## Your hand-off note, written before the compaction\n{note}\n\nContinue the task \
         from here."
    ));
    text
}

/// A rough token count of messages: their JSON size over four.
fn estimate_tokens(messages: &[Message]) -> u64 {
    json_len(messages) / 4
}

fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    serde_json::to_vec(value).map_or(0, |bytes| bytes.len() as u64)
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
