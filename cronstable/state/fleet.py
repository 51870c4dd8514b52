"""The state records the fleet view reads (``GET /fleet``), and the one it adds.

* ``cluster/lastrun/<job>`` and ``cluster/lastflow/<workflow>`` — the last run that
  ended, on any node: ``{job, node, runId, scheduled, startedAt, finishedAt, outcome}``,
  written through the keeper's writer when a run ends (coalesced: a burst of runs of
  one job costs one write).  In the cluster's part of the store, not a node's, so on
  a store the nodes share (etcd) it is the cluster's last run; in a node's own
  directory it is that node's.  A node writes it as its runs end; two nodes ending
  runs of one job at once leave whichever wrote last.  A run reported ``lost`` (it
  went on a node that died) is written by the keeper that found it, naming the node
  it went on (:func:`last_run_record`), not by :class:`LastRuns`.
* ``nodes/<node>/running/<run id>`` — the runs going on each node, the records the
  keeper already keeps for adoption (:mod:`.keeper`): read here, not written.
* ``cluster/jobs/<job>/running/<run id>`` — the runs going of a ``Leader`` job whose
  records are the cluster's (the keeper's handoff, on a store the nodes share), each
  naming the node it goes on: read here too, for the page's jobs that may have them.

Reads are bounded: :data:`READS_AT_ONCE` gets in flight, each bounded by the store's
own timeout, and :meth:`StoreFleetRecords.last_runs` is asked for one page of names at
a time by its caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from cronstable.ports import (
    FleetKind,
    FlowRunView,
    RunOutcome,
    RunRecord,
    RunResult,
    RunStart,
    utc_text,
)
from cronstable.state.base import (
    Record,
    StateError,
    StateStore,
    job_key,
    key,
    node_key,
    record_time,
)

READS_AT_ONCE = 16
"""Most store reads one fleet answer has in flight."""
_KIND: Mapping[FleetKind, str] = {"job": "lastrun", "workflow": "lastflow"}


def last_run_key(kind: FleetKind, name: str) -> str:
    return key("cluster", _KIND[kind], name)


def last_run_record(run: RunStart, node: str, finished_at: datetime, outcome: RunOutcome) -> Record:
    """The ``lastrun`` record of ``run``, which went on ``node`` and ended ``outcome``."""
    return {
        "job": run.job,
        "node": node,
        "runId": run.id,
        "scheduled": utc_text(run.scheduled_time),
        "startedAt": utc_text(run.started_at),
        "finishedAt": utc_text(finished_at),
        "outcome": outcome,
    }


def read_run(record: Record | None, node: str | None = None) -> RunRecord | None:
    """A ``lastrun`` record (or, with ``node``, a ``running`` one) as the fleet shows it;
    None for one it cannot read."""
    if record is None:
        return None
    scheduled, started = record_time(record.get("scheduled")), record_time(record.get("startedAt"))
    job, run_id = record.get("job"), record.get("runId")
    where = node if node is not None else record.get("node")
    if scheduled is None or started is None or not isinstance(job, str):
        return None
    if not isinstance(run_id, str) or not isinstance(where, str):
        return None
    if node is not None:
        return RunRecord(job, where, run_id, scheduled, started)
    outcome = record.get("outcome")
    return RunRecord(
        job,
        where,
        run_id,
        scheduled,
        started,
        record_time(record.get("finishedAt")),
        outcome if isinstance(outcome, str) else "unknown",
    )


class LastRuns:
    """A run listener and a workflow listener: each run that ends is its job's
    ``lastrun`` record, on a store the nodes share.  ``submit``: the keeper's writer
    (:meth:`~cronstable.state.keeper.StateKeeper.submit`; nothing without a store);
    ``shared``: whether the store in use now is shared.

    On a node's own store the record would tell only this node what its run history
    already holds (restored from the ``history`` records at a start): it is not
    written, which takes a record write off every run's end (a burst of 500 runs wrote
    500 of them)."""

    def __init__(
        self,
        node: str,
        submit: Callable[[str, Record | None], None],
        shared: Callable[[], bool],
    ) -> None:
        self.node = node
        self.submit = submit
        self.shared = shared

    def run_started(self, run: RunStart) -> None:
        return None

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        if outcome == "lost":
            return  # it went on another node: the keeper that found it writes its record
        if not self.shared():
            return
        self.submit(
            last_run_key("job", run.job),
            last_run_record(run, self.node, result.finished_at, outcome),
        )

    def flow_started(self, run: FlowRunView) -> None:
        return None

    def flow_changed(self, run: FlowRunView) -> None:
        return None

    def flow_finished(self, run: FlowRunView) -> None:
        if run.detached or run.finished_at is None:
            return  # another node goes on with it, and writes its end
        if not self.shared():
            return
        self.submit(
            last_run_key("workflow", run.workflow),
            {
                "job": run.workflow,
                "node": self.node,
                "runId": run.id,
                "scheduled": utc_text(run.scheduled_time),
                "startedAt": utc_text(run.started_at),
                "finishedAt": utc_text(run.finished_at),
                "outcome": run.outcome or "unknown",
            },
        )


class StoreFleetRecords:
    """:class:`~cronstable.ports.FleetRecords` over the state store in use (``store``
    gives it; None without a ``state`` section: nothing is known)."""

    def __init__(self, store: Callable[[], StateStore | None]) -> None:
        self._store = store

    @property
    def backend(self) -> str | None:
        store = self._store()
        return store.backend if store is not None else None

    @property
    def shared(self) -> bool:
        store = self._store()
        return store is not None and store.shared

    async def last_runs(
        self, names: Sequence[tuple[FleetKind, str]]
    ) -> Mapping[tuple[FleetKind, str], RunRecord]:
        store = self._store()
        if store is None or not names:
            return {}
        room = asyncio.Semaphore(READS_AT_ONCE)

        async def one(kind: FleetKind, name: str) -> RunRecord | None:
            async with room:
                try:
                    return read_run(await store.get(last_run_key(kind, name)))
                except StateError:
                    return None

        found = await asyncio.gather(*(one(kind, name) for kind, name in names))
        return {pair: run for pair, run in zip(names, found, strict=True) if run is not None}

    async def running(self, nodes: Sequence[str], jobs: Sequence[str] = ()) -> Sequence[RunRecord]:
        store = self._store()
        if store is None or not (nodes or jobs):
            return ()
        room = asyncio.Semaphore(READS_AT_ONCE)

        async def listing(prefix: str) -> Mapping[str, Record | None]:
            async with room:
                try:
                    return await store.list(prefix + "/")
                except StateError:
                    return {}

        async def on_node(node: str) -> list[RunRecord]:
            records = await listing(node_key(node, "running"))
            runs = (read_run(record, node) for record in records.values())
            return [run for run in runs if run is not None]

        async def of_job(job: str) -> list[RunRecord]:
            records = await listing(job_key(job, "running"))
            runs = (_handed_off(record, job) for record in records.values())
            return [run for run in runs if run is not None]

        found = await asyncio.gather(
            *(on_node(node) for node in nodes), *(of_job(job) for job in jobs)
        )
        seen: set[tuple[str, str]] = set()  # an EveryNode fire's runs share one run id
        going: list[RunRecord] = []
        for run in (run for runs in found for run in runs):
            if (run.node, run.run_id) not in seen:
                seen.add((run.node, run.run_id))
                going.append(run)
        return going


def _handed_off(record: Record | None, job: str) -> RunRecord | None:
    """A ``cluster/jobs/<job>/running/…`` record as the fleet shows it: it names its node."""
    node = record.get("node") if record is not None else None
    if not isinstance(node, str) or record is None or record.get("job") != job:
        return None
    return read_run(record, node)
