"""What the HTTP routes and the MCP tools answer: one function per question, over
:class:`~cronstable.web.view.DaemonApi`.

Both front ends call these and nothing else: ``GET /jobs/{name}/runs`` and the
``job_runs`` tool run :func:`runs`, so the tool's result is the route's JSON,
byte for byte, and a fix in one is a fix in both.  Each function returns the
answer's JSON (:mod:`cronstable.web.encode` shapes it) or raises :class:`Refused`
with the HTTP status the route answers and the message both show.  Parsing is
the front end's (a query string, a tool's arguments); the checks on the values
are here.

None of this knows about aiohttp or the MCP SDK: a function is a question asked
of the daemon and its answer.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from cronstable.ports import Trigger
from cronstable.web import encode
from cronstable.web.view import DaemonApi

Json = dict[str, Any]

DEFAULT_HOURS = 24.0
"""The window of :func:`next_fires` when none is asked for."""
MAX_HOURS = 24 * 7
FLEET_PAGE = 100
"""Jobs in a page of :func:`fleet` when no ``limit`` is asked for."""
FLEET_MAX_PAGE = 500
JOBS_PAGE = 100
"""Jobs in a page of :func:`list_jobs` when no ``limit`` is asked for."""
JOBS_MAX_PAGE = 1000
"""The largest page of :func:`list_jobs`: a tool's answer stays a bounded size."""
MAX_CURSOR_LENGTH = 1024
"""The longest ``cursor`` :func:`list_jobs` takes (a cursor names a position and a job)."""
MAX_REF_LENGTH = 256
"""The longest source ref :func:`diff` takes (a branch, a tag, a sha with ``~N``)."""
SHOWN_LENGTH = 64
"""Characters of a value from the request (a job name) an answer or log line shows."""


