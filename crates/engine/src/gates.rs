//! The risk gate: a change task classified before it runs, from what it says it will do, and
//! its proposal classified again after the run from the paths it actually changed.
//!
//! Which files a change will touch is not known before it runs, so the request is read for what
//! it names: paths and globs (`.github/workflows/ci.yml`, `*.tf`, `src/auth/`), words
//! (`deploy`, `password`, `dependencies`), and the repository's configuration (a file a check
//! command runs; no checks at all). Deterministic rules only, each a [`GateReason`] with its
//! level; the request's level is the highest of them (`low` without any). The operator's
//! `[gates]` policy ([`GatePolicy`]) says what each level does: `run`, `approve_proposal` (as
//! every proposal: it reaches a remote only through an approval bound to its hash) or
//! `approve_before_run` (an approval bound to [`request_hash`] before anything runs).
//!
//! Levels by rule:
//! - `high`: CI and workflow configuration (the sensitive-file rules of [`crate::sensitive`]:
//!   `.github/workflows/`, `.gitlab-ci.yml`, `Jenkinsfile`, …), secrets (environment files,
//!   private keys, credential stores), authentication and authorization code (a path segment
//!   with `auth`, `secret`, `credential`, `passw`, `permission`), infrastructure (Dockerfiles,
//!   Terraform, Kubernetes and Helm directories, `deploy/`, `infra/`), and a file a check
//!   command runs (changing it changes what proves the proposal).
//! - `medium`: dependency manifests and lockfiles (`Cargo.toml`, `package-lock.json`,
//!   `go.sum`, …), build scripts (`build.rs`, `Makefile`), deleting a test file (proposals
//!   only), and a repository without check commands (nothing will prove the change).

use sha2::{Digest, Sha256};
use warden_protocol::{GateAction, GateLevel, GateProposal, GateReason};

/// What `[gates]` does at each level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatePolicy {
    pub low: GateAction,
    pub medium: GateAction,
    pub high: GateAction,
}

impl Default for GatePolicy {
    /// Today's behaviour: everything runs; every proposal reaches a remote only through an
    /// approval bound to its hash.
    fn default() -> Self {
        GatePolicy {
            low: GateAction::Run,
            medium: GateAction::Run,
            high: GateAction::ApproveProposal,
        }
    }
}

impl GatePolicy {
    pub fn action(&self, level: GateLevel) -> GateAction {
        match level {
            GateLevel::Low => self.low,
            GateLevel::Medium => self.medium,
            GateLevel::High => self.high,
        }
    }
}

/// A request's or a proposal's level and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub level: GateLevel,
    pub reasons: Vec<GateReason>,
}

impl Classification {
    fn from_reasons(mut reasons: Vec<GateReason>) -> Classification {
        let mut seen = std::collections::HashSet::new();
        reasons.retain(|r| seen.insert((r.rule.clone(), r.detail.clone())));
        // Highest first, so the first reason says why the level is what it is.
        reasons.sort_by_key(|r| std::cmp::Reverse(r.level));
        Classification {
            level: reasons.first().map_or(GateLevel::Low, |r| r.level),
            reasons,
        }
    }

    /// The reasons as one line each (`high ci: names .github/workflows/ci.yml`).
    pub fn reason_lines(&self) -> Vec<String> {
        reason_lines(&self.reasons)
    }
}

/// `level rule: detail`, one a reason.
pub fn reason_lines(reasons: &[GateReason]) -> Vec<String> {
    reasons
        .iter()
        .map(|r| format!("{} {}: {}", level_name(r.level), r.rule, r.detail))
        .collect()
}

pub fn level_name(level: GateLevel) -> &'static str {
    match level {
        GateLevel::Low => "low",
        GateLevel::Medium => "medium",
        GateLevel::High => "high",
    }
}

pub fn action_name(action: GateAction) -> &'static str {
    match action {
        GateAction::Run => "run",
        GateAction::ApproveProposal => "approve_proposal",
        GateAction::ApproveBeforeRun => "approve_before_run",
    }
}

pub fn parse_action(text: &str) -> Option<GateAction> {
    [
        GateAction::Run,
        GateAction::ApproveProposal,
        GateAction::ApproveBeforeRun,
    ]
    .into_iter()
    .find(|a| action_name(*a) == text)
}

fn reason(level: GateLevel, rule: &str, detail: String) -> GateReason {
    GateReason {
        level,
        rule: rule.to_string(),
        detail,
    }
}

