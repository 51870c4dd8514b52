"""What a previous daemon's records put back into the scheduler, after a restart.

Durable state (:mod:`cronstable.state.keeper`) reads the records and decides
which still hold; this module does what each one asks of the scheduler:

* **a schedule resumed** from the last fire a previous daemon handled: fires
  missed since are handled as missed while the daemon was down (the latest
  within ``startingDeadlineSeconds`` runs once);
* **a pending retry re-armed** at its original time, with the back-off it had
  reached;
* **a run adopted** that outlived the previous daemon
  (:class:`~cronstable.runtime.adopted.AdoptedRun`): it counts for
  concurrencyPolicy meanwhile and ends with outcome ``unknown`` (no report, no
  retry);
* **a run reported lost** (:meth:`Restore.report_lost`): a ``Leader`` job's run that
  went on a node that died, found by the node that owns the job now: it ends with
  outcome ``lost`` for the run listeners (so it is the last run in the job's history
  there) and reports onFailure and onPermanentFailure (no retry: the process may
  still live on a node cut off from the cluster);
* **a workflow run resumed** (:meth:`Restore.resume_flow`): its finished tasks
  stay as they ended, its running ones are adopted as runs are (a task whose run
  ends ``unknown`` is ``failed``: its exit status was lost with the daemon), a
  pending retry is re-armed at its time, and its pending tasks start when their
  dependencies allow.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from cronstable.config.desired import Job
from cronstable.ports import (
    FinishedRun,
    FlowRunView,
    Launch,
    Moment,
    RunListener,
    RunResult,
    RunStart,
    TaskRunView,
)
from cronstable.runtime.adopted import AdoptedRun, same_process
from cronstable.runtime.clock import Clock
from cronstable.runtime.retries import Retries
from cronstable.runtime.table import FlowRun, FlowSlot, JobSlot, LiveRun
from cronstable.runtime.workflows import Flows

logger = logging.getLogger(__name__)


class RestoreHost(Protocol):
    """What a restore needs of the scheduler."""

    @property
    def clock(self) -> Clock: ...

    @property
    def retries(self) -> Retries: ...

    def slot(self, name: str) -> JobSlot | None:
        """The applied job ``name``'s slot; None for a job not applied."""
        ...

    def plan(self, slot: JobSlot, after: datetime) -> None:
        """Plan ``slot``'s next fire strictly after ``after``."""
        ...

    def wake(self) -> None: ...

    @property
    def flows(self) -> Flows: ...

    def flow_slot(self, name: str) -> FlowSlot | None: ...

    def watch_task(self, run: FlowRun, live: LiveRun) -> None:
        """Watch ``live``, a task's run of workflow run ``run``, until it ends."""
        ...

    def watch(self, slot: JobSlot, live: LiveRun) -> None:
        """Watch ``live`` until it ends, as a run of ``slot``'s job."""
        ...

    def report(self, job: Job, record: FinishedRun, moments: tuple[Moment, ...]) -> None: ...

    @property
    def run_listeners(self) -> Sequence[RunListener]:
        """Told of every run's end (the run history, metrics, events, durable state)."""
        ...


class Restore:
    """The scheduler's side of :class:`~cronstable.ports.Restorable`."""

    def __init__(self, host: RestoreHost) -> None:
        self.host = host

    def resume(self, name: str, last_fire: datetime) -> bool:
        """Plan ``name`` from ``last_fire``; False for a job not applied, disabled or
        @reboot."""
        host = self.host
        slot = host.slot(name)
        if slot is None or not slot.job.config.enabled or slot.job.schedule.is_reboot:
            return False
        slot.cursor = last_fire.astimezone(UTC)
        host.plan(slot, slot.cursor)
        # only a fire that was to start already was missed while down; a later one is
        # ordinary
        slot.resumed = slot.next_start is not None and slot.next_start < host.clock.now()
        host.wake()
        return True

    def rearm_retry(self, name: str, count: int, delay: float, scheduled: datetime) -> bool:
        """Re-arm the retry sequence a previous daemon left pending (``delay``: seconds
        until it is due, 0 at once).  False when the job is not applied or a sequence
        is going."""
        slot = self.host.slot(name)
        if slot is None:
            return False
        return self.host.retries.rearm(slot, count, delay, scheduled.astimezone(UTC))

    def adopt(
        self,
        name: str,
        pid: int,
        start_ticks: int,
        scheduled: datetime,
        attempt: int,
        started_at: datetime,
    ) -> bool:
        """Watch process ``pid`` (the run of ``name`` that outlived the previous daemon)
        until it ends.  False for a job not applied, or when ``pid`` is no longer the
        process that started at ``start_ticks`` (it is left alone)."""
        slot = self.host.slot(name)
        if slot is None or not same_process(pid, start_ticks):
            return False
        run = AdoptedRun(
            name,
            pid,
            start_ticks,
            scheduled_time=scheduled,
            attempt=attempt,
            started_at=started_at,
            kill_timeout=float(slot.job.config.kill_timeout),
        )
        launch = Launch(slot.job, scheduled.astimezone(UTC), attempt, "fire")
        self.host.watch(slot, LiveRun(run, launch, None, adopted=started_at))
        return True

    def report_lost(self, name: str, start: RunStart, reason: str) -> bool:
        """See :meth:`cronstable.ports.Restorable.report_lost`.  The run ends here as any
        run does for the run listeners (the job's run history, the fleet view's last run,
        metrics, events), with outcome ``lost`` and no exit code, output or process."""
        host = self.host
        slot = host.slot(name)
        if slot is None:
            return False
        now = host.clock.now()
        result = RunResult(
            job_name=name,
            scheduled_time=start.scheduled_time,
            attempt=start.attempt,
            started_at=start.started_at,
            finished_at=now,
            duration=max(0.0, (now - start.started_at).total_seconds()),
            returncode=None,
            stdout=None,
            stderr=None,
            stdout_discarded=0,
            stderr_discarded=0,
            fail_reason=reason,
            timed_out=False,
            cancelled=False,
            pid=None,
        )
        for listener in host.run_listeners:
            try:
                listener.run_finished(start, result, "lost")
            except Exception:
                logger.exception("A run listener failed (run_finished of a lost run)")
        host.report(
            slot.job, FinishedRun.of(start, result, "lost"), ("failure", "permanent_failure")
        )
        return True

    def resume_flow(
        self, stored: FlowRunView, adopt: Mapping[str, tuple[int, int]], lost: str
    ) -> bool:
        """See :meth:`cronstable.ports.Restorable.resume_flow`."""
        host = self.host
        slot = host.flow_slot(stored.workflow)
        if slot is None or slot.workflow.digest != stored.digest:
            return False
        if any(run.id == stored.id for run in slot.runs):
            return False

        def adopted(run: FlowRun, job: Job, task: TaskRunView) -> LiveRun | None:
            found = adopt.get(task.task)
            if found is None:
                return None
            pid, ticks = found
            if not same_process(pid, ticks):
                return None
            started = task.started_at or run.started_at
            process = AdoptedRun(
                job.name,
                pid,
                ticks,
                scheduled_time=run.scheduled,
                attempt=max(task.attempts, 1),
                started_at=started,
                kill_timeout=float(job.config.kill_timeout),
            )
            launch = Launch(job, run.scheduled, max(task.attempts, 1), "task")
            live = LiveRun(
                process,
                launch,
                None,
                adopted=started,
                flow=run,
                on_end=host.flows.task_ended,
            )
            host.watch_task(run, live)
            return live

        return host.flows.resume(slot, stored, adopted, lost) is not None
