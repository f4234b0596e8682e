"""Typed keyed state over the host's byte store (Flink's ValueState, ListState, MapState).

Handles are declared in `init` (`ctx.value_state("name")`) and used without a key: the
host scopes every call to the key being processed. Using one in `init` traps in the host.

Values go through a codec (JSON unless told otherwise; see `weir.codec`). A stored value
the codec cannot decode raises `StateDecodeError`, which the SDK reports to the host as a
`state-decode` error: the host sends that element to the dead-letter output and goes on,
instead of stopping the pipeline (the value was written by another version of the UDF,
as another type).

When the stored type changes, a state gets a schema version (`schema(1)`) and says how to
read the earlier ones (`migrate_from(0, convert)`): a value state's value, each item of a
list state and each value of a map state (never its keys) is then stored behind a tag
with the version, and a value stored under an earlier version is converted when read and
written back, so each key migrates once.

A state declared with a time-to-live (`ttl=StateTtl.event_time("1h")`) is expired by the
host: each entry (a value, a list item, a map entry) lives that long after the call that
last wrote it (or read it, with `refresh_on_read=True`), and is never returned once it
has expired. The handles read and write as without one.
"""

from . import _batch
from . import _bindings as _host
from ._batch import ABSENT as _ABSENT
from ._batch import UNKNOWN as _UNKNOWN
from .codec import JSON
from .duration import ParseDurationError, format_duration, parse_duration

__all__ = ["StateDecodeError", "StateTtl", "ValueState", "ListState", "MapState"]

_U64_MAX = 2**64 - 1

# A value stored under a schema version starts with these bytes, then the version's
# byte, as in the Rust SDK. A codec whose bytes may begin with them (`RAW`, and any
# codec that does not say otherwise with `may_begin_with_tag = False`) has every value
# tagged, schema 0 too, so that no value is mistaken for a tagged one; the SDK's
# first format left schema-0 values untagged, and read a raw value that began with the
# tag as tagged. JSON, text and marshal never begin with 0xfe: their schema-0 values
# are stored untagged, as they always were.
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


def _split(data):
    """The schema version a stored value was written under (0: untagged), and its body."""
    if len(data) >= 3 and data.startswith(_SCHEMA_TAG):
        return data[2], data[3:]
    return 0, data


class _Schema:
    """How one state stores its values (a value state's value, a list state's items, a
    map state's values): the codec, the schema version they are written under (0:
    untagged) and the migrations from earlier versions. The one implementation of the
    tag for the three state classes."""

    __slots__ = ("name", "codec", "version", "migrations", "tag_always")

    def __init__(self, name, codec):
        self.name = name
        self.codec = codec
        self.version = 0
        self.migrations = {}  # version -> (codec, convert)
        # Whether schema-0 values are tagged too: the codec's bytes may begin with the tag.
        self.tag_always = getattr(codec, "may_begin_with_tag", True)

    def set_version(self, version):
        if not 1 <= version <= 255:
            raise ValueError(f"state `{self.name}`: schema version must be 1 to 255")
        self.version = version

    def add_migration(self, version, convert, codec):
        self.migrations[version] = (codec or self.codec, convert)

    def encode(self, value):
        """`value` as stored under the current schema: behind the tag, unless it is 0
        and the codec's bytes never begin with the tag."""
        data = _encode(self.name, self.codec, value)
        if self.version or self.tag_always:
            data = _SCHEMA_TAG + bytes([self.version]) + data
        return data

    def decode(self, data):
        """Stored bytes as `(value, converted)`: decoded directly under the current
        schema, converted by the migration from another version (`converted` is then
        True: the caller writes the value back). Raises `StateDecodeError` for a version
        without a migration or bytes the codec cannot read."""
        version, body = _split(data)
        if version == self.version:
            return _decode(self.name, self.codec, body), False
        migration = self.migrations.get(version)
        if migration is None:
            raise StateDecodeError(
                f"state `{self.name}`: the stored value has schema version {version}, this "
                f"version of the UDF reads version {self.version} and has no migration "
                f"from {version}"
            )
        codec, convert = migration
        return convert(_decode(self.name, codec, body)), True


