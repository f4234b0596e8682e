/**
 * An in-memory Weir host for unit-testing a JavaScript UDF with plain Node.js
 * (`node --test`): no wasm, no componentize-qjs, no npm packages. The JavaScript twin of
 * the Rust SDK's `weir_sdk::testing::TestHost`, with the same rules.
 *
 * ```js
 * import { test } from "node:test";
 * import assert from "node:assert/strict";
 * import { TestHost } from "./weir/testing.js";
 * import { processFunction } from "./app.js";
 *
 * test("counts per key", () => {
 *   const host = new TestHost(processFunction, { config: { window: "5m" } });
 *   host.process("main", "ad-1", { ad_id: "ad-1" }, 1_000);
 *   host.advanceWatermark(400_000);
 *   assert.deepEqual(host.takeOutputs("main"), [{ value: { clicks: 1 }, key: "ad-1", timestamp: 1_000 }]);
 * });
 * ```
 *
 * The TestHost runs the UDF on the same SDK code as the component, called through the
 * same three entry points (`init`, `process-element`, `on-timer`), with the host's
 * interfaces (state, timers, output, logging) served from memory instead of the
 * component's imports. Under the host's rules it calls `init` once (and again on
 * {@link TestHost#reinit}), scopes state and timers to the key of each element or timer,
 * fires event-time timers when the watermark advances and processing-time timers when its
 * clock does, and keeps what the UDF emits and logs. Timers due at the same time fire in
 * the order "Event time and timers" in docs/pipeline.md gives: by timestamp, then by the
 * FNV-1a hash of the key's bytes ({@link keyHash}), then by the bytes. The records a
 * failing call emitted are dropped, as the host drops them. What differs from the real
 * host: the watermark and the processing-time clock move only when the test moves them,
 * and each element and timer is its own call (the host batches them).
 *
 * States declared with a time-to-live (`{ttl: StateTtl.eventTime(...)}`) expire as in the
 * host: each entry (a value, a list item, a map entry) is stamped when written (and when
 * read, with `refreshOnRead`) with the time of the call, which is the element's or
 * timer's timestamp or the watermark if later (event time), or the TestHost's processing
 * time (processing time); it expires once the watermark, or the processing time, reaches
 * the stamp + the TTL. Expired entries are removed before each call and whenever
 * {@link TestHost#advanceWatermark}, {@link TestHost#setProcessingTime} or
 * {@link TestHost#finish} moves a clock, without calling the UDF, so `hasState`,
 * `keysWithState`, `stateBytes` and the others never show one. Entries a test plants
 * with `setStateBytes` and the others start their time-to-live at the current watermark
 * (or processing time).
 *
 * What the UDF throws comes out of the TestHost's methods as it was thrown (with its
 * stack), so a failing test points at the line; a {@link StateDecodeError} stays one.
 * During each call the globals look as they do in a component: `Date.now()`,
 * `new Date()` and `performance.now()` throw, `console` writes to the host's log, and
 * what QuickJS lacks is gone (`setTimeout`, `fetch`, `TextEncoder`, `TextDecoder`,
 * `crypto`, `URL`, `Intl`, `Buffer`, `process`, ...).
 *
 * Timestamps are numbers of milliseconds, as in the SDK; `MIN_TIMESTAMP` and
 * `MAX_TIMESTAMP` (±2^63) stand for the host's `i64::MIN` and `i64::MAX`.
 *
 * @module weir/testing
 */

import {
  EVENT_TIME,
  LOG_LEVELS,
  MAX_TIMESTAMP,
  MIN_TIMESTAMP,
  PROCESSING_TIME,
  processFunction as makeProcessFunction,
  toJson,
} from "./index.js";
import { DEFINITION, componentHost, currentHost, internals, setHost } from "./host.js";
import { encodeUtf8, tryDecodeUtf8 } from "./text.js";

/** Writes a line to stderr (the console is the UDF's during a call). */
const printLine = (() => {
  const stderr = globalThis.process?.stderr;
  const originalConsole = globalThis.console;
  return stderr ? (line) => stderr.write(line + "\n") : (line) => originalConsole.error(line);
})();

/** How many timers may fire in one advance before the TestHost calls it a loop. */
const FIRING_LIMIT = 1_000_000;

const STATE_KINDS = ["value", "list", "map"];
const TTL_REFRESHES = ["on-write", "on-read-and-write"];

/** 2^63, which `MAX_TIMESTAMP` stands for, as a BigInt. */
const MAX_BIG = BigInt(MAX_TIMESTAMP);

/**
 * Whether an entry stamped `at` with a time-to-live of `millis` has expired at `clock`:
 * `clock >= at + millis`, the sum saturating at `MAX_TIMESTAMP` as the host's `i64` does,
 * and exact near the ends of the range (where numbers are not).
 */
function hasExpired(at, millis, clock) {
  const end = at + millis;
  if (Number.isSafeInteger(end) && Number.isSafeInteger(clock)) return clock >= end;
  const exact = BigInt(at) + BigInt(millis);
  return BigInt(clock) >= (exact > MAX_BIG ? MAX_BIG : exact);
}

// ---------------------------------------------------------------------------------------
// Bytes

/** Bytes as a "binary string" (one char per byte): Map keys that sort as the bytes do. */
function binary(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    out += String.fromCharCode.apply(null, bytes.subarray(i, Math.min(bytes.length, i + 8192)));
  }
  return out;
}

