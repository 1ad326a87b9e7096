//! `/openapi.json` says what the server accepts, checked against the routes: every value its
//! enums list is taken and nothing else is; each numeric limit it declares (`maxItems`,
//! `maxLength`, `minimum`, `maximum`) is exactly where the route starts refusing; and each
//! string format's pattern agrees with the server's checks on the cases that matter (the
//! pattern side of those cases is the pattern's answer, which schemathesis's
//! `negative_data_rejection` check confirmed across thousands of generated values).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{openapi, router, ApiState, Tokens};
use warden_service::tasks::{valid_repo_name, valid_rev, TaskService};
use warden_test_support::git_fixture::TempRepo;

const ADMIN: &str = "admin-token-0123456789-0123456789";

struct Api {
    router: Router,
    _dir: tempfile::TempDir,
    repo: TempRepo,
}

impl Api {
    async fn new() -> Api {
        let dir = tempfile::tempdir().unwrap();
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        let tokens = Tokens::parse(&format!("root:admin:{ADMIN}")).unwrap();
        let router = router(Arc::new(ApiState::new(
            TaskService::new(store, Arc::new(Notify::new())),
            tokens,
        )));
        let repo = TempRepo::new();
        repo.write("src/lib.rs", "pub fn f() {}\n");
        repo.commit("initial");
        let api = Api {
            router,
            _dir: dir,
            repo,
        };
        let reply = api.register(json!({"name": "app"})).await;
        assert_eq!(reply.0, StatusCode::CREATED, "{}", reply.1);
        api
    }

    /// The status and, unless the answer is an event stream (which does not end while its
    /// task runs), the JSON body.
    async fn send(&self, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {ADMIN}"))
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |body| Body::from(body.to_string())))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let stream = response
            .headers()
            .get("content-type")
            .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
        if stream {
            return (status, Value::Null);
        }
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn get(&self, uri: &str) -> (StatusCode, Value) {
        self.send(Method::GET, uri, None).await
    }

    async fn post(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        self.send(Method::POST, uri, Some(body)).await
    }

    /// Registers this test's repository with `fields` (a `name` among them).
    async fn register(&self, fields: Value) -> (StatusCode, Value) {
        let mut body = json!({"source": self.repo.path().to_str().unwrap()});
        body.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        self.post("/v1/repos", body).await
    }

    async fn submit(&self, fields: Value) -> (StatusCode, Value) {
        let mut body = json!({"kind": "question", "repo": "app", "prompt": "how?"});
        body.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        self.post("/v1/tasks", body).await
    }
}

fn document() -> Value {
    serde_json::from_str(&openapi().to_json().unwrap()).unwrap()
}

fn component<'a>(document: &'a Value, name: &str) -> &'a Value {
    let schema = &document["components"]["schemas"][name];
    assert!(schema.is_object(), "no component {name}");
    schema
}

fn enum_values(document: &Value, name: &str) -> Vec<String> {
    component(document, name)["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("{name} is not an enum"))
        .iter()
        .map(|value| value.as_str().unwrap().to_string())
        .collect()
}

/// The schema of query parameter `name` of `method path`.
fn parameter<'a>(document: &'a Value, path: &str, method: &str, name: &str) -> &'a Value {
    document["paths"][path][method]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|parameter| parameter["name"] == name)
        .map(|parameter| &parameter["schema"])
        .unwrap_or_else(|| panic!("{method} {path} has no parameter {name}"))
}

fn number(schema: &Value, keyword: &str) -> u64 {
    schema[keyword]
        .as_u64()
        .unwrap_or_else(|| panic!("no {keyword} in {schema}"))
}

fn assert_refused(reply: &(StatusCode, Value), status: StatusCode, what: &str) {
    assert_eq!(reply.0, status, "{what}: {}", reply.1);
}

fn assert_ok(reply: &(StatusCode, Value), what: &str) {
    assert!(reply.0.is_success(), "{what}: {} {}", reply.0, reply.1);
}

fn collect_refs<'a>(value: &'a Value, refs: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                refs.push(target);
            }
            map.values().for_each(|item| collect_refs(item, refs));
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, refs)),
        _ => {}
    }
}

#[test]
fn every_schema_reference_resolves() {
    let document = document();
    let mut refs = Vec::new();
    collect_refs(&document, &mut refs);
    assert!(refs.len() > 20, "{refs:?}");
    for target in refs {
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{target} is not a component schema"));
        component(&document, name);
    }
}

