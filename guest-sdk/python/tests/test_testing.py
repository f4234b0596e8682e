"""The semantics of weir.testing.TestHost, driven by a scriptable UDF: the tests of the
Rust SDK's TestHost (guest-sdk/src/testing/tests.rs), in plain CPython.

    PYTHONPATH=guest-sdk/python:guest-sdk/python/tests python3 -m unittest -v test_testing
"""

import unittest
from dataclasses import dataclass
from unittest import mock

import weir
from weir import TimeDomain
from weir.testing import Emitted, HostTrap, LogLine, Rejected, TestHost, key_hash

MAX = weir.MAX_TIMESTAMP


class Script(weir.ProcessFunction):
    """Emits one record per firing timer; everything else is scripted by the elements:
    `register`, `delete`, `register_processing`, `delete_processing` (timestamps),
    `chain` ([at, then]: when the timer at `at` fires, register one at `then`), `set`
    (a text to store), `clear_all`, `fail` (a message to raise weir.Error with)."""

    def init(self, ctx):
        self.text = ctx.value_state("text")
        self.chains = ctx.map_state("chains")
        self.seen = ctx.list_state("seen")
        self.out = ctx.main_output()
        self.side = ctx.output("side")

    def process_element(self, ctx, el):
        cmd = el.json()
        if "fail" in cmd:
            raise weir.Error(f"scripted failure: {cmd['fail']}")
        self.seen.append(el.timestamp())
        for ts in cmd.get("register", []):
            ctx.register_event_timer(ts)
        for ts in cmd.get("delete", []):
            ctx.delete_event_timer(ts)
        for ts in cmd.get("register_processing", []):
            ctx.register_processing_timer(ts)
        for ts in cmd.get("delete_processing", []):
            ctx.delete_processing_timer(ts)
        for at, then in cmd.get("chain", []):
            self.chains.put(at, then)
        if "set" in cmd:
            self.text.set(cmd["set"])
        if cmd.get("clear_all"):
            ctx.clear_all_state()

    def on_timer(self, ctx, timer):
        then = self.chains.get(timer.timestamp())
        if then is not None:
            self.chains.remove(timer.timestamp())
            ctx.register_event_timer(then)
        fired = {
            "key": timer.key_str(),
            "domain": timer.domain().name,
            "watermark": ctx.current_watermark(),
            "now": ctx.current_processing_time(),
        }
        self.out.emit(fired, key=ctx.current_key())


def fired(host):
    """`(key, timestamp)` of every timer that fired, in order."""
    return [(e.value["key"], e.timestamp) for e in host.take_outputs("main")]


class TimerTest(unittest.TestCase):
    def test_event_timers_fire_in_timestamp_then_key_order(self):
        h = TestHost(Script)
        h.process("main", "b", {"register": [30, 10]}, 1)
        h.process("main", "a", {"register": [20, 10]}, 2)
        h.advance_watermark(25)
        self.assertEqual(fired(h), [("a", 10), ("b", 10), ("a", 20)])
        self.assertEqual(h.pending_timers(), [(b"b", TimeDomain.EVENT_TIME, 30)])
        self.assertEqual(h.watermark(), 25)
        h.advance_watermark(30)
        self.assertEqual(fired(h), [("b", 30)])
        self.assertEqual(h.pending_timers(), [])

    def test_timers_see_the_new_watermark_and_are_emitted_at_their_timestamp(self):
        h = TestHost(Script)
        h.process("main", "a", {"register": [10]}, 1)
        h.advance_watermark(12)
        self.assertEqual(
            h.outputs("main"),
            [Emitted({"key": "a", "domain": "EVENT_TIME", "watermark": 12, "now": 0}, 10, key="a")],
        )

    def test_timers_are_unique_per_key_domain_and_timestamp(self):
        h = TestHost(Script)
        h.process("main", "a", {"register": [10, 10], "register_processing": [10]}, 1)
        h.process("main", "a", {"register": [10]}, 2)
        h.process("main", "b", {"register": [10]}, 3)
        self.assertEqual(
            h.pending_timers(),
            [
                (b"a", TimeDomain.EVENT_TIME, 10),
                (b"b", TimeDomain.EVENT_TIME, 10),
                (b"a", TimeDomain.PROCESSING_TIME, 10),
            ],
        )
        h.advance_watermark(100)
        self.assertEqual(fired(h), [("a", 10), ("b", 10)])

    def test_deleting_a_timer_and_deleting_a_missing_one(self):
        h = TestHost(Script)
        h.process("main", "a", {"register": [10, 20]}, 1)
        # Deletes only a's timer at 10; b has none, 99 does not exist, the domain differs.
        h.process("main", "b", {"delete": [10, 20]}, 2)
        h.process("main", "a", {"delete": [10, 99], "delete_processing": [20]}, 3)
        h.advance_watermark(100)
        self.assertEqual(fired(h), [("a", 20)])

    def test_a_deleted_timer_registered_again_fires_once(self):
        h = TestHost(Script)
        h.process("main", "a", {"register": [10]}, 1)
        h.process("main", "a", {"delete": [10]}, 2)
        h.process("main", "a", {"register": [10]}, 3)
        h.advance_watermark(100)
        self.assertEqual(fired(h), [("a", 10)])

    def test_timers_registered_while_firing_fire_in_the_same_advance_if_due(self):
        h = TestHost(Script)
        # At 10: register 15 (due); at 15: register 5 (due, earlier than anything fired);
        # at 5: register 40 (not due).
        h.process("main", "a", {"register": [10], "chain": [[10, 15], [15, 5], [5, 40]]}, 1)
        h.process("main", "b", {"register": [12]}, 1)
        h.advance_watermark(25)
        self.assertEqual(fired(h), [("a", 10), ("b", 12), ("a", 15), ("a", 5)])
        self.assertEqual(h.pending_timers(), [(b"a", TimeDomain.EVENT_TIME, 40)])

    def test_timers_at_or_before_the_watermark_wait_for_its_next_advance(self):
        h = TestHost(Script)
        h.advance_watermark(100)
        h.process("main", "a", {"register": [50, 100]}, 1)
        h.advance_watermark(100)
        h.advance_watermark(90)
        self.assertEqual(fired(h), [])
        self.assertEqual(h.watermark(), 100)
        h.advance_watermark(101)
        out = h.take_outputs("main")
        self.assertEqual([e.timestamp for e in out], [50, 100])
        self.assertTrue(all(e.value["watermark"] == 101 for e in out))

    def test_processing_time_timers_follow_the_clock(self):
        h = TestHost(Script, processing_time=1_000)
        h.process("main", "a", {"register_processing": [1_500, 2_000, 900]}, 1)
        h.process("main", "b", {"register_processing": [1_500]}, 1)
        # The overdue timer fires at the next look at the clock, even if it did not move.
        h.set_processing_time(1_000)
        self.assertEqual(fired(h), [("a", 900)])
        # The clock never goes back.
        h.set_processing_time(500)
        self.assertEqual(h.processing_time(), 1_000)
        h.set_processing_time(1_600)
        self.assertEqual(fired(h), [("a", 1_500), ("b", 1_500)])
        self.assertEqual(h.processing_time(), 1_600)
        # Event time does not fire processing timers.
        h.advance_watermark(MAX - 1)
        self.assertEqual(fired(h), [])
        h.set_processing_time(5_000)
        out = h.take_outputs("main")
        self.assertEqual(
            [(e.timestamp, e.value["now"], e.value["domain"]) for e in out],
            [(2_000, 5_000, "PROCESSING_TIME")],
        )

    def test_finish_fires_event_timers_then_processing_timers(self):
        h = TestHost(Script)
        h.process("main", "a", {"register_processing": [7, 3], "register": [1_000_000, 5]}, 1)
        h.process("main", "b", {"register": [MAX], "chain": [[MAX, 6]]}, 1)
        h.finish()
        out = h.take_outputs("main")
        self.assertEqual(
            [(e.value["domain"], e.timestamp) for e in out],
            [
                ("EVENT_TIME", 5),
                ("EVENT_TIME", 1_000_000),
                ("EVENT_TIME", MAX),
                ("EVENT_TIME", 6),  # registered while firing, and due
                ("PROCESSING_TIME", 3),
                ("PROCESSING_TIME", 7),
            ],
        )
        self.assertEqual(out[4].value["now"], 3)
        self.assertEqual(h.pending_timers(), [])
        self.assertEqual(h.watermark(), MAX)

    def test_a_timer_loop_is_reported(self):
        class Forever(weir.ProcessFunction):
            def process_element(self, ctx, el):
                ctx.register_processing_timer(0)

            def on_timer(self, ctx, timer):
                ctx.register_processing_timer(timer.timestamp() + 1)

        h = TestHost(Forever)
        h.process("main", "k", {}, 0)
        with mock.patch("weir.testing.FIRING_LIMIT", 1_000):
            with self.assertRaisesRegex(RuntimeError, "keeps registering due timers while firing"):
                h.finish()

    def test_timestamps_must_fit_64_bits(self):
        h = TestHost(Script)
        with self.assertRaisesRegex(OverflowError, "outside the 64-bit range"):
            h.process("main", "a", {"register": [MAX + 1]}, 1)
        with self.assertRaisesRegex(TypeError, "takes an int timestamp, got float"):
            h.process("main", "a", {"register": [1.5]}, 1)


