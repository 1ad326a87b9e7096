//! A YAML writer for the manifests `warden k8s render` prints: block style, keys in the order
//! of the JSON value (sorted: `apiVersion`, `kind`, `metadata`, `spec`), and a string written
//! plain only when no YAML 1.1 or 1.2 reader could take it for anything but that string;
//! otherwise it is double-quoted JSON, which is valid YAML.

use serde_json::Value;

/// Several documents, each starting with `---`.
pub(crate) fn documents(values: &[Value]) -> String {
    let mut out = String::new();
    for value in values {
        out.push_str("---\n");
        write_block(&mut out, value, 0);
    }
    out
}

fn write_block(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, item) in map {
                push_indent(out, indent);
                out.push_str(&scalar_string(key));
                out.push(':');
                write_after_key(out, item, indent);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                push_indent(out, indent);
                out.push('-');
                write_sequence_item(out, item, indent);
            }
        }
        other => {
            push_indent(out, indent);
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// What follows `key:`: an inline scalar or empty collection, else a nested block.
fn write_after_key(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_block(out, value, indent + 2);
        }
        // Sequences under a key sit at the key's own indentation (kubectl's style).
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_block(out, value, indent);
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// What follows `-`: a mapping starts on the dash's line, its other keys under the first.
fn write_sequence_item(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            let mut first = true;
            for (key, item) in map {
                if first {
                    out.push(' ');
                    first = false;
                } else {
                    push_indent(out, indent + 2);
                }
                out.push_str(&scalar_string(key));
                out.push(':');
                write_after_key(out, item, indent + 2);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_block(out, value, indent + 2);
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

fn push_indent(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn inline(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar_string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// A string as a plain scalar when that is unambiguous, else double-quoted.
fn scalar_string(text: &str) -> String {
    if is_plain_safe(text) {
        text.to_string()
    } else {
        Value::String(text.to_string()).to_string()
    }
}

fn is_plain_safe(text: &str) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    if !(first.is_ascii_alphabetic() || first == '/' || first == '_') {
        return false;
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
    {
        return false;
    }
    // YAML 1.1 booleans and nulls, any case.
    const RESERVED: [&str; 12] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf", "infinity",
    ];
    !RESERVED.contains(&text.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_mappings_and_sequences() {
        let value = json!({
            "apiVersion": "v1",
            "kind": "Thing",
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "warden"}},
            "spec": {
                "list": [{"name": "x", "ports": [{"port": 1}]}, "plain", 3],
                "empty": {}, "none": [], "flag": true, "quoted": "yes", "num": "1024",
                "space": "a b", "colon": "a:b"
            }
        });
        let expected = "---\n\
apiVersion: v1\n\
kind: Thing\n\
metadata:\n  \
  labels:\n    \
    app.kubernetes.io/name: warden\n  \
  name: a\n\
spec:\n  \
  colon: \"a:b\"\n  \
  empty: {}\n  \
  flag: true\n  \
  list:\n  \
  - name: x\n    \
    ports:\n    \
    - port: 1\n  \
  - plain\n  \
  - 3\n  \
  none: []\n  \
  num: \"1024\"\n  \
  quoted: \"yes\"\n  \
  space: \"a b\"\n";
        assert_eq!(documents(&[value]), expected);
    }

    #[test]
    fn plain_only_when_unambiguous() {
        for (text, plain) in [
            ("warden", true),
            ("app.kubernetes.io/name", true),
            ("pods/exec", true),
            ("", false),
            ("No", false),
            ("NULL", false),
            ("1Gi", false),
            ("-x", false),
            ("*", false),
            ("a#b", false),
        ] {
            assert_eq!(is_plain_safe(text), plain, "{text:?}");
        }
    }
}
