// The TestHost's semantics, driven by a scriptable UDF: the JavaScript twin of
// guest-sdk/src/testing/tests.rs, plus what is particular to JavaScript.
//
//   node --test guest-sdk/js/          (from the repository root; Node.js >= 20)

import { test } from "node:test";
import assert from "node:assert/strict";

import * as weir from "../sdk/index.js";
import { TestHost, MAX_TIMESTAMP, keyHash } from "../sdk/testing.js";
import * as hostModule from "../sdk/host.js";

/**
 * Emits one record per firing timer; everything else is scripted by the elements:
 * {register, delete, registerProcessing, deleteProcessing, chain: [[at, then]], set,
 * clearAll, fail}.
 */
class Script {
  init(ctx) {
    this.text = ctx.valueState("text");
    this.chains = ctx.mapState("chains");
    this.seen = ctx.listState("seen");
    this.out = ctx.mainOutput();
    this.side = ctx.output("side");
  }

  processElement(ctx, el) {
    const cmd = el.json();
    if (cmd.fail !== undefined) {
      this.out.emit({ before: "the failure" });
      throw new Error("scripted failure", { cause: new Error(cmd.fail) });
    }
    this.seen.append(el.timestamp);
    for (const ts of cmd.register ?? []) ctx.registerEventTimer(ts);
    for (const ts of cmd.delete ?? []) ctx.deleteEventTimer(ts);
    for (const ts of cmd.registerProcessing ?? []) ctx.registerProcessingTimer(ts);
    for (const ts of cmd.deleteProcessing ?? []) ctx.deleteProcessingTimer(ts);
    for (const [at, then] of cmd.chain ?? []) this.chains.put(at, then);
    if (cmd.set !== undefined) this.text.set(cmd.set);
    if (cmd.clearAll) ctx.clearAllState();
  }

  onTimer(ctx, timer) {
    const then = this.chains.get(timer.timestamp);
    if (then !== undefined) {
      this.chains.remove(timer.timestamp);
      ctx.registerEventTimer(then);
    }
    this.out.emit(
      { key: timer.key, domain: timer.domain, watermark: ctx.currentWatermark(), now: ctx.currentProcessingTime() },
      { key: ctx.key },
    );
  }
}
const script = weir.processFunction(Script);

/** [key, timestamp] of every timer that fired, in order. */
const fired = (host) => host.takeOutputs("main").map((e) => [e.value.key, e.timestamp]);

test("event timers fire in timestamp then key order", () => {
  const h = new TestHost(script);
  h.process("main", "b", { register: [30, 10] }, 1);
  h.process("main", "a", { register: [20, 10] }, 2);
  h.advanceWatermark(25);
  assert.deepEqual(fired(h), [["a", 10], ["b", 10], ["a", 20]]);
  assert.deepEqual(h.pendingTimers(), [{ key: "b", domain: "event-time", timestamp: 30 }]);
  assert.equal(h.watermark, 25);
  h.advanceWatermark(30);
  assert.deepEqual(fired(h), [["b", 30]]);
  assert.deepEqual(h.pendingTimers(), []);
});

test("timers see the new watermark and are emitted at their timestamp", () => {
  const h = new TestHost(script);
  h.process("main", "a", { register: [10] }, 1);
  h.advanceWatermark(12);
  assert.deepEqual(h.outputs("main"), [
    { value: { key: "a", domain: "event-time", watermark: 12, now: 0 }, key: "a", timestamp: 10 },
  ]);
});

test("timers are unique per key, domain and timestamp", () => {
  const h = new TestHost(script);
  h.process("main", "a", { register: [10, 10], registerProcessing: [10] }, 1);
  h.process("main", "a", { register: [10] }, 2);
  h.process("main", "b", { register: [10] }, 3);
  assert.deepEqual(h.pendingTimers(), [
    { key: "a", domain: "event-time", timestamp: 10 },
    { key: "b", domain: "event-time", timestamp: 10 },
    { key: "a", domain: "processing-time", timestamp: 10 },
  ]);
  h.advanceWatermark(100);
  assert.deepEqual(fired(h), [["a", 10], ["b", 10]]);
});

test("deleting a timer and deleting a missing one", () => {
  const h = new TestHost(script);
  h.process("main", "a", { register: [10, 20] }, 1);
  // Deletes only a's timer at 10; b has none, 99 does not exist, the domain differs.
  h.process("main", "b", { delete: [10, 20] }, 2);
  h.process("main", "a", { delete: [10, 99], deleteProcessing: [20] }, 3);
  h.advanceWatermark(100);
  assert.deepEqual(fired(h), [["a", 20]]);
});

test("timers registered while firing fire in the same advance if due", () => {
  const h = new TestHost(script);
  // At 10: register 15 (due); at 15: register 5 (due, earlier than anything fired);
  // at 5: register 40 (not due).
  h.process("main", "a", { register: [10], chain: [[10, 15], [15, 5], [5, 40]] }, 1);
  h.process("main", "b", { register: [12] }, 1);
  h.advanceWatermark(25);
  assert.deepEqual(fired(h), [["a", 10], ["b", 12], ["a", 15], ["a", 5]]);
  assert.deepEqual(h.pendingTimers(), [{ key: "a", domain: "event-time", timestamp: 40 }]);
});

test("timers at or before the watermark wait for its next advance", () => {
  const h = new TestHost(script);
  h.advanceWatermark(100);
  h.process("main", "a", { register: [50, 100] }, 1);
  h.advanceWatermark(100);
  h.advanceWatermark(90);
  assert.deepEqual(fired(h), []);
  assert.equal(h.watermark, 100);
  h.advanceWatermark(101);
  const out = h.takeOutputs("main");
  assert.deepEqual(out.map((e) => e.timestamp), [50, 100]);
  assert.ok(out.every((e) => e.value.watermark === 101));
});

test("processing-time timers follow the clock", () => {
  const h = new TestHost(script, { processingTime: 1_000 });
  h.process("main", "a", { registerProcessing: [1_500, 2_000, 900] }, 1);
  h.process("main", "b", { registerProcessing: [1_500] }, 1);
  // The overdue timer fires at the next look at the clock, even if it did not move.
  h.setProcessingTime(1_000);
  assert.deepEqual(fired(h), [["a", 900]]);
  // The clock never goes back.
  h.setProcessingTime(500);
  assert.equal(h.processingTime, 1_000);
  h.setProcessingTime(1_600);
  assert.deepEqual(fired(h), [["a", 1_500], ["b", 1_500]]);
  assert.equal(h.processingTime, 1_600);
  // Event time does not fire processing timers.
  h.advanceWatermark(2 ** 53);
  assert.deepEqual(fired(h), []);
  h.setProcessingTime(5_000);
  const out = h.takeOutputs("main");
  assert.equal(out.length, 1);
  assert.deepEqual([out[0].timestamp, out[0].value.now, out[0].value.domain], [2_000, 5_000, "processing-time"]);
});