def fnv1a_64(data):
    """FNV-1a, 64 bits, written out here rather than taken from the SDK, so the tests
    below check the TestHost's order against an independent computation."""
    h = 14695981039346656037  # the offset basis
    for byte in data:
        h ^= byte
        h = (h * 1099511628211) % 2**64  # the prime, 2^40 + 2^8 + 0xb3
    return h


def engine_order(timers):
    """`(key, timestamp)` pairs sorted as the engine fires them: by timestamp, then by
    the FNV-1a 64 hash of the key's bytes, then by the bytes."""
    return sorted(timers, key=lambda t: (t[1], fnv1a_64(t[0].encode()), t[0].encode()))


#: Two keys with the same FNV-1a 64 hash (0x13fbdf9782141172), found by a collision search.
COLLIDING = ("g2J-nUW-K5F", "FnT39gHPrbN")


class Chains(weir.ProcessFunction):
    """Registers and deletes timers of both domains as scripted, and emits one record per
    firing timer. An element holds `timers` ([["E" or "P", at], ...]) to register and
    `on` ({"P50": {"register": [...], "delete": [...]}, ...}): what the timer of that
    domain and time does when it fires."""

    def init(self, ctx):
        self.on = ctx.map_state("on")
        self.out = ctx.main_output()

    @staticmethod
    def domain(code):
        return TimeDomain.EVENT_TIME if code == "E" else TimeDomain.PROCESSING_TIME

    def apply(self, ctx, script):
        for code, at in script.get("register", []):
            ctx.register_timer(self.domain(code), at)
        for code, at in script.get("delete", []):
            ctx.delete_timer(self.domain(code), at)

    def process_element(self, ctx, el):
        script = el.json()
        self.apply(ctx, script)
        for name, then in script.get("on", {}).items():
            self.on.put(name, then)

    def on_timer(self, ctx, timer):
        name = ("E" if timer.domain() is TimeDomain.EVENT_TIME else "P") + str(timer.timestamp())
        then = self.on.get(name)
        if then is not None:
            self.apply(ctx, then)
        self.out.emit({"key": timer.key_str(), "timer": name}, key=ctx.current_key())


def fired_names(host):
    """`(key, "E10" or "P10")` of every timer that fired, in order."""
    return [(e.value["key"], e.value["timer"]) for e in host.take_outputs("main")]


class TimerOrderTest(unittest.TestCase):
    """Timers due at the same time fire in the engine's order (docs/pipeline.md, "Event
    time and timers"), not in key-byte order."""

    KEYS = ["a", "b", "c", "1", "2", "3", "4", "5", "6", "ad-1", "ad-2", "ad-3"]

    def test_the_independent_hash_matches_the_fnv_1a_test_vectors(self):
        vectors = [(b"", 0xCBF29CE484222325), (b"a", 0xAF63DC4C8601EC8C),
                   (b"foobar", 0x85944171F73967E8)]
        for data, expected in vectors:
            self.assertEqual(fnv1a_64(data), expected)
            self.assertEqual(key_hash(data), expected)
            self.assertEqual(key_hash(data.decode()), expected)
        self.assertEqual(fnv1a_64(COLLIDING[0].encode()), fnv1a_64(COLLIDING[1].encode()))
        self.assertEqual(fnv1a_64(COLLIDING[0].encode()), 0x13FBDF9782141172)

    def test_event_timers_at_one_time_fire_in_key_hash_order(self):
        h = TestHost(Chains)
        for key in self.KEYS:
            h.process("main", key, {"register": [["E", 10], ["E", 5]]}, 1)
        h.advance_watermark(10)
        expected = engine_order([(k, ts) for k in self.KEYS for ts in (5, 10)])
        self.assertNotEqual(
            expected, sorted(expected, key=lambda t: (t[1], t[0])), "byte order would differ"
        )
        self.assertEqual(fired_names(h), [(k, f"E{ts}") for k, ts in expected])
        # By hand: a 0xaf63dc4c8601ec8c, b 0xaf63df4c8601f1a5, c 0xaf63de4c8601eff2.
        h = TestHost(Chains)
        for key in "abc":
            h.process("main", key, {"register": [["E", 7]]}, 1)
        self.assertEqual([k for k, _, _ in h.pending_timers()], [b"a", b"c", b"b"])
        h.advance_watermark(7)
        self.assertEqual(fired_names(h), [("a", "E7"), ("c", "E7"), ("b", "E7")])

    def test_processing_timers_at_one_time_fire_in_key_hash_order(self):
        h = TestHost(Chains, processing_time=0)
        for key in reversed(self.KEYS):
            h.process("main", key, {"register": [["P", 20], ["P", 30]]}, 1)
        h.set_processing_time(30)
        expected = engine_order([(k, ts) for k in self.KEYS for ts in (20, 30)])
        self.assertEqual(fired_names(h), [(k, f"P{ts}") for k, ts in expected])

    def test_keys_whose_hashes_collide_fire_in_byte_order(self):
        advances = [("E", TestHost.advance_watermark), ("P", TestHost.set_processing_time)]
        for domain, advance in advances:
            h = TestHost(Chains)
            for key in COLLIDING:  # the larger bytes first
                h.process("main", key, {"register": [[domain, 3]]}, 1)
            advance(h, 3)
            self.assertEqual(
                fired_names(h), [(COLLIDING[1], f"{domain}3"), (COLLIDING[0], f"{domain}3")]
            )

    def test_an_event_timer_registered_while_firing_takes_its_place_at_once(self):
        # As in the engine's ordered set: the first pending due timer always fires next.
        h = TestHost(Chains)
        then = {"E10": {"register": [["E", 9]]}}
        h.process("main", "a", {"register": [["E", 10]], "on": then}, 1)
        h.process("main", "b", {"register": [["E", 10]]}, 1)
        h.process("main", "c", {"register": [["E", 10]]}, 1)
        h.advance_watermark(10)
        self.assertEqual(fired_names(h), [("a", "E10"), ("a", "E9"), ("c", "E10"), ("b", "E10")])

    def test_a_processing_timer_registered_while_firing_waits_for_the_due_ones(self):
        # As the engine's timing wheel: the timers due when the clock is read are staged
        # and fire in order; one registered meanwhile fires after them, even if earlier.
        # A staged one can still be deleted, and registering it again changes nothing.
        h = TestHost(Chains, processing_time=0)
        h.process("main", "a", {"register": [["P", 50], ["P", 70]], "on": {
            "P50": {"register": [["P", 55], ["P", 70]]},
        }}, 1)
        h.process("main", "b", {"register": [["P", 60], ["P", 65]], "on": {
            "P60": {"delete": [["P", 65]]},
        }}, 1)
        h.set_processing_time(100)
        self.assertEqual(
            fired_names(h), [("a", "P50"), ("b", "P60"), ("a", "P70"), ("a", "P55")]
        )

    def test_at_the_end_event_timers_registered_by_processing_timers_fire_too(self):
        h = TestHost(Chains)
        h.process("main", "a", {"register": [["P", 7], ["E", 8]], "on": {
            "P7": {"register": [["E", 3], ["P", 9]]},
            "E3": {"register": [["P", 2]]},
        }}, 1)
        h.finish()
        self.assertEqual(
            fired_names(h), [("a", "E8"), ("a", "P7"), ("a", "P9"), ("a", "E3"), ("a", "P2")]
        )
        self.assertEqual(h.pending_timers(), [])


