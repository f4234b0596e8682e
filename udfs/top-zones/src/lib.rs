//! Per window of time, the top zones by revenue, corrected when a late ride changes the
//! ranking: the second stage of `examples/taxi-top-zones`, after seed 001's hourly
//! revenue per zone (`tumbling-window`), like Flink SQL's Top-N over a windowed
//! aggregate.
//!
//! Input: the window rows of the first stage, `{"window_start": "2026-11-01 10:00:00",
//! "PULocationID": 132, "num_trips": 3, "total_revenue": "61.25"}`, keyed by
//! `window_start`, each at the event time the first stage gave it (the window's last
//! instant). A row replaces the zone's previous row of that window (an upsert stream:
//! a late ride's correction carries the window's new totals).
//!
//! Output (`main`): for each rank whose zone or totals changed, `{"window_start": ...,
//! "rank": 1, "PULocationID": 132, "total_revenue": "61.25", "num_trips": 3}` with upsert
//! key `"<window_start>|<rank>"`, at the row's event time; so an upsert table keyed by
//! window and rank always holds the current top. Zones rank by revenue, highest first,
//! ties by the lower zone id. Ranks are emitted in order, 1 first.
//!
//! A window's state is dropped by a timer at the row's event time plus `retain`, which
//! must be at least the first stage's `allowed_lateness` (the first stage sends no
//! correction after that).
//!
//! Config: `top` (how many ranks, default 3) and `retain` (default `1h`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;

#[derive(Deserialize)]
struct Config {
    #[serde(default = "three")]
    top: usize,
    #[serde(default = "one_hour")]
    retain: Duration,
}

fn three() -> usize {
    3
}

fn one_hour() -> Duration {
    Duration::from_hours(1)
}

/// A window row of the first stage.
#[derive(Deserialize)]
struct WindowRow<'a> {
    #[serde(rename = "PULocationID")]
    zone: i64,
    num_trips: u64,
    #[serde(borrow)]
    total_revenue: &'a str,
}

/// One zone's totals in a window.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
struct Totals {
    cents: i64,
    trips: u64,
}

/// A window's zones and the ranking last emitted.
#[derive(Serialize, Deserialize, Default)]
struct Window {
    zones: BTreeMap<i64, Totals>,
    /// The zones of the ranks last emitted, best first, with their totals then.
    shown: Vec<(i64, Totals)>,
}

impl Window {
    /// The best `top` zones: by revenue, highest first, ties by the lower zone id.
    fn ranking(&self, top: usize) -> Vec<(i64, Totals)> {
        let mut all: Vec<(i64, Totals)> = self.zones.iter().map(|(&z, &t)| (z, t)).collect();
        all.sort_by(|(za, a), (zb, b)| b.cents.cmp(&a.cents).then(za.cmp(zb)));
        all.truncate(top);
        all
    }
}

#[derive(Serialize)]
struct Rank {
    window_start: String,
    rank: usize,
    #[serde(rename = "PULocationID")]
    zone: i64,
    total_revenue: String,
    num_trips: u64,
}

/// The process function; see the crate docs.
pub struct TopZones {
    top: usize,
    retain: i64,
    window: ValueState<Window>,
    out: Output<Rank>,
}

impl ProcessFunction for TopZones {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        ensure!(cfg.top > 0, "config `top` must be at least 1");
        Ok(TopZones {
            top: cfg.top,
            retain: cfg.retain.as_millis(),
            window: ctx.value_state("window")?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, element: &Element) -> Result<()> {
        let row: WindowRow = element.json()?;
        let cents = parse_cents(row.total_revenue)
            .with_context(|| format!("total_revenue {:?}", row.total_revenue))?;
        let at = element.timestamp();
        let window_start = ctx.current_key_str()?;
        let mut window = self.window.get()?.unwrap_or_default();
        let first = window.zones.is_empty();
        let totals = Totals {
            cents,
            trips: row.num_trips,
        };
        window.zones.insert(row.zone, totals);
        let ranking = window.ranking(self.top);
        for (index, &(zone, totals)) in ranking.iter().enumerate() {
            if window.shown.get(index) == Some(&(zone, totals)) {
                continue;
            }
            let rank = Rank {
                window_start: window_start.to_owned(),
                rank: index + 1,
                zone,
                total_revenue: format_cents(totals.cents),
                num_trips: totals.trips,
            };
            let key = format!("{window_start}|{}", index + 1);
            self.out
                .emit_record(Record::new(rank).with_key(&key).with_timestamp(at))?;
        }
        window.shown = ranking;
        self.window.set(&window)?;
        if first {
            ctx.register_event_timer(at.saturating_add(self.retain));
        }
        Ok(())
    }

    /// The window's corrections are over: its state goes.
    fn on_timer(&mut self, _ctx: &mut Context, _timer: &Timer) -> Result<()> {
        self.window.clear();
        Ok(())
    }
}

weir_sdk::export!(TopZones);

/// `"61.25"` -> 6125, `"-0.05"` -> -5, `"7"` -> 700: a decimal with at most 2 places.
fn parse_cents(text: &str) -> Result<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let is_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    ensure!(
        !whole.is_empty() && is_digits(whole) && is_digits(fraction) && fraction.len() <= 2,
        "not a decimal with at most 2 places"
    );
    let whole: i64 = whole.parse().context("too large")?;
    let fraction: i64 = format!("{fraction:0<2}").parse().unwrap_or(0);
    let cents = whole
        .checked_mul(100)
        .and_then(|c| c.checked_add(fraction))
        .context("too large")?;
    Ok(if negative { -cents } else { cents })
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

    #[test]
    fn revenue_reads_back_exactly() {
        for (text, cents) in [("61.25", 6125), ("-0.05", -5), ("7", 700), ("0.5", 50)] {
            assert_eq!(parse_cents(text).unwrap(), cents, "{text}");
            assert_eq!(parse_cents(&format_cents(cents)).unwrap(), cents);
        }
        for bad in ["", "1.234", "x", "1.x", "-", ".5"] {
            assert!(parse_cents(bad).is_err(), "{bad:?}");
        }
    }
}
