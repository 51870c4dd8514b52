"""The run history: the runs going now and the last finished ones of every job, and the
last finished runs of every workflow (:class:`FlowHistory`).

:class:`RunHistory` is a :class:`~cronstable.ports.RunListener`: it keeps the runs
going now and the last :data:`HISTORY_PER_JOB` finished runs of each job, with at
most :data:`OUTPUT_TAIL` bytes of each captured stream (the tail).  With a
``state`` section the finished runs are also kept in the store
(:mod:`cronstable.state.keeper`) and put back after a restart.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from datetime import datetime

from cronstable.ports import (
    FinishedRun,
    FlowRunView,
    RunOutcome,
    RunResult,
    RunStart,
    keep_values,
)
from cronstable.xcom import MAX_RUN

HISTORY_PER_JOB = 20
OUTPUT_TAIL = 64 * 1024
"""Bytes of each captured stream a finished run keeps (the end of it)."""


class RunHistory:
    """The runs going now and the last finished ones of every job (a run listener)."""

    def __init__(self, per_job: int = HISTORY_PER_JOB) -> None:
        self.per_job = per_job
        self._running: dict[str, dict[str, RunStart]] = {}
        self._finished: dict[str, deque[FinishedRun]] = {}
        self._succeeded: dict[str, FinishedRun] = {}
        """Each job's last success, without its output (it may be older than the
        runs kept)."""

    def run_started(self, run: RunStart) -> None:
        self._running.setdefault(run.job, {})[run.id] = run

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        going = self._running.get(run.job)
        if going is not None:
            going.pop(run.id, None)
            if not going:
                del self._running[run.job]
        finished = FinishedRun.of(run, result, outcome, keep=OUTPUT_TAIL)
        runs = self._finished.get(run.job)
        if runs is None:  # (not setdefault: it would make a deque for every run)
            runs = self._finished[run.job] = deque(maxlen=self.per_job)
        runs.append(finished)
        if outcome == "succeeded":
            self._succeeded[run.job] = _without_output(finished)

    def running(self, job: str) -> list[RunStart]:
        return list(self._running.get(job, {}).values())

    def finished(self, job: str) -> list[FinishedRun]:
        """Newest last."""
        return list(self._finished.get(job, ()))

    def last(self, job: str) -> FinishedRun | None:
        runs = self._finished.get(job)
        return runs[-1] if runs else None

    def success_durations(self, job: str) -> list[float]:
        """The durations of the successful runs among the last ones kept (onStuck's
        ``p95Factor`` judges from them), oldest first."""
        return [run.duration for run in self._finished.get(job, ()) if run.outcome == "succeeded"]

    def last_success_at(self, job: str) -> datetime | None:
        """When the job's last successful run ended (onStale); None when none is known."""
        run = self._succeeded.get(job)
        return run.finished_at if run is not None else None

    def restore(self, job: str, runs: Iterable[FinishedRun]) -> None:
        """Put back the finished runs a previous daemon kept (oldest first), before any
        run of this daemon's."""
        kept = deque(runs, maxlen=self.per_job)
        kept.extend(self._finished.get(job, ()))
        self._finished[job] = kept
        if job not in self._succeeded:
            success = next((run for run in reversed(kept) if run.outcome == "succeeded"), None)
            if success is not None:
                self._succeeded[job] = _without_output(success)

    def forget(self, jobs: Iterable[str]) -> None:
        """Drop the finished runs of jobs a revision removed (runs still going stay)."""
        for job in jobs:
            self._finished.pop(job, None)
            self._succeeded.pop(job, None)

    def last_success(self, job: str) -> FinishedRun | None:
        """The job's last run that succeeded, without its captured output; None when none
        did since the daemon started (or in the history a state section restored)."""
        return self._succeeded.get(job)


def _without_output(run: FinishedRun) -> FinishedRun:
    if run.stdout is None and run.stderr is None:
        return run  # (frozen: nothing to copy)
    return dataclasses.replace(run, stdout=None, stderr=None)


FLOW_RUNS_PER_WORKFLOW = 20
XCOM_KEPT = MAX_RUN
"""Bytes of values the finished runs of one workflow keep together (the newest runs'),
as much as one run may leave: older runs keep their keys and sizes only."""


class FlowHistory:
    """The last finished runs of every workflow (a :class:`~cronstable.ports.FlowListener`;
    the runs going are the scheduler's)."""

    def __init__(self, per_workflow: int = FLOW_RUNS_PER_WORKFLOW) -> None:
        self.per_workflow = per_workflow
        self._finished: dict[str, deque[FlowRunView]] = {}

    def flow_started(self, run: FlowRunView) -> None:
        return None

    def flow_changed(self, run: FlowRunView) -> None:
        return None

    def flow_finished(self, run: FlowRunView) -> None:
        runs = self._finished.setdefault(run.workflow, deque(maxlen=self.per_workflow))
        runs.append(run)
        if run.xcom:
            self._bound(run.workflow)

    def _bound(self, workflow: str) -> None:
        """The values of the newest runs kept within XCOM_KEPT bytes; older ones dropped."""
        runs = self._finished[workflow]
        self._finished[workflow] = deque(keep_values(list(runs), XCOM_KEPT), maxlen=runs.maxlen)

    def finished(self, workflow: str) -> list[FlowRunView]:
        """Newest last."""
        return list(self._finished.get(workflow, ()))

    def last(self, workflow: str) -> FlowRunView | None:
        runs = self._finished.get(workflow)
        return runs[-1] if runs else None

    def success_durations(self, workflow: str) -> list[float]:
        """The durations of the successful runs among the last ones kept, oldest first."""
        return [
            run.duration
            for run in self._finished.get(workflow, ())
            if run.outcome == "succeeded" and run.duration is not None
        ]

    def last_success(self, workflow: str) -> datetime | None:
        """When the newest successful run kept ended; None when none is kept."""
        for run in reversed(self._finished.get(workflow, ())):
            if run.outcome == "succeeded" and run.finished_at is not None:
                return run.finished_at
        return None

    def restore(self, workflow: str, runs: Iterable[FlowRunView]) -> None:
        """Put back the finished runs a previous daemon kept (oldest first)."""
        kept = deque(runs, maxlen=self.per_workflow)
        kept.extend(self._finished.get(workflow, ()))
        self._finished[workflow] = kept
        self._bound(workflow)

    def forget(self, workflows: Iterable[str]) -> None:
        for workflow in workflows:
            self._finished.pop(workflow, None)
