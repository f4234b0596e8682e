"""The Python SDK's batch path (`weir._batch`, the `weir:udf/batch` export) in plain
CPython: batch buffers laid out as the `weir-wire` crate documents them (guest-sdk/wire),
written here byte by byte, through the exported `Batch` class, and the effects buffer it
returns read back. The end-to-end tests (tests/tests/guest_batches.rs) run it in a real
component against the real host; these pin the wire and the timer and time-to-live rules.

    PYTHONPATH=guest-sdk/python:guest-sdk/python/tests python3 -m unittest -v test_batch
"""

import struct
import unittest
from types import SimpleNamespace

import weir
from weir import _bindings

MINUTE = 60_000


class Probe(weir.ProcessFunction):
    """Counts per key in `n`; keeps each element's timestamp in the list `seen` (with a
    time-to-live); `{"timer": T}` registers an event timer at T, `{"delete": T}` deletes
    one; `{"fail": true}` raises; a timer emits its time and the count."""

    def init(self, ctx):
        self.n = ctx.value_state("n")
        self.seen = ctx.list_state("seen", ttl=weir.StateTtl.event_time("10m"))
        self.out = ctx.main_output()

    def process_element(self, ctx, el):
        cmd = el.json()
        if cmd.get("fail"):
            raise ValueError("asked to fail")
        n = self.n.get(0) + 1
        self.n.set(n)
        self.seen.append(el.timestamp())
        if "timer" in cmd:
            ctx.register_event_timer(cmd["timer"])
        if "delete" in cmd:
            ctx.delete_event_timer(cmd["delete"])
        self.out.emit({"n": n}, key=ctx.current_key())

    def on_timer(self, ctx, timer):
        self.out.emit({"timer": timer.timestamp(), "n": self.n.get(0)})


def export(udf=None):
    """The exported classes of `udf` (default `Probe`), initialized against stand-ins for
    the declarations: states are numbered from 0 in the order `init` declares them (for
    `Probe`, `n` is id 0 and `seen` id 1), and output `main` is id 0."""
    udf = udf or Probe
    ids = iter(range(10))
    saved = (_bindings.state.declare, _bindings.state.declare_with_ttl, _bindings.output.declare)
    _bindings.state.declare = lambda name, kind: next(ids)
    _bindings.state.declare_with_ttl = lambda name, kind, ttl: next(ids)
    _bindings.output.declare = lambda name: 0
    try:
        scope = {"__name__": "udf_app"}
        exported = eval("weir.export(U)", {"weir": weir, "U": udf}, scope)
        exported().init(SimpleNamespace(config=[], inputs=["main"]))
        return exported
    finally:
        (_bindings.state.declare, _bindings.state.declare_with_ttl, _bindings.output.declare) = saved


def b(data):
    return struct.pack("<I", len(data)) + data


def batch(keys, entries, processing_time=0):
    """`keys`: [(key bytes, {state: value bytes})]; `entries`: ("e", key index, ts,
    watermark, after, record) or ("t", key index, ts, watermark)."""
    out = [struct.pack("<qI", processing_time, len(keys))]
    for key, slots in keys:
        out.append(b(key) + struct.pack("<I", len(slots)))
        for state, value in slots.items():
            out.append(struct.pack("<IB", state, 0) + b(value))
    out.append(struct.pack("<I", len(entries)))
    for e in entries:
        if e[0] == "e":
            _, key, ts, wm, after, record = e
            out.append(struct.pack("<BIIqqq", 0, key, 0, ts, wm, after) + b(record.encode()))
        else:
            _, key, ts, wm = e
            out.append(struct.pack("<BIBqq", 1, key, 0, ts, wm))
    return b"".join(out)


