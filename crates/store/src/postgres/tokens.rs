//! [`TokenStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl TokenStore for PostgresStore {
    fn create_api_token(&self, token: NewApiToken) -> BoxFuture<'_, Result<ApiToken, StoreError>> {
        Box::pin(self.create_api_token_impl(token))
    }

    fn find_api_token<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiToken>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "SELECT {API_TOKEN_COLUMNS} FROM api_tokens
                     WHERE digest = $1 AND revoked_at_ms IS NULL"
                ),
                &[&digest],
            )
            .await?
            .as_ref()
            .map(read_api_token)
            .transpose()
        })
    }

    fn list_api_tokens(&self) -> BoxFuture<'_, Result<Vec<ApiToken>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!("SELECT {API_TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at_ms, id"),
                &[],
            )
            .await?
            .iter()
            .map(read_api_token)
            .collect()
        })
    }

    fn revoke_api_token<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ApiToken, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "UPDATE api_tokens SET revoked_at_ms = COALESCE(revoked_at_ms, $2)
                     WHERE id = $1 RETURNING {API_TOKEN_COLUMNS}"
                ),
                &[&id, &now],
            )
            .await?
            .as_ref()
            .map(read_api_token)
            .transpose()?
            .ok_or_else(|| not_found("api token", id))
        })
    }
}

impl PostgresStore {
    async fn create_api_token_impl(&self, token: NewApiToken) -> Result<ApiToken, StoreError> {
        let now = self.now();
        let client = self.client().await?;
        // No conflict target: a taken id and a taken digest both insert nothing.
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO api_tokens (id, name, role, digest, created_by, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
                 RETURNING {API_TOKEN_COLUMNS}"
            ),
            &[
                &token.id,
                &token.name,
                &token.role,
                &token.digest,
                &token.created_by,
                &now,
            ],
        )
        .await?;
        match row {
            Some(row) => read_api_token(&row),
            None => Err(StoreError::AlreadyExists {
                what: "api token",
                id: token.id,
            }),
        }
    }
}

fn read_api_token(row: &Row) -> Result<ApiToken, StoreError> {
    Ok(RawApiToken {
        id: get(row, "id")?,
        name: get(row, "name")?,
        role: get(row, "role")?,
        digest: get(row, "digest")?,
        created_by: get(row, "created_by")?,
        created_at_ms: get(row, "created_at_ms")?,
        revoked_at_ms: get(row, "revoked_at_ms")?,
    }
    .decode())
}
