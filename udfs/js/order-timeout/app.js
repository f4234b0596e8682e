/**
 * Aggregates the events of an order until none came for `timeout`, then emits it.
 * The JavaScript twin of udfs/order-timeout/src/lib.rs: same config, same output, byte
 * for byte, on the same input.
 *
 * Input: `{"orderId": 17, "item": "tea", "cost": "3.50", "timestamp": "..."}`, keyed by
 * `orderId`. `cost` is a decimal given as a JSON string or number, summed exactly.
 * Output, when the order's timer fires:
 * `{"orderId": 17, "total": "12.30", "items": ["tea", ...]}` (orderId as it first came,
 * as its exact JSON text; total rounded half-up to 2 places; items in arrival order),
 * keyed by the order; the order's state is then cleared.
 *
 * Each event moves the order's single timer to `timeout` after it: in event time by
 * default (`element timestamp + timeout`), or in processing time with
 * `time = "processing"` (`now + timeout`).
 *
 * Config: `timeout` (default `1s`), `time` (`event` or `processing`, default `event`).
 *
 * The Rust version sums with `rust_decimal` (a 96-bit mantissa and up to 28 decimal
 * places); {@link Decimal} below does the same with BigInt, including where
 * `rust_decimal` refuses a cost (too many digits) or rounds.
 */

import * as weir from "../../../guest-sdk/js/sdk/index.js";

// ---------------------------------------------------------------------------------------
// Exact decimals, as rust_decimal has them: mantissa / 10^scale, |mantissa| < 2^96,
// 0 <= scale <= 28.

const MAX_SCALE = 28;
const LIMIT = 1n << 96n;
const abs = (n) => (n < 0n ? -n : n);
const pow10 = (n) => 10n ** BigInt(n);

class Decimal {
  constructor(mantissa, scale) {
    this.mantissa = mantissa;
    this.scale = scale;
  }

  /** rust_decimal's `to_string`: all `scale` digits after the point. */
  toString() {
    const digits = abs(this.mantissa).toString().padStart(this.scale + 1, "0");
    const sign = this.mantissa < 0n ? "-" : "";
    if (this.scale === 0) return sign + digits;
    return sign + digits.slice(0, -this.scale) + "." + digits.slice(-this.scale);
  }
}

/**
 * `Decimal::from_str` (round = true) or `from_str_exact` (round = false) of a text that
 * passed isDecimalText without an exponent: `null` where rust_decimal fails.
 */
function parsePlain(text, round) {
  // The usual case, without a per-digit loop (slow in QuickJS): few enough digits.
  const point = text.indexOf(".");
  const scale = point < 0 ? 0 : text.length - point - 1;
  if (scale <= MAX_SCALE) {
    const digits = point < 0 ? text : text.slice(0, point) + text.slice(point + 1);
    const mantissa = digits === "" || digits === "+" || digits === "-" ? 0n : BigInt(digits);
    if (abs(mantissa) < LIMIT) return new Decimal(mantissa, scale);
  }
  return parsePlainSlow(text, round);
}

/** parsePlain digit by digit, where rust_decimal rounds or fails. */
function parsePlainSlow(text, round) {
  let i = 0;
  let negative = false;
  if (text[0] === "+" || text[0] === "-") {
    negative = text[0] === "-";
    i = 1;
  }
  let mantissa = 0n;
  let scale = 0;
  let point = false;
  for (; i < text.length; i++) {
    const c = text[i];
    if (c === ".") {
      point = true;
      continue;
    }
    const digit = BigInt(c);
    const next = mantissa * 10n + digit;
    if ((point && scale >= MAX_SCALE) || next >= LIMIT) {
      // Past what fits: rust_decimal rounds on this one digit (from_str) or fails.
      if (!round || (!point && next >= LIMIT)) return null;
      if (digit >= 5n) {
        mantissa += 1n;
        if (mantissa >= LIMIT) {
          if (scale === 0) return null;
          mantissa = (mantissa + 4n) / 10n;
          scale -= 1;
        }
      }
      break;
    }
    mantissa = next;
    if (point) scale += 1;
  }
  return new Decimal(negative ? -mantissa : mantissa, scale);
}

/** `Decimal::from_scientific` of `BASEeEXP`: `null` where rust_decimal fails. */
function parseScientific(text) {
  const at = text.search(/[eE]/);
  const base = parsePlain(text.slice(0, at), true);
  if (base === null) return null;
  let exponent = text.slice(at + 1);
  const negative = exponent.startsWith("-");
  if (negative || exponent.startsWith("+")) exponent = exponent.slice(1);
  const exp = BigInt(exponent);
  if (exp > 0xffffffffn) return null; // not a u32
  const e = Number(exp);
  if (negative) {
    if (e > MAX_SCALE || base.scale + e > MAX_SCALE) return null;
    return new Decimal(base.mantissa, base.scale + e);
  }
  if (e <= base.scale) return new Decimal(base.mantissa, base.scale - e);
  if (e > MAX_SCALE) return null;
  const product = reduce(base.mantissa * pow10(e), base.scale);
  if (product === null) return null;
  return normalize(product);
}

/** Drops trailing zeros after the point (the value is unchanged). */
function normalize(d) {
  let { mantissa, scale } = d;
  while (scale > 0 && mantissa % 10n === 0n) {
    mantissa /= 10n;
    scale -= 1;
  }
  return new Decimal(mantissa, scale);
}

