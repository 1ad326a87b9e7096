//! Upgrades from every earlier schema: a database as each earlier version of Warden left it —
//! the migrations up to that version, holding the rows today's Warden writes in the columns that
//! version had — opens with today's Warden, which migrates it to the latest schema and reads the
//! old rows back unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rusqlite::types::Value;
use rusqlite::Connection;
use warden_protocol::{TaskId, TaskKind};
use warden_store::prelude::*;
use warden_store::{NewTask, SqliteStore, TaskRepo};

/// Every user table's rows: table → (columns, rows), in creation order.
type Tables = Vec<(String, Vec<String>, Vec<Vec<Value>>)>;

fn tables(conn: &Connection) -> Tables {
    let names: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             AND name != 'schema_version' ORDER BY rowid",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    names
        .into_iter()
        .map(|name| {
            let columns = columns(conn, &name);
            let mut statement = conn.prepare(&format!("SELECT * FROM \"{name}\"")).unwrap();
            let rows = statement
                .query_map([], |row| {
                    (0..columns.len())
                        .map(|i| row.get::<_, Value>(i))
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (name, columns, rows)
        })
        .collect()
}

fn columns(conn: &Connection, table: &str) -> Vec<String> {
    conn.prepare(&format!("PRAGMA table_info(\"{table}\")"))
        .unwrap()
        .query_map([], |row| row.get::<_, String>(1))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn new_task(id: &str, kind: TaskKind, follow_up_to: Option<TaskId>) -> NewTask {
    NewTask {
        id: TaskId::from_ulid(id).unwrap(),
        kind,
        owner: "alice".into(),
        prompt: format!("{kind:?} task {id}"),
        repos: vec![TaskRepo::named("app")],
        priority: 3,
        follow_up_to,
        retry_of: None,
        metadata: serde_json::json!({"source": "upgrade-test"}),
        callback_url: None,
    }
}

#[tokio::test]
async fn every_earlier_schema_opens_migrated_with_its_rows() {
    let migrations = warden_store::sqlite_migrations();
    let latest = migrations.last().unwrap().0;
    assert!(latest >= 2, "nothing to upgrade from");

    // What today's Warden writes: a question, and a change that follows it up.
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference.db");
    let store = SqliteStore::open(&reference).await.unwrap();
    let question = new_task("01M91PHK0K12B23ME9K79A4G8H", TaskKind::Question, None);
    let change = new_task(
        "01M91PHK0K12B23ME9K79A4G8J",
        TaskKind::Change,
        Some(question.id.clone()),
    );
    for task in [question.clone(), change.clone()] {
        store.create_task(task, None).await.unwrap();
    }
    let mut expected = Vec::new();
    for id in [&question.id, &change.id] {
        expected.push((id.clone(), store.get_task(id).await.unwrap().unwrap()));
    }
    drop(store);
    let rows = tables(&Connection::open(&reference).unwrap());
    assert!(rows
        .iter()
        .any(|(name, _, rows)| name == "tasks" && rows.len() == 2));

    for version in 1..latest {
        // The database as the Warden of `version` left it, holding those rows.
        let path = dir.path().join(format!("v{version}.db"));
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY NOT NULL, \
             applied_at_ms INTEGER NOT NULL) STRICT",
        )
        .unwrap();
        for (number, sql) in migrations.iter().filter(|(n, _)| *n <= version) {
            conn.execute_batch(sql).unwrap();
            conn.execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, 0)",
                [number],
            )
            .unwrap();
        }
        for (table, all, table_rows) in &rows {
            let then = columns(&conn, table);
            if then.is_empty() || table_rows.is_empty() {
                continue;
            }
            let kept: Vec<usize> = (0..all.len()).filter(|&i| then.contains(&all[i])).collect();
            let names: Vec<String> = kept.iter().map(|&i| format!("\"{}\"", all[i])).collect();
            let marks: Vec<String> = (1..=kept.len()).map(|i| format!("?{i}")).collect();
            let sql = format!(
                "INSERT INTO \"{table}\" ({}) VALUES ({})",
                names.join(", "),
                marks.join(", ")
            );
            for row in table_rows {
                let values: Vec<&Value> = kept.iter().map(|&i| &row[i]).collect();
                conn.execute(&sql, rusqlite::params_from_iter(values))
                    .unwrap_or_else(|e| panic!("v{version}: {table}: {e}"));
            }
        }
        drop(conn);

        // Today's Warden opens it: migrated to the latest schema, every task as it was.
        let store = SqliteStore::open(&path)
            .await
            .unwrap_or_else(|e| panic!("a version {version} database does not open: {e}"));
        for (id, task) in &expected {
            let read = store
                .get_task(id)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("v{version}: task {id} is gone"));
            assert_eq!(read.prompt, task.prompt, "v{version}");
            assert_eq!(read.status, task.status, "v{version}");
            assert_eq!(read.kind, task.kind, "v{version}");
            assert_eq!(read.owner, task.owner, "v{version}");
            assert_eq!(read.follow_up_to, task.follow_up_to, "v{version}");
            assert_eq!(read.metadata, task.metadata, "v{version}");
        }
        drop(store);
        let versions: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT MAX(version) FROM schema_version", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(versions, latest, "v{version} was not migrated");
    }
}
