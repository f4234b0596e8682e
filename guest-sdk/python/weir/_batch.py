"""The batched path (`weir:udf/batch` and `weir:udf/cached-batch`): many elements and
timers per component call, as the Rust SDK's `guest-sdk/src/batch.rs` does it.

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

On the cached path the bytes of the batch's keys' states stay in the guest from one batch
to the next (`_CACHE`), and the host sends a key's state only when that copy is not
current. Values stay bytes: a decoded value is never shared between calls, so `get()`
always returns a fresh object, exactly as with single calls.
"""

import struct
from types import SimpleNamespace

from . import _bindings as _host

__all__ = ["declared", "run", "PLAIN", "CACHED"]

PLAIN = 0
CACHED = 1

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

_KEY_CACHED = 0
_KEY_SENT = 1
_KEY_SENT_ONCE = 2

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
_CACHED_HEADER = struct.Struct("<QqI")  # epoch, processing time, key count
_SLOT_HEADER = struct.Struct("<IBI")  # state, slot kind, length or count
_ELEMENT_ENTRY = struct.Struct("<IIqqqI")  # key, input, ts, watermark, after, length
_TIMER_ENTRY = struct.Struct("<IBqq")  # key, domain, ts, watermark
_TIMER_OP = struct.Struct("<IBBq")
_EMIT = struct.Struct("<IqBI")  # output, ts, 0 (no key), value length
_EMIT_KEY = struct.Struct("<IqBI")  # output, ts, 1, key length
_WRITE = struct.Struct("<IIB")  # key, state, op
_WRITE_STAMPED = struct.Struct("<IIBq")  # key, state, op | 0x80, at
_LOG = struct.Struct("<IBI")

#: The time-to-live of each declared state, by id: (domain code, refreshed on read), or
#: None. `InitContext` records every declaration here.
_TTLS = {}

#: The cached path's copies: [epoch, {host key id: {state id: _Slot}}].
_CACHE = [None, {}]


def declared(state_id, ttl):
    """Records that state `state_id` was declared with `ttl` (a `StateTtl` or None), so
    that batches stamp its writes and report its reads."""
    if ttl is None:
        _TTLS.pop(state_id, None)
    else:
        _TTLS[state_id] = (ttl.domain.value, ttl.refresh_on_read)


class BatchFailed(BaseException):  # noqa: N818 - it ends the batch, whatever catches it
    """The batch cannot go on: the host runs its entries again one call at a time."""


class _Malformed(Exception):
    """A batch buffer the guest cannot read."""


class _Slot:
    """One state of one key as the batch sees it: `contents` is None (absent), bytes (a
    value), a list of bytes (a list) or a dict of bytes to bytes (a map)."""

    __slots__ = ("contents", "change", "stamp")

    def __init__(self, contents):
        self.contents = contents
        self.change = _CLEAN
        self.stamp = _I64_MIN

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

    def __init__(self, processing_time, slots, pending, pending_per_key, entries, path):
        self.processing_time = processing_time
        self.slots = slots  # per batch key index: {state id: _Slot}
        self.cur = None  # the current key's slots
        self.current = 0
        self.timestamp = 0
        self.watermark = _I64_MIN
        self.pending = pending  # (key, domain, ts) -> entry index, timers not fired yet
        self.pending_per_key = pending_per_key
        self.skipped = set()
        self.earliest_registered = _I64_MAX
        self.timer_ops = []
        self.emits = []
        self.emit_count = 0
        self.logs = []
        self.failed = None  # why the batch must fail, even if the UDF caught it
        self.path = path

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
        contents = slot.contents
        if contents is None or type(contents) is bytes:
            return contents
        return self.trap(f"`state.value-get` on state #{state}, which is not a value state")

    def value_set(self, state, value):
        if type(value) is not bytes:
            value = self._bytes(value, "state.value-set")
        self._kind(state, bytes, "value-set")
        if state in _TTLS:
            self.set(state, value)
            return
        slot = self.cur.get(state)
        if slot is None:
            slot = self.cur[state] = _Slot(value)
        else:
            slot.contents = value
        slot.change = _REPLACED

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

    def _i64(self, value, call):
        if type(value) is not int or not _I64_MIN <= value <= _I64_MAX:
            self.trap(f"`{call}` given {value!r}, not a 64-bit integer")
        return value

    def register(self, domain, at):
        at = self._i64(at, "timers.register")
        code = domain.value
        key = self.current
        if self.pending_per_key[key] and (key, code, at) in self.pending:
            return  # the host holds this timer (it is ahead in the batch): one timer
        if code == _EVENT_TIME and at < self.earliest_registered:
            self.earliest_registered = at
        self.timer_ops.append(_TIMER_OP.pack(key, code, _REGISTER, at))

    def delete(self, domain, at):
        at = self._i64(at, "timers.delete")
        code = domain.value
        key = self.current
        if self.pending_per_key[key]:
            entry = self.pending.pop((key, code, at), None)
            if entry is not None:
                self.skipped.add(entry)
                self.pending_per_key[key] -= 1
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
        self.logs.append(_LOG.pack(self.current, level.value, len(data)) + data)

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


