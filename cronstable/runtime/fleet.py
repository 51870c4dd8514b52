"""The fleet view (``GET /fleet``): the cluster's members, and a page of jobs with where
each last ran, its next fire and which node will run it (:mod:`cronstable.ports.fleet`).

Built on the node that is asked, from what it has and what the stores hold: its own
job table and schedule (every node with the same job set computes the same fires), the
leadership's last round (the membership records: :meth:`ClusterSection.fleet
<cronstable.cluster.section.ClusterSection.fleet>`, and where each job runs:
``placement``), and the state store's run records (:class:`~cronstable.ports.FleetRecords`:
the last runs, and the runs going on the other members and, of the page's ``Leader``
jobs, under the job, where the handoff records them).
No other node is asked anything.

A page holds at most :data:`MAX_PAGE` jobs (and workflows), in name order after the
cursor; the store is read for that page only, at most :data:`READ_WITHIN` seconds in
all.  A store that does not answer in time leaves this node's own knowledge, and the
answer says so.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Mapping
from datetime import datetime

from cronstable.config.desired import Job
from cronstable.ports import (
    FinishedRun,
    FleetCluster,
    FleetJob,
    FleetKind,
    FleetRecords,
    FleetView,
    FlowRunView,
    JobPauses,
    PauseControl,
    Placement,
    RunRecord,
    RunStart,
)
from cronstable.runtime.history import FlowHistory, RunHistory
from cronstable.runtime.scheduler import Scheduler

DEFAULT_PAGE = 100
MAX_PAGE = 500
READ_WITHIN = 5.0
"""Seconds the store reads of one page may take together."""

_NO_CLUSTER = FleetCluster(None, None, False, None, ())


class Fleet:
    """See the module docstring.  ``cluster``: the members as the leadership sees them;
    ``placement``: which node runs a job's next fire; ``records``: the state store's run
    records (None: only this node's history is known)."""

    def __init__(
        self,
        node: str,
        scheduler: Scheduler,
        history: RunHistory,
        flow_history: FlowHistory,
        *,
        now: Callable[[], datetime],
        cluster: Callable[[], FleetCluster] | None = None,
        placement: Callable[[Job], Placement] | None = None,
        records: FleetRecords | None = None,
        pauses: PauseControl | None = None,
        read_within: float = READ_WITHIN,
    ) -> None:
        self.node = node
        self.scheduler = scheduler
        self.history = history
        self.flow_history = flow_history
        self.now = now
        self.cluster = cluster
        self.placement = placement
        self.records = records
        self.pauses = pauses
        self.read_within = read_within

    def _names(self) -> list[tuple[str, FleetKind]]:
        jobs = self.scheduler.jobs
        flows = self.scheduler.workflows
        return sorted([(name, "job") for name in jobs] + [(name, "workflow") for name in flows])

    async def view(self, after: str | None = None, limit: int = DEFAULT_PAGE) -> FleetView:
        """The page of at most ``limit`` (1 to :data:`MAX_PAGE`) jobs named after ``after``."""
        limit = max(1, min(limit, MAX_PAGE))
        names = self._names()
        start = 0 if after is None else bisect.bisect_right(names, (after, "\uffff"))
        page = names[start : start + limit]
        more = start + limit < len(names)
        cluster = self.cluster() if self.cluster is not None else _NO_CLUSTER
        notes = _cluster_notes(cluster)
        records = self.records
        backend = records.backend if records is not None else None
        shared = records is not None and records.shared
        stored: Mapping[tuple[FleetKind, str], RunRecord] = {}
        elsewhere: list[RunRecord] = []
        if records is not None and shared:
            # a node's own store holds no last runs (its history has them) nor others' runs
            others = [m.name for m in cluster.members if not m.this_node]
            handed = self._handed_off(page, cluster)
            try:
                async with asyncio.timeout(self.read_within):
                    stored, going = await asyncio.gather(
                        records.last_runs([(kind, name) for name, kind in page]),
                        records.running(others, handed),
                    )
                    # this node's own runs are in its history (a handed-off one's record too)
                    elsewhere = [run for run in going if run.node != self.node]
            except TimeoutError:
                notes.append(
                    f"the {backend} state store did not answer within {self.read_within:g} s: "
                    "last runs and runs going are this node's own"
                )
        if backend is None:
            notes.append("no state section: last runs and runs going are this node's own")
        elif not shared:
            notes.append(
                f"the {backend} state store is this node's own: other nodes' last runs and "
                "runs going are not in it"
            )
        by_job: dict[str, list[RunRecord]] = {}
        for run in elsewhere:
            by_job.setdefault(run.job, []).append(run)
        jobs = tuple(
            self._job(name, kind, stored.get((kind, name)), by_job.get(name, []))
            for name, kind in page
        )
        return FleetView(
            node=self.node,
            at=self.now(),
            cluster=cluster,
            state_backend=backend,
            state_shared=shared,
            jobs=jobs,
            total=len(names),
            next_after=page[-1][0] if more and page else None,
            notes=tuple(notes),
        )

    def _handed_off(self, page: list[tuple[str, FleetKind]], cluster: FleetCluster) -> list[str]:
        """The page's jobs whose runs going may be recorded under the job, not the node
        (the keeper's handoff: ``Leader`` jobs under leader election on a shared store)."""
        if cluster.backend is None:
            return []
        jobs = self.scheduler.jobs
        return [
            name
            for name, kind in page
            if kind == "job"
            and jobs[name].config.cluster_policy == "Leader"
            and not jobs[name].schedule.is_reboot
        ]

    def _job(
        self, name: str, kind: FleetKind, stored: RunRecord | None, elsewhere: list[RunRecord]
    ) -> FleetJob:
        if kind == "workflow":
            flow = self.scheduler.workflows[name]
            job = flow.job
            slot = self.scheduler.flow_slot(name)
            next_fire = slot.next_fire if slot is not None else None
            next_start = slot.next_start if slot is not None else None
            local = _flow_record(self.flow_history.last(name), self.node)
            going = tuple(
                RunRecord(name, self.node, run.id, run.scheduled, run.started_at)
                for run in (slot.runs if slot is not None else ())
            )
            pauses = self._pauses(name, workflow=True)
        else:
            job = self.scheduler.jobs[name]
            next_fire = self.scheduler.next_fire(name)
            next_start = self.scheduler.next_start(name)
            local = _run_record(self.history.last(name), self.node)
            going = tuple(_going(run, self.node) for run in self.history.running(name))
            pauses = self._pauses(name)
        return FleetJob(
            name=name,
            kind=kind,
            cluster_policy=job.config.cluster_policy,
            enabled=job.config.enabled,
            paused=pauses.paused,
            next_fire=next_fire,
            next_start=next_start,
            runs_next=self._placement(job, pauses, next_fire),
            last_run=_latest(stored, local),
            running=going + tuple(elsewhere),
        )

    def _pauses(self, name: str, *, workflow: bool = False) -> JobPauses:
        if self.pauses is None:
            return JobPauses()
        return self.pauses.pauses(name, workflow=workflow)

    def _placement(self, job: Job, pauses: JobPauses, next_fire: datetime | None) -> Placement:
        if not job.config.enabled:
            return Placement((), False, "disabled")
        if job.schedule.is_reboot:
            return Placement((), False, "@reboot")
        if next_fire is None:
            return Placement((), False, "no more fires")
        held = [p for p in (pauses.config, pauses.api) if p is not None and p.holds(next_fire)]
        if held:
            return Placement((), False, "paused")
        if self.placement is None:
            return Placement((), True, "every node")
        return self.placement(job)


def _cluster_notes(cluster: FleetCluster) -> list[str]:
    if cluster.backend is None:
        return ["no leader election: every node runs every job, and no member is known"]
    notes: list[str] = []
    if not cluster.known:
        why = f" ({cluster.unknown_reason})" if cluster.unknown_reason else ""
        notes.append(f"this node does not know the leadership now{why}")
    others = [m.name for m in cluster.members if not m.same_job_set]
    if others:
        notes.append(
            f"{', '.join(others)} applied another job set: their jobs and schedules may "
            "differ from this node's"
        )
    return notes


def _run_record(run: FinishedRun | None, node: str) -> RunRecord | None:
    if run is None:
        return None
    start = run.start
    return RunRecord(
        start.job,
        node,
        start.id,
        start.scheduled_time,
        start.started_at,
        run.finished_at,
        run.outcome,
    )


def _flow_record(run: FlowRunView | None, node: str) -> RunRecord | None:
    if run is None or run.finished_at is None:
        return None
    return RunRecord(
        run.workflow,
        node,
        run.id,
        run.scheduled_time,
        run.started_at,
        run.finished_at,
        run.outcome or "unknown",
    )


def _going(run: RunStart, node: str) -> RunRecord:
    return RunRecord(run.job, node, run.id, run.scheduled_time, run.started_at)


def _latest(stored: RunRecord | None, local: RunRecord | None) -> RunRecord | None:
    """The later of the store's record and this node's own (a write may still be queued)."""
    if stored is None or local is None:
        return stored or local
    return (
        local
        if (local.finished_at or local.started_at) > (stored.finished_at or stored.started_at)
        else stored
    )
