//! One way to write times, durations, token counts and money on every console page.
//!
//! Times are `<time datetime="…">` elements: relative (`5 min ago`) in lists, absolute in
//! details. The server writes absolute times in UTC with the zone (`2026-12-01 13:19 UTC`);
//! `assets/app.js` rewrites them in the reader's own zone (`2026-12-01 14:19 CET`, the same
//! shape) and keeps relative ones current. The `title` of a relative time is its absolute
//! time.

use maud::{html, Markup};
use warden_time::{rfc3339, UtcDay};

/// `2026-12-01 13:19 UTC`.
pub(super) fn utc_minutes(ms: i64) -> String {
    let day = UtcDay::of_ms(ms);
    let (y, m, d) = day.ymd();
    let minutes = (ms - day.start_ms()) / 60_000;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        minutes / 60,
        minutes % 60
    )
}

/// A time in a task's or a session's details.
pub(super) fn absolute(ms: i64) -> Markup {
    html! { time datetime=(rfc3339(ms)) data-at="absolute" { (utc_minutes(ms)) } }
}

/// A time in a list, relative to `now_ms`.
pub(super) fn relative(ms: i64, now_ms: i64) -> Markup {
    html! {
        time datetime=(rfc3339(ms)) data-at="relative" title=(utc_minutes(ms)) {
            (relative_words(ms, now_ms))
        }
    }
}

/// `just now`, `5 min ago`, `3 h ago`, `2 days ago`, `in 11 h`; a date beyond a month.
pub(super) fn relative_words(ms: i64, now_ms: i64) -> String {
    let delta = now_ms - ms;
    let past = delta >= 0;
    let seconds = delta.unsigned_abs() / 1000;
    let amount = match seconds {
        0..=44 => return "just now".into(),
        45..=3_599 => format!("{} min", (seconds + 30) / 60),
        3_600..=86_399 => format!("{} h", (seconds + 1_800) / 3_600),
        86_400..=2_591_999 => {
            let days = (seconds + 43_200) / 86_400;
            format!("{days} day{}", if days == 1 { "" } else { "s" })
        }
        _ => return utc_minutes(ms)[..10].to_string(),
    };
    if past {
        format!("{amount} ago")
    } else {
        format!("in {amount}")
    }
}

/// `850 ms`, `12.3 s`, `4 min 05 s`, `1 h 02 min`.
pub(super) fn duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// `950`, `12.3k`, `4.5M` tokens.
pub(super) fn tokens(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// `$0.0123`; `unpriced` when the model has no price.
pub(super) fn cost(usd: Option<f64>) -> String {
    match usd {
        Some(usd) => dollars(usd),
        None => "unpriced".into(),
    }
}

/// `$0.0123` under a dollar, `$12.34` above.
pub(super) fn dollars(usd: f64) -> String {
    if usd.abs() < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

/// A share as a whole percentage: `42%`.
pub(super) fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_the_same_everywhere() {
        assert_eq!(utc_minutes(1_796_131_143_042), "2026-12-01 13:19 UTC");
        let now = 1_796_131_143_042;
        let words = |seconds_ago: i64| relative_words(now - seconds_ago * 1000, now);
        assert_eq!(words(10), "just now");
        assert_eq!(words(5 * 60), "5 min ago");
        assert_eq!(words(3 * 3600 + 100), "3 h ago");
        assert_eq!(words(86_400), "1 day ago");
        assert_eq!(words(3 * 86_400), "3 days ago");
        assert_eq!(words(-11 * 3600), "in 11 h");
        assert_eq!(words(40 * 86_400), "2026-10-22");
        let markup = relative(now - 300_000, now).into_string();
        assert_eq!(
            markup,
            "<time datetime=\"2026-12-01T13:14:03.042Z\" data-at=\"relative\" \
             title=\"2026-12-01 13:14 UTC\">5 min ago</time>"
        );
    }

    #[test]
    fn durations_tokens_and_money() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_345), "12.3 s");
        assert_eq!(duration(245_000), "4 min 05 s");
        assert_eq!(duration(3_720_000), "1 h 02 min");
        assert_eq!(tokens(950), "950");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(tokens(4_500_000), "4.5M");
        assert_eq!(cost(Some(0.0123)), "$0.0123");
        assert_eq!(cost(Some(12.345)), "$12.35");
        assert_eq!(cost(None), "unpriced");
        assert_eq!(percent(0.424), "42%");
    }
}
