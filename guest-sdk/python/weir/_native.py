"""The host's imports in plain CPython: an in-memory host, for `weir.testing.TestHost`.

`weir._bindings` uses this module when the componentize-py bindings (`wit_world`) cannot
be imported, that is everywhere but inside a component. It has the same names as those
bindings (`Err`, `types`, `state`, `timers`, `output`, `logging`), so the rest of the SDK
runs unchanged on either. Each import calls the `World` that `install` made active for
the call being run; with none (plain `import weir` outside a TestHost) it raises.

`World` follows the real host's rules: state and timers are scoped to the current key,
timers are unique per (key, domain, timestamp) and fire in the engine's order (timestamp,
then the FNV-1a hash of the key's bytes, then the bytes: "Event time and timers" in
docs/pipeline.md), outputs are declared in `init` only, and the records of a failed call
are dropped. Breaking a rule raises `HostTrap`, where the real host would trap.

States declared with a time-to-live (`state.declare-with-ttl`) expire as in the real host:
every entry (a value, a list item, a map entry) carries a stamp, the time of the call
that last wrote it (or read it, with `on-read-and-write`): for event time the timestamp
of the element or timer, or the watermark if that is later; for processing time the
clock. An entry has expired once the clock of its domain (the watermark, or the
processing time) reaches its stamp + `millis`; `World.expire` removes expired entries,
and the TestHost calls it before every element and timer call and whenever it moves a
clock, so no read and no inspection ever sees one.
"""

import copy
import enum
import functools
import heapq
import json
import sys
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace

__all__ = [
    "Err", "types", "state", "timers", "output", "logging", "dead_letters", "HostTrap", "World",
]

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


class Err(Exception):  # noqa: N818 - the name componentize-py uses
    """Stand-in for `componentize_py_types.Err`: an import's `result` error."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value


class TimeDomain(enum.Enum):
    EVENT_TIME = 0
    PROCESSING_TIME = 1


class StateKind(enum.Enum):
    VALUE = 0
    LIST = 1
    MAP = 2


class LogLevel(enum.Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


class ErrorKind(enum.Enum):
    FAILED = 0
    STATE_DECODE = 1


class TtlRefresh(enum.Enum):
    ON_WRITE = 0
    ON_READ_AND_WRITE = 1


@dataclass
class StateTtl:
    """The WIT record `state-ttl`, as componentize-py generates it."""

    millis: int
    domain: TimeDomain
    refresh: TtlRefresh


@dataclass
class Error:
    message: str
    kind: ErrorKind


types = SimpleNamespace(
    TimeDomain=TimeDomain,
    StateKind=StateKind,
    LogLevel=LogLevel,
    ErrorKind=ErrorKind,
    Error=Error,
    TtlRefresh=TtlRefresh,
    StateTtl=StateTtl,
)


class HostTrap(BaseException):
    """A call the real host would trap on (state used in `init`, an output declared
    outside it, an emitted record that is not JSON, ...). A `BaseException`, like a trap
    that the UDF's own `except Exception` cannot catch."""


@dataclass
class Emitted:
    """A record the UDF emitted, as the host received it.

    `value` is the record parsed from the JSON the UDF emitted; `timestamp` the one the
    UDF gave, else the element's or timer's; `key` the record's key as bytes, or None.
    A `str` key given to the constructor is stored as its UTF-8 bytes, so
    `Emitted({"n": 1}, 1000, key="ad-1")` equals what the host recorded."""

    value: object
    timestamp: int
    key: object = None

    def __post_init__(self):
        if isinstance(self.key, str):
            self.key = self.key.encode()
        elif isinstance(self.key, (bytearray, memoryview)):
            self.key = bytes(self.key)


@dataclass
class LogLine:
    """A line the UDF logged: its `LogLevel`, the current key (bytes; None in `init`),
    and the message."""

    level: LogLevel
    key: object
    message: str


_IDLE, _INIT, _KEYED = "idle", "init", "keyed"
_KIND_NAMES = {StateKind.VALUE: "value", StateKind.LIST: "list", StateKind.MAP: "map"}