test("finish fires event timers, then processing timers", () => {
  const h = new TestHost(script);
  h.process("main", "a", { registerProcessing: [7, 3], register: [1_000_000, 5] }, 1);
  h.process("main", "b", { register: [MAX_TIMESTAMP], chain: [[MAX_TIMESTAMP, 6]] }, 1);
  h.finish();
  const out = h.takeOutputs("main");
  assert.deepEqual(
    out.map((e) => [e.value.domain, e.timestamp]),
    [
      ["event-time", 5],
      ["event-time", 1_000_000],
      ["event-time", MAX_TIMESTAMP],
      ["event-time", 6], // registered while firing, and due
      ["processing-time", 3],
      ["processing-time", 7],
    ],
  );
  assert.equal(out[4].value.now, 3);
  assert.deepEqual(h.pendingTimers(), []);
  assert.equal(h.watermark, MAX_TIMESTAMP);
});

// ---------------------------------------------------------------------------------------
// The order of timers due at the same time (docs/pipeline.md, "Event time and timers")

/**
 * FNV-1a, 64 bits, of a string's UTF-8 bytes: written out here rather than taken from the
 * SDK, so the tests below check the TestHost's order against an independent computation.
 */
function fnv1a64(text) {
  let h = 14695981039346656037n; // the offset basis
  for (const byte of new TextEncoder().encode(text)) {
    h = BigInt.asUintN(64, (h ^ BigInt(byte)) * 1099511628211n); // the prime, 2^40 + 2^8 + 0xb3
  }
  return h;
}

/** [key, timestamp] pairs sorted as the engine fires them: timestamp, key hash, key bytes. */
function engineOrder(timers) {
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  return timers.slice().sort((a, b) => cmp(a[1], b[1]) || cmp(fnv1a64(a[0]), fnv1a64(b[0])) || cmp(a[0], b[0]));
}

/** Two keys with the same FNV-1a 64 hash (0x13fbdf9782141172), found by a collision search. */
const COLLIDING = ["g2J-nUW-K5F", "FnT39gHPrbN"];

const KEYS = ["a", "b", "c", "1", "2", "3", "4", "5", "6", "ad-1", "ad-2", "ad-3"];

/**
 * Registers and deletes timers of both domains as scripted, and emits one record per
 * firing timer. An element holds `register` and `delete` ([["E" or "P", at], ...]) and `on`
 * ({P50: {register, delete}, ...}): what the timer of that domain and time does when it fires.
 */
const chains = weir.processFunction(
  class Chains {
    init(ctx) {
      this.on = ctx.mapState("on");
      this.out = ctx.mainOutput();
    }

    apply(ctx, script) {
      const domain = (code) => (code === "E" ? weir.EVENT_TIME : weir.PROCESSING_TIME);
      for (const [code, at] of script.register ?? []) ctx.registerTimer(domain(code), at);
      for (const [code, at] of script.delete ?? []) ctx.deleteTimer(domain(code), at);
    }

    processElement(ctx, el) {
      const script = el.json();
      this.apply(ctx, script);
      for (const [name, then] of Object.entries(script.on ?? {})) this.on.put(name, then);
    }

    onTimer(ctx, timer) {
      const name = (timer.domain === weir.EVENT_TIME ? "E" : "P") + timer.timestamp;
      const then = this.on.get(name);
      if (then !== undefined) this.apply(ctx, then);
      this.out.emit({ key: timer.key, timer: name }, { key: ctx.keyBytes });
    }
  },
);

/** [key, "E10" or "P10"] of every timer that fired, in order. */
const firedNames = (host) => host.takeOutputs("main").map((e) => [e.value.key, e.value.timer]);

test("the independent hash matches the FNV-1a test vectors, and so does keyHash", () => {
  for (const [text, expected] of [["", 0xcbf29ce484222325n], ["a", 0xaf63dc4c8601ec8cn], ["foobar", 0x85944171f73967e8n]]) {
    assert.equal(fnv1a64(text), expected);
    assert.equal(keyHash(text), expected);
    assert.equal(keyHash(new TextEncoder().encode(text)), expected);
  }
  assert.equal(fnv1a64(COLLIDING[0]), 0x13fbdf9782141172n);
  assert.equal(fnv1a64(COLLIDING[1]), 0x13fbdf9782141172n);
});

test("event timers at one time fire in key hash order, not key order", () => {
  let h = new TestHost(chains);
  for (const key of KEYS) h.process("main", key, { register: [["E", 10], ["E", 5]] }, 1);
  h.advanceWatermark(10);
  const expected = engineOrder(KEYS.flatMap((k) => [[k, 5], [k, 10]]));
  const byBytes = expected.slice().sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1));
  assert.notDeepEqual(expected, byBytes, "byte order would differ");
  assert.deepEqual(firedNames(h), expected.map(([k, ts]) => [k, `E${ts}`]));
  // By hand: a 0xaf63dc4c8601ec8c, b 0xaf63df4c8601f1a5, c 0xaf63de4c8601eff2.
  h = new TestHost(chains);
  for (const key of ["a", "b", "c"]) h.process("main", key, { register: [["E", 7]] }, 1);
  assert.deepEqual(h.pendingTimers().map((t) => t.key), ["a", "c", "b"]);
  h.advanceWatermark(7);
  assert.deepEqual(firedNames(h), [["a", "E7"], ["c", "E7"], ["b", "E7"]]);
});

test("processing timers at one time fire in key hash order, not key order", () => {
  const h = new TestHost(chains);
  for (const key of KEYS.slice().reverse()) h.process("main", key, { register: [["P", 20], ["P", 30]] }, 1);
  h.setProcessingTime(30);
  const expected = engineOrder(KEYS.flatMap((k) => [[k, 20], [k, 30]]));
  assert.deepEqual(firedNames(h), expected.map(([k, ts]) => [k, `P${ts}`]));
});

test("keys whose hashes collide fire in key byte order", () => {
  for (const [domain, advance] of [["E", (h) => h.advanceWatermark(3)], ["P", (h) => h.setProcessingTime(3)]]) {
    const h = new TestHost(chains);
    for (const key of COLLIDING) h.process("main", key, { register: [[domain, 3]] }, 1); // larger bytes first
    advance(h);
    assert.deepEqual(firedNames(h), [[COLLIDING[1], `${domain}3`], [COLLIDING[0], `${domain}3`]]);
  }
});

test("an event timer registered while firing takes its place at once", () => {
  // As in the engine's ordered set: the first pending due timer always fires next.
  const h = new TestHost(chains);
  h.process("main", "a", { register: [["E", 10]], on: { E10: { register: [["E", 9]] } } }, 1);
  h.process("main", "b", { register: [["E", 10]] }, 1);
  h.process("main", "c", { register: [["E", 10]] }, 1);
  h.advanceWatermark(10);
  assert.deepEqual(firedNames(h), [["a", "E10"], ["a", "E9"], ["c", "E10"], ["b", "E10"]]);
});

test("a processing timer registered while firing waits for the due ones", () => {
  // As the engine's timing wheel: the timers due when the clock is read are staged and
  // fire in order; one registered meanwhile fires after them, even if earlier. A staged
  // one can still be deleted, and registering it again changes nothing.
  const h = new TestHost(chains);
  h.process("main", "a", { register: [["P", 50], ["P", 70]], on: { P50: { register: [["P", 55], ["P", 70]] } } }, 1);
  h.process("main", "b", { register: [["P", 60], ["P", 65]], on: { P60: { delete: [["P", 65]] } } }, 1);
  h.setProcessingTime(100);
  assert.deepEqual(firedNames(h), [["a", "P50"], ["b", "P60"], ["a", "P70"], ["a", "P55"]]);
});

