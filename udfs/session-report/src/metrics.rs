//! The report's metrics, one strategy each (the article's `MetricStrategy`).
//!
//! The main flow knows nothing about any metric: when one of a session's windows is
//! computed it hands the window's records to every strategy in [`STRATEGIES`], each of
//! which folds them into its own accumulator (kept in keyed state between windows); when
//! the session ends, each strategy writes its fields into the report. A new metric is a
//! new [`MetricStrategy`] impl plus one line in [`STRATEGIES`].

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use weir_sdk::prelude::*;

/// A `states` record assigned to a window.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSample<'a> {
    /// Event time, epoch ms.
    pub time: i64,
    pub odometer: Option<f64>,
    pub speed: Option<f64>,
    pub mode: Option<&'a str>,
}

/// A `behaviors` record assigned to a window.
#[derive(Debug, Clone, PartialEq)]
pub struct BehaviorSample<'a> {
    /// Event time, epoch ms.
    pub time: i64,
    pub id: &'a str,
    pub value: i64,
}

/// One computed window of a session, `[start, end)`, with its records in event-time
/// order (ties in arrival order). Windows reach the strategies in time order, each once.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowData<'a> {
    pub start: i64,
    pub end: i64,
    pub states: Vec<StateSample<'a>>,
    pub behaviors: Vec<BehaviorSample<'a>>,
}

/// One metric of the report.
pub trait MetricStrategy: Sync {
    /// What the metric keeps between windows (encoded with `postcard` in keyed state).
    type Acc: Default + Serialize + DeserializeOwned;

    /// The accumulator's name in state; unique among the strategies, and stable (renaming
    /// it loses the accumulators of sessions in flight).
    const NAME: &'static str;

    /// Folds one computed window into the accumulator.
    fn process(&self, window: &WindowData<'_>, acc: &mut Self::Acc);

    /// Writes the metric's fields into the session's report.
    fn report(&self, acc: &Self::Acc, report: &mut Map<String, Value>);
}

/// A [`MetricStrategy`] with its accumulator type erased, so that strategies can sit in
/// one list. Implemented for every `MetricStrategy`; do not implement it by hand.
pub trait Strategy: Sync {
    fn name(&self) -> &'static str;
    /// Folds `window` into the encoded accumulator (`None`: none yet) and returns it.
    fn process_encoded(&self, window: &WindowData<'_>, acc: Option<&[u8]>) -> Result<Vec<u8>>;
    /// Writes the report fields from the encoded accumulator (`None`: no window computed).
    fn report_encoded(&self, acc: Option<&[u8]>, report: &mut Map<String, Value>) -> Result<()>;
}

impl<M: MetricStrategy> Strategy for M {
    fn name(&self) -> &'static str {
        M::NAME
    }

    fn process_encoded(&self, window: &WindowData<'_>, acc: Option<&[u8]>) -> Result<Vec<u8>> {
        let mut acc = decode::<M>(acc)?;
        self.process(window, &mut acc);
        postcard::to_allocvec(&acc)
            .map_err(|e| anyhow!("metric `{}`: cannot encode its accumulator: {e}", M::NAME))
    }

    fn report_encoded(&self, acc: Option<&[u8]>, report: &mut Map<String, Value>) -> Result<()> {
        self.report(&decode::<M>(acc)?, report);
        Ok(())
    }
}

fn decode<M: MetricStrategy>(acc: Option<&[u8]>) -> Result<M::Acc> {
    match acc {
        None => Ok(M::Acc::default()),
        Some(bytes) => postcard::from_bytes(bytes).map_err(|e| {
            anyhow!(
                "metric `{}`: cannot decode its accumulator (was it written by another version?): {e}",
                M::NAME
            )
        }),
    }
}

/// Every metric of the report, in the order they are run.
pub static STRATEGIES: &[&dyn Strategy] = &[
    &WindowSummaries,
    &Distance,
    &MaxSpeed,
    &SportModeUsed,
    &BehaviorCounts,
    &BehaviorValueSum,
];

/// The larger of two speeds, where `None` is "no speed yet".
fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn window_max_speed(window: &WindowData<'_>) -> Option<f64> {
    window
        .states
        .iter()
        .fold(None, |max, s| max_opt(max, s.speed))
}

/// `windows`: one entry per window of the session, in order, empty ones included:
/// `{"start", "end", "states", "behaviors", "max_speed"}` (`max_speed` null without speeds).
pub struct WindowSummaries;

#[derive(Serialize, Deserialize, Default)]
pub struct WindowSummary {
    start: i64,
    end: i64,
    states: u64,
    behaviors: u64,
    max_speed: Option<f64>,
}

impl MetricStrategy for WindowSummaries {
    type Acc = Vec<WindowSummary>;
    const NAME: &'static str = "windows";