def _check_i64(call, what, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"weir host: `{call}` takes an int {what}, got {type(value).__name__}")
    if not I64_MIN <= value <= I64_MAX:
        raise OverflowError(
            f"weir host: `{call}`: {what} {value} is outside the 64-bit range the host "
            "takes (clamp with weir.MIN_TIMESTAMP / weir.MAX_TIMESTAMP)"
        )


def _check_bytes(call, what, value):
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"weir host: `{call}` takes bytes as {what}, got {type(value).__name__}")
    return bytes(value)


_U64_MAX = 2**64 - 1
_NEVER = I64_MAX + 1  # a deadline no clock reaches


def _deadline(stamp, millis):
    """When an entry stamped `stamp` expires: `stamp + millis`, in the host's i64
    arithmetic (`millis` taken as at most `I64_MAX`, the sum saturating at `I64_MAX`, so
    the end of input expires every event-time entry)."""
    return min(stamp + min(millis, I64_MAX), I64_MAX)


def _check_ttl(name, ttl):
    """Checks `ttl` as the binding and the host would: the types (the binding raises),
    then a time-to-live of 0 ms (the host returns an error)."""
    if not isinstance(ttl, StateTtl):
        raise TypeError(
            f"weir host: `state.declare-with-ttl` takes a types.StateTtl, got {type(ttl).__name__}"
        )
    millis = ttl.millis
    if isinstance(millis, bool) or not isinstance(millis, int):
        raise TypeError(
            f"weir host: `state.declare-with-ttl` takes an int millis, got {type(millis).__name__}"
        )
    if not 0 <= millis <= _U64_MAX:
        raise OverflowError(
            f"weir host: `state.declare-with-ttl`: millis {millis} is outside the u64 range"
        )
    if not isinstance(ttl.domain, TimeDomain):
        raise TypeError(
            f"weir host: `state.declare-with-ttl` takes a TimeDomain, got {ttl.domain!r}"
        )
    if not isinstance(ttl.refresh, TtlRefresh):
        raise TypeError(
            f"weir host: `state.declare-with-ttl` takes a TtlRefresh, got {ttl.refresh!r}"
        )
    if millis == 0:
        raise Err(
            Error(f"state `{name}`: a time-to-live must be longer than 0 ms", ErrorKind.FAILED)
        )


_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_U64 = 2**64 - 1


@functools.lru_cache(maxsize=1 << 16)
def key_hash(key):
    """The 64-bit FNV-1a hash of `key` (bytes, or `str` as UTF-8), as the engine computes
    it (`stable_hash` in host/src/state/mod.rs): where the key's timers go among the
    timers due at the same time."""
    if isinstance(key, str):
        key = key.encode()
    h = _FNV_OFFSET
    for byte in key:
        h = ((h ^ byte) * _FNV_PRIME) & _U64
    return h


class _Timers:
    """The timers of one domain: unique (timestamp, key) pairs, fired in the engine's
    order, (timestamp, `key_hash(key)`, key).

    Event-time timers (`staged=False`) are popped one at a time, always the first pending
    one, so a due timer registered while timers fire takes its place among them, as in
    the engine's ordered set. Processing-time timers (`staged=True`) are taken as the
    engine's timing wheel hands them over: when none is staged, every due one is staged
    at once, in order, and they fire one by one; one registered meanwhile waits until the
    staged ones have fired, even if it sorts before them, and a staged one can still be
    deleted (host/src/time/timers.rs)."""

    __slots__ = ("live", "heap", "staged", "staging")

    def __init__(self, staged=False):
        self.live = set()  # (timestamp, hash, key) not staged
        self.heap = []  # may hold deleted entries; `live` decides
        self.staged = deque()  # due processing-time timers taken off, in firing order
        self.staging = staged

    @staticmethod
    def _entry(at, key):
        return (at, key_hash(key), key)

    def add(self, at, key):
        entry = self._entry(at, key)
        if entry not in self.live and entry not in self.staged:
            self.live.add(entry)
            heapq.heappush(self.heap, entry)

    def remove(self, at, key):
        entry = self._entry(at, key)
        if entry in self.staged:
            self.staged.remove(entry)
        else:
            self.live.discard(entry)

    def _pop_live(self, upto):
        heap = self.heap
        while heap:
            entry = heap[0]
            if entry not in self.live:
                heapq.heappop(heap)
            elif entry[0] <= upto:
                heapq.heappop(heap)
                self.live.remove(entry)
                return entry
            else:
                return None
        return None

    def pop_due(self, upto):
        """The next timer to fire at `upto`, as `(timestamp, key)`, or None."""
        if self.staging:
            if not self.staged:
                while (entry := self._pop_live(upto)) is not None:
                    self.staged.append(entry)
            entry = self.staged.popleft() if self.staged else None
        else:
            entry = self._pop_live(upto)
        return None if entry is None else (entry[0], entry[2])

    def sorted(self):
        """`(timestamp, key)` of every pending timer, in firing order."""
        return [(at, key) for at, _, key in (*self.staged, *sorted(self.live))]


