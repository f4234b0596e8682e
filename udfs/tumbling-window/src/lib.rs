//! Trips and revenue per pickup zone in tumbling event-time windows, corrected by late
//! rides (seed 001, the PyFlink `TUMBLE` + watermark + upsert job).
//!
//! Input: rides `{"PULocationID": 132, "total_amount": 23.5, "tpep_pickup_datetime": ...}`
//! (other fields are ignored), keyed by `PULocationID`, with the pickup time as event
//! time. `PULocationID` must be a JSON integer. `total_amount` is a JSON number (or a
//! string holding one), read exactly from its text and rounded to whole cents per ride,
//! half away from zero (`2.675` -> `2.68`, `-0.005` -> `-0.01`); sums are exact.
//!
//! Windows are `[start, start + size)`, aligned to the epoch. As in Flink, a window's last
//! instant is `end - 1`:
//!
//! - It *fires* when the watermark reaches `end - 1` (an event-time timer there), emitting
//!   on `main` `{"window_start": "YYYY-MM-DD HH:MM:SS", "PULocationID": 132,
//!   "num_trips": 3, "total_revenue": "61.25"}` with upsert key
//!   `"<window_start>|<PULocationID>"` and timestamp `end - 1`.
//! - A ride for a window that has already fired (`end - 1 <= watermark`) is still
//!   accepted while `end - 1 + allowed_lateness > watermark` (Flink's rule): it updates
//!   the window and the corrected row is emitted at once, under the same upsert key.
//! - Later than that the ride goes, not counted, to the side output `late`: the ride's
//!   fields as received (each value's JSON text unchanged, fields in name order) plus a
//!   `"reason"` (which replaces a `reason` field of the ride, if it had one).
//! - A window's state is dropped by a timer at `end - 1 + allowed_lateness`.
//!
//! A ride with a missing or invalid `total_amount` or `PULocationID` is an error that
//! stops the pipeline, whether it is late or not.
//!
//! Config: `size` (default `1h`, a whole number of seconds, since `window_start` is
//! written to the second) and `allowed_lateness` (default `1h`; `0s` drops every ride
//! that comes after its window fired).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use weir_sdk::prelude::*;
use weir_sdk::time::{format_millis, format_seconds};

#[derive(Deserialize)]
struct Config {
    #[serde(default = "one_hour")]
    size: Duration,
    #[serde(default = "one_hour")]
    allowed_lateness: Duration,
}

fn one_hour() -> Duration {
    Duration::from_hours(1)
}

/// The fields of a ride the function reads; optional so a missing one gets a clear error.
#[derive(Deserialize)]
struct Ride<'a> {
    #[serde(rename = "PULocationID", borrow)]
    pu_location_id: Option<&'a RawValue>,
    #[serde(borrow)]
    total_amount: Option<&'a RawValue>,
}

/// One window of one zone: a map entry under the window's start.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
struct Totals {
    /// The zone, as the first ride gave it (emitted as an integer).
    pu_location_id: i64,
    trips: u64,
    cents: i64,
}

#[derive(Serialize)]
struct WindowRevenue {
    window_start: String,
    #[serde(rename = "PULocationID")]
    pu_location_id: i64,
    num_trips: u64,
    total_revenue: String,
}

/// The times of the window a ride falls into.
#[derive(Clone, Copy, Debug)]
struct Window {
    start: i64,
    /// `end - 1`: the window fires when the watermark reaches it.
    last: i64,
    /// `end - 1 + allowed_lateness`: rides are refused, and the state is dropped, once
    /// the watermark reaches it.
    close: i64,
}

/// The process function; see the crate docs.
pub struct TumblingWindow {
    size: i64,
    lateness: i64,
    /// Open windows of the current zone, by window start.
    windows: MapState<i64, Totals>,
    out: Output<WindowRevenue>,
    late: Output<BTreeMap<String, Box<RawValue>>>,
}

impl TumblingWindow {
    fn window_of(&self, ts: i64) -> Result<Window> {
        let start = ts.checked_sub(ts.rem_euclid(self.size));
        let last = start.and_then(|s| s.checked_add(self.size - 1));
        let close = last.and_then(|l| l.checked_add(self.lateness));
        match (start, last, close) {
            (Some(start), Some(last), Some(close)) => Ok(Window { start, last, close }),
            _ => bail!(
                "ride at {ts} ms: its window (or its end plus allowed_lateness) is out of the range of timestamps"
            ),
        }
    }

    fn is_window_start(&self, ts: i64) -> bool {
        ts.rem_euclid(self.size) == 0
    }