/// Classifies a change request before it runs: the paths and words it names, and the checks
/// that will validate it.
pub fn classify_request(request: &str, checks: &[String]) -> Classification {
    let mut reasons = Vec::new();
    for path in named_paths(request) {
        reasons.extend(path_reasons(&path, "names"));
        if let Some(check) = check_running(&path, checks) {
            reasons.push(reason(
                GateLevel::High,
                "checks",
                format!(
                    "names {}, which the check `{}` runs: changing it changes what proves the \
                     proposal",
                    printable(&path),
                    printable(check)
                ),
            ));
        }
    }
    let text = words(request);
    for (level, rule, phrases) in WORD_RULES {
        for phrase in *phrases {
            if text.contains(&format!(" {phrase} ")) {
                reasons.push(reason(*level, rule, format!("mentions \"{phrase}\"")));
            }
        }
    }
    if checks.is_empty() {
        reasons.push(reason(
            GateLevel::Medium,
            "checks",
            "the repository has no check commands: nothing will prove the change".into(),
        ));
    }
    Classification::from_reasons(reasons)
}

/// One changed file of a proposal: its path and `added`, `modified` or `deleted`.
pub struct ChangedPath<'a> {
    pub path: &'a str,
    pub status: &'a str,
}

/// Classifies a proposal from the paths it actually changed.
pub fn classify_proposal(files: &[ChangedPath<'_>], checks: &[String]) -> Classification {
    let mut reasons = Vec::new();
    for file in files {
        reasons.extend(path_reasons(file.path, "changes"));
        if let Some(check) = check_running(file.path, checks) {
            reasons.push(reason(
                GateLevel::High,
                "checks",
                format!(
                    "changes {}, which the check `{}` runs",
                    printable(file.path),
                    printable(check)
                ),
            ));
        }
        if file.status == "deleted" && is_test_path(file.path) {
            reasons.push(reason(
                GateLevel::Medium,
                "tests",
                format!("deletes {}, a test", printable(file.path)),
            ));
        }
    }
    Classification::from_reasons(reasons)
}

/// The proposal's classification as the result records it, with the policy's action.
pub fn proposal_gate(classification: Classification, policy: &GatePolicy) -> GateProposal {
    GateProposal {
        level: classification.level,
        action: policy.action(classification.level),
        reasons: classification.reasons,
    }
}

/// What an `approve_before_run` approval is bound to: the request as submitted.
#[derive(Debug, serde::Serialize)]
pub struct RequestSubject<'a> {
    pub task_id: &'a str,
    pub kind: &'a str,
    pub prompt: &'a str,
    /// Each repository's name, revision and (an in-process task's, fixed when it was
    /// submitted) source and commit.
    pub repos: Vec<RequestRepo<'a>>,
    /// The check commands the run will use.
    pub checks: &'a [String],
    pub publish: bool,
    pub baseline: bool,
}

#[derive(Debug, serde::Serialize)]
pub struct RequestRepo<'a> {
    pub name: &'a str,
    pub rev: Option<&'a str>,
    pub source: Option<&'a str>,
    pub commit: Option<&'a str>,
}

/// `sha256:` and the hex digest of the subject's canonical JSON (fields in declaration order).
pub fn request_hash(subject: &RequestSubject<'_>) -> String {
    let bytes = serde_json::to_vec(subject).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
}

/// The id of the approval a task waits for before it runs, for one request hash: a changed
/// request (its checks, say) needs an approval of its own.
pub fn run_approval_id(task_id: &warden_protocol::TaskId, request_hash: &str) -> String {
    let digest = request_hash.trim_start_matches("sha256:");
    // The publication approval's id (`change::publication_approval_id`: `apr_` and the task's
    // ULID), spelled here so the gate does not import the change module (a circle through
    // the configuration).
    format!(
        "apr_{}-run-{}",
        task_id
            .as_str()
            .trim_start_matches(warden_protocol::TaskId::PREFIX),
        &digest[..digest.len().min(12)]
    )
}

/// The approval kind of a run approval.
pub const RUN_APPROVAL_KIND: &str = "run";

// --- rules ---

