//! Independent models of the seed workloads, written from the specification and not
//! from the host's or the UDFs' code, so that end-to-end outputs can be checked.
//!
//! [`EventTime`] replays records the way the specification says Weir must: file order,
//! a watermark of `max timestamp - out_of_orderness` after each record, and on every
//! advance all timers at or before it in timestamp order; `+inf` at the end. Outputs
//! are collected per key: across keys the order of same-time timers is not specified,
//! within a key it is.

use crate::datetime_millis;
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A keyed function with event-time timers, as the model sees it.
pub trait KeyedModel {
    type State: Default;
    type Input;
    /// Handles an element; returns outputs and may add timers for the key.
    fn element(
        &self,
        key: &str,
        state: &mut Self::State,
        input: &Self::Input,
        ts: i64,
        timers: &mut Timers,
    ) -> Vec<Value>;
    /// Handles a timer; returns outputs.
    fn timer(&self, key: &str, state: &mut Self::State, at: i64, timers: &mut Timers)
        -> Vec<Value>;
}

/// One key's pending timers.
#[derive(Default, Debug)]
pub struct Timers {
    pub pending: BTreeSet<i64>,
}

/// Replays records through a model; returns each key's outputs in order.
pub fn event_time<M: KeyedModel>(
    model: &M,
    records: impl IntoIterator<Item = (String, i64, M::Input)>,
    out_of_orderness: i64,
) -> HashMap<String, Vec<Value>> {
    let mut states: HashMap<String, M::State> = HashMap::new();
    let mut timers: HashMap<String, Timers> = HashMap::new();
    let mut outputs: HashMap<String, Vec<Value>> = HashMap::new();
    let mut watermark = i64::MIN;
    let fire = |watermark: i64,
                states: &mut HashMap<String, M::State>,
                timers: &mut HashMap<String, Timers>,
                outputs: &mut HashMap<String, Vec<Value>>| loop {
        let next = timers
            .iter()
            .filter_map(|(k, t)| t.pending.first().map(|&at| (at, k.clone())))
            .filter(|(at, _)| *at <= watermark)
            .min();
        let Some((at, key)) = next else { break };
        let key_timers = timers.get_mut(&key).expect("has a timer");
        key_timers.pending.remove(&at);
        let state = states.entry(key.clone()).or_default();
        let out = model.timer(&key, state, at, key_timers);
        outputs.entry(key).or_default().extend(out);
    };
    for (key, ts, input) in records {
        let state = states.entry(key.clone()).or_default();
        let key_timers = timers.entry(key.clone()).or_default();
        let out = model.element(&key, state, &input, ts, key_timers);
        outputs.entry(key.clone()).or_default().extend(out);
        // Flink's bounded-out-of-orderness rule: the newest timestamp, less the bound, less 1 ms.
        let candidate = ts - out_of_orderness - 1;
        if candidate > watermark {
            watermark = candidate;
            fire(watermark, &mut states, &mut timers, &mut outputs);
        }
    }
    fire(i64::MAX, &mut states, &mut timers, &mut outputs);
    outputs
}

/// Groups output records by a field, keeping their order.
pub fn by_key(records: &[Value], field: &str) -> HashMap<String, Vec<Value>> {
    let mut grouped: HashMap<String, Vec<Value>> = HashMap::new();
    for r in records {
        let key = match &r[field] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        grouped.entry(key).or_default().push(r.clone());
    }
    grouped
}

/// Seed 000: the change-only click counter.
pub struct ChangeOnlyCounter {
    pub window: i64,
}

#[derive(Default)]
pub struct CounterState {
    clicks: Vec<i64>,
    last: usize,
}

impl ChangeOnlyCounter {
    fn changed(key: &str, state: &mut CounterState, at: i64) -> Vec<Value> {
        if state.clicks.len() == state.last {
            return vec![];
        }
        state.last = state.clicks.len();
        vec![json!({"ad_id": key, "clicks": state.last, "updated_at": datetime_millis(at)})]
    }
}

impl KeyedModel for ChangeOnlyCounter {
    type State = CounterState;
    type Input = ();

    fn element(
        &self,
        key: &str,
        state: &mut CounterState,
        _: &(),
        ts: i64,
        timers: &mut Timers,
    ) -> Vec<Value> {
        state.clicks.push(ts);
        timers.pending.insert(ts + self.window);
        Self::changed(key, state, ts)
    }

    fn timer(&self, key: &str, state: &mut CounterState, at: i64, _: &mut Timers) -> Vec<Value> {
        state.clicks.retain(|&ts| ts > at - self.window);
        let out = Self::changed(key, state, at);
        if state.clicks.is_empty() {
            *state = CounterState::default();
        }
        out
    }
}

/// Seed 002: per-order aggregation with a timeout that restarts on every event.
pub struct OrderTimeout {
    pub timeout: i64,
}

#[derive(Default)]
pub struct OrderState {
    order: Option<Value>,
    total: Decimal,
    items: Vec<String>,
    timer: Option<i64>,
}

/// What one order event carries.
pub struct OrderEvent {
    pub order: Value,
    pub item: String,
    pub cost: Decimal,
}

impl KeyedModel for OrderTimeout {
    type State = OrderState;
    type Input = OrderEvent;

    fn element(
        &self,
        _: &str,
        state: &mut OrderState,
        e: &OrderEvent,
        ts: i64,
        timers: &mut Timers,
    ) -> Vec<Value> {
        state.order.get_or_insert_with(|| e.order.clone());
        state.total += e.cost;
        state.items.push(e.item.clone());
        if let Some(old) = state.timer.take() {
            timers.pending.remove(&old);
        }
        timers.pending.insert(ts + self.timeout);
        state.timer = Some(ts + self.timeout);
        vec![]
    }

    fn timer(&self, _: &str, state: &mut OrderState, _: i64, _: &mut Timers) -> Vec<Value> {
        let Some(order) = state.order.take() else {
            return vec![];
        };
        let total = state
            .total
            .round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
        let out = json!({"orderId": order, "total": format!("{total:.2}"), "items": std::mem::take(&mut state.items)});
        *state = OrderState::default();
        vec![out]
    }
}

/// Per-key final aggregates of the order model in processing-time mode when the whole
/// input arrives well within the timeout: one aggregate per order, with every event.
pub fn orders_all_at_once(events: &[(Value, String, Decimal)]) -> BTreeMap<String, Value> {
    let mut acc: BTreeMap<String, (Value, Decimal, Vec<String>)> = BTreeMap::new();
    for (order, item, cost) in events {
        let entry = acc
            .entry(order.to_string())
            .or_insert_with(|| (order.clone(), Decimal::ZERO, Vec::new()));
        entry.1 += cost;
        entry.2.push(item.clone());
    }
    acc.into_iter()
        .map(|(k, (order, total, items))| {
            let total = total.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
            (
                k,
                json!({"orderId": order, "total": format!("{total:.2}"), "items": items}),
            )
        })
        .collect()
}
