/**
 * A JavaScript UDF for the end-to-end tests of the batch path
 * (tests/tests/other_languages.rs), the twin of tests/udfs/python/misbehaving: it counts
 * the records of each key and emits `{"key": K, "n": N, "record": R}` per record, unless
 * the record asks it to misbehave with `"fail"`:
 *
 * - `"error"`: emits and counts, then throws (the call fails: the host takes both back);
 * - `"trap"`: emits and counts, then misuses the contract (a list call on a value
 *   state), which the host traps on;
 * - `"poison"`: stores bytes that are not JSON as the key's count, and emits
 *   `{"key": K, "poisoned": true}`: every later record of the key fails to decode its
 *   state (a state-decode error, which the host sends to the dead letters) until
 * - `"reset"`: clears the key's count without reading it, and emits `{"key": K, "reset": true}`.
 *
 * Each record it counts that has `"timer": true` registers an event-time timer 1 ms after
 * it (the timer then falls due in the batch that registered it, which ends the batch
 * there); a timer emits
 * `{"key": K, "timer": T, "n": N}` with the count then (decoding the state: a poisoned
 * key's timer fails too).
 */

import * as weir from "../../../../guest-sdk/js/sdk/index.js";
import { state as hostState } from "../../../../guest-sdk/js/sdk/host.js";

export const processFunction = weir.processFunction(
  class Misbehaving {
    init(ctx) {
      this.count = ctx.valueState("n");
      this.raw = ctx.valueState("n", weir.codecs.bytes); // the same state, as bytes
      this.out = ctx.mainOutput();
    }

    processElement(ctx, el) {
      const record = el.json();
      const key = ctx.key;
      if (record.fail === "poison") {
        this.raw.set(weir.encodeUtf8("\u00ff not JSON"));
        this.out.emit({ key, poisoned: true }, { key });
        return;
      }
      if (record.fail === "reset") {
        this.count.clear();
        this.out.emit({ key, reset: true }, { key });
        return;
      }
      const n = (this.count.get() ?? 0) + 1;
      this.count.set(n);
      if (record.timer) ctx.registerEventTimer(el.timestamp + 1);
      this.out.emit({ key, n, record }, { key });
      if (record.fail === "error") throw new Error(`asked to fail on ${JSON.stringify(record)}`);
      if (record.fail === "trap") hostState.listGet(this.count._id); // a value state: the host traps
    }

    onTimer(ctx, timer) {
      const key = ctx.key;
      this.out.emit({ key, timer: timer.timestamp, n: this.count.get() ?? 0 }, { key });
    }
  },
);
