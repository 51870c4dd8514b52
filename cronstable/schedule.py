"""Cron expression engine for cronstable: parsing and next-fire computation.

This module is pure: no I/O, no asyncio, and it imports nothing else from
cronstable.  Everything is computed in the wall clock of a given ``tzinfo``
(a :class:`zoneinfo.ZoneInfo` or a fixed-offset :class:`datetime.timezone`).

Syntax
======

A schedule is written in one of these forms:

* 5 fields: ``minute hour day-of-month month day-of-week`` (second is 0,
  year is ``*``);
* 6 fields: the 5 above followed by ``year``;
* 7 fields: ``second minute hour day-of-month month day-of-week year`` (the
  convention of yacron and supercronic);
* an alias, case-insensitive: ``@yearly``/``@annually`` (``0 0 1 1 *``),
  ``@monthly`` (``0 0 1 * *``), ``@weekly`` (``0 0 * * 0``),
  ``@daily``/``@midnight`` (``0 0 * * *``), ``@hourly`` (``0 * * * *``) and
  ``@reboot`` (fires once when the daemon starts; :meth:`Schedule.next_fire`
  returns ``None`` for it);
* a mapping (yacron's form) with the keys ``second`` (default ``"0"``),
  ``minute``, ``hour``, ``dayOfMonth``, ``month``, ``dayOfWeek`` and ``year``;
  a missing key means ``*`` and values are strings or integers.  yacron
  rejects ``second`` and ignores ``year``; cronstable honours both.

Field ranges: second 0-59, minute 0-59, hour 0-23, day-of-month 1-31, month
1-12 (or ``JAN``..``DEC``), day-of-week 0-7 (0 and 7 are Sunday, or
``SUN``..``SAT``), year 1970-2099.  Names are case-insensitive, also inside
ranges (``mon-fri``).

Each field is a comma-separated list of items: ``*``, a number or name,
``a-b``, ``a-b/n``, ``*/n`` and ``a/n`` (the same as ``a-MAX/n``).  ``?`` is the
same as ``*`` and is accepted only as the whole day-of-month or day-of-week
field.  A step must be at least 1 and at most the number of values of the
field (``*/90`` in the minute field is an error rather than a silent
``0``).

Day-of-month specials: ``L`` (last day of the month), ``L-n`` (n days before
the last day, n 1-30; no fire in a month too short for it), ``LW`` (last
weekday, Monday to Friday, of the month), ``L-nW`` (the weekday nearest
day ``L-n``) and ``nW`` (the weekday nearest to
day n, never crossing into another month: ``1W`` on a Saturday fires on
Monday the 3rd, ``31W`` on a Sunday fires on Friday the 29th; no fire in a
month that has no day n).  Day-of-week specials: ``nL`` (the last weekday n
of the month, ``5L`` is the last Friday) and ``n#k`` (the k-th weekday n of
the month, k 1-5).  Specials may be mixed with other items in a list.

Wrap-around ranges (choice)
---------------------------

A range whose start is greater than its end wraps around in the cyclic
fields second, minute, hour, month and day-of-week: ``22-2`` in the hour
field is 22, 23, 0, 1, 2; ``fri-mon`` is Friday to Monday; ``nov-feb`` is
November to February.  A step walks the wrapped sequence (``22-2/2`` is
22, 0, 2).  Day-of-week wraps modulo 7 (``7`` is read as ``0`` in a
reversed range).  In day-of-month (months differ in length) and year (not
cyclic) a reversed range is an error.

Day-of-month and day-of-week: Vixie cron's rule
-----------------------------------------------

A field is *restricted* when its text does not start with ``*`` (``?``
counts as ``*``).  When BOTH day-of-month and day-of-week are restricted, a
day matches when EITHER matches (``0 0 1,15 * mon`` fires on the 1st, the
15th and every Monday).  Otherwise both must match, which is trivial for the
unrestricted one; note that ``*/2`` starts with ``*`` and so is unrestricted
in this sense, exactly as in Vixie cron (``0 0 */2 * mon`` fires on Mondays
that fall on odd days).  yacron ANDs the two fields instead, so a yacron
schedule restricting both fields fires more often under cronstable.

Schedules that can never fire are rejected at parse time when that is cheap
and certain: a day-of-month that exists in none of the allowed months while
day-of-week is unrestricted (``0 0 30 2 *``, ``0 0 31 4,6 *``).  A year list
entirely in the past is not an error; ``next_fire`` then returns ``None``.

Canonical text
--------------

:attr:`Schedule.text` is ``@reboot``, or the 7-field form
``S M H DOM MON DOW YEAR`` (an alias is expanded: ``@daily`` and ``0 0 * * *``
have the same text) separated by single spaces, with
names and the specials ``L``/``W`` upper-cased, numbers without leading
zeros and ``?`` written as ``*``: ``"*/5 * * * *"`` becomes
``"0 */5 * * * * *"``.  The mapping form gives the same text as the
equivalent string.  Lists are not reordered (``1,2,3`` and ``1-3`` stay
different texts although they describe the same schedule).

Daylight saving time: Vixie cron's rule
=======================================

Fires are computed in the wall clock of ``tz``.  A schedule is a *wildcard*
schedule (:attr:`Schedule.is_wildcard`) when the text of its minute or hour
field starts with ``*``, exactly Vixie cron's test (``*``, ``*/n``,
``*/5,7``).  A field that covers the whole range without starting with ``*``
(``0-59``, ``0/5``, ``0-23/2``, ``7,*/5``) does not make a wildcard: in
America/New_York on 2016-03-13, ``0 0,30 0-23/2 * * * *`` is fixed, so its
02:00 slot (in the gap) fires at 03:00-04:00, as in Vixie cron and Cronos.
Every other schedule is *fixed*.

* A wildcard schedule follows real time.  A wall time that does not exist
  (spring-forward gap) does not fire; a wall time that occurs twice (fall
  back) fires twice, at each of its real instants, in real-time order.
* A fixed schedule fires once per matching wall-clock slot.  A slot inside a
  gap fires once, at the first real instant after the gap (New York,
  2026-03-08, ``30 2 * * *`` fires at 03:00-04:00; several slots in the gap
  collapse into that one fire, as do a gap slot and a slot at the gap's end).
  A slot inside a repeated interval fires once, at its first occurrence
  (New York, 2026-11-01, ``30 1 * * *`` fires at 01:30-04:00 and not at
  01:30-05:00).

The search is field by field with carries (no minute-by-minute scanning)
and gives up after 2099, so it always terminates, also in zones with
30-minute shifts or whole skipped days (Pacific/Apia, 2011-12-30).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Final, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["Schedule", "ScheduleError", "name_hash", "parse_schedule", "uses_h"]


class ScheduleError(ValueError):
    """An invalid schedule; the message names the problem, with no location."""


# --------------------------------------------------------------------------
# Field descriptions
# --------------------------------------------------------------------------

_MONTH_NAMES: Final = (
    "JAN",
    "FEB",
    "MAR",
    "APR",
    "MAY",
    "JUN",
    "JUL",
    "AUG",
    "SEP",
    "OCT",
    "NOV",
    "DEC",
)
_DOW_NAMES: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_FULL: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
# Longest possible length of each month (index 1-12), February in a leap year.
_MAX_MONTH_DAYS: Final = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTH_DAYS: Final = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class _Field(NamedTuple):
    name: str
    lo: int
    hi: int
    names: Mapping[str, int] | None
    cyclic: bool
    span: int  # the largest useful step
    full: int  # bitmask of the whole range
    lookup: Mapping[str, tuple[int, str]]  # fast path: canonical number or name -> (value, canon)


def _bits(lo: int, hi: int) -> int:
    """Bitmask with bits lo..hi set."""
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


def _make_field(
    name: str, lo: int, hi: int, names: tuple[str, ...], first: int, cyclic: bool
) -> _Field:
    named = {n: i + first for i, n in enumerate(names)}
    lookup = {str(v): (v, str(v)) for v in range(lo, hi + 1)}
    for n, v in named.items():
        lookup[n] = lookup[n.lower()] = (v, n)
    span = 7 if name == "day-of-week" else hi - lo + 1
    return _Field(name, lo, hi, named or None, cyclic, span, _bits(lo, hi), lookup)


_SECOND: Final = _make_field("second", 0, 59, (), 0, True)
_MINUTE: Final = _make_field("minute", 0, 59, (), 0, True)
_HOUR: Final = _make_field("hour", 0, 23, (), 0, True)
_DOM: Final = _make_field("day-of-month", 1, 31, (), 0, False)
_MONTH: Final = _make_field("month", 1, 12, _MONTH_NAMES, 1, True)
_DOW: Final = _make_field("day-of-week", 0, 7, _DOW_NAMES, 0, True)
_YEAR: Final = _make_field("year", 1970, 2099, (), 0, False)

_YEAR_MIN: Final = 1970
_YEAR_MAX: Final = 2099
_ALL_YEARS: Final = _bits(0, _YEAR_MAX - _YEAR_MIN)
_ALL_DAYS: Final = _bits(1, 31)
_WEEKLY: Final = (1 << 0) | (1 << 7) | (1 << 14) | (1 << 21) | (1 << 28)
_FULL_DAYS: Final = tuple(_bits(1, n) if n else 0 for n in range(32))


def _build_dow_masks() -> tuple[tuple[int, ...], ...]:
    """_DOW_MASKS[first_weekday][weekday_bits] -> day-of-month bitmask (days 1-31)."""
    table = []
    for fw in range(7):
        row = []
        for wbits in range(128):
            m = 0
            for w in range(7):
                if wbits >> w & 1:
                    m |= _WEEKLY << (((w - fw) % 7) + 1)
            row.append(m & _ALL_DAYS)
        table.append(tuple(row))
    return tuple(table)


_DOW_MASKS: Final = _build_dow_masks()
_SAKAMOTO: Final = (0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4)


def _weekday(y: int, m: int, d: int) -> int:
    """Day of the week, 0 = Sunday."""
    if m < 3:
        y -= 1
    return (y + y // 4 - y // 100 + y // 400 + _SAKAMOTO[m - 1] + d) % 7


def _month_len(y: int, m: int) -> int:
    if m == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0):
        return 29
    return _MONTH_DAYS[m]


def _low(r: int) -> int:
    """Index of the lowest set bit of a non-zero int."""
    return (r & -r).bit_length() - 1


# --------------------------------------------------------------------------
# Compiled schedule
# --------------------------------------------------------------------------


class _Spec:
    """The compiled fields of a schedule (bitmasks), and the wall-clock search."""

    __slots__ = (
        "day_or",
        "dom_bits",
        "dom_last",
        "dom_lw",
        "dom_w",
        "dow_all",
        "dow_bits",
        "dow_last",
        "dow_nth",
        "hours",
        "minutes",
        "months",
        "seconds",
        "years",
    )

    def __init__(
        self,
        seconds: int,
        minutes: int,
        hours: int,
        dom_bits: int,
        dom_last: tuple[int, ...],
        dom_lw: tuple[int, ...],
        dom_w: tuple[int, ...],
        months: int,
        dow_bits: int,
        dow_last: int,
        dow_nth: tuple[tuple[int, int], ...],
        years: int,
        day_or: bool,
    ) -> None:
        self.seconds = seconds
        self.minutes = minutes
        self.hours = hours
        self.dom_bits = dom_bits
        self.dom_last = dom_last
        self.dom_lw = dom_lw
        self.dom_w = dom_w
        self.months = months
        self.dow_bits = dow_bits
        self.dow_last = dow_last
        self.dow_nth = dow_nth
        self.dow_all = dow_bits == 0x7F and not dow_last and not dow_nth
        self.years = years
        self.day_or = day_or

    def day_mask(self, y: int, m: int) -> int:
        """Bitmask of the matching days (bits 1-31) of month m of year y."""
        nd = _month_len(y, m)
        dom = self.dom_bits
        if self.dom_last:
            for off in self.dom_last:
                if nd - off >= 1:
                    dom |= 1 << (nd - off)
        if self.dom_lw or self.dom_w:
            wd_last = _weekday(y, m, nd)
            wanted = [nd - off for off in self.dom_lw if nd - off >= 1]
            wanted.extend(n for n in self.dom_w if n <= nd)
            for n in wanted:  # the weekday nearest day n, never leaving the month
                wd = (wd_last - (nd - n)) % 7
                if wd == 6:  # Saturday: Friday before, or Monday after the 1st
                    d = n - 1 if n > 1 else n + 2
                elif wd == 0:  # Sunday: Monday after, or Friday before the last
                    d = n + 1 if n < nd else n - 2
                else:
                    d = n
                dom |= 1 << d
        if self.dow_all:
            dow = _ALL_DAYS
        else:
            fw = _weekday(y, m, 1)
            dow = _DOW_MASKS[fw][self.dow_bits]
            if self.dow_last:
                wd_last = (fw + nd - 1) % 7
                for w in range(7):
                    if self.dow_last >> w & 1:
                        dow |= 1 << (nd - ((wd_last - w) % 7))
            for w, k in self.dow_nth:
                d = ((w - fw) % 7) + 1 + 7 * (k - 1)
                if d <= nd:
                    dow |= 1 << d
        mask = (dom | dow) if self.day_or else (dom & dow)
        return mask & _FULL_DAYS[nd]

    def next_wall(
        self, y: int, mo: int, d: int, h: int, mi: int, s: int
    ) -> tuple[int, int, int, int, int, int] | None:
        """The first matching wall time >= the given one (which may overflow, e.g. s=60)."""
        seconds = self.seconds
        minutes = self.minutes
        hours = self.hours
        months = self.months
        years = self.years
        cached_key = -1
        cached_mask = 0
        while True:
            if y < _YEAR_MIN:
                y, mo, d, h, mi, s = _YEAR_MIN, 1, 1, 0, 0, 0
            r = years >> (y - _YEAR_MIN)
            if not r:
                return None
            if not r & 1:
                y += _low(r)
                mo, d, h, mi, s = 1, 1, 0, 0, 0
            r = months >> mo
            if not r:
                y += 1
                mo, d, h, mi, s = 1, 1, 0, 0, 0
                continue
            if not r & 1:
                mo += _low(r)
                d, h, mi, s = 1, 0, 0, 0
            key = y * 16 + mo
            if key != cached_key:
                cached_key = key
                cached_mask = self.day_mask(y, mo)
            r = cached_mask >> d
            if not r:
                mo += 1
                d, h, mi, s = 1, 0, 0, 0
                continue
            if not r & 1:
                d += _low(r)
                h, mi, s = 0, 0, 0
            r = hours >> h
            if not r:
                d += 1
                h, mi, s = 0, 0, 0
                continue
            if not r & 1:
                h += _low(r)
                mi, s = 0, 0
            r = minutes >> mi
            if not r:
                h += 1
                mi, s = 0, 0
                continue
            if not r & 1:
                mi += _low(r)
                s = 0
            r = seconds >> s
            if not r:
                mi += 1
                s = 0
                continue
            return (y, mo, d, h, mi, s + _low(r))


# --------------------------------------------------------------------------
# Time helpers
# --------------------------------------------------------------------------

_UTC: Final = UTC
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=_UTC)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)
_SEC: Final = timedelta(seconds=1)
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
# Instants outside [_MIN_T, _MAX_T] cannot matter: walls are 1970-2099 and
# offsets are within +-1 day.
_MIN_T: Final = (datetime(1969, 12, 30, tzinfo=_UTC) - _EPOCH) // _SEC
_MAX_T: Final = (datetime(2100, 1, 2, tzinfo=_UTC) - _EPOCH) // _SEC
_END_T: Final = (datetime(2100, 1, 1, tzinfo=_UTC) - _EPOCH) // _SEC  # @every stops here

_Wall = tuple[int, int, int, int, int, int]


def _wall_epoch(w: _Wall) -> int:
    """Seconds since 1970-01-01 00:00 of a wall time, as if it were UTC."""
    y, mo, d, h, mi, s = w
    return (date(y, mo, d).toordinal() - _EPOCH_ORDINAL) * 86400 + h * 3600 + mi * 60 + s


def _epoch_wall(t: int) -> _Wall:
    dt = _EPOCH_NAIVE + timedelta(seconds=t)
    return (dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second)


def _offset(tz: tzinfo, t: int) -> int:
    """UTC offset in seconds of tz at the real instant t."""
    off = datetime.fromtimestamp(t, tz).utcoffset()
    return 0 if off is None else off // _SEC


def _transition(tz: tzinfo, lo: int, hi: int) -> int:
    """The first instant in (lo, hi] whose offset differs from the offset at lo.

    The offset at hi must differ from the offset at lo (one transition).
    """
    base = _offset(tz, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(tz, mid) == base:
            lo = mid
        else:
            hi = mid
    return hi


def _offsets(dt: datetime) -> tuple[int, int]:
    """UTC offsets (seconds) of a wall time with fold=0 and fold=1.

    Equal: the wall time exists once.  fold=0 greater: it is repeated (fall
    back).  fold=0 smaller: it is in a gap (spring forward).
    """
    u0 = dt.replace(fold=0).utcoffset()
    u1 = dt.replace(fold=1).utcoffset()
    return (0 if u0 is None else u0 // _SEC, 0 if u1 is None else u1 // _SEC)


# --------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule.  Create it with :func:`parse_schedule`.

    Equality and hashing use :attr:`text` only.
    """

    text: str
    is_reboot: bool = field(compare=False)
    has_seconds: bool = field(compare=False)
    is_wildcard: bool = field(compare=False)
    _spec: _Spec | None = field(compare=False, repr=False)
    zone: str | None = field(default=None, compare=False)
    """The zone of a ``CRON_TZ=``/``TZ=`` prefix (it is also in :attr:`text`)."""
    interval: int = field(default=0, compare=False)
    """Seconds between fires of an ``@every`` schedule (0 for the others)."""

    def __str__(self) -> str:
        return self.text

    def next_fire(self, after: datetime, tz: tzinfo) -> datetime | None:
        """The first fire instant strictly after ``after``, as an aware datetime in ``tz``.

        ``after`` must be timezone-aware.  Returns ``None`` for ``@reboot`` and
        when no fire remains (year list exhausted, or past 2099).  The result's
        ``fold`` tells the two passes of a repeated wall time apart.
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError("after must be a timezone-aware datetime")
        if self.interval:  # @every: the epoch plus whole multiples, in real time
            t = (after - _EPOCH) // _SEC
            fire = max(t // self.interval + 1, 0) * self.interval
            if fire >= _END_T:
                return None
            return datetime.fromtimestamp(fire, tz)
        spec = self._spec
        if spec is None:
            return None
        t = (after - _EPOCH) // _SEC  # floor: fires are on whole seconds
        if t >= _MAX_T:
            return None
        if t < _MIN_T:
            t = _MIN_T
        a = datetime.fromtimestamp(t, tz)
        if isinstance(tz, timezone):  # fixed offset: no DST
            w = spec.next_wall(a.year, a.month, a.day, a.hour, a.minute, a.second + 1)
            return None if w is None else datetime(*w, tzinfo=tz)
        if self.is_wildcard:
            return self._next_real(spec, a, t, tz)
        return self._next_slot(spec, a, tz)

    def fires(self, after: datetime, tz: tzinfo, count: int) -> list[datetime]:
        """Up to ``count`` successive fires strictly after ``after``."""
        out: list[datetime] = []
        cur = after
        while len(out) < count:
            nxt = self.next_fire(cur, tz)
            if nxt is None:
                break
            out.append(nxt)
            cur = nxt
        return out

    @staticmethod
    def _next_slot(spec: _Spec, a: datetime, tz: tzinfo) -> datetime | None:
        """Fixed schedule: each matching wall slot fires once (see module doc)."""
        u0, u1 = _offsets(a)
        if u0 > u1 and a.fold == 1:
            # In the second pass of a repeated interval: every slot before its
            # end already fired in the first pass.  Resume at its end.
            ae = _wall_epoch((a.year, a.month, a.day, a.hour, a.minute, a.second))
            tau = _transition(tz, ae - u0, ae - u1)
            w = spec.next_wall(*_epoch_wall(tau + u0))
        else:
            w = spec.next_wall(a.year, a.month, a.day, a.hour, a.minute, a.second + 1)
        if w is None:
            return None
        dt = datetime(*w, tzinfo=tz)
        w0, w1 = _offsets(dt)
        if w0 < w1:  # in a gap: fire at the first instant after it
            we = _wall_epoch(w)
            return datetime.fromtimestamp(_transition(tz, we - w1, we - w0), tz)
        return dt  # unique, or the first pass (fold=0) of a repeated slot

    @staticmethod
    def _next_real(spec: _Spec, a: datetime, t: int, tz: tzinfo) -> datetime | None:
        """Wildcard schedule: the first real instant > t whose wall time matches."""
        aw = (a.year, a.month, a.day, a.hour, a.minute, a.second)
        w = spec.next_wall(a.year, a.month, a.day, a.hour, a.minute, a.second + 1)
        u0, u1 = _offsets(a)
        if u0 > u1 and a.fold == 0:
            # In the first pass of a repeated interval [os, oe): real time goes
            # on through the rest of the first pass, then the whole second pass.
            ae = _wall_epoch(aw)
            tau = _transition(tz, ae - u0, ae - u1)
            oe = tau + u0
            if w is not None and _wall_epoch(w) < oe:
                return datetime(*w, tzinfo=tz)  # later in the first pass
            w2 = spec.next_wall(*_epoch_wall(tau + u1))
            if w2 is not None and _wall_epoch(w2) < oe:
                return datetime(*w2, tzinfo=tz, fold=1)  # in the second pass
        for _ in range(1000):  # each round skips a gap; bounded for safety
            if w is None:
                return None
            dt = datetime(*w, tzinfo=tz)
            w0, w1 = _offsets(dt)
            if w0 == w1:
                return dt
            we = _wall_epoch(w)
            if w0 > w1:  # repeated: the first pass unless it is already past
                return dt if we - w0 > t else dt.replace(fold=1)
            # In a gap: that wall time never happens; go on after the gap.
            tau = _transition(tz, we - w1, we - w0)
            w = spec.next_wall(*_epoch_wall(tau + w1))
        return None


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------

_ALIASES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
    "@reboot": "",
}
_FULL_NAMES: Final = {
    n.upper(): n.upper()
    for n in (
        *_MONTH_FULL,
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    )
}
_MAPPING_KEYS: Final = ("second", "minute", "hour", "dayOfMonth", "month", "dayOfWeek", "year")
_ONLY_IN_DAYS: Final = {
    "L": "'L' is only allowed in day-of-month and day-of-week",
    "W": "'W' is only allowed in day-of-month",
    "#": "'#' is only allowed in day-of-week",
    "?": "'?' is only allowed as the whole day-of-month or day-of-week field",
}


def _is_num(tok: str) -> bool:
    return tok.isascii() and tok.isdigit()


def _value(tok: str, f: _Field) -> tuple[int, str]:
    """Parse one number or name of field f: (value, canonical text)."""
    hit = f.lookup.get(tok)
    if hit is not None:
        return hit
    if _is_num(tok):
        v = int(tok)
        if v < f.lo or v > f.hi:
            raise ScheduleError(f"{f.name} {v} is out of range {f.lo}-{f.hi}")
        return v, str(v)
    if not tok:
        raise ScheduleError(f"missing {f.name} value")
    up = tok.upper()
    alpha = tok.isascii() and tok.isalpha()
    if f.names is not None and alpha:
        v2 = f.names.get(up)
        if v2 is not None:
            return v2, up
        full = _FULL_NAMES.get(up)  # cronexpr's full names: friday, january
        if full is not None and full[:3] in f.names:
            return f.names[full[:3]], full[:3]
    if not alpha or up in ("L", "W", "LW"):
        for ch, msg in _ONLY_IN_DAYS.items():
            if ch in up:
                raise ScheduleError(f"{msg}, got {f.name} {tok!r}")
    if f.names is not None and alpha:
        hint = ""
        if up[:3] in f.names:
            hint = f" (did you mean '{up[:3]}'?)"
        else:
            close = difflib.get_close_matches(up, list(f.names), n=1)
            if close:
                hint = f" (did you mean '{close[0]}'?)"
        raise ScheduleError(f"unknown {f.name} name {tok!r}{hint}")
    if alpha:
        raise ScheduleError(
            f"invalid {f.name} value {tok!r}: {f.name} takes numbers {f.lo}-{f.hi}, not names"
        )
    raise ScheduleError(f"invalid {f.name} value {tok!r}")


def _item(item: str, f: _Field) -> tuple[int, str, bool]:
    """Parse a plain list item of field f: (bitmask, canonical text, covers whole range)."""
    base, sep, step_text = item.partition("/")
    step = 1
    if sep:
        if not _is_num(step_text):
            raise ScheduleError(f"invalid step {step_text!r} in {f.name} {item!r}")
        step = int(step_text)
        if step < 1:
            raise ScheduleError(f"step must be at least 1, got {f.name} {item!r}")
        # a step larger than the field keeps the first value only, as Vixie cron reads it
    if base == "*":
        lo, hi, canon, whole = f.lo, f.hi, "*", True
    elif "-" in base:
        a, _, b = base.partition("-")
        if not a or not b:
            raise ScheduleError(f"invalid {f.name} range {base!r}")
        lo, ca = _value(a, f)
        hi, cb = _value(b, f)
        canon = f"{ca}-{cb}"
        whole = lo == f.lo and hi == f.hi
    else:
        lo, canon = _value(base, f)
        hi = f.hi if sep else lo
        whole = bool(sep) and lo == f.lo
    if sep:
        canon = f"{canon}/{step}"
    if lo <= hi:
        if step == 1:
            bits = _bits(lo, hi)
        else:
            bits = 0
            for v in range(lo, hi + 1, step):
                bits |= 1 << v
    else:
        if not f.cyclic:
            raise ScheduleError(
                f"{f.name} range {base} is reversed (wrap-around ranges are only allowed"
                " in second, minute, hour, month and day-of-week)"
            )
        top = f.hi
        if f is _DOW:  # wrap modulo 7: 7 is Sunday (0)
            lo, hi, top = lo % 7, hi % 7, 6
        seq = (
            list(range(lo, top + 1)) + list(range(f.lo, hi + 1))
            if lo > hi
            else list(range(lo, hi + 1))
        )
        bits = 0
        for v in seq[::step]:
            bits |= 1 << v
    return bits, canon, whole


def _plain_field(text: str, f: _Field) -> tuple[int, str, bool]:
    """Parse a field without specials: (bitmask, canonical text, covers whole range)."""
    if text == "*":
        return f.full, "*", True
    hit = f.lookup.get(text)
    if hit is not None:
        return 1 << hit[0], hit[1], False
    if "," not in text:
        return _item(text, f)
    bits = 0
    canons = []
    whole = False
    for item in text.split(","):
        if not item:
            raise ScheduleError(f"empty item in {f.name} list {text!r}")
        b, c, w = _item(item, f)
        bits |= b
        canons.append(c)
        whole = whole or w
    return bits, ",".join(canons), whole


_LAST_DOW: Final = re.compile(r"[0-9A-KM-Z]+L")  # nL: one weekday (number or name), then L
_L_FORMS: Final = (
    "the accepted L forms are L (the last day), L-n (n days before it, n 1-30), "
    "LW (the last weekday), L-nW (the weekday nearest L-n) in day-of-month, "
    "and nL (the last weekday n, e.g. 5L) in day-of-week"
)


def _dom_field(text: str) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], str]:
    """Parse day-of-month: (plain bits, L offsets, L-nW offsets, W days, canonical text)."""
    if text == "*" or text == "?":
        return _ALL_DAYS, (), (), (), "*"
    hit = _DOM.lookup.get(text)
    if hit is not None:
        return 1 << hit[0], (), (), (), hit[1]
    bits = 0
    last: list[int] = []
    lw: list[int] = []
    wdays: list[int] = []
    canons = []
    for item in text.split(","):
        if not item:
            raise ScheduleError(f"empty item in day-of-month list {text!r}")
        up = item.upper()
        if up == "?":
            raise ScheduleError(_ONLY_IN_DAYS["?"] + f", got day-of-month {text!r}")
        if up == "L":
            last.append(0)
            canons.append("L")
        elif up == "LW":
            lw.append(0)
            canons.append("LW")
        elif up.startswith("L-"):
            n = up[2:].removesuffix("W")
            if not _is_num(n) or not 1 <= int(n) <= 30:
                raise ScheduleError(
                    f"invalid day-of-month {item!r}: 'L-n' and 'L-nW' need n in 1-30; {_L_FORMS}"
                )
            if up.endswith("W"):
                lw.append(int(n))
                canons.append(f"L-{int(n)}W")
            else:
                last.append(int(n))
                canons.append(f"L-{int(n)}")
        elif "L" in up:
            raise ScheduleError(f"invalid day-of-month {item!r}: {_L_FORMS}")
        elif up.endswith("W"):
            n = up[:-1]
            if not _is_num(n) or not 1 <= int(n) <= 31:
                raise ScheduleError(f"'W' needs a day of month 1-31, got {item!r}")
            wdays.append(int(n))
            canons.append(f"{int(n)}W")
        else:
            b, c, _ = _item(item, _DOM)
            bits |= b
            canons.append(c)
    return bits, tuple(last), tuple(lw), tuple(wdays), ",".join(canons)


def _dow_field(text: str) -> tuple[int, int, tuple[tuple[int, int], ...], str]:
    """Parse day-of-week: (plain weekday bits 0-6, nL weekday bits, n#k pairs, canonical text)."""
    if text == "*" or text == "?":
        return 0x7F, 0, (), "*"
    hit = _DOW.lookup.get(text)
    if hit is not None:
        return 1 << (hit[0] % 7), 0, (), hit[1]
    bits = 0
    last = 0
    nth: list[tuple[int, int]] = []
    canons = []
    for item in text.split(","):
        if not item:
            raise ScheduleError(f"empty item in day-of-week list {text!r}")
        up = item.upper()
        if up == "?":
            raise ScheduleError(_ONLY_IN_DAYS["?"] + f", got day-of-week {text!r}")
        if up.startswith("L") and len(up) > 1 and not up.endswith("L"):
            up = up[1:] + "L"  # yacron's crontab package spells the last Friday "L5"
        if up != "L" and "L" in up and not _LAST_DOW.fullmatch(up):
            raise ScheduleError(f"invalid day-of-week {item!r}: {_L_FORMS}")
        if up.endswith("L"):
            if up == "L":
                raise ScheduleError(
                    "'L' in day-of-week needs a weekday before it, e.g. '5L' for the last Friday"
                )
            v, c = _value(up[:-1], _DOW)
            last |= 1 << (v % 7)
            canons.append(f"{c}L")
        elif "#" in up:
            day, _, k = up.partition("#")
            if not day:
                raise ScheduleError(f"'#' needs a weekday 0-7 before it, got {item!r}")
            v, c = _value(day, _DOW)
            if not _is_num(k) or not 1 <= int(k) <= 5:
                raise ScheduleError(f"'#' needs a week number 1-5 after it, got {item!r}")
            nth.append((v % 7, int(k)))
            canons.append(f"{c}#{int(k)}")
        else:
            b, c, _ = _item(item, _DOW)
            if b & 0x80:  # 7 is Sunday
                b = (b & 0x7F) | 1
            bits |= b
            canons.append(c)
    return bits, last, tuple(nth), ",".join(canons)


def _check_fires(
    months: int,
    dom_bits: int,
    dom_last: tuple[int, ...],
    dom_lw: tuple[int, ...],
    dom_w: tuple[int, ...],
    dom: str,
) -> None:
    """Raise when no allowed month has a day the day-of-month field can match."""
    for m in range(1, 13):
        if months >> m & 1:
            nd = _MAX_MONTH_DAYS[m]
            if dom_bits & _FULL_DAYS[nd]:
                return
            if any(nd - off >= 1 for off in (*dom_last, *dom_lw)) or any(n <= nd for n in dom_w):
                return
    names = ", ".join(_MONTH_FULL[m - 1] for m in range(1, 13) if months >> m & 1)
    raise ScheduleError(f"never fires: day-of-month {dom} does not exist in {names}")


_H_ITEM: Final = re.compile(r"H(?:\((\d+)-(\d+)\))?(?:/(\d+))?")
# The range a bare H picks from: the field's, but days 1-28 (Jenkins': every month has them)
# and weekdays 0-6 (7 is Sunday again).
_H_RANGE: Final = {"day-of-month": (1, 28), "day-of-week": (0, 6)}


def name_hash(name: str) -> int:
    """The number ``H`` is drawn from: the first 8 bytes of sha256(name), big-endian."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")


def uses_h(spec: str) -> bool:
    """True when a schedule string has a Jenkins ``H`` item (its text depends on the name)."""
    return any(item.startswith("H") for part in spec.split() for item in part.split(","))


def _resolve_h(text: str, f: _Field, h: int | None) -> str:
    """Jenkins' H items of one field, replaced by the values hashed from the job name.

    ``H`` over [a, b] is a + h mod (b - a + 1); with ``/n`` the first value is
    a + (that value - a) mod n, and the item covers every n-th value from it to b.
    """
    if not text.startswith("H") and ",H" not in text:
        return text
    out = []
    for item in text.split(","):
        if not item.startswith("H"):
            out.append(item)
            continue
        m = _H_ITEM.fullmatch(item)
        if m is None:
            raise ScheduleError(
                f"invalid {f.name} {item!r}: write H, H(a-b), H/n or H(a-b)/n (Jenkins' forms)"
            )
        if f is _YEAR:
            raise ScheduleError("'H' is not allowed in year")
        if h is None:
            raise ScheduleError(f"'H' in {f.name} needs the job's name to hash (here it has none)")
        if m[1] is not None:
            a, b = int(m[1]), int(m[2])
            if not f.lo <= a <= b <= f.hi:
                raise ScheduleError(
                    f"invalid {f.name} {item!r}: H(a-b) needs {f.lo} <= a <= b <= {f.hi}"
                )
        else:
            a, b = _H_RANGE.get(f.name, (f.lo, f.hi))
        v = a + h % (b - a + 1)
        if m[3] is None:
            out.append(str(v))
            continue
        n = int(m[3])
        if n < 1:
            raise ScheduleError(f"step must be at least 1, got {f.name} {item!r}")
        out.append(f"{a + (v - a) % n}-{b}/{n}")
    return ",".join(out)


def _compile(written: list[str], h: int | None = None) -> Schedule:
    """Compile the 7 fields S M H DOM MON DOW YEAR (H items hashed from ``h``)."""
    fields = [
        _resolve_h(text, f, h)
        for text, f in zip(
            written, (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW, _YEAR), strict=True
        )
    ]
    s_text, m_text, h_text, dom_text, mon_text, dow_text, y_text = fields
    seconds, s_c, _ = _plain_field(s_text, _SECOND)
    minutes, m_c, _ = _plain_field(m_text, _MINUTE)
    hours, h_c, _ = _plain_field(h_text, _HOUR)
    dom_bits, dom_last, dom_lw, dom_w, dom_c = _dom_field(dom_text)
    months, mon_c, _ = _plain_field(mon_text, _MONTH)
    dow_bits, dow_last, dow_nth, dow_c = _dow_field(dow_text)
    years, y_c, _ = _plain_field(y_text, _YEAR)
    dom_restricted = not written[3].startswith(("*", "?"))
    dow_restricted = not written[5].startswith(("*", "?"))
    if dom_restricted and not dow_restricted:
        _check_fires(months, dom_bits, dom_last, dom_lw, dom_w, dom_c)
    spec = _Spec(
        seconds,
        minutes,
        hours,
        dom_bits,
        dom_last,
        dom_lw,
        dom_w,
        months,
        dow_bits,
        dow_last,
        dow_nth,
        years >> _YEAR_MIN,
        dom_restricted and dow_restricted,
    )
    text = f"{s_c} {m_c} {h_c} {dom_c} {mon_c} {dow_c} {y_c}"
    # Vixie cron's test: the minute or hour field as WRITTEN starts with '*' (0-59 or 0/5
    # do not); H/n spreads a wildcard, so it counts too
    wildcard = written[1].startswith(("*", "H/")) or written[2].startswith(("*", "H/"))
    return Schedule(text, False, seconds != 1, wildcard, spec)


_REBOOT: Final = Schedule("@reboot", True, False, False, None)
_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|h|m|s)")
_UNIT_SECONDS: Final = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}


def _every(text: str) -> Schedule:
    """``@every DURATION`` (robfig/cron, dkron): Go's duration syntax, whole seconds."""
    total = 0.0
    pos = 0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m[1]) * _UNIT_SECONDS[m[2]]
        pos = m.end()
    if not text or pos != len(text):
        raise ScheduleError(
            f"invalid @every duration {text!r}: write numbers with units h, m, s or ms, "
            "like 90s or 1h30m"
        )
    seconds = round(total)
    if abs(total - seconds) > 1e-6 or seconds < 1:
        raise ScheduleError(f"@every {text} must be a whole number of seconds, at least 1s")
    h, rest = divmod(seconds, 3600)
    mi, sec = divmod(rest, 60)
    canon = "".join(f"{v}{u}" for v, u in ((h, "h"), (mi, "m"), (sec, "s")) if v)
    return Schedule(f"@every {canon}", False, seconds % 60 != 0, True, None, interval=seconds)


