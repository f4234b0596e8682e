/**
 * Internal: the batched path (`weir:udf/batch` and `weir:udf/cached-batch`), many
 * elements and timers per component call, as the Rust SDK's `guest-sdk/src/batch.rs`
 * does it. UDFs never import this module.
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
 * On the cached path the bytes of the batch's keys' states stay in the guest from one
 * batch to the next, and the host sends a key's state only when that copy is not
 * current. Values stay bytes: a decoded value is never shared between calls, so `get()`
 * always returns a fresh object, exactly as with single calls.
 *
 * @module weir/batch
 */

/** Which export a batch came through. */
export const PLAIN = 0;
export const CACHED = 1;

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

const KEY_CACHED = 0;
const KEY_SENT = 1;
const KEY_SENT_ONCE = 2;

/** Past this many operations a list or map slot without a time-to-live is written whole. */
const MAX_OPS = 32;

const CLEAN = 0;
const REPLACED = 1;

const TWO_32 = 4294967296;
const I64_MIN = -(2 ** 63);
const I64_MAX = 2 ** 63;

/** The time-to-live of each declared state, by id: `{domain, refreshOnRead}` or absent. */
const ttls = new Map();

/** The cached path's copies: the epoch, and host key id -> Map(state id -> Slot). */
const cache = { epoch: -1, keys: new Map() };

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
// Reading and writing the buffers

class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.at = 0;
  }

  u8() {
    return this.view.getUint8(this.at++);
  }

  u32() {
    const v = this.view.getUint32(this.at, true);
    this.at += 4;
    return v;
  }

  /** An i64 as the nearest number (what the per-element bindings give). */
  i64() {
    const view = this.view;
    const v = view.getInt32(this.at + 4, true) * TWO_32 + view.getUint32(this.at, true);
    this.at += 8;
    return v;
  }

  /** `bytes` as a view into the buffer. */
  bytesView() {
    const n = this.u32();
    const start = this.at;
    const end = start + n;
    if (end > this.bytes.length) throw new RangeError("truncated");
    this.at = end;
    return this.bytes.subarray(start, end);
  }

  /** `bytes` copied out of the buffer (kept past the batch). */
  bytesCopy() {
    const n = this.u32();
    const start = this.at;
    const end = start + n;
    if (end > this.bytes.length) throw new RangeError("truncated");
    this.at = end;
    return this.bytes.slice(start, end);
  }
}

class Writer {
  constructor(capacity) {
    this.buf = new Uint8Array(capacity);
    this.view = new DataView(this.buf.buffer);
    this.at = 0;
  }

  reserve(n) {
    if (this.at + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.at + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.buf.subarray(0, this.at));
    this.buf = grown;
    this.view = new DataView(grown.buffer);
  }

  u8(v) {
    this.reserve(1);
    this.buf[this.at++] = v;
  }

  u32(v) {
    this.reserve(4);
    this.view.setUint32(this.at, v, true);
    this.at += 4;
  }

  /** A whole number of milliseconds as an i64, clamped as the bindings clamp it. */
  i64(v) {
    this.reserve(8);
    if (Number.isSafeInteger(v)) {
      this.view.setUint32(this.at, v >>> 0, true);
      this.view.setInt32(this.at + 4, Math.floor(v / TWO_32), true);
    } else {
      const big = v >= I64_MAX ? 0x7fffffffffffffffn : v <= I64_MIN ? -0x8000000000000000n : BigInt(v);
      this.view.setBigInt64(this.at, big, true);
    }
    this.at += 8;
  }

  bytes(b) {
    const n = b.length;
    this.reserve(4 + n);
    this.view.setUint32(this.at, n, true);
    this.buf.set(b, this.at + 4);
    this.at += 4 + n;
  }

  /** Appends what another writer holds. */
  append(other) {
    this.reserve(other.at);
    this.buf.set(other.buf.subarray(0, other.at), this.at);
    this.at += other.at;
  }

  finish() {
    return this.buf.subarray(0, this.at);
  }
}

function decodeSlots(r) {
  const n = r.u32();
  const slots = new Map();
  for (let i = 0; i < n; i++) {
    const state = r.u32();
    const kind = r.u8();
    let contents;
    if (kind === 0) {
      contents = r.bytesCopy();
    } else if (kind === 1) {
      const count = r.u32();
      contents = [];
      for (let j = 0; j < count; j++) contents.push(r.bytesCopy());
    } else if (kind === 2) {
      const count = r.u32();
      contents = new Map();
      for (let j = 0; j < count; j++) {
        const k = r.bytesCopy();
        contents.set(mapKey(k), [k, r.bytesCopy()]);
      }
    } else {
      throw new RangeError("unknown slot kind");
    }
    slots.set(state, new Slot(contents));
  }
  return slots;
}