class StateTest(unittest.TestCase):
    def test_state_is_per_key_and_clear_all_keeps_timers(self):
        h = TestHost(Script)
        h.process("main", "a", {"set": "x", "register": [10]}, 1)
        h.process("main", "b", {"set": "y"}, 2)
        self.assertTrue(h.has_state("a") and h.has_state("b") and not h.has_state("c"))
        self.assertEqual(h.keys_with_state(), [b"a", b"b"])
        self.assertEqual(h.state("a", "text"), "x")
        self.assertEqual(h.state("a", "seen"), [1])
        self.assertEqual(h.state_bytes("b", "text"), b'"y"')
        h.process("main", "a", {"clear_all": True}, 3)
        self.assertFalse(h.has_state("a"))
        self.assertTrue(h.has_state("b"))
        self.assertEqual(h.state("a", "text"), None)
        self.assertEqual(h.pending_timers(), [(b"a", TimeDomain.EVENT_TIME, 10)])

    def test_value_list_and_map_state_round_trip(self):
        class States(weir.ProcessFunction):
            def init(self, ctx):
                self.value = ctx.value_state("value")
                self.list = ctx.list_state("list")
                self.map = ctx.map_state("map")
                self.same_name = ctx.value_state("value", weir.TEXT)
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                command = el.json()
                if command == "write":
                    assert self.value.get() is None
                    self.value.set(["v", 7])
                    self.list.append("one")
                    self.list.append("two")
                    self.map.put("b", 2)
                    self.map.put("a", 1)
                    self.map.put("b", 3)
                elif command == "read":
                    self.out.emit(
                        {
                            "value": self.value.get(),
                            "list": self.list.get(),
                            "map": self.map.entries(),
                            "b": self.map.get("b"),
                            "missing": self.map.get("zzz"),
                            "has_a": self.map.contains_key("a"),
                        }
                    )
                elif command == "shrink":
                    self.list.set(["only"])
                    self.map.remove("a")
                    self.map.remove("nope")
                    self.value.clear()
                elif command == "empty":
                    self.list.set([])
                    self.map.clear()
                else:
                    raise weir.Error(f"unknown command {command}")

        h = TestHost(States)
        h.process("main", "k", '"write"', 1)
        h.process("main", "k", '"read"', 2)
        h.process("main", "other", b'"read"', 3)
        out = h.take_outputs("main")
        self.assertEqual(
            out[0],
            Emitted(
                {
                    "value": ["v", 7],
                    "list": ["one", "two"],
                    "map": [["a", 1], ["b", 3]],
                    "b": 3,
                    "missing": None,
                    "has_a": True,
                },
                2,
            ),
        )
        self.assertEqual(
            out[1].value,
            {"value": None, "list": [], "map": [], "b": None, "missing": None, "has_a": False},
        )
        self.assertEqual(h.state("k", "map"), [("a", 1), ("b", 3)])
        h.process("main", "k", '"shrink"', 4)
        h.process("main", "k", '"read"', 5)
        self.assertEqual(
            h.take_outputs("main")[0].value,
            {"value": None, "list": ["only"], "map": [["b", 3]], "b": 3, "missing": None, "has_a": False},
        )
        self.assertTrue(h.has_state("k"))
        h.process("main", "k", '"empty"', 6)
        self.assertFalse(h.has_state("k"), "an empty list and an empty map are no state")

    def test_a_state_read_with_another_codec_is_a_state_decode_error(self):
        class Mistyped(weir.ProcessFunction):
            def init(self, ctx):
                self.raw = ctx.value_state("s", weir.RAW)
                self.typed = ctx.value_state("s", weir.JsonCodec(Point))

            def process_element(self, ctx, el):
                if el.json() == "write":
                    self.raw.set(b"\x00\x01")
                else:
                    self.typed.get()

        h = TestHost(Mistyped)
        h.process("main", "k", '"write"', 1)
        with self.assertRaises(weir.StateDecodeError) as caught:
            h.process("main", "k", '"read"', 2)
        self.assertTrue(
            str(caught.exception).startswith(
                "state `s`: cannot decode stored value as JSON Point"
            ),
            caught.exception,
        )

    def test_a_schema_migration_converts_old_values_on_first_read(self):
        class Counter(weir.ProcessFunction):
            version = 1

            def init(self, ctx):
                self.plain = ctx.value_state("count")
                self.counted = (
                    ctx.value_state("count")
                    .schema(1)
                    .migrate_from(0, lambda n: {"n": n, "migrated": True})
                )
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                if self.version == 1:
                    n = (self.plain.get() or 0) + 1
                    self.plain.set(n)
                    self.out.emit({"n": n})
                    return
                counted = self.counted.get() or {"n": 0, "migrated": False}
                counted["n"] += 1
                self.counted.set(counted)
                self.out.emit(counted)

        class Counter2(Counter):
            version = 2

        v1 = TestHost(Counter)
        v1.process("main", "k", {}, 1)
        v1.process("main", "k", {}, 2)
        stored = v1.state_bytes("k", "count")
        self.assertEqual(stored, b"2")
        v2 = TestHost(Counter2)
        v2.set_state_bytes("k", "count", stored)
        v2.process("main", "k", {}, 3)
        v2.process("main", "k", {}, 4)
        v2.process("main", "new", {}, 5)
        self.assertEqual(
            [e.value for e in v2.take_outputs("main")],
            [{"n": 3, "migrated": True}, {"n": 4, "migrated": True}, {"n": 1, "migrated": False}],
        )
        # Written back under schema 1: the tag, then the JSON.
        self.assertEqual(v2.state_bytes("k", "count")[:3], b"\xfe\xed\x01")
        self.assertEqual(v2.state("k", "count"), {"n": 4, "migrated": True})

    def test_a_list_state_migrates_its_items_on_first_read(self):
        class Readings(weir.ProcessFunction):
            def init(self, ctx):
                self.readings = (
                    ctx.list_state("readings")
                    .schema(1)
                    .migrate_from(0, lambda celsius: {"celsius": celsius, "migrated": True})
                )
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                command = el.json()
                if "append" in command:
                    self.readings.append({"celsius": command["append"], "migrated": False})
                self.out.emit(self.readings.get())

        h = TestHost(Readings)
        # As an earlier version without a schema left it: untagged JSON numbers.
        h.set_list_state_bytes("k", "readings", [b"21", b"22.5"])
        self.assertEqual(h.list_state_bytes("k", "readings"), [b"21", b"22.5"])
        # Appending writes the new item under schema 1 without reading (or converting)
        # the old ones: the list is mixed until it is read.
        h.process("main", "k", {"append": 30}, 1)
        expected = [
            {"celsius": 21, "migrated": True},
            {"celsius": 22.5, "migrated": True},
            {"celsius": 30, "migrated": False},
        ]
        self.assertEqual(h.take_outputs("main"), [Emitted(expected, 1)])
        # The whole list was written back under schema 1: the tag, then the JSON.
        self.assertEqual(
            h.list_state_bytes("k", "readings"),
            [
                b'\xfe\xed\x01{"celsius":21,"migrated":true}',
                b'\xfe\xed\x01{"celsius":22.5,"migrated":true}',
                b'\xfe\xed\x01{"celsius":30,"migrated":false}',
            ],
        )
        self.assertEqual(h.state("k", "readings"), expected)
        # Read again: nothing left to convert, so nothing is written.
        with mock.patch.object(
            weir._native.World, "list_set", autospec=True, side_effect=weir._native.World.list_set
        ) as list_set:
            h.process("main", "k", {}, 2)
        self.assertEqual(h.take_outputs("main"), [Emitted(expected, 2)])
        list_set.assert_not_called()
        # A key with only current items is not written either, and one with none stays empty.
        with mock.patch.object(
            weir._native.World, "list_set", autospec=True, side_effect=weir._native.World.list_set
        ) as list_set:
            h.process("main", "new", {"append": 5}, 3)
            h.process("main", "none", {}, 4)
        list_set.assert_not_called()
        self.assertEqual(
            h.list_state_bytes("new", "readings"), [b'\xfe\xed\x01{"celsius":5,"migrated":false}']
        )
        self.assertFalse(h.has_state("none"))

    def test_a_map_state_migrates_its_values_on_first_read(self):
        class Colors(weir.ProcessFunction):
            def init(self, ctx):
                # An earlier version stored plain text values (weir.TEXT), this one JSON.
                self.colors = (
                    ctx.map_state("colors")
                    .schema(1)
                    .migrate_from(0, lambda name: {"name": name}, codec=weir.TEXT)
                )
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                command = el.json()
                if command["op"] == "get":
                    self.out.emit(
                        {
                            "a": self.colors.get("a"),
                            "missing": self.colors.get("zzz", "none"),
                            "has_b": self.colors.contains_key("b"),
                        }
                    )
                elif command["op"] == "put":
                    self.colors.put(command["key"], command["value"])
                else:
                    self.out.emit(self.colors.entries())

        h = TestHost(Colors)
        old = {b'"a"': b"red", b'"b"': b"green", b'"c"': b"blue"}  # keys: JSON strings
        h.set_map_state_bytes("k", "colors", old)
        self.assertEqual(h.map_state_bytes("k", "colors"), old)
        h.process("main", "k", {"op": "get"}, 1)
        self.assertEqual(
            h.take_outputs("main")[0].value,
            {"a": {"name": "red"}, "missing": "none", "has_b": True},
        )
        # get("a") wrote its value back under schema 1; contains_key("b") decoded nothing
        # and "c" was not read, so both are still as the earlier version left them.
        self.assertEqual(
            h.map_state_bytes("k", "colors"),
            {b'"a"': b'\xfe\xed\x01{"name":"red"}', b'"b"': b"green", b'"c"': b"blue"},
        )
        h.process("main", "k", {"op": "put", "key": "c", "value": {"name": "navy"}}, 2)
        self.assertEqual(h.map_state_bytes("k", "colors")[b'"c"'], b'\xfe\xed\x01{"name":"navy"}')
        h.process("main", "k", {"op": "entries"}, 3)
        self.assertEqual(
            h.take_outputs("main")[0].value,
            [["a", {"name": "red"}], ["b", {"name": "green"}], ["c", {"name": "navy"}]],
        )
        # Every value now carries the tag; the keys never do.
        self.assertEqual(
            h.map_state_bytes("k", "colors"),
            {
                b'"a"': b'\xfe\xed\x01{"name":"red"}',
                b'"b"': b'\xfe\xed\x01{"name":"green"}',
                b'"c"': b'\xfe\xed\x01{"name":"navy"}',
            },
        )
        self.assertEqual(
            h.state("k", "colors"),
            [("a", {"name": "red"}), ("b", {"name": "green"}), ("c", {"name": "navy"})],
        )

    def test_a_schema_version_without_a_migration_is_a_state_decode_error(self):
        class Versioned(weir.ProcessFunction):
            def init(self, ctx):
                # Reads version 2 and can convert version 1, not 0 or 7.
                def old(n):
                    return {"n": n}

                self.value = ctx.value_state("value").schema(2).migrate_from(1, old)
                self.list = ctx.list_state("list").schema(2).migrate_from(1, old)
                self.map = ctx.map_state("map").schema(2).migrate_from(1, old)

            def process_element(self, ctx, el):
                state = el.json()
                if state == "value":
                    self.value.get()
                elif state == "list":
                    self.list.get()
                elif state == "map.get":
                    self.map.get("x")
                else:
                    self.map.entries()

        h = TestHost(Versioned)
        h.set_state_bytes("k", "value", b"\xfe\xed\x071")
        # The first item converts (version 1), the second has no migration.
        h.set_list_state_bytes("k", "list", [b"\xfe\xed\x011", b"\xfe\xed\x072"])
        h.set_map_state_bytes("k", "map", {b'"a"': b"\xfe\xed\x011", b'"x"': b"3"})
        cases = [
            ("value", "value", 7),
            ("list", "list", 7),
            ("map.get", "map", 0),
            ("map.entries", "map", 0),
        ]
        for command, name, version in cases:
            with self.subTest(command):
                with self.assertRaises(weir.StateDecodeError) as caught:
                    h.process("main", "k", f'"{command}"', 1)
                self.assertEqual(
                    str(caught.exception),
                    f"state `{name}`: the stored value has schema version {version}, this "
                    f"version of the UDF reads version 2 and has no migration from {version}",
                )
        # Nothing was written back: the item and the entry that could be converted too.
        self.assertEqual(h.state_bytes("k", "value"), b"\xfe\xed\x071")
        self.assertEqual(h.list_state_bytes("k", "list"), [b"\xfe\xed\x011", b"\xfe\xed\x072"])
        self.assertEqual(
            h.map_state_bytes("k", "map"), {b'"a"': b"\xfe\xed\x011", b'"x"': b"3"}
        )

    def test_schema_versions_are_1_to_255(self):
        for state in (weir.ValueState(0, "s"), weir.ListState(0, "s"), weir.MapState(0, "s")):
            with self.subTest(type(state).__name__):
                for version in (0, 256, -1):
                    with self.assertRaises(ValueError) as caught:
                        state.schema(version)
                    self.assertEqual(
                        str(caught.exception), "state `s`: schema version must be 1 to 255"
                    )
                self.assertIs(state.schema(1), state)
                self.assertIs(state.schema(255), state)
                self.assertIs(state.migrate_from(0, lambda old: old), state)

    def test_two_bytes_like_the_tag_are_an_untagged_value(self):
        # A tagged value has the two tag bytes and a version byte; shorter is untagged.
        class Raw(weir.ProcessFunction):
            def init(self, ctx):
                self.value = ctx.value_state("raw", weir.RAW)
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                self.out.emit(list(self.value.get()))

        h = TestHost(Raw)
        h.set_state_bytes("k", "raw", b"\xfe\xed")
        h.process("main", "k", {}, 1)
        self.assertEqual(h.take_outputs("main")[0].value, [0xFE, 0xED])

    def test_raw_list_and_map_state_bytes_follow_the_host_rules(self):
        h = TestHost(Script)
        h.set_list_state_bytes("k", "seen", [b"1"])
        h.set_map_state_bytes("k", "chains", [(b"10", b"20")])
        self.assertEqual(h.state("k", "seen"), [1])
        self.assertEqual(h.state("k", "chains"), [(10, 20)])
        # Empty is no state, as in the host.
        h.set_list_state_bytes("k", "seen", [])
        h.set_map_state_bytes("k", "chains", {})
        self.assertFalse(h.has_state("k"))
        self.assertEqual(h.list_state_bytes("k", "seen"), [])
        self.assertEqual(h.map_state_bytes("k", "chains"), {})
        with self.assertRaisesRegex(ValueError, "state `text` is not a list state"):
            h.set_list_state_bytes("k", "text", [b"1"])
        with self.assertRaisesRegex(ValueError, "state `seen` is not a map state"):
            h.map_state_bytes("k", "seen")
        with self.assertRaisesRegex(ValueError, "state `chains` is not a value state"):
            h.set_state_bytes("k", "chains", b"1")
        with self.assertRaisesRegex(ValueError, "no state `nope` was declared"):
            h.list_state_bytes("k", "nope")
        with self.assertRaisesRegex(TypeError, "takes bytes as items, got str"):
            h.set_list_state_bytes("k", "seen", ["1"])


