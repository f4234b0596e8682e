/**
 * Internal: the batched path (`weir:udf/batch`), many elements and timers per component
 * call, as the Rust SDK's `guest-sdk/src/batch.rs` does it. UDFs never import this module.
 *
 * The host sends a run of entries with the state of every key they touch (the byte
 * layout is documented in the `weir-wire` crate, `guest-sdk/wire`). While the batch
 * runs, an {@link Overlay} is the host (`host.js`'s `setHost`), so the SDK's own code and
 * the UDF's are the same per-element and per-timer code; only where their calls go
 * changes. At the end the overlay becomes the effects buffer: state writes, timer
 * requests, emitted records and logs.
 *
 * Semantics are the per-element ones, because anything the overlay cannot answer exactly
 * fails the batch, and the host then runs the same entries again one call at a time:
 *
 * - anything the UDF throws (a `Reject` too, a `StateDecodeError`) fails the batch, and
 *   none of its effects apply;
 * - a misuse of the contract the host would trap on (a list call on a value state) fails
 *   the batch even if the UDF catches what it threw, so that the replay shows the host's
 *   own answer;
 * - a timer the batch registers that is already due ends the batch right after the entry
 *   that registered it, so that the host fires it in order; a timer entry still ahead in
 *   the batch that the UDF deletes is skipped, and registering it again is a no-op;
 * - a state with a time-to-live has its writes stamped with the time of the call that
 *   did them, and its lists and maps written as operations so that each item keeps its
 *   own stamp; reads are reported for states whose time-to-live reads refresh.
 *
 * The buffer is decoded only as far as the entries run need it (`BatchBuffer`),
 * because the guest may stop early and the host then sends the rest again. The SDK does
 * not export `weir:udf/cached-batch`: keeping every sent key's state between batches
 * would cost QuickJS more than the copies it saves (the host marks every key of a batch
 * as held, the keys of the entries the guest never reached too). State values stay
 * bytes: a decoded value is never shared between calls, so `get()` returns a fresh
 * object, as with single calls.
 *
 * @module weir/batch
 */

// Written for QuickJS, which interprets: a function call costs about as much as a host
// import, so the hot paths below (the imports as the overlay answers them, the effects
// written as they happen) keep to few calls, and the batch's state is module-level.

const EVENT_TIME = "event-time";
const DOMAINS = ["event-time", "processing-time"];
const LEVELS = { trace: 0, debug: 1, info: 2, warn: 3, error: 4 };

const WRITE_CLEAR = 0;
const WRITE_SET = 1;
const WRITE_LIST_APPEND = 2;
const WRITE_MAP_PUT = 3;
const WRITE_MAP_REMOVE = 4;
const WRITE_READ = 5;
const WRITE_MAP_READ = 6;
const WRITE_AT = 0x80;

/** Past this many operations a list or map slot without a time-to-live is written whole. */
const MAX_OPS = 32;

const CLEAN = 0;
const REPLACED = 1;

const TWO_32 = 4294967296;
const I64_MIN = -(2 ** 63);
const I64_MAX = 2 ** 63;

/** The time-to-live of each declared state, by id: `{domain, refreshOnRead}` or absent. */
const ttls = new Map();

/**
 * Records that state `id` was declared with `ttl` (a `StateTtl`, or `undefined`), so that
 * batches stamp its writes and report its reads.
 */
export function declared(id, ttl) {
  if (ttl === undefined) ttls.delete(id);
  else ttls.set(id, { domain: ttl.domain, refreshOnRead: ttl.refreshOnRead });
}

/** A batch that cannot go on: the host runs its entries again one call at a time. */
export class BatchFailed extends Error {
  constructor(message) {
    super(message);
    this.name = "BatchFailed";
  }
}

/** The map key of `bytes`: one char per byte, so that string order is byte order. */
function mapKey(bytes) {
  return String.fromCharCode.apply(null, bytes);
}

/**
 * One state of one key as the batch sees it: `contents` is `null` (absent), a
 * `Uint8Array` (a value), an array of them (a list) or a `Map` from {@link mapKey} to
 * `[key, value]` (a map).
 */
