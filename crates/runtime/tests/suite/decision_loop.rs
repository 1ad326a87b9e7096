//! The decision loop driven by a scripted in-process model and tools: argument validation,
//! policy verdicts, rejected submissions, limits checked before each call, journal chaining.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use warden_protocol::{Answer, Event, FailureCode};
use warden_runtime::journal::MemoryJournal;
use warden_runtime::{
    Agent, AgentConfig, AllowAll, BoxFuture, CancelFlag, Clock, Cost, EventSink, Explorers, Finish,
    Inbox, Limits, Message, Model, ModelError, ModelRequest, ModelResponse, Policy, RecordKind,
    RunInput, RunOutcome, Steer, TokenUsage, Tool, ToolCall, ToolOutput, ToolSpec, Verdict,
};

/// Replays responses in order and remembers every request.
struct Scripted {
    replies: Mutex<Vec<Result<ModelResponse, ModelError>>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl Scripted {
    fn new(replies: Vec<Result<ModelResponse, ModelError>>) -> Scripted {
        let mut replies = replies;
        replies.reverse();
        Scripted {
            replies: Mutex::new(replies),
            requests: Mutex::new(vec![]),
        }
    }
}

impl Model for Scripted {
    fn name(&self) -> String {
        "scripted:test".into()
    }
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        _events: &'a dyn EventSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        self.requests.lock().unwrap().push(request.clone());
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop()
            .expect("script exhausted");
        Box::pin(async move { reply })
    }
    fn has_price(&self) -> bool {
        true
    }
}

fn calls(calls: &[(&str, &str)]) -> Result<ModelResponse, ModelError> {
    Ok(ModelResponse {
        model: "scripted:test".into(),
        text: None,
        tool_calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCall {
                id: format!("call_{i}"),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
        usage: Some(TokenUsage {
            input_tokens: 100,
            cached_input_tokens: 10,
            cache_write_tokens: 0,
            output_tokens: 20,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 0,
        }),
        cost: Cost::Known { micro_usd: 50 },
        stop_reason: Some("tool_calls".into()),
        raw: json!({"scripted": true}),
    })
}

/// `echo {text}` echoes; `submit {ok}` finishes when ok, else is rejected.
struct Echo;
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "echo".into(),
            description: "echo".into(),
            parameters: json!({"type": "object", "properties": {"text": {"type": "string"}},
                "required": ["text"], "additionalProperties": false}),
        }
    }
    fn describe(&self, arguments: &Value) -> String {
        format!("echo {}", arguments["text"])
    }
    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move { ToolOutput::Ok(arguments["text"].as_str().unwrap().to_string()) })
    }
    /// The tool's own policy (as a third-party MCP tool has): one text is refused.
    fn verdict(&self, arguments: &Value) -> Verdict {
        if arguments["text"] == "forbidden" {
            Verdict::Deny("echo refuses this text".into())
        } else {
            Verdict::Allow
        }
    }
}

struct Submit;
impl Tool for Submit {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "submit".into(),
            description: "submit".into(),
            parameters: json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"], "additionalProperties": false}),
        }
    }
    fn describe(&self, _arguments: &Value) -> String {
        "submit".into()
    }
    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            if arguments["ok"] == true {
                ToolOutput::Finish(Finish::Answer(Answer {
                    summary: "done".into(),
                    claims: vec![],
                    not_established: vec![],
                }))
            } else {
                ToolOutput::Rejected(vec!["line 99 is past the end".into()])
            }
        })
    }
}

#[derive(Default)]
struct Collect(Mutex<Vec<Event>>);
impl EventSink for Collect {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

/// A clock whose monotonic reading advances 1 s each time it is read; its wall clock follows,
/// plus whatever it was stepped by ([`Ticking::step`]).
#[derive(Default)]
struct Ticking {
    monotonic_ms: Mutex<u64>,
    stepped_ms: Mutex<i64>,
}

impl Ticking {
    /// 2026-12-01T13:19:03Z, a wall clock far enough from the epoch to be stepped back.
    const EPOCH_MS: i64 = 1_796_131_143_000;

    /// Steps the wall clock (NTP, a VM resume, an operator); the monotonic clock goes on.
    fn step(&self, by_ms: i64) {
        *self.stepped_ms.lock().unwrap() += by_ms;
    }
}

impl Clock for Ticking {
    fn now_ms(&self) -> u64 {
        let monotonic = *self.monotonic_ms.lock().unwrap() as i64;
        (Ticking::EPOCH_MS + monotonic + *self.stepped_ms.lock().unwrap()) as u64
    }

    fn monotonic_ms(&self) -> u64 {
        let mut now = self.monotonic_ms.lock().unwrap();
        *now += 1000;
        *now
    }
}

/// `step {ms}` steps the run's wall clock by `ms`, as a step could while any tool runs.
struct StepTheClock(Arc<Ticking>);
impl Tool for StepTheClock {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "step".into(),
            description: "step the wall clock".into(),
            parameters: json!({"type": "object", "properties": {"ms": {"type": "integer"}},
                "required": ["ms"], "additionalProperties": false}),
        }
    }
    fn describe(&self, arguments: &Value) -> String {
        format!("step {}", arguments["ms"])
    }
    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            self.0.step(arguments["ms"].as_i64().unwrap());
            ToolOutput::Ok("stepped".into())
        })
    }
}

