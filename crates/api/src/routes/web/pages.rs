//! The console's pages as HTML, from what the task service returned. Every value goes through
//! maud's escaping: model output, file contents, branch names and commit messages are text,
//! never markup (the agent's Markdown is written by `markdown.rs`, the one module that writes
//! tags by hand, from a closed list). No inline script or style: the CSP forbids both;
//! behaviour lives in `assets/app.js`, and every page works without it except the live
//! timeline and the copy buttons.

use maud::{html, Markup, DOCTYPE};
use serde_json::Value;
use warden_protocol::views::{RepoView as Repository, TaskMessage, TaskView as Task};
use warden_protocol::{
    Answer, Approval, ChangeOutcome, ChangeResult, QuestionOutcome, QuestionResult, TaskKind,
    TaskStatus, Usage,
};
use warden_service::tasks::{CitedLines, Principal, ProposalDiff, Role};
use warden_time::rfc3339;

use super::assets::ASSETS;
use super::charts::{self, Bar};
use super::format::{self, absolute, relative};
use super::{code, markdown};

/// The frame of every page: the header with who is signed in, and `body`.
pub(super) fn layout(title: &str, viewer: Option<&Principal>, body: Markup) -> Markup {
    let assets = &*ASSETS;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " · Warden" }
                link rel="stylesheet" href=(assets.css.path);
                link rel="manifest" href="/manifest.webmanifest";
                link rel="icon" href=(assets.icon.path) type="image/svg+xml";
                script src=(assets.js.path) defer {}
            }
            body {
                a.skip href="#main" { "Skip to the content" }
                header.top {
                    a.brand href="/" { "Warden" }
                    @if let Some(viewer) = viewer {
                        nav aria-label="Console" {
                            a href="/" { "Tasks" }
                            @if viewer.role != Role::Viewer { a href="/new" { "New task" } }
                            a href="/usage" { "Usage" }
                            a href="/sessions" { "Sessions" }
                        }
                        span.who { (viewer.name) " (" (viewer.role.as_str()) ")" }
                        form.inline method="post" action="/sign-out" {
                            button.secondary type="submit" { "Sign out" }
                        }
                    }
                }
                main #main { (body) }
            }
        }
    }
}

/// The sign-in page: a password, or an API token pasted once.
pub(super) fn sign_in(error: Option<&str>, plain_http_elsewhere: bool) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            @if plain_http_elsewhere {
                p.notice {
                    "This page is served over plain HTTP to another machine: the session cookie "
                    "can be read on the way. Put Warden behind HTTPS (a reverse proxy) and list "
                    "its name in [serve] public_names."
                }
            }
            form.stack method="post" action="/sign-in" {
                label { "Name" input type="text" name="name" autocomplete="username" required; }
                label { "Password" input type="password" name="password" autocomplete="current-password" required; }
                div { button type="submit" { "Sign in" } }
            }
            h2 { "Or with an API token" }
            form.stack method="post" action="/sign-in" {
                label { "API token" input type="password" name="token" autocomplete="off" required; }
                div { button.secondary type="submit" { "Sign in with token" } }
            }
            p.muted { "Set a password with " code { "warden web passwd NAME" } " on the server." }
        },
    )
}

/// A page saying what went wrong, with a way back.
pub(super) fn problem(viewer: Option<&Principal>, title: &str, message: &str) -> Markup {
    layout(
        title,
        viewer,
        html! {
            h1 { (title) }
            p.error role="alert" { (message) }
            p { a href="/" { "Back to the tasks" } }
        },
    )
}

/// The wire name of a protocol enum (`waiting_approval`).
fn wire_name(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => "unknown".into(),
    }
}

/// The wire name as words (`waiting approval`).
fn wire_words(value: impl serde::Serialize) -> String {
    wire_name(value).replace('_', " ")
}

fn status_name(status: TaskStatus) -> String {
    wire_name(status)
}

fn kind_name(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Question => "question",
        TaskKind::Change => "change",
        TaskKind::Maintain => "maintain",
    }
}

/// Needs a person: waiting for an answer or an approval.
pub(super) fn needs_you(status: TaskStatus) -> bool {
    matches!(
        status,
        TaskStatus::WaitingInput | TaskStatus::WaitingApproval
    )
}

fn status_badge(status: TaskStatus) -> Markup {
    let class = match status {
        TaskStatus::WaitingInput | TaskStatus::WaitingApproval => "badge needs",
        TaskStatus::Completed => "badge ok",
        TaskStatus::Failed | TaskStatus::TimedOut => "badge bad",
        _ => "badge",
    };
    html! { span class=(class) data-status=(status_name(status)) { (wire_words(status)) } }
}

/// A button copying `text` (shown by `app.js`, which does the copying: hidden without it).
/// `what` completes its accessible name: "Copy the hash".
fn copy_button(text: &str, what: &str) -> Markup {
    html! {
        button.copy type="button" hidden data-copy=(text) aria-label=(format!("Copy {what}")) { "Copy" }
    }
}

/// A value to copy: the text (selectable as one word) and its button.
fn copyable(text: &str, what: &str) -> Markup {
    html! { code.copyable { (text) } " " (copy_button(text, what)) }
}

/// The first line of a prompt, at most 120 characters.
pub(super) fn title_of(prompt: &str) -> String {
    let line = prompt.lines().next().unwrap_or("").trim();
    if line.chars().count() > 120 {
        let cut: String = line.chars().take(119).collect();
        format!("{cut}…")
    } else if line.is_empty() {
        "(no prompt)".into()
    } else {
        line.to_string()
    }
}

