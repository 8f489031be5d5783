//! A CronJob's schedule: the latest run missed up to now, and when the next one is due.
//!
//! Parsed by the `croner` crate as robfig/cron's `ParseStandard` (the original's parser) reads
//! a schedule: five fields, or a descriptor such as `@hourly`; no seconds, no years. Times are
//! UTC, the plugin's clock.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

/// How many missed start times a CronJob may have before the controller refuses to guess which
/// to run: the original's bound, against a clock that is off by years (or a schedule that ran
/// every minute while the controller was down for days) eating the controller's CPU.
pub const MAX_MISSED_STARTS: usize = 100;

/// What a schedule says at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runs {
    /// The latest schedule time after the earliest time considered and not after now, if any.
    pub missed: Option<Timestamp>,
    /// The first schedule time after now.
    pub next: Timestamp,
}

/// Why no run can be worked out: both wait for an edit of the CronJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The schedule does not parse.
    Unparseable(String),
    /// More than [`MAX_MISSED_STARTS`] schedule times were missed.
    TooManyMissed,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unparseable(why) => write!(f, "unparseable schedule: {why}"),
            Error::TooManyMissed => write!(
                f,
                "too many missed start times (> {MAX_MISSED_STARTS}): set or decrease \
                 .spec.startingDeadlineSeconds or check clock skew"
            ),
        }
    }
}

/// The schedule `text`, parsed.
pub fn parse(text: &str) -> Result<Cron, Error> {
    let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
    parser.parse(text).map_err(|e| Error::Unparseable(format!("{text:?}: {e}")))
}

/// The first time of `cron` strictly after `after`.
fn next_after(cron: &Cron, after: Timestamp) -> Result<Timestamp, Error> {
    let zoned = Zoned::new(after, TimeZone::UTC);
    let next = cron.find_next_occurrence(&zoned, false).map_err(|e| Error::Unparseable(e.to_string()))?;
    Ok(next.timestamp())
}

/// The runs of `cron` at `now`, counting missed times from `since` (the last run, or the
/// CronJob's creation) or, with a starting deadline, from no earlier than the deadline before
/// now: the original's `getNextSchedule`.
pub fn runs(cron: &Cron, since: Timestamp, deadline_seconds: Option<i64>, now: Timestamp) -> Result<Runs, Error> {
    let mut earliest = since;
    if let Some(seconds) = deadline_seconds {
        earliest = earliest.max(now - SignedDuration::from_secs(seconds));
    }
    let next = next_after(cron, now)?;
    if earliest > now {
        return Ok(Runs { missed: None, next });
    }
    let (mut missed, mut starts) = (None, 0);
    let mut time = next_after(cron, earliest)?;
    while time <= now {
        missed = Some(time);
        starts += 1;
        if starts > MAX_MISSED_STARTS {
            return Err(Error::TooManyMissed);
        }
        time = next_after(cron, time)?;
    }
    Ok(Runs { missed, next })
}

/// Whether a run at `run` is too late to start at `now` with a starting deadline.
pub fn too_late(run: Timestamp, deadline_seconds: Option<i64>, now: Timestamp) -> bool {
    deadline_seconds.is_some_and(|seconds| run + SignedDuration::from_secs(seconds) < now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_latest_of_several_missed_times_is_the_run_and_the_next_is_after_now() {
        let hourly = parse("0 * * * *").unwrap();
        let runs = runs(&hourly, at("2026-11-29T10:30:00Z"), None, at("2026-11-29T13:15:00Z")).unwrap();
        assert_eq!(runs, Runs { missed: Some(at("2026-11-29T13:00:00Z")), next: at("2026-11-29T14:00:00Z") });
    }

    #[test]
    fn a_time_equal_to_the_last_run_is_not_missed_again_but_one_equal_to_now_is() {
        let hourly = parse("@hourly").unwrap();
        let none = runs(&hourly, at("2026-11-29T13:00:00Z"), None, at("2026-11-29T13:59:59Z")).unwrap();
        assert_eq!(none.missed, None);
        let now = runs(&hourly, at("2026-11-29T13:00:00Z"), None, at("2026-11-29T14:00:00Z")).unwrap();
        assert_eq!(now.missed, Some(at("2026-11-29T14:00:00Z")));
    }

    #[test]
    fn a_starting_deadline_hides_times_older_than_itself() {
        let yearly = parse("0 12 1 3 *").unwrap();
        let (since, now) = (at("2025-01-01T00:00:00Z"), at("2026-11-29T13:00:00Z"));
        assert_eq!(runs(&yearly, since, None, now).unwrap().missed, Some(at("2026-03-01T12:00:00Z")));
        assert_eq!(runs(&yearly, since, Some(3600), now).unwrap().missed, None);
        assert!(too_late(at("2026-03-01T12:00:00Z"), Some(3600), now));
        assert!(!too_late(at("2026-11-29T12:30:00Z"), Some(3600), now));
        assert!(!too_late(at("2026-03-01T12:00:00Z"), None, now));
    }

    #[test]
    fn more_than_a_hundred_missed_times_is_an_error_unless_a_deadline_bounds_them() {
        let every_minute = parse("* * * * *").unwrap();
        let (since, now) = (at("2026-11-29T10:00:00Z"), at("2026-11-29T13:00:00Z"));
        assert_eq!(runs(&every_minute, since, None, now), Err(Error::TooManyMissed));
        let bounded = runs(&every_minute, since, Some(600), now).unwrap();
        assert_eq!(bounded.missed, Some(now));
        let hundred = runs(&every_minute, at("2026-11-29T11:20:00Z"), None, now).unwrap();
        assert_eq!(hundred.missed, Some(now), "exactly 100 missed times are still run");
    }

    #[test]
    fn day_of_month_and_day_of_week_match_either_when_both_are_given_as_in_cron() {
        // 2026-12-01 is a Tuesday: "the 1st or any Friday" is due then, and again on Friday the 4th.
        let either = parse("0 0 1 * FRI").unwrap();
        let runs = runs(&either, at("2026-11-30T00:00:00Z"), None, at("2026-12-02T00:00:00Z")).unwrap();
        assert_eq!((runs.missed, runs.next), (Some(at("2026-12-01T00:00:00Z")), at("2026-12-04T00:00:00Z")));
    }

    #[test]
    fn a_schedule_with_seconds_or_a_wrong_field_does_not_parse() {
        assert!(matches!(parse("0 0 * * * *"), Err(Error::Unparseable(_))), "six fields are robfig's, not standard");
        assert!(matches!(parse("61 * * * *"), Err(Error::Unparseable(_))));
        assert!(matches!(parse(""), Err(Error::Unparseable(_))));
    }
}