def _decode_slots(buf, at):
    """The slots of one key at `buf[at:]`: ({state id: _Slot}, the offset after them)."""
    (n,) = _U32.unpack_from(buf, at)
    at += 4
    slots = {}
    for _ in range(n):
        state, kind, length = _SLOT_HEADER.unpack_from(buf, at)
        at += 9
        if kind == 0:
            end = at + length
            if end > len(buf):
                raise _Malformed("truncated")
            contents = buf[at:end]
            at = end
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
        if at > len(buf):
            raise _Malformed("truncated")
        slots[state] = _Slot(contents)
    return slots, at


def _decode(buf, path):
    """The batch in `buf`: (processing time, keys, their slots, entries); on the cached
    path the slots come out of the cache where the host says they are current."""
    if path == CACHED:
        epoch, processing_time, n_keys = _CACHED_HEADER.unpack_from(buf, 0)
        at = 20
        cache = _CACHE
        if cache[0] != epoch:
            cache[0] = epoch
            cache[1] = {}
        held = cache[1]
    else:
        processing_time, n_keys = _HEADER.unpack_from(buf, 0)
        at = 12
    keys = []  # key bytes per index
    slots = []
    kept = []  # (host id, keep) per index, cached path only
    for _ in range(n_keys):
        if path == CACHED:
            (key_id,) = _U32.unpack_from(buf, at)
            at += 4
        (size,) = _U32.unpack_from(buf, at)
        at += 4
        keys.append(buf[at : at + size])
        at += size
        if path == CACHED:
            (tag,) = _U8.unpack_from(buf, at)
            at += 1
            copy = held.pop(key_id, None)
            if tag == _KEY_CACHED:
                if copy is None:
                    raise _Malformed("the host says a key is cached that the guest does not hold")
                slots.append(copy)
                kept.append((key_id, True))
                continue
            if tag != _KEY_SENT and tag != _KEY_SENT_ONCE:
                raise _Malformed("unknown key tag")
            kept.append((key_id, tag == _KEY_SENT))
        key_slots, at = _decode_slots(buf, at)
        slots.append(key_slots)
    (n_entries,) = _U32.unpack_from(buf, at)
    at += 4
    entries = []
    n = len(keys)
    for _ in range(n_entries):
        tag = buf[at]
        at += 1
        if tag == _ELEMENT:
            key, input_index, ts, wm, after, size = _ELEMENT_ENTRY.unpack_from(buf, at)
            at += 36
            end = at + size
            if end > len(buf):
                raise _Malformed("truncated")
            entries.append((False, key, input_index, ts, wm, after, buf[at:end]))
            at = end
        elif tag == _TIMER:
            key, domain, ts, wm = _TIMER_ENTRY.unpack_from(buf, at)
            at += 21
            entries.append((True, key, domain, ts, wm))
        else:
            raise _Malformed("unknown entry tag")
        if key >= n:
            raise _Malformed("entry names a key outside the batch")
    return processing_time, keys, slots, kept, entries


# --- running -----------------------------------------------------------------------------


