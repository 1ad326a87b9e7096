//! `[[schedules]]`: the scheduler over a `TaskService` on SQLite (and Postgres when
//! `WARDEN_TEST_POSTGRES_URL` is set), driven by a clock the test holds: a due entry submits
//! one maintain task with its options; the same due minute in two schedulers (two processes on
//! one database, or a restart) makes one task; `max_open_proposals` open tasks skip the run;
//! a refresh writes the snapshot and keeps the newest two.

use std::sync::Arc;

use serde_json::json;
use warden_config::ScheduleEntry;
use warden_engine::change::{ChangeOptions, MaintainOptions};
use warden_protocol::{TaskKind, TaskStatus};
use warden_service::config::schedule::{self as schedule_config, Schedule};
use warden_service::schedule::{RunOutcome, ScheduleRun, Scheduler, PRINCIPAL};
use warden_service::tasks::TaskService;
use warden_store::{NewRepo, Store, TaskQuery};
use warden_test_support::git_fixture::TempRepo;

/// 2026-12-03T03:00Z in minutes since the epoch.
const THREE_AM: i64 = 29_937_780;

fn entry(repo: &str, cron: &str) -> ScheduleEntry {
    ScheduleEntry {
        action: None,
        repo: repo.into(),
        cron: cron.into(),
        select: None,
        checks: None,
        // Publishing needs a remote to push to: the tests that do not publish say so.
        publish: Some(false),
        max_open_proposals: None,
        refresh: Some(false),
    }
}

fn resolve(entries: Vec<ScheduleEntry>) -> Vec<Schedule> {
    schedule_config::resolve(&entries).unwrap()
}

async fn register(store: &dyn Store, name: &str, source: &str) {
    store
        .register_repo(NewRepo {
            name: name.into(),
            source: source.into(),
            branch: None,
            checks: vec![],
            mounts: vec![],
            prepare: vec![],
            created_by: "root".into(),
        })
        .await
        .unwrap();
}

async fn tasks_of(store: &dyn Store) -> Vec<warden_store::Task> {
    store
        .list_tasks(TaskQuery {
            limit: 100,
            ..TaskQuery::default()
        })
        .await
        .unwrap()
}

fn service(store: &Arc<dyn Store>) -> TaskService {
    TaskService::new(Arc::clone(store), Arc::default())
}

fn submitted(run: &ScheduleRun) -> (warden_protocol::TaskId, bool) {
    match &run.outcome {
        RunOutcome::Submitted { task, replayed } => (task.clone(), *replayed),
        other => panic!("{other:?}"),
    }
}

async fn sqlite() -> (tempfile::TempDir, Arc<dyn Store>) {
    let home = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", home.path().join("warden.db").display());
    let store = warden_store::open(&url).await.unwrap();
    (home, store)
}