test("at the end, event timers registered by processing timers fire too", () => {
  const h = new TestHost(chains);
  h.process(
    "main",
    "a",
    { register: [["P", 7], ["E", 8]], on: { P7: { register: [["E", 3], ["P", 9]] }, E3: { register: [["P", 2]] } } },
    1,
  );
  h.finish();
  assert.deepEqual(firedNames(h), [["a", "E8"], ["a", "P7"], ["a", "P9"], ["a", "E3"], ["a", "P2"]]);
  assert.deepEqual(h.pendingTimers(), []);
});

test("state is per key, and clearAllState keeps the timers", () => {
  const h = new TestHost(script);
  h.process("main", "a", { set: "x", register: [10] }, 1);
  h.process("main", "b", { set: "y" }, 2);
  assert.ok(h.hasState("a") && h.hasState("b") && !h.hasState("c"));
  assert.deepEqual(h.keysWithState(), ["a", "b"]);
  h.process("main", "a", { clearAll: true }, 3);
  assert.ok(!h.hasState("a") && h.hasState("b"));
  assert.deepEqual(h.pendingTimers(), [{ key: "a", domain: "event-time", timestamp: 10 }]);
});

test("a failing call throws the UDF's own error and drops what it emitted", () => {
  const h = new TestHost(script);
  assert.throws(
    () => h.process("main", "a", { fail: "boom" }, 1),
    (e) => e.message === "scripted failure" && e.cause.message === "boom" && /processElement/.test(e.stack),
  );
  assert.deepEqual(h.outputs("main"), []);
  assert.throws(() => h.process("main", "a", "{not json", 1), /^Error: input `main`: record is not valid JSON: /);
  assert.throws(() => h.process("nope", "a", {}, 1), { message: 'TestHost: unknown input `nope`; inputs are ["main"]' });
  assert.throws(() => h.outputs("nope"), { message: 'TestHost: output `nope` was not declared; declared outputs: ["main","side"]' });
});

/** Reads and writes every kind of state from inside a key scope. */
const states = weir.processFunction(
  class {
    init(ctx) {
      this.value = ctx.valueState("value");
      this.list = ctx.listState("list");
      this.map = ctx.mapState("map");
      this.sameName = ctx.valueState("value", weir.codecs.text);
      this.out = ctx.mainOutput();
    }

    processElement(ctx, el) {
      switch (el.json()) {
        case "write":
          assert.equal(this.value.get(), undefined);
          this.value.set(["v", 7]);
          this.list.append("one");
          this.list.append("two");
          this.map.put("b", 2);
          this.map.put("a", 1);
          this.map.put("b", 3);
          break;
        case "read":
          this.out.emit({
            value: this.value.get() ?? null,
            list: this.list.get(),
            map: this.map.entries(),
            b: this.map.get("b") ?? null,
            missing: this.map.get("zzz") ?? null,
            hasA: this.map.has("a"),
          });
          break;
        case "shrink":
          this.list.set(["only"]);
          this.map.remove("a");
          this.map.remove("nope");
          this.value.clear();
          break;
        case "empty":
          this.list.set([]);
          this.map.clear();
          break;
        case "mistyped":
          this.sameName.set("not JSON");
          this.value.get();
          break;
        default:
          throw new Error(`unknown command ${el.text()}`);
      }
    }
  },
);

test("value, list and map state round-trip", () => {
  const h = new TestHost(states);
  h.process("main", "k", '"write"', 1);
  h.process("main", "k", '"read"', 2);
  h.process("main", "other", '"read"', 3);
  const out = h.takeOutputs("main");
  assert.deepEqual(out[0], {
    value: { value: ["v", 7], list: ["one", "two"], map: [["a", 1], ["b", 3]], b: 3, missing: null, hasA: true },
    key: null,
    timestamp: 2,
  });
  assert.deepEqual(out[1].value, { value: null, list: [], map: [], b: null, missing: null, hasA: false });
  h.process("main", "k", '"shrink"', 4);
  h.process("main", "k", '"read"', 5);
  assert.deepEqual(h.takeOutputs("main")[0].value, {
    value: null,
    list: ["only"],
    map: [["b", 3]],
    b: 3,
    missing: null,
    hasA: false,
  });
  assert.ok(h.hasState("k"));
  h.process("main", "k", '"empty"', 6);
  assert.ok(!h.hasState("k"), "an empty list and an empty map are no state");
});

test("a state that cannot be decoded is a StateDecodeError", () => {
  const h = new TestHost(states);
  assert.throws(
    () => h.process("main", "k", '"mistyped"', 1),
    (e) =>
      e instanceof weir.StateDecodeError &&
      e.message.startsWith("state `value`: cannot decode stored value as json ("),
  );
});

/** Version 1 of a counter stored a plain number; version 2 an object under schema 1. */
const counter = (version) =>
  weir.processFunction(
    class {
      init(ctx) {
        this.count =
          version === 1
            ? ctx.valueState("count")
            : ctx
                .valueState("count")
                .schema(1)
                .migrateFrom(0, (n) => ({ n, migrated: true }));
        this.out = ctx.mainOutput();
      }
      processElement() {
        if (version === 1) {
          const n = (this.count.get() ?? 0) + 1;
          this.count.set(n);
          this.out.emit({ n });
          return;
        }
        const counted = this.count.get() ?? { n: 0, migrated: false };
        counted.n += 1;
        this.count.set(counted);
        this.out.emit(counted);
      }
    },
  );

test("a schema migration converts old values on first read", () => {
  const v1 = new TestHost(counter(1));
  v1.process("main", "k", "{}", 1);
  v1.process("main", "k", "{}", 2);
  const stored = v1.stateBytes("k", "count");
  assert.equal(new TextDecoder().decode(stored), "2");
  const v2 = new TestHost(counter(2));
  v2.setStateBytes("k", "count", stored);
  v2.process("main", "k", "{}", 3);
  v2.process("main", "k", "{}", 4);
  v2.process("main", "new", "{}", 5);
  assert.deepEqual(
    v2.takeOutputs("main").map((o) => o.value),
    [
      { n: 3, migrated: true },
      { n: 4, migrated: true },
      { n: 1, migrated: false },
    ],
  );
  // Written back under schema 1: the tag, then the JSON.
  assert.deepEqual([...v2.stateBytes("k", "count").subarray(0, 3)], [0xfe, 0xed, 1]);
});

const utf8 = (text) => new TextEncoder().encode(text);
const fromUtf8 = (bytes) => new TextDecoder().decode(bytes);
/** Bytes stored under schema `version`: the tag fe ed, the version, then `json`. */
const tagged = (version, json) => Uint8Array.of(0xfe, 0xed, version, ...utf8(json));
/** [version, body as text] of stored bytes. */
const untag = (bytes) =>
  bytes[0] === 0xfe && bytes[1] === 0xed ? [bytes[2], fromUtf8(bytes.subarray(3))] : [0, fromUtf8(bytes)];

/**
 * Version 1 of a UDF kept plain numbers in a list; version 2 keeps objects under schema 1,
 * and counts the items it converts in `calls`.
 */
