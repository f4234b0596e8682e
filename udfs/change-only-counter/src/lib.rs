//! Clicks per ad in the last `window` of event time, emitted only when the count
//! changes, including when it falls back to 0.
//!
//! Input: `{"ad_id": "...", "clicked_at": "..."}`, keyed by `ad_id` with `clicked_at` as
//! the event time (the host extracts both, so the value is never parsed).
//! Output: `{"ad_id": ..., "clicks": N, "updated_at": "YYYY-MM-DD HH:MM:SS.mmm"}`, keyed
//! by `ad_id` (an upsert stream of the current count).
//!
//! - On a click at `ts`: hold `ts`, set an event-time timer at `ts + window`, and emit the
//!   number of held clicks (at `updated_at = ts`) if it differs from the last emitted one.
//! - On a timer at `T`: drop clicks with `ts <= T - window`, emit (at `updated_at = T`) if
//!   the count changed, and clear the key once no click is held.
//!
//! Config: `window` (default `5m`).

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;
use weir_sdk::time::format_millis;

#[derive(Deserialize)]
struct Config {
    #[serde(default = "five_minutes")]
    window: Duration,
}

fn five_minutes() -> Duration {
    Duration::from_mins(5)
}

/// Everything one ad needs, in a single state so a click is one read and one write.
#[derive(Serialize, Deserialize, Default)]
struct Clicks {
    /// Event times of the clicks still in the window, in arrival order.
    times: Vec<i64>,
    /// The count last emitted (0 before the first emission).
    emitted: u32,
}

#[derive(Serialize)]
struct ClickCount {
    ad_id: String,
    clicks: u32,
    updated_at: String,
}

/// The process function; see the crate docs.
pub struct ChangeOnlyCounter {
    window: i64,
    clicks: ValueState<Clicks>,
    out: Output<ClickCount>,
}

impl ChangeOnlyCounter {
    /// Emits the held count if it differs from the last emitted one.
    fn emit_if_changed(&self, ctx: &Context, clicks: &mut Clicks, at: i64) -> Result<()> {
        let count = u32::try_from(clicks.times.len())?;
        if count == clicks.emitted {
            return Ok(());
        }
        clicks.emitted = count;
        let record = ClickCount {
            ad_id: ctx.current_key_str()?.to_owned(),
            clicks: count,
            updated_at: format_millis(at),
        };
        self.out
            .emit_record(Record::new(record).with_key(ctx.current_key()))
    }
}

impl ProcessFunction for ChangeOnlyCounter {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        let window = cfg.window.as_millis();
        ensure!(
            window > 0,
            "config `window` must be longer than 0, got {}",
            cfg.window
        );
        Ok(ChangeOnlyCounter {
            window,
            clicks: ctx.value_state("clicks")?,
            out: ctx.main_output()?,
        })
    }

    // `modify` changes the ad's state in place: a click costs the same whether the ad
    // holds 3 clicks or 3,000.
    fn process_element(&mut self, ctx: &mut Context, click: &Element) -> Result<()> {
        let ts = click.timestamp();
        ctx.register_event_timer(ts.saturating_add(self.window));
        self.clicks.modify(|clicks| {
            let clicks = clicks.get_or_insert_with(Clicks::default);
            clicks.times.push(ts);
            self.emit_if_changed(ctx, clicks, ts)
        })
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        let now = timer.timestamp();
        let expired = now.saturating_sub(self.window);
        self.clicks.modify(|state| {
            let Some(clicks) = state else {
                return Ok(());
            };
            clicks.times.retain(|&ts| ts > expired);
            self.emit_if_changed(ctx, clicks, now)?;
            if clicks.times.is_empty() {
                *state = None;
            }
            Ok(())
        })
    }
}

weir_sdk::export!(ChangeOnlyCounter);
