//! Times for `-S/-E` and for the Start/End columns, as `sacct` reads and prints them.

use chrono::{DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};

/// The forms [`parse_time`] accepts, for error messages.
pub const TIME_FORMS: &str = "YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY][-HH:MM[:SS]], HH:MM[:SS] (today), \
     now[{+|-}N[seconds|minutes|hours|days|weeks]], today, midnight, noon";

/// Parses a `sacct -S/-E` time, relative to `now`, into ns since the Unix epoch.
///
/// Accepted: `YYYY-MM-DD[THH:MM[:SS]]`; `MM/DD[/YY][-HH:MM[:SS]]` (without a year, a month
/// later than the current one means last year, as sacct looks into the past); `HH:MM[:SS]`
/// (today); `now`, `now-2days`, `now+30` (seconds by default; units `seconds`, `minutes`,
/// `hours`, `days`, `weeks`, singular, plural or abbreviated `s/sec/m/min/h/d/w`); `today` and
/// `midnight` (00:00 today), `noon` (12:00 today). A date without a time is its midnight.
/// Times are in `now`'s time zone; a local time skipped by a DST change is an error.
pub fn parse_time<Tz: TimeZone>(s: &str, now: DateTime<Tz>) -> Result<i64, String> {
    let bad = |why: &str| format!("invalid time {s:?}: {why}; accepted forms: {TIME_FORMS}");
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let tz = now.timezone();
    let today = now.date_naive();
    let at =
        |d: NaiveDate, tm: NaiveTime| local_ns(&tz, d.and_time(tm)).ok_or_else(|| bad("no such local time"));
    match lower.as_str() {
        "today" | "midnight" => return at(today, NaiveTime::MIN),
        "noon" => return at(today, NaiveTime::from_hms_opt(12, 0, 0).unwrap()),
        _ => {}
    }
    if let Some(rest) = lower.strip_prefix("now") {
        let rest = rest.trim();
        let base = now.timestamp_nanos_opt().ok_or_else(|| bad("out of range"))?;
        if rest.is_empty() {
            return Ok(base);
        }
        let (sign, rest) = match rest.as_bytes()[0] {
            b'+' => (1, &rest[1..]),
            b'-' => (-1, &rest[1..]),
            _ => return Err(bad("expected + or - after now")),
        };
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n: i64 = rest[..digits].parse().map_err(|_| bad("expected a number after now+/now-"))?;
        let unit_s = match rest[digits..].trim() {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86_400,
            "w" | "week" | "weeks" => 604_800,
            _ => return Err(bad("unknown unit")),
        };
        let delta = n
            .checked_mul(unit_s)
            .and_then(|x| x.checked_mul(1_000_000_000))
            .ok_or_else(|| bad("too large"))?;
        return base.checked_add(sign * delta).ok_or_else(|| bad("out of range"));
    }
    // YYYY-MM-DD[THH:MM[:SS]]
    if t.len() >= 10 && t.as_bytes()[4] == b'-' {
        let (date, time) = match t.split_once('T') {
            Some((d, tm)) => (d, Some(tm)),
            None => (t, None),
        };
        let d = NaiveDate::parse_from_str(date, "%Y-%m-%d").map_err(|_| bad("bad date"))?;
        let tm = match time {
            Some(tm) => clock(tm).ok_or_else(|| bad("bad time of day"))?,
            None => NaiveTime::MIN,
        };
        return at(d, tm);
    }
    // MM/DD[/YY][-HH:MM[:SS]]
    if t.contains('/') {
        let (date, time) = match t.split_once('-') {
            Some((d, tm)) => (d, Some(tm)),
            None => (t, None),
        };
        let parts: Vec<&str> = date.split('/').collect();
        let num = |p: &str| p.parse::<u32>().map_err(|_| bad("bad date"));
        let (month, day) = match parts.as_slice() {
            [m, d] | [m, d, _] => (num(m)?, num(d)?),
            _ => return Err(bad("bad date")),
        };
        let year = match parts.get(2) {
            Some(y) if y.len() == 2 => 2000 + num(y)? as i32,
            Some(_) => return Err(bad("year must have two digits in MM/DD/YY")),
            None if month > today.month() => today.year() - 1,
            None => today.year(),
        };
        let d = NaiveDate::from_ymd_opt(year, month, day).ok_or_else(|| bad("no such date"))?;
        let tm = match time {
            Some(tm) => clock(tm).ok_or_else(|| bad("bad time of day"))?,
            None => NaiveTime::MIN,
        };
        return at(d, tm);
    }
    // HH:MM[:SS] today
    if let Some(tm) = clock(t) {
        return at(today, tm);
    }
    Err(bad("unrecognised"))
}