class Refused(Exception):
    """The question has no answer: the HTTP status of the refusal, its message, and what
    the answer's JSON adds beside ``error`` (``job``, ``missingScope`` …)."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra

    def body(self) -> Json:
        """The refusal as the HTTP API answers it."""
        return {"error": self.message, **self.extra}


def shown(text: str, limit: int = SHOWN_LENGTH) -> str:
    """``text`` cut to ``limit`` characters, every unprintable one escaped (``\\x1b``)."""
    cut = text[:limit]
    escaped = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in cut)
    return escaped + ("…" if len(text) > limit else "")


def no_such_job(name: str) -> Refused:
    return Refused(404, f"no job named '{shown(name)}'")


def no_such_workflow(name: str) -> Refused:
    return Refused(404, f"no workflow named '{shown(name)}'")


def _known(daemon: DaemonApi, name: str) -> None:
    if not daemon.has_job(name):
        raise no_such_job(name)


# ------------------------------------------------------------------ reading


def status(daemon: DaemonApi) -> Json:
    """``GET /status``: the applied and last rejected revisions, every job, the stores."""
    return encode.status(daemon.status())


def list_jobs(daemon: DaemonApi, limit: float = JOBS_PAGE, cursor: str | None = None) -> Json:
    """A page of the applied jobs as ``/status`` lists them (the ``list_jobs`` tool): at
    most ``limit`` from ``cursor`` (a page's ``nextCursor``), the number of jobs, and the
    next page's cursor (None after the last).  A page costs what it holds."""
    if not (float(limit).is_integer() and 1 <= limit <= JOBS_MAX_PAGE):
        raise Refused(400, f"limit must be a whole number from 1 to {JOBS_MAX_PAGE}")
    if cursor is not None and len(cursor) > MAX_CURSOR_LENGTH:
        raise Refused(400, "cursor is not one this daemon gave (start again without it)")
    try:
        view = daemon.status(int(limit), cursor)
    except ValueError:
        raise Refused(400, "cursor is not one this daemon gave (start again without it)") from None
    return {
        "jobs": [encode.job_status(job) for job in view.jobs],
        "jobCount": view.job_count,
        "nextCursor": view.next_cursor,
    }


def job_status(daemon: DaemonApi, name: str) -> Json:
    """One job as ``/status`` lists it (the ``job_status`` tool)."""
    found = daemon.job_status(name)
    if found is None:
        raise no_such_job(name)
    return encode.job_status(found)


def runs(daemon: DaemonApi, name: str) -> Json:
    """``GET /jobs/{name}/runs``: running runs, then the finished ones with their output."""
    _known(daemon, name)
    try:
        found = daemon.runs(name)
    except KeyError:  # removed by a revision meanwhile
        raise no_such_job(name) from None
    return {"job": name, "runs": encode.job_runs(found)}


def workflows(daemon: DaemonApi) -> Json:
    """``GET /workflows``: every workflow, its tasks, its runs going and its last run."""
    return {"workflows": [encode.workflow_status(flow) for flow in daemon.workflows()]}


def workflow_runs(daemon: DaemonApi, name: str) -> Json:
    """``GET /workflows/{name}/runs``: runs going, then the last finished ones."""
    try:
        found = daemon.workflow_runs(name)
    except KeyError:
        raise no_such_workflow(name) from None
    return {"workflow": name, "runs": encode.flow_runs(found)}


def hours_of(text: str | None) -> float:
    """The ``?hours=`` of ``GET /jobs/{name}/next`` as a number (NaN when it is none)."""
    if text is None:
        return DEFAULT_HOURS
    try:
        return float(text)
    except ValueError:
        return math.nan


def next_fires(daemon: DaemonApi, name: str, hours: float = DEFAULT_HOURS) -> Json:
    """``GET /jobs/{name}/next``: the job's fires in the next ``hours``."""
    if not 0 < hours <= MAX_HOURS:  # also false for NaN
        raise Refused(400, f"hours must be a number above 0 and at most {MAX_HOURS}")
    try:
        return encode.job_forecast(daemon.next_fires(name, hours))
    except KeyError:
        raise no_such_job(name) from None


def rejection(daemon: DaemonApi) -> Json:
    """The revision running and the last one rejected since, with every error it had
    (``/status``'s ``applied`` and ``lastRejected``; the ``explain_rejection`` tool)."""
    view = daemon.status()
    return {
        "applied": encode.revision(view.applied),
        "lastRejected": encode.revision(view.last_rejected),
    }


async def diff(daemon: DaemonApi, ref: str) -> Json:
    """What applying the source's revision ``ref`` would change in the running daemon,
    without applying it (the ``diff_revision`` tool)."""
    ref = ref.strip()
    if not ref or len(ref) > MAX_REF_LENGTH or not ref.isprintable():
        raise Refused(400, f"ref must be a branch, tag or commit of at most {MAX_REF_LENGTH} "
                      "printable characters")  # fmt: skip
    planned = await daemon.plan_revision(ref)
    if planned.unreadable is not None:
        raise Refused(409, f"cannot read revision '{shown(ref)}': {planned.unreadable}", ref=ref)
    return encode.planned_revision(planned, encode.daemon_facts(daemon.status()))


# ------------------------------------------------------------------ commands


async def start(daemon: DaemonApi, name: str) -> Json:
    """``POST /jobs/{name}/start``: the job now (answered 202), unless its policy refuses."""
    _known(daemon, name)
    try:
        run, refusal = await daemon.start(name)
    except KeyError:
        raise no_such_job(name) from None
    if run is None:
        raise Refused(409, f"job {name!r} not started: {refusal}", job=name)
    answer: Json = {"job": name, "run": run, "queued": False}
    waiting = daemon.queued(run)  # asked before anything else runs: still exact
    if waiting is not None:  # its pool is full: it waits in the pool's queue
        answer |= {"queued": True, "pool": waiting[0], "queuePosition": waiting[1]}
    return answer


async def start_workflow(daemon: DaemonApi, name: str) -> Json:
    """``POST /workflows/{name}/start``: a run of the workflow now (answered 202), unless
    its concurrencyPolicy refuses.  Its tasks with a ``pool`` queue as job launches do."""
    if not daemon.has_workflow(name):
        raise no_such_workflow(name)
    try:
        run, refusal = await daemon.start_workflow(name)
    except KeyError:
        raise no_such_workflow(name) from None
    if run is None:
        raise Refused(409, f"workflow {name!r} not started: {refusal}", workflow=name)
    return {"workflow": name, "run": run}


def cancel_workflow(daemon: DaemonApi, name: str, run: str) -> Json:
    """``POST /workflows/{name}/runs/{id}/cancel``: cancel the run's pending tasks and
    stop its running ones."""
    try:
        stopped = daemon.cancel_workflow(name, run)
    except KeyError:
        raise no_such_workflow(name) from None
    if not stopped:
        raise Refused(404, f"workflow {name!r} has no run going with that id", workflow=name)
    return {"workflow": name, "cancelled": stopped}


def pools(daemon: DaemonApi) -> Json:
    """``GET /pools``: every pool, its slots in use and its queue."""
    return encode.pools(daemon.pools())


def cancel(daemon: DaemonApi, name: str, run: str | None = None) -> Json:
    """``POST /jobs/{name}/cancel``: stop the job's runs (only ``run`` when given)."""
    _known(daemon, name)
    stopped = daemon.cancel(name, run)
    if run is not None and not stopped:
        raise Refused(404, f"job {name!r} has no running run with that id", job=name)
    return {"job": name, "cancelled": stopped}


def reload(daemon: DaemonApi, token: str | None = None, via: str = "http") -> Json:
    """``POST /reload``: the source looks for a new revision now (answered 202); the
    revision it yields is credited to ``token`` (its name) in the audit trail."""
    daemon.reload(Trigger("api", requested_at=datetime.now(UTC), via=via, token=token))
    return {"reload": "requested"}


AUDIT_PAGE = 100
"""Entries in a page of :func:`audit` when no ``limit`` is asked for."""
AUDIT_MAX_PAGE = 1000


def audit(daemon: DaemonApi, cursor: str | None = None, limit: int = AUDIT_PAGE) -> Json:
    """``GET /audit``: a page of the audit trail, newest first."""
    if not 1 <= limit <= AUDIT_MAX_PAGE:
        raise Refused(400, f"limit must be a whole number from 1 to {AUDIT_MAX_PAGE}")
    try:
        return encode.audit_page(daemon.audit(limit, cursor))
    except ValueError:
        raise Refused(400, "cursor is not one this daemon gave (start again without it)") from None


def limit_of(text: str | None, default: int = FLEET_PAGE) -> int:
    """The ``?limit=`` of ``GET /fleet`` or ``/audit`` (0 when it is not a whole number:
    refused)."""
    if text is None:
        return default
    return int(text) if text.isdigit() and len(text) <= 6 else 0


async def fleet(daemon: DaemonApi, after: str | None = None, limit: int = FLEET_PAGE) -> Json:
    """``GET /fleet``: the members and a page of jobs, in name order after ``after``."""
    if not 1 <= limit <= FLEET_MAX_PAGE:
        raise Refused(400, f"limit must be a whole number from 1 to {FLEET_MAX_PAGE}")
    if after is not None and (len(after) > 1024 or not after):
        raise Refused(400, "after must be a job's name (at most 1024 characters)")
    return encode.fleet(await daemon.fleet(after, limit))
