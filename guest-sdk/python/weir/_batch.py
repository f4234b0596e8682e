"""The batched path (`weir:udf/batch`): many elements and timers per component call, as
the Rust SDK's `guest-sdk/src/batch.rs` does it.

The host sends a run of entries with the state of every key they touch (the byte layout is
documented in the `weir-wire` crate, `guest-sdk/wire`). While the batch runs, an
`_Overlay` stands in for the host's imports: `weir._bindings.state`, `.timers`, `.output`,
`.logging` and `.dead_letters` point at it, so the SDK's own code (and the UDF's) is the
same per-element and per-timer code, and only where its calls go changes. At the end the
overlay becomes the effects buffer: state writes, timer requests, emitted records, logs.

Semantics are the per-element ones, because anything the overlay cannot answer exactly
fails the batch, and the host then runs the same entries again one call at a time:

- an exception from the UDF (a `weir.Reject` too, a `StateDecodeError`, a trap) fails the
  batch; none of its effects apply;
- a misuse of the contract (a list call on a value state, a timestamp out of range) fails
  the batch even if the UDF catches what it raised, so that the replay shows the host's
  own answer;
- a timer the batch registers that is already due ends the batch right after the entry
  that registered it, so that the host fires it in order; a timer entry still ahead in
  the batch that the UDF deletes is skipped, and registering it again is a no-op, as if
  the host held it;
- a state with a time-to-live has its writes stamped with the time of the call that did
  them, and its lists and maps written as operations, so that each item keeps its own
  stamp; reads are reported for states whose time-to-live reads refresh.

Within a batch, a value state without a time-to-live keeps its value decoded, as Flink's
heap state backend and PyFlink's state cache do: the first `get()` of a key's value
decodes it, later ones in the batch return that same object, and `set(value)` keeps
`value` itself, encoded once, when the batch ends (`_Overlay.held_value`). A hot key's
state is so decoded and encoded once per batch instead of on every element and timer.
Code that sets a value after changing it, and does not change it after setting it, sees
no difference (the Flink backends need the same of it); code that changes a value
without setting it sees the change in the batch's later calls, where one call at a time
it would not. An encoding failure at the end fails the batch, and the replay one call at
a time reports it at its record. Lists, maps and states with a time-to-live stay bytes.

The buffer is decoded only as far as the entries run need it (`_Batch`), because the guest
may stop early and the host then sends the rest again. The SDK does not export
`weir:udf/cached-batch`: keeping every sent key's state between batches would cost an
interpreter more than the copies it saves (the host marks every key of a batch as held,
the keys of the entries the guest never reached too).
"""

import struct
from types import SimpleNamespace

from . import _bindings as _host

__all__ = ["ABSENT", "ACTIVE", "UNKNOWN", "BatchFailed", "declared", "run"]

#: The overlay of the batch being run, or None outside a batch: `ValueState` keeps its
#: decoded values there.
ACTIVE = None

#: A slot's `held` value: none decoded yet (UNKNOWN), or the state is absent (ABSENT).
UNKNOWN = object()
ABSENT = object()

_EVENT_TIME = 0
_ELEMENT = 0
_TIMER = 1

_WRITE_CLEAR = 0
_WRITE_SET = 1
_WRITE_LIST_APPEND = 2
_WRITE_MAP_PUT = 3
_WRITE_MAP_REMOVE = 4
_WRITE_READ = 5
_WRITE_MAP_READ = 6
_WRITE_AT = 0x80


_REGISTER = 0
_DELETE = 1

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1

#: Past this many operations a list or map slot without a time-to-live is written whole.
_MAX_OPS = 32

# Change of a slot: clean, replaced whole, or a list of (op, at) operations.
_CLEAN = 0
_REPLACED = 1