const readings = (version, calls = { converted: 0 }) =>
  weir.processFunction(
    class {
      init(ctx) {
        this.items =
          version === 1
            ? ctx.listState("items")
            : ctx
                .listState("items")
                .schema(1)
                .migrateFrom(0, (n) => {
                  calls.converted += 1;
                  return { n, migrated: true };
                });
        this.out = ctx.mainOutput();
      }
      processElement(ctx, el) {
        const cmd = el.json();
        if (cmd.append !== undefined) this.items.append(version === 1 ? cmd.append : { n: cmd.append, migrated: false });
        if (cmd.read) this.out.emit(this.items.get());
        if (cmd.set !== undefined) this.items.set(cmd.set.map((n) => ({ n, migrated: false })));
      }
    },
  );

test("a list state's schema migration converts old items on read and writes the list back", () => {
  // An earlier version of the UDF stored untagged items.
  const v1 = new TestHost(readings(1));
  v1.process("main", "k", { append: 1 }, 1);
  v1.process("main", "k", { append: 2 }, 2);
  const stored = v1.listStateBytes("k", "items");
  assert.deepEqual(stored.map(fromUtf8), ["1", "2"]);

  const calls = { converted: 0 };
  const v2 = new TestHost(readings(2, calls));
  v2.setListStateBytes("k", "items", stored);
  assert.deepEqual(v2.listStateBytes("k", "items").map(fromUtf8), ["1", "2"]);
  // append writes under the current schema without reading (or converting) the others.
  v2.process("main", "k", { append: 3 }, 3);
  assert.deepEqual(v2.listStateBytes("k", "items").map(untag), [[0, "1"], [0, "2"], [1, '{"n":3,"migrated":false}']]);
  assert.equal(calls.converted, 0);

  v2.process("main", "k", { read: true }, 4);
  const converted = [
    { n: 1, migrated: true },
    { n: 2, migrated: true },
    { n: 3, migrated: false },
  ];
  assert.deepEqual(v2.takeOutputs("main").map((o) => o.value), [converted]);
  assert.equal(calls.converted, 2);
  // Written back, every item under schema 1: the tag fe ed 01, then the JSON.
  const after = v2.listStateBytes("k", "items");
  for (const item of after) assert.deepEqual([...item.subarray(0, 3)], [0xfe, 0xed, 0x01]);
  assert.deepEqual(after.map(untag), [
    [1, '{"n":1,"migrated":true}'],
    [1, '{"n":2,"migrated":true}'],
    [1, '{"n":3,"migrated":false}'],
  ]);
  // Each key migrates once.
  v2.process("main", "k", { read: true }, 5);
  assert.deepEqual(v2.takeOutputs("main").map((o) => o.value), [converted]);
  assert.equal(calls.converted, 2);
  // set writes under the current schema; a new key is written tagged from the start.
  v2.process("main", "k", { set: [7] }, 6);
  assert.deepEqual(v2.listStateBytes("k", "items").map(untag), [[1, '{"n":7,"migrated":false}']]);
  v2.process("main", "new", { append: 1 }, 7);
  assert.deepEqual(v2.listStateBytes("new", "items").map(untag), [[1, '{"n":1,"migrated":false}']]);
  // An empty list is no state; listStateBytes of a key without one is empty.
  v2.setListStateBytes("new", "items", []);
  assert.deepEqual(v2.listStateBytes("new", "items"), []);
  assert.ok(!v2.hasState("new"));
  assert.throws(() => v2.listStateBytes("k", "nope"), { message: "TestHost: no list state `nope` was declared" });
});

/**
 * Version 1 of a UDF kept text labels (weir.codecs.text) in a map; version 2 keeps JSON
 * objects under schema 1, converting with a migration that reads the old values as text.
 */
const labels = (calls) =>
  weir.processFunction(
    class {
      init(ctx) {
        this.labels = ctx
          .mapState("labels")
          .schema(1)
          .migrateFrom(
            0,
            (text) => {
              calls.converted += 1;
              return { label: text, migrated: true };
            },
            weir.codecs.text,
          );
        this.out = ctx.mainOutput();
      }
      processElement(ctx, el) {
        const cmd = el.json();
        if (cmd.has !== undefined) this.out.emit({ has: this.labels.has(cmd.has), keys: this.labels.keys() });
        if (cmd.get !== undefined) this.out.emit(this.labels.get(cmd.get) ?? null);
        if (cmd.entries) this.out.emit(this.labels.entries());
        if (cmd.values) this.out.emit(this.labels.values());
        if (cmd.put !== undefined) this.labels.put(cmd.put, { label: cmd.put.toUpperCase(), migrated: false });
      }
    },
  );

test("a map state's schema migration converts old values on read and writes each back", () => {
  const calls = { converted: 0 };
  const h = new TestHost(labels(calls));
  // As the earlier version left it: JSON keys (never tagged), untagged text values.
  h.setMapStateBytes("k", "labels", [
    [utf8('"b"'), utf8("bee")],
    [utf8('"a"'), utf8("ay")],
    [utf8('"c"'), utf8("sea")],
  ]);
  const storedMap = () => h.mapStateBytes("k", "labels").map(([k, v]) => [fromUtf8(k), untag(v)]);
  assert.deepEqual(storedMap(), [
    ['"a"', [0, "ay"]],
    ['"b"', [0, "bee"]],
    ['"c"', [0, "sea"]],
  ]);

  // has and keys do not decode the values: nothing is converted.
  h.process("main", "k", { has: "a" }, 1);
  h.process("main", "k", { has: "z" }, 1);
  assert.deepEqual(h.takeOutputs("main").map((o) => o.value), [
    { has: true, keys: ["a", "b", "c"] },
    { has: false, keys: ["a", "b", "c"] },
  ]);
  assert.equal(calls.converted, 0);
  assert.deepEqual(storedMap()[0], ['"a"', [0, "ay"]]);

  // get converts one value and writes it back.
  h.process("main", "k", { get: "a" }, 2);
  h.process("main", "k", { get: "a" }, 3);
  h.process("main", "k", { get: "zzz" }, 3);
  assert.deepEqual(h.takeOutputs("main").map((o) => o.value), [
    { label: "ay", migrated: true },
    { label: "ay", migrated: true },
    null,
  ]);
  assert.equal(calls.converted, 1);
  const a = h.mapStateBytes("k", "labels")[0];
  assert.equal(fromUtf8(a[0]), '"a"', "the key is not tagged");
  assert.deepEqual([...a[1].subarray(0, 3)], [0xfe, 0xed, 0x01]);
  assert.deepEqual(storedMap(), [
    ['"a"', [1, '{"label":"ay","migrated":true}']],
    ['"b"', [0, "bee"]],
    ['"c"', [0, "sea"]],
  ]);

  // put writes under the current schema; entries converts the rest, and writes each back.
  h.process("main", "k", { put: "d" }, 4);
  h.process("main", "k", { entries: true }, 5);
  const entries = [
    ["a", { label: "ay", migrated: true }],
    ["b", { label: "bee", migrated: true }],
    ["c", { label: "sea", migrated: true }],
    ["d", { label: "D", migrated: false }],
  ];
  assert.deepEqual(h.takeOutputs("main").map((o) => o.value), [entries]);
  assert.equal(calls.converted, 3);
  for (const [, value] of h.mapStateBytes("k", "labels")) assert.deepEqual([...value.subarray(0, 3)], [0xfe, 0xed, 0x01]);
  assert.deepEqual(storedMap(), [
    ['"a"', [1, '{"label":"ay","migrated":true}']],
    ['"b"', [1, '{"label":"bee","migrated":true}']],
    ['"c"', [1, '{"label":"sea","migrated":true}']],
    ['"d"', [1, '{"label":"D","migrated":false}']],
  ]);
  // Each entry migrates once.
  h.process("main", "k", { values: true }, 6);
  assert.deepEqual(h.takeOutputs("main").map((o) => o.value), [entries.map((e) => e[1])]);
  assert.equal(calls.converted, 3);
  // A Map of entries does too; none removes the map.
  h.setMapStateBytes("m", "labels", new Map([[utf8('"x"'), utf8("ex")]]));
  h.process("main", "m", { values: true }, 7);
  assert.deepEqual(h.takeOutputs("main")[0].value, [{ label: "ex", migrated: true }]);
  h.setMapStateBytes("m", "labels", []);
  assert.deepEqual(h.mapStateBytes("m", "labels"), []);
  assert.ok(!h.hasState("m"));
  assert.throws(() => h.setMapStateBytes("m", "nope", []), { message: "TestHost: no map state `nope` was declared" });
});

