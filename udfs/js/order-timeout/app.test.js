// The order aggregation through the SDK's in-memory TestHost, with exact expected
// records: the JavaScript twin of udfs/order-timeout/tests/orders.rs.
//
//   node --test udfs/js/order-timeout/          (from the repository root; Node.js >= 20)

import { test } from "node:test";
import assert from "node:assert/strict";

import { TestHost } from "../../../guest-sdk/js/sdk/testing.js";
import { processFunction } from "./app.js";

/** The key the host extracts from `orderId`: a string as is, a number as its JSON text. */
const keyOf = (orderId) => (typeof orderId === "string" ? orderId : JSON.stringify(orderId));

/** Feeds an event keyed by its orderId, as the host would. */
function event(host, value, ts) {
  host.process("main", keyOf(value.orderId), value, ts);
}

/** The record emitted for an order. */
function total(orderId, total, items, timestamp) {
  return { value: { orderId, total, items }, key: keyOf(orderId), timestamp };
}

test("an order is emitted one timeout after its last event", () => {
  const h = new TestHost(processFunction);
  event(h, { orderId: 17, item: "tea", cost: "3.50", timestamp: "t" }, 1_000);
  assert.deepEqual(h.pendingTimers(), [{ key: "17", domain: "event-time", timestamp: 2_000 }]);
  event(h, { orderId: 17, item: "cake", cost: "8.80" }, 1_500);
  // The timer moved: only one per order.
  assert.deepEqual(h.pendingTimers(), [{ key: "17", domain: "event-time", timestamp: 2_500 }]);

  h.advanceWatermark(2_000);
  assert.deepEqual(h.outputs("main"), []);
  h.advanceWatermark(2_500);
  assert.deepEqual(h.takeOutputs("main"), [total(17, "12.30", ["tea", "cake"], 2_500)]);
  assert.equal(h.hasState("17"), false);
  assert.deepEqual(h.pendingTimers(), []);

  // The same order id later starts a new aggregation.
  event(h, { orderId: 17, item: "jam", cost: 1 }, 5_000);
  h.finish();
  assert.deepEqual(h.takeOutputs("main"), [total(17, "1.00", ["jam"], 6_000)]);
});

test("totals are exact decimals", () => {
  const h = new TestHost(processFunction);
  event(h, { orderId: 1, item: "a", cost: "0.10" }, 0);
  event(h, { orderId: 1, item: "b", cost: "0.20" }, 0);
  // JSON numbers keep their exact text: 0.1 + 0.2 is 0.3, not 0.30000000000000004.
  event(h, { orderId: 2, item: "a", cost: 0.1 }, 0);
  event(h, { orderId: 2, item: "b", cost: 0.2 }, 0);
  // Half-up on the sum, not on each cost.
  event(h, { orderId: 3, item: "a", cost: "1.0025" }, 0);
  event(h, { orderId: 3, item: "b", cost: "1.0025" }, 0);
  event(h, { orderId: 4, item: "a", cost: "19.999" }, 0);
  event(h, { orderId: 5, item: "refund", cost: "-2.345" }, 0);
  // More digits than a float holds, as JSON text.
  h.process("main", "6", '{"orderId": 6, "item": "a", "cost": 0.100000000000000000001}', 0);
  h.process("main", "6", '{"orderId": 6, "item": "b", "cost": 0.199999999999999999999}', 0);
  h.finish();
  // All six time out at 1000, so they come in the order of same-time timers
  // (docs/pipeline.md): by the FNV-1a hash of the key, not by the key.
  assert.deepEqual(h.outputs("main"), [
    total(5, "-2.35", ["refund"], 1_000),
    total(4, "20.00", ["a"], 1_000),
    total(6, "0.30", ["a", "b"], 1_000),
    total(1, "0.30", ["a", "b"], 1_000),
    total(3, "2.01", ["a", "b"], 1_000),
    total(2, "0.30", ["a", "b"], 1_000),
  ]);
});

test("the order id is echoed as it came", () => {
  const h = new TestHost(processFunction);
  event(h, { orderId: "A-17", item: "tea", cost: "1" }, 10);
  h.process("main", "1e3", '{"orderId": 1e3, "item": "tea", "cost": "1"}', 20);
  h.finish();
  const out = h.outputs("main");
  assert.deepEqual(out[0], total("A-17", "1.00", ["tea"], 1_010));
  assert.deepEqual(out[1], { value: { orderId: 1000, total: "1.00", items: ["tea"] }, key: "1e3", timestamp: 1_020 });
  // `text` is the record as emitted: the number's own JSON text, not 1000.
  assert.equal(out[1].text, '{"orderId":1e3,"total":"1.00","items":["tea"]}');
});

