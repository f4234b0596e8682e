"""The counter through the in-memory host, with exact expected records: the tests of the
Rust twin (udfs/change-only-counter/tests/counter.rs), in plain CPython.

    PYTHONPATH=guest-sdk/python:udfs/python/change-only-counter python3 -m unittest -v test_app
"""

import unittest

import weir
from weir.testing import Emitted, TestHost
from weir.time import parse_millis

from app import ChangeOnlyCounter, Clicks, ProcessFunction

ts = parse_millis


def count(ad, clicks, updated_at):
    """The expected record: `updated_at` is also its timestamp, and the ad its key."""
    record = {"ad_id": ad, "clicks": clicks, "updated_at": updated_at}
    return Emitted(record, ts(updated_at), key=ad)


def click(host, ad, at):
    host.process("main", ad, {"ad_id": ad, "clicked_at": at}, ts(at))


def counter(**config):
    return TestHost(ChangeOnlyCounter, config=config)


class ChangeOnlyCounterTest(unittest.TestCase):
    def test_count_rises_then_falls_back_to_zero_after_a_quiet_gap(self):
        h = counter()
        click(h, "ad1", "2026-11-29 10:00:00.123")
        click(h, "ad1", "2026-11-29 10:01:00.000")
        click(h, "ad1", "2026-11-29 10:02:30.500")
        self.assertEqual(
            h.take_outputs("main"),
            [
                count("ad1", 1, "2026-11-29 10:00:00.123"),
                count("ad1", 2, "2026-11-29 10:01:00.000"),
                count("ad1", 3, "2026-11-29 10:02:30.500"),
            ],
        )

        # Nothing expires before the first click is 5 minutes old.
        h.advance_watermark(ts("2026-11-29 10:05:00.122"))
        self.assertEqual(h.take_outputs("main"), [])

        # The quiet gap: each click expires at its timer, down to 0 at the last one.
        h.advance_watermark(ts("2026-11-29 10:30:00.000"))
        self.assertEqual(
            h.take_outputs("main"),
            [
                count("ad1", 2, "2026-11-29 10:05:00.123"),
                count("ad1", 1, "2026-11-29 10:06:00.000"),
                count("ad1", 0, "2026-11-29 10:07:30.500"),
            ],
        )
        self.assertFalse(h.has_state("ad1"), "state is cleared once no click is held")
        self.assertEqual(h.pending_timers(), [])

        # A new click starts again from 0.
        click(h, "ad1", "2026-11-29 10:31:00.000")
        self.assertEqual(h.take_outputs("main"), [count("ad1", 1, "2026-11-29 10:31:00.000")])

    def test_ads_are_counted_independently(self):
        h = counter()
        click(h, "a", "2026-11-29 10:00:00.000")
        click(h, "b", "2026-11-29 10:00:10.000")
        click(h, "a", "2026-11-29 10:00:20.000")
        h.advance_watermark(ts("2026-11-29 10:05:10.000"))
        self.assertEqual(
            h.take_outputs("main"),
            [
                count("a", 1, "2026-11-29 10:00:00.000"),
                count("b", 1, "2026-11-29 10:00:10.000"),
                count("a", 2, "2026-11-29 10:00:20.000"),
                count("a", 1, "2026-11-29 10:05:00.000"),
                count("b", 0, "2026-11-29 10:05:10.000"),
            ],
        )
        self.assertTrue(h.has_state("a"))
        self.assertFalse(h.has_state("b"))
        # The state is JSON: the clicks still in the window, and the count last emitted.
        self.assertEqual(
            h.state("a", "clicks", codec=weir.MarshalCodec(Clicks)),
            Clicks(times=[ts("2026-11-29 10:00:20.000")], emitted=1),
        )

    def test_clicks_in_the_same_millisecond_share_one_timer(self):
        h = counter()
        click(h, "ad", "2026-11-29 10:00:00.000")
        click(h, "ad", "2026-11-29 10:00:00.000")
        self.assertEqual(
            h.pending_timers(), [(b"ad", weir.TimeDomain.EVENT_TIME, ts("2026-11-29 10:05:00.000"))]
        )
        h.finish()
        self.assertEqual(
            h.outputs("main"),
            [
                count("ad", 1, "2026-11-29 10:00:00.000"),
                count("ad", 2, "2026-11-29 10:00:00.000"),
                count("ad", 0, "2026-11-29 10:05:00.000"),
            ],
        )

    def test_a_late_click_counts_until_the_next_watermark_advance(self):
        h = counter()
        click(h, "ad", "2026-11-29 10:10:00.000")
        h.advance_watermark(ts("2026-11-29 10:12:00.000"))
        # Already older than the window: counted now, expired at the next advance.
        click(h, "ad", "2026-11-29 10:01:00.000")
        h.advance_watermark(ts("2026-11-29 10:12:00.001"))
        self.assertEqual(
            h.take_outputs("main"),
            [
                count("ad", 1, "2026-11-29 10:10:00.000"),
                count("ad", 2, "2026-11-29 10:01:00.000"),
                count("ad", 1, "2026-11-29 10:06:00.000"),
            ],
        )

    def test_the_window_is_configurable(self):
        h = counter(window="90s")
        click(h, "ad", "2026-11-29 10:00:00.000")
        click(h, "ad", "2026-11-29 10:01:00.000")
        h.advance_watermark(ts("2026-11-29 10:02:00.000"))
        self.assertEqual(
            h.take_outputs("main"),
            [
                count("ad", 1, "2026-11-29 10:00:00.000"),
                count("ad", 2, "2026-11-29 10:01:00.000"),
                count("ad", 1, "2026-11-29 10:01:30.000"),
            ],
        )
        # Bare milliseconds work too.
        h = counter(window="1000")
        click(h, "ad", "1970-01-01 00:00:00.000")
        h.advance_watermark(1_000)
        self.assertEqual(h.outputs("main")[1], count("ad", 0, "1970-01-01 00:00:01.000"))

    def test_a_bad_window_is_an_init_error(self):
        with self.assertRaises(weir.Error) as caught:
            counter(window="soon")
        self.assertTrue(
            str(caught.exception).startswith('invalid config `window`: invalid duration "soon"'),
            caught.exception,
        )
        with self.assertRaises(weir.Error) as caught:
            counter(window="0s")
        self.assertEqual(str(caught.exception), "config `window` must be longer than 0, got 0s")

    def test_a_fresh_instance_continues_from_the_host_state(self):
        h = counter()
        click(h, "ad", "2026-11-29 10:00:00.000")
        h.reinit()
        click(h, "ad", "2026-11-29 10:00:01.000")
        h.reinit()
        h.finish()
        self.assertEqual(
            h.outputs("main"),
            [
                count("ad", 1, "2026-11-29 10:00:00.000"),
                count("ad", 2, "2026-11-29 10:00:01.000"),
                count("ad", 1, "2026-11-29 10:05:00.000"),
                count("ad", 0, "2026-11-29 10:05:01.000"),
            ],
        )
        self.assertEqual(h.keys_with_state(), [])

    def test_pre_1970_timestamps_format_correctly(self):
        h = counter()
        click(h, "ad", "1969-12-31 23:59:59.999")
        h.finish()
        self.assertEqual(
            h.outputs("main"),
            [
                count("ad", 1, "1969-12-31 23:59:59.999"),
                count("ad", 0, "1970-01-01 00:04:59.999"),
            ],
        )

    def test_state_another_version_wrote_is_a_state_decode_error(self):
        # The Rust twin's state is postcard, not JSON: this version cannot read it, and
        # the host would send the click to the dead letters.
        h = counter()
        click(h, "ad", "2026-11-29 10:00:00.000")
        h.set_state_bytes("ad", "clicks", b"\x01\x80\x9c\x9c\xd9\xa9\x69\x01")
        with self.assertRaises(weir.StateDecodeError) as caught:
            click(h, "ad", "2026-11-29 10:00:01.000")
        self.assertIn("state `clicks`: cannot decode stored value", str(caught.exception))
        self.assertEqual(len(h.outputs("main")), 1, "the failed call's records are dropped")

    def test_the_exported_class_runs_too(self):
        h = TestHost(ProcessFunction, inputs=["clicks"])
        h.process("clicks", "ad", {"ad_id": "ad"}, 0)
        self.assertEqual(h.outputs("main"), [count("ad", 1, "1970-01-01 00:00:00.000")])


if __name__ == "__main__":
    unittest.main()