/** A value, a list and a map state under schema 1 with a migration from 0 only; reads one of them. */
const schemaOne = weir.processFunction(
  class {
    init(ctx) {
      const toObject = (n) => ({ n });
      this.value = ctx.valueState("value").schema(1).migrateFrom(0, toObject);
      this.list = ctx.listState("list").schema(1).migrateFrom(0, toObject);
      this.map = ctx.mapState("map").schema(1).migrateFrom(0, toObject);
    }
    processElement(ctx, el) {
      const read = el.json();
      if (read === "value") this.value.get();
      if (read === "list") this.list.get();
      if (read === "map get") this.map.get("a");
      if (read === "map entries") this.map.entries();
    }
  },
);

test("a stored value under a schema version without a migration is a StateDecodeError", () => {
  const h = new TestHost(schemaOne);
  const noMigration = (name, version) => (e) =>
    e instanceof weir.StateDecodeError &&
    e.message ===
      `state \`${name}\`: the stored value has schema version ${version}, this version of the UDF reads version 1 and has no migration from ${version}`;
  h.setStateBytes("k", "value", tagged(7, "1"));
  // One item of the list under an unknown version fails the whole read; the list stays as it was.
  h.setListStateBytes("k", "list", [utf8("1"), tagged(1, '{"n":2}'), tagged(7, "3")]);
  h.setMapStateBytes("k", "map", [
    [utf8('"a"'), tagged(9, "1")],
    [utf8('"b"'), utf8("2")],
  ]);
  assert.throws(() => h.process("main", "k", '"value"', 1), noMigration("value", 7));
  assert.throws(() => h.process("main", "k", '"list"', 1), noMigration("list", 7));
  assert.deepEqual(h.listStateBytes("k", "list").map(untag), [[0, "1"], [1, '{"n":2}'], [7, "3"]]);
  assert.throws(() => h.process("main", "k", '"map get"', 1), noMigration("map", 9));
  assert.throws(() => h.process("main", "k", '"map entries"', 1), noMigration("map", 9));
  // A value under a version that is neither the current one nor migrated from: 2 here.
  h.setStateBytes("k", "value", tagged(2, "1"));
  assert.throws(() => h.process("main", "k", '"value"', 1), noMigration("value", 2));
  // Under the current version, a body its codec cannot read is the codec's error.
  h.setListStateBytes("k", "list", [tagged(1, "{not json")]);
  assert.throws(
    () => h.process("main", "k", '"list"', 1),
    (e) => e instanceof weir.StateDecodeError && e.message.startsWith("state `list`: cannot decode stored value as json ("),
  );
});

test("schema versions are 1 to 255, migrations from 0 to 255", () => {
  const declare = weir.processFunction(
    class {
      init(ctx) {
        const kind = ctx.configValue("kind");
        const state =
          kind === "value" ? ctx.valueState("s") : kind === "list" ? ctx.listState("s") : ctx.mapState("s");
        const version = JSON.parse(ctx.configValue("version"));
        if (ctx.configBool("migrate", false)) state.migrateFrom(version, (old) => old);
        else assert.equal(state.schema(version), state);
      }
      processElement() {}
    },
  );
  const declared = (kind, version, migrate = false) =>
    new TestHost(declare, { config: { kind, version: JSON.stringify(version), migrate } });
  for (const kind of ["value", "list", "map"]) {
    for (const version of [0, 256, -1, 1.5, "1"]) {
      assert.throws(() => declared(kind, version), {
        name: "RangeError",
        message: `state \`s\`: a schema version is 1 to 255, not ${typeof version === "string" ? JSON.stringify(version) : version}`,
      });
    }
    declared(kind, 1);
    declared(kind, 255);
    assert.throws(() => declared(kind, 256, true), RangeError);
    declared(kind, 0, true);
  }
});

test("inputs, config, keys, timestamps and logs", () => {
  const inputs = weir.processFunction(
    class {
      init(ctx) {
        assert.deepEqual(ctx.inputs, ["orders", "payments"]);
        assert.equal(ctx.configValue("x"), "2");
        assert.equal(ctx.configValue("y"), undefined);
        assert.equal(ctx.configInt("n"), 17);
        ctx.logInfo("ready");
        this.out = ctx.mainOutput();
      }
      processElement(ctx, el) {
        ctx.logWarn(`from ${el.input}`);
        console.log("via", { the: "console" });
        this.out.emit(
          { input: el.input, index: el.inputIndex, key: el.key },
          { key: "k", timestamp: el.timestamp + 1 },
        );
      }
    },
  );
  const h = new TestHost(inputs, {
    inputs: ["orders", "payments"],
    config: [["x", "1"], ["x", "2"], ["n", 17]],
    logLevel: "off",
  });
  h.process("payments", "p1", "{}", 10);
  assert.deepEqual(h.outputs("main"), [{ value: { input: "payments", index: 1, key: "p1" }, key: "k", timestamp: 11 }]);
  assert.deepEqual(h.logs(), [
    { level: "info", key: null, message: "ready" },
    { level: "warn", key: "p1", message: "from payments" },
    { level: "info", key: "p1", message: 'via {"the":"console"}' },
  ]);
});

test("the sandbox has no clock during calls, and the test keeps its own", () => {
  const clocks = weir.processFunction({
    processElement(ctx, el) {
      if (el.text() === '"date"') new Date();
      if (el.text() === '"now"') Date.now();
      if (el.text() === '"perf"') performance.now();
      assert.equal(new Date(0).toISOString(), "1970-01-01T00:00:00.000Z");
      assert.equal(Date.UTC(1970, 0, 2), 86_400_000);
    },
  });
  const h = new TestHost(clocks);
  h.process("main", "k", "{}", 1);
  for (const what of ["date", "now", "perf"]) {
    assert.throws(() => h.process("main", "k", `"${what}"`, 1), /is not available in a Weir UDF: the sandbox has no clock/);
  }
  assert.equal(typeof Date.now(), "number");
  assert.equal(typeof performance.now(), "number");
  assert.ok(new Date() instanceof Date);
});

