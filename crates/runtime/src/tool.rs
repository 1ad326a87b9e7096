//! The tool contract: what a tool tells the model about itself, what it returns, and the policy
//! that is asked before any tool runs.

use crate::model::ToolSpec;
use crate::BoxFuture;
use warden_protocol::{Answer, Failure, Proposal, Review};

/// What a tool call produced.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    /// An observation for the model.
    Ok(String),
    /// A failure the model should see and can react to (bad path, no match, non-zero exit).
    Error(String),
    /// A final submission that failed validation; counts toward the rejection limit.
    Rejected(Vec<String>),
    /// The task is finished.
    Finish(Finish),
    /// The task cannot go on for a reason outside the agent's work (its checks cannot run on
    /// the base tree): the run ends with this failure.
    Stop(Failure),
}

/// How a run ends successfully from the agent's side.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    Answer(Answer),
    Clarification {
        question: String,
    },
    /// A change task's accepted submission: a proposal whose checks passed on its exact tree,
    /// or `None` when the candidate tree equals the base tree (nothing to propose).
    Change {
        summary: String,
        proposal: Option<Box<Proposal>>,
    },
    /// A reviewer's accepted findings (their locations checked).
    Review(Box<Review>),
}

/// A tool the agent may call. Arguments have already been validated against `spec().parameters`.
pub trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;

    /// A one-line human description of a call, for progress output (`search "retry"`).
    fn describe(&self, arguments: &serde_json::Value) -> String;

    fn call<'a>(&'a self, arguments: serde_json::Value) -> BoxFuture<'a, ToolOutput>;

    /// A line for the person following the task about what a call returned (a command the
    /// sandbox could not find), shown with its progress; most tools have none.
    fn note(&self, _output: &ToolOutput) -> Option<String> {
        None
    }

    /// The tool's own policy about a validated call, asked after the run's [`Policy`] allowed
    /// it (a third-party tool denied by default); most tools allow every call.
    fn verdict(&self, _arguments: &serde_json::Value) -> Verdict {
        Verdict::Allow
    }
}

/// A policy decision about one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// The call is refused; the model is told why and may continue.
    Deny(String),
    /// The whole task stops.
    Abort(String),
    /// A human must approve this exact call first; the subject hash binds the approval to it.
    RequireApproval {
        reason: String,
        subject_hash: String,
    },
}

/// Decides whether a validated tool call may run.
pub trait Policy: Send + Sync {
    fn check(&self, tool: &str, arguments: &serde_json::Value) -> Verdict;
}

/// Allows every call: the tools themselves confine what they touch.
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowAll;

impl Policy for AllowAll {
    fn check(&self, _tool: &str, _arguments: &serde_json::Value) -> Verdict {
        Verdict::Allow
    }
}
