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
//! - `"reject"`: emits the record, then rejects it with its `"reason"` (the host takes
//!   the emit back and writes the record to the dead letters);
//! - `"flaky"`: fails the first `count` calls on a record with this `"id"` (default 1),
//!   counted in the instance, not in state, as a transient failure would be; then
//!   echoes it;
//! - `"timer-error"`: registers an event-time timer at the record's timestamp + 1 whose
//!   `on_timer` returns an error.
//!
//! With config `side = "NAME"` it also declares a side output `NAME`, to test routing.
//! With config `annotate = true` it emits `{"input", "watermark", "record"}` instead of
//! the bare record, to show which input a record came through and the watermark then.

use serde_json::Value;
use std::collections::HashMap;
use weir_sdk::prelude::*;

/// The process function; see the crate docs.
pub struct Misbehaving {
    out: Output<Value>,
    annotate: bool,
    /// For `"timers"`: the `work` and `size` of the key's timers.
    timer_work: ValueState<(u64, u64)>,
    /// For `"timer-error"`: the key's timers fail.
    timer_fails: ValueState<bool>,
    /// For `"flaky"`: failed calls so far per record id.
    flaky_calls: HashMap<String, u64>,
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
            timer_fails: ctx.value_state("timer-fails")?,
            flaky_calls: HashMap::new(),
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
            Some("reject") => {
                self.out.emit(&value)?;
                let reason = value.get("reason").and_then(Value::as_str);
                reject(reason.unwrap_or("asked to reject"))
            }
            Some("flaky") => {
                let id = value.get("id").map(Value::to_string).unwrap_or_default();
                let calls = self.flaky_calls.entry(id).or_default();
                if *calls < number(&value, "count", 1) {
                    *calls += 1;
                    bail!("flaky: call {calls} on {value} fails");
                }
                self.out.emit(&value)
            }
            Some("timer-error") => {
                self.timer_fails.set(&true)?;
                ctx.register_event_timer(element.timestamp().saturating_add(1));
                self.out.emit(&value)
            }
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
        if self.timer_fails.get()?.unwrap_or(false) {
            bail!("asked to fail on the timer at {}", timer.timestamp());
        }
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
