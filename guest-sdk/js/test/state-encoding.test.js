// The state encoding is unambiguous: values of every codec, random or crafted to begin
// with any prefix (the schema tag's bytes among them), read back as written in value,
// list and map state, with and without a schema version; and values written in the
// SDK's first format (schema 0 untagged) still read as they did.
//
//   node --test guest-sdk/js/          (from the repository root; Node.js >= 20)

import { test } from "node:test";
import assert from "node:assert/strict";

import * as weir from "../sdk/index.js";
import { TestHost } from "../sdk/testing.js";

/** A codec of the user's own that does not say whether its bytes may begin with the tag. */
const reversed = {
  name: "reversed bytes",
  encode: (value) => Uint8Array.from(value).reverse(),
  decode: (bytes) => Uint8Array.from(bytes).reverse(),
};

/**
 * A UDF keeping every element's value (an array of byte values) in a value state
 * (emitting the one it replaces), a list and a map; `{dump: true}` emits the list and map.
 */
function keeper(codec, schema) {
  return class Keep {
    init(ctx) {
      this.value = ctx.valueState("value", codec);
      this.list = ctx.listState("list", codec);
      this.map = ctx.mapState("map", { value: codec });
      if (schema) {
        this.value.schema(schema);
        this.list.schema(schema);
        this.map.schema(schema);
      }
      this.out = ctx.mainOutput();
    }

    processElement(ctx, el) {
      const command = el.json();
      if (command.dump) {
        this.out.emit({
          list: this.list.get().map((v) => [...v]),
          map: this.map.entries().map(([k, v]) => [k, [...v]]).sort((a, b) => a[0] - b[0]),
        });
        return;
      }
      const replaced = this.value.get();
      this.out.emit({ replaced: replaced === undefined ? null : [...replaced] });
      const value = Uint8Array.from(command.value);
      this.value.set(value);
      this.list.append(value);
      this.map.put(el.timestamp + 1, value);
    }
  };
}

function roundTrips(values, codec, schema) {
  const udf = keeper(codec, schema);
  for (let start = 0; start < values.length; start += 64) {
    const chunk = values.slice(start, start + 64).map((v) => [...v]);
    const h = new TestHost(new udf()); // a host per key: the TestHost copies its state at every call
    chunk.forEach((value, i) => h.process("main", "k", { value }, i));
    h.process("main", "k", { dump: true }, chunk.length);
    assert.deepEqual(h.rejected(), []);
    const outputs = h.takeOutputs("main").map((o) => o.value);
    assert.deepEqual(
      outputs.slice(0, -1).map((o) => o.replaced),
      [null, ...chunk.slice(0, -1)],
      `${codec.name}, schema ${schema}`,
    );
    assert.deepEqual(outputs.at(-1).list, chunk);
    assert.deepEqual(
      outputs.at(-1).map,
      chunk.map((v, n) => [n + 1, v]),
    );
  }
}

/** A small, seeded generator (mulberry32), so that a failure names values that repeat. */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const randomBytes = (next, n) => Array.from({ length: n }, () => Math.floor(next() * 256));

test("random bytes read back as written", () => {
  const next = random(36);
  const values = Array.from({ length: 8192 }, () => randomBytes(next, Math.floor(next() * 12)));
  for (const codec of [weir.codecs.bytes, reversed]) {
    for (const schema of [0, 3]) roundTrips(values, codec, schema);
  }
});

test("bytes crafted to begin with any prefix read back", () => {
  const next = random(8192);
  const values = [];
  for (let a = 0; a < 256; a++) {
    for (let b = 0; b < 256; b += 7) values.push([a, b, ...randomBytes(next, Math.floor(next() * 4))]);
  }
  for (let v = 0; v < 256; v++) {
    values.push([0xfe, 0xed, v, ...randomBytes(next, Math.floor(next() * 4))]);
    // Reversed, these begin with the tag and the version byte.
    values.push([...randomBytes(next, 3), v, 0xed, 0xfe]);
  }
  values.push([0xfe, 0xed], [0xfe], []);
  for (const codec of [weir.codecs.bytes, reversed]) {
    for (const schema of [0, 1]) roundTrips(values, codec, schema);
  }
});

test("a bytes value is stored behind the tag, a JSON one as it is", () => {
  const h = new TestHost(new (keeper(weir.codecs.bytes, 0))());
  h.process("main", "k", { value: [0xfe, 0xed, 7] }, 0);
  assert.deepEqual([...h.stateBytes("k", "value")], [0xfe, 0xed, 0, 0xfe, 0xed, 7]);
  const json = new TestHost(
    new (class {
      init(ctx) {
        this.value = ctx.valueState("value");
      }
      processElement(ctx, el) {
        this.value.set(el.json());
      }
    })(),
  );
  json.process("main", "k", { a: 1 }, 0);
  assert.equal(new TextDecoder().decode(json.stateBytes("k", "value")), '{"a":1}', "JSON never begins with 0xfe");
});

test("values of the first format read as before", () => {
  // Bytes schema-0 values were stored untagged: those not beginning with the tag read as
  // they did, in value, list and map state.
  const h = new TestHost(new (keeper(weir.codecs.bytes, 0))());
  h.setStateBytes("k", "value", Uint8Array.of(1, 2));
  h.setListStateBytes("k", "list", [Uint8Array.of(3), Uint8Array.of()]);
  h.setMapStateBytes("k", "map", [[new TextEncoder().encode("1"), Uint8Array.of(4, 0xfe)]]);
  h.process("main", "k", { value: [9] }, 1);
  h.process("main", "k", { dump: true }, 2);
  const outputs = h.takeOutputs("main").map((o) => o.value);
  assert.deepEqual(outputs[0], { replaced: [1, 2] });
  assert.deepEqual(outputs[1], { list: [[3], [], [9]], map: [[1, [4, 0xfe]], [2, [9]]] });
});