class World:
    """The in-memory host: keyed state, timers, clocks, outputs and logs."""

    def __init__(self, processing_time=0, print_logs=False):
        self.phase = _IDLE
        self.key = None  # the current key (bytes) in the keyed phase
        self.timestamp = None  # the current element's or timer's, in the keyed phase
        self.watermark = I64_MIN
        # While an event-time timer fires: its time, the clock event-time entries expire
        # by (an entry is visible to every timer before its expiry, however far the
        # watermark jumped). None: they expire by the watermark.
        self.event_clock = None
        self.processing_time = processing_time
        self.states = []  # (name, kind) by state id
        self.data = {}  # key -> {state id -> bytes | [bytes] | {bytes: bytes}}, non-empty only
        self.ttls = {}  # state id -> StateTtl, for the states declared with one
        # (key, state id) -> the stamps of its entries, shaped as its data (int | [int] |
        # {bytes: int}), for the states with a time-to-live only
        self.stamps = {}
        # Per domain, no entry expires before this: `expire` looks only once a clock
        # reaches it (a lower bound; restamping an entry leaves it lower than needed).
        self._earliest = {TimeDomain.EVENT_TIME: _NEVER, TimeDomain.PROCESSING_TIME: _NEVER}
        self.outputs = []  # names by output id
        self.emitted = []  # [Emitted] by output id
        self.pending = []  # (output id, Emitted) of the running call
        self.timers = {
            TimeDomain.EVENT_TIME: _Timers(),
            TimeDomain.PROCESSING_TIME: _Timers(staged=True),
        }
        self.logs = []
        self.print_logs = print_logs
        self.rejected = None  # the running call's `dead-letters.reject` reason

    # --- phases ------------------------------------------------------------------------

    def begin(self, phase, key=None, timestamp=None):
        if phase == _KEYED:  # no element or timer call sees an expired entry
            self.expire()
        self.phase, self.key, self.timestamp = phase, key, timestamp
        self.rejected = None

    def reject(self, reason):
        if self.phase != _KEYED:
            raise HostTrap(
                "weir host: `dead-letters.reject` called outside process_element/on_timer "
                "(the host traps)"
            )
        if self.rejected is None:
            self.rejected = str(reason)

    def save(self):
        """The state and timers as they are, for `restore`."""
        return copy.deepcopy((self.data, self.stamps, self._earliest, self.timers))

    def restore(self, saved):
        """Takes state and timers back to `saved`, as the host takes back a rejected call."""
        self.data, self.stamps, self._earliest, self.timers = saved

    def end_call(self, succeeded):
        """Ends a call: its records reach the outputs if it succeeded, and are dropped
        with it if it failed, as the host does."""
        self.phase, self.key, self.timestamp = _IDLE, None, None
        # What the call wrote may have expired already (written at the end of time), and
        # must not show between calls either.
        self.expire()
        if succeeded:
            for output_id, record in self.pending:
                self.emitted[output_id].append(record)
        self.pending.clear()

    def _key(self, call):
        if self.phase == _KEYED:
            return self.key
        if self.phase == _INIT:
            raise HostTrap(
                f"weir host: `{call}` called from init; keyed state and timers are scoped to "
                "the current key and only usable in process_element and on_timer (the host "
                "traps)"
            )
        raise HostTrap(
            f"weir host: `{call}` called outside process_element/on_timer; keyed state and "
            "timers need a current key (the host traps)"
        )

    # --- state -------------------------------------------------------------------------

    def declare_state(self, name, kind, ttl=None):
        """Declares (or looks up) state `name`; `ttl` (a `types.StateTtl`, or None) is
        its time-to-live from now on: the last declaration of a name sets it."""
        if not name:
            raise Err(Error("a state needs a non-empty name", ErrorKind.FAILED))
        if ttl is not None:
            _check_ttl(name, ttl)
        for state_id, (n, k) in enumerate(self.states):
            if n == name:
                if k != kind:
                    raise Err(
                        Error(
                            f"state `{name}` is a {_KIND_NAMES[k]} state, declared again as a "
                            f"{_KIND_NAMES[kind]} state",
                            ErrorKind.FAILED,
                        )
                    )
                break
        else:
            self.states.append((name, kind))
            state_id = len(self.states) - 1
        self._set_ttl(state_id, ttl)
        return state_id

    def _set_ttl(self, state_id, ttl):
        """Gives `state_id` the time-to-live `ttl` (None: none). Entries without a stamp
        (the state had no time-to-live, or one of the other clock) get the current
        call's; dropping the time-to-live drops the stamps and keeps every live entry."""
        old = self.ttls.get(state_id)
        if ttl is None:
            if old is not None:
                del self.ttls[state_id]
                for key_state in [ks for ks in self.stamps if ks[1] == state_id]:
                    del self.stamps[key_state]
            return
        ttl = StateTtl(ttl.millis, ttl.domain, ttl.refresh)  # the caller's may change
        self.ttls[state_id] = ttl
        if old is None or old.domain is not ttl.domain:
            now = self._ttl_now(ttl)
            for key, slots in self.data.items():
                data = slots.get(state_id)
                if data is not None:
                    self.stamps[(key, state_id)] = self._fresh_stamps(data, now)
        self._earliest[ttl.domain] = I64_MIN  # deadlines changed: look at them all
        self.expire()

    @staticmethod
    def _fresh_stamps(data, now):
        """Stamps for every entry of a state's `data`, all `now`."""
        if isinstance(data, list):
            return [now] * len(data)
        if isinstance(data, dict):
            return dict.fromkeys(data, now)
        return now

    def _ttl_now(self, ttl):
        """The time of the current call on `ttl`'s clock: for event time the timestamp of
        the element or timer, or the watermark if that is later (outside an element or
        timer call, the watermark); for processing time the clock."""
        if ttl.domain is TimeDomain.EVENT_TIME:
            if self.phase == _KEYED and self.timestamp is not None:
                return max(self.timestamp, self.watermark)
            return self.watermark
        return self.processing_time

    def _stamp(self, state_id):
        """The stamp an entry of `state_id` written (or refreshed) now gets, or None if
        the state has no time-to-live."""
        ttl = self.ttls.get(state_id)
        if ttl is None:
            return None
        now = self._ttl_now(ttl)
        deadline = _deadline(now, ttl.millis)
        if deadline < self._earliest[ttl.domain]:
            self._earliest[ttl.domain] = deadline
        return now

    def _refreshes_on_read(self, state_id):
        ttl = self.ttls.get(state_id)
        return ttl is not None and ttl.refresh is TtlRefresh.ON_READ_AND_WRITE

    def expire(self):
        """Removes every expired entry: those whose stamp + `millis` the clock of their
        state's domain has reached. A state left empty is gone, as if cleared."""
        if not self.ttls:
            return
        clocks = {
            TimeDomain.EVENT_TIME: self.watermark if self.event_clock is None else self.event_clock,
            TimeDomain.PROCESSING_TIME: self.processing_time,
        }
        due = {domain for domain, clock in clocks.items() if clock >= self._earliest[domain]}
        if not due:
            return
        for domain in due:
            self._earliest[domain] = _NEVER
        for (key, state_id), stamps in list(self.stamps.items()):
            ttl = self.ttls[state_id]
            if ttl.domain not in due:
                continue
            clock, millis = clocks[ttl.domain], ttl.millis
            slots = self.data[key]
            data = slots[state_id]
            if isinstance(stamps, list):
                kept = [(item, s) for item, s in zip(data, stamps) if clock < _deadline(s, millis)]
                data = [item for item, _ in kept]
                stamps = [s for _, s in kept]
                alive = stamps
            elif isinstance(stamps, dict):
                stamps = {k: s for k, s in stamps.items() if clock < _deadline(s, millis)}
                data = {k: v for k, v in data.items() if k in stamps}
                alive = stamps.values()
            else:
                alive = [stamps] if clock < _deadline(stamps, millis) else []
            if alive:
                slots[state_id] = data
                self.stamps[(key, state_id)] = stamps
                earliest = _deadline(min(alive), millis)
                if earliest < self._earliest[ttl.domain]:
                    self._earliest[ttl.domain] = earliest
            else:
                del self.stamps[(key, state_id)]
                del slots[state_id]
                if not slots:
                    del self.data[key]

    def _slot(self, state_id, kind, call):
        """The current key's data of `state_id` (None if empty), checked for kind."""
        if not isinstance(state_id, int) or not 0 <= state_id < len(self.states):
            raise HostTrap(f"weir host: `{call}` on undeclared state id {state_id} (the host traps)")
        name, k = self.states[state_id]
        if kind is not None and k != kind:
            raise HostTrap(
                f"weir host: `{call}` on state `{name}`, which is a {_KIND_NAMES[k]} state "
                "(the host traps)"
            )
        slots = self.data.get(self._key(call))
        return None if slots is None else slots.get(state_id)

    def _store(self, key, state_id, data, stamps=None):
        """Stores `data` as `key`'s state `state_id` with `stamps` (None: no
        time-to-live); None, or an empty list or map, removes it, as the host keeps no
        empty list or map."""
        if data is None or (not data and not isinstance(data, bytes)):
            slots = self.data.get(key)
            if slots is not None:
                slots.pop(state_id, None)
                if not slots:
                    del self.data[key]
            self.stamps.pop((key, state_id), None)
            return
        self.data.setdefault(key, {})[state_id] = data
        if stamps is None:
            self.stamps.pop((key, state_id), None)
        else:
            self.stamps[(key, state_id)] = stamps

    def plant(self, key, state_id, data):
        """Stores `data` as `key`'s state `state_id` from outside a call (a test
        planting state): with a time-to-live, every entry is stamped now."""
        if self.states[state_id][1] is StateKind.VALUE and data is not None:
            data = bytes(data)
        else:
            data = data or None
        stamp = None if data is None else self._stamp(state_id)
        self._store(key, state_id, data, None if stamp is None else self._fresh_stamps(data, stamp))

    def value_get(self, state_id):
        value = self._slot(state_id, StateKind.VALUE, "state.value-get")
        if value is not None and self._refreshes_on_read(state_id):
            self.stamps[(self.key, state_id)] = self._stamp(state_id)
        return value

    def value_set(self, state_id, value):
        self._slot(state_id, StateKind.VALUE, "state.value-set")
        value = _check_bytes("state.value-set", "the value", value)
        self._store(self.key, state_id, value, self._stamp(state_id))  # b"" is a value too

    def list_get(self, state_id):
        items = list(self._slot(state_id, StateKind.LIST, "state.list-get") or ())
        if items and self._refreshes_on_read(state_id):
            self.stamps[(self.key, state_id)] = [self._stamp(state_id)] * len(items)
        return items

    def list_append(self, state_id, item):
        items = list(self._slot(state_id, StateKind.LIST, "state.list-append") or ())
        items.append(_check_bytes("state.list-append", "the item", item))
        stamp = self._stamp(state_id)
        if stamp is not None:
            stamp = [*self.stamps.get((self.key, state_id), ()), stamp]
        self._store(self.key, state_id, items, stamp)

    def list_set(self, state_id, items):
        self._slot(state_id, StateKind.LIST, "state.list-set")
        items = [_check_bytes("state.list-set", "items", i) for i in items]
        stamp = self._stamp(state_id) if items else None
        self._store(self.key, state_id, items, None if stamp is None else [stamp] * len(items))

    def map_get(self, state_id, key):
        m = self._slot(state_id, StateKind.MAP, "state.map-get") or {}
        key = _check_bytes("state.map-get", "the key", key)
        value = m.get(key)
        if value is not None and self._refreshes_on_read(state_id):
            self.stamps[(self.key, state_id)][key] = self._stamp(state_id)
        return value

    def map_put(self, state_id, key, value):
        m = dict(self._slot(state_id, StateKind.MAP, "state.map-put") or {})
        key = _check_bytes("state.map-put", "the key", key)
        m[key] = _check_bytes("state.map-put", "the value", value)
        stamp = self._stamp(state_id)
        if stamp is not None:
            stamp = {**self.stamps.get((self.key, state_id), {}), key: stamp}
        self._store(self.key, state_id, m, stamp)

    def map_remove(self, state_id, key):
        m = dict(self._slot(state_id, StateKind.MAP, "state.map-remove") or {})
        key = _check_bytes("state.map-remove", "the key", key)
        m.pop(key, None)
        stamps = self.stamps.get((self.key, state_id))
        if stamps is not None:
            stamps = {k: s for k, s in stamps.items() if k != key}
        self._store(self.key, state_id, m, stamps)

    def map_entries(self, state_id):
        m = self._slot(state_id, StateKind.MAP, "state.map-entries") or {}
        if m and self._refreshes_on_read(state_id):
            self.stamps[(self.key, state_id)] = dict.fromkeys(m, self._stamp(state_id))
        return sorted(m.items())

    def clear(self, state_id):
        self._slot(state_id, None, "state.clear")
        self._store(self.key, state_id, None)

    def clear_all(self):
        key = self._key("state.clear-all")
        for state_id in list(self.data.get(key, ())):
            self._store(key, state_id, None)

    # --- timers and clocks -------------------------------------------------------------

    def _timers(self, domain, call):
        timers = self.timers.get(domain)
        if timers is None:
            raise TypeError(f"weir host: `{call}` takes a weir.TimeDomain, got {domain!r}")
        return timers

    def register_timer(self, domain, at):
        key = self._key("timers.register")
        _check_i64("timers.register", "timestamp", at)
        self._timers(domain, "timers.register").add(at, key)

    def delete_timer(self, domain, at):
        key = self._key("timers.delete")
        _check_i64("timers.delete", "timestamp", at)
        self._timers(domain, "timers.delete").remove(at, key)

    def pop_due_timer(self, domain, upto):
        """Removes and returns the next timer of `domain` to fire at `upto` (see
        `_Timers`), as `(timestamp, key)`, or None."""
        return self.timers[domain].pop_due(upto)

    def pending_timers(self):
        """`(key, domain, timestamp)` of the timers not yet fired, event time first,
        each domain in firing order."""
        return [
            (key, domain, ts)
            for domain in (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME)
            for ts, key in self.timers[domain].sorted()
        ]

    # --- outputs and logs --------------------------------------------------------------

    def declare_output(self, name):
        # Looking up a declared output is fine anywhere; declaring a new one only in init.
        if name in self.outputs:
            return self.outputs.index(name)
        if self.phase != _INIT:
            raise Err(Error(f"output `{name}` must be declared in init", ErrorKind.FAILED))
        if not name:
            raise Err(Error("an output needs a non-empty name", ErrorKind.FAILED))
        self.outputs.append(name)
        self.emitted.append([])
        return len(self.outputs) - 1

    def emit(self, output_id, value, key, timestamp):
        if self.phase != _KEYED:
            raise HostTrap(
                "weir host: `output.emit` called outside process_element/on_timer (the host "
                "traps)"
            )
        if not isinstance(output_id, int) or not 0 <= output_id < len(self.outputs):
            raise HostTrap(
                f"weir host: `output.emit` to undeclared output id {output_id} (the host traps)"
            )
        value = _check_bytes("output.emit", "the value", value)
        if key is not None:
            key = _check_bytes("output.emit", "the key", key)
        if timestamp is not None:
            _check_i64("output.emit", "timestamp", timestamp)
        try:
            parsed = json.loads(value)
        except ValueError as e:
            raise HostTrap(
                f"weir host: output `{self.outputs[output_id]}` got a record that is not JSON "
                f"({e}): {value.decode(errors='replace')}"
            ) from None
        ts = self.timestamp if timestamp is None else timestamp
        self.pending.append((output_id, Emitted(parsed, ts, key)))

    def output_id(self, name):
        try:
            return self.outputs.index(name)
        except ValueError:
            raise ValueError(
                f"TestHost: output `{name}` was not declared; declared outputs: {self.outputs}"
            ) from None

    def log(self, level, message):
        key = self.key if self.phase == _KEYED else None
        self.logs.append(LogLine(level, key, message))
        if self.print_logs:
            where = "" if key is None else f" key={key.decode(errors='replace')}"
            print(f"[{level.name}]{where} {message}", file=sys.stderr)

    # --- inspection --------------------------------------------------------------------

    def state_id(self, name):
        for state_id, (n, _) in enumerate(self.states):
            if n == name:
                return state_id
        return None


