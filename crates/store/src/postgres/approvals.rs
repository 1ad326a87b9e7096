//! [`ApprovalStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ApprovalStore for PostgresStore {
    fn create_approval(
        &self,
        approval: NewApproval,
    ) -> BoxFuture<'_, Result<Approval, StoreError>> {
        Box::pin(self.create_approval_impl(approval))
    }

    fn get_approval<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Approval>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            load_approval(&*client, id, false).await
        })
    }

    fn list_approvals(
        &self,
        status: Option<ApprovalStatus>,
    ) -> BoxFuture<'_, Result<Vec<Approval>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let status = status.map(ApprovalStatus::as_str);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE ($1::text IS NULL OR status = $1)
                     ORDER BY created_at_ms, id"
                ),
                &[&status],
            )
            .await?;
            rows.iter().map(read_approval).collect()
        })
    }

    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
        decision: Decision,
        decided_by: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        Box::pin(self.settle_approval(
            id,
            subject_hash,
            ApprovalStatus::Pending,
            decided_status(decision),
            Some(decided_by),
        ))
    }

    fn consume_approval<'a>(
        &'a self,
        id: &'a str,
        subject_hash: &'a str,
    ) -> BoxFuture<'a, Result<Approval, StoreError>> {
        Box::pin(self.settle_approval(
            id,
            subject_hash,
            ApprovalStatus::Approved,
            ApprovalStatus::Consumed,
            None,
        ))
    }
}

impl PostgresStore {
    async fn create_approval_impl(&self, approval: NewApproval) -> Result<Approval, StoreError> {
        let now = self.now();
        let client = self.client().await?;
        require_task_exists(&*client, &approval.task).await?;
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO approvals (id, task_id, kind, subject_hash, status, created_at_ms)
                 VALUES ($1, $2, $3, $4, 'pending', $5) ON CONFLICT (id) DO NOTHING
                 RETURNING {APPROVAL_COLUMNS}"
            ),
            &[
                &approval.id,
                &approval.task.as_str(),
                &approval.kind,
                &approval.subject_hash,
                &now,
            ],
        )
        .await?;
        match row {
            Some(row) => read_approval(&row),
            None => Err(StoreError::AlreadyExists {
                what: "approval",
                id: approval.id,
            }),
        }
    }

    async fn settle_approval(
        &self,
        id: &str,
        subject_hash: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        decided_by: Option<&str>,
    ) -> Result<Approval, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let approval = load_approval(&tx, id, true)
            .await?
            .ok_or_else(|| not_found("approval", id))?;
        check_approval(&approval, subject_hash, expected)?;
        let sql = match to {
            ApprovalStatus::Consumed => format!(
                "UPDATE approvals SET status = $2, consumed_at_ms = $3 WHERE id = $1
                 RETURNING {APPROVAL_COLUMNS}"
            ),
            ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Rejected => {
                format!(
                    "UPDATE approvals SET status = $2, decided_at_ms = $3, decided_by = $4
                     WHERE id = $1 RETURNING {APPROVAL_COLUMNS}"
                )
            }
        };
        let row = match to {
            ApprovalStatus::Consumed => query_one(&tx, &sql, &[&id, &to.as_str(), &now]).await?,
            ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Rejected => {
                query_one(&tx, &sql, &[&id, &to.as_str(), &now, &decided_by]).await?
            }
        };
        let settled = read_approval(&row)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(settled)
    }
}

async fn load_approval(c: &dyn Conn, id: &str, lock: bool) -> Result<Option<Approval>, StoreError> {
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    query_opt(c, &sql, &[&id])
        .await?
        .as_ref()
        .map(read_approval)
        .transpose()
}
