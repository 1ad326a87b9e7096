//! Validation of tool arguments against the JSON Schema each tool publishes. Warden's tools use a
//! small, strict subset (object, properties, required, additionalProperties, type, enum, items,
//! minimum/maximum, minLength/maxLength, minItems/maxItems), so this checks exactly that subset
//! instead of pulling in a general validator; a schema keyword outside the subset is itself an
//! error, so a tool cannot silently publish a constraint that is not enforced. Objects are closed
//! unless the schema says `"additionalProperties": true`: unknown fields are rejected.

use serde_json::Value;

/// Checks `value` against `schema`. Returns every violation, each naming its JSON path.
pub fn validate(value: &Value, schema: &Value) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    check(value, schema, "arguments", &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The JSON Schema keywords this module enforces; a tool schema using any other is refused.
pub const KNOWN_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "items",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "default",
];

fn check(value: &Value, schema: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        errors.push(format!("{at}: tool schema is not an object"));
        return;
    };
    for key in schema.keys() {
        if !KNOWN_KEYWORDS.contains(&key.as_str()) {
            errors.push(format!(
                "{at}: tool schema uses unsupported keyword {key:?}"
            ));
        }
    }
    let expected = match schema.get("type") {
        None => None,
        Some(Value::String(name)) => Some(name.as_str()),
        Some(other) => {
            errors.push(format!("{at}: tool schema has an unsupported type {other}"));
            return;
        }
    };
    if let Some(expected) = expected {
        if !has_type(value, expected) {
            errors.push(format!(
                "{at}: expected {expected}, got {}",
                type_name(value)
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            errors.push(format!(
                "{at}: must be one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for name in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(name) {
                        errors.push(format!("{at}: missing required field {name:?}"));
                    }
                }
            }
            let closed = schema.get("additionalProperties") != Some(&Value::Bool(true));
            for (name, item) in map {
                match properties.and_then(|p| p.get(name)) {
                    Some(sub) => check(item, sub, &format!("{at}.{name}"), errors),
                    None if closed => {
                        let known = properties
                            .map(|p| p.keys().cloned().collect::<Vec<_>>().join(", "))
                            .unwrap_or_default();
                        errors.push(format!(
                            "{at}: unknown field {name:?} (known fields: {known})"
                        ));
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
                if (items.len() as u64) < min {
                    errors.push(format!("{at}: needs at least {min} items"));
                }
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
                if (items.len() as u64) > max {
                    errors.push(format!("{at}: allows at most {max} items"));
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{at}[{index}]"), errors);
                }
            }
        }
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
                if length < min {
                    errors.push(format!("{at}: must be at least {min} characters"));
                }
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                if length > max {
                    errors.push(format!("{at}: must be at most {max} characters"));
                }
            }
        }
        Value::Number(number) => {
            if let (Some(min), Some(n)) = (
                schema.get("minimum").and_then(Value::as_f64),
                number.as_f64(),
            ) {
                if n < min {
                    errors.push(format!("{at}: must be >= {min}"));
                }
            }
            if let (Some(max), Some(n)) = (
                schema.get("maximum").and_then(Value::as_f64),
                number.as_f64(),
            ) {
                if n > max {
                    errors.push(format!("{at}: must be <= {max}"));
                }
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

fn has_type(value: &Value, expected: &str) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "start_line": {"type": "integer", "minimum": 1},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "claims": {"type": "array", "maxItems": 2, "items": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                    "additionalProperties": false
                }}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn check(args: Value, expect: &[&str]) {
        let got = match validate(&args, &schema()) {
            Ok(()) => vec![],
            Err(errors) => errors,
        };
        assert_eq!(got, expect, "{args}");
    }

    #[test]
    fn table() {
        check(json!({"path": "src"}), &[]);
        check(json!({"path": "src", "start_line": 3, "mode": "a"}), &[]);
        check(json!({}), &["arguments: missing required field \"path\""]);
        check(
            json!({"path": "x", "extra": 1}),
            &["arguments: unknown field \"extra\" (known fields: claims, mode, path, start_line)"],
        );
        check(
            json!({"path": 3}),
            &["arguments.path: expected string, got integer"],
        );
        check(
            json!({"path": ""}),
            &["arguments.path: must be at least 1 characters"],
        );
        check(
            json!({"path": "x", "start_line": 1.5}),
            &["arguments.start_line: expected integer, got number"],
        );
        check(
            json!({"path": "x", "start_line": 0}),
            &["arguments.start_line: must be >= 1"],
        );
        check(
            json!({"path": "x", "mode": "c"}),
            &["arguments.mode: must be one of [\"a\",\"b\"]"],
        );
        check(
            json!({"path": "x", "claims": [{"text": "a", "evil": true}, {}]}),
            &[
                "arguments.claims[0]: unknown field \"evil\" (known fields: text)",
                "arguments.claims[1]: missing required field \"text\"",
            ],
        );
        check(
            json!({"path": "x", "claims": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}),
            &["arguments.claims: allows at most 2 items"],
        );
        check(
            json!("not an object"),
            &["arguments: expected object, got string"],
        );
    }

    #[test]
    fn objects_are_closed_unless_declared_open() {
        let open = json!({"type": "object", "additionalProperties": true});
        assert!(validate(&json!({"x": 1}), &open).is_ok());
        let silent = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(
            validate(&json!({"a": "x", "b": 1}), &silent).unwrap_err(),
            ["arguments: unknown field \"b\" (known fields: a)"]
        );
        let union = json!({"type": ["string", "null"]});
        assert!(validate(&json!("x"), &union).is_err());
    }

    #[test]
    fn unsupported_schema_keywords_are_refused() {
        let errors =
            validate(&json!("x"), &json!({"type": "string", "pattern": "^a"})).unwrap_err();
        assert_eq!(
            errors,
            ["arguments: tool schema uses unsupported keyword \"pattern\""]
        );
    }
}
