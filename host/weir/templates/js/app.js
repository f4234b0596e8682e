/**
 * {{name}}: user sessions, a starting point for a Weir process function in JavaScript.
 *
 * Input (`input.jsonl`): `{"user": "ana", "action": "open", "at": "2026-11-29 10:00:00.000"}`,
 * keyed by `user`, with `at` as the event time (the pipeline file says so; the host
 * extracts both).
 *
 * A session is a run of one user's events with less than `gap` of event time between
 * them. When a session ends (no event for `gap`: an event-time timer), the function emits
 * `{"user", "events", "started_at", "ended_at"}` to the main output, and also to the
 * `busy` side output if it had at least `busy_at` events.
 *
 * Config (`[udf.config]` in pipeline.toml, or `--config gap=1m`): `gap` (default `30s`),
 * `busy_at` (default `3`).
 *
 * Build with `./build.sh` (writes {{name}}.wasm), run with `weir run pipeline.toml`.
 */

// The SDK, copied into weir/ by `weir new`. Other modules of your own can be imported
// the same way, by a relative path inside this folder.
import * as weir from "./weir/index.js";

/**
 * The process function. It holds only config and handles: the state lives in the host,
 * and the host may start a fresh instance (calling `init` again) at any time.
 */
class Sessions {
  /** Once per instance: read the config, declare states and outputs. */
  init(ctx) {
    this.gap = ctx.configDuration("gap", "30s"); // in milliseconds
    this.busyAt = ctx.configInt("busy_at", 3);
    if (this.gap <= 0) {
      // Anything thrown stops the run; the host prints the message and the stack.
      throw new Error("config `gap` must be more than 0");
    }
    // What the host keeps for each user between calls, as JSON:
    // {events, startedAt, lastAt}, times in milliseconds since the epoch.
    this.session = ctx.valueState("session");
    this.main = ctx.mainOutput();
    this.busy = ctx.output("busy"); // a side output; pipeline.toml routes it to a file
  }

  /** Once per event, scoped to its user: extend the session and move its end timer. */
  processElement(ctx, event) {
    const at = event.timestamp;
    let session = this.session.get(); // undefined when this user has none
    if (session !== undefined && at >= session.lastAt + this.gap) {
      // The gap has passed since the session's last event, but not yet the watermark
      // (its timer is still pending): that session is over, this event starts anew.
      ctx.deleteEventTimer(session.lastAt + this.gap);
      this.emit(ctx, session);
      session = undefined;
    }
    if (session === undefined) {
      session = { events: 1, startedAt: at, lastAt: at };
    } else {
      ctx.deleteEventTimer(session.lastAt + this.gap);
      session.events += 1;
      session.startedAt = Math.min(session.startedAt, at);
      session.lastAt = Math.max(session.lastAt, at);
    }
    // Fires when the watermark passes the session's end; see onTimer.
    ctx.registerEventTimer(session.lastAt + this.gap);
    this.session.set(session);
  }

  /** When the watermark passes a session's end: emit it and forget it. */
  onTimer(ctx, timer) {
    const session = this.session.get();
    if (session !== undefined) {
      this.emit(ctx, session);
      this.session.clear();
    }
  }

  /** Emits an ended session to the main output, and to `busy` if it had enough events. */
  emit(ctx, session) {
    const summary = {
      // written as compact JSON, in this order
      user: ctx.key,
      events: session.events,
      started_at: weir.formatMillis(session.startedAt),
      ended_at: weir.formatMillis(session.lastAt),
    };
    this.main.emit(summary);
    if (session.events >= this.busyAt) {
      this.busy.emit(summary);
      ctx.logDebug(`busy session of ${session.events} events`);
    }
  }
}

// The component's export: componentize-qjs exports `processFunction` (the WIT interface).
export const processFunction = weir.processFunction(Sessions);
