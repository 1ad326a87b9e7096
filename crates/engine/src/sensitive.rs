//! What counts as sensitive in a change: paths whose change needs a `publish_sensitive` approval
//! (environment files, private keys, CI configuration, credential stores), credential-looking
//! strings redacted from diffs shown to people, and the values of sensitive files hidden in
//! diffs.
//!
//! Path rules, decided once here so the worker and `warden run` agree:
//! - Matching is ASCII case-insensitive: `.ENV` or `ID_RSA` are flagged like their lowercase
//!   forms (a case-insensitive checkout reads them the same, and a false alarm costs one
//!   approval where a miss could publish a secret).
//! - File-name rules apply at any depth: `.env`, `.env.*` (examples and templates included —
//!   an agent can write real values into `src/.env.example` too), `.envrc`, private keys
//!   (`*.pem`, `*.key`, `id_rsa*`, `id_dsa*`, `id_ecdsa*`, `id_ed25519*`, `*.p12`, `*.pfx`,
//!   `*.jks`, `*.keystore`, `*.ppk`), credential stores (`.npmrc`, `.pypirc`, `.netrc`,
//!   `_netrc`, `.git-credentials`, `.htpasswd`, `credentials*`) and `Jenkinsfile` (a pipeline
//!   may name any script path).
//! - CI rules are anchored at the repository root, where the CI system reads them:
//!   `.github/workflows/**` and `.github/actions/**` (local actions the workflows run),
//!   `.gitlab-ci.yml`, `.circleci/**`, `.buildkite/**`, `.travis.yml`, `.drone.yml`,
//!   `azure-pipelines.yml`, `bitbucket-pipelines.yml`. A nested `a/b/.github/workflows/x.yml`
//!   is not run by GitHub and is not flagged.

use serde_json::Value;

/// Why a path is sensitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SensitiveKind {
    /// Environment files (`.env`, `.env.*`, `.envrc`).
    Environment,
    /// Private keys and key stores.
    PrivateKey,
    /// CI configuration: changing it changes what runs with the repository's CI secrets.
    Ci,
    /// Files that conventionally hold registry or host credentials.
    Credentials,
}

impl SensitiveKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SensitiveKind::Environment => "environment file",
            SensitiveKind::PrivateKey => "private key",
            SensitiveKind::Ci => "CI configuration",
            SensitiveKind::Credentials => "credentials",
        }
    }
}

/// Root-anchored directories whose every file is CI configuration.
const CI_DIRECTORIES: &[&str] = &[
    ".github/workflows/",
    ".github/actions/",
    ".circleci/",
    ".buildkite/",
];

/// Root-level CI files.
const CI_FILES: &[&str] = &[
    ".gitlab-ci.yml",
    ".travis.yml",
    ".drone.yml",
    "azure-pipelines.yml",
    "bitbucket-pipelines.yml",
];

const KEY_SUFFIXES: &[&str] = &[".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".ppk"];
const KEY_PREFIXES: &[&str] = &["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"];
const CREDENTIAL_FILES: &[&str] = &[
    ".npmrc",
    ".pypirc",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".htpasswd",
];

/// Why `path` (relative to the repository root, `/`-separated, as git prints it) is
/// sensitive, if it is.
pub fn sensitive_kind(path: &str) -> Option<SensitiveKind> {
    let lower = path.trim_start_matches("./").to_ascii_lowercase();
    if CI_DIRECTORIES.iter().any(|dir| lower.starts_with(dir)) || CI_FILES.contains(&&*lower) {
        return Some(SensitiveKind::Ci);
    }
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    if name == ".env" || name.starts_with(".env.") || name == ".envrc" {
        return Some(SensitiveKind::Environment);
    }
    if KEY_SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
        || KEY_PREFIXES.iter().any(|prefix| name.starts_with(prefix))
    {
        return Some(SensitiveKind::PrivateKey);
    }
    if CREDENTIAL_FILES.contains(&name) || name.starts_with("credentials") {
        return Some(SensitiveKind::Credentials);
    }
    if name == "jenkinsfile" {
        return Some(SensitiveKind::Ci);
    }
    None
}

/// The sensitive paths among `paths`, in their order.
pub fn sensitive_paths<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    paths
        .into_iter()
        .filter(|path| sensitive_kind(path).is_some())
        .map(str::to_string)
        .collect()
}

/// A notice naming the sensitive files of a proposal and why.
pub fn sensitive_notice(paths: &[String]) -> Option<String> {
    if paths.is_empty() {
        return None;
    }
    let listed: Vec<String> = paths
        .iter()
        .map(|path| {
            let kind = sensitive_kind(path).map_or("sensitive", SensitiveKind::as_str);
            format!("{} ({kind})", printable(path))
        })
        .collect();
    Some(format!(
        "sensitive files in the diff: {}; publishing needs a publish_sensitive approval",
        listed.join(", ")
    ))
}

/// A path with control characters escaped, for one-line notices.
fn printable(path: &str) -> String {
    path.chars().flat_map(char::escape_default).collect()
}

// --- credential-looking strings ---

const REDACTED: &str = "[redacted]";

/// A token shape: a literal prefix, then at least `min` characters of `body`.
struct TokenShape {
    prefix: &'static str,
    min: usize,
    /// Exactly `min` body characters (AWS key ids are fixed-length).
    exact: bool,
    body: fn(char) -> bool,
}

