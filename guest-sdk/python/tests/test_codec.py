"""The codecs of weir.codec: `MarshalCodec` read back exactly as written, its dataclass
layout, its errors, and a JSON state migrated to it, in plain CPython.

    PYTHONPATH=guest-sdk/python:guest-sdk/python/tests python3 -m unittest -v test_codec
"""

import marshal
import math
import sys
import unittest
from dataclasses import dataclass, field

import weir
from weir.testing import Emitted, TestHost


@dataclass
class Clicks:
    times: list = field(default_factory=list)
    emitted: int = 0


@dataclass
class Only:
    n: int


class NotADataclass:
    pass


class MarshalCodecTest(unittest.TestCase):
    def test_a_value_reads_back_with_its_exact_types(self):
        value = {
            1: (b"\x00\xff", frozenset({2, 3})),
            "big": [2**70, -(2**63), 0.5, 1 + 2j, True, None],
            ("a", 1): {"nested": {4, 5}},
        }
        back = weir.MARSHAL.decode(weir.MARSHAL.encode(value))
        self.assertEqual(back, value)
        self.assertEqual(type(back[1]), tuple, "JSON would give a list")
        self.assertEqual(type(back[1][1]), frozenset)
        self.assertIn(1, back, "an int key stays an int (JSON makes it a string)")
        self.assertTrue(math.isnan(weir.MARSHAL.decode(weir.MARSHAL.encode(float("nan")))))

    def test_a_dataclass_is_stored_as_the_tuple_of_its_fields(self):
        codec = weir.MarshalCodec(Clicks)
        data = codec.encode(Clicks([10, 20], 2))
        self.assertEqual(marshal.loads(data), ([10, 20], 2), "fields in declaration order")
        self.assertEqual(codec.decode(data), Clicks([10, 20], 2))
        self.assertEqual(codec.name, "marshal Clicks")
        one = weir.MarshalCodec(Only)
        self.assertEqual(marshal.loads(one.encode(Only(7))), (7,))
        self.assertEqual(one.decode(one.encode(Only(7))), Only(7))

    def test_stored_bytes_never_look_like_a_schema_tag(self):
        values = [None, True, 0, 2**40, -1.5, "", "x", b"", (), [], {}, set(), Clicks()]
        for value in values:
            codec = weir.MarshalCodec(Clicks) if isinstance(value, Clicks) else weir.MARSHAL
            self.assertFalse(codec.encode(value).startswith(b"\xfe\xed"), repr(value))

    def test_what_it_cannot_store_or_read_is_an_error(self):
        with self.assertRaisesRegex(TypeError, "is not a dataclass"):
            weir.MarshalCodec(NotADataclass)
        with self.assertRaisesRegex(TypeError, "is not a dataclass"):
            weir.MarshalCodec(Clicks())  # an instance, not the class
        with self.assertRaisesRegex(TypeError, "expected a Clicks, got Only"):
            weir.MarshalCodec(Clicks).encode(Only(1))
        with self.assertRaises(ValueError):
            weir.MARSHAL.encode(Clicks())  # a dataclass inside needs MarshalCodec(type)
        with self.assertRaisesRegex(TypeError, "expected the tuple of a Clicks's fields"):
            weir.MarshalCodec(Clicks).decode(marshal.dumps([1, 2]))
        with self.assertRaises((EOFError, ValueError, TypeError)):
            weir.MARSHAL.decode(b'{"times":[1]}')


class Store(weir.ProcessFunction):
    """Keeps each key's clicks in a marshal state; an element `{"put": x}` stores `x`
    whole in a second marshal state instead, and emits what that state held before."""

    def init(self, ctx):
        self.clicks = ctx.value_state("clicks", weir.MarshalCodec(Clicks))
        self.other = ctx.value_state("other", weir.MARSHAL)
        self.out = ctx.main_output()

    def process_element(self, ctx, element):
        value = element.json()
        if "put" in value:
            self.out.emit({"before": repr(self.other.get())})
            self.other.set(value["put"] if value["put"] != "object" else object())
            return
        clicks = self.clicks.get() or Clicks()
        clicks.times.append(element.timestamp())
        clicks.emitted = len(clicks.times)
        self.clicks.set(clicks)
        self.out.emit({"clicks": clicks.emitted})