# --- the imports -------------------------------------------------------------------------

_active = [None]  # the World of the call being run


def install(world):
    """Makes `world` the host of the calls that follow (None: no host); returns the one
    it replaces."""
    previous, _active[0] = _active[0], world
    return previous


def _world(call):
    world = _active[0]
    if world is None:
        raise RuntimeError(
            f"weir: `{call}` needs a host: it works inside a wasm component, or natively "
            "inside a call run by weir.testing.TestHost"
        )
    return world


def _declare_state(name, kind):
    return _world("state.declare").declare_state(name, kind)


def _declare_state_with_ttl(name, kind, ttl):
    return _world("state.declare-with-ttl").declare_state(name, kind, ttl)


def _value_get(state_id):
    return _world("state.value-get").value_get(state_id)


def _value_set(state_id, value):
    _world("state.value-set").value_set(state_id, value)


def _list_get(state_id):
    return _world("state.list-get").list_get(state_id)


def _list_append(state_id, item):
    _world("state.list-append").list_append(state_id, item)


def _list_set(state_id, items):
    _world("state.list-set").list_set(state_id, items)


def _map_get(state_id, key):
    return _world("state.map-get").map_get(state_id, key)


def _map_put(state_id, key, value):
    _world("state.map-put").map_put(state_id, key, value)


