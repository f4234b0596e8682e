// The TestHost's semantics, driven by a scriptable UDF: the JavaScript twin of
// guest-sdk/src/testing/tests.rs, plus what is particular to JavaScript.
//
//   node --test guest-sdk/js/          (from the repository root; Node.js >= 20)

import { test } from "node:test";
import assert from "node:assert/strict";

import * as weir from "../sdk/index.js";
import { TestHost, MAX_TIMESTAMP, keyHash } from "../sdk/testing.js";

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
