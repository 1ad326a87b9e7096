//! `[model]`, `[limits]`, `[[prices]]`, `[gates]`, `[roles]` and `[mcp]`: how the agent thinks,
//! what it may spend, and what reviews it.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// `provider:model` or `faux`; `WARDEN_MODEL` overrides.
    pub name: Option<String>,
    /// A second `provider:model` tried once when the first fails for good.
    pub fallback: Option<String>,
    pub stream: Option<bool>,
    /// Send `stream_options.include_usage` (OpenAI-compatible servers that reject it: false).
    pub stream_usage: Option<bool>,
    /// `max_completion_tokens` (OpenAI) or `max_tokens` (many compatible servers).
    pub max_tokens_field: Option<String>,
    /// Send the system prompt with the `developer` role (OpenAI reasoning models).
    pub developer_role: Option<bool>,
    pub max_output_tokens: Option<u32>,
    pub request_timeout_secs: Option<u64>,
    pub max_attempts: Option<u32>,
    /// OpenAI-compatible: send `prompt_cache_key` (default true).
    pub prompt_cache_key: Option<bool>,
    /// OpenAI: `prompt_cache_retention`, for the models that take it (default: not sent).
    pub prompt_cache_retention: Option<String>,
    /// Anthropic: how long the tools and system prompt stay cached, `5m` or `1h` (default).
    pub cache_ttl: Option<String>,
    /// The model's context window in tokens: a conversation reaching 80 % of it is compacted
    /// (default: the published window of a known model; none for others).
    pub context_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub max_turns: Option<u32>,
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
    pub max_wall_secs: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    pub provider: String,
    /// A model name or prefix; the longest matching prefix wins.
    pub model: String,
    pub input: f64,
    #[serde(default)]
    pub cached_input: Option<f64>,
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Per million prompt tokens written to the cache for an hour; default twice `input`.
    #[serde(default)]
    pub cache_write_1h: Option<f64>,
    pub output: f64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatesSection {
    /// The action at level `low`: `run` (default), `approve_proposal` or `approve_before_run`.
    pub low: Option<String>,
    /// The action at level `medium`; default `run`.
    pub medium: Option<String>,
    /// The action at level `high`; default `approve_proposal`.
    pub high: Option<String>,
    /// The reviewer after a change's checks pass: `off` (default), `report` (findings in the
    /// result), `block` (P0/P1 findings fail the task) or `send_back` (P0/P1 findings go back
    /// to the implementer, `review_rounds` times, then block).
    pub review: Option<String>,
    /// How many times P0/P1 findings go back to the implementer (`send_back`); default 1.
    pub review_rounds: Option<u32>,
    /// Findings below this confidence (0 to 1) never block or send back; default 0.
    pub review_confidence: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolesSection {
    /// The reviewer's model (`provider:model`); default: the task's model.
    pub reviewer: Option<String>,
    /// Explorers one agent run may send (the `explore` tool); 0: none. Default 3.
    pub max_explorers: Option<u32>,
    /// Model calls each explorer may make. Default 12.
    pub explorer_max_turns: Option<u32>,
}

/// `[mcp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    #[serde(default)]
    pub servers: Vec<McpServerEntry>,
}

/// One `[[mcp.servers]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// The prefix of its tools (`NAME__TOOL`): `[a-z0-9_]+`, at most 24 characters.
    pub name: String,
    /// The program, as the sandbox sees it (an absolute path, or a name searched in the
    /// sandbox's `PATH`).
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for the server, with their values, in addition to the sandbox's
    /// allow-listed baseline; nothing is taken from Warden's own environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Whether the operator vouches that the server's tools only read. Tools of servers not
    /// marked read-only are offered but every call is denied.
    #[serde(default)]
    pub read_only: bool,
    /// Only these tools of the server are offered (by the server's own names); unset: all.
    pub allow_tools: Option<Vec<String>>,
    /// Longest one call may take, in seconds; default 60.
    pub call_timeout_secs: Option<u64>,
    /// Refused: MCP servers have no network (named destinations are not built yet).
    pub network: Option<toml::Value>,
    /// Refused when true: approving single calls of servers not marked read-only is not built
    /// yet.
    pub approval: Option<bool>,
}
