//! Aggregates the events of an order until none came for `timeout`, then emits it.
//!
//! Input: `{"orderId": 17, "item": "tea", "cost": "3.50", "timestamp": "..."}`, keyed by
//! `orderId`. `cost` is a decimal given as a JSON string or number, summed exactly.
//! Output, when the order's timer fires:
//! `{"orderId": 17, "total": "12.30", "items": ["tea", ...]}` (orderId as it first came,
//! total rounded half-up to 2 places, items in arrival order), keyed by the order; the
//! order's state is then cleared.
//!
//! Each event moves the order's single timer to `timeout` after it: in event time by
//! default (`element timestamp + timeout`), or in processing time with
//! `time = "processing"` (`now + timeout`).
//!
//! Config: `timeout` (default `1s`), `time` (`event` or `processing`, default `event`).

use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use weir_sdk::prelude::*;

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
enum TimeMode {
    #[default]
    Event,
    Processing,
}

#[derive(Deserialize)]
struct Config {
    #[serde(default = "one_second")]
    timeout: Duration,
    #[serde(default)]
    time: TimeMode,
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}

/// An input event; fields are optional so that a missing one gets a clear error.
#[derive(Deserialize)]
struct Purchase<'a> {
    #[serde(rename = "orderId", borrow)]
    order_id: Option<&'a RawValue>,
    item: Option<String>,
    #[serde(borrow)]
    cost: Option<&'a RawValue>,
}

/// One order so far, in a single state.
#[derive(Serialize, Deserialize)]
struct Order {
    /// The JSON text of the first event's `orderId`.
    order_id: String,
    /// The exact running total, as `Decimal::serialize` bytes.
    total: [u8; 16],
    items: Vec<String>,
    /// The pending timer, to move it on the next event.
    timer: i64,
}

#[derive(Serialize)]
struct OrderTotal {
    #[serde(rename = "orderId")]
    order_id: Box<RawValue>,
    total: String,
    items: Vec<String>,
}

/// The process function; see the crate docs.
pub struct OrderTimeout {
    timeout: i64,
    domain: TimeDomain,
    orders: ValueState<Order>,
    out: Output<OrderTotal>,
}

/// Whether `text` is a plain decimal number: `[+-]digits[.digits][e[+-]digits]`, with
/// digits on at least one side of the point. (`Decimal`'s own parser also takes `_`.)
fn is_decimal_text(text: &str) -> bool {
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let s = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match s.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['+', '-']).unwrap_or(e))),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    digits(int)
        && digits(frac)
        && !(int.is_empty() && frac.is_empty())
        && exponent.is_none_or(|e| !e.is_empty() && digits(e))
}

/// The exact value of `cost`, a JSON string or number (its exact text, not an `f64`).
fn parse_cost(cost: &RawValue) -> Result<Decimal> {
    let raw = cost.get();
    let text: &str = if raw.starts_with('"') {
        serde_json::from_str(raw)
            .map_err(|_| anyhow!("field `cost`: {raw} is not a valid decimal"))?
    } else {
        raw
    };
    let parsed = if !is_decimal_text(text) {
        None
    } else if text.contains(['e', 'E']) {
        Decimal::from_scientific(text).ok()
    } else {
        Decimal::from_str_exact(text).ok()
    };
    parsed.ok_or_else(|| anyhow!("field `cost`: {raw} is not a valid decimal"))
}

/// Half-up (away from zero on ties) to exactly 2 places: `12.3` -> `"12.30"`.
fn format_total(total: Decimal) -> String {
    let mut rounded = total.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
    rounded.rescale(2);
    if rounded.is_zero() {
        rounded.set_sign_positive(true);
    }
    rounded.to_string()
}

impl ProcessFunction for OrderTimeout {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        Ok(OrderTimeout {
            timeout: cfg.timeout.as_millis(),
            domain: match cfg.time {
                TimeMode::Event => TimeDomain::EventTime,
                TimeMode::Processing => TimeDomain::ProcessingTime,
            },
            orders: ctx.value_state("order")?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
        let event: Purchase = el.json()?;
        let order_id = event.order_id.context("record has no `orderId`")?;
        let item = event.item.context("field `item` is missing")?;
        // A record whose cost is missing or not a decimal is the input's fault, not the
        // UDF's: rejected to the dead letters (with the reason), and the run goes on.
        let cost = match event
            .cost
            .context("field `cost` is missing")
            .and_then(parse_cost)
        {
            Ok(cost) => cost,
            Err(e) => return weir_sdk::reject(format!("{e:#}")),
        };

        let from = match self.domain {
            TimeDomain::EventTime => el.timestamp(),
            TimeDomain::ProcessingTime => ctx.current_processing_time(),
        };
        // `modify` changes the order in place: an event costs the same whether the
        // order holds one item or a hundred.
        self.orders.modify(|state| {
            let order = match state {
                Some(order) => {
                    ctx.delete_timer(self.domain, order.timer);
                    order
                }
                None => state.insert(Order {
                    order_id: order_id.get().to_owned(),
                    total: Decimal::ZERO.serialize(),
                    items: Vec::new(),
                    timer: 0,
                }),
            };
            let total = Decimal::deserialize(order.total)
                .checked_add(cost)
                .with_context(|| format!("the total of order {} overflows", order.order_id))?;
            order.total = total.serialize();
            order.items.push(item);
            order.timer = from.saturating_add(self.timeout);
            ctx.register_timer(self.domain, order.timer);
            Ok(())
        })
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        let Some(order) = self.orders.get()? else {
            return Ok(());
        };
        if timer.domain() != self.domain || timer.timestamp() != order.timer {
            // A timer this instance no longer owns (say, after a config change).
            return Ok(());
        }
        let record = OrderTotal {
            order_id: RawValue::from_string(order.order_id)?,
            total: format_total(Decimal::deserialize(order.total)),
            items: order.items,
        };
        self.out
            .emit_record(Record::new(record).with_key(ctx.current_key()))?;
        self.orders.clear();
        Ok(())
    }
}

weir_sdk::export!(OrderTimeout);

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(json: &str) -> Result<String> {
        let raw: &RawValue = serde_json::from_str(json).unwrap();
        parse_cost(raw).map(format_total)
    }

    #[test]
    fn costs_are_exact_and_round_half_up() {
        assert_eq!(cost("\"3.50\"").unwrap(), "3.50");
        assert_eq!(cost("3.5").unwrap(), "3.50");
        assert_eq!(cost("3").unwrap(), "3.00");
        assert_eq!(cost("\"2.675\"").unwrap(), "2.68"); // 2.67499999... as an f64
        assert_eq!(cost("0.005").unwrap(), "0.01");
        assert_eq!(cost("0.0049").unwrap(), "0.00");
        assert_eq!(cost("-0.005").unwrap(), "-0.01");
        assert_eq!(cost("-0.001").unwrap(), "0.00");
        assert_eq!(cost("1.5e2").unwrap(), "150.00");
        assert_eq!(cost("\"1E-3\"").unwrap(), "0.00");
        assert_eq!(cost("\".5\"").unwrap(), "0.50");
        assert_eq!(cost("\"+7.\"").unwrap(), "7.00");
    }

    #[test]
    fn invalid_costs_name_the_field_and_value() {
        for bad in [
            "\"abc\"",
            "\"\"",
            "\"1_000\"",
            "\" 1\"",
            "\"1e\"",
            "\".\"",
            "true",
            "null",
            "{}",
            "[1]",
            "\"NaN\"",
        ] {
            let err = cost(bad).unwrap_err().to_string();
            assert_eq!(err, format!("field `cost`: {bad} is not a valid decimal"));
        }
    }
}
