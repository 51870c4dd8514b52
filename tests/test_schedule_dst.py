"""DST behaviour of cronstable.schedule (Vixie cron's rule), with exact instants.

Transitions used (checked with zoneinfo offsets, not with the engine):
  America/New_York 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST
  Europe/Lisbon    2026-03-29 01:00 WET -> 02:00 WEST; 2026-10-25 02:00 WEST -> 01:00 WET
  Australia/Lord_Howe 2026-04-05 02:00 +11 -> 01:30 +10:30; 2026-10-04 02:00 +10:30 -> 02:30 +11
  Pacific/Apia 2011-12-29 24:00 -10 -> 2011-12-31 00:00 +14 (Dec 30 skipped)

Wildcard schedules (minute or hour text starting with '*', Vixie's test) follow real time;
fixed schedules fire once per wall-clock slot: a gap slot at the first instant
after the gap, a repeated slot at its first occurrence.
Instants are compared as ISO strings with their offsets, which also tells the
two passes of a repeated hour apart.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronstable.schedule import parse_schedule

NY = ZoneInfo("America/New_York")
LIS = ZoneInfo("Europe/Lisbon")
LHI = ZoneInfo("Australia/Lord_Howe")
APIA = ZoneInfo("Pacific/Apia")


def fires(expr: str, after: str, tz: ZoneInfo, count: int) -> list[str]:
    s = parse_schedule(expr)
    out = s.fires(datetime.fromisoformat(after), tz, count)
    for f in out:
        assert f.tzinfo is tz
    return [f.isoformat() for f in out]


def nxt(expr: str, after: str, tz: ZoneInfo) -> str | None:
    f = parse_schedule(expr).next_fire(datetime.fromisoformat(after), tz)
    return None if f is None else f.isoformat()


# --------------------------------------------------------------------------
# Vixie's wildcard test is on the text (issue 11's example)
# --------------------------------------------------------------------------


def test_whole_range_without_star_is_fixed_as_in_vixie_and_cronos() -> None:
    # New York springs forward on 2016-03-13 at 02:00.  Vixie cron and Cronos fire
    # the 02:00 slot of `0 0,30 0-23/2 * * * *` at 03:00 EDT: the hour field does not
    # start with '*', so the schedule is fixed and its gap slot runs after the gap.
    assert fires("0 0,30 0-23/2 * * * *", "2016-03-13T01:00:00-05:00", NY, 3) == [
        "2016-03-13T03:00:00-04:00",
        "2016-03-13T04:00:00-04:00",
        "2016-03-13T04:30:00-04:00",
    ]
    # written with '*', the same hours are a wildcard: the gap slots do not fire
    assert fires("0 0,30 */2 * * * *", "2016-03-13T01:00:00-05:00", NY, 2) == [
        "2016-03-13T04:00:00-04:00",
        "2016-03-13T04:30:00-04:00",
    ]


# --------------------------------------------------------------------------
# America/New_York, spring forward 2026-03-08 (02:00-03:00 does not exist)
# --------------------------------------------------------------------------


def test_ny_spring_fixed_slot_in_gap_runs_at_end_of_gap() -> None:
    assert fires("30 2 * * *", "2026-03-07T12:00:00-05:00", NY, 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]


def test_ny_spring_fixed_several_gap_slots_collapse() -> None:
    assert fires("0,15,30,45 2 * * *", "2026-03-07T12:00:00-05:00", NY, 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:00:00-04:00",
        "2026-03-09T02:15:00-04:00",
    ]


def test_ny_spring_fixed_gap_slot_and_slot_at_gap_end_collapse() -> None:
    assert fires("0,30 2,3 * * *", "2026-03-07T12:00:00-05:00", NY, 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:30:00-04:00",
        "2026-03-09T02:00:00-04:00",
    ]


def test_ny_spring_fixed_around_gap_unaffected() -> None:
    assert fires("45 1,3 * * *", "2026-03-08T00:00:00-05:00", NY, 3) == [
        "2026-03-08T01:45:00-05:00",
        "2026-03-08T03:45:00-04:00",
        "2026-03-09T01:45:00-04:00",
    ]


def test_ny_spring_fixed_after_exactly_at_gap_fire() -> None:
    assert nxt("30 2 * * *", "2026-03-08T03:00:00-04:00", NY) == "2026-03-09T02:30:00-04:00"
    assert nxt("30 2 * * *", "2026-03-08T02:59:59.999999-04:00", NY) == "2026-03-08T03:00:00-04:00"


def test_ny_spring_wildcard_skips_gap() -> None:
    assert fires("*/30 2 * * *", "2026-03-07T12:00:00-05:00", NY, 2) == [
        "2026-03-09T02:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]
    assert fires("*/20 * * * *", "2026-03-08T01:30:00-05:00", NY, 3) == [
        "2026-03-08T01:40:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:20:00-04:00",
    ]
    assert fires("0 * * * *", "2026-03-08T00:30:00-05:00", NY, 3) == [
        "2026-03-08T01:00:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T04:00:00-04:00",
    ]


def test_ny_spring_sub_minute_fixed_collapses() -> None:
    assert fires("*/20 30 2 * * * *", "2026-03-08T01:00:00-05:00", NY, 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-09T02:30:20-04:00",
    ]


def test_ny_spring_sub_minute_wildcard() -> None:
    assert fires("*/30 * * * * * *", "2026-03-08T01:59:00-05:00", NY, 3) == [
        "2026-03-08T01:59:30-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:00:30-04:00",
    ]
    # every second, hour 2 only: the whole day of 2026-03-08 has no hour 2
    assert fires("* * 2 * * * *", "2026-03-08T01:59:59-05:00", NY, 2) == [
        "2026-03-09T02:00:00-04:00",
        "2026-03-09T02:00:01-04:00",
    ]
    assert nxt("* * * * * * *", "2026-03-08T01:59:59-05:00", NY) == "2026-03-08T03:00:00-04:00"


def test_ny_after_given_as_nonexistent_wall_time() -> None:
    # 02:30 with fold=0 means 02:30 EST (07:30Z), i.e. 03:30 EDT
    after = datetime(2026, 3, 8, 2, 30, tzinfo=NY)
    f = parse_schedule("* * * * *").next_fire(after, NY)
    assert f is not None and f.isoformat() == "2026-03-08T03:31:00-04:00"


# --------------------------------------------------------------------------
# America/New_York, fall back 2026-11-01 (01:00-02:00 happens twice)
# --------------------------------------------------------------------------


def test_ny_fall_fixed_runs_first_occurrence_only() -> None:
    assert fires("30 1 * * *", "2026-10-31T12:00:00-04:00", NY, 3) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
        "2026-11-03T01:30:00-05:00",
    ]
    assert fires("0 1,2 * * *", "2026-10-31T12:00:00-04:00", NY, 3) == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-02T01:00:00-05:00",
    ]


def test_ny_fall_fixed_fold_of_result() -> None:
    f = parse_schedule("30 1 * * *").next_fire(
        datetime.fromisoformat("2026-10-31T12:00:00-04:00"), NY
    )
    assert f is not None and f.fold == 0 and f.utcoffset() is not None
    assert f.isoformat() == "2026-11-01T01:30:00-04:00"


def test_ny_fall_fixed_after_in_first_pass() -> None:
    assert nxt("30 1 * * *", "2026-11-01T01:15:00-04:00", NY) == "2026-11-01T01:30:00-04:00"
    assert nxt("30 1 * * *", "2026-11-01T01:45:00-04:00", NY) == "2026-11-02T01:30:00-05:00"
    # exactly at the fire instant
    assert nxt("30 1 * * *", "2026-11-01T01:30:00-04:00", NY) == "2026-11-02T01:30:00-05:00"


def test_ny_fall_fixed_after_in_second_pass_does_not_refire() -> None:
    # 01:15 EST is after 01:30 EDT in real time: that slot already fired
    assert nxt("30 1 * * *", "2026-11-01T01:15:00-05:00", NY) == "2026-11-02T01:30:00-05:00"
    assert nxt("30 1 * * *", "2026-11-01T01:30:00-05:00", NY) == "2026-11-02T01:30:00-05:00"
    assert nxt("0 2 * * *", "2026-11-01T01:15:00-05:00", NY) == "2026-11-01T02:00:00-05:00"
    assert nxt("0,59 1 * * *", "2026-11-01T01:00:00-05:00", NY) == "2026-11-02T01:00:00-05:00"
    # the same given as a zoneinfo datetime with fold=1
    after = datetime(2026, 11, 1, 1, 15, tzinfo=NY, fold=1)
    f = parse_schedule("30 1 * * *").next_fire(after, NY)
    assert f is not None and f.isoformat() == "2026-11-02T01:30:00-05:00"


def test_ny_fall_wildcard_fires_in_both_passes() -> None:
    assert fires("*/20 1 * * *", "2026-11-01T00:00:00-04:00", NY, 7) == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:20:00-04:00",
        "2026-11-01T01:40:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:20:00-05:00",
        "2026-11-01T01:40:00-05:00",
        "2026-11-02T01:00:00-05:00",
    ]
    assert fires("0 * * * *", "2026-11-01T00:30:00-04:00", NY, 4) == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T03:00:00-05:00",
    ]


def test_ny_fall_wildcard_result_folds() -> None:
    got = parse_schedule("0 * * * *").fires(
        datetime.fromisoformat("2026-11-01T00:30:00-04:00"), NY, 3
    )
    assert [f.fold for f in got] == [0, 1, 0]


def test_ny_fall_wildcard_after_in_first_pass_sees_second_pass() -> None:
    assert fires("*/20 1 * * *", "2026-11-01T01:30:00-04:00", NY, 5) == [
        "2026-11-01T01:40:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:20:00-05:00",
        "2026-11-01T01:40:00-05:00",
        "2026-11-02T01:00:00-05:00",
    ]
    # after the last first-pass fire: next is the start of the second pass
    assert nxt("*/20 1 * * *", "2026-11-01T01:50:00-04:00", NY) == "2026-11-01T01:00:00-05:00"
    # exactly at a first-pass fire
    assert nxt("*/20 1 * * *", "2026-11-01T01:40:00-04:00", NY) == "2026-11-01T01:00:00-05:00"
    # a second-pass slot earlier on the wall clock than 'after'
    assert nxt("5 * * * *", "2026-11-01T01:30:00-04:00", NY) == "2026-11-01T01:05:00-05:00"


def test_ny_fall_wildcard_after_in_second_pass() -> None:
    assert fires("*/20 1 * * *", "2026-11-01T01:30:00-05:00", NY, 2) == [
        "2026-11-01T01:40:00-05:00",
        "2026-11-02T01:00:00-05:00",
    ]
    assert nxt("*/20 1 * * *", "2026-11-01T01:40:00-05:00", NY) == "2026-11-02T01:00:00-05:00"


def test_ny_fall_sub_minute_fixed() -> None:
    assert fires("*/20 30 1 * * * *", "2026-11-01T00:00:00-04:00", NY, 4) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:20-04:00",
        "2026-11-01T01:30:40-04:00",
        "2026-11-02T01:30:00-05:00",
    ]
    assert nxt("*/20 30 1 * * * *", "2026-11-01T01:30:10-05:00", NY) == "2026-11-02T01:30:00-05:00"


def test_ny_fall_sub_minute_wildcard() -> None:
    assert fires("*/30 * 1 * * * *", "2026-11-01T01:59:00-04:00", NY, 3) == [
        "2026-11-01T01:59:30-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:00:30-05:00",
    ]
    assert fires("*/30 * 1 * * * *", "2026-11-01T01:59:00-05:00", NY, 2) == [
        "2026-11-01T01:59:30-05:00",
        "2026-11-02T01:00:00-05:00",
    ]


def test_ny_fall_whole_hour_every_second_terminates_quickly() -> None:
    s = parse_schedule("* * 1 * * * *")
    got = s.fires(datetime.fromisoformat("2026-11-01T01:59:58-04:00"), NY, 3)
    assert [f.isoformat() for f in got] == [
        "2026-11-01T01:59:59-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:00:01-05:00",
    ]


# --------------------------------------------------------------------------
# Europe/Lisbon 2026
# --------------------------------------------------------------------------


def test_lisbon_spring_fixed() -> None:
    assert fires("30 1 * * *", "2026-03-28T12:00:00+00:00", LIS, 2) == [
        "2026-03-29T02:00:00+01:00",
        "2026-03-30T01:30:00+01:00",
    ]
    # 01:00 (in the gap) and 02:00 (its end) collapse into one fire
    assert fires("0 1,2 * * *", "2026-03-28T12:00:00+00:00", LIS, 3) == [
        "2026-03-29T02:00:00+01:00",
        "2026-03-30T01:00:00+01:00",
        "2026-03-30T02:00:00+01:00",
    ]


def test_lisbon_spring_wildcard() -> None:
    assert fires("*/30 1 * * *", "2026-03-28T12:00:00+00:00", LIS, 2) == [
        "2026-03-30T01:00:00+01:00",
        "2026-03-30T01:30:00+01:00",
    ]
    assert fires("0 * * * *", "2026-03-29T00:30:00+00:00", LIS, 2) == [
        "2026-03-29T02:00:00+01:00",
        "2026-03-29T03:00:00+01:00",
    ]


def test_lisbon_fall_fixed() -> None:
    assert fires("30 1 * * *", "2026-10-24T12:00:00+01:00", LIS, 2) == [
        "2026-10-25T01:30:00+01:00",
        "2026-10-26T01:30:00+00:00",
    ]
    assert nxt("30 1 * * *", "2026-10-25T01:10:00+00:00", LIS) == "2026-10-26T01:30:00+00:00"
    assert nxt("0 2 * * *", "2026-10-25T01:10:00+00:00", LIS) == "2026-10-25T02:00:00+00:00"


def test_lisbon_fall_wildcard() -> None:
    assert fires("*/30 1 * * *", "2026-10-24T12:00:00+01:00", LIS, 5) == [
        "2026-10-25T01:00:00+01:00",
        "2026-10-25T01:30:00+01:00",
        "2026-10-25T01:00:00+00:00",
        "2026-10-25T01:30:00+00:00",
        "2026-10-26T01:00:00+00:00",
    ]
    assert nxt("*/30 1 * * *", "2026-10-25T01:45:00+01:00", LIS) == "2026-10-25T01:00:00+00:00"


# --------------------------------------------------------------------------
# 30-minute shifts and a skipped day
# --------------------------------------------------------------------------


def test_lord_howe_half_hour_gap() -> None:
    assert nxt("15 2 * * *", "2026-10-04T00:00:00+10:30", LHI) == "2026-10-04T02:30:00+11:00"
    assert fires("*/15 2 * * *", "2026-10-04T00:00:00+10:30", LHI, 3) == [
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T02:45:00+11:00",
        "2026-10-05T02:00:00+11:00",
    ]


def test_lord_howe_half_hour_overlap() -> None:
    assert fires("*/15 1 * * *", "2026-04-05T00:00:00+11:00", LHI, 7) == [
        "2026-04-05T01:00:00+11:00",
        "2026-04-05T01:15:00+11:00",
        "2026-04-05T01:30:00+11:00",
        "2026-04-05T01:45:00+11:00",
        "2026-04-05T01:30:00+10:30",
        "2026-04-05T01:45:00+10:30",
        "2026-04-06T01:00:00+10:30",
    ]
    assert fires("45 1 * * *", "2026-04-05T00:00:00+11:00", LHI, 2) == [
        "2026-04-05T01:45:00+11:00",
        "2026-04-06T01:45:00+10:30",
    ]


def test_apia_skipped_day() -> None:
    assert fires("0 12 * * *", "2011-12-29T13:00:00-10:00", APIA, 2) == [
        "2011-12-31T00:00:00+14:00",
        "2011-12-31T12:00:00+14:00",
    ]
    assert fires("0 * * * *", "2011-12-29T22:30:00-10:00", APIA, 2) == [
        "2011-12-29T23:00:00-10:00",
        "2011-12-31T00:00:00+14:00",
    ]
    assert nxt("0 0 30 12 *", "2011-12-01T00:00:00-10:00", APIA) == "2011-12-31T00:00:00+14:00"
    assert nxt("* * 30 12 *", "2011-12-01T00:00:00-10:00", APIA) == "2012-12-30T00:00:00+14:00"
    assert nxt("* * * * * * *", "2011-12-29T23:59:59-10:00", APIA) == "2011-12-31T00:00:00+14:00"


TRANSITIONS_UTC = {
    "America/New_York": ("2026-03-08T07:00:00+00:00", "2026-11-01T06:00:00+00:00"),
    "Europe/Lisbon": ("2026-03-29T01:00:00+00:00", "2026-10-25T01:00:00+00:00"),
    "Australia/Lord_Howe": ("2026-10-03T15:30:00+00:00", "2026-04-04T15:00:00+00:00"),
}


@pytest.mark.parametrize("zone", sorted(TRANSITIONS_UTC))
@pytest.mark.parametrize(
    ("expr", "count"),
    [("* * * * *", 400), ("*/7 * * * * * *", 3200), ("30 1,2 * * *", 4), ("0 */2 * * *", 5)],
)
def test_fires_strictly_increasing_across_transitions(zone: str, expr: str, count: int) -> None:
    tz = ZoneInfo(zone)
    s = parse_schedule(expr)
    for transition in TRANSITIONS_UTC[zone]:
        start = datetime.fromisoformat(transition) - timedelta(hours=3)
        got = s.fires(start, tz, count)
        stamps = [f.timestamp() for f in got]
        assert len(stamps) == count
        assert stamps == sorted(set(stamps))
        assert stamps[0] > start.timestamp()
        assert stamps[-1] > datetime.fromisoformat(transition).timestamp()
