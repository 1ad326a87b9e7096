//! [`RepoRegistry`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl RepoRegistry for PostgresStore {
    fn register_repo(&self, repo: NewRepo) -> BoxFuture<'_, Result<Repository, StoreError>> {
        Box::pin(self.register_repo_impl(repo))
    }

    fn get_repo<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Repository>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!("SELECT {REPO_COLUMNS} FROM repos WHERE name = $1"),
                &[&name],
            )
            .await?
            .as_ref()
            .map(read_repo)
            .transpose()
        })
    }

    fn list_repos(&self) -> BoxFuture<'_, Result<Vec<Repository>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!("SELECT {REPO_COLUMNS} FROM repos ORDER BY name"),
                &[],
            )
            .await?
            .iter()
            .map(read_repo)
            .collect()
        })
    }
}

impl PostgresStore {
    async fn register_repo_impl(&self, repo: NewRepo) -> Result<Repository, StoreError> {
        let now = self.now();
        let checks = serde_json::to_string(&repo.checks)?;
        let mounts = serde_json::to_string(&repo.mounts)?;
        let prepare = serde_json::to_string(&repo.prepare)?;
        let client = self.client().await?;
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO repos (name, source, branch, checks, created_by, created_at_ms,
                                    mounts, prepare)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING
                 RETURNING {REPO_COLUMNS}"
            ),
            &[
                &repo.name,
                &repo.source,
                &repo.branch,
                &checks,
                &repo.created_by,
                &now,
                &mounts,
                &prepare,
            ],
        )
        .await?;
        match row {
            Some(row) => read_repo(&row),
            None => Err(StoreError::AlreadyExists {
                what: "repository",
                id: repo.name,
            }),
        }
    }
}

fn read_repo(row: &Row) -> Result<Repository, StoreError> {
    RawRepo {
        name: get(row, "name")?,
        source: get(row, "source")?,
        branch: get(row, "branch")?,
        checks: get(row, "checks")?,
        created_by: get(row, "created_by")?,
        created_at_ms: get(row, "created_at_ms")?,
        mounts: get(row, "mounts")?,
        prepare: get(row, "prepare")?,
    }
    .decode()
}
