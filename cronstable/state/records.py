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
     "cpuSeconds": 0.123457, "maxRss": 1478656,
     "revision": "3f2c…", "digest": "v1:job:…"}

``revision`` is the source revision the daemon ran when the run started and ``digest``
the job's digest then; each is left out when not known (a run adopted from a previous
daemon).

These keys happen to be those ``GET /jobs/{name}/runs`` answers with, which is
where the form came from; the two are apart now (:mod:`cronstable.web.encode`
writes the API's), so the API may change without a new version here.  A reader
takes what every earlier daemon wrote: ``pid``, ``manual``, the dropped counts,
``cpuSeconds``, ``maxRss``, ``revision`` and ``digest`` may be missing (older daemons
did not write them);
an unknown key is ignored; a run missing one it needs is skipped, not the record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from cronstable.ports import (
    RUN_OUTCOMES,
    FinishedRun,
    FlowRunView,
    RunStart,
    TaskRunView,
    XcomValue,
    utc_text,
)
from cronstable.state.base import Record
from cronstable.workflows.dag import OUTCOMES, TASK_STATES


def run_record(run: FinishedRun) -> Record:
    """``run`` as the history record keeps it."""
    start = run.start
    record: Record = {
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
    # written only when known, so a record without them is the bytes it always was
    if start.revision is not None:
        record["revision"] = start.revision
    if start.digest is not None:
        record["digest"] = start.digest
    return record


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
            revision=None if data.get("revision") is None else str(data["revision"]),
            digest=None if data.get("digest") is None else str(data["digest"]),
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
    if sum(map(_json_bound, kept)) + 2 * len(kept) > limit:  # only then measured
        while len(kept) > 1 and len(json.dumps(kept)) > limit:
            kept.pop(0)
    return {"job": job, "runs": kept}


def _json_bound(record: Record) -> int:
    """At least the length of ``record``'s JSON (a flat record; ASCII escapes take at
    most 12 characters a code point), without encoding it."""
    total = 2
    for name, value in record.items():
        if isinstance(value, str):
            total += len(name) + 6 + 12 * len(value) + 2
        elif value is None or isinstance(value, bool | int | float):
            total += len(name) + 6 + 32
        else:
            return 1 << 62  # nested: only encoding it tells
    return total


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


# ---------------------------------------------------------------- workflow runs
#
# A workflow run going (key ``flows/<run id>``, or ``cluster/flows/<run id>`` for a
# ``Leader`` workflow on a store the nodes share) and the last finished runs of a
# workflow (``flowhistory/<workflow>``) are kept as::
#
#     {"workflow": "etl", "runId": "etl@2026-05-01T03:00:00Z", "digest": "v1:workflow:…",
#      "scheduled": "2026-05-01T03:00:00Z", "kind": "fire",
#      "startedAt": "2026-05-01T03:00:00.01Z", "finishedAt": null, "outcome": null,
#      "cancelled": false, "node": "n1", "beat": "2026-05-01T03:00:05Z",
#      "tasks": {"extract": {"state": "succeeded", "attempts": 1,
#                             "runId": "etl.extract@2026-05-01T03:00:00Z#1",
#                             "startedAt": "…", "finishedAt": "…", "exitCode": 0,
#                             "failReason": null, "retryAt": null, "queuedIn": null,
#                             "pid": null, "startTicks": null, "bootId": null}, …},
#      "xcom": [{"task": "extract", "key": "rows", "value": "42", "size": 6}, …]}
#
# ``node`` drove the run and ``beat`` is when it last said so; a running task's
# ``pid``, ``startTicks`` and ``bootId`` let a restarted daemon adopt its process.
# ``xcom``: the values its tasks left (at most 1 MiB together); in the history a
# value dropped from an older run (to keep 1 MiB of values per workflow) is null.
# Records written before values existed have no ``xcom`` (none).

TaskProcess = tuple[int, int | None, str | None]
"""(pid, start ticks, boot id) of a running task's process."""


def flow_run_record(
    view: FlowRunView,
    node: str,
    beat: datetime,
    processes: Mapping[str, TaskProcess],
) -> Record:
    """``view`` as its record keeps it (``processes``: the running tasks' processes)."""
    order = {task.task: index for index, task in enumerate(view.tasks)}
    tasks: Record = {}
    for task in view.tasks:
        process = processes.get(task.task)
        tasks[task.task] = {
            "order": order[task.task],
            "state": task.state,
            "attempts": task.attempts,
            "runId": task.run_id,
            "startedAt": _text(task.started_at),
            "finishedAt": _text(task.finished_at),
            "exitCode": task.exit_code,
            "failReason": task.fail_reason,
            "retryAt": _text(task.retry_at),
            "queuedIn": task.queued,
            "pid": process[0] if process else None,
            "startTicks": process[1] if process else None,
            "bootId": process[2] if process else None,
        }
    return {
        "workflow": view.workflow,
        "runId": view.id,
        "digest": view.digest,
        "scheduled": utc_text(view.scheduled_time),
        "kind": view.kind,
        "startedAt": utc_text(view.started_at),
        "finishedAt": _text(view.finished_at),
        "outcome": view.outcome,
        "cancelled": view.cancelled,
        "node": node,
        "beat": utc_text(beat),
        "tasks": tasks,
        "xcom": [
            {"task": item.task, "key": item.key, "value": item.value, "size": item.size}
            for item in view.xcom
        ],
    }


def _text(moment: datetime | None) -> str | None:
    return None if moment is None else utc_text(moment)


def _maybe_time(text: object) -> datetime | None:
    return None if text is None else _parse_utc(text)


@dataclass(frozen=True, slots=True)
class StoredFlow:
    """A workflow run read back: the run as the scheduler takes it, who drove it and when
    it last said so, and its running tasks' processes."""

    view: FlowRunView
    node: str
    beat: datetime
    processes: Mapping[str, TaskProcess]


def read_flow_run(data: object) -> StoredFlow | None:
    """The record :func:`flow_run_record` wrote; None for anything else.  The tasks' levels
    are left 0 and their dependencies empty: the definition (by its digest) has them."""
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
        return None
    try:
        tasks: list[tuple[int, TaskRunView]] = []
        processes: dict[str, TaskProcess] = {}
        for name, task in data["tasks"].items():
            state = task["state"]
            if state not in TASK_STATES:
                return None
            pid = task.get("pid")
            if pid is not None:
                ticks = task.get("startTicks")
                boot = task.get("bootId")
                processes[str(name)] = (
                    int(pid),
                    None if ticks is None else int(ticks),
                    None if boot is None else str(boot),
                )
            tasks.append(
                (
                    int(task.get("order", len(tasks))),
                    TaskRunView(
                        task=str(name),
                        name=f"{data['workflow']}.{name}",
                        state=state,
                        depends_on=(),
                        run_when="allSucceeded",
                        level=0,
                        attempts=int(task.get("attempts", 0)),
                        run_id=None if task.get("runId") is None else str(task["runId"]),
                        started_at=_maybe_time(task.get("startedAt")),
                        finished_at=_maybe_time(task.get("finishedAt")),
                        exit_code=None if task.get("exitCode") is None else int(task["exitCode"]),
                        fail_reason=None
                        if task.get("failReason") is None
                        else str(task["failReason"]),
                        retry_at=_maybe_time(task.get("retryAt")),
                        pid=None if pid is None else int(pid),
                        queued=None if task.get("queuedIn") is None else str(task["queuedIn"]),
                    ),
                )
            )
        kind = data.get("kind", "fire")
        outcome = data.get("outcome")
        if kind not in ("fire", "reboot", "manual") or outcome not in (None, *OUTCOMES):
            return None
        xcom = tuple(
            XcomValue(
                str(item["task"]),
                str(item["key"]),
                None if item.get("value") is None else str(item["value"]),
                int(item["size"]),
            )
            for item in data.get("xcom") or ()
        )
        view = FlowRunView(
            id=str(data["runId"]),
            workflow=str(data["workflow"]),
            digest=str(data["digest"]),
            scheduled_time=_parse_utc(data["scheduled"]),
            started_at=_parse_utc(data["startedAt"]),
            kind=kind,
            tasks=tuple(task for _, task in sorted(tasks, key=lambda item: item[0])),
            finished_at=_maybe_time(data.get("finishedAt")),
            outcome=outcome,
            cancelled=bool(data.get("cancelled", False)),
            xcom=xcom,
        )
        return StoredFlow(view, str(data.get("node", "")), _parse_utc(data.get("beat")), processes)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def flow_history_record(
    workflow: str, runs: Sequence[FlowRunView], node: str, limit: int
) -> Record:
    """``workflow``'s finished runs (the newest kept) within ``limit`` bytes of JSON."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    kept = [flow_run_record(run, node, run.finished_at or epoch, {}) for run in runs]
    while len(kept) > 1 and len(json.dumps(kept)) > limit:
        kept.pop(0)
    return {"workflow": workflow, "runs": kept}


def flow_history_runs(record: Record) -> tuple[str, list[FlowRunView]] | None:
    runs = record.get("runs")
    if not isinstance(runs, list):
        return None
    read = [found.view for item in runs if (found := read_flow_run(item)) is not None]
    return str(record.get("workflow")), [run for run in read if run.finished_at is not None]
