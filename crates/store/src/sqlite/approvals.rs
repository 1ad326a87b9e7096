//! [`ApprovalStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ApprovalStore for SqliteStore {
    fn create_approval(
        &self,
        approval: NewApproval,
    ) -> BoxFuture<'_, Result<Approval, StoreError>> {
        self.write(move |conn, now| {
            task_status(conn, &approval.task)?;
            if load_approval(conn, &approval.id)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "approval",
                    id: approval.id,
                });
            }
            let created = conn
                .prepare_cached(&format!(
                    "INSERT INTO approvals (id, task_id, kind, subject_hash, status, created_at_ms)
                     VALUES (?1, ?2, ?3, ?4, 'pending', ?5) RETURNING {APPROVAL_COLUMNS}"
                ))
                .db()?
                .query_row(
                    params![
                        approval.id,
                        approval.task.as_str(),
                        approval.kind,
                        approval.subject_hash,
                        now
                    ],
                    read_approval,
                )
                .db()?
                .decode()?;
            Ok(created)
        })
    }

    fn get_approval<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Approval>, StoreError>> {
        let id = id.to_string();
        self.read(move |conn| load_approval(conn, &id))
    }

    fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> BoxFuture<'_, Result<Vec<Approval>, StoreError>> {
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE (?1 IS NULL OR status = ?1)
                     ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement
                .query_map([status.map(ApprovalStatus::as_str)], read_approval)
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
        decision: Decision,
        decided_by: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        let id = id.to_string();
        let subject_hash = subject_hash.to_string();
        let decided_by = decided_by.to_string();
        self.write(move |conn, now| {
            let approval = load_approval(conn, &id)?.ok_or_else(|| not_found("approval", &id))?;
            check_approval(&approval, &subject_hash, ApprovalStatus::Pending)?;
            let to = decided_status(decision);
            let decided = conn
                .prepare_cached(&format!(
                    "UPDATE approvals SET status = ?2, decided_by = ?3, decided_at_ms = ?4
                     WHERE id = ?1 RETURNING {APPROVAL_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, to.as_str(), decided_by, now], read_approval)
                .db()?
                .decode()?;
            Ok(decided)
        })
    }

    fn consume_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        let id = id.to_string();
        let subject_hash = subject_hash.to_string();
        self.write(move |conn, now| {
            let approval = load_approval(conn, &id)?.ok_or_else(|| not_found("approval", &id))?;
            check_approval(&approval, &subject_hash, ApprovalStatus::Approved)?;
            let consumed = conn
                .prepare_cached(&format!(
                    "UPDATE approvals SET status = 'consumed', consumed_at_ms = ?2
                     WHERE id = ?1 RETURNING {APPROVAL_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, now], read_approval)
                .db()?
                .decode()?;
            Ok(consumed)
        })
    }
}

fn read_approval(row: &Row<'_>) -> rusqlite::Result<RawApproval> {
    Ok(RawApproval {
        id: row.get("id")?,
        task_id: row.get("task_id")?,
        kind: row.get("kind")?,
        subject_hash: row.get("subject_hash")?,
        status: row.get("status")?,
        created_at_ms: row.get("created_at_ms")?,
        decided_by: row.get("decided_by")?,
        decided_at_ms: row.get("decided_at_ms")?,
        consumed_at_ms: row.get("consumed_at_ms")?,
    })
}

fn load_approval(conn: &Connection, id: &str) -> Result<Option<Approval>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"
    ))
    .db()?
    .query_row([id], read_approval)
    .optional()
    .db()?
    .map(RawApproval::decode)
    .transpose()
}
