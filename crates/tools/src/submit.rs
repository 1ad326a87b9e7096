//! The tools that end a question task: `submit_answer`, whose every citation is validated against
//! the pinned checkouts before it is accepted (rejections go back to the model), and `ask_user`,
//! which ends the turn with a clarification.

use serde_json::{json, Value};
use std::sync::Arc;
use warden_protocol::{Answer, Basis, Claim};
use warden_repo::evidence::{validate_evidence, EvidenceClaim, PinnedCheckout};
use warden_runtime::{BoxFuture, Finish, Tool, ToolOutput, ToolSpec};

/// Most claims a single answer may carry; keeps validation and output bounded.
const MAX_CLAIMS: u64 = 50;
const MAX_EVIDENCE_PER_CLAIM: u64 = 20;

/// `submit_answer`: validates and accepts the final answer.
pub struct SubmitAnswer {
    manifest: Arc<Vec<PinnedCheckout>>,
}

impl SubmitAnswer {
    pub fn new(manifest: Arc<Vec<PinnedCheckout>>) -> SubmitAnswer {
        SubmitAnswer { manifest }
    }

    /// Checks every claim; returns the accepted answer or every problem found.
    pub fn check(&self, arguments: &Value) -> Result<Answer, Vec<String>> {
        let mut errors = Vec::new();
        let summary = arguments["summary"].as_str().unwrap_or_default().trim();
        if summary.is_empty() {
            errors.push("summary is empty".to_string());
        }
        let mut claims = Vec::new();
        for (index, raw) in arguments["claims"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let number = index + 1;
            let text = raw["text"].as_str().unwrap_or_default().trim().to_string();
            if text.is_empty() {
                errors.push(format!("claim {number}: text is empty"));
            }
            let basis = match raw["basis"].as_str() {
                Some("inferred") => Basis::Inferred,
                _ => Basis::Observed,
            };
            let mut evidence = Vec::new();
            for (item_index, item) in raw["evidence"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                let label = format!("claim {number}, evidence {}", item_index + 1);
                match self.check_evidence(item) {
                    Ok(valid) => evidence.push(valid),
                    Err(message) => errors.push(format!("{label}: {message}")),
                }
            }
            if basis == Basis::Observed && raw["evidence"].as_array().is_none_or(Vec::is_empty) {
                errors.push(format!(
                    "claim {number}: basis \"observed\" needs at least one evidence item; cite \
                     the lines you read or mark the claim \"inferred\""
                ));
            }
            claims.push(Claim {
                text,
                basis,
                evidence,
            });
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let not_established = arguments["not_established"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        Ok(Answer {
            summary: summary.to_string(),
            claims,
            not_established,
        })
    }

    fn check_evidence(&self, item: &Value) -> Result<warden_protocol::Evidence, String> {
        let given = item["path"].as_str().unwrap_or_default();
        // The same normalisation as the read tools, so `./lib/x.rs` means what it meant there.
        let normalised = warden_repo::confine::lexical_relative(given)
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned();
        let mut path = normalised.as_str();
        let repo = match item["repo"].as_str() {
            Some(repo) => repo,
            None => match self.manifest.as_slice() {
                [only] => only.repo.as_str(),
                _ => {
                    // Accept the multi-repository display form `repo/path`.
                    let names: Vec<&str> = self.manifest.iter().map(|c| c.repo.as_str()).collect();
                    match path.split_once('/') {
                        Some((first, rest)) if names.contains(&first) => {
                            path = rest;
                            first
                        }
                        _ => {
                            return Err(format!(
                                "repo is required when the task has several repositories ({})",
                                names.join(", ")
                            ))
                        }
                    }
                }
            },
        };
        let pinned = self
            .manifest
            .iter()
            .find(|c| c.repo == repo)
            .map(|c| c.commit.as_str());
        let commit = item["commit"].as_str().or(pinned).unwrap_or_default();
        let claim = EvidenceClaim {
            repo,
            commit,
            path,
            start_line: item["start_line"].as_u64().unwrap_or(0),
            end_line: item["end_line"].as_u64().unwrap_or(0),
        };
        validate_evidence(&self.manifest, &claim).map_err(|e| e.to_string())
    }
}

impl Tool for SubmitAnswer {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "submit_answer".into(),
            description: "Submit the final answer. Every claim you observed in the code must cite \
                the exact line ranges you read (repo, path, start_line, end_line at the pinned \
                commit); each citation is checked and a wrong one is sent back to you. Mark \
                reasoning that no single range shows as basis \"inferred\". List what you could \
                not establish in not_established."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "summary": {"type": "string", "minLength": 1, "maxLength": 20000,
                        "description": "The answer in a few sentences."},
                    "claims": {"type": "array", "maxItems": MAX_CLAIMS, "items": {
                        "type": "object",
                        "properties": {
                            "text": {"type": "string", "minLength": 1, "maxLength": 4000},
                            "basis": {"type": "string", "enum": ["observed", "inferred"]},
                            "evidence": {"type": "array", "maxItems": MAX_EVIDENCE_PER_CLAIM, "items": {
                                "type": "object",
                                "properties": {
                                    "repo": {"type": "string", "description": "Repository name; optional for single-repository tasks."},
                                    "commit": {"type": "string", "description": "Optional; must be the pinned commit."},
                                    "path": {"type": "string", "minLength": 1},
                                    "start_line": {"type": "integer", "minimum": 1},
                                    "end_line": {"type": "integer", "minimum": 1}
                                },
                                "required": ["path", "start_line", "end_line"],
                                "additionalProperties": false
                            }}
                        },
                        "required": ["text", "basis"],
                        "additionalProperties": false
                    }},
                    "not_established": {"type": "array", "maxItems": 50,
                        "items": {"type": "string", "maxLength": 2000}}
                },
                "required": ["summary", "claims"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, arguments: &Value) -> String {
        let claims = arguments["claims"].as_array().map_or(0, Vec::len);
        let noun = if claims == 1 { "claim" } else { "claims" };
        format!("submit_answer ({claims} {noun})")
    }

    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match self.check(&arguments) {
                Ok(answer) => ToolOutput::Finish(Finish::Answer(answer)),
                Err(errors) => ToolOutput::Rejected(errors),
            }
        })
    }
}

