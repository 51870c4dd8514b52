"""A job's fires in a window, for ``GET /jobs/{name}/next`` and the dashboard's ticks.

Up to :data:`MAX_FIRES` fires are listed one by one.  A busier schedule is
answered as *bands*: runs of fires whose gaps are at most ``window /
MAX_FIRES`` merged into one :class:`~cronstable.ports.views.FireBand` each
(start, end, count), so a timeline can shade where the job fires densely
instead of drawing thousands of ticks.  The walk stops after :data:`WALK_LIMIT`
fires (a per-second schedule would otherwise cost a walk of 86,400 steps a
day); ``complete`` is then false, the last band reaches the window's end and
its count is a lower bound.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from cronstable.ports import FireBand, Forecast
from cronstable.schedule import Schedule

MAX_FIRES = 500
WALK_LIMIT = 2000
MAX_HOURS = 24 * 7


def forecast(schedule: Schedule, tz: tzinfo, start: datetime, hours: float) -> Forecast:
    """The fires strictly after ``start`` and up to ``start + hours``."""
    end = start + timedelta(hours=hours)
    fires: list[datetime] = []
    cursor = start
    complete = True
    while True:
        if len(fires) >= WALK_LIMIT:
            complete = False
            break
        fire = schedule.next_fire(cursor, tz)
        if fire is None or fire > end:
            break
        fires.append(fire.astimezone(UTC))
        cursor = fire
    if complete and len(fires) <= MAX_FIRES:
        return Forecast(start, end, complete, tuple(fires), None)
    gap = (end - start) / MAX_FIRES
    bands: list[list[Any]] = []
    for fire in fires:
        if bands and fire - bands[-1][1] <= gap:
            bands[-1][1] = fire
            bands[-1][2] += 1
        else:
            bands.append([fire, fire, 1])
    if not complete:
        bands[-1][1] = end.astimezone(UTC)
    return Forecast(
        start,
        end,
        complete,
        None,
        tuple(FireBand(first, last, count) for first, last, count in bands),
    )