/** The batch in `buf`; on the cached path the slots come out of the cache where current. */
function decode(buf, path) {
  const r = new Reader(buf);
  if (path === CACHED) {
    const epoch = r.view.getBigUint64(0, true);
    r.at = 8;
    if (cache.epoch !== epoch) {
      cache.epoch = epoch;
      cache.keys = new Map();
    }
  }
  const processingTime = r.i64();
  const nKeys = r.u32();
  const keys = [];
  const slots = [];
  const kept = [];
  for (let i = 0; i < nKeys; i++) {
    const id = path === CACHED ? r.u32() : 0;
    keys.push(r.bytesCopy());
    if (path === CACHED) {
      const tag = r.u8();
      const copy = cache.keys.get(id);
      cache.keys.delete(id);
      if (tag === KEY_CACHED) {
        if (copy === undefined) throw new RangeError("the host says a key is cached that the guest does not hold");
        slots.push(copy);
        kept.push([id, true]);
        continue;
      }
      if (tag !== KEY_SENT && tag !== KEY_SENT_ONCE) throw new RangeError("unknown key tag");
      kept.push([id, tag === KEY_SENT]);
    }
    slots.push(decodeSlots(r));
  }
  const nEntries = r.u32();
  const entries = [];
  for (let i = 0; i < nEntries; i++) {
    const tag = r.u8();
    let entry;
    if (tag === 0) {
      const key = r.u32();
      const input = r.u32();
      const timestamp = r.i64();
      const watermark = r.i64();
      const after = r.i64();
      entry = { timer: false, key, input, timestamp, watermark, after, value: r.bytesView(), domain: 0 };
    } else if (tag === 1) {
      const key = r.u32();
      const domain = r.u8();
      const timestamp = r.i64();
      const watermark = r.i64();
      entry = { timer: true, key, input: 0, timestamp, watermark, after: watermark, value: null, domain };
    } else {
      throw new RangeError("unknown entry tag");
    }
    if (entry.key >= nKeys) throw new RangeError("entry names a key outside the batch");
    entries.push(entry);
  }
  return { processingTime, keys, slots, kept, entries };
}

// ---------------------------------------------------------------------------------------
// The overlay: the host's imports during a batch

function isBytes(value) {
  return value instanceof Uint8Array;
}

/**
 * The guest-side view of the host's state for one batch, and the batch's effects. Its
 * `host` has the shape of the component's imports (`host.js`).
 */
class Overlay {
  constructor(processingTime, slots, pending, pendingPerKey) {
    this.processingTime = processingTime;
    this.slots = slots;
    /** The current key's slots. */
    this.cur = null;
    this.current = 0;
    this.timestamp = 0;
    this.watermark = I64_MIN;
    this.pending = pending;
    this.pendingPerKey = pendingPerKey;
    this.skipped = new Set();
    this.earliestRegistered = Infinity;
    this.timerOps = new Writer(1024);
    this.timerOpCount = 0;
    this.emits = new Writer(16384);
    this.emitCount = 0;
    this.logs = new Writer(64);
    this.logCount = 0;
    /** Why the batch must fail, even if the UDF caught it. */
    this.failed = null;
    const o = this;
    this.host = {
      state: {
        declare: () => o.trap("a declaration outside init"),
        declareWithTtl: () => o.trap("a declaration outside init"),
        valueGet: (s) => o.valueGet(s),
        valueSet: (s, v) => o.valueSet(s, v),
        listGet: (s) => o.listGet(s),
        listAppend: (s, item) => o.listAppend(s, item),
        listSet: (s, items) => o.listSet(s, items),
        mapGet: (s, k) => o.mapGet(s, k),
        mapPut: (s, k, v) => o.mapPut(s, k, v),
        mapRemove: (s, k) => o.mapRemove(s, k),
        mapEntries: (s) => o.mapEntries(s),
        clear: (s) => o.set(s, null),
        clearAll: () => {
          for (const s of [...o.cur.keys()]) o.set(s, null);
        },
      },
      timers: {
        register: (d, at) => o.register(d, at),
        delete: (d, at) => o.delete(d, at),
        currentWatermark: () => o.watermark,
        currentProcessingTime: () => o.processingTime,
      },
      output: {
        declare: () => o.trap("an output declared outside init"),
        emit: (id, value, key, timestamp) => o.emit(id, value, key, timestamp),
      },
      logging: { log: (level, message) => o.log(level, message) },
      deadLetters: { reject: () => o.trap("a rejection inside a batch: the host runs the entries one at a time") },
    };
  }

