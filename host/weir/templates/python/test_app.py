"""Unit tests of app.py, run natively against the SDK's in-memory host (no wasm, no
componentize-py):

    python3 -m unittest -v

`weir.testing.TestHost` calls `init`, scopes state and timers to each key, fires timers
as the watermark advances, and records what the function emits.
"""

import unittest

from weir.testing import Emitted, TestHost
from weir.time import parse_millis

from app import Sessions

ts = parse_millis


def event(host, user, at):
    """Feeds one event as the pipeline would: keyed by `user`, at event time `at`."""
    host.process("events", user, {"user": user, "action": "open", "at": at}, ts(at))


def session(user, events, started_at, ended_at):
    return {"user": user, "events": events, "started_at": started_at, "ended_at": ended_at}


class SessionsTest(unittest.TestCase):
    def setUp(self):
        # The config and input name of pipeline.toml.
        self.host = TestHost(Sessions, config={"gap": "30s", "busy_at": "3"}, inputs=["events"])

    def test_a_session_ends_after_the_gap_and_busy_ones_go_to_the_side_output(self):
        host = self.host
        event(host, "ana", "2026-11-29 10:00:00.000")
        event(host, "ana", "2026-11-29 10:00:10.000")
        event(host, "ana", "2026-11-29 10:00:20.000")
        event(host, "ben", "2026-11-29 10:00:05.000")

        # Nothing ends before the watermark passes the last event plus the gap.
        host.advance_watermark(ts("2026-11-29 10:00:34.999"))
        self.assertEqual(host.take_outputs("main"), [])

        host.advance_watermark(ts("2026-11-29 10:01:00.000"))
        ana = session("ana", 3, "2026-11-29 10:00:00.000", "2026-11-29 10:00:20.000")
        ben = session("ben", 1, "2026-11-29 10:00:05.000", "2026-11-29 10:00:05.000")
        # A record's timestamp is that of the timer that emitted it.
        self.assertEqual(
            host.take_outputs("main"),
            [
                Emitted(ben, ts("2026-11-29 10:00:35.000")),
                Emitted(ana, ts("2026-11-29 10:00:50.000")),
            ],
        )
        self.assertEqual(host.take_outputs("busy"), [Emitted(ana, ts("2026-11-29 10:00:50.000"))])
        self.assertFalse(host.has_state("ana"))

    def test_an_event_after_the_gap_starts_a_new_session_before_the_watermark_passes(self):
        host = self.host
        event(host, "ben", "2026-11-29 10:00:05.000")
        # 55 s later, with the watermark still at the start: the first session is over.
        event(host, "ben", "2026-11-29 10:01:00.000")
        first = session("ben", 1, "2026-11-29 10:00:05.000", "2026-11-29 10:00:05.000")
        self.assertEqual(
            host.take_outputs("main"), [Emitted(first, ts("2026-11-29 10:01:00.000"))]
        )
        host.finish()  # the end of input: every timer fires
        second = session("ben", 1, "2026-11-29 10:01:00.000", "2026-11-29 10:01:00.000")
        self.assertEqual(
            host.take_outputs("main"), [Emitted(second, ts("2026-11-29 10:01:30.000"))]
        )


if __name__ == "__main__":
    unittest.main()
