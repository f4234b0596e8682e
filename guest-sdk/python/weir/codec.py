"""How values become bytes: for keyed state (the host stores bytes) and for outputs.

A codec is any object with `encode(value) -> bytes` and `decode(bytes) -> value`.

- `JSON` (the default everywhere): compact JSON, byte for byte what `serde_json` writes
  for the same value, so a Python UDF's output equals a Rust UDF's. Dataclass instances
  are written as objects with their fields in declaration order, as serde writes structs.
- `JsonCodec(SomeDataclass)`: the same, and decoding builds `SomeDataclass(**fields)`,
  so a state reads back as the type it was written as (typed state).
- `MARSHAL` / `MarshalCodec(SomeDataclass)`: Python's own binary format (the `marshal`
  module, version 4), for state only. Decoding and encoding are one C call each, about
  2-4 times faster than JSON on a list of numbers, and a value reads back exactly as it
  was written (tuples stay tuples, sets stay sets, dict keys keep their types), which
  JSON does not do. A dataclass is stored as the tuple of its fields in declaration
  order. The values must be built of None, bool, int, float, complex, str, bytes, tuple,
  list, dict, set and frozenset; anything else fails `set` with a `TypeError`. Not for a
  map state's keys (equal keys may encode to different bytes).
- `TEXT` (a `str` as UTF-8) and `RAW` (`bytes` as they are).

JSON differs from the Rust SDK's state encoding (postcard), so state written by a Rust
version of a UDF cannot be read by a Python version and vice versa.
"""

import builtins
import dataclasses
import json
import json.decoder
import marshal
import operator

__all__ = ["Codec", "JsonCodec", "MarshalCodec", "JSON", "MARSHAL", "TEXT", "RAW", "to_json"]


# Per type met by `_default`: True for a dataclass with a `__dict__` (written as that
# dict), False for one with slots; other types are not kept.
_DATACLASSES = {}


def _default(value):
    """`json.dumps` hook: dataclasses as objects (nested ones too), sets as lists."""
    kind = _DATACLASSES.get(type(value))
    if kind is True:  # the usual case, checked first: a UDF stores its dataclass per call
        return value.__dict__
    if kind is False or (
        kind is None and dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        _DATACLASSES[type(value)] = hasattr(value, "__dict__")
        d = getattr(value, "__dict__", None)
        if d is None:  # slots=True dataclasses have no __dict__
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return d
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default
)

try:
    # The C encoder that `_ENCODER.encode` builds anew on every call, built once: half
    # the cost of encoding a small record, which a UDF does several times per element.
    # Same arguments, except no check for circular references (they end in RecursionError).
    from json.encoder import c_make_encoder, encode_basestring

    _C_ENCODER = c_make_encoder(
        None, _default, encode_basestring, None, ":", ",", False, False, False
    )
except (ImportError, TypeError):  # no `_json` module, or another signature
    _C_ENCODER = None


def to_json(value):
    """`value` as compact JSON text, as `serde_json::to_string` writes it.

    `json.dumps(v, separators=(",", ":"), ensure_ascii=False)`, plus dataclass support,
    and NaN/infinity refused (JSON has no such numbers; serde_json would write `null`).
    Floats are written as Python writes them (`1e+16` where serde_json writes `1e16`).
    """
    if _C_ENCODER is None or isinstance(value, str):
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


# The C scanner that `json.loads` ends in, called directly: `json.loads(bytes)` goes
# through three Python functions and two regular expressions first, which cost more than
# the parse of a small state value. Anything unusual (a leading byte-order mark or
# whitespace, trailing text, invalid JSON) goes to `json.loads`, for its result or error.
_SCAN = json.decoder.JSONDecoder().scan_once
_FIRST = frozenset('{["-0123456789tfnNI')


def _loads(data):
    """`json.loads(data)` for `bytes`: the same value, or the same error."""
    try:
        text = data.decode()
        if text[:1] in _FIRST:
            value, end = _SCAN(text, 0)
            if end == len(text):
                return value
    except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
        pass
    return json.loads(data)


