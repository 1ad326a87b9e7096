//! `[[schedules]]` of `warden.toml`: maintenance `warden serve` submits on its own, per
//! registered repository, on a standard 5-field cron expression in UTC ([`Cron`]), at most
//! `max_open_proposals` maintenance proposals of the repository open at once, and (with
//! `refresh`) a refresh of the repository's mirror and snapshot at each run; or, with
//! `action = "advisories_update"`, `warden advisories update` of `[maintain]`'s advisory
//! databases. Resolved at load:
//! a bad expression, an expression that is never due, a bad selection or check list stops
//! start-up with a message naming the entry (`schedules[INDEX] (repo NAME)`).

use anyhow::{anyhow, bail, Context};
use warden_config::ScheduleEntry;

use warden_engine::maintain_options::MaintainOptions;

/// What a `[[schedules]]` entry runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleAction {
    /// A maintenance task of `repo`.
    Maintain,
    /// `warden advisories update`: `[maintain]`'s advisory databases fetched (no repository,
    /// no task).
    AdvisoriesUpdate,
}

/// A `[[schedules]]` entry, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub action: ScheduleAction,
    /// The repository maintained (empty for `advisories_update`).
    pub repo: String,
    pub cron: Cron,
    pub maintain: MaintainOptions,
    pub checks: Option<Vec<String>>,
    pub publish: bool,
    pub max_open_proposals: u32,
    pub refresh: bool,
}

/// Resolves every entry; the first bad one stops with its index and repository named.
pub fn resolve(entries: &[ScheduleEntry]) -> anyhow::Result<Vec<Schedule>> {
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            resolve_entry(entry).with_context(|| match entry.action.as_deref() {
                Some("advisories_update") => format!("schedules[{index}] (advisories_update)"),
                _ => format!("schedules[{index}] (repo {:?})", entry.repo),
            })
        })
        .collect()
}

fn resolve_entry(entry: &ScheduleEntry) -> anyhow::Result<Schedule> {
    match entry.action.as_deref() {
        None | Some("maintain") => {}
        Some("advisories_update") => return resolve_advisories_update(entry),
        Some(other) => bail!("action {other:?}: expected \"maintain\" or \"advisories_update\""),
    }
    if entry.repo.is_empty() {
        bail!(
            "missing repo: a maintenance entry names a registered repository (an entry that \
             updates the advisory databases says action = \"advisories_update\")"
        );
    }
    let name_ok = !entry.repo.is_empty()
        && entry.repo.len() <= 100
        && !entry.repo.starts_with(['.', '-'])
        && entry
            .repo
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !name_ok {
        bail!("repo must be a registered repository's name");
    }
    let cron = Cron::parse(&entry.cron).map_err(|e| anyhow!("cron {:?}: {e}", entry.cron))?;
    let select = entry.select.clone().unwrap_or_default();
    if entry.select.as_ref().is_some_and(Vec::is_empty) {
        bail!("select must name all, vulnerable, or packages (or be left out for all)");
    }
    let maintain = MaintainOptions {
        select,
        ..MaintainOptions::default()
    };
    maintain.check().map_err(|e| anyhow!("select: {e}"))?;
    // `["all"]` is the default: stored as the default, as the API stores it.
    let maintain = if maintain.select == ["all"] {
        MaintainOptions::default()
    } else {
        maintain
    };
    if let Some(checks) = &entry.checks {
        if checks.is_empty() || checks.iter().any(|c| c.trim().is_empty()) {
            bail!("checks must be non-empty commands (or be left out for the repository's)");
        }
    }
    let max_open_proposals = entry.max_open_proposals.unwrap_or(1);
    if max_open_proposals == 0 {
        bail!("max_open_proposals must be at least 1");
    }
    Ok(Schedule {
        action: ScheduleAction::Maintain,
        repo: entry.repo.clone(),
        cron,
        maintain,
        checks: entry.checks.clone(),
        publish: entry.publish.unwrap_or(true),
        max_open_proposals,
        refresh: entry.refresh.unwrap_or(true),
    })
}

