"""What the host hands a UDF: the init context (config, inputs, declarations), elements,
timers, outputs, and the per-call context (current key, timers, clocks, logging).

Names follow the Rust SDK (`weir_sdk::{InitContext, Context, Element, Timer, Output}`),
so the documentation of one reads for the other.
"""

import json

from . import _batch
from . import _bindings as _host
from .codec import JSON
from .duration import ParseDurationError, parse_duration
from .state import ListState, MapState, StateTtl, ValueState

__all__ = [
    "Error",
    "TimeDomain",
    "LogLevel",
    "InitContext",
    "Context",
    "Element",
    "Timer",
    "Output",
]

TimeDomain = _host.TimeDomain
LogLevel = _host.LogLevel
_EVENT_TIME = TimeDomain.EVENT_TIME
_PROCESSING_TIME = TimeDomain.PROCESSING_TIME
_MISSING = object()


class Error(Exception):
    """An error to report with its message alone, without a traceback: the Python
    counterpart of returning `Err(anyhow!(...))` in Rust. Raise it for expected
    failures such as bad config; any other exception is reported with its traceback."""


class Reject(Exception):  # noqa: N818 - a verdict, not an error
    """Raise it from `process_element` or `on_timer` to reject the element or timer
    being processed: `raise weir.Reject(f"cost {cost!r} is not a number")`. The host takes
    back everything the call did (emitted records, state writes, timer changes), writes
    the element to the dead-letter output with the reason, and goes on, whatever the
    pipeline's `on_error` policy. It is not a failure: a new version's probation does not
    count it. The Python counterpart of Rust's `weir::reject` and JavaScript's
    `throw new weir.Reject(...)`."""

    def __init__(self, reason):
        super().__init__(reason)
        #: The reason, the text the dead letter carries.
        self.reason = str(reason)


def _in_chain(e, cls):
    """The exception of class `cls` that is `e` or in its chain (`raise ... from`, or
    raised while handling), if there is one: the SDK looks through the whole chain, as
    the Rust SDK looks through an `anyhow` chain."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, cls):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _rejection(e):
    """The `Reject` that is `e` or in its chain, if there is one."""
    return _in_chain(e, Reject)


class _Logging:
    """Logging methods, the same on `InitContext` and `Context`. The host writes the
    lines to its log with the UDF's name and the current key (default filter: info)."""

    __slots__ = ()

    def log(self, level, message):
        _host.logging.log(level, str(message))

    def log_trace(self, message):
        _host.logging.log(LogLevel.TRACE, str(message))

    def log_debug(self, message):
        _host.logging.log(LogLevel.DEBUG, str(message))

    def log_info(self, message):
        _host.logging.log(LogLevel.INFO, str(message))

    def log_warn(self, message):
        _host.logging.log(LogLevel.WARN, str(message))

    def log_error(self, message):
        _host.logging.log(LogLevel.ERROR, str(message))


class Output:
    """A declared output (`main` or a side output). `emit` turns the value into bytes
    with the output's codec (compact JSON by default; `bytes` are sent as they are)."""

    __slots__ = ("_id", "name", "_codec")

    def __init__(self, output_id, name, codec=JSON):
        self._id = output_id
        self.name = name
        self._codec = codec

    def emit(self, value, key=None, timestamp=None):
        """Emits `value`. `key` (str or bytes) is the record's key, the upsert key for
        upsert sinks; `timestamp` (ms) defaults to the current element's or timer's."""
        if isinstance(value, (bytes, bytearray)):
            data = bytes(value)
        else:
            try:
                data = self._codec.encode(value)
            except (TypeError, ValueError) as e:
                raise TypeError(f"output `{self.name}`: cannot serialize record: {e}") from e
        if isinstance(key, str):
            key = key.encode()
        _host.output.emit(self._id, data, key, timestamp)