    /// Emits the window's current row, at its last instant, under its upsert key.
    fn publish(&self, start: i64, last: i64, totals: &Totals) -> Result<()> {
        let window_start = format_seconds(start);
        let key = format!("{window_start}|{}", totals.pu_location_id);
        let row = WindowRevenue {
            window_start,
            pu_location_id: totals.pu_location_id,
            num_trips: totals.trips,
            total_revenue: format_cents(totals.cents),
        };
        self.out
            .emit_record(Record::new(row).with_key(&key).with_timestamp(last))
    }

    /// Sends a ride that came after its window closed to `late`, with the reason.
    fn reject(&self, ctx: &Context, ride: &Element, window: &Window) -> Result<()> {
        let watermark = ctx.current_watermark();
        let reason = format!(
            "too late: window {} closed at watermark {}, now {}",
            format_seconds(window.start),
            format_millis(window.close),
            format_millis(watermark),
        );
        ctx.log_debug(&reason);
        let mut fields: BTreeMap<String, Box<RawValue>> = ride.json()?;
        fields.insert("reason".into(), serde_json::value::to_raw_value(&reason)?);
        self.late
            .emit_record(Record::new(fields).with_key(ctx.current_key()))
    }
}

impl ProcessFunction for TumblingWindow {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        let size = cfg.size.as_millis();
        ensure!(
            size > 0 && size % 1000 == 0,
            "config `size` must be a whole number of seconds, more than 0, got {}",
            cfg.size
        );
        Ok(TumblingWindow {
            size,
            lateness: cfg.allowed_lateness.as_millis(),
            windows: ctx.map_state("windows")?,
            out: ctx.main_output()?,
            late: ctx.output("late")?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
        // Validated before the lateness check: a malformed ride is an error either way.
        let ride: Ride = el.json()?;
        let pu_location_id = parse_location(ride.pu_location_id)?;
        let cents = parse_amount(ride.total_amount)?;

        let window = self.window_of(el.timestamp())?;
        let watermark = ctx.current_watermark();
        if window.close <= watermark {
            return self.reject(ctx, el, &window);
        }
        let mut totals = self.windows.get(&window.start)?.unwrap_or(Totals {
            pu_location_id,
            trips: 0,
            cents: 0,
        });
        totals.trips += 1;
        totals.cents = totals.cents.checked_add(cents).with_context(|| {
            format!(
                "the revenue of window {} overflows",
                format_seconds(window.start)
            )
        })?;
        self.windows.put(&window.start, &totals)?;
        ctx.register_event_timer(window.close);
        if window.last <= watermark {
            // The window has fired already: publish the correction now. (A timer at
            // `last` would only fire at the next watermark advance.)
            self.publish(window.start, window.last, &totals)
        } else {
            ctx.register_event_timer(window.last);
            Ok(())
        }
    }

    /// A timer is a window's `last` instant (fire it), another window's `close` (drop
    /// it), or both; with `allowed_lateness = 0` they are the same window, fired first.
    fn on_timer(&mut self, _ctx: &mut Context, timer: &Timer) -> Result<()> {
        if timer.domain() != TimeDomain::EventTime {
            return Ok(());
        }
        let at = timer.timestamp();
        if let Some(start) = at
            .checked_sub(self.size - 1)
            .filter(|&s| self.is_window_start(s))
        {
            if let Some(totals) = self.windows.get(&start)? {
                self.publish(start, at, &totals)?;
            }
        }
        if let Some(start) = at
            .checked_sub(self.lateness)
            .and_then(|t| t.checked_sub(self.size - 1))
            .filter(|&s| self.is_window_start(s))
        {
            self.windows.remove(&start)?;
        }
        Ok(())
    }
}

weir_sdk::export!(TumblingWindow);

fn parse_location(raw: Option<&RawValue>) -> Result<i64> {
    let raw = raw.context("field `PULocationID` is missing or null")?;
    raw.get()
        .parse()
        .map_err(|_| anyhow!("field `PULocationID`: {} is not an integer", raw.get()))
}

fn parse_amount(raw: Option<&RawValue>) -> Result<i64> {
    let raw = raw.context("field `total_amount` is missing or null")?;
    let text = raw.get();
    let number: &str = if text.starts_with('"') {
        serde_json::from_str(text)
            .map_err(|_| anyhow!("field `total_amount`: {text} is not a decimal number"))?
    } else {
        text
    };
    cents(number).map_err(|why| anyhow!("field `total_amount`: {text} {why}"))
}

/// The exact value of a decimal number's text (`[+-]digits[.digits][e[+-]digits]`, with
/// digits on at least one side of the point) in whole cents, rounded half away from
/// zero. Works on the digits, so it is exact however many there are.
fn cents(text: &str) -> Result<i64, &'static str> {
    const NOT_A_NUMBER: &str = "is not a decimal number";
    const TOO_LARGE: &str = "is too large";
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let (negative, s) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match s.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !all_digits(int) || !all_digits(frac) || (int.is_empty() && frac.is_empty()) {
        return Err(NOT_A_NUMBER);
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(e) => {
            let body = e.strip_prefix(['+', '-']).unwrap_or(e);
            if body.is_empty() || !all_digits(body) {
                return Err(NOT_A_NUMBER);
            }
            // Beyond i64 only the direction matters: far too large or rounds to 0.
            e.parse().unwrap_or(if e.starts_with('-') {
                i64::MIN / 4
            } else {
                i64::MAX / 4
            })
        }
    };
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    let zeros = digits.iter().take_while(|&&d| d == 0).count();
    let digits = &digits[zeros..];
    if digits.is_empty() {
        return Ok(0);
    }
    // value * 100 = 0.d1d2d3... * 10^point, with d1 != 0.
    let point = (int.len() as i64 - zeros as i64)
        .saturating_add(exponent)
        .saturating_add(2);
    if point > 19 {
        return Err(TOO_LARGE); // at least 10^19 cents
    }
    let digit = |i: i64| usize::try_from(i).ok().and_then(|i| digits.get(i)).copied();
    let mut whole: i64 = 0;
    for i in 0..point.max(0) {
        whole = whole
            .checked_mul(10)
            .and_then(|w| w.checked_add(i64::from(digit(i).unwrap_or(0))))
            .ok_or(TOO_LARGE)?;
    }
    // Half away from zero: the first dropped digit decides.
    if digit(point).unwrap_or(0) >= 5 {
        whole = whole.checked_add(1).ok_or(TOO_LARGE)?;
    }
    Ok(if negative { -whole } else { whole })
}

