//! What the model is told: names, strict schemas, and path help for the workspace's layout.

use super::*;
use serde_json::json;

#[test]
fn schemas_are_strict_and_name_their_required_fields() {
    let dir = tree(&[("a", "")]);
    let tools = question_tools(single(dir.path()));
    let names: Vec<String> = tools.iter().map(|t| t.spec().name).collect();
    assert_eq!(names, ["read_file", "list_dir", "search"]);
    let required = [json!(["path"]), json!([]), json!(["pattern"])];
    for (tool, required) in tools.iter().zip(required) {
        let spec = tool.spec();
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        assert_eq!(
            spec.parameters["additionalProperties"], false,
            "{}",
            spec.name
        );
        assert_eq!(spec.parameters["required"], required, "{}", spec.name);
        for name in spec.parameters["required"].as_array().unwrap() {
            assert!(spec.parameters["properties"]
                .get(name.as_str().unwrap())
                .is_some());
        }
        assert!(
            spec.description.contains("relative to the repository root"),
            "{}",
            spec.name
        );
    }
}

#[test]
fn multi_repository_descriptions_name_the_folders() {
    let a = tree(&[("x", "")]);
    let b = tree(&[("y", "")]);
    let tools = question_tools(multi(&[("web", a.path()), ("api", b.path())]));
    for tool in &tools {
        let description = tool.spec().description;
        assert!(
            description.contains("one folder per repository (api, web)"),
            "{description}"
        );
        assert!(description.contains("`api/src/main.rs`"), "{description}");
    }
}
