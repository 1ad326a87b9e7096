//! The tools' schemas, refusals and results, without a client.

use serde_json::{json, Value};

use super::tools::{AskArgs, NoArgs, TaskArgs};
use super::{task_id, task_result, Tool};

/// Every object in `schema` is closed, recursively.
fn assert_closed(schema: &Value, at: &str) {
    if schema["type"] == "object" {
        assert_eq!(
            schema["additionalProperties"],
            json!(false),
            "{at} is not closed: {schema}"
        );
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            assert_closed(property, &format!("{at}.{name}"));
        }
    }
    if let Some(items) = schema.get("items") {
        assert_closed(items, &format!("{at}[]"));
    }
}

#[test]
fn every_schema_is_closed_and_uses_only_keywords_that_are_enforced() {
    for tool in Tool::ALL {
        let schema = tool.input_schema();
        assert_closed(&schema, tool.name());
        // The validator refuses keywords it does not enforce, whatever the value.
        let errors = warden_runtime::schema::validate(&json!({}), &schema)
            .err()
            .unwrap_or_default();
        assert!(
            errors.iter().all(|e| !e.contains("unsupported")),
            "{}: {errors:?}",
            tool.name()
        );
        let described = tool.describe();
        assert_eq!(described.name, tool.name());
        assert_eq!(Value::Object((*described.input_schema).clone()), schema);
        assert_eq!(Tool::named(tool.name()), Some(tool));
    }
}

#[test]
fn no_tool_approves_or_rejects() {
    let names: Vec<&str> = Tool::ALL.iter().map(|tool| tool.name()).collect();
    assert_eq!(
        names,
        [
            "ask",
            "run_change",
            "task_status",
            "task_result",
            "task_diff",
            "answer",
            "cancel",
            "list_repos",
            "read_file",
            "search",
            "list_dir"
        ]
    );
    for name in ["approve", "reject", "decide", "approvals"] {
        assert_eq!(Tool::named(name), None);
        assert!(names.iter().all(|tool| !tool.contains(name)));
    }
}

fn refusal<T: serde::de::DeserializeOwned + std::fmt::Debug>(
    tool: Tool,
    arguments: Value,
) -> String {
    tool.arguments::<T>(&arguments).unwrap_err().0
}

#[test]
fn arguments_outside_the_schema_are_refused_with_what_to_do() {
    let unknown = refusal::<AskArgs>(
        Tool::Ask,
        json!({"repos": ["app"], "question": "why?", "approve": true}),
    );
    assert!(
        unknown.starts_with("invalid arguments for ask: "),
        "{unknown}"
    );
    assert!(unknown.contains("approve"), "{unknown}");
    assert!(
        unknown.ends_with("the tool's inputSchema (tools/list) says what it takes"),
        "{unknown}"
    );

    let missing = refusal::<AskArgs>(Tool::Ask, json!({"repos": ["app"]}));
    assert!(missing.contains("question"), "{missing}");

    let no_repo = refusal::<AskArgs>(Tool::Ask, json!({"repos": [], "question": "why?"}));
    assert!(no_repo.contains("arguments.repos"), "{no_repo}");

    let wrong_type = refusal::<TaskArgs>(Tool::TaskStatus, json!({"task_id": 7}));
    assert!(wrong_type.contains("arguments.task_id"), "{wrong_type}");

    let extra = refusal::<NoArgs>(Tool::ListRepos, json!({"all": true}));
    assert!(extra.contains("all"), "{extra}");

    let args: AskArgs = Tool::Ask
        .arguments(&json!({"repos": ["app"], "question": "why?"}))
        .unwrap();
    assert_eq!(args.repos, ["app"]);
    assert_eq!(args.follow_up_to, None);
}

#[test]
fn a_malformed_task_id_says_where_ids_come_from() {
    let refusal = task_id("42").unwrap_err().0;
    assert_eq!(
        refusal,
        "\"42\" is not a task id: give the task_id an earlier ask or run_change returned (tsk_ \
         followed by 26 letters and digits)"
    );
}

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    let content = serde_json::to_value(&result.content).unwrap();
    content
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

#[test]
fn an_answer_reads_with_every_citation_pinned_to_its_commit() {
    let commit = "a".repeat(40);
    let task = json!({
        "id": "tsk_01JZ0000000000000000000000",
        "kind": "question",
        "status": "completed",
        "result": {
            "outcome": "answer",
            "answer": {
                "summary": "it doubles",
                "claims": [{"text": "doubles its input", "basis": "observed", "evidence": [
                    {"repo": "app", "commit": commit, "path": "src/lib.rs", "start_line": 31, "end_line": 33}
                ]}],
                "not_established": ["why"]
            }
        }
    });
    let result = task_result(&task);
    assert_eq!(result.is_error, Some(false));
    let text = text_of(&result);
    assert!(text.starts_with("it doubles\n"), "{text}");
    assert!(
        text.contains(&format!("   - app/src/lib.rs:31-33 @ {commit}\n")),
        "{text}"
    );
    assert!(text.contains("Not established:\n- why\n"), "{text}");
    let structured = result.structured_content.unwrap();
    assert_eq!(
        structured["citations"],
        json!([format!("app/src/lib.rs:31-33 @ {commit}")])
    );
    assert_eq!(structured["outcome"], "answer");
    assert_eq!(structured["task_id"], "tsk_01JZ0000000000000000000000");
}

#[test]
fn a_failed_task_is_a_tool_error_naming_its_code() {
    let task = json!({
        "id": "tsk_01JZ0000000000000000000000",
        "kind": "question",
        "status": "failed",
        "result": {"outcome": "failure", "failure": {"code": "budget_exceeded", "message": "over 1 USD"}}
    });
    let result = task_result(&task);
    assert_eq!(result.is_error, Some(true));
    assert!(text_of(&result).starts_with("the task failed (budget_exceeded): over 1 USD\n"));
}
