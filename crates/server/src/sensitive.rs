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
pub fn redact_sensitive_file_values(diff: &str) -> String {
    let mut out = String::with_capacity(diff.len());
    let mut kind: Option<SensitiveKind> = None;
    let mut in_hunk = false;
    for line in diff.split_inclusive('\n') {
        let (content, newline) = match line.strip_suffix('\n') {
            Some(content) => (content, "\n"),
            None => (line, ""),
        };
        if let Some(header) = content.strip_prefix("diff --git ") {
            in_hunk = false;
            // `a/<path> b/<path>`: the path after the last ` b/` (exact unless it holds one).
            kind = header
                .rfind(" b/")
                .and_then(|at| sensitive_kind(&header[at + 3..]));
        } else if !in_hunk {
            if content.starts_with("@@") {
                in_hunk = true;
            } else if let Some(path) = content
                .strip_prefix("+++ b/")
                .or_else(|| content.strip_prefix("--- a/"))
            {
                kind = kind.or_else(|| sensitive_kind(path));
            }
        } else if content.starts_with("@@") {
            // The next hunk of the same file.
        } else if let Some(kind) = kind {
            out.push_str(&redact_value_line(content, kind));
            out.push_str(newline);
            continue;
        }
        out.push_str(content);
        out.push_str(newline);
    }
    out
}

/// One content line of a sensitive file, its value hidden (see [`redact_sensitive_file_values`]).
fn redact_value_line(line: &str, kind: SensitiveKind) -> String {
    let mut chars = line.chars();
    let Some(marker) = chars.next().filter(|c| matches!(c, '+' | '-' | ' ')) else {
        // `\ No newline at end of file` and the like.
        return line.to_string();
    };
    let content = chars.as_str();
    let trimmed = content.trim_start();
    if trimmed.is_empty() {
        return line.to_string();
    }
    match kind {
        SensitiveKind::Ci => line.to_string(),
        SensitiveKind::Environment if trimmed.starts_with('#') => line.to_string(),
        SensitiveKind::Environment => match content.find(['=', ':']) {
            Some(at) if content[at + 1..].trim().is_empty() => line.to_string(),
            Some(at) => format!("{marker}{}{REDACTED}", &content[..=at]),
            None => format!("{marker}{REDACTED}"),
        },
        SensitiveKind::PrivateKey | SensitiveKind::Credentials => format!("{marker}{REDACTED}"),
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