# Operations: (code, a, b), with the payload bytes in a and b.
_OP_APPEND = _WRITE_LIST_APPEND
_OP_PUT = _WRITE_MAP_PUT
_OP_REMOVE = _WRITE_MAP_REMOVE
_OP_CLEAR = _WRITE_CLEAR
_OP_READ = _WRITE_READ
_OP_READ_KEY = _WRITE_MAP_READ

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_HEADER = struct.Struct("<qI")  # processing time, key count
_VALUE_SLOT = struct.Struct("<BI")  # slot kind, length or count
_SLOT_HEADER = struct.Struct("<IBI")  # state, slot kind, length or count
_ELEMENT_ENTRY = struct.Struct("<IIqqqI")  # key, input, ts, watermark, after, length
_TIMER_ENTRY = struct.Struct("<IBqq")  # key, domain, ts, watermark
_TIMER_OP = struct.Struct("<IBBq")
_EMIT = struct.Struct("<IqBI")  # output, ts, 0 (no key), value length
_EMIT_KEY = struct.Struct("<IqBI")  # output, ts, 1, key length
_WRITE = struct.Struct("<IIB")  # key, state, op
_WRITE_STAMPED = struct.Struct("<IIBq")  # key, state, op | 0x80, at
_LOG = struct.Struct("<IBI")

#: The wire's codes of the bindings' enums (looked up: `Enum.value` is Python code).
_DOMAIN_CODES = {_host.TimeDomain.EVENT_TIME: 0, _host.TimeDomain.PROCESSING_TIME: 1}
_LEVEL_CODES = {level: level.value for level in _host.LogLevel}

#: The time-to-live of each declared state, by id: (domain code, refreshed on read), or
#: None. `InitContext` records every declaration here.
_TTLS = {}

def declared(state_id, ttl):
    """Records that state `state_id` was declared with `ttl` (a `StateTtl` or None), so
    that batches stamp its writes and report its reads."""
    if ttl is None:
        _TTLS.pop(state_id, None)
    else:
        _TTLS[state_id] = (ttl.domain.value, ttl.refresh_on_read)


class BatchFailed(BaseException):  # noqa: N818 - it ends the batch, whatever catches it
    """The batch cannot go on: the host runs its entries again one call at a time."""


class _Slot:
    """One state of one key as the batch sees it: `contents` is None (absent), bytes (a
    value), a list of bytes (a list) or a dict of bytes to bytes (a map). A value state
    also has `held`, its decoded value (or `UNKNOWN`, `ABSENT`), and `encoder`, the
    `ValueState` that set `held` when `contents` is yet to be encoded from it (else
    None)."""

    __slots__ = ("contents", "change", "stamp", "held", "encoder")

    def __init__(self, contents):
        self.contents = contents
        self.change = _CLEAN
        self.stamp = _I64_MIN
        self.held = UNKNOWN
        self.encoder = None

    def op(self, op, at, ttl):
        """Records an operation done at `at`; without a time-to-live, past `_MAX_OPS` the
        slot is written whole instead."""
        change = self.change
        if change is _CLEAN:
            self.change = [(op, at)]
        elif change is _REPLACED:
            pass
        elif ttl or len(change) < _MAX_OPS:
            change.append((op, at))
        else:
            self.change = _REPLACED