def effects(buf):
    """The effects buffer as (consumed, skipped, writes, timer ops, emits, logs)."""
    at = 0

    def take(fmt):
        nonlocal at
        values = struct.unpack_from(fmt, buf, at)
        at += struct.calcsize(fmt)
        return values

    def data():
        (n,) = take("<I")
        nonlocal at
        at += n
        return buf[at - n : at]

    consumed, skipped = take("<II")
    writes = []
    for _ in range(take("<I")[0]):
        key, state, op = take("<IIB")
        stamp = take("<q")[0] if op & 0x80 else None
        code = op & 0x7F
        if code == 1:  # a whole slot
            kind = take("<B")[0]
            if kind == 0:
                payload = data()
            else:
                payload = [data() for _ in range(take("<I")[0])]
        elif code == 2:
            payload = data()
        else:
            payload = None
        writes.append((key, state, code, stamp, payload))
    timer_ops = [take("<IBBq") for _ in range(take("<I")[0])]
    emits = []
    for _ in range(take("<I")[0]):
        output, ts, has_key = take("<IqB")
        key = data() if has_key else None
        emits.append((output, ts, key, data()))
    logs = [(take("<IB"), data()) for _ in range(take("<I")[0])]
    assert at == len(buf), "trailing bytes"
    return consumed, skipped, writes, timer_ops, emits, logs


class BatchTest(unittest.TestCase):
    def setUp(self):
        self.exported = export()
        self.batch = self.exported.Batch()

    def run_batch(self, *args, **kwargs):
        return effects(self.batch.process_batch(batch(*args, **kwargs)))

    def test_a_batch_reads_the_sent_state_and_returns_every_effect(self):
        consumed, skipped, writes, timer_ops, emits, logs = self.run_batch(
            [(b"a", {0: b"41"}), (b"b", {})],
            [
                ("e", 0, 1_000, 0, 999, '{"timer": 5000}'),
                ("e", 1, 2_000, 999, 1_999, "{}"),
                ("e", 0, 3_000, 1_999, 2_999, "{}"),
            ],
        )
        self.assertEqual((consumed, skipped, logs), (3, 0, []))
        # The value state is written whole, once, with its last value; the list with a
        # time-to-live as appends, each stamped with its call's time.
        self.assertIn((0, 0, 1, None, b"43"), writes)
        self.assertIn((1, 0, 1, None, b"1"), writes)
        self.assertIn((0, 1, 2, 1_000, b"1000"), writes)
        self.assertIn((0, 1, 2, 3_000, b"3000"), writes)
        self.assertIn((1, 1, 2, 2_000, b"2000"), writes)
        self.assertEqual(len(writes), 5)
        self.assertEqual(timer_ops, [(0, 0, 0, 5_000)])
        self.assertEqual(
            emits,
            [(0, 1_000, b"a", b'{"n":42}'), (0, 2_000, b"b", b'{"n":1}'), (0, 3_000, b"a", b'{"n":43}')],
        )

    def test_a_timer_registered_that_falls_due_inside_the_batch_ends_it(self):
        consumed, _, _, timer_ops, emits, _ = self.run_batch(
            [(b"a", {})],
            [
                ("e", 0, 1_000, 0, 999, '{"timer": 1500}'),
                ("e", 0, 2_000, 999, 1_999, "{}"),  # its watermark passes 1500: stop here
                ("e", 0, 3_000, 1_999, 2_999, "{}"),
            ],
        )
        self.assertEqual(consumed, 2)
        self.assertEqual(timer_ops, [(0, 0, 0, 1_500)])
        self.assertEqual(len(emits), 2)

    def test_the_end_of_inputs_timers_are_taken_in_one_batch(self):
        # The end of input's watermark is the largest timestamp; no timer registered, so
        # none can be due: every timer of the batch is taken.
        end = 2**63 - 1
        consumed, skipped, _, timer_ops, emits, _ = self.run_batch(
            [(b"a", {}), (b"b", {}), (b"c", {})],
            [("t", 0, MINUTE, end), ("t", 1, 2 * MINUTE, end), ("t", 2, 3 * MINUTE, end)],
        )
        self.assertEqual((consumed, skipped, timer_ops), (3, 0, []))
        self.assertEqual(len(emits), 3)

    def test_a_pending_timer_deleted_is_skipped_and_one_registered_again_is_the_hosts(self):
        consumed, skipped, _, timer_ops, emits, _ = self.run_batch(
            [(b"a", {}), (b"b", {})],
            [
                ("e", 0, 10 * MINUTE, 0, 10 * MINUTE - 1, '{"delete": 60000}'),
                ("e", 1, 10 * MINUTE, 0, 10 * MINUTE - 1, '{"timer": 120000}'),
                ("t", 0, MINUTE, 10 * MINUTE - 1),
                ("t", 1, 2 * MINUTE, 10 * MINUTE - 1),
            ],
        )
        self.assertEqual((consumed, skipped), (4, 1))
        # b's register of the timer the batch holds is no request; a's delete is.
        self.assertEqual(timer_ops, [(0, 0, 1, MINUTE)])
        self.assertEqual([e[3] for e in emits], [b'{"n":1}', b'{"n":1}', b'{"timer":120000,"n":1}'])

    def test_an_exception_fails_the_whole_batch(self):
        with self.assertRaises(_bindings.Err) as caught:
            self.batch.process_batch(
                batch([(b"a", {})], [("e", 0, 1, 0, 0, "{}"), ("e", 0, 2, 0, 1, '{"fail": true}')])
            )
        self.assertIn("ValueError: asked to fail", caught.exception.value.message)

    def test_a_rejection_fails_the_batch_too(self):
        class Rejecting(weir.ProcessFunction):
            def process_element(self, ctx, el):
                raise weir.Reject("no")

        exported = eval("weir.export(R)", {"weir": weir, "R": Rejecting}, {"__name__": "r_app"})
        exported().init(SimpleNamespace(config=[], inputs=["main"]))
        with self.assertRaises(_bindings.Err):
            exported.Batch().process_batch(batch([(b"a", {})], [("e", 0, 1, 0, 0, "{}")]))

    def test_a_value_that_does_not_decode_fails_the_batch(self):
        with self.assertRaises(_bindings.Err) as caught:
            self.batch.process_batch(batch([(b"a", {0: b"\xff"})], [("e", 0, 1, 0, 0, "{}")]))
        self.assertIn("cannot decode stored value", caught.exception.value.message)

    def test_a_malformed_buffer_fails_the_batch(self):
        with self.assertRaises(_bindings.Err) as caught:
            self.batch.process_batch(batch([(b"a", {})], [("e", 0, 1, 0, 0, "{}")])[:-3])
        self.assertIn("malformed batch buffer", caught.exception.value.message)