#[tokio::test]
async fn the_enums_list_exactly_the_values_the_routes_take() {
    let api = Api::new().await;
    let document = document();

    // Kinds: every kind is a `TaskKind`, and the server submits every one.
    let kinds = enum_values(&document, "TaskKind");
    let submittable = enum_values(&document, "SubmitKind");
    assert_eq!(kinds, ["question", "change", "maintain"]);
    for kind in &kinds {
        let parsed: warden_protocol::TaskKind = serde_json::from_value(json!(kind)).unwrap();
        let reply = api.submit(json!({"kind": kind})).await;
        if submittable.contains(kind) {
            assert_eq!(reply.0, StatusCode::ACCEPTED, "{kind}: {}", reply.1);
            assert_eq!(reply.1["kind"], json!(kind));
            assert!(warden_service::worker::runnable(parsed), "{kind}");
        } else {
            assert_refused(&reply, StatusCode::UNPROCESSABLE_ENTITY, kind);
            assert_eq!(reply.1["error"]["code"], "unsupported_kind");
        }
    }
    assert_eq!(submittable, ["question", "change", "maintain"]);
    let reply = api.submit(json!({"kind": "Question"})).await;
    assert_refused(&reply, StatusCode::UNPROCESSABLE_ENTITY, "Question");
    assert_eq!(reply.1["error"]["code"], "invalid_request");

    // Statuses: the protocol's, each a filter of the task list.
    let statuses = enum_values(&document, "TaskStatus");
    let names: Vec<String> = warden_store::state::ALL_STATUSES
        .into_iter()
        .map(|status| warden_store::state::status_name(status).to_string())
        .collect();
    assert_eq!(statuses, names);
    for status in &statuses {
        assert_ok(
            &api.get(&format!("/v1/tasks?status={status}")).await,
            status,
        );
    }
    assert_refused(
        &api.get("/v1/tasks?status=paused").await,
        StatusCode::BAD_REQUEST,
        "paused",
    );

    // Roles: each creates a token and is what the token says it is.
    let roles = enum_values(&document, "Role");
    assert_eq!(roles, ["admin", "operator", "viewer"]);
    for role in &roles {
        let reply = api.post("/v1/tokens", json!({"role": role})).await;
        assert_eq!(reply.0, StatusCode::CREATED, "{role}: {}", reply.1);
        assert_eq!(reply.1["role"], json!(role));
    }
    let reply = api.post("/v1/tokens", json!({"role": "root"})).await;
    assert_refused(&reply, StatusCode::UNPROCESSABLE_ENTITY, "root");

    // Approval statuses, and the list's filter: those and `all`.
    let approval_statuses = enum_values(&document, "ApprovalStatus");
    let filters = enum_values(&document, "ApprovalStatusFilter");
    assert_eq!(filters[..filters.len() - 1], approval_statuses[..]);
    assert_eq!(filters.last().map(String::as_str), Some("all"));
    for status in &approval_statuses {
        assert!(
            warden_store::ApprovalStatus::parse(status).is_some(),
            "{status}"
        );
    }
    for filter in &filters {
        assert_ok(
            &api.get(&format!("/v1/approvals?status={filter}")).await,
            filter,
        );
    }
    assert_refused(
        &api.get("/v1/approvals?status=maybe").await,
        StatusCode::BAD_REQUEST,
        "maybe",
    );
}