test("what a component lacks is missing during calls, and only then", () => {
  const globals = weir.processFunction({
    processElement(ctx, el) {
      const name = el.json();
      if (typeof globalThis[name] !== "undefined") throw new Error(`${name} is there`);
      globalThis[name]; // eslint-disable-line no-unused-expressions
    },
  });
  const h = new TestHost(globals);
  for (const name of ["setTimeout", "fetch", "TextEncoder", "TextDecoder", "crypto", "URL", "Intl", "Buffer", "process"]) {
    h.process("main", "k", JSON.stringify(name), 1);
    assert.notEqual(typeof globalThis[name], "undefined", name);
  }
  const textEncoder = weir.processFunction({
    processElement() {
      new TextEncoder(); // eslint-disable-line no-new
    },
  });
  assert.throws(() => new TestHost(textEncoder).process("main", "k", "{}", 1), {
    name: "ReferenceError",
    message: "TextEncoder is not defined",
  });
});

test("a UDF is given as its export, its module or its class; reinit makes a fresh instance", () => {
  class Counter {
    init(ctx) {
      this.calls = 0;
      this.out = ctx.mainOutput();
    }
    processElement() {
      this.out.emit(++this.calls);
    }
  }
  for (const udf of [Counter, weir.processFunction(Counter), { processFunction: weir.processFunction(Counter) }]) {
    const h = new TestHost(udf);
    h.process("main", "k", "{}", 1);
    h.process("main", "k", "{}", 1);
    assert.equal(h.udf.calls, 2);
    h.reinit();
    h.process("main", "k", "{}", 1);
    assert.deepEqual(h.outputs("main").map((o) => o.value), [1, 2, 1]);
  }
  assert.throws(() => new TestHost({ nothing: true }), /processElement/);
  assert.throws(() => new TestHost(Counter, { input: ["x"] }), /unknown option `input`/);
});

test("state and timers outside a call, and outputs after init, are refused", () => {
  const misuse = weir.processFunction(
    class {
      init(ctx) {
        this.count = ctx.valueState("count");
        this.out = ctx.mainOutput();
        if (ctx.configBool("state_in_init", false)) this.count.get();
        this.initCtx = ctx;
      }
      processElement() {
        this.initCtx.output("late");
      }
    },
  );
  assert.throws(
    () => new TestHost(misuse, { config: { state_in_init: true } }),
    /keyed state and timers can only be used while processing an element or a timer, not in init/,
  );
  const h = new TestHost(misuse);
  assert.throws(() => h.process("main", "k", "{}", 1), { message: 'output "late" must be declared in init' });
  // Outside the TestHost's calls there is no host at all (and the export throws the
  // contract's error record, as it does in a component).
  assert.throws(
    () => misuse.init({ config: [], inputs: ["main"] }),
    (e) => e.kind === "failed" && e.message.startsWith("cannot declare state `count`: weir: there is no Weir host here"),
  );
});

test("raw JSON members keep their text, on any engine", () => {
  const text = '{"a": 1.10, "b": {"a": "x\\"y", "c": [1e3, {"a": null}]}, "__proto__": {"a": true}, "a": 2.50}';
  const parsed = weir.parseJsonKeepingRaw(text, ["a"]);
  assert.equal(weir.rawText(parsed.a), "2.50");
  assert.equal(weir.rawText(parsed.b.a), '"x\\"y"');
  assert.deepEqual(parsed.b.c[0], 1000);
  assert.equal(weir.rawText(parsed.b.c[1].a), "null");
  assert.equal(weir.rawText(parsed["__proto__"].a), "true");
  assert.equal(Object.getPrototypeOf(parsed), Object.prototype);
  assert.deepEqual(Object.keys(parsed), ["a", "b", "__proto__"]);
  assert.equal(weir.toJson(parsed), '{"a":2.50,"b":{"a":"x\\"y","c":[1000,{"a":null}]},"__proto__":{"a":true}}');
  assert.throws(() => weir.parseJsonKeepingRaw("{1}", ["a"]), SyntaxError);
});

// ---------------------------------------------------------------------------------------
// State time-to-live

/**
 * A value, a list and a map state with the time-to-live the config gives (`domain`:
 * event or processing, `ttl`, `refresh_on_read`), written and read as the elements say:
 * {set, append, setList, put: [[k, v]], get, getList, getMap: [k], entries, timer}. Emits
 * what it read; a timer sets the value to "timer".
 */
class Expiring {
  init(ctx) {
    const after = ctx.configDuration("ttl", "5s");
    const options = { refreshOnRead: ctx.configBool("refresh_on_read", false) };
    const ttl =
      ctx.configChoice("domain", ["event", "processing"], "event") === "event"
        ? weir.StateTtl.eventTime(after, options)
        : weir.StateTtl.processingTime(after, options);
    this.value = ctx.valueState("value", weir.codecs.json, { ttl });
    this.list = ctx.listState("list", undefined, { ttl });
    this.map = ctx.mapState("map", { ttl });
    this.out = ctx.mainOutput();
  }

  processElement(ctx, el) {
    const cmd = el.json();
    if (cmd.set !== undefined) this.value.set(cmd.set);
    if (cmd.append !== undefined) this.list.append(cmd.append);
    if (cmd.setList !== undefined) this.list.set(cmd.setList);
    for (const [k, v] of cmd.put ?? []) this.map.put(k, v);
    if (cmd.timer !== undefined) ctx.registerEventTimer(cmd.timer);
    const read = {};
    if (cmd.get) read.value = this.value.get() ?? null;
    if (cmd.getList) read.list = this.list.get();
    if (cmd.getMap) read.map = Object.fromEntries(cmd.getMap.map((k) => [k, this.map.get(k) ?? null]));
    if (cmd.entries) read.entries = this.map.entries();
    if (Object.keys(read).length > 0) this.out.emit(read);
  }

  onTimer() {
    this.value.set("timer");
  }
}
const expiring = weir.processFunction(Expiring);

/** What the TestHost stores for `key`, decoded: {value, list, map}. */
function stored(h, key) {
  const json = weir.codecs.json;
  const value = h.stateBytes(key, "value");
  return {
    value: value === undefined ? null : json.decode(value),
    list: h.listStateBytes(key, "list").map((item) => json.decode(item)),
    map: h.mapStateBytes(key, "map").map(([k, v]) => [json.decode(k), json.decode(v)]),
  };
}

/** The values of what was emitted since the last call. */
const emitted = (h) => h.takeOutputs("main").map((r) => r.value);