def _map_remove(state_id, key):
    _world("state.map-remove").map_remove(state_id, key)


def _map_entries(state_id):
    return _world("state.map-entries").map_entries(state_id)


def _clear(state_id):
    _world("state.clear").clear(state_id)


def _clear_all():
    _world("state.clear-all").clear_all()


def _register(domain, at):
    _world("timers.register").register_timer(domain, at)


def _delete(domain, at):
    _world("timers.delete").delete_timer(domain, at)


def _current_watermark():
    return _world("timers.current-watermark").watermark


def _current_processing_time():
    return _world("timers.current-processing-time").processing_time


def _declare_output(name):
    return _world("output.declare").declare_output(name)


def _emit(output_id, value, key, timestamp):
    _world("output.emit").emit(output_id, value, key, timestamp)


def _log(level, message):
    _world("logging.log").log(level, message)


state = SimpleNamespace(
    declare=_declare_state,
    declare_with_ttl=_declare_state_with_ttl,
    value_get=_value_get,
    value_set=_value_set,
    list_get=_list_get,
    list_append=_list_append,
    list_set=_list_set,
    map_get=_map_get,
    map_put=_map_put,
    map_remove=_map_remove,
    map_entries=_map_entries,
    clear=_clear,
    clear_all=_clear_all,
)
timers = SimpleNamespace(
    register=_register,
    delete=_delete,
    current_watermark=_current_watermark,
    current_processing_time=_current_processing_time,
)
output = SimpleNamespace(declare=_declare_output, emit=_emit)
logging = SimpleNamespace(log=_log)


def _reject(reason):
    _world("dead-letters.reject").reject(reason)


dead_letters = SimpleNamespace(reject=_reject)