const WORD_RULES: &[(GateLevel, &str, &[&str])] = &[
    (
        GateLevel::High,
        "ci",
        &[
            "ci",
            "workflow",
            "workflows",
            "github actions",
            "pipeline",
            "pipelines",
            "gitlab-ci",
            "jenkins",
            "circleci",
        ],
    ),
    (
        GateLevel::High,
        "secrets",
        &[
            "secret",
            "secrets",
            "credential",
            "credentials",
            "password",
            "passwords",
            "api key",
            "api keys",
            "private key",
            "ssh key",
            "access token",
            "api token",
        ],
    ),
    (
        GateLevel::High,
        "auth",
        &[
            "auth",
            "authentication",
            "authorization",
            "authorisation",
            "oauth",
            "login",
            "permission",
            "permissions",
            "rbac",
            "sso",
            "jwt",
        ],
    ),
    (
        GateLevel::High,
        "infrastructure",
        &[
            "deploy",
            "deployment",
            "deployments",
            "terraform",
            "kubernetes",
            "k8s",
            "helm",
            "dockerfile",
            "infrastructure",
            "production",
            "ansible",
        ],
    ),
    (
        GateLevel::Medium,
        "dependencies",
        &[
            "dependency",
            "dependencies",
            "lockfile",
            "lock file",
            "upgrade",
            "bump",
        ],
    ),
];

const MANIFESTS: &[&str] = &[
    "cargo.toml",
    "cargo.lock",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "bun.lockb",
    "go.mod",
    "go.sum",
    "pipfile",
    "pipfile.lock",
    "pyproject.toml",
    "poetry.lock",
    "uv.lock",
    "setup.py",
    "setup.cfg",
    "gemfile",
    "gemfile.lock",
    "composer.json",
    "composer.lock",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
    "gradle.lockfile",
    "mix.exs",
    "mix.lock",
    "package.swift",
    "package.resolved",
    "flake.nix",
    "flake.lock",
];

const BUILD_FILES: &[&str] = &[
    "build.rs",
    "makefile",
    "gnumakefile",
    "cmakelists.txt",
    "justfile",
    "build.sh",
];

const INFRA_DIRECTORIES: &[&str] = &[
    "terraform",
    "k8s",
    "kubernetes",
    "helm",
    "charts",
    "ansible",
    "deploy",
    "deployment",
    "infra",
    "infrastructure",
];

const AUTH_SEGMENTS: &[&str] = &["auth", "secret", "credential", "passw", "permission"];

/// The reasons a path (named by a request, or changed by a proposal) raises; `verb` says which.
fn path_reasons(path: &str, verb: &str) -> Vec<GateReason> {
    let mut reasons = Vec::new();
    let shown = printable(path);
    let lower = path.trim_start_matches("./").to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower).to_string();
    match crate::sensitive::sensitive_kind(&lower) {
        Some(crate::sensitive::SensitiveKind::Ci) => reasons.push(reason(
            GateLevel::High,
            "ci",
            format!("{verb} {shown} (CI configuration)"),
        )),
        Some(kind) => reasons.push(reason(
            GateLevel::High,
            "secrets",
            format!("{verb} {shown} ({})", kind.as_str()),
        )),
        None => {}
    }
    let segments: Vec<&str> = lower.split('/').filter(|s| !s.is_empty()).collect();
    if segments
        .iter()
        .any(|segment| AUTH_SEGMENTS.iter().any(|word| segment.contains(word)))
    {
        reasons.push(reason(
            GateLevel::High,
            "auth",
            format!("{verb} {shown} (authentication, authorization or secrets code)"),
        ));
    }
    let directories = &segments[..segments.len().saturating_sub(1)];
    let infra_directory = directories
        .iter()
        .chain(lower.ends_with('/').then_some(segments.last()).flatten())
        .any(|d| INFRA_DIRECTORIES.contains(d));
    if name.starts_with("dockerfile")
        || name.ends_with(".dockerfile")
        || name.starts_with("docker-compose")
        || name.starts_with("compose.y")
        || name.ends_with(".tf")
        || name.ends_with(".tfvars")
        || name == "vagrantfile"
        || infra_directory
    {
        reasons.push(reason(
            GateLevel::High,
            "infrastructure",
            format!("{verb} {shown} (infrastructure)"),
        ));
    }
    if MANIFESTS.contains(&name.as_str())
        || (name.starts_with("requirements") && name.ends_with(".txt"))
        || name.ends_with(".csproj")
    {
        reasons.push(reason(
            GateLevel::Medium,
            "dependencies",
            format!("{verb} {shown} (a dependency manifest or lockfile)"),
        ));
    }
    if BUILD_FILES.contains(&name.as_str()) {
        reasons.push(reason(
            GateLevel::Medium,
            "build",
            format!("{verb} {shown} (runs at build time)"),
        ));
    }
    reasons
}