def run(udf, inputs, buf, path, make_context, make_element, make_timer, domains):
    """Runs batch `buf` through `udf`; returns the encoded effects. Raises what the UDF
    raised, `BatchFailed`, or `ValueError` for a malformed buffer."""
    try:
        processing_time, keys, slots, kept, entries = _decode(buf, path)
    except (struct.error, IndexError, _Malformed) as e:
        raise ValueError(f"malformed batch buffer: {e}") from None
    pending = {}
    pending_per_key = [0] * len(keys)
    for index, entry in enumerate(entries):
        if entry[0]:
            pending[(entry[1], entry[2], entry[3])] = index
            pending_per_key[entry[1]] += 1
    o = _Overlay(processing_time, slots, pending, pending_per_key, entries, path)
    saved = _install(_imports(o))
    try:
        consumed = _run_entries(
            o, udf, inputs, keys, entries, make_context, make_element, make_timer, domains
        )
    finally:
        _install(saved)
    if o.failed is not None:
        raise BatchFailed(o.failed)
    effects = _encode(o, consumed, path)
    if path == CACHED:
        held = _CACHE[1]
        for (key_id, keep), key_slots in zip(kept, o.slots):
            if not keep:
                continue
            live = {s: slot for s, slot in key_slots.items() if slot.contents is not None}
            # A key without state is never said to be cached: nothing to keep.
            if live:
                held[key_id] = live
    return effects


def _run_entries(o, udf, inputs, keys, entries, make_context, make_element, make_timer, domains):
    skipped = o.skipped
    slots = o.slots
    pending = o.pending
    process_element = udf.process_element
    on_timer = getattr(udf, "on_timer", None)
    n_inputs = len(inputs)
    for index, entry in enumerate(entries):
        if skipped and index in skipped:
            continue
        if entry[0]:
            _, key, domain, ts, wm = entry
            if pending.pop((key, domain, ts), None) is not None:
                o.pending_per_key[key] -= 1
            o.current = key
            o.cur = slots[key]
            o.timestamp = ts
            o.watermark = wm
            key_bytes = keys[key]
            on_timer(make_context(key_bytes, ts), make_timer(domains[domain], ts, key_bytes))
            due_after = wm
        else:
            _, key, input_index, ts, wm, after, value = entry
            if input_index >= n_inputs:
                raise BatchFailed(
                    f"weir: element from input #{input_index} but only {n_inputs} inputs "
                    "are connected"
                )
            o.current = key
            o.cur = slots[key]
            o.timestamp = ts
            o.watermark = wm
            key_bytes = keys[key]
            process_element(
                make_context(key_bytes, ts),
                make_element(inputs[input_index], input_index, key_bytes, value, ts),
            )
            due_after = after
        # A timer registered here that is already due must fire before anything after
        # this entry: stop, and let the host fire it and send the rest again.
        if o.earliest_registered <= due_after:
            return index + 1
    return len(entries)


def _encode(o, consumed, path):
    """The effects buffer. Every changed slot is written, whole or as its operations; a
    slot's change is cleared once written, so what the cache keeps is clean."""
    skipped = sum(1 for i in o.skipped if i < consumed)
    out = [_U32.pack(consumed), _U32.pack(skipped), b""]
    n_writes = 0
    append = out.append
    cached = path == CACHED
    for key, key_slots in enumerate(o.slots):
        for state, slot in key_slots.items():
            change = slot.change
            if change is _CLEAN:
                continue
            slot.change = _CLEAN
            ttl = state in _TTLS
            if change is not _REPLACED and (cached or ttl):
                for (code, a, b), at in change:
                    if ttl:
                        append(_WRITE_STAMPED.pack(key, state, code | _WRITE_AT, at))
                    else:
                        append(_WRITE.pack(key, state, code))
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
                append(_U8.pack(0))
                append(_U32.pack(len(contents)))
                append(contents)
            elif kind is list:
                append(_U8.pack(1))
                append(_U32.pack(len(contents)))
                for item in contents:
                    append(_U32.pack(len(item)))
                    append(item)
            else:
                append(_U8.pack(2))
                append(_U32.pack(len(contents)))
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