class _Overlay:
    """The guest-side view of the host's state for one batch, and the batch's effects."""

    def __init__(self, batch):
        self.batch = batch
        self.processing_time = batch.processing_time
        self.cur = None  # the current key's slots
        self.current = 0
        self.timestamp = 0
        self.watermark = _I64_MIN
        self.skipped = set()  # timer entries the UDF deleted before they fired
        self.earliest_registered = None  # the earliest event-time timer registered
        self.timer_ops = []
        self.emits = []
        self.emit_count = 0
        self.logs = []
        self.failed = None  # why the batch must fail, even if the UDF caught it

    # --- failures ------------------------------------------------------------------------

    def trap(self, why):
        """What the host would trap on: the batch fails, whatever the UDF catches."""
        if self.failed is None:
            self.failed = why
        raise BatchFailed(why)

    # --- time-to-live --------------------------------------------------------------------

    def call_time(self, ttl):
        """The current call's time on the clock of `ttl`, as the host stamps entries."""
        if ttl[0] == _EVENT_TIME:
            ts, wm = self.timestamp, self.watermark
            return ts if ts > wm else wm
        return self.processing_time

    def slot_or_absent(self, state):
        slot = self.cur.get(state)
        if slot is None:
            slot = self.cur[state] = _Slot(None)
        return slot

    def op(self, state, slot, op):
        ttl = _TTLS.get(state)
        if ttl is None:
            slot.op(op, 0, False)
        else:
            slot.op(op, self.call_time(ttl), True)

    def read(self, state, map_key=None):
        """A read of the current key's `state` (its entry `map_key` only, if given), which
        the host hears of if it refreshes the state's time-to-live."""
        ttl = _TTLS.get(state)
        if ttl is None or not ttl[1]:
            return
        slot = self.cur.get(state)
        if slot is None or slot.contents is None:
            return
        at = self.call_time(ttl)
        if slot.change is _REPLACED:
            slot.stamp = at
        elif map_key is not None:
            slot.op((_OP_READ_KEY, map_key, None), at, True)
        else:
            slot.stamp = at
            slot.op((_OP_READ, None, None), at, True)

    def set(self, state, contents):
        """Replaces the current key's `state` whole. For a list with a time-to-live this is
        a clear and the items appended again, each stamped now."""
        ttl = _TTLS.get(state)
        slot = self.slot_or_absent(state)
        slot.held = ABSENT if contents is None else UNKNOWN
        slot.encoder = None
        if ttl is None:
            slot.contents = contents
            slot.change = _REPLACED
            return
        at = self.call_time(ttl)
        if type(contents) is list:
            slot.op((_OP_CLEAR, None, None), at, True)
            for item in contents:
                slot.op((_OP_APPEND, item, None), at, True)
            slot.contents = contents
        elif contents is None and slot.change is not _REPLACED:
            slot.op((_OP_CLEAR, None, None), at, True)
            slot.contents = None
        else:
            slot.stamp = at
            slot.contents = contents
            slot.change = _REPLACED

    # --- decoded values (`ValueState`, for states without a time-to-live) ------------------

    def held_value(self, state):
        """The decoded value of the current key's value `state` that the batch holds:
        the object, `ABSENT`, or `UNKNOWN` (none decoded yet)."""
        slot = self.cur.get(state)
        return UNKNOWN if slot is None else slot.held

    def hold_value(self, state, value):
        """Keeps `value` (or `ABSENT`), just read from the current key's `state`, for the
        batch's later reads."""
        slot = self.slot_or_absent(state)
        slot.held = value

    def set_held_value(self, state, value, handle):
        """`handle.set(value)` inside a batch: keeps `value` itself, to be encoded with
        `handle._encode` when its bytes are needed (at the latest when the batch ends)."""
        slot = self.cur.get(state)
        if slot is None:
            slot = self.cur[state] = _Slot(None)
        elif slot.contents is not None and type(slot.contents) is not bytes:
            self.trap(f"`state.value-set` on state #{state}, which is not a value state")
        slot.held = value
        slot.encoder = handle
        slot.change = _REPLACED

    def encode_held(self, slot):
        """Encodes a slot's held value into its contents; an encoding failure fails the
        batch (one call at a time, it is reported at the record that set the value)."""
        handle, slot.encoder = slot.encoder, None
        try:
            slot.contents = handle._encode(slot.held)
        except Exception as e:  # noqa: BLE001 - any failure means the same: replay
            self.trap(f"{type(e).__name__}: {e}")

    # --- state (the `state` import) ------------------------------------------------------

    def _kind(self, state, kind, call):
        slot = self.cur.get(state)
        if slot is not None and slot.contents is not None and type(slot.contents) is not kind:
            self.trap(f"`state.{call}` on state #{state}, which is of another kind")
        return slot

    def value_get(self, state):
        if state in _TTLS:
            self.read(state)
        slot = self.cur.get(state)
        if slot is None:
            return None
        if slot.encoder is not None:
            self.encode_held(slot)
        contents = slot.contents
        if contents is None or type(contents) is bytes:
            return contents
        return self.trap(f"`state.value-get` on state #{state}, which is not a value state")

    def value_set(self, state, value):
        if type(value) is not bytes:
            value = self._bytes(value, "state.value-set")
        slot = self.cur.get(state)
        if slot is None:
            slot = self.cur[state] = _Slot(None)
        elif slot.contents is not None and type(slot.contents) is not bytes:
            self.trap(f"`state.value-set` on state #{state}, which is not a value state")
        if state in _TTLS:
            self.set(state, value)
            return
        slot.contents = value
        slot.change = _REPLACED
        slot.held = UNKNOWN
        slot.encoder = None

    def list_get(self, state):
        self._kind(state, list, "list-get")
        self.read(state)
        slot = self.cur.get(state)
        if slot is None or slot.contents is None:
            return []
        return list(slot.contents)

    def list_append(self, state, item):
        item = self._bytes(item, "state.list-append")
        self._kind(state, list, "list-append")
        slot = self.slot_or_absent(state)
        if slot.contents is None:
            slot.contents = [item]
        else:
            slot.contents.append(item)
        self.op(state, slot, (_OP_APPEND, item, None))

    def list_set(self, state, items):
        items = [self._bytes(i, "state.list-set") for i in items]
        self._kind(state, list, "list-set")
        self.set(state, items or None)

    def map_get(self, state, key):
        key = self._bytes(key, "state.map-get")
        slot = self._kind(state, dict, "map-get")
        if slot is None or slot.contents is None:
            return None
        value = slot.contents.get(key)
        if value is not None:
            self.read(state, key)
        return value

    def map_put(self, state, key, value):
        key = self._bytes(key, "state.map-put")
        value = self._bytes(value, "state.map-put")
        self._kind(state, dict, "map-put")
        slot = self.slot_or_absent(state)
        if slot.contents is None:
            slot.contents = {key: value}
        else:
            slot.contents[key] = value
        self.op(state, slot, (_OP_PUT, key, value))

    def map_remove(self, state, key):
        key = self._bytes(key, "state.map-remove")
        slot = self._kind(state, dict, "map-remove")
        if slot is None or slot.contents is None or key not in slot.contents:
            return
        del slot.contents[key]
        ttl = state in _TTLS
        if not slot.contents:
            slot.contents = None
            if not ttl:
                slot.change = _REPLACED
                return
        slot.op((_OP_REMOVE, key, None), 0, ttl)

    def map_entries(self, state):
        self._kind(state, dict, "map-entries")
        self.read(state)
        slot = self.cur.get(state)
        if slot is None or slot.contents is None:
            return []
        return sorted(slot.contents.items())

    def clear(self, state):
        self.set(state, None)

    def clear_all(self):
        for state in list(self.cur):
            self.set(state, None)

    def _bytes(self, value, call):
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        return self.trap(f"`{call}` given {type(value).__name__}, not bytes")

    # --- timers (the `timers` import) ----------------------------------------------------

    def register(self, domain, at):
        if type(at) is not int or not _I64_MIN <= at <= _I64_MAX:
            self.trap(f"`timers.register` given {at!r}, not a 64-bit integer")
        code = _DOMAIN_CODES.get(domain)
        if code is None:
            self.trap(f"`timers.register` given the domain {domain!r}")
        key = self.current
        if code == _EVENT_TIME:  # only event-time timers are ever in a batch
            batch = self.batch
            if batch.scan_watermark < at and not batch.read_all:
                batch.scan_to_watermark(at)
            if batch.pending and (key, at) in batch.pending:
                return  # the host holds this timer (it is ahead in the batch): one timer
            if self.earliest_registered is None or at < self.earliest_registered:
                self.earliest_registered = at
        self.timer_ops.append(_TIMER_OP.pack(key, code, _REGISTER, at))

    def delete(self, domain, at):
        if type(at) is not int or not _I64_MIN <= at <= _I64_MAX:
            self.trap(f"`timers.delete` given {at!r}, not a 64-bit integer")
        code = _DOMAIN_CODES.get(domain)
        if code is None:
            self.trap(f"`timers.delete` given the domain {domain!r}")
        key = self.current
        if code == _EVENT_TIME:
            batch = self.batch
            if batch.scan_watermark < at and not batch.read_all:
                batch.scan_to_watermark(at)
            if batch.pending:
                entry = batch.pending.pop((key, at), None)
                if entry is not None:
                    self.skipped.add(entry)
        self.timer_ops.append(_TIMER_OP.pack(key, code, _DELETE, at))

    def current_watermark(self):
        return self.watermark

    def current_processing_time(self):
        return self.processing_time

    # --- outputs, logs, rejections -------------------------------------------------------

    def emit(self, output, value, key, timestamp):
        if type(value) is not bytes:
            value = self._bytes(value, "output.emit")
        if timestamp is None:
            timestamp = self.timestamp
        elif type(timestamp) is not int or not _I64_MIN <= timestamp <= _I64_MAX:
            self.trap(f"`output.emit` given the timestamp {timestamp!r}")
        emits = self.emits
        if key is None:
            emits.append(_EMIT.pack(output, timestamp, 0, len(value)))
        else:
            key = self._bytes(key, "output.emit")
            emits.append(_EMIT_KEY.pack(output, timestamp, 1, len(key)))
            emits.append(key)
            emits.append(_U32.pack(len(value)))
        emits.append(value)
        self.emit_count += 1

    def log(self, level, message):
        data = str(message).encode("utf-8", "surrogatepass")
        code = _LEVEL_CODES.get(level)
        if code is None:
            self.trap(f"`logging.log` given the level {level!r}")
        self.logs.append(_LOG.pack(self.current, code, len(data)) + data)

    def reject(self, reason):
        # The SDK rejects by raising (which fails the batch); a direct call does too.
        self.trap("a rejection inside a batch: the host runs the entries one at a time")

    def declare(self, *args):
        return self.trap("a declaration outside init")

    declare_with_ttl = declare


