"""Typed keyed state over the host's byte store (Flink's ValueState, ListState, MapState).

Handles are declared in `init` (`ctx.value_state("name")`) and used without a key: the
host scopes every call to the key being processed. Using one in `init` traps in the host.

Values go through a codec (JSON unless told otherwise; see `weir.codec`). A stored value
the codec cannot decode raises `StateDecodeError`, which the SDK reports to the host as a
`state-decode` error: the host sends that element to the dead-letter output and goes on,
instead of stopping the pipeline (the value was written by another version of the UDF,
as another type).
"""

from . import _bindings as _host
from .codec import JSON

__all__ = ["StateDecodeError", "ValueState", "ListState", "MapState"]

# A value stored under a schema version starts with these bytes, then the version's
# byte, as in the Rust SDK. JSON never starts with 0xfe.
_SCHEMA_TAG = b"\xfe\xed"


class StateDecodeError(Exception):
    """A stored state value could not be read with the state's codec."""


def _decode(name, codec, data):
    try:
        return codec.decode(data)
    except Exception as e:  # noqa: BLE001 - any codec failure means the same thing
        raise StateDecodeError(
            f"state `{name}`: cannot decode stored value as {getattr(codec, 'name', codec)} "
            f"({type(e).__name__}: {e}); was it written with another type?"
        ) from None


def _encode(name, codec, value):
    try:
        return codec.encode(value)
    except Exception as e:
        raise TypeError(f"state `{name}`: cannot encode value: {e}") from e


class ValueState:
    """One value per key. `get()` gives `default` (None) when the key has none."""

    __slots__ = ("_id", "name", "_codec", "_schema", "_migrations")

    def __init__(self, state_id, name, codec=JSON):
        self._id = state_id
        self.name = name
        self._codec = codec
        self._schema = 0
        self._migrations = {}

    def schema(self, version):
        """Writes values under schema `version` (1 to 255): raise it when the stored
        type changes, and say with `migrate_from` how to read earlier versions."""
        if not 1 <= version <= 255:
            raise ValueError(f"state `{self.name}`: schema version must be 1 to 255")
        self._schema = version
        return self

    def migrate_from(self, version, convert, codec=None):
        """Reads values written under schema `version` (0: before the state had a
        schema) with `codec` (default: the state's), then `convert(old) -> new`. A
        converted value is written back when first read, so each key migrates once."""
        self._migrations[version] = (codec or self._codec, convert)
        return self

    def get(self, default=None):
        data = _host.state.value_get(self._id)
        if data is None:
            return default
        if self._schema == 0 and not data.startswith(_SCHEMA_TAG):
            return _decode(self.name, self._codec, data)
        version, body = (data[2], data[3:]) if data.startswith(_SCHEMA_TAG) else (0, data)
        if version == self._schema:
            return _decode(self.name, self._codec, body)
        if version not in self._migrations:
            raise StateDecodeError(
                f"state `{self.name}`: the stored value has schema version {version}, this "
                f"version of the UDF reads version {self._schema} and has no migration "
                f"from {version}"
            )
        codec, convert = self._migrations[version]
        value = convert(_decode(self.name, codec, body))
        self.set(value)
        return value

    def set(self, value):
        data = _encode(self.name, self._codec, value)
        if self._schema:
            data = _SCHEMA_TAG + bytes([self._schema]) + data
        _host.state.value_set(self._id, data)

    def clear(self):
        _host.state.clear(self._id)


class ListState:
    """An ordered list of values per key, oldest first."""

    __slots__ = ("_id", "name", "_codec")

    def __init__(self, state_id, name, codec=JSON):
        self._id = state_id
        self.name = name
        self._codec = codec

    def get(self):
        """All items (an empty list if none)."""
        return [_decode(self.name, self._codec, d) for d in _host.state.list_get(self._id)]

    def append(self, item):
        """Appends one item, without reading the others."""
        _host.state.list_append(self._id, _encode(self.name, self._codec, item))

    def set(self, items):
        """Replaces all items; an empty list clears the state."""
        _host.state.list_set(self._id, [_encode(self.name, self._codec, i) for i in items])

    def clear(self):
        _host.state.clear(self._id)


class MapState:
    """A map per key. Keys and values have their own codecs (JSON by default);
    `entries()` comes in the order of the encoded key bytes."""

    __slots__ = ("_id", "name", "_key_codec", "_codec")

    def __init__(self, state_id, name, key_codec=JSON, codec=JSON):
        self._id = state_id
        self.name = name
        self._key_codec = key_codec
        self._codec = codec

    def _key(self, key):
        return _encode(self.name, self._key_codec, key)

    def get(self, key, default=None):
        data = _host.state.map_get(self._id, self._key(key))
        return default if data is None else _decode(self.name, self._codec, data)

    def contains_key(self, key):
        return _host.state.map_get(self._id, self._key(key)) is not None

    def put(self, key, value):
        _host.state.map_put(self._id, self._key(key), _encode(self.name, self._codec, value))

    def remove(self, key):
        """Removes `key` (a no-op if absent)."""
        _host.state.map_remove(self._id, self._key(key))

    def entries(self):
        """All `(key, value)` pairs, ordered by encoded key bytes."""
        return [
            (_decode(self.name, self._key_codec, k), _decode(self.name, self._codec, v))
            for k, v in _host.state.map_entries(self._id)
        ]

    def clear(self):
        _host.state.clear(self._id)
