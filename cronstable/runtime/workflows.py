"""Workflow runs: the scheduler's side of :mod:`cronstable.workflows.dag`.

A fire of a workflow (a catch-up, @reboot, a start on request) makes a
:class:`~cronstable.runtime.table.FlowRun` with an id and one state per task.
After every change (the run started, a task ended, a retry came due) the run asks
:func:`~cronstable.workflows.dag.step` what to do, and does only that: mark the
tasks it says are skipped, start the ones it says are ready (at once, in
parallel), and end the run when it says it is done.

* Each task runs as an ordinary run of the job ``WORKFLOW.TASK`` (the process,
  output capture, timeouts, the launch guards, the run listeners), under the
  definition the workflow run started with, however the workflow changes
  meanwhile.
* A task's retries are its own (``onFailure.retry``) and finish before its
  dependents decide: a failed attempt with a retry to follow keeps the task
  ``running`` until the retry's run ends.  Each attempt reports as a job's run
  does (onFailure, then onPermanentFailure once no retry follows, onSuccess).
* The run ends when nothing runs and nothing can start: its outcome is reported
  through the workflow's own onFailure/onSuccess (a cancelled run reports
  nothing), and told to every :class:`~cronstable.ports.FlowListener`.
* Cancelling a run (on request, or concurrencyPolicy Replace) cancels its
  pending tasks and pending retries and stops its running ones; a removed
  workflow's runs start nothing more and let their running tasks finish.  A run
  whose task the cluster gate no longer lets this node start (the leadership
  moved) is left to the node that leads now: this one stops driving it.  A pause
  (``suspend``, ``POST /workflows/{name}/pause``) holds the workflow's fires only:
  a run going starts its next tasks.
* A stopping daemon starts no task and arms no retry timer; what its runs reached
  is told to the listeners (durable state keeps it for the next start).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Protocol

from cronstable import xcom
from cronstable.config.desired import Job
from cronstable.ports import (
    FAILURES,
    FinishedRun,
    FlowKind,
    FlowRunView,
    Moment,
    RunStart,
    TaskRunView,
    XcomValue,
    flow_run_id,
    report_moments,
)
from cronstable.runtime.backoff import RetryState
from cronstable.runtime.clock import Clock
from cronstable.runtime.table import FlowRun, FlowSlot, LiveRun, SchedulerStats, TaskRun
from cronstable.workflows.dag import DONE, Outcome, TaskState, levels, step

# the scheduler's own lines: a logging section quiets them by its name (docs/configuration.md)
logger = logging.getLogger("cronstable.runtime.scheduler")

UNKNOWN_OUTCOME = "outcome unknown: the run outlived the daemon that started it"
"""fail_reason of a task whose run was adopted after a restart: its exit status was lost."""
RECHECK = 1.0
"""Seconds between two looks at the gate by a run waiting for the leadership."""


class FlowHost(Protocol):
    """What workflow runs need of the scheduler."""

    @property
    def clock(self) -> Clock: ...

    @property
    def stats(self) -> SchedulerStats: ...

    @property
    def stopping(self) -> bool: ...

    def gate_says(self, job: Job) -> str | None: ...

    def launch_task(self, run: FlowRun, job: Job, attempt: int) -> LiveRun:
        """Start (in the background) a run of ``job``, a task of ``run``'s workflow."""
        ...

    def report(self, job: Job, record: FinishedRun, moments: tuple[Moment, ...]) -> None: ...

    def tell_flow(self, event: str, view: FlowRunView) -> None:
        """Tell every flow listener (``flow_started``, ``flow_changed``, ``flow_finished``)."""
        ...


