"""Time helpers, in UTC (docs/engine.md, "Events"). Pure: no clock here.

Instants are integer milliseconds since the Unix epoch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from creative_memory.engine.errors import ValidationError
from creative_memory.engine.text import preview

MS_PER_DAY = 86_400_000

#: Digits are ASCII ``[0-9]`` (``\\d`` would take any Unicode decimal digit). A year is four
#: digits or, as ECMAScript's expanded years, a sign and six (what :func:`format_ts` writes
#: outside 0000–9999, so that everything it writes reads back).
_TS_RE = re.compile(
    r"(?P<y>[0-9]{4}|[+-][0-9]{6})(?:-(?P<mo>[0-9]{2})(?:-(?P<d>[0-9]{2})"
    r"(?:T(?P<h>[0-9]{2}):(?P<mi>[0-9]{2})(?::(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]+))?)?"
    r"(?P<z>Z|[+-][0-9]{2}:[0-9]{2})?)?)?)?"
)
#: :data:`_TS_RE` as a JSON Schema pattern (ECMA-262: unnamed groups) for a value its
#: reader strips first (``as_of``, ``paused_until``): surrounding white space is allowed.
TS_PATTERN = r"^\s*" + re.sub(r"\(\?P<\w+>", "(?:", _TS_RE.pattern) + r"\s*$"
_NORMALISED_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
#: The shapes hosts send (``…:SSZ``, ``…:SS.mmmZ``): read by position, without the groups
#: of the full grammar.
_COMMON_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{3})?Z")
#: The instants an ECMAScript ``Date`` holds: ±100,000,000 days around the epoch.
MAX_INSTANT_MS = 8_640_000_000_000_000

_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400  # Python's floor division: the algorithm's era for negative years too
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097  # floor division, as the algorithm's era is (before 0000-03-01 too)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return y + (m <= 2), m, d


def try_parse_ts(text: str) -> int | None:
    """Parse an ISO 8601 / RFC 3339 date or date-time to epoch ms, or ``None`` if invalid.

    Grammar: ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` (the year may be an expanded one,
    ``±YYYYYY``, as :func:`format_ts` writes outside 0000–9999), optionally followed by
    ``THH:MM``, ``THH:MM:SS`` or ``THH:MM:SS.f…`` and an optional zone ``Z`` or ``±HH:MM``.
    No zone means UTC. Only the first three fraction digits count. ``T24:00`` (with zero
    seconds and fraction) means the next midnight. Digits are ASCII; an instant an
    ECMAScript ``Date`` cannot hold (beyond :data:`MAX_INSTANT_MS`) is invalid.
    """
    ms = _PARSED.get(text, _UNSEEN)
    if ms is not _UNSEEN:
        return ms  # type: ignore[return-value]
    if (len(text) == 20 or len(text) == 24) and _COMMON_RE.fullmatch(text):
        ms = _parse_common(text)
    else:
        ms = _parse_grammar(text)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[text] = ms
    return ms


#: The last timestamps :func:`try_parse_ts` read and what it made of them: an ingested
#: event's timestamp is read at the capture boundary, by the adapter and by the engine's
#: event builder, each of which must validate what it is given.
_PARSED: dict[str, int | None] = {}
_PARSED_MAX = 512
_UNSEEN = object()


def _parse_common(text: str) -> int | None:
    """:func:`try_parse_ts` of ``YYYY-MM-DDTHH:MM:SSZ`` or ``…:SS.mmmZ`` (shape checked)."""
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    millis = int(text[20:23]) if len(text) == 24 else 0
    if not 1 <= month <= 12:
        return None
    dim = 29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1]
    if not 1 <= day <= dim or minute > 59 or second > 59:
        return None
    if hour > 23 and (hour > 24 or minute or second or millis):
        return None
    days = _days_from_civil(year, month, day)
    return (((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + millis


def _parse_grammar(text: str) -> int | None:
    """:func:`try_parse_ts` by the full grammar."""
    m = _TS_RE.fullmatch(text)
    if m is None or m["y"] == "-000000":  # ECMAScript: minus zero is not a year
        return None
    year = int(m["y"])
    month = int(m["mo"]) if m["mo"] else 1
    day = int(m["d"]) if m["d"] else 1
    if not 1 <= month <= 12:
        return None
    dim = 29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1]
    if not 1 <= day <= dim:
        return None
    hour = int(m["h"]) if m["h"] else 0
    minute = int(m["mi"]) if m["mi"] else 0
    second = int(m["s"]) if m["s"] else 0
    frac = m["f"] or ""
    millis = int((frac + "00")[:3]) if frac else 0
    if minute > 59 or second > 59:
        return None
    if hour == 24:
        if minute or second or (frac and int(frac) != 0):
            return None
    elif hour > 23:
        return None
    offset_min = 0
    zone = m["z"]
    if zone and zone != "Z":
        oh, om = int(zone[1:3]), int(zone[4:6])
        if oh > 23 or om > 59:
            return None
        offset_min = (oh * 60 + om) * (1 if zone[0] == "+" else -1)
    days = _days_from_civil(year, month, day)
    ms = (((days * 24 + hour) * 60 + minute - offset_min) * 60 + second) * 1000 + millis
    return ms if -MAX_INSTANT_MS <= ms <= MAX_INSTANT_MS else None


def parse_ts(text: object, field: str = "timestamp") -> int:
    """Like :func:`try_parse_ts` but raises :class:`ValidationError` naming ``field``."""
    if not isinstance(text, str):
        raise ValidationError(
            field, f"{field} must be an ISO 8601 string, got {type(text).__name__}"
        )
    ms = try_parse_ts(text)
    if ms is None:
        raise ValidationError(field, f'{field} "{text}" is not a valid ISO date string')
    return ms


def format_ts(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC (JS ``toISOString``)."""
    global _LAST_FORMATTED
    last = _LAST_FORMATTED
    if ms == last[0]:
        return last[1]
    days, rem = divmod(ms, MS_PER_DAY)
    date = _DATES.get(days)
    if date is None:
        y, mo, d = _civil_from_days(days)
        ys = f"{y:04d}" if 0 <= y <= 9999 else f"{'+' if y > 0 else '-'}{abs(y):06d}"
        date = f"{ys}-{mo:02d}-{d:02d}T"
        if len(_DATES) >= 4096:
            _DATES.clear()
        _DATES[days] = date
    secs, millis = divmod(rem, 1000)
    h, secs = divmod(secs, 3600)
    mi, s = divmod(secs, 60)
    text = f"{date}{h:02d}:{mi:02d}:{s:02d}.{millis:03d}Z"
    _LAST_FORMATTED = (ms, text)
    return text


_DATES: dict[int, str] = {}  # days since the epoch → "YYYY-MM-DDT" (format_ts)
#: The last instant format_ts wrote and the last timestamp ts_to_ms read, with their
#: results (one tuple each, replaced whole: safe across threads). The events of one batch,
#: made at one instant, format and read the same timestamp one after the other.
_LAST_FORMATTED: tuple[int, str] = (0, "1970-01-01T00:00:00.000Z")
_LAST_READ: tuple[str, int] = ("1970-01-01T00:00:00.000Z", 0)


_DATE_SHIFT_CACHE: dict[tuple[str, int], str] = {}


def add_days_ts(text: str, k: int) -> str:
    """``format_ts(ts_to_ms(text) + k days)`` for a valid timestamp, fast for normalised
    input: whole days leave the time of day unchanged in UTC, so only the date moves (and
    date shifts are memoised — logs have many events per day; the last call is remembered
    with its result, as in :func:`ts_to_ms`)."""
    global _LAST_SHIFTED
    last = _LAST_SHIFTED
    if text == last[0] and k == last[1]:
        return last[2]
    if len(text) == 24 and _NORMALISED_RE.fullmatch(text):
        key = (text[:10], k)
        date = _DATE_SHIFT_CACHE.get(key)
        if date is None:
            days = _days_from_civil(int(text[0:4]), int(text[5:7]), int(text[8:10])) + k
            date = format_ts(days * MS_PER_DAY)[:-14]
            if len(_DATE_SHIFT_CACHE) > 4096:
                _DATE_SHIFT_CACHE.clear()
            _DATE_SHIFT_CACHE[key] = date
        shifted = date + text[10:]
        _LAST_SHIFTED = (text, k, shifted)
        return shifted
    return format_ts(ts_to_ms(text) + k * MS_PER_DAY)


#: (text, k, add_days_ts(text, k)) of the last call
_LAST_SHIFTED: tuple[str, int, str] = ("1970-01-01T00:00:00.000Z", 0, "1970-01-01T00:00:00.000Z")


_DAYS_CACHE: dict[str, int] = {}
_MINUTES_CACHE: dict[str, int] = {}


def ts_to_ms(text: str) -> int:
    """Epoch ms of a timestamp already known to be valid (normalised or not). The day
    number of a normalised date and the minute of the day of its ``HH:MM`` are memoised
    (a log has many events per day), and its seconds and milliseconds read as one number
    (``SS`` and ``mmm`` side by side are ``SS × 1000 + mmm``).

    Only a date and an ``HH:MM`` of a timestamp that matched the normalised form enter the
    memos, so when both are there the rest of the form is checked by hand — the separators,
    and ``str.isascii`` with ``str.isdecimal`` for the digits (the pattern's ``[0-9]``) —
    instead of by the pattern (docs/performance.md, "Cold derivation (third pass)"). The
    last timestamp read is remembered with its result (:data:`_LAST_READ`)."""
    global _LAST_READ
    last = _LAST_READ
    if text == last[0]:
        return last[1]
    if len(text) == 24:
        days = _DAYS_CACHE.get(text[:10])
        minutes = _MINUTES_CACHE.get(text[11:16])
        if days is not None and minutes is not None and text[10] == "T":
            sms = text[17:19] + text[20:23]
            if (
                text[16] == ":" and text[19] == "." and text[23] == "Z"
                and sms.isascii() and sms.isdecimal()
            ):  # fmt: skip
                ms = (days * 1440 + minutes) * 60_000 + int(sms)
                _LAST_READ = (text, ms)
                return ms
    if _NORMALISED_RE.fullmatch(text):
        date = text[:10]
        days = _DAYS_CACHE.get(date)
        if days is None:
            days = _days_from_civil(int(text[0:4]), int(text[5:7]), int(text[8:10]))
            if len(_DAYS_CACHE) > 4096:
                _DAYS_CACHE.clear()
            _DAYS_CACHE[date] = days
        hhmm = text[11:16]
        minutes = _MINUTES_CACHE.get(hhmm)
        if minutes is None:
            minutes = int(text[11:13]) * 60 + int(text[14:16])
            if len(_MINUTES_CACHE) > 4096:
                _MINUTES_CACHE.clear()
            _MINUTES_CACHE[hhmm] = minutes
        return (days * 1440 + minutes) * 60_000 + int(text[17:19] + text[20:23])
    parsed = try_parse_ts(text)
    if parsed is None:  # pragma: no cover - callers only pass validated timestamps
        raise ValidationError("timestamp", f'timestamp "{text}" is not a valid ISO date string')
    return parsed


#: Positions of the digits and of the separators in ``YYYY-MM-DDTHH:MM:SS.mmmZ``.
_DIGIT_AT = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22)
_SEPARATOR_AT = ((4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "."), (23, "Z"))


def ts_to_ms_normalised(texts: Sequence[str]) -> list[int | None]:
    """:func:`ts_to_ms` of each of ``texts`` that is a normalised timestamp written in
    ASCII digits, else ``None`` (every one ``None`` unless all are 24 ASCII characters):
    one pass over the block with numpy instead of one call per text, for a fold of many
    events (docs/performance.md, "Cold derivation (third pass)"). The same integers: the
    day number of :func:`_days_from_civil` (its floor divisions are numpy's on int64, its
    operands far from overflow for 4-digit years), then ``(days × 1440 + minutes) ×
    60 000 + SS × 1000 + mmm``."""
    import numpy as np  # a fold of many events; the fits that follow import it anyway

    n = len(texts)
    joined = "".join(texts)
    if not n or set(map(len, texts)) != {24} or not joined.isascii():
        return [None] * n
    chars = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(n, 24)
    digits = chars[:, list(_DIGIT_AT)].astype(np.int64) - 48
    ok = ((digits >= 0) & (digits <= 9)).all(axis=1)
    for at, sep in _SEPARATOR_AT:
        ok &= chars[:, at] == ord(sep)
    d = digits.T
    y = d[0] * 1000 + d[1] * 100 + d[2] * 10 + d[3]
    m = d[4] * 10 + d[5]
    day = d[6] * 10 + d[7]
    # _days_from_civil(y, m, day)
    y = y - (m <= 2)
    era = y // 400  # numpy floors, as _days_from_civil
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    minutes = (d[8] * 10 + d[9]) * 60 + d[10] * 10 + d[11]
    sms = d[12] * 10_000 + d[13] * 1000 + d[14] * 100 + d[15] * 10 + d[16]
    out: list[int | None] = ((days * 1440 + minutes) * 60_000 + sms).tolist()
    if not ok.all():
        for i in np.flatnonzero(~ok).tolist():
            out[i] = None
    return out


def normalise_ts(text: object, field: str = "timestamp") -> str:
    """Validate and normalise a timestamp string to ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    return format_ts(parse_ts(text, field))


def check_normalised_ts(text: object, field: str) -> str:
    """``text`` if it is a timestamp as the store writes it (:func:`format_ts`: UTC, with
    milliseconds), else a :class:`ValidationError` naming ``field`` — for a stored time read
    from outside (an archive), which must be what the store itself would have written."""
    normalised = normalise_ts(text, field)
    if normalised != text:
        raise ValidationError(
            field, f'{field} {preview(text)} is not normalised: the store writes "{normalised}"'
        )
    return normalised


def add_days(ms: int, k: int) -> int:
    """``add_days`` under UTC: exactly ``k × 86 400 000`` ms later (docs/engine.md, "Events")."""
    return ms + k * MS_PER_DAY


def days_between(a_ms: int, b_ms: int) -> float:
    """Days from ``a_ms`` to ``b_ms`` (fractional)."""
    return (b_ms - a_ms) / MS_PER_DAY


def datetime_to_ms(dt: datetime, field: str = "now") -> int:
    """An aware ``datetime`` to epoch ms, floored to the millisecond."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValidationError(field, f"{field} must be a timezone-aware datetime")
    delta = dt.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def instant_to_ms(value: object, field: str = "now") -> int:
    """Accept an ISO string or an aware ``datetime`` and return epoch ms."""
    if isinstance(value, datetime):
        return datetime_to_ms(value, field)
    return parse_ts(value, field)


def fixed2(x: float) -> str:
    """JS ``toFixed(2)``: half-up rounding of the exact binary value."""
    return str(Decimal(x).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def u16len(s: str) -> int:
    """Length in UTF-16 code units (JS ``.length``)."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2
