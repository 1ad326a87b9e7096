//! [`RepoRegistry`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl RepoRegistry for SqliteStore {
    fn register_repo(&self, repo: NewRepo) -> BoxFuture<'_, Result<Repository, StoreError>> {
        self.write(move |conn, now| {
            if load_repo(conn, &repo.name)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "repository",
                    id: repo.name,
                });
            }
            conn.prepare_cached(
                "INSERT INTO repos (name, source, branch, checks, created_by, created_at_ms,
                                    mounts, prepare)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .db()?
            .execute(params![
                repo.name,
                repo.source,
                repo.branch,
                serde_json::to_string(&repo.checks)?,
                repo.created_by,
                now,
                serde_json::to_string(&repo.mounts)?,
                serde_json::to_string(&repo.prepare)?
            ])
            .db()?;
            load_repo(conn, &repo.name)?.ok_or_else(|| not_found("repository", &repo.name))
        })
    }

    fn get_repo<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Repository>, StoreError>> {
        let name = name.to_string();
        self.read(move |conn| load_repo(conn, &name))
    }

    fn list_repos(&self) -> BoxFuture<'_, Result<Vec<Repository>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached(&format!("SELECT {REPO_COLUMNS} FROM repos ORDER BY name"))
                .db()?;
            let rows = statement.query_map([], read_repo).db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }
}

fn read_repo(row: &Row<'_>) -> rusqlite::Result<RawRepo> {
    Ok(RawRepo {
        name: row.get("name")?,
        source: row.get("source")?,
        branch: row.get("branch")?,
        checks: row.get("checks")?,
        created_by: row.get("created_by")?,
        created_at_ms: row.get("created_at_ms")?,
        mounts: row.get("mounts")?,
        prepare: row.get("prepare")?,
    })
}

fn load_repo(conn: &Connection, name: &str) -> Result<Option<Repository>, StoreError> {
    conn.prepare_cached(&format!("SELECT {REPO_COLUMNS} FROM repos WHERE name = ?1"))
        .db()?
        .query_row([name], read_repo)
        .optional()
        .db()?
        .map(RawRepo::decode)
        .transpose()
}