fn alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}
fn alnum_underscore(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}
fn alnum_dash_underscore(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}
fn upper_digit(c: char) -> bool {
    c.is_ascii_uppercase() || c.is_ascii_digit()
}

/// Well-known credential formats (GitHub, GitLab, AWS, Slack, OpenAI/Anthropic-style `sk-`,
/// Google API keys).
const TOKEN_SHAPES: &[TokenShape] = &[
    TokenShape {
        prefix: "ghp_",
        min: 20,
        exact: false,
        body: alnum,
    },
    TokenShape {
        prefix: "gho_",
        min: 20,
        exact: false,
        body: alnum,
    },
    TokenShape {
        prefix: "ghu_",
        min: 20,
        exact: false,
        body: alnum,
    },
    TokenShape {
        prefix: "ghs_",
        min: 20,
        exact: false,
        body: alnum,
    },
    TokenShape {
        prefix: "ghr_",
        min: 20,
        exact: false,
        body: alnum,
    },
    TokenShape {
        prefix: "github_pat_",
        min: 20,
        exact: false,
        body: alnum_underscore,
    },
    TokenShape {
        prefix: "glpat-",
        min: 20,
        exact: false,
        body: alnum_dash_underscore,
    },
    TokenShape {
        prefix: "AKIA",
        min: 16,
        exact: true,
        body: upper_digit,
    },
    TokenShape {
        prefix: "ASIA",
        min: 16,
        exact: true,
        body: upper_digit,
    },
    TokenShape {
        prefix: "xoxb-",
        min: 10,
        exact: false,
        body: alnum_dash_underscore,
    },
    TokenShape {
        prefix: "xoxp-",
        min: 10,
        exact: false,
        body: alnum_dash_underscore,
    },
    TokenShape {
        prefix: "xoxa-",
        min: 10,
        exact: false,
        body: alnum_dash_underscore,
    },
    TokenShape {
        prefix: "sk-",
        min: 20,
        exact: false,
        body: alnum_dash_underscore,
    },
    TokenShape {
        prefix: "AIza",
        min: 35,
        exact: false,
        body: alnum_dash_underscore,
    },
];

/// The length of a credential-looking token starting at `text[start..]`, if one does. The
/// character before `start` must not continue a word, so `task-sk-…` style ids inside longer
/// words still match only where a token really begins.
fn token_at(text: &str, start: usize) -> Option<usize> {
    let before = text[..start].chars().next_back();
    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let rest = &text[start..];
    for shape in TOKEN_SHAPES {
        let Some(body) = rest.strip_prefix(shape.prefix) else {
            continue;
        };
        let length = body.chars().take_while(|c| (shape.body)(*c)).count();
        let fits = if shape.exact {
            length == shape.min
        } else {
            length >= shape.min
        };
        if fits {
            // The body characters are ASCII, so chars are bytes.
            return Some(shape.prefix.len() + length);
        }
    }
    None
}

/// Replaces credential-looking tokens and the bodies of PEM private-key blocks with
/// `[redacted]`. Meant for diffs and logs shown to people; lines keep their first character
/// when it is a diff marker (`+`, `-`, space) so the diff still reads as one.
pub fn redact_credential_patterns(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_key = false;
    for line in text.split_inclusive('\n') {
        let (content, newline) = match line.strip_suffix('\n') {
            Some(content) => (content, "\n"),
            None => (line, ""),
        };
        if content.contains("-----BEGIN") && content.contains("PRIVATE KEY") {
            in_key = true;
            out.push_str(&redact_tokens(content));
        } else if in_key {
            if content.contains("-----END") {
                in_key = false;
                out.push_str(&redact_tokens(content));
            } else {
                let marker = content
                    .chars()
                    .next()
                    .filter(|c| matches!(c, '+' | '-' | ' '));
                if let Some(marker) = marker {
                    out.push(marker);
                }
                out.push_str(REDACTED);
            }
        } else {
            out.push_str(&redact_tokens(content));
        }
        out.push_str(newline);
    }
    out
}

fn redact_tokens(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut index = 0;
    while index < line.len() {
        if let Some(length) = token_at(line, index) {
            out.push_str(REDACTED);
            index += length;
            continue;
        }
        let Some(c) = line[index..].chars().next() else {
            break;
        };
        out.push(c);
        index += c.len_utf8();
    }
    out
}

