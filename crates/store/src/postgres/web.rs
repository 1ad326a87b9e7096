//! [`WebAccountStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl WebAccountStore for PostgresStore {
    fn put_web_user<'a>(
        &'a self,
        name: &'a str,
        role: &'a str,
        password_hash: &'a str,
    ) -> BoxFuture<'a, Result<WebUser, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let row = query_one(
                &tx,
                &format!(
                    "INSERT INTO web_users (name, role, password_hash, created_at_ms, updated_at_ms)
                     VALUES ($1, $2, $3, $4, $4)
                     ON CONFLICT (name) DO UPDATE SET role = excluded.role,
                         password_hash = excluded.password_hash,
                         updated_at_ms = excluded.updated_at_ms
                     RETURNING {WEB_USER_COLUMNS}"
                ),
                &[&name, &role, &password_hash, &now],
            )
            .await?;
            let user = read_web_user(&row)?;
            revoke_password_sessions(&tx, name, now).await?;
            tx.commit().await.map_err(pg_error)?;
            Ok(user)
        })
    }

    fn find_web_user<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebUser>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!("SELECT {WEB_USER_COLUMNS} FROM web_users WHERE name = $1"),
                &[&name],
            )
            .await?
            .as_ref()
            .map(read_web_user)
            .transpose()
        })
    }

    fn list_web_users(&self) -> BoxFuture<'_, Result<Vec<WebUser>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!("SELECT {WEB_USER_COLUMNS} FROM web_users ORDER BY name"),
                &[],
            )
            .await?
            .iter()
            .map(read_web_user)
            .collect()
        })
    }

    fn delete_web_user<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let deleted = execute(&tx, "DELETE FROM web_users WHERE name = $1", &[&name]).await?;
            if deleted == 0 {
                return Err(not_found("web user", name));
            }
            revoke_password_sessions(&tx, name, now).await?;
            tx.commit().await.map_err(pg_error)
        })
    }

    fn create_web_session(
        &self,
        session: NewWebSession,
    ) -> BoxFuture<'_, Result<WebSession, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let expires = now.saturating_add(duration_ms(session.lifetime));
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            execute(
                &tx,
                "DELETE FROM web_sessions WHERE expires_at_ms < $1 OR revoked_at_ms < $1",
                &[&now.saturating_sub(WEB_SESSION_RETENTION_MS)],
            )
            .await?;
            // No conflict target: a taken id and a taken digest both insert nothing.
            let row = query_opt(
                &tx,
                &format!(
                    "INSERT INTO web_sessions (id, digest, name, role_at_sign_in, credential,
                         address, user_agent, created_at_ms, expires_at_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING
                     RETURNING {WEB_SESSION_COLUMNS}"
                ),
                &[
                    &session.id,
                    &session.digest,
                    &session.name,
                    &session.role_at_sign_in,
                    &session.credential,
                    &session.address,
                    &session.user_agent,
                    &now,
                    &expires,
                ],
            )
            .await?;
            let Some(row) = row else {
                return Err(StoreError::AlreadyExists {
                    what: "web session",
                    id: session.id,
                });
            };
            let stored = read_web_session(&row)?;
            tx.commit().await.map_err(pg_error)?;
            Ok(stored)
        })
    }

    fn find_web_session<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebSession>, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                     WHERE digest = $1 AND revoked_at_ms IS NULL AND expires_at_ms > $2"
                ),
                &[&digest, &now],
            )
            .await?
            .as_ref()
            .map(read_web_session)
            .transpose()
        })
    }

    fn list_web_sessions<'a>(
        &'a self,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<WebSession>, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query(
                &*client,
                &format!(
                    "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                     WHERE revoked_at_ms IS NULL AND expires_at_ms > $1
                         AND ($2::TEXT IS NULL OR name = $2)
                     ORDER BY created_at_ms, id"
                ),
                &[&now, &name],
            )
            .await?
            .iter()
            .map(read_web_session)
            .collect()
        })
    }

    fn revoke_web_session<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<WebSession, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query_opt(
                &*client,
                &format!(
                    "UPDATE web_sessions SET revoked_at_ms = COALESCE(revoked_at_ms, $2)
                     WHERE id = $1 RETURNING {WEB_SESSION_COLUMNS}"
                ),
                &[&id, &now],
            )
            .await?
            .as_ref()
            .map(read_web_session)
            .transpose()?
            .ok_or_else(|| not_found("web session", id))
        })
    }
}

fn read_web_user(row: &Row) -> Result<WebUser, StoreError> {
    Ok(RawWebUser {
        name: get(row, "name")?,
        role: get(row, "role")?,
        password_hash: get(row, "password_hash")?,
        created_at_ms: get(row, "created_at_ms")?,
        updated_at_ms: get(row, "updated_at_ms")?,
    }
    .decode())
}

fn read_web_session(row: &Row) -> Result<WebSession, StoreError> {
    Ok(RawWebSession {
        id: get(row, "id")?,
        digest: get(row, "digest")?,
        name: get(row, "name")?,
        role_at_sign_in: get(row, "role_at_sign_in")?,
        credential: get(row, "credential")?,
        address: get(row, "address")?,
        user_agent: get(row, "user_agent")?,
        created_at_ms: get(row, "created_at_ms")?,
        expires_at_ms: get(row, "expires_at_ms")?,
        revoked_at_ms: get(row, "revoked_at_ms")?,
    }
    .decode())
}

/// Revokes the unrevoked sessions `name` signed in with a password.
async fn revoke_password_sessions(c: &dyn Conn, name: &str, now: i64) -> Result<(), StoreError> {
    execute(
        c,
        "UPDATE web_sessions SET revoked_at_ms = $3
         WHERE name = $1 AND credential = $2 AND revoked_at_ms IS NULL",
        &[&name, &WEB_CREDENTIAL_PASSWORD, &now],
    )
    .await?;
    Ok(())
}