/// Everything but the refresh, on one database; `second` is another handle on the same
/// database (another process's store).
async fn scheduling(store: Arc<dyn Store>, second: Arc<dyn Store>) {
    register(store.as_ref(), "app", "/srv/git/app").await;
    register(store.as_ref(), "lib", "/srv/git/lib").await;

    // Due: one maintain task with the entry's options, owned by the schedule.
    let mut vulnerable = entry("app", "0 3 * * *");
    vulnerable.select = Some(vec!["vulnerable".into()]);
    vulnerable.checks = Some(vec!["cargo test --offline".into()]);
    vulnerable.publish = Some(false);
    let mut scheduler = Scheduler::new(service(&store), resolve(vec![vulnerable]));
    assert!(scheduler.tick((THREE_AM - 1) * 60_000).await.is_empty());
    let runs = scheduler.tick(THREE_AM * 60_000 + 1_500).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let (id, replayed) = submitted(&runs[0]);
    assert!(!replayed);
    assert_eq!((runs[0].index, runs[0].repo.as_str()), (0, "app"));
    assert_eq!(runs[0].minute, THREE_AM);
    let task = store.get_task(&id).await.unwrap().unwrap();
    assert_eq!(task.kind, TaskKind::Maintain);
    assert_eq!(task.owner, PRINCIPAL);
    assert_eq!(task.status, TaskStatus::Queued);
    assert_eq!(task.repos.len(), 1);
    assert_eq!(task.repos[0].name, "app");
    let options = ChangeOptions::from_metadata(&task.metadata).unwrap();
    assert_eq!(
        options.maintain,
        Some(MaintainOptions {
            select: vec!["vulnerable".into()],
            ..MaintainOptions::default()
        })
    );
    assert_eq!(options.checks, Some(vec!["cargo test --offline".into()]));
    assert!(!options.publish);
    assert_eq!(
        task.metadata["schedule"],
        json!({"index": 0, "due": "2026-12-03T03:00Z"})
    );
    // Later in the same minute, and minutes that are not due: nothing.
    assert!(scheduler.tick(THREE_AM * 60_000 + 30_000).await.is_empty());
    assert!(scheduler.tick((THREE_AM + 5) * 60_000).await.is_empty());
    assert_eq!(tasks_of(store.as_ref()).await.len(), 1);

    // The same due minute in two schedulers (two processes on one database; a restart within
    // the minute): one task. A high cap, so that only the idempotency key can keep it to one.
    let mut often = entry("lib", "*/5 * * * *");
    often.max_open_proposals = Some(10);
    let here = Scheduler::new(service(&store), resolve(vec![often]));
    let mut often = entry("lib", "*/5 * * * *");
    often.max_open_proposals = Some(10);
    let there = Scheduler::new(service(&second), resolve(vec![often]));
    let minute = THREE_AM + 10;
    let (a, b) = tokio::join!(here.run_minute(minute), there.run_minute(minute));
    let (task_a, replayed_a) = submitted(&a[0]);
    let (task_b, replayed_b) = submitted(&b[0]);
    assert_eq!(task_a, task_b);
    assert!(
        replayed_a != replayed_b,
        "exactly one created it: {a:?} {b:?}"
    );
    // A restart within the minute: a new scheduler looks at the current minute again.
    let mut often = entry("lib", "*/5 * * * *");
    often.max_open_proposals = Some(10);
    let mut restarted = Scheduler::new(service(&second), resolve(vec![often]));
    let again = restarted.tick(minute * 60_000 + 59_000).await;
    assert_eq!(submitted(&again[0]), (task_a.clone(), true));
    let lib_tasks =
        |all: Vec<warden_store::Task>| all.into_iter().filter(|t| t.repos[0].name == "lib").count();
    assert_eq!(lib_tasks(tasks_of(store.as_ref()).await), 1);
    // The next due minute is another task.
    let next = here.run_minute(minute + 5).await;
    assert!(!submitted(&next[0]).1);
    assert_eq!(lib_tasks(tasks_of(store.as_ref()).await), 2);

    // max_open_proposals (1 by default): app's queued maintenance is open, so the next run is
    // skipped; once it has ended, the next one submits.
    let mut daily = Scheduler::new(service(&store), resolve(vec![entry("app", "0 3 * * *")]));
    let tomorrow = THREE_AM + 1440;
    let skipped = daily.tick(tomorrow * 60_000).await;
    assert_eq!(skipped[0].outcome, RunOutcome::Skipped { open: 1 });
    assert_eq!(
        tasks_of(store.as_ref())
            .await
            .iter()
            .filter(|t| t.repos[0].name == "app")
            .count(),
        1
    );
    // Another owner's maintenance of the repository counts too; a question does not.
    let mut two = entry("app", "0 3 * * *");
    two.max_open_proposals = Some(2);
    let by_two = Scheduler::new(service(&store), resolve(vec![two]));
    let operator = warden_service::tasks::Principal {
        name: "alice".into(),
        role: warden_service::tasks::Role::Operator,
    };
    service(&store)
        .submit(
            &operator,
            warden_service::tasks::Submission::new(
                TaskKind::Maintain,
                "maintain",
                vec!["app".into()],
            ),
            None,
        )
        .await
        .unwrap();
    service(&store)
        .submit(
            &operator,
            warden_service::tasks::Submission::new(TaskKind::Question, "why?", vec!["app".into()]),
            None,
        )
        .await
        .unwrap();
    let skipped = by_two.run_minute(tomorrow).await;
    assert_eq!(skipped[0].outcome, RunOutcome::Skipped { open: 2 });
    // Ended (cancelled here; completed or failed alike): no longer open.
    for task in tasks_of(store.as_ref()).await {
        if task.kind == TaskKind::Maintain && task.repos[0].name == "app" {
            store
                .transition(&task.id, TaskStatus::Queued, TaskStatus::Cancelled, None)
                .await
                .unwrap();
        }
    }
    // A day later: only the minutes of the last hour are caught up, so one run.
    let day_after = daily.tick((tomorrow + 1440) * 60_000).await;
    assert_eq!(day_after.len(), 1, "{day_after:?}");
    let (fresh, replayed) = submitted(&day_after[0]);
    assert!(!replayed);
    assert_ne!(fresh, id);

    // Publishing (the default) is asked of the submission: refused here, as the API would,
    // since this repository has no remote to push to.
    let mut publishing = entry("lib", "* * * * *");
    publishing.publish = None;
    publishing.max_open_proposals = Some(10);
    let publishing = Scheduler::new(service(&store), resolve(vec![publishing]));
    match &publishing.run_minute(THREE_AM + 1).await[0].outcome {
        RunOutcome::Failed(message) => assert!(message.contains("/srv/git/lib"), "{message}"),
        other => panic!("{other:?}"),
    }

    // A repository that is not registered: the run fails, saying so, and nothing is created.
    let before = tasks_of(store.as_ref()).await.len();
    let unknown = Scheduler::new(service(&store), resolve(vec![entry("gone", "* * * * *")]));
    let failed = unknown.run_minute(THREE_AM).await;
    match &failed[0].outcome {
        RunOutcome::Failed(message) => assert!(message.contains("not registered"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(tasks_of(store.as_ref()).await.len(), before);
}

#[tokio::test]
async fn schedules_submit_once_per_due_minute_and_respect_open_proposals_on_sqlite() {
    let (home, store) = sqlite().await;
    let url = format!("sqlite://{}", home.path().join("warden.db").display());
    let second = warden_store::open(&url).await.unwrap();
    scheduling(store, second).await;
}

#[tokio::test]
async fn schedules_submit_once_per_due_minute_and_respect_open_proposals_on_postgres() {
    let Some(admin_url) = warden_test_support::postgres::url() else {
        return;
    };
    let mut random = [0u8; 5];
    getrandom::fill(&mut random).unwrap();
    let schema = format!("schedule_{}_{}", std::process::id(), hex::encode(random));
    let (client, connection) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let separator = if admin_url.contains('?') { '&' } else { '?' };
    let url = format!("{admin_url}{separator}options=-csearch_path%3D{schema}");
    let store = warden_store::open(&url).await.unwrap();
    assert_eq!(store.backend(), "postgres");
    // Two store objects with pools of their own: two processes on one database.
    let second = warden_store::open(&url).await.unwrap();
    scheduling(store, second).await;
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    drop(client);
    let _ = connection.await;
}

/// With `refresh`, a due entry also fetches the repository and writes the snapshot of its
/// default branch, keeping the newest two snapshots.
#[tokio::test]
async fn a_refreshing_schedule_writes_the_snapshot_and_keeps_two() {
    let (home, store) = sqlite().await;
    let repo = TempRepo::new();
    repo.write("Cargo.toml", "[package]\nname = \"app\"\n");
    register(store.as_ref(), "app", repo.path().to_str().unwrap()).await;
    let repos = warden_repo::RepoStore::open(home.path()).unwrap();
    let tasks = service(&store)
        .with_repos(repos, Default::default())
        .with_warming();
    let mut refreshing = entry("app", "* * * * *");
    refreshing.refresh = None; // the default: true
    refreshing.max_open_proposals = Some(100);
    refreshing.publish = Some(false);
    let scheduler = Scheduler::new(tasks, resolve(vec![refreshing]));
    let snapshots = || -> Vec<String> {
        let mut names = Vec::new();
        for dir in std::fs::read_dir(home.path().join("snapshots")).unwrap() {
            for entry in std::fs::read_dir(dir.unwrap().path()).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                if !name.contains('.') {
                    names.push(name);
                }
            }
        }
        names.sort();
        names
    };
    let mut commits = Vec::new();
    for n in 0..3 {
        let head = repo.commit(&format!("change {n}"));
        repo.write("README.md", &format!("version {n}\n"));
        let runs = scheduler.run_minute(THREE_AM + n).await;
        assert!(
            matches!(runs[0].outcome, RunOutcome::Submitted { .. }),
            "{runs:?}"
        );
        let refreshed = runs[0].refreshed.clone().unwrap().unwrap();
        assert_eq!(refreshed.commit, head);
        commits.push(head);
        // Last use is kept in whole seconds: make the order of the snapshots plain.
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let mut newest = commits[1..].to_vec();
    newest.sort();
    assert_eq!(snapshots(), newest);
}

/// An `advisories_update` entry submits no task: when due it fetches `[maintain]`'s database
/// (here from a local git remote), and a failed fetch keeps the old copy.
#[tokio::test]
async fn an_advisories_update_entry_fetches_the_databases_and_submits_no_task() {
    struct Home(String);
    impl warden_config::Env for Home {
        fn var(&self, name: &str) -> Option<String> {
            (name == "WARDEN_HOME").then(|| self.0.clone())
        }
    }
    let (home, store) = sqlite().await;
    let remote = TempRepo::new();
    remote.write(
        "crates/smallvec/RUSTSEC-2021-0003.md",
        "```toml\n[advisory]\nid = \"RUSTSEC-2021-0003\"\npackage = \"smallvec\"\n\n\
         [versions]\npatched = [\">= 1.6.1\"]\n```\n\n# Buffer overflow\n",
    );
    let head = remote.commit("smallvec");
    let db = home.path().join("advisory-db");
    let load = |url: &str| {
        let file = home.path().join("warden.toml");
        std::fs::write(
            &file,
            format!(
                "[maintain]\nadvisory_db = {:?}\nadvisory_db_url = \"{url}\"\n\n\
                 [[schedules]]\naction = \"advisories_update\"\ncron = \"0 3 * * *\"\n",
                db.to_str().unwrap()
            ),
        )
        .unwrap();
        let env = Home(home.path().display().to_string());
        let loaded = warden_service::config::load(Some(&file), &env).unwrap();
        (Arc::new(loaded.engine), loaded.service.schedules)
    };
    let (config, schedules) = load(&format!("file://{}", remote.path().display()));
    let scheduler = Scheduler::new(service(&store), schedules).with_config(config);
    // Not due: nothing.
    assert!(scheduler.run_minute(THREE_AM + 1).await.is_empty());
    let runs = scheduler.run_minute(THREE_AM).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].outcome,
        RunOutcome::AdvisoriesUpdated {
            updated: 1,
            failed: 0
        }
    );
    assert_eq!(runs[0].refreshed, None);
    assert!(tasks_of(store.as_ref()).await.is_empty());
    let fetched = std::fs::read_to_string(db.join(".warden-fetched")).unwrap();
    assert!(fetched.contains(&format!("git:{head}")), "{fetched}");

    let (gone, schedules) = load(&format!("file://{}", home.path().join("nowhere").display()));
    let scheduler = Scheduler::new(service(&store), schedules.clone()).with_config(gone);
    let runs = scheduler.run_minute(THREE_AM + 1440).await;
    assert_eq!(
        runs[0].outcome,
        RunOutcome::AdvisoriesUpdated {
            updated: 0,
            failed: 1
        }
    );
    assert_eq!(
        std::fs::read_to_string(db.join(".warden-fetched")).unwrap(),
        fetched
    );
    // Without the configuration there is nothing to update from.
    let bare = Scheduler::new(service(&store), schedules);
    let runs = bare.run_minute(THREE_AM).await;
    assert!(matches!(runs[0].outcome, RunOutcome::Failed(_)), "{runs:?}");
}
