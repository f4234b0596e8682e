/**
 * Durations for configs: `"500ms"`, `"1s"`, `"5m"`, `"2h"`, `"1d"`, `"1h 30m"`, or a bare
 * whole number of milliseconds. Always a whole, non-negative number of milliseconds, the
 * unit of Weir's timestamps.
 *
 * This is a line-by-line port of what the Rust SDK does (`weir_sdk::Duration`, which
 * parses with the `humantime` crate), so that a config value means the same, and fails
 * with the same message, whichever language the UDF is written in. It runs once per
 * config value, so it favours fidelity (BigInt, byte offsets in messages) over speed.
 *
 * @module weir/duration
 */

const U64_MAX = (1n << 64n) - 1n;
const I64_MAX = (1n << 63n) - 1n;
const NANOS_PER_SEC = 1_000_000_000n;

const OVERFLOW =
  "number is too large or cannot be represented without a lack of precision (values below 1ns are not supported)";

/** Format and separator characters, which Rust's `Debug` escapes too (the common ones). */
const NOT_PRINTABLE = /[\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]/;

/** `Debug` of a Rust `&str`: quoted, with `\\`, `"` and control characters escaped. */
export function rustDebugString(text) {
  let out = '"';
  for (const c of String(text)) {
    const code = c.codePointAt(0);
    if (c === '"' || c === "\\") out += "\\" + c;
    else if (c === "\n") out += "\\n";
    else if (c === "\r") out += "\\r";
    else if (c === "\t") out += "\\t";
    else if (code === 0) out += "\\0";
    else if (code < 0x20 || (code >= 0x7f && code < 0xa0) || NOT_PRINTABLE.test(c)) out += "\\u{" + code.toString(16) + "}";
    else out += c;
  }
  return out + '"';
}

/** Unicode `White_Space`, which is what Rust's `char::is_whitespace` and `str::trim` use. */
export function isRustWhitespace(c) {
  const code = c.codePointAt(0);
  return (
    (code >= 0x09 && code <= 0x0d) ||
    code === 0x20 ||
    code === 0x85 ||
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000
  );
}

/** `str::trim` of Rust. */
export function rustTrim(text) {
  const chars = Array.from(text);
  let start = 0;
  let end = chars.length;
  while (start < end && isRustWhitespace(chars[start])) start++;
  while (end > start && isRustWhitespace(chars[end - 1])) end--;
  return chars.slice(start, end).join("");
}

class HumantimeError extends Error {}

function checked(value) {
  if (value > U64_MAX) throw new HumantimeError(OVERFLOW);
  return value;
}

function exactDiv(value, by) {
  if (value % by !== 0n) throw new HumantimeError(OVERFLOW);
  return value / by;
}

/** humantime's units: name -> [seconds per unit, nanoseconds per unit] (one is 0). */
const UNITS = new Map();
for (const [names, secs, nanos] of [
  [["nanos", "nsec", "ns"], 0n, 1n],
  [["usec", "us", "µs"], 0n, 1000n],
  [["millis", "msec", "ms"], 0n, 1_000_000n],
  [["seconds", "second", "secs", "sec", "s"], 1n, 0n],
  [["minutes", "minute", "min", "mins", "m"], 60n, 0n],
  [["hours", "hour", "hr", "hrs", "h"], 3600n, 0n],
  [["days", "day", "d"], 86400n, 0n],
  [["weeks", "week", "wk", "wks", "w"], 604800n, 0n],
  [["months", "month", "M"], 2_630_016n, 0n], // 30.44 days
  [["years", "year", "yr", "yrs", "y"], 31_557_600n, 0n], // 365.25 days
]) {
  for (const name of names) UNITS.set(name, [secs, nanos]);
}

