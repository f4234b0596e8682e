/**
 * The Weir SDK for JavaScript: write a keyed process function (a UDF) as a plain class,
 * build it into a WebAssembly component with `componentize-qjs` (the QuickJS engine),
 * and run it on the Weir host like any Rust UDF.
 *
 * ```js
 * import * as weir from "./weir/index.js";
 *
 * export const processFunction = weir.processFunction(class {
 *   init(ctx) {                        // once per instance: config, states, outputs
 *     this.gap = ctx.configDuration("gap", "30s");
 *     this.count = ctx.valueState("count");
 *     this.out = ctx.mainOutput();
 *   }
 *   processElement(ctx, el) {          // once per record, scoped to its key
 *     const n = (this.count.get() ?? 0) + 1;
 *     this.count.set(n);
 *     ctx.registerEventTimer(el.timestamp + this.gap);
 *   }
 *   onTimer(ctx, timer) {              // once per firing timer, scoped to its key
 *     this.out.emit({ key: ctx.key, n: this.count.get() }, { key: ctx.key });
 *     this.count.clear();
 *   }
 * });
 * ```
 *
 * The model is the Rust SDK's (`guest-sdk/src`), in JavaScript's idiom:
 *
 * - The host may throw an instance away and `init` a fresh one at any time, so keep only
 *   config and handles on `this`; whatever must survive belongs in keyed state.
 * - State handles, timers and outputs act on the current key; none takes a key.
 *   Keyed state and timers cannot be used in `init`; outputs can be declared only there.
 * - Throwing fails the call: the host stops the run and prints the message and the
 *   JavaScript stack (`returned an error: ...`), and drops the records the call emitted.
 *   A stored state value the UDF cannot decode throws a {@link StateDecodeError}, which the
 *   host turns into a dead letter for that record instead.
 * - Timestamps are numbers of milliseconds since the Unix epoch (exact up to 2^53).
 * - State values are JSON by default (another codec can be given per state); records are
 *   emitted as `JSON.stringify` text, which is `serde_json`'s compact form. When the shape
 *   of a state's values changes, `.schema(version).migrateFrom(old, convert)` on a value,
 *   list or map state converts the old ones as they are read (and writes them back).
 * - A state can have a time-to-live, like Flink's `StateTtlConfig` but in event time or
 *   processing time: `ctx.valueState("last", weir.codecs.json, { ttl: weir.StateTtl.eventTime("1h") })`.
 *   The host drops each entry (a value, a list item, a map entry) that long after it was
 *   last written (or read, with `refreshOnRead`); reads and writes are the same as without.
 * - Unit tests run the same code under plain Node.js, without wasm: `new TestHost(processFunction)`
 *   from `testing.js` is an in-memory host (`node --test`).
 *
 * How the contract (`wit/weir.wit`, world `keyed-process`) looks from JavaScript with
 * componentize-qjs, which is what this module hides: each WIT interface is an ES module
 * `weir:udf/<name>@0.1.2` with camelCase functions (`component.js` imports them, and
 * the SDK reaches them through `host.js`, which lets `testing.js` stand in for them under
 * Node.js); `list<u8>` is a `Uint8Array`; `s64`, `u64` and `u32` are numbers; enums are
 * their case names (`"event-time"`, `"on-read-and-write"`); a record is an object with
 * camelCase fields (`{millis, domain, refresh}`); `option<T>` is `T` or `null`; a `result<_, error>` export
 * returns normally or throws the `error` record `{message, kind}`; a `result` import
 * returns the ok value or throws. Arguments of the wrong type trap (with no message), so
 * the SDK checks them first.
 *
 * The sandbox has no clock: `Date.now()`, `new Date()` and `performance.now()` throw an
 * error saying so (use `ctx.currentProcessingTime()` or the element's timestamp). There
 * is no `console` in QuickJS; the SDK provides one that writes to the host's log.
 *
 * @module weir
 */

// The host's interfaces: the component's imports (`weir:udf/state@0.1.2`, ...), or the
// in-memory host of testing.js under Node.js. host.js decides; these bindings are live.
import {
  DEFINITION,
  componentHost,
  currentHost,
  deadLetters as deadLettersHost,
  internals,
  logging as loggingHost,
  output as outputHost,
  setHost,
  state as stateHost,
  timers as timersHost,
} from "./host.js";
import * as batchPath from "./batch.js";

import {
  codecs,
  decodeUtf8,
  decodeUtf8Lossy,
  encodeUtf8,
  parseJsonKeepingRaw,
  rawJson,
  rawText,
  toJson,
  tryDecodeUtf8,
} from "./text.js";
import { formatDuration, parseDuration, rustDebugString } from "./duration.js";
import { formatMillis, formatSeconds, parseMillis } from "./time.js";

export {
  codecs,
  parseJsonKeepingRaw,
  decodeUtf8,
  decodeUtf8Lossy,
  encodeUtf8,
  rawJson,
  rawText,
  toJson,
  formatDuration,
  parseDuration,
  formatMillis,
  formatSeconds,
  parseMillis,
};

/** The event-time domain: timers that fire when the watermark reaches them. */
export const EVENT_TIME = "event-time";
/** The processing-time domain: timers that fire when the host's wall clock reaches them. */
export const PROCESSING_TIME = "processing-time";
/** The watermark before the first record (`i64::MIN`, as a number). */
export const MIN_TIMESTAMP = -(2 ** 63);
/** The watermark once every input has ended (`i64::MAX`, which rounds to 2^63 as a number). */
export const MAX_TIMESTAMP = 2 ** 63;
/** The log levels, lowest first. */
export const LOG_LEVELS = Object.freeze(["trace", "debug", "info", "warn", "error"]);

/**
 * Thrown by state reads when a stored value cannot be decoded: it was written by another
 * version of the UDF, as another type. The host sends the record to the dead-letter
 * output with the message and goes on, instead of stopping the run.
 */
export class StateDecodeError extends Error {
  constructor(message) {
    super(message);
    this.name = "StateDecodeError";
  }
}

/**
 * Throw it from `processElement` or `onTimer` to reject the record or timer being
 * processed: `throw new weir.Reject(\`cost ${JSON.stringify(cost)} is not a number\`)`.
 * The host takes back everything the call did (emitted records, state writes, timer
 * changes), writes the record to the dead-letter output with the reason, and goes on,
 * whatever the pipeline's `on_error` policy. It is not a failure: a new version's
 * probation does not count it. The JavaScript counterpart of Rust's `weir::reject` and
 * Python's `raise weir.Reject(...)`.
 */
export class Reject extends Error {
  /** @param {string} reason the text the dead letter carries */
  constructor(reason) {
    super(String(reason));
    this.name = "Reject";
    /** The reason given. */
    this.reason = String(reason);
  }
}

/** The {@link Reject} that is `e` or one of its causes, or `null`. */
function rejectionIn(e) {
  for (let depth = 0; e instanceof Error && depth < 16; depth++, e = e.cause) {
    if (e instanceof Reject) return e;
  }
  return null;
}

/**
 * Ends a keyed call that threw `e`: a rejection goes to the host's `dead-letters.reject`
 * import and the call returns; anything else is the call's error.
 */
