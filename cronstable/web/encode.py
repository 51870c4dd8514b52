"""The HTTP API's JSON: every read model of :mod:`cronstable.ports.views` (and the
run records it holds) as the API answers it.

The one place the API's shape is decided: camelCase keys, times as UTC text
(``2024-05-01T03:00:00Z``), durations and CPU seconds rounded to the
microsecond.  Durable state keeps its own forms (:mod:`cronstable.state.records`),
so changing an answer here changes no stored record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cronstable.ports import (
    AppliedConfig,
    AuditEntry,
    AuditPage,
    BackfillView,
    ClusterView,
    EventData,
    FinishedRun,
    FleetMember,
    FleetView,
    FlowRuns,
    FlowRunView,
    Forecast,
    JobAlerts,
    JobForecast,
    JobPauses,
    JobRuns,
    JobStatus,
    Pause,
    Placement,
    PoolView,
    RevisionView,
    RunEnded,
    RunRecord,
    RunStart,
    StateView,
    Status,
    StoreView,
    TaskRunView,
    Trigger,
    WorkflowStatus,
    utc_text,
)
from cronstable.reconcile.effects import DaemonFacts, JobFacts, LastRun, PoolFacts
from cronstable.reconcile.plan import PlannedRevision
from cronstable.reconcile.render import plan_data

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
        "plannedStart": _time(run.planned_start),
        "pid": run.pid,
        "manual": run.manual,
        "poolWait": _seconds(run.pool_wait),
        "backfill": run.backfill,
        "revision": run.revision,
        "jobDigest": run.digest,
    }


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else utc_text(moment)


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


def trigger(view: Trigger) -> Json:
    """What made the daemon try a revision: ``kind`` and, per kind, who or what asked."""
    data: Json = {"kind": view.kind, "requestedAt": _time(view.requested_at)}
    if view.kind == "api":
        data |= {"via": view.via, "token": view.token}
    if view.kind == "webhook":
        data |= {"delivery": view.delivery, "sender": view.sender, "revision": view.revision}
    return data


def audit_entry(entry: AuditEntry) -> Json:
    """One entry of the audit trail (``GET /audit``)."""
    return {
        "id": entry.id,
        "node": entry.node,
        "time": utc_text(entry.time),
        "outcome": entry.outcome,
        "revision": entry.revision,
        "source": entry.source,
        "jobSetId": entry.job_set_id,
        "trigger": trigger(entry.trigger),
        "duration": round(entry.duration, 6),
        "changes": dict(entry.changes) if entry.outcome == "applied" else None,
        "sections": list(entry.sections),
        "errors": list(entry.errors),
    }


def audit_page(page: AuditPage) -> Json:
    """A page of the audit trail, newest first, and the cursor of the next (older) one."""
    return {
        "entries": [audit_entry(entry) for entry in page.entries],
        "nextCursor": page.next_cursor,
        "kept": page.kept,
        "bound": page.bound,
        "durable": page.durable,
    }


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
        "scheduledTime": utc_text(run.start.scheduled_time),
        "plannedStart": _time(run.start.planned_start),
        "startedAt": utc_text(run.start.started_at),
        "outcome": run.outcome,
        "exitCode": run.exit_code,
        "duration": round(run.duration, 6),
        "finishedAt": utc_text(run.finished_at),
        "cpuSeconds": _seconds(run.cpu_seconds),
        "maxRss": run.max_rss,
    }


def pause(view: Pause | None) -> Json | None:
    """One pause (``/status``, the pause and resume answers)."""
    if view is None:
        return None
    return {
        "source": view.source,
        "reason": view.reason,
        "by": view.by,
        "since": _time(view.since),
        "until": _time(view.until),
        "node": view.node,
    }


def job_pauses(view: JobPauses) -> Json:
    """The pauses holding a job, the repository's (``config``) and the API's apart."""
    return {"config": pause(view.config), "api": pause(view.api)}


def fires(moments: Sequence[datetime]) -> list[Json]:
    """Fires of a job: each in UTC and as the job's zone writes it (``local``)."""
    return [{"scheduledTime": utc_text(fire), "local": fire.isoformat()} for fire in moments]


def backfill(view: BackfillView) -> Json:
    """A job's backfill (``/status``, ``GET /jobs/{name}/backfill``)."""
    return {
        "state": view.state,
        "from": utc_text(view.start),
        "to": utc_text(view.end),
        "by": view.by,
        "ignorePause": view.ignore_pause,
        "startedAt": utc_text(view.started_at),
        "finishedAt": _time(view.finished_at),
        "total": len(view.fires),
        "done": view.done,
        "outcomes": dict(sorted(view.outcomes.items())),
        "current": _time(view.current),
        "stopReason": view.stop_reason,
        "fires": fires(view.fires),
    }