/// Cents as a decimal with exactly 2 places: `-5` -> `"-0.05"`.
fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amount(json: &str) -> Result<String> {
        let raw: &RawValue = serde_json::from_str(json).unwrap();
        parse_amount(Some(raw)).map(format_cents)
    }

    #[test]
    fn amounts_are_exact_and_round_half_away_from_zero() {
        for (json, expected) in [
            ("23.5", "23.50"),
            ("23", "23.00"),
            ("0", "0.00"),
            ("-0", "0.00"),
            ("2.675", "2.68"), // 2.67499999... as an f64
            ("2.674999999999999999999999999999", "2.67"),
            ("0.005", "0.01"),
            ("0.0049", "0.00"),
            ("-0.005", "-0.01"),
            ("-0.0049", "0.00"),
            ("-5.8", "-5.80"),
            ("1.5e2", "150.00"),
            ("1.5E-2", "0.02"),
            ("5e-3", "0.01"),
            ("4e-3", "0.00"),
            ("1e-400", "0.00"),
            ("0e400", "0.00"),
            ("0.00000000000000000000000000000000000001e40", "100.00"),
            ("\"12.345\"", "12.35"),
            ("\".5\"", "0.50"),
            ("\"+7.\"", "7.00"),
            ("92233720368547758.07", "92233720368547758.07"),
            ("-92233720368547758.07", "-92233720368547758.07"),
        ] {
            assert_eq!(amount(json).unwrap(), expected, "{json}");
        }
    }

    #[test]
    fn invalid_amounts_name_the_field_and_value() {
        for bad in [
            "\"abc\"", "\"\"", "\" 1\"", "\"1e\"", "\".\"", "\"1_0\"", "\"--1\"", "\"NaN\"",
            "true", "{}", "[1]",
        ] {
            let err = amount(bad).unwrap_err().to_string();
            assert_eq!(
                err,
                format!("field `total_amount`: {bad} is not a decimal number")
            );
        }
        for big in ["92233720368547758.08", "1e17", "1e999999999999999999999"] {
            let err = amount(big).unwrap_err().to_string();
            assert_eq!(err, format!("field `total_amount`: {big} is too large"));
        }
        assert_eq!(
            parse_amount(None).unwrap_err().to_string(),
            "field `total_amount` is missing or null"
        );
    }

    #[test]
    fn locations_are_integers() {
        fn raw(s: &str) -> &RawValue {
            serde_json::from_str(s).unwrap()
        }
        assert_eq!(parse_location(Some(raw("132"))).unwrap(), 132);
        for bad in ["132.0", "\"132\"", "1e2", "true"] {
            assert_eq!(
                parse_location(Some(raw(bad))).unwrap_err().to_string(),
                format!("field `PULocationID`: {bad} is not an integer")
            );
        }
    }
}