class StateTtl:
    """A state's time-to-live, like Flink's `StateTtlConfig`: pass it as
    `ctx.value_state("name", ttl=...)` (or to `list_state`, `map_state`).

    Every entry (a value, a list item, a map entry) lives `after` past the time of the
    call that last wrote it, and with `refresh_on_read=True` past the last read of it
    too; the host then removes it, without calling the UDF. `after` is a duration as
    `weir.parse_duration` reads it (`"10m"`, `"1h 30m"`) or an `int` of milliseconds,
    longer than 0 ms.

    - `StateTtl.event_time(after)`: the time of a call is the timestamp of its element
      or timer, or the watermark if that is later; an entry expires once the watermark
      reaches that time + `after`. (Flink's TTL knows processing time only.)
    - `StateTtl.processing_time(after)`: the time of a call is the host's processing
      time (`ctx.current_processing_time()`); an entry expires once that reaches the
      time + `after`.

    Attributes: `millis` (int), `domain` (`weir.TimeDomain`), `refresh_on_read` (bool).
    """

    __slots__ = ("_millis", "_domain", "_refresh_on_read")

    def __init__(self, after, domain, refresh_on_read=False):
        if not isinstance(domain, _host.TimeDomain):
            raise TypeError(f"StateTtl: domain must be a weir.TimeDomain, got {domain!r}")
        if not isinstance(refresh_on_read, bool):
            raise TypeError(
                f"StateTtl: refresh_on_read must be True or False, got {refresh_on_read!r}"
            )
        try:
            millis = parse_duration(after)
        except ParseDurationError as e:
            raise ValueError(f"StateTtl: {e}") from None
        if millis <= 0:
            raise ValueError(f"StateTtl: a time-to-live must be longer than 0 ms, got {after!r}")
        if millis > _U64_MAX:
            raise ValueError(f"StateTtl: a time-to-live of {after!r} ms is too large")
        self._millis = millis
        self._domain = domain
        self._refresh_on_read = refresh_on_read

    @classmethod
    def event_time(cls, after, refresh_on_read=False):
        """Entries expire once the watermark reaches the time of their last write (or
        read, with `refresh_on_read`) + `after`."""
        return cls(after, _host.TimeDomain.EVENT_TIME, refresh_on_read)

    @classmethod
    def processing_time(cls, after, refresh_on_read=False):
        """Entries expire once the host's processing time reaches the time of their last
        write (or read, with `refresh_on_read`) + `after`."""
        return cls(after, _host.TimeDomain.PROCESSING_TIME, refresh_on_read)

    @property
    def millis(self):
        """How long an entry lives, in milliseconds."""
        return self._millis

    @property
    def domain(self):
        """The clock it follows: `weir.TimeDomain.EVENT_TIME` or `PROCESSING_TIME`."""
        return self._domain

    @property
    def refresh_on_read(self):
        """Whether reading an entry starts its time-to-live again, as writing it does."""
        return self._refresh_on_read

    def _record(self):
        """The WIT `state-ttl` record."""
        refresh = _host.TtlRefresh.ON_WRITE
        if self._refresh_on_read:
            refresh = _host.TtlRefresh.ON_READ_AND_WRITE
        return _host.types.StateTtl(millis=self._millis, domain=self._domain, refresh=refresh)

    def _key(self):
        return (self._millis, self._domain, self._refresh_on_read)

    def __eq__(self, other):
        if not isinstance(other, StateTtl):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        factory = "event_time" if self._domain == _host.TimeDomain.EVENT_TIME else "processing_time"
        refresh = ", refresh_on_read=True" if self._refresh_on_read else ""
        return f'StateTtl.{factory}("{format_duration(self._millis)}"{refresh})'


class _State:
    """What the three kinds of state share: the handle, the name, the schema of what
    they store (a value state's value, a list's items, a map's values), the
    time-to-live it was declared with (`ttl`, a `StateTtl` or None), and `clear`."""

    __slots__ = ("_id", "name", "_schema", "ttl")

    def __init__(self, state_id, name, codec, ttl=None):
        self._id = state_id
        self.name = name
        self._schema = _Schema(name, codec)
        self.ttl = ttl

    def schema(self, version):
        """Writes under schema `version` (1 to 255): raise it when the stored type
        changes, and say with `migrate_from` how to read earlier versions."""
        self._schema.set_version(version)
        return self

    def migrate_from(self, version, convert, codec=None):
        """Reads what was written under schema `version` (0: before the state had a
        schema) with `codec` (default: the state's), then `convert(old) -> new`. What
        is converted is written back when first read (the class says how), so each key
        migrates once."""
        self._schema.add_migration(version, convert, codec)
        return self

    def clear(self):
        """Removes the current key's contents of this state."""
        _host.state.clear(self._id)