struct DenyEcho;
impl Policy for DenyEcho {
    fn check(&self, tool: &str, _arguments: &Value) -> Verdict {
        if tool == "echo" {
            Verdict::Deny("echo is not allowed here".into())
        } else {
            Verdict::Allow
        }
    }
}

struct Harness {
    report: warden_runtime::RunReport,
    journal: MemoryJournal,
    events: Vec<Event>,
    model: Scripted,
}

async fn run_with(
    replies: Vec<Result<ModelResponse, ModelError>>,
    config: AgentConfig,
    policy: &dyn Policy,
) -> Harness {
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Echo), Arc::new(Submit)];
    run_on(replies, config, policy, &tools, &Ticking::default()).await
}

async fn run_on(
    replies: Vec<Result<ModelResponse, ModelError>>,
    config: AgentConfig,
    policy: &dyn Policy,
    tools: &[Arc<dyn Tool>],
    clock: &Ticking,
) -> Harness {
    run_full(replies, config, policy, tools, clock, "question", None).await
}

async fn run_full(
    replies: Vec<Result<ModelResponse, ModelError>>,
    config: AgentConfig,
    policy: &dyn Policy,
    tools: &[Arc<dyn Tool>],
    clock: &Ticking,
    request: &str,
    inbox: Option<&dyn Inbox>,
) -> Harness {
    run_exploring(replies, config, policy, tools, clock, request, inbox, None).await
}

#[allow(clippy::too_many_arguments)]
async fn run_exploring(
    replies: Vec<Result<ModelResponse, ModelError>>,
    config: AgentConfig,
    policy: &dyn Policy,
    tools: &[Arc<dyn Tool>],
    clock: &Ticking,
    request: &str,
    inbox: Option<&dyn Inbox>,
    explorers: Option<&Explorers<'_>>,
) -> Harness {
    let model = Scripted::new(replies);
    let mut journal = MemoryJournal::default();
    let events = Collect::default();
    let report = Agent {
        model: &model,
        tools,
        policy,
        journal: &mut journal,
        events: &events,
        clock,
        cancel: CancelFlag::default(),
        config,
        ledger: None,
        inbox,
        explorers,
    }
    .run(RunInput::Start {
        messages: vec![Message::User {
            text: request.into(),
        }],
        context: serde_json::Value::Null,
    })
    .await;
    Harness {
        report,
        journal,
        events: events.0.into_inner().unwrap(),
        model,
    }
}