fn repos_of(task: &Task) -> String {
    task.repos
        .iter()
        .map(|r| r.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The usage a finished task's result reports (running tasks have none yet).
fn result_usage(task: &Task) -> Option<Usage> {
    let usage = task.result.as_ref()?.get("usage")?;
    serde_json::from_value(usage.clone()).ok()
}

/// The task list's filters, as the query gave them.
#[derive(Debug, Default, Clone)]
pub(super) struct ListFilters {
    pub repo: Option<String>,
    pub status: Option<TaskStatus>,
}

const STATUSES: [TaskStatus; 9] = [
    TaskStatus::Queued,
    TaskStatus::Running,
    TaskStatus::Testing,
    TaskStatus::WaitingInput,
    TaskStatus::WaitingApproval,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
    TaskStatus::TimedOut,
];

fn task_rows(tasks: &[&Task], now_ms: i64) -> Markup {
    html! {
        table.reflow.tasks {
            thead { tr { th { "Task" } th { "Status" } th { "Repositories" } th.num { "Cost" } th.num { "Cache hits" } th { "Updated" } } }
            tbody {
                @for task in tasks {
                    @let usage = result_usage(task);
                    tr {
                        td {
                            a href=(format!("/tasks/{}", task.id)) { (title_of(&task.prompt)) }
                            br;
                            span.muted.mono { (kind_name(task.kind)) " · " (task.id.to_string()) }
                        }
                        td data-label="Status" { (status_badge(task.status)) }
                        td data-label="Repositories" { (repos_of(task)) }
                        td.num data-label="Cost" {
                            @match &usage {
                                Some(usage) => { (format::cost(usage.cost_usd)) }
                                None => { span.muted { "–" } }
                            }
                        }
                        td.num data-label="Cache hits" {
                            @match usage.as_ref().and_then(|u| warden_protocol::cache_hit_rate(u.cached_input_tokens, u.input_tokens)) {
                                Some(rate) => { (format::percent(rate)) }
                                None => { span.muted { "–" } }
                            }
                        }
                        td.muted data-label="Updated" { (relative(task.updated_at.ms(), now_ms)) }
                    }
                }
            }
        }
    }
}

/// The task list: what needs the viewer first, then what runs, then the rest.
pub(super) fn task_list(
    viewer: &Principal,
    tasks: &[Task],
    repos: &[Repository],
    filters: &ListFilters,
    next: Option<String>,
    now_ms: i64,
) -> Markup {
    let needs: Vec<&Task> = tasks.iter().filter(|t| needs_you(t.status)).collect();
    let running: Vec<&Task> = tasks
        .iter()
        .filter(|t| !needs_you(t.status) && !t.status.is_terminal())
        .collect();
    let recent: Vec<&Task> = tasks.iter().filter(|t| t.status.is_terminal()).collect();
    layout(
        "Tasks",
        Some(viewer),
        html! {
            h1 { "Tasks" }
            form.filters method="get" action="/" {
                label { "Repository"
                    select name="repo" {
                        option value="" { "any" }
                        @for repo in repos {
                            option value=(repo.name) selected[filters.repo.as_deref() == Some(repo.name.as_str())] { (repo.name) }
                        }
                    }
                }
                label { "Status"
                    select name="status" {
                        option value="" { "any" }
                        @for status in STATUSES {
                            option value=(status_name(status)) selected[filters.status == Some(status)] { (wire_words(status)) }
                        }
                    }
                }
                div { button.secondary type="submit" { "Filter" } }
            }
            @if tasks.is_empty() {
                p.muted { "No tasks here yet." @if viewer.role != Role::Viewer { " " a href="/new" { "Ask a question or request a change." } } }
            }
            @if !needs.is_empty() { h2 { "Needs you" } (task_rows(&needs, now_ms)) }
            @if !running.is_empty() { h2 { "Running" } (task_rows(&running, now_ms)) }
            @if !recent.is_empty() { h2 { "Recent" } (task_rows(&recent, now_ms)) }
            @if let Some(next) = next {
                p { a href=(next) { "Older tasks →" } }
            }
        },
    )
}

/// What the new-task form was given, to show it again after a refusal.
#[derive(Debug, Default, Clone)]
pub(super) struct NewTaskInput {
    pub kind: String,
    pub repo: String,
    pub prompt: String,
    pub checks: String,
    pub publish: bool,
    /// A maintenance's selection, as typed.
    pub select: String,
}

/// The kinds of task the form submits: value, name, what it gives.
const KINDS: [(&str, &str, &str); 3] = [
    ("question", "Question", "a cited answer"),
    ("change", "Change", "a proposal proven by checks"),
    (
        "maintain",
        "Maintenance",
        "dependency upgrades proven by checks (Cargo, Go, npm)",
    ),
];

/// The form to submit a question, a change or a maintenance. Each field belongs to the kinds
/// its `data-kinds` names; the others' fields are hidden (and `app.js` shows the right ones
/// when the kind changes, without a round trip).
pub(super) fn new_task(
    viewer: &Principal,
    repos: &[Repository],
    input: &NewTaskInput,
    error: Option<&str>,
) -> Markup {
    let kind = match input.kind.as_str() {
        "change" | "maintain" => input.kind.as_str(),
        _ => "question",
    };
    let shown = |kinds: &str| kinds.split(' ').any(|k| k == kind);
    layout(
        "New task",
        Some(viewer),
        html! {
            h1 { "New task" }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            @if repos.is_empty() {
                p.notice { "No repository is registered yet: an admin adds one with "
                    code { "warden repos add NAME SOURCE" } "." }
            }
            form.stack #new-task method="post" action="/tasks" {
                fieldset.kinds {
                    legend { "Kind" }
                    @for (value, name, gives) in KINDS {
                        label.choice {
                            input type="radio" name="kind" value=(value) checked[kind == value];
                            span { strong { (name) } span.muted { ": " (gives) } }
                        }
                    }
                }
                label { "Repository"
                    select name="repo" required {
                        @for repo in repos {
                            option value=(repo.name) selected[input.repo == repo.name] { (repo.name) }
                        }
                    }
                }
                label {
                    span data-kinds="question" hidden[!shown("question")] { "What do you want to know?" }
                    span data-kinds="change" hidden[!shown("change")] { "What should change?" }
                    span data-kinds="maintain" hidden[!shown("maintain")] { "Notes for the maintenance (optional)" }
                    textarea name="prompt" { (input.prompt) }
                }
                label data-kinds="maintain" hidden[!shown("maintain")] {
                    span { "What to upgrade: " code { "all" } ", " code { "vulnerable" } ", or package names" }
                    input type="text" name="select" value=(input.select) placeholder="all";
                }
                label data-kinds="change maintain" hidden[!shown("change maintain")] {
                    span { "Checks: one command per line (empty: the repository's own)" }
                    textarea name="checks" { (input.checks) }
                }
                label.check data-kinds="change maintain" hidden[!shown("change maintain")] {
                    input type="checkbox" name="publish" value="true" checked[input.publish];
                    span { "Publish: push a branch and open a pull request once an admin approves it" }
                }
                div { button type="submit" { "Submit" } }
            }
        },
    )
}

/// Everything the task page shows besides the task itself.
pub(super) struct TaskPage<'a> {
    pub task: &'a Task,
    pub messages: &'a [TaskMessage],
    pub cited: &'a [CitedLines],
    pub diff: Option<&'a ProposalDiff>,
}

