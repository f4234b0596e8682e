/**
 * Bytes, text and JSON: what crosses the component boundary is `list<u8>`, which the
 * QuickJS runtime gives and takes as `Uint8Array`, and it has no `TextEncoder` or
 * `TextDecoder`. UTF-8 is therefore done here with native functions only, since
 * QuickJS interprets a byte loop at about 100 ns a byte: bytes become a "binary string"
 * (one char per byte) through base64 (`toBase64`/`atob`, and `btoa`/`fromBase64` back),
 * and the engine's URI functions do the multi-byte work (`escape`/`decodeURIComponent`,
 * `encodeURIComponent`/`unescape`). ASCII, the usual case for JSON records, skips that.
 *
 * Also here: JSON output that matches `serde_json`'s compact form (which
 * `JSON.stringify` does, for everything a JSON document can hold), raw JSON text kept
 * verbatim (like serde's `RawValue`), and the state codecs.
 *
 * @module weir/text
 */

const NON_ASCII = /[^\x00-\x7f]/;
const HIGH_BYTE = /[\x80-\xff]/;
const CHUNK = 8192;

/**
 * Whether the engine has `Uint8Array.fromBase64` and `toBase64` (QuickJS-ng does).
 * Through base64 and the native `btoa`/`atob`, bytes become a "binary string" and back
 * in C; a byte loop in JavaScript costs about 100 ns a byte in QuickJS.
 */
const BASE64 = typeof Uint8Array.fromBase64 === "function" && typeof Uint8Array.prototype.toBase64 === "function";

/** The bytes as a "binary string" (one char, 0-255, per byte), without base64. */
function binaryString(bytes) {
  const n = bytes.length;
  if (n <= CHUNK) return String.fromCharCode.apply(null, bytes);
  let out = "";
  for (let i = 0; i < n; i += CHUNK) {
    out += String.fromCharCode.apply(null, bytes.subarray(i, Math.min(n, i + CHUNK)));
  }
  return out;
}

/** A binary string's chars as bytes, without base64. */
function binaryBytes(text) {
  const n = text.length;
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = text.charCodeAt(i);
  return out;
}

/**
 * UTF-8 bytes to a string; `null` if they are not valid UTF-8.
 * @param {Uint8Array} bytes
 * @returns {string|null}
 */
export function tryDecodeUtf8(bytes) {
  const bin = BASE64 ? atob(bytes.toBase64()) : binaryString(bytes);
  if (!HIGH_BYTE.test(bin)) return bin;
  try {
    return decodeURIComponent(escape(bin));
  } catch {
    return null;
  }
}

/**
 * Decodes UTF-8, replacing invalid sequences with U+FFFD (as Rust's
 * `String::from_utf8_lossy` does).
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function decodeUtf8Lossy(bytes) {
  const text = tryDecodeUtf8(bytes);
  if (text !== null) return text;
  let out = "";
  let i = 0;
  const n = bytes.length;
  while (i < n) {
    const b = bytes[i];
    let need = 0;
    let cp = 0;
    let lower = 0x80;
    let upper = 0xbf;
    if (b < 0x80) {
      out += String.fromCharCode(b);
      i++;
      continue;
    } else if (b >= 0xc2 && b <= 0xdf) {
      need = 1;
      cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
      need = 2;
      cp = b & 0x0f;
      if (b === 0xe0) lower = 0xa0;
      if (b === 0xed) upper = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      need = 3;
      cp = b & 0x07;
      if (b === 0xf0) lower = 0x90;
      if (b === 0xf4) upper = 0x8f;
    } else {
      out += "\ufffd";
      i++;
      continue;
    }
    let j = i + 1;
    let ok = true;
    for (let k = 0; k < need; k++, j++) {
      const c = j < n ? bytes[j] : -1;
      if (c < lower || c > upper) {
        ok = false;
        break;
      }
      lower = 0x80;
      upper = 0xbf;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (ok) {
      out += String.fromCodePoint(cp);
      i = j;
    } else {
      out += "\ufffd";
      i = j; // the maximal valid prefix is replaced by one U+FFFD
    }
  }
  return out;
}

/**
 * Decodes UTF-8 strictly.
 * @param {Uint8Array} bytes
 * @param {string} [what] names the bytes in the error, e.g. "key"
 * @returns {string}
 * @throws {TypeError} if the bytes are not UTF-8
 */
export function decodeUtf8(bytes, what = "bytes") {
  const text = tryDecodeUtf8(bytes);
  if (text === null) {
    const shown = Array.from(bytes.subarray(0, 32), (b) => b.toString(16).padStart(2, "0")).join(" ");
    throw new TypeError(`${what} is not UTF-8 text: [${shown}${bytes.length > 32 ? " ..." : ""}]`);
  }
  return text;
}

/**
 * Encodes a string as UTF-8 (lone surrogates become U+FFFD).
 * @param {string} text
 * @returns {Uint8Array}
 */
