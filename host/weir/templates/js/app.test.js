// Unit tests of app.js on the SDK's in-memory host: no wasm, no build, plain Node.js.
//
//   node --test          (in this folder; Node.js 20 or later)
//
// TestHost runs the function as weir does: init, then one call per event or firing timer,
// each scoped to its key, with timers firing as the watermark advances.

import { test } from "node:test";
import assert from "node:assert/strict";

import * as weir from "./weir/index.js";
import { TestHost } from "./weir/testing.js";
import { processFunction } from "./app.js";

/** Milliseconds since the epoch of a time as input.jsonl writes it. */
const ts = (text) => weir.parseMillis(text);

/** Feeds one event of `user` at `at`, keyed and timed as pipeline.toml says. */
function event(host, user, at) {
  host.process("events", user, { user, action: "open", at }, ts(at));
}

test("a session ends after the gap and busy ones go to the side output", () => {
  const host = new TestHost(processFunction, { inputs: ["events"] });
  event(host, "ana", "2026-11-29 10:00:00.000");
  event(host, "ana", "2026-11-29 10:00:10.000");
  event(host, "ana", "2026-11-29 10:00:20.000");
  event(host, "ben", "2026-11-29 10:00:05.000");

  // Nothing ends before the watermark passes the last event plus the gap.
  host.advanceWatermark(ts("2026-11-29 10:00:34.999"));
  assert.deepEqual(host.takeOutputs("main"), []);

  host.advanceWatermark(ts("2026-11-29 10:01:00.000"));
  const ana = { user: "ana", events: 3, started_at: "2026-11-29 10:00:00.000", ended_at: "2026-11-29 10:00:20.000" };
  const ben = { user: "ben", events: 1, started_at: "2026-11-29 10:00:05.000", ended_at: "2026-11-29 10:00:05.000" };
  // A record's timestamp is that of the timer that emitted it; these have no key.
  assert.deepEqual(host.takeOutputs("main"), [
    { value: ben, key: null, timestamp: ts("2026-11-29 10:00:35.000") },
    { value: ana, key: null, timestamp: ts("2026-11-29 10:00:50.000") },
  ]);
  assert.deepEqual(host.takeOutputs("busy"), [{ value: ana, key: null, timestamp: ts("2026-11-29 10:00:50.000") }]);
  assert.equal(host.hasState("ana"), false);
});

test("an event after the gap starts a new session before the watermark passes", () => {
  const host = new TestHost(processFunction, { inputs: ["events"] });
  event(host, "ben", "2026-11-29 10:00:05.000");
  // 55 s later, with the watermark still at the start: the first session is over.
  event(host, "ben", "2026-11-29 10:01:00.000");
  const first = { user: "ben", events: 1, started_at: "2026-11-29 10:00:05.000", ended_at: "2026-11-29 10:00:05.000" };
  assert.deepEqual(host.takeOutputs("main"), [{ value: first, key: null, timestamp: ts("2026-11-29 10:01:00.000") }]);
  host.finish(); // the end of input: every timer fires
  const second = { user: "ben", events: 1, started_at: "2026-11-29 10:01:00.000", ended_at: "2026-11-29 10:01:00.000" };
  assert.deepEqual(host.takeOutputs("main"), [{ value: second, key: null, timestamp: ts("2026-11-29 10:01:30.000") }]);
});

test("a gap of 0 is refused", () => {
  assert.throws(() => new TestHost(processFunction, { inputs: ["events"], config: { gap: "0s" } }), {
    message: "config `gap` must be more than 0",
  });
});