fn tool_results(messages: &[Message]) -> Vec<(String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn bad_arguments_unknown_tools_and_invalid_json_go_back_to_the_model() {
    let h = run_with(
        vec![
            calls(&[
                ("echo", r#"{"text": "hi", "evil": 1}"#),
                ("nope", "{}"),
                ("echo", "{not json"),
                ("echo", r#"{"text": "hello"}"#),
            ]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    assert!(matches!(
        h.report.outcome,
        RunOutcome::Finished(Finish::Answer(_))
    ));
    let results = tool_results(&h.report.messages);
    assert!(
        results[0].0.contains("unknown field \"evil\""),
        "{results:?}"
    );
    assert!(results[0].1);
    assert!(results[1]
        .0
        .contains("unknown tool \"nope\"; available tools: echo, submit"));
    assert!(results[2].0.contains("not valid JSON"));
    assert_eq!(results[3], ("hello".to_string(), false));
    // The second request carried all four tool results back to the model.
    let second = &h.model.requests.lock().unwrap()[1];
    assert_eq!(tool_results(&second.messages).len(), 4);
    assert_eq!(h.report.usage.model_calls, 2);
    assert_eq!(h.report.usage.tool_calls, 5);
    assert_eq!(h.report.usage.input_tokens, 200);
    assert_eq!(h.report.usage.cost_usd, Some(0.0001));
}

#[tokio::test]
async fn three_rejected_submissions_fail_the_task() {
    let h = run_with(
        vec![
            calls(&[("submit", r#"{"ok": false}"#)]),
            calls(&[("submit", r#"{"ok": false}"#)]),
            calls(&[("submit", r#"{"ok": false}"#)]),
        ],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    match &h.report.outcome {
        RunOutcome::Failed(f) => assert_eq!(f.code, FailureCode::InvalidSubmission),
        other => panic!("{other:?}"),
    }
    let rejections = h
        .events
        .iter()
        .filter(|e| matches!(e, Event::SubmissionRejected { .. }))
        .count();
    assert_eq!(rejections, 3);
    let second = &h.model.requests.lock().unwrap()[1];
    let results = tool_results(&second.messages);
    assert!(results[0].0.contains("line 99 is past the end"));
    assert!(results[0].0.contains("2 left"));
}

#[tokio::test]
async fn a_rejected_then_valid_submission_finishes() {
    let h = run_with(
        vec![
            calls(&[("submit", r#"{"ok": false}"#)]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    assert!(matches!(h.report.outcome, RunOutcome::Finished(_)));
}

#[tokio::test]
async fn policy_denial_is_a_tool_error_and_the_tool_does_not_run() {
    let h = run_with(
        vec![
            calls(&[("echo", r#"{"text": "secret"}"#)]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        AgentConfig::default(),
        &DenyEcho,
    )
    .await;
    let results = tool_results(&h.report.messages);
    assert_eq!(
        results[0],
        ("denied by policy: echo is not allowed here".into(), true)
    );
    assert!(!h
        .events
        .iter()
        .any(|e| matches!(e, Event::ToolStarted { tool, .. } if tool == "echo")));
}

#[tokio::test]
async fn a_tools_own_verdict_applies_after_the_run_policy_and_is_journaled() {
    let h = run_with(
        vec![
            calls(&[("echo", r#"{"text": "forbidden"}"#)]),
            calls(&[("echo", r#"{"text": "fine"}"#)]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    let results = tool_results(&h.report.messages);
    assert_eq!(
        results[0],
        ("denied by policy: echo refuses this text".into(), true)
    );
    assert_eq!(results[1], ("fine".into(), false));
    let verdicts: Vec<&Value> = h
        .journal
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::PolicyVerdict)
        .map(|r| &r.payload["verdict"])
        .collect();
    assert_eq!(verdicts[0], &json!({"deny": "echo refuses this text"}));
    assert_eq!(verdicts[1], &json!({"allow": true}));
    // The run's own denial still comes first: the tool is not asked.
    let h = run_with(
        vec![
            calls(&[("echo", r#"{"text": "forbidden"}"#)]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        AgentConfig::default(),
        &DenyEcho,
    )
    .await;
    assert_eq!(
        tool_results(&h.report.messages)[0],
        ("denied by policy: echo is not allowed here".into(), true)
    );
}

#[tokio::test]
async fn limits_are_checked_before_the_model_call() {
    let config = AgentConfig {
        limits: Limits {
            max_turns: 1,
            ..Limits::default()
        },
        ..AgentConfig::default()
    };
    let h = run_with(
        vec![calls(&[("echo", r#"{"text": "a"}"#)])],
        config,
        &AllowAll,
    )
    .await;
    match &h.report.outcome {
        RunOutcome::Failed(f) => assert_eq!(f.code, FailureCode::BudgetExceeded),
        other => panic!("{other:?}"),
    }
    // Exactly one call was made: the second was refused before it happened.
    assert_eq!(h.model.requests.lock().unwrap().len(), 1);

    let money = AgentConfig {
        limits: Limits {
            max_cost_micro_usd: Some(50),
            ..Limits::default()
        },
        ..AgentConfig::default()
    };
    let h = run_with(
        vec![calls(&[("echo", r#"{"text": "a"}"#)])],
        money,
        &AllowAll,
    )
    .await;
    assert!(
        matches!(&h.report.outcome, RunOutcome::Failed(f) if f.code == FailureCode::BudgetExceeded)
    );
    assert_eq!(h.model.requests.lock().unwrap().len(), 1);
    assert!(h
        .journal
        .records
        .iter()
        .any(|r| r.kind == RecordKind::LimitReached));
}

#[tokio::test]
async fn unknown_cost_is_reported_as_unknown_not_zero() {
    let mut reply = calls(&[("submit", r#"{"ok": true}"#)]).unwrap();
    reply.cost = Cost::Unknown;
    let h = run_with(vec![Ok(reply)], AgentConfig::default(), &AllowAll).await;
    assert!(matches!(h.report.outcome, RunOutcome::Finished(_)));
    assert_eq!(h.report.usage.cost_usd, None);
    assert_eq!(h.report.usage.unpriced_models, ["scripted:test"]);
}

#[tokio::test]
async fn a_second_response_without_usage_fails_only_a_budgeted_task() {
    let mut first = calls(&[("echo", r#"{"text": "a"}"#)]).unwrap();
    first.usage = None;
    let mut second = first.clone();
    second.tool_calls[0].id = "x".into();
    let mut third = calls(&[("submit", r#"{"ok": true}"#)]).unwrap();
    third.usage = None;
    let budgeted = AgentConfig {
        limits: Limits {
            max_tokens: Some(1_000_000),
            ..Limits::default()
        },
        ..AgentConfig::default()
    };
    let h = run_with(
        vec![Ok(first.clone()), Ok(second.clone())],
        budgeted,
        &AllowAll,
    )
    .await;
    assert!(
        matches!(&h.report.outcome, RunOutcome::Failed(f) if f.code == FailureCode::BudgetExceeded)
    );
    assert_eq!(h.report.usage.responses_without_usage, 2);

    // Without a token or money budget, servers that report no usage still work; it is flagged.
    let h = run_with(
        vec![Ok(first), Ok(second), Ok(third)],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    assert!(
        matches!(h.report.outcome, RunOutcome::Finished(_)),
        "{:?}",
        h.report.outcome
    );
    assert_eq!(h.report.usage.responses_without_usage, 3);
}

#[tokio::test]
async fn tool_calls_beyond_the_per_reply_cap_are_answered_but_not_run() {
    let config = AgentConfig {
        max_tool_calls_per_turn: 2,
        ..AgentConfig::default()
    };
    let h = run_with(
        vec![
            calls(&[
                ("echo", r#"{"text": "1"}"#),
                ("echo", r#"{"text": "2"}"#),
                ("echo", r#"{"text": "3"}"#),
            ]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        config,
        &AllowAll,
    )
    .await;
    let results = tool_results(&h.model.requests.lock().unwrap()[1].messages);
    assert_eq!(results.len(), 3);
    assert_eq!(results[1], ("2".to_string(), false));
    assert!(
        results[2].1 && results[2].0.contains("at most 2 tool calls"),
        "{results:?}"
    );
    let started = h
        .events
        .iter()
        .filter(|e| matches!(e, Event::ToolStarted { .. }))
        .count();
    assert_eq!(started, 3, "two echoes and the submit ran");
}

#[tokio::test]
async fn wall_time_is_checked_between_tool_calls() {
    // The ticking clock advances 1 s per monotonic reading; a 6 s limit runs out inside the
    // first reply.
    let config = AgentConfig {
        limits: Limits {
            max_wall_ms: Some(6_000),
            ..Limits::default()
        },
        ..AgentConfig::default()
    };
    let many: Vec<(&str, &str)> = (0..10).map(|_| ("echo", r#"{"text": "x"}"#)).collect();
    let h = run_with(vec![calls(&many)], config, &AllowAll).await;
    assert!(
        matches!(&h.report.outcome, RunOutcome::Failed(f) if f.code == FailureCode::TimedOut),
        "{:?}",
        h.report.outcome
    );
    assert!(
        h.report.usage.tool_calls > 0 && h.report.usage.tool_calls < 10,
        "{:?}",
        h.report.usage
    );
}

/// Two hours, as an NTP step or a VM resume may move the wall clock.
const TWO_HOURS_MS: i64 = 2 * 3600 * 1000;

/// A run whose tools step the wall clock by `steps_ms` (one `step` call per reply), then submit.
async fn run_stepping_the_clock(steps_ms: &[i64], max_wall_ms: u64) -> Harness {
    let clock = Arc::new(Ticking::default());
    let tools: Vec<Arc<dyn Tool>> =
        vec![Arc::new(StepTheClock(Arc::clone(&clock))), Arc::new(Submit)];
    let mut replies: Vec<_> = steps_ms
        .iter()
        .map(|ms| {
            let arguments = json!({ "ms": ms }).to_string();
            calls(&[("step", arguments.as_str())])
        })
        .collect();
    replies.push(calls(&[("submit", r#"{"ok": true}"#)]));
    let config = AgentConfig {
        limits: Limits {
            max_wall_ms: Some(max_wall_ms),
            ..Limits::default()
        },
        ..AgentConfig::default()
    };
    run_on(replies, config, &AllowAll, &tools, &clock).await
}

#[tokio::test]
async fn a_wall_clock_step_forward_does_not_spend_the_wall_time_budget() {
    // Two hours forward, twice, in a run of a few monotonic seconds under a 30 min budget.
    let h = run_stepping_the_clock(&[TWO_HOURS_MS, TWO_HOURS_MS], 30 * 60 * 1000).await;
    assert!(
        matches!(h.report.outcome, RunOutcome::Finished(Finish::Answer(_))),
        "{:?}",
        h.report.outcome
    );
    // The journal still shows when things happened by the wall clock.
    let first = h.journal.records.first().unwrap().at_ms;
    let last = h.journal.records.last().unwrap().at_ms;
    assert!(last - first >= 2 * TWO_HOURS_MS as u64, "{first} {last}");
}

#[tokio::test]
async fn a_wall_clock_step_back_does_not_refund_the_wall_time_budget() {
    // Each reply costs monotonic seconds; stepping the wall clock back two hours after each
    // gives none of them back, so a 6 s budget runs out before the submission.
    let h = run_stepping_the_clock(&[-TWO_HOURS_MS; 5], 6_000).await;
    let RunOutcome::Failed(failure) = &h.report.outcome else {
        panic!("{:?}", h.report.outcome);
    };
    assert_eq!(failure.code, FailureCode::TimedOut, "{failure:?}");
    assert!(
        failure
            .message
            .starts_with("wall-time limit of 6 s reached after"),
        "{failure:?}"
    );
    assert!(h.model.requests.lock().unwrap().len() < 6);
}

#[tokio::test]
async fn a_run_without_model_calls_reports_zero_cost_not_unknown() {
    let config = AgentConfig {
        limits: Limits {
            max_wall_ms: Some(0),
            ..Limits::default()
        },
        ..AgentConfig::default()
    };
    let h = run_with(vec![], config, &AllowAll).await;
    assert_eq!(h.report.usage.cost_usd, Some(0.0));
    assert_eq!(h.report.usage.model_calls, 0);
}

#[tokio::test]
async fn replies_without_tools_get_a_reminder_then_fail() {
    let text = |t: &str| {
        let mut r = calls(&[]).unwrap();
        r.text = Some(t.into());
        Ok(r)
    };
    let h = run_with(
        vec![text("hmm"), text("still thinking"), text("done?")],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    assert!(
        matches!(&h.report.outcome, RunOutcome::Failed(f) if f.code == FailureCode::NoSubmission)
    );
    let second = &h.model.requests.lock().unwrap()[1];
    assert!(
        matches!(second.messages.last(), Some(Message::User { text }) if text.contains("calling a tool"))
    );
}

#[tokio::test]
async fn model_failure_ends_the_run_with_model_error() {
    let h = run_with(
        vec![Err(ModelError::Permanent {
            status: Some(401),
            message: "bad key".into(),
        })],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    assert!(
        matches!(&h.report.outcome, RunOutcome::Failed(f) if f.code == FailureCode::ModelError)
    );
    assert!(h
        .journal
        .records
        .iter()
        .any(|r| r.kind == RecordKind::ModelFailed));
}

#[tokio::test]
async fn the_journal_records_each_step_verbatim_and_chains() {
    let h = run_with(
        vec![
            calls(&[("echo", r#"{"text": "a"}"#)]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        AgentConfig::default(),
        &AllowAll,
    )
    .await;
    let kinds: Vec<RecordKind> = h.journal.records.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            RecordKind::RunStarted,
            RecordKind::ModelRequested,
            RecordKind::ModelDecision,
            RecordKind::PolicyVerdict,
            RecordKind::ToolObservation,
            RecordKind::ModelRequested,
            RecordKind::ModelDecision,
            RecordKind::PolicyVerdict,
            RecordKind::ToolObservation,
            RecordKind::RunFinished,
        ]
    );
    // The decision is stored as the model returned it, raw provider payload included.
    assert_eq!(
        h.journal.records[2].payload["raw"],
        json!({"scripted": true})
    );
    for pair in h.journal.records.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
    }
}

/// Allows `allowed` model calls, then refuses; remembers what it recorded.
struct CountingLedger {
    allowed: usize,
    recorded: Mutex<Vec<String>>,
}

impl warden_runtime::Ledger for CountingLedger {
    fn before_model_call(&self) -> BoxFuture<'_, Result<(), warden_protocol::Failure>> {
        let spent = self.recorded.lock().unwrap().len();
        let allowed = self.allowed;
        Box::pin(async move {
            if spent < allowed {
                Ok(())
            } else {
                Err(warden_protocol::Failure {
                    code: FailureCode::BudgetExceeded,
                    message: "daily budget spent".into(),
                })
            }
        })
    }

    fn record<'a>(
        &'a self,
        response: &'a ModelResponse,
        role: warden_runtime::Role,
    ) -> BoxFuture<'a, Result<(), warden_protocol::Failure>> {
        assert_eq!(role, warden_runtime::Role::Agent);
        self.recorded.lock().unwrap().push(response.model.clone());
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test]
async fn an_outside_ledger_is_asked_before_each_model_call() {
    let model = Scripted::new(vec![
        calls(&[("echo", r#"{"text": "a"}"#)]),
        calls(&[("echo", r#"{"text": "b"}"#)]),
    ]);
    let ledger = CountingLedger {
        allowed: 1,
        recorded: Mutex::new(vec![]),
    };
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Echo)];
    let mut journal = MemoryJournal::default();
    let report = Agent {
        model: &model,
        tools: &tools,
        policy: &AllowAll,
        journal: &mut journal,
        events: &Collect::default(),
        clock: &Ticking::default(),
        cancel: CancelFlag::default(),
        config: AgentConfig::default(),
        ledger: Some(&ledger),
        inbox: None,
        explorers: None,
    }
    .run(RunInput::Start {
        messages: vec![Message::User { text: "q".into() }],
        context: serde_json::Value::Null,
    })
    .await;
    assert!(matches!(&report.outcome, RunOutcome::Failed(f) if f.message == "daily budget spent"));
    assert_eq!(
        model.requests.lock().unwrap().len(),
        1,
        "the refused call was never made"
    );
    assert_eq!(ledger.recorded.lock().unwrap().len(), 1);
}

fn four_rejections_in_a_row() -> AgentConfig {
    AgentConfig {
        max_consecutive_rejected_calls: 4,
        ..AgentConfig::default()
    }
}

#[tokio::test]
async fn rejected_tool_calls_in_a_row_end_the_run_with_invalid_tool_calls() {
    let h = run_with(
        vec![
            calls(&[("nope", "{}")]),
            calls(&[("echo", r#"{"text": 1}"#)]),
            calls(&[("echo", "{not json")]),
            calls(&[("nope", "{}")]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        four_rejections_in_a_row(),
        &AllowAll,
    )
    .await;
    match &h.report.outcome {
        RunOutcome::Failed(f) => {
            assert_eq!(f.code, FailureCode::InvalidToolCalls);
            assert!(f.message.contains("last 4 tool calls"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
    // Four model calls, not the turn budget; the fifth reply was never asked for.
    assert_eq!(h.model.requests.lock().unwrap().len(), 4);
    let rejected: Vec<(String, u32)> = h
        .events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallRejected {
                tool, consecutive, ..
            } => Some((tool.clone(), *consecutive)),
            _ => None,
        })
        .collect();
    assert_eq!(
        rejected,
        [
            ("nope".to_string(), 1),
            ("echo".to_string(), 2),
            ("echo".to_string(), 3),
            ("nope".to_string(), 4)
        ]
    );
}

#[tokio::test]
async fn a_call_that_runs_resets_the_rejection_count() {
    let h = run_with(
        vec![
            calls(&[("nope", "{}"), ("nope", "{}"), ("nope", "{}")]),
            calls(&[("echo", r#"{"text": "fine"}"#)]),
            calls(&[("nope", "{}"), ("nope", "{}"), ("nope", "{}")]),
            calls(&[("submit", r#"{"ok": true}"#)]),
        ],
        four_rejections_in_a_row(),
        &AllowAll,
    )
    .await;
    assert!(
        matches!(h.report.outcome, RunOutcome::Finished(_)),
        "{:?}",
        h.report.outcome
    );
}

#[tokio::test]
async fn policy_denials_count_as_rejected_calls() {
    let h = run_with(
        vec![calls(&[
            ("echo", r#"{"text": "a"}"#),
            ("echo", r#"{"text": "b"}"#),
            ("echo", r#"{"text": "c"}"#),
            ("echo", r#"{"text": "d"}"#),
            ("submit", r#"{"ok": true}"#),
        ])],
        four_rejections_in_a_row(),
        &DenyEcho,
    )
    .await;
    match &h.report.outcome {
        RunOutcome::Failed(f) => {
            assert_eq!(f.code, FailureCode::InvalidToolCalls);
            assert!(
                f.message.contains("echo is not allowed here"),
                "{}",
                f.message
            );
        }
        other => panic!("{other:?}"),
    }
}

/// `reply` as if the provider measured `input_tokens` of prompt.
fn measured(
    reply: Result<ModelResponse, ModelError>,
    input_tokens: u64,
) -> Result<ModelResponse, ModelError> {
    reply.map(|mut response| {
        response.usage = Some(TokenUsage {
            input_tokens,
            output_tokens: 20,
            ..TokenUsage::default()
        });
        response
    })
}

/// A text reply (a compaction's hand-off note).
fn note(text: &str) -> Result<ModelResponse, ModelError> {
    calls(&[]).map(|mut response| {
        response.text = Some(text.into());
        response
    })
}

fn windowed(context_tokens: u64) -> AgentConfig {
    AgentConfig {
        context_tokens: Some(context_tokens),
        ..AgentConfig::default()
    }
}

fn user_text(message: &Message) -> &str {
    match message {
        Message::User { text } => text,
        other => panic!("expected a user message, got {other:?}"),
    }
}

#[tokio::test]
async fn a_conversation_near_its_window_is_compacted_to_the_request_the_record_and_the_note() {
    // Window 1,000: compaction at 800. The second reply was measured at 900 tokens.
    let h = run_with(
        vec![
            measured(calls(&[("echo", r#"{"text":"alpha"}"#)]), 100),
            measured(calls(&[("echo", r#"{"text":"beta"}"#)]), 900),
            note("I echoed alpha and beta; next: submit."),
            calls(&[("submit", r#"{"ok":true}"#)]),
        ],
        windowed(1_000),
        &AllowAll,
    )
    .await;
    assert!(
        matches!(h.report.outcome, RunOutcome::Finished(Finish::Answer(_))),
        "{:?}",
        h.report.outcome
    );
    let requests = h.model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    // The third call asks for the note: the whole conversation, then the fixed template.
    assert_eq!(
        user_text(requests[2].messages.last().unwrap()),
        warden_runtime::run::COMPACTION_REQUEST
    );
    assert_eq!(requests[2].messages.len(), requests[1].messages.len() + 3);
    // The agent goes on from the request and one message: Warden's record, then the note.
    let after = &requests[3].messages;
    assert_eq!(after.len(), 2, "{after:#?}");
    assert_eq!(user_text(&after[0]), "question");
    let compacted = user_text(&after[1]);
    for expected in [
        "compaction 1",
        "Tool calls (2 in all)",
        "- echo \"alpha\": ok: alpha",
        "- echo \"beta\": ok: beta",
        "I echoed alpha and beta; next: submit.",
    ] {
        assert!(
            compacted.contains(expected),
            "{expected:?} missing: {compacted}"
        );
    }
    // The same tools: the cached prefix survives the compaction call.
    assert_eq!(requests[2].tools, requests[1].tools);
    let record = h
        .journal
        .records
        .iter()
        .find(|r| r.kind == RecordKind::Compacted)
        .expect("a compacted record");
    assert_eq!(record.payload["attempt"], 1);
    assert_eq!(record.payload["shrunk"], true);
    assert!(record.payload["tokens_before"].as_u64().unwrap() >= 900);
    assert!(record.payload["tokens_after"].as_u64().unwrap() < 800);
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::ContextCompacted {
            attempt: 1,
            shrunk: true,
            ..
        }
    )));
    // The compaction call is a model call like any other: counted and journaled as one.
    assert_eq!(h.report.usage.model_calls, 4);
    let requested: Vec<&Value> = h
        .journal
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::ModelRequested)
        .map(|r| &r.payload)
        .collect();
    assert_eq!(requested.len(), 4);
    assert_eq!(requested[2]["purpose"], "compaction");
    assert!(requested[3].get("purpose").is_none());
}

#[tokio::test]
async fn a_conversation_compaction_cannot_shrink_stops_with_context_exhausted_after_three() {
    // The request alone is about 1,000 tokens against a trigger of 800: nothing can help.
    let request = "x".repeat(4_000);
    let h = run_full(
        vec![note("n1"), note("n2"), note("n3"), note("never asked")],
        windowed(1_000),
        &AllowAll,
        &[Arc::new(Echo), Arc::new(Submit)],
        &Ticking::default(),
        &request,
        None,
    )
    .await;
    match &h.report.outcome {
        RunOutcome::Failed(failure) => {
            assert_eq!(failure.code, FailureCode::ContextExhausted);
            assert!(
                failure.message.contains("[model] context_tokens"),
                "{}",
                failure.message
            );
        }
        other => panic!("expected context_exhausted, got {other:?}"),
    }
    // Three compaction calls, no agent call, and never a fourth: it does not loop.
    assert_eq!(h.model.requests.lock().unwrap().len(), 3);
    let futile = h
        .journal
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Compacted && r.payload["shrunk"] == false)
        .count();
    assert_eq!(futile, 3);
}

#[tokio::test]
async fn a_compaction_counts_in_the_turn_budget_and_is_asked_for_like_any_call() {
    let config = AgentConfig {
        limits: Limits {
            max_turns: 2,
            ..Limits::default()
        },
        ..windowed(1_000)
    };
    let h = run_with(
        vec![
            measured(calls(&[("echo", r#"{"text":"alpha"}"#)]), 900),
            note("the note"),
            calls(&[("submit", r#"{"ok":true}"#)]),
        ],
        config,
        &AllowAll,
    )
    .await;
    match &h.report.outcome {
        RunOutcome::Failed(failure) => assert_eq!(failure.code, FailureCode::BudgetExceeded),
        other => panic!("expected budget_exceeded, got {other:?}"),
    }
    // The first turn, then the compaction: the budget refuses the agent's next call.
    assert_eq!(h.model.requests.lock().unwrap().len(), 2);
}

/// Hands out `message` before model call `at`.
struct OneMessage {
    at: u32,
    message: Steer,
    asked: Mutex<Vec<u32>>,
}

impl Inbox for OneMessage {
    fn take(&self, turn: u32) -> BoxFuture<'_, Result<Vec<Steer>, warden_protocol::Failure>> {
        self.asked.lock().unwrap().push(turn);
        let due = if turn == self.at {
            vec![self.message.clone()]
        } else {
            vec![]
        };
        Box::pin(async move { Ok(due) })
    }
}

#[tokio::test]
async fn a_message_sent_during_the_run_reaches_the_agent_before_its_next_call() {
    let inbox = OneMessage {
        at: 2,
        message: Steer {
            seq: 3,
            author: "alice".into(),
            text: "use the staging database, not production".into(),
        },
        asked: Mutex::new(vec![]),
    };
    let h = run_full(
        vec![
            calls(&[("echo", r#"{"text":"alpha"}"#)]),
            calls(&[("submit", r#"{"ok":true}"#)]),
        ],
        AgentConfig::default(),
        &AllowAll,
        &[Arc::new(Echo), Arc::new(Submit)],
        &Ticking::default(),
        "question",
        Some(&inbox),
    )
    .await;
    assert!(matches!(h.report.outcome, RunOutcome::Finished(_)));
    assert_eq!(*inbox.asked.lock().unwrap(), [1, 2]);
    let requests = h.model.requests.lock().unwrap().clone();
    let said = |request: &ModelRequest| {
        request.messages.iter().any(
            |m| matches!(m, Message::User { text } if text.contains("use the staging database")),
        )
    };
    assert!(!said(&requests[0]));
    // After the tool result of the first turn, as the last message of the second request.
    let last = user_text(requests[1].messages.last().unwrap());
    assert!(last.contains("alice sent a message"), "{last}");
    assert!(
        last.contains("use the staging database, not production"),
        "{last}"
    );
    let delivered = h
        .journal
        .records
        .iter()
        .find(|r| r.kind == RecordKind::MessageDelivered)
        .expect("the delivery is journaled");
    assert_eq!(delivered.payload["seq"], 3);
    assert_eq!(delivered.payload["turn"], 2);
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::MessageDelivered { seq: 3, turn: 2 })));
}

/// `answer {ok}`: the explorers' submission (accepted when ok, else rejected like a bad
/// citation), with one claim citing `src/lib.rs:3-4`.
struct ExplorerAnswer;
impl Tool for ExplorerAnswer {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "answer".into(),
            description: "answer".into(),
            parameters: json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"], "additionalProperties": false}),
        }
    }
    fn describe(&self, _arguments: &Value) -> String {
        "answer".into()
    }
    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            if arguments["ok"] == true {
                ToolOutput::Finish(Finish::Answer(Answer {
                    summary: "retry doubles its delay".into(),
                    claims: vec![warden_protocol::Claim {
                        text: "the delay doubles".into(),
                        basis: warden_protocol::Basis::Observed,
                        evidence: vec![warden_protocol::Evidence {
                            repo: "app".into(),
                            commit: "a".repeat(40),
                            path: "src/lib.rs".into(),
                            start_line: 3,
                            end_line: 4,
                            url: None,
                        }],
                    }],
                    not_established: vec![],
                }))
            } else {
                ToolOutput::Rejected(vec!["src/lib.rs has 4 lines; 9 is past the end".into()])
            }
        })
    }
}

fn explorer_tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Echo), Arc::new(ExplorerAnswer)]
}

fn explorers(tools: &[Arc<dyn Tool>], max: u32, max_turns: u32) -> Explorers<'_> {
    Explorers {
        tools,
        system_prompt: "You explore.".into(),
        max,
        max_turns,
        cache_key: Some("explorer-key".into()),
    }
}

#[tokio::test]
async fn an_explorer_answers_in_its_own_conversation_and_its_spend_is_the_parents() {
    let tools = explorer_tools();
    let sent = explorers(&tools, 2, 5);
    let h = run_exploring(
        vec![
            calls(&[("explore", r#"{"question":"how does retry wait?"}"#)]),
            // The explorer: a read, a rejected answer, an accepted one.
            calls(&[("echo", r#"{"text":"src/lib.rs"}"#)]),
            calls(&[("answer", r#"{"ok":false}"#)]),
            calls(&[("answer", r#"{"ok":true}"#)]),
            // The parent again.
            calls(&[("submit", r#"{"ok":true}"#)]),
        ],
        AgentConfig::default(),
        &AllowAll,
        &[Arc::new(Echo), Arc::new(Submit)],
        &Ticking::default(),
        "question",
        None,
        Some(&sent),
    )
    .await;
    assert!(
        matches!(h.report.outcome, RunOutcome::Finished(Finish::Answer(_))),
        "{:?}",
        h.report.outcome
    );
    let requests = h.model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5);
    // The parent sees `explore`; the explorer neither sees it (depth 1) nor the parent's
    // conversation, and has its own cache key.
    let names = |r: &ModelRequest| r.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&requests[0]), ["echo", "submit", "explore"]);
    assert_eq!(names(&requests[1]), ["echo", "answer"]);
    assert_eq!(
        requests[1].messages,
        [
            Message::System {
                text: "You explore.".into()
            },
            Message::User {
                text: "how does retry wait?".into()
            }
        ]
    );
    assert_eq!(requests[1].cache_key.as_deref(), Some("explorer-key"));
    // The rejection went back to the explorer, not to the parent.
    assert!(tool_results(&requests[3].messages)
        .iter()
        .any(|(text, error)| *error && text.contains("9 is past the end")));
    // The parent's next request has the checked answer as the explore call's result.
    let (result, is_error) = tool_results(&requests[4].messages).pop().unwrap();
    assert!(!is_error, "{result}");
    assert!(result.contains("retry doubles its delay"), "{result}");
    assert!(result.contains("app src/lib.rs:3-4"), "{result}");
    assert_eq!(requests[4].messages.len(), requests[0].messages.len() + 2);
    // Every call is the task's: five model calls, 100 + 20 tokens each.
    assert_eq!(h.report.usage.model_calls, 5);
    assert_eq!(h.report.usage.input_tokens, 500);
    assert_eq!(h.report.spend.turns, 5);
    let explorers = h
        .report
        .usage
        .explorers
        .clone()
        .expect("the explorers' part");
    assert_eq!(
        (
            explorers.sent,
            explorers.model_calls,
            explorers.input_tokens
        ),
        (1, 3, 300)
    );
    assert_eq!(explorers.cost_usd, Some(0.00015));
    // Journaled inside the parent's run, between its own records.
    let kinds: Vec<RecordKind> = h.journal.records.iter().map(|r| r.kind).collect();
    assert_eq!(kinds.first(), Some(&RecordKind::RunStarted));
    assert_eq!(kinds.last(), Some(&RecordKind::RunFinished));
    let started = kinds
        .iter()
        .position(|k| *k == RecordKind::ExplorerStarted)
        .unwrap();
    let finished = kinds
        .iter()
        .position(|k| *k == RecordKind::ExplorerFinished)
        .unwrap();
    assert!(started < finished);
    assert_eq!(
        kinds[started..finished]
            .iter()
            .filter(|k| **k == RecordKind::ModelDecision)
            .count(),
        3
    );
}

#[tokio::test]
async fn explorers_are_capped_per_run_and_by_what_the_parent_has_left() {
    let tools = explorer_tools();
    let sent = explorers(&tools, 1, 2);
    let config = AgentConfig {
        limits: Limits {
            max_turns: 6,
            ..Limits::default()
        },
        ..AgentConfig::default()
    };
    let h = run_exploring(
        vec![
            calls(&[("explore", r#"{"question":"first"}"#)]),
            // The explorer has two calls and uses them without answering.
            calls(&[("echo", r#"{"text":"a"}"#)]),
            calls(&[("echo", r#"{"text":"b"}"#)]),
            // A second explorer is refused: one per run.
            calls(&[("explore", r#"{"question":"second"}"#)]),
            calls(&[("submit", r#"{"ok":true}"#)]),
        ],
        config,
        &AllowAll,
        &[Arc::new(Echo), Arc::new(Submit)],
        &Ticking::default(),
        "question",
        None,
        Some(&sent),
    )
    .await;
    assert!(
        matches!(h.report.outcome, RunOutcome::Finished(_)),
        "{:?}",
        h.report.outcome
    );
    let requests = h.model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5);
    let (first, error) = tool_results(&requests[3].messages).pop().unwrap();
    assert!(error, "{first}");
    assert!(first.contains("budget_exceeded"), "{first}");
    let (second, error) = tool_results(&requests[4].messages).pop().unwrap();
    assert!(error, "{second}");
    assert!(second.contains("at most 1"), "{second}");
    // The explorer's calls count against the parent's turns: 5 of 6 used.
    assert_eq!(h.report.spend.turns, 5);
}