/// In a unified diff, hides the values of sensitive files' lines: environment files keep the
/// names before `=` or `:` (a reviewer sees which settings changed, not their values; comments
/// stay), private keys and credential stores keep only the diff markers. CI configuration is
/// code to review and is left alone (credential-looking strings are redacted by
/// [`redact_credential_patterns`]).
///
/// A file's section is recognised from every path its headers name — `diff --git`, `---`,
/// `+++`, `rename from`/`to`, `copy from`/`to` — in git's C-quoted form too (`"a/d\303\251/.env"`
/// for non-ASCII names, `\"`, `\\` and control characters), and the strictest rule among them
/// applies (a deleted `.env` hides its `-` lines, a rename into `.env` its `+` lines). It fails
/// closed: a header this cannot parse hides every content line of its section.
pub fn redact_sensitive_file_values(diff: &str) -> String {
    let mut out = String::with_capacity(diff.len());
    let mut hide = Hide::Nothing;
    let mut in_hunk = false;
    let mut in_binary = false;
    for line in diff.split_inclusive('\n') {
        let (content, newline) = match line.strip_suffix('\n') {
            Some(content) => (content, "\n"),
            None => (line, ""),
        };
        if let Some(header) = content.strip_prefix("diff --git ") {
            in_hunk = false;
            in_binary = false;
            hide = match git_header_paths(header) {
                Some(paths) => paths.iter().map(|path| Hide::for_path(path)).max(),
                None => Some(Hide::All),
            }
            .unwrap_or(Hide::All);
        } else if in_binary {
            // `GIT binary patch` (`--binary`): base85 lines, all content.
            let keep = content.is_empty()
                || content.starts_with("literal ")
                || content.starts_with("delta ");
            if hide != Hide::Nothing && !keep {
                out.push_str(REDACTED);
                out.push_str(newline);
                continue;
            }
        } else if !in_hunk {
            if content.starts_with("@@") {
                in_hunk = true;
            } else if content == "GIT binary patch" {
                in_binary = true;
            } else if let Some(named) = extended_header_path(content) {
                hide = hide.max(named.map_or(Hide::All, |path| Hide::for_path(&path)));
            }
        } else if content.starts_with("@@") {
            // The next hunk of the same file.
        } else if hide != Hide::Nothing {
            out.push_str(&redact_value_line(content, hide));
            out.push_str(newline);
            continue;
        }
        out.push_str(content);
        out.push_str(newline);
    }
    out
}

/// How much of a file's content lines a diff shows, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Hide {
    /// Not sensitive, or CI configuration (code to review).
    Nothing,
    /// Environment files: names and comments stay, values go.
    Values,
    /// Keys, credential stores, and sections whose headers could not be read.
    All,
}

impl Hide {
    fn name(self) -> &'static str {
        match self {
            Hide::Nothing => "nothing",
            Hide::Values => "values",
            Hide::All => "all",
        }
    }

    fn from_name(name: &str) -> Option<Hide> {
        match name {
            "nothing" => Some(Hide::Nothing),
            "values" => Some(Hide::Values),
            "all" => Some(Hide::All),
            _ => None,
        }
    }

    fn for_path(path: &str) -> Hide {
        match sensitive_kind(path) {
            None | Some(SensitiveKind::Ci) => Hide::Nothing,
            Some(SensitiveKind::Environment) => Hide::Values,
            Some(SensitiveKind::PrivateKey | SensitiveKind::Credentials) => Hide::All,
        }
    }
}

/// The paths named by the rest of a `diff --git ` line (`a/<path> b/<path>`, each side maybe
/// C-quoted), without their `a/`/`b/` prefixes; `None` when it does not parse. Unquoted paths
/// may hold spaces, so `a/x b/y b/z` is ambiguous: every reading is returned.
fn git_header_paths(header: &str) -> Option<Vec<String>> {
    if header.starts_with('"') {
        let (old, rest) = unquote_c(header)?;
        let rest = rest.strip_prefix(' ')?;
        let new = if rest.starts_with('"') {
            let (new, rest) = unquote_c(rest)?;
            if !rest.is_empty() {
                return None;
            }
            new
        } else {
            rest.to_string()
        };
        return Some(vec![
            old.strip_prefix("a/")?.to_string(),
            new.strip_prefix("b/")?.to_string(),
        ]);
    }
    let mut paths = Vec::new();
    if header.ends_with('"') {
        // `a/<plain> "b/<quoted>"`: the quoted side is the one that parses to the end.
        for (at, _) in header.match_indices(" \"") {
            if let Some((new, "")) = unquote_c(&header[at + 1..]) {
                paths.push(header[..at].strip_prefix("a/")?.to_string());
                paths.push(new.strip_prefix("b/")?.to_string());
                return Some(paths);
            }
        }
        return None;
    }
    let old_new = header.strip_prefix("a/")?;
    for (at, _) in old_new.match_indices(" b/") {
        paths.push(old_new[..at].to_string());
        paths.push(old_new[at + 3..].to_string());
    }
    if paths.is_empty() {
        None
    } else {
        Some(paths)
    }
}

/// The path an extended header line before the first hunk names: `Some(Some(path))` for
/// `--- a/…`, `+++ b/…`, `rename from …`, `rename to …`, `copy from …`, `copy to …`
/// (`/dev/null` is no path), `Some(None)` when such a line's path does not parse, `None` for
/// other lines (modes, index, similarity, `Binary files … differ`).
fn extended_header_path(line: &str) -> Option<Option<String>> {
    const DEV_NULL: &str = "/dev/null";
    let (rest, prefix) = if let Some(rest) = line.strip_prefix("--- ") {
        (rest, Some("a/"))
    } else if let Some(rest) = line.strip_prefix("+++ ") {
        (rest, Some("b/"))
    } else {
        let rest = ["rename from ", "rename to ", "copy from ", "copy to "]
            .iter()
            .find_map(|header| line.strip_prefix(header))?;
        (rest, None)
    };
    // git ends `---`/`+++` names that hold a space with a tab.
    let rest = if prefix.is_some() {
        rest.strip_suffix('\t').unwrap_or(rest)
    } else {
        rest
    };
    if prefix.is_some() && rest == DEV_NULL {
        return Some(Some(String::new()));
    }
    let path = if rest.starts_with('"') {
        match unquote_c(rest) {
            Some((path, "")) => path,
            _ => return Some(None),
        }
    } else {
        rest.to_string()
    };
    Some(match prefix {
        Some(prefix) => path.strip_prefix(prefix).map(str::to_string),
        None => Some(path),
    })
}

