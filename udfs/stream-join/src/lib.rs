//! Joins two streams by `row_id`, as a Flink `KeyedCoProcessFunction` would.
//!
//! Inputs `left` and `right`: `{"row_id": 17, "row_data": "...", "ts": ...}`, both keyed
//! by `row_id` with `ts` as the event time. Other fields are kept on the side outputs.
//!
//! Per `row_id`, the first record (of either side) waits for a partner from the other
//! side, for `ttl` of event time: its row expires at `first_ts + ttl`, where an
//! event-time timer is set.
//!
//! - Output `main`: when the partner arrives, `{"row_id": 17, "data1": <left row_data>,
//!   "data2": <right row_data>}`, once, keyed by the row_id, at the partner's time.
//! - Output `duplicates`: a record for a row_id whose same side is already waiting, or
//!   that was already joined (either side), as received plus `"input": "left"|"right"`
//!   and a `"reason"`, keyed by the row_id, at its own time.
//! - Output `unmatched`: when a waiting row expires, its record as received plus
//!   `"input"` and `"reason": "no right record within 10m"` (or `left`), keyed by the
//!   row_id, at the expiry time.
//!
//! When a waiting row expires its state is cleared. A joined row is kept only to
//! recognise duplicates: in a state with an event-time time-to-live of `ttl` (the host's
//! `StateTtl`), so it takes no timer and goes once the watermark reaches `ttl` past the
//! join's time (the joining record's timestamp, or the watermark if that is later). A
//! later record for the row_id starts a new join.
//!
//! A row has expired for a record when the record's own time is at or past the expiry
//! (a partner must come *within* `ttl`), or when the watermark has reached the expiry
//! and its timer is due but has not fired yet. The expired row is then finished first,
//! exactly as its timer would have done. So the outcome depends on event time and the
//! watermark, not on when the host gets round to firing a timer.
//!
//! Late records (at or before the watermark) are processed like any other: they join,
//! are duplicates, or start a new row. A late record whose row has already expired
//! starts a new row, which expires at the next watermark advance if `ts + ttl` is
//! already behind the watermark.
//!
//! Every input record ends up in exactly one place: one side of a `main` row, a
//! `duplicates` record, or an `unmatched` record.
//!
//! A record from an input other than `left`/`right`, or without `row_id` (an integer)
//! or `row_data` (a string), is an error that names the input and the field.
//!
//! Config: `ttl` (default `10m`).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weir_sdk::prelude::*;
use weir_sdk::time::format_millis;

#[derive(Deserialize)]
struct Config {
    #[serde(default = "ten_minutes")]
    ttl: Duration,
}

fn ten_minutes() -> Duration {
    Duration::from_mins(10)
}

/// Which input a record came from.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Left,
    Right,
}

