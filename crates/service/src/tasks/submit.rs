//! Submitting a task: what a [`Submission`] may hold, checked in the order an interface's user
//! learns about it (their role first, then the kind, the callback, the text, the options, the
//! repositories), honouring an [`Idempotency`] key, and waking the workers.
//!
//! Text that is stored (the prompt, metadata, check commands) holds no NUL: Postgres refuses it.
//! A follow-up (`follow_up_to`) continues a visible task of the same kind and keeps its exact
//! commits unless it names repositories (a change continues on its proposal, with its checks). A repository is named `name` or `name@rev`;
//! `@worktree` (a local work tree's uncommitted files) works in-process only. A change works
//! on exactly one repository, and one that asks to publish must have a remote to push to.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use warden_protocol::views::TaskView;
use warden_protocol::TaskKind;
use warden_store::{Created, IdempotencyKey, NewTask, Store, TaskRepo};

use super::{Principal, ServiceError, TaskService};

/// Repositories one task may name.
const MAX_REPOS_PER_TASK: usize = 16;
/// Check commands one change may give.
const MAX_CHECKS: usize = 16;
const MAX_CHECK_BYTES: usize = 4096;

/// The prompt of a `kind` task, trimmed, or the refusal every interface gives for it: the
/// API, the in-process CLI (which asks before pinning anything), `--server` and MCP all say
/// these sentences, and only these.
pub fn checked_prompt(kind: TaskKind, prompt: &str) -> Result<String, ServiceError> {
    let prompt = prompt.trim();
    if prompt.is_empty() {
        return Err(ServiceError::Invalid(
            match kind {
                TaskKind::Question => "the prompt is empty: ask a question about the repositories",
                TaskKind::Change => "the prompt is empty: say what to change",
                _ => "the prompt is empty: say what the task should do",
            }
            .into(),
        ));
    }
    if prompt.contains('\0') {
        return Err(ServiceError::Invalid(
            "the prompt must not contain NUL characters".into(),
        ));
    }
    Ok(prompt.to_string())
}

/// A task to submit, as any interface received it (the API's JSON body, the CLI's arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    pub kind: TaskKind,
    /// The request; surrounding whitespace is dropped.
    pub prompt: String,
    /// `name` or `name@rev`, each registered. Empty: a follow-up's repositories (at the commits
    /// it saw); required otherwise.
    pub repos: Vec<String>,
    /// A question this one continues (a task id visible to the submitter).
    pub follow_up_to: Option<String>,
    /// Change tasks: check commands replacing the registered repository's.
    pub checks: Option<Vec<String>>,
    /// Change tasks: publish the proposal after an approval bound to its hash.
    pub publish: Option<bool>,
    /// A JSON object kept with the task.
    pub metadata: Option<Value>,
    /// Where to POST the task's result: a URL the server's callback policy allows.
    pub callback_url: Option<String>,
    /// Change tasks: run the checks on the base commit first (`baseline_failing` if they fail).
    pub baseline: bool,
    /// Change follow-ups that publish: publish onto the branch (and pull request) the followed
    /// change was published to, as a new commit on top of it (see
    /// [`crate::publish::Onto`]); refused unless that change published a branch.
    pub same_branch: bool,
    /// Repositories an in-process front door pinned itself (a local path or URL, an exact
    /// commit) instead of registered names; see [`PinnedRepos`].
    pub pinned: Option<PinnedRepos>,
    /// Maintain tasks: what to upgrade (`select`) and how (`mode`); defaults when `None`.
    pub maintain: Option<warden_engine::change::MaintainOptions>,
}

/// Repositories pinned by the in-process front door ([`crate::local`]): each with its own
/// source and exact commit, and what pinning noticed (for the result's notices). Only that
/// front door builds them; the HTTP API names registered repositories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedRepos {
    pub(crate) repos: Vec<TaskRepo>,
    pub(crate) notices: Vec<String>,
}

impl PinnedRepos {
    pub(crate) fn new(repos: Vec<TaskRepo>, notices: Vec<String>) -> PinnedRepos {
        PinnedRepos { repos, notices }
    }
}

impl Submission {
    /// A submission of `kind` with `prompt` over `repos`, nothing else set.
    pub fn new(kind: TaskKind, prompt: impl Into<String>, repos: Vec<String>) -> Submission {
        Submission {
            kind,
            prompt: prompt.into(),
            repos,
            follow_up_to: None,
            checks: None,
            publish: None,
            metadata: None,
            callback_url: None,
            baseline: false,
            same_branch: false,
            pinned: None,
            maintain: None,
        }
    }
}

