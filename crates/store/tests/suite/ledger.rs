//! The usage ledger: appended entries sum per task and per UTC day, and an unknown cost is
//! flagged rather than counted as zero.

use std::time::Duration;

use warden_protocol::TaskKind;
use warden_store::{Spend, StoreError, UsageEntry, UtcDay};

use super::harness::{Fixture, START_MS};

fn entry(task: &warden_protocol::TaskId, tokens: u64, cost: Option<u64>) -> UsageEntry {
    UsageEntry {
        task: task.clone(),
        run_number: Some(1),
        model: "openai:gpt-test".into(),
        role: "agent".into(),
        input_tokens: tokens,
        cached_input_tokens: tokens / 2,
        output_tokens: tokens / 10,
        cost_micro_usd: cost,
    }
}

async fn spend_sums_per_task_and_per_day(f: &Fixture) {
    let a = f.task(TaskKind::Question, &["app"]).await.id;
    let b = f.task(TaskKind::Question, &["app"]).await.id;
    let today = UtcDay::of_ms(START_MS);
    assert_eq!(f.store.spend_for_task(&a).await.unwrap(), Spend::default());
    assert_eq!(
        f.store.spend_for_day(today).await.unwrap(),
        Spend::default()
    );

    f.store
        .record_usage(entry(&a, 1_000, Some(250)))
        .await
        .unwrap();
    f.store
        .record_usage(entry(&a, 2_000, Some(500)))
        .await
        .unwrap();
    f.store.record_usage(entry(&b, 100, Some(7))).await.unwrap();
    // Just before midnight, then after it: a different day.
    f.clock.advance(Duration::from_millis(86_399_999));
    f.store.record_usage(entry(&b, 10, Some(1))).await.unwrap();
    f.clock.advance(Duration::from_millis(1));
    f.store.record_usage(entry(&b, 40, None)).await.unwrap();

    assert_eq!(
        f.store.spend_for_task(&a).await.unwrap(),
        Spend {
            input_tokens: 3_000,
            cached_input_tokens: 1_500,
            output_tokens: 300,
            cost_micro_usd: 750,
            cost_unknown: false,
            entries: 2,
        }
    );
    let of_b = f.store.spend_for_task(&b).await.unwrap();
    assert_eq!(of_b.input_tokens, 150);
    assert_eq!(of_b.cost_micro_usd, 8);
    assert!(of_b.cost_unknown, "an unpriced call must be flagged");
    assert_eq!(of_b.entries, 3);

    let day_one = f.store.spend_for_day(today).await.unwrap();
    assert_eq!(day_one.input_tokens, 3_110);
    assert_eq!(day_one.cost_micro_usd, 758);
    assert!(!day_one.cost_unknown);
    assert_eq!(day_one.entries, 4);
    let tomorrow = UtcDay(today.0 + 1);
    assert_eq!(tomorrow.to_string(), "2026-12-02");
    let day_two = f.store.spend_for_day(tomorrow).await.unwrap();
    assert_eq!((day_two.input_tokens, day_two.entries), (40, 1));
    assert!(day_two.cost_unknown);

    let stranger = super::harness::task_id();
    assert!(matches!(
        f.store.record_usage(entry(&stranger, 1, Some(1))).await,
        Err(StoreError::NotFound { what: "task", .. })
    ));
    assert!(matches!(
        f.store.record_usage(entry(&a, u64::MAX, Some(1))).await,
        Err(StoreError::OutOfRange(_))
    ));
}

conformance!(spend_sums_per_task_and_per_day);
