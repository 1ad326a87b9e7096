//! Fixtures for the conformance suite: a store on a fresh SQLite file in a temporary directory,
//! or on a fresh Postgres schema (`test_<pid>_<random>`, dropped afterwards) of the database
//! `WARDEN_TEST_POSTGRES_URL` names, both driven by a manual clock. `conformance!` turns each
//! `async fn(&Fixture)` into one test per backend, each ending with an integrity check.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use warden_protocol::{TaskId, TaskKind};
use warden_store::{Claim, ClaimFilter, ManualClock, NewTask, Store, StoreOptions, Task, TaskRepo};

/// 2026-12-01T00:00:00Z: every fixture's clock starts here.
pub const START_MS: i64 = 1_796_083_200_000;
pub const LEASE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub clock: ManualClock,
    pub backend: Backend,
    /// Dropped after `store`, so the store's connections are closed before the place goes.
    place: Place,
}

enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(PgSchema),
}

impl Fixture {
    pub async fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(START_MS);
        let store = warden_store::open_with(
            &format!("sqlite://{}", dir.path().join("warden.db").display()),
            options(&clock),
        )
        .await
        .unwrap();
        Fixture {
            store,
            clock,
            backend: Backend::Sqlite,
            place: Place::Sqlite(dir),
        }
    }

    /// `None` (after saying so once on the real stderr) when no test database is configured.
    pub async fn postgres() -> Option<Fixture> {
        // Fails instead of skipping when CI requires Postgres (`WARDEN_TEST_REQUIRE`).
        let url = warden_test_support::postgres::url()?;
        let schema = PgSchema::create(&url).await;
        let clock = ManualClock::new(START_MS);
        let store = warden_store::open_with(&schema.store_url(), options(&clock))
            .await
            .unwrap();
        Some(Fixture {
            store,
            clock,
            backend: Backend::Postgres,
            place: Place::Postgres(schema),
        })
    }

    /// A second, independent handle on the same database (another process or machine).
    pub async fn another_handle(&self) -> Arc<dyn Store> {
        let url = match &self.place {
            Place::Sqlite(dir) => format!("sqlite://{}", dir.path().join("warden.db").display()),
            Place::Postgres(schema) => schema.store_url(),
        };
        warden_store::open_with(&url, options(&self.clock))
            .await
            .unwrap()
    }

    pub fn sqlite_path(&self) -> Option<std::path::PathBuf> {
        match &self.place {
            Place::Sqlite(dir) => Some(dir.path().join("warden.db")),
            Place::Postgres(_) => None,
        }
    }

    /// The Postgres URL of this fixture's schema.
    pub fn postgres_url(&self) -> Option<String> {
        match &self.place {
            Place::Sqlite(_) => None,
            Place::Postgres(schema) => Some(schema.store_url()),
        }
    }

    pub async fn check_integrity(&self) {
        self.store.check_integrity().await.unwrap();
    }

    /// Creates a queued task of `kind` on `repos` (priority 0).
    pub async fn task(&self, kind: TaskKind, repos: &[&str]) -> Task {
        self.store
            .create_task(new_task(kind, repos), None)
            .await
            .unwrap()
            .into_task()
    }

    /// Claims as `worker` with the default lease and no filter.
    pub async fn claim(&self, worker: &str) -> Option<Claim> {
        self.store
            .claim(worker, LEASE, &ClaimFilter::default())
            .await
            .unwrap()
    }
}

fn options(clock: &ManualClock) -> StoreOptions {
    StoreOptions {
        clock: Arc::new(clock.clone()),
        postgres_pool_size: 8,
    }
}

pub fn new_task(kind: TaskKind, repos: &[&str]) -> NewTask {
    NewTask {
        id: task_id(),
        kind,
        owner: "alice".into(),
        prompt: "do the thing".into(),
        repos: repos.iter().map(|r| TaskRepo::named(r)).collect(),
        priority: 0,
        follow_up_to: None,
        retry_of: None,
        metadata: serde_json::json!({"source": "test"}),
        callback_url: None,
    }
}

/// Ids increase in creation order within a process (like ULIDs), with a random tail.
pub fn task_id() -> TaskId {
    const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).unwrap();
    let mut ulid = String::with_capacity(26);
    for shift in (0..10).rev() {
        ulid.push(CROCKFORD[((n >> (shift * 5)) & 31) as usize] as char);
    }
    for byte in random {
        ulid.push(CROCKFORD[(byte & 31) as usize] as char);
    }
    TaskId::from_ulid(&ulid).unwrap()
}

/// A schema of its own in the test database, dropped (with everything in it) on drop.
pub struct PgSchema {
    admin_url: String,
    pub name: String,
}

impl PgSchema {
    pub async fn create(admin_url: &str) -> PgSchema {
        let mut random = [0u8; 6];
        getrandom::fill(&mut random).unwrap();
        let name = format!("test_{}_{}", std::process::id(), hex::encode(random));
        let client = admin_client(admin_url).await;
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .unwrap();
        PgSchema {
            admin_url: admin_url.to_string(),
            name,
        }
    }

    pub fn store_url(&self) -> String {
        let separator = if self.admin_url.contains('?') {
            '&'
        } else {
            '?'
        };
        format!(
            "{}{separator}options=-csearch_path%3D{}",
            self.admin_url, self.name
        )
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let url = self.admin_url.clone();
        let name = self.name.clone();
        // Drop runs inside the test's runtime; use a thread with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let client = admin_client(&url).await;
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            let _ = writeln!(
                std::io::stderr(),
                "could not drop test schema {}",
                self.name
            );
        }
    }
}

pub async fn admin_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// One test per backend for each named `async fn(&Fixture)` of the invoking module.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let fixture = crate::suite::harness::Fixture::sqlite().await;
                super::$name(&fixture).await;
                fixture.check_integrity().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let Some(fixture) = crate::suite::harness::Fixture::postgres().await else {
                    return;
                };
                super::$name(&fixture).await;
                fixture.check_integrity().await;
            }
        }
    )*};
}
