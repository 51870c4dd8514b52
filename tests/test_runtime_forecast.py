"""A job's fires in a window: listed up to 500, else merged into bands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cronstable.runtime import forecast as forecast_module
from cronstable.runtime.forecast import MAX_FIRES, forecast
from cronstable.schedule import parse_schedule
from cronstable.web import encode


def window(*args: Any) -> dict[str, Any]:
    """The forecast as ``GET /jobs/{name}/next`` answers it."""
    return encode.forecast(forecast(*args))


START = datetime(2026, 3, 7, 12, 0, 30, tzinfo=UTC)


def test_a_sparse_schedule_lists_every_fire_in_the_window() -> None:
    answer = window(parse_schedule("0 */6 * * *"), UTC, START, 24)
    assert answer == {
        "from": "2026-03-07T12:00:30Z",
        "until": "2026-03-08T12:00:30Z",
        "complete": True,
        "fires": [
            "2026-03-07T18:00:00Z",
            "2026-03-08T00:00:00Z",
            "2026-03-08T06:00:00Z",
            "2026-03-08T12:00:00Z",
        ],
        "bands": None,
    }


def test_fires_are_utc_instants_across_a_dst_change() -> None:
    # 02:30 does not exist in New York on 2026-03-08: the slot fires at 03:00 EDT
    answer = window(parse_schedule("30 2 * * *"), ZoneInfo("America/New_York"), START, 48)
    assert answer["fires"] == ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]


def test_more_than_500_fires_become_bands() -> None:
    # every minute from 09:00 to 10:59 (120 fires a day): 840 in a week
    answer = window(parse_schedule("* 9-10 * * *"), UTC, START, 24 * 7)
    assert answer["fires"] is None and answer["complete"] is True
    bands = answer["bands"]
    assert len(bands) == 7
    assert bands[0] == {
        "start": "2026-03-08T09:00:00Z",
        "end": "2026-03-08T10:59:00Z",
        "count": 120,
    }
    assert sum(band["count"] for band in bands) == 840 > MAX_FIRES


def test_exactly_500_fires_are_still_listed() -> None:
    answer = window(parse_schedule("* * * * *"), UTC, START, 500 / 60)
    assert len(answer["fires"]) == MAX_FIRES and answer["bands"] is None


def test_a_walk_cut_short_says_so_and_reaches_the_window_end() -> None:
    answer = window(parse_schedule("* * * * * * *"), UTC, START, 24)  # every second
    assert answer["complete"] is False
    [band] = answer["bands"]
    assert band["start"] == "2026-03-07T12:00:31Z"
    assert band["end"] == answer["until"]
    assert band["count"] == forecast_module.WALK_LIMIT
    assert datetime.fromisoformat(band["end"]) - START == timedelta(hours=24)
