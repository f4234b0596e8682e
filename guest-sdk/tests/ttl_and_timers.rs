//! Event-time time-to-live waits for the timers: an entry stamped `s` with TTL `d` is
//! visible to every timer that fires before `s + d`, however far the watermark jumps
//! (the end of input included), and gone for the timers at or after it.

use serde_json::{json, Value};
use weir_sdk::prelude::*;
use weir_sdk::testing::TestHost;

/// Flink's buffering pattern: each transaction is kept for 10 minutes and checked by a
/// timer 1 s after it; a timer that sees three transactions over 500.00 within 2 s
/// alerts. An element `{"probe": t}` registers a bare timer at `t` that reports what the
/// buffer holds then.
struct Buffer {
    transactions: ListState<(i64, f64)>,
    out: Output<Value>,
}

impl ProcessFunction for Buffer {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        Ok(Buffer {
            transactions: ctx.list_state_with_ttl(
                "transactions",
                StateTtl::event_time(Duration::from_mins(10)),
            )?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
        let value: Value = el.json()?;
        if let Some(at) = value["probe"].as_i64() {
            ctx.register_event_timer(at);
            return Ok(());
        }
        let amount = value["amount"].as_f64().unwrap_or_default();
        self.transactions.append(&(el.timestamp(), amount))?;
        ctx.register_event_timer(el.timestamp() + 1_000);
        Ok(())
    }

    fn on_timer(&mut self, _ctx: &mut Context, timer: &Timer) -> Result<()> {
        let held = self.transactions.get()?;
        let large: Vec<i64> = held
            .iter()
            .filter(|(_, amount)| *amount > 500.0)
            .map(|(at, _)| *at)
            .collect();
        let alert = large.windows(3).any(|w| w[2] - w[0] <= 2_000);
        self.out
            .emit(&json!({"at": timer.timestamp(), "held": held.len(), "alert": alert}))
    }
}

fn outputs(host: &mut TestHost<Buffer>) -> Vec<Value> {
    host.take_outputs("main")
        .into_iter()
        .map(|o| o.value)
        .collect()
}

#[test]
fn the_end_of_input_timers_see_what_they_buffered() {
    let mut host = TestHost::<Buffer>::new().unwrap();
    for (at, amount) in [(0, 600.0), (700, 750.5), (1_500, 999.0)] {
        host.process(
            "main",
            "card",
            json!({ "amount": amount }).to_string().as_str(),
            at,
        )
        .unwrap();
    }
    host.finish().unwrap();
    assert_eq!(
        outputs(&mut host),
        [
            json!({"at": 1_000, "held": 3, "alert": true}),
            json!({"at": 1_700, "held": 3, "alert": true}),
            json!({"at": 2_500, "held": 3, "alert": true}),
        ]
    );
    assert!(!host.has_state("card"), "expired after the timers fired");
}

#[test]
fn a_watermark_jump_expires_entries_in_time_with_the_timers() {
    let mut host = TestHost::<Buffer>::new().unwrap();
    host.process("main", "card", r#"{"amount": 10}"#, 0)
        .unwrap();
    host.process("main", "card", r#"{"amount": 20}"#, 300_000)
        .unwrap();
    // Just before the first entry's expiry, at it, and after the second's.
    for probe in [599_999, 600_000, 900_000] {
        host.process(
            "main",
            "card",
            json!({ "probe": probe }).to_string().as_str(),
            300_000,
        )
        .unwrap();
    }
    host.advance_watermark(1_000_000).unwrap();
    assert_eq!(
        outputs(&mut host),
        [
            json!({"at": 1_000, "held": 2, "alert": false}),
            json!({"at": 301_000, "held": 2, "alert": false}),
            json!({"at": 599_999, "held": 2, "alert": false}),
            json!({"at": 600_000, "held": 1, "alert": false}),
            json!({"at": 900_000, "held": 0, "alert": false}),
        ]
    );
    assert!(!host.has_state("card"));
}