_STATE_CALLS = (
    "declare", "declare_with_ttl", "value_get", "value_set", "list_get", "list_append",
    "list_set", "map_get", "map_put", "map_remove", "map_entries", "clear", "clear_all",
)


def _imports(o):
    """The five imports as overlay `o` answers them, in the shape of the bindings'
    modules (`state.value_get(...)`): (state, timers, output, logging, dead_letters)."""
    state = SimpleNamespace(**{name: getattr(o, name) for name in _STATE_CALLS})
    timers = SimpleNamespace(
        register=o.register,
        delete=o.delete,
        current_watermark=o.current_watermark,
        current_processing_time=o.current_processing_time,
    )
    output = SimpleNamespace(declare=o.declare, emit=o.emit)
    return state, timers, output, SimpleNamespace(log=o.log), SimpleNamespace(reject=o.reject)


def _install(imports):
    """Points the SDK's host calls at `imports` (from `_imports`, or the saved bindings);
    returns what they pointed at before."""
    b = _host
    saved = (b.state, b.timers, b.output, b.logging, b.dead_letters)
    b.state, b.timers, b.output = imports[0], imports[1], imports[2]
    b.logging, b.dead_letters = imports[3], imports[4]
    return saved


# --- decoding ----------------------------------------------------------------------------


