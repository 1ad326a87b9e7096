//! Times as every interface writes them: RFC 3339 in UTC with milliseconds. Shared by the API,
//! callbacks, the event hub and proposal publication.

use warden_store::UtcDay;

/// `2026-12-02T12:34:56.789Z`.
pub fn rfc3339(ms: i64) -> String {
    let day = UtcDay::of_ms(ms);
    let (y, m, d) = day.ymd();
    let in_day = ms - day.start_ms();
    let seconds = in_day / 1000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60,
        in_day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn milliseconds_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_131_143_042), "2026-12-01T13:19:03.042Z");
    }
}