#[tokio::test]
async fn each_declared_limit_is_where_the_route_starts_refusing() {
    let api = Api::new().await;
    let document = document();
    let submit = component(&document, "SubmitTask");
    let register = component(&document, "RegisterRepo");
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;

    // A change's check commands: how many, and how long each.
    let most = number(&submit["properties"]["checks"], "maxItems") as usize;
    let longest = number(component(&document, "CommandLine"), "maxLength") as usize;
    let checks = |count: usize, length: usize| json!({"kind": "change", "checks": vec!["x".repeat(length); count]});
    assert_ok(
        &api.submit(checks(most, longest)).await,
        "checks at the limits",
    );
    assert_refused(
        &api.submit(checks(most + 1, 1)).await,
        unprocessable,
        "checks + 1",
    );
    assert_refused(
        &api.submit(checks(1, longest + 1)).await,
        unprocessable,
        "check + 1 byte",
    );

    // A task's repositories: the limit is refused for naming unknown ones, one more for the count.
    let most = number(&submit["properties"]["repos"], "maxItems") as usize;
    let repos = |count: usize| {
        let mut names = vec!["app".to_string()];
        names.extend((1..count).map(|n| format!("r{n}")));
        json!({"repo": null, "repos": names})
    };
    let reply = api.submit(repos(most)).await;
    assert_eq!(
        reply.1["error"]["code"], "unknown_repository",
        "{}",
        reply.1
    );
    let reply = api.submit(repos(most + 1)).await;
    assert_refused(&reply, unprocessable, "repos + 1");
    assert_eq!(reply.1["error"]["code"], "invalid_request", "{}", reply.1);

    // A repository's name, check and prepare commands.
    let longest = number(component(&document, "RepoName"), "maxLength") as usize;
    assert_ok(
        &api.register(json!({"name": "n".repeat(longest)})).await,
        "name",
    );
    let reply = api.register(json!({"name": "m".repeat(longest + 1)})).await;
    assert_refused(&reply, unprocessable, "name + 1");
    for field in ["checks", "prepare"] {
        let most = number(&register["properties"][field], "maxItems") as usize;
        let commands = |count: usize| vec!["make"; count];
        let reply = api
            .register(json!({"name": format!("{field}-ok"), field: commands(most)}))
            .await;
        assert_ok(&reply, field);
        let reply = api
            .register(json!({"name": format!("{field}-over"), field: commands(most + 1)}))
            .await;
        assert_refused(&reply, unprocessable, field);
    }
    let most = number(&register["properties"]["mounts"], "maxItems") as usize;
    let reply = api
        .register(json!({"name": "mounts", "mounts": vec!["/opt/x"; most + 1]}))
        .await;
    assert_refused(&reply, unprocessable, "mounts + 1");
    assert!(reply.1["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&format!("at most {most}")));

    // A token's name.
    let name = &component(&document, "CreateToken")["properties"]["name"];
    let longest = number(name, "maxLength") as usize;
    let token = |length: usize| json!({"role": "viewer", "name": "t".repeat(length)});
    assert_ok(&api.post("/v1/tokens", token(longest)).await, "token name");
    assert_refused(
        &api.post("/v1/tokens", token(longest + 1)).await,
        unprocessable,
        "token name + 1",
    );
    assert_refused(
        &api.post("/v1/tokens", token(0)).await,
        unprocessable,
        "empty token name",
    );

    // Query parameters: page sizes, run numbers, event cursors.
    let task = api.submit(json!({})).await.1["id"]
        .as_str()
        .unwrap()
        .to_string();
    let journal = format!("/v1/tasks/{task}/journal");
    let events = format!("/v1/tasks/{task}/events");
    for (path, uri, name) in [
        ("/v1/tasks", "/v1/tasks".to_string(), "limit"),
        ("/v1/approvals", "/v1/approvals".to_string(), "limit"),
        ("/v1/tasks/{id}/journal", journal.clone(), "limit"),
        ("/v1/tasks/{id}/journal", journal.clone(), "run"),
        ("/v1/tasks/{id}/events", events.clone(), "after"),
    ] {
        let schema = parameter(&document, path, "get", name);
        let (least, most) = (number(schema, "minimum"), number(schema, "maximum"));
        for (value, accepted) in [
            (Some(least), true),
            (least.checked_sub(1), false),
            (Some(most), true),
            (most.checked_add(1), false),
        ] {
            let Some(value) = value else { continue };
            let reply = api.get(&format!("{uri}?{name}={value}")).await;
            if accepted {
                assert_ok(&reply, &format!("{uri}?{name}={value}"));
            } else {
                assert_refused(
                    &reply,
                    StatusCode::BAD_REQUEST,
                    &format!("{uri}?{name}={value}"),
                );
            }
        }
    }
}

/// Cases where a format's pattern and the server's check must agree: `(text, matches)`, where
/// `matches` is what the pattern answers. Lengths the server counts in bytes are kept ASCII here:
/// a pattern counts characters, so it lets through some longer texts the server refuses (as its
/// description says), never the other way round.
#[tokio::test]
async fn the_string_formats_agree_with_the_checks() {
    let api = Api::new().await;
    let long_name = "a".repeat(100);
    let too_long_name = format!("{long_name}a");
    for (name, matches) in [
        ("a", true),
        ("0", true),
        ("_a", true),
        ("a.b-c_d", true),
        (long_name.as_str(), true),
        (too_long_name.as_str(), false),
        ("", false),
        (".a", false),
        ("-a", false),
        ("a b", false),
        ("a@b", false),
        ("a/b", false),
        ("\u{e9}", false),
    ] {
        assert_eq!(valid_repo_name(name), matches, "repository name {name:?}");
    }
    let long_rev = "r".repeat(200);
    let too_long_rev = format!("{long_rev}r");
    for (rev, matches) in [
        ("main", true),
        ("v1.0", true),
        ("a@b", true),
        ("x-", true),
        ("\u{e9}t\u{e9}", true),
        (long_rev.as_str(), true),
        (too_long_rev.as_str(), false),
        ("", false),
        ("-x", false),
        ("a b", false),
        ("a\tb", false),
        ("a\u{7f}", false),
        ("a\u{85}", false),
        ("a\u{9f}", false),
    ] {
        assert_eq!(valid_rev(rev), matches, "revision {rev:?}");
    }
    // `NonBlankText` (a prompt) and `CommandLine` (a check): not only whitespace as Rust's
    // `char::is_whitespace` sees it, and no NUL.
    for (text, matches) in [
        ("x", true),
        (" x ", true),
        ("\u{feff}", true),
        ("\u{200b}", true),
        ("", false),
        (" \t\n\r\u{b}\u{c}", false),
        ("\u{85}", false),
        (
            "\u{a0}\u{1680}\u{2000}\u{200a}\u{2028}\u{2029}\u{202f}\u{205f}\u{3000}",
            false,
        ),
        ("x\0", false),
    ] {
        let prompt = api.submit(json!({"prompt": text})).await;
        assert_eq!(
            prompt.0 == StatusCode::ACCEPTED,
            matches,
            "prompt {text:?}: {}",
            prompt.1
        );
        let check = api
            .submit(json!({"kind": "change", "checks": [text]}))
            .await;
        assert_eq!(
            check.0 == StatusCode::ACCEPTED,
            matches,
            "check {text:?}: {}",
            check.1
        );
    }
}