class Slot {
  constructor(contents) {
    this.contents = contents;
    /** CLEAN, REPLACED, or an array of operations `[code, a, b, at]`. */
    this.change = CLEAN;
    this.stamp = I64_MIN;
  }

  /** Records an operation; without a time-to-live, past MAX_OPS the slot is written whole. */
  op(op, ttl) {
    const change = this.change;
    if (change === CLEAN) this.change = [op];
    else if (change === REPLACED) return;
    else if (ttl || change.length < MAX_OPS) change.push(op);
    else this.change = REPLACED;
  }
}

// ---------------------------------------------------------------------------------------
// An output buffer that grows: the effects, written as the batch goes

class Out {
  constructor(capacity) {
    this.buf = new Uint8Array(capacity);
    this.view = new DataView(this.buf.buffer);
    this.at = 0;
  }

  /** Makes room for `n` more bytes. */
  room(n) {
    if (this.at + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.at + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.buf.subarray(0, this.at));
    this.buf = grown;
    this.view = new DataView(grown.buffer);
  }
}

/** Writes `v` (a whole number of milliseconds) at `at` as an i64, clamped as the bindings clamp it. */
function putI64(view, at, v) {
  if (v <= 9007199254740991 && v >= -9007199254740991) {
    const lo = v >>> 0;
    view.setUint32(at, lo, true);
    view.setInt32(at + 4, (v - lo) / TWO_32, true);
  } else {
    view.setBigInt64(at, v >= I64_MAX ? 0x7fffffffffffffffn : v <= I64_MIN ? -0x8000000000000000n : BigInt(v), true);
  }
}

/** Appends `bytes:u32 len + bytes` to `out`. */
function putBytes(out, b) {
  const n = b.length;
  out.room(4 + n);
  out.view.setUint32(out.at, n, true);
  out.buf.set(b, out.at + 4);
  out.at += 4 + n;
}

// ---------------------------------------------------------------------------------------
// The batch buffer, read as far as needed

function readSlots(view, bytes, at, slots) {
  const n = view.getUint32(at, true);
  at += 4;
  for (let i = 0; i < n; i++) {
    const state = view.getUint32(at, true);
    const kind = view.getUint8(at + 4);
    const length = view.getUint32(at + 5, true);
    at += 9;
    let contents;
    if (kind === 0) {
      contents = bytes.subarray(at, at + length);
      at += length;
    } else if (kind === 1 || kind === 2) {
      contents = kind === 1 ? [] : new Map();
      for (let j = 0; j < length; j++) {
        let size = view.getUint32(at, true);
        const item = bytes.subarray(at + 4, at + 4 + size);
        at += 4 + size;
        if (kind === 1) {
          contents.push(item);
        } else {
          size = view.getUint32(at, true);
          contents.set(mapKey(item), [item, bytes.subarray(at + 4, at + 4 + size)]);
          at += 4 + size;
        }
      }
    } else {
      throw new RangeError("unknown slot kind");
    }
    if (at > bytes.length) throw new RangeError("truncated");
    slots.set(state, new Slot(contents));
  }
  return at;
}

/**
 * The batch buffer, decoded as far as the entries run so far need it.
 *
 * A guest may stop long before the end of a batch (at a timer it registered that falls
 * due), and the host then sends the rest again: decoding everything first would cost the
 * whole batch every time. Keys are numbered in the order entries first name them, so the
 * keys of the first n entries are among the first n keys; entries are read in order; and
 * a timer entry with timestamp T comes before the first element whose watermark is T or
 * later, so the timer entries ahead that a timer call could name are found by reading on
 * only that far (`scanToWatermark`). Only the walk over the keys to where the entries
 * start is paid for the whole batch (lengths only).
 */
