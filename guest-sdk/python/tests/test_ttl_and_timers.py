"""Event-time time-to-live waits for the timers: an entry stamped `s` with TTL `d` is
visible to every timer that fires before `s + d`, however far the watermark jumps (the
end of input included), and gone for the timers at or after it. The Python twin of
guest-sdk/tests/ttl_and_timers.rs.

    PYTHONPATH=guest-sdk/python:guest-sdk/python/tests python3 -m unittest -v test_ttl_and_timers
"""

import unittest

import weir
from weir.testing import TestHost


class Buffer(weir.ProcessFunction):
    """Keeps each transaction for 10 minutes, checked by a timer 1 s after it; a timer
    that sees three over 500.00 within 2 s alerts. `{"probe": t}` registers a bare timer
    at `t` that reports what the buffer holds then."""

    def init(self, ctx):
        self.transactions = ctx.list_state("transactions", ttl=weir.StateTtl.event_time("10m"))
        self.out = ctx.main_output()

    def process_element(self, ctx, el):
        value = el.json()
        if "probe" in value:
            ctx.register_event_timer(value["probe"])
            return
        self.transactions.append([el.timestamp(), value["amount"]])
        ctx.register_event_timer(el.timestamp() + 1000)

    def on_timer(self, ctx, timer):
        held = self.transactions.get()
        large = [at for at, amount in held if amount > 500]
        alert = any(large[i + 2] - large[i] <= 2000 for i in range(len(large) - 2))
        self.out.emit({"at": timer.timestamp(), "held": len(held), "alert": alert})


class TtlAndTimersTest(unittest.TestCase):
    def test_the_end_of_input_timers_see_what_they_buffered(self):
        h = TestHost(Buffer)
        for at, amount in [(0, 600.0), (700, 750.5), (1500, 999.0)]:
            h.process("main", "card", {"amount": amount}, at)
        h.finish()
        self.assertEqual(
            [o.value for o in h.take_outputs("main")],
            [
                {"at": 1000, "held": 3, "alert": True},
                {"at": 1700, "held": 3, "alert": True},
                {"at": 2500, "held": 3, "alert": True},
            ],
        )
        self.assertFalse(h.has_state("card"), "expired after the timers fired")

    def test_a_watermark_jump_expires_entries_in_time_with_the_timers(self):
        h = TestHost(Buffer)
        h.process("main", "card", {"amount": 10}, 0)
        h.process("main", "card", {"amount": 20}, 300_000)
        for probe in [599_999, 600_000, 900_000]:
            h.process("main", "card", {"probe": probe}, 300_000)
        h.advance_watermark(1_000_000)
        self.assertEqual(
            [o.value for o in h.take_outputs("main")],
            [
                {"at": 1000, "held": 2, "alert": False},
                {"at": 301_000, "held": 2, "alert": False},
                {"at": 599_999, "held": 2, "alert": False},
                {"at": 600_000, "held": 1, "alert": False},
                {"at": 900_000, "held": 0, "alert": False},
            ],
        )
        self.assertFalse(h.has_state("card"))


if __name__ == "__main__":
    unittest.main()