export function encodeUtf8(text) {
  if (NON_ASCII.test(text)) text = unescape(encodeURIComponent(text.toWellFormed()));
  return BASE64 ? Uint8Array.fromBase64(btoa(text)) : binaryBytes(text);
}

// ---------------------------------------------------------------------------------------
// Raw JSON

/**
 * While {@link toJson} runs (depth > 0), the texts that {@link RawJsonText} placeholders
 * stand for, by number.
 */
let collecting = 0;
const rawTexts = [];
const RAW_PLACEHOLDER = /"\\u0000weir-raw-json:(\d+)\\u0000"/g;

/**
 * Raw JSON for objects and arrays, which `JSON.rawJSON` refuses. During {@link toJson}
 * it stands in as a placeholder string that is then replaced by the text; in a plain
 * `JSON.stringify` it is written as the value the text parses to.
 */
class RawJsonText {
  constructor(text) {
    this.rawJSON = text;
    Object.freeze(this);
  }
  toJSON() {
    if (collecting === 0) return JSON.parse(this.rawJSON);
    rawTexts.push(this.rawJSON);
    return "\u0000weir-raw-json:" + (rawTexts.length - 1) + "\u0000";
  }
}

/**
 * A JSON text that is written out verbatim when it is part of an emitted record or a
 * JSON state value, like serde's `RawValue`: `{orderId: weir.rawJson("17.0")}` is
 * emitted as `{"orderId":17.0}`. Numbers keep their exact digits this way.
 *
 * @param {string} text one JSON document
 * @returns {object} a frozen object; its `rawJSON` property is the text
 * @throws {SyntaxError} if the text is not JSON
 */
export function rawJson(text) {
  text = String(text);
  try {
    return JSON.rawJSON(text); // checks it: a primitive without surrounding whitespace
  } catch {
    // an object, an array, or not JSON at all
  }
  try {
    JSON.parse(text);
  } catch (e) {
    throw new SyntaxError(`weir.rawJson: not a JSON document: ${e.message}: ${text.slice(0, 100)}`);
  }
  return new RawJsonText(text);
}

/**
 * The JSON text of a value made by {@link rawJson} (or `JSON.rawJSON`, or read with
 * `element.json({raw: [...]})`); `undefined` for any other value.
 * @param {*} value
 * @returns {string|undefined}
 */
export function rawText(value) {
  if (value instanceof RawJsonText) return value.rawJSON;
  if (value !== null && typeof value === "object" && HAS_RAW_JSON && JSON.isRawJSON(value)) return value.rawJSON;
  return undefined;
}

/**
 * `JSON.parse(text)`, except that members named in `names` (at any depth) keep their
 * exact JSON text: a string, number, boolean or null member becomes a `JSON.rawJSON`
 * object (its `rawJSON` property is the text, and `JSON.stringify` writes it back
 * verbatim); an object or array member stays parsed. This is what
 * `element.json({raw: [...]})` does, with a reviver that has source access (a plain
 * `JSON.parse` and a search of the text for the members turned out slower in QuickJS).
 *
 * @param {string} text
 * @param {string[]} names
 * @returns {*}
 * @throws {SyntaxError} if the text is not JSON
 */
export function parseJsonKeepingRaw(text, names) {
  if (!SOURCE_ACCESS) return parseJsonKeepingRawSlowly(text, names);
  return JSON.parse(text, (key, value, context) =>
    context !== undefined && context.source !== undefined && names.includes(key) ? JSON.rawJSON(context.source) : value,
  );
}

/** Whether the engine has `JSON.rawJSON` and `JSON.isRawJSON` (QuickJS-ng, Node.js 21+). */
const HAS_RAW_JSON = typeof JSON.rawJSON === "function" && typeof JSON.isRawJSON === "function";

/** Whether `JSON.parse` gives a reviver the source text, and `JSON.rawJSON` exists. */
const SOURCE_ACCESS = (() => {
  let source;
  try {
    JSON.parse("17.0", (key, value, context) => {
      source = context !== undefined ? context.source : undefined;
      return value;
    });
  } catch {
    // no reviver support worth the name
  }
  return HAS_RAW_JSON && source === "17.0";
})();

const JSON_WHITESPACE = (c) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/**
 * {@link parseJsonKeepingRaw} for engines without source access (Node.js 20, where unit
 * tests run): the same result, with raw members as {@link rawJson} objects, from a scan of
 * the text in JavaScript. Not used in a component.
 */