class Ttl(weir.ProcessFunction):
    """A value state `v`, a list state `l` and a map state `m`, all declared with the
    time-to-live `TTL` (a class attribute, so a test can change it and `reinit`). Each
    element is a list of commands, and the call emits their results as one record:
    `["set", x]`, `["get"]` (value), `["append", x]`, `["list"]`, `["lset", [x, ...]]`
    (list), `["put", k, x]`, `["mget", k]`, `["entries"]` (map), `["timer", at]` (an
    event-time timer, which sets `v` to "timer" when it fires)."""

    TTL = None

    def init(self, ctx):
        self.v = ctx.value_state("v", ttl=self.TTL)
        self.l = ctx.list_state("l", ttl=self.TTL)
        self.m = ctx.map_state("m", ttl=self.TTL)
        self.out = ctx.main_output()

    def process_element(self, ctx, el):
        results = []
        for command, *args in el.json():
            if command == "set":
                self.v.set(args[0])
            elif command == "get":
                results.append(self.v.get())
            elif command == "append":
                self.l.append(args[0])
            elif command == "list":
                results.append(self.l.get())
            elif command == "lset":
                self.l.set(args[0])
            elif command == "put":
                self.m.put(args[0], args[1])
            elif command == "mget":
                results.append(self.m.get(args[0]))
            elif command == "entries":
                results.append(self.m.entries())
            elif command == "timer":
                ctx.register_event_timer(args[0])
        self.out.emit(results)

    def on_timer(self, ctx, timer):
        self.v.set("timer")