fn usage_facts(usage: &Usage, model: &str) -> Markup {
    html! {
        dl.facts {
            dt { "Model" } dd { (model) }
            dt { "Tokens" } dd { (format::tokens(usage.input_tokens)) " in (" (format::tokens(usage.cached_input_tokens)) " from the cache), " (format::tokens(usage.output_tokens)) " out" }
            @if let Some(rate) = warden_protocol::cache_hit_rate(usage.cached_input_tokens, usage.input_tokens) {
                dt { "Prompt cache" } dd {
                    (format::percent(rate)) " of the prompt read from the cache"
                    @if usage.cache_write_tokens > 0 { ", " (format::tokens(usage.cache_write_tokens)) " tokens written" }
                }
            }
            dt { "Calls" } dd { (usage.model_calls) " model, " (usage.tool_calls) " tool" }
            dt { "Cost" } dd {
                @match usage.cost_usd {
                    Some(cost) => { (format::dollars(cost)) }
                    None => { "unpriced: the model has no price in Warden's table (add one under [[prices]])" }
                }
            }
        }
    }
}

fn notices(list: &[String]) -> Markup {
    html! {
        @for notice in list { p.notice { (notice) } }
    }
}

/// A link to the forge, only when it is http(s) (Warden builds it; checked again here).
fn forge_link(url: Option<&str>, text: &str) -> Markup {
    html! {
        @if let Some(url) = url.filter(|u| u.starts_with("https://") || u.starts_with("http://")) {
            a href=(url) rel="noreferrer noopener" target="_blank" { (text) }
        }
    }
}

fn answer_section(answer: &Answer, cited: &[CitedLines]) -> Markup {
    html! {
        h2 { "Answer" }
        (markdown::render(&answer.summary))
        @for claim in &answer.claims {
            div.claim {
                div.claim-text { span.badge { (format!("{:?}", claim.basis).to_lowercase()) } (markdown::render(&claim.text)) }
                @for evidence in &claim.evidence {
                    @let lines = cited.iter().find(|c| &c.evidence == evidence);
                    div.cite {
                        p.where {
                            span.mono {
                                (evidence.repo) ": " (evidence.path) ":" (evidence.start_line) "-" (evidence.end_line)
                                " @ " (&evidence.commit[..evidence.commit.len().min(12)])
                            }
                            " " (forge_link(evidence.url.as_deref(), "view at this commit"))
                        }
                        @match lines.and_then(|c| c.lines.as_ref()) {
                            Some(text) => {
                                (code::numbered_lines(&evidence.path, evidence.start_line, text))
                                @if lines.is_some_and(|c| c.truncated) { p.muted { "… (cut)" } }
                            }
                            None => { p.muted { "(these lines can no longer be read from Warden's mirror)" } }
                        }
                    }
                }
            }
        }
        @if !answer.not_established.is_empty() {
            h2 { "Not established" }
            ul { @for item in &answer.not_established { li { (markdown::render(item)) } } }
        }
    }
}

/// What an approval decides, in words for its form.
struct Decision<'a> {
    approval: &'a Approval,
    /// What approving does, before the hash: "Approving publishes exactly the proposal with".
    binds: &'static str,
    /// The approve button: "Approve and publish".
    approve: &'static str,
    /// What ticking the box says was reviewed and is approved.
    confirm: &'static str,
    /// The reject button, with what rejecting does.
    reject: &'static str,
}

/// The decision on an approval, after what it decides on: the hash, a box to tick that names
/// it (the server refuses an approval without it), and the buttons.
fn decision_section(viewer: &Principal, decision: &Decision<'_>) -> Markup {
    let approval = decision.approval;
    let hash = approval.subject_hash.as_str();
    html! {
        section.decision #decision aria-labelledby="decision-heading" {
            h2 #decision-heading { "Decision" }
            p { (decision.binds) " hash " span.mono #approval-hash { (hash) } " " (copy_button(hash, "the hash being approved")) }
            @if viewer.role == Role::Admin {
                form.stack method="post" action=(format!("/approvals/{}/approve", approval.id)) {
                    input type="hidden" name="hash" value=(hash);
                    label.check {
                        input type="checkbox" name="confirm" value=(hash) required;
                        span { (decision.confirm) " " span.mono { (hash) } }
                    }
                    div { button type="submit" { (decision.approve) } }
                }
                form.inline method="post" action=(format!("/approvals/{}/reject", approval.id)) {
                    input type="hidden" name="hash" value=(hash);
                    button.danger type="submit" { (decision.reject) }
                }
            } @else {
                p.muted { "An admin decides approvals." }
            }
        }
    }
}