test("orders interleave and fire in timer order", () => {
  const h = new TestHost(processFunction, { config: { timeout: "500ms" } });
  event(h, { orderId: 1, item: "a", cost: "1.00" }, 100);
  event(h, { orderId: 2, item: "b", cost: "2.00" }, 200);
  event(h, { orderId: 1, item: "c", cost: "3.00" }, 300);
  h.advanceWatermark(700);
  assert.deepEqual(h.takeOutputs("main"), [total(2, "2.00", ["b"], 700)]);
  h.advanceWatermark(800);
  assert.deepEqual(h.takeOutputs("main"), [total(1, "4.00", ["a", "c"], 800)]);
  assert.deepEqual(h.keysWithState(), []);
});

test("processing-time mode follows the wall clock", () => {
  const h = new TestHost(processFunction, {
    config: { time: "processing", timeout: "2s" },
    processingTime: 10_000,
  });
  event(h, { orderId: 9, item: "tea", cost: "3.50" }, 1);
  assert.deepEqual(h.pendingTimers(), [{ key: "9", domain: "processing-time", timestamp: 12_000 }]);
  // Event time is irrelevant now.
  h.advanceWatermark(1_000_000);
  assert.deepEqual(h.outputs("main"), []);

  h.setProcessingTime(11_000);
  event(h, { orderId: 9, item: "cake", cost: "8.80" }, 2);
  assert.deepEqual(h.pendingTimers(), [{ key: "9", domain: "processing-time", timestamp: 13_000 }]);
  h.setProcessingTime(12_999);
  assert.deepEqual(h.outputs("main"), []);
  h.setProcessingTime(13_000);
  assert.deepEqual(h.outputs("main"), [total(9, "12.30", ["tea", "cake"], 13_000)]);
  assert.equal(h.hasState("9"), false);
});

test("a cost that is missing or not a decimal is rejected and leaves the order untouched", () => {
  const h = new TestHost(processFunction);
  event(h, { orderId: 5, item: "tea", cost: "1.25" }, 0);
  event(h, { orderId: 5, item: "x", cost: "abc" }, 10);
  event(h, { orderId: 5, item: "x", cost: true }, 10);
  event(h, { orderId: 5, item: "x" }, 10);
  assert.deepEqual(
    h.rejected().map((r) => r.reason),
    ['field `cost`: "abc" is not a valid decimal', "field `cost`: true is not a valid decimal", "field `cost` is missing"],
  );
  h.finish();
  assert.deepEqual(h.outputs("main"), [total(5, "1.25", ["tea"], 1_000)]);
});

test("bad records are errors that leave the order untouched", () => {
  const h = new TestHost(processFunction);
  event(h, { orderId: 5, item: "tea", cost: "1.25" }, 0);
  const cases = [
    [{ orderId: 5, cost: "1" }, "field `item` is missing"],
    [{ orderId: 5, item: null, cost: "1" }, "field `item` is missing"],
    [{ orderId: 5, item: 3, cost: "1" }, "input `main`: record is not a valid Purchase: item: expected a string, got 3"],
  ];
  for (const [value, message] of cases) {
    assert.throws(() => event(h, value, 10), { message });
  }
  assert.throws(() => h.process("main", "5", "{not json", 10), /^Error: input `main`: record is not valid JSON: /);

  assert.deepEqual(h.pendingTimers(), [{ key: "5", domain: "event-time", timestamp: 1_000 }]);
  h.finish();
  assert.deepEqual(h.outputs("main"), [total(5, "1.25", ["tea"], 1_000)]);
});

test("config errors fail init", () => {
  assert.throws(() => new TestHost(processFunction, { config: { time: "wall" } }), {
    message: "invalid config `time`: unknown variant `wall`, expected `event` or `processing`",
  });
  assert.throws(
    () => new TestHost(processFunction, { config: { timeout: "-1s" } }),
    (e) => e.message.startsWith('invalid config `timeout`: invalid duration "-1s"'),
  );
  new TestHost(processFunction, { config: { time: "event" } });
});

test("a fresh instance continues from the host state", () => {
  const h = new TestHost(processFunction);
  event(h, { orderId: 3, item: "a", cost: "0.10" }, 0);
  h.reinit();
  event(h, { orderId: 3, item: "b", cost: "0.20" }, 100);
  h.reinit();
  h.finish();
  assert.deepEqual(h.outputs("main"), [total(3, "0.30", ["a", "b"], 1_100)]);
});