class BatchBuffer {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const view = this.view;
    this.processingTime = view.getInt32(4, true) * TWO_32 + view.getUint32(0, true);
    this.nKeys = view.getUint32(8, true);
    this.keyAt = 12;
    this.keys = [];
    this.slots = [];
    /** Where the next entry starts (-1: the keys are not skipped yet). */
    this.entryAt = -1;
    this.nEntries = 0;
    // The entries read so far, one column per field.
    this.count = 0;
    this.isTimer = [];
    this.entryKey = [];
    this.input = [];
    this.timestamp = [];
    this.watermark = [];
    this.after = [];
    this.valueAt = [];
    this.scanWatermark = I64_MIN;
    /** key -> Map(ts -> entry index): the event-time timer entries not fired yet. */
    this.pending = new Map();
  }

  /** Reads keys up to `index`. */
  key(index) {
    const { view, bytes, keys } = this;
    let at = this.keyAt;
    while (keys.length <= index) {
      if (keys.length >= this.nKeys) throw new RangeError("entry names a key outside the batch");
      const size = view.getUint32(at, true);
      keys.push(bytes.subarray(at + 4, at + 4 + size));
      const slots = new Map();
      at = readSlots(view, bytes, at + 4 + size, slots);
      this.slots.push(slots);
    }
    this.keyAt = at;
  }

  /** Finds where the entries start, reading only the lengths of the keys not read yet. */
  skipKeys() {
    const view = this.view;
    let at = this.keyAt;
    for (let i = this.keys.length; i < this.nKeys; i++) {
      at += 4 + view.getUint32(at, true);
      const n = view.getUint32(at, true);
      at += 4;
      for (let j = 0; j < n; j++) {
        const kind = view.getUint8(at + 4);
        const length = view.getUint32(at + 5, true);
        at += 9;
        if (kind === 0) at += length;
        else if (kind === 1 || kind === 2) {
          const items = kind === 1 ? length : 2 * length;
          for (let k = 0; k < items; k++) at += 4 + view.getUint32(at, true);
        } else throw new RangeError("unknown slot kind");
      }
    }
    this.nEntries = view.getUint32(at, true);
    this.entryAt = at + 4;
  }

  /**
   * Reads the next entry into the columns below (no object per entry: an allocation
   * costs QuickJS more than the reads); false at the end.
   */
  readEntry() {
    if (this.entryAt < 0) this.skipKeys();
    const n = this.count;
    if (n >= this.nEntries) return false;
    const view = this.view;
    const at = this.entryAt;
    const tag = view.getUint8(at);
    const key = view.getUint32(at + 1, true);
    if (key >= this.nKeys) throw new RangeError("entry names a key outside the batch");
    this.isTimer.push(tag === 1);
    this.entryKey.push(key);
    if (tag === 0) {
      const size = view.getUint32(at + 33, true);
      const end = at + 37 + size;
      if (end > this.bytes.length) throw new RangeError("truncated");
      const watermark = view.getInt32(at + 21, true) * TWO_32 + view.getUint32(at + 17, true);
      this.input.push(view.getUint32(at + 5, true));
      this.timestamp.push(view.getInt32(at + 13, true) * TWO_32 + view.getUint32(at + 9, true));
      this.watermark.push(watermark);
      this.after.push(view.getInt32(at + 29, true) * TWO_32 + view.getUint32(at + 25, true));
      this.valueAt.push(at + 37);
      this.entryAt = end;
      this.scanWatermark = watermark;
    } else if (tag === 1) {
      const domain = view.getUint8(at + 5);
      const timestamp = view.getInt32(at + 10, true) * TWO_32 + view.getUint32(at + 6, true);
      const watermark = view.getInt32(at + 18, true) * TWO_32 + view.getUint32(at + 14, true);
      this.input.push(domain); // a timer's domain goes where an element's input does
      this.timestamp.push(timestamp);
      this.watermark.push(watermark);
      this.after.push(watermark);
      this.valueAt.push(-1);
      this.entryAt = at + 22;
      if (domain === 0) {
        let times = this.pending.get(key);
        if (times === undefined) this.pending.set(key, (times = new Map()));
        times.set(timestamp, n);
      }
    } else {
      throw new RangeError("unknown entry tag");
    }
    this.count = n + 1;
    return true;
  }

  /** The value of element entry `i`, as a view into the buffer. */
  value(i) {
    const at = this.valueAt[i];
    return this.bytes.subarray(at, at + this.view.getUint32(at - 4, true));
  }

  /** Takes pending event-time timer entry (`key`, `at`) out of the batch: its index, or undefined. */
  takePending(key, at) {
    const times = this.pending.get(key);
    if (times === undefined) return undefined;
    const index = times.get(at);
    if (index !== undefined) times.delete(at);
    return index;
  }

  /**
   * Reads entries until one is an element whose watermark is `at` or later: every timer
   * entry due at `at` is then read (and pending, if it has not fired).
   */
  scanToWatermark(at) {
    while (this.scanWatermark < at && this.readEntry());
  }
}

