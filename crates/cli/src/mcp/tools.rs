//! The tools `warden mcp` offers: names, descriptions, input schemas and typed arguments.
//!
//! Schemas are closed (`additionalProperties: false`) and checked with the runtime's validator
//! (`warden_runtime::schema`, the one Warden's own agent tools are checked with: a keyword it does
//! not enforce is refused, so no schema here promises a check that is not made). There is no
//! approve tool: an MCP client cannot approve.

use std::sync::Arc;

use rmcp::model::ToolAnnotations;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::Refusal;

/// Every tool `warden mcp` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Ask,
    RunChange,
    TaskStatus,
    TaskResult,
    TaskDiff,
    Answer,
    Cancel,
    ListRepos,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskArgs {
    pub repos: Vec<String>,
    pub question: String,
    #[serde(default)]
    pub follow_up_to: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunChangeArgs {
    pub repo: String,
    pub request: String,
    #[serde(default)]
    pub checks: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    pub task_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerArgs {
    pub task_id: String,
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

const TASK_ID: &str = "a task id (tsk_…) that ask or run_change returned";

impl Tool {
    pub const ALL: [Tool; 8] = [
        Tool::Ask,
        Tool::RunChange,
        Tool::TaskStatus,
        Tool::TaskResult,
        Tool::TaskDiff,
        Tool::Answer,
        Tool::Cancel,
        Tool::ListRepos,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tool::Ask => "ask",
            Tool::RunChange => "run_change",
            Tool::TaskStatus => "task_status",
            Tool::TaskResult => "task_result",
            Tool::TaskDiff => "task_diff",
            Tool::Answer => "answer",
            Tool::Cancel => "cancel",
            Tool::ListRepos => "list_repos",
        }
    }

    pub fn named(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    fn description(self) -> &'static str {
        match self {
            Tool::Ask => {
                "Ask a question about one or more repositories. Warden pins each to an exact \
                 commit, lets an agent read the code in a sandbox, and returns its answer once \
                 every citation (repo/path:start-end @ commit) has been checked against the \
                 pinned commit. Runs to the end (sending progress notifications when asked); \
                 may take minutes."
            }
            Tool::RunChange => {
                "Ask for a change to one repository. Warden's agent edits a sandboxed copy, \
                 the checks run on the result, and a proposal commit is kept in Warden's mirror \
                 (never in your checkout). Nothing is pushed: publishing needs a person's \
                 approval. Runs to the end; may take minutes."
            }
            Tool::TaskStatus => "A task's status, kind, repositories and outcome (no result).",
            Tool::TaskResult => {
                "A finished task's result: a cited answer, a proposal, a clarification or a \
                 failure."
            }
            Tool::TaskDiff => "A change task's proposal diff (sensitive files redacted).",
            Tool::Answer => {
                "Answer a task that asked for clarification (it resumes), or follow a finished \
                 task up with more (a new task of its kind on the same commits). Runs to the end."
            }
            Tool::Cancel => "Cancel an unfinished task; its run stops within about a second.",
            Tool::ListRepos => {
                "The repositories this server offers by name (ask and run_change also take an \
                 absolute path or a git URL)."
            }
        }
    }

    /// The tool's input schema: a closed object.
    pub fn input_schema(self) -> Value {
        let task_id =
            json!({"type": "string", "minLength": 1, "maxLength": 64, "description": TASK_ID});
        match self {
            Tool::Ask => json!({
                "type": "object",
                "properties": {
                    "repos": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 16,
                        "items": {"type": "string", "minLength": 1, "maxLength": 4096},
                        "description": "repositories by the name list_repos gives, or by absolute \
                                        path or git URL, optionally @REV (default: HEAD)"
                    },
                    "question": {"type": "string", "minLength": 1, "maxLength": 100000},
                    "follow_up_to": {
                        "type": "string", "minLength": 1, "maxLength": 64,
                        "description": "continue an earlier question task (its task id)"
                    }
                },
                "required": ["repos", "question"],
                "additionalProperties": false
            }),
            Tool::RunChange => json!({
                "type": "object",
                "properties": {
                    "repo": {
                        "type": "string", "minLength": 1, "maxLength": 4096,
                        "description": "the repository by the name list_repos gives, or by \
                                        absolute path or git URL, optionally @REV"
                    },
                    "request": {"type": "string", "minLength": 1, "maxLength": 100000},
                    "checks": {
                        "type": "array",
                        "maxItems": 32,
                        "items": {"type": "string", "minLength": 1, "maxLength": 4096},
                        "description": "shell commands that must pass on the proposal"
                    }
                },
                "required": ["repo", "request"],
                "additionalProperties": false
            }),
            Tool::TaskStatus | Tool::TaskResult | Tool::TaskDiff | Tool::Cancel => json!({
                "type": "object",
                "properties": {"task_id": task_id},
                "required": ["task_id"],
                "additionalProperties": false
            }),
            Tool::Answer => json!({
                "type": "object",
                "properties": {
                    "task_id": task_id,
                    "text": {"type": "string", "minLength": 1, "maxLength": 100000}
                },
                "required": ["task_id", "text"],
                "additionalProperties": false
            }),
            Tool::ListRepos => json!({
                "type": "object",
                "properties": {},
                "additionalProperties": false
            }),
        }
    }

    fn annotations(self) -> ToolAnnotations {
        let annotations = ToolAnnotations::new().open_world(false);
        match self {
            Tool::Ask | Tool::TaskStatus | Tool::TaskResult | Tool::TaskDiff | Tool::ListRepos => {
                annotations.read_only(true)
            }
            Tool::RunChange | Tool::Answer => annotations.read_only(false).destructive(false),
            Tool::Cancel => annotations
                .read_only(false)
                .destructive(true)
                .idempotent(true),
        }
    }

    /// The tool as `tools/list` shows it.
    pub fn describe(self) -> rmcp::model::Tool {
        let schema = match self.input_schema() {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        rmcp::model::Tool::new(self.name(), self.description(), Arc::new(schema))
            .with_annotations(self.annotations())
    }

    /// The call's arguments checked against the input schema, then typed.
    pub fn arguments<T: DeserializeOwned>(self, arguments: &Value) -> Result<T, Refusal> {
        let name = self.name();
        if let Err(errors) = warden_runtime::schema::validate(arguments, &self.input_schema()) {
            return Err(Refusal(format!(
                "invalid arguments for {name}: {}; the tool's inputSchema (tools/list) says \
                 what it takes",
                errors.join("; ")
            )));
        }
        serde_json::from_value(arguments.clone()).map_err(|error| {
            Refusal(format!(
                "invalid arguments for {name}: {error}; the tool's inputSchema (tools/list) says \
                 what it takes"
            ))
        })
    }
}