/// The validations of a proposal: each check, its result, duration and output tail.
fn validations_section(proposal: &warden_protocol::Proposal) -> Markup {
    html! {
        h2 { "Validations" }
        p.muted { "Each ran on exactly tree " span.mono { (proposal.tree) } "." }
        @if proposal.validations.is_empty() { p.muted { "No check ran." } }
        ul.checks {
            @for validation in &proposal.validations {
                li {
                    p.check-head {
                        @if validation.passed() { span.badge.ok { "passed" } } @else {
                            span.badge.bad { @match validation.exit_code { Some(code) => { "failed: exit " (code) } None => { "killed" } } } }
                        " " code { (validation.command) }
                        " " span.muted { (format::duration(validation.duration_ms)) @if validation.reused { " (an earlier run on the same tree)" } }
                    }
                    @if !validation.output_tail.is_empty() {
                        details open[!validation.passed()] { summary { "Output (the last lines)" } pre.output { (validation.output_tail) } }
                    }
                }
            }
        }
    }
}

fn change_section(
    viewer: &Principal,
    result: &ChangeResult,
    diff: Option<&ProposalDiff>,
    status: TaskStatus,
) -> Markup {
    let waiting = |approval: &Option<Approval>| -> Option<Approval> {
        approval
            .clone()
            .filter(|_| status == TaskStatus::WaitingApproval)
    };
    html! {
        @match &result.outcome {
            ChangeOutcome::Proposal { proposal, publication } => {
                h2 { "Proposal" }
                (markdown::render(&proposal.summary))
                dl.facts {
                    dt { "Repository" } dd { (proposal.repo) }
                    dt { "Base" } dd.mono { (proposal.base_commit) }
                    dt { "Commit" } dd { (copyable(&proposal.commit, "the commit")) }
                    dt { "Hash" } dd { (copyable(&proposal.hash, "the proposal hash")) }
                    dt { "Changes" } dd { (proposal.diff_stat.files_changed) @if proposal.diff_stat.files_changed == 1 { " file" } @else { " files" } ", +" (proposal.diff_stat.additions) " −" (proposal.diff_stat.deletions) }
                    dt { "Publication" } dd {
                        (wire_words(publication.status))
                        @if let Some(branch) = &publication.branch { " · branch " span.mono { (branch) } }
                        @if let Some(url) = &publication.pr_url { " · " (forge_link(Some(url), "pull request")) }
                    }
                }
                @if !proposal.sensitive_files.is_empty() {
                    p.notice { "Sensitive files changed (publishing needs a publish_sensitive approval): "
                        @for (i, file) in proposal.sensitive_files.iter().enumerate() {
                            @if i > 0 { ", " } span.mono { (file) }
                        }
                    }
                }
                (validations_section(proposal))
                (review_sections(result))
                h2 #diff { "Diff" }
                @match diff {
                    Some(diff) => {
                        @if diff.truncated { p.notice { "The diff is longer than is shown; it was cut at a line end." } }
                        (code::diff(&diff.diff))
                    }
                    None => { p.muted { "The diff is not available (the proposal left Warden's mirror)." } }
                }
                @if let Some(approval) = waiting(&result.approval) {
                    (decision_section(viewer, &Decision {
                        approval: &approval,
                        binds: "Approving publishes exactly the proposal with",
                        approve: "Approve and publish",
                        confirm: "I reviewed the diff and the validations above; publish exactly",
                        reject: "Reject: complete without publishing",
                    }))
                }
            }
            ChangeOutcome::AwaitingApproval {} => {
                h2 { "Waiting for approval to run" }
                p { "The risk gate holds this change before anything runs: the request above is what would run." }
                (review_sections(result))
                @if let Some(approval) = waiting(&result.approval) {
                    (decision_section(viewer, &Decision {
                        approval: &approval,
                        binds: "Approving runs exactly the request with",
                        approve: "Approve and run",
                        confirm: "I reviewed the request above; run exactly",
                        reject: "Reject: end the task without running it",
                    }))
                }
            }
            ChangeOutcome::NoChange { summary } => { h2 { "No change" } (markdown::render(summary)) (review_sections(result)) }
            ChangeOutcome::Clarification { .. } => { (review_sections(result)) }
            ChangeOutcome::Failure { failure } => {
                h2 { "Failed" }
                p.error { span.mono { (failure.code.as_str()) } ": " (failure.message) }
                (review_sections(result))
            }
        }
    }
}

/// The risk gate's verdict, the reviewer's findings and the baseline checks.
fn review_sections(result: &ChangeResult) -> Markup {
    html! {
        @if let Some(gate) = &result.gate {
            h2 { "Risk gate" }
            p { "Request: " span.mono { (warden_service::gate::level_name(gate.level)) } " → " span.mono { (warden_service::gate::action_name(gate.action)) }
                @if let Some(proposal) = &gate.proposal { " · proposal: " span.mono { (warden_service::gate::level_name(proposal.level)) } } }
            @if !gate.reasons.is_empty() {
                ul { @for line in warden_service::gate::reason_lines(&gate.reasons) { li { (line) } } }
            }
        }
        @if let Some(review) = &result.review {
            h2 { "Review" }
            p { "Verdict " span.mono { (review.verdict) } " after " (review.rounds) " round(s) by " span.mono { (review.model) } }
            @if !review.explanation.is_empty() { (markdown::render(&review.explanation)) }
            @if !review.findings.is_empty() {
                ul.findings { @for finding in &review.findings {
                    li { span.badge { "P" (finding.priority) } " " (finding.title) " — " span.mono { (finding.location.path) ":" (finding.location.start_line) "-" (finding.location.end_line) }
                        (markdown::render(&finding.body)) }
                } }
            }
        }
        @if !result.baseline.is_empty() {
            h2 { "Baseline checks" }
            ul { @for v in &result.baseline { li { span.mono { (v.command) } ": " @if v.passed() { "passed" } @else { "failed" } " (" (format::duration(v.duration_ms)) ")" } } }
        }
    }
}

/// The agent's question when the task waits for an answer (or ended on one).
fn clarification_of(
    question: Option<&QuestionResult>,
    change: Option<&ChangeResult>,
) -> Option<String> {
    if let Some(QuestionOutcome::Clarification { clarification }) = question.map(|q| &q.outcome) {
        return Some(clarification.question.clone());
    }
    if let Some(ChangeOutcome::Clarification { clarification }) = change.map(|c| &c.outcome) {
        return Some(clarification.question.clone());
    }
    None
}

