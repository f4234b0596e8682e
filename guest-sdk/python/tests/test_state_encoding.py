"""The state encoding is unambiguous: values of every codec, random or crafted to begin
with any prefix (the schema tag's bytes among them), read back as written in value, list
and map state, with and without a schema version; and values written in the SDK's first
format (schema 0 untagged) still read as they did.

    PYTHONPATH=guest-sdk/python:guest-sdk/python/tests python3 -m unittest -v test_state_encoding
"""

import random
import unittest

import weir
from weir.testing import TestHost

TAG = b"\xfe\xed"


class Reversed(weir.Codec):
    """A codec of the user's own that does not say whether its bytes may begin with the
    tag: its values are tagged."""

    name = "reversed bytes"

    def encode(self, value):
        return bytes(value)[::-1]

    def decode(self, data):
        return bytes(data)[::-1]


def keeper(codec, schema):
    """A UDF keeping every element's value (a list of byte values, as JSON carries it) in
    a value state (emitting the one it replaces), a list and a map; `{"dump": true}`
    emits the list and the map."""

    class Keep(weir.ProcessFunction):
        def init(self, ctx):
            self.value = ctx.value_state("value", codec)
            self.list = ctx.list_state("list", codec)
            self.map = ctx.map_state("map", codec=codec)
            if schema:
                self.value.schema(schema)
                self.list.schema(schema)
                self.map.schema(schema)
            self.out = ctx.main_output()

        def process_element(self, ctx, el):
            command = el.json()
            if command.get("dump"):
                entries = sorted(self.map.entries(), key=lambda kv: kv[0])
                self.out.emit({
                    "list": [list(v) for v in self.list.get()],
                    "map": [[k, list(v)] for k, v in entries],
                })
                return
            value = bytes(command["value"])
            replaced = self.value.get()
            self.out.emit({"replaced": None if replaced is None else list(replaced)})
            self.value.set(value)
            self.list.append(value)
            self.map.put(el.timestamp() + 1, value)

    return Keep


class RoundTrip(unittest.TestCase):
    def round_trips(self, values, codec, schema=0):
        udf = keeper(codec, schema)
        for start in range(0, len(values), 64):
            chunk = values[start:start + 64]
            h = TestHost(udf)  # a host per key: the TestHost copies its state at every call
            for i, value in enumerate(chunk):
                h.process("main", "k", {"value": list(value)}, i)
            h.process("main", "k", {"dump": True}, len(chunk))
            self.assertEqual(h.rejected(), [])
            outputs = [o.value for o in h.take_outputs("main")]
            written = [list(v) for v in chunk]
            self.assertEqual(
                [o["replaced"] for o in outputs[:-1]], [None] + written[:-1], (codec.name, schema)
            )
            self.assertEqual(outputs[-1]["list"], written)
            self.assertEqual(outputs[-1]["map"], [[n + 1, v] for n, v in enumerate(written)])

    def test_random_bytes_read_back_as_written(self):
        rng = random.Random(36)
        values = [rng.randbytes(rng.randrange(0, 12)) for _ in range(8192)]
        for codec in (weir.RAW, Reversed()):
            for schema in (0, 3):
                self.round_trips(values, codec, schema)

    def test_bytes_crafted_to_begin_with_any_prefix_read_back(self):
        # Every two-byte prefix, and the tag followed by every version byte.
        rng = random.Random(8192)
        values = [bytes([a, b]) + rng.randbytes(rng.randrange(0, 4))
                  for a in range(256) for b in range(0, 256, 7)]
        values += [TAG + bytes([v]) + rng.randbytes(rng.randrange(0, 4)) for v in range(256)]
        values += [TAG, TAG[:1], b""]
        # Reversed bytes begin with the tag when the value ends with its reverse.
        values += [rng.randbytes(3) + bytes([v]) + TAG[::-1] for v in range(256)]
        for codec in (weir.RAW, Reversed()):
            for schema in (0, 1):
                self.round_trips(values, codec, schema)

    def test_a_raw_value_is_stored_behind_the_tag_and_json_as_it_is(self):
        h = TestHost(keeper(weir.RAW, 0))
        h.process("main", "k", {"value": [0xFE, 0xED, 7]}, 0)
        self.assertEqual(h.state_bytes("k", "value"), TAG + b"\x00" + TAG + b"\x07")

        class Json(weir.ProcessFunction):
            def init(self, ctx):
                self.value = ctx.value_state("value")

            def process_element(self, ctx, el):
                self.value.set(el.json())

        j = TestHost(Json)
        j.process("main", "k", {"a": 1}, 0)
        self.assertEqual(j.state_bytes("k", "value"), b'{"a":1}', "JSON never begins with 0xfe")

    def test_values_of_the_first_format_read_as_before(self):
        # Raw schema-0 values were stored untagged: those not beginning with the tag read
        # as they did, in value, list and map state.
        h = TestHost(keeper(weir.RAW, 0))
        h.set_state_bytes("k", "value", b"\x01\x02")
        h.set_list_state_bytes("k", "list", [b"\x03", b""])
        h.set_map_state_bytes("k", "map", [(b"1", b"\x04\xfe")])
        h.process("main", "k", {"value": [9]}, 1)
        h.process("main", "k", {"dump": True}, 2)
        outputs = [o.value for o in h.take_outputs("main")]
        self.assertEqual(outputs[0], {"replaced": [1, 2]})
        self.assertEqual(outputs[1], {"list": [[3], [], [9]], "map": [[1, [4, 0xFE]], [2, [9]]]})


if __name__ == "__main__":
    unittest.main()
