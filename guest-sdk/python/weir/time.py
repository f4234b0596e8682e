"""UTC formatting and parsing of millisecond timestamps, as UDF outputs usually need.

The same text as the Rust SDK's `weir_sdk::time`, for every `i64`, so a Python UDF's
output matches a Rust UDF's byte for byte. Written with integer arithmetic (Howard
Hinnant's `civil_from_days` / `days_from_civil`) rather than `datetime`, which stops at
year 9999 and, inside the sandbox, must never be asked for "now" (the clocks are frozen).
"""

from .duration import _quote

__all__ = ["format_millis", "format_seconds", "parse_millis"]

_MILLIS_PER_DAY = 86_400_000


def _civil(ms):
    """(year, month, day, hour, minute, second, milli) of `ms` in UTC."""
    days, of_day = divmod(ms, _MILLIS_PER_DAY)  # floor division, as Rust's div_euclid
    z = days + 719_468  # days since 0000-03-01, so leap days end the (shifted) year
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return (
        year,
        month,
        day,
        of_day // 3_600_000,
        of_day // 60_000 % 60,
        of_day // 1_000 % 60,
        of_day % 1_000,
    )


def _date_time(c):
    year = f"{c[0]:04d}" if 0 <= c[0] <= 9999 else f"{c[0]:+05d}"
    return f"{year}-{c[1]:02d}-{c[2]:02d} {c[3]:02d}:{c[4]:02d}:{c[5]:02d}"


# The date part of the last day formatted: consecutive records are mostly on one day,
# and working out the date is most of the cost of `format_millis`.
_last_day = [None, ""]


def format_millis(ms):
    """`YYYY-MM-DD HH:MM:SS.mmm` in UTC, e.g. `2026-11-29 10:00:00.123`."""
    seconds, milli = divmod(ms, 1000)
    last = _last_second
    if last[0] != seconds:  # records in one second share everything but the milliseconds
        days, of_day = divmod(ms, _MILLIS_PER_DAY)
        if _last_day[0] != days:
            _last_day[:] = days, _date_time(_civil(days * _MILLIS_PER_DAY))[:-8]
        of_day //= 1000
        two = _TWO_DIGITS
        last[0] = seconds
        last[1] = (
            f"{_last_day[1]}{two[of_day // 3600]}:{two[of_day // 60 % 60]}:{two[of_day % 60]}."
        )
    return last[1] + _THREE_DIGITS[milli]


# The text up to the milliseconds of the last second formatted, and the digits of the
# hours, minutes, seconds and milliseconds: `format_millis` is run for most records.
_last_second = [None, ""]
_TWO_DIGITS = [f"{i:02d}" for i in range(100)]
_THREE_DIGITS = [f"{i:03d}" for i in range(1000)]


def format_seconds(ms):
    """`YYYY-MM-DD HH:MM:SS` in UTC (milliseconds dropped, rounding toward the past)."""
    return _date_time(_civil(ms))


def _days_from_civil(year, month, day):
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _days_in_month(year, month):
    if month in (4, 6, 9, 11):
        return 30
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 31


def parse_millis(text):
    """Parses `YYYY-MM-DD HH:MM:SS[.fff]` (or with `T` between date and time, and an
    optional trailing `Z`) as UTC, into milliseconds since the epoch. Digits beyond
    milliseconds are truncated. Raises `ValueError` with the Rust SDK's messages."""

    def fail(why):
        return ValueError(
            f"invalid timestamp {_quote(text)}: {why} (expected YYYY-MM-DD HH:MM:SS[.fff])"
        )

    s = text.strip()
    if s.endswith("Z"):
        s = s[:-1]
    sep = min((i for i in (s.find(" "), s.find("T")) if i >= 0), default=-1)
    if sep < 0:
        raise fail("no time of day")
    date, time_of_day = s[:sep], s[sep + 1 :]
    sign = 1
    if date.startswith("-"):
        sign, date = -1, date[1:]
    elif date.startswith("+"):
        date = date[1:]
    d = date.split("-")
    if len(d) != 3:
        raise fail("bad date")
    hms, _, frac = time_of_day.partition(".")
    t = hms.split(":")
    if len(t) != 3:
        raise fail("bad time of day")

    def num(part, what):
        if not part or not (part.isascii() and part.isdigit()):
            raise fail(f"bad {what}")
        return int(part)

    year = sign * num(d[0], "year")
    month, day = num(d[1], "month"), num(d[2], "day")
    hour, minute, second = num(t[0], "hour"), num(t[1], "minute"), num(t[2], "second")
    if not 1 <= month <= 12:
        raise fail("month out of range")
    if not 1 <= day <= _days_in_month(year, month):
        raise fail("day out of range")
    if hour > 23 or minute > 59 or second > 59:
        raise fail("time of day out of range")
    milli = 0
    if frac:
        if not (frac.isascii() and frac.isdigit()):
            raise fail("bad fraction of a second")
        milli = int((frac + "00")[:3])
    ms = _days_from_civil(year, month, day) * _MILLIS_PER_DAY + (
        (hour * 60 + minute) * 60 + second
    ) * 1_000 + milli
    if not -(2**63) <= ms < 2**63:
        raise fail("out of range")
    return ms