/// `ask_user`: ends the turn with a question for the person who asked.
pub struct AskUser;

impl Tool for AskUser {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "ask_user".into(),
            description: "Ask the person a clarifying question when the request is ambiguous. \
                This ends your turn; their reply arrives as a follow-up."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"question": {"type": "string", "minLength": 1, "maxLength": 4000}},
                "required": ["question"],
                "additionalProperties": false
            }),
        }
    }

    fn describe(&self, _arguments: &Value) -> String {
        "ask_user".into()
    }

    fn call<'a>(&'a self, arguments: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let question = arguments["question"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            ToolOutput::Finish(Finish::Clarification { question })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_repo::CheckoutRoot;

    fn manifest(dirs: &[(&str, &tempfile::TempDir)]) -> Arc<Vec<PinnedCheckout>> {
        Arc::new(
            dirs.iter()
                .map(|(name, dir)| PinnedCheckout {
                    repo: name.to_string(),
                    commit: format!("{:0>40}", name.len()),
                    root: CheckoutRoot::new(dir.path()).unwrap(),
                    browse: None,
                })
                .collect(),
        )
    }

    fn repo_with(file: &str, lines: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(file), "x\n".repeat(lines)).unwrap();
        dir
    }

    fn check(tool: &SubmitAnswer, claims: Value) -> Result<Answer, Vec<String>> {
        tool.check(&json!({"summary": "s", "claims": claims}))
    }

    #[test]
    fn single_repository_citations_default_repo_and_commit() {
        let app = repo_with("a.rs", 10);
        let tool = SubmitAnswer::new(manifest(&[("app", &app)]));
        let answer = check(
            &tool,
            json!([{"text": "t", "basis": "observed",
                "evidence": [{"path": "a.rs", "start_line": 2, "end_line": 10}]}]),
        )
        .unwrap();
        let evidence = &answer.claims[0].evidence[0];
        assert_eq!(evidence.repo, "app");
        assert_eq!(evidence.commit, format!("{:0>40}", 3));
    }

    #[test]
    fn every_problem_is_reported_with_its_claim() {
        let app = repo_with("a.rs", 10);
        let tool = SubmitAnswer::new(manifest(&[("app", &app)]));
        let errors = check(
            &tool,
            json!([
                {"text": "no evidence", "basis": "observed"},
                {"text": "past the end", "basis": "observed",
                    "evidence": [{"path": "a.rs", "start_line": 5, "end_line": 11}]},
                {"text": "wrong commit", "basis": "observed",
                    "evidence": [{"path": "a.rs", "commit": "f".repeat(40), "start_line": 1, "end_line": 1}]},
                {"text": "inferred is fine", "basis": "inferred"}
            ]),
        )
        .unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("claim 1:"), "{errors:?}");
        assert!(errors[1].starts_with("claim 2, evidence 1:"), "{errors:?}");
        assert!(errors[2].starts_with("claim 3, evidence 1:"), "{errors:?}");
    }

    #[test]
    fn multi_repository_citations_need_a_repo_or_a_prefixed_path() {
        let app = repo_with("a.rs", 3);
        let lib = repo_with("b.rs", 3);
        let tool = SubmitAnswer::new(manifest(&[("app", &app), ("lib", &lib)]));
        let answer = check(
            &tool,
            json!([{"text": "t", "basis": "observed", "evidence": [
                {"path": "./lib/b.rs", "start_line": 1, "end_line": 3},
                {"repo": "app", "path": "a.rs", "start_line": 1, "end_line": 1}
            ]}]),
        )
        .unwrap();
        assert_eq!(answer.claims[0].evidence[0].repo, "lib");
        assert_eq!(answer.claims[0].evidence[0].path, "b.rs");
        let errors = check(
            &tool,
            json!([{"text": "t", "basis": "observed",
                "evidence": [{"path": "b.rs", "start_line": 1, "end_line": 1}]}]),
        )
        .unwrap_err();
        assert!(errors[0].contains("repo is required"), "{errors:?}");
    }
}