  /** What the host would trap on: the batch fails, whatever the UDF catches. */
  trap(why) {
    if (this.failed === null) this.failed = why;
    throw new BatchFailed(why);
  }

  callTime(ttl) {
    if (ttl.domain === EVENT_TIME) return this.timestamp > this.watermark ? this.timestamp : this.watermark;
    return this.processingTime;
  }

  slotOrAbsent(state) {
    let slot = this.cur.get(state);
    if (slot === undefined) {
      slot = new Slot(null);
      this.cur.set(state, slot);
    }
    return slot;
  }

  op(state, slot, code, a, b) {
    const ttl = ttls.get(state);
    if (ttl === undefined) slot.op([code, a, b, 0], false);
    else slot.op([code, a, b, this.callTime(ttl)], true);
  }

  /** A read of `state` (its entry `mapKeyBytes` only, if given), for a time-to-live refreshed on read. */
  read(state, mapKeyBytes) {
    const ttl = ttls.get(state);
    if (ttl === undefined || !ttl.refreshOnRead) return;
    const slot = this.cur.get(state);
    if (slot === undefined || slot.contents === null) return;
    const at = this.callTime(ttl);
    if (slot.change === REPLACED) slot.stamp = at;
    else if (mapKeyBytes !== undefined) slot.op([WRITE_MAP_READ, mapKeyBytes, null, at], true);
    else {
      slot.stamp = at;
      slot.op([WRITE_READ, null, null, at], true);
    }
  }

