//! Reading tasks back: pages of the tasks a principal sees, and a change's proposal as a diff.
//! One task ([`TaskService::task`]) and the visibility rule ([`super::Principal::owner_scope`])
//! live in `mod.rs`; event streams and journals are read by the interfaces once the task is
//! known to be visible.
//!
//! A proposal's diff is [`crate::diff::redacted_proposal_diff`], the one producer `warden diff`
//! uses too: hardened `diff-tree` from Warden's mirror, secrets and sensitive files' values
//! redacted, at most [`crate::diff::MAX_DIFF_BYTES`] cut at a line end. A task that is not a
//! change, has no proposal (also while it runs: a proposal exists once the run ends), or whose
//! proposal left the mirror has no diff (not found, the message says which).

use warden_protocol::views::{TaskMessage, TaskView};
use warden_protocol::{TaskId, TaskStatus};

use crate::task_view::task_view;

use warden_store::TaskQuery;

use super::{Principal, ServiceError, TaskService};
use warden_engine::redact::Redactor;

/// The most tasks or approvals a page holds.
pub const MAX_PAGE: u32 = 200;

/// Which tasks to list: in `status` (`None`: any), older than the task `before` (the previous
/// page's cursor), at most `limit` (1 to [`MAX_PAGE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskListing {
    pub status: Option<TaskStatus>,
    pub before: Option<TaskId>,
    pub limit: u32,
}

/// A page of tasks, newest first, and the cursor of the next page when there is one.
#[derive(Debug, Clone)]
pub struct TaskList {
    pub tasks: Vec<TaskView>,
    pub next_cursor: Option<TaskId>,
}

pub use warden_protocol::views::ProposalDiff;

impl TaskService {
    /// The tasks `principal` sees (their own; everyone's for admins), newest first.
    pub async fn list(
        &self,
        principal: &Principal,
        listing: TaskListing,
    ) -> Result<TaskList, ServiceError> {
        let limit = listing.limit.clamp(1, MAX_PAGE);
        let mut tasks = self
            .store
            .list_tasks(TaskQuery {
                owner: principal.owner_scope().map(str::to_string),
                status: listing.status,
                before: listing.before,
                limit: limit + 1,
            })
            .await?;
        let more = tasks.len() > limit as usize;
        tasks.truncate(limit as usize);
        let next_cursor = if more {
            tasks.last().map(|t| t.id.clone())
        } else {
            None
        };
        Ok(TaskList {
            tasks: tasks.iter().map(task_view).collect(),
            next_cursor,
        })
    }

