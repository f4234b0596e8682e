//! A UDF for the host's sandbox tests. It echoes each record to the main output, unless
//! the record asks it to misbehave with `"fail"`:
//!
//! - `"trap"`: panics (a wasm trap, with a panic message on stderr);
//! - `"loop"`: spins forever (the call deadline must stop it);
//! - `"memory"`: allocates until its memory limit (the limit must stop it);
//! - `"error"`: returns an error from `process_element`;
//! - `"escape"`: tries to read a file, an environment variable and the clock, and
//!   emits what it got (the sandbox must give it nothing);
//! - `"flood"`: emits `{"n": i, "pad": ...}` for i in 0..`count` from this one call, each
//!   record `size` bytes or so (default 100): more than a call may emit, with `count`
//!   large enough;
//! - `"timers"`: registers `count` event-time timers, one each at the record's
//!   timestamp plus 1 to `count`; each timer spins `work` loop iterations (default 0),
//!   then emits `{"timer": at, "pad": ...}` padded to `size` bytes. So the end of input
//!   fires `count` timers taking as long as `work` makes them.
//!
//! With config `side = "NAME"` it also declares a side output `NAME`, to test routing.
//! With config `annotate = true` it emits `{"input", "watermark", "record"}` instead of
//! the bare record, to show which input a record came through and the watermark then.

use serde_json::Value;
use weir_sdk::prelude::*;

/// The process function; see the crate docs.
pub struct Misbehaving {
    out: Output<Value>,
    annotate: bool,
    /// For `"timers"`: the `work` and `size` of the key's timers.
    timer_work: ValueState<(u64, u64)>,
}

impl ProcessFunction for Misbehaving {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        if let Some(side) = ctx.config_value("side").map(str::to_owned) {
            ctx.output::<Value>(&side)?;
        }
        if ctx.config_value("fail_init").is_some() {
            bail!("init failed as configured");
        }
        let annotate = ctx.config_value("annotate") == Some("true");
        Ok(Self {
            out: ctx.main_output()?,
            annotate,
            timer_work: ctx.value_state("timer-work")?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, element: &Element) -> Result<()> {
        let value: Value = element.json()?;
        match value.get("fail").and_then(Value::as_str) {
            Some("trap") => panic!("asked to trap on {value}"),
            Some("loop") => {
                let mut spins = 0u64;
                loop {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
            }
            Some("memory") => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
                }
            }
            Some("leak") => {
                // Memory that is never given back, as a leak in a guest language's
                // bindings does; the record itself is passed on.
                std::mem::forget(std::hint::black_box(vec![1u8; 64 << 10]));
                self.out.emit(&value)
            }
            Some("error") => bail!("asked to fail on {value}"),
            Some("flood") => {
                let pad = "x".repeat(number(&value, "size", 100).saturating_sub(20) as usize);
                for n in 0..number(&value, "count", 1) {
                    self.out.emit(&serde_json::json!({ "n": n, "pad": pad }))?;
                }
                Ok(())
            }
            Some("timers") => {
                let (work, size) = (number(&value, "work", 0), number(&value, "size", 0));
                self.timer_work.set(&(work, size))?;
                for i in 1..=number(&value, "count", 1) as i64 {
                    ctx.register_event_timer(element.timestamp().saturating_add(i));
                }
                Ok(())
            }
            Some("escape") => {
                let file = std::fs::read_to_string("/etc/hostname").ok();
                let dir = std::fs::read_dir("/").map(|d| d.count()).ok();
                let env = std::env::var("PATH").ok();
                let vars = std::env::vars().count();
                let clock = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or_default();
                let report = serde_json::json!({
                    "file": file, "dir": dir, "env": env, "vars": vars, "clock_ms": clock
                });
                self.out.emit(&report)
            }
            _ if self.annotate => self.out.emit(&serde_json::json!({
                "input": element.input(),
                "watermark": ctx.current_watermark(),
                "record": value,
            })),
            _ => self.out.emit(&value),
        }
    }

    fn on_timer(&mut self, _ctx: &mut Context, timer: &Timer) -> Result<()> {
        let (work, size) = self.timer_work.get()?.unwrap_or_default();
        let mut spins = 0u64;
        for _ in 0..work {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
        let pad = "x".repeat(size.saturating_sub(30) as usize);
        self.out
            .emit(&serde_json::json!({ "timer": timer.timestamp(), "pad": pad }))
    }
}

/// Field `name` of `record` as a number, `default` if it has none.
fn number(record: &Value, name: &str, default: u64) -> u64 {
    record.get(name).and_then(Value::as_u64).unwrap_or(default)
}

weir_sdk::export!(Misbehaving);