class Flows:
    """The workflow runs of a scheduler (each kept in its :class:`FlowSlot`)."""

    def __init__(self, host: FlowHost) -> None:
        self.host = host
        self._waiting: set[asyncio.Task[None]] = set()
        self._changed: dict[int, FlowRun] = {}
        """Runs changed since the listeners were last told (by identity)."""

    def changed(self, run: FlowRun) -> None:
        """Tell the listeners of ``run``'s change, once for all the changes of this turn of
        the event loop (the tasks a decision starts start in the same turn: one view of
        the run, not one per task)."""
        if not self._changed:
            asyncio.get_running_loop().call_soon(self._tell_changed)
        self._changed[id(run)] = run

    def _tell_changed(self) -> None:
        runs, self._changed = list(self._changed.values()), {}
        for run in runs:
            if run.finished_at is None:  # an ended run was told whole already
                self.host.tell_flow("flow_changed", self.view(run))

    # ------------------------------------------------------------ a run's life

    def start(
        self,
        slot: FlowSlot,
        scheduled: datetime,
        kind: FlowKind,
        waits: tuple[asyncio.Event, ...] = (),
    ) -> FlowRun:
        """A new run of ``slot``'s workflow for the fire at ``scheduled``; it starts its
        ready tasks at once (once ``waits`` are set)."""
        flow = slot.workflow
        run = FlowRun(
            flow=flow,
            slot=slot,
            id=self.unique_id(slot, scheduled),
            scheduled=scheduled,
            kind=kind,
            started_at=self.host.clock.now(),
            tasks={task: TaskRun() for task in flow.dag.tasks},
            waits=waits,
            depth=levels(flow.dag),
        )
        slot.runs.append(run)
        self.host.stats.flow_runs += 1
        logger.info(
            "Workflow %s: run %s started (%d task%s)",
            flow.name,
            run.id,
            len(run.tasks),
            "" if len(run.tasks) == 1 else "s",
            extra={"workflow": flow.name, "flow_run": run.id},
        )
        self.host.tell_flow("flow_started", self.view(run))
        if waits:
            task = asyncio.create_task(self._after_waits(run))
            self._waiting.add(task)
            task.add_done_callback(self._waiting.discard)
        else:
            self.advance(run)
        return run

    def resume(
        self,
        slot: FlowSlot,
        stored: FlowRunView,
        adopt: Callable[[FlowRun, Job, TaskRunView], LiveRun | None],
        lost: str,
    ) -> FlowRun | None:
        """Go on with ``stored``, a run of ``slot``'s workflow (same definition) that a
        previous daemon or another node left (see
        :meth:`cronstable.ports.Restorable.resume_flow`); ``adopt`` watches a running
        task's process (None when it is gone).  None when ``stored`` does not fit."""
        flow = slot.workflow
        if {task.task for task in stored.tasks} != set(flow.dag.tasks):
            return None
        now = self.host.clock.now()
        tasks: dict[str, TaskRun] = {}
        for seen in stored.tasks:
            tasks[seen.task] = TaskRun(
                state=seen.state,
                attempts=seen.attempts,
                run_id=seen.run_id,
                started_at=seen.started_at,
                finished_at=seen.finished_at,
                exit_code=seen.exit_code,
                fail_reason=seen.fail_reason,
            )
        run = FlowRun(
            flow=flow,
            slot=slot,
            id=stored.id,
            scheduled=stored.scheduled_time,
            kind=stored.kind,
            started_at=stored.started_at,
            tasks={name: tasks[name] for name in flow.dag.tasks},
            depth=levels(flow.dag),
        )
        _keep(run, {(item.task, item.key): item.value for item in stored.xcom if item.value})
        slot.runs.append(run)
        for seen in stored.tasks:
            task = run.tasks[seen.task]
            if seen.state != "running":
                continue
            if seen.queued is not None and seen.pid is None:
                # it waited in its pool's queue and never started: it goes back to the
                # queue when its turn comes (its attempt was not made)
                task.state, task.attempts = "pending", max(0, seen.attempts - 1)
                continue
            if seen.pid is not None:
                live = adopt(run, flow.tasks[seen.task], seen)
                if live is not None:
                    task.live, task.pid = live, seen.pid
                    continue
            if seen.retry_at is not None and not stored.cancelled:
                job = flow.tasks[seen.task]
                state = RetryState.from_config(job.config.on_failure.retry)
                for _ in range(max(seen.attempts, 0)):
                    state.next_delay()
                task.retry, task.retry_at = state, seen.retry_at
                delay = max(0.0, (seen.retry_at - now).total_seconds())
                task.retry_task = asyncio.create_task(self._retry_after(run, seen.task, delay))
                continue
            task.fail_reason = lost
            self._end_task(task, "failed", now)
        logger.info(
            "Workflow %s: run %s resumed (%s)",
            flow.name,
            run.id,
            ", ".join(f"{name} {task.state}" for name, task in run.tasks.items()),
            extra={"workflow": flow.name, "flow_run": run.id},
        )
        self.host.tell_flow("flow_started", self.view(run))
        if stored.cancelled:
            self.cancel(run, "cancelled (before the restart)")
        else:
            self.advance(run)
        return run

    @staticmethod
    def unique_id(slot: FlowSlot, scheduled: datetime) -> str:
        ident = flow_run_id(slot.workflow.name, scheduled)
        taken = {run.id for run in slot.runs}
        if slot.last_run is not None:
            taken.add(slot.last_run.id)
        if ident not in taken:
            return ident
        count = 2
        while f"{ident}#{count}" in taken:
            count += 1
        return f"{ident}#{count}"

    async def _after_waits(self, run: FlowRun) -> None:
        await asyncio.gather(*(event.wait() for event in run.waits))
        run.waits = ()
        self.advance(run)

    def advance(self, run: FlowRun) -> None:
        """Ask the DAG what to do now, and do it."""
        if run.finished_at is not None or run.waits:
            return
        host = self.host
        now = host.clock.now()
        if run.retired or run.cancelled:
            for task in run.tasks.values():
                if task.state == "pending":
                    self._end_task(task, "cancelled", now)
        decided = step(run.flow.dag, {name: task.state for name, task in run.tasks.items()})
        for name in decided.skip:
            self._end_task(run.tasks[name], "skipped", now)
            logger.info(
                "Workflow %s: task %s skipped (runWhen %s no longer holds), run %s",
                run.flow.name,
                name,
                run.flow.dag.run_when[name],
                run.id,
                extra={"workflow": run.flow.name, "flow_run": run.id, "task": name},
            )
        if decided.done:
            assert decided.outcome is not None
            self.finish(run, decided.outcome)
            return
        if decided.start and not (host.stopping or run.detached):
            # a start on request runs where it was asked (as a job's does), whoever leads
            refused = None if run.kind == "manual" else host.gate_says(run.flow.job)
            if refused == "paused":
                # the gate asks the cluster first: this node may go on; a pause holds
                # the workflow's fires, never the tasks of a run already going
                refused = None
            if refused in ("leadership_unknown", "gate_error"):
                self._recheck(run)
            elif refused is not None:
                self.detach(run, f"the cluster gate says {refused}")
            else:
                for name in decided.start:
                    self._launch(run, name, 1)
        self.changed(run)
        if run.detached and not any(task.live is not None for task in run.tasks.values()):
            self._leave(run)

    def _leave(self, run: FlowRun) -> None:
        """A detached run with nothing running here any more: no longer this node's."""
        slot = run.slot
        if run in slot.runs:
            slot.runs.remove(run)
            run.done.set()
            logger.info(
                "Workflow %s: run %s left to the node that leads (%s)",
                run.flow.name,
                run.id,
                ", ".join(f"{name} {task.state}" for name, task in run.tasks.items()),
                extra={"workflow": run.flow.name, "flow_run": run.id},
            )

    def _recheck(self, run: FlowRun) -> None:
        async def later() -> None:
            await self.host.clock.sleep(RECHECK)
            self.advance(run)

        task = asyncio.create_task(later())
        self._waiting.add(task)
        task.add_done_callback(self._waiting.discard)

    def detach(self, run: FlowRun, why: str) -> None:
        """Stop driving ``run`` here (its running tasks finish and are recorded)."""
        if run.detached:
            return
        run.detached = True
        self.changed(run)
        logger.warning(
            "Workflow %s: run %s is no longer driven by this node (%s); its running tasks "
            "finish here",
            run.flow.name,
            run.id,
            why,
            extra={"workflow": run.flow.name, "flow_run": run.id},
        )

    def _launch(self, run: FlowRun, name: str, attempt: int) -> None:
        task = run.tasks[name]
        task.state = "running"
        task.attempts = attempt
        task.retry_at = None
        task.live = self.host.launch_task(run, run.flow.tasks[name], attempt)
        task.run_id = task.live.launch.id

    @staticmethod
    def _end_task(task: TaskRun, state: TaskState, now: datetime) -> None:
        task.state = state
        task.finished_at = now
        task.retry_at = None
        task.pid = None
        if task.retry_task is not None and not task.retry_task.done():
            task.retry_task.cancel()
        task.retry_task = None

    def task_started(self, live: LiveRun) -> None:
        """A task's run started (its pid and start are known now)."""
        run = live.flow
        if run is None or live.start is None:
            return
        task = run.tasks[str(live.job.task)]
        if task.live is live:
            task.pid = live.start.pid
            if task.started_at is None:
                task.started_at = live.start.started_at
            self.changed(run)

    def task_ended(self, live: LiveRun) -> None:
        """A task's run is over, however it ended (:attr:`LiveRun.on_end`)."""
        run = live.flow
        if run is None:
            return
        name = str(live.job.task)
        task = run.tasks[name]
        if task.live is not live:
            return
        task.live = None
        task.pid = None
        host = self.host
        now = host.clock.now()
        job = live.job
        record = live.record
        if record is not None:
            task.exit_code = record.exit_code
            task.fail_reason = record.fail_reason
        outcome = live.outcome
        if outcome is None:
            if live.refused is not None:
                task.fail_reason = f"not started: {live.refused}"
                self._end_task(task, "failed", now)
            elif host.stopping and not run.cancelled:
                # the daemon stops before it started: the next start runs it
                task.state, task.attempts = "pending", task.attempts - 1
            elif run.cancelled or live.cancelled or live.replaced:
                self._end_task(task, "cancelled", now)
            else:
                task.fail_reason = "the run failed unexpectedly (logged)"
                self._end_task(task, "failed", now)
        elif outcome == "succeeded":
            assert record is not None
            host.report(job, record, report_moments("succeeded", retry_follows=False))
            self._end_task(task, "succeeded", now)
        elif outcome in FAILURES:
            assert record is not None
            if self._retry(run, name, record, now):
                self.changed(run)
                return
            self._end_task(task, "failed", now)
        elif outcome == "unknown":
            task.fail_reason = UNKNOWN_OUTCOME
            self._end_task(task, "failed", now)
        else:  # cancelled, replaced
            self._end_task(task, "cancelled", now)
        self._log_task(run, name, task)
        self.advance(run)

    def _retry(self, run: FlowRun, name: str, record: FinishedRun, now: datetime) -> bool:
        """Report a failed attempt; arm its retry when one follows (whether one does)."""
        host = self.host
        task = run.tasks[name]
        job = run.flow.tasks[name]
        policy = job.config.on_failure.retry
        if task.retry is None and policy.maximum_retries != 0:
            task.retry = RetryState.from_config(policy)
        state = task.retry
        follows = (
            state is not None
            and not state.exhausted
            and not run.cancelled
            and not run.retired
            and not run.detached
        )
        host.report(job, record, report_moments(record.outcome, retry_follows=follows))
        if not follows or state is None:
            return False
        delay = state.next_delay()
        host.stats.retries += 1
        task.retry_at = now + timedelta(seconds=delay)
        limit = "∞" if state.maximum_retries == -1 else str(state.maximum_retries)
        logger.info(
            "Job %s: retry %d of %s in %.1f s (workflow run %s)",
            job.name,
            state.count,
            limit,
            delay,
            run.id,
            extra={"job": job.name, "attempt": state.count + 1, "flow_run": run.id},
        )
        if not host.stopping:
            task.retry_task = asyncio.create_task(self._retry_after(run, name, delay))
        return True

    async def _retry_after(self, run: FlowRun, name: str, delay: float) -> None:
        await self.host.clock.sleep(delay)
        task = run.tasks[name]
        task.retry_task = None
        if run.finished_at is not None or task.state != "running" or task.live is not None:
            return
        if run.cancelled or self.host.stopping or run.detached:
            return
        self.rearm(run, name)

    def rearm(self, run: FlowRun, name: str) -> None:
        """Start the pending retry of ``name`` now."""
        self._launch(run, name, run.tasks[name].attempts + 1)
        self.changed(run)

    def _log_task(self, run: FlowRun, name: str, task: TaskRun) -> None:
        if task.state == "failed" and task.fail_reason:
            logger.info(
                "Workflow %s: task %s %s (%s), run %s",
                run.flow.name,
                name,
                task.state,
                task.fail_reason,
                run.id,
                extra={"workflow": run.flow.name, "flow_run": run.id, "task": name},
            )

    def cancel(self, run: FlowRun, why: str = "cancelled") -> bool:
        """Cancel ``run`` as a whole; False when it has ended already."""
        if run.finished_at is not None or run.cancelled:
            return False
        run.cancelled = True
        now = self.host.clock.now()
        for task in run.tasks.values():
            if task.state == "pending":
                self._end_task(task, "cancelled", now)
            elif task.state == "running" and task.live is None:  # a retry was pending
                self._end_task(task, "cancelled", now)
            elif task.live is not None and not task.live.cancelled:
                live = task.live
                live.cancelled = True
                if live.ticket is not None:
                    live.ticket.withdraw()  # waiting in its pool's queue: it leaves it
                live.stopping = asyncio.ensure_future(live.run.cancel())
        logger.info(
            "Workflow %s: run %s %s",
            run.flow.name,
            run.id,
            why,
            extra={"workflow": run.flow.name, "flow_run": run.id},
        )
        for event in run.waits:
            event.set()  # a Replace run waiting for this one may go on; this one ends
        run.waits = ()
        self.advance(run)
        return True

    def retire(self, run: FlowRun) -> None:
        """``run``'s workflow was removed: nothing more starts; running tasks finish."""
        if run.finished_at is not None or run.retired:
            return
        run.retired = True
        for task in run.tasks.values():
            if task.state == "running" and task.live is None:
                self._end_task(task, "cancelled", self.host.clock.now())
            elif task.live is not None and task.live.ticket is not None:
                if task.live.ticket.queued:  # not started yet: it never will
                    task.live.cancelled = True
                    task.live.ticket.withdraw()
        self.advance(run)

    def finish(self, run: FlowRun, outcome: Outcome) -> None:
        host = self.host
        self._changed.pop(id(run), None)
        run.finished_at = host.clock.now()
        run.outcome = outcome
        slot = run.slot
        if run in slot.runs:
            slot.runs.remove(run)
        view = self.view(run)
        slot.last_run = view
        run.done.set()
        duration = (run.finished_at - run.started_at).total_seconds()
        logger.info(
            "Workflow %s finished: %s, run %s, %.3f s (%s)",
            run.flow.name,
            outcome,
            run.id,
            duration,
            ", ".join(f"{name} {task.state}" for name, task in run.tasks.items()),
            extra={
                "workflow": run.flow.name,
                "flow_run": run.id,
                "outcome": outcome,
                "duration": round(duration, 6),
            },
        )
        host.tell_flow("flow_finished", view)
        if outcome != "cancelled":
            record = flow_record(view)
            host.report(run.flow.job, record, report_moments(record.outcome, False))

    # ------------------------------------------------------------ values between tasks

    def push(self, run: FlowRun, task: str, values: Mapping[str, str]) -> str | None:
        """Keep ``values`` (by key) that ``task`` of ``run`` leaves for the others, replacing
        what it left under the same keys; why not (nothing is kept) when the run ended or
        its values would exceed :data:`cronstable.xcom.MAX_RUN` together."""
        if run.finished_at is not None:
            return f"workflow run {run.id} has ended"
        total = run.xcom_bytes
        for key, value in values.items():
            old = run.xcom.get((task, key))
            total += xcom.size(key, value) - (0 if old is None else xcom.size(key, old))
        if total > xcom.MAX_RUN:
            return (
                f"the values of workflow run {run.id} would be {total} bytes together, at "
                f"most {xcom.MAX_RUN}"
            )
        merged = dict(run.xcom)
        merged.update({(task, key): value for key, value in values.items()})
        _keep(run, merged)
        self.changed(run)
        return None

    @staticmethod
    def pull(run: FlowRun, task: str, key: str) -> str | None:
        """The value ``task`` of ``run`` left under ``key``; None when it left none."""
        return run.xcom.get((task, key))

    # ------------------------------------------------------------ what it shows

    def view(self, run: FlowRun) -> FlowRunView:
        """The run as it stands (each task's view rebuilt only when the task changed)."""
        view = FlowRunView(
            id=run.id,
            workflow=run.flow.name,
            digest=run.flow.digest,
            scheduled_time=run.scheduled,
            started_at=run.started_at,
            kind=run.kind,
            tasks=tuple(self._task_view(run, name, task) for name, task in run.tasks.items()),
            finished_at=run.finished_at,
            outcome=run.outcome,
            cancelled=run.cancelled,
            detached=run.detached,
            xcom=run.xcom_view,
        )
        run.last_view = view
        return view

    @staticmethod
    def _task_view(run: FlowRun, name: str, task: TaskRun) -> TaskRunView:
        ticket = task.live.ticket if task.live is not None else None
        queued = ticket.pool.name if ticket is not None and ticket.queued else None
        key = (
            task.state,
            task.attempts,
            task.run_id,
            task.started_at,
            task.finished_at,
            task.exit_code,
            task.fail_reason,
            task.retry_at,
            task.pid,
            queued,
        )
        cached = run.views.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        dag = run.flow.dag
        made = TaskRunView(
            task=name,
            name=run.flow.tasks[name].name,
            state=task.state,
            depends_on=dag.depends_on[name],
            run_when=dag.run_when[name],
            level=run.depth[name],
            attempts=task.attempts,
            run_id=task.run_id,
            started_at=task.started_at,
            finished_at=task.finished_at,
            exit_code=task.exit_code,
            fail_reason=task.fail_reason,
            retry_at=task.retry_at,
            pid=task.pid,
            queued=queued,
        )
        run.views[name] = (key, made)
        return made

    async def drain(self) -> None:
        """Stop the tasks that wait (for a Replace, the leadership, a retry)."""
        for task in list(self._waiting):
            task.cancel()
        await asyncio.gather(*self._waiting, return_exceptions=True)


