//! Event streams: per-task and global sequences start at 1, increase in commit order without
//! gaps, and reading "after N" resumes exactly where a reader left off (SSE `Last-Event-ID`).

use std::collections::HashMap;

use warden_protocol::{Event, TaskKind, TaskStatus};
use warden_store::{EventStream, StoreError};

use super::harness::Fixture;

fn message(text: &str) -> Event {
    Event::AgentMessage { text: text.into() }
}

async fn sequences_are_monotonic_and_resumable(f: &Fixture) {
    let a = f.task(TaskKind::Question, &["app"]).await.id;
    let b = f.task(TaskKind::Question, &["app"]).await.id;
    let mut appended = Vec::new();
    for (i, task) in [&a, &b, &a, &a, &b].into_iter().enumerate() {
        appended.push(
            f.store
                .append_event(task, message(&format!("m{i}")))
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        appended.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(
        appended.iter().map(|e| e.task_seq).collect::<Vec<_>>(),
        [1, 1, 2, 3, 2]
    );

    let of_a = f
        .store
        .events_after(&EventStream::Task(a.clone()), 0, 100)
        .await
        .unwrap();
    assert_eq!(of_a.len(), 3);
    assert!(of_a.iter().all(|e| e.task == a));
    assert_eq!(of_a[2].event, message("m3"));
    assert_eq!(
        of_a,
        vec![
            appended[0].clone(),
            appended[2].clone(),
            appended[3].clone()
        ]
    );
    let resumed = f
        .store
        .events_after(&EventStream::Task(a.clone()), 2, 100)
        .await
        .unwrap();
    assert_eq!(resumed, vec![appended[3].clone()]);
    let all_after = f
        .store
        .events_after(&EventStream::All, 3, 100)
        .await
        .unwrap();
    assert_eq!(all_after, appended[3..].to_vec());
    assert!(f
        .store
        .events_after(&EventStream::All, 5, 100)
        .await
        .unwrap()
        .is_empty());

    let stranger = super::harness::task_id();
    assert!(matches!(
        f.store.append_event(&stranger, message("x")).await,
        Err(StoreError::NotFound { what: "task", .. })
    ));
}

async fn concurrent_appends_leave_no_gaps(f: &Fixture) {
    const TASKS: usize = 4;
    const PER_WRITER: usize = 25;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        tasks.push(f.task(TaskKind::Question, &["app"]).await.id);
    }
    let other = f.another_handle().await;
    // Two writers per task, on two handles, plus a reader paging through the global stream.
    let mut writers = Vec::new();
    for (i, task) in tasks.iter().cycle().take(TASKS * 2).enumerate() {
        let store = if i % 2 == 0 {
            f.store.clone()
        } else {
            other.clone()
        };
        let task = task.clone();
        writers.push(tokio::spawn(async move {
            for n in 0..PER_WRITER {
                store
                    .append_event(
                        &task,
                        Event::StatusChanged {
                            status: TaskStatus::Running,
                        },
                    )
                    .await
                    .unwrap();
                if n % 10 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let total = (TASKS * 2 * PER_WRITER) as u64;
    let reader = {
        let store = f.store.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut seen = Vec::new();
            while last < total {
                let page = store
                    .events_after(&EventStream::All, last, 7)
                    .await
                    .unwrap();
                for event in page {
                    seen.push(event.seq);
                    last = event.seq;
                }
                tokio::task::yield_now().await;
            }
            seen
        })
    };
    for writer in writers {
        writer.await.unwrap();
    }
    // A live reader resuming after the last sequence it saw saw every event, in order.
    let seen = reader.await.unwrap();
    assert_eq!(seen, (1..=total).collect::<Vec<_>>());
    let mut per_task: HashMap<_, Vec<u64>> = HashMap::new();
    for event in f
        .store
        .events_after(&EventStream::All, 0, 10_000)
        .await
        .unwrap()
    {
        per_task.entry(event.task).or_default().push(event.task_seq);
    }
    for task in &tasks {
        assert_eq!(
            per_task[task],
            (1..=(2 * PER_WRITER) as u64).collect::<Vec<_>>()
        );
    }
}

conformance!(
    sequences_are_monotonic_and_resumable,
    concurrent_appends_leave_no_gaps
);