// ---------------------------------------------------------------------------------------
// The batch being run, and the host's imports as it answers them

/** The batch being run (null between batches). */
let batch = null;
/** The current key's index, its slots, and the current entry's time and watermark. */
let current = 0;
let cur = null;
let timestamp = 0;
let watermark = I64_MIN;
/** Timer entries the UDF deleted before they fired. */
let skipped = new Set();
/** The earliest event-time timer the batch registered. */
let earliestRegistered = Infinity;
/** Why the batch must fail, even if the UDF caught it. */
let failed = null;
// The effects as they happen: timer operations, emitted records, log lines.
const timerOps = new Out(1024);
let timerOpCount = 0;
const emits = new Out(16384);
let emitCount = 0;
const logs = new Out(256);
let logCount = 0;
/** The SDK's UTF-8 encoder (index.js passes it). */
let encodeText = null;

/** What the host would trap on: the batch fails, whatever the UDF catches. */
function trap(why) {
  if (failed === null) failed = why;
  throw new BatchFailed(why);
}

function callTime(ttl) {
  if (ttl.domain === EVENT_TIME) return timestamp > watermark ? timestamp : watermark;
  return batch.processingTime;
}

function slotOrAbsent(state) {
  let slot = cur.get(state);
  if (slot === undefined) {
    slot = new Slot(null);
    cur.set(state, slot);
  }
  return slot;
}

/** Records operation `code` (with payloads `a`, `b`) on `slot` of `state`. */
function op(state, slot, code, a, b) {
  const ttl = ttls.get(state);
  if (ttl === undefined) slot.op([code, a, b, 0], false);
  else slot.op([code, a, b, callTime(ttl)], true);
}

/** A read of `state` (its entry `mapKeyBytes` only, if given), for a time-to-live refreshed on read. */
function read(state, mapKeyBytes) {
  const ttl = ttls.get(state);
  if (ttl === undefined || !ttl.refreshOnRead) return;
  const slot = cur.get(state);
  if (slot === undefined || slot.contents === null) return;
  const at = callTime(ttl);
  if (slot.change === REPLACED) slot.stamp = at;
  else if (mapKeyBytes !== undefined) slot.op([WRITE_MAP_READ, mapKeyBytes, null, at], true);
  else {
    slot.stamp = at;
    slot.op([WRITE_READ, null, null, at], true);
  }
}

/** Replaces `state` whole; for a list with a time-to-live, a clear and the items appended again. */
function setWhole(state, contents) {
  const slot = slotOrAbsent(state);
  const ttl = ttls.size === 0 ? undefined : ttls.get(state);
  if (ttl === undefined) {
    slot.contents = contents;
    slot.change = REPLACED;
    return;
  }
  const at = callTime(ttl);
  if (Array.isArray(contents)) {
    slot.op([WRITE_CLEAR, null, null, at], true);
    for (const item of contents) slot.op([WRITE_LIST_APPEND, item, null, at], true);
    slot.contents = contents;
  } else if (contents === null && slot.change !== REPLACED) {
    slot.op([WRITE_CLEAR, null, null, at], true);
    slot.contents = null;
  } else {
    slot.stamp = at;
    slot.contents = contents;
    slot.change = REPLACED;
  }
}

/** The current key's slot of `state` (undefined if none), checked to hold what `check` accepts. */
function slotOf(state, check, call) {
  const slot = cur.get(state);
  if (slot !== undefined && slot.contents !== null && !check(slot.contents)) {
    trap(`\`state.${call}\` on state #${state}, which is of another kind`);
  }
  return slot;
}

function isBytes(value) {
  return value instanceof Uint8Array;
}

function isMap(value) {
  return value instanceof Map;
}

/** `value`, copied as the import would copy it, if it is bytes. */
function bytesArg(value, call) {
  if (value instanceof Uint8Array) return value.slice();
  return trap(`\`${call}\` given ${typeof value}, not bytes`);
}