  /** Replaces `state` whole; for a list with a time-to-live, a clear and the items appended again. */
  set(state, contents) {
    const ttl = ttls.get(state);
    const slot = this.slotOrAbsent(state);
    if (ttl === undefined) {
      slot.contents = contents;
      slot.change = REPLACED;
      return;
    }
    const at = this.callTime(ttl);
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

  kind(state, check, call) {
    const slot = this.cur.get(state);
    if (slot !== undefined && slot.contents !== null && !check(slot.contents)) {
      this.trap(`\`state.${call}\` on state #${state}, which is of another kind`);
    }
    return slot;
  }

  bytes(value, call) {
    if (isBytes(value)) return value.slice();
    return this.trap(`\`${call}\` given ${typeof value}, not bytes`);
  }

  valueGet(state) {
    this.read(state);
    const slot = this.kind(state, isBytes, "value-get");
    return slot === undefined ? null : slot.contents;
  }

  valueSet(state, value) {
    const bytes = this.bytes(value, "state.value-set");
    this.kind(state, isBytes, "value-set");
    this.set(state, bytes);
  }

  listGet(state) {
    const slot = this.kind(state, Array.isArray, "list-get");
    this.read(state);
    return slot === undefined || slot.contents === null ? [] : slot.contents.slice();
  }

  listAppend(state, item) {
    const bytes = this.bytes(item, "state.list-append");
    this.kind(state, Array.isArray, "list-append");
    const slot = this.slotOrAbsent(state);
    if (slot.contents === null) slot.contents = [bytes];
    else slot.contents.push(bytes);
    this.op(state, slot, WRITE_LIST_APPEND, bytes, null);
  }

  listSet(state, items) {
    if (!Array.isArray(items)) this.trap("`state.list-set` given no list");
    const copies = items.map((item) => this.bytes(item, "state.list-set"));
    this.kind(state, Array.isArray, "list-set");
    this.set(state, copies.length === 0 ? null : copies);
  }

  mapGet(state, key) {
    const k = this.bytes(key, "state.map-get");
    const slot = this.kind(state, isMap, "map-get");
    if (slot === undefined || slot.contents === null) return null;
    const entry = slot.contents.get(mapKey(k));
    if (entry === undefined) return null;
    this.read(state, k);
    return entry[1];
  }

  mapPut(state, key, value) {
    const k = this.bytes(key, "state.map-put");
    const v = this.bytes(value, "state.map-put");
    this.kind(state, isMap, "map-put");
    const slot = this.slotOrAbsent(state);
    if (slot.contents === null) slot.contents = new Map();
    slot.contents.set(mapKey(k), [k, v]);
    this.op(state, slot, WRITE_MAP_PUT, k, v);
  }

  mapRemove(state, key) {
    const k = this.bytes(key, "state.map-remove");
    const slot = this.kind(state, isMap, "map-remove");
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
  }

  mapEntries(state) {
    const slot = this.kind(state, isMap, "map-entries");
    this.read(state);
    if (slot === undefined || slot.contents === null) return [];
    return sortedEntries(slot.contents);
  }

  timestampArg(at, call) {
    if (typeof at !== "number" || !Number.isInteger(at)) this.trap(`\`${call}\` given ${String(at)}, not a whole number`);
    return at >= I64_MAX ? I64_MAX : at <= I64_MIN ? I64_MIN : at;
  }

  domainCode(domain, call) {
    if (domain === EVENT_TIME) return 0;
    if (domain === "processing-time") return 1;
    return this.trap(`\`${call}\` given the domain ${String(domain)}`);
  }

  register(domain, at) {
    const code = this.domainCode(domain, "timers.register");
    const ts = this.timestampArg(at, "timers.register");
    const key = this.current;
    if (this.pendingPerKey[key] > 0 && this.pending.has(pendingKey(key, code, ts))) return;
    if (code === 0 && ts < this.earliestRegistered) this.earliestRegistered = ts;
    this.timerOp(key, code, 0, ts);
  }

  delete(domain, at) {
    const code = this.domainCode(domain, "timers.delete");
    const ts = this.timestampArg(at, "timers.delete");
    const key = this.current;
    if (this.pendingPerKey[key] > 0) {
      const name = pendingKey(key, code, ts);
      const entry = this.pending.get(name);
      if (entry !== undefined) {
        this.pending.delete(name);
        this.skipped.add(entry);
        this.pendingPerKey[key] -= 1;
      }
    }
    this.timerOp(key, code, 1, ts);
  }

  timerOp(key, code, op, at) {
    const w = this.timerOps;
    w.u32(key);
    w.u8(code);
    w.u8(op);
    w.i64(at);
    this.timerOpCount += 1;
  }

  emit(id, value, key, timestamp) {
    if (!isBytes(value)) this.trap("`output.emit` given a value that is not bytes");
    if (key !== null && !isBytes(key)) this.trap("`output.emit` given a key that is not bytes");
    const w = this.emits;
    w.u32(id);
    w.i64(timestamp === null || timestamp === undefined ? this.timestamp : this.timestampArg(timestamp, "output.emit"));
    if (key === null || key === undefined) {
      w.u8(0);
    } else {
      w.u8(1);
      w.bytes(key);
    }
    w.bytes(value);
    this.emitCount += 1;
  }

  log(level, message) {
    const code = LEVELS[level];
    if (code === undefined) this.trap(`\`logging.log\` given the level ${String(level)}`);
    const w = this.logs;
    w.u32(this.current);
    w.u8(code);
    w.bytes(utf8(String(message)));
    this.logCount += 1;
  }
}

function isMap(value) {
  return value instanceof Map;
}

function pendingKey(key, domain, ts) {
  return `${key}/${domain}/${ts}`;
}

/** A map's `[key, value]` pairs in key-byte order. */
function sortedEntries(map) {
  const names = [...map.keys()].sort();
  return names.map((name) => map.get(name));
}

let encodeText = null;

/** UTF-8 bytes of a log line (the SDK's encoder, set by index.js). */
function utf8(text) {
  return encodeText(text);
}

// ---------------------------------------------------------------------------------------
// Running a batch

/**
 * Runs batch `buf` (a `Uint8Array`) through the UDF; returns the encoded effects.
 *
 * `hooks` connects it to the SDK (index.js): `setHost(host)` returns the host it
 * replaces, `runElement(entry, keyBytes)` and `runTimer(entry, keyBytes, domain)` run one
 * entry's call as the per-element path would (without its error handling), and
 * `encodeUtf8`.
 *
 * @throws what the UDF threw, a {@link BatchFailed}, or a RangeError for a malformed buffer
 */
export function run(buf, path, hooks) {
  encodeText = hooks.encodeUtf8;
  let batch;
  try {
    batch = decode(buf, path);
  } catch (e) {
    throw new BatchFailed(`malformed batch buffer: ${e && e.message}`);
  }
  const { processingTime, keys, slots, kept, entries } = batch;
  const pending = new Map();
  const pendingPerKey = new Array(keys.length).fill(0);
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (e.timer) {
      pending.set(pendingKey(e.key, e.domain, e.timestamp), i);
      pendingPerKey[e.key] += 1;
    }
  }
  const o = new Overlay(processingTime, slots, pending, pendingPerKey);
  const saved = hooks.setHost(o.host);
  let consumed;
  try {
    consumed = runEntries(o, keys, entries, hooks);
  } finally {
    hooks.setHost(saved);
  }
  if (o.failed !== null) throw new BatchFailed(o.failed);
  const effects = encode(o, consumed, path);
  if (path === CACHED) {
    for (let i = 0; i < kept.length; i++) {
      const [id, keep] = kept[i];
      if (!keep) continue;
      const live = new Map();
      for (const [state, slot] of o.slots[i]) if (slot.contents !== null) live.set(state, slot);
      // A key without state is never said to be cached: nothing to keep.
      if (live.size > 0) cache.keys.set(id, live);
    }
  }
  return effects;
}