function rejectOrThrow(e, toThrown) {
  const rejection = rejectionIn(e);
  if (rejection === null) throw toThrown(e);
  deadLettersHost.reject(rejection.reason);
}

// ---------------------------------------------------------------------------------------
// Where a call is

const IDLE = 0;
const INIT = 1;
const CALL = 2;
/** IDLE at module load and between calls, INIT in `init`, CALL in the two others. */
let phase = IDLE;
/** The Context of the call in progress (CALL only). */
let current = null;

function requireCall() {
  if (phase !== CALL) {
    throw new Error(
      `keyed state and timers can only be used while processing an element or a timer, not ${phase === INIT ? "in init" : "outside a call"}`,
    );
  }
}

function describeValue(value) {
  if (typeof value === "string") return JSON.stringify(value.length > 50 ? value.slice(0, 50) + "..." : value);
  if (typeof value === "bigint") return `${value}n`;
  if (value === null || typeof value !== "object") return String(value);
  return Array.isArray(value) ? "an array" : `an object (${Object.prototype.toString.call(value)})`;
}

/** A timestamp argument, checked (the host traps on anything but an integer). */
function millis(what, value) {
  if (typeof value === "number" && Number.isInteger(value)) {
    return value > MAX_TIMESTAMP ? MAX_TIMESTAMP : value < MIN_TIMESTAMP ? MIN_TIMESTAMP : value;
  }
  if (typeof value === "bigint") return Number(value);
  throw new TypeError(`${what}: expected a whole number of milliseconds, got ${describeValue(value)}`);
}

function domainOf(what, domain) {
  if (domain === EVENT_TIME || domain === PROCESSING_TIME) return domain;
  throw new TypeError(`${what}: the domain is "${EVENT_TIME}" or "${PROCESSING_TIME}", not ${describeValue(domain)}`);
}

/** Key bytes from a string (UTF-8), bytes, or a number (its text, as the host keys them). */
function keyBytesOf(key) {
  if (key instanceof Uint8Array) return key;
  if (typeof key === "string") {
    if (current !== null && key === current._key) return current.keyBytes;
    return encodeUtf8(key);
  }
  if (typeof key === "number" || typeof key === "bigint") return encodeUtf8(String(key));
  throw new TypeError(`a key is a string, a number or a Uint8Array, not ${describeValue(key)}`);
}

// ---------------------------------------------------------------------------------------
// Logging

function log(level, message) {
  if (!LOG_LEVELS.includes(level)) {
    throw new TypeError(`log level must be one of ${LOG_LEVELS.join(", ")}, not ${describeValue(level)}`);
  }
  loggingHost.log(level, typeof message === "string" ? message : String(message));
}

/** Logging methods shared by InitContext and Context. */
const logMethods = {
  /**
   * Logs `message` at `level` ("trace", "debug", "info", "warn" or "error"). The host
   * writes it to its log with the UDF's name and the current key; the default filter
   * shows info and above (`WEIR_LOG=info,weir::udf=debug` shows debug).
   */
  log(level, message) {
    log(level, message);
  },
  logTrace(message) {
    log("trace", message);
  },
  logDebug(message) {
    log("debug", message);
  },
  logInfo(message) {
    log("info", message);
  },
  logWarn(message) {
    log("warn", message);
  },
  logError(message) {
    log("error", message);
  },
};

/** Logs from anywhere (helpers without a context): `weir.log("info", "...")`. */
export { log };

// ---------------------------------------------------------------------------------------
// State

function checkCodec(codec, what) {
  if (codec === undefined) return codecs.json;
  if (codec && typeof codec.encode === "function" && typeof codec.decode === "function") return codec;
  throw new TypeError(`${what}: a codec has encode(value) and decode(bytes) functions (see weir.codecs)`);
}

function encodeWith(name, codec, value) {
  if (value === undefined) {
    throw new TypeError(`state \`${name}\`: cannot store undefined (clear() removes a value)`);
  }
  try {
    return codec.encode(value);
  } catch (e) {
    throw new Error(`state \`${name}\`: cannot encode value: ${e && e.message !== undefined ? e.message : e}`);
  }
}

function decodeWith(name, codec, bytes) {
  try {
    return codec.decode(bytes);
  } catch (e) {
    throw new StateDecodeError(
      `state \`${name}\`: cannot decode stored value as ${codec.name ?? "the state's codec"} (${e && e.message !== undefined ? e.message : e}); was it written with another type?`,
    );
  }
}

/** The first bytes of a value stored under a schema version (then the version's byte). */
const SCHEMA_TAG_0 = 0xfe;
const SCHEMA_TAG_1 = 0xed;

/** Whether stored `bytes` begin with the schema tag (then the version's byte, then the body). */
function isTagged(bytes) {
  return bytes.length >= 3 && bytes[0] === SCHEMA_TAG_0 && bytes[1] === SCHEMA_TAG_1;
}

/** The schema version `bytes` were stored under: the byte after the tag, 0 if untagged. */
function storedVersion(bytes) {
  return isTagged(bytes) ? bytes[2] : 0;
}

/**
 * How the values of one state are stored and read back: a value state's value, each item
 * of a list state, each value of a map state (map keys are never tagged). Under schema
 * version 1 to 255 a value is stored behind the tag `fe ed VERSION`, as in the Rust and
 * Python SDKs. Under version 0 (the default) too, unless the codec says its bytes never
 * begin with the tag (`mayBeginWithTag: false`, as JSON and text say): a codec that may
 * (`codecs.bytes`, and one that does not say) has every value tagged, so that no value is
 * mistaken for a tagged one. (The SDK's first format stored schema-0 values untagged
 * whatever the codec, and read a `bytes` value that began with the tag as tagged.) A
 * stored value whose version is another one is read with the migration from that
 * version: decoded with its codec, then converted. The state classes write a converted
 * value back.
 */
class Schema {
  constructor(name, codec) {
    this.name = name;
    this.codec = codec;
    /** The version values are written under (0 when none was declared). */
    this.version = 0;
    /** version -> {convert, codec} */
    this.migrations = new Map();
    /** Whether schema-0 values are tagged too: the codec's bytes may begin with the tag. */
    this.tagAlways = codec.mayBeginWithTag !== false;
  }

  /** Writes values under `version` from now on (1 to 255). */
  setVersion(version) {
    if (!Number.isInteger(version) || version < 1 || version > 255) {
      throw new RangeError(`state \`${this.name}\`: a schema version is 1 to 255, not ${describeValue(version)}`);
    }
    this.version = version;
  }

  /** Reads values stored under `version` (0 to 255) with `codec` (default: the state's), then `convert`. */
  addMigration(version, convert, codec) {
    if (!Number.isInteger(version) || version < 0 || version > 255) {
      throw new RangeError(`state \`${this.name}\`: migrateFrom(version, ...): a schema version is 0 to 255, not ${describeValue(version)}`);
    }
    if (typeof convert !== "function") throw new TypeError("migrateFrom(version, convert): convert is a function");
    this.migrations.set(version, { convert, codec: checkCodec(codec ?? this.codec, "migrateFrom") });
  }