def job_alerts(view: JobAlerts | None) -> Json | None:
    """Late, stuck and stale now (null for a job without onLate, onStuck, onStale)."""
    if view is None:
        return None
    late, stale = view.late, view.stale
    return {
        "late": None
        if late is None
        else {
            "fire": utc_text(late.fire),
            "plannedStart": utc_text(late.planned),
            "lateSince": utc_text(late.since),
            "grace": _seconds(late.grace),
            "reportedBy": late.reported_by,
            "reportedAt": _time(late.reported_at),
        },
        "stuck": [
            {
                "job": run.job,
                "run": run.run,
                "startedAt": utc_text(run.started_at),
                "runningFor": _seconds(run.running_for),
                "threshold": _seconds(run.threshold),
                "basis": run.basis,
                "reportedAt": utc_text(run.reported_at),
            }
            for run in view.stuck
        ],
        "stale": None
        if stale is None
        else {
            "lastSuccess": _time(stale.last_success),
            "age": _seconds(stale.age),
            "maxSuccessAge": _seconds(stale.max_success_age),
            "staleSince": utc_text(stale.since),
            "reportedAt": _time(stale.reported_at),
        },
        "lastReported": {
            "late": _time(view.last_late),
            "stuck": _time(view.last_stuck),
            "stale": _time(view.last_stale),
        },
    }


def job_status(job: JobStatus) -> Json:
    return {
        "name": job.name,
        "schedule": job.schedule,
        "timezone": job.timezone,
        "enabled": job.enabled,
        "nextFire": utc_text(job.next_fire) if job.next_fire is not None else None,
        "nextStart": _time(job.next_start),
        "jitter": job.jitter,
        "running": [run_start(run) for run in job.running],
        "lastRun": _last_run(job.last_run),
        "retryPending": job.retry_pending,
        "buffered": [utc_text(fire) for fire in job.buffered],
        "paused": job.pauses.paused,
        "pause": job_pauses(job.pauses),
        "backfill": None if job.backfill is None else _backfill_progress(job.backfill),
        "alerts": job_alerts(job.alerts),
    }


def _backfill_progress(view: BackfillView) -> Json:
    """A backfill in ``/status``: its progress, without the list of fires."""
    shown = backfill(view)
    del shown["fires"]
    return shown


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


def pool(view: PoolView, *, queue: bool = True) -> Json:
    """One pool (``GET /pools``; in ``/status`` without its queue and holders)."""
    body: Json = {
        "name": view.name,
        "slots": view.slots,
        "scope": view.scope,
        "inUse": view.in_use,
        "queued": view.queued,
        "oldestWait": _seconds(view.oldest_wait),
        "retired": view.retired,
    }
    if queue:
        body |= {
            "holders": list(view.holders),
            "waiting": [
                {
                    "run": entry.run,
                    "job": entry.job,
                    "kind": entry.kind,
                    "priority": entry.priority,
                    "since": utc_text(entry.since),
                    "waited": _seconds(entry.waited),
                }
                for entry in view.waiting
            ],
            "admitted": view.admitted,
            "timeouts": view.timeouts,
            "refusedFull": view.refused_full,
            "waitedTotal": _seconds(view.waited_total),
        }
    return body


def pools(views: tuple[PoolView, ...]) -> Json:
    """``GET /pools``."""
    return {"pools": [pool(view) for view in views]}


def status(view: Status) -> Json:
    """``GET /status``."""
    return {
        "applied": revision(view.applied),
        "lastRejected": revision(view.last_rejected),
        "jobs": [job_status(job) for job in view.jobs],
        "jobCount": view.job_count,
        "nextCursor": view.next_cursor,
        "workflows": [workflow_status(flow) for flow in view.workflows],
        "state": state(view.state),
        "stores": stores(view.stores),
        "pools": [pool(p, queue=False) for p in view.pools],
    }


def task_run(task: TaskRunView) -> Json:
    """One task of a workflow run."""
    return {
        "task": task.task,
        "name": task.name,
        "state": task.state,
        "dependsOn": list(task.depends_on),
        "runWhen": task.run_when,
        "level": task.level,
        "attempts": task.attempts,
        "runId": task.run_id,
        "pid": task.pid,
        "startedAt": _time(task.started_at),
        "finishedAt": _time(task.finished_at),
        "exitCode": task.exit_code,
        "failReason": task.fail_reason,
        "retryAt": _time(task.retry_at),
        "queuedIn": task.queued,
    }


def flow_run(run: FlowRunView, *, values: bool = False) -> Json:
    """A workflow run with each task's state (``/workflows``, ``/status``); ``values``:
    with the values its tasks left, by task and key (``/workflows/{name}/runs``)."""
    answer: Json = {
        "id": run.id,
        "workflow": run.workflow,
        "scheduledTime": utc_text(run.scheduled_time),
        "startedAt": utc_text(run.started_at),
        "manual": run.kind == "manual",
        "kind": run.kind,
        "outcome": run.outcome if run.outcome is not None else "running",
        "finishedAt": _time(run.finished_at),
        "duration": _seconds(run.duration),
        "cancelled": run.cancelled,
        "digest": run.digest,
        "tasks": [task_run(task) for task in run.tasks],
    }
    if values:
        xcom: dict[str, dict[str, str | None]] = {}
        for item in run.xcom:
            xcom.setdefault(item.task, {})[item.key] = item.value
        answer["xcom"] = xcom
        answer["xcomBytes"] = sum(item.size for item in run.xcom)
    return answer