/** A map's `[key, value]` pairs in key-byte order. */
function sortedEntries(map) {
  const names = [...map.keys()].sort();
  return names.map((name) => map.get(name));
}

function timerOp(code, opCode, at) {
  const out = timerOps;
  out.room(14);
  const view = out.view;
  view.setUint32(out.at, current, true);
  view.setUint8(out.at + 4, code);
  view.setUint8(out.at + 5, opCode);
  putI64(view, out.at + 6, at);
  out.at += 14;
  timerOpCount += 1;
}

function timerArgs(domain, at, call) {
  if (typeof at !== "number" || !Number.isInteger(at)) trap(`\`${call}\` given ${String(at)}, not a whole number`);
  if (domain === EVENT_TIME) return 0;
  if (domain === "processing-time") return 1;
  return trap(`\`${call}\` given the domain ${String(domain)}`);
}

/** The host, as the batch answers it: the shape of the component's imports (host.js). */
const overlayHost = Object.freeze({
  state: Object.freeze({
    declare: () => trap("a declaration outside init"),
    declareWithTtl: () => trap("a declaration outside init"),
    valueGet(state) {
      if (ttls.size !== 0) read(state);
      const slot = cur.get(state);
      if (slot === undefined) return null;
      const contents = slot.contents;
      if (contents === null || contents instanceof Uint8Array) return contents;
      return trap(`\`state.value-get\` on state #${state}, which is not a value state`);
    },
    valueSet(state, value) {
      if (!(value instanceof Uint8Array)) trap("`state.value-set` given a value that is not bytes");
      const slot = cur.get(state);
      if (slot !== undefined && slot.contents !== null && !(slot.contents instanceof Uint8Array)) {
        trap(`\`state.value-set\` on state #${state}, which is not a value state`);
      }
      if (ttls.size !== 0 && ttls.has(state)) {
        setWhole(state, value.slice());
      } else if (slot === undefined) {
        const fresh = new Slot(value.slice());
        fresh.change = REPLACED;
        cur.set(state, fresh);
      } else {
        slot.contents = value.slice();
        slot.change = REPLACED;
      }
    },
    listGet(state) {
      const slot = slotOf(state, Array.isArray, "list-get");
      read(state);
      return slot === undefined || slot.contents === null ? [] : slot.contents.slice();
    },
    listAppend(state, item) {
      const bytes = bytesArg(item, "state.list-append");
      slotOf(state, Array.isArray, "list-append");
      const slot = slotOrAbsent(state);
      if (slot.contents === null) slot.contents = [bytes];
      else slot.contents.push(bytes);
      op(state, slot, WRITE_LIST_APPEND, bytes, null);
    },
    listSet(state, items) {
      if (!Array.isArray(items)) trap("`state.list-set` given no list");
      const copies = items.map((item) => bytesArg(item, "state.list-set"));
      slotOf(state, Array.isArray, "list-set");
      setWhole(state, copies.length === 0 ? null : copies);
    },
    mapGet(state, key) {
      const k = bytesArg(key, "state.map-get");
      const slot = slotOf(state, isMap, "map-get");
      if (slot === undefined || slot.contents === null) return null;
      const entry = slot.contents.get(mapKey(k));
      if (entry === undefined) return null;
      read(state, k);
      return entry[1];
    },
    mapPut(state, key, value) {
      const k = bytesArg(key, "state.map-put");
      const v = bytesArg(value, "state.map-put");
      slotOf(state, isMap, "map-put");
      const slot = slotOrAbsent(state);
      if (slot.contents === null) slot.contents = new Map();
      slot.contents.set(mapKey(k), [k, v]);
      op(state, slot, WRITE_MAP_PUT, k, v);
    },
    mapRemove(state, key) {
      const k = bytesArg(key, "state.map-remove");
      const slot = slotOf(state, isMap, "map-remove");
      if (slot === undefined || slot.contents === null || !slot.contents.delete(mapKey(k))) return;
      const ttl = ttls.has(state);
      if (slot.contents.size === 0) {
        slot.contents = null;
        if (!ttl) {
          slot.change = REPLACED;
          return;
        }
      }
      slot.op([WRITE_MAP_REMOVE, k, null, 0], ttl);
    },
    mapEntries(state) {
      const slot = slotOf(state, isMap, "map-entries");
      read(state);
      if (slot === undefined || slot.contents === null) return [];
      return sortedEntries(slot.contents);
    },
    clear(state) {
      setWhole(state, null);
    },
    clearAll() {
      for (const state of [...cur.keys()]) setWhole(state, null);
    },
  }),
  timers: Object.freeze({
    register(domain, at) {
      const code = timerArgs(domain, at, "timers.register");
      if (code === 0) {
        // Only event-time timers are ever in a batch: one ahead in it is the host's
        // already, and registering it again is a no-op.
        if (batch.scanWatermark < at) batch.scanToWatermark(at);
        const times = batch.pending.get(current);
        if (times !== undefined && times.has(at)) return;
        if (at < earliestRegistered) earliestRegistered = at;
      }
      timerOp(code, 0, at);
    },
    delete(domain, at) {
      const code = timerArgs(domain, at, "timers.delete");
      if (code === 0) {
        if (batch.scanWatermark < at) batch.scanToWatermark(at);
        const entry = batch.takePending(current, at);
        if (entry !== undefined) skipped.add(entry);
      }
      timerOp(code, 1, at);
    },
    currentWatermark: () => watermark,
    currentProcessingTime: () => batch.processingTime,
  }),
  output: Object.freeze({
    declare: () => trap("an output declared outside init"),
    emit(id, value, key, at) {
      if (!(value instanceof Uint8Array)) trap("`output.emit` given a value that is not bytes");
      const hasKey = key !== null && key !== undefined;
      if (hasKey && !(key instanceof Uint8Array)) trap("`output.emit` given a key that is not bytes");
      if (at !== null && at !== undefined && typeof at !== "number") trap("`output.emit` given a timestamp that is not a number");
      const out = emits;
      const n = value.length;
      const k = hasKey ? key.length : 0;
      out.room(25 + k + n);
      const view = out.view;
      let w = out.at;
      view.setUint32(w, id, true);
      putI64(view, w + 4, at === null || at === undefined ? timestamp : at);
      w += 12;
      if (hasKey) {
        view.setUint8(w, 1);
        view.setUint32(w + 1, k, true);
        out.buf.set(key, w + 5);
        w += 5 + k;
      } else {
        view.setUint8(w, 0);
        w += 1;
      }
      view.setUint32(w, n, true);
      out.buf.set(value, w + 4);
      out.at = w + 4 + n;
      emitCount += 1;
    },
  }),
  logging: Object.freeze({
    log(level, message) {
      const code = LEVELS[level];
      if (code === undefined) trap(`\`logging.log\` given the level ${String(level)}`);
      logs.room(5);
      logs.view.setUint32(logs.at, current, true);
      logs.view.setUint8(logs.at + 4, code);
      logs.at += 5;
      putBytes(logs, encodeText(String(message)));
      logCount += 1;
    },
  }),
  deadLetters: Object.freeze({
    reject: () => trap("a rejection inside a batch: the host runs the entries one at a time"),
  }),
});