/// An `advisories_update` entry: a cron expression and nothing of maintenance's.
fn resolve_advisories_update(entry: &ScheduleEntry) -> anyhow::Result<Schedule> {
    let maintenance_keys = [
        ("repo", !entry.repo.is_empty()),
        ("select", entry.select.is_some()),
        ("checks", entry.checks.is_some()),
        ("publish", entry.publish.is_some()),
        ("max_open_proposals", entry.max_open_proposals.is_some()),
        ("refresh", entry.refresh.is_some()),
    ];
    if let Some((key, _)) = maintenance_keys.iter().find(|(_, set)| *set) {
        bail!(
            "{key} is maintenance's: an advisories_update entry updates [maintain]'s advisory \
             databases and takes only cron"
        );
    }
    let cron = Cron::parse(&entry.cron).map_err(|e| anyhow!("cron {:?}: {e}", entry.cron))?;
    Ok(Schedule {
        action: ScheduleAction::AdvisoriesUpdate,
        repo: String::new(),
        cron,
        maintain: MaintainOptions::default(),
        checks: None,
        publish: false,
        max_open_proposals: 1,
        refresh: false,
    })
}

/// A 5-field cron expression (`minute hour day-of-month month day-of-week`), in UTC. Each
/// field is `*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or `a/n` (from `a` to the
/// field's end), or a comma-separated list of those; numbers only (no `JAN`/`MON` names).
/// Day-of-week 0 and 7 are both Sunday. As in Vixie cron, when both day-of-month and
/// day-of-week are restricted (neither starts with `*`), a day matching either is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    /// Bit 0 is Sunday (7 folded into 0).
    weekdays: u64,
    days_restricted: bool,
    weekdays_restricted: bool,
}

/// How far ahead [`Cron::next_after`] looks: 9 years holds a 29 February whatever the start
/// (leap years are at most 8 apart), so every expression [`Cron::parse`] accepts is found.
const SEARCH_DAYS: i64 = 366 * 9;

impl Cron {
    /// Parses `text`; refuses a malformed field (naming it) and an expression that is never
    /// due (a day-of-month no selected month has, such as `30 2` for 30 February).
    pub fn parse(text: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), got {}",
                fields.len()
            ));
        }
        let minutes = field(fields[0], "minute", 0, 59)?;
        let hours = field(fields[1], "hour", 0, 23)?;
        let days = field(fields[2], "day-of-month", 1, 31)?;
        let months = field(fields[3], "month", 1, 12)?;
        let mut weekdays = field(fields[4], "day-of-week", 0, 7)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        let cron = Cron {
            minutes,
            hours,
            days,
            months,
            weekdays,
            days_restricted: !fields[2].starts_with('*'),
            weekdays_restricted: !fields[4].starts_with('*'),
        };
        // Only day-of-month alone can rule out every day: with day-of-week restricted too,
        // a matching weekday is due.
        if cron.days_restricted && !cron.weekdays_restricted {
            let possible = (1..=12u32).any(|month| {
                cron.months & (1 << month) != 0
                    && (1..=max_days(month)).any(|day| cron.days & (1 << day) != 0)
            });
            if !possible {
                return Err("never due: no selected month has the selected day-of-month".into());
            }
        }
        Ok(cron)
    }

    /// Whether the minute starting at `minute` (minutes since the Unix epoch, UTC) is due.
    pub fn matches_minute(&self, minute: i64) -> bool {
        let day = minute.div_euclid(1440);
        let in_day = minute.rem_euclid(1440);
        self.minutes & (1 << (in_day % 60)) != 0
            && self.hours & (1 << (in_day / 60)) != 0
            && self.matches_day(day)
    }

    fn matches_day(&self, day: i64) -> bool {
        let day = warden_time::UtcDay(day);
        let (_, month, dom) = day.ymd();
        if self.months & (1 << month) == 0 {
            return false;
        }
        let weekday = day.weekday();
        let dom_ok = self.days & (1 << dom) != 0;
        let dow_ok = self.weekdays & (1 << weekday) != 0;
        if self.days_restricted && self.weekdays_restricted {
            dom_ok || dow_ok
        } else {
            dom_ok && dow_ok
        }
    }

    /// The first due minute strictly after `minute` (minutes since the Unix epoch), `None`
    /// if none comes within years (never for an expression [`Cron::parse`] accepted).
    pub fn next_after(&self, minute: i64) -> Option<i64> {
        let start = minute + 1;
        let first_day = start.div_euclid(1440);
        for day in first_day..first_day + SEARCH_DAYS {
            if !self.matches_day(day) {
                continue;
            }
            let from = if day == first_day {
                start.rem_euclid(1440)
            } else {
                0
            };
            for in_day in from..1440 {
                if self.hours & (1 << (in_day / 60)) != 0
                    && self.minutes & (1 << (in_day % 60)) != 0
                {
                    return Some(day * 1440 + in_day);
                }
            }
        }
        None
    }
}

