"""Clicks per ad in the last `window` of event time, emitted only when the count
changes, including when it falls back to 0. The Python twin of
udfs/change-only-counter/src/lib.rs: the same output, byte for byte, on the same input.

Input: `{"ad_id": "...", "clicked_at": "..."}`, keyed by `ad_id` with `clicked_at` as the
event time (the host extracts both, so the value is never parsed).
Output: `{"ad_id": ..., "clicks": N, "updated_at": "YYYY-MM-DD HH:MM:SS.mmm"}`, keyed by
`ad_id` (an upsert stream of the current count).

- On a click at `ts`: hold `ts`, set an event-time timer at `ts + window`, and emit the
  number of held clicks (at `updated_at = ts`) if it differs from the last emitted one.
- On a timer at `T`: drop clicks with `ts <= T - window`, emit (at `updated_at = T`) if
  the count changed, and clear the key once no click is held.

Config: `window` (default `5m`).
"""

from dataclasses import dataclass, field

import weir
from weir.time import format_millis


@dataclass
class Clicks:
    """Everything one ad needs, in a single state so a click is one read and one write."""

    #: Event times of the clicks still in the window, in arrival order.
    times: list = field(default_factory=list)
    #: The count last emitted (0 before the first emission).
    emitted: int = 0


class ChangeOnlyCounter(weir.ProcessFunction):
    def init(self, ctx):
        self.window = ctx.config_duration("window", "5m")
        if self.window <= 0:
            raise weir.Error(
                "config `window` must be longer than 0, got "
                + weir.format_duration(self.window)
            )
        # Python's binary `marshal` rather than JSON: the click times are read and written
        # whole on every click and timer, and marshal does that several times faster.
        self.clicks = ctx.value_state("clicks", weir.MarshalCodec(Clicks))
        self.out = ctx.main_output()

    def emit_if_changed(self, ctx, clicks, at):
        """Emits the held count if it differs from the last emitted one."""
        count = len(clicks.times)
        if count == clicks.emitted:
            return
        clicks.emitted = count
        # A dict keeps its insertion order: the fields come out as the Rust struct's.
        record = {"ad_id": ctx.current_key_str(), "clicks": count, "updated_at": format_millis(at)}
        self.out.emit(record, key=ctx.current_key())

    def process_element(self, ctx, click):
        ts = click.timestamp()
        clicks = self.clicks.get() or Clicks()
        clicks.times.append(ts)
        ctx.register_event_timer(min(ts + self.window, weir.MAX_TIMESTAMP))
        self.emit_if_changed(ctx, clicks, ts)
        self.clicks.set(clicks)

    def on_timer(self, ctx, timer):
        clicks = self.clicks.get()
        if clicks is None:
            return
        now = timer.timestamp()
        expired = max(now - self.window, weir.MIN_TIMESTAMP)
        clicks.times = [ts for ts in clicks.times if ts > expired]
        self.emit_if_changed(ctx, clicks, now)
        if clicks.times:
            self.clicks.set(clicks)
        else:
            self.clicks.clear()


# componentize-py exports the class of this name as the `process-function` interface.
ProcessFunction = weir.export(ChangeOnlyCounter)