def flow_runs(runs: FlowRuns) -> list[Json]:
    """Runs going first (outcome ``running``), then finished ones newest first, with the
    values their tasks left."""
    return [flow_run(run, values=True) for run in (*runs.running, *runs.finished)]


def workflow_status(flow: WorkflowStatus) -> Json:
    return {
        "name": flow.name,
        "schedule": flow.schedule,
        "timezone": flow.timezone,
        "enabled": flow.enabled,
        "concurrencyPolicy": flow.concurrency_policy,
        "nextFire": _time(flow.next_fire),
        "nextStart": _time(flow.next_start),
        "jitter": flow.jitter,
        "paused": flow.pauses.paused,
        "pause": job_pauses(flow.pauses),
        "alerts": job_alerts(flow.alerts),
        "tasks": [
            {
                "task": task.task,
                "name": task.name,
                "dependsOn": list(task.depends_on),
                "runWhen": task.run_when,
                "level": task.level,
            }
            for task in flow.tasks
        ],
        "running": [flow_run(run) for run in flow.running],
        "lastRun": None if flow.last_run is None else flow_run(flow.last_run),
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


def daemon_facts(view: Status, label: str = "this daemon") -> DaemonFacts:
    """What the daemon knows (its status) as a plan's time effects read it: the same facts
    ``cronstable diff`` reads from a daemon's ``GET /status``."""

    def last(run: FinishedRun | FlowRunView | None) -> LastRun | None:
        if run is None:
            return None
        if isinstance(run, FinishedRun):
            return LastRun(run.start.scheduled_time, run.start.started_at, run.outcome)
        return LastRun(run.scheduled_time, run.started_at, run.outcome or "running")

    def facts(pauses: JobPauses, running: int, run: Any, retry: bool = False) -> JobFacts:
        api = pauses.api
        return JobFacts(
            last_run=last(run),
            running=running,
            retry_pending=retry,
            api_paused=api is not None,
            api_pause_until=api.until if api is not None else None,
            api_pause_reason=api.reason if api is not None else None,
        )

    return DaemonFacts(
        label,
        jobs={
            job.name: facts(job.pauses, len(job.running), job.last_run, job.retry_pending)
            for job in view.jobs
        },
        workflows={
            flow.name: facts(flow.pauses, len(flow.running), flow.last_run)
            for flow in view.workflows
        },
        pools={p.name: PoolFacts(p.slots, p.in_use, p.queued) for p in view.pools},
    )


def planned_revision(view: PlannedRevision, facts: DaemonFacts | None = None) -> Json:
    """A source revision planned against the running one (the ``diff_revision`` tool):
    its plan as ``cronstable diff --format json`` prints it, or why it does not load;
    ``facts``: what the daemon knows (:func:`daemon_facts`), for the time effects."""
    return {
        "ref": view.ref,
        "revision": view.revision,
        "source": view.source,
        "loads": view.plan is not None,
        "errors": list(view.errors),
        "plan": None if view.plan is None else plan_data(view.plan, view.at, facts),
    }


def _fleet_member(member: FleetMember) -> Json:
    return {
        "name": member.name,
        "instance": member.instance,
        "revision": member.revision,
        "jobSetId": member.job_set_id,
        "sameJobSet": member.same_job_set,
        "leader": member.leader,
        "lastSeen": _time(member.last_seen),
        "thisNode": member.this_node,
    }


def _run_record(run: RunRecord) -> Json:
    return {
        "node": run.node,
        "id": run.run_id,
        "scheduledTime": utc_text(run.scheduled),
        "startedAt": utc_text(run.started_at),
        "finishedAt": _time(run.finished_at),
        "outcome": run.outcome,
    }


def _placement(where: Placement) -> Json:
    return {"nodes": list(where.nodes), "everyNode": where.every_node, "reason": where.reason}


def fleet(view: FleetView) -> Json:
    """``GET /fleet``: the members, then a page of jobs (``nextAfter`` asks for the next)."""
    cluster = view.cluster
    return {
        "node": view.node,
        "at": utc_text(view.at),
        "cluster": {
            "backend": cluster.backend,
            "distribution": cluster.distribution,
            "known": cluster.known,
            "leader": cluster.leader,
            "unknownReason": cluster.unknown_reason,
        },
        "members": [_fleet_member(m) for m in cluster.members],
        "state": {"backend": view.state_backend, "shared": view.state_shared},
        "jobs": [
            {
                "name": job.name,
                "kind": job.kind,
                "clusterPolicy": job.cluster_policy,
                "enabled": job.enabled,
                "paused": job.paused,
                "nextFire": _time(job.next_fire),
                "nextStart": _time(job.next_start),
                "runsNext": _placement(job.runs_next),
                "lastRun": None if job.last_run is None else _run_record(job.last_run),
                "running": [_run_record(run) for run in job.running],
            }
            for job in view.jobs
        ],
        "total": view.total,
        "nextAfter": view.next_after,
        "notes": list(view.notes),
    }


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