/// What the cancel button does, in words, for a task in `status`.
fn cancel_label(status: TaskStatus, gate: bool) -> &'static str {
    match status {
        TaskStatus::Queued => "Cancel before it starts",
        TaskStatus::Running | TaskStatus::Testing => "Stop and cancel the task",
        TaskStatus::WaitingInput => "Cancel instead of answering",
        TaskStatus::WaitingApproval if gate => "Cancel the task: nothing runs",
        TaskStatus::WaitingApproval => "Cancel the task: nothing is published",
        TaskStatus::Completed
        | TaskStatus::Failed
        | TaskStatus::Cancelled
        | TaskStatus::TimedOut => "Cancel",
    }
}

/// The `warden` commands for this task, each with a copy button.
fn commands(task: &Task, change: Option<&ChangeResult>) -> Vec<(&'static str, String)> {
    let id = task.id.to_string();
    let mut list = vec![
        ("Show it", format!("warden show {id}")),
        ("Its journal, live", format!("warden logs {id} --follow")),
    ];
    if let Some(change) = change {
        if matches!(change.outcome, ChangeOutcome::Proposal { .. }) {
            list.push(("Read the diff", format!("warden diff {id}")));
            list.push(("Fetch it as a branch", format!("warden apply {id}")));
        }
        if let Some(approval) = change
            .approval
            .as_ref()
            .filter(|_| task.status == TaskStatus::WaitingApproval)
        {
            list.push((
                "Approve it",
                format!(
                    "warden approve {} --hash {}",
                    approval.id, approval.subject_hash
                ),
            ));
        }
    }
    list
}

