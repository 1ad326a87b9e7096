//! Reporting queries: ledger spend grouped by day, task and model (filtered by owner and
//! time), task counts by status, and the callback URL kept with a task.

use std::time::Duration;

use warden_protocol::{TaskKind, TaskStatus};
use warden_store::state::ALL_STATUSES;
use warden_store::{UsageEntry, UsageQuery, UtcDay};

use super::harness::{new_task, Fixture, START_MS};

fn entry(
    task: &warden_protocol::TaskId,
    (model, role): (&str, &str),
    tokens: u64,
    cost: Option<u64>,
) -> UsageEntry {
    UsageEntry {
        task: task.clone(),
        run_number: Some(1),
        model: model.into(),
        role: role.into(),
        input_tokens: tokens,
        cached_input_tokens: 0,
        output_tokens: 1,
        cost_micro_usd: cost,
    }
}

async fn usage_is_summarised_by_day_task_model_and_role(f: &Fixture) {
    let a = f.task(TaskKind::Question, &["app"]).await.id;
    let mut other = new_task(TaskKind::Question, &["app"]);
    other.owner = "bob".into();
    let b = f
        .store
        .create_task(other, None)
        .await
        .unwrap()
        .into_task()
        .id;
    let empty = f.store.usage_summary(UsageQuery::default()).await.unwrap();
    assert!(empty.by_day.is_empty() && empty.by_task.is_empty() && empty.by_model.is_empty());
    assert!(empty.by_role.is_empty());

    f.store
        .record_usage(entry(&a, ("m1", "agent"), 100, Some(10)))
        .await
        .unwrap();
    f.store
        .record_usage(entry(&b, ("m2", "explorer"), 5, None))
        .await
        .unwrap();
    f.clock.advance(Duration::from_secs(86_400));
    f.store
        .record_usage(entry(&a, ("m2", "reviewer"), 20, Some(3)))
        .await
        .unwrap();

    let today = UtcDay::of_ms(START_MS);
    let tomorrow = UtcDay(today.0 + 1);
    let all = f.store.usage_summary(UsageQuery::default()).await.unwrap();
    let days: Vec<(UtcDay, u64, u64)> = all
        .by_day
        .iter()
        .map(|(d, s)| (*d, s.input_tokens, s.entries))
        .collect();
    assert_eq!(days, [(today, 105, 2), (tomorrow, 20, 1)]);
    assert!(all.by_day[0].1.cost_unknown);
    assert!(!all.by_day[1].1.cost_unknown);
    let mut expected_tasks = vec![(a.clone(), 120), (b.clone(), 5)];
    expected_tasks.sort();
    let tasks: Vec<_> = all
        .by_task
        .iter()
        .map(|(t, s)| (t.clone(), s.input_tokens))
        .collect();
    assert_eq!(tasks, expected_tasks);
    let models: Vec<_> = all
        .by_model
        .iter()
        .map(|(m, s)| (m.as_str(), s.input_tokens, s.cost_micro_usd, s.cost_unknown))
        .collect();
    assert_eq!(models, [("m1", 100, 10, false), ("m2", 25, 3, true)]);
    let roles: Vec<_> = all
        .by_role
        .iter()
        .map(|(r, s)| (r.as_str(), s.input_tokens, s.cost_micro_usd, s.cost_unknown))
        .collect();
    assert_eq!(
        roles,
        [
            ("agent", 100, 10, false),
            ("explorer", 5, 0, true),
            ("reviewer", 20, 3, false)
        ]
    );
    // The summary agrees with the per-day sum.
    assert_eq!(all.by_day[0].1, f.store.spend_for_day(today).await.unwrap());

    let alice = f
        .store
        .usage_summary(UsageQuery {
            owner: Some("alice".into()),
            since_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(alice.by_task.len(), 1);
    assert_eq!(alice.by_task[0].0, a);
    assert_eq!(alice.by_task[0].1.input_tokens, 120);
    let recent = f
        .store
        .usage_summary(UsageQuery {
            owner: None,
            since_ms: Some(START_MS + 1),
        })
        .await
        .unwrap();
    assert_eq!(recent.by_day.len(), 1);
    assert_eq!(recent.by_day[0].0, tomorrow);
    let nobody = f
        .store
        .usage_summary(UsageQuery {
            owner: Some("mallory".into()),
            since_ms: None,
        })
        .await
        .unwrap();
    assert!(nobody.by_task.is_empty() && nobody.by_day.is_empty());
}

async fn tasks_are_counted_by_status(f: &Fixture) {
    let zero = f.store.count_tasks_by_status().await.unwrap();
    assert_eq!(zero.len(), ALL_STATUSES.len());
    assert!(zero.iter().all(|(_, n)| *n == 0));
    f.task(TaskKind::Question, &["app"]).await;
    f.task(TaskKind::Question, &["app"]).await;
    let cancelled = f.task(TaskKind::Question, &["app"]).await;
    f.store
        .transition(
            &cancelled.id,
            TaskStatus::Queued,
            TaskStatus::Cancelled,
            None,
        )
        .await
        .unwrap();
    f.claim("w1").await.unwrap();
    let counts = f.store.count_tasks_by_status().await.unwrap();
    let count = |s: TaskStatus| counts.iter().find(|(c, _)| *c == s).unwrap().1;
    assert_eq!(count(TaskStatus::Queued), 1);
    assert_eq!(count(TaskStatus::Running), 1);
    assert_eq!(count(TaskStatus::Cancelled), 1);
    assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 3);
    assert_eq!(
        counts.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        ALL_STATUSES
    );
}

async fn a_callback_url_is_kept_with_its_task(f: &Fixture) {
    let mut with = new_task(TaskKind::Question, &["app"]);
    with.callback_url = Some("https://hooks.example/warden".into());
    let created = f.store.create_task(with, None).await.unwrap().into_task();
    assert_eq!(
        created.callback_url.as_deref(),
        Some("https://hooks.example/warden")
    );
    let claim = f.claim("w1").await.unwrap();
    assert_eq!(claim.task.callback_url, created.callback_url);
    let stored = f.store.get_task(&created.id).await.unwrap().unwrap();
    assert_eq!(stored.callback_url, created.callback_url);
    let without = f.task(TaskKind::Question, &["app"]).await;
    assert_eq!(without.callback_url, None);
}

conformance!(
    usage_is_summarised_by_day_task_model_and_role,
    tasks_are_counted_by_status,
    a_callback_url_is_kept_with_its_task,
);
