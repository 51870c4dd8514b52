"""Tests of cronstable.schedule: syntax, canonical text, errors, specials, years, aliases.

DST behaviour is in test_schedule_dst.py, property tests in test_schedule_props.py.
Expected instants are written out by hand (checked against a calendar), not
computed by the engine under test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cronstable.schedule import Schedule, ScheduleError, parse_schedule


def at(text: str) -> datetime:
    """An aware datetime from ISO text; UTC when no offset is given."""
    dt = datetime.fromisoformat(text)
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def nxt(expr: str, after: str, tz: timezone = UTC) -> str | None:
    fire = parse_schedule(expr).next_fire(at(after), tz)
    return None if fire is None else fire.isoformat()


def seq(expr: str, after: str, count: int, tz: timezone = UTC) -> list[str]:
    return [f.isoformat() for f in parse_schedule(expr).fires(at(after), tz, count)]


# --------------------------------------------------------------------------
# Forms and canonical text
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("*/5 * * * *", "0 */5 * * * * *"),
        ("  */5\t*  * *   *  ", "0 */5 * * * * *"),
        ("0 12 * * mon-fri", "0 0 12 * * MON-FRI *"),
        ("0 12 * * MON-FRI", "0 0 12 * * MON-FRI *"),
        ("0 12 * jan,Jul *", "0 0 12 * JAN,JUL * *"),
        ("05 07 * * *", "0 5 7 * * * *"),
        ("0 0 ? * 1", "0 0 0 * * 1 *"),
        ("0 0 1 * ?", "0 0 0 1 * * *"),
        ("0 0 l * *", "0 0 0 L * * *"),
        ("0 0 lw * *", "0 0 0 LW * * *"),
        ("0 0 l-03 * *", "0 0 0 L-3 * * *"),
        ("0 0 15w * *", "0 0 0 15W * * *"),
        ("0 0 * * 5l", "0 0 0 * * 5L *"),
        ("0 0 * * fril", "0 0 0 * * FRIL *"),
        ("0 0 * * mon#2", "0 0 0 * * MON#2 *"),
        ("0 0 1 1 * 2030", "0 0 0 1 1 * 2030"),
        ("30 0 0 1 1 * 2030-2035/2", "30 0 0 1 1 * 2030-2035/2"),
        ("*/10 * * * * * *", "*/10 * * * * * *"),
        ("0 22-2 * * *", "0 0 22-2 * * * *"),
        ("@daily", "0 0 0 * * * *"),
        ("@DAILY", "0 0 0 * * * *"),
        ("  @Midnight ", "0 0 0 * * * *"),
        ("@annually", "0 0 0 1 1 * *"),
        ("@weekly", "0 0 0 * * 0 *"),
        ("@reboot", "@reboot"),
        ("0 0 * * L5", "0 0 0 * * 5L *"),
        ("0 0 * * Lfri", "0 0 0 * * FRIL *"),
    ],
)
def test_canonical_text(spec: str, text: str) -> None:
    assert parse_schedule(spec).text == text


def test_field_counts_are_equivalent() -> None:
    five = parse_schedule("15 3 * * 1")
    six = parse_schedule("15 3 * * 1 *")
    seven = parse_schedule("0 15 3 * * 1 *")
    assert five == six == seven
    assert hash(five) == hash(seven)
    assert five.text == "0 15 3 * * 1 *"


def test_equal_texts_compare_equal_and_hash() -> None:
    a = parse_schedule("0 12 * * MON")
    b = parse_schedule("0  12 * *  mon")
    assert a == b and hash(a) == hash(b)
    assert a != parse_schedule("0 12 * * 1")  # names are not mapped to numbers
    assert len({a, b}) == 1


def test_schedule_is_frozen_and_str() -> None:
    s = parse_schedule("0 12 * * *")
    with pytest.raises(AttributeError):
        s.text = "x"  # type: ignore[misc]
    assert str(s) == "0 0 12 * * * *"
    assert "0 0 12 * * * *" in repr(s)


def test_parse_is_cached() -> None:
    assert parse_schedule("1 2 3 4 *") is parse_schedule("1 2 3 4 *")


def test_flags() -> None:
    assert parse_schedule("@reboot").is_reboot
    assert not parse_schedule("@daily").is_reboot
    assert not parse_schedule("* * * * *").has_seconds
    assert parse_schedule("*/15 * * * * * *").has_seconds
    assert parse_schedule("5 * * * * * *").has_seconds
    assert not parse_schedule("0 * * * * * *").has_seconds
    assert parse_schedule("@hourly").is_wildcard
    assert not parse_schedule("@daily").is_wildcard
    assert not parse_schedule("@reboot").is_wildcard


@pytest.mark.parametrize(
    ("expr", "wildcard"),
    [
        ("* 3 * * *", True),
        ("5 * * * *", True),
        ("*/5 3 * * *", True),
        ("30 */2 * * *", True),
        ("*/5,7 3 * * *", True),  # Vixie: the field's text starts with '*'
        # Vixie looks at the text only: a field covering the whole range is not a wildcard
        ("0-59/5 3 * * *", False),
        ("0/5 3 * * *", False),
        ("0-59 3 * * *", False),
        ("30 0-23/2 * * *", False),
        ("30 0-23 * * *", False),
        ("7,*/5 3 * * *", False),
        ("30 1,0-23/6 * * *", False),
        ("30 2 * * *", False),
        ("1-59/5 3 * * *", False),
        ("30 1-23/2 * * *", False),
        ("0,30 1,2 * * *", False),
        ("0-58 2 * * *", False),
        ("*/10 30 2 * * * *", False),  # a second step alone does not make it a wildcard
        ("0 1-5,7 * * *", False),
    ],
)
def test_is_wildcard(expr: str, wildcard: bool) -> None:
    assert parse_schedule(expr).is_wildcard is wildcard


# --------------------------------------------------------------------------
# Mapping form
# --------------------------------------------------------------------------


def test_mapping_same_text_as_string() -> None:
    m = parse_schedule({"minute": "*/5"})
    assert m.text == "0 */5 * * * * *"
    assert m == parse_schedule("*/5 * * * *")


def test_mapping_all_keys_and_ints() -> None:
    m = parse_schedule(
        {
            "second": 30,
            "minute": 15,
            "hour": "3",
            "dayOfMonth": "1-7",
            "month": "jan",
            "dayOfWeek": "mon",
            "year": 2030,
        }
    )
    assert m.text == "30 15 3 1-7 JAN MON 2030"
    assert m == parse_schedule("30 15 3 1-7 Jan mon 2030")
    # Vixie: both day fields restricted -> OR; 2030-01-01 is a Tuesday
    assert nxt("30 15 3 1-7 JAN MON 2030", "2029-06-01T00:00:00") == "2030-01-01T03:15:30+00:00"


def test_mapping_empty_is_every_minute() -> None:
    assert parse_schedule({}).text == "0 * * * * * *"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"minutes": "5"}, "unknown schedule key 'minutes' (did you mean 'minute'?)"),
        ({"day_of_month": "5"}, "did you mean 'dayOfMonth'?"),
        ({"dayofweek": "5"}, "did you mean 'dayOfWeek'?"),
        ({"zzz": "5"}, "unknown schedule key 'zzz'; valid keys are second, minute, hour"),
        ({"minute": True}, "schedule key 'minute' must be a string or an integer, got bool"),
        ({"minute": None}, "must be a string or an integer, got NoneType"),
        ({"minute": [1, 2]}, "got list"),
        ({"minute": ""}, "schedule key 'minute' is empty"),
        ({"minute": "1, 2"}, "must not contain spaces"),
        ({"minute": 61}, "minute 61 is out of range 0-59"),
        ({"second": "60"}, "second 60 is out of range 0-59"),
        ({"year": "1969"}, "year 1969 is out of range 1970-2099"),
    ],
)
def test_mapping_errors(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ScheduleError) as exc:
        parse_schedule(spec)  # type: ignore[arg-type]
    assert message in str(exc.value)


def test_wrong_spec_type() -> None:
    with pytest.raises(ScheduleError, match="must be a string or a mapping, got int"):
        parse_schedule(5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty schedule"),
        ("   ", "empty schedule"),
        ("* * * *", "expected 5, 6 or 7 fields, got 4"),
        ("* * * * * * * *", "expected 5, 6 or 7 fields, got 8"),
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("* 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month 32 is out of range 1-31"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 * 0 *", "month 0 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
        ("60 0 0 * * * *", "second 60 is out of range 0-59"),
        ("0 0 * * * 1969", "year 1969 is out of range 1970-2099"),
        ("0 0 * * * 2100", "year 2100 is out of range 1970-2099"),
        ("0 0 * jnu *", "unknown month name 'jnu' (did you mean 'JUN'?)"),
        ("0 0 * * mnu", "unknown day-of-week name 'mnu'"),
        ("0 0 * jan-foo *", "unknown month name 'foo'"),
        ("abc * * * *", "invalid minute value 'abc': minute takes numbers 0-59, not names"),
        ("1x * * * *", "invalid minute value '1x'"),
        ("-1 * * * *", "invalid minute range '-1'"),
        ("1- * * * *", "invalid minute range '1-'"),
        ("+1 * * * *", "invalid minute value '+1'"),
        ("*/0 * * * *", "step must be at least 1"),
        ("0 1-5/0 * * *", "step must be at least 1"),
        ("*/x * * * *", "invalid step 'x' in minute '*/x'"),
        ("*/ * * * *", "invalid step '' in minute '*/'"),
        ("1,,2 * * * *", "empty item in minute list '1,,2'"),
        ("1, * * * *", "empty item in minute list '1,'"),
        ("0 0 20-10 * *", "day-of-month range 20-10 is reversed"),
        ("0 0 1 1 * 2030-2020", "year range 2030-2020 is reversed"),
        ("0 0 0W * *", "'W' needs a day of month 1-31, got '0W'"),
        ("0 0 32W * *", "'W' needs a day of month 1-31, got '32W'"),
        ("0 0 W * *", "'W' needs a day of month 1-31, got 'W'"),
        ("0 0 xW * *", "'W' needs a day of month 1-31"),
        ("0 0 L-0 * *", "'L-n' and 'L-nW' need n in 1-30"),
        ("0 0 L-31 * *", "'L-n' and 'L-nW' need n in 1-30"),
        ("0 0 L-31W * *", "'L-n' and 'L-nW' need n in 1-30"),
        ("0 0 L-x * *", "'L-n' and 'L-nW' need n in 1-30"),
        ("0 0 5L * *", "invalid day-of-month '5L': the accepted L forms are L (the last day)"),
        ("0 0 L/2 * *", "invalid day-of-month 'L/2': the accepted L forms are"),
        ("0 0 15-L * *", "invalid day-of-month '15-L': the accepted L forms are"),
        ("0 0 LW-1 * *", "invalid day-of-month 'LW-1': the accepted L forms are"),
        ("0 0 * * 5L-6", "invalid day-of-week '5L-6': the accepted L forms are"),
        ("0 0 * * 1-5L", "invalid day-of-week '1-5L': the accepted L forms are"),
        ("0 0 * * 5LL", "invalid day-of-week '5LL': the accepted L forms are"),
        ("0 0 * * L", "'L' in day-of-week needs a weekday before it"),
        ("0 0 * * 8L", "day-of-week 8 is out of range 0-7"),
        ("0 0 * * 1#6", "'#' needs a week number 1-5 after it, got '1#6'"),
        ("0 0 * * 1#0", "'#' needs a week number 1-5 after it"),
        ("0 0 * * 1#", "'#' needs a week number 1-5 after it"),
        ("0 0 * * #2", "'#' needs a weekday 0-7 before it"),
        ("0 0 * * 9#2", "day-of-week 9 is out of range 0-7"),
        ("0 0 * * 1W", "'W' is only allowed in day-of-month, got day-of-week '1W'"),
        ("L * * * *", "'L' is only allowed in day-of-month and day-of-week, got minute 'L'"),
        ("0 0 * L *", "'L' is only allowed in day-of-month and day-of-week, got month 'L'"),
        ("0 0 1#2 * *", "'#' is only allowed in day-of-week"),
        ("? * * * *", "'?' is only allowed as the whole day-of-month or day-of-week field"),
        ("0 0 1,? * *", "'?' is only allowed as the whole day-of-month or day-of-week field"),
        ("0 0 * * 1,?", "'?' is only allowed as the whole"),
        ("@foo", "unknown alias '@foo'; valid aliases are @annually, @daily, @every, @hourly,"),
        ("0 0 * januar *", "unknown month name 'januar' (did you mean 'JAN'?)"),
        ("0 0 * * mondy", "(did you mean 'MON'?)"),
        ("0 0 * * january", "unknown day-of-week name 'january'"),
        ("@daily 5", "alias @daily takes no other fields"),
        ("0 0 30 2 *", "never fires: day-of-month 30 does not exist in February"),
        ("0 0 31 4 *", "never fires: day-of-month 31 does not exist in April"),
        ("0 0 31 4,6,9,11 *", "does not exist in April, June, September, November"),
        ("0 0 30,31 feb *", "never fires: day-of-month 30,31 does not exist in February"),
        ("0 0 30W 2 *", "never fires"),
        ("0 0 31 2 * 2030", "never fires"),
        ("0 0 31 2 *,mon", "never fires"),  # day-of-week starts with '*': AND
    ],
)
def test_errors(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as exc:
        parse_schedule(expr)
    assert message in str(exc.value)


def test_error_messages_exact() -> None:
    for expr, message in [
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("* * * *", "expected 5, 6 or 7 fields, got 4"),
        ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
    ]:
        with pytest.raises(ScheduleError) as exc:
            parse_schedule(expr)
        assert str(exc.value) == message


def test_schedule_error_is_value_error() -> None:
    assert issubclass(ScheduleError, ValueError)


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 29 2 *",  # leap years
        "0 0 30 2 mon",  # Vixie OR: fires on Mondays of February
        "0 0 L 2 *",
        "0 0 LW 2 *",
        "0 0 L-27 2 *",  # 1st or 2nd of February
        "0 0 29W 2 *",  # leap years
        "0 0 31 1-4 *",
        "0 0 */31 4 *",  # starts with '*': day 1 exists
        "0 0 1 1 * 1999",  # years entirely in the past are not a parse error
    ],
)
def test_not_never_fires(expr: str) -> None:
    parse_schedule(expr)


def test_naive_after_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_schedule("* * * * *").next_fire(datetime(2026, 1, 1), UTC)


# --------------------------------------------------------------------------
# Plain fields
# --------------------------------------------------------------------------


def test_every_minute_strictly_after() -> None:
    assert nxt("* * * * *", "2026-01-01T00:00:00") == "2026-01-01T00:01:00+00:00"
    assert nxt("* * * * *", "2026-01-01T00:00:59.999999") == "2026-01-01T00:01:00+00:00"
    assert nxt("* * * * *", "2026-01-01T00:00:00.000001") == "2026-01-01T00:01:00+00:00"


def test_strictly_after_at_fire_instant() -> None:
    assert nxt("30 12 * * *", "2026-01-01T12:30:00") == "2026-01-02T12:30:00+00:00"
    assert nxt("30 12 * * *", "2026-01-01T12:29:59.999999") == "2026-01-01T12:30:00+00:00"
    assert nxt("*/15 * * * * * *", "2026-01-01T12:30:15") == "2026-01-01T12:30:30+00:00"


def test_carries_across_year() -> None:
    assert nxt("59 23 31 12 *", "2026-12-31T23:59:00") == "2027-12-31T23:59:00+00:00"
    assert nxt("* * * * *", "2026-12-31T23:59:30") == "2027-01-01T00:00:00+00:00"
    assert nxt("0 0 1 1 *", "2026-06-01T00:00:00") == "2027-01-01T00:00:00+00:00"


def test_ranges_steps_lists() -> None:
    assert seq("10-20/5 * * * *", "2026-01-01T00:00:00", 4) == [
        "2026-01-01T00:10:00+00:00",
        "2026-01-01T00:15:00+00:00",
        "2026-01-01T00:20:00+00:00",
        "2026-01-01T01:10:00+00:00",
    ]
    assert seq("50/4 * * * *", "2026-01-01T00:00:00", 4) == [
        "2026-01-01T00:50:00+00:00",
        "2026-01-01T00:54:00+00:00",
        "2026-01-01T00:58:00+00:00",
        "2026-01-01T01:50:00+00:00",
    ]
    assert seq("0 1,5,23 * * *", "2026-01-01T02:00:00", 3) == [
        "2026-01-01T05:00:00+00:00",
        "2026-01-01T23:00:00+00:00",
        "2026-01-02T01:00:00+00:00",
    ]
    # N-N is one value, not '*' (croniter 7.0.0 reads it as '*')
    assert seq("5-5 * * * *", "2026-01-01T00:00:00", 2) == [
        "2026-01-01T00:05:00+00:00",
        "2026-01-01T01:05:00+00:00",
    ]
    assert seq("0 0 1 */4 *", "2026-01-15T00:00:00", 3) == [
        "2026-05-01T00:00:00+00:00",
        "2026-09-01T00:00:00+00:00",
        "2027-01-01T00:00:00+00:00",
    ]


def test_names_and_sunday_seven() -> None:
    # 2026-01-01 is a Thursday
    assert nxt("0 9 * * sat", "2026-01-01T00:00:00") == "2026-01-03T09:00:00+00:00"
    assert nxt("0 9 * * 0", "2026-01-01T00:00:00") == "2026-01-04T09:00:00+00:00"
    assert nxt("0 9 * * 7", "2026-01-01T00:00:00") == "2026-01-04T09:00:00+00:00"
    assert nxt("0 9 * * SUN", "2026-01-01T00:00:00") == "2026-01-04T09:00:00+00:00"
    assert seq("0 9 * * 5-7", "2026-01-01T00:00:00", 4) == [
        "2026-01-02T09:00:00+00:00",
        "2026-01-03T09:00:00+00:00",
        "2026-01-04T09:00:00+00:00",
        "2026-01-09T09:00:00+00:00",
    ]
    assert nxt("0 9 1 Mar *", "2026-01-01T00:00:00") == "2026-03-01T09:00:00+00:00"
    assert nxt("0 9 1 mar-may/2 *", "2026-04-01T00:00:00") == "2026-05-01T09:00:00+00:00"


def test_wrap_around_ranges() -> None:
    assert seq("0 22-2 * * *", "2026-01-01T03:00:00", 6) == [
        "2026-01-01T22:00:00+00:00",
        "2026-01-01T23:00:00+00:00",
        "2026-01-02T00:00:00+00:00",
        "2026-01-02T01:00:00+00:00",
        "2026-01-02T02:00:00+00:00",
        "2026-01-02T22:00:00+00:00",
    ]
    assert seq("0 22-2/2 * * *", "2026-01-01T03:00:00", 4) == [
        "2026-01-01T22:00:00+00:00",
        "2026-01-02T00:00:00+00:00",
        "2026-01-02T02:00:00+00:00",
        "2026-01-02T22:00:00+00:00",
    ]
    # fri-mon: 2026-01-01 is a Thursday
    assert seq("0 9 * * fri-mon", "2026-01-01T00:00:00", 5) == [
        "2026-01-02T09:00:00+00:00",
        "2026-01-03T09:00:00+00:00",
        "2026-01-04T09:00:00+00:00",
        "2026-01-05T09:00:00+00:00",
        "2026-01-09T09:00:00+00:00",
    ]
    # 7-1 is Sunday-Monday
    assert seq("0 9 * * 7-1", "2026-01-01T00:00:00", 3) == [
        "2026-01-04T09:00:00+00:00",
        "2026-01-05T09:00:00+00:00",
        "2026-01-11T09:00:00+00:00",
    ]
    assert seq("0 0 1 nov-feb *", "2026-02-15T00:00:00", 4) == [
        "2026-11-01T00:00:00+00:00",
        "2026-12-01T00:00:00+00:00",
        "2027-01-01T00:00:00+00:00",
        "2027-02-01T00:00:00+00:00",
    ]
    assert seq("58-1 0 * * *", "2026-01-01T00:00:00", 4) == [
        "2026-01-01T00:01:00+00:00",
        "2026-01-01T00:58:00+00:00",
        "2026-01-01T00:59:00+00:00",
        "2026-01-02T00:00:00+00:00",
    ]


# --------------------------------------------------------------------------
# Vixie day-of-month / day-of-week
# --------------------------------------------------------------------------


def test_vixie_or_when_both_restricted() -> None:
    # 1st and 15th, or any Monday.  2026-01-01 Thu; Mondays: 5, 12, 19, 26.
    assert seq("0 0 1,15 * mon", "2026-01-01T00:00:00", 5) == [
        "2026-01-05T00:00:00+00:00",
        "2026-01-12T00:00:00+00:00",
        "2026-01-15T00:00:00+00:00",
        "2026-01-19T00:00:00+00:00",
        "2026-01-26T00:00:00+00:00",
    ]


def test_vixie_and_when_one_starts_with_star() -> None:
    # Odd days that are Mondays: Jan 5, 19 (odd) ... 2026-01-05, 2026-01-19
    assert seq("0 0 */2 * mon", "2026-01-01T00:00:00", 3) == [
        "2026-01-05T00:00:00+00:00",
        "2026-01-19T00:00:00+00:00",
        "2026-02-09T00:00:00+00:00",
    ]
    # day-of-week '*/2' starts with '*': AND with the 1st -> 1st that is Sun/Tue/Thu/Sat.
    # 2026-01-01 Thu (after it), 2026-02-01 Sun, 2026-03-01 Sun, 2026-04-01 Wed, 2026-05-01 Fri,
    # 2026-06-01 Mon, 2026-07-01 Wed, 2026-08-01 Sat
    assert seq("0 0 1 * */2", "2026-01-01T00:00:00", 3) == [
        "2026-02-01T00:00:00+00:00",
        "2026-03-01T00:00:00+00:00",
        "2026-08-01T00:00:00+00:00",
    ]


def test_question_mark_is_unrestricted() -> None:
    assert seq("0 0 ? * mon", "2026-01-01T00:00:00", 2) == [
        "2026-01-05T00:00:00+00:00",
        "2026-01-12T00:00:00+00:00",
    ]
    assert seq("0 0 13 * ?", "2026-01-01T00:00:00", 2) == [
        "2026-01-13T00:00:00+00:00",
        "2026-02-13T00:00:00+00:00",
    ]


def test_full_range_day_of_month_is_restricted_text() -> None:
    # '1-31' does not start with '*': OR with Monday -> every day
    assert seq("0 0 1-31 * mon", "2026-01-01T00:00:00", 2) == [
        "2026-01-02T00:00:00+00:00",
        "2026-01-03T00:00:00+00:00",
    ]


# --------------------------------------------------------------------------
# L, W, LW, L-n, nL, n#k
# --------------------------------------------------------------------------


def test_last_day_of_month() -> None:
    assert seq("0 0 L * *", "2026-01-01T00:00:00", 4) == [
        "2026-01-31T00:00:00+00:00",
        "2026-02-28T00:00:00+00:00",
        "2026-03-31T00:00:00+00:00",
        "2026-04-30T00:00:00+00:00",
    ]
    assert seq("0 0 L 2 *", "2026-01-01T00:00:00", 4) == [
        "2026-02-28T00:00:00+00:00",
        "2027-02-28T00:00:00+00:00",
        "2028-02-29T00:00:00+00:00",
        "2029-02-28T00:00:00+00:00",
    ]
    assert nxt("0 0 L 2 *", "2100-01-01T00:00:00") is None


def test_l_minus_n() -> None:
    assert seq("0 0 L-3 2 *", "2026-01-01T00:00:00", 3) == [
        "2026-02-25T00:00:00+00:00",
        "2027-02-25T00:00:00+00:00",
        "2028-02-26T00:00:00+00:00",
    ]
    # L-28: day 3 of a 31-day month, day 1 of a leap February, no fire in a 28-day February
    assert seq("0 0 L-28 1-3 *", "2026-01-01T00:00:00", 3) == [
        "2026-01-03T00:00:00+00:00",
        "2026-03-03T00:00:00+00:00",
        "2027-01-03T00:00:00+00:00",
    ]
    assert seq("0 0 L-28 2 *", "2026-01-01T00:00:00", 2) == [
        "2028-02-01T00:00:00+00:00",
        "2032-02-01T00:00:00+00:00",
    ]


def test_l_minus_n_weekday() -> None:
    # L-1W: the weekday nearest the second-last day.  Jan 2026: day 30 is a Friday;
    # Feb 2026: day 27 Fri; May 2026: day 30 Sat -> Fri 29; Aug 2026: day 30 Sun -> Mon 31
    assert seq("0 0 L-1W * *", "2026-01-01T00:00:00", 8)[:5] == [
        "2026-01-30T00:00:00+00:00",
        "2026-02-27T00:00:00+00:00",
        "2026-03-30T00:00:00+00:00",
        "2026-04-29T00:00:00+00:00",
        "2026-05-29T00:00:00+00:00",
    ]
    assert nxt("0 0 L-1W 8 *", "2026-01-01T00:00:00") == "2026-08-31T00:00:00+00:00"
    # L-27W in a 28-day February is day 1: a Sunday in Feb 2026 -> Monday the 2nd
    assert nxt("0 0 L-27W 2 *", "2026-01-01T00:00:00") == "2026-02-02T00:00:00+00:00"
    assert parse_schedule("0 0 l-3w,LW * *").text == "0 0 0 L-3W,LW * * *"


def test_last_weekday_of_month() -> None:
    # Jan 31 2026 Sat -> Fri 30; Feb 28 2026 Sat -> 27; Mar 31 Tue; May 31 Sun -> 29
    assert seq("0 0 LW * *", "2026-01-01T00:00:00", 5) == [
        "2026-01-30T00:00:00+00:00",
        "2026-02-27T00:00:00+00:00",
        "2026-03-31T00:00:00+00:00",
        "2026-04-30T00:00:00+00:00",
        "2026-05-29T00:00:00+00:00",
    ]
    # February: 2027-02-28 Sun -> 26; 2028-02-29 Tue -> 29
    assert seq("0 0 LW 2 *", "2026-03-01T00:00:00", 2) == [
        "2027-02-26T00:00:00+00:00",
        "2028-02-29T00:00:00+00:00",
    ]


def test_nearest_weekday() -> None:
    # 1W: Feb 1 2026 Sun -> Mon 2; Mar 1 Sun -> Mon 2; Apr 1 Wed; Aug 1 Sat -> Mon 3 (not Jul 31)
    assert seq("0 0 1W * *", "2026-01-02T00:00:00", 3) == [
        "2026-02-02T00:00:00+00:00",
        "2026-03-02T00:00:00+00:00",
        "2026-04-01T00:00:00+00:00",
    ]
    assert nxt("0 0 1W * *", "2026-07-02T00:00:00") == "2026-08-03T00:00:00+00:00"
    # 15W: Aug 15 2026 Sat -> Fri 14; Mar 15 2026 Sun -> Mon 16
    assert nxt("0 0 15W 8 *", "2026-01-01T00:00:00") == "2026-08-14T00:00:00+00:00"
    assert nxt("0 0 15W 3 *", "2026-01-01T00:00:00") == "2026-03-16T00:00:00+00:00"
    # 31W: May 31 2026 Sun -> Fri 29 (not Mon Jun 1); Oct 31 2026 Sat -> Fri 30
    assert nxt("0 0 31W 5 *", "2026-01-01T00:00:00") == "2026-05-29T00:00:00+00:00"
    assert nxt("0 0 31W 10 *", "2026-01-01T00:00:00") == "2026-10-30T00:00:00+00:00"
    # 31W skips months without a 31st
    assert seq("0 0 31W * *", "2026-03-31T00:00:00", 2) == [
        "2026-05-29T00:00:00+00:00",
        "2026-07-31T00:00:00+00:00",
    ]
    # 28W in February: 2026-02-28 Sat -> Fri 27; 2027-02-28 Sun, the last day -> Fri 26
    assert seq("0 0 28W 2 *", "2026-01-01T00:00:00", 2) == [
        "2026-02-27T00:00:00+00:00",
        "2027-02-26T00:00:00+00:00",
    ]
    # 29W in February fires only in leap years: 2028-02-29 Tue
    assert nxt("0 0 29W 2 *", "2026-01-01T00:00:00") == "2028-02-29T00:00:00+00:00"


def test_specials_in_lists() -> None:
    assert seq("0 0 1,L * *", "2026-01-01T00:00:00", 3) == [
        "2026-01-31T00:00:00+00:00",
        "2026-02-01T00:00:00+00:00",
        "2026-02-28T00:00:00+00:00",
    ]
    assert seq("0 0 15W,LW 8 *", "2026-01-01T00:00:00", 2) == [
        "2026-08-14T00:00:00+00:00",
        "2026-08-31T00:00:00+00:00",
    ]


def test_last_weekday_n_of_month() -> None:
    # last Friday: Jan 30, Feb 27, Mar 27, Apr 24 (2026)
    assert seq("0 0 * * 5L", "2026-01-01T00:00:00", 4) == [
        "2026-01-30T00:00:00+00:00",
        "2026-02-27T00:00:00+00:00",
        "2026-03-27T00:00:00+00:00",
        "2026-04-24T00:00:00+00:00",
    ]
    # last Sunday, as 0L and 7L: Jan 25, Feb 22 2026
    for expr in ("0 0 * * 0L", "0 0 * * 7L", "0 0 * * sunL"):
        assert seq(expr, "2026-01-01T00:00:00", 2) == [
            "2026-01-25T00:00:00+00:00",
            "2026-02-22T00:00:00+00:00",
        ]


def test_nth_weekday() -> None:
    # 1st Monday: Jan 5, Feb 2, Mar 2 (2026)
    assert seq("0 0 * * 1#1", "2026-01-01T00:00:00", 3) == [
        "2026-01-05T00:00:00+00:00",
        "2026-02-02T00:00:00+00:00",
        "2026-03-02T00:00:00+00:00",
    ]
    # 2nd Monday, written with a name
    assert seq("0 0 * * MON#2", "2026-01-01T00:00:00", 2) == [
        "2026-01-12T00:00:00+00:00",
        "2026-02-09T00:00:00+00:00",
    ]
    # 5th Thursday: Jan 29 2026, then Apr 30 2026
    assert seq("0 0 * * 4#5", "2026-01-01T00:00:00", 2) == [
        "2026-01-29T00:00:00+00:00",
        "2026-04-30T00:00:00+00:00",
    ]
    # 5th Monday of February: only in leap years whose Feb 1 is a Monday
    assert seq("0 0 * 2 1#5", "2016-03-01T00:00:00", 2) == [
        "2044-02-29T00:00:00+00:00",
        "2072-02-29T00:00:00+00:00",
    ]
    assert nxt("0 0 * 2 1#5", "2072-03-01T00:00:00") is None


def test_day_specials_vixie_or() -> None:
    # L or every Monday
    assert seq("0 0 L * mon", "2026-01-20T00:00:00", 3) == [
        "2026-01-26T00:00:00+00:00",
        "2026-01-31T00:00:00+00:00",
        "2026-02-02T00:00:00+00:00",
    ]


# --------------------------------------------------------------------------
# Years
# --------------------------------------------------------------------------


def test_six_field_year() -> None:
    assert seq("0 0 1 1 * 2028,2030", "2026-05-01T00:00:00", 3) == [
        "2028-01-01T00:00:00+00:00",
        "2030-01-01T00:00:00+00:00",
    ]
    assert nxt("0 0 1 1 * 2028,2030", "2030-01-01T00:00:00") is None


def test_seven_field_year_and_seconds() -> None:
    assert seq("15,45 0 12 * * * 2027", "2026-05-01T00:00:00", 3) == [
        "2027-01-01T12:00:15+00:00",
        "2027-01-01T12:00:45+00:00",
        "2027-01-02T12:00:15+00:00",
    ]
    assert nxt("15,45 0 12 * * * 2027", "2027-12-31T12:00:45") is None
    assert seq("0 0 0 1 1 * 2030/5", "2026-05-01T00:00:00", 3) == [
        "2030-01-01T00:00:00+00:00",
        "2035-01-01T00:00:00+00:00",
        "2040-01-01T00:00:00+00:00",
    ]


def test_years_in_the_past_return_none() -> None:
    s = parse_schedule("0 0 1 1 * 1999")
    assert s.next_fire(at("2026-01-01T00:00:00"), UTC) is None
    assert s.fires(at("2026-01-01T00:00:00"), UTC, 3) == []
    assert nxt("0 0 1 1 * 1999", "1998-06-01T00:00:00") == "1999-01-01T00:00:00+00:00"


def test_search_ends_after_2099() -> None:
    assert nxt("0 0 1 1 *", "2099-01-01T00:00:00") is None
    assert nxt("* * * * *", "2099-12-31T23:59:00") is None
    assert nxt("* * * * *", "9999-12-31T00:00:00") is None
    # Mondays of February, or Feb 29: 2097-02-04 is the first Monday of February 2097
    assert nxt("0 0 29 2 mon", "2096-03-01T00:00:00") == "2097-02-04T00:00:00+00:00"
    assert nxt("0 0 29 2 mon", "2099-03-01T00:00:00") is None


def test_after_before_1970() -> None:
    assert nxt("0 0 1 1 *", "1900-01-01T00:00:00") == "1970-01-01T00:00:00+00:00"
    assert nxt("0 0 1 1 *", "0001-01-01T00:00:00") == "1970-01-01T00:00:00+00:00"


def test_fires_count() -> None:
    s = parse_schedule("0 0 1 1 * 2030-2032")
    assert [f.year for f in s.fires(at("2026-01-01T00:00:00"), UTC, 10)] == [2030, 2031, 2032]
    assert s.fires(at("2026-01-01T00:00:00"), UTC, 0) == []


# --------------------------------------------------------------------------
# Aliases
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "first", "second"),
    [
        ("@yearly", "2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"),
        ("@annually", "2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"),
        ("@monthly", "2026-06-01T00:00:00+00:00", "2026-07-01T00:00:00+00:00"),
        ("@weekly", "2026-05-17T00:00:00+00:00", "2026-05-24T00:00:00+00:00"),
        ("@daily", "2026-05-14T00:00:00+00:00", "2026-05-15T00:00:00+00:00"),
        ("@midnight", "2026-05-14T00:00:00+00:00", "2026-05-15T00:00:00+00:00"),
        ("@hourly", "2026-05-13T11:00:00+00:00", "2026-05-13T12:00:00+00:00"),
    ],
)
def test_aliases(alias: str, first: str, second: str) -> None:
    # 2026-05-13 is a Wednesday
    assert seq(alias, "2026-05-13T10:20:00", 2) == [first, second]
    assert seq(alias.upper(), "2026-05-13T10:20:00", 2) == [first, second]


def test_reboot() -> None:
    s = parse_schedule("@reboot")
    assert s.is_reboot and s.text == "@reboot"
    assert s.next_fire(at("2026-01-01T00:00:00"), UTC) is None
    assert s.fires(at("2026-01-01T00:00:00"), UTC, 5) == []
    assert s == parse_schedule("@REBOOT")


# --------------------------------------------------------------------------
# Time zones without DST
# --------------------------------------------------------------------------


def test_fixed_offset_timezone() -> None:
    tz = timezone(timedelta(hours=5, minutes=30))
    fire = parse_schedule("0 9 * * *").next_fire(at("2026-01-01T00:00:00"), tz)
    assert fire is not None
    assert fire.isoformat() == "2026-01-01T09:00:00+05:30"
    assert fire.tzinfo is tz
    # after given in another zone: 2026-01-01T04:00Z is 09:30 in +05:30
    assert nxt("0 9 * * *", "2026-01-01T04:00:00", tz) == "2026-01-02T09:00:00+05:30"


def test_result_in_requested_zone() -> None:
    fire = parse_schedule("0 9 * * *").next_fire(at("2026-01-01T00:00:00-08:00"), UTC)
    assert fire is not None and fire.isoformat() == "2026-01-01T09:00:00+00:00"


def test_microsecond_after_does_not_fire_twice() -> None:
    s = parse_schedule("* * * * * * *")
    assert [f.isoformat() for f in s.fires(at("2026-01-01T00:00:00.5"), UTC, 3)] == [
        "2026-01-01T00:00:01+00:00",
        "2026-01-01T00:00:02+00:00",
        "2026-01-01T00:00:03+00:00",
    ]


def test_schedule_type_exported() -> None:
    assert isinstance(parse_schedule("* * * * *"), Schedule)


def test_pickle_and_copy() -> None:
    import copy
    import pickle

    s = parse_schedule("*/5 1 * * mon-fri")
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s), copy.copy(s)):
        assert clone == s and clone.is_wildcard
        assert clone.next_fire(at("2026-01-01T00:00:00"), UTC) == s.next_fire(
            at("2026-01-01T00:00:00"), UTC
        )
    r = pickle.loads(pickle.dumps(parse_schedule("@reboot")))
    assert r.is_reboot and r.next_fire(at("2026-01-01T00:00:00"), UTC) is None


def test_mapping_seconds() -> None:
    s = parse_schedule({"second": "*/10", "minute": "5", "hour": "3"})
    assert s.has_seconds and s.text == "*/10 5 3 * * * *"
    assert seq(s.text, "2026-01-01T03:05:35", 3) == [
        "2026-01-01T03:05:40+00:00",
        "2026-01-01T03:05:50+00:00",
        "2026-01-02T03:05:00+00:00",
    ]


def test_custom_tzinfo_without_fold_support() -> None:
    from datetime import tzinfo

    class Plus2(tzinfo):
        def utcoffset(self, dt: datetime | None) -> timedelta:
            return timedelta(hours=2)

        def dst(self, dt: datetime | None) -> timedelta:
            return timedelta(0)

        def tzname(self, dt: datetime | None) -> str:
            return "+02"

    fire = parse_schedule("0 9 * * *").next_fire(at("2026-01-01T00:00:00"), Plus2())
    assert fire is not None and fire.isoformat() == "2026-01-01T09:00:00+02:00"


def test_speed_guard() -> None:
    """Generous guard; the real figure is in bench/bench_schedule.py (~20 us/expr)."""
    import time

    exprs = [f"{m} {h} * * *" for m in range(60) for h in range(24)][:1440]
    exprs += [f"{m} */{s} * * 1-5" for m in range(56) for s in range(2, 12)][:560]
    t0 = time.perf_counter()
    for e in exprs:
        parse_schedule(f" {e}").next_fire(at("2026-05-17T10:23:45"), UTC)  # uncached spelling
    assert time.perf_counter() - t0 < 1.0