class _Malformed(Exception):
    """A batch buffer the guest cannot read."""


class _Batch:
    """The batch buffer, decoded as far as the entries run so far need it.

    A guest may stop long before the end of a batch (at a timer it registered that falls
    due), and the host then sends the rest again: decoding everything first would cost
    the whole batch every time. Keys are numbered in the order entries first name them,
    so the keys of the first n entries are among the first n keys; entries are read in
    order; and a timer entry with timestamp T comes before the first element whose
    watermark is T or later, so the timer entries ahead of the current one that a timer
    call could name are found by reading on only that far (`scan_to_watermark`)."""

    __slots__ = (
        "buf", "size", "processing_time", "n_keys", "keys", "slots", "key_at",
        "n_entries", "entries", "entry_at", "scan_watermark", "pending", "read_all",
    )

    def __init__(self, buf):
        self.buf = buf
        self.size = len(buf)
        self.processing_time, self.n_keys = _HEADER.unpack_from(buf, 0)
        self.keys = []  # key bytes per index, as far as read
        self.slots = []  # per key index: {state id: _Slot}
        self.key_at = 12
        # The entries start after the keys: found by reading every key once, the first
        # time an entry is needed (cheap beside decoding them: lengths only).
        self.n_entries = None
        self.entries = []
        self.entry_at = None
        self.scan_watermark = _I64_MIN  # the watermark of the last element read
        self.pending = {}  # (key, ts) -> entry index: event-time timer entries not fired yet
        self.read_all = False

    def key(self, index):
        """Reads keys up to `index`."""
        buf = self.buf
        at = self.key_at
        keys = self.keys
        while len(keys) <= index:
            if len(keys) >= self.n_keys:
                raise _Malformed("entry names a key outside the batch")
            (size,) = _U32.unpack_from(buf, at)
            at += 4
            keys.append(buf[at : at + size])
            at += size
            key_slots, at = _decode_slots(buf, at)
            self.slots.append(key_slots)
        self.key_at = at
        if at > self.size:
            raise _Malformed("truncated")

    def _skip_keys(self):
        """Finds where the entries start, without decoding the keys not read yet."""
        buf = self.buf
        at = self.key_at
        for _ in range(self.n_keys - len(self.keys)):
            (size,) = _U32.unpack_from(buf, at)
            at += 4 + size
            (n,) = _U32.unpack_from(buf, at)
            at += 4
            for _ in range(n):
                _state, kind, length = _SLOT_HEADER.unpack_from(buf, at)
                at += 9
                if kind == 0:
                    at += length
                elif kind == 1:
                    for _ in range(length):
                        at += 4 + _U32.unpack_from(buf, at)[0]
                elif kind == 2:
                    for _ in range(2 * length):
                        at += 4 + _U32.unpack_from(buf, at)[0]
                else:
                    raise _Malformed("unknown slot kind")
        (self.n_entries,) = _U32.unpack_from(buf, at)
        self.entry_at = at + 4

    def read_entry(self):
        """Reads the next entry; False at the end."""
        if self.n_entries is None:
            self._skip_keys()
        entries = self.entries
        if len(entries) >= self.n_entries:
            self.read_all = True
            return False
        buf = self.buf
        at = self.entry_at
        tag = buf[at]
        at += 1
        if tag == _ELEMENT:
            key, input_index, ts, wm, after, size = _ELEMENT_ENTRY.unpack_from(buf, at)
            at += 36
            end = at + size
            if end > self.size:
                raise _Malformed("truncated")
            entries.append((False, key, input_index, ts, wm, after, buf[at:end]))
            at = end
            self.scan_watermark = wm
        elif tag == _TIMER:
            key, domain, ts, wm = _TIMER_ENTRY.unpack_from(buf, at)
            at += 21
            if domain == _EVENT_TIME:
                self.pending[(key, ts)] = len(entries)
            entries.append((True, key, domain, ts, wm))
        else:
            raise _Malformed("unknown entry tag")
        if key >= self.n_keys:
            raise _Malformed("entry names a key outside the batch")
        self.entry_at = at
        return True

    def scan_to_watermark(self, at):
        """Reads entries until one is an element whose watermark is `at` or later: every
        timer entry due at `at` is then read (and in `pending`, if it has not fired)."""
        while self.scan_watermark < at and self.read_entry():
            pass