def ttl_host(ttl, **kwargs):
    return TestHost(type("TtlUdf", (Ttl,), {"TTL": ttl}), **kwargs)


def run(host, ts, *commands, key="k"):
    """Runs `commands` in one element of `key` at event time `ts`; their results."""
    host.process("main", key, list(commands), ts)
    return host.take_outputs("main")[-1].value


class StateTtlTest(unittest.TestCase):
    """State time-to-live in the TestHost, as the host implements it (wit/weir.wit,
    `state-ttl`). Every expected stamp and deadline is worked out in the comments."""

    def test_the_state_ttl_api(self):
        ttl = weir.StateTtl.event_time("10m")
        self.assertEqual((ttl.millis, ttl.domain, ttl.refresh_on_read),
                         (600_000, TimeDomain.EVENT_TIME, False))
        self.assertEqual(repr(ttl), 'StateTtl.event_time("10m")')
        ttl = weir.StateTtl.processing_time(1_500, refresh_on_read=True)
        self.assertEqual((ttl.millis, ttl.domain, ttl.refresh_on_read),
                         (1_500, TimeDomain.PROCESSING_TIME, True))
        self.assertEqual(repr(ttl), 'StateTtl.processing_time("1s 500ms", refresh_on_read=True)')
        self.assertEqual(weir.StateTtl.event_time("1s"), weir.StateTtl.event_time(1_000))
        self.assertNotEqual(
            weir.StateTtl.event_time("1s"), weir.StateTtl.processing_time("1s")
        )
        self.assertNotEqual(
            weir.StateTtl.event_time("1s"), weir.StateTtl.event_time("1s", refresh_on_read=True)
        )
        self.assertEqual(
            ttl._record(),
            weir._bindings.types.StateTtl(
                1_500, TimeDomain.PROCESSING_TIME, weir._bindings.TtlRefresh.ON_READ_AND_WRITE
            ),
        )
        h = ttl_host(weir.StateTtl.event_time("1s"))
        self.assertEqual(h.udf.v.ttl, weir.StateTtl.event_time(1_000))
        self.assertIsNone(TestHost(Script).udf.text.ttl)

    def test_a_ttl_must_be_longer_than_0_ms(self):
        for after, shown in [(0, "0"), ("0s", "'0s'"), ("0ms", "'0ms'")]:
            for factory in (weir.StateTtl.event_time, weir.StateTtl.processing_time):
                with self.assertRaises(ValueError) as caught:
                    factory(after)
                self.assertEqual(
                    str(caught.exception),
                    f"StateTtl: a time-to-live must be longer than 0 ms, got {shown}",
                )
        with self.assertRaisesRegex(ValueError, '^StateTtl: invalid duration "soon"'):
            weir.StateTtl.event_time("soon")
        with self.assertRaisesRegex(ValueError, "^StateTtl: invalid duration \"-5\""):
            weir.StateTtl.event_time(-5)
        with self.assertRaisesRegex(TypeError, "ttl must be a weir.StateTtl"):
            ttl_host("10m")

    def test_declare_with_ttl_of_0_ms_is_an_error_from_the_host(self):
        host = weir._bindings
        results = []

        class Zero(weir.ProcessFunction):
            def init(self, ctx):
                ttl = host.types.StateTtl(0, TimeDomain.EVENT_TIME, host.TtlRefresh.ON_WRITE)
                try:
                    host.state.declare_with_ttl("s", host.types.StateKind.VALUE, ttl)
                except host.Err as e:
                    results.append(e.value)

        h = TestHost(Zero)
        self.assertEqual(
            results,
            [host.types.Error(
                "state `s`: a time-to-live must be longer than 0 ms", host.types.ErrorKind.FAILED
            )],
        )
        with self.assertRaisesRegex(ValueError, "no state `s` was declared"):
            h.state("k", "s")  # the failed declaration declared nothing

    def test_an_event_time_value_expires_when_the_watermark_reaches_stamp_plus_ttl(self):
        h = ttl_host(weir.StateTtl.event_time("1s"))
        # Stamp: the element's 5_000 (the watermark is still MIN); deadline 6_000.
        self.assertEqual(run(h, 5_000, ["set", "a"], ["get"]), ["a"])
        h.advance_watermark(5_999)  # one ms before
        self.assertEqual(h.state("k", "v"), "a")
        # An element at 6_000 is not the watermark: the value still lives.
        self.assertEqual(run(h, 6_000, ["get"]), ["a"])
        h.advance_watermark(6_000)
        self.assertEqual(h.state("k", "v"), None)
        self.assertFalse(h.has_state("k"))  # nothing else was stored: the key is gone
        self.assertEqual(h.keys_with_state(), [])
        self.assertEqual(run(h, 6_001, ["get"]), [None])
        # Only writes restamp: a read at 6_500 leaves the stamp of the write at 6_100.
        run(h, 6_100, ["set", "b"])  # deadline 7_100
        h.advance_watermark(6_500)
        self.assertEqual(run(h, 6_500, ["get"]), ["b"])
        h.advance_watermark(7_099)
        self.assertEqual(h.state("k", "v"), "b")
        h.advance_watermark(7_100)
        self.assertEqual(h.state("k", "v"), None)
        # The end of input (watermark MAX) expires every event-time entry, and what a
        # timer writes then (stamp MAX, deadline MAX: the sum saturates) at once.
        run(h, 8_000, ["set", "c"], ["append", "c"], ["timer", 9_000])
        h.finish()
        self.assertFalse(h.has_state("k"))
        self.assertEqual(h.take_outputs("main"), [])  # the timer ran, but emits nothing

    def test_a_value_read_with_refresh_on_read_lives_on(self):
        h = ttl_host(weir.StateTtl.event_time(1_000, refresh_on_read=True))
        run(h, 1_000, ["set", "a"])  # deadline 2_000
        h.advance_watermark(1_800)
        self.assertEqual(run(h, 1_800, ["get"]), ["a"])  # stamp 1_800: deadline 2_800
        h.advance_watermark(2_799)
        self.assertEqual(h.state("k", "v"), "a")
        h.advance_watermark(2_800)
        self.assertEqual(h.state("k", "v"), None)

    def test_a_late_elements_stamp_is_the_watermark_and_a_timers_too(self):
        h = ttl_host(weir.StateTtl.event_time(1_000))
        h.advance_watermark(10_000)
        run(h, 2_000, ["set", "late"])  # late: stamp 10_000, not 2_000; deadline 11_000
        h.advance_watermark(10_999)
        self.assertEqual(h.state("k", "v"), "late")
        h.advance_watermark(11_000)
        self.assertEqual(h.state("k", "v"), None)
        # The timer at 11_500 fires when the watermark jumps to 12_000: its call's time is
        # the watermark, 12_000, so the value it sets lives until 13_000.
        run(h, 11_000, ["timer", 11_500])
        h.advance_watermark(12_000)
        self.assertEqual(h.state("k", "v"), "timer")
        h.advance_watermark(12_999)
        self.assertEqual(h.state("k", "v"), "timer")
        h.advance_watermark(13_000)
        self.assertEqual(h.state("k", "v"), None)

    def test_list_items_expire_one_by_one_and_refresh_on_write(self):
        h = ttl_host(weir.StateTtl.event_time(1_000))
        run(h, 1_000, ["append", "a"])  # deadline 2_000
        run(h, 1_500, ["append", "b"])  # deadline 2_500; "a" keeps its stamp
        h.advance_watermark(1_600)
        self.assertEqual(run(h, 1_600, ["list"]), [["a", "b"]])  # a read restamps nothing
        h.advance_watermark(1_999)
        self.assertEqual(h.state("k", "l"), ["a", "b"])
        h.advance_watermark(2_000)
        self.assertEqual(h.state("k", "l"), ["b"])
        self.assertEqual(run(h, 2_000, ["list"]), [["b"]])
        h.advance_watermark(2_500)
        self.assertEqual(h.state("k", "l"), [])
        self.assertFalse(h.has_state("k"))
        # Setting the list restamps every item.
        run(h, 5_000, ["append", "e"])  # deadline 6_000
        h.advance_watermark(5_800)
        run(h, 5_800, ["lset", ["e", "f"]])  # both: deadline 6_800
        h.advance_watermark(6_799)
        self.assertEqual(h.state("k", "l"), ["e", "f"])
        h.advance_watermark(6_800)
        self.assertEqual(h.state("k", "l"), [])

    def test_list_items_read_live_on_with_refresh_on_read(self):
        h = ttl_host(weir.StateTtl.event_time(1_000, refresh_on_read=True))
        run(h, 1_000, ["append", "a"])  # deadline 2_000
        h.advance_watermark(1_900)
        self.assertEqual(run(h, 1_900, ["list"]), [["a"]])  # read: deadline 2_900
        h.advance_watermark(2_000)
        self.assertEqual(h.state("k", "l"), ["a"])  # refreshed on write only, it would be gone
        h.advance_watermark(2_500)
        run(h, 2_500, ["append", "b"])  # deadline 3_500; an append reads nothing: "a" 2_900
        h.advance_watermark(2_899)
        self.assertEqual(h.state("k", "l"), ["a", "b"])
        h.advance_watermark(2_900)
        self.assertEqual(h.state("k", "l"), ["b"])
        h.advance_watermark(3_500)
        self.assertEqual(h.state("k", "l"), [])

    def test_map_entries_refresh_on_write_only(self):
        h = ttl_host(weir.StateTtl.event_time(1_000))
        run(h, 1_000, ["put", "x", 1], ["put", "y", 2])  # both: deadline 2_000
        h.advance_watermark(1_500)
        # Reads restamp nothing; the put restamps "y" alone: deadline 2_500.
        self.assertEqual(
            run(h, 1_500, ["mget", "x"], ["entries"], ["put", "y", 3]),
            [1, [["x", 1], ["y", 2]]],
        )
        h.advance_watermark(1_999)
        self.assertEqual(h.state("k", "m"), [("x", 1), ("y", 3)])
        h.advance_watermark(2_000)
        self.assertEqual(h.state("k", "m"), [("y", 3)])
        self.assertEqual(run(h, 2_000, ["mget", "x"], ["mget", "y"]), [None, 3])
        h.advance_watermark(2_500)
        self.assertEqual(h.state("k", "m"), [])
        self.assertFalse(h.has_state("k"))

    def test_a_map_entry_read_lives_on_and_one_not_read_expires(self):
        h = ttl_host(weir.StateTtl.event_time(1_000, refresh_on_read=True))
        run(h, 1_000, ["put", "x", 1], ["put", "y", 2])  # both: deadline 2_000
        h.advance_watermark(1_500)
        # Reading "x" restamps it alone (deadline 2_500); a missing key restamps nothing.
        self.assertEqual(run(h, 1_500, ["mget", "x"], ["mget", "z"]), [1, None])
        h.advance_watermark(1_999)
        self.assertEqual(h.state("k", "m"), [("x", 1), ("y", 2)])
        h.advance_watermark(2_000)
        self.assertEqual(h.state("k", "m"), [("x", 1)])  # "y" was not read
        h.advance_watermark(2_200)
        # Iterating reads every entry: "x" again, deadline 3_200.
        self.assertEqual(run(h, 2_200, ["entries"]), [[["x", 1]]])
        h.advance_watermark(3_199)
        self.assertEqual(h.state("k", "m"), [("x", 1)])
        h.advance_watermark(3_200)
        self.assertEqual(h.state("k", "m"), [])

    def test_processing_time_ttl_follows_the_test_hosts_clock(self):
        h = ttl_host(weir.StateTtl.processing_time("5s"), processing_time=10_000)
        run(h, 1, ["set", "a"], ["put", "x", 1])  # stamp 10_000 (not event time 1): 15_000
        h.advance_watermark(1_000_000)  # event time does not expire it
        self.assertEqual(h.state("k", "v"), "a")
        h.set_processing_time(12_000)
        run(h, 2, ["append", "b"])  # stamp 12_000: deadline 17_000
        h.set_processing_time(14_999)
        self.assertEqual(
            (h.state("k", "v"), h.state("k", "l"), h.state("k", "m")), ("a", ["b"], [("x", 1)])
        )
        h.set_processing_time(15_000)
        self.assertEqual(
            (h.state("k", "v"), h.state("k", "l"), h.state("k", "m")), (None, ["b"], [])
        )
        self.assertEqual(run(h, 3, ["get"], ["list"], ["entries"]), [None, ["b"], []])
        h.set_processing_time(17_000)
        self.assertFalse(h.has_state("k"))

    def test_the_last_declaration_sets_the_ttl(self):
        udf = type("Versioned", (Ttl,), {"TTL": None})
        h = TestHost(udf)
        run(h, 1_000, ["set", "a"])
        h.advance_watermark(5_000)
        self.assertEqual(h.state("k", "v"), "a")  # no time-to-live: no expiry
        # A new version adds one: the value had no stamp and gets the declaration's, the
        # watermark 5_000 (init has no element): deadline 6_000.
        udf.TTL = weir.StateTtl.event_time(1_000)
        h.reinit()
        h.advance_watermark(5_999)
        self.assertEqual(h.state("k", "v"), "a")
        h.advance_watermark(6_000)
        self.assertEqual(h.state("k", "v"), None)
        # Dropping it keeps every live entry.
        run(h, 7_000, ["set", "b"])  # deadline 8_000, while the time-to-live is on
        udf.TTL = None
        h.reinit()
        h.advance_watermark(9_000)
        self.assertEqual(h.state("k", "v"), "b")
        # Added again at 9_000 (deadline 10_000), then lengthened: the stamp stays 9_000.
        udf.TTL = weir.StateTtl.event_time(1_000)
        h.reinit()
        udf.TTL = weir.StateTtl.event_time(5_000)
        h.reinit()
        h.advance_watermark(13_999)
        self.assertEqual(h.state("k", "v"), "b")
        h.advance_watermark(14_000)
        self.assertEqual(h.state("k", "v"), None)

    def test_entries_expire_before_each_timer_call_as_finish_moves_the_clock(self):
        class Reads(weir.ProcessFunction):
            def init(self, ctx):
                self.v = ctx.value_state("v", ttl=weir.StateTtl.processing_time(100))
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                self.v.set("a")  # stamp 0: deadline 100
                ctx.register_processing_timer(50)
                ctx.register_processing_timer(100)

            def on_timer(self, ctx, timer):
                self.out.emit([ctx.current_processing_time(), self.v.get()])

        h = TestHost(Reads)
        h.process("main", "k", {}, 1)
        h.finish()  # the clock moves to 50, then to 100: the value is gone by then
        self.assertEqual([e.value for e in h.outputs("main")], [[50, "a"], [100, None]])
        self.assertFalse(h.has_state("k"))

    def test_a_new_clock_restamps_every_entry(self):
        udf = type("Versioned", (Ttl,), {"TTL": weir.StateTtl.event_time(1_000)})
        h = TestHost(udf, processing_time=50_000)
        run(h, 1_000, ["set", "a"])  # event time: deadline 2_000
        udf.TTL = weir.StateTtl.processing_time(1_000)
        h.reinit()  # a processing-time stamp now, 50_000: deadline 51_000
        h.advance_watermark(2_000)
        self.assertEqual(h.state("k", "v"), "a")
        h.set_processing_time(50_999)
        self.assertEqual(h.state("k", "v"), "a")
        h.set_processing_time(51_000)
        self.assertEqual(h.state("k", "v"), None)

    def test_planted_state_is_stamped_when_planted(self):
        h = ttl_host(weir.StateTtl.event_time(1_000))
        h.advance_watermark(3_000)
        h.set_list_state_bytes("k", "l", [b'"old"'])  # stamp: the watermark, 3_000
        h.set_state_bytes("k", "v", b'"old"')
        h.advance_watermark(3_999)
        self.assertEqual((h.state("k", "v"), h.state("k", "l")), ("old", ["old"]))
        h.advance_watermark(4_000)
        self.assertFalse(h.has_state("k"))