class InitContext(_Logging):
    """Passed to `init`: the config, the input names, and the place to declare states
    and outputs. Keyed state and timers cannot be used here (there is no current key)."""

    __slots__ = ("_config", "_inputs")

    def __init__(self, config, inputs):
        self._config = dict(config)  # repeated keys: the last one wins
        self._inputs = list(inputs)

    # --- config -----------------------------------------------------------------------

    def config_entries(self):
        """All config entries as a dict (text values), with `--config` applied."""
        return dict(self._config)

    def config_value(self, key):
        """The raw text of config entry `key`, or None."""
        return self._config.get(key)

    def _config_get(self, key, default, parse, what):
        text = self._config.get(key)
        if text is None:
            if default is _MISSING:
                raise Error(f"invalid config: missing field `{key}`")
            return default
        try:
            return parse(text)
        except ParseDurationError as e:
            raise Error(f"invalid config `{key}`: {e}") from None
        except (ValueError, TypeError):
            raise Error(f"invalid config `{key}`: expected {what}, got \"{text}\"") from None

    def config_str(self, key, default=_MISSING):
        """Config `key` as text, as written. Without `default`, a missing key is an
        error that names it."""
        return self._config_get(key, default, str, "text")

    def config_int(self, key, default=_MISSING):
        """Config `key` as an integer (`17`)."""
        return self._config_get(key, default, _parse_int, "an integer")

    def config_float(self, key, default=_MISSING):
        """Config `key` as a number (`1.5`)."""
        return self._config_get(key, default, float, "a number")

    def config_bool(self, key, default=_MISSING):
        """Config `key` as a boolean (`true` or `false`)."""
        return self._config_get(key, default, _parse_bool, "true or false")

    def config_json(self, key, default=_MISSING):
        """Config `key` parsed as JSON (`["a", "b"]`, `{"k": 1}`)."""
        return self._config_get(key, default, json.loads, "JSON")

    def config_duration(self, key, default=_MISSING):
        """Config `key` as a duration in milliseconds: `"5m"`, `"1s"`, `"1d"`, `"250ms"`,
        `"1h 30m"` or bare milliseconds, as the Rust SDK's `Duration`. `default` may be
        such a text or milliseconds."""
        if default is not _MISSING:
            default = parse_duration(default)
        return self._config_get(key, default, parse_duration, "a duration")

    def inputs(self):
        """The names of the connected inputs; `Element.input_index()` indexes this."""
        return list(self._inputs)

    # --- declarations -----------------------------------------------------------------

    def _declare_state(self, name, kind, ttl):
        if ttl is not None and not isinstance(ttl, StateTtl):
            raise TypeError(
                f"state `{name}`: ttl must be a weir.StateTtl (StateTtl.event_time(...) or "
                f"StateTtl.processing_time(...)) or None, got {ttl!r}"
            )
        try:
            if ttl is None:
                state_id = _host.state.declare(name, kind)
            else:
                state_id = _host.state.declare_with_ttl(name, kind, ttl._record())
        except _host.Err as e:
            raise Error(f"cannot declare state `{name}`: {e.value.message}") from None
        _batch.declared(state_id, ttl)
        return state_id

    def value_state(self, name, codec=JSON, *, ttl=None):
        """Declares a value state: one value per key. With `ttl` (a `weir.StateTtl`) the
        host expires the value that long after it was last written (or read)."""
        state_id = self._declare_state(name, _host.types.StateKind.VALUE, ttl)
        return ValueState(state_id, name, codec, ttl)

    def list_state(self, name, codec=JSON, *, ttl=None):
        """Declares a list state: an ordered list of values per key. With `ttl` (a
        `weir.StateTtl`) each item expires on its own."""
        state_id = self._declare_state(name, _host.types.StateKind.LIST, ttl)
        return ListState(state_id, name, codec, ttl)

    def map_state(self, name, key_codec=JSON, codec=JSON, *, ttl=None):
        """Declares a map state: a map from keys to values per key. With `ttl` (a
        `weir.StateTtl`) each entry expires on its own. `key_codec` must encode equal
        keys to equal bytes, as the host finds entries by their key's bytes: not
        `weir.MARSHAL`."""
        if getattr(key_codec, "deterministic", True) is False:
            raise TypeError(
                f"state `{name}`: {getattr(key_codec, 'name', key_codec)} cannot be a map's "
                "key codec: it can encode equal keys to different bytes (use weir.JSON or "
                "weir.TEXT)"
            )
        state_id = self._declare_state(name, _host.types.StateKind.MAP, ttl)
        return MapState(state_id, name, key_codec, codec, ttl)

    def main_output(self, codec=JSON):
        """Declares the main output, `main`."""
        return self.output("main", codec)

    def output(self, name, codec=JSON):
        """Declares output `name` (a side output unless it is `main`); the pipeline file
        must route it to a sink."""
        try:
            return Output(_host.output.declare(name), name, codec)
        except _host.Err as e:
            raise Error(f"cannot declare output `{name}`: {e.value.message}") from None