def _decode_slots(buf, at):
    """The slots of one key at `buf[at:]`: ({state id: _Slot}, the offset after them)."""
    (n,) = _U32.unpack_from(buf, at)
    at += 4
    slots = {}
    for _ in range(n):
        state, kind, length = _SLOT_HEADER.unpack_from(buf, at)
        at += 9
        if kind == 0:
            contents = buf[at : at + length]
            at += length
        elif kind == 1:
            contents = []
            for _ in range(length):
                (size,) = _U32.unpack_from(buf, at)
                at += 4
                contents.append(buf[at : at + size])
                at += size
        elif kind == 2:
            contents = {}
            for _ in range(length):
                (size,) = _U32.unpack_from(buf, at)
                at += 4
                k = buf[at : at + size]
                at += size
                (size,) = _U32.unpack_from(buf, at)
                at += 4
                contents[k] = buf[at : at + size]
                at += size
        else:
            raise _Malformed("unknown slot kind")
        slots[state] = _Slot(contents)
    return slots, at


# --- running -----------------------------------------------------------------------------


def run(udf, inputs, buf, make_context, make_element, make_timer, domains):
    """Runs batch `buf` through `udf`; returns the encoded effects. Raises what the UDF
    raised, or `BatchFailed` (for a malformed buffer too)."""
    try:
        batch = _Batch(buf)
    except struct.error as e:
        raise BatchFailed(f"malformed batch buffer: {e}") from None
    global ACTIVE
    o = _Overlay(batch)
    saved = _install(_imports(o))
    ACTIVE = o
    try:
        consumed = _run_entries(o, batch, udf, inputs, make_context, make_element, make_timer, domains)
    except (struct.error, IndexError, _Malformed) as e:
        raise BatchFailed(f"malformed batch buffer: {e}") from None
    finally:
        ACTIVE = None
        _install(saved)
    if o.failed is not None:
        raise BatchFailed(o.failed)
    return _encode(o, consumed)