class ValueState(_State):
    """One value per key. `get()` gives `default` (None) when the key has none. A value
    converted by a migration is written back when first read."""

    __slots__ = ()

    def __init__(self, state_id, name, codec=JSON, ttl=None):
        super().__init__(state_id, name, codec, ttl)

    def get(self, default=None):
        """The current key's value, or `default`. A value written under another schema
        version is converted by its migration and written back. One call at a time, each
        `get` decodes a new object; inside a batch, later `get`s of the same key return
        the object the first one decoded, or the one `set` was last given (`weir._batch`)."""
        batch = _batch.ACTIVE
        if batch is not None and self.ttl is None:
            held = batch.held_value(self._id)
            if held is not _UNKNOWN:
                return default if held is _ABSENT else held
            value = self._read(_ABSENT)
            batch.hold_value(self._id, value)
            return default if value is _ABSENT else value
        return self._read(default)

    def _read(self, absent):
        """The current key's value decoded from the host's bytes, or `absent`."""
        data = _host.state.value_get(self._id)
        if data is None:
            return absent
        schema = self._schema
        # The usual case without the schema's calls: no schema version, an untagged value.
        if not schema.version and not data.startswith(_SCHEMA_TAG):
            try:
                return schema.codec.decode(data)
            except Exception:  # noqa: BLE001 - reported as `_decode` reports it
                return _decode(self.name, schema.codec, data)
        value, converted = schema.decode(data)
        if converted:
            self.set(value)
        return value

    def set(self, value):
        """Replaces the current key's value (written under the current schema). Inside a
        batch the value is kept as it is and encoded when the batch ends."""
        batch = _batch.ACTIVE
        if batch is not None and self.ttl is None:
            batch.set_held_value(self._id, value, self)
            return
        _host.state.value_set(self._id, self._encode(value))

    def _encode(self, value):
        """`value` as the bytes the host stores. Called by `set`, and by a batch for the
        value `set` kept."""
        schema = self._schema
        if schema.version or schema.tag_always:
            return schema.encode(value)
        try:
            return schema.codec.encode(value)
        except Exception as e:
            raise TypeError(f"state `{self.name}`: cannot encode value: {e}") from e



class ListState(_State):
    """An ordered list of values per key, oldest first. With a schema, each item is
    stored (and migrated) as a value state's value is; when `get()` converted any item
    it writes the whole list back."""

    __slots__ = ()

    def __init__(self, state_id, name, codec=JSON, ttl=None):
        super().__init__(state_id, name, codec, ttl)

    def get(self):
        """All items (an empty list if none). Items written under another schema version
        are converted by their migrations; if any was, the list is written back under
        the current schema. One without a migration raises `StateDecodeError`, and
        nothing is written."""
        items, converted = [], False
        for data in _host.state.list_get(self._id):
            item, was_converted = self._schema.decode(data)
            items.append(item)
            converted = converted or was_converted
        if converted:
            self.set(items)
        return items

    def append(self, item):
        """Appends one item (under the current schema), without reading the others."""
        _host.state.list_append(self._id, self._schema.encode(item))

    def set(self, items):
        """Replaces all items (written under the current schema); an empty list clears
        the state."""
        _host.state.list_set(self._id, [self._schema.encode(i) for i in items])



class MapState(_State):
    """A map per key. Keys and values have their own codecs (JSON by default);
    `entries()` comes in the order of the encoded key bytes. A schema applies to the
    values only: keys are never tagged (a different key type is a different state). A
    converted value is written back when `get` or `entries` first reads it."""

    __slots__ = ("_key_codec",)

    def __init__(self, state_id, name, key_codec=JSON, codec=JSON, ttl=None):
        super().__init__(state_id, name, codec, ttl)
        self._key_codec = key_codec

    def _key(self, key):
        return _encode(self.name, self._key_codec, key)

    def get(self, key, default=None):
        """The value under `key`, or `default`. A value written under another schema
        version is converted by its migration and written back."""
        k = self._key(key)
        data = _host.state.map_get(self._id, k)
        if data is None:
            return default
        value, converted = self._schema.decode(data)
        if converted:
            _host.state.map_put(self._id, k, self._schema.encode(value))
        return value

    def contains_key(self, key):
        """Whether `key` has a value (which is not decoded). With a time-to-live that
        refreshes on read, it counts as a read of the entry."""
        return _host.state.map_get(self._id, self._key(key)) is not None

    def put(self, key, value):
        """Sets the value under `key` (written under the current schema)."""
        _host.state.map_put(self._id, self._key(key), self._schema.encode(value))

    def remove(self, key):
        """Removes `key` (a no-op if absent)."""
        _host.state.map_remove(self._id, self._key(key))

    def entries(self):
        """All `(key, value)` pairs, ordered by encoded key bytes. Values written under
        another schema version are converted by their migrations, and each converted
        one is written back once all entries are read; one without a migration raises
        `StateDecodeError`, and nothing is written."""
        entries, converted = [], []
        for k, data in _host.state.map_entries(self._id):
            value, was_converted = self._schema.decode(data)
            if was_converted:
                converted.append((k, value))
            entries.append((_decode(self.name, self._key_codec, k), value))
        for k, value in converted:
            _host.state.map_put(self._id, k, self._schema.encode(value))
        return entries