    /// Task `id`'s conversation (the agent's questions and the answers given), oldest first,
    /// if `principal` sees the task.
    pub async fn messages(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Vec<TaskMessage>, ServiceError> {
        let task = self.visible_task(principal, id).await?;
        Ok(self.store.task_messages(&task.id).await?)
    }

    /// The diff of change task `id`'s proposal, if `principal` sees the task.
    pub async fn proposal_diff(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<ProposalDiff, ServiceError> {
        let task = self.visible_task(principal, id).await?;
        let gone = || {
            ServiceError::NotFound(format!(
                "the proposal of task {id} is no longer in Warden's mirror"
            ))
        };
        let repos = self.repos.as_ref().ok_or_else(gone)?;
        let (proposal, diff, truncated) =
            crate::diff::task_diff(self.store.as_ref(), repos, &self.redactor, &task)
                .await
                .map_err(|error| match error {
                    crate::diff::TaskDiffError::Missing(message) => ServiceError::NotFound(message),
                    crate::diff::TaskDiffError::Failed(message) => ServiceError::internal(message),
                })?;
        Ok(ProposalDiff {
            task_id: task.id,
            repo: proposal.repo,
            base_commit: proposal.base_commit,
            commit: proposal.commit,
            hash: proposal.hash,
            diff,
            truncated,
            sensitive_files: proposal.sensitive_files,
        })
    }
}

impl TaskService {
    /// Change task `id`'s proposal as a git bundle (only what the proposal added; see
    /// [`warden_engine::diff::proposal_bundle`]), if `principal` sees the task: what
    /// `warden apply` against a server fetches. A proposal holding anything Warden redacts is
    /// refused ([`ServiceError::Forbidden`]), saying why.
    pub async fn proposal_bundle(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<(warden_protocol::Proposal, Vec<u8>), ServiceError> {
        let task = self.visible_task(principal, id).await?;
        let repos = self.repos.as_ref().ok_or_else(|| {
            ServiceError::NotFound(format!(
                "the proposal of task {id} is no longer in Warden's mirror"
            ))
        })?;
        let (proposal, bundle) =
            crate::diff::task_bundle(self.store.as_ref(), repos, &self.redactor, &task)
                .await
                .map_err(|error| match error {
                    crate::diff::TaskDiffError::Missing(message) => ServiceError::NotFound(message),
                    crate::diff::TaskDiffError::Failed(message) => ServiceError::internal(message),
                })?;
        match bundle {
            warden_engine::diff::ProposalBundle::Bundle(bytes) => Ok((proposal, bytes)),
            warden_engine::diff::ProposalBundle::Withheld(why) => Err(ServiceError::Forbidden(
                format!("the proposal of task {id} is not served as a bundle: {why}"),
            )),
        }
    }
}

/// The most citations [`TaskService::cited_lines`] reads, and the most lines of each.
pub const MAX_CITED: usize = 64;
pub const MAX_CITED_LINES: u64 = 200;
/// Files larger than this are not read for their cited lines.
const MAX_CITED_FILE_BYTES: u64 = 4 << 20;

/// One checked citation of an answer with the lines it cites, read from the pinned commit in
/// Warden's mirror (secrets redacted). `lines` is `None` when they can no longer be read (the
/// mirror lost the commit, the file is too large); the citation itself was checked when the
/// answer was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CitedLines {
    pub evidence: warden_protocol::Evidence,
    pub lines: Option<Vec<String>>,
    /// The range was longer than [`MAX_CITED_LINES`] and was cut.
    pub truncated: bool,
}

impl TaskService {
    /// Every citation of task `id`'s answer (at most [`MAX_CITED`]) with its lines, if
    /// `principal` sees the task. A task without an answer has none.
    pub async fn cited_lines(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Vec<CitedLines>, ServiceError> {
        let task = self.visible_task(principal, id).await?;
        let Some(answer) = task
            .result
            .as_ref()
            .filter(|r| r.get("outcome").and_then(|o| o.as_str()) == Some("answer"))
            .and_then(|r| r.get("answer"))
            .and_then(|a| serde_json::from_value::<warden_protocol::Answer>(a.clone()).ok())
        else {
            return Ok(Vec::new());
        };
        let evidence: Vec<warden_protocol::Evidence> = answer
            .claims
            .into_iter()
            .flat_map(|claim| claim.evidence)
            .take(MAX_CITED)
            .collect();
        let mut mirrors = std::collections::HashMap::new();
        if let Some(repos) = &self.repos {
            for repo in &task.repos {
                if let Ok(Some(spec)) =
                    crate::task_repos::repo_specs(self.store.as_ref(), std::slice::from_ref(repo))
                        .await
                        .map(|mut specs| specs.pop())
                {
                    mirrors.insert(repo.name.clone(), repos.mirror_path(&spec));
                }
            }
        }
        let git = self.repos.as_ref().map(|r| r.git().clone());
        let redactor = self.redactor.clone();
        tokio::task::spawn_blocking(move || {
            evidence
                .into_iter()
                .map(|evidence| {
                    let text = match (&git, mirrors.get(&evidence.repo)) {
                        (Some(git), Some(mirror)) => {
                            read_blob(git, mirror, &evidence.commit, &evidence.path)
                        }
                        _ => None,
                    };
                    cut_lines(evidence, text.as_deref(), &redactor)
                })
                .collect()
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))
    }
}

/// The blob at `commit:path` in `mirror`, unless it is missing or too large.
fn read_blob(
    git: &warden_repo::Git,
    mirror: &std::path::Path,
    commit: &str,
    path: &str,
) -> Option<Vec<u8>> {
    // Only a full object id names the commit: nothing the answer says is a revision expression.
    if !(commit.len() == 40 || commit.len() == 64) || !commit.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    let object = format!("{commit}:{path}");
    let size: u64 = git
        .run(mirror, &["cat-file", "-s", &object])
        .ok()?
        .text()
        .parse()
        .ok()?;
    if size > MAX_CITED_FILE_BYTES {
        return None;
    }
    git.run(mirror, &["cat-file", "blob", &object])
        .ok()
        .map(|o| o.stdout)
}

/// The cited range of `text`, redacted and bounded.
fn cut_lines(
    evidence: warden_protocol::Evidence,
    text: Option<&[u8]>,
    redactor: &Redactor,
) -> CitedLines {
    let Some(text) = text else {
        return CitedLines {
            evidence,
            lines: None,
            truncated: false,
        };
    };
    let text = String::from_utf8_lossy(text);
    let start = evidence.start_line.max(1);
    let end = evidence
        .end_line
        .max(start)
        .min(start + MAX_CITED_LINES - 1);
    let lines: Vec<String> = text
        .lines()
        .skip((start - 1) as usize)
        .take((end - start + 1) as usize)
        .map(|line| redactor.text(line))
        .collect();
    CitedLines {
        truncated: evidence.end_line > end,
        lines: Some(lines),
        evidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(start: u64, end: u64) -> warden_protocol::Evidence {
        warden_protocol::Evidence {
            repo: "app".into(),
            commit: "a".repeat(40),
            path: "src/lib.rs".into(),
            start_line: start,
            end_line: end,
            url: None,
        }
    }

    #[test]
    fn cited_lines_are_the_range_redacted_and_bounded() {
        let redactor = Redactor::new(["hunter2-secret-value".to_string()]);
        let text = b"one\ntwo key=hunter2-secret-value\nthree\nfour\n";
        let cited = cut_lines(evidence(2, 3), Some(text), &redactor);
        let lines = cited.lines.unwrap();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("two key=") && !lines[0].contains("hunter2"));
        assert_eq!(lines[1], "three");
        assert!(!cited.truncated);

        let long: String = (1..=1000).map(|n| format!("line {n}\n")).collect();
        let cited = cut_lines(evidence(10, 900), Some(long.as_bytes()), &redactor);
        let lines = cited.lines.unwrap();
        assert_eq!(lines.len() as u64, MAX_CITED_LINES);
        assert_eq!(lines[0], "line 10");
        assert!(cited.truncated);

        let gone = cut_lines(evidence(1, 1), None, &redactor);
        assert_eq!(gone.lines, None);
    }

    #[test]
    fn only_full_object_ids_are_read() {
        let git = warden_repo::Git::locate().expect("git is installed");
        let dir = std::env::temp_dir();
        assert_eq!(read_blob(&git, &dir, "HEAD", "x"), None);
        assert_eq!(read_blob(&git, &dir, "HEAD~1:../x", "x"), None);
    }
}
