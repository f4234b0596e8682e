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


def export():
    """The exported classes, initialized against stand-ins for the declarations: state
    `n` is id 0, `seen` id 1, output `main` id 0."""
    ids = iter(range(10))
    saved = (_bindings.state.declare, _bindings.state.declare_with_ttl, _bindings.output.declare)
    _bindings.state.declare = lambda name, kind: next(ids)
    _bindings.state.declare_with_ttl = lambda name, kind, ttl: next(ids)
    _bindings.output.declare = lambda name: 0
    try:
        scope = {"__name__": "probe_app"}
        exported = eval("weir.export(Probe)", {"weir": weir, "Probe": Probe}, scope)
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


if __name__ == "__main__":
    unittest.main()
