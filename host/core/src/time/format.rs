//! Parsing event timestamps out of records.
//!
//! Two formats cover the sources Weir reads: epoch milliseconds (a JSON number or a
//! string of digits) and calendar date-times (`YYYY-MM-DD HH:MM:SS[.fff]` or ISO-8601 with
//! `T`, optionally with `Z` or a `±HH:MM` offset; a date-time without an offset is UTC).
//! The date-time layout every seed uses is parsed by a small fast path because it runs
//! once per record; anything else falls back to chrono.

use super::Timestamp;
use chrono::{DateTime, NaiveDateTime, Timelike as _};
use serde::Deserialize;

/// How a source's timestamp field is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampFormat {
    /// Milliseconds since the Unix epoch, as a JSON number or a string of digits.
    EpochMs,
    /// A calendar date-time: `YYYY-MM-DD HH:MM:SS[.fff]` or ISO-8601; naive means UTC.
    Datetime,
}

impl TimestampFormat {
    /// Parses the raw JSON text of a timestamp field (a number, or a quoted string).
    pub fn parse_json(self, raw: &str) -> Result<Timestamp, String> {
        let raw = raw.trim();
        let text = if let Some(inner) = raw.strip_prefix('"') {
            let inner = inner.strip_suffix('"').ok_or("unterminated string")?;
            if inner.contains('\\') {
                return Err(format!("timestamp {raw} contains escapes"));
            }
            inner
        } else {
            raw
        };
        self.parse_text(text)
    }

    /// Parses a timestamp written as text.
    pub fn parse_text(self, text: &str) -> Result<Timestamp, String> {
        match self {
            TimestampFormat::EpochMs => parse_epoch_ms(text),
            TimestampFormat::Datetime => parse_datetime(text),
        }
    }
}

fn parse_epoch_ms(text: &str) -> Result<Timestamp, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    // JSON numbers such as 1.7e12 or 1700000000000.0 are still whole milliseconds.
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(f as i64),
        _ => Err(format!("{text:?} is not epoch milliseconds")),
    }
}

/// Parses a calendar date-time into epoch milliseconds.
pub fn parse_datetime(text: &str) -> Result<Timestamp, String> {
    if let Some(ms) = fast_datetime(text.as_bytes()) {
        return Ok(ms);
    }
    // chrono reads second 60 as a leap second, which would land in the next minute.
    let leap = |naive: &NaiveDateTime| naive.nanosecond() >= 1_000_000_000;
    let no_leap = || format!("{text:?} has second 60: seconds go from 00 to 59");
    if let Ok(dt) = DateTime::parse_from_rfc3339(text) {
        return if leap(&dt.naive_utc()) {
            Err(no_leap())
        } else {
            Ok(dt.timestamp_millis())
        };
    }
    for layout in [
        "%Y-%m-%d %H:%M:%S%.f%:z",
        "%Y-%m-%dT%H:%M:%S%.f%z",
        "%Y-%m-%d %H:%M:%S%.f%z",
    ] {
        if let Ok(dt) = DateTime::parse_from_str(text, layout) {
            return if leap(&dt.naive_utc()) {
                Err(no_leap())
            } else {
                Ok(dt.timestamp_millis())
            };
        }
    }
    for layout in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, layout) {
            return if leap(&naive) {
                Err(no_leap())
            } else {
                Ok(naive.and_utc().timestamp_millis())
            };
        }
    }
    Err(format!(
        "{text:?} is not a date-time like 2026-11-29 10:00:00.123 or 2026-11-29T10:00:00Z"
    ))
}

/// `YYYY-MM-DD[ T]HH:MM:SS[.f{1,9}][Z]`, the layout of every seed; `None` for anything else.
fn fast_datetime(b: &[u8]) -> Option<Timestamp> {
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || (b[10] != b' ' && b[10] != b'T') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        b[range].iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut millis = 0i64;
    if let Some((b'.', frac)) = rest.split_first() {
        let digits = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        for i in 0..3 {
            millis = millis * 10
                + frac
                    .get(i)
                    .filter(|_| i < digits)
                    .map_or(0, |c| i64::from(c - b'0'));
        }
        rest = &frac[digits..];
    }
    if rest == b"Z" {
        rest = &[];
    }
    if !rest.is_empty() {
        return None; // offsets and other suffixes take the general path
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chrono_naive(text: &str) -> i64 {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
            .unwrap()
            .and_utc()
            .timestamp_millis()
    }

    #[test]
    fn fast_path_agrees_with_chrono() {
        // A deterministic sweep over dates, including leap days and pre-1970 dates.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let ms = (seed % 8_000_000_000_000) as i64 - 2_000_000_000_000;
            let dt = DateTime::from_timestamp_millis(ms).unwrap();
            let text = dt.format("%Y-%m-%d %H:%M:%S%.3f").to_string();
            assert_eq!(fast_datetime(text.as_bytes()), Some(ms), "{text}");
            assert_eq!(chrono_naive(&text), ms);
        }
    }

    #[test]
    fn layouts() {
        let base = 1_795_946_400_000; // 2026-11-29 10:00:00 UTC
        assert_eq!(parse_datetime("2026-11-29 10:00:00").unwrap(), base);
        assert_eq!(parse_datetime("2026-11-29 10:00:00.1").unwrap(), base + 100);
        assert_eq!(
            parse_datetime("2026-11-29 10:00:00.123456").unwrap(),
            base + 123
        );
        assert_eq!(parse_datetime("2026-11-29T10:00:00Z").unwrap(), base);
        assert_eq!(
            parse_datetime("2026-11-29T10:00:00.5+02:00").unwrap(),
            base - 7_200_000 + 500
        );
        assert_eq!(
            parse_datetime("2026-11-29T10:00:00-0130").unwrap(),
            base + 5_400_000
        );
        assert_eq!(parse_datetime("2026-11-29 10:00").unwrap(), base);
        for bad in [
            "2026-02-30 10:00:00",
            "2026-11-29 24:00:00",
            "yesterday",
            "",
            "2026-11-29 10:00:00.",
            "2026-13-01 00:00:00",
        ] {
            let err = parse_datetime(bad).unwrap_err();
            assert!(err.contains("is not a date-time"), "{bad}: {err}");
        }
        for leap in [
            "2026-11-29 10:00:60",
            "2026-11-29T10:00:60Z",
            "2026-11-29 10:00:60.5+02:00",
        ] {
            let err = parse_datetime(leap).unwrap_err();
            assert!(err.contains("second 60"), "{leap}: {err}");
        }
    }

    #[test]
    fn json_forms() {
        let f = TimestampFormat::EpochMs;
        assert_eq!(f.parse_json("1700000000123").unwrap(), 1_700_000_000_123);
        assert_eq!(
            f.parse_json("\"1700000000123\"").unwrap(),
            1_700_000_000_123
        );
        assert_eq!(f.parse_json("1.7e12").unwrap(), 1_700_000_000_000);
        assert!(f.parse_json("\"soon\"").is_err());
        assert!(f.parse_json("12.5").is_err());
        let d = TimestampFormat::Datetime;
        assert_eq!(d.parse_json("\"1970-01-01 00:00:01\"").unwrap(), 1000);
        assert!(d.parse_json("17").is_err());
    }
}