  /** Whether `bytes` are stored under the current version (else {@link decode} converts them). */
  isCurrent(bytes) {
    return storedVersion(bytes) === this.version;
  }

  /**
   * The value stored as `bytes`: decoded if stored under the current version, else
   * decoded with the migration from its version and converted.
   * @throws {StateDecodeError} if its version has no migration, or the bytes do not decode
   */
  decode(bytes) {
    const tagged = isTagged(bytes);
    const version = tagged ? bytes[2] : 0;
    const body = tagged ? bytes.subarray(3) : bytes;
    if (version === this.version) return decodeWith(this.name, this.codec, body);
    const migration = this.migrations.get(version);
    if (migration === undefined) {
      throw new StateDecodeError(
        `state \`${this.name}\`: the stored value has schema version ${version}, this version of the UDF reads version ${this.version} and has no migration from ${version}`,
      );
    }
    return migration.convert(decodeWith(this.name, migration.codec, body));
  }

  /**
   * The bytes to store for `value`: encoded, behind the tag unless the version is 0 and
   * the codec's bytes never begin with the tag.
   */
  encode(value) {
    const bytes = encodeWith(this.name, this.codec, value);
    if (this.version === 0 && !this.tagAlways) return bytes;
    const tagged = new Uint8Array(bytes.length + 3);
    tagged[0] = SCHEMA_TAG_0;
    tagged[1] = SCHEMA_TAG_1;
    tagged[2] = this.version;
    tagged.set(bytes, 3);
    return tagged;
  }
}

// ---------------------------------------------------------------------------------------
// State time-to-live

/** Only the static methods of StateTtl make one. */
const STATE_TTL = Symbol("weir.StateTtl");

/**
 * A state's time-to-live, like Flink's `StateTtlConfig`: given to `ctx.valueState`,
 * `ctx.listState` or `ctx.mapState` as `{ttl}`, it has the host drop every entry of the
 * state (a value, each list item, each map entry) once `millis` have passed on its clock
 * since the entry was last written, or, with `refreshOnRead`, last written or read. Reads
 * never return an expired entry, and no UDF call is made for one: the host removes them
 * between calls (a state left empty is gone as if cleared).
 *
 * - {@link StateTtl.eventTime}: the time of a write (or read) is the timestamp of the
 *   element or timer being processed, or the watermark if that is later; the entry
 *   expires once the watermark reaches that time + `millis`.
 * - {@link StateTtl.processingTime}: the time is the host's processing time
 *   (`ctx.currentProcessingTime()`), and the entry expires once that clock reaches it +
 *   `millis`. Flink's TTL is this one only.
 *
 * What a write refreshes: a value's `set`, a list's appended item (`append`) or all its
 * items (`set`), a map's `put` entry. With `refreshOnRead` also what a read returns: a
 * value's `get`, all items of a list's `get`, the entry of a map's `get` or `has`, every
 * entry of `entries()`, `keys()` and `values()`.
 */
export class StateTtl {
  /** @hideconstructor */
  constructor(token, millis, domain, refreshOnRead) {
    if (token !== STATE_TTL) {
      throw new TypeError('a StateTtl is made by StateTtl.eventTime(after) or StateTtl.processingTime(after)');
    }
    /** How long an entry lives, in whole milliseconds (more than 0). */
    this.millis = millis;
    /** Which clock it follows: `weir.EVENT_TIME` or `weir.PROCESSING_TIME`. */
    this.domain = domain;
    /** Whether reads start it again too (Flink's `OnReadAndWrite`), not only writes. */
    this.refreshOnRead = refreshOnRead;
    Object.freeze(this);
  }

  /**
   * A time-to-live in event time: an entry lives until the watermark reaches the time it
   * was last written (the element's or timer's timestamp, or the watermark if later) +
   * `after`.
   * @param {string|number} after a duration (`"10m"`, `"1h 30m"`, see {@link parseDuration})
   *   or whole milliseconds; more than 0
   * @param {{refreshOnRead?: boolean}} [options] `refreshOnRead`: reads start it again too
   * @returns {StateTtl}
   * @throws {Error} if `after` is not a duration, or not more than 0 ms
   */
  static eventTime(after, options) {
    return makeStateTtl("StateTtl.eventTime", EVENT_TIME, after, options);
  }

  /**
   * A time-to-live in processing time: an entry lives until the host's processing time
   * reaches the processing time it was last written at + `after`.
   * @param {string|number} after a duration (`"10m"`) or whole milliseconds; more than 0
   * @param {{refreshOnRead?: boolean}} [options] `refreshOnRead`: reads start it again too
   * @returns {StateTtl}
   * @throws {Error} if `after` is not a duration, or not more than 0 ms
   */
  static processingTime(after, options) {
    return makeStateTtl("StateTtl.processingTime", PROCESSING_TIME, after, options);
  }

  /** `StateTtl.eventTime("10m", {refreshOnRead: true})`, as it could be written. */
  toString() {
    const call = this.domain === EVENT_TIME ? "StateTtl.eventTime" : "StateTtl.processingTime";
    return `${call}(${JSON.stringify(formatDuration(this.millis))}${this.refreshOnRead ? ", { refreshOnRead: true }" : ""})`;
  }
}

function makeStateTtl(what, domain, after, options) {
  let ms;
  if (typeof after === "string") {
    try {
      ms = parseDuration(after);
    } catch (e) {
      throw new Error(`${what}(after): ${e.message}`);
    }
  } else if (typeof after === "number" && Number.isInteger(after)) {
    ms = after;
  } else {
    throw new TypeError(
      `${what}(after): a time-to-live is a duration such as "10m" or "1h 30m", or whole milliseconds, not ${describeValue(after)}`,
    );
  }
  if (ms <= 0) throw new RangeError(`${what}(after): a time-to-live must be longer than 0 ms, got ${describeValue(after)}`);
  if (!Number.isSafeInteger(ms)) {
    throw new RangeError(`${what}(after): a time-to-live of ${describeValue(after)} is too long (at most 2^53 - 1 ms)`);
  }
  let refreshOnRead = false;
  if (options !== undefined) {
    if (options === null || typeof options !== "object") {
      throw new TypeError(`${what}(after, options): options is an object {refreshOnRead}, not ${describeValue(options)}`);
    }
    for (const name of Object.keys(options)) {
      if (name !== "refreshOnRead") throw new TypeError(`${what}(after, options): unknown option \`${name}\` (options: refreshOnRead)`);
    }
    if (options.refreshOnRead !== undefined) {
      if (typeof options.refreshOnRead !== "boolean") {
        throw new TypeError(`${what}(after, options): refreshOnRead is true or false, not ${describeValue(options.refreshOnRead)}`);
      }
      refreshOnRead = options.refreshOnRead;
    }
  }
  return new StateTtl(STATE_TTL, ms, domain, refreshOnRead);
}

/** The contract's `state-ttl` record for `ttl`. */
function ttlRecord(ttl) {
  return { millis: ttl.millis, domain: ttl.domain, refresh: ttl.refreshOnRead ? "on-read-and-write" : "on-write" };
}

/**
 * The options of a state declaration (`{ttl}`, and a map's `key` and `value` codecs):
 * checked, with the time-to-live (`undefined` if none).
 */
