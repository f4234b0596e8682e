//! UTC formatting and parsing of millisecond timestamps, as UDF outputs usually need.
//!
//! Hand-written (Howard Hinnant's `civil_from_days` / `days_from_civil`) rather than
//! pulled from `chrono`: it is a few lines, covers the whole `i64` range, and keeps the
//! components small. The tests check it against `chrono`.

use std::fmt::Write as _;

use anyhow::{anyhow, bail};

use crate::result::Result;

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's timestamp.
    EventTime,
    /// Fires when the host's wall clock reaches the timer's timestamp.
    ProcessingTime,
}

const MILLIS_PER_DAY: i64 = 86_400_000;

/// A UTC calendar date and time of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    milli: u32,
}

fn civil(ms: i64) -> Civil {
    let days = ms.div_euclid(MILLIS_PER_DAY);
    let of_day = ms.rem_euclid(MILLIS_PER_DAY);
    // Days since 0000-03-01, so that leap days end the (shifted) year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let of_day = of_day as u32;
    Civil {
        year,
        month,
        day,
        hour: of_day / 3_600_000,
        minute: of_day / 60_000 % 60,
        second: of_day / 1_000 % 60,
        milli: of_day % 1_000,
    }
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = year - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

fn write_date_time(out: &mut String, c: &Civil) {
    // Years outside 0..=9999 carry a sign, as ISO 8601 (and chrono) write them.
    if (0..=9999).contains(&c.year) {
        push_digits(out, c.year as u32, 4);
    } else {
        let _ = write!(out, "{:+05}", c.year);
    }
    // Written digit by digit: this runs once per emitted record, and `core::fmt` padding
    // costs more than the rest of a typical UDF call.
    out.push('-');
    push_digits(out, c.month, 2);
    out.push('-');
    push_digits(out, c.day, 2);
    out.push(' ');
    push_digits(out, c.hour, 2);
    out.push(':');
    push_digits(out, c.minute, 2);
    out.push(':');
    push_digits(out, c.second, 2);
}

/// Appends `value` as exactly `width` decimal digits (zero-padded, high digits dropped).
fn push_digits(out: &mut String, value: u32, width: u32) {
    for place in (0..width).rev() {
        let digit = value / 10u32.pow(place) % 10;
        out.push(char::from(b'0' + digit as u8));
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm` in UTC, e.g. `2026-11-29 10:00:00.123`.
pub fn format_millis(ms: i64) -> String {
    let c = civil(ms);
    let mut out = String::with_capacity(23);
    write_date_time(&mut out, &c);
    out.push('.');
    push_digits(&mut out, c.milli, 3);
    out
}

/// `YYYY-MM-DD HH:MM:SS` in UTC (milliseconds dropped, rounding toward the past).
pub fn format_seconds(ms: i64) -> String {
    let mut out = String::with_capacity(19);
    write_date_time(&mut out, &civil(ms));
    out
}

/// Parses `YYYY-MM-DD HH:MM:SS[.fff]` (or with `T` between date and time, and an optional
/// trailing `Z`) as UTC, into milliseconds since the epoch. Digits beyond milliseconds
/// are truncated. Handy for writing test inputs.
pub fn parse_millis(text: &str) -> Result<i64> {
    let fail = |why: &str| {
        anyhow!("invalid timestamp {text:?}: {why} (expected YYYY-MM-DD HH:MM:SS[.fff])")
    };
    let s = text.trim();
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = s
        .split_once([' ', 'T'])
        .ok_or_else(|| fail("no time of day"))?;
    let (sign, date) = match date.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, date.strip_prefix('+').unwrap_or(date)),
    };
    let mut d = date.split('-');
    let (Some(y), Some(mo), Some(da), None) = (d.next(), d.next(), d.next(), d.next()) else {
        return Err(fail("bad date"));
    };
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':');
    let (Some(h), Some(mi), Some(se), None) = (t.next(), t.next(), t.next(), t.next()) else {
        return Err(fail("bad time of day"));
    };
    let num = |part: &str, what: &str| -> Result<i64> {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(&format!("bad {what}")));
        }
        part.parse().map_err(|_| fail(&format!("bad {what}")))
    };
    let year = sign * num(y, "year")?;
    let (month, day) = (num(mo, "month")?, num(da, "day")?);
    let (hour, minute, second) = (num(h, "hour")?, num(mi, "minute")?, num(se, "second")?);
    if !(1..=12).contains(&month) {
        bail!(fail("month out of range"));
    }
    if day < 1 || day > i64::from(days_in_month(year, month as u32)) {
        bail!(fail("day out of range"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        bail!(fail("time of day out of range"));
    }
    let milli = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain("00".chars()).take(3).collect();
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            bail!(fail("bad fraction of a second"));
        }
        num(&digits, "fraction of a second")?
    };
    let days = days_from_civil(year, month as u32, day as u32);
    days.checked_mul(MILLIS_PER_DAY)
        .and_then(|ms| ms.checked_add(((hour * 60 + minute) * 60 + second) * 1_000 + milli))
        .ok_or_else(|| fail("out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Datelike, Timelike};

    fn chrono_format(ms: i64) -> Option<String> {
        let t = DateTime::from_timestamp_millis(ms)?.naive_utc();
        let year = if (0..=9999).contains(&t.year()) {
            format!("{:04}", t.year())
        } else {
            format!("{:+05}", t.year())
        };
        Some(format!(
            "{year}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.nanosecond() / 1_000_000
        ))
    }

    #[test]
    fn known_values() {
        assert_eq!(format_millis(0), "1970-01-01 00:00:00.000");
        assert_eq!(format_millis(-1), "1969-12-31 23:59:59.999");
        assert_eq!(format_millis(1_796_032_800_123), "2026-11-30 10:00:00.123");
        assert_eq!(format_millis(951_782_400_000), "2000-02-29 00:00:00.000");
        assert_eq!(
            format_millis(-62_135_596_800_000),
            "0001-01-01 00:00:00.000"
        );
        assert_eq!(
            format_millis(-62_135_596_800_001),
            "0000-12-31 23:59:59.999"
        );
        assert_eq!(
            format_millis(253_402_300_800_000),
            "+10000-01-01 00:00:00.000"
        );
        assert_eq!(format_seconds(1_796_032_800_999), "2026-11-30 10:00:00");
        assert_eq!(format_seconds(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn whole_i64_range_does_not_panic() {
        for ms in [i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1] {
            let s = format_millis(ms);
            assert!(s.len() >= 23, "{s}");
        }
        assert_eq!(format_millis(i64::MAX), "+292278994-08-17 07:12:55.807");
        assert_eq!(format_millis(i64::MIN), "-292275055-05-16 16:47:04.192");
    }

    #[test]
    fn agrees_with_chrono() {
        let mut ms: i64 = -8_000_000_000_000_000; // about year -251,000
        let step = 7_777_777_777_777; // odd step: covers all times of day and month ends
        while ms < 8_000_000_000_000_000 {
            for offset in [0, 1, -1, MILLIS_PER_DAY - 1] {
                let t = ms + offset;
                assert_eq!(Some(format_millis(t)), chrono_format(t), "at {t}");
            }
            ms += step;
        }
        for day in -800_000..800_000 {
            let t = day * MILLIS_PER_DAY + 43_210_987;
            assert_eq!(Some(format_millis(t)), chrono_format(t), "at {t}");
        }
    }

    #[test]
    fn parse_round_trips() {
        for ms in [
            0,
            -1,
            1_796_032_800_123,
            951_782_400_000,
            -62_135_596_800_001,
            253_402_300_800_000,
        ] {
            assert_eq!(
                parse_millis(&format_millis(ms)).unwrap(),
                ms,
                "{}",
                format_millis(ms)
            );
        }
        assert_eq!(
            parse_millis("2026-11-29T10:00:00Z").unwrap(),
            parse_millis("2026-11-29 10:00:00.000").unwrap()
        );
        assert_eq!(parse_millis("1970-01-01 00:00:00.5").unwrap(), 500);
        assert_eq!(parse_millis("1970-01-01 00:00:00.123456").unwrap(), 123);
        for bad in [
            "2026-02-29 00:00:00",
            "2026-13-01 00:00:00",
            "2026-01-01",
            "2026-01-01 24:00:00",
            "x",
        ] {
            let err = parse_millis(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("invalid timestamp {bad:?}")),
                "{err}"
            );
        }
    }
}
