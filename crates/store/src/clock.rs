//! The store's notion of time: every timestamp it writes (creation, leases, heartbeats, ledger
//! entries) comes from an injectable [`Clock`], so lease expiry is testable without sleeping.
//! The clock has a monotonic side too, for what a process measures on its own (how long ago it
//! was granted a lease): the wall clock can be stepped, and only times shared through the
//! database (lease expiry between processes) need it.
//! Also UTC calendar helpers for per-day budgets and quarantine file names, without a date crate.

use std::fmt;
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

const MS_PER_DAY: i64 = 86_400_000;

/// One UTC calendar day, as days since 1970-01-01. Displays as `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDay(pub i64);

impl UtcDay {
    /// The day containing the instant `ms` (milliseconds since the epoch).
    pub fn of_ms(ms: i64) -> UtcDay {
        UtcDay(ms.div_euclid(MS_PER_DAY))
    }

    /// The day of a proleptic Gregorian date; `None` for an invalid date.
    pub fn from_ymd(year: i64, month: u32, day: u32) -> Option<UtcDay> {
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        Some(UtcDay(days_from_civil(year, month, day)))
    }

    /// The first millisecond of the day.
    pub fn start_ms(self) -> i64 {
        self.0.saturating_mul(MS_PER_DAY)
    }

    /// The first millisecond of the next day.
    pub fn end_ms(self) -> i64 {
        self.0.saturating_add(1).saturating_mul(MS_PER_DAY)
    }

    /// `(year, month, day)`.
    pub fn ymd(self) -> (i64, u32, u32) {
        civil_from_days(self.0)
    }
}

impl fmt::Display for UtcDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.ymd();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

/// `YYYYMMDDTHHMMSSZ` for an instant: sortable and safe in a file name.
pub(crate) fn compact_timestamp(ms: i64) -> String {
    let day = UtcDay::of_ms(ms);
    let (y, m, d) = day.ymd();
    let seconds = (ms - day.start_ms()) / 1000;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's `days_from_civil` / `civil_from_days` algorithms.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    // d is in 1..=31 and m in 1..=12 by construction.
    (y, m as u32, d as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_trip_through_the_calendar() {
        for (ms, expected) in [
            (0, "1970-01-01"),
            (86_399_999, "1970-01-01"),
            (86_400_000, "1970-01-02"),
            (-1, "1969-12-31"),
            (951_782_400_000, "2000-02-29"),
            (1_796_083_200_000, "2026-12-01"),
        ] {
            let day = UtcDay::of_ms(ms);
            assert_eq!(day.to_string(), expected, "{ms}");
            let (y, m, d) = day.ymd();
            assert_eq!(UtcDay::from_ymd(y, m, d), Some(day));
            assert!(day.start_ms() <= ms && ms < day.end_ms());
        }
        assert_eq!(UtcDay::from_ymd(2023, 2, 29), None);
        assert_eq!(UtcDay::from_ymd(2024, 13, 1), None);
    }

    #[test]
    fn compact_timestamps_are_file_name_safe() {
        assert_eq!(compact_timestamp(0), "19700101T000000Z");
        assert_eq!(compact_timestamp(1_796_131_143_000), "20261201T131903Z");
    }
}