/// One field's set of values as a bit mask (bit `v` for value `v`).
fn field(text: &str, name: &str, min: u32, max: u32) -> Result<u64, String> {
    let mut mask = 0u64;
    for part in text.split(',') {
        let bad = |why: &str| format!("{name} field {text:?}: {why}");
        let number = |s: &str| -> Result<u32, String> {
            let value: u32 = s
                .parse()
                .map_err(|_| bad(&format!("{s:?} is not a number")))?;
            if !(min..=max).contains(&value) {
                return Err(bad(&format!("{value} is outside {min}-{max}")));
            }
            Ok(value)
        };
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| bad(&format!("step {step:?} is not a number")))?;
                if step == 0 {
                    return Err(bad("a step must be at least 1"));
                }
                (range, step)
            }
            None => (part, 1),
        };
        let (low, high) = if range == "*" {
            (min, max)
        } else if let Some((low, high)) = range.split_once('-') {
            let (low, high) = (number(low)?, number(high)?);
            if low > high {
                return Err(bad(&format!("range {low}-{high} runs backwards")));
            }
            (low, high)
        } else if part.contains('/') {
            // `a/n`: from a to the field's end.
            (number(range)?, max)
        } else {
            let value = number(range)?;
            (value, value)
        };
        let mut value = low;
        while value <= high {
            mask |= 1 << value;
            value += step;
        }
    }
    Ok(mask)
}

