//! The rule of the module, case by case: what reads as which instant, what is refused, and that
//! what Warden writes reads back as the same instant.

use super::*;
use proptest::prelude::*;

/// `text` reads as `expected` milliseconds, or (`None`) is refused.
fn check(text: &str, expected: Option<i64>) {
    match (parse_rfc3339(text), expected) {
        (Ok(ms), Some(expected)) => assert_eq!(ms, expected, "{text}"),
        (Err(error), None) => {
            let message = error.to_string();
            assert!(message.contains("is not an RFC 3339 time"), "{message}");
        }
        (got, expected) => panic!("{text}: got {got:?}, expected {expected:?}"),
    }
}

#[test]
fn times_read_as_instants() {
    for (text, ms) in [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:00.000Z", 0),
        ("2026-12-02T12:34:56.789Z", 1_796_214_896_789),
        ("2026-12-01T13:19:03.042Z", 1_796_131_143_042),
        // As GitHub, OSV and the Go proxy write them.
        ("2020-12-31T22:08:03Z", 1_609_452_483_000),
        // Lowercase and a space, which RFC 3339 allows.
        ("2020-12-31t22:08:03z", 1_609_452_483_000),
        ("2020-12-31 22:08:03Z", 1_609_452_483_000),
        // Offsets east and west, and the unknown-offset `-00:00`.
        ("2021-01-01T00:08:03+02:00", 1_609_452_483_000),
        ("2020-12-31T16:38:03-05:30", 1_609_452_483_000),
        ("2020-12-31T22:08:03-00:00", 1_609_452_483_000),
        ("2020-12-31T22:08:03+00:00", 1_609_452_483_000),
        // Fractions: any length, truncated to the millisecond.
        ("2000-02-29T23:59:59.5Z", 951_868_799_500),
        ("2000-02-29T23:59:59.123456789Z", 951_868_799_123),
        ("2000-02-29T23:59:59.9999Z", 951_868_799_999),
        // Leap years: every fourth, not centuries, but every fourth century.
        ("2024-02-29T00:00:00Z", 1_709_164_800_000),
        ("2000-02-29T00:00:00Z", 951_782_400_000),
        // A leap second reads as the second after :59.
        ("2016-12-31T23:59:60Z", 1_483_228_800_000),
        ("2016-12-31T23:59:60.250Z", 1_483_228_800_250),
        ("2017-01-01T00:00:00Z", 1_483_228_800_000),
        // Before the epoch, and the ends of what RFC 3339 can write.
        ("1969-12-31T23:59:59Z", -1_000),
        ("1969-12-31T23:59:59.999Z", -1),
        ("0000-01-01T00:00:00Z", MIN_MS),
        ("9999-12-31T23:59:59.999Z", MAX_MS),
    ] {
        check(text, Some(ms));
    }
}

#[test]
fn anything_else_is_refused() {
    for text in [
        // Dates the calendar does not have.
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-12-32T00:00:00Z",
        "2026-12-00T00:00:00Z",
        // Times the clock does not have.
        "2026-12-01T24:00:00Z",
        "2026-12-01T23:60:00Z",
        "2026-12-01T23:59:61Z",
        // Offsets out of range or misshapen, or missing.
        "2026-12-01T13:19:03+24:00",
        "2026-12-01T13:19:03+02:60",
        "2026-12-01T13:19:03+0200",
        "2026-12-01T13:19:03+02",
        "2026-12-01T13:19:03",
        // Not RFC 3339's shape.
        "2026-12-01",
        "2026-12-1T13:19:03Z",
        "2026-1-01T13:19:03Z",
        "26-12-01T13:19:03Z",
        "+2026-12-01T13:19:03Z",
        "12026-12-01T13:19:03Z",
        "2026-12-01T13:19Z",
        "2026-12-01T1:19:03Z",
        "2026-12-01T13:19:03.Z",
        "2026-12-01T13:19:03,5Z",
        "2026-12-01X13:19:03Z",
        " 2026-12-01T13:19:03Z",
        "2026-12-01T13:19:03Z ",
        "2026-12-01T13:19:03Zjunk",
        "yesterday",
        "",
    ] {
        check(text, None);
    }
}