/// One task: its result (what to review first), the decision after it, the actions it
/// allows, and its timeline (filled live by `app.js`).
pub(super) fn task_page(viewer: &Principal, page: &TaskPage<'_>) -> Markup {
    let task = page.task;
    let result = task.result.as_ref();
    let question: Option<QuestionResult> = result
        .filter(|_| task.kind == TaskKind::Question)
        .and_then(|r| serde_json::from_value(r.clone()).ok());
    // A maintenance's result is a change result (with `maintenance`).
    let change: Option<ChangeResult> = result
        .filter(|_| matches!(task.kind, TaskKind::Change | TaskKind::Maintain))
        .and_then(|r| serde_json::from_value(r.clone()).ok());
    let writer = viewer.role != Role::Viewer;
    let id = task.id.to_string();
    let clarification = clarification_of(question.as_ref(), change.as_ref());
    // The agent's question is shown once: in the conversation when it is there.
    let asked_in_conversation = clarification.as_ref().is_some_and(|q| {
        page.messages
            .iter()
            .any(|m| m.role == warden_protocol::views::MESSAGE_AGENT && &m.text == q)
    });
    let gate = change
        .as_ref()
        .is_some_and(|c| matches!(c.outcome, ChangeOutcome::AwaitingApproval {}));
    layout(
        &title_of(&task.prompt),
        Some(viewer),
        html! {
            h1 { (title_of(&task.prompt)) }
            p.status-line { (status_badge(task.status)) " " span.muted { (kind_name(task.kind)) " · " } (copyable(&id, "the task id")) span.muted { " · " (task.owner) " · created " (absolute(task.created_at.ms())) } }
            @if task.status == TaskStatus::WaitingApproval {
                p.notice { "This task waits for an approval. Review what it would do below; the decision comes after it. " a href="#decision" { "Go to the decision" } }
            }
            dl.facts {
                dt { "Prompt" } dd { pre.prompt { (task.prompt) } }
                dt { "Repositories" } dd {
                    @for repo in &task.repos {
                        span.mono { (repo.name) @if let Some(commit) = &repo.commit { "@" (&commit[..commit.len().min(12)]) } } " "
                    }
                }
                @if let Some(parent) = &task.follow_up_to { dt { "Follows up" } dd { a href=(format!("/tasks/{parent}")) { (parent.to_string()) } } }
                @if let Some(parent) = &task.retry_of { dt { "Retries" } dd { a href=(format!("/tasks/{parent}")) { (parent.to_string()) } } }
            }
            @if !page.messages.is_empty() {
                h2 { "Conversation" }
                ol.conversation {
                    @for message in page.messages {
                        li.message data-role=(message.role) {
                            p.who {
                                strong { (message.author) }
                                @if message.role == warden_protocol::views::MESSAGE_STEER { " (while it ran)" }
                                @if message.role == warden_protocol::views::MESSAGE_AGENT { " (the agent)" }
                                " · " span.muted { (absolute(message.at_ms)) }
                            }
                            @if message.role == warden_protocol::views::MESSAGE_AGENT { (markdown::render(&message.text)) }
                            @else { p.text { (message.text) } }
                        }
                    }
                }
            }
            @if let Some(question_text) = clarification.as_ref().filter(|_| !asked_in_conversation) {
                h2 { "Question from the agent" }
                (markdown::render(question_text))
            }
            @if writer && task.status == TaskStatus::WaitingInput {
                form.stack.answer method="post" action=(format!("/tasks/{id}/answer")) {
                    label { "Your answer to the agent's question" textarea name="text" required {} }
                    div { button type="submit" { "Send answer" } }
                }
            }
            @if let Some(question) = &question {
                @match &question.outcome {
                    QuestionOutcome::Answer { answer } => { (answer_section(answer, page.cited)) }
                    QuestionOutcome::Clarification { .. } => {}
                    QuestionOutcome::Failure { failure } => { h2 { "Failed" } p.error { span.mono { (failure.code.as_str()) } ": " (failure.message) } }
                }
                (notices(&question.notices))
            }
            @if let Some(change) = &change {
                (change_section(viewer, change, page.diff, task.status))
                (notices(&change.notices))
            }
            @if writer {
                @if matches!(task.status, TaskStatus::Queued | TaskStatus::Running | TaskStatus::Testing) && task.kind != TaskKind::Maintain {
                    h2 { "Message the agent" }
                    form.stack method="post" action=(format!("/tasks/{id}/message")) {
                        label { "A message the agent reads at its next turn" textarea name="text" required {} }
                        div { button type="submit" { "Send to the running task" } }
                    }
                }
                @if task.status.is_terminal() {
                    h2 { "Follow up" }
                    form.stack method="post" action=(format!("/tasks/{id}/follow-up")) {
                        label { "A follow-up, on the same commits and this result" textarea name="text" required {} }
                        div { button type="submit" { "Follow up" } }
                    }
                }
                @let retry = matches!(task.status, TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::TimedOut);
                @if !task.status.is_terminal() || retry {
                    div.actions {
                        @if !task.status.is_terminal() {
                            form.inline method="post" action=(format!("/tasks/{id}/cancel")) { button.danger.cancel type="submit" { (cancel_label(task.status, gate)) } }
                        }
                        @if retry {
                            form.inline method="post" action=(format!("/tasks/{id}/retry")) { button.secondary type="submit" { "Retry as a new task" } }
                        }
                    }
                    @if task.status == TaskStatus::WaitingApproval && !gate {
                        p.muted { "Cancelling ends the task as cancelled; rejecting completes it with the proposal kept unpublished (" code { "warden apply" } " still fetches it)." }
                    }
                }
            }
            @if let Some(question) = &question { h2 { "Usage" } (usage_facts(&question.usage, &question.model)) }
            @if let Some(change) = &change { h2 { "Usage" } (usage_facts(&change.usage, &change.model)) }
            h2 { "From a terminal" }
            dl.facts.commands {
                @for (what, command) in commands(task, change.as_ref()) {
                    dt { (what) } dd { (copyable(&command, &format!("the command: {what}"))) }
                }
            }
            h2 { "Timeline " span #connection data-state="idle" role="status" {} }
            ol.timeline #timeline data-task=(id) data-status=(status_name(task.status))
                data-updated=(rfc3339(task.updated_at.ms())) data-terminal=(task.status.is_terminal()) {}
        },
    )
}

/// One line of spend.
pub(super) struct SpendRow {
    pub key: String,
    pub spend: warden_protocol::views::Spend,
}

/// Daily limits of `[serve]`, for the usage page.
#[derive(Debug, Clone, Copy, Default)]
pub struct Budgets {
    pub max_tokens_per_day: Option<u64>,
    pub max_cost_micro_usd_per_day: Option<u64>,
}

fn spend_cost(spend: &warden_protocol::views::Spend) -> String {
    let known = format::dollars(spend.cost_micro_usd as f64 / 1e6);
    match (spend.cost_unknown, spend.cost_micro_usd) {
        (false, _) => known,
        (true, 0) => "unpriced".into(),
        (true, _) => format!("{known} + unpriced calls"),
    }
}

fn spend_table(title: &str, key: &str, rows: &[SpendRow]) -> Markup {
    html! {
        @if !rows.is_empty() {
            table.reflow.spend {
                caption.visually-hidden { (title) }
                thead { tr { th { (key) } th.num { "Tokens in" } th.num { "Cache hits" } th.num { "Tokens out" } th.num { "Calls" } th.num { "Cost" } } }
                tbody {
                    @for row in rows {
                        tr {
                            td.mono { (row.key) }
                            td.num data-label="Tokens in" { (format::tokens(row.spend.input_tokens)) }
                            td.num data-label="Cache hits" {
                                @match warden_protocol::cache_hit_rate(row.spend.cached_input_tokens, row.spend.input_tokens) {
                                    Some(rate) => { (format::percent(rate)) }
                                    None => { "–" }
                                }
                            }
                            td.num data-label="Tokens out" { (format::tokens(row.spend.output_tokens)) }
                            td.num data-label="Calls" { (row.spend.entries) }
                            td.num data-label="Cost" { (spend_cost(&row.spend)) }
                        }
                    }
                }
            }
        }
    }
}

/// The cost and token bars of `rows` (the largest first).
/// The bars of `rows`' cost and of their tokens (input and output), one per row.
fn cost_and_token_bars(rows: &[SpendRow]) -> (Vec<Bar>, Vec<Bar>) {
    let cost = rows
        .iter()
        .map(|row| Bar {
            label: row.key.clone(),
            value: row.spend.cost_micro_usd as f64,
            text: spend_cost(&row.spend),
        })
        .collect();
    let tokens = rows
        .iter()
        .map(|row| {
            let total = row.spend.input_tokens + row.spend.output_tokens;
            Bar {
                label: row.key.clone(),
                value: total as f64,
                text: format!("{} tokens", format::tokens(total)),
            }
        })
        .collect();
    (cost, tokens)
}

fn spend_bars(title: &str, rows: &[SpendRow]) -> Markup {
    let (cost, tokens) = cost_and_token_bars(rows);
    html! {
        div.charts {
            (charts::rows(&format!("Cost per {title}"), &cost))
            (charts::rows(&format!("Tokens per {title}"), &tokens))
        }
    }
}

/// The usage page's spend per repository, model and role.
pub(super) struct SpendGroups<'a> {
    pub by_repo: &'a [SpendRow],
    pub by_model: &'a [SpendRow],
    /// `agent`, `explorer`, `reviewer`.
    pub by_role: &'a [SpendRow],
}