def _keep(run: FlowRun, values: dict[tuple[str, str], str]) -> None:
    run.xcom = values
    run.xcom_bytes = sum(xcom.size(key, value) for (_, key), value in values.items())
    run.xcom_view = tuple(
        XcomValue(task, key, value, xcom.size(key, value)) for (task, key), value in values.items()
    )


def flow_record(view: FlowRunView) -> FinishedRun:
    """A finished workflow run as the reporters take a finished run: the workflow's name,
    the run's id and times, outcome ``succeeded`` or ``failed``, the failed tasks as the
    fail reason and every task's state as the output."""
    failed = [t for t in view.tasks if t.state == "failed"]
    reason = (
        None
        if view.outcome == "succeeded"
        else "task"
        + ("s " if len(failed) != 1 else " ")
        + ", ".join(
            f"{t.task} failed" + (f" ({t.fail_reason})" if t.fail_reason else "") for t in failed
        )
    )
    lines = [
        f"{t.task}: {t.state}"
        + (f" ({t.fail_reason})" if t.fail_reason and t.state in DONE else "")
        for t in view.tasks
    ]
    finished = view.finished_at or view.started_at
    start = RunStart(
        id=view.id,
        job=view.workflow,
        scheduled_time=view.scheduled_time,
        attempt=1,
        started_at=view.started_at,
        pid=None,
        manual=view.kind == "manual",
    )
    return FinishedRun(
        start=start,
        outcome="succeeded" if view.outcome == "succeeded" else "failed",
        exit_code=None,
        finished_at=finished,
        duration=(finished - view.started_at).total_seconds(),
        fail_reason=reason,
        stdout="\n".join(lines) + "\n",
        stderr=None,
        stdout_dropped=0,
        stderr_dropped=0,
    )
