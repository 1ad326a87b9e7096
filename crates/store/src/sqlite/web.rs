//! [`WebAccountStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl WebAccountStore for SqliteStore {
    fn put_web_user<'a>(
        &'a self,
        name: &'a str,
        role: &'a str,
        password_hash: &'a str,
    ) -> BoxFuture<'a, Result<WebUser, StoreError>> {
        let (name, role, hash) = (
            name.to_string(),
            role.to_string(),
            password_hash.to_string(),
        );
        self.write(move |conn, now| {
            let user = conn
                .prepare_cached(&format!(
                    "INSERT INTO web_users (name, role, password_hash, created_at_ms, updated_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?4)
                     ON CONFLICT (name) DO UPDATE SET role = excluded.role,
                         password_hash = excluded.password_hash,
                         updated_at_ms = excluded.updated_at_ms
                     RETURNING {WEB_USER_COLUMNS}"
                ))
                .db()?
                .query_row(params![name, role, hash, now], read_web_user)
                .db()?;
            revoke_password_sessions(conn, &name, now)?;
            Ok(user)
        })
    }

    fn find_web_user<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebUser>, StoreError>> {
        let name = name.to_string();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {WEB_USER_COLUMNS} FROM web_users WHERE name = ?1"
            ))
            .db()?
            .query_row([name], read_web_user)
            .optional()
            .db()
        })
    }

    fn list_web_users(&self) -> BoxFuture<'_, Result<Vec<WebUser>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {WEB_USER_COLUMNS} FROM web_users ORDER BY name"
                ))
                .db()?;
            let rows = statement.query_map([], read_web_user).db()?;
            rows.map(|row| row.db()).collect()
        })
    }

    fn delete_web_user<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let name = name.to_string();
        self.write(move |conn, now| {
            let deleted = conn
                .prepare_cached("DELETE FROM web_users WHERE name = ?1")
                .db()?
                .execute([&name])
                .db()?;
            if deleted == 0 {
                return Err(not_found("web user", &name));
            }
            revoke_password_sessions(conn, &name, now)
        })
    }

    fn create_web_session(
        &self,
        session: NewWebSession,
    ) -> BoxFuture<'_, Result<WebSession, StoreError>> {
        self.write(move |conn, now| {
            conn.prepare_cached(
                "DELETE FROM web_sessions WHERE expires_at_ms < ?1 OR revoked_at_ms < ?1",
            )
            .db()?
            .execute([now.saturating_sub(WEB_SESSION_RETENTION_MS)])
            .db()?;
            let taken = conn
                .prepare_cached("SELECT 1 FROM web_sessions WHERE id = ?1 OR digest = ?2")
                .db()?
                .exists(params![session.id, session.digest])
                .db()?;
            if taken {
                return Err(StoreError::AlreadyExists {
                    what: "web session",
                    id: session.id,
                });
            }
            let expires = now.saturating_add(duration_ms(session.lifetime));
            conn.prepare_cached(&format!(
                "INSERT INTO web_sessions (id, digest, name, role_at_sign_in, credential, address,
                     user_agent, created_at_ms, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING {WEB_SESSION_COLUMNS}"
            ))
            .db()?
            .query_row(
                params![
                    session.id,
                    session.digest,
                    session.name,
                    session.role_at_sign_in,
                    session.credential,
                    session.address,
                    session.user_agent,
                    now,
                    expires
                ],
                read_web_session,
            )
            .db()
        })
    }

    fn find_web_session<'a>(
        &'a self,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Option<WebSession>, StoreError>> {
        let digest = digest.to_string();
        let now = self.inner.clock.now_ms();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                 WHERE digest = ?1 AND revoked_at_ms IS NULL AND expires_at_ms > ?2"
            ))
            .db()?
            .query_row(params![digest, now], read_web_session)
            .optional()
            .db()
        })
    }

    fn list_web_sessions<'a>(
        &'a self,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<WebSession>, StoreError>> {
        let name = name.map(str::to_string);
        let now = self.inner.clock.now_ms();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {WEB_SESSION_COLUMNS} FROM web_sessions
                     WHERE revoked_at_ms IS NULL AND expires_at_ms > ?1
                         AND (?2 IS NULL OR name = ?2)
                     ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement
                .query_map(params![now, name], read_web_session)
                .db()?;
            rows.map(|row| row.db()).collect()
        })
    }

    fn revoke_web_session<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<WebSession, StoreError>> {
        let id = id.to_string();
        self.write(move |conn, now| {
            conn.prepare_cached(&format!(
                "UPDATE web_sessions SET revoked_at_ms = COALESCE(revoked_at_ms, ?2)
                 WHERE id = ?1 RETURNING {WEB_SESSION_COLUMNS}"
            ))
            .db()?
            .query_row(params![id, now], read_web_session)
            .optional()
            .db()?
            .ok_or_else(|| not_found("web session", &id))
        })
    }
}

fn read_web_user(row: &Row<'_>) -> rusqlite::Result<WebUser> {
    Ok(RawWebUser {
        name: row.get("name")?,
        role: row.get("role")?,
        password_hash: row.get("password_hash")?,
        created_at_ms: row.get("created_at_ms")?,
        updated_at_ms: row.get("updated_at_ms")?,
    }
    .decode())
}

fn read_web_session(row: &Row<'_>) -> rusqlite::Result<WebSession> {
    Ok(RawWebSession {
        id: row.get("id")?,
        digest: row.get("digest")?,
        name: row.get("name")?,
        role_at_sign_in: row.get("role_at_sign_in")?,
        credential: row.get("credential")?,
        address: row.get("address")?,
        user_agent: row.get("user_agent")?,
        created_at_ms: row.get("created_at_ms")?,
        expires_at_ms: row.get("expires_at_ms")?,
        revoked_at_ms: row.get("revoked_at_ms")?,
    }
    .decode())
}

/// Revokes the unrevoked sessions `name` signed in with a password.
fn revoke_password_sessions(conn: &Connection, name: &str, now: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE web_sessions SET revoked_at_ms = ?3
         WHERE name = ?1 AND credential = ?2 AND revoked_at_ms IS NULL",
    )
    .db()?
    .execute(params![name, WEB_CREDENTIAL_PASSWORD, now])
    .db()?;
    Ok(())
}