/// Spend per day (the last 30, oldest first, days without spend included), repository, model
/// and role, with today's use of the daily budgets.
pub(super) fn usage(
    viewer: &Principal,
    today: Option<&warden_protocol::views::Spend>,
    budgets: Budgets,
    days: &[SpendRow],
    groups: SpendGroups<'_>,
) -> Markup {
    let SpendGroups {
        by_repo,
        by_model,
        by_role,
    } = groups;
    let (cost_per_day, tokens_per_day) = cost_and_token_bars(days);
    let spent_days: Vec<&SpendRow> = days.iter().rev().filter(|r| r.spend.entries > 0).collect();
    let spent_days: Vec<SpendRow> = spent_days
        .into_iter()
        .map(|r| SpendRow {
            key: r.key.clone(),
            spend: r.spend,
        })
        .collect();
    layout(
        "Usage",
        Some(viewer),
        html! {
            h1 { "Usage" }
            @if viewer.role != Role::Admin { p.muted { "The spend of your own tasks." } }
            h2 { "Today against the daily budgets" }
            dl.facts {
                dt { "Tokens" } dd {
                    (format::tokens(today.map_or(0, |s| s.input_tokens + s.output_tokens)))
                    @match budgets.max_tokens_per_day { Some(max) => { " of " (format::tokens(max)) } None => { " (no daily token budget)" } }
                }
                dt { "Cost" } dd {
                    (today.map_or_else(|| format::dollars(0.0), spend_cost))
                    @match budgets.max_cost_micro_usd_per_day { Some(max) => { " of " (format::dollars(max as f64 / 1e6)) } None => { " (no daily cost budget)" } }
                }
            }
            h2 { "Per day" }
            @if spent_days.is_empty() { p.muted { "Nothing spent in the last 30 days." } } @else {
                div.charts {
                    (charts::columns("Cost per day, last 30 days", &cost_per_day))
                    (charts::columns("Tokens per day, last 30 days", &tokens_per_day))
                }
                (spend_table("Spend per day", "Day", &spent_days))
            }
            h2 { "Per repository" }
            @if by_repo.is_empty() { p.muted { "Nothing spent." } } @else {
                (spend_bars("repository", by_repo))
                (spend_table("Spend per repository", "Repository", by_repo))
            }
            h2 { "Per model" }
            @if by_model.is_empty() { p.muted { "Nothing spent." } } @else {
                (spend_bars("model", by_model))
                (spend_table("Spend per model", "Model", by_model))
            }
            h2 { "Per role" }
            p.muted { "The agent (compaction included), the explorers it sent, the reviewer of its changes." }
            @if by_role.is_empty() { p.muted { "Nothing spent." } } @else {
                (spend_bars("role", by_role))
                (spend_table("Spend per role", "Role", by_role))
            }
        },
    )
}

/// One web session as the sessions page lists it.
pub(super) struct SessionRow {
    pub id: String,
    pub name: String,
    pub via: String,
    pub address: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub current: bool,
}

