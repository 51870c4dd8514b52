"""The HTTP API's JSON: every read model of :mod:`cronstable.ports.views` (and the
run records it holds) as the API answers it.

The one place the API's shape is decided: camelCase keys, times as UTC text
(``2024-05-01T03:00:00Z``), durations and CPU seconds rounded to the
microsecond.  Durable state keeps its own forms (:mod:`cronstable.state.records`),
so changing an answer here changes no stored record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cronstable.ports import (
    AppliedConfig,
    ClusterView,
    EventData,
    FinishedRun,
    Forecast,
    JobForecast,
    JobRuns,
    JobStatus,
    RevisionView,
    RunEnded,
    RunStart,
    StateView,
    Status,
    StoreView,
    utc_text,
)

Json = dict[str, Any]


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def run_start(run: RunStart) -> Json:
    """A run going (``GET /jobs/{name}/runs``, ``/status``, the ``run-started`` event)."""
    return {
        "id": run.id,
        "job": run.job,
        "scheduledTime": utc_text(run.scheduled_time),
        "attempt": run.attempt,
        "startedAt": utc_text(run.started_at),
        "pid": run.pid,
        "manual": run.manual,
    }


def finished_run(run: FinishedRun) -> Json:
    """A finished run with its captured output (``GET /jobs/{name}/runs``)."""
    return {
        **run_start(run.start),
        "outcome": run.outcome,
        "exitCode": run.exit_code,
        "finishedAt": utc_text(run.finished_at),
        "duration": round(run.duration, 6),
        "failReason": run.fail_reason,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "stdoutDropped": run.stdout_dropped,
        "stderrDropped": run.stderr_dropped,
        "cpuSeconds": _seconds(run.cpu_seconds),
        "maxRss": run.max_rss,
    }


def job_runs(runs: JobRuns) -> list[Json]:
    """Running runs first (outcome ``running``), then finished ones newest first."""
    going = [run_start(run) | {"outcome": "running"} for run in runs.running]
    return going + [finished_run(run) for run in runs.finished]


def revision(view: RevisionView | None) -> Json | None:
    """An applied revision, or a rejected one with its errors."""
    if view is None:
        return None
    data: Json = {
        "revision": view.revision,
        "source": view.source,
        "time": utc_text(view.time),
        "jobSetId": view.job_set_id,
    }
    if view.rejected:
        data["errors"] = list(view.errors)
    return data


def _last_run(run: FinishedRun | None) -> Json | None:
    if run is None:
        return None
    return {
        "id": run.start.id,
        "outcome": run.outcome,
        "exitCode": run.exit_code,
        "duration": round(run.duration, 6),
        "finishedAt": utc_text(run.finished_at),
        "cpuSeconds": _seconds(run.cpu_seconds),
        "maxRss": run.max_rss,
    }


def job_status(job: JobStatus) -> Json:
    return {
        "name": job.name,
        "schedule": job.schedule,
        "timezone": job.timezone,
        "enabled": job.enabled,
        "nextFire": utc_text(job.next_fire) if job.next_fire is not None else None,
        "running": [run_start(run) for run in job.running],
        "lastRun": _last_run(job.last_run),
        "retryPending": job.retry_pending,
    }


def store(view: StoreView) -> Json:
    return {
        "backend": view.backend,
        "state": view.state,
        "since": utc_text(view.since),
        "unreachableFor": round(view.unreachable_for, 3),
        "attempts": view.attempts,
        "lastError": view.last_error,
        "fault": view.fault,
        "nextAttemptIn": None if view.next_attempt_in is None else round(view.next_attempt_in, 3),
    }


def stores(views: Mapping[str, StoreView]) -> dict[str, Json]:
    return {name: store(view) for name, view in views.items()}


def state(view: StateView | None) -> Json:
    """Durable state in ``/status`` (``{"enabled": false}`` without a state section)."""
    if view is None:
        return {"enabled": False}
    return {
        "enabled": True,
        "backend": view.backend,
        "node": view.node,
        "onStoreUnavailable": view.on_store_unavailable,
        "connecting": view.connecting,
        "available": view.available,
        "lastError": view.last_error,
        "queued": view.queued,
    }


def status(view: Status) -> Json:
    """``GET /status``."""
    return {
        "applied": revision(view.applied),
        "lastRejected": revision(view.last_rejected),
        "jobs": [job_status(job) for job in view.jobs],
        "jobCount": view.job_count,
        "nextCursor": view.next_cursor,
        "state": state(view.state),
        "stores": stores(view.stores),
    }


def applied_config(view: AppliedConfig) -> Json:
    """``GET /config``."""
    return {"revision": view.revision} | dict(view.document)


def forecast(view: Forecast) -> Json:
    answer: Json = {
        "from": utc_text(view.start),
        "until": utc_text(view.end),
        "complete": view.complete,
    }
    return answer | {
        "fires": None if view.fires is None else [utc_text(fire) for fire in view.fires],
        "bands": None
        if view.bands is None
        else [
            {"start": utc_text(band.start), "end": utc_text(band.end), "count": band.count}
            for band in view.bands
        ],
    }


def job_forecast(view: JobForecast) -> Json:
    """``GET /jobs/{name}/next``."""
    return {"job": view.job, "enabled": view.enabled} | forecast(view.forecast)


def cluster(view: ClusterView | None) -> Json:
    """``GET /cluster`` (``{"enabled": false}`` without leader election)."""
    if view is None:
        return {"enabled": False}
    election = view.election
    if election is None:
        return {"enabled": False, "node": view.node}
    data: Json = {
        "enabled": True,
        "node": view.node,
        "backend": election.backend,
        "distribution": election.distribution,
        "leaseTtl": election.lease_ttl,
        "known": election.known,
        "role": election.role,
        "leader": election.leader,
        "fence": election.fence,
        "leaseValidFor": election.lease_valid_for,
        "unknownReason": election.unknown_reason,
        "nodeNameConflict": election.node_name_conflict,
        "members": [
            {
                "name": member.name,
                "instance": member.instance,
                "jobSetId": member.job_set_id,
                "sameJobSet": member.same_job_set,
            }
            for member in election.members
        ],
    }
    if election.store is not None:
        data["store"] = store(election.store)
    if election.owned_jobs is not None:
        data["ownedJobs"] = list(election.owned_jobs)
    return data


def event_data(data: EventData) -> Mapping[str, Any]:
    """A live event's ``data:`` line."""
    if isinstance(data, RunStart):
        return run_start(data)
    if isinstance(data, RunEnded):
        return run_start(data.run) | {
            "outcome": data.outcome,
            "exitCode": data.exit_code,
            "finishedAt": utc_text(data.finished_at),
            "duration": round(data.duration, 6),
        }
    if isinstance(data, RevisionView):
        return revision(data) or {}
    return data