/// Days in `month` at most (29 for February: leap years have it).
fn max_days(month: u32) -> u32 {
    match month {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `2026-12-03T15:22Z` for a minute since the epoch (idempotency keys, log lines).
pub fn minute_text(minute: i64) -> String {
    let day = minute.div_euclid(1440);
    let in_day = minute.rem_euclid(1440);
    let (year, month, dom) = warden_time::UtcDay(day).ymd();
    format!(
        "{year:04}-{month:02}-{dom:02}T{:02}:{:02}Z",
        in_day / 60,
        in_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// Minutes since the epoch of `YYYY-MM-DD HH:MM` UTC.
    fn at(text: &str) -> i64 {
        warden_time::parse_rfc3339(&format!("{text}:00Z")).unwrap() / 60_000
    }

    fn next(cron: &str, from: &str) -> String {
        minute_text(Cron::parse(cron).unwrap().next_after(at(from)).unwrap())
    }

    #[test]
    fn an_advisories_update_entry_takes_a_cron_expression_and_nothing_of_maintenance() {
        let schedules = entries(
            "[[schedules]]\naction = \"advisories_update\"\ncron = \"0 4 * * *\"\n\n\
             [[schedules]]\nrepo = \"app\"\ncron = \"0 5 * * 1\"\n",
        )
        .unwrap();
        assert_eq!(schedules[0].action, ScheduleAction::AdvisoriesUpdate);
        assert_eq!(schedules[0].repo, "");
        assert_eq!(schedules[1].action, ScheduleAction::Maintain);
        assert_eq!(schedules[1].repo, "app");

        let error = entries(
            "[[schedules]]\naction = \"advisories_update\"\nrepo = \"app\"\ncron = \"0 4 * * *\"\n",
        )
        .unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "schedules[0] (advisories_update): repo is maintenance's: an advisories_update entry \
             updates [maintain]'s advisory databases and takes only cron"
        );
        let error =
            entries("[[schedules]]\naction = \"fetch\"\ncron = \"0 4 * * *\"\n").unwrap_err();
        assert!(
            format!("{error:#}").contains("action \"fetch\": expected"),
            "{error:#}"
        );
        // A maintenance entry still needs its repository.
        let error = entries("[[schedules]]\ncron = \"0 4 * * *\"\n").unwrap_err();
        assert!(
            format!("{error:#}").contains("schedules[0] (repo \"\"): missing repo"),
            "{error:#}"
        );
    }

    #[test]
    fn minutes_convert_both_ways() {
        assert_eq!(minute_text(0), "1970-01-01T00:00Z");
        assert_eq!(minute_text(at("2026-12-03 15:22")), "2026-12-03T15:22Z");
        assert_eq!(minute_text(at("2024-02-29 23:59")), "2024-02-29T23:59Z");
    }

    #[test]
    fn every_minute_and_fixed_times() {
        assert_eq!(next("* * * * *", "2026-12-03 15:22"), "2026-12-03T15:23Z");
        assert_eq!(next("0 3 * * *", "2026-12-03 15:22"), "2026-12-04T03:00Z");
        assert_eq!(next("0 3 * * *", "2026-12-03 02:59"), "2026-12-03T03:00Z");
        // Strictly after: the due minute itself is not next.
        assert_eq!(next("0 3 * * *", "2026-12-03 03:00"), "2026-12-04T03:00Z");
        assert!(Cron::parse("30 15 * * *")
            .unwrap()
            .matches_minute(at("2026-12-03 15:30")));
        assert!(!Cron::parse("30 15 * * *")
            .unwrap()
            .matches_minute(at("2026-12-03 15:31")));
    }

    #[test]
    fn steps_ranges_and_lists() {
        assert_eq!(
            next("*/15 * * * *", "2026-12-03 15:22"),
            "2026-12-03T15:30Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2026-12-03 15:50"),
            "2026-12-03T16:00Z"
        );
        // A step over a range starts at the range's start.
        assert_eq!(
            next("10-40/20 * * * *", "2026-12-03 15:31"),
            "2026-12-03T16:10Z"
        );
        assert_eq!(
            next("10-40/20 * * * *", "2026-12-03 15:10"),
            "2026-12-03T15:30Z"
        );
        // `a/n`: from a to the end of the field.
        assert_eq!(
            next("50/5 * * * *", "2026-12-03 15:56"),
            "2026-12-03T16:50Z"
        );
        assert_eq!(
            next("0 9-17/4 * * *", "2026-12-03 13:00"),
            "2026-12-03T17:00Z"
        );
        assert_eq!(
            next("5,35 1,13 * * *", "2026-12-03 13:06"),
            "2026-12-03T13:35Z"
        );
        assert_eq!(
            next("5,35 1,13 * * *", "2026-12-03 13:36"),
            "2026-12-04T01:05Z"
        );
        assert_eq!(
            next("0-2,58-59 0 * * *", "2026-12-03 00:02"),
            "2026-12-03T00:58Z"
        );
    }

    #[test]
    fn day_of_week_0_and_7_are_sunday() {
        // 2026-12-03 is a Thursday; the next Sunday is the 6th.
        assert_eq!(next("0 0 * * 0", "2026-12-03 15:22"), "2026-12-06T00:00Z");
        assert_eq!(next("0 0 * * 7", "2026-12-03 15:22"), "2026-12-06T00:00Z");
        assert_eq!(
            Cron::parse("0 0 * * 0").unwrap(),
            Cron::parse("0 0 * * 7").unwrap()
        );
        // Monday to Friday, from a Friday evening: Monday.
        assert_eq!(next("0 8 * * 1-5", "2026-12-04 09:00"), "2026-12-07T08:00Z");
        assert_eq!(next("0 8 * * 5-7", "2026-12-04 09:00"), "2026-12-05T08:00Z");
    }

    #[test]
    fn month_and_day_boundaries() {
        // The last minute of a year rolls into the next.
        assert_eq!(next("* * * * *", "2026-12-31 23:59"), "2027-01-01T00:00Z");
        assert_eq!(next("0 0 1 * *", "2026-12-03 00:00"), "2027-01-01T00:00Z");
        // The 31st skips the months without one.
        assert_eq!(next("0 0 31 * *", "2027-01-31 00:00"), "2027-03-31T00:00Z");
        // 29 February waits for a leap year.
        assert_eq!(next("0 0 29 2 *", "2026-12-03 00:00"), "2028-02-29T00:00Z");
        // Both day fields restricted: either one is due (the 1st, or a Sunday).
        assert_eq!(next("0 0 1 * 0", "2026-12-03 00:00"), "2026-12-06T00:00Z");
        assert_eq!(next("0 0 1 * 0", "2026-12-27 00:01"), "2027-01-01T00:00Z");
        // A step over day-of-month restricts it too.
        assert_eq!(
            next("0 0 */10 * *", "2026-12-03 00:00"),
            "2026-12-11T00:00Z"
        );
    }

    #[test]
    fn bad_and_never_due_expressions_are_refused() {
        for (bad, why) in [
            ("* * * *", "expected 5 fields"),
            ("* * * * * *", "expected 5 fields"),
            ("60 * * * *", "minute field \"60\": 60 is outside 0-59"),
            ("* 24 * * *", "outside 0-23"),
            ("* * 0 * *", "outside 1-31"),
            ("* * * 13 *", "outside 1-12"),
            ("* * * * 8", "outside 0-7"),
            ("*/0 * * * *", "a step must be at least 1"),
            ("5-1 * * * *", "runs backwards"),
            ("a * * * *", "\"a\" is not a number"),
            ("* * * JAN *", "not a number"),
            ("1,,2 * * * *", "not a number"),
            ("*/x * * * *", "step \"x\" is not a number"),
            ("0 0 30 2 *", "never due"),
            ("0 0 31 4,6,9,11 *", "never due"),
        ] {
            let error = Cron::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
        // 30 February with a weekday restricted is due on that weekday (Vixie's "either").
        assert!(Cron::parse("0 0 30 2 1").is_ok());
    }

    fn entries(text: &str) -> anyhow::Result<Vec<Schedule>> {
        #[derive(Deserialize)]
        struct File {
            schedules: Vec<ScheduleEntry>,
        }
        resolve(&toml::from_str::<File>(text)?.schedules)
    }

    #[test]
    fn entries_resolve_with_defaults_and_name_the_bad_one() {
        let resolved = entries(
            "[[schedules]]\nrepo = \"app\"\ncron = \"0 3 * * *\"\n\
             [[schedules]]\nrepo = \"lib\"\ncron = \"*/30 * * * 1-5\"\nselect = [\"vulnerable\"]\n\
             checks = [\"cargo test\"]\npublish = false\nmax_open_proposals = 3\nrefresh = false\n",
        )
        .unwrap();
        assert_eq!(resolved[0].repo, "app");
        assert_eq!(resolved[0].maintain, MaintainOptions::default());
        assert!(resolved[0].publish && resolved[0].refresh);
        assert_eq!(resolved[0].max_open_proposals, 1);
        assert_eq!(resolved[0].checks, None);
        assert_eq!(resolved[1].maintain.select, ["vulnerable"]);
        assert_eq!(
            resolved[1].checks.as_deref(),
            Some(&["cargo test".to_string()][..])
        );
        assert!(!resolved[1].publish && !resolved[1].refresh);
        assert_eq!(resolved[1].max_open_proposals, 3);
        // `["all"]` is the default, stored as such.
        let all =
            entries("[[schedules]]\nrepo = \"app\"\ncron = \"0 3 * * *\"\nselect = [\"all\"]\n")
                .unwrap();
        assert_eq!(all[0].maintain, MaintainOptions::default());
        for (bad, why) in [
            (
                "repo = \"app\"\ncron = \"0 0 30 2 *\"",
                "schedules[1] (repo \"app\")",
            ),
            ("repo = \"app\"\ncron = \"0 0 30 2 *\"", "never due"),
            (
                "repo = \"app\"\ncron = \"61 * * * *\"",
                "cron \"61 * * * *\"",
            ),
            ("repo = \"../x\"\ncron = \"* * * * *\"", "repository's name"),
            (
                "repo = \"app\"\ncron = \"* * * * *\"\nselect = [\"all\", \"serde\"]",
                "not a mix",
            ),
            (
                "repo = \"app\"\ncron = \"* * * * *\"\nselect = []",
                "select must name",
            ),
            (
                "repo = \"app\"\ncron = \"* * * * *\"\nmax_open_proposals = 0",
                "at least 1",
            ),
            (
                "repo = \"app\"\ncron = \"* * * * *\"\nchecks = [\" \"]",
                "checks must be",
            ),
            (
                "repo = \"app\"\ncron = \"* * * * *\"\ncolour = 1",
                "unknown field",
            ),
            ("cron = \"* * * * *\"", "missing repo"),
        ] {
            let text = format!(
                "[[schedules]]\nrepo = \"ok\"\ncron = \"0 3 * * *\"\n[[schedules]]\n{bad}\n"
            );
            let error = format!("{:#}", entries(&text).unwrap_err());
            assert!(error.contains(why), "{bad}: {error}");
        }
    }
}