/// The check command that names `path` (as a word of the command), if any.
fn check_running<'a>(path: &str, checks: &'a [String]) -> Option<&'a str> {
    let path = path.trim_start_matches("./");
    if path.is_empty() || path.contains('*') {
        return None;
    }
    checks
        .iter()
        .find(|check| {
            check
                .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '"' | '\''))
                .map(|word| word.trim_start_matches("./"))
                .any(|word| word == path)
        })
        .map(String::as_str)
}

fn is_test_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    lower
        .split('/')
        .any(|segment| matches!(segment, "test" | "tests" | "spec" | "__tests__"))
        || name.starts_with("test_")
        || name.contains("_test.")
        || name.contains(".test.")
        || name.contains("_spec.")
        || name.contains(".spec.")
}

/// The words of a request, lowercased, each surrounded by single spaces (`" fix the ci "`), so
/// a phrase matches only as whole words.
fn words(text: &str) -> String {
    let mut out = String::from(" ");
    let mut last_space = true;
    for c in text.chars() {
        if c.is_alphanumeric() || c == '-' {
            out.extend(c.to_lowercase());
            last_space = false;
        } else if !last_space {
            out.push(' ');
            last_space = true;
        }
    }
    if !last_space {
        out.push(' ');
    }
    out
}

/// The paths and globs a request names: words with a `/`, a `*`, or a file extension, or a
/// file name the rules know (`Dockerfile`, `Makefile`, `Jenkinsfile`).
pub fn named_paths(request: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for word in request.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '`' | '"' | '\'' | '(' | ')' | '[' | ']' | ',' | '<' | '>'
            )
    }) {
        let word = word.trim_end_matches(['.', ':', ';', '!', '?']);
        if word.is_empty() || word.len() > 400 || word.contains("://") {
            continue;
        }
        let lower = word.to_ascii_lowercase();
        let name = lower.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        let has_extension = name.rsplit_once('.').is_some_and(|(stem, ext)| {
            !ext.is_empty()
                && ext.len() <= 10
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && (!stem.is_empty() || name.starts_with('.'))
                && !ext.chars().all(|c| c.is_ascii_digit())
        });
        let known_name = matches!(
            name,
            "dockerfile" | "makefile" | "jenkinsfile" | "vagrantfile" | "gemfile" | "justfile"
        );
        if word.contains('/') || word.contains('*') || has_extension || known_name {
            paths.push(word.to_string());
        }
    }
    paths
}