class CountingCodec(weir.Codec):
    """JSON, counting its calls; `object()` cannot be encoded."""

    name = "counting JSON"
    #: JSON's bytes never begin with the schema tag: values are stored untagged.
    may_begin_with_tag = False

    def __init__(self):
        self.decodes = 0
        self.encodes = 0

    def encode(self, value):
        self.encodes += 1
        return weir.JSON.encode(value)

    def decode(self, data):
        self.decodes += 1
        return weir.JSON.decode(data)


class Held(weir.ProcessFunction):
    """A list of timestamps per key in a value state (id 0, `CODEC`), and a version-1
    value (id 1) migrated from version 0. Elements: `{}` appends the timestamp and emits
    the list; `{"peek": true}` appends without setting; `{"clear": true}` clears;
    `{"object": true}` sets an unencodable value; `{"migrated": true}` reads state 1."""

    CODEC = None

    def init(self, ctx):
        self.times = ctx.value_state("times", Held.CODEC)
        self.versioned = (
            ctx.value_state("versioned", weir.JSON)
            .schema(1)
            .migrate_from(0, lambda old: {"was": old}, codec=weir.JSON)
        )
        self.out = ctx.main_output()

    def process_element(self, ctx, el):
        cmd = el.json()
        if cmd.get("migrated"):
            self.out.emit({"versioned": self.versioned.get()})
            return
        if cmd.get("clear"):
            self.times.clear()
            return
        if cmd.get("object"):
            self.times.set(object())
            return
        times = self.times.get([])
        times.append(el.timestamp())
        if not cmd.get("peek"):
            self.times.set(times)
        self.out.emit({"times": times})


