/**
 * UTC formatting and parsing of millisecond timestamps, as UDF outputs usually need.
 *
 * The same text as the Rust SDK's `weir_sdk::time` (`format_millis`, `format_seconds`,
 * `parse_millis`), so a JavaScript UDF and its Rust twin write byte-identical records.
 * Hand-written (Howard Hinnant's `civil_from_days` / `days_from_civil`) rather than
 * through `Date`: `Date` covers only ±8.64e15 ms, and the Rust SDK covers every `i64`.
 *
 * Timestamps cross the component boundary as JavaScript numbers, exact up to 2^53 ms
 * (year 285,000). The host's `i64::MAX` / `i64::MIN` (the watermark at end of input and
 * before the first record) arrive as ±2^63 and are formatted as those `i64` values; a
 * BigInt is also accepted.
 *
 * @module weir/time
 */

import { rustDebugString } from "./duration.js";

const MILLIS_PER_DAY = 86_400_000;
const I64_MAX = (1n << 63n) - 1n;
const I64_MIN = -(1n << 63n);

/** Floor division of safe integers (Rust's `div_euclid` for a positive divisor). */
function divEuclid(a, b) {
  return Math.floor(a / b);
}

/** The civil date-time of `ms`, computed with numbers (|ms| < 2^53). */
function civilNumber(ms) {
  const days = divEuclid(ms, MILLIS_PER_DAY);
  const ofDay = ms - days * MILLIS_PER_DAY;
  const z = days + 719_468;
  const era = divEuclid(z, 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor((doe - Math.floor(doe / 1_460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  const year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  return [year, month, day, ofDay];
}

/** The same with BigInt, for timestamps beyond 2^53 (down to i64::MIN). */
function civilBig(ms) {
  const D = BigInt(MILLIS_PER_DAY);
  const fdiv = (a, b) => {
    const q = a / b;
    return a % b !== 0n && a < 0n !== b < 0n ? q - 1n : q;
  };
  const days = fdiv(ms, D);
  const ofDay = ms - days * D;
  const z = days + 719_468n;
  const era = fdiv(z, 146_097n);
  const doe = z - era * 146_097n;
  const yoe = (doe - doe / 1_460n + doe / 36_524n - doe / 146_096n) / 365n;
  const doy = doe - (365n * yoe + yoe / 4n - yoe / 100n);
  const mp = (5n * doy + 2n) / 153n;
  const day = doy - (153n * mp + 2n) / 5n + 1n;
  const month = mp < 10n ? mp + 3n : mp - 9n;
  const year = yoe + era * 400n + (month <= 2n ? 1n : 0n);
  return [Number(year), Number(month), Number(day), Number(ofDay)];
}

function civil(ms) {
  if (typeof ms === "number" && Number.isSafeInteger(ms)) return civilNumber(ms);
  let big;
  if (typeof ms === "bigint") big = ms;
  else if (typeof ms === "number" && !Number.isNaN(ms)) big = ms >= 2 ** 63 ? I64_MAX : ms <= -(2 ** 63) ? I64_MIN : BigInt(Math.floor(ms));
  else throw new TypeError(`expected a timestamp in milliseconds, got ${String(ms)}`);
  if (big > I64_MAX) big = I64_MAX;
  if (big < I64_MIN) big = I64_MIN;
  return civilBig(big);
}

const pad2 = (n) => (n < 10 ? "0" + n : "" + n);
const pad3 = (n) => (n < 10 ? "00" + n : n < 100 ? "0" + n : "" + n);

function dateTime(year, month, day, ofDay) {
  let y;
  if (year >= 0 && year <= 9999) {
    y = year < 10 ? "000" + year : year < 100 ? "00" + year : year < 1000 ? "0" + year : "" + year;
  } else {
    // Rust's `{:+05}`: always a sign, at least 4 digits.
    const digits = String(Math.abs(year)).padStart(4, "0");
    y = (year < 0 ? "-" : "+") + digits;
  }
  const hour = Math.floor(ofDay / 3_600_000);
  const minute = Math.floor(ofDay / 60_000) % 60;
  const second = Math.floor(ofDay / 1000) % 60;
  return y + "-" + pad2(month) + "-" + pad2(day) + " " + pad2(hour) + ":" + pad2(minute) + ":" + pad2(second);
}

/**
 * `YYYY-MM-DD HH:MM:SS.mmm` in UTC, e.g. `2026-11-29 10:00:00.123`; the Rust SDK's
 * `format_millis`.
 *
 * @param {number|bigint} ms milliseconds since the Unix epoch
 * @returns {string}
 */
export function formatMillis(ms) {
  const [year, month, day, ofDay] = civil(ms);
  return dateTime(year, month, day, ofDay) + "." + pad3(ofDay % 1000);
}

/**
 * `YYYY-MM-DD HH:MM:SS` in UTC (milliseconds dropped, rounding toward the past); the
 * Rust SDK's `format_seconds`.
 *
 * @param {number|bigint} ms
 * @returns {string}
 */
export function formatSeconds(ms) {
  const [year, month, day, ofDay] = civil(ms);
  return dateTime(year, month, day, ofDay);
}

function daysInMonth(year, month) {
  if (month === 4 || month === 6 || month === 9 || month === 11) return 30;
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return 31;
}

function daysFromCivil(year, month, day) {
  const y = BigInt(year) - (month <= 2 ? 1n : 0n);
  const fdiv = (a, b) => {
    const q = a / b;
    return a % b !== 0n && a < 0n !== b < 0n ? q - 1n : q;
  };
  const era = fdiv(y, 400n);
  const yoe = y - era * 400n;
  const m = BigInt(month);
  const doy = (153n * (m > 2n ? m - 3n : m + 9n) + 2n) / 5n + BigInt(day) - 1n;
  const doe = yoe * 365n + yoe / 4n - yoe / 100n + doy;
  return era * 146_097n + doe - 719_468n;
}

/**
 * Parses `YYYY-MM-DD HH:MM:SS[.fff]` (or with `T` between date and time, and an optional
 * trailing `Z`) as UTC; digits beyond milliseconds are truncated. The Rust SDK's
 * `parse_millis`, handy for tests and configs.
 *
 * @param {string} text
 * @returns {number} milliseconds since the Unix epoch
 * @throws {Error} `invalid timestamp "...": <why> (expected YYYY-MM-DD HH:MM:SS[.fff])`
 */
export function parseMillis(text) {
  text = String(text);
  const fail = (why) =>
    new Error(`invalid timestamp ${rustDebugString(text)}: ${why} (expected YYYY-MM-DD HH:MM:SS[.fff])`);
  let s = text.trim();
  if (s.endsWith("Z")) s = s.slice(0, -1);
  const sep = s.search(/[ T]/);
  if (sep < 0) throw fail("no time of day");
  let date = s.slice(0, sep);
  const time = s.slice(sep + 1);
  let sign = 1;
  if (date.startsWith("-")) {
    sign = -1;
    date = date.slice(1);
  } else if (date.startsWith("+")) {
    date = date.slice(1);
  }
  const d = date.split("-");
  if (d.length !== 3) throw fail("bad date");
  const point = time.indexOf(".");
  const hms = point < 0 ? time : time.slice(0, point);
  const frac = point < 0 ? "" : time.slice(point + 1);
  const t = hms.split(":");
  if (t.length !== 3) throw fail("bad time of day");
  const num = (part, what) => {
    if (!/^[0-9]+$/.test(part)) throw fail(`bad ${what}`);
    const n = Number(part);
    if (!Number.isSafeInteger(n)) throw fail(`bad ${what}`);
    return n;
  };
  const year = sign * num(d[0], "year");
  const month = num(d[1], "month");
  const day = num(d[2], "day");
  const hour = num(t[0], "hour");
  const minute = num(t[1], "minute");
  const second = num(t[2], "second");
  if (month < 1 || month > 12) throw fail("month out of range");
  if (day < 1 || day > daysInMonth(year, month)) throw fail("day out of range");
  if (hour > 23 || minute > 59 || second > 59) throw fail("time of day out of range");
  let milli = 0;
  if (frac !== "") {
    if (!/^[0-9]+$/.test(frac)) throw fail("bad fraction of a second");
    milli = Number((frac + "00").slice(0, 3));
  }
  const ms =
    daysFromCivil(year, month, day) * BigInt(MILLIS_PER_DAY) +
    BigInt(((hour * 60 + minute) * 60 + second) * 1000 + milli);
  if (ms > I64_MAX || ms < I64_MIN) throw fail("out of range");
  return Number(ms);
}