/** The bytes of a binary string. */
function unbinary(text) {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

/** Key bytes as a test gives them: text (UTF-8), a number (its text, as the host keys them), or bytes. */
function keyBytes(key, what = "a key") {
  if (key instanceof Uint8Array) return key;
  if (typeof key === "string") return encodeUtf8(key);
  if (typeof key === "number" || typeof key === "bigint") return encodeUtf8(String(key));
  throw new TypeError(`TestHost: ${what} is a string, a number or a Uint8Array, not ${typeof key}`);
}

/** Key bytes as a test reads them: the text if they are UTF-8, else the bytes. */
function keyText(bytes) {
  const text = tryDecodeUtf8(bytes);
  return text !== null ? text : bytes.slice();
}

function checkBytes(value, call) {
  if (value instanceof Uint8Array) return value.slice();
  if (Array.isArray(value) && value.every((b) => Number.isInteger(b) && b >= 0 && b <= 255)) {
    return Uint8Array.from(value);
  }
  throw new TypeError(`weir host: \`${call}\` takes bytes (a Uint8Array) (the host traps)`);
}

function checkTimestamp(value, what) {
  if (typeof value === "number" && Number.isInteger(value)) {
    return Math.max(MIN_TIMESTAMP, Math.min(MAX_TIMESTAMP, value));
  }
  throw new TypeError(`${what}: expected a whole number of milliseconds, got ${String(value)}`);
}

function checkDomain(domain, call) {
  if (domain === EVENT_TIME || domain === PROCESSING_TIME) return domain;
  throw new TypeError(`weir host: \`${call}\`: no time domain ${JSON.stringify(domain)} (the host traps)`);
}

/** The contract's `state-ttl` record as `declare-with-ttl` got it, checked as the host does. */
function checkTtl(ttl, name) {
  const call = "state.declare-with-ttl";
  if (ttl === null || typeof ttl !== "object") {
    throw new TypeError(`weir host: \`${call}\` takes a state-ttl record {millis, domain, refresh} (the host traps)`);
  }
  let { millis } = ttl;
  if (typeof millis === "bigint") millis = Number(millis);
  if (typeof millis !== "number" || !Number.isInteger(millis) || millis < 0) {
    throw new TypeError(`weir host: \`${call}\`: millis is a u64, not ${String(ttl.millis)} (the host traps)`);
  }
  const domain = checkDomain(ttl.domain, call);
  if (!TTL_REFRESHES.includes(ttl.refresh)) {
    throw new TypeError(`weir host: \`${call}\`: no ttl-refresh ${JSON.stringify(ttl.refresh)} (the host traps)`);
  }
  if (millis === 0) throw new Error(`state \`${name}\`: a time-to-live must be longer than 0 ms`);
  return Object.freeze({ millis, domain, refresh: ttl.refresh });
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const U64 = (1n << 64n) - 1n;

/** FNV-1a, 64 bits, of a key held as a binary string. */
function hashBinary(key) {
  let h = FNV_OFFSET;
  for (let i = 0; i < key.length; i++) h = ((h ^ BigInt(key.charCodeAt(i))) * FNV_PRIME) & U64;
  return h;
}

/**
 * The 64-bit FNV-1a hash of a key's bytes, as the engine computes it (`stable_hash` in
 * host/src/state/mod.rs): where the key's timers go among the timers due at the same time.
 *
 * @param {string|number|Uint8Array} key text (UTF-8), a number (its text) or bytes
 * @returns {bigint}
 */
export function keyHash(key) {
  return hashBinary(binary(keyBytes(key)));
}

/** A timer of the current key: {timestamp, hash, key}, `key` a binary string. */
function makeTimer(timestamp, key) {
  return { timestamp, hash: hashBinary(key), key };
}

/** Orders timers as the engine fires them: by timestamp, then key hash, then key bytes. */
function compareTimers(a, b) {
  if (a.timestamp !== b.timestamp) return a.timestamp < b.timestamp ? -1 : 1;
  if (a.hash !== b.hash) return a.hash < b.hash ? -1 : 1;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

// ---------------------------------------------------------------------------------------
// The in-memory host: keyed state, timers, clocks, outputs and logs, with the host's rules

const IDLE = 0;
const INIT = 1;
const KEYED = 2;

class World {
  constructor(processingTime, printLevel) {
    this.phase = IDLE;
    /** The current key (a binary string) and the call's timestamp, when KEYED. */
    this.key = "";
    this.timestamp = 0;
    this.watermark = MIN_TIMESTAMP;
    /**
     * While an event-time timer fires: its time, the clock event-time entries expire by
     * (an entry is visible to every timer before its expiry, however far the watermark
     * jumped). null: they expire by the watermark.
     */
    this.eventClock = null;
    this.processingTime = processingTime;
    /**
     * Declared states, by id: {name, kind, ttl}, `ttl` the contract's `state-ttl` record
     * ({millis, domain, refresh}) of the last declaration, or null.
     */
    this.states = [];
    /**
     * key (binary string) -> Map(state id -> Uint8Array | Uint8Array[] | Map(binary -> Uint8Array)).
     * Only keys with a non-empty state are present. Each stored Uint8Array is the world's
     * own (reads return copies), so it stands for its entry.
     */
    this.data = new Map();
    /**
     * The time-to-live stamp of each entry of a state with a time-to-live: stored bytes (a
     * value, a list item, a map entry's value) -> the time on the TTL's clock that its
     * time-to-live started at.
     */
    this.stamps = new WeakMap();
    /** Whether an entry may have expired since the last sweep ({@link expire}). */
    this.expiryDue = false;
    this.outputs = [];
    this.emitted = [];
    /** Records of the running call: [output id, record]. */
    this.pending = [];
    /** Pending timers, sorted in firing order: {timestamp, hash, key}. */
    this.timers = { [EVENT_TIME]: [], [PROCESSING_TIME]: [] };
    /**
     * Due processing-time timers taken off `timers` as one group, in firing order, as the
     * engine's timing wheel hands them over (host/src/time/timers.rs): they fire before
     * any timer registered meanwhile, and can still be deleted.
     */
    this.staged = [];
    this.logs = [];
    this.printLevel = printLevel;
    this.host = Object.freeze({
      state: this.stateInterface(),
      timers: this.timersInterface(),
      output: this.outputInterface(),
      logging: Object.freeze({ log: (level, message) => this.log(level, message) }),
      deadLetters: Object.freeze({ reject: (reason) => this.reject(reason) }),
    });
    /** The running call's `dead-letters.reject` reason, or `null`. */
    this.rejected = null;
  }

  reject(reason) {
    if (this.phase !== KEYED) {
      throw new Error("weir host: `dead-letters.reject` called outside processElement/onTimer (the host traps)");
    }
    if (this.rejected === null) this.rejected = String(reason);
  }

  /** The state and timers as they are, for {@link restore}. Stored bytes are never changed in place, so they are shared. */
  save() {
    const data = new Map();
    for (const [key, states] of this.data) {
      const copy = new Map();
      for (const [id, value] of states) {
        copy.set(id, Array.isArray(value) ? value.slice() : value instanceof Map ? new Map(value) : value);
      }
      data.set(key, copy);
    }
    return {
      data,
      timers: { [EVENT_TIME]: this.timers[EVENT_TIME].slice(), [PROCESSING_TIME]: this.timers[PROCESSING_TIME].slice() },
      staged: this.staged.slice(),
    };
  }

  /** Takes state and timers back to `saved`, as the host takes back a rejected call. */
  restore(saved) {
    this.data = saved.data;
    this.timers = saved.timers;
    this.staged = saved.staged;
  }

  currentKey(call) {
    if (this.phase === KEYED) return this.key;
    if (this.phase === INIT) {
      throw new Error(
        `weir host: \`${call}\` called from init; keyed state and timers are scoped to the current key and only usable in processElement and onTimer (the host traps)`,
      );
    }
    throw new Error(
      `weir host: \`${call}\` called outside processElement/onTimer; keyed state and timers need a current key (the host traps)`,
    );
  }

  checkState(id, kind, call) {
    const declared = this.states[id];
    if (declared === undefined) throw new Error(`weir host: \`${call}\` on undeclared state id ${id} (the host traps)`);
    if (kind !== undefined && declared.kind !== kind) {
      throw new Error(`weir host: \`${call}\` on state \`${declared.name}\`, which is a ${declared.kind} state (the host traps)`);
    }
  }

  slot(id, kind, call) {
    this.checkState(id, kind, call);
    const slots = this.data.get(this.currentKey(call));
    return slots === undefined ? undefined : slots.get(id);
  }

  setSlot(id, kind, call, value) {
    this.checkState(id, kind, call);
    this.put(this.currentKey(call), id, value);
  }

  /** Makes state `id` of `key` hold `value` as it is; `undefined` removes it. */
  put(key, id, value) {
    if (value === undefined) {
      this.removeSlot(key, id);
      return;
    }
    let slots = this.data.get(key);
    if (slots === undefined) this.data.set(key, (slots = new Map()));
    slots.set(id, value);
  }

  removeSlot(key, id) {
    const slots = this.data.get(key);
    if (slots === undefined) return;
    slots.delete(id);
    if (slots.size === 0) this.data.delete(key);
  }

  stateInterface() {
    return Object.freeze({
      declare: (name, kind) => {
        if (typeof name !== "string" || !STATE_KINDS.includes(kind)) {
          throw new TypeError("weir host: `state.declare` takes a name and a kind (the host traps)");
        }
        return this.declareState(name, kind, null);
      },
      declareWithTtl: (name, kind, ttl) => {
        if (typeof name !== "string" || !STATE_KINDS.includes(kind)) {
          throw new TypeError("weir host: `state.declare-with-ttl` takes a name, a kind and a time-to-live (the host traps)");
        }
        return this.declareState(name, kind, checkTtl(ttl, name));
      },
      valueGet: (id) => {
        const value = this.slot(id, "value", "state.value-get");
        if (value === undefined) return null;
        this.stampRead(id, value);
        return value.slice();
      },
      valueSet: (id, value) => {
        const bytes = checkBytes(value, "state.value-set");
        this.setSlot(id, "value", "state.value-set", bytes);
        this.stamp(id, bytes);
      },
      listGet: (id) => {
        const items = this.slot(id, "list", "state.list-get");
        if (items === undefined) return [];
        for (const item of items) this.stampRead(id, item);
        return items.map((item) => item.slice());
      },
      listAppend: (id, item) => {
        const items = this.slot(id, "list", "state.list-append") ?? [];
        const bytes = checkBytes(item, "state.list-append");
        this.setSlot(id, "list", "state.list-append", [...items, bytes]);
        this.stamp(id, bytes);
      },
      listSet: (id, items) => {
        if (!Array.isArray(items)) throw new TypeError("weir host: `state.list-set` takes a list (the host traps)");
        const copied = items.map((item) => checkBytes(item, "state.list-set"));
        this.setSlot(id, "list", "state.list-set", copied.length === 0 ? undefined : copied);
        for (const item of copied) this.stamp(id, item);
      },
      mapGet: (id, key) => {
        const map = this.slot(id, "map", "state.map-get");
        const value = map === undefined ? undefined : map.get(binary(checkBytes(key, "state.map-get")));
        if (value === undefined) return null;
        this.stampRead(id, value);
        return value.slice();
      },
      mapPut: (id, key, value) => {
        const map = new Map(this.slot(id, "map", "state.map-put"));
        const bytes = checkBytes(value, "state.map-put");
        map.set(binary(checkBytes(key, "state.map-put")), bytes);
        this.setSlot(id, "map", "state.map-put", map);
        this.stamp(id, bytes);
      },
      mapRemove: (id, key) => {
        const map = new Map(this.slot(id, "map", "state.map-remove"));
        map.delete(binary(checkBytes(key, "state.map-remove")));
        this.setSlot(id, "map", "state.map-remove", map.size === 0 ? undefined : map);
      },
      mapEntries: (id) => {
        const map = this.slot(id, "map", "state.map-entries");
        if (map === undefined) return [];
        for (const value of map.values()) this.stampRead(id, value);
        return [...map.keys()].sort().map((k) => [unbinary(k), map.get(k).slice()]);
      },
      clear: (id) => {
        this.checkState(id, undefined, "state.clear");
        this.removeSlot(this.currentKey("state.clear"), id);
      },
      clearAll: () => {
        this.data.delete(this.currentKey("state.clear-all"));
      },
    });
  }

  // -------------------------------------------------------------------------------------
  // Declarations and time-to-live

  /**
   * Declares (or looks up) state `name`; `ttl` (a checked `state-ttl` record, or null for
   * `declare`) becomes its time-to-live, as the last declaration sets it.
   */
  declareState(name, kind, ttl) {
    if (name === "") throw new Error("a state needs a non-empty name");
    let id = this.states.findIndex((s) => s.name === name);
    if (id >= 0) {
      const declared = this.states[id].kind;
      if (declared !== kind) throw new Error(`state "${name}" is a ${declared} state, declared again as ${kind}`);
    } else {
      this.states.push({ name, kind, ttl: null });
      id = this.states.length - 1;
    }
    this.setTtl(id, ttl);
    return id;
  }

  /**
   * Gives state `id` the time-to-live `ttl` (null: none). Dropping it keeps every entry,
   * for ever; adding one stamps every entry with the time of the declaration (whatever
   * stamp it kept from an earlier TTL), and so does moving it to the other clock (a stamp
   * of one clock means nothing on the other). Changing only its length or refresh keeps
   * the stamps.
   */
  setTtl(id, ttl) {
    const state = this.states[id];
    const old = state.ttl;
    state.ttl = ttl;
    if (ttl === null) return;
    const restamp = old === null || old.domain !== ttl.domain;
    const at = this.callTime(ttl.domain);
    this.forEachEntry(id, (bytes) => {
      if (restamp || !this.stamps.has(bytes)) this.stamps.set(bytes, at);
    });
    this.expiryDue = true;
  }

  /** Calls `visit` with the stored bytes of every entry of state `id`, of every key. */
  forEachEntry(id, visit) {
    for (const slots of this.data.values()) {
      const slot = slots.get(id);
      if (slot === undefined) continue;
      if (slot instanceof Uint8Array) visit(slot);
      else if (Array.isArray(slot)) slot.forEach((item) => visit(item));
      else for (const value of slot.values()) visit(value);
    }
  }

  /**
   * The clock of a TTL of `domain`: the watermark (the firing timer's time while an
   * event-time timer fires), or the processing time.
   */
  clock(domain) {
    if (domain !== EVENT_TIME) return this.processingTime;
    return this.eventClock ?? this.watermark;
  }

  /** Event-time entries expire by `at` (a firing timer's time), or by the watermark (null). */
  setEventClock(at) {
    this.eventClock = at;
    this.expiryDue = true;
  }

  /**
   * The time of the current call on the clock of `domain`: in event time the element's or
   * timer's timestamp, or the watermark if later (just the watermark outside
   * processElement/onTimer); in processing time the processing time.
   */
  callTime(domain) {
    if (domain !== EVENT_TIME) return this.processingTime;
    return this.phase === KEYED ? Math.max(this.timestamp, this.watermark) : this.watermark;
  }

  /** Starts the time-to-live of an entry of state `id` that was just written (if it has one). */
  stamp(id, bytes) {
    const ttl = this.states[id].ttl;
    if (ttl === null) return;
    const at = this.callTime(ttl.domain);
    this.stamps.set(bytes, at);
    // Only at the end of time (a stamp at MAX_TIMESTAMP) is an entry born expired.
    if (hasExpired(at, ttl.millis, this.clock(ttl.domain))) this.expiryDue = true;
  }

  /** Starts it again for an entry that was just read, if its state's TTL says so. */
  stampRead(id, bytes) {
    const ttl = this.states[id].ttl;
    if (ttl !== null && ttl.refresh === "on-read-and-write") this.stamp(id, bytes);
  }

  /** Moves the watermark to `watermark` (never back). */
  setWatermark(watermark) {
    if (watermark <= this.watermark) return;
    this.watermark = watermark;
    this.expiryDue = true;
  }

  /** Moves the processing-time clock to `now` (never back). */
  setProcessingTime(now) {
    if (now <= this.processingTime) return;
    this.processingTime = now;
    this.expiryDue = true;
  }

  /**
   * Removes every expired entry of every key, as the host does between calls: a value, a
   * list's item, a map's entry, once its TTL's clock has reached its stamp + the TTL's
   * millis. A state left empty is gone, and a key left without state too.
   */
  expire() {
    if (!this.expiryDue) return;
    this.expiryDue = false;
    if (!this.states.some((s) => s.ttl !== null)) return;
    for (const [key, slots] of this.data) {
      for (const [id, slot] of slots) {
        const ttl = this.states[id].ttl;
        if (ttl === null) continue;
        const clock = this.clock(ttl.domain);
        const live = (bytes) => {
          const at = this.stamps.get(bytes);
          return at === undefined || !hasExpired(at, ttl.millis, clock);
        };
        if (slot instanceof Uint8Array) {
          if (!live(slot)) slots.delete(id);
        } else if (Array.isArray(slot)) {
          const kept = slot.filter(live);
          if (kept.length === 0) slots.delete(id);
          else if (kept.length !== slot.length) slots.set(id, kept);
        } else {
          const kept = new Map([...slot].filter(([, value]) => live(value)));
          if (kept.size === 0) slots.delete(id);
          else if (kept.size !== slot.size) slots.set(id, kept);
        }
      }
      if (slots.size === 0) this.data.delete(key);
    }
  }

  /**
   * Makes state `id` of `key` (a binary string) hold `value` (`undefined` removes it), as a
   * test sets it: entries of a state with a time-to-live start theirs now.
   */
  store(key, id, value) {
    this.put(key, id, value);
    if (value === undefined) return;
    if (value instanceof Uint8Array) this.stamp(id, value);
    else if (Array.isArray(value)) value.forEach((item) => this.stamp(id, item));
    else for (const v of value.values()) this.stamp(id, v);
  }

  timersInterface() {
    return Object.freeze({
      register: (domain, at) => {
        const timer = makeTimer(checkTimestamp(at, "timers.register"), this.currentKey("timers.register"));
        domain = checkDomain(domain, "timers.register");
        if (domain === PROCESSING_TIME && this.stagedIndex(timer) >= 0) return;
        const timers = this.timers[domain];
        const [index, found] = this.findTimer(timers, timer);
        if (!found) timers.splice(index, 0, timer);
      },
      delete: (domain, at) => {
        const timer = makeTimer(checkTimestamp(at, "timers.delete"), this.currentKey("timers.delete"));
        domain = checkDomain(domain, "timers.delete");
        const staged = domain === PROCESSING_TIME ? this.stagedIndex(timer) : -1;
        if (staged >= 0) {
          this.staged.splice(staged, 1);
          return;
        }
        const timers = this.timers[domain];
        const [index, found] = this.findTimer(timers, timer);
        if (found) timers.splice(index, 1);
      },
      currentWatermark: () => this.watermark,
      currentProcessingTime: () => this.processingTime,
    });
  }

  /** Where `timer` is or would go in sorted `timers`, and whether it is there. */
  findTimer(timers, timer) {
    let lo = 0;
    let hi = timers.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareTimers(timers[mid], timer) < 0) lo = mid + 1;
      else hi = mid;
    }
    return [lo, lo < timers.length && compareTimers(timers[lo], timer) === 0];
  }

  /** Where `timer` is among the staged processing-time timers, or -1. */
  stagedIndex(timer) {
    return this.staged.findIndex((t) => compareTimers(t, timer) === 0);
  }

  /**
   * Removes and returns the next timer of `domain` to fire at `upto`, or undefined. An
   * event-time timer is the first pending one, so one registered while timers fire takes
   * its place among them (as in the engine's ordered set); a processing-time one comes
   * from the staged group, which takes every due timer when it is empty.
   */
  popDueTimer(domain, upto) {
    const timers = this.timers[domain];
    if (domain === PROCESSING_TIME) {
      if (this.staged.length === 0) {
        let due = 0;
        while (due < timers.length && timers[due].timestamp <= upto) due++;
        this.staged = timers.splice(0, due);
      }
      return this.staged.shift();
    }
    return timers.length !== 0 && timers[0].timestamp <= upto ? timers.shift() : undefined;
  }

  /** The pending timers of `domain`, in firing order. */
  pendingTimers(domain) {
    return domain === PROCESSING_TIME ? [...this.staged, ...this.timers[domain]] : this.timers[domain];
  }

  outputInterface() {
    return Object.freeze({
      declare: (name) => {
        const id = this.outputs.indexOf(name);
        if (id >= 0) return id;
        if (this.phase !== INIT) throw new Error(`output ${JSON.stringify(name)} must be declared in init`);
        if (name === "") throw new Error("an output needs a non-empty name");
        this.outputs.push(name);
        this.emitted.push([]);
        return this.outputs.length - 1;
      },
      emit: (id, value, key, timestamp) => {
        if (this.phase !== KEYED) {
          throw new Error("weir host: `output.emit` called outside processElement/onTimer (the host traps)");
        }
        if (this.outputs[id] === undefined) {
          throw new Error(`weir host: \`output.emit\` to undeclared output id ${id} (the host traps)`);
        }
        const bytes = checkBytes(value, "output.emit");
        const text = tryDecodeUtf8(bytes);
        let parsed;
        try {
          if (text === null) throw new Error("not UTF-8");
          parsed = JSON.parse(text);
        } catch (e) {
          throw new Error(
            `weir host: output \`${this.outputs[id]}\` got a record that is not JSON (${e.message}): ${text ?? "(bytes)"}`,
          );
        }
        const record = {
          value: parsed,
          key: key === null || key === undefined ? null : keyText(checkBytes(key, "output.emit")),
          timestamp:
            timestamp === null || timestamp === undefined ? this.timestamp : checkTimestamp(timestamp, "output.emit"),
        };
        // The JSON text as emitted, for what JSON.parse loses (digits beyond 2^53, `1.0`).
        Object.defineProperty(record, "text", { value: text, enumerable: false });
        this.pending.push([id, record]);
      },
    });
  }

  /** Ends a call: its records reach the outputs if it succeeded, and are dropped if not. */
  endCall(succeeded) {
    this.phase = IDLE;
    const pending = this.pending;
    this.pending = [];
    if (succeeded) for (const [id, record] of pending) this.emitted[id].push(record);
  }

  outputId(name) {
    const id = this.outputs.indexOf(name);
    if (id < 0) {
      throw new Error(`TestHost: output \`${name}\` was not declared; declared outputs: ${JSON.stringify(this.outputs)}`);
    }
    return id;
  }

  log(level, message) {
    if (!LOG_LEVELS.includes(level) || typeof message !== "string") {
      throw new TypeError("weir host: `logging.log` takes a level and a string (the host traps)");
    }
    const key = this.phase === KEYED ? keyText(unbinary(this.key)) : null;
    this.logs.push({ level, key, message });
    if (this.printLevel !== "off" && LOG_LEVELS.indexOf(level) >= LOG_LEVELS.indexOf(this.printLevel)) {
      printLine(`[${level}] ${key === null ? "" : `key=${typeof key === "string" ? key : `[${key}]`}: `}${message}`);
    }
  }
}

// ---------------------------------------------------------------------------------------
// The globals of a component, around each call

/**
 * Globals of Node.js that a component does not have (QuickJS has none of them, and the
 * SDK adds none): hidden during calls, so that a UDF using one fails its tests as it
 * would fail in the host.
 */
const ABSENT_IN_COMPONENT = [
  "setTimeout",
  "setInterval",
  "setImmediate",
  "clearTimeout",
  "clearInterval",
  "clearImmediate",
  "fetch",
  "TextEncoder",
  "TextDecoder",
  "crypto",
  "structuredClone",
  "process",
  "Buffer",
  "URL",
  "URLSearchParams",
  "Intl",
  "WebAssembly",
];

/**
 * Replaces some globals of `globalThis` and removes others; returns a function that puts
 * them back.
 */
function swapGlobals(replacements, removed) {
  const names = [...Object.keys(replacements), ...removed];
  const saved = names.map((name) => [name, Object.getOwnPropertyDescriptor(globalThis, name)]);
  for (const [name, value] of Object.entries(replacements)) {
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
  }
  for (const name of removed) delete globalThis[name];
  return () => {
    for (const [name, descriptor] of saved) {
      if (descriptor === undefined) delete globalThis[name];
      else Object.defineProperty(globalThis, name, descriptor);
    }
  };
}

// ---------------------------------------------------------------------------------------
// The TestHost

/** The definition (class or object) behind a UDF as a test may give it. */
function definitionOf(udf) {
  if (udf !== null && (typeof udf === "object" || typeof udf === "function")) {
    if (udf[DEFINITION] !== undefined) return udf[DEFINITION]; // weir.processFunction(...)
    const exported = udf.processFunction; // the UDF's module: import * as app from "./app.js"
    if (exported !== null && typeof exported === "object" && exported[DEFINITION] !== undefined) {
      return exported[DEFINITION];
    }
    return makeProcessFunction(udf)[DEFINITION]; // a class or object; checked there
  }
  throw new TypeError(
    "TestHost(udf): the UDF's processFunction export (weir.processFunction(...)), its module, or its class",
  );
}

function configEntries(config) {
  const entries = Array.isArray(config) ? config : Object.entries(config ?? {});
  return entries.map((entry) => {
    if (!Array.isArray(entry) || entry.length !== 2 || typeof entry[0] !== "string") {
      throw new TypeError("TestHost: config is an object {key: value} or a list of [key, value] pairs");
    }
    const value = entry[1];
    return [entry[0], typeof value === "string" ? value : typeof value === "object" ? JSON.stringify(value) : String(value)];
  });
}

const OPTIONS = ["config", "inputs", "processingTime", "logLevel"];

/**
 * An in-memory host running one UDF instance. See the module's description.
 */
export class TestHost {
  #definition;
  #runner = null;
  #config;
  #inputs;
  #world;
  #calling = false;
  #rejected = [];

  /**
   * Creates the host and calls the UDF's `init`; throws what `init` throws.
   *
   * @param {object|Function} udf the UDF's `processFunction` export, its module
   *   (`import * as app from "./app.js"`), or its class
   * @param {object} [options]
   * @param {Object<string, string>|Array<[string, string]>} [options.config] config entries, as
   *   `[udf.config]` or `--config KEY=VALUE` give them (text; numbers and booleans are
   *   turned into text; in a list of pairs a later entry for the same key wins)
   * @param {string[]} [options.inputs] the names of the connected inputs (default `["main"]`)
   * @param {number} [options.processingTime] where the processing-time clock starts (default 0)
   * @param {string} [options.logLevel] the lowest level of the UDF's log lines printed to
   *   stderr: "trace", "debug", "info" (the default, as `weir` shows), "warn", "error" or
   *   "off"; {@link logs} has them all anyway
   */
  constructor(udf, options = {}) {
    if (componentHost !== null) throw new Error("TestHost runs under Node.js, not inside a component");
    for (const name of Object.keys(options)) {
      if (!OPTIONS.includes(name)) throw new TypeError(`TestHost: unknown option \`${name}\` (options: ${OPTIONS.join(", ")})`);
    }
    const { config = {}, inputs = ["main"], processingTime = 0, logLevel = "info" } = options;
    if (!Array.isArray(inputs) || inputs.length === 0 || !inputs.every((i) => typeof i === "string")) {
      throw new TypeError("TestHost: inputs is a non-empty list of input names");
    }
    if (logLevel !== "off" && !LOG_LEVELS.includes(logLevel)) {
      throw new TypeError(`TestHost: logLevel is one of ${LOG_LEVELS.join(", ")} or off`);
    }
    this.#definition = definitionOf(udf);
    this.#config = configEntries(config);
    this.#inputs = inputs.slice();
    this.#world = new World(checkTimestamp(processingTime, "TestHost: processingTime"), logLevel);
    this.reinit();
  }

  /** Runs `body` as one call of the host into the UDF, in `phase` (for `key` at `timestamp`). */
  #call(phase, key, timestamp, body) {
    if (this.#calling) throw new Error("TestHost: called from inside a call into the UDF");
    const world = this.#world;
    const previousHost = currentHost();
    setHost(world.host);
    const restoreGlobals = swapGlobals(internals.sandboxGlobals, ABSENT_IN_COMPONENT);
    this.#calling = true;
    // Expired state is gone before the call sees it (the clocks moved, or a declaration
    // shortened a time-to-live), and again after it (for a declaration in init).
    world.expire();
    const saved = phase === KEYED ? world.save() : null;
    world.phase = phase;
    world.key = key;
    world.timestamp = timestamp;
    world.rejected = null;
    let succeeded = false;
    try {
      body();
      if (world.rejected !== null) {
        world.restore(saved);
        this.#rejected.push({ key: keyText(unbinary(key)), timestamp, reason: world.rejected });
      } else {
        succeeded = true;
      }
    } finally {
      world.endCall(succeeded);
      world.expire();
      this.#calling = false;
      restoreGlobals();
      setHost(previousHost);
    }
  }

  /**
   * Replaces the instance with a fresh one (calling `init` again) while keeping all state,
   * timers and outputs, as the real host may at any time. Use it to check that a UDF keeps
   * nothing important on `this`. If `init` throws, the old instance stays.
   */
  reinit() {
    const runner = internals.makeRunner(this.#definition, (e) => e, (message) => new Error(message));
    const ctx = { config: this.#config.map(([k, v]) => [k, v]), inputs: this.#inputs.slice() };
    this.#call(INIT, "", 0, () => runner.init(ctx));
    this.#runner = runner;
  }

  /**
   * Feeds one element from `input` (one of the input names), with the key and event
   * timestamp the host would have extracted. Throws what the UDF throws.
   *
   * @param {string} input
   * @param {string|number|Uint8Array} key text (UTF-8), a number (keyed by its text, as the
   *   host keys JSON numbers), or bytes
   * @param {*} value the record: a `Uint8Array` or a string is passed as is (the JSON text);
   *   anything else is written as JSON (`weir.rawJson` members verbatim)
   * @param {number} timestamp the record's event time, in milliseconds
   */
  process(input, key, value, timestamp) {
    const index = this.#inputs.indexOf(input);
    if (index < 0) throw new Error(`TestHost: unknown input \`${input}\`; inputs are ${JSON.stringify(this.#inputs)}`);
    const bytes = keyBytes(key);
    const ts = checkTimestamp(timestamp, "TestHost.process: timestamp");
    let record;
    if (value instanceof Uint8Array) record = value.slice();
    else if (typeof value === "string") record = encodeUtf8(value);
    else record = encodeUtf8(toJson(value));
    this.#call(KEYED, binary(bytes), ts, () =>
      this.#runner.processElement({ input: index, key: bytes.slice(), value: record, timestamp: ts }),
    );
  }

  #fire(domain, timestamp, key) {
    this.#call(KEYED, key, timestamp, () => this.#runner.onTimer({ domain, timestamp, key: unbinary(key) }));
  }

  /**
   * Fires due timers of `domain` one at a time, in the engine's order, so that ones
   * registered meanwhile fire too. Returns how many fired.
   */
  #fireDue(domain, upto) {
    for (let fired = 1; ; fired++) {
      const timer = this.#world.popDueTimer(domain, upto);
      if (timer === undefined) return fired - 1;
      if (domain === PROCESSING_TIME) this.#world.setProcessingTime(timer.timestamp);
      // Event-time entries expire by the timer's time, not the watermark's.
      else this.#world.setEventClock(timer.timestamp);
      try {
        this.#fire(domain, timer.timestamp, timer.key);
      } finally {
        if (domain !== PROCESSING_TIME) this.#world.setEventClock(null);
      }
      if (fired === FIRING_LIMIT) {
        throw new Error(
          `TestHost: ${FIRING_LIMIT} ${domain} timers fired in one go; the UDF keeps registering due timers while firing (the host would never finish)`,
        );
      }
    }
  }

  /**
   * Advances the watermark to `watermark` if that is later than the current one, then
   * fires every event-time timer at or before it, including timers registered while
   * firing, always the first pending one in (timestamp, key hash, key) order; then
   * removes the event-time state entries that expired. Expiry and timers interleave by
   * time, as in the host: a timer at `t` sees every entry that expires after `t`, however
   * far the watermark jumped. Timers registered at or before an unchanged watermark wait
   * for its next advance, as in the host.
   * @param {number} watermark
   */
  advanceWatermark(watermark) {
    const wm = checkTimestamp(watermark, "TestHost.advanceWatermark");
    if (wm <= this.#world.watermark) return;
    this.#world.setWatermark(wm);
    this.#fireDue(EVENT_TIME, wm);
    this.#world.expire();
  }

  /**
   * Moves the processing-time clock to `now` (it never goes back), then fires every
   * processing-time timer at or before the clock, overdue ones included, as the host does
   * when it checks its wall clock between elements: the due ones in (timestamp, key hash,
   * key) order, then those registered meanwhile that are due.
   * @param {number} now
   */
  setProcessingTime(now) {
    const world = this.#world;
    world.setProcessingTime(checkTimestamp(now, "TestHost.setProcessingTime"));
    world.expire();
    this.#fireDue(PROCESSING_TIME, world.processingTime);
  }

  /**
   * Ends the input as the host does: the watermark goes to `MAX_TIMESTAMP`, firing every
   * event-time timer, then every processing-time timer fires (the clock moving to each),
   * then the event-time timers those registered, and so on until none is left.
   */
  finish() {
    this.#world.setWatermark(MAX_TIMESTAMP);
    this.#fireDue(EVENT_TIME, MAX_TIMESTAMP);
    this.#world.expire();
    while (this.#fireDue(PROCESSING_TIME, MAX_TIMESTAMP) + this.#fireDue(EVENT_TIME, MAX_TIMESTAMP) > 0);
  }

  /**
   * Everything emitted to output `name` so far, oldest first: `{value, key, timestamp}`,
   * with `value` parsed from the JSON the UDF emitted, `key` the record's key as text
   * (bytes if not UTF-8; `null` if the UDF gave none), and `timestamp` the one the UDF
   * gave, else the element's or timer's. A non-enumerable `text` property holds the JSON
   * text as emitted (for digits that `JSON.parse` loses). Throws if the UDF did not
   * declare the output.
   * @param {string} name
   * @returns {{value: *, key: string|Uint8Array|null, timestamp: number}[]}
   */
  outputs(name) {
    return this.#world.emitted[this.#world.outputId(name)].slice();
  }

  /**
   * The records and timers the UDF rejected so far ({@link weir.Reject}), in order: the
   * host would write them to the dead-letter output and take back everything their calls
   * did, as the TestHost does.
   * @returns {{key: string|Uint8Array, timestamp: number, reason: string}[]}
   */
  rejected() {
    return this.#rejected.slice();
  }

  /** Like {@link outputs}, and forgets them, for checking step by step. */
  takeOutputs(name) {
    const id = this.#world.outputId(name);
    const records = this.#world.emitted[id];
    this.#world.emitted[id] = [];
    return records;
  }

  /**
   * The timers not yet fired, as `{key, domain, timestamp}`: event-time ones first, each
   * domain in firing order.
   */
  pendingTimers() {
    return [EVENT_TIME, PROCESSING_TIME].flatMap((domain) =>
      this.#world.pendingTimers(domain).map((t) => ({ key: keyText(unbinary(t.key)), domain, timestamp: t.timestamp })),
    );
  }

  /** The current watermark (`MIN_TIMESTAMP` before the first advance). */
  get watermark() {
    return this.#world.watermark;
  }

  /** The processing-time clock. */
  get processingTime() {
    return this.#world.processingTime;
  }

  /** Whether `key` holds any state, to check that a UDF cleans up after itself. */
  hasState(key) {
    return this.#world.data.has(binary(keyBytes(key)));
  }

  /** The keys that hold any state, in byte order (as text, or bytes if not UTF-8). */
  keysWithState() {
    return [...this.#world.data.keys()].sort().map((k) => keyText(unbinary(k)));
  }

  /** The stored bytes of value state `name` for `key` (as the host keeps them), or `undefined`. */
  stateBytes(key, name) {
    const id = this.#world.states.findIndex((s) => s.name === name);
    if (id < 0) return undefined;
    const slots = this.#world.data.get(binary(keyBytes(key)));
    const value = slots === undefined ? undefined : slots.get(id);
    return value instanceof Uint8Array ? value.slice() : undefined;
  }

  /**
   * Sets the stored bytes of value state `name` for `key`: state as an earlier version of
   * the UDF left it, to test a migration or a state-decode error.
   */
  setStateBytes(key, name, bytes) {
    const id = this.#declared(name, "value");
    this.#store(key, id, checkBytes(bytes, "TestHost.setStateBytes"));
  }

  /**
   * The stored items of list state `name` for `key` (as the host keeps them, oldest
   * first): an array of `Uint8Array`, empty if the key has none. Throws if no list state
   * `name` was declared.
   * @returns {Uint8Array[]}
   */
  listStateBytes(key, name) {
    const items = this.#stored(key, this.#declared(name, "list"));
    return items === undefined ? [] : items.map((item) => item.slice());
  }

  /**
   * Sets the stored items of list state `name` for `key` (each a `Uint8Array`; an empty
   * array removes the list): a list as an earlier version of the UDF left it, to test a
   * migration or a state-decode error.
   * @param {Uint8Array[]} items
   */
  setListStateBytes(key, name, items) {
    const id = this.#declared(name, "list");
    if (!Array.isArray(items)) throw new TypeError("TestHost.setListStateBytes: items is an array of Uint8Array");
    const copied = items.map((item) => checkBytes(item, "TestHost.setListStateBytes"));
    this.#store(key, id, copied.length === 0 ? undefined : copied);
  }

  /**
   * The stored entries of map state `name` for `key` (as the host keeps them): `[key
   * bytes, value bytes]` pairs of `Uint8Array`, in key byte order, empty if the key has
   * none. Throws if no map state `name` was declared.
   * @returns {Array<[Uint8Array, Uint8Array]>}
   */
  mapStateBytes(key, name) {
    const map = this.#stored(key, this.#declared(name, "map"));
    if (map === undefined) return [];
    return [...map.keys()].sort().map((k) => [unbinary(k), map.get(k).slice()]);
  }

  /**
   * Sets the stored entries of map state `name` for `key`, replacing any: `[key bytes,
   * value bytes]` pairs (an array of pairs or a `Map`; none removes the map), the keys as
   * the state's key codec encodes them (JSON by default: `"a"` with its quotes). A map as
   * an earlier version of the UDF left it, to test a migration or a state-decode error.
   * @param {Iterable<[Uint8Array, Uint8Array]>} entries
   */
  setMapStateBytes(key, name, entries) {
    const id = this.#declared(name, "map");
    if (entries === null || typeof entries !== "object" || typeof entries[Symbol.iterator] !== "function") {
      throw new TypeError("TestHost.setMapStateBytes: entries is an array of [key bytes, value bytes] pairs, or a Map");
    }
    const map = new Map();
    for (const entry of entries) {
      if (!Array.isArray(entry) || entry.length !== 2) {
        throw new TypeError("TestHost.setMapStateBytes: each entry is a [key bytes, value bytes] pair");
      }
      map.set(binary(checkBytes(entry[0], "TestHost.setMapStateBytes")), checkBytes(entry[1], "TestHost.setMapStateBytes"));
    }
    this.#store(key, id, map.size === 0 ? undefined : map);
  }

  /** The id of the state `name` declared as a `kind` state; throws if there is none. */
  #declared(name, kind) {
    const id = this.#world.states.findIndex((s) => s.name === name);
    if (id < 0 || this.#world.states[id].kind !== kind) {
      throw new Error(`TestHost: no ${kind} state \`${name}\` was declared`);
    }
    return id;
  }

  /** What state `id` holds for `key` (a test's key), or `undefined`. */
  #stored(key, id) {
    const slots = this.#world.data.get(binary(keyBytes(key)));
    return slots === undefined ? undefined : slots.get(id);
  }

  /**
   * Makes state `id` of `key` (a test's key) hold `value`; `undefined` removes it. In a
   * state with a time-to-live, what it stores starts its time-to-live now.
   */
  #store(key, id, value) {
    this.#world.store(binary(keyBytes(key)), id, value);
    this.#world.expire();
  }

  /** Everything the UDF logged so far: `{level, key, message}` (`key` null in init). */
  logs() {
    return this.#world.logs.slice();
  }

  /** The current UDF instance (what `this` is in its methods). */
  get udf() {
    return this.#runner.instance;
  }
}

export { MAX_TIMESTAMP, MIN_TIMESTAMP, EVENT_TIME, PROCESSING_TIME };