test("StateTtl: event or processing time, a duration or milliseconds, more than 0 ms", () => {
  const ttl = weir.StateTtl.eventTime("10m");
  assert.deepEqual([ttl.millis, ttl.domain, ttl.refreshOnRead], [600_000, "event-time", false]);
  assert.ok(Object.isFrozen(ttl));
  const read = weir.StateTtl.processingTime(1_500, { refreshOnRead: true });
  assert.deepEqual([read.millis, read.domain, read.refreshOnRead], [1_500, weir.PROCESSING_TIME, true]);
  assert.equal(String(read), 'StateTtl.processingTime("1s 500ms", { refreshOnRead: true })');
  assert.equal(weir.StateTtl.eventTime("1h 30m").millis, 5_400_000);
  assert.throws(() => weir.StateTtl.eventTime(0), {
    name: "RangeError",
    message: "StateTtl.eventTime(after): a time-to-live must be longer than 0 ms, got 0",
  });
  assert.throws(() => weir.StateTtl.processingTime("0s"), {
    message: 'StateTtl.processingTime(after): a time-to-live must be longer than 0 ms, got "0s"',
  });
  assert.throws(() => weir.StateTtl.eventTime(-5), /must be longer than 0 ms, got -5$/);
  assert.throws(() => weir.StateTtl.eventTime("soon"), /^Error: StateTtl\.eventTime\(after\): invalid duration "soon": /);
  assert.throws(() => weir.StateTtl.eventTime(1.5), { name: "TypeError" });
  assert.throws(() => weir.StateTtl.eventTime("1s", { refreshOnread: true }), /unknown option `refreshOnread`/);
  assert.throws(() => weir.StateTtl.eventTime("1s", { refreshOnRead: "yes" }), /refreshOnRead is true or false/);
  assert.throws(() => new weir.StateTtl(), /StateTtl\.eventTime\(after\) or StateTtl\.processingTime\(after\)/);

  const wrong = (declare) =>
    weir.processFunction(
      class {
        init(ctx) {
          declare(ctx);
        }
        processElement() {}
      },
    );
  assert.throws(() => new TestHost(wrong((ctx) => ctx.valueState("v", undefined, { ttl: "5m" }))), {
    name: "TypeError",
    message: 'state `v`: ttl is a weir.StateTtl (StateTtl.eventTime("10m"), StateTtl.processingTime("1h")), not "5m"',
  });
  assert.throws(() => new TestHost(wrong((ctx) => ctx.listState("l", undefined, { tll: ttl }))), {
    message: "state `l`: unknown option `tll` (options: ttl)",
  });
  assert.throws(() => new TestHost(wrong((ctx) => ctx.mapState("m", { key: weir.codecs.text, ttl: 5 }))), /ttl is a weir\.StateTtl/);
  // Without a ttl (or with ttl: undefined) a state is declared as before.
  new TestHost(wrong((ctx) => [ctx.valueState("v", undefined, {}), ctx.listState("l", undefined, { ttl: undefined }), ctx.mapState("m", {})]));
});

test("the host refuses a time-to-live of 0 ms", () => {
  const zero = weir.processFunction(
    class {
      init() {
        hostModule.state.declareWithTtl("x", "value", { millis: 0, domain: "event-time", refresh: "on-write" });
      }
      processElement() {}
    },
  );
  assert.throws(() => new TestHost(zero), { message: "state `x`: a time-to-live must be longer than 0 ms" });
  const malformed = weir.processFunction(
    class {
      init() {
        hostModule.state.declareWithTtl("x", "value", { millis: 5, domain: "event-time", refresh: "sometimes" });
      }
      processElement() {}
    },
  );
  assert.throws(() => new TestHost(malformed), /no ttl-refresh "sometimes" \(the host traps\)/);
});

test("an event-time TTL: a value expires when the watermark reaches its stamp + ttl, not a ms before", () => {
  const h = new TestHost(expiring, { config: { ttl: "5s" } });
  h.process("main", "k", { set: "a" }, 1_000); // stamped 1_000: expires at 6_000
  h.advanceWatermark(5_999);
  assert.deepEqual(stored(h, "k"), { value: "a", list: [], map: [] });
  h.process("main", "k", { get: true }, 5_999); // reads do not refresh it
  assert.deepEqual(emitted(h), [{ value: "a" }]);
  h.advanceWatermark(6_000);
  assert.equal(h.hasState("k"), false);
  assert.equal(h.stateBytes("k", "value"), undefined);
  h.process("main", "k", { get: true }, 6_000);
  assert.deepEqual(emitted(h), [{ value: null }]);

  // A write starts it again: set at 7_000, set again at 10_000, so it lives to 15_000.
  h.process("main", "k", { set: "b" }, 7_000);
  h.process("main", "k", { set: "c" }, 10_000);
  h.advanceWatermark(14_999);
  assert.equal(stored(h, "k").value, "c");
  h.advanceWatermark(15_000);
  assert.deepEqual(h.keysWithState(), []);
});

test("an event-time stamp is the element's or timer's timestamp, or the watermark if later", () => {
  const h = new TestHost(expiring, { config: { ttl: "5s" } });
  h.advanceWatermark(10_000);
  h.process("main", "late", { set: "late" }, 2_000); // stamped at the watermark, 10_000: expires at 15_000
  h.process("main", "early", { set: "early", timer: 20_000 }, 12_000); // stamped 12_000: expires at 17_000
  h.advanceWatermark(14_999);
  assert.deepEqual(h.keysWithState(), ["early", "late"]);
  h.advanceWatermark(15_000);
  assert.deepEqual(h.keysWithState(), ["early"]);
  h.advanceWatermark(16_999);
  assert.deepEqual(h.keysWithState(), ["early"]);
  // At 25_000 the value expired at 17_000 is gone, then the timer at 20_000 fires and sets it
  // again, stamped 25_000 (the watermark, later than the timer's 20_000): to 30_000.
  h.advanceWatermark(25_000);
  assert.deepEqual(stored(h, "early"), { value: "timer", list: [], map: [] });
  h.advanceWatermark(29_999);
  assert.equal(stored(h, "early").value, "timer");
  h.advanceWatermark(30_000);
  assert.deepEqual(h.keysWithState(), []);
});

test("refresh on write: each list item and map entry expires on its own, reads keep none", () => {
  const h = new TestHost(expiring, { config: { ttl: "5s" } });
  h.process("main", "k", { append: "a", put: [["x", 1], ["y", 1]] }, 1_000); // a, x, y: to 6_000
  h.process("main", "set", { append: "p" }, 1_000); // p: to 6_000
  h.process("main", "k", { append: "b", put: [["y", 2]] }, 3_000); // b, y: to 8_000
  h.process("main", "k", { getList: true, getMap: ["x", "y"], entries: true }, 4_000);
  assert.deepEqual(emitted(h), [{ list: ["a", "b"], map: { x: 1, y: 2 }, entries: [["x", 1], ["y", 2]] }]);
  h.process("main", "set", { append: "q" }, 4_000); // q: to 9_000
  h.process("main", "set", { setList: ["p", "q", "r"] }, 5_000); // all three: to 10_000

  h.advanceWatermark(5_999);
  assert.deepEqual(stored(h, "k"), { value: null, list: ["a", "b"], map: [["x", 1], ["y", 2]] });
  h.advanceWatermark(6_000);
  assert.deepEqual(stored(h, "k"), { value: null, list: ["b"], map: [["y", 2]] });
  assert.deepEqual(stored(h, "set").list, ["p", "q", "r"]);
  h.process("main", "k", { getList: true, entries: true }, 6_000);
  assert.deepEqual(emitted(h), [{ list: ["b"], entries: [["y", 2]] }]);

  h.advanceWatermark(7_999);
  assert.deepEqual(stored(h, "k"), { value: null, list: ["b"], map: [["y", 2]] });
  h.advanceWatermark(8_000);
  assert.deepEqual(h.keysWithState(), ["set"]);
  h.advanceWatermark(9_999);
  assert.deepEqual(stored(h, "set").list, ["p", "q", "r"]);
  h.advanceWatermark(10_000);
  assert.deepEqual(h.keysWithState(), []);
});