def _zone_prefix(spec: str) -> tuple[str | None, str]:
    """Split a ``CRON_TZ=Zone``/``TZ=Zone`` prefix (robfig/cron, cronie) off a schedule."""
    head, _, rest = spec.strip().partition(" ")
    for prefix in ("CRON_TZ=", "TZ="):
        if head.startswith(prefix):
            zone = head[len(prefix) :]
            try:
                ZoneInfo(zone)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                raise ScheduleError(f"unknown time zone {zone!r} in {head!r}") from None
            if not rest.strip():
                raise ScheduleError(f"{head!r} is followed by no schedule")
            return zone, rest
    return None, spec


@functools.lru_cache(maxsize=16384)
def _parse_text(spec: str, h: int | None = None) -> Schedule:
    zone, spec = _zone_prefix(spec)
    if zone is not None:
        inner = _parse_text(spec, h)
        return dataclasses.replace(inner, text=f"CRON_TZ={zone} {inner.text}", zone=zone)
    fields = spec.split()
    n = len(fields)
    if n == 0:
        raise ScheduleError("empty schedule")
    if fields[0].startswith("@"):
        alias = fields[0].lower()
        if alias == "@every":
            if n != 2:
                raise ScheduleError(f"@every takes one duration, like '@every 1h30m', got {spec!r}")
            return _every(fields[1])
        if alias not in _ALIASES:
            valid = ", ".join(sorted([*_ALIASES, "@every"]))
            raise ScheduleError(f"unknown alias {fields[0]!r}; valid aliases are {valid}")
        if n > 1:
            raise ScheduleError(f"alias {alias} takes no other fields, got {spec.strip()!r}")
        if alias == "@reboot":
            return _REBOOT
        return _compile(["0", *_ALIASES[alias].split(), "*"])
    if n == 5:
        fields = ["0", *fields, "*"]
    elif n == 6:
        fields = ["0", *fields]
    elif n != 7:
        raise ScheduleError(f"expected 5, 6 or 7 fields, got {n}")
    return _compile(fields, h)


