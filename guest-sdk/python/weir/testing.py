"""An in-memory Weir host for unit-testing UDFs with plain CPython: no wasm, no
componentize-py. The Python counterpart of the Rust SDK's `weir_sdk::testing::TestHost`.

`TestHost` drives a `weir.ProcessFunction` subclass under the host's rules: it calls
`init`, scopes state and timers to the key of each element or timer, fires event-time
timers when the watermark advances and processing-time timers when its clock does, and
records what the UDF emits and logs. Timers due at the same time fire in the order
"Event time and timers" in docs/pipeline.md gives: by timestamp, then by the FNV-1a hash
of the key's bytes (`key_hash`), then by the bytes. The UDF runs on the same SDK code as in
a component; only the host's imports are replaced (see `weir._native`). What differs from
the real host: the watermark and the processing-time clock move only when the test moves
them, and each element and timer is its own call (the host batches them).

    import unittest
    from weir.testing import Emitted, TestHost
    from weir.time import parse_millis

    import app

    class CounterTest(unittest.TestCase):
        def test_counts(self):
            host = TestHost(app.ChangeOnlyCounter, config={"window": "5m"}, inputs=["clicks"])
            host.process("clicks", "ad-1", {"ad_id": "ad-1"}, 1_000)
            host.advance_watermark(400_000)
            self.assertEqual(host.take_outputs("main"), [
                Emitted({"ad_id": "ad-1", "clicks": 1, ...}, 1_000, key="ad-1"), ...])

Exceptions the UDF raises come out of the call that ran it (`process`, `advance_watermark`,
`TestHost(...)` for `init`, ...) as they are: `weir.Error`, `weir.StateDecodeError` (the
host would dead-letter that element), or any other. The records a failed call emitted are
dropped, as the host does. A call that raises `weir.Reject` is taken back whole (records,
state writes, timers) and listed by `rejected()`, as the host dead-letters it. Breaking one of the host's rules (state used in `init`, an
output declared elsewhere, a record that is not JSON) raises `HostTrap`.

States declared with a time-to-live (`ttl=weir.StateTtl...`) expire as in the host: an
entry expires once the watermark (event time) or the processing-time clock reaches the
time of the call that last wrote it (or read it, with `refresh_on_read`) plus the
time-to-live. Expired entries are removed before every element and timer call and when
`advance_watermark`, `set_processing_time` or `finish` moves a clock, so `state`,
`has_state` and the other inspection calls never show one. State planted with
`set_state_bytes` and the like is stamped as if written then (event time: at the
watermark).

Keys are `str` (stored as UTF-8) or `bytes`; `Emitted.key` and the keys of
`pending_timers()` and `keys_with_state()` are `bytes`. Times are `int` milliseconds.
"""

import json
from dataclasses import dataclass

from . import _native
from ._export import ProcessFunction
from ._native import Emitted, HostTrap, LogLine, TimeDomain, key_hash
from .codec import to_json
from .context import Context, Element, InitContext, Timer, _rejection
from .state import _split

__all__ = ["TestHost", "Emitted", "LogLine", "Rejected", "HostTrap", "key_hash"]


@dataclass
class Rejected:
    """An element or timer the UDF rejected (`weir.Reject`): its key (bytes), its
    timestamp and the reason. The host would write it to the dead-letter output and
    take back everything its call did."""

    key: bytes
    timestamp: int
    reason: str

#: How many timers may fire in one advance before the TestHost calls it a loop.
FIRING_LIMIT = 1_000_000


def _key_bytes(key):
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode()  # as the host extracts a JSON number key
    raise TypeError(f"TestHost: a key is str or bytes, got {type(key).__name__}")


