"""``POST /jobs/{name}/backfill`` and ``GET /jobs/{name}/backfill``, in the style of
:mod:`cronstable.web.calls` (the answer's JSON, or :class:`~cronstable.web.calls.Refused`).

The body is JSON: ``from`` and ``to`` (ISO 8601 with an offset or ``Z``; the fires at or
after ``from`` and before ``to``), ``dryRun`` (list the fires, run nothing), ``max``
(most fires the range may hold, default 100) and ``ignorePause`` (backfill a paused
job all the same).  Who asked is the name of the request's token.
"""

from __future__ import annotations

from typing import Any

from cronstable.ports import BackfillRefused
from cronstable.web import encode
from cronstable.web.calls import Json, Refused, no_such_job, shown
from cronstable.web.pauses import json_object, moment
from cronstable.web.view import DaemonApi

DEFAULT_MAX = 100
FIELDS = frozenset({"from", "to", "dryRun", "max", "ignorePause"})


def _flag(data: dict[str, Any], field: str) -> bool:
    value = data.get(field, False)
    if not isinstance(value, bool):
        raise Refused(400, f"{field} must be true or false")
    return value


def backfill(daemon: DaemonApi, name: str, body: bytes, by: str | None) -> tuple[int, Json]:
    """``POST /jobs/{name}/backfill``: (200, the fires) for a dry run, else (202, the
    backfill started); ``by``: the name of the token that asks."""
    if not daemon.has_job(name):
        raise no_such_job(name)
    data = json_object(body)
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise Refused(
            400,
            f"unknown field {shown(unknown[0])}: a backfill takes "
            "from, to, dryRun, max and ignorePause",
        )
    if "from" not in data or "to" not in data:
        raise Refused(400, "a backfill needs from and to")
    start, end = moment(data["from"], "from"), moment(data["to"], "to")
    limit = data.get("max", DEFAULT_MAX)
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise Refused(400, "max must be an integer")
    dry_run, ignore_pause = _flag(data, "dryRun"), _flag(data, "ignorePause")
    try:
        if dry_run:
            fires = daemon.backfill_fires(name, start, end, limit)
            return 200, {"job": name, "dryRun": True, "fires": encode.fires(fires)}
        view = daemon.backfill(name, start, end, limit=limit, by=by, ignore_pause=ignore_pause)
    except KeyError:
        raise no_such_job(name) from None
    except BackfillRefused as exc:
        raise Refused(409 if exc.conflict else 400, str(exc), job=name) from None
    return 202, {"job": name, "backfill": encode.backfill(view)}


def progress(daemon: DaemonApi, name: str) -> Json:
    """``GET /jobs/{name}/backfill``: the job's backfill going, or its last one."""
    try:
        view = daemon.backfill_view(name)
    except KeyError:
        raise no_such_job(name) from None
    return {"job": name, "backfill": None if view is None else encode.backfill(view)}
