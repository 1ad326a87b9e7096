//! Upgrades from every earlier Postgres schema (the SQLite half is `tests/upgrade.rs`): a
//! schema as each earlier version of Warden left it — the migrations up to that version,
//! holding the rows today's Warden writes in the columns that version had — opens with today's
//! Warden, which migrates it to the latest version and reads the old rows back unchanged.
//! Skipped without `WARDEN_TEST_POSTGRES_URL` (failing instead when `WARDEN_TEST_REQUIRE`
//! lists `postgres`, as CI does).

use warden_protocol::{TaskId, TaskKind};
use warden_store::prelude::*;
use warden_store::{NewTask, PostgresStore, TaskRepo};

use super::harness::{admin_client, PgSchema};

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

/// The base tables of `schema` in creation order (parents before the tables that refer to
/// them), without `schema_version`.
async fn tables(client: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    client
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname <> 'schema_version' \
             ORDER BY c.oid",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

async fn columns(client: &tokio_postgres::Client, schema: &str, table: &str) -> Vec<String> {
    client
        .query(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
            &[&schema, &table],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn every_earlier_postgres_schema_opens_migrated_with_its_rows() {
    let Some(url) = warden_test_support::postgres::url() else {
        return;
    };
    let migrations = warden_store::postgres_migrations();
    let latest = migrations.last().unwrap().0;
    assert!(latest >= 2, "nothing to upgrade from");
    let admin = admin_client(&url).await;

    // What today's Warden writes: a question, and a change that follows it up.
    let reference = PgSchema::create(&url).await;
    let store = PostgresStore::connect(&reference.store_url())
        .await
        .unwrap();
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
    let written = tables(&admin, &reference.name).await;
    assert!(written.iter().any(|t| t == "tasks"), "{written:?}");

    for version in 1..latest {
        // The schema as the Warden of `version` left it, holding those rows.
        let old = PgSchema::create(&url).await;
        let mut sql = format!(
            "SET search_path TO {}; CREATE TABLE schema_version (version BIGINT PRIMARY KEY, \
             applied_at_ms BIGINT NOT NULL);",
            old.name
        );
        for (number, migration) in migrations.iter().filter(|(n, _)| *n <= version) {
            sql.push_str(migration);
            sql.push_str(&format!(
                ";\nINSERT INTO schema_version (version, applied_at_ms) VALUES ({number}, 0);\n"
            ));
        }
        admin
            .batch_execute(&format!("BEGIN; {sql} COMMIT; SET search_path TO DEFAULT"))
            .await
            .unwrap_or_else(|e| panic!("v{version}: {:?}", e.as_db_error()));
        for table in tables(&admin, &old.name).await {
            let then = columns(&admin, &old.name, &table).await;
            let now = columns(&admin, &reference.name, &table).await;
            let kept: Vec<String> = then
                .iter()
                .filter(|c| now.contains(c))
                .map(|c| format!("\"{c}\""))
                .collect();
            if kept.is_empty() {
                continue;
            }
            let kept = kept.join(", ");
            admin
                .batch_execute(&format!(
                    // Rows a migration seeds itself (counters) are already there.
                    "INSERT INTO {old}.\"{table}\" ({kept}) SELECT {kept} FROM {new}.\"{table}\" \
                     ON CONFLICT DO NOTHING",
                    old = old.name,
                    new = reference.name
                ))
                .await
                .unwrap_or_else(|e| panic!("v{version}: {table}: {:?}", e.as_db_error()));
        }

        // Today's Warden opens it: migrated to the latest schema, every task as it was.
        let store = PostgresStore::connect(&old.store_url())
            .await
            .unwrap_or_else(|e| panic!("a version {version} schema does not open: {e}"));
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
        let migrated: i64 = admin
            .query_one(
                &format!("SELECT MAX(version) FROM {}.schema_version", old.name),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(migrated, latest, "v{version} was not migrated");
    }
}
