//! Time as Warden reads and writes it, in one place. Instants are milliseconds since the Unix
//! epoch (what the clocks give and the stores record); people and programs read them as RFC 3339
//! text in UTC ([`rfc3339`]); budgets and usage count UTC calendar days ([`UtcDay`]). The
//! calendar is chrono's (proleptic Gregorian), not arithmetic of Warden's own.
//!
//! One rule reads every time Warden is given — the API's own timestamps, advisory databases,
//! package registries, GitHub — ([`parse_rfc3339`]): RFC 3339's `date-time` (section 5.6),
//! `YYYY-MM-DD`, `T` (or `t`, or a space, as the RFC's note allows), `HH:MM:SS`, an optional
//! fraction of a second, then `Z` (or `z`) or an offset `±HH:MM`. The month is 01-12 and the day
//! one the month has that year (no thirteenth month, no 30 February, 29 February only in a leap
//! year); hours 00-23, minutes 00-59, seconds 00-59 or 60 for a leap second, which reads as the
//! second after `:59` (the one Unix time counts next). Digits past the millisecond are dropped.
//! Anything else is a [`TimeError`]. A day alone (`YYYY-MM-DD`, [`UtcDay::parse`]) follows the
//! same rule for its date.

#![warn(unreachable_pub)]
use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, Utc};

/// Milliseconds in a day (Unix time has no leap seconds).
pub const MS_PER_DAY: i64 = 86_400_000;

/// The first instant RFC 3339 can write (`0000-01-01T00:00:00.000Z`), in milliseconds.
pub const MIN_MS: i64 = -62_167_219_200_000;
/// The last instant RFC 3339 can write (`9999-12-31T23:59:59.999Z`), in milliseconds.
pub const MAX_MS: i64 = 253_402_300_799_999;

/// Days from 0001-01-01 (chrono's day 1 of the common era) to 1970-01-01.
const EPOCH_DAYS_FROM_CE: i64 = 719_163;

/// A time or a day that does not follow the rule of this module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// Not an RFC 3339 date-time such as `2026-12-01T13:19:03Z`.
    #[error("{text:?} is not an RFC 3339 time like 2026-12-01T13:19:03Z: {reason}")]
    NotATime { text: String, reason: String },
    /// Not a calendar day written `YYYY-MM-DD`.
    #[error("{text:?} is not a date like 2026-12-01: {reason}")]
    NotADate { text: String, reason: String },
}

/// At most this much of a refused text is repeated in its error (it may be anyone's).
const QUOTED: usize = 64;

fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Milliseconds since the epoch of an RFC 3339 date-time (the rule in the module's
/// documentation).
pub fn parse_rfc3339(text: &str) -> Result<i64, TimeError> {
    let refused = |reason: String| TimeError::NotATime {
        text: quoted(text),
        reason,
    };
    // chrono takes a date-time with a longer year (`+12345-…`); RFC 3339 has four digits.
    let year_digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if year_digits != 4 {
        return Err(refused("the year must have four digits".into()));
    }
    let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| refused(e.to_string()))?;
    Ok(parsed.timestamp_millis())
}

/// [`parse_rfc3339`] for records that keep times as unsigned milliseconds (publication and
/// fetch times): `None` for a text the rule refuses and for a time before 1970.
pub fn parse_rfc3339_since_epoch(text: &str) -> Option<u64> {
    u64::try_from(parse_rfc3339(text).ok()?).ok()
}

/// The date-time of `ms`, clamped to what RFC 3339 can write.
fn utc(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms.clamp(MIN_MS, MAX_MS)).unwrap_or_default()
}

/// `2026-12-02T12:34:56.789Z`: how Warden writes an instant (API, callbacks, events, CLI).
/// Instants outside years 0000-9999 are written as the nearest one inside.
pub fn rfc3339(ms: i64) -> String {
    utc(ms).format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `2026-12-02T12:34:56Z`: whole seconds (the fraction dropped), for records that never had
/// more (advisory databases' fetch and scan times).
pub fn rfc3339_seconds(ms: i64) -> String {
    utc(ms).format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `20261202T123456Z`: sortable and safe in a file name.
pub fn compact_timestamp(ms: i64) -> String {
    utc(ms).format("%Y%m%dT%H%M%SZ").to_string()
}

/// One UTC calendar day, as days since 1970-01-01. Displays as `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDay(pub i64);

impl UtcDay {
    /// The day containing the instant `ms` (milliseconds since the epoch).
    pub fn of_ms(ms: i64) -> UtcDay {
        UtcDay(ms.div_euclid(MS_PER_DAY))
    }

    /// The day of a proleptic Gregorian date; `None` for a date the calendar does not have.
    pub fn from_ymd(year: i64, month: u32, day: u32) -> Option<UtcDay> {
        let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
        Some(UtcDay(
            i64::from(date.num_days_from_ce()) - EPOCH_DAYS_FROM_CE,
        ))
    }

    /// The day written `YYYY-MM-DD` (four, two and two digits), a date the calendar has.
    pub fn parse(text: &str) -> Result<UtcDay, TimeError> {
        let refused = |reason: &str| TimeError::NotADate {
            text: quoted(text),
            reason: reason.to_string(),
        };
        let bytes = text.as_bytes();
        let shaped = bytes.len() == 10
            && bytes.iter().enumerate().all(|(at, byte)| match at {
                4 | 7 => *byte == b'-',
                _ => byte.is_ascii_digit(),
            });
        if !shaped {
            return Err(refused("expected YYYY-MM-DD"));
        }
        let number = |range: std::ops::Range<usize>| text[range].parse::<u32>().unwrap_or(0);
        let (year, month, day) = (number(0..4), number(5..7), number(8..10));
        if !(1..=12).contains(&month) {
            return Err(refused("the month must be 01-12"));
        }
        UtcDay::from_ymd(i64::from(year), month, day)
            .ok_or_else(|| refused("that month has no such day that year"))
    }

    /// The first millisecond of the day.
    pub fn start_ms(self) -> i64 {
        self.0.saturating_mul(MS_PER_DAY)
    }

    /// The first millisecond of the next day.
    pub fn end_ms(self) -> i64 {
        self.0.saturating_add(1).saturating_mul(MS_PER_DAY)
    }

    /// The date, clamped to chrono's range (hundreds of thousands of years either way).
    fn date(self) -> NaiveDate {
        let from_ce = self
            .0
            .saturating_add(EPOCH_DAYS_FROM_CE)
            .clamp(i64::from(i32::MIN), i64::from(i32::MAX));
        let from_ce = i32::try_from(from_ce).unwrap_or_default();
        NaiveDate::from_num_days_from_ce_opt(from_ce).unwrap_or(if from_ce < 0 {
            NaiveDate::MIN
        } else {
            NaiveDate::MAX
        })
    }

    /// `(year, month 1-12, day 1-31)`.
    pub fn ymd(self) -> (i64, u32, u32) {
        let date = self.date();
        (i64::from(date.year()), date.month(), date.day())
    }

    /// The day of the week, 0 for Sunday to 6 for Saturday (cron's numbering).
    pub fn weekday(self) -> u32 {
        self.date().weekday().num_days_from_sunday()
    }
}

impl fmt::Display for UtcDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.ymd();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

#[cfg(test)]
mod tests;