function parseJsonKeepingRawSlowly(text, names) {
  JSON.parse(text); // the engine's own error for text that is not JSON; valid from here on
  let i = 0;
  const skipWhitespace = () => {
    while (i < text.length && JSON_WHITESPACE(text.charCodeAt(i))) i++;
  };
  const stringEnd = (start) => {
    let j = start + 1;
    for (;;) {
      const c = text.charCodeAt(j);
      if (c === 0x5c) j += 2;
      else if (c === 0x22) return j + 1;
      else j++;
    }
  };
  const set = (holder, key, value) => {
    if (key === "__proto__") {
      Object.defineProperty(holder, key, { value, writable: true, enumerable: true, configurable: true });
    } else {
      holder[key] = value;
    }
  };
  const parseValue = (key) => {
    skipWhitespace();
    const c = text[i];
    if (c === "{" || c === "[") {
      const isObject = c === "{";
      const holder = isObject ? {} : [];
      i++;
      skipWhitespace();
      if (text[i] === (isObject ? "}" : "]")) {
        i++;
        return holder;
      }
      for (let index = 0; ; index++) {
        skipWhitespace();
        let member = String(index);
        if (isObject) {
          const end = stringEnd(i);
          member = JSON.parse(text.slice(i, end));
          i = end;
          skipWhitespace();
          i++; // the colon
        }
        set(holder, member, parseValue(member));
        skipWhitespace();
        if (text[i++] !== ",") return holder; // the closing bracket
      }
    }
    const start = i;
    if (c === '"') {
      i = stringEnd(i);
    } else {
      while (i < text.length) {
        const d = text.charCodeAt(i);
        if (JSON_WHITESPACE(d) || d === 0x2c || d === 0x5d || d === 0x7d) break;
        i++;
      }
    }
    const source = text.slice(start, i);
    return names.includes(key) ? new RawJsonText(source) : JSON.parse(source);
  };
  return parseValue("");
}

/**
 * `JSON.stringify`, failing instead of returning `undefined`, and writing raw JSON
 * verbatim. Its compact output is the same text as `serde_json::to_string` for the same
 * strings, integers, booleans, nulls, arrays and objects (same escapes, key order as
 * inserted). Floats can differ: serde writes `1.0` for an `f64` one, JavaScript `1`.
 *
 * @param {*} value
 * @returns {string}
 */
export function toJson(value) {
  let text;
  if (collecting === 0 && rawTexts.length !== 0) rawTexts.length = 0; // left by a throw
  collecting++;
  try {
    text = JSON.stringify(value);
  } finally {
    collecting--;
  }
  if (rawTexts.length !== 0 && collecting === 0) {
    const raws = rawTexts.splice(0);
    if (text !== undefined) text = text.replace(RAW_PLACEHOLDER, (_, i) => raws[Number(i)]);
  }
  if (text === undefined) {
    throw new TypeError(`${typeof value === "function" ? "a function" : String(value)} is not a JSON value`);
  }
  return text;
}

// ---------------------------------------------------------------------------------------
// State codecs

/**
 * How a state turns values into the bytes the host stores, and back. `decode` throws
 * for bytes it cannot read; the state turns that into a `StateDecodeError`.
 *
 * @typedef {object} Codec
 * @property {string} name shown in errors
 * @property {(value: *) => Uint8Array} encode
 * @property {(bytes: Uint8Array) => *} decode
 * @property {boolean} [mayBeginWithTag] false if encoded bytes never begin with the
 *   schema tag `fe ed` (JSON, text): schema-0 values are then stored untagged; a codec
 *   that does not say has every value stored behind the tag and its version
 */

/**
 * The built-in codecs: `json` (the default: any JSON value, stored as its UTF-8 text),
 * `text` (strings, stored as UTF-8) and `bytes` (`Uint8Array`, stored as is).
 *
 * Note that a Rust UDF's state is `postcard`, not JSON: a JavaScript version of a UDF
 * does not read the state a Rust version wrote (a state-decode error, which fails the
 * run, or sends the key's records to the dead letters under `on_error = "dead-letter"`).
 */
export const codecs = Object.freeze({
  /** @type {Codec} */
  json: Object.freeze({
    name: "json",
    /** UTF-8 JSON never begins with 0xfe: schema-0 values are stored untagged. */
    mayBeginWithTag: false,
    encode: (value) => encodeUtf8(toJson(value)),
    decode(bytes) {
      const text = tryDecodeUtf8(bytes);
      return JSON.parse(text !== null ? text : decodeUtf8(bytes, "the stored value"));
    },
  }),
  /** @type {Codec} */
  text: Object.freeze({
    name: "text",
    /** UTF-8 never holds the byte 0xfe: schema-0 values are stored untagged. */
    mayBeginWithTag: false,
    encode(value) {
      if (typeof value !== "string") throw new TypeError(`expected a string, got ${typeof value}`);
      return encodeUtf8(value);
    },
    decode: (bytes) => decodeUtf8(bytes, "the stored value"),
  }),
  /** @type {Codec} */
  bytes: Object.freeze({
    name: "bytes",
    encode(value) {
      if (!(value instanceof Uint8Array)) throw new TypeError(`expected a Uint8Array, got ${typeof value}`);
      return value;
    },
    decode: (bytes) => bytes,
  }),
});
