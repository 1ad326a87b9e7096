//! The store's notion of time: every timestamp it writes (creation, leases, heartbeats, ledger
//! entries) comes from an injectable [`Clock`], so lease expiry is testable without sleeping.
//! The clock has a monotonic side too, for what a process measures on its own (how long ago it
//! was granted a lease): the wall clock can be stepped, and only times shared through the
//! database (lease expiry between processes) need it.
//! Calendar days and timestamps are `warden-time`'s ([`crate::UtcDay`] is its `UtcDay`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as the store records them, and a monotonic reading.
pub trait Clock: Send + Sync {
    /// The wall clock: milliseconds since the Unix epoch. It can be stepped by any amount in
    /// either direction (NTP, a VM resume, an operator).
    fn now_ms(&self) -> i64;

    /// Milliseconds since an arbitrary origin fixed for the process, never going back and never
    /// stepped with the wall clock. Meaningless in another process: never stored.
    fn monotonic_ms(&self) -> i64;
}

/// The wall clock (`SystemTime`) and `Instant` (`CLOCK_MONOTONIC`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    fn monotonic_ms(&self) -> i64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        duration_ms(origin.elapsed())
    }
}

/// A clock that only moves when told to (tests). Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<ManualTime>);

#[derive(Debug)]
struct ManualTime {
    wall_ms: AtomicI64,
    monotonic_ms: AtomicI64,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock(Arc::new(ManualTime {
            wall_ms: AtomicI64::new(start_ms),
            monotonic_ms: AtomicI64::new(0),
        }))
    }

    /// Sets the wall clock to `now_ms`: a step, the monotonic clock does not move.
    pub fn set(&self, now_ms: i64) {
        self.0.wall_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Time passes: both clocks move on by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let by = duration_ms(by);
        self.0.wall_ms.fetch_add(by, Ordering::SeqCst);
        self.0.monotonic_ms.fetch_add(by, Ordering::SeqCst);
    }

    /// Steps the wall clock by `by_ms` (negative: back); the monotonic clock does not move.
    pub fn step(&self, by_ms: i64) {
        self.0.wall_ms.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> i64 {
        self.0.monotonic_ms.load(Ordering::SeqCst)
    }
}

/// A duration in whole milliseconds, saturating (leases are never that long).
pub(crate) fn duration_ms(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