def _mapping_text(spec: Mapping[str, str | int]) -> str:
    for key in spec:
        if key not in _MAPPING_KEYS:
            lowered = {k.lower(): k for k in _MAPPING_KEYS}
            hint = ""
            if isinstance(key, str):
                close = difflib.get_close_matches(key.lower().replace("_", ""), list(lowered), n=1)
                if close:
                    hint = f" (did you mean '{lowered[close[0]]}'?)"
            valid = ", ".join(_MAPPING_KEYS)
            raise ScheduleError(f"unknown schedule key {key!r}{hint}; valid keys are {valid}")
    parts = []
    for key in _MAPPING_KEYS:
        value = spec.get(key, "0" if key == "second" else "*")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ScheduleError(
                f"schedule key {key!r} must be a string or an integer, got {type(value).__name__}"
            )
        text = str(value).strip()
        if not text:
            raise ScheduleError(f"schedule key {key!r} is empty")
        if len(text.split()) != 1:
            raise ScheduleError(f"schedule key {key!r} must not contain spaces, got {text!r}")
        parts.append(text)
    return " ".join(parts)


def parse_schedule(spec: str | Mapping[str, str | int], name: str | None = None) -> Schedule:
    """Parse a cron expression, an ``@alias`` or a yacron-style mapping.

    ``name`` is the job's name, which Jenkins' ``H`` items are hashed from
    (without it an ``H`` is an error).  Raises :class:`ScheduleError` with a
    human message.  Parses are cached.
    """
    if not isinstance(spec, str) and isinstance(spec, Mapping):  # str first: ABCs are slow
        spec = _mapping_text(spec)
    if isinstance(spec, str):
        h = name_hash(name) if name is not None and "H" in spec else None
        return _parse_text(spec, h)
    raise ScheduleError(f"a schedule must be a string or a mapping, got {type(spec).__name__}")
