//! [`TokenStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl TokenStore for SqliteStore {
    fn create_api_token(&self, token: NewApiToken) -> BoxFuture<'_, Result<ApiToken, StoreError>> {
        self.write(move |conn, now| {
            let taken = conn
                .prepare_cached("SELECT 1 FROM api_tokens WHERE id = ?1 OR digest = ?2")
                .db()?
                .exists(params![token.id, token.digest])
                .db()?;
            if taken {
                return Err(StoreError::AlreadyExists {
                    what: "api token",
                    id: token.id,
                });
            }
            conn.prepare_cached(&format!(
                "INSERT INTO api_tokens (id, name, role, digest, created_by, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING {API_TOKEN_COLUMNS}"
            ))
            .db()?
            .query_row(
                params![
                    token.id,
                    token.name,
                    token.role,
                    token.digest,
                    token.created_by,
                    now
                ],
                read_api_token,
            )
            .db()
            .map(RawApiToken::decode)
        })
    }

    fn find_api_token<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiToken>, StoreError>> {
        let digest = digest.to_string();
        self.read(move |conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {API_TOKEN_COLUMNS} FROM api_tokens
                     WHERE digest = ?1 AND revoked_at_ms IS NULL"
                ))
                .db()?
                .query_row([digest], read_api_token)
                .optional()
                .db()?
                .map(RawApiToken::decode))
        })
    }

    fn list_api_tokens(&self) -> BoxFuture<'_, Result<Vec<ApiToken>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {API_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement.query_map([], read_api_token).db()?;
            rows.map(|row| Ok(row.db()?.decode())).collect()
        })
    }

    fn revoke_api_token<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApiToken, StoreError>> {
        let id = id.to_string();
        self.write(move |conn, now| {
            conn.prepare_cached(&format!(
                "UPDATE api_tokens SET revoked_at_ms = COALESCE(revoked_at_ms, ?2)
                 WHERE id = ?1 RETURNING {API_TOKEN_COLUMNS}"
            ))
            .db()?
            .query_row(params![id, now], read_api_token)
            .optional()
            .db()?
            .map(RawApiToken::decode)
            .ok_or_else(|| not_found("api token", &id))
        })
    }
}

fn read_api_token(row: &Row<'_>) -> rusqlite::Result<RawApiToken> {
    Ok(RawApiToken {
        id: row.get("id")?,
        name: row.get("name")?,
        role: row.get("role")?,
        digest: row.get("digest")?,
        created_by: row.get("created_by")?,
        created_at_ms: row.get("created_at_ms")?,
        revoked_at_ms: row.get("revoked_at_ms")?,
    })
}