/// A path with control characters escaped, for one-line reasons.
fn printable(text: &str) -> String {
    text.chars().flat_map(char::escape_default).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request's level and its reasons' rules, for `request` with `checks`.
    fn check(request: &str, checks: &[&str], level: GateLevel, rules: &[&str]) {
        let checks: Vec<String> = checks.iter().map(|c| c.to_string()).collect();
        let classified = classify_request(request, &checks);
        let mut got: Vec<&str> = classified.reasons.iter().map(|r| r.rule.as_str()).collect();
        got.sort_unstable();
        got.dedup();
        let mut want = rules.to_vec();
        want.sort_unstable();
        assert_eq!(
            (classified.level, got),
            (level, want),
            "{request:?}: {:#?}",
            classified.reasons
        );
    }

    #[test]
    fn each_request_rule_raises_its_level() {
        let cargo = &["cargo test"];
        check(
            "make beta uppercase in src/lib.txt",
            cargo,
            GateLevel::Low,
            &[],
        );
        // CI and workflow files, by path and by word.
        check(
            "run clippy in .github/workflows/ci.yml",
            cargo,
            GateLevel::High,
            &["ci"],
        );
        check(
            "edit .gitlab-ci.yml to cache",
            cargo,
            GateLevel::High,
            &["ci"],
        );
        check("speed up the CI", cargo, GateLevel::High, &["ci"]);
        check("add a GitHub Actions job", cargo, GateLevel::High, &["ci"]);
        // Secrets: the sensitive-file rules, and words.
        check(
            "add config/.env.local",
            cargo,
            GateLevel::High,
            &["secrets"],
        );
        check(
            "rotate deploy/id_rsa",
            cargo,
            GateLevel::High,
            &["secrets", "infrastructure"],
        );
        check(
            "store the password hashed",
            cargo,
            GateLevel::High,
            &["secrets"],
        );
        // Authentication and authorization.
        check("fix src/auth/session.rs", cargo, GateLevel::High, &["auth"]);
        check(
            "relax the permissions check",
            cargo,
            GateLevel::High,
            &["auth"],
        );
        // Infrastructure.
        check(
            "pin the base image in Dockerfile",
            cargo,
            GateLevel::High,
            &["infrastructure"],
        );
        check(
            "resize the db in infra/main.tf",
            cargo,
            GateLevel::High,
            &["infrastructure"],
        );
        check(
            "deploy on Fridays too",
            cargo,
            GateLevel::High,
            &["infrastructure"],
        );
        // Dependencies and build scripts.
        check(
            "add serde to Cargo.toml",
            cargo,
            GateLevel::Medium,
            &["dependencies"],
        );
        check(
            "regenerate package-lock.json",
            cargo,
            GateLevel::Medium,
            &["dependencies"],
        );
        check(
            "bump the dependencies",
            cargo,
            GateLevel::Medium,
            &["dependencies"],
        );
        check("tidy build.rs", cargo, GateLevel::Medium, &["build"]);
        // The repository's configuration: a file a check runs, no checks at all.
        check(
            "simplify check.sh",
            &["bash check.sh"],
            GateLevel::High,
            &["checks"],
        );
        check("rename a variable", &[], GateLevel::Medium, &["checks"]);
        // Whole words only: "authority" is not "auth", "cinema" not "ci".
        check("the cinema authority module", cargo, GateLevel::Low, &[]);
        // Globs are paths.
        check("touch every *.pem", cargo, GateLevel::High, &["secrets"]);
    }

    #[test]
    fn the_highest_reason_comes_first_and_reasons_are_not_repeated() {
        let c = classify_request("bump Cargo.toml and the CI, the CI", &["cargo test".into()]);
        assert_eq!(c.level, GateLevel::High);
        assert_eq!(c.reasons[0].rule, "ci");
        assert_eq!(c.reasons.iter().filter(|r| r.rule == "ci").count(), 1);
        assert_eq!(
            c.reason_lines()[0],
            "high ci: mentions \"ci\"",
            "{:?}",
            c.reason_lines()
        );
    }

    #[test]
    fn a_proposal_is_classified_from_its_actual_paths() {
        let checks = vec!["bash check.sh".to_string()];
        let files = [
            ChangedPath {
                path: "src/lib.rs",
                status: "modified",
            },
            ChangedPath {
                path: "tests/retry.rs",
                status: "deleted",
            },
        ];
        let c = classify_proposal(&files, &checks);
        assert_eq!(c.level, GateLevel::Medium);
        assert_eq!(c.reasons[0].rule, "tests");
        let files = [ChangedPath {
            path: "check.sh",
            status: "modified",
        }];
        assert_eq!(classify_proposal(&files, &checks).level, GateLevel::High);
        let files = [ChangedPath {
            path: ".github/workflows/ci.yml",
            status: "added",
        }];
        assert_eq!(classify_proposal(&files, &checks).reasons[0].rule, "ci");
        let files = [ChangedPath {
            path: "src/lib.rs",
            status: "modified",
        }];
        assert_eq!(classify_proposal(&files, &checks).level, GateLevel::Low);
    }

    #[test]
    fn the_policy_maps_levels_to_actions() {
        let policy = GatePolicy {
            low: GateAction::Run,
            medium: GateAction::ApproveProposal,
            high: GateAction::ApproveBeforeRun,
        };
        assert_eq!(
            policy.action(GateLevel::Medium),
            GateAction::ApproveProposal
        );
        assert_eq!(policy.action(GateLevel::High), GateAction::ApproveBeforeRun);
        for action in ["run", "approve_proposal", "approve_before_run"] {
            assert_eq!(parse_action(action).map(action_name), Some(action));
        }
        assert_eq!(parse_action("approve"), None);
    }

    #[test]
    fn the_request_hash_covers_every_field() {
        let checks = vec!["cargo test".to_string()];
        let subject = |prompt, publish| RequestSubject {
            task_id: "tsk_01",
            kind: "change",
            prompt,
            repos: vec![RequestRepo {
                name: "app",
                rev: None,
                source: None,
                commit: None,
            }],
            checks: &checks,
            publish,
            baseline: false,
        };
        let a = request_hash(&subject("fix the ci", false));
        assert!(a.starts_with("sha256:") && a.len() == 71, "{a}");
        assert_eq!(a, request_hash(&subject("fix the ci", false)));
        assert_ne!(a, request_hash(&subject("fix the CI", false)));
        assert_ne!(a, request_hash(&subject("fix the ci", true)));
    }

    #[test]
    fn named_paths_are_words_that_look_like_files() {
        assert_eq!(
            named_paths("edit `src/lib.rs`, the Dockerfile and *.tf (not v1.2 or https://x.y/z)."),
            ["src/lib.rs", "Dockerfile", "*.tf"]
        );
    }
}