def _value_bytes(value):
    """An element's value as a test gives it: `bytes` or `str` (JSON text) as they are,
    anything else (dict, list, number, ...) written as compact JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    return to_json(value).encode()


def _config_pairs(config):
    """`[udf.config]` as the host passes it: text values. Non-text values are written as
    the host writes TOML ones (`3`, `true`, JSON for lists and tables)."""
    items = config.items() if isinstance(config, dict) else config
    return [(str(k), v if isinstance(v, str) else to_json(v)) for k, v in items]


def _udf_class(udf):
    cls = getattr(udf, "udf_class", udf)  # the class weir.export returned, or the UDF's
    if not (isinstance(cls, type) and issubclass(cls, ProcessFunction)):
        raise TypeError(f"TestHost: {udf!r} is not a subclass of weir.ProcessFunction")
    return cls


class TestHost:
    """An in-memory host running one UDF instance; see the module docs.

    `TestHost(MyFunction, config={"gap": "30s"}, inputs=["events"], processing_time=0)`
    creates the instance and calls its `init` (whose exception, if any, comes out here).
    `udf` is the `weir.ProcessFunction` subclass (or the class `weir.export` made of it);
    `config` a dict (or pairs) of `[udf.config]` entries; `inputs` the names of the
    connected inputs (default `["main"]`); `processing_time` the clock's start (ms).
    With `print_logs=True` the UDF's log lines are also printed to stderr.
    """

    __test__ = False  # not a test class, for pytest

    def __init__(self, udf, config=None, inputs=("main",), processing_time=0, print_logs=False):
        self._cls = _udf_class(udf)
        self._config = _config_pairs(config or {})
        if isinstance(inputs, str):
            inputs = [inputs]
        self._inputs = list(inputs)
        self._world = _native.World(processing_time, print_logs)
        self._rejected = []
        #: The UDF instance (replaced by `reinit`).
        self.udf = self._init()

    # --- running calls -------------------------------------------------------------------

    def _run(self, phase, key, timestamp, call, *args):
        """Runs `call(*args)` in `phase` (scoped to `key` at `timestamp`), as the host
        runs each call; a failed call's records are dropped. A keyed call that raises
        `weir.Reject` is taken back whole (records, state, timers) and listed in
        `rejected()`, and does not raise."""
        world = self._world
        previous = _native.install(world)
        saved = world.save() if phase == _native._KEYED else None
        world.begin(phase, key, timestamp)
        ok = False
        try:
            result = call(*args)
            ok = True
            return result
        except Exception as e:
            rejection = _rejection(e) if saved is not None else None
            if rejection is None:
                raise
            world.restore(saved)
            self._rejected.append(Rejected(key, timestamp, rejection.reason))
            return None
        finally:
            world.end_call(ok)
            _native.install(previous)

    def rejected(self):
        """The elements and timers the UDF rejected so far (`weir.Reject`), in order:
        `Rejected(key, timestamp, reason)` each."""
        return list(self._rejected)

    def _init(self):
        def init():
            udf = self._cls()
            udf.init(InitContext(self._config, self._inputs))
            return udf

        return self._run(_native._INIT, None, None, init)

    def reinit(self):
        """Replaces the instance with a fresh one (calling `init` again) while keeping all
        state, timers and outputs, as the real host may at any time. Use it to check that
        the UDF keeps nothing important in `self`."""
        self.udf = self._init()

    def process(self, input, key, value, timestamp):  # noqa: A002 - the host's word
        """Feeds one element from `input` (one of `inputs`), with the key and event
        timestamp the host would have extracted. `value` is the record: a dict, list or
        other JSON value (written as compact JSON), or `str`/`bytes` of JSON text, passed
        as they are. Raises what the UDF raised."""
        try:
            index = self._inputs.index(input)
        except ValueError:
            raise ValueError(
                f"TestHost: unknown input `{input}`; inputs are {self._inputs}"
            ) from None
        key = _key_bytes(key)
        value = _value_bytes(value)
        _native._check_i64("TestHost.process", "timestamp", timestamp)
        element = Element(self._inputs[index], index, key, value, timestamp)
        self._run(
            _native._KEYED, key, timestamp,
            self.udf.process_element, Context(key, timestamp), element,
        )

    def _fire_due(self, domain, upto):
        """Fires due timers of `domain` one at a time, in the engine's order, so that
        timers registered while firing are picked up too. Returns how many fired."""
        world = self._world
        fired = 0
        while True:
            due = world.pop_due_timer(domain, upto)
            if due is None:
                return fired
            ts, key = due
            if domain is TimeDomain.PROCESSING_TIME:
                world.processing_time = max(world.processing_time, ts)
            else:
                # Event-time entries expire by the timer's time, not the watermark's.
                world.event_clock = ts
            try:
                self._run(
                    _native._KEYED, key, ts,
                    self.udf.on_timer, Context(key, ts), Timer(domain, ts, key),
                )
            finally:
                world.event_clock = None
            fired += 1
            if fired == FIRING_LIMIT:
                raise RuntimeError(
                    f"TestHost: {FIRING_LIMIT} {domain.name} timers fired in one go; the UDF "
                    "keeps registering due timers while firing (the host would never finish)"
                )

    def advance_watermark(self, watermark):
        """Advances the watermark to `watermark` if that is later than the current one,
        then fires every event-time timer at or before it, including timers registered
        while firing, always the first pending one in (timestamp, key hash, key) order;
        then removes the event-time state entries that expired (time-to-live). Expiry and
        timers interleave by time, as in the host: a timer at `t` sees every entry that
        expires after `t`, however far the watermark jumped. Timers registered at or
        before an unchanged watermark wait for its next advance, as in the host."""
        _native._check_i64("TestHost.advance_watermark", "watermark", watermark)
        if watermark <= self._world.watermark:
            return
        self._world.watermark = watermark
        self._fire_due(TimeDomain.EVENT_TIME, watermark)
        self._world.expire()

    def set_processing_time(self, now):
        """Moves the processing-time clock to `now` (it never goes back), removes the
        processing-time state entries that expired (time-to-live), then fires every
        processing-time timer at or before the clock, overdue ones included, as the host
        does when it looks at its wall clock between elements: the due ones in
        (timestamp, key hash, key) order, then those registered meanwhile that are due."""
        _native._check_i64("TestHost.set_processing_time", "time", now)
        world = self._world
        world.processing_time = max(world.processing_time, now)
        world.expire()
        self._fire_due(TimeDomain.PROCESSING_TIME, world.processing_time)

    def finish(self):
        """Ends the input as the host does: the watermark goes to `weir.MAX_TIMESTAMP`,
        firing every event-time timer, then every processing-time timer fires (the clock
        moving to each), then the event-time timers those registered, and so on until
        none is left."""
        end = _native.I64_MAX
        self._world.watermark = end
        self._fire_due(TimeDomain.EVENT_TIME, end)
        self._world.expire()
        while self._fire_due(TimeDomain.PROCESSING_TIME, end) + self._fire_due(
            TimeDomain.EVENT_TIME, end
        ):
            pass

    # --- what came out -------------------------------------------------------------------

    def outputs(self, name):
        """The records emitted to output `name` so far, as `Emitted(value, timestamp,
        key)`: the value parsed from JSON, the timestamp the UDF gave or else the
        element's or timer's, the key as bytes or None. Raises `ValueError` if the UDF did
        not declare the output."""
        return list(self._world.emitted[self._world.output_id(name)])

    def take_outputs(self, name):
        """Like `outputs`, and forgets them, for checking step by step."""
        emitted = self._world.emitted[self._world.output_id(name)]
        taken = list(emitted)
        emitted.clear()
        return taken

    def logs(self):
        """Everything the UDF logged so far, as `LogLine(level, key, message)`."""
        return list(self._world.logs)

    def pending_timers(self):
        """The timers not yet fired as `(key, domain, timestamp)` (key as bytes): event-time
        ones first, each domain in firing order."""
        return self._world.pending_timers()

    def watermark(self):
        """The current watermark (`weir.MIN_TIMESTAMP` before the first advance)."""
        return self._world.watermark

    def processing_time(self):
        """The processing-time clock."""
        return self._world.processing_time

    # --- state ---------------------------------------------------------------------------

    def has_state(self, key):
        """Whether `key` holds any state, to check that the UDF cleans up after itself."""
        return _key_bytes(key) in self._world.data

    def keys_with_state(self):
        """The keys that hold any state, sorted by bytes."""
        return sorted(self._world.data)

    def _state_id(self, name):
        state_id = self._world.state_id(name)
        if state_id is None:
            declared = [n for n, _ in self._world.states]
            raise ValueError(f"TestHost: no state `{name}` was declared; declared: {declared}")
        return state_id

    def _state_id_of_kind(self, name, kind):
        state_id = self._state_id(name)
        if self._world.states[state_id][1] is not kind:
            kind_name = _native._KIND_NAMES[kind]
            raise ValueError(f"TestHost: state `{name}` is not a {kind_name} state")
        return state_id

    def _set_slot(self, key, state_id, data):
        """Stores `data` as `key`'s state `state_id`; empty, it removes it, as the host
        keeps no empty list or map. With a time-to-live, every entry is stamped as if
        written now (outside a call: at the watermark, or the processing time)."""
        self._world.plant(_key_bytes(key), state_id, data)

    def state(self, key, name, codec=None, key_codec=None):
        """The content of state `name` for `key`, whatever schema version it was written
        under: a value state's value or None, a list state's items, a map state's
        `(key, value)` pairs in key-byte order. Values are decoded with `codec` and map
        keys with `key_codec`, by default as JSON (the SDK's default codec, so that a
        dataclass comes back as a dict). The raw bytes are in `state_bytes`,
        `list_state_bytes` and `map_state_bytes`."""
        state_id = self._state_id(name)
        kind = self._world.states[state_id][1]
        data = self._world.data.get(_key_bytes(key), {}).get(state_id)
        reader = {
            _native.StateKind.VALUE: "state_bytes",
            _native.StateKind.LIST: "list_state_bytes",
            _native.StateKind.MAP: "map_state_bytes",
        }[kind]

        def decode(raw, codec=codec):
            _, raw = _split(raw)  # without the schema tag and version, if any
            if codec is not None:
                return codec.decode(raw)
            try:
                return json.loads(raw)
            except ValueError as e:
                raise ValueError(
                    f"TestHost: state `{name}` holds bytes that are not JSON ({e}); read "
                    f"them with {reader}"
                ) from None

        if kind is _native.StateKind.VALUE:
            return None if data is None else decode(data)
        if kind is _native.StateKind.LIST:
            return [decode(item) for item in data or ()]
        return [(decode(k, key_codec), decode(v)) for k, v in sorted((data or {}).items())]

    def state_bytes(self, key, name):
        """The stored bytes of value state `name` for `key` (as the host keeps them), or
        None."""
        data = self._world.data.get(_key_bytes(key), {}).get(self._state_id(name))
        return data if isinstance(data, bytes) else None

    def set_state_bytes(self, key, name, data):
        """Sets the stored bytes of value state `name` for `key`: state as an earlier
        version of the UDF left it, to test a migration."""
        state_id = self._state_id_of_kind(name, _native.StateKind.VALUE)
        self._world.plant(_key_bytes(key), state_id, bytes(data))

    def list_state_bytes(self, key, name):
        """The stored items of list state `name` for `key`, as bytes, oldest first (an
        empty list if none)."""
        state_id = self._state_id_of_kind(name, _native.StateKind.LIST)
        return list(self._world.data.get(_key_bytes(key), {}).get(state_id, ()))

    def set_list_state_bytes(self, key, name, items):
        """Sets the stored items (`bytes` each) of list state `name` for `key`: state as
        an earlier version of the UDF left it, to test a migration. An empty list
        clears it."""
        state_id = self._state_id_of_kind(name, _native.StateKind.LIST)
        call = "TestHost.set_list_state_bytes"
        self._set_slot(key, state_id, [_native._check_bytes(call, "items", i) for i in items])

    def map_state_bytes(self, key, name):
        """The stored entries of map state `name` for `key`, as a dict from key bytes to
        value bytes, in key-byte order (empty if none)."""
        state_id = self._state_id_of_kind(name, _native.StateKind.MAP)
        return dict(sorted(self._world.data.get(_key_bytes(key), {}).get(state_id, {}).items()))

    def set_map_state_bytes(self, key, name, entries):
        """Sets the stored entries of map state `name` for `key` (a dict, or
        `(key bytes, value bytes)` pairs): state as an earlier version of the UDF left
        it, to test a migration. No entries clears it."""
        state_id = self._state_id_of_kind(name, _native.StateKind.MAP)
        call = "TestHost.set_map_state_bytes"
        items = entries.items() if isinstance(entries, dict) else entries
        self._set_slot(key, state_id, {
            _native._check_bytes(call, "a key", k): _native._check_bytes(call, "a value", v)
            for k, v in items
        })