class MarshalStateTest(unittest.TestCase):
    def test_state_round_trips_through_the_host_between_calls(self):
        h = TestHost(Store)
        for ts in (5, 7, 9):
            h.process("main", "a", {}, ts)
        self.assertEqual(
            [e.value for e in h.take_outputs("main")],
            [{"clicks": 1}, {"clicks": 2}, {"clicks": 3}],
        )
        self.assertEqual(marshal.loads(h.state_bytes("a", "clicks")), ([5, 7, 9], 3))

    def test_an_unmarshallable_value_fails_the_call_naming_the_state(self):
        h = TestHost(Store)
        with self.assertRaisesRegex(TypeError, "state `other`: cannot encode value"):
            h.process("main", "a", {"put": "object"}, 1)
        self.assertIsNone(h.state_bytes("a", "other"), "nothing was written")

    def test_json_bytes_read_as_marshal_are_a_state_decode_error(self):
        h = TestHost(Store)
        h.set_state_bytes("a", "clicks", b'{"times":[1],"emitted":1}')
        # The TestHost lets it through; the engine sends the element to the dead letters.
        with self.assertRaises(weir.StateDecodeError) as caught:
            h.process("main", "a", {}, 2)
        self.assertTrue(
            str(caught.exception).startswith(
                "state `clicks`: cannot decode stored value as marshal Clicks"
            ),
            caught.exception,
        )
        self.assertEqual(h.state_bytes("a", "clicks"), b'{"times":[1],"emitted":1}')


class MarshalKeys(weir.ProcessFunction):
    def init(self, ctx):
        self.map = ctx.map_state("by_name", key_codec=weir.MARSHAL)


class MarshalValues(weir.ProcessFunction):
    def init(self, ctx):
        self.map = ctx.map_state("by_name", codec=weir.MarshalCodec(Clicks))

    def process_element(self, ctx, element):
        self.map.put(element.json()["name"], Clicks([element.timestamp()], 1))


class MapCodecTest(unittest.TestCase):
    def test_marshal_encodes_equal_strings_to_different_bytes(self):
        # Why it is refused as a map's key codec: an interned string is marked as such.
        built = "".join(["ad-", "1"])
        self.assertNotEqual(
            weir.MARSHAL.encode(built), weir.MARSHAL.encode(sys.intern(built))
        )

    def test_a_map_state_refuses_marshal_keys_and_takes_marshal_values(self):
        with self.assertRaisesRegex(
            TypeError, "state `by_name`: marshal cannot be a map's key codec"
        ):
            TestHost(MarshalKeys).process("main", "k", {}, 1)
        h = TestHost(MarshalValues)
        h.process("main", "k", {"name": "x"}, 4)
        self.assertEqual(
            h.state("k", "by_name", codec=weir.MarshalCodec(Clicks)), [("x", Clicks([4], 1))]
        )


class Migrated(weir.ProcessFunction):
    """Version 1 of `clicks` is marshal; before it (version 0) it was JSON."""

    def init(self, ctx):
        self.clicks = (
            ctx.value_state("clicks", weir.MarshalCodec(Clicks))
            .schema(1)
            .migrate_from(0, lambda old: Clicks(**old), codec=weir.JSON)
        )
        self.out = ctx.main_output()

    def process_element(self, ctx, element):
        clicks = self.clicks.get() or Clicks()
        clicks.times.append(element.timestamp())
        self.clicks.set(clicks)
        self.out.emit({"times": clicks.times})


class MigrationTest(unittest.TestCase):
    def test_a_json_state_moves_to_marshal_under_a_schema_version(self):
        h = TestHost(Migrated)
        h.set_state_bytes("a", "clicks", b'{"times":[1,2],"emitted":2}')
        h.process("main", "a", {}, 3)
        self.assertEqual(h.take_outputs("main"), [Emitted({"times": [1, 2, 3]}, 3)])
        stored = h.state_bytes("a", "clicks")
        self.assertEqual(stored[:3], b"\xfe\xed\x01", "tagged with schema version 1")
        self.assertEqual(marshal.loads(stored[3:]), ([1, 2, 3], 2))


if __name__ == "__main__":
    unittest.main()