function runEntries(o, keys, entries, hooks) {
  const skipped = o.skipped;
  for (let i = 0; i < entries.length; i++) {
    if (skipped.size > 0 && skipped.has(i)) continue;
    const e = entries[i];
    o.current = e.key;
    o.cur = o.slots[e.key];
    o.timestamp = e.timestamp;
    o.watermark = e.watermark;
    if (e.timer) {
      const name = pendingKey(e.key, e.domain, e.timestamp);
      if (o.pending.delete(name)) o.pendingPerKey[e.key] -= 1;
      hooks.runTimer(e, keys[e.key], DOMAINS[e.domain]);
    } else {
      hooks.runElement(e, keys[e.key]);
    }
    // A timer registered here that is already due must fire before anything after this
    // entry: stop, and let the host fire it and send the rest again.
    if (o.earliestRegistered <= e.after) return i + 1;
  }
  return entries.length;
}

/** Writes one operation `[code, a, b, at]` of `state` of key `key`. */
function writeOp(w, key, state, op, ttl) {
  w.u32(key);
  w.u32(state);
  if (ttl) {
    w.u8(op[0] | WRITE_AT);
    w.i64(op[3]);
  } else {
    w.u8(op[0]);
  }
  if (op[1] !== null) w.bytes(op[1]);
  if (op[2] !== null) w.bytes(op[2]);
}

/** The effects buffer; a slot's change is cleared once written, so what the cache keeps is clean. */
function encode(o, consumed, path) {
  let skipped = 0;
  for (const i of o.skipped) if (i < consumed) skipped += 1;
  const w = new Writer(64 + o.emits.at + o.timerOps.at + o.logs.at + 64 * o.slots.length);
  w.u32(consumed);
  w.u32(skipped);
  const writesAt = w.at;
  w.u32(0);
  let nWrites = 0;
  for (let key = 0; key < o.slots.length; key++) {
    for (const [state, slot] of o.slots[key]) {
      const change = slot.change;
      if (change === CLEAN) continue;
      slot.change = CLEAN;
      const ttl = ttls.has(state);
      if (change !== REPLACED && (path === CACHED || ttl)) {
        for (const op of change) {
          writeOp(w, key, state, op, ttl);
          nWrites += 1;
        }
        continue;
      }
      const contents = slot.contents;
      w.u32(key);
      w.u32(state);
      const op = contents === null ? WRITE_CLEAR : WRITE_SET;
      if (ttl) {
        w.u8(op | WRITE_AT);
        w.i64(slot.stamp);
      } else {
        w.u8(op);
      }
      nWrites += 1;
      if (contents === null) continue;
      if (isBytes(contents)) {
        w.u8(0);
        w.bytes(contents);
      } else if (Array.isArray(contents)) {
        w.u8(1);
        w.u32(contents.length);
        for (const item of contents) w.bytes(item);
      } else {
        w.u8(2);
        w.u32(contents.size);
        for (const [k, v] of sortedEntries(contents)) {
          w.bytes(k);
          w.bytes(v);
        }
      }
    }
  }
  w.view.setUint32(writesAt, nWrites, true);
  w.u32(o.timerOpCount);
  w.append(o.timerOps);
  w.u32(o.emitCount);
  w.append(o.emits);
  w.u32(o.logCount);
  w.append(o.logs);
  return w.finish();
}