// ---------------------------------------------------------------------------------------
// Running a batch

/**
 * Runs batch `buf` (a `Uint8Array`) through the UDF; returns the encoded effects.
 *
 * `hooks` connects it to the SDK (index.js): `setHost(host)` returns the host it
 * replaces, `runElement(input, timestamp, keyBytes, value)` and
 * `runTimer(timestamp, keyBytes, domain)` run one entry's call as the per-element path
 * would (without its error handling), and `encodeUtf8`.
 *
 * @throws what the UDF threw, or a {@link BatchFailed} (for a malformed buffer too)
 */
export function run(buf, hooks) {
  encodeText = hooks.encodeUtf8;
  batch = null;
  skipped = new Set();
  earliestRegistered = Infinity;
  failed = null;
  timerOps.at = 0;
  timerOpCount = 0;
  emits.at = 0;
  emitCount = 0;
  logs.at = 0;
  logCount = 0;
  let consumed;
  let saved = null;
  try {
    batch = new BatchBuffer(buf);
    saved = hooks.setHost(overlayHost);
    consumed = runEntries(hooks);
  } catch (e) {
    if (e instanceof RangeError && failed === null) throw new BatchFailed(`malformed batch buffer: ${e.message}`);
    throw e;
  } finally {
    if (saved !== null) hooks.setHost(saved);
  }
  if (failed !== null) throw new BatchFailed(failed);
  const effects = encode(consumed);
  batch = null;
  cur = null;
  return effects;
}

