"""The stored form of the run history, apart from the HTTP API's answers.

A job's history record (key ``history/<job>``) holds its last finished runs,
oldest first.  Its form is version 1 of the store's format (the ``version`` every
record carries, :data:`~cronstable.state.base.FORMAT_VERSION`; the store reads
no other)::

    {"version": 1, "job": "backup", "runs": [RUN, ...]}

and each ``RUN``::

    {"id": "backup@2026-05-01T03:00:00Z#2", "job": "backup",
     "scheduledTime": "2026-05-01T03:00:00Z", "attempt": 2,
     "startedAt": "2026-05-01T03:00:00.250000Z", "pid": 4242, "manual": false,
     "outcome": "failed", "exitCode": 3, "finishedAt": "2026-05-01T03:00:02.750001Z",
     "duration": 2.5, "failReason": "nonzeroReturn (exit code 3)",
     "stdout": "...", "stderr": null, "stdoutDropped": 12, "stderrDropped": 0,
     "cpuSeconds": 0.123457, "maxRss": 1478656}

These keys happen to be those ``GET /jobs/{name}/runs`` answers with, which is
where the form came from; the two are apart now (:mod:`cronstable.web.encode`
writes the API's), so the API may change without a new version here.  A reader
takes what every earlier daemon wrote: ``pid``, ``manual``, the dropped counts,
``cpuSeconds`` and ``maxRss`` may be missing (older daemons did not write them);
an unknown key is ignored; a run missing one it needs is skipped, not the record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from cronstable.ports import RUN_OUTCOMES, FinishedRun, RunStart, utc_text
from cronstable.state.base import Record


def run_record(run: FinishedRun) -> Record:
    """``run`` as the history record keeps it."""
    start = run.start
    return {
        "id": start.id,
        "job": start.job,
        "scheduledTime": utc_text(start.scheduled_time),
        "attempt": start.attempt,
        "startedAt": utc_text(start.started_at),
        "pid": start.pid,
        "manual": start.manual,
        "outcome": run.outcome,
        "exitCode": run.exit_code,
        "finishedAt": utc_text(run.finished_at),
        "duration": round(run.duration, 6),
        "failReason": run.fail_reason,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "stdoutDropped": run.stdout_dropped,
        "stderrDropped": run.stderr_dropped,
        "cpuSeconds": None if run.cpu_seconds is None else round(run.cpu_seconds, 6),
        "maxRss": run.max_rss,
    }


def read_run(data: object) -> FinishedRun | None:
    """The run :func:`run_record` (or an earlier daemon) wrote; None for anything else."""
    if not isinstance(data, dict):
        return None
    try:
        start = RunStart(
            id=str(data["id"]),
            job=str(data["job"]),
            scheduled_time=_parse_utc(data["scheduledTime"]),
            attempt=int(data["attempt"]),
            started_at=_parse_utc(data["startedAt"]),
            pid=None if data.get("pid") is None else int(data["pid"]),
            manual=bool(data.get("manual", False)),
        )
        outcome = data["outcome"]
        if outcome not in RUN_OUTCOMES:
            return None
        return FinishedRun(
            start=start,
            outcome=outcome,
            exit_code=None if data.get("exitCode") is None else int(data["exitCode"]),
            finished_at=_parse_utc(data["finishedAt"]),
            duration=float(data["duration"]),
            fail_reason=None if data.get("failReason") is None else str(data["failReason"]),
            stdout=None if data.get("stdout") is None else str(data["stdout"]),
            stderr=None if data.get("stderr") is None else str(data["stderr"]),
            stdout_dropped=int(data.get("stdoutDropped", 0)),
            stderr_dropped=int(data.get("stderrDropped", 0)),
            cpu_seconds=None if data.get("cpuSeconds") is None else float(data["cpuSeconds"]),
            max_rss=None if data.get("maxRss") is None else int(data["maxRss"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def history_record(job: str, runs: Sequence[FinishedRun], limit: int) -> Record:
    """``job``'s history record: whole runs, the newest kept, within ``limit`` bytes of
    JSON (one run at least)."""
    kept = [run_record(run) for run in runs]
    while len(kept) > 1 and len(json.dumps(kept)) > limit:
        kept.pop(0)
    return {"job": job, "runs": kept}


def history_runs(record: Record) -> tuple[str, list[FinishedRun]] | None:
    """(job, its readable runs, oldest first) of a history record; None when it is not one."""
    runs = record.get("runs")
    if not isinstance(runs, list):
        return None
    return str(record.get("job")), [run for item in runs if (run := read_run(item)) is not None]


def _parse_utc(text: object) -> datetime:
    if not isinstance(text, str):
        raise TypeError("not a time")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("a time without a zone")
    return moment.astimezone(UTC)