const isDigit = (c) => c >= "0" && c <= "9";
const isUnitChar = (c) => (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || c === "µ";

/**
 * humantime::parse_duration: the total as BigInt seconds and nanoseconds; throws a
 * HumantimeError whose message is humantime's.
 */
function humantimeParse(src) {
  if (src === "0") return { secs: 0n, nanos: 0n };
  const chars = Array.from(src);
  // Byte offsets (UTF-8) of every char, as humantime's messages report them.
  const offsets = [0];
  for (const c of chars) {
    const code = c.codePointAt(0);
    const len = code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
    offsets.push(offsets[offsets.length - 1] + len);
  }
  let i = 0;
  const off = () => offsets[i];
  const next = () => (i < chars.length ? chars[i++] : undefined);
  const slice = (start, end) => chars.slice(offsets.indexOf(start), offsets.indexOf(end)).join("");
  let secsTotal = 0n;
  let nanosTotal = 0n;

  const addCurrent = (sec, nsec) => {
    let nanos = checked(nanosTotal + nsec);
    if (nanos > NANOS_PER_SEC) {
      sec = checked(sec + nanos / NANOS_PER_SEC);
      nanos %= NANOS_PER_SEC;
    }
    secsTotal = checked(secsTotal + sec);
    if (nanos >= NANOS_PER_SEC) {
      secsTotal += nanos / NANOS_PER_SEC;
      nanos %= NANOS_PER_SEC;
    }
    nanosTotal = nanos;
  };

  const parseFirstChar = () => {
    const at = off();
    let c;
    while ((c = next()) !== undefined) {
      if (isDigit(c)) return BigInt(c);
      if (isRustWhitespace(c)) continue;
      throw new HumantimeError(`expected number at ${at}`);
    }
    return null;
  };

  const parseUnit = (n, frac, start, end) => {
    const name = slice(start, end);
    const unit = UNITS.get(name);
    if (unit === undefined) {
      if (name === "") {
        throw new HumantimeError(`time unit needed, for example ${n}sec or ${n}ms`);
      }
      throw new HumantimeError(
        `unknown time unit ${rustDebugString(name)}, supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)`,
      );
    }
    const [unitSecs, unitNanos] = unit;
    addCurrent(checked(n * unitSecs), checked(n * unitNanos));
    if (frac !== null) {
      const { numerator, denominator } = frac;
      if (unitNanos === 1n) throw new HumantimeError(OVERFLOW);
      if (unitSecs === 0n || unitSecs === 1n || unitSecs === 60n) {
        // Units up to a minute add their fraction in nanoseconds.
        const perUnit = unitSecs === 0n ? unitNanos : unitSecs * NANOS_PER_SEC;
        addCurrent(0n, exactDiv(checked(numerator * perUnit), denominator));
      } else {
        addCurrent(exactDiv(checked(numerator * unitSecs), denominator), 0n);
      }
    }
  };

  let n = parseFirstChar();
  if (n === null) throw new HumantimeError("value was empty");
  outer: for (;;) {
    let frac = null;
    let at = off();
    let c;
    while ((c = next()) !== undefined) {
      if (isDigit(c)) {
        n = checked(n * 10n + BigInt(c));
      } else if (isRustWhitespace(c)) {
        // spaces between digits and unit are allowed
      } else if (isUnitChar(c)) {
        break;
      } else if (c === ".") {
        // The fractional part, as humantime reads it.
        let numerator = 0n;
        let denominator = 1n;
        let zeros = true;
        let d;
        while ((d = next()) !== undefined) {
          if (d === "0") {
            denominator = checked(denominator * 10n);
            if (!zeros) numerator = checked(numerator * 10n);
          } else if (d >= "1" && d <= "9") {
            zeros = false;
            denominator = checked(denominator * 10n);
            numerator = checked(numerator * 10n + BigInt(d));
          } else if (isRustWhitespace(d)) {
            // ignored
          } else if (isUnitChar(d)) {
            break;
          } else {
            throw new HumantimeError(`invalid character at ${at}`);
          }
          at = off();
        }
        if (denominator === 1n) throw new HumantimeError(`invalid character at ${at}`);
        frac = { numerator, denominator };
        break;
      } else {
        throw new HumantimeError(`invalid character at ${at}`);
      }
      at = off();
    }
    const start = at;
    let end = off();
    while ((c = next()) !== undefined) {
      if (isDigit(c)) {
        parseUnit(n, frac, start, end);
        n = BigInt(c);
        continue outer;
      } else if (isRustWhitespace(c)) {
        break;
      } else if (isUnitChar(c)) {
        // part of the unit
      } else {
        throw new HumantimeError(`invalid character at ${end}`);
      }
      end = off();
    }
    parseUnit(n, frac, start, end);
    n = parseFirstChar();
    if (n === null) return { secs: secsTotal, nanos: nanosTotal };
  }
}

/**
 * Parses a duration as the Rust SDK does: `"500ms"`, `"1s"`, `"5m"`, `"2h"`, `"1d"`,
 * `"1h 30m"`, `"1.5s"`, or a bare whole number of milliseconds (`"250"`).
 *
 * @param {string} text
 * @returns {number} whole milliseconds, >= 0
 * @throws {Error} `invalid duration "5 parsecs": ... (expected e.g. ...)`, the Rust message
 */
export function parseDuration(text) {
  text = String(text);
  const fail = (reason) =>
    new Error(
      `invalid duration ${rustDebugString(text)}: ${reason} (expected e.g. "500ms", "1s", "5m", "2h", "1d", or a whole number of milliseconds)`,
    );
  const trimmed = rustTrim(text);
  if (trimmed !== "" && /^[0-9]+$/.test(trimmed)) {
    const ms = BigInt(trimmed);
    if (ms > I64_MAX) throw fail("too large");
    return Number(ms);
  }
  if (trimmed.startsWith("-")) throw fail("durations cannot be negative");
  let parsed;
  try {
    parsed = humantimeParse(trimmed);
  } catch (e) {
    if (e instanceof HumantimeError) throw fail(e.message);
    throw e;
  }
  if (parsed.nanos % 1_000_000n !== 0n) throw fail("finer than a millisecond");
  const ms = parsed.secs * 1000n + parsed.nanos / 1_000_000n;
  if (ms > I64_MAX) throw fail("too large");
  return Number(ms);
}

/**
 * Formats milliseconds as the Rust SDK's `Duration` displays (humantime): `"5m"`,
 * `"1h 30m"`, `"1s 500ms"`, `"0s"`. The text parses back with {@link parseDuration}.
 *
 * @param {number} ms whole milliseconds, >= 0
 * @returns {string}
 */
export function formatDuration(ms) {
  if (!Number.isInteger(ms) || ms < 0) throw new TypeError(`formatDuration: expected whole milliseconds >= 0, got ${ms}`);
  const total = BigInt(ms);
  const secs = total / 1000n;
  const millis = total % 1000n;
  if (secs === 0n && millis === 0n) return "0s";
  const years = secs / 31_557_600n;
  const ydays = secs % 31_557_600n;
  const months = ydays / 2_630_016n;
  const mdays = ydays % 2_630_016n;
  const days = mdays / 86400n;
  const daySecs = mdays % 86400n;
  const parts = [];
  const plural = (name, value) => {
    if (value > 0n) parts.push(`${value}${name}${value > 1n ? "s" : ""}`);
  };
  const item = (name, value) => {
    if (value > 0n) parts.push(`${value}${name}`);
  };
  plural("year", years);
  plural("month", months);
  plural("day", days);
  item("h", daySecs / 3600n);
  item("m", (daySecs % 3600n) / 60n);
  item("s", daySecs % 60n);
  item("ms", millis);
  return parts.join(" ");
}