function stateOptions(name, options, allowed) {
  if (options === undefined) return { ttl: undefined };
  if (options === null || typeof options !== "object") {
    throw new TypeError(`state \`${name}\`: the options are an object {${allowed.join(", ")}}, not ${describeValue(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!allowed.includes(key)) {
      throw new TypeError(`state \`${name}\`: unknown option \`${key}\` (options: ${allowed.join(", ")})`);
    }
  }
  const ttl = options.ttl;
  if (ttl === undefined || ttl === null) return { ttl: undefined };
  if (!(ttl instanceof StateTtl)) {
    throw new TypeError(
      `state \`${name}\`: ttl is a weir.StateTtl (StateTtl.eventTime("10m"), StateTtl.processingTime("1h")), not ${describeValue(ttl)}`,
    );
  }
  return { ttl };
}

/**
 * What the three kinds of state share: the handle, the name, the schema of what they
 * store (a value state's value, a list's items, a map's values) and `clear`.
 */
class State {
  /** @hideconstructor */
  constructor(id, name, codec) {
    this._id = id;
    this._name = name;
    this._schema = new Schema(name, codec);
  }

  /** The name the state was declared with. */
  get name() {
    return this._name;
  }

  /**
   * Writes under schema `version` (1 to 255): each value (a list's item, a map's value)
   * behind the tag `fe ed VERSION`, as the Rust SDK does; say with {@link migrateFrom}
   * how to read what the earlier versions wrote. Without it, values are written untagged
   * (version 0). Map keys are never tagged.
   * @param {number} version
   * @returns {this}
   * @throws {RangeError} if `version` is not a whole number from 1 to 255
   */
  schema(version) {
    this._schema.setVersion(version);
    return this;
  }

  /**
   * Reads what was written under schema `version` (0: before the state had a schema)
   * and converts it with `convert`; what is converted is written back under the current
   * schema when first read (each class says when), so each key migrates once.
   * @param {number} version
   * @param {(old: *) => *} convert
   * @param {import("./text.js").Codec} [codec] how the old values were encoded (default: the state's)
   * @returns {this}
   * @throws {RangeError} if `version` is not a whole number from 0 to 255
   */
  migrateFrom(version, convert, codec) {
    this._schema.addMigration(version, convert, codec);
    return this;
  }

  /** Removes the current key's contents of this state. */
  clear() {
    requireCall();
    stateHost.clear(this._id);
  }
}

/**
 * One value per key (Flink's `ValueState`). Declared in `init` with
 * `ctx.valueState(name, codec?, {ttl}?)`.
 */
export class ValueState extends State {
  /**
   * The current key's value, or `undefined` if it has none. A value stored under another
   * schema version is converted with its migration and written back.
   * @throws {StateDecodeError} if the stored value cannot be decoded, or its version has no migration
   */
  get() {
    requireCall();
    const bytes = stateHost.valueGet(this._id);
    if (bytes === null || bytes === undefined) return undefined;
    const value = this._schema.decode(bytes);
    if (!this._schema.isCurrent(bytes)) this.set(value);
    return value;
  }

  /** Replaces the current key's value, under the current schema (`undefined` is refused: use {@link clear}). */
  set(value) {
    requireCall();
    stateHost.valueSet(this._id, this._schema.encode(value));
  }
}

/**
 * An ordered list of values per key (Flink's `ListState`): `ctx.listState(name, codec?, {ttl}?)`.
 * Each item is stored as a value state's value is, so a list can have a schema version
 * and migrations too: they apply to each item.
 */
export class ListState extends State {
  /**
   * All items of the current key, oldest first (an empty array if none). Items stored
   * under another schema version are converted with their migrations, and then the
   * whole list is written back under the current schema.
   * @throws {StateDecodeError} if an item cannot be decoded, or its version has no migration
   */
  get() {
    requireCall();
    const schema = this._schema;
    let converted = false;
    const items = stateHost.listGet(this._id).map((bytes) => {
      if (!converted && !schema.isCurrent(bytes)) converted = true;
      return schema.decode(bytes);
    });
    if (converted) this.set(items);
    return items;
  }

  /** Appends one item, under the current schema, without reading the others. */
  append(item) {
    requireCall();
    stateHost.listAppend(this._id, this._schema.encode(item));
  }

  /** Replaces all items, under the current schema; an empty array clears the list. */
  set(items) {
    requireCall();
    if (!Array.isArray(items)) throw new TypeError(`state \`${this._name}\`: set(items) takes an array`);
    stateHost.listSet(
      this._id,
      items.map((item) => this._schema.encode(item)),
    );
  }
}

/**
 * A map per key (Flink's `MapState`): `ctx.mapState(name, {key: codec, value: codec, ttl})`.
 * Keys are stored encoded (JSON by default), and {@link entries} comes in the order of
 * those bytes: strings in code-point order, but numbers as text (`10` before `9`).
 * Each value is stored as a value state's value is, so the values can have a schema
 * version and migrations; the keys never carry one (another key type is another state).
 */
export class MapState extends State {
  /** @hideconstructor */
  constructor(id, name, keyCodec, valueCodec) {
    super(id, name, valueCodec);
    this._keyCodec = keyCodec;
  }

  _key(key) {
    return encodeWith(this._name, this._keyCodec, key);
  }

  /**
   * The value under `key`, or `undefined`. A value stored under another schema version
   * is converted with its migration and written back.
   * @throws {StateDecodeError} if the value cannot be decoded, or its version has no migration
   */
  get(key) {
    requireCall();
    const keyBytes = this._key(key);
    const bytes = stateHost.mapGet(this._id, keyBytes);
    if (bytes === null || bytes === undefined) return undefined;
    const value = this._schema.decode(bytes);
    if (!this._schema.isCurrent(bytes)) stateHost.mapPut(this._id, keyBytes, this._schema.encode(value));
    return value;
  }

  /** Whether `key` has a value (without decoding it: nothing is converted). */
  has(key) {
    requireCall();
    const bytes = stateHost.mapGet(this._id, this._key(key));
    return bytes !== null && bytes !== undefined;
  }

  /** Inserts or replaces the value under `key`, under the current schema. */
  put(key, value) {
    requireCall();
    stateHost.mapPut(this._id, this._key(key), this._schema.encode(value));
  }

  /** Removes `key` (a no-op if it is missing). */
  remove(key) {
    requireCall();
    stateHost.mapRemove(this._id, this._key(key));
  }

  /**
   * All `[key, value]` pairs, ordered by the encoded key bytes. Values stored under
   * another schema version are converted with their migrations, and each converted one
   * is written back once every entry has been read (a failed read writes nothing).
   * @throws {StateDecodeError} if a key or value cannot be decoded, or a value's version has no migration
   */
  entries() {
    requireCall();
    const schema = this._schema;
    // Every entry is read before any is written back, so a failed read writes nothing.
    const read = stateHost.mapEntries(this._id).map(([k, v]) => {
      const value = schema.decode(v);
      return { k, key: decodeWith(this._name, this._keyCodec, k), value, converted: !schema.isCurrent(v) };
    });
    for (const { k, value, converted } of read) {
      if (converted) stateHost.mapPut(this._id, k, schema.encode(value));
    }
    return read.map(({ key, value }) => [key, value]);
  }

