//! The shapes the API answers with that are its own (errors, health, a stream's messages; the
//! task, approval, repository, token and session objects are `warden_protocol::views`, which
//! handlers serialise as they are and whose schemas their `openapi` feature derives); the
//! schemathesis run in CI checks every response against the document.
//!
//! Also the value sets and string formats requests share ([`SubmitKindName`], the `RepoRef` and
//! `CommandLine` formats, …): what the server's own checks accept, said in the document so that
//! clients and generated requests can get it right the first time. They describe, never
//! validate: every check stays in the handler or in [`warden_service::tasks`], and a format here
//! declares only what those checks refuse (a value outside it is always refused; some inside
//! it are refused too, e.g. for lengths counted in bytes, as the descriptions say).

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::RefOr;
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

/// `{"error":{"code","message"}}`: every error.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable code, e.g. `not_found`, `invalid_request`, `rate_limited`.
    pub code: String,
    pub message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// One message of an event stream (`text/event-stream`) as an SSE client reads it; `: keep-alive`
/// comments are not messages. A stream's schema describes one message, as OpenAPI 3.2's
/// `itemSchema` does (3.1 has no word for it; schemathesis reads `schema` that way).
#[derive(Debug, Serialize, ToSchema)]
pub struct StreamMessage {
    /// The event's sequence number: `task_seq` on a task's stream, `seq` on `/v1/events`.
    #[schema(pattern = "^[0-9]+$")]
    pub id: String,
    /// The event's type: `task_started`, `model_requested`, `task_completed`, …
    pub event: String,
    /// `{"seq", "task_seq", "task", "at", "event"}`: the event itself under `event`.
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// The kinds of task this server runs (every `TaskKind`); any other text is 422
/// `invalid_request`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = SubmitKind)]
pub enum SubmitKindName {
    Question,
    Change,
    Maintain,
}

/// The `status` filter of `GET /v1/approvals`: one status, or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = ApprovalStatusFilter)]
pub enum ApprovalStatusFilterName {
    Pending,
    Approved,
    Rejected,
    Consumed,
    All,
}

// --- string formats of requests ---
//
// Regular expressions (ECMA-262, as JSON Schema reads them) for the checks of `tasks::submit`
// (`valid_repo_name`, `valid_rev`, the check commands) and of the handlers, built from shared
// pieces so that a task's `name@rev` says what a repository name and a revision say.
// `tests/suite/openapi.rs` holds them to the checks.

/// `valid_repo_name`: 1-100 ASCII letters, digits, `.`, `_`, `-`, not starting with `.` or `-`.
macro_rules! repo_name_re {
    () => {
        "[A-Za-z0-9_][A-Za-z0-9._-]{0,99}"
    };
}
/// `valid_rev`: 1-200 bytes, no control character (Unicode `Cc`) or space, not starting with
/// `-` (at most 200 characters here: a longer text has more than 200 bytes).
macro_rules! rev_re {
    () => {
        r"[^\u0000-\u0020\u007f-\u009f-][^\u0000-\u0020\u007f-\u009f]{0,199}"
    };
}
/// Text that is not only whitespace (Rust's `char::is_whitespace`, what `str::trim` drops) and
/// holds no NUL.
macro_rules! non_blank_re {
    () => {
        concat!(
            r"^[^\u0000]*",
            r"[^\u0000\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
            r"[^\u0000]*$"
        )
    };
}

const REPO_NAME_PATTERN: &str = concat!("^", repo_name_re!(), "$");
const REPO_REF_PATTERN: &str = concat!("^", repo_name_re!(), "(@", rev_re!(), ")?$");
const REVISION_PATTERN: &str = concat!("^", rev_re!(), "$");
const NON_BLANK_PATTERN: &str = non_blank_re!();
/// The check commands of a repository or a change task: at most this many bytes each.
const MAX_COMMAND_BYTES: usize = 4096;

/// A named string schema for a format several fields share.
fn string_format(
    description: &str,
    pattern: &str,
    min_length: Option<usize>,
    max_length: Option<usize>,
) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .pattern(Some(pattern))
        .min_length(min_length)
        .max_length(max_length)
        .into()
}

/// A string format's schema type: `$name` in the document, described by `$schema`.
macro_rules! string_format_type {
    ($(#[$doc:meta])* $name:ident => $schema:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                $schema
            }
        }

        impl ToSchema for $name {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
        }
    };
}

string_format_type! {
    /// A repository name (`POST /v1/repos`).
    RepoName => string_format(
        "1-100 ASCII letters, digits, `.`, `_` or `-`, not starting with `.` or `-`.",
        REPO_NAME_PATTERN,
        Some(1),
        Some(100),
    )
}

string_format_type! {
    /// A task's repository: `name` or `name@rev`.
    RepoRef => string_format(
        "A registered repository's name, optionally `@` and a revision (a branch, tag or \
         commit; 1-200 bytes, no spaces or control characters, not starting with `-`). \
         `@worktree` is refused: a local work tree's snapshot works in-process only.",
        REPO_REF_PATTERN,
        Some(1),
        None,
    )
}

string_format_type! {
    /// A branch or revision.
    Revision => string_format(
        "1-200 bytes, no spaces or control characters, not starting with `-`; not `worktree`.",
        REVISION_PATTERN,
        Some(1),
        None,
    )
}

string_format_type! {
    /// A shell command (check or prepare commands).
    CommandLine => string_format(
        "A shell command: not only whitespace, no NUL character, at most 4096 bytes.",
        NON_BLANK_PATTERN,
        Some(1),
        Some(MAX_COMMAND_BYTES),
    )
}

string_format_type! {
    /// Stored text that must say something (a prompt, a message).
    NonBlankText => string_format(
        "Text that is not only whitespace (surrounding whitespace is dropped) and holds no NUL \
         character.",
        NON_BLANK_PATTERN,
        Some(1),
        None,
    )
}

/// The document's fixed parts: title, version, the bearer scheme.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Warden API",
        description = "Questions and changes over pinned repositories, run by sandboxed agents \
                       (the API overview is docs/api.md in the repository). Every route but /healthz and /openapi.json takes \
                       `Authorization: Bearer <token>`.",
    ),
    // Types only query parameters name (no body refers to them, so nothing else registers them).
    components(schemas(warden_protocol::TaskStatus, ApprovalStatusFilterName)),
    modifiers(&BearerScheme),
    security(("bearer" = [])),
)]
pub struct BaseDocument;

struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