/// Reads one C-quoted string as git writes paths (`"…"` with `\"`, `\\`, `\a\b\t\n\v\f\r`
/// and octal `\ooo` bytes) from the start of `text`: the bytes as UTF-8 (lossy only if git
/// quoted bytes that are not UTF-8) and the text after the closing quote. `None` when `text`
/// does not start with a well-formed quoted string.
fn unquote_c(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut bytes = Vec::with_capacity(body.len());
    let mut iter = body.char_indices();
    while let Some((at, c)) = iter.next() {
        match c {
            '"' => {
                let path = String::from_utf8_lossy(&bytes).into_owned();
                return Some((path, &body[at + 1..]));
            }
            '\\' => {
                let (_, escaped) = iter.next()?;
                let byte = match escaped {
                    '"' => b'"',
                    '\\' => b'\\',
                    'a' => 0x07,
                    'b' => 0x08,
                    't' => b'\t',
                    'n' => b'\n',
                    'v' => 0x0b,
                    'f' => 0x0c,
                    'r' => b'\r',
                    '0'..='3' => {
                        let mut value = escaped.to_digit(8)?;
                        for _ in 0..2 {
                            let (_, digit) = iter.next()?;
                            value = value * 8 + digit.to_digit(8)?;
                        }
                        u8::try_from(value).ok()?
                    }
                    _ => return None,
                };
                bytes.push(byte);
            }
            c => {
                let mut buffer = [0; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            }
        }
    }
    None
}

// --- journal records shown to people ---

/// Redacts a run's journal records for display (`GET /v1/tasks/{id}/journal`); the store keeps
/// them as written (registered secrets already redacted), because a resumed run replays the
/// recorded model decisions and must write what the model decided. In the view:
/// - every string has credential-looking tokens and PEM key bodies redacted, strings holding
///   JSON (tool-call `arguments`) included;
/// - an object naming a sensitive `path` (`write_file`'s `content`, `edit`'s `old`/`new`, in
///   the decision and in the provider's raw response) has its other strings' values hidden
///   like the diff hides them;
/// - the observation of a tool call on a sensitive path (`read_file .env`) has its output's
///   values hidden, and `search` hits (`<path>:<line>:<text>`) in sensitive files lose their
///   text.
///
/// Text a shell command printed (`cat .env`) carries no path and only gets the token patterns.
pub fn redact_journal_entries<'a>(entries: impl IntoIterator<Item = (&'a str, &'a mut Value)>) {
    let mut redaction = JournalRedaction::default();
    for (kind, payload) in entries {
        redaction.redact(kind, payload);
    }
}

/// [`redact_journal_entries`] a record at a time, for a run read a page at a time: the calls on
/// sensitive paths its model decisions made are remembered, so the observation of such a call
/// is hidden even when its decision was on an earlier page. A page that starts mid-run must
/// first [`JournalRedaction::learn`] every earlier record of the run.
#[derive(Debug, Default)]
pub struct JournalRedaction {
    sensitive_calls: std::collections::HashMap<String, Hide>,
}

impl JournalRedaction {
    /// Remembers the sensitive calls of a record (its `kind` and `payload`) if it is a model
    /// decision.
    pub fn learn(&mut self, kind: &str, payload: &Value) {
        if kind != "model_decision" {
            return;
        }
        let calls = payload.get("tool_calls").and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            let (Some(id), Some(arguments)) = (
                call.get("id").and_then(Value::as_str),
                call.get("arguments").and_then(Value::as_str),
            ) else {
                continue;
            };
            let hide = serde_json::from_str::<Value>(arguments)
                .ok()
                .and_then(|a| a.get("path").and_then(Value::as_str).map(Hide::for_path))
                .unwrap_or(Hide::Nothing);
            if hide != Hide::Nothing {
                self.sensitive_calls.insert(id.to_string(), hide);
            }
        }
    }

    /// Redacts the next record of the run (its `kind` and `payload`) for display.
    pub fn redact(&mut self, kind: &str, payload: &mut Value) {
        let display = self.display_of(kind, payload);
        redact_recorded(kind, payload, display.as_deref());
    }

    /// What showing the next record of the run (learnt first) needs from the records before
    /// it, to record with it when it is appended (`JournalEntry::display`): for a tool
    /// observation, how much of its output to hide; `None` for other records, which need
    /// nothing. Fed every record of a run in order, so a reader never has to.
    pub fn display_of(&mut self, kind: &str, payload: &Value) -> Option<String> {
        self.learn(kind, payload);
        if kind != "tool_observation" {
            return None;
        }
        let hide = payload
            .get("call_id")
            .and_then(Value::as_str)
            .and_then(|id| self.sensitive_calls.get(id))
            .copied()
            .unwrap_or(Hide::Nothing);
        Some(hide.name().to_string())
    }
}

/// Redacts one record for display given what was recorded with it ([`JournalRedaction::display_of`]):
/// no earlier record of the run is needed. An unknown recorded value hides everything.
pub fn redact_recorded(kind: &str, payload: &mut Value, display: Option<&str>) {
    let hide = match (kind, display) {
        ("tool_observation", Some(name)) => Hide::from_name(name).unwrap_or(Hide::All),
        _ => Hide::Nothing,
    };
    let taken = std::mem::take(payload);
    *payload = redact_json(taken, hide);
}