/// A key making a submission idempotent for its submitter: the same key with the same request
/// is the same task; with another request, [`ServiceError::IdempotencyConflict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    /// 1-255 visible ASCII characters (checked on submission).
    pub key: String,
    /// What identifies the request: hex SHA-256 of it as the interface received it.
    pub request_hash: String,
}

impl Idempotency {
    /// The key `key` for the request whose canonical bytes are `request` (the API: the JSON
    /// body with its keys sorted).
    pub fn new(key: impl Into<String>, request: &[u8]) -> Idempotency {
        Idempotency {
            key: key.into(),
            request_hash: hex::encode(Sha256::digest(request)),
        }
    }

    /// 1-255 characters, each visible ASCII, space or tab (what an HTTP header value may hold
    /// as text).
    fn well_formed(&self) -> bool {
        !self.key.is_empty()
            && self.key.len() <= 255
            && self
                .key
                .bytes()
                .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    }
}

/// A submitted task, and whether it was submitted before under the same idempotency key.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub task: TaskView,
    /// The key was used before with the same request: this is the task it created.
    pub replayed: bool,
}

/// Repository names: 1-100 letters, digits, `.`, `_` or `-`, not starting with `.` or `-`.
pub fn valid_repo_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A revision or branch as given: no option-looking or control-character text.
pub fn valid_rev(rev: &str) -> bool {
    !rev.is_empty()
        && rev.len() <= 200
        && !rev.starts_with('-')
        && !rev.chars().any(|c| c.is_control() || c == ' ')
}

impl TaskService {
    /// Queues `submission` as a task of `principal` (an operator or admin) and wakes the
    /// workers; with `idempotency`, a repeat of an earlier submission returns its task.
    pub async fn submit(
        &self,
        principal: &Principal,
        submission: Submission,
        idempotency: Option<Idempotency>,
    ) -> Result<Submitted, ServiceError> {
        principal.require_writer()?;
        let kind = submission.kind;
        if !crate::worker::runnable(kind) {
            return Err(ServiceError::UnsupportedKind(
                "this kind of task cannot run here".into(),
            ));
        }
        if let Some(reason) = &self.model_missing {
            let needs_model = match kind {
                TaskKind::Maintain => submission.maintain.as_ref().is_some_and(|m| m.model()),
                _ => true,
            };
            if needs_model {
                return Err(ServiceError::UnsupportedKind(format!(
                    "this server has no model, so it runs only baseline-mode maintenance ({reason})"
                )));
            }
        }
        let callback_url = match &submission.callback_url {
            None => None,
            Some(url) => Some(
                self.callbacks
                    .check_url(url)
                    .map_err(ServiceError::Invalid)?
                    .to_string(),
            ),
        };
        let prompt = checked_prompt(submission.kind, &submission.prompt)?;
        let mut metadata = match submission.metadata {
            None => json!({}),
            Some(value @ Value::Object(_)) => value,
            Some(_) => {
                return Err(ServiceError::Invalid(
                    "metadata must be a JSON object".into(),
                ))
            }
        };
        if let Some(at) = nul_in_json(&metadata, "metadata") {
            return Err(ServiceError::Invalid(format!(
                "{at} must not contain NUL characters"
            )));
        }
        // A change or a maintenance: a proposal, published after an approval.
        let proposes = matches!(kind, TaskKind::Change | TaskKind::Maintain);
        let publish = proposes && submission.publish == Some(true);
        let idempotency = match idempotency {
            None => None,
            Some(given) if !given.well_formed() => return Err(ServiceError::InvalidIdempotencyKey),
            Some(given) => Some(IdempotencyKey {
                key: given.key,
                owner: principal.name.clone(),
                request_hash: given.request_hash,
            }),
        };
        let follow_up_to = match &submission.follow_up_to {
            None => None,
            Some(id) => {
                let earlier = self.visible_task(principal, id).await.map_err(|_| {
                    ServiceError::Invalid(format!("follow_up_to: no task {id:?} of yours"))
                })?;
                if earlier.kind != kind {
                    return Err(ServiceError::Invalid(
                        "a follow-up must be of the same kind".into(),
                    ));
                }
                Some(earlier)
            }
        };
        if submission.same_branch {
            let published = follow_up_to
                .as_ref()
                .and_then(|earlier| crate::publication::published_branch(earlier.result.as_ref()));
            if kind != TaskKind::Change || !publish || published.is_none() {
                return Err(ServiceError::Invalid(
                    "same_branch is for a change that publishes and follows up a change whose \
                     proposal was published to a branch"
                        .into(),
                ));
            }
        }
        let basis = follow_up_to.as_ref().map(super::control::follow_up_basis);
        // A change's follow-up runs the checks its task ran, unless new ones are given.
        let checks = submission.checks.or_else(|| {
            let (_, earlier) = basis.as_ref()?;
            warden_engine::change::ChangeOptions::from_metadata(earlier)
                .ok()?
                .checks
        });
        let (repos, notices) = match (submission.pinned, submission.repos.is_empty()) {
            (Some(_), false) => {
                return Err(ServiceError::Invalid(
                    "give registered repositories or pinned ones, not both".into(),
                ))
            }
            (Some(pinned), true) => (pinned.repos, pinned.notices),
            (None, false) => (
                task_repos(self.store.as_ref(), &submission.repos).await?,
                Vec::new(),
            ),
            // A follow-up keeps the exact commits of the task it continues (a change: its
            // proposal).
            (None, true) => match basis {
                Some((repos, _)) => (repos, Vec::new()),
                None => {
                    return Err(ServiceError::Invalid(
                        "name at least one repository (repo or repos)".into(),
                    ))
                }
            },
        };
        let options = TaskOptions {
            checks,
            publish: submission.publish,
            baseline: submission.baseline,
            same_branch: submission.same_branch,
            notices,
            maintain: submission.maintain,
        };
        task_options(kind, options, &mut metadata)?;
        if proposes && repos.len() != 1 {
            return Err(ServiceError::Invalid(format!(
                "a {} task works on exactly one repository",
                warden_store::state::kind_name(kind)
            )));
        }
        if publish {
            self.check_publishable(&repos[0]).await?;
        }
        let id = warden_store::new_task_id().map_err(ServiceError::internal)?;
        let created = self
            .store
            .create_task(
                NewTask {
                    id,
                    kind,
                    owner: principal.name.clone(),
                    prompt,
                    repos,
                    priority: 0,
                    follow_up_to: follow_up_to.map(|t| t.id),
                    retry_of: None,
                    metadata,
                    callback_url,
                },
                idempotency,
            )
            .await?;
        let replayed = matches!(created, Created::Replayed(_));
        if !replayed {
            self.wake.notify_one();
        }
        Ok(Submitted {
            task: crate::task_view::task_view(created.task()),
            replayed,
        })
    }

