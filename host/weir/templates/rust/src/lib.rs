//! {{name}}: user sessions, a starting point for a Weir process function.
//!
//! Input (`input.jsonl`): `{"user": "ana", "action": "open", "at": "2026-11-29 10:00:00.000"}`,
//! keyed by `user`, with `at` as the event time (the pipeline file says so; the host
//! extracts both).
//!
//! A session is a run of one user's events with less than `gap` of event time between
//! them. When a session ends (no event for `gap`: an event-time timer), the function
//! emits `{"user", "events", "started_at", "ended_at"}` to the main output, and also to the
//! `busy` side output if it had at least `busy_at` events.
//!
//! Config (`[udf.config]` in pipeline.toml, or `--config gap=1m`): `gap` (default `30s`),
//! `busy_at` (default `3`).

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;
use weir_sdk::time::format_millis;

#[derive(Deserialize)]
struct Config {
    #[serde(default = "thirty_seconds")]
    gap: Duration,
    #[serde(default = "three")]
    busy_at: u32,
}

fn thirty_seconds() -> Duration {
    Duration::from_secs(30)
}

fn three() -> u32 {
    3
}

/// What the host keeps for each user between calls.
#[derive(Serialize, Deserialize)]
struct Session {
    events: u32,
    started_at: i64,
    last_at: i64,
}

/// What the function emits when a session ends.
#[derive(Serialize)]
struct SessionSummary {
    user: String,
    events: u32,
    started_at: String,
    ended_at: String,
}

/// The process function. It holds only config and handles: the state lives in the host.
pub struct Sessions {
    gap: i64,
    busy_at: u32,
    session: ValueState<Session>,
    main: Output<SessionSummary>,
    busy: Output<SessionSummary>,
}

impl ProcessFunction for Sessions {
    /// Once per instance: read the config, declare states and outputs.
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let config: Config = ctx.config()?;
        ensure!(config.gap.as_millis() > 0, "config `gap` must be more than 0");
        Ok(Sessions {
            gap: config.gap.as_millis(),
            busy_at: config.busy_at,
            session: ctx.value_state("session")?,
            main: ctx.main_output()?,
            busy: ctx.output("busy")?,
        })
    }

    /// Once per event, scoped to its user: extend the session and move its end timer.
    fn process_element(&mut self, ctx: &mut Context, event: &Element) -> Result<()> {
        let at = event.timestamp();
        let session = match self.session.get()? {
            // The gap has passed since the session's last event, but not yet the watermark
            // (its timer is still pending): that session is over, this event starts anew.
            Some(ended) if at >= ended.last_at + self.gap => {
                ctx.delete_event_timer(ended.last_at + self.gap);
                self.emit(ctx, &ended)?;
                Session::starting(at)
            }
            Some(mut session) => {
                ctx.delete_event_timer(session.last_at + self.gap);
                session.events += 1;
                session.started_at = session.started_at.min(at);
                session.last_at = session.last_at.max(at);
                session
            }
            None => Session::starting(at),
        };
        // Fires when the watermark passes the session's end; see `on_timer`.
        ctx.register_event_timer(session.last_at + self.gap);
        self.session.set(&session)
    }

    /// When the watermark passes a session's end: emit it and forget it.
    fn on_timer(&mut self, ctx: &mut Context, _timer: &Timer) -> Result<()> {
        if let Some(session) = self.session.get()? {
            self.emit(ctx, &session)?;
            self.session.clear();
        }
        Ok(())
    }
}

impl Sessions {
    /// Emits an ended session to the main output, and to `busy` if it had enough events.
    fn emit(&self, ctx: &Context, session: &Session) -> Result<()> {
        let summary = SessionSummary {
            user: ctx.current_key_str()?.to_owned(),
            events: session.events,
            started_at: format_millis(session.started_at),
            ended_at: format_millis(session.last_at),
        };
        self.main.emit(&summary)?;
        if session.events >= self.busy_at {
            self.busy.emit(&summary)?;
        }
        Ok(())
    }
}

impl Session {
    fn starting(at: i64) -> Self {
        Session {
            events: 1,
            started_at: at,
            last_at: at,
        }
    }
}

weir_sdk::export!(Sessions);

/// Unit tests run natively (`cargo test`) against the SDK's in-memory host, which keeps
/// state and fires timers as the real host does.
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weir_sdk::testing::{Emitted, TestHost};
    use weir_sdk::time::parse_millis;

    fn ts(text: &str) -> i64 {
        parse_millis(text).unwrap()
    }

    fn event(host: &mut TestHost<Sessions>, user: &str, at: &str) {
        let value = json!({"user": user, "action": "open", "at": at});
        host.process("events", user, &value, ts(at)).unwrap();
    }

    #[test]
    fn a_session_ends_after_the_gap_and_busy_ones_go_to_the_side_output() {
        let mut host = TestHost::<Sessions>::builder()
            .inputs(["events"])
            .build()
            .unwrap();
        event(&mut host, "ana", "2026-11-29 10:00:00.000");
        event(&mut host, "ana", "2026-11-29 10:00:10.000");
        event(&mut host, "ana", "2026-11-29 10:00:20.000");
        event(&mut host, "ben", "2026-11-29 10:00:05.000");

        // Nothing ends before the watermark passes the last event plus the gap.
        host.advance_watermark(ts("2026-11-29 10:00:34.999")).unwrap();
        assert!(host.take_outputs("main").is_empty());

        host.advance_watermark(ts("2026-11-29 10:01:00.000")).unwrap();
        let ana = json!({"user": "ana", "events": 3,
            "started_at": "2026-11-29 10:00:00.000", "ended_at": "2026-11-29 10:00:20.000"});
        let ben = json!({"user": "ben", "events": 1,
            "started_at": "2026-11-29 10:00:05.000", "ended_at": "2026-11-29 10:00:05.000"});
        // A record's timestamp is that of the timer that emitted it.
        assert_eq!(
            host.take_outputs("main"),
            vec![
                Emitted::new(ben, ts("2026-11-29 10:00:35.000")),
                Emitted::new(ana.clone(), ts("2026-11-29 10:00:50.000")),
            ]
        );
        assert_eq!(
            host.take_outputs("busy"),
            vec![Emitted::new(ana, ts("2026-11-29 10:00:50.000"))]
        );
        assert!(!host.has_state("ana"));
    }

    #[test]
    fn an_event_after_the_gap_starts_a_new_session_before_the_watermark_passes() {
        let mut host = TestHost::<Sessions>::builder()
            .inputs(["events"])
            .build()
            .unwrap();
        event(&mut host, "ben", "2026-11-29 10:00:05.000");
        // 55 s later, with the watermark still at the start: the first session is over.
        event(&mut host, "ben", "2026-11-29 10:01:00.000");
        let first = json!({"user": "ben", "events": 1,
            "started_at": "2026-11-29 10:00:05.000", "ended_at": "2026-11-29 10:00:05.000"});
        assert_eq!(
            host.take_outputs("main"),
            vec![Emitted::new(first, ts("2026-11-29 10:01:00.000"))]
        );
        host.finish().unwrap();
        let second = json!({"user": "ben", "events": 1,
            "started_at": "2026-11-29 10:01:00.000", "ended_at": "2026-11-29 10:01:00.000"});
        assert_eq!(
            host.take_outputs("main"),
            vec![Emitted::new(second, ts("2026-11-29 10:01:30.000"))]
        );
    }
}