/** Fits a mantissa into 96 bits by giving up places (half to even); `null` if it cannot. */
function reduce(mantissa, scale) {
  while (abs(mantissa) >= LIMIT && scale > 0) {
    const q = mantissa / 10n;
    const r = abs(mantissa % 10n);
    mantissa = r > 5n || (r === 5n && abs(q) % 2n === 1n) ? q + (mantissa < 0n ? -1n : 1n) : q;
    scale -= 1;
  }
  return abs(mantissa) >= LIMIT ? null : new Decimal(mantissa, scale);
}

/** `checked_add`: `null` on overflow. */
function add(a, b) {
  const scale = Math.max(a.scale, b.scale);
  const sum = a.mantissa * pow10(scale - a.scale) + b.mantissa * pow10(scale - b.scale);
  return reduce(sum, scale);
}

/** Half-up (away from zero on ties) to exactly 2 places: `12.3` -> `"12.30"`. */
function formatTotal(total) {
  let { mantissa, scale } = total;
  if (scale > 2) {
    const divisor = pow10(scale - 2);
    const q = mantissa / divisor;
    const r = abs(mantissa % divisor);
    mantissa = 2n * r >= divisor ? q + (mantissa < 0n ? -1n : 1n) : q;
    scale = 2;
  }
  while (scale < 2 && abs(mantissa * 10n) < LIMIT) {
    mantissa *= 10n;
    scale += 1;
  }
  return new Decimal(mantissa, scale).toString(); // a zero has no sign
}

/**
 * Whether `text` is a plain decimal number: `[+-]digits[.digits][e[+-]digits]`, with
 * digits on at least one side of the point.
 */
function isDecimalText(text) {
  const m = /^[+-]?([0-9]*)(?:\.([0-9]*))?(?:[eE][+-]?[0-9]+)?$/.exec(text);
  return m !== null && (m[1] !== "" || (m[2] ?? "") !== "");
}

/** The exact value of `cost` (its JSON text: a string or a number, not a float). */
function parseCost(raw) {
  let text = raw;
  // A JSON string; one with escapes fails in Rust too (it reads a borrowed &str).
  if (raw.startsWith('"')) text = raw.includes("\\") ? null : JSON.parse(raw);
  let parsed = null;
  if (text !== null && isDecimalText(text)) {
    parsed = /[eE]/.test(text) ? parseScientific(text) : parsePlain(text, false);
  }
  if (parsed === null) throw new Error(`field \`cost\`: ${raw} is not a valid decimal`);
  return parsed;
}

// ---------------------------------------------------------------------------------------
// The process function

/** The JSON text of a member read with `raw`, or undefined if it is absent or null. */
function rawMember(event, name) {
  const value = event[name];
  if (value === undefined || value === null) return undefined;
  const text = weir.rawText(value);
  return text === undefined ? JSON.stringify(value) : text === "null" ? undefined : text;
}

export const processFunction = weir.processFunction(
  class OrderTimeout {
    init(ctx) {
      this.timeout = ctx.configDuration("timeout", "1s");
      this.domain = ctx.configChoice("time", ["event", "processing"], "event") === "event" ? weir.EVENT_TIME : weir.PROCESSING_TIME;
      // One order so far: {orderId: JSON text, total: decimal text, items, timer}.
      this.orders = ctx.valueState("order");
      this.out = ctx.mainOutput();
    }

    processElement(ctx, el) {
      const event = el.json({ raw: ["orderId", "cost"] });
      if (event === null || typeof event !== "object" || Array.isArray(event)) {
        throw new Error(`input \`${el.input}\`: record is not a valid Purchase: expected an object`);
      }
      const orderId = rawMember(event, "orderId");
      if (orderId === undefined) throw new Error("record has no `orderId`");
      const item = event.item;
      if (item === undefined || item === null) throw new Error("field `item` is missing");
      if (typeof item !== "string") {
        throw new Error(`input \`${el.input}\`: record is not a valid Purchase: item: expected a string, got ${JSON.stringify(item)}`);
      }
      // A record whose cost is missing or not a decimal is the input's fault, not the
      // UDF's: rejected to the dead letters (with the reason), and the run goes on.
      const costText = rawMember(event, "cost");
      if (costText === undefined) throw new weir.Reject("field `cost` is missing");
      let cost;
      try {
        cost = parseCost(costText);
      } catch (e) {
        throw new weir.Reject(e.message);
      }

      let order = this.orders.get();
      if (order !== undefined) {
        ctx.deleteTimer(this.domain, order.timer);
      } else {
        order = { orderId, total: "0", items: [], timer: 0 };
      }
      const total = add(parsePlain(order.total, false), cost);
      if (total === null) throw new Error(`the total of order ${order.orderId} overflows`);
      order.total = total.toString();
      order.items.push(item);

      const from = this.domain === weir.EVENT_TIME ? el.timestamp : ctx.currentProcessingTime();
      order.timer = Math.min(from + this.timeout, weir.MAX_TIMESTAMP);
      ctx.registerTimer(this.domain, order.timer);
      this.orders.set(order);
    }

    onTimer(ctx, timer) {
      const order = this.orders.get();
      if (order === undefined) return;
      if (timer.domain !== this.domain || timer.timestamp !== order.timer) {
        // A timer this instance no longer owns (say, after a config change).
        return;
      }
      const total = formatTotal(parsePlain(order.total, false));
      this.out.emit({ orderId: weir.rawJson(order.orderId), total, items: order.items }, { key: ctx.keyBytes });
      this.orders.clear();
    }
  },
);

