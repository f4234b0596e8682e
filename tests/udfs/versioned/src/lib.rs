//! One per-key counter in several versions, for hot-swap tests. The same source builds
//! four components, told apart by their package name:
//!
//! - `versioned-udf-v1` emits `{"key", "seq", "count", "v": 1}` per element;
//! - `versioned-udf-v2` emits `{"key", "seq", "total", "v": 2}`: a visibly different
//!   shape, over the same `count` state;
//! - `versioned-udf-broken` panics on every element and timer (a version to roll back);
//! - `versioned-udf-bad-init` fails in `init`;
//! - `versioned-udf-retyped` reads `count` as a string: the old versions' values do not
//!   decode, so their keys' records go to the dead letters (new keys work);
//! - `versioned-udf-migrated` keeps `count` as a `Counted` struct under schema version 1,
//!   migrating the old versions' plain numbers (schema 0) when it first reads them, and
//!   emits `{"key", "seq", "n", "migrated_from", "v": 6}`.
//!
//! Every version keeps `count` per key and registers an event-time timer one second after
//! each element; a firing timer emits `{"key", "timer", "v"}`, so timers registered by
//! one version show which version fired them. `seq` is copied from the input record.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use weir_sdk::prelude::*;

const PACKAGE: &str = env!("CARGO_PKG_NAME");

fn version() -> u32 {
    match PACKAGE {
        "versioned-udf-v2" => 2,
        "versioned-udf-broken" => 3,
        "versioned-udf-bad-init" => 4,
        "versioned-udf-retyped" => 5,
        "versioned-udf-migrated" => 6,
        _ => 1,
    }
}

/// The count of version 6: the number, and the schema it was first migrated from.
#[derive(Serialize, Deserialize)]
struct Counted {
    n: u64,
    migrated_from: Option<u8>,
}

/// The `count` state, as each version declares it.
enum Count {
    Number(ValueState<u64>),
    Text(ValueState<String>),
    Struct(ValueState<Counted>),
}

/// The counter; see the crate docs.
pub struct Versioned {
    count: Count,
    out: Output<Value>,
}

impl ProcessFunction for Versioned {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        if version() == 4 {
            bail!("this version's init always fails");
        }
        let count = match version() {
            5 => Count::Text(ctx.value_state("count")?),
            6 => Count::Struct(
                ctx.value_state("count")?
                    .schema(1)
                    .migrate_from(0, |n: u64| Counted {
                        n,
                        migrated_from: Some(0),
                    }),
            ),
            _ => Count::Number(ctx.value_state("count")?),
        };
        Ok(Self {
            count,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, element: &Element) -> Result<()> {
        if version() == 3 {
            panic!("version 3 is broken");
        }
        let value: Value = element.json()?;
        let key = ctx.current_key_str()?.to_owned();
        let record = match &self.count {
            Count::Number(state) => {
                let count = state.get()?.unwrap_or(0) + 1;
                state.set(&count)?;
                match version() {
                    2 => json!({"key": key, "seq": value["seq"], "total": count, "v": 2}),
                    _ => json!({"key": key, "seq": value["seq"], "count": count, "v": 1}),
                }
            }
            Count::Text(state) => {
                let count = state.get()?.unwrap_or_default() + "+";
                state.set(&count)?;
                json!({"key": key, "seq": value["seq"], "tally": count, "v": 5})
            }
            Count::Struct(state) => {
                let mut counted = state.get()?.unwrap_or(Counted {
                    n: 0,
                    migrated_from: None,
                });
                counted.n += 1;
                state.set(&counted)?;
                json!({"key": key, "seq": value["seq"], "n": counted.n,
                       "migrated_from": counted.migrated_from, "v": 6})
            }
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
