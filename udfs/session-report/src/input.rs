//! The UDF's inputs read: a period message (a session's start or end), a state or a
//! behaviour sample, each field checked so that a bad record is reported, not fatal;
//! and the JSON helpers the outputs use.

use crate::state::Sample;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use weir_sdk::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    Periods,
    States,
    Behaviors,
}

/// A period message; every field optional so that a missing one is reported, not fatal.
#[derive(Deserialize)]
struct PeriodIn<'a> {
    #[serde(borrow)]
    event_id: Option<&'a RawValue>,
    status: Option<i64>,
    start_time: Option<i64>,
    end_time: Option<i64>,
    #[serde(borrow)]
    operator: Option<&'a RawValue>,
    #[serde(borrow)]
    org_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct StateIn {
    signals: Option<Signals>,
}

#[derive(Deserialize)]
struct Signals {
    odometer: Option<f64>,
    speed: Option<f64>,
    mode: Option<String>,
}

#[derive(Deserialize)]
struct BehaviorIn {
    behavior_id: Option<String>,
    behavior_value: Option<i64>,
}

pub(crate) enum Period {
    Start {
        event_id: String,
        start: i64,
        operator: String,
        org_id: String,
    },
    End {
        event_id: String,
        end: i64,
    },
}

/// The JSON text of an optional field (`null` when absent).
fn raw_text(v: Option<&RawValue>) -> String {
    v.map_or_else(|| "null".to_owned(), |v| v.get().to_owned())
}

/// Parses JSON text kept in state (written by this UDF, so valid).
pub(crate) fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// A record's fields as an object, to add ours to.
pub(crate) fn raw_object(raw: &str) -> Map<String, Value> {
    match serde_json::from_str(raw) {
        Ok(Value::Object(map)) => map,
        Ok(other) => Map::from_iter([("raw".to_owned(), other)]),
        Err(_) => Map::from_iter([("raw".to_owned(), Value::String(raw.to_owned()))]),
    }
}

/// The text of `event_id` in an output key: a string's contents, a number as written.
pub(crate) fn key_text(event_id: &str) -> String {
    serde_json::from_str::<String>(event_id).unwrap_or_else(|_| event_id.to_owned())
}

pub(crate) fn parse_period(el: &Element) -> Result<Period, String> {
    let p: PeriodIn = el.json().map_err(|e| format!("{e:#}"))?;
    let event_id = match p.event_id {
        Some(id)
            if id
                .get()
                .starts_with(|c: char| c == '"' || c == '-' || c.is_ascii_digit()) =>
        {
            id.get().to_owned()
        }
        Some(id) => return Err(format!("`event_id` {} is not a string or number", id.get())),
        None => return Err("`event_id` is missing".to_owned()),
    };
    match p.status {
        Some(1) => Ok(Period::Start {
            event_id,
            start: p
                .start_time
                .ok_or("a start (status 1) needs `start_time`")?,
            operator: raw_text(p.operator),
            org_id: raw_text(p.org_id),
        }),
        Some(2) => Ok(Period::End {
            event_id,
            end: p.end_time.ok_or("an end (status 2) needs `end_time`")?,
        }),
        Some(other) => Err(format!(
            "`status` must be 1 (start) or 2 (end), not {other}"
        )),
        None => Err("`status` is missing".to_owned()),
    }
}

/// The `event_id` of a period message as written (JSON text), if the message has one,
/// for the abnormal record of a message [`parse_period`] refused.
pub(crate) fn raw_event_id(el: &Element) -> Option<String> {
    el.json::<PeriodIn>()
        .ok()
        .and_then(|p| p.event_id.map(|id| id.get().to_owned()))
}

pub(crate) fn parse_sample(input: Input, el: &Element) -> Result<Sample, String> {
    if input == Input::States {
        let s: StateIn = el.json().map_err(|e| format!("{e:#}"))?;
        let (odometer, speed, mode) = s
            .signals
            .map_or((None, None, None), |s| (s.odometer, s.speed, s.mode));
        Ok(Sample::State {
            odometer,
            speed,
            mode,
        })
    } else {
        let b: BehaviorIn = el.json().map_err(|e| format!("{e:#}"))?;
        Ok(Sample::Behavior {
            id: b.behavior_id.ok_or("`behavior_id` is missing")?,
            value: b.behavior_value.unwrap_or(0),
        })
    }
}
