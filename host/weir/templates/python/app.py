"""{{name}}: user sessions, a starting point for a Weir process function in Python.

Input (`input.jsonl`): `{"user": "ana", "action": "open", "at": "2026-11-29 10:00:00.000"}`,
keyed by `user`, with `at` as the event time (the pipeline file says so; the host
extracts both).

A session is a run of one user's events with less than `gap` of event time between
them. When a session ends (no event for `gap`: an event-time timer), the function emits
`{"user", "events", "started_at", "ended_at"}` to the main output, and also to the `busy`
side output if it had at least `busy_at` events.

Config (`[udf.config]` in pipeline.toml, or `--config gap=1m`): `gap` (default `30s`),
`busy_at` (default `3`).

Build with `./build.sh` (writes {{name}}.wasm), run with `weir run pipeline.toml`.
"""

# Import everything at the top of the file: the component holds only the modules that
# were imported while it was built, so an `import` inside a function fails at run time.
from dataclasses import dataclass

import weir
from weir.time import format_millis


@dataclass
class Session:
    """What the host keeps for each user between calls (stored as JSON)."""

    events: int
    started_at: int  # event times, in milliseconds since the epoch
    last_at: int


class Sessions(weir.ProcessFunction):
    """The process function. It holds only config and handles: the state lives in the
    host, and the host may start a fresh instance (calling `init` again) at any time."""

    def init(self, ctx):
        """Once per instance: read the config, declare states and outputs."""
        self.gap = ctx.config_duration("gap", "30s")  # in milliseconds
        self.busy_at = ctx.config_int("busy_at", 3)
        if self.gap <= 0:
            # weir.Error: reported with its message alone (other exceptions with a traceback).
            raise weir.Error("config `gap` must be more than 0")
        # Typed state: read back as a Session, not a dict.
        self.session = ctx.value_state("session", weir.JsonCodec(Session))
        self.main = ctx.main_output()
        self.busy = ctx.output("busy")  # a side output; pipeline.toml routes it to a file

    def process_element(self, ctx, event):
        """Once per event, scoped to its user: extend the session and move its end timer."""
        at = event.timestamp()
        session = self.session.get()
        if session is not None and at >= session.last_at + self.gap:
            # The gap has passed since the session's last event, but not yet the watermark
            # (its timer is still pending): that session is over, this event starts anew.
            ctx.delete_event_timer(session.last_at + self.gap)
            self.emit(ctx, session)
            session = None
        if session is None:
            session = Session(events=1, started_at=at, last_at=at)
        else:
            ctx.delete_event_timer(session.last_at + self.gap)
            session.events += 1
            session.started_at = min(session.started_at, at)
            session.last_at = max(session.last_at, at)
        # Fires when the watermark passes the session's end; see on_timer.
        ctx.register_event_timer(session.last_at + self.gap)
        self.session.set(session)

    def on_timer(self, ctx, timer):
        """When the watermark passes a session's end: emit it and forget it."""
        session = self.session.get()
        if session is not None:
            self.emit(ctx, session)
            self.session.clear()

    def emit(self, ctx, session):
        """Emits an ended session to the main output, and to `busy` if it had enough events."""
        summary = {  # written as compact JSON, in this order
            "user": ctx.current_key_str(),
            "events": session.events,
            "started_at": format_millis(session.started_at),
            "ended_at": format_millis(session.last_at),
        }
        self.main.emit(summary)
        if session.events >= self.busy_at:
            self.busy.emit(summary)
            ctx.log_debug(f"busy session of {session.events} events")


# componentize-py exports the class named `ProcessFunction` (after the WIT interface).
ProcessFunction = weir.export(Sessions)