def _parse_int(text):
    value = json.loads(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(text)
    return value


def _parse_bool(text):
    value = json.loads(text)
    if not isinstance(value, bool):
        raise ValueError(text)
    return value


def _key_str(key):
    try:
        return key.decode()
    except UnicodeDecodeError:
        raise Error(f"key is not UTF-8 text: {key!r}") from None


class Element:
    """One input record, with the key and event time the host extracted."""

    __slots__ = ("_input", "_index", "_key", "_value", "_timestamp")

    def __init__(self, input_name, input_index, key, value, timestamp):
        self._input = input_name
        self._index = input_index
        self._key = key
        self._value = value
        self._timestamp = timestamp

    def input(self):
        """The name of the input the element came from."""
        return self._input

    def input_index(self):
        """The index of that input in `InitContext.inputs()`."""
        return self._index

    def key(self):
        """The key, as bytes (UTF-8 text for JSON string and number keys)."""
        return self._key

    def key_str(self):
        """The key as text."""
        return _key_str(self._key)

    def value(self):
        """The record's bytes: one JSON document for the JSON sources."""
        return self._value

    def json(self):
        """The record decoded from JSON (dicts, lists, str, int, float, bool, None)."""
        try:
            return json.loads(self._value)
        except ValueError as e:
            raise Error(f"input `{self._input}`: cannot decode the record as JSON: {e}") from None

    def timestamp(self):
        """The record's event time, in ms since the epoch."""
        return self._timestamp


class Timer:
    """A timer that fired."""

    __slots__ = ("_domain", "_timestamp", "_key")

    def __init__(self, domain, timestamp, key):
        self._domain = domain
        self._timestamp = timestamp
        self._key = key

    def domain(self):
        """`TimeDomain.EVENT_TIME` or `TimeDomain.PROCESSING_TIME`."""
        return self._domain

    def timestamp(self):
        """The time the timer was registered for, in ms."""
        return self._timestamp

    def key(self):
        """The key the timer was registered for."""
        return self._key

    def key_str(self):
        return _key_str(self._key)


class Context(_Logging):
    """Passed to `process_element` and `on_timer`: the current key and time, timers,
    clocks and logging. Everything acts on the current key."""

    __slots__ = ("_key", "_key_str", "_timestamp")

    def __init__(self, key, timestamp):
        self._key = key
        self._key_str = None
        self._timestamp = timestamp

    def current_key(self):
        """The key being processed, as bytes."""
        return self._key

    def current_key_str(self):
        """The key being processed, as text."""
        if self._key_str is None:
            self._key_str = _key_str(self._key)
        return self._key_str

    def timestamp(self):
        """The timestamp of the element or timer being processed."""
        return self._timestamp

    def current_watermark(self):
        """The event-time watermark: -2**63 before the first record, 2**63 - 1 once
        every input has ended."""
        return _host.timers.current_watermark()

    def current_processing_time(self):
        """The host's wall clock, in ms. (Python's own clocks are frozen at 1970.)"""
        return _host.timers.current_processing_time()

    def register_event_timer(self, timestamp):
        """Registers an event-time timer for the current key. Timers are unique per (key,
        domain, timestamp); one at or before the watermark fires at its next advance."""
        _host.timers.register(_EVENT_TIME, timestamp)

    def delete_event_timer(self, timestamp):
        """Deletes an event-time timer of the current key (a no-op if there is none)."""
        _host.timers.delete(_EVENT_TIME, timestamp)

    def register_processing_timer(self, timestamp):
        _host.timers.register(_PROCESSING_TIME, timestamp)

    def delete_processing_timer(self, timestamp):
        _host.timers.delete(_PROCESSING_TIME, timestamp)

    def register_timer(self, domain, timestamp):
        _host.timers.register(domain, timestamp)

    def delete_timer(self, domain, timestamp):
        _host.timers.delete(domain, timestamp)

    def clear_all_state(self):
        """Clears every state of the current key (its timers stay)."""
        _host.state.clear_all()
