"""Durations for configs, in whole milliseconds (the unit of Weir's timestamps).

Accepts what the Rust SDK's `weir_sdk::Duration` accepts, so one pipeline file works for
a UDF in either language: `"500ms"`, `"1s"`, `"5m"`, `"2h"`, `"1d"`, `"1h 30m"`,
`"1.5s"` (the `humantime` syntax: numbers with units, optionally separated by spaces), or
a bare integer of milliseconds (`"250"`). Negative durations and durations finer than a
millisecond are errors, with the same messages as the Rust SDK.
"""

import re

__all__ = ["ParseDurationError", "parse_duration", "format_duration"]

_NS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
    "w": 7 * 86_400_000_000_000,
    "M": 2_630_016_000_000_000,  # 30.44 days, as humantime
    "y": 31_557_600_000_000_000,  # 365.25 days
}
_UNITS = {}
for _unit, _names in {
    "ns": "nanos nsec ns",
    "us": "usec us µs",
    "ms": "millis msec ms",
    "s": "seconds second secs sec s",
    "m": "minutes minute min mins m",
    "h": "hours hour hr hrs h",
    "d": "days day d",
    "w": "weeks week wk wks w",
    "M": "months month M",
    "y": "years year yr yrs y",
}.items():
    for _name in _names.split():
        _UNITS[_name] = _unit

_ITEM = re.compile(r"\s*(\d+)(?:\.(\d+))?\s*([A-Za-zµ]*)")
_I64_MAX = 2**63 - 1


class ParseDurationError(ValueError):
    """A text that is not a duration; the message says why and what would be."""

    def __init__(self, text, reason):
        super().__init__(
            f"invalid duration {_quote(text)}: {reason} (expected e.g. \"500ms\", \"1s\", "
            f"\"5m\", \"2h\", \"1d\", or a whole number of milliseconds)"
        )


def _quote(text):
    """Quotes like Rust's `{:?}` does for plain text."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_duration(text):
    """Parses `text` (see the module docs) into milliseconds, an `int`."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ParseDurationError(str(text), "not text or a number of milliseconds")
    if isinstance(text, int):
        if text < 0:
            raise ParseDurationError(str(text), "durations cannot be negative")
        return text
    s = text.strip()
    if s and s.isascii() and s.isdigit():
        if int(s) > _I64_MAX:
            raise ParseDurationError(text, "too large")
        return int(s)
    if s.startswith("-"):
        raise ParseDurationError(text, "durations cannot be negative")
    if not s:
        raise ParseDurationError(text, "value was empty")
    total_ns = 0
    pos = 0
    while pos < len(s):
        m = _ITEM.match(s, pos)
        if not m:
            raise ParseDurationError(text, f"expected number at {pos}")
        whole, frac, name = m.groups()
        if not name:
            raise ParseDurationError(text, f"time unit needed, for example {whole}sec or {whole}ms")
        unit = _UNITS.get(name)
        if unit is None:
            raise ParseDurationError(
                text,
                f"unknown time unit {_quote(name)}, supported units: ns, us/µs, ms, sec, min, "
                "hours, days, weeks, months, years (and few variations)",
            )
        total_ns += int(whole) * _NS[unit]
        if frac:
            numerator, denominator = int(frac), 10 ** len(frac)
            # humantime keeps fractions of hours and longer in whole seconds.
            step = _NS[unit] if _NS[unit] < _NS["h"] else _NS[unit] // _NS["s"]
            part, rest = divmod(numerator * step, denominator)
            if rest or unit == "ns":
                raise ParseDurationError(
                    text,
                    "number is too large or cannot be represented without a lack of precision "
                    "(values below 1ns are not supported)",
                )
            total_ns += part if step == _NS[unit] else part * _NS["s"]
        pos = m.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    millis, rest = divmod(total_ns, 1_000_000)
    if rest:
        raise ParseDurationError(text, "finer than a millisecond")
    if millis > _I64_MAX:
        raise ParseDurationError(text, "too large")
    return millis


def format_duration(millis):
    """Formats milliseconds as the Rust SDK does (`5m`, `1h 30m`, `1s 500ms`, `0s`)."""
    if millis == 0:
        return "0s"
    secs, ms = divmod(millis, 1000)
    years, secs = divmod(secs, 31_557_600)
    months, secs = divmod(secs, 2_630_016)
    days, secs = divmod(secs, 86_400)
    parts = []
    for value, name in ((years, "year"), (months, "month"), (days, "day")):
        if value:
            parts.append(f"{value}{name}{'s' if value > 1 else ''}")
    for value, name in ((secs // 3600, "h"), (secs // 60 % 60, "m"), (secs % 60, "s"), (ms, "ms")):
        if value:
            parts.append(f"{value}{name}")
    return " ".join(parts)