test("refresh on read: an entry read keeps living, one not read expires", () => {
  const h = new TestHost(expiring, { config: { ttl: "5s", refresh_on_read: true } });
  h.process("main", "k", { set: "v", append: "a", put: [["x", 1], ["y", 1]] }, 1_000); // all: to 6_000
  h.process("main", "k", { get: true, getMap: ["x", "missing"] }, 4_000); // v, x: to 9_000
  assert.deepEqual(emitted(h), [{ value: "v", map: { x: 1, missing: null } }]);

  h.advanceWatermark(5_999);
  assert.deepEqual(stored(h, "k"), { value: "v", list: ["a"], map: [["x", 1], ["y", 1]] });
  h.advanceWatermark(6_000); // a and y were not read
  assert.deepEqual(stored(h, "k"), { value: "v", list: [], map: [["x", 1]] });

  h.process("main", "k", { append: "b", put: [["z", 3], ["w", 4]] }, 7_000); // b, z, w: to 12_000
  h.process("main", "k", { getList: true, entries: true }, 8_000); // b, x, z, w: to 13_000
  assert.deepEqual(emitted(h), [{ list: ["b"], entries: [["w", 4], ["x", 1], ["z", 3]] }]);

  h.advanceWatermark(8_999);
  assert.equal(stored(h, "k").value, "v");
  h.advanceWatermark(9_000); // v was last read at 4_000
  assert.deepEqual(stored(h, "k"), { value: null, list: ["b"], map: [["w", 4], ["x", 1], ["z", 3]] });
  h.advanceWatermark(12_999);
  assert.deepEqual(stored(h, "k"), { value: null, list: ["b"], map: [["w", 4], ["x", 1], ["z", 3]] });
  h.advanceWatermark(13_000);
  assert.equal(h.hasState("k"), false);
});

test("a processing-time TTL follows the TestHost's clock, not the watermark", () => {
  const h = new TestHost(expiring, { config: { domain: "processing", ttl: "2s" }, processingTime: 1_000 });
  h.process("main", "k", { set: "v", append: "a" }, 50_000); // stamped 1_000: to 3_000
  h.advanceWatermark(1_000_000);
  assert.deepEqual(stored(h, "k"), { value: "v", list: ["a"], map: [] });
  h.setProcessingTime(2_000);
  h.process("main", "k", { append: "b", put: [["x", 1]] }, 1); // b, x: to 4_000
  h.setProcessingTime(2_999);
  assert.deepEqual(stored(h, "k"), { value: "v", list: ["a", "b"], map: [["x", 1]] });
  h.setProcessingTime(3_000);
  assert.deepEqual(stored(h, "k"), { value: null, list: ["b"], map: [["x", 1]] });
  h.process("main", "k", { get: true, getList: true }, 2);
  assert.deepEqual(emitted(h), [{ value: null, list: ["b"] }]);
  h.setProcessingTime(3_999);
  assert.ok(h.hasState("k"));
  h.setProcessingTime(4_000);
  assert.equal(h.hasState("k"), false);
  // The end of the input moves the watermark only: nothing expires with it.
  h.process("main", "k", { set: "w" }, 3); // stamped 4_000: to 6_000
  h.finish();
  assert.equal(stored(h, "k").value, "w");
});

test("the last declaration sets the TTL; entries kept without one start theirs then", () => {
  let ttl; // what the next init declares
  const redeclared = weir.processFunction(
    class {
      init(ctx) {
        this.value = ctx.valueState("value", undefined, { ttl });
      }
      processElement(ctx, el) {
        this.value.set(el.json());
      }
    },
  );
  const h = new TestHost(redeclared);
  h.process("main", "k", "1", 1_000); // no TTL: no stamp
  h.advanceWatermark(100_000);
  ttl = weir.StateTtl.eventTime("5s");
  h.reinit(); // stamped at the declaration, the watermark 100_000: to 105_000
  h.advanceWatermark(104_999);
  assert.ok(h.hasState("k"));
  ttl = undefined;
  h.reinit(); // dropped: the value lives for ever
  h.advanceWatermark(1_000_000);
  assert.ok(h.hasState("k"));

  ttl = weir.StateTtl.eventTime("10s");
  h.reinit(); // stamped 1_000_000: to 1_010_000
  h.process("main", "j", "2", 1_002_000); // stamped 1_002_000
  h.advanceWatermark(1_004_000);
  ttl = weir.StateTtl.eventTime("3s"); // same clock: the stamps stay, so k expired at 1_003_000
  h.reinit();
  assert.deepEqual(h.keysWithState(), ["j"]);
  h.advanceWatermark(1_004_999);
  assert.deepEqual(h.keysWithState(), ["j"]);
  h.advanceWatermark(1_005_000);
  assert.deepEqual(h.keysWithState(), []);

  // A value a test plants starts its time-to-live at the current watermark.
  h.setStateBytes("p", "value", weir.codecs.json.encode(3));
  h.advanceWatermark(1_007_999);
  assert.ok(h.hasState("p"));
  h.advanceWatermark(1_008_000);
  assert.equal(h.hasState("p"), false);

  // Moving to the other clock starts every entry's time-to-live anew, on that clock.
  h.process("main", "q", "4", 1_009_000); // stamped 1_009_000 in event time
  ttl = weir.StateTtl.processingTime("1s");
  h.reinit(); // stamped at the processing time, 0: to 1_000
  h.advanceWatermark(2_000_000);
  assert.ok(h.hasState("q"));
  h.setProcessingTime(999);
  assert.ok(h.hasState("q"));
  h.setProcessingTime(1_000);
  assert.equal(h.hasState("q"), false);
});

test("a rejected record is taken back and listed", () => {
  const Picky = weir.processFunction(
    class {
      init(ctx) {
        this.out = ctx.mainOutput();
        this.seen = ctx.valueState("seen");
      }
      processElement(ctx, el) {
        const n = (this.seen.get() ?? 0) + 1;
        this.seen.set(n);
        ctx.registerEventTimer(el.timestamp + 10);
        this.out.emit(n);
        if (!el.json()) throw new weir.Reject(`record ${n} says false`);
      }
    },
  );
  const h = new TestHost(Picky);
  h.process("main", "k", "true", 1);
  h.process("main", "k", "false", 2);
  h.process("main", "k", "true", 3);
  assert.deepEqual(
    h.outputs("main").map((r) => [r.value, r.timestamp]),
    [
      [1, 1],
      [2, 3],
    ],
  );
  assert.deepEqual(h.rejected(), [{ key: "k", timestamp: 2, reason: "record 2 says false" }]);
  assert.deepEqual(h.pendingTimers(), [
    { key: "k", domain: "event-time", timestamp: 11 },
    { key: "k", domain: "event-time", timestamp: 13 },
  ]);
});