impl Side {
    fn of(input: &str) -> Result<Side> {
        match input {
            "left" => Ok(Side::Left),
            "right" => Ok(Side::Right),
            other => bail!("unknown input `{other}`: stream-join joins inputs `left` and `right`"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Side::Left => "left",
            Side::Right => "right",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// All the state of one row_id, in a single value so that a record is one read and one
/// write.
#[derive(Serialize, Deserialize)]
enum Row {
    /// One side has arrived and waits for the other. `record` is its JSON as received,
    /// kept for the join and for `unmatched`.
    Waiting {
        expires: i64,
        side: Side,
        record: Vec<u8>,
    },
    /// Both sides were joined; kept until `expires` only to recognise duplicates. Only
    /// versions before the `joined` state wrote this; such a row is read as it was then.
    Joined { expires: i64 },
}

impl Row {
    /// When the row's timer fires (first record's time + ttl).
    fn expires(&self) -> i64 {
        match self {
            Row::Waiting { expires, .. } | Row::Joined { expires } => *expires,
        }
    }
}

#[derive(Serialize)]
struct JoinedRow {
    row_id: i64,
    data1: String,
    data2: String,
}

/// The process function; see the crate docs.
pub struct StreamJoin {
    ttl: Duration,
    row: ValueState<Row>,
    /// Present while a joined row_id is kept to recognise duplicates (time-to-live `ttl`).
    matched: ValueState<()>,
    joined: Output<JoinedRow>,
    duplicates: Output<Map<String, Value>>,
    unmatched: Output<Map<String, Value>>,
}

/// A record as a JSON object, with an error that names the input.
fn parse_record(side: Side, json: &[u8]) -> Result<Map<String, Value>> {
    serde_json::from_slice(json)
        .map_err(|e| anyhow!("input `{side}`: record is not a JSON object: {e}"))
}

/// `row_id` and `row_data` of a record; errors name the input and the field.
fn fields(side: Side, record: &Map<String, Value>) -> Result<(i64, &str)> {
    let row_id = match record.get("row_id") {
        None | Some(Value::Null) => bail!("input `{side}`: record has no `row_id`"),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| anyhow!("input `{side}`: field `row_id` must be an integer, got {v}"))?,
    };
    let row_data = match record.get("row_data") {
        None | Some(Value::Null) => bail!("input `{side}`: record has no `row_data`"),
        Some(Value::String(s)) => s.as_str(),
        Some(v) => bail!("input `{side}`: field `row_data` must be a string, got {v}"),
    };
    Ok((row_id, row_data))
}

/// The record as received, plus where it came from and why it is on a side output.
fn annotated(mut record: Map<String, Value>, side: Side, reason: String) -> Map<String, Value> {
    record.insert("input".into(), side.name().into());
    record.insert("reason".into(), reason.into());
    record
}

impl StreamJoin {
    /// Finishes an expired row: a waiting record goes to `unmatched`. Clears the state;
    /// the caller deals with the timer.
    fn expire(&self, ctx: &Context, row: Row) -> Result<()> {
        self.row.clear();
        let Row::Waiting {
            expires,
            side,
            record,
        } = row
        else {
            return Ok(());
        };
        let reason = format!("no {} record within {}", side.other(), self.ttl);
        let record = annotated(parse_record(side, &record)?, side, reason);
        self.unmatched.emit_record(
            Record::new(record)
                .with_key(ctx.current_key())
                .with_timestamp(expires),
        )
    }

    fn duplicate(
        &self,
        ctx: &Context,
        record: Map<String, Value>,
        side: Side,
        reason: String,
    ) -> Result<()> {
        let record = annotated(record, side, reason);
        self.duplicates
            .emit_record(Record::new(record).with_key(ctx.current_key()))
    }
}

impl ProcessFunction for StreamJoin {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        ensure!(
            cfg.ttl.as_millis() > 0,
            "config `ttl` must be longer than 0, got {}",
            cfg.ttl
        );
        // Fail before any input is read rather than on the first record.
        for input in ctx.inputs() {
            Side::of(input)?;
        }
        for side in [Side::Left, Side::Right] {
            if !ctx.inputs().iter().any(|i| i == side.name()) {
                ctx.log_warn(format!(
                    "no source feeds input `{side}`: every record will end up unmatched"
                ));
            }
        }
        Ok(StreamJoin {
            ttl: cfg.ttl,
            row: ctx.value_state("row")?,
            matched: ctx.value_state_with_ttl("matched", StateTtl::event_time(cfg.ttl))?,
            joined: ctx.main_output()?,
            duplicates: ctx.output("duplicates")?,
            unmatched: ctx.output("unmatched")?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
        let side = Side::of(el.input())?;
        let record = parse_record(side, el.value())?;
        let (row_id, row_data) = fields(side, &record)?;
        let ts = el.timestamp();
        let watermark = ctx.current_watermark();
        if ts <= watermark {
            ctx.log_debug(format!(
                "late {side} record at {} (watermark {}), processed normally",
                format_millis(ts),
                format_millis(watermark)
            ));
        }

        let mut row = self.row.get()?;
        if let Some(old) = row.take_if(|r| ts >= r.expires() || r.expires() <= watermark) {
            // Expired, but its timer has not fired yet: finish it as the timer would.
            ctx.delete_event_timer(old.expires());
            self.expire(ctx, old)?;
        }

        match row {
            None if self.matched.get()?.is_some() => {
                let reason = "duplicate: this row_id was already joined".to_owned();
                self.duplicate(ctx, record, side, reason)
            }
            None => {
                let expires = ts.saturating_add(self.ttl.as_millis());
                ctx.register_event_timer(expires);
                self.row.set(&Row::Waiting {
                    expires,
                    side,
                    record: el.value().to_vec(),
                })
            }
            Some(Row::Waiting { side: waiting, .. }) if waiting == side => {
                let reason =
                    format!("duplicate: a {side} record for this row_id is already waiting");
                self.duplicate(ctx, record, side, reason)
            }
            Some(Row::Waiting {
                expires,
                side: waiting,
                record: partner,
            }) => {
                let partner = parse_record(waiting, &partner)?;
                let (_, partner_data) = fields(waiting, &partner)?;
                let (left, right) = match side {
                    Side::Left => (row_data, partner_data),
                    Side::Right => (partner_data, row_data),
                };
                let joined = JoinedRow {
                    row_id,
                    data1: left.to_owned(),
                    data2: right.to_owned(),
                };
                self.joined
                    .emit_record(Record::new(joined).with_key(ctx.current_key()))?;
                // The row's timer is no longer needed: the host expires `matched`.
                ctx.delete_event_timer(expires);
                self.row.clear();
                self.matched.set(&())
            }
            Some(Row::Joined { .. }) => {
                let reason = "duplicate: this row_id was already joined".to_owned();
                self.duplicate(ctx, record, side, reason)
            }
        }
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        match self.row.get()? {
            Some(row) if row.expires() == timer.timestamp() => self.expire(ctx, row),
            // A timer of a row that was already finished by a later record.
            _ => Ok(()),
        }
    }
}

weir_sdk::export!(StreamJoin);