#[test]
fn unsigned_records_read_only_times_after_the_epoch() {
    assert_eq!(
        parse_rfc3339_since_epoch("2021-01-01T00:08:03+02:00"),
        Some(1_609_452_483_000)
    );
    assert_eq!(parse_rfc3339_since_epoch("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(parse_rfc3339_since_epoch("1969-12-31T23:59:59Z"), None);
    assert_eq!(parse_rfc3339_since_epoch("2026-13-01T00:00:00Z"), None);
}

#[test]
fn a_refusal_quotes_at_most_a_little_of_the_text() {
    let long = format!("2026-12-01T13:19:03Z{}", "x".repeat(10_000));
    let message = parse_rfc3339(&long).unwrap_err().to_string();
    assert!(message.len() < 200, "{message}");
    assert!(message.contains('…'), "{message}");
}

#[test]
fn warden_writes_utc_with_milliseconds_and_reads_it_back() {
    for (ms, text, seconds, compact) in [
        (
            0,
            "1970-01-01T00:00:00.000Z",
            "1970-01-01T00:00:00Z",
            "19700101T000000Z",
        ),
        (
            1_796_131_143_042,
            "2026-12-01T13:19:03.042Z",
            "2026-12-01T13:19:03Z",
            "20261201T131903Z",
        ),
        (
            951_868_799_999,
            "2000-02-29T23:59:59.999Z",
            "2000-02-29T23:59:59Z",
            "20000229T235959Z",
        ),
        (
            -1,
            "1969-12-31T23:59:59.999Z",
            "1969-12-31T23:59:59Z",
            "19691231T235959Z",
        ),
    ] {
        assert_eq!(rfc3339(ms), text);
        assert_eq!(rfc3339_seconds(ms), seconds);
        assert_eq!(compact_timestamp(ms), compact);
        assert_eq!(parse_rfc3339(text), Ok(ms));
        assert_eq!(parse_rfc3339(seconds), Ok(ms.div_euclid(1000) * 1000));
    }
    // Outside years 0000-9999 RFC 3339 has no text: the nearest instant it has.
    assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
    assert_eq!(rfc3339(i64::MIN), "0000-01-01T00:00:00.000Z");
}

proptest! {
    #[test]
    fn every_instant_round_trips(ms in MIN_MS..=MAX_MS) {
        prop_assert_eq!(parse_rfc3339(&rfc3339(ms)), Ok(ms));
        prop_assert_eq!(
            parse_rfc3339(&rfc3339_seconds(ms)),
            Ok(ms.div_euclid(1000) * 1000)
        );
        let day = UtcDay::of_ms(ms);
        prop_assert!(day.start_ms() <= ms && ms < day.end_ms());
        prop_assert_eq!(UtcDay::parse(&day.to_string()), Ok(day));
        prop_assert!(rfc3339(ms).starts_with(&day.to_string()));
    }

    #[test]
    fn any_text_is_read_or_refused_without_panicking(text in "\\PC{0,40}") {
        let _ = parse_rfc3339(&text);
        let _ = UtcDay::parse(&text);
    }

    #[test]
    fn offsets_name_the_same_instant(ms in 0i64..=4_102_444_800_000, minutes in -1439i64..=1439) {
        let seconds = ms.div_euclid(1000) * 1000;
        let local = rfc3339_seconds(seconds + minutes * 60_000);
        let sign = if minutes < 0 { '-' } else { '+' };
        let offset = format!("{sign}{:02}:{:02}", minutes.abs() / 60, minutes.abs() % 60);
        let text = format!("{}{offset}", local.trim_end_matches('Z'));
        prop_assert_eq!(parse_rfc3339(&text), Ok(seconds));
    }
}

#[test]
fn days_follow_the_calendar() {
    for (ms, expected, weekday) in [
        (0, "1970-01-01", 4),
        (86_399_999, "1970-01-01", 4),
        (86_400_000, "1970-01-02", 5),
        (-1, "1969-12-31", 3),
        (951_782_400_000, "2000-02-29", 2),
        (1_796_083_200_000, "2026-12-01", 2),
    ] {
        let day = UtcDay::of_ms(ms);
        assert_eq!(day.to_string(), expected, "{ms}");
        assert_eq!(day.weekday(), weekday, "{expected}");
        let (y, m, d) = day.ymd();
        assert_eq!(UtcDay::from_ymd(y, m, d), Some(day));
        assert_eq!(UtcDay::parse(expected), Ok(day));
        assert!(day.start_ms() <= ms && ms < day.end_ms());
    }
    assert_eq!(UtcDay::from_ymd(2024, 2, 29), Some(UtcDay(19_782)));
    for (y, m, d) in [
        (2023, 2, 29),
        (2100, 2, 29),
        (2026, 2, 30),
        (2024, 13, 1),
        (2024, 0, 1),
        (2024, 4, 31),
        (2024, 1, 0),
        (i64::MAX, 1, 1),
    ] {
        assert_eq!(UtcDay::from_ymd(y, m, d), None, "{y}-{m}-{d}");
    }
    // Days far outside any calendar still display, clamped, and never panic.
    assert!(!UtcDay(i64::MAX).to_string().is_empty());
    assert!(!UtcDay(i64::MIN).to_string().is_empty());
}

#[test]
fn days_are_written_yyyy_mm_dd_and_nothing_else() {
    for (text, reason) in [
        ("2026-13-01", "the month must be 01-12"),
        ("2026-00-01", "the month must be 01-12"),
        ("2026-02-30", "no such day"),
        ("2023-02-29", "no such day"),
        ("2026-12-1", "expected YYYY-MM-DD"),
        ("26-12-01", "expected YYYY-MM-DD"),
        ("+026-12-01", "expected YYYY-MM-DD"),
        ("2026-12-01T00:00:00Z", "expected YYYY-MM-DD"),
        ("2026/12/01", "expected YYYY-MM-DD"),
        ("２０２６-12-01", "expected YYYY-MM-DD"),
        ("", "expected YYYY-MM-DD"),
    ] {
        let message = UtcDay::parse(text).unwrap_err().to_string();
        assert!(
            message.contains("is not a date like 2026-12-01") && message.contains(reason),
            "{text}: {message}"
        );
    }
}
