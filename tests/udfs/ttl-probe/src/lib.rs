//! A test UDF for state time-to-live. Each record says what to do with the key's states:
//!
//! - `{"op": "put", "f": "x", "v": "1"}`: puts `f` → `v` into map state `fields` (event-time
//!   TTL `ttl`, default 10s, refreshed on read);
//! - `{"op": "get", "f": "x"}`: emits `{"op": "get", "f": "x", "got": <v or null>}`;
//! - `{"op": "append", "v": "p"}`: appends `v` to list state `log` (event-time TTL `ttl`,
//!   refreshed on write only);
//! - `{"op": "list"}`: emits `{"op": "list", "got": [<items>]}`;
//! - `{"op": "count"}`: emits `{"op": "count", "got": <n>}`, the key's map entries and
//!   list items: a map iteration, which refreshes every entry;
//! - `{"op": "later", "at": t}`: registers an event-time timer at `t`, which emits
//!   `{"op": "timer", "at": t, "got": [<items of log>]}` when it fires.
//!
//! Emitted records are keyed by the record's key.

use serde::Deserialize;
use serde_json::{json, Value};
use weir_sdk::prelude::*;

#[derive(Deserialize)]
struct Config {
    #[serde(default = "ten_seconds")]
    ttl: Duration,
}

fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}

#[derive(Deserialize)]
struct Command {
    op: String,
    #[serde(default)]
    f: Option<String>,
    #[serde(default)]
    v: String,
    #[serde(default)]
    at: i64,
}

/// See the crate docs.
pub struct TtlProbe {
    fields: MapState<String, String>,
    log: ListState<String>,
    out: Output<Value>,
}

impl ProcessFunction for TtlProbe {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        let ttl = StateTtl::event_time(cfg.ttl);
        Ok(TtlProbe {
            fields: ctx.map_state_with_ttl("fields", ttl.refreshed_on_read())?,
            log: ctx.list_state_with_ttl("log", ttl)?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
        let cmd: Command = el.json()?;
        let field = || cmd.f.clone().context("`f` is missing");
        let got = match cmd.op.as_str() {
            "put" => return self.fields.put(&field()?, &cmd.v),
            "append" => return self.log.append(&cmd.v),
            "later" => {
                ctx.register_event_timer(cmd.at);
                return Ok(());
            }
            "get" => json!(self.fields.get(&field()?)?),
            "list" => json!(self.log.get()?),
            "count" => json!(self.fields.entries()?.len() + self.log.get()?.len()),
            other => bail!("unknown op `{other}`"),
        };
        let mut record = json!({"op": cmd.op, "got": got});
        if let Some(f) = &cmd.f {
            record["f"] = json!(f);
        }
        self.out
            .emit_record(Record::new(record).with_key(ctx.current_key()))
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        let record = json!({"op": "timer", "at": timer.timestamp(), "got": self.log.get()?});
        self.out
            .emit_record(Record::new(record).with_key(ctx.current_key()))
    }
}

weir_sdk::export!(TtlProbe);
