//! One per-key counter in several versions, for hot-swap tests. The same source builds
//! four components, told apart by their package name:
//!
//! - `versioned-udf-v1` emits `{"key", "seq", "count", "v": 1}` per element;
//! - `versioned-udf-v2` emits `{"key", "seq", "total", "v": 2}`: a visibly different
//!   shape, over the same `count` state;
//! - `versioned-udf-broken` panics on every element and timer (a version to roll back);
//! - `versioned-udf-bad-init` fails in `init`.
//!
//! Every version keeps `count` per key and registers an event-time timer one second after
//! each element; a firing timer emits `{"key", "timer", "v"}`, so timers registered by
//! one version show which version fired them. `seq` is copied from the input record.

use serde_json::{json, Value};
use weir_sdk::prelude::*;

const PACKAGE: &str = env!("CARGO_PKG_NAME");

fn version() -> u32 {
    match PACKAGE {
        "versioned-udf-v2" => 2,
        "versioned-udf-broken" => 3,
        "versioned-udf-bad-init" => 4,
        _ => 1,
    }
}

/// The counter; see the crate docs.
pub struct Versioned {
    count: ValueState<u64>,
    out: Output<Value>,
}

impl ProcessFunction for Versioned {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        if version() == 4 {
            bail!("this version's init always fails");
        }
        Ok(Self {
            count: ctx.value_state("count")?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, element: &Element) -> Result<()> {
        if version() == 3 {
            panic!("version 3 is broken");
        }
        let value: Value = element.json()?;
        let count = self.count.get()?.unwrap_or(0) + 1;
        self.count.set(&count)?;
        let key = ctx.current_key_str()?.to_owned();
        let record = match version() {
            2 => json!({"key": key, "seq": value["seq"], "total": count, "v": 2}),
            _ => json!({"key": key, "seq": value["seq"], "count": count, "v": 1}),
        };
        self.out.emit(&record)?;
        ctx.register_event_timer(element.timestamp() + 1_000);
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        if version() == 3 {
            panic!("version 3 is broken");
        }
        let key = ctx.current_key_str()?.to_owned();
        self.out
            .emit(&json!({"key": key, "timer": timer.timestamp(), "v": version()}))
    }
}

weir_sdk::export!(Versioned);
