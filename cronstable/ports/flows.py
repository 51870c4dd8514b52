"""Workflow runs as the daemon's parts hear of them and show them.

A workflow run has an id, ``<workflow>@<scheduled UTC>`` (``etl@2026-05-01T03:00:00Z``),
and one state per task (:data:`~cronstable.workflows.dag.TaskState`).  The scheduler
tells every :class:`FlowListener` when a run starts, when any of its tasks changes,
and when it ends, each time with the whole run as a :class:`FlowRunView` (plain,
frozen values): the run history keeps the last ones, metrics count them, durable
state writes them so a restart goes on with them.  Each task's runs are ordinary
runs of the job ``WORKFLOW.TASK`` besides (run listeners hear of them as of any).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, Protocol

from cronstable.ports.runs import utc_text
from cronstable.workflows.dag import Outcome, RunWhen, TaskState

WORKFLOW_RUN_ENV = "CRONSTABLE_WORKFLOW_RUN_ID"
"""The variable that gives a task's run the id of its workflow run."""

FlowKind = Literal["fire", "reboot", "manual"]
"""What started a workflow run: a scheduled fire (catch-ups included), an @reboot
workflow at start, or a start on request."""


def flow_run_id(workflow: str, scheduled: datetime) -> str:
    return f"{workflow}@{utc_text(scheduled)}"


@dataclass(frozen=True, slots=True)
class TaskRunView:
    """One task of a workflow run."""

    task: str
    """Its name in the workflow (``load``)."""
    name: str
    """Its name as a job (``etl.load``)."""
    state: TaskState
    depends_on: tuple[str, ...]
    run_when: RunWhen
    level: int
    """Its depth in the graph (0: no dependencies), the column a drawing puts it in."""
    attempts: int = 0
    """Runs of it started in this workflow run (a retry is one more)."""
    run_id: str | None = None
    """The id of its latest run (``etl.load@2026-05-01T03:00:00Z#1``)."""
    started_at: datetime | None = None
    """When its first run started."""
    finished_at: datetime | None = None
    """When it ended (succeeded, failed, skipped or cancelled)."""
    exit_code: int | None = None
    fail_reason: str | None = None
    retry_at: datetime | None = None
    """A retry is due then (the task is still ``running``: its dependents wait)."""
    pid: int | None = None
    """The process of its run going now."""
    queued: str | None = None
    """The pool in whose queue its run waits for a slot (the task is ``running`` for its
    workflow run: its dependents wait); None once admitted, or without a pool."""


@dataclass(frozen=True, slots=True)
class XcomValue:
    """A value a task of a workflow run left for the others (:mod:`cronstable.xcom`)."""

    task: str
    """The task that left it (``extract``)."""
    key: str
    value: str | None
    """None once dropped from a finished run kept in the history (its size stays)."""
    size: int
    """Bytes it counts (:func:`cronstable.xcom.size`)."""


@dataclass(frozen=True, slots=True)
class FlowRunView:
    """A workflow run, as it stands."""

    id: str
    workflow: str
    digest: str
    """The definition it runs (a changed workflow's running run finishes on its own)."""
    scheduled_time: datetime
    started_at: datetime
    kind: FlowKind
    tasks: tuple[TaskRunView, ...]
    finished_at: datetime | None = None
    outcome: Outcome | None = None
    """None while it runs."""
    cancelled: bool = False
    """Cancelled as a whole (by request, or by concurrencyPolicy Replace)."""
    detached: bool = False
    """This node stopped driving it (another node leads now): its record is the new
    leader's to write."""
    xcom: tuple[XcomValue, ...] = ()
    """The values its tasks left, in the order they were first left."""

    @property
    def running(self) -> bool:
        return self.finished_at is None

    @property
    def duration(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def task(self, name: str) -> TaskRunView:
        """The task named ``name`` in the workflow; KeyError when there is none."""
        for task in self.tasks:
            if task.task == name:
                return task
        raise KeyError(name)


def keep_values(runs: Sequence[FlowRunView], budget: int) -> list[FlowRunView]:
    """``runs`` (oldest first) with the values of the newest kept while they fit in
    ``budget`` bytes together, and dropped (``value`` None) from the older ones: what
    the history of finished runs keeps."""
    left = budget
    kept: list[FlowRunView] = []
    for run in reversed(runs):
        total = sum(item.size for item in run.xcom if item.value is not None)
        if total <= left:
            left -= total
            kept.append(run)
            continue
        left = 0
        dropped = tuple(XcomValue(item.task, item.key, None, item.size) for item in run.xcom)
        kept.append(replace(run, xcom=dropped))
    kept.reverse()
    return kept


class FlowRecords(Protocol):
    """The finished runs kept of each workflow (newest last)."""

    def finished(self, workflow: str) -> list[FlowRunView]: ...

    def restore(self, workflow: str, runs: Iterable[FlowRunView]) -> None:
        """Put back a previous daemon's finished runs (oldest first), before this one's."""
        ...


class FlowListener(Protocol):
    """Told of every workflow run: it started, one of its tasks changed, it ended.  Must
    not block or raise (the scheduler logs an exception and goes on)."""

    def flow_started(self, run: FlowRunView) -> None: ...

    def flow_changed(self, run: FlowRunView) -> None: ...

    def flow_finished(self, run: FlowRunView) -> None: ...