class Codec:
    """Base class for codecs (subclassing it is optional: any object with the two
    methods will do)."""

    name = "codec"

    #: Whether encoded bytes may begin with the schema tag (0xfe 0xed). If they may (the
    #: default, for a codec that does not say), the state stores every value behind the
    #: tag and its schema version, so that no value is mistaken for a tagged one; a codec
    #: whose bytes never begin with 0xfe (JSON, text, marshal) sets it to False and has
    #: its schema-0 values stored as they are.
    may_begin_with_tag = True

    def encode(self, value):
        raise NotImplementedError

    def decode(self, data):
        raise NotImplementedError


class JsonCodec(Codec):
    """Compact JSON. With `type`, a dataclass (or any class taking the fields as keyword
    arguments), a decoded JSON object becomes `type(**obj)`."""

    #: UTF-8 JSON never begins with 0xfe.
    may_begin_with_tag = False

    def __init__(self, type=None):  # noqa: A002 - reads best at the call site
        self.type = type
        self.name = "JSON" if type is None else f"JSON {type.__name__}"

    def encode(self, value):
        if _C_ENCODER is not None and type(value) is not str:  # `to_json`, one call fewer
            return "".join(_C_ENCODER(value, 0)).encode()
        return to_json(value).encode()

    def decode(self, data):
        value = _loads(data)
        if self.type is None:
            return value
        if not isinstance(value, dict):
            raise TypeError(f"expected a JSON object, got {type(value).__name__}")
        return self.type(**value)


#: The `marshal` format version `MarshalCodec` writes. Pinned, so that a component built
#: with a later CPython (whose default may be newer) writes what an earlier one reads.
_MARSHAL_VERSION = 4


class MarshalCodec(Codec):
    """Python's `marshal` format (version 4): a compact binary codec for state, read back
    exactly as written. With `type`, a dataclass, a value is stored as the tuple of its
    fields in declaration order and read back as `type(*fields)`; adding, removing or
    reordering fields changes the stored layout, so do it with a schema version and a
    migration (`ValueState.migrate_from`).

    Not for outputs: sinks expect JSON or text, nor for a map state's keys: equal values
    can encode to different bytes (marshal marks interned strings and objects referenced
    more than once), and the host finds map entries by their key's bytes. Stored bytes
    never start with the schema tag (0xfe 0xed), so its schema-0 values are stored
    untagged, as JSON's are."""

    #: Equal values may encode to different bytes: `map_state` refuses it as a key codec.
    deterministic = False

    #: A marshal stream begins with a type code, never 0xfe.
    may_begin_with_tag = False

    def __init__(self, type=None):  # noqa: A002 - reads best at the call site
        self.type = type
        self._fields = None
        if type is None:
            self.name = "marshal"
            return
        if not (isinstance(type, builtins.type) and dataclasses.is_dataclass(type)):
            raise TypeError(f"MarshalCodec: {type!r} is not a dataclass")
        names = [f.name for f in dataclasses.fields(type)]
        if not names:
            raise TypeError(f"MarshalCodec: dataclass {type.__name__} has no fields")
        # `attrgetter` of several names returns their tuple in one C call; of one name,
        # the value alone.
        getter = operator.attrgetter(*names)
        self._fields = getter if len(names) > 1 else (lambda value: (getter(value),))
        self.name = f"marshal {type.__name__}"

    def encode(self, value):
        fields = self._fields
        if fields is None:
            return marshal.dumps(value, _MARSHAL_VERSION)
        if not isinstance(value, self.type):
            raise TypeError(f"expected a {self.type.__name__}, got {type(value).__name__}")
        return marshal.dumps(fields(value), _MARSHAL_VERSION)

    def decode(self, data):
        value = marshal.loads(data)
        if self._fields is None:
            return value
        if type(value) is not tuple:
            raise TypeError(f"expected the tuple of a {self.type.__name__}'s fields, got "
                            f"{type(value).__name__}")
        return self.type(*value)


class _Text(Codec):
    name = "text"
    #: UTF-8 never holds the byte 0xfe.
    may_begin_with_tag = False

    def encode(self, value):
        return value.encode()

    def decode(self, data):
        return bytes(data).decode()


class _Raw(Codec):
    name = "bytes"

    def encode(self, value):
        return bytes(value)

    def decode(self, data):
        return bytes(data)


JSON = JsonCodec()
MARSHAL = MarshalCodec()
TEXT = _Text()
RAW = _Raw()