/// The viewer's sessions (everyone's for an admin), each revocable.
pub(super) fn sessions(viewer: &Principal, rows: &[SessionRow], now_ms: i64) -> Markup {
    layout(
        "Sessions",
        Some(viewer),
        html! {
            h1 { "Sessions" }
            table.reflow {
                thead { tr { th { "Who" } th { "Signed in with" } th { "From" } th { "Since" } th { "Expires" } th { span.visually-hidden { "Action" } } } }
                tbody {
                    @for row in rows {
                        tr {
                            td { (row.name) @if row.current { " " span.badge { "this one" } } }
                            td data-label="Signed in with" { (row.via) }
                            td.mono data-label="From" { (row.address.as_deref().unwrap_or("")) }
                            td.muted data-label="Since" { (relative(row.created_at_ms, now_ms)) }
                            td.muted data-label="Expires" { (relative(row.expires_at_ms, now_ms)) }
                            td { form.inline method="post" action=(format!("/sessions/{}/revoke", row.id)) { button.secondary type="submit" aria-label=(format!("Revoke the session of {} from {}", row.name, format::utc_minutes(row.created_at_ms))) { "Revoke" } } }
                        }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_protocol::views::TaskRepo;

    const HOSTILE: &str =
        "<img src=x onerror=alert(1)> ![](http://127.0.0.1:9/x) </pre><script>alert(2)</script>";

    fn viewer(role: Role) -> Principal {
        Principal {
            name: "alice".into(),
            role,
        }
    }

    fn task(status: TaskStatus, kind: TaskKind, result: Option<Value>) -> Task {
        Task {
            id: "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9".parse().unwrap(),
            kind,
            status,
            owner: "alice".into(),
            prompt: format!("{HOSTILE}\nsecond line"),
            repos: vec![TaskRepo::named("app")],
            created_at: warden_protocol::views::Timestamp(0),
            updated_at: warden_protocol::views::Timestamp(0),
            follow_up_to: None,
            retry_of: None,
            result,
            metadata: json!({}),
            runs: 1,
        }
    }

    /// No markup of the hostile text survives: only its escaped form is in the page.
    fn assert_inert(page: &str) {
        assert!(!page.contains("<img"), "{page}");
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(
            page.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{page}"
        );
        assert!(!page.contains("style="), "no inline style: {page}");
        assert_eq!(page.matches("<script").count(), 1, "only app.js: {page}");
    }

    #[test]
    fn untrusted_text_is_escaped_in_lists_and_task_pages() {
        let question = json!({
            "task_id": "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9", "kind": "question", "outcome": "answer",
            "answer": {"summary": HOSTILE, "claims": [{"text": HOSTILE, "basis": "observed",
                "evidence": [{"repo": "app", "commit": "a".repeat(40), "path": "src/<b>.rs",
                              "start_line": 1, "end_line": 1,
                              "url": "javascript:alert(3)"}]}],
                       "not_established": [HOSTILE]},
            "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1,
                      "cost_usd": null, "model_calls": 1, "tool_calls": 0},
            "model": "m", "notices": [HOSTILE]
        });
        let task = task(TaskStatus::Completed, TaskKind::Question, Some(question));
        let evidence: warden_protocol::Evidence = serde_json::from_value(
            task.result.as_ref().unwrap()["answer"]["claims"][0]["evidence"][0].clone(),
        )
        .unwrap();
        let cited = [CitedLines {
            evidence,
            lines: Some(vec![HOSTILE.to_string()]),
            truncated: false,
        }];
        let page = task_page(
            &viewer(Role::Operator),
            &TaskPage {
                task: &task,
                messages: &[],
                cited: &cited,
                diff: None,
            },
        )
        .into_string();
        assert_inert(&page);
        assert!(!page.contains("javascript:"), "a non-http link is dropped");
        assert!(page.contains("src/&lt;b&gt;.rs"));
        let list = task_list(
            &viewer(Role::Operator),
            std::slice::from_ref(&task),
            &[],
            &ListFilters::default(),
            None,
            0,
        )
        .into_string();
        assert_inert(&list);
    }

    #[test]
    fn a_proposal_shows_its_hash_and_only_admins_get_the_decision_buttons() {
        let hash = format!("sha256:{}", "b".repeat(64));
        let change = json!({
            "task_id": "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9", "kind": "change", "outcome": "proposal",
            "proposal": {"id": "prp_1", "repo": "app", "base_commit": "c".repeat(40),
                "commit": "d".repeat(40), "tree": "e".repeat(40), "ref": "refs/warden/x",
                "diff_stat": {"files_changed": 1, "additions": 1, "deletions": 1},
                "files": [], "summary": HOSTILE, "hash": hash,
                "validations": [{"command": "bash check.sh", "exit_code": 0, "tree": "e".repeat(40),
                    "config_hash": "f", "sandbox": "linux", "duration_ms": 1200,
                    "output_tail": HOSTILE}],
                "sensitive_files": [".env"]},
            "publication": {"status": "awaiting_approval", "branch": "warden/<b>"},
            "approval": {"id": "apr_1", "kind": "publish", "subject_hash": hash, "status": "pending"},
            "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1,
                      "cost_usd": 0.5, "model_calls": 1, "tool_calls": 0},
            "model": "m"
        });
        let task = task(TaskStatus::WaitingApproval, TaskKind::Change, Some(change));
        let diff = ProposalDiff {
            task_id: task.id.clone(),
            repo: "app".into(),
            base_commit: "c".repeat(40),
            commit: "d".repeat(40),
            hash: hash.clone(),
            diff: format!("+{HOSTILE}\n-old\n"),
            truncated: false,
            sensitive_files: vec![".env".into()],
        };
        let render = |role| {
            task_page(
                &viewer(role),
                &TaskPage {
                    task: &task,
                    messages: &[],
                    cited: &[],
                    diff: Some(&diff),
                },
            )
            .into_string()
        };
        let admin = render(Role::Admin);
        assert_inert(&admin);
        assert!(admin.contains(&hash));
        assert!(admin.contains("action=\"/approvals/apr_1/approve\""));
        assert!(admin.contains(&format!("name=\"hash\" value=\"{hash}\"")));
        assert!(admin.contains("warden/&lt;b&gt;"));
        assert!(admin.contains(".env"));
        // Review before deciding: the validations and the diff come before the decision,
        // whose approval needs a ticked box naming the hash.
        let validations = admin.find("<h2>Validations</h2>").unwrap();
        let diff_at = admin.find("id=\"diff\"").unwrap();
        let decision = admin.find("id=\"decision\"").unwrap();
        assert!(validations < diff_at && diff_at < decision, "{admin}");
        assert!(admin.contains(&format!(
            "<input type=\"checkbox\" name=\"confirm\" value=\"{hash}\" required>"
        )));
        assert!(admin.contains("Cancel the task: nothing is published"));
        assert!(admin.contains("Reject: complete without publishing"));
        assert!(admin.contains(&format!("warden approve apr_1 --hash {hash}")));
        let operator = render(Role::Operator);
        assert!(!operator.contains("/approvals/apr_1/approve"));
        assert!(operator.contains("An admin decides approvals."));
        let viewer_page = render(Role::Viewer);
        assert!(!viewer_page.contains("/cancel"), "viewers only read");
    }

    #[test]
    fn the_agents_question_is_shown_once_above_a_labelled_answer_box() {
        let question = "Which retry: **backoff** or jitter?";
        let result = json!({
            "task_id": "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9", "kind": "question",
            "outcome": "clarification", "clarification": {"question": question},
            "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1,
                      "cost_usd": null, "model_calls": 1, "tool_calls": 0},
            "model": "m"
        });
        let task = task(TaskStatus::WaitingInput, TaskKind::Question, Some(result));
        let render = |messages: &[TaskMessage]| {
            task_page(
                &viewer(Role::Operator),
                &TaskPage {
                    task: &task,
                    messages,
                    cited: &[],
                    diff: None,
                },
            )
            .into_string()
        };
        let asked = TaskMessage {
            seq: 1,
            role: warden_protocol::views::MESSAGE_AGENT.into(),
            text: question.into(),
            author: "m".into(),
            at_ms: 0,
        };
        for page in [render(&[]), render(&[asked])] {
            assert_eq!(
                page.matches("<strong>backoff</strong>").count(),
                1,
                "{page}"
            );
            assert!(page.contains("<label>Your answer to the agent&#39;s question<textarea name=\"text\" required>")
                || page.contains("<label>Your answer to the agent's question<textarea name=\"text\" required>"), "{page}");
            assert!(page.contains("Cancel instead of answering"));
            assert!(page.contains("unpriced"));
        }
    }

    #[test]
    fn the_new_task_form_shows_only_the_fields_of_its_kind() {
        let repos = [];
        let form = |kind: &str| {
            new_task(
                &viewer(Role::Operator),
                &repos,
                &NewTaskInput {
                    kind: kind.into(),
                    ..Default::default()
                },
                None,
            )
            .into_string()
        };
        let question = form("question");
        assert!(
            question.contains("<label data-kinds=\"change maintain\" hidden>"),
            "{question}"
        );
        assert!(question.contains("<label data-kinds=\"maintain\" hidden>"));
        assert!(question.contains("value=\"question\" checked"));
        let change = form("change");
        assert!(
            change.contains("<label data-kinds=\"change maintain\">"),
            "{change}"
        );
        assert!(change.contains("<label data-kinds=\"maintain\" hidden>"));
        let maintain = form("maintain");
        assert!(maintain.contains("<label data-kinds=\"maintain\">"));
        assert!(!maintain.contains("<label data-kinds=\"maintain\" hidden>"));
    }
}