    fn process(&self, window: &WindowData<'_>, acc: &mut Self::Acc) {
        acc.push(WindowSummary {
            start: window.start,
            end: window.end,
            states: window.states.len() as u64,
            behaviors: window.behaviors.len() as u64,
            max_speed: window_max_speed(window),
        });
    }

    fn report(&self, acc: &Self::Acc, report: &mut Map<String, Value>) {
        let windows = acc
            .iter()
            .map(|w| {
                json!({
                    "start": w.start,
                    "end": w.end,
                    "states": w.states,
                    "behaviors": w.behaviors,
                    "max_speed": w.max_speed,
                })
            })
            .collect();
        report.insert("windows".into(), Value::Array(windows));
    }
}

/// `distance`: the odometer of the session's last state minus that of its first (by
/// event time; among states at the same time the smaller reading counts as the earlier,
/// so the result does not depend on arrival order). 0 with fewer than two odometer readings.
pub struct Distance;

#[derive(Serialize, Deserialize, Default)]
pub struct DistanceAcc {
    first: Option<(i64, f64)>,
    last: Option<(i64, f64)>,
    readings: u64,
}

fn reading_order(a: &(i64, f64), b: &(i64, f64)) -> Ordering {
    a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
}

impl MetricStrategy for Distance {
    type Acc = DistanceAcc;
    const NAME: &'static str = "distance";

    fn process(&self, window: &WindowData<'_>, acc: &mut Self::Acc) {
        for state in &window.states {
            let Some(odometer) = state.odometer else {
                continue;
            };
            let reading = (state.time, odometer);
            acc.readings += 1;
            if acc
                .first
                .is_none_or(|f| reading_order(&reading, &f).is_lt())
            {
                acc.first = Some(reading);
            }
            if acc.last.is_none_or(|l| reading_order(&reading, &l).is_gt()) {
                acc.last = Some(reading);
            }
        }
    }

    fn report(&self, acc: &Self::Acc, report: &mut Map<String, Value>) {
        let distance = match (acc.first, acc.last) {
            (Some(first), Some(last)) if acc.readings >= 2 => last.1 - first.1,
            _ => 0.0,
        };
        report.insert("distance".into(), json!(distance));
    }
}

/// `max_speed`: the largest speed of the session, null without speeds. Each window's
/// maximum is folded into the session's (the article's "max per window, then global").
pub struct MaxSpeed;

impl MetricStrategy for MaxSpeed {
    type Acc = Option<f64>;
    const NAME: &'static str = "max_speed";

    fn process(&self, window: &WindowData<'_>, acc: &mut Self::Acc) {
        *acc = max_opt(*acc, window_max_speed(window));
    }

    fn report(&self, acc: &Self::Acc, report: &mut Map<String, Value>) {
        report.insert("max_speed".into(), json!(acc));
    }
}

/// `sport_mode_used`: whether any state of the session has mode `"sport"` (a behaviour
/// tag: once set, it stays set).
pub struct SportModeUsed;

impl MetricStrategy for SportModeUsed {
    type Acc = bool;
    const NAME: &'static str = "sport_mode_used";

    fn process(&self, window: &WindowData<'_>, acc: &mut Self::Acc) {
        *acc = *acc || window.states.iter().any(|s| s.mode == Some("sport"));
    }

    fn report(&self, acc: &Self::Acc, report: &mut Map<String, Value>) {
        report.insert("sport_mode_used".into(), json!(acc));
    }
}

/// `behavior_counts`: `{behavior_id: count}` over the session's behaviours.
pub struct BehaviorCounts;

impl MetricStrategy for BehaviorCounts {
    type Acc = BTreeMap<String, u64>;
    const NAME: &'static str = "behavior_counts";

    fn process(&self, window: &WindowData<'_>, acc: &mut Self::Acc) {
        for b in &window.behaviors {
            *acc.entry(b.id.to_owned()).or_default() += 1;
        }
    }

