//! The console's pages as HTML, from what the task service returned. Every value goes through
//! maud's escaping: model output, file contents, branch names and commit messages are text,
//! never markup (there is no `PreEscaped` in this module). No inline script or style: the CSP
//! forbids both; behaviour lives in `assets/app.js`.

use maud::{html, Markup, DOCTYPE};
use serde_json::Value;
use warden_protocol::{
    Answer, ChangeOutcome, ChangeResult, QuestionOutcome, QuestionResult, TaskKind, TaskStatus,
    Usage,
};
use warden_service::tasks::{CitedLines, Principal, ProposalDiff, Role};
use warden_store::{Repository, Task, TaskMessage};
use warden_time::rfc3339;

use super::assets::ASSETS;

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
                header.top {
                    a.brand href="/" { "Warden" }
                    @if let Some(viewer) = viewer {
                        a href="/" { "Tasks" }
                        @if viewer.role != Role::Viewer { a href="/new" { "New task" } }
                        a href="/usage" { "Usage" }
                        a href="/sessions" { "Sessions" }
                        span.muted { (viewer.name) " (" (viewer.role.as_str()) ")" }
                        form.inline method="post" action="/sign-out" {
                            button.secondary type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
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

fn task_rows(tasks: &[&Task]) -> Markup {
    html! {
        table {
            thead { tr { th { "Task" } th { "Status" } th.hide-narrow { "Repositories" } th.hide-narrow { "Updated" } } }
            tbody {
                @for task in tasks {
                    tr {
                        td {
                            a href=(format!("/tasks/{}", task.id)) { (title_of(&task.prompt)) }
                            br;
                            span.muted.mono { (kind_name(task.kind)) " · " (task.id.to_string()) }
                        }
                        td { (status_badge(task.status)) }
                        td.hide-narrow { (repos_of(task)) }
                        td.hide-narrow.muted { (rfc3339(task.updated_at_ms)) }
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
            @if !needs.is_empty() { h2 { "Needs you" } (task_rows(&needs)) }
            @if !running.is_empty() { h2 { "Running" } (task_rows(&running)) }
            @if !recent.is_empty() { h2 { "Recent" } (task_rows(&recent)) }
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

/// The form to submit a question, a change or a maintenance.
pub(super) fn new_task(
    viewer: &Principal,
    repos: &[Repository],
    input: &NewTaskInput,
    error: Option<&str>,
) -> Markup {
    let change = input.kind == "change";
    let maintain = input.kind == "maintain";
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
            form.stack method="post" action="/tasks" {
                label { "Kind"
                    select name="kind" {
                        option value="question" selected[!change && !maintain] { "Question: a cited answer" }
                        option value="change" selected[change] { "Change: a proposal proven by checks" }
                        option value="maintain" selected[maintain] { "Maintenance: dependency upgrades proven by checks (Cargo, Go, npm)" }
                    }
                }
                label { "Repository"
                    select name="repo" required {
                        @for repo in repos {
                            option value=(repo.name) selected[input.repo == repo.name] { (repo.name) }
                        }
                    }
                }
                label { "What do you want to know or change? (maintenance: may be left empty)"
                    textarea name="prompt" { (input.prompt) }
                }
                label { "Select (maintenance): all, vulnerable, or package names"
                    input type="text" name="select" value=(input.select) placeholder="all";
                }
                label { "Checks (changes; one command per line; empty: the repository's)"
                    textarea name="checks" { (input.checks) }
                }
                label { input type="checkbox" name="publish" value="true" checked[input.publish];
                    " Publish (changes): push a branch and open a pull request once approved" }
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
            dt { "Tokens" } dd { (usage.input_tokens) " in (" (usage.cached_input_tokens) " cached), " (usage.output_tokens) " out" }
            @if let Some(rate) = warden_protocol::cache_hit_rate(usage.cached_input_tokens, usage.input_tokens) {
                dt { "Prompt cache" } dd {
                    (format!("{:.0}", rate * 100.0)) "% of the prompt read from the cache"
                    @if usage.cache_write_tokens > 0 { ", " (usage.cache_write_tokens) " tokens written" }
                }
            }
            dt { "Calls" } dd { (usage.model_calls) " model, " (usage.tool_calls) " tool" }
            dt { "Cost" } dd {
                @match usage.cost_usd {
                    Some(cost) => { "$" (format!("{cost:.4}")) }
                    None => { "unknown (a model without a price)" }
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
        p.text { (answer.summary) }
        @for claim in &answer.claims {
            div.claim {
                p { span.badge { (format!("{:?}", claim.basis).to_lowercase()) } " " (claim.text) }
                @for evidence in &claim.evidence {
                    @let lines = cited.iter().find(|c| &c.evidence == evidence);
                    div.cite {
                        span.mono {
                            (evidence.repo) ": " (evidence.path) ":" (evidence.start_line) "-" (evidence.end_line)
                            " @ " (&evidence.commit[..evidence.commit.len().min(12)])
                        }
                        " " (forge_link(evidence.url.as_deref(), "view at this commit"))
                        @match lines.and_then(|c| c.lines.as_ref()) {
                            Some(text) => {
                                pre.cited {
                                    @for (offset, line) in text.iter().enumerate() {
                                        span.muted { (format!("{:>5}  ", evidence.start_line + offset as u64)) }
                                        (line) "\n"
                                    }
                                    @if lines.is_some_and(|c| c.truncated) { span.muted { "… (cut)" } }
                                }
                            }
                            None => { p.muted { "(these lines can no longer be read from Warden's mirror)" } }
                        }
                    }
                }
            }
        }
        @if !answer.not_established.is_empty() {
            h2 { "Not established" }
            ul { @for item in &answer.not_established { li { (item) } } }
        }
    }
}

fn diff_lines(diff: &str) -> Markup {
    html! {
        pre.diff {
            @for line in diff.lines() {
                @let class = if line.starts_with("+++") || line.starts_with("---") { "" }
                    else if line.starts_with('+') { "add" }
                    else if line.starts_with('-') { "del" }
                    else if line.starts_with("@@") { "hunk" } else { "" };
                span class=(class) { (line) } "\n"
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
    html! {
        @match &result.outcome {
            ChangeOutcome::Proposal { proposal, publication } => {
                h2 { "Proposal" }
                p.text { (proposal.summary) }
                dl.facts {
                    dt { "Repository" } dd { (proposal.repo) }
                    dt { "Base" } dd.mono { (proposal.base_commit) }
                    dt { "Commit" } dd.mono { (proposal.commit) }
                    dt { "Hash" } dd.mono { (proposal.hash) }
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
                h2 { "Validations" }
                p.muted { "Each ran on exactly tree " span.mono { (proposal.tree) } "." }
                table {
                    thead { tr { th { "Check" } th { "Result" } th.num { "Time" } } }
                    tbody {
                        @for validation in &proposal.validations {
                            tr {
                                td.mono { (validation.command) }
                                td { @if validation.passed() { span.badge.ok { "passed" } } @else {
                                    span.badge.bad { @match validation.exit_code { Some(code) => { "exit " (code) } None => { "killed" } } } } }
                                td.num { (format!("{:.1} s", validation.duration_ms as f64 / 1000.0)) }
                            }
                            @if !validation.output_tail.is_empty() {
                                tr { td colspan="3" { details { summary { "output" } pre { (validation.output_tail) } } } }
                            }
                        }
                    }
                }
                @if let (Some(approval), TaskStatus::WaitingApproval) = (&result.approval, status) {
                    h2 { "Approval" }
                    p { "Approving publishes exactly the proposal with hash " span.mono #approval-hash { (approval.subject_hash) } "." }
                    @if viewer.role == Role::Admin {
                        div.actions {
                            form.inline method="post" action=(format!("/approvals/{}/approve", approval.id)) {
                                input type="hidden" name="hash" value=(approval.subject_hash);
                                button type="submit" { "Approve and publish" }
                            }
                            form.inline method="post" action=(format!("/approvals/{}/reject", approval.id)) {
                                input type="hidden" name="hash" value=(approval.subject_hash);
                                button.danger type="submit" { "Reject" }
                            }
                        }
                    } @else {
                        p.muted { "An admin decides approvals." }
                    }
                }
                h2 { "Diff" }
                @if !proposal.files.is_empty() {
                    table.files {
                        tbody {
                            @for file in &proposal.files {
                                tr {
                                    td.mono { (file.path) }
                                    td { (file.status) }
                                    td.num { @match (file.additions, file.deletions) {
                                        (Some(added), Some(deleted)) => { "+" (added) " −" (deleted) }
                                        _ => { "binary" }
                                    } }
                                }
                            }
                        }
                    }
                }
                @match diff {
                    Some(diff) => {
                        @if diff.truncated { p.notice { "The diff is longer than is shown; it was cut at a line end." } }
                        (diff_lines(&diff.diff))
                    }
                    None => { p.muted { "The diff is not available (the proposal left Warden's mirror)." } }
                }
            }
            ChangeOutcome::AwaitingApproval {} => {
                h2 { "Waiting for approval to run" }
                @if let (Some(approval), TaskStatus::WaitingApproval) = (&result.approval, status) {
                    p { "The risk gate holds this change before anything runs. Approving runs exactly the request with hash " span.mono #approval-hash { (approval.subject_hash) } "." }
                    @if viewer.role == Role::Admin {
                        div.actions {
                            form.inline method="post" action=(format!("/approvals/{}/approve", approval.id)) {
                                input type="hidden" name="hash" value=(approval.subject_hash);
                                button type="submit" { "Approve and run" }
                            }
                            form.inline method="post" action=(format!("/approvals/{}/reject", approval.id)) {
                                input type="hidden" name="hash" value=(approval.subject_hash);
                                button.danger type="submit" { "Reject" }
                            }
                        }
                    } @else {
                        p.muted { "An admin decides approvals." }
                    }
                }
            }
            ChangeOutcome::NoChange { summary } => { h2 { "No change" } p { (summary) } }
            ChangeOutcome::Clarification { clarification } => { h2 { "Question from the agent" } p.text { (clarification.question) } }
            ChangeOutcome::Failure { failure } => {
                h2 { "Failed" }
                p.error { span.mono { (failure.code.as_str()) } ": " (failure.message) }
            }
        }
        @if let Some(gate) = &result.gate {
            h2 { "Risk gate" }
            p { "Request: " span.mono { (warden_engine::gates::level_name(gate.level)) } " → " span.mono { (warden_engine::gates::action_name(gate.action)) }
                @if let Some(proposal) = &gate.proposal { " · proposal: " span.mono { (warden_engine::gates::level_name(proposal.level)) } } }
            @if !gate.reasons.is_empty() {
                ul { @for line in warden_engine::gates::reason_lines(&gate.reasons) { li { (line) } } }
            }
        }
        @if let Some(review) = &result.review {
            h2 { "Review" }
            p { "Verdict " span.mono { (review.verdict) } " after " (review.rounds) " round(s) by " span.mono { (review.model) } }
            @if !review.explanation.is_empty() { p.text { (review.explanation) } }
            @if !review.findings.is_empty() {
                ul.findings { @for finding in &review.findings {
                    li { span.badge { "P" (finding.priority) } " " (finding.title) " — " span.mono { (finding.location.path) ":" (finding.location.start_line) "-" (finding.location.end_line) }
                        p.text { (finding.body) } }
                } }
            }
        }
        @if !result.baseline.is_empty() {
            h2 { "Baseline checks" }
            ul { @for v in &result.baseline { li { span.mono { (v.command) } ": " @if v.passed() { "passed" } @else { "failed" } } } }
        }
    }
}

/// One task: its timeline (filled live by `app.js`), result and the actions it allows.
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
    layout(
        &title_of(&task.prompt),
        Some(viewer),
        html! {
            h1 { (title_of(&task.prompt)) }
            p { (status_badge(task.status)) " " span.muted { (kind_name(task.kind)) " · " span.mono { (id) } " · " (task.owner) " · created " (rfc3339(task.created_at_ms)) } }
            dl.facts {
                dt { "Prompt" } dd { pre { (task.prompt) } }
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
                @for message in page.messages {
                    p.text { strong { (message.author) @if message.role == warden_store::MESSAGE_STEER { " (while it ran)" } ": " } (message.text) }
                }
            }
            @if let Some(question) = &question {
                @match &question.outcome {
                    QuestionOutcome::Answer { answer } => { (answer_section(answer, page.cited)) }
                    QuestionOutcome::Clarification { clarification } => { h2 { "Question from the agent" } p.text { (clarification.question) } }
                    QuestionOutcome::Failure { failure } => { h2 { "Failed" } p.error { span.mono { (failure.code.as_str()) } ": " (failure.message) } }
                }
                (notices(&question.notices))
                h2 { "Usage" } (usage_facts(&question.usage, &question.model))
            }
            @if let Some(change) = &change {
                (change_section(viewer, change, page.diff, task.status))
                (notices(&change.notices))
                h2 { "Usage" } (usage_facts(&change.usage, &change.model))
            }
            @if writer {
                @if task.status == TaskStatus::WaitingInput {
                    h2 { "Answer" }
                    form.stack method="post" action=(format!("/tasks/{id}/answer")) {
                        textarea name="text" required {}
                        div { button type="submit" { "Send answer" } }
                    }
                }
                @if matches!(task.status, TaskStatus::Queued | TaskStatus::Running | TaskStatus::Testing) && task.kind != TaskKind::Maintain {
                    h2 { "Message the agent" }
                    form.stack method="post" action=(format!("/tasks/{id}/message")) {
                        textarea name="text" required aria-label="A message the agent reads at its next turn" {}
                        div { button type="submit" { "Send to the running task" } }
                    }
                }
                @if task.status.is_terminal() {
                    h2 { "Follow up" }
                    form.stack method="post" action=(format!("/tasks/{id}/follow-up")) {
                        textarea name="text" required {}
                        div { button type="submit" { "Follow up" } }
                    }
                }
                div.actions {
                    @if !task.status.is_terminal() {
                        form.inline method="post" action=(format!("/tasks/{id}/cancel")) { button.danger type="submit" { "Cancel" } }
                    }
                    @if matches!(task.status, TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::TimedOut) {
                        form.inline method="post" action=(format!("/tasks/{id}/retry")) { button.secondary type="submit" { "Retry" } }
                    }
                }
            }
            h2 { "Timeline " span #connection data-state="idle" {} }
            ol.timeline #timeline data-task=(id) data-updated=(rfc3339(task.updated_at_ms)) data-terminal=(task.status.is_terminal()) {}
        },
    )
}

/// One line of spend.
pub(super) struct SpendRow {
    pub key: String,
    pub spend: warden_store::Spend,
}

/// Daily limits of `[serve]`, for the usage page.
#[derive(Debug, Clone, Copy, Default)]
pub struct Budgets {
    pub max_tokens_per_day: Option<u64>,
    pub max_cost_micro_usd_per_day: Option<u64>,
}

fn spend_table(title: &str, rows: &[SpendRow]) -> Markup {
    html! {
        h2 { (title) }
        @if rows.is_empty() { p.muted { "Nothing spent." } } @else {
            table {
                thead { tr { th { "" } th.num { "Tokens in" } th.num { "Cache hits" } th.num { "Tokens out" } th.num { "Calls" } th.num { "Cost" } } }
                tbody {
                    @for row in rows {
                        tr {
                            td.mono { (row.key) }
                            td.num { (row.spend.input_tokens) }
                            td.num {
                                @match warden_protocol::cache_hit_rate(row.spend.cached_input_tokens, row.spend.input_tokens) {
                                    Some(rate) => { (format!("{:.0}%", rate * 100.0)) }
                                    None => { "–" }
                                }
                            }
                            td.num { (row.spend.output_tokens) }
                            td.num { (row.spend.entries) }
                            td.num { "$" (format!("{:.4}", row.spend.cost_micro_usd as f64 / 1e6)) @if row.spend.cost_unknown { " +?" } }
                        }
                    }
                }
            }
        }
    }
}

/// Spend per day, repository and model, with today's use of the daily budgets.
pub(super) fn usage(
    viewer: &Principal,
    today: Option<&warden_store::Spend>,
    budgets: Budgets,
    by_day: &[SpendRow],
    by_repo: &[SpendRow],
    by_model: &[SpendRow],
) -> Markup {
    layout(
        "Usage",
        Some(viewer),
        html! {
            h1 { "Usage" }
            @if viewer.role != Role::Admin { p.muted { "The spend of your own tasks." } }
            h2 { "Today against the daily budgets" }
            dl.facts {
                dt { "Tokens" } dd {
                    (today.map_or(0, |s| s.input_tokens + s.output_tokens))
                    @match budgets.max_tokens_per_day { Some(max) => { " of " (max) } None => { " (no daily token budget)" } }
                }
                dt { "Cost" } dd {
                    "$" (format!("{:.4}", today.map_or(0, |s| s.cost_micro_usd) as f64 / 1e6))
                    @match budgets.max_cost_micro_usd_per_day { Some(max) => { " of $" (format!("{:.2}", max as f64 / 1e6)) } None => { " (no daily cost budget)" } }
                }
            }
            (spend_table("Per day", by_day))
            (spend_table("Per repository", by_repo))
            (spend_table("Per model", by_model))
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
pub(super) fn sessions(viewer: &Principal, rows: &[SessionRow]) -> Markup {
    layout(
        "Sessions",
        Some(viewer),
        html! {
            h1 { "Sessions" }
            table {
                thead { tr { th { "Who" } th { "Signed in with" } th.hide-narrow { "From" } th { "Since" } th { "Expires" } th {} } }
                tbody {
                    @for row in rows {
                        tr {
                            td { (row.name) @if row.current { " " span.badge { "this one" } } }
                            td { (row.via) }
                            td.hide-narrow.mono { (row.address.as_deref().unwrap_or("")) }
                            td.muted { (rfc3339(row.created_at_ms)) }
                            td.muted { (rfc3339(row.expires_at_ms)) }
                            td { form.inline method="post" action=(format!("/sessions/{}/revoke", row.id)) { button.secondary type="submit" { "Revoke" } } }
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
    use warden_store::TaskRepo;

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
            priority: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
            follow_up_to: None,
            retry_of: None,
            result,
            metadata: json!({}),
            runs: 1,
            interrupted_runs: 0,
            callback_url: None,
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
            task: task.id.clone(),
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
        let operator = render(Role::Operator);
        assert!(!operator.contains("/approvals/apr_1/approve"));
        assert!(operator.contains("An admin decides approvals."));
        let viewer_page = render(Role::Viewer);
        assert!(!viewer_page.contains("/cancel"), "viewers only read");
    }
}