impl JournalRedaction {
    /// Whether `display` (recorded with a `kind` record) says all a reader needs, so the run's
    /// earlier records need not be read.
    pub fn recorded(kind: &str, display: Option<&str>) -> bool {
        kind != "tool_observation" || display.is_some()
    }
}

/// [`redact_journal_entries`] over one value; `hide` applies to every string in it.
fn redact_json(value: Value, hide: Hide) -> Value {
    match value {
        Value::String(text) => Value::String(redact_json_string(&text, hide)),
        Value::Array(items) => items.into_iter().map(|v| redact_json(v, hide)).collect(),
        Value::Object(map) => {
            let named = map
                .get("path")
                .and_then(Value::as_str)
                .map_or(Hide::Nothing, Hide::for_path);
            let others = hide.max(named);
            map.into_iter()
                .map(|(key, value)| {
                    let level = if key == "path" { hide } else { others };
                    (key, redact_json(value, level))
                })
                .collect()
        }
        other => other,
    }
}

fn redact_json_string(text: &str, hide: Hide) -> String {
    if text.trim_start().starts_with(['{', '[']) {
        if let Ok(inner @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str(text) {
            // Re-serialised only when something was hidden: a JSON file's content keeps its
            // layout.
            let redacted = redact_json(inner.clone(), hide);
            return if redacted == inner {
                text.to_string()
            } else {
                redacted.to_string()
            };
        }
    }
    redact_credential_patterns(text)
        .split_inclusive('\n')
        .map(|line| {
            let (content, newline) = match line.strip_suffix('\n') {
                Some(content) => (content, "\n"),
                None => (line, ""),
            };
            let (end, level) = match search_hit(content) {
                Some((end, level)) => (end, hide.max(level)),
                None => (numbered_line(content).unwrap_or(0), hide),
            };
            let (prefix, rest) = content.split_at(end);
            if level == Hide::Nothing {
                return line.to_string();
            }
            // The diff's rule for one line, without a diff marker.
            let hidden = redact_value_line(&format!(" {rest}"), level);
            format!("{prefix}{}{newline}", &hidden[1..])
        })
        .collect()
}

/// Where the text of a `read_file` output line (`{n:>6}\t{text}`) starts.
fn numbered_line(line: &str) -> Option<usize> {
    let number = line.trim_start_matches(' ');
    let digits = number.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0 && number[digits..].starts_with('\t'))
        .then(|| line.len() - number.len() + digits + 1)
}