  /** All keys, in the order of {@link entries} (without decoding the values: nothing is converted). */
  keys() {
    requireCall();
    return stateHost.mapEntries(this._id).map(([k]) => decodeWith(this._name, this._keyCodec, k));
  }

  /** All values, in the order of {@link entries} (converted, and written back, as there). */
  values() {
    return this.entries().map((entry) => entry[1]);
  }
}

// ---------------------------------------------------------------------------------------
// Outputs

/**
 * A declared output: the main output (`ctx.mainOutput()`) or a side output
 * (`ctx.output(name)`), which the pipeline file routes to a sink.
 */
export class Output {
  /** @hideconstructor */
  constructor(id, name) {
    this._id = id;
    this._name = name;
  }

  get name() {
    return this._name;
  }

  /**
   * Emits one record. A `Uint8Array` is emitted as is (it should hold one JSON document);
   * anything else is written with `JSON.stringify` (raw JSON from {@link rawJson} is
   * kept verbatim).
   *
   * @param {*} value
   * @param {{key?: string|Uint8Array|number, timestamp?: number}} [options] `key` is the
   *   record's key (the upsert key for upsert sinks; `ctx.key` for the current one);
   *   `timestamp` defaults to the element's or timer's
   */
  emit(value, options) {
    if (phase !== CALL) {
      throw new Error(`output \`${this._name}\`: records can only be emitted while processing an element or a timer`);
    }
    let bytes;
    if (value instanceof Uint8Array) {
      bytes = value;
    } else {
      try {
        bytes = encodeUtf8(toJson(value));
      } catch (e) {
        throw new TypeError(`output \`${this._name}\`: cannot serialize record: ${e && e.message !== undefined ? e.message : e}`);
      }
    }
    let key = null;
    let timestamp = null;
    if (options !== undefined && options !== null) {
      if (options.key !== undefined && options.key !== null) key = keyBytesOf(options.key);
      if (options.timestamp !== undefined && options.timestamp !== null) {
        timestamp = millis(`output \`${this._name}\`: timestamp`, options.timestamp);
      }
    }
    outputHost.emit(this._id, bytes, key, timestamp);
  }
}

// ---------------------------------------------------------------------------------------
// Config helpers

function configError(key, reason) {
  return new Error(`invalid config \`${key}\`: ${reason}`);
}

/** What serde calls a JSON value in "invalid type: ..., expected ..." messages. */
function serdeUnexpected(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return `string ${rustDebugString(text)}`;
  }
  if (typeof value === "string") return `string ${rustDebugString(value)}`;
  if (typeof value === "boolean") return `boolean \`${value}\``;
  if (value === null) return "null";
  if (Array.isArray(value)) return "sequence";
  if (typeof value === "object") return "map";
  if (/^-?[0-9]+$/.test(text.trim())) return `integer \`${text.trim()}\``;
  return `floating point \`${value}\``;
}

function formatChoices(choices) {
  const quoted = choices.map((c) => `\`${c}\``);
  if (quoted.length === 1) return `expected ${quoted[0]}`;
  if (quoted.length === 2) return `expected ${quoted[0]} or ${quoted[1]}`;
  return `expected one of ${quoted.join(", ")}`;
}

/**
 * Passed to `init`: the config, the input names, and where states and outputs are
 * declared.
 *
 * Config values arrive as text (`[udf.config]` in the pipeline file, with the command
 * line's `--config KEY=VALUE` applied). The typed getters read them as the Rust SDK's
 * `ctx.config::<T>()` does and fail with the same kind of message naming the key
 * (`` invalid config `gap`: invalid duration "soon": ... ``). A getter without a
 * fallback fails if the key is missing (`` invalid config: missing field `gap` ``).
 */
export class InitContext {
  /** @hideconstructor */
  constructor(config, inputs) {
    this._config = config;
    this._inputs = Object.freeze(inputs.slice());
  }

  /** The names of the connected inputs; `element.inputIndex` indexes this. */
  get inputs() {
    return this._inputs;
  }

  /** All config entries as `[key, text]` pairs, in the host's order. */
  configEntries() {
    return this._config.map(([k, v]) => [k, v]);
  }

  /** The raw text of config entry `key` (the last one if repeated), or `undefined`. */
  configValue(key) {
    for (let i = this._config.length - 1; i >= 0; i--) {
      if (this._config[i][0] === key) return this._config[i][1];
    }
    return undefined;
  }

  _get(key, fallback, parse) {
    const text = this.configValue(key);
    if (text === undefined) {
      if (fallback === undefined) throw new Error(`invalid config: missing field \`${key}\``);
      return fallback;
    }
    return parse(text);
  }

  /** The text as written (`007` stays `"007"`). */
  configText(key, fallback) {
    return this._get(key, fallback, (text) => text);
  }

  /** A whole number (a safe integer): `17`, `-3`. */
  configInt(key, fallback) {
    return this._get(key, fallback, (text) => {
      const trimmed = text.trim();
      if (!/^-?(0|[1-9][0-9]*)$/.test(trimmed)) {
        throw configError(key, `invalid type: ${serdeUnexpected(text)}, expected an integer`);
      }
      const n = Number(trimmed);
      if (!Number.isSafeInteger(n)) throw configError(key, `integer ${trimmed} is out of range (more than 2^53)`);
      return n;
    });
  }

  /** A number: `1.5`, `17`, `-2e3`. */
  configNumber(key, fallback) {
    return this._get(key, fallback, (text) => {
      let value;
      try {
        value = JSON.parse(text);
      } catch {
        value = undefined;
      }
      if (typeof value !== "number") throw configError(key, `invalid type: ${serdeUnexpected(text)}, expected a number`);
      return value;
    });
  }

  /** `true` or `false`. */
  configBool(key, fallback) {
    return this._get(key, fallback, (text) => {
      const trimmed = text.trim();
      if (trimmed === "true") return true;
      if (trimmed === "false") return false;
      throw configError(key, `invalid type: ${serdeUnexpected(text)}, expected a boolean`);
    });
  }

