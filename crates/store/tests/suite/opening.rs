//! Opening stores: choosing the backend by URL, migrations recorded once and refused when the
//! database is newer, append-only tables enforced by the database itself, and a corrupt SQLite
//! file moved aside (never deleted) with a fresh database in its place.

use warden_protocol::{TaskKind, TaskStatus};
use warden_store::{ManualClock, SqliteStore, StoreError, StoreOptions};

use super::harness::{admin_client, Backend, Fixture, START_MS};

/// Runs raw SQL against the fixture's database; returns the first column of each row as text.
async fn raw(f: &Fixture, sql: &str) -> Result<Vec<String>, String> {
    match f.backend {
        Backend::Sqlite => {
            let path = f.sqlite_path().unwrap();
            let sql = sql.to_string();
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(path).unwrap();
                let mut statement = conn.prepare(&sql).map_err(|e| e.to_string())?;
                let rows = statement
                    .query_map([], |row| {
                        row.get::<_, rusqlite::types::Value>(0)
                            .map(|v| format!("{v:?}"))
                    })
                    .map_err(|e| e.to_string())?;
                rows.collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap()
        }
        Backend::Postgres => {
            let client = admin_client(&f.postgres_url().unwrap()).await;
            let rows = client.simple_query(sql).await.map_err(|e| {
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |db| db.message().to_string())
            })?;
            Ok(rows
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some(row.get(0).unwrap_or("NULL").to_string())
                    }
                    _ => None,
                })
                .collect())
        }
    }
}

async fn migrations_apply_once_and_newer_schemas_are_refused(f: &Fixture) {
    // Opening again (another process, another machine) finds nothing to do.
    let again = f.another_handle().await;
    again.check_integrity().await.unwrap();
    let versions = raw(f, "SELECT version FROM schema_version ORDER BY version")
        .await
        .unwrap();
    assert_eq!(
        versions,
        [1, 2, 3, 4, 5, 6, 7, 8]
            .map(|v| match f.backend {
                Backend::Sqlite => format!("Integer({v})"),
                Backend::Postgres => v.to_string(),
            })
            .to_vec()
    );
    raw(
        f,
        "INSERT INTO schema_version (version, applied_at_ms) VALUES (99, 0)",
    )
    .await
    .unwrap();
    let url = match f.backend {
        Backend::Sqlite => format!("sqlite://{}", f.sqlite_path().unwrap().display()),
        Backend::Postgres => f.postgres_url().unwrap(),
    };
    let refused = warden_store::open(&url).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::SchemaTooNew {
                found: 99,
                supported: 8
            })
        ),
        "{:?}",
        refused.err()
    );
    raw(f, "DELETE FROM schema_version WHERE version = 99")
        .await
        .unwrap();
}

async fn the_ledger_and_journal_are_append_only(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app"]).await.id;
    let claim = f.claim("w").await.unwrap();
    f.store
        .record_usage(warden_store::UsageEntry {
            task: task.clone(),
            run_number: Some(1),
            model: "m".into(),
            role: "agent".into(),
            input_tokens: 1,
            cached_input_tokens: 0,
            output_tokens: 1,
            cost_micro_usd: Some(1),
        })
        .await
        .unwrap();
    let entry =
        warden_store::JournalEntry::next(None, 1, "run_started", serde_json::json!({})).unwrap();
    f.store.append_journal(&claim.run(), entry).await.unwrap();
    for sql in [
        "UPDATE usage_ledger SET input_tokens = 0",
        "DELETE FROM usage_ledger",
        "UPDATE journal SET payload = '{}'",
        "DELETE FROM journal",
    ] {
        let refused = raw(f, sql).await;
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("append-only")),
            "{sql}: {refused:?}"
        );
    }
    f.store
        .finish_run(&claim.run(), "w", TaskStatus::Completed, None)
        .await
        .unwrap();
}

conformance!(
    migrations_apply_once_and_newer_schemas_are_refused,
    the_ledger_and_journal_are_append_only,
);

#[tokio::test]
async fn open_chooses_the_backend_by_url() {
    for bad in ["mysql://u:secret@h/db", "sqlite://", "warden.db", ""] {
        let refused = warden_store::open(bad).await;
        match refused {
            Err(StoreError::InvalidUrl(shown)) => assert!(!shown.contains("secret"), "{shown}"),
            other => panic!("{bad}: {:?}", other.err()),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("warden.db");
    let store = warden_store::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert_eq!(store.backend(), "sqlite");
    assert!(store.notices().is_empty());
    assert!(path.exists());
    if let Some(f) = Fixture::postgres().await {
        assert_eq!(f.store.backend(), "postgres");
        let refused = warden_store::open("postgres://warden:pw@127.0.0.1:1/nothing").await;
        let err = refused.err().unwrap();
        assert!(
            err.is_retryable(),
            "a refused connection may succeed later: {err}"
        );
    }
}

async fn open_sqlite(path: &std::path::Path) -> SqliteStore {
    SqliteStore::open_with(
        path,
        StoreOptions {
            clock: std::sync::Arc::new(ManualClock::new(START_MS)),
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap()
}

/// Checks that `path` was quarantined with `original` content and a working store replaced it.
async fn assert_quarantined(path: &std::path::Path, original: &[u8]) {
    let store = open_sqlite(path).await;
    let quarantine = store
        .quarantine()
        .cloned()
        .expect("the file was quarantined");
    assert_eq!(quarantine.original, path);
    assert_eq!(
        quarantine.moved_to.file_name().unwrap().to_str().unwrap(),
        "warden.db.corrupt-20261201T000000Z"
    );
    // Moved aside, never deleted: the old bytes are still there.
    assert_eq!(std::fs::read(&quarantine.moved_to).unwrap(), original);
    let notices = warden_store::Store::notices(&store);
    assert_eq!(notices.len(), 1);
    assert!(
        notices[0].contains("corrupt") && notices[0].contains(".corrupt-"),
        "{notices:?}"
    );

    // The fresh database works.
    let store: std::sync::Arc<dyn warden_store::Store> = std::sync::Arc::new(store);
    let task = store
        .create_task(super::harness::new_task(TaskKind::Question, &["app"]), None)
        .await
        .unwrap();
    assert_eq!(task.task().status, TaskStatus::Queued);
    store.check_integrity().await.unwrap();
    drop(store);

    // Reopening the fresh one is quiet.
    let reopened = open_sqlite(path).await;
    assert!(reopened.quarantine().is_none());
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warden.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&path, &garbage).unwrap();
    assert_quarantined(&path, &garbage).await;
}

#[tokio::test]
async fn a_database_with_damaged_pages_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warden.db");
    {
        let store = open_sqlite(&path).await;
        let store: std::sync::Arc<dyn warden_store::Store> = std::sync::Arc::new(store);
        for _ in 0..200 {
            store
                .create_task(super::harness::new_task(TaskKind::Question, &["app"]), None)
                .await
                .unwrap();
        }
    }
    // Fold the WAL into the main file, then overwrite the middle of it.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 16 * 4096, "{} bytes", bytes.len());
    for byte in &mut bytes[4096 * 2..4096 * 6] {
        *byte = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    assert_quarantined(&path, &bytes).await;
}