function runEntries(hooks) {
  const b = batch;
  let i = 0;
  // The watermark the entries so far said the batch is at.
  let seenWatermark = null;
  while (i < b.count || b.readEntry()) {
    if (skipped.size > 0 && skipped.has(i)) {
      i += 1;
      continue;
    }
    // The watermark moved on between entries (another shard's elements, which are not in
    // the batch): a timer registered here that this made due fires before this entry.
    // Stop, and let the host fire it and send the rest again.
    const before = b.watermark[i];
    if (seenWatermark !== null && before > seenWatermark && earliestRegistered <= before) return i;
    const key = b.entryKey[i];
    if (key >= b.keys.length) b.key(key);
    current = key;
    cur = b.slots[key];
    timestamp = b.timestamp[i];
    watermark = b.watermark[i];
    if (b.isTimer[i]) {
      const domain = b.input[i];
      if (domain === 0) b.takePending(key, timestamp);
      hooks.runTimer(timestamp, b.keys[key], DOMAINS[domain]);
    } else {
      hooks.runElement(b.input[i], timestamp, b.keys[key], b.value(i));
    }
    // A timer registered here that is already due must fire before anything after this
    // entry: stop, and let the host fire it and send the rest again.
    if (earliestRegistered <= b.after[i]) return i + 1;
    seenWatermark = b.after[i];
    i += 1;
  }
  return i;
}

/**
 * The effects buffer: every changed slot, whole (or, for a state with a time-to-live, as
 * its operations, each stamped), the timer requests, the records and the logs.
 */
function encode(consumed) {
  let skippedConsumed = 0;
  for (const i of skipped) if (i < consumed) skippedConsumed += 1;
  const slots = batch.slots;
  const out = new Out(64 + emits.at + timerOps.at + logs.at + 64 * slots.length);
  const u32 = (v) => {
    out.room(4);
    out.view.setUint32(out.at, v, true);
    out.at += 4;
  };
  const u8 = (v) => {
    out.room(1);
    out.buf[out.at++] = v;
  };
  const i64 = (v) => {
    out.room(8);
    putI64(out.view, out.at, v);
    out.at += 8;
  };
  u32(consumed);
  u32(skippedConsumed);
  const writesAt = out.at;
  u32(0);
  let nWrites = 0;
  for (let key = 0; key < slots.length; key++) {
    for (const [state, slot] of slots[key]) {
      const change = slot.change;
      if (change === CLEAN) continue;
      const ttl = ttls.has(state);
      if (change !== REPLACED && ttl) {
        for (const [code, a, b, at] of change) {
          u32(key);
          u32(state);
          u8(code | WRITE_AT);
          i64(at);
          if (a !== null) putBytes(out, a);
          if (b !== null) putBytes(out, b);
          nWrites += 1;
        }
        continue;
      }
      const contents = slot.contents;
      u32(key);
      u32(state);
      const code = contents === null ? WRITE_CLEAR : WRITE_SET;
      if (ttl) {
        u8(code | WRITE_AT);
        i64(slot.stamp);
      } else {
        u8(code);
      }
      nWrites += 1;
      if (contents === null) continue;
      if (isBytes(contents)) {
        u8(0);
        putBytes(out, contents);
      } else if (Array.isArray(contents)) {
        u8(1);
        u32(contents.length);
        for (const item of contents) putBytes(out, item);
      } else {
        u8(2);
        u32(contents.size);
        for (const [k, v] of sortedEntries(contents)) {
          putBytes(out, k);
          putBytes(out, v);
        }
      }
    }
  }
  out.view.setUint32(writesAt, nWrites, true);
  for (const [count, part] of [
    [timerOpCount, timerOps],
    [emitCount, emits],
    [logCount, logs],
  ]) {
    u32(count);
    out.room(part.at);
    out.buf.set(part.buf.subarray(0, part.at), out.at);
    out.at += part.at;
  }
  return out.buf.subarray(0, out.at);
}
