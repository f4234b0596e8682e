//! Time: event timestamps, watermarks and timers.
//!
//! Weir follows Flink's event-time model. Every record carries an event timestamp
//! ([`format`] parses it from the record); each source turns the timestamps it has seen
//! into a watermark ([`watermark`]), the pipeline's watermark is the minimum over its
//! sources, and timers ([`timers`]) fire when the watermark (event time) or the wall clock
//! (processing time, on a [`wheel`]) reaches them.

pub mod format;
pub mod timers;
pub mod watermark;
pub mod wheel;

/// Milliseconds since the Unix epoch: event time and processing time alike.
pub type Timestamp = i64;

/// The watermark before any record has been seen (Flink's `Long.MIN_VALUE`).
pub const MIN_WATERMARK: Timestamp = i64::MIN;

/// The watermark once every input has ended: every event-time timer is due.
pub const END_OF_TIME: Timestamp = i64::MAX;

/// Parses a human duration such as `500ms`, `5s`, `5m`, `1h` into milliseconds.
pub fn parse_duration_ms(text: &str) -> anyhow::Result<i64> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<i64>() {
        anyhow::ensure!(ms >= 0, "a duration cannot be negative: {text:?}");
        return Ok(ms);
    }
    anyhow::ensure!(
        !text.starts_with('-'),
        "a duration cannot be negative: {text:?}"
    );
    let duration = humantime::parse_duration(text).map_err(|e| {
        anyhow::anyhow!("{text:?} is not a duration like 500ms, 5s, 5m or 1h ({e})")
    })?;
    i64::try_from(duration.as_millis())
        .map_err(|_| anyhow::anyhow!("duration {text:?} is too long"))
}

/// The wall clock, in milliseconds since the Unix epoch.
pub fn wall_clock_ms() -> Timestamp {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_millis() as Timestamp
}

/// Renders a timestamp for people: `2026-11-29 10:00:00.123`, or `-inf`/`+inf` at the ends.
pub fn display(ts: Timestamp) -> String {
    match ts {
        MIN_WATERMARK => "-inf".to_string(),
        END_OF_TIME => "+inf".to_string(),
        _ => match chrono::DateTime::from_timestamp_millis(ts) {
            Some(dt) => dt.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
            None => ts.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("5s").unwrap(), 5_000);
        assert_eq!(parse_duration_ms("5m").unwrap(), 300_000);
        assert_eq!(parse_duration_ms("1h").unwrap(), 3_600_000);
        assert_eq!(parse_duration_ms("250ms").unwrap(), 250);
        assert_eq!(parse_duration_ms("0").unwrap(), 0);
        assert!(parse_duration_ms("five")
            .unwrap_err()
            .to_string()
            .contains("five"));
        assert!(parse_duration_ms("-3").is_err());
        let err = parse_duration_ms("-5s").unwrap_err().to_string();
        assert!(err.contains("cannot be negative"), "{err}");
    }

    #[test]
    fn display_ends() {
        assert_eq!(display(MIN_WATERMARK), "-inf");
        assert_eq!(display(END_OF_TIME), "+inf");
        assert_eq!(display(1_764_410_400_123), "2025-11-29 10:00:00.123");
    }
}