  /**
   * A duration in whole milliseconds: `"500ms"`, `"1s"`, `"5m"`, `"2h"`, `"1d"`,
   * `"1h 30m"`, or a bare number of milliseconds (see {@link parseDuration}).
   * @param {string} key
   * @param {string|number} [fallback] a duration text or milliseconds
   * @returns {number}
   */
  configDuration(key, fallback) {
    const text = this.configValue(key);
    if (text === undefined) {
      if (fallback === undefined) throw new Error(`invalid config: missing field \`${key}\``);
      return typeof fallback === "number" ? millis(`config \`${key}\` default`, fallback) : parseDuration(fallback);
    }
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      value = text; // not JSON: the text itself
    }
    try {
      if (typeof value === "string") return parseDuration(value);
      if (typeof value === "number" && /^-?[0-9]+$/.test(text.trim())) {
        if (value < 0) throw new Error(`invalid duration ${text.trim()}: durations cannot be negative`);
        if (!Number.isSafeInteger(value)) throw new Error(`duration of ${text.trim()} ms is too large`);
        return value;
      }
    } catch (e) {
      throw configError(key, e.message);
    }
    throw configError(
      key,
      `invalid type: ${serdeUnexpected(text)}, expected a duration such as "500ms", "5m" or "1d", or milliseconds`,
    );
  }

  /**
   * One of `choices` (like a Rust enum): the bare name, or the name as a JSON string.
   * @param {string} key
   * @param {string[]} choices
   * @param {string} [fallback]
   */
  configChoice(key, choices, fallback) {
    return this._get(key, fallback, (text) => {
      let name = text;
      try {
        const value = JSON.parse(text);
        if (typeof value === "string") name = value;
      } catch {
        // the bare name
      }
      if (choices.includes(name)) return name;
      throw configError(key, `unknown variant \`${name}\`, ${formatChoices(choices)}`);
    });
  }

  /** The text read as JSON if it is JSON (`17`, `true`, `["a", "b"]`), else the text. */
  configJson(key, fallback) {
    return this._get(key, fallback, (text) => {
      try {
        return JSON.parse(text);
      } catch {
        return text;
      }
    });
  }

  _declareState(name, kind, ttl) {
    if (typeof name !== "string") throw new TypeError(`a state name is a string, not ${describeValue(name)}`);
    let id;
    try {
      id = ttl === undefined ? stateHost.declare(name, kind) : stateHost.declareWithTtl(name, kind, ttlRecord(ttl));
    } catch (e) {
      throw new Error(`cannot declare state \`${name}\`: ${e && e.message !== undefined ? e.message : e}`);
    }
    batchPath.declared(id, ttl);
    return id;
  }

  /**
   * Declares a value state: one value per key.
   * @param {string} name identifies the state, also for a fresh instance or a new version
   * @param {import("./text.js").Codec} [codec] default `weir.codecs.json`
   * @param {{ttl?: StateTtl}} [options] `ttl`: the host drops the value that long after
   *   it was last set (or read, with `refreshOnRead`); see {@link StateTtl}. The last
   *   declaration of a name sets its time-to-live (none: the entries live for ever).
   * @returns {ValueState}
   */
  valueState(name, codec, options) {
    const checked = checkCodec(codec, `state \`${name}\``);
    const { ttl } = stateOptions(name, options, ["ttl"]);
    return new ValueState(this._declareState(name, "value", ttl), name, checked);
  }

  /**
   * Declares a list state: an ordered list of values per key.
   * @param {string} name
   * @param {import("./text.js").Codec} [codec] default `weir.codecs.json`
   * @param {{ttl?: StateTtl}} [options] `ttl`: the host drops each item that long after
   *   it was appended or the list set (or the list read, with `refreshOnRead`)
   * @returns {ListState}
   */
  listState(name, codec, options) {
    const checked = checkCodec(codec, `state \`${name}\``);
    const { ttl } = stateOptions(name, options, ["ttl"]);
    return new ListState(this._declareState(name, "list", ttl), name, checked);
  }

  /**
   * Declares a map state: a map per key.
   * @param {string} name
   * @param {{key?: import("./text.js").Codec, value?: import("./text.js").Codec, ttl?: StateTtl}} [options]
   *   the codecs of the keys and of the values, default JSON for both; `ttl`: the host
   *   drops each entry that long after it was put (or read, with `refreshOnRead`)
   * @returns {MapState}
   */
  mapState(name, options = {}) {
    const { ttl } = stateOptions(name, options, ["key", "value", "ttl"]);
    const keyCodec = checkCodec(options.key, `state \`${name}\` key`);
    const valueCodec = checkCodec(options.value, `state \`${name}\` value`);
    return new MapState(this._declareState(name, "map", ttl), name, keyCodec, valueCodec);
  }

  /** Declares the main output (`main`). */
  mainOutput() {
    return this.output("main");
  }

  /**
   * Declares output `name` (a side output unless it is `main`); the pipeline file must
   * route it to a sink.
   * @returns {Output}
   */
  output(name) {
    if (typeof name !== "string") throw new TypeError(`an output name is a string, not ${describeValue(name)}`);
    if (phase !== INIT) throw new Error(`output "${name}" must be declared in init`);
    let id;
    try {
      id = outputHost.declare(name);
    } catch (e) {
      throw new Error(`cannot declare output \`${name}\`: ${e && e.message !== undefined ? e.message : e}`);
    }
    return new Output(id, name);
  }
}
Object.assign(InitContext.prototype, logMethods);

// ---------------------------------------------------------------------------------------
// Elements, timers and the per-call context

/** One input record, with the key and event time the host extracted. */
export class Element {
  /** @hideconstructor */
  constructor(input, inputIndex, keyBytes, value, timestamp) {
    /** The name of the input the record came from. */
    this.input = input;
    /** Its index in `ctx.inputs` of init. */
    this.inputIndex = inputIndex;
    /** The key as bytes. */
    this.keyBytes = keyBytes;
    /** The record's bytes (one JSON document for the JSON sources). */
    this.value = value;
    /** The record's event time, in milliseconds since the epoch. */
    this.timestamp = timestamp;
    this._key = undefined;
  }

  /** The key as text (UTF-8; the text of the number for number keys). */
  get key() {
    if (this._key === undefined) this._key = decodeUtf8(this.keyBytes, "key");
    return this._key;
  }

  /** The record as text. */
  text() {
    const text = tryDecodeUtf8(this.value);
    return text !== null ? text : decodeUtf8(this.value, `input \`${this.input}\`: record`);
  }

  /**
   * The record parsed as JSON.
   *
   * `options.raw` names members (at any depth) whose exact JSON text is kept: a string,
   * number, boolean or null member becomes a `JSON.rawJSON` object, whose `rawJSON`
   * property is the text (see {@link rawText}) and which `JSON.stringify` (and so
   * `emit`) writes back verbatim. That is how a number keeps all its digits
   * (`"cost": 2.67499999999999999`) and a value is passed through unchanged, like serde's
   * `RawValue`. Object and array members stay parsed. It costs about twice a plain parse.
   * A function instead is used as the reviver of `JSON.parse`.
   *
   * @param {{raw?: string[]} | ((key: string, value: *, context: {source?: string}) => *)} [options]
   * @throws {Error} `input \`NAME\`: record is not valid JSON: ... (record: ...)`
   */
  json(options) {
    const text = this.text();
    try {
      if (typeof options === "function") return JSON.parse(text, options);
      if (options && options.raw) return parseJsonKeepingRaw(text, options.raw);
      return JSON.parse(text);
    } catch (e) {
      const shown = text.length > 200 ? text.slice(0, 200) + "..." : text;
      throw new Error(`input \`${this.input}\`: record is not valid JSON: ${e.message} (record: ${shown})`);
    }
  }
}

/** A timer that fired. */
export class Timer {
  /** @hideconstructor */
  constructor(domain, timestamp, keyBytes) {
    /** `weir.EVENT_TIME` or `weir.PROCESSING_TIME`. */
    this.domain = domain;
    /** When it was set to fire. */
    this.timestamp = timestamp;
    /** The key it was registered for (the current key), as bytes. */
    this.keyBytes = keyBytes;
    this._key = undefined;
  }