/// Where the text of a `search` hit line (`<path>:<line>:<text>`) starts, and what its path
/// hides.
fn search_hit(line: &str) -> Option<(usize, Hide)> {
    for (at, _) in line.match_indices(':') {
        let rest = &line[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with(':') {
            return Some((at + digits + 2, Hide::for_path(&line[..at])));
        }
    }
    None
}

/// One content line of a sensitive file, its value hidden (see [`redact_sensitive_file_values`]).
fn redact_value_line(line: &str, hide: Hide) -> String {
    let mut chars = line.chars();
    let Some(marker) = chars.next().filter(|c| matches!(c, '+' | '-' | ' ')) else {
        // `\ No newline at end of file`, or a blank line; anything else git does not write in a
        // hunk, so it is hidden.
        return if line.is_empty() || line.starts_with('\\') || hide == Hide::Nothing {
            line.to_string()
        } else {
            REDACTED.to_string()
        };
    };
    let content = chars.as_str();
    let trimmed = content.trim_start();
    if trimmed.is_empty() {
        return line.to_string();
    }
    match hide {
        Hide::Nothing => line.to_string(),
        Hide::Values if trimmed.starts_with('#') => line.to_string(),
        Hide::Values => match content.find(['=', ':']) {
            Some(at) if content[at + 1..].trim().is_empty() => line.to_string(),
            Some(at) => format!("{marker}{}{REDACTED}", &content[..=at]),
            None => format!("{marker}{REDACTED}"),
        },
        Hide::All => format!("{marker}{REDACTED}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(path: &str, expect: Option<SensitiveKind>) {
        assert_eq!(sensitive_kind(path), expect, "{path}");
    }

    #[test]
    fn environment_files_at_any_depth_examples_included() {
        use SensitiveKind::Environment;
        for path in [
            ".env",
            ".env.local",
            ".env.production",
            "src/.env.example",
            "deploy/.env",
            ".envrc",
            ".ENV",
            "Config/.Env.Local",
        ] {
            check(path, Some(Environment));
        }
        for path in [
            "env",
            ".environment",
            "src/env.rs",
            ".envfile",
            "docs/dotenv.md",
            "x.env.bak/readme",
        ] {
            check(path, None);
        }
    }

    #[test]
    fn private_keys_and_credential_stores() {
        use SensitiveKind::{Credentials, PrivateKey};
        for path in [
            "server.pem",
            "certs/tls.key",
            "id_rsa",
            "home/.ssh/id_rsa.pub",
            "id_ed25519",
            "keys/ID_ECDSA",
            "store.p12",
            "android/release.keystore",
            "Cert.PFX",
        ] {
            check(path, Some(PrivateKey));
        }
        for path in [
            ".npmrc",
            "frontend/.npmrc",
            ".pypirc",
            ".netrc",
            ".aws/credentials",
            "credentials.json",
            "config/Credentials.yml",
            ".git-credentials",
        ] {
            check(path, Some(Credentials));
        }
        for path in [
            "src/keys.rs",
            "monkey",
            "docs/key.md",
            "pem.txt",
            "my_credentials.txt",
            "id_rs",
        ] {
            check(path, None);
        }
    }

    #[test]
    fn ci_configuration_only_where_ci_reads_it() {
        use SensitiveKind::Ci;
        for path in [
            ".github/workflows/ci.yml",
            ".github/workflows/sub/dir/x.yaml",
            ".github/actions/setup/action.yml",
            ".GitHub/Workflows/CI.yml",
            ".gitlab-ci.yml",
            ".circleci/config.yml",
            ".buildkite/pipeline.yml",
            "Jenkinsfile",
            "ci/Jenkinsfile",
            ".travis.yml",
            "azure-pipelines.yml",
        ] {
            check(path, Some(Ci));
        }
        for path in [
            "a/b/.github/workflows/x.yml",
            "vendor/.circleci/config.yml",
            "sub/.gitlab-ci.yml",
            ".github/ISSUE_TEMPLATE/bug.md",
            ".github/dependabot.yml",
            ".github/workflows",
            "docs/.github-workflows.md",
            "Jenkinsfile.md",
        ] {
            check(path, None);
        }
    }

    #[test]
    fn sensitive_paths_keep_order_and_the_notice_names_each() {
        let paths = [
            "src/lib.rs",
            ".env",
            "README.md",
            ".github/workflows/ci.yml",
        ];
        let found = sensitive_paths(paths);
        assert_eq!(found, [".env", ".github/workflows/ci.yml"]);
        let notice = sensitive_notice(&found).unwrap();
        assert!(notice.contains(".env (environment file)"), "{notice}");
        assert!(
            notice.contains(".github/workflows/ci.yml (CI configuration)"),
            "{notice}"
        );
        assert!(notice.contains("publish_sensitive"), "{notice}");
        assert_eq!(sensitive_notice(&[]), None);
        assert_eq!(
            sensitive_notice(&["a\nb.pem".into()]).unwrap(),
            "sensitive files in the diff: a\\nb.pem (private key); publishing needs a \
             publish_sensitive approval"
        );
    }

    #[test]
    fn credential_looking_tokens_are_redacted() {
        for (input, expect) in [
            (
                "+GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "+GITHUB_TOKEN=[redacted]",
            ),
            (
                "+aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n",
                "+aws_access_key_id = [redacted]\n",
            ),
            (
                "-key: \"sk-proj-aaaaaaaaaaaaaaaaaaaaaaaa\" and glpat-xxxxxxxxxxxxxxxxxxxx",
                "-key: \"[redacted]\" and [redacted]",
            ),
            ("+SLACK=xoxb-1234567890-abcdef", "+SLACK=[redacted]"),
            (
                "+t = github_pat_11ABCDEFG0123456789_abcdefghij",
                "+t = [redacted]",
            ),
            // Too short, inside a word, or the wrong length: ordinary text.
            (
                "+ghp_short and task-sk-notakey",
                "+ghp_short and task-sk-notakey",
            ),
            ("+MASKIAIOSFODNN7EXAMPLE", "+MASKIAIOSFODNN7EXAMPLE"),
            ("+AKIAIOSFODNN7EXAMPLEX", "+AKIAIOSFODNN7EXAMPLEX"),
            ("+the risk-of-it", "+the risk-of-it"),
            ("+ünïcode ghp_", "+ünïcode ghp_"),
        ] {
            assert_eq!(redact_credential_patterns(input), expect, "{input}");
        }
    }

    #[test]
    fn sensitive_files_values_are_hidden_in_a_diff() {
        let diff = "\
diff --git a/.env b/.env
new file mode 100644
index 0000000..1111111
--- /dev/null
+++ b/.env
@@ -0,0 +1,4 @@
+# database settings
+DB_PASSWORD=hunter2
+EMPTY=
+bare-secret-line
diff --git a/src/lib.rs b/src/lib.rs
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1 +1 @@
-let password = 1;
+let password = 2;
diff --git a/.npmrc b/.npmrc
--- a/.npmrc
+++ b/.npmrc
@@ -1,2 +1,2 @@
 registry=https://registry.npmjs.org/
-//registry.npmjs.org/:_authToken=old
+//registry.npmjs.org/:_authToken=new
@@ -9 +9 @@
--- a dashed line
+++ b/looks like a header
diff --git a/.github/workflows/ci.yml b/.github/workflows/ci.yml
--- a/.github/workflows/ci.yml
+++ b/.github/workflows/ci.yml
@@ -1 +1 @@
-on: push
+on: pull_request
";
        let redacted = redact_sensitive_file_values(diff);
        for kept in [
            "+# database settings\n",
            "+DB_PASSWORD=[redacted]\n",
            "+EMPTY=\n",
            "+[redacted]\n",
            "+let password = 2;\n",
            " [redacted]\n",
            "-[redacted]\n",
            "+on: pull_request\n",
            "+++ b/.npmrc\n",
            "--- a/.npmrc\n",
        ] {
            assert!(redacted.contains(kept), "{kept:?} missing:\n{redacted}");
        }
        for hidden in [
            "hunter2",
            "bare-secret-line",
            "_authToken=new",
            "a dashed line",
            "looks like",
        ] {
            assert!(!redacted.contains(hidden), "{hidden} shown:\n{redacted}");
        }
        assert_eq!(redacted.lines().count(), diff.lines().count());
    }

    /// One added file's section with `header`, `minus` and `plus` as git would print them.
    fn added(header: &str, minus: &str, plus: &str) -> String {
        format!(
            "diff --git {header}\nnew file mode 100644\nindex 0000000..1111111\n{minus}\n{plus}\n\
             @@ -0,0 +1,2 @@\n+# note\n+DB_PASSWORD=hunter2\n"
        )
    }

    #[test]
    fn quoted_paths_are_read_like_git_writes_them() {
        for (header, plus) in [
            // `dé/.env` and `.env.é` under the default core.quotePath.
            (
                r#""a/d\303\251/.env" "b/d\303\251/.env""#,
                r#"+++ "b/d\303\251/.env""#,
            ),
            (
                r#""a/.env.\303\251" "b/.env.\303\251""#,
                r#"+++ "b/.env.\303\251""#,
            ),
            // A quote, a backslash and a tab in a directory name.
            (
                r#""a/x\"y\\z\t/.env" "b/x\"y\\z\t/.env""#,
                r#"+++ "b/x\"y\\z\t/.env""#,
            ),
            // A space: unquoted, the `+++` line ends with a tab.
            ("a/my dir/.env b/my dir/.env", "+++ b/my dir/.env\t"),
        ] {
            let diff = added(header, "--- /dev/null", plus);
            let redacted = redact_sensitive_file_values(&diff);
            assert!(!redacted.contains("hunter2"), "{header}:\n{redacted}");
            assert!(
                redacted.contains("+DB_PASSWORD=[redacted]\n"),
                "{header}:\n{redacted}"
            );
            assert!(redacted.contains("+# note\n"), "{header}:\n{redacted}");
            assert_eq!(redacted.lines().count(), diff.lines().count());
        }
        assert_eq!(
            unquote_c(r#""a/d\303\251/\"q\"\\\t\n" rest"#),
            Some(("a/dé/\"q\"\\\t\n".to_string(), " rest"))
        );
        for bad in [
            r#""a/unterminated"#,
            r#""a/\q""#,
            r#""a/\40""#,
            r#""a/\400""#,
            "a/",
        ] {
            assert_eq!(unquote_c(bad), None, "{bad}");
        }
    }

    #[test]
    fn unreadable_headers_hide_their_section() {
        for (header, minus, plus) in [
            // Not `a/`/`b/` paths.
            ("x/.env y/.env", "--- /dev/null", "+++ y/.env"),
            // A broken quote in the header.
            (r#""a/\z.txt" "b/\z.txt""#, "--- /dev/null", "+++ b/z.txt"),
            // Fine header, broken `+++` line.
            ("a/notes.txt b/notes.txt", "--- /dev/null", r#"+++ "b/\9""#),
            (
                "a/notes.txt b/notes.txt",
                "--- /dev/null",
                "+++ c/notes.txt",
            ),
        ] {
            let diff = added(header, minus, plus);
            let redacted = redact_sensitive_file_values(&diff);
            assert!(!redacted.contains("hunter2"), "{header}:\n{redacted}");
            assert!(
                redacted.contains("+[redacted]\n+[redacted]\n"),
                "{header}:\n{redacted}"
            );
        }
    }

    #[test]
    fn deletions_renames_and_copies_count_every_named_path() {
        let deleted = "\
diff --git a/.env b/.env
deleted file mode 100644
index 1111111..0000000
--- a/.env
+++ /dev/null
@@ -1 +0,0 @@
-DB_PASSWORD=hunter2
";
        let redacted = redact_sensitive_file_values(deleted);
        assert!(redacted.contains("-DB_PASSWORD=[redacted]\n"), "{redacted}");
        // A rename into `.env` (with rename detection on) and a copy out of a key.
        for (header, from, to) in [
            (
                "a/notes.txt b/.env",
                "rename from notes.txt",
                "rename to .env",
            ),
            (
                "a/id_rsa b/copy.txt",
                "copy from id_rsa",
                "copy to copy.txt",
            ),
            (
                r#""a/n\303\266tes" "b/.env""#,
                r#"rename from "n\303\266tes""#,
                "rename to .env",
            ),
        ] {
            let diff = format!(
                "diff --git {header}\nsimilarity index 90%\n{from}\n{to}\n\
                 @@ -1 +1 @@\n-DB_PASSWORD=old\n+DB_PASSWORD=hunter2\n"
            );
            let redacted = redact_sensitive_file_values(&diff);
            assert!(!redacted.contains("hunter2"), "{header}:\n{redacted}");
            assert!(!redacted.contains("old"), "{header}:\n{redacted}");
        }
        // A renamed header with spaces, unreadable as one split, checks every reading.
        let diff = "diff --git a/a b/.env b/a b/.env\n@@ -1 +1 @@\n+DB_PASSWORD=hunter2\n";
        assert!(!redact_sensitive_file_values(diff).contains("hunter2"));
        // A binary patch of a key loses its base85 lines.
        let binary = "\
diff --git a/server.key b/server.key
new file mode 100644
index 0000000..1111111
GIT binary patch
literal 12
TcmZQzU|?ooU|?WiWMBXQ0RaFP

literal 0
HcmV?d00001

";
        let redacted = redact_sensitive_file_values(binary);
        assert!(!redacted.contains("TcmZQz"), "{redacted}");
        assert!(redacted.contains("literal 12\n[redacted]\n"), "{redacted}");
    }

    #[test]
    fn ordinary_diffs_are_unchanged() {
        let diff = "\
diff --git a/src/lib.rs b/src/lib.rs
index 1111111..2222222 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,2 +1,2 @@
 fn main() {
-    let password = 1;
+    let password = 2;
\\ No newline at end of file
diff --git \"a/d\\303\\251j\\303\\240.txt\" \"b/d\\303\\251j\\303\\240.txt\"
deleted file mode 100644
--- \"a/d\\303\\251j\\303\\240.txt\"
+++ /dev/null
@@ -1 +0,0 @@
-token: value
diff --git a/my file.txt b/my file.txt
--- a/my file.txt\t
+++ b/my file.txt\t
@@ -1 +1 @@
-KEY=1
+KEY=2
Binary files a/logo.png and b/logo.png differ
";
        assert_eq!(redact_sensitive_file_values(diff), diff);
    }

    struct Record {
        kind: String,
        payload: Value,
    }

    fn record(_seq: u64, kind: &str, payload: Value) -> Record {
        Record {
            kind: kind.into(),
            payload,
        }
    }

    #[test]
    fn journal_views_hide_sensitive_file_values_and_tokens() {
        use serde_json::json;
        let write = json!({"path": ".env", "content": "# db\nDB_PASSWORD=hunter2\n"}).to_string();
        let read = json!({"path": "deploy/.env"}).to_string();
        let plain = "{ \"path\": \"package.json\",\n  \"content\": \"{\\n  \\\"name\\\": 1\\n}\" }";
        let mut entries = [
            record(
                0,
                "model_decision",
                json!({
                    "text": null,
                    "tool_calls": [
                        {"id": "c1", "name": "write_file", "arguments": write},
                        {"id": "c2", "name": "read_file", "arguments": read},
                        {"id": "c3", "name": "write_file", "arguments": plain},
                    ],
                    // The provider's raw response repeats the arguments.
                    "raw": {"choices": [{"message": {"tool_calls": [
                        {"function": {"name": "write_file", "arguments": write}}
                    ]}}]},
                }),
            ),
            record(
                1,
                "tool_observation",
                json!({"call_id": "c2", "tool": "read_file",
                       "output": {"ok": "deploy/.env (lines 1-2 of 2)\n     1\tAPI=s3cret-value\n     2\t# note\n"}}),
            ),
            record(
                2,
                "tool_observation",
                json!({"call_id": "c9", "tool": "search",
                       "output": {"ok": "src/lib.rs:3:let password = 1;\nconfig/.env:7:DB_PASSWORD=hunter3\nsrc/a.rs:1:token ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"}}),
            ),
            record(
                3,
                "tool_observation",
                json!({"call_id": "c3", "tool": "write_file", "output": {"ok": "wrote src/lib.rs"}}),
            ),
        ];
        redact_journal_entries(
            entries
                .iter_mut()
                .map(|e| (e.kind.as_str(), &mut e.payload)),
        );
        let shown =
            serde_json::to_string(&entries.iter().map(|e| &e.payload).collect::<Vec<_>>()).unwrap();
        for secret in ["hunter2", "hunter3", "s3cret-value", "ghp_abcdefghij"] {
            assert!(!shown.contains(secret), "{secret} shown: {shown}");
        }
        // Names, comments, other files and the structure stay.
        let arguments: Value = serde_json::from_str(
            entries[0].payload["tool_calls"][0]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            arguments,
            json!({"path": ".env", "content": "# db\nDB_PASSWORD=[redacted]\n"})
        );
        assert_eq!(
            entries[0].payload["tool_calls"][2]["arguments"], plain,
            "unchanged, layout included"
        );
        assert_eq!(
            entries[1].payload["output"]["ok"],
            "[redacted]\n     1\tAPI=[redacted]\n     2\t# note\n"
        );
        assert_eq!(
            entries[2].payload["output"]["ok"],
            "src/lib.rs:3:let password = 1;\nconfig/.env:7:DB_PASSWORD=[redacted]\n\
             src/a.rs:1:token [redacted]\n"
        );
        assert_eq!(entries[3].payload["output"]["ok"], "wrote src/lib.rs");
        assert_eq!(entries[2].payload["call_id"], "c9");
    }

    #[test]
    fn private_key_blocks_lose_their_bodies_but_keep_diff_markers() {
        let diff = "\
diff --git a/id_rsa b/id_rsa
+-----BEGIN OPENSSH PRIVATE KEY-----
+b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
+QyNTUxOQAAACDx
+-----END OPENSSH PRIVATE KEY-----
 unchanged line
";
        let redacted = redact_credential_patterns(diff);
        assert!(!redacted.contains("b3BlbnNzaC1rZXkt"), "{redacted}");
        assert!(!redacted.contains("QyNTUxOQ"), "{redacted}");
        assert_eq!(
            redacted,
            "\
diff --git a/id_rsa b/id_rsa
+-----BEGIN OPENSSH PRIVATE KEY-----
+[redacted]
+[redacted]
+-----END OPENSSH PRIVATE KEY-----
 unchanged line
"
        );
    }
}
