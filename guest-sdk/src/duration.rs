//! Durations for configs: `"500ms"`, `"1s"`, `"5m"`, `"2h"`, `"1d"`, `"1h 30m"` (parsed by
//! `humantime`), or a bare integer of milliseconds; always a whole, non-negative number
//! of milliseconds, the unit of Weir's timestamps.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::{Serialize, Serializer};

/// A non-negative span of time in whole milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    millis: i64,
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration { millis: 0 };

    /// `millis` milliseconds. Panics if negative.
    pub const fn from_millis(millis: i64) -> Self {
        assert!(millis >= 0, "a Duration cannot be negative");
        Duration { millis }
    }

    /// `secs` seconds.
    pub const fn from_secs(secs: i64) -> Self {
        Self::from_millis(secs * 1000)
    }

    /// `mins` minutes.
    pub const fn from_mins(mins: i64) -> Self {
        Self::from_secs(mins * 60)
    }

    /// `hours` hours.
    pub const fn from_hours(hours: i64) -> Self {
        Self::from_mins(hours * 60)
    }

    /// `days` days of 24 hours.
    pub const fn from_days(days: i64) -> Self {
        Self::from_hours(days * 24)
    }

    /// The length in milliseconds, ready to add to a timestamp.
    pub const fn as_millis(self) -> i64 {
        self.millis
    }

    /// As a `std::time::Duration`.
    pub const fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.millis as u64)
    }
}

/// Why a text is not a [`Duration`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseDurationError {
    input: String,
    reason: String,
}

impl fmt::Display for ParseDurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid duration {:?}: {} (expected e.g. \"500ms\", \"1s\", \"5m\", \"2h\", \"1d\", \
             or a whole number of milliseconds)",
            self.input, self.reason
        )
    }
}

impl std::error::Error for ParseDurationError {}

impl FromStr for Duration {
    type Err = ParseDurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let error = |reason: String| ParseDurationError {
            input: s.to_owned(),
            reason,
        };
        let text = s.trim();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse::<i64>()
                .map(Duration::from_millis)
                .map_err(|_| error("too large".into()));
        }
        if text.starts_with('-') {
            return Err(error("durations cannot be negative".into()));
        }
        let std = humantime::parse_duration(text).map_err(|e| error(e.to_string()))?;
        if std.subsec_nanos() % 1_000_000 != 0 {
            return Err(error("finer than a millisecond".into()));
        }
        i64::try_from(std.as_millis())
            .map(Duration::from_millis)
            .map_err(|_| error("too large".into()))
    }
}

impl fmt::Display for Duration {
    /// Formats as `humantime` does (`5m`, `1h 30m`, `500ms`, `0s`), which parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&humantime::format_duration(self.as_std()), f)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = Duration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"500ms\", \"5m\" or \"1d\", or milliseconds")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                v.parse().map_err(E::custom)
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                i64::try_from(v)
                    .map(Duration::from_millis)
                    .map_err(|_| E::custom(format!("duration of {v} ms is too large")))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                if v < 0 {
                    return Err(E::custom(format!(
                        "invalid duration {v}: durations cannot be negative"
                    )));
                }
                Ok(Duration::from_millis(v))
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<i64, String> {
        s.parse::<Duration>()
            .map(Duration::as_millis)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parses_units_and_bare_milliseconds() {
        assert_eq!(parse("500ms"), Ok(500));
        assert_eq!(parse("1s"), Ok(1_000));
        assert_eq!(parse("5m"), Ok(300_000));
        assert_eq!(parse("2h"), Ok(7_200_000));
        assert_eq!(parse("1d"), Ok(86_400_000));
        assert_eq!(parse("1h 30m"), Ok(5_400_000));
        assert_eq!(parse("1s500ms"), Ok(1_500));
        assert_eq!(parse(" 5min "), Ok(300_000));
        assert_eq!(parse("250"), Ok(250));
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("1.5s"), Ok(1_500));
    }

    #[test]
    fn rejects_bad_input_clearly() {
        for bad in [
            "",
            "5 parsecs",
            "m",
            "-5m",
            "-5",
            "1.5ms",
            "1us",
            "99999999999999999999",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(
                err.starts_with(&format!("invalid duration {bad:?}: ")),
                "{bad}: {err}"
            );
            assert!(err.contains("\"5m\""), "{err}");
        }
        assert!(parse("-5m").unwrap_err().contains("negative"));
        assert!(parse("1us")
            .unwrap_err()
            .contains("finer than a millisecond"));
    }

    #[test]
    fn displays_in_a_form_that_parses_back() {
        for s in ["5m", "500ms", "1h 30m", "1day", "0s"] {
            let d: Duration = s.parse().unwrap();
            assert_eq!(d.to_string().parse::<Duration>().unwrap(), d);
        }
        assert_eq!(Duration::from_mins(5).to_string(), "5m");
        assert_eq!(Duration::from_millis(1_500).to_string(), "1s 500ms");
    }

    #[test]
    fn serde_from_text_or_number() {
        let d: Duration = serde_json::from_str("\"2h\"").unwrap();
        assert_eq!(d, Duration::from_hours(2));
        let d: Duration = serde_json::from_str("1500").unwrap();
        assert_eq!(d.as_millis(), 1_500);
        assert!(serde_json::from_str::<Duration>("-1").is_err());
        assert!(serde_json::from_str::<Duration>("true").is_err());
        assert_eq!(
            serde_json::to_string(&Duration::from_secs(90)).unwrap(),
            "\"1m 30s\""
        );
    }
}