@dataclass
class Point:
    x: int
    y: int


class HostRulesTest(unittest.TestCase):
    def test_udf_errors_come_out_as_they_are(self):
        h = TestHost(Script)
        with self.assertRaises(weir.Error) as caught:
            h.process("main", "a", {"fail": "boom"}, 1)
        self.assertEqual(str(caught.exception), "scripted failure: boom")
        with self.assertRaisesRegex(weir.Error, "^input `main`: cannot decode the record as JSON"):
            h.process("main", "a", "{not json", 1)
        with self.assertRaises(ValueError) as caught:
            h.process("nope", "a", {}, 1)
        self.assertEqual(str(caught.exception), "TestHost: unknown input `nope`; inputs are ['main']")

    def test_other_exceptions_too(self):
        class Divides(weir.ProcessFunction):
            def process_element(self, ctx, el):
                return 1 // el.json()["n"]

        with self.assertRaises(ZeroDivisionError):
            TestHost(Divides).process("main", "k", {"n": 0}, 1)

    def test_inputs_config_and_logs(self):
        case = self

        class Inputs(weir.ProcessFunction):
            def init(self, ctx):
                case.assertEqual(ctx.inputs(), ["orders", "payments"])
                case.assertEqual(ctx.config_value("x"), "2")
                case.assertEqual(ctx.config_value("y"), None)
                case.assertEqual(ctx.config_int("n"), 3)
                case.assertEqual(ctx.config_bool("b"), True)
                ctx.log_info("ready")
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                ctx.log_warn(f"from {el.input()}")
                record = {"input": el.input(), "index": el.input_index(), "key": el.key_str()}
                self.out.emit(record, key="k", timestamp=el.timestamp() + 1)

        h = TestHost(
            Inputs,
            config=[("x", "1"), ("x", "2"), ("n", 3), ("b", True)],
            inputs=["orders", "payments"],
        )
        h.process("payments", "p1", "{}", 10)
        self.assertEqual(
            h.outputs("main"),
            [Emitted({"input": "payments", "index": 1, "key": "p1"}, 11, key=b"k")],
        )
        self.assertEqual(
            h.logs(),
            [
                LogLine(weir.LogLevel.INFO, None, "ready"),
                LogLine(weir.LogLevel.WARN, b"p1", "from payments"),
            ],
        )

    def test_reinit_keeps_state_timers_and_outputs(self):
        h = TestHost(Script)
        h.process("main", "a", {"set": "x", "register": [10]}, 1)
        first = h.udf
        h.reinit()
        self.assertIsNot(h.udf, first)
        self.assertTrue(h.has_state("a"))
        h.advance_watermark(10)
        self.assertEqual(fired(h), [("a", 10)])

    def test_several_hosts_are_independent(self):
        one, two = TestHost(Script), TestHost(Script)
        one.process("main", "a", {"set": "x", "register": [10]}, 1)
        self.assertFalse(two.has_state("a"))
        two.advance_watermark(20)
        self.assertEqual(fired(two), [])
        one.advance_watermark(20)
        self.assertEqual(fired(one), [("a", 10)])

    def test_reading_an_undeclared_output_is_an_error(self):
        h = TestHost(Script)
        self.assertEqual(h.outputs("side"), [])
        with self.assertRaisesRegex(ValueError, "output `nope` was not declared"):
            h.outputs("nope")

    def test_state_access_in_init_traps(self):
        class Eager(weir.ProcessFunction):
            def init(self, ctx):
                try:
                    ctx.value_state("s").get()
                except Exception:  # a trap is not an exception the UDF can catch
                    pass

        with self.assertRaisesRegex(HostTrap, "called from init; keyed state and timers"):
            TestHost(Eager)

    def test_state_access_without_a_host_is_an_error(self):
        with self.assertRaisesRegex(RuntimeError, "needs a host"):
            weir.ValueState(0, "s").get()

    def test_declarations_follow_the_host_rules(self):
        case = self

        class Late(weir.ProcessFunction):
            def init(self, ctx):
                a, b = ctx.value_state("s"), ctx.value_state("s")
                case.assertEqual((a.name, b.name), ("s", "s"))
                with case.assertRaises(weir.Error) as caught:
                    ctx.list_state("s")
                case.assertEqual(
                    str(caught.exception),
                    "cannot declare state `s`: state `s` is a value state, declared again as a "
                    "list state",
                )
                with case.assertRaises(weir.Error) as caught:
                    ctx.value_state("")
                case.assertEqual(
                    str(caught.exception), "cannot declare state ``: a state needs a non-empty name"
                )
                self.ctx = ctx
                ctx.main_output()

            def process_element(self, ctx, el):
                self.ctx.main_output()  # looking up a declared output is fine
                self.ctx.output("late")  # declaring a new one is not

        h = TestHost(Late)
        with self.assertRaises(weir.Error) as caught:
            h.process("main", "k", "{}", 1)
        self.assertEqual(
            str(caught.exception), "cannot declare output `late`: output `late` must be declared in init"
        )

    def test_a_failed_call_emits_nothing(self):
        class EmitThenFail(weir.ProcessFunction):
            def init(self, ctx):
                self.out = ctx.main_output()

            def process_element(self, ctx, el):
                self.out.emit(1)
                if not el.json():
                    raise weir.Error("asked to fail")
                self.out.emit(2)

        h = TestHost(EmitThenFail)
        with self.assertRaises(weir.Error):
            h.process("main", "k", "false", 7)
        self.assertEqual(h.outputs("main"), [])
        h.process("main", "k", "true", 8)
        self.assertEqual(h.outputs("main"), [Emitted(1, 8), Emitted(2, 8)])

    def test_a_rejected_record_is_taken_back_and_listed(self):
        class Picky(weir.ProcessFunction):
            def init(self, ctx):
                self.out = ctx.main_output()
                self.seen = ctx.value_state("seen")

            def process_element(self, ctx, el):
                n = self.seen.get(0) + 1
                self.seen.set(n)
                ctx.register_event_timer(el.timestamp() + 10)
                self.out.emit(n)
                if not el.json():
                    raise weir.Reject(f"record {n} says false")

        h = TestHost(Picky)
        h.process("main", "k", "true", 1)
        h.process("main", "k", "false", 2)
        h.process("main", "k", "true", 3)
        self.assertEqual(h.outputs("main"), [Emitted(1, 1), Emitted(2, 3)])
        self.assertEqual(h.rejected(), [Rejected(b"k", 2, "record 2 says false")])
        self.assertEqual(
            h.pending_timers(),
            [(b"k", TimeDomain.EVENT_TIME, 11), (b"k", TimeDomain.EVENT_TIME, 13)],
        )

    def test_a_record_that_is_not_json_traps(self):
        class Text(weir.ProcessFunction):
            def init(self, ctx):
                self.out = ctx.main_output(weir.TEXT)

            def process_element(self, ctx, el):
                self.out.emit("plain text")

        with self.assertRaisesRegex(HostTrap, "output `main` got a record that is not JSON"):
            TestHost(Text).process("main", "k", "{}", 1)

    def test_only_process_functions_are_hosted(self):
        with self.assertRaisesRegex(TypeError, "not a subclass of weir.ProcessFunction"):
            TestHost(object)


if __name__ == "__main__":
    unittest.main()