/// `HH:MM` or `HH:MM:SS`.
fn clock(s: &str) -> Option<NaiveTime> {
    NaiveTime::parse_from_str(s, "%H:%M:%S").or_else(|_| NaiveTime::parse_from_str(s, "%H:%M")).ok()
}

/// The earliest instant of a local time; `None` if DST skipped it.
fn local_ns<Tz: TimeZone>(tz: &Tz, t: NaiveDateTime) -> Option<i64> {
    match tz.from_local_datetime(&t) {
        LocalResult::Single(x) | LocalResult::Ambiguous(x, _) => x.timestamp_nanos_opt(),
        LocalResult::None => None,
    }
}

/// A time as `sacct` prints Start/End by default: `YYYY-MM-DDTHH:MM:SS` in `tz`.
pub fn format_time<Tz: TimeZone>(ns: i64, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let secs = ns.div_euclid(1_000_000_000);
    match tz.timestamp_opt(secs, 0) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.format("%Y-%m-%dT%H:%M:%S").to_string(),
        LocalResult::None => "Unknown".to_string(),
    }
}

/// Whole seconds between two ns times (never negative).
pub(crate) fn whole_secs(from_ns: i64, to_ns: i64) -> u64 {
    (to_ns.saturating_sub(from_ns).max(0) / 1_000_000_000) as u64
}

#[cfg(test)]
mod tests {
    use chrono::FixedOffset;

    use super::*;

    fn now() -> DateTime<FixedOffset> {
        // Wednesday 2025-03-12 15:30:20 at UTC+01:00.
        FixedOffset::east_opt(3600).unwrap().with_ymd_and_hms(2025, 3, 12, 15, 30, 20).unwrap()
    }

    /// Expected values written as UTC epoch seconds (computed by hand from UTC+1).
    fn p(s: &str) -> i64 {
        parse_time(s, now()).unwrap() / 1_000_000_000
    }

    #[test]
    fn accepted_forms() {
        // 2025-03-12T14:30:20Z = 1741789820
        assert_eq!(p("now"), 1_741_789_820);
        assert_eq!(p("now-1hour"), 1_741_789_820 - 3600);
        assert_eq!(p("now-2days"), 1_741_789_820 - 2 * 86_400);
        assert_eq!(p("now+30"), 1_741_789_820 + 30);
        assert_eq!(p("NOW-1weeks"), 1_741_789_820 - 604_800);
        assert_eq!(p("now-5minutes"), 1_741_789_820 - 300);
        // 2025-03-12T00:00:00+01:00 = 2025-03-11T23:00:00Z = 1741734000
        assert_eq!(p("today"), 1_741_734_000);
        assert_eq!(p("midnight"), 1_741_734_000);
        assert_eq!(p("noon"), 1_741_734_000 + 12 * 3600);
        assert_eq!(p("08:15"), 1_741_734_000 + 8 * 3600 + 15 * 60);
        assert_eq!(p("08:15:09"), 1_741_734_000 + 8 * 3600 + 15 * 60 + 9);
        // 2025-01-01T00:00:00+01:00 = 2024-12-31T23:00:00Z = 1735686000
        assert_eq!(p("2025-01-01"), 1_735_686_000);
        assert_eq!(p("2025-01-01T06:30"), 1_735_686_000 + 6 * 3600 + 1800);
        assert_eq!(p("2025-01-01T06:30:05"), 1_735_686_000 + 6 * 3600 + 1800 + 5);
        assert_eq!(p("01/01"), 1_735_686_000);
        assert_eq!(p("01/01/25"), 1_735_686_000);
        assert_eq!(p("01/01/25-06:30"), 1_735_686_000 + 6 * 3600 + 1800);
        // A month after March without a year is last year: 2024-12-24T00:00+01:00.
        assert_eq!(p("12/24"), 1_735_686_000 - 8 * 86_400);
    }

    #[test]
    fn bad_forms_list_what_is_accepted() {
        for s in ["yesterday", "2025-13-01", "13/01", "now*3", "now-3fortnights", "25:00", "2025-02-30", ""] {
            let err = parse_time(s, now()).unwrap_err();
            assert!(err.contains("YYYY-MM-DD[THH:MM[:SS]]") && err.contains("now["), "{s}: {err}");
        }
    }

    #[test]
    fn start_end_format() {
        let tz = FixedOffset::east_opt(3600).unwrap();
        assert_eq!(format_time(1_741_789_820_123_456_789, &tz), "2025-03-12T15:30:20");
        assert_eq!(format_time(0, &chrono::Utc), "1970-01-01T00:00:00");
    }
}
