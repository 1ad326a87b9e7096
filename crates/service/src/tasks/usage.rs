//! Spend as a principal may see it: the ledger summed per UTC day, task and model (their own
//! tasks; everyone's for admins), and per repository, the view the web console shows.

use warden_store::{Spend, UsageQuery, UsageSummary};

use super::{Principal, ServiceError, TaskService};

/// Tasks whose repository a usage report looks up at most; the spend of the rest is summed
/// under [`OTHER_TASKS`].
pub const MAX_REPO_LOOKUPS: usize = 1000;
/// The `by_repo` key of spend whose tasks were not looked up.
pub const OTHER_TASKS: &str = "(older tasks)";

impl TaskService {
    /// The spend `principal` may see, recorded at or after `since_ms` when given.
    pub async fn usage(
        &self,
        principal: &Principal,
        since_ms: Option<i64>,
    ) -> Result<UsageSummary, ServiceError> {
        Ok(self
            .store
            .usage_summary(UsageQuery {
                owner: principal.owner_scope().map(str::to_string),
                since_ms,
            })
            .await?)
    }

    /// `summary`'s spend per repository (a task of several repositories counts under their
    /// names joined with `+`), sorted by repository. Looks up at most [`MAX_REPO_LOOKUPS`]
    /// tasks, newest first.
    pub async fn spend_by_repo(
        &self,
        summary: &UsageSummary,
    ) -> Result<Vec<(String, Spend)>, ServiceError> {
        let mut by_repo: std::collections::BTreeMap<String, Spend> = Default::default();
        // Newest tasks first: their ids sort by creation time.
        for (index, (task, spend)) in summary.by_task.iter().rev().enumerate() {
            let key = if index < MAX_REPO_LOOKUPS {
                match self.store.get_task(task).await? {
                    Some(task) => task
                        .repos
                        .iter()
                        .map(|r| r.name.as_str())
                        .collect::<Vec<_>>()
                        .join("+"),
                    None => OTHER_TASKS.to_string(),
                }
            } else {
                OTHER_TASKS.to_string()
            };
            by_repo.entry(key).or_default().add(spend);
        }
        Ok(by_repo.into_iter().collect())
    }
}
