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
"""

import enum
import functools
import heapq
import json
import sys
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace

__all__ = ["Err", "types", "state", "timers", "output", "logging", "HostTrap", "World"]

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
        self.processing_time = processing_time
        self.states = []  # (name, kind) by state id
        self.data = {}  # key -> {state id -> bytes | [bytes] | {bytes: bytes}}, non-empty only
        self.outputs = []  # names by output id
        self.emitted = []  # [Emitted] by output id
        self.pending = []  # (output id, Emitted) of the running call
        self.timers = {
            TimeDomain.EVENT_TIME: _Timers(),
            TimeDomain.PROCESSING_TIME: _Timers(staged=True),
        }
        self.logs = []
        self.print_logs = print_logs

    # --- phases ------------------------------------------------------------------------

    def begin(self, phase, key=None, timestamp=None):
        self.phase, self.key, self.timestamp = phase, key, timestamp

    def end_call(self, succeeded):
        """Ends a call: its records reach the outputs if it succeeded, and are dropped
        with it if it failed, as the host does."""
        self.phase, self.key, self.timestamp = _IDLE, None, None
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

    def declare_state(self, name, kind):
        if not name:
            raise Err(Error("a state needs a non-empty name", ErrorKind.FAILED))
        for state_id, (n, k) in enumerate(self.states):
            if n == name:
                if k == kind:
                    return state_id
                raise Err(
                    Error(
                        f"state `{name}` is a {_KIND_NAMES[k]} state, declared again as a "
                        f"{_KIND_NAMES[kind]} state",
                        ErrorKind.FAILED,
                    )
                )
        self.states.append((name, kind))
        return len(self.states) - 1

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

    def _set_slot(self, state_id, value):
        key = self.key
        if value:
            self.data.setdefault(key, {})[state_id] = value
        else:
            slots = self.data.get(key)
            if slots is not None:
                slots.pop(state_id, None)
                if not slots:
                    del self.data[key]

    def value_get(self, state_id):
        return self._slot(state_id, StateKind.VALUE, "state.value-get")

    def value_set(self, state_id, value):
        self._slot(state_id, StateKind.VALUE, "state.value-set")
        value = _check_bytes("state.value-set", "the value", value)
        self.data.setdefault(self.key, {})[state_id] = value  # b"" is a value too

    def list_get(self, state_id):
        return list(self._slot(state_id, StateKind.LIST, "state.list-get") or ())

    def list_append(self, state_id, item):
        items = self.list_get(state_id)
        items.append(_check_bytes("state.list-append", "the item", item))
        self._set_slot(state_id, items)

    def list_set(self, state_id, items):
        self._slot(state_id, StateKind.LIST, "state.list-set")
        self._set_slot(state_id, [_check_bytes("state.list-set", "items", i) for i in items])

    def map_get(self, state_id, key):
        m = self._slot(state_id, StateKind.MAP, "state.map-get") or {}
        return m.get(_check_bytes("state.map-get", "the key", key))

    def map_put(self, state_id, key, value):
        m = dict(self._slot(state_id, StateKind.MAP, "state.map-put") or {})
        m[_check_bytes("state.map-put", "the key", key)] = _check_bytes(
            "state.map-put", "the value", value
        )
        self._set_slot(state_id, m)

    def map_remove(self, state_id, key):
        m = dict(self._slot(state_id, StateKind.MAP, "state.map-remove") or {})
        m.pop(_check_bytes("state.map-remove", "the key", key), None)
        self._set_slot(state_id, m)

    def map_entries(self, state_id):
        m = self._slot(state_id, StateKind.MAP, "state.map-entries") or {}
        return sorted(m.items())

    def clear(self, state_id):
        self._slot(state_id, None, "state.clear")
        self._set_slot(state_id, None)

    def clear_all(self):
        self.data.pop(self._key("state.clear-all"), None)

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