  /** The key as text. */
  get key() {
    if (this._key === undefined) this._key = decodeUtf8(this.keyBytes, "key");
    return this._key;
  }
}

/**
 * The context of one `processElement` or `onTimer` call: the current key and time, the
 * key's timers, the clocks, and logging. Valid during its call only.
 */
export class Context {
  /** @hideconstructor */
  constructor(keyBytes, timestamp) {
    /** The key being processed, as bytes. */
    this.keyBytes = keyBytes;
    /** The timestamp of the element or timer being processed. */
    this.timestamp = timestamp;
    this._key = undefined;
  }

  /** The key being processed, as text. */
  get key() {
    if (this._key === undefined) this._key = decodeUtf8(this.keyBytes, "key");
    return this._key;
  }

  /** The event-time watermark (`weir.MIN_TIMESTAMP` before the first record, `weir.MAX_TIMESTAMP` at the end). */
  currentWatermark() {
    requireCall();
    return timersHost.currentWatermark();
  }

  /** The host's wall clock, in milliseconds since the epoch. */
  currentProcessingTime() {
    requireCall();
    return timersHost.currentProcessingTime();
  }

  /**
   * Registers a timer of the current key in `domain`. Timers are unique per (key,
   * domain, timestamp); an event-time timer at or before the watermark fires at its
   * next advance.
   */
  registerTimer(domain, timestamp) {
    requireCall();
    timersHost.register(domainOf("registerTimer", domain), millis("registerTimer", timestamp));
  }

  /** Deletes a timer of the current key (a no-op if there is none). */
  deleteTimer(domain, timestamp) {
    requireCall();
    timersHost.delete(domainOf("deleteTimer", domain), millis("deleteTimer", timestamp));
  }

  registerEventTimer(timestamp) {
    requireCall();
    timersHost.register(EVENT_TIME, millis("registerEventTimer", timestamp));
  }

  deleteEventTimer(timestamp) {
    requireCall();
    timersHost.delete(EVENT_TIME, millis("deleteEventTimer", timestamp));
  }

  registerProcessingTimer(timestamp) {
    requireCall();
    timersHost.register(PROCESSING_TIME, millis("registerProcessingTimer", timestamp));
  }

  deleteProcessingTimer(timestamp) {
    requireCall();
    timersHost.delete(PROCESSING_TIME, millis("deleteProcessingTimer", timestamp));
  }

  /** Clears every state of the current key (its timers stay). */
  clearAllState() {
    requireCall();
    stateHost.clearAll();
  }
}
Object.assign(Context.prototype, logMethods);

// ---------------------------------------------------------------------------------------
// Errors, as the host reports them

/**
 * How this SDK's files appear in stack frames (`(/weir/index.js:12:3)`), to leave its
 * frames out of error reports: the user's code is what a report should point at.
 */
const SDK_FRAMES = (() => {
  const match = /\(([^()]*\/)[^/()]*:\d+(?::\d+)?\)/.exec(String(new Error().stack));
  return match ? ["index.js", "batch.js", "text.js", "duration.js", "time.js", "host.js", "component.js", "testing.js"].map((file) => `(${match[1]}${file}:`) : [];
})();

function errorText(e) {
  if (e instanceof Error) {
    const plain = !e.name || e.name === "Error" || e instanceof StateDecodeError;
    const head = plain ? String(e.message) : `${e.name}: ${e.message}`;
    return e.cause !== undefined ? `${head}: ${errorText(e.cause)}` : head;
  }
  if (typeof e === "string") return e;
  if (e !== null && typeof e === "object") {
    if (typeof e.message === "string") return e.message;
    try {
      const json = JSON.stringify(e);
      if (json !== undefined) return json;
    } catch {
      // fall through
    }
  }
  return String(e);
}

/** The stack of `e` without the SDK's frames. */
function userStack(e) {
  if (!(e instanceof Error) || typeof e.stack !== "string") return "";
  return e.stack
    .split("\n")
    .filter((line) => line.trim() !== "" && !SDK_FRAMES.some((frame) => line.includes(frame)))
    .join("\n");
}

function isStateDecode(e) {
  for (let depth = 0; e instanceof Error && depth < 16; depth++, e = e.cause) {
    if (e instanceof StateDecodeError) return true;
  }
  return false;
}

/** The contract's `error` record for anything thrown. */
function hostError(e) {
  if (isStateDecode(e)) return { message: errorText(e), kind: "state-decode" };
  const stack = userStack(e);
  return { message: stack === "" ? errorText(e) : `${errorText(e)}\n${stack}`, kind: "failed" };
}

function failed(message) {
  return { message, kind: "failed" };
}

function checkSync(result, method) {
  if (result !== null && typeof result === "object" && typeof result.then === "function") {
    throw new Error(`${method} returned a promise: UDF methods must be synchronous (the host calls them one at a time and does not wait)`);
  }
}

// ---------------------------------------------------------------------------------------
// The export

/**
 * @typedef {object} ProcessFunctionClass what a UDF implements
 * @property {(ctx: InitContext) => void} [init] reads the config, declares states and outputs
 * @property {(ctx: Context, element: Element) => void} processElement once per record
 * @property {(ctx: Context, timer: Timer) => void} [onTimer] once per firing timer
 */

/**
 * Makes a UDF class (or a plain object with the same methods) the component's
 * `process-function` export:
 *
 * ```js
 * export const processFunction = weir.processFunction(class { ... });
 * ```
 *
 * The export must be named `processFunction`. For every `init` the host makes, a fresh
 * instance is created (`new Class(ctx)`, or `Object.create(object)`) and its `init(ctx)`
 * called; `processElement(ctx, element)` and `onTimer(ctx, timer)` are then called on it.
 * Whatever they throw becomes the contract's `error`: `failed`, with the message and the
 * stack, or `state-decode` for a {@link StateDecodeError}; a {@link Reject} becomes the
 * `dead-letters.reject` import instead.
 *
 * Under Node.js, `new TestHost(processFunction)` (`testing.js`) runs the same definition
 * against an in-memory host, for unit tests.
 *
 * @param {Function|object} definition
 * @returns {{init: Function, processElement: Function, onTimer: Function}}
 */
export function processFunction(definition) {
  const proto = typeof definition === "function" ? definition.prototype : definition;
  if (proto === null || typeof proto !== "object" || typeof proto.processElement !== "function") {
    throw new TypeError("weir.processFunction(definition): a class or object with a processElement(ctx, element) method");
  }
  const runner = makeRunner(definition, hostError, failed);
  const exported = {
    init: runner.init,
    processElement: runner.processElement,
    onTimer: runner.onTimer,
    // For TestHost (testing.js), which makes a runner of its own from it.
    [DEFINITION]: definition,
  };
  // The batch export (world `keyed-process-with-batch`), which the build puts beside
  // `processFunction` in the component's exports (scripts/toolchain/build-js.sh): not
  // enumerable, so that the export looks as it always did.
  const batch = Object.freeze({ processBatch: (buffer) => runner.processBatch(buffer) });
  Object.defineProperty(exported, "batch", { value: batch, enumerable: false });
  return Object.freeze(exported);
}