    /// A publication that could never be pushed is refused now, before any model call, with
    /// what to configure (the same check [`crate::publish::publish_remote`] `warden run
    /// --publish` makes).
    async fn check_publishable(&self, repo: &TaskRepo) -> Result<(), ServiceError> {
        if repo.source.is_none() && self.store.get_repo(&repo.name).await?.is_none() {
            return Err(ServiceError::UnknownRepository {
                name: repo.name.clone(),
            });
        }
        let spec = crate::task_repos::repo_specs(self.store.as_ref(), std::slice::from_ref(repo))
            .await
            .map_err(|failure| {
                ServiceError::Invalid(format!("repository {:?}: {}", repo.name, failure.message))
            })?
            .pop()
            .ok_or_else(|| ServiceError::internal("no repository spec"))?;
        let git = match &self.repos {
            Some(repos) => repos.git().clone(),
            None => warden_repo::Git::locate().map_err(ServiceError::internal)?,
        };
        tokio::task::spawn_blocking(move || crate::publish::publish_remote(&git, &spec.source))
            .await
            .map_err(ServiceError::internal)?
            .map_err(ServiceError::Invalid)
            .map(drop)
    }
}

/// Where `value` (named `name`) holds a NUL character, in a string or an object key: Postgres
/// stores neither in TEXT nor in JSONB (`\u0000`), so such input is refused up front.
fn nul_in_json(value: &Value, name: &str) -> Option<String> {
    match value {
        Value::String(text) => text.contains('\0').then(|| name.to_string()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| nul_in_json(item, &format!("{name}[{index}]"))),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                Some(format!("a key of {name}"))
            } else {
                nul_in_json(item, &format!("{name}.{key}"))
            }
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// What a submission asks of its task beyond the prompt, before it is checked.
struct TaskOptions {
    checks: Option<Vec<String>>,
    publish: Option<bool>,
    baseline: bool,
    same_branch: bool,
    notices: Vec<String>,
    maintain: Option<warden_engine::change::MaintainOptions>,
}

/// A task's options, validated and kept in its metadata under
/// [`warden_engine::change::OPTIONS_METADATA_KEY`] (a key callers may not use themselves): a change's
/// `checks`, `publish` and `baseline`, and the notices of in-process pinning.
fn task_options(
    kind: TaskKind,
    options: TaskOptions,
    metadata: &mut Value,
) -> Result<(), ServiceError> {
    let key = warden_engine::change::OPTIONS_METADATA_KEY;
    if metadata.get(key).is_some() {
        return Err(ServiceError::Invalid(format!(
            "metadata key {key:?} is reserved for Warden"
        )));
    }
    let TaskOptions {
        checks,
        publish,
        baseline,
        same_branch,
        notices,
        maintain,
    } = options;
    if kind == TaskKind::Question && (checks.is_some() || publish.is_some() || baseline) {
        return Err(ServiceError::Invalid(
            "checks and publish are for change and maintain tasks".into(),
        ));
    }
    if kind == TaskKind::Maintain && baseline {
        return Err(ServiceError::Invalid(
            "baseline is for change tasks: a maintain task always checks its base first".into(),
        ));
    }
    let maintain = match (kind, maintain) {
        (TaskKind::Maintain, options) => {
            let options = options.unwrap_or_default();
            options.check().map_err(ServiceError::Invalid)?;
            (options != warden_engine::change::MaintainOptions::default()).then_some(options)
        }
        (_, None) => None,
        (_, Some(_)) => {
            return Err(ServiceError::Invalid(
                "select and mode are for maintain tasks".into(),
            ))
        }
    };
    if let Some(checks) = &checks {
        if checks.len() > MAX_CHECKS {
            return Err(ServiceError::Invalid(format!(
                "at most {MAX_CHECKS} check commands"
            )));
        }
        if checks
            .iter()
            .any(|c| c.trim().is_empty() || c.len() > MAX_CHECK_BYTES || c.contains('\0'))
        {
            return Err(ServiceError::Invalid(format!(
                "each check command must be non-empty, without NUL, at most {MAX_CHECK_BYTES} bytes"
            )));
        }
    }
    let options = warden_engine::change::ChangeOptions {
        checks,
        publish: publish.unwrap_or(false),
        baseline,
        same_branch,
        notices,
        maintain,
    };
    if options != warden_engine::change::ChangeOptions::default() {
        let value = serde_json::to_value(&options).map_err(ServiceError::internal)?;
        if let Some(map) = metadata.as_object_mut() {
            map.insert(key.to_string(), value);
        }
    }
    Ok(())
}

/// `name` or `name@rev` entries → the task's repositories, each registered.
async fn task_repos(store: &dyn Store, names: &[String]) -> Result<Vec<TaskRepo>, ServiceError> {
    if names.len() > MAX_REPOS_PER_TASK {
        return Err(ServiceError::Invalid(format!(
            "at most {MAX_REPOS_PER_TASK} repositories per task"
        )));
    }
    let mut repos: Vec<TaskRepo> = Vec::new();
    for entry in names {
        let (name, rev) = match entry.split_once('@') {
            Some((name, rev)) => (name, Some(rev)),
            None => (entry.as_str(), None),
        };
        if !valid_repo_name(name) {
            return Err(ServiceError::Invalid(format!(
                "invalid repository name {name:?}"
            )));
        }
        if let Some(rev) = rev {
            if !valid_rev(rev) {
                return Err(ServiceError::Invalid(format!("invalid revision {rev:?}")));
            }
            // The server's checkout is the operator's: its uncommitted files are not shared.
            if rev == warden_repo::WORK_TREE_REV {
                return Err(ServiceError::Invalid(format!(
                    "{entry:?}: @{rev} snapshots a local work tree and works in-process only; \
                     commit and push the changes, or name a revision"
                )));
            }
        }
        if repos.iter().any(|r| r.name == name) {
            return Err(ServiceError::Invalid(format!(
                "repository {name:?} is named twice"
            )));
        }
        if store.get_repo(name).await?.is_none() {
            return Err(ServiceError::UnknownRepository {
                name: name.to_string(),
            });
        }
        repos.push(TaskRepo {
            name: name.to_string(),
            rev: rev.map(str::to_string),
            commit: None,
            source: None,
        });
    }
    Ok(repos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_short_visible_ascii() {
        let check = |key: &str| Idempotency::new(key, b"{}").well_formed();
        assert!(check("key-1"));
        assert!(check("a b\tc"));
        assert!(check(&"k".repeat(255)));
        for bad in ["", "\u{e9}t\u{e9}", "a\u{7f}", "a\nb", "\u{fffd}"] {
            assert!(!check(bad), "{bad:?}");
        }
        assert!(!check(&"k".repeat(256)));
        assert_eq!(
            Idempotency::new("k", b"{}").request_hash,
            hex::encode(Sha256::digest(b"{}"))
        );
    }

    /// `same_branch` is for a publishing change that follows up a change published to a
    /// branch; anything else is refused before a task is created.
    #[tokio::test]
    async fn same_branch_needs_a_published_change_to_follow() {
        use crate::tasks::Role;
        let home = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", home.path().join("warden.db").display());
        let store = warden_store::open(&url).await.unwrap();
        let service = TaskService::new(std::sync::Arc::clone(&store), std::sync::Arc::default());
        let alice = Principal {
            name: "alice".into(),
            role: Role::Operator,
        };
        let earlier: warden_protocol::TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEV".parse().unwrap();
        store
            .create_task(
                NewTask {
                    id: earlier.clone(),
                    kind: TaskKind::Change,
                    owner: "alice".into(),
                    prompt: "p".into(),
                    repos: vec![],
                    priority: 0,
                    follow_up_to: None,
                    retry_of: None,
                    metadata: json!({}),
                    callback_url: None,
                },
                None,
            )
            .await
            .unwrap();
        let refused = |submission: Submission| {
            let service = &service;
            let alice = &alice;
            async move {
                match service.submit(alice, submission, None).await {
                    Err(ServiceError::Invalid(message)) => message,
                    other => panic!("{other:?}"),
                }
            }
        };
        let mut alone = Submission::new(TaskKind::Change, "p", vec!["app".into()]);
        alone.publish = Some(true);
        alone.same_branch = true;
        assert!(refused(alone.clone())
            .await
            .starts_with("same_branch is for"));
        let mut unpublished = alone.clone();
        unpublished.repos = vec![];
        unpublished.follow_up_to = Some(earlier.to_string());
        assert!(refused(unpublished.clone())
            .await
            .starts_with("same_branch is for"));
        let mut not_publishing = unpublished;
        not_publishing.publish = None;
        assert!(refused(not_publishing)
            .await
            .starts_with("same_branch is for"));
        assert!(store.list_tasks(Default::default()).await.unwrap().len() == 1);

        // Published: its branch and commit are what a same-branch follow-up builds on.
        let mut task = store.get_task(&earlier).await.unwrap().unwrap();
        assert_eq!(
            crate::publication::published_branch(task.result.as_ref()),
            None
        );
        use warden_protocol::{ChangeOutcome, ChangeResult, Proposal, Publication};
        let result = ChangeResult {
            task_id: earlier.clone(),
            kind: TaskKind::Change,
            outcome: ChangeOutcome::Proposal {
                proposal: Box::new(Proposal {
                    id: "prp_1".into(),
                    repo: "app".into(),
                    base_commit: "a".into(),
                    commit: "b".into(),
                    tree: "c".into(),
                    reference: "r".into(),
                    diff_stat: warden_protocol::DiffStat::default(),
                    files: vec![],
                    summary: "s".into(),
                    hash: "sha256:x".into(),
                    validations: vec![],
                    sensitive_files: vec![],
                }),
                publication: Publication {
                    status: warden_protocol::PublicationStatus::PrOpened,
                    branch: Some("warden/tsk_1".into()),
                    pr_url: Some("https://github.example/acme/widgets/pull/1".into()),
                },
            },
            baseline: vec![],
            approval: None,
            usage: warden_protocol::Usage::default(),
            model: "m".into(),
            sandbox: None,
            notices: vec![],
            maintenance: None,
            gate: None,
            review: None,
        };
        task.result = Some(serde_json::to_value(&result).unwrap());
        assert_eq!(
            crate::publication::published_branch(task.result.as_ref()),
            Some(("warden/tsk_1".to_string(), "b".to_string()))
        );
    }

    #[test]
    fn nul_characters_are_found_in_values_and_keys() {
        assert_eq!(nul_in_json(&json!({"a": "ok"}), "metadata"), None);
        assert_eq!(
            nul_in_json(&json!({"a": ["x", "y\u{0}"]}), "metadata").as_deref(),
            Some("metadata.a[1]")
        );
        assert_eq!(
            nul_in_json(&json!({"k\u{0}": 1}), "metadata").as_deref(),
            Some("a key of metadata")
        );
    }
}