def _run_entries(o, batch, udf, inputs, make_context, make_element, make_timer, domains):
    skipped = o.skipped
    slots = batch.slots
    keys = batch.keys
    entries = batch.entries
    pending = batch.pending
    process_element = udf.process_element
    on_timer = getattr(udf, "on_timer", None)
    n_inputs = len(inputs)
    index = 0
    seen_watermark = None  # the watermark the entries so far said the batch is at
    while index < len(entries) or batch.read_entry():
        entry = entries[index]
        if skipped and index in skipped:
            index += 1
            continue
        # The watermark moved on between entries (another shard's elements, which are not
        # in the batch): a timer registered here that this made due fires before this
        # entry. Stop, and let the host fire it and send the rest again.
        before = entry[4]
        if (
            seen_watermark is not None
            and before > seen_watermark
            and o.earliest_registered is not None
            and o.earliest_registered <= before
        ):
            return index
        key = entry[1]
        if key >= len(keys):
            batch.key(key)
        o.current = key
        o.cur = slots[key]
        if entry[0]:
            _, key, domain, ts, wm = entry
            if pending and domain == _EVENT_TIME:
                pending.pop((key, ts), None)
            o.timestamp = ts
            o.watermark = wm
            key_bytes = keys[key]
            if on_timer is not None:
                on_timer(make_context(key_bytes, ts), make_timer(domains[domain], ts, key_bytes))
            due_after = wm
        else:
            _, key, input_index, ts, wm, after, value = entry
            if input_index >= n_inputs:
                raise BatchFailed(
                    f"element from input #{input_index} but only {n_inputs} inputs are "
                    "connected"
                )
            o.timestamp = ts
            o.watermark = wm
            key_bytes = keys[key]
            process_element(
                make_context(key_bytes, ts),
                make_element(inputs[input_index], input_index, key_bytes, value, ts),
            )
            due_after = after
        index += 1
        # A timer registered here that is already due must fire before anything after
        # this entry: stop, and let the host fire it and send the rest again.
        # (None registered: nothing to fire, also at the end of input's watermark, the
        # largest there is.)
        if o.earliest_registered is not None and o.earliest_registered <= due_after:
            return index
        seen_watermark = due_after
    return index


def _encode(o, consumed):
    """The effects buffer: every changed slot, whole (or, for a state with a time-to-live,
    as its operations, each stamped), the timer requests, the records and the logs."""
    skipped = sum(1 for i in o.skipped if i < consumed)
    out = [_U32.pack(consumed), _U32.pack(skipped), b""]
    n_writes = 0
    append = out.append
    for key, key_slots in enumerate(o.batch.slots):
        for state, slot in key_slots.items():
            change = slot.change
            if change is _CLEAN:
                continue
            if slot.encoder is not None:
                o.encode_held(slot)
            ttl = state in _TTLS
            if change is not _REPLACED and ttl:
                for (code, a, b), at in change:
                    append(_WRITE_STAMPED.pack(key, state, code | _WRITE_AT, at))
                    if a is not None:
                        append(_U32.pack(len(a)))
                        append(a)
                    if b is not None:
                        append(_U32.pack(len(b)))
                        append(b)
                    n_writes += 1
                continue
            contents = slot.contents
            op = _WRITE_CLEAR if contents is None else _WRITE_SET
            if ttl:
                append(_WRITE_STAMPED.pack(key, state, op | _WRITE_AT, slot.stamp))
            else:
                append(_WRITE.pack(key, state, op))
            n_writes += 1
            if contents is None:
                continue
            kind = type(contents)
            if kind is bytes:
                append(_VALUE_SLOT.pack(0, len(contents)))
                append(contents)
            elif kind is list:
                append(_VALUE_SLOT.pack(1, len(contents)))
                for item in contents:
                    append(_U32.pack(len(item)))
                    append(item)
            else:
                append(_VALUE_SLOT.pack(2, len(contents)))
                for k, v in sorted(contents.items()):
                    append(_U32.pack(len(k)))
                    append(k)
                    append(_U32.pack(len(v)))
                    append(v)
    out[2] = _U32.pack(n_writes)
    append(_U32.pack(len(o.timer_ops)))
    out.extend(o.timer_ops)
    append(_U32.pack(o.emit_count))
    out.extend(o.emits)
    append(_U32.pack(len(o.logs)))
    out.extend(o.logs)
    return b"".join(out)