/** The contract's `error` for a batch that failed with `e` (the host runs it again one call at a time). */
function batchError(e) {
  if (e instanceof batchPath.BatchFailed) return failed(`weir (js): ${e.message}`);
  return hostError(e);
}

/**
 * The three calls of the contract's `process-function` for one UDF instance at a time.
 * What the UDF throws goes through `toThrown` (the component's export turns it into the
 * contract's `error` record; the TestHost keeps it as it is), and the runner's own
 * failures through `failure`.
 */
function makeRunner(definition, toThrown, failure) {
  const create =
    typeof definition === "function" ? (ctx) => new definition(ctx) : () => Object.create(definition);
  let udf = null;
  let inputs = [];

  /** One entry of a batch, run as the per-element path runs it, but with errors left to the batch. */
  const batchHooks = {
    setHost(host) {
      const saved = currentHost();
      setHost(host);
      return saved;
    },
    encodeUtf8,
    runElement(index, timestamp, keyBytes, value) {
      const input = inputs[index];
      if (input === undefined) {
        throw new batchPath.BatchFailed(`element from input #${index} but only ${inputs.length} inputs are connected`);
      }
      const ctx = new Context(keyBytes, timestamp);
      const el = new Element(input, index, keyBytes, value, timestamp);
      current = ctx;
      phase = CALL;
      try {
        checkSync(udf.processElement(ctx, el), "processElement");
      } finally {
        phase = IDLE;
        current = null;
      }
    },
    runTimer(timestamp, keyBytes, domain) {
      if (typeof udf.onTimer !== "function") return;
      const ctx = new Context(keyBytes, timestamp);
      const t = new Timer(domain, timestamp, keyBytes);
      current = ctx;
      phase = CALL;
      try {
        checkSync(udf.onTimer(ctx, t), "onTimer");
      } finally {
        phase = IDLE;
        current = null;
      }
    },
  };

  return {
    init(ctx) {
      udf = null;
      phase = INIT;
      try {
        const initCtx = new InitContext(ctx.config, ctx.inputs);
        const instance = create(initCtx);
        if (typeof instance.init === "function") checkSync(instance.init(initCtx), "init");
        udf = instance;
        inputs = ctx.inputs;
      } catch (e) {
        throw toThrown(e);
      } finally {
        phase = IDLE;
      }
    },

    processElement(element) {
      if (udf === null) throw failure("weir (js): processElement called before a successful init");
      const input = inputs[element.input];
      if (input === undefined) {
        throw failure(`weir (js): element from input #${element.input} but only ${inputs.length} inputs are connected`);
      }
      const ctx = new Context(element.key, element.timestamp);
      const el = new Element(input, element.input, element.key, element.value, element.timestamp);
      current = ctx;
      phase = CALL;
      try {
        checkSync(udf.processElement(ctx, el), "processElement");
      } catch (e) {
        rejectOrThrow(e, toThrown);
      } finally {
        phase = IDLE;
        current = null;
      }
    },

    onTimer(timer) {
      if (udf === null) throw failure("weir (js): onTimer called before a successful init");
      if (typeof udf.onTimer !== "function") return;
      const ctx = new Context(timer.key, timer.timestamp);
      const t = new Timer(timer.domain, timer.timestamp, timer.key);
      current = ctx;
      phase = CALL;
      try {
        checkSync(udf.onTimer(ctx, t), "onTimer");
      } catch (e) {
        rejectOrThrow(e, toThrown);
      } finally {
        phase = IDLE;
        current = null;
      }
    },

    /**
     * Runs a batch buffer (`weir:udf/batch`) and returns the effects buffer; anything
     * thrown fails the whole batch.
     */
    processBatch(buffer) {
      if (udf === null) throw failure("weir (js): processBatch called before a successful init");
      try {
        return batchPath.run(buffer, batchHooks);
      } catch (e) {
        throw batchError(e);
      }
    },

    /** The current instance (`null` before a successful init). */
    get instance() {
      return udf;
    },
  };
}

// ---------------------------------------------------------------------------------------
// The environment: a console that logs to the host, and clocks that say they are absent

function inspect(value) {
  if (typeof value === "string") return value;
  if (value instanceof Error) return userStack(value) ? `${errorText(value)}\n${userStack(value)}` : errorText(value);
  if (typeof value === "bigint") return `${value}n`;
  if (value instanceof Uint8Array) return `Uint8Array [${Array.from(value.subarray(0, 64)).join(", ")}${value.length > 64 ? ", ..." : ""}]`;
  try {
    const json = JSON.stringify(value);
    if (json !== undefined) return json;
  } catch {
    // fall through
  }
  return String(value);
}

/** A `console` whose methods write to the host's log. */
function hostConsole() {
  const logAt = (level) => (...args) => loggingHost.log(level, args.map(inspect).join(" "));
  return Object.freeze({
    log: logAt("info"),
    info: logAt("info"),
    debug: logAt("debug"),
    trace: logAt("trace"),
    warn: logAt("warn"),
    error: logAt("error"),
  });
}

function noClock(what) {
  return () => {
    throw new Error(
      `${what} is not available in a Weir UDF: the sandbox has no clock. Use ctx.currentProcessingTime() or the element's timestamp`,
    );
  };
}

/**
 * A `Date` like `OriginalDate` whose `now()`, argument-less constructor and call throw,
 * and a `performance` whose `now()` throws: the clocks a component does not have.
 */
function clocklessGlobals(OriginalDate) {
  const now = noClock("Date.now()");
  const Date = new Proxy(OriginalDate, {
    construct(target, args, newTarget) {
      if (args.length === 0) noClock("new Date() without arguments")();
      return Reflect.construct(target, args, newTarget);
    },
    apply() {
      return noClock("Date() called as a function")();
    },
    get(target, property, receiver) {
      return property === "now" ? now : Reflect.get(target, property, receiver);
    },
  });
  return { Date, now, performance: Object.freeze({ now: noClock("performance.now()") }) };
}

if (componentHost !== null) {
  // In a component, for good: QuickJS has no console, and the stubbed WASI clocks would
  // trap without a message.
  if (typeof globalThis.console === "undefined") globalThis.console = hostConsole();
  const OriginalDate = globalThis.Date;
  const clockless = clocklessGlobals(OriginalDate);
  OriginalDate.now = clockless.now;
  if (typeof globalThis.performance === "object" && globalThis.performance !== null) {
    // QuickJS's `performance` is not writable: put one whose `now` says why in its place.
    try {
      Object.defineProperty(globalThis, "performance", {
        value: clockless.performance,
        writable: true,
        configurable: true,
      });
    } catch {
      // leave it
    }
  }
  globalThis.Date = clockless.Date;
} else {
  // Under Node.js, testing.js puts these in place around each call into the UDF only,
  // so that a test sees what the component would, and the test runner keeps its clocks.
  const clockless = clocklessGlobals(globalThis.Date);
  internals.sandboxGlobals = Object.freeze({
    console: hostConsole(),
    Date: clockless.Date,
    performance: clockless.performance,
  });
}

internals.makeRunner = makeRunner;