class HeldValueTest(unittest.TestCase):
    """Inside a batch a value state's value is decoded once and encoded once per key."""

    def setUp(self):
        Held.CODEC = CountingCodec()
        self.batch = export(Held).Batch()

    def run_batch(self, keys, commands):
        entries = [("e", key, ts, 0, 0, cmd) for key, ts, cmd in commands]
        return effects(self.batch.process_batch(batch(keys, entries)))

    def test_a_hot_key_is_decoded_and_encoded_once_with_the_same_effects(self):
        _, _, writes, _, emits, _ = self.run_batch(
            [(b"a", {0: b"[1]"}), (b"b", {})],
            [(0, 2, "{}"), (1, 3, "{}"), (0, 4, "{}"), (0, 5, "{}"), (1, 6, "{}")],
        )
        self.assertEqual(
            [e[3] for e in emits],
            [b'{"times":[1,2]}', b'{"times":[3]}', b'{"times":[1,2,4]}',
             b'{"times":[1,2,4,5]}', b'{"times":[3,6]}'],
        )
        self.assertEqual(sorted(writes), [(0, 0, 1, None, b"[1,2,4,5]"), (1, 0, 1, None, b"[3,6]")])
        self.assertEqual((Held.CODEC.decodes, Held.CODEC.encodes), (1, 2))

    def test_a_value_changed_without_set_is_seen_in_the_batch_but_not_written(self):
        _, _, writes, _, emits, _ = self.run_batch(
            [(b"a", {0: b"[1]"})], [(0, 2, '{"peek": true}'), (0, 3, '{"peek": true}')]
        )
        # As with Flink's heap state: the batch holds the object the first get decoded.
        self.assertEqual([e[3] for e in emits], [b'{"times":[1,2]}', b'{"times":[1,2,3]}'])
        self.assertEqual(writes, [], "nothing was set: the host keeps [1]")

    def test_a_clear_after_a_set_writes_a_clear_and_a_get_after_it_sees_none(self):
        _, _, writes, _, emits, _ = self.run_batch(
            [(b"a", {0: b"[1]"})], [(0, 2, "{}"), (0, 3, '{"clear": true}'), (0, 4, "{}")]
        )
        self.assertEqual([e[3] for e in emits], [b'{"times":[1,2]}', b'{"times":[4]}'])
        self.assertEqual(writes, [(0, 0, 1, None, b"[4]")])
        _, _, writes, _, _, _ = self.run_batch(
            [(b"a", {0: b"[1]"})], [(0, 2, "{}"), (0, 3, '{"clear": true}')]
        )
        self.assertEqual(writes, [(0, 0, 0, None, None)])

    def test_a_value_that_cannot_be_encoded_fails_the_batch_when_it_ends(self):
        with self.assertRaises(_bindings.Err) as caught:
            self.batch.process_batch(
                batch([(b"a", {})], [("e", 0, 1, 0, 0, '{"object": true}')])
            )
        self.assertIn("state `times`: cannot encode value", caught.exception.value.message)

    def test_a_migrated_value_is_written_back_once_under_its_version(self):
        _, _, writes, _, emits, _ = self.run_batch(
            [(b"a", {1: b"7"})], [(0, 1, '{"migrated": true}'), (0, 2, '{"migrated": true}')]
        )
        self.assertEqual([e[3] for e in emits], [b'{"versioned":{"was":7}}'] * 2)
        self.assertEqual(writes, [(0, 1, 1, None, b'\xfe\xed\x01{"was":7}')])

    def test_one_call_at_a_time_each_get_is_a_new_object(self):
        from weir.testing import TestHost

        h = TestHost(Held)
        h.process("main", "a", {"peek": True}, 1)
        h.process("main", "a", {"peek": True}, 2)
        self.assertEqual(
            [e.value for e in h.take_outputs("main")], [{"times": [1]}, {"times": [2]}]
        )
        self.assertFalse(h.has_state("a"))


if __name__ == "__main__":
    unittest.main()
