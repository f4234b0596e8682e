// Event-time time-to-live waits for the timers: an entry stamped `s` with TTL `d` is
// visible to every timer that fires before `s + d`, however far the watermark jumps (the
// end of input included), and gone for the timers at or after it. The JavaScript twin of
// guest-sdk/tests/ttl_and_timers.rs.
//
//   node --test guest-sdk/js/          (from the repository root; Node.js >= 20)

import { test } from "node:test";
import assert from "node:assert/strict";

import * as weir from "../sdk/index.js";
import { TestHost } from "../sdk/testing.js";

/**
 * Keeps each transaction for 10 minutes, checked by a timer 1 s after it; a timer that
 * sees three over 500.00 within 2 s alerts. `{probe: t}` registers a bare timer at `t`
 * that reports what the buffer holds then.
 */
class Buffer {
  init(ctx) {
    this.transactions = ctx.listState("transactions", weir.codecs.json, { ttl: weir.StateTtl.eventTime("10m") });
    this.out = ctx.mainOutput();
  }

  processElement(ctx, el) {
    const value = el.json();
    if (value.probe !== undefined) {
      ctx.registerEventTimer(value.probe);
      return;
    }
    this.transactions.append([el.timestamp, value.amount]);
    ctx.registerEventTimer(el.timestamp + 1000);
  }

  onTimer(ctx, timer) {
    const held = this.transactions.get();
    const large = held.filter(([, amount]) => amount > 500).map(([at]) => at);
    const alert = large.some((at, i) => i + 2 < large.length && large[i + 2] - at <= 2000);
    this.out.emit({ at: timer.timestamp, held: held.length, alert });
  }
}

test("the end of input's timers see what they buffered", () => {
  const h = new TestHost(new Buffer());
  for (const [at, amount] of [[0, 600.0], [700, 750.5], [1500, 999.0]]) h.process("main", "card", { amount }, at);
  h.finish();
  assert.deepEqual(h.takeOutputs("main").map((o) => o.value), [
    { at: 1000, held: 3, alert: true },
    { at: 1700, held: 3, alert: true },
    { at: 2500, held: 3, alert: true },
  ]);
  assert.equal(h.hasState("card"), false, "expired after the timers fired");
});

test("a watermark jump expires entries in time with the timers", () => {
  const h = new TestHost(new Buffer());
  h.process("main", "card", { amount: 10 }, 0);
  h.process("main", "card", { amount: 20 }, 300_000);
  for (const probe of [599_999, 600_000, 900_000]) h.process("main", "card", { probe }, 300_000);
  h.advanceWatermark(1_000_000);
  assert.deepEqual(h.takeOutputs("main").map((o) => o.value), [
    { at: 1000, held: 2, alert: false },
    { at: 301_000, held: 2, alert: false },
    { at: 599_999, held: 2, alert: false },
    { at: 600_000, held: 1, alert: false },
    { at: 900_000, held: 0, alert: false },
  ]);
  assert.equal(h.hasState("card"), false);
});