    fn report(&self, acc: &Self::Acc, report: &mut Map<String, Value>) {
        report.insert("behavior_counts".into(), json!(acc));
    }
}

/// `behavior_value_sum`: the sum of the session's `behavior_value`s (saturating at the
/// bounds of i64 rather than failing the run).
pub struct BehaviorValueSum;

impl MetricStrategy for BehaviorValueSum {
    type Acc = i64;
    const NAME: &'static str = "behavior_value_sum";

    fn process(&self, window: &WindowData<'_>, acc: &mut Self::Acc) {
        for b in &window.behaviors {
            *acc = acc.saturating_add(b.value);
        }
    }

    fn report(&self, acc: &Self::Acc, report: &mut Map<String, Value>) {
        report.insert("behavior_value_sum".into(), json!(acc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(time: i64, odometer: f64, speed: f64, mode: &str) -> StateSample<'_> {
        StateSample {
            time,
            odometer: Some(odometer),
            speed: Some(speed),
            mode: Some(mode),
        }
    }

    /// Runs every strategy over `windows` through the encoded path, as the UDF does.
    fn run(windows: &[WindowData<'_>]) -> Map<String, Value> {
        let mut accs: Vec<Option<Vec<u8>>> = vec![None; STRATEGIES.len()];
        for window in windows {
            for (s, acc) in STRATEGIES.iter().zip(&mut accs) {
                *acc = Some(s.process_encoded(window, acc.as_deref()).unwrap());
            }
        }
        let mut report = Map::new();
        for (s, acc) in STRATEGIES.iter().zip(&accs) {
            s.report_encoded(acc.as_deref(), &mut report).unwrap();
        }
        report
    }

    #[test]
    fn strategy_names_are_unique() {
        let mut names: Vec<_> = STRATEGIES.iter().map(|s| s.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), STRATEGIES.len());
    }

    #[test]
    fn no_window_gives_the_empty_metrics() {
        assert_eq!(
            Value::Object(run(&[])),
            json!({
                "windows": [], "distance": 0.0, "max_speed": null, "sport_mode_used": false,
                "behavior_counts": {}, "behavior_value_sum": 0
            })
        );
    }

    #[test]
    fn metrics_fold_over_windows() {
        let w1 = WindowData {
            start: 0,
            end: 10,
            states: vec![state(1, 100.0, 30.0, "eco"), state(4, 101.5, 55.5, "eco")],
            behaviors: vec![
                BehaviorSample {
                    time: 2,
                    id: "horn",
                    value: 2,
                },
                BehaviorSample {
                    time: 3,
                    id: "wiper",
                    value: -1,
                },
            ],
        };
        let empty = WindowData {
            start: 10,
            end: 20,
            states: vec![],
            behaviors: vec![],
        };
        let w3 = WindowData {
            start: 20,
            end: 25,
            states: vec![
                StateSample {
                    time: 21,
                    odometer: None,
                    speed: None,
                    mode: None,
                },
                state(22, 104.0, 40.0, "sport"),
            ],
            behaviors: vec![BehaviorSample {
                time: 24,
                id: "horn",
                value: 5,
            }],
        };
        let report = run(&[w1, empty, w3]);
        assert_eq!(
            Value::Object(report),
            json!({
                "windows": [
                    {"start": 0, "end": 10, "states": 2, "behaviors": 2, "max_speed": 55.5},
                    {"start": 10, "end": 20, "states": 0, "behaviors": 0, "max_speed": null},
                    {"start": 20, "end": 25, "states": 2, "behaviors": 1, "max_speed": 40.0},
                ],
                "distance": 4.0,
                "max_speed": 55.5,
                "sport_mode_used": true,
                "behavior_counts": {"horn": 2, "wiper": 1},
                "behavior_value_sum": 6,
            })
        );
    }

    #[test]
    fn distance_needs_two_readings_and_breaks_time_ties_by_reading() {
        let one = WindowData {
            start: 0,
            end: 10,
            states: vec![state(5, 50.0, 1.0, "eco")],
            behaviors: vec![],
        };
        assert_eq!(run(&[one])["distance"], json!(0.0));
        let tied = WindowData {
            start: 0,
            end: 10,
            states: vec![state(5, 52.0, 1.0, "eco"), state(5, 50.0, 1.0, "eco")],
            behaviors: vec![],
        };
        assert_eq!(run(&[tied])["distance"], json!(2.0));
    }
}
