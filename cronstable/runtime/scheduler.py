"""The scheduler: a next-fire index over the job table, and the life of each fire.

* **Index.** Each job's next fire sits in a heap; the loop sleeps exactly until
  the soonest one (sub-second schedules included) or until woken.  No
  per-minute scan of every job.
* **Lateness.** A fire found due at most ``late_tolerance`` seconds late is
  ordinary scheduling delay and runs.  Later than that, the wall clock jumped
  (suspend, NTP step) or the daemon stalled: with ``startingDeadlineSeconds``
  set, the most recent missed fire within the deadline runs once (catch-up);
  every other missed fire is skipped, logged and counted.
* **Clock steps back.** A backward step of the wall clock (found against the
  monotonic clock, beyond ``late_tolerance``) re-plans as Vixie cron does:
  under :data:`BIG_STEP` (3 h), wildcard jobs (:attr:`Schedule.is_wildcard
  <cronstable.schedule.Schedule.is_wildcard>`) are planned anew from the new
  time, so their fires between the new and the old time run again, while
  fixed-time jobs keep their next fire and run again only once the clock passes
  the last fire they handled; a step of 3 h or more re-plans every job.
* **Swaps.** :meth:`Scheduler.replace_jobs` installs a new job table in one
  step.  Unchanged jobs keep their next fire, retry state and running runs.
  A new job, and a changed job whose timing (schedule, zone, enabled) changed,
  first fires strictly after the swap.  A changed job keeps its running runs
  and, when only its other settings changed, its place in the schedule (the
  new definition runs from the next fire on); its pending retries end, since
  they would retry a definition that is gone.  Removed jobs lose their pending
  retries and their running runs finish.  Each job remembers the last fire it
  handled, so a swap landing at a fire instant neither drops nor doubles that
  fire.
* **Runs.** Each run is launched, asked of the cluster gate and the launch
  guards, watched until it ends and told to every
  :class:`~cronstable.ports.RunListener`; fires that did not run (Forbid, found
  too late) are told to every :class:`~cronstable.ports.ReportListener` as a
  :class:`~cronstable.ports.MissedFire`.  A failed run's captured output is
  logged at WARNING.  Replaced and cancelled runs report nothing.
* **Pools.** A launch of a job with ``pool`` takes a ticket of the pool
  (:mod:`~cronstable.runtime.pools`) when it is launched, after concurrencyPolicy
  decided, and waits for its slot before the launch guards are asked; one that
  waits past ``poolTimeout`` (or finds the queue full) does not run and is told
  as a :class:`~cronstable.ports.MissedFire` (``pool_timeout``, ``pool_full``).
  A retry and a start on request queue alike.  The slot is held until the run
  ends.  A launch still waiting when the daemon stops does not run.
* **Buffers.** Under concurrencyPolicy BufferOne and BufferAll a fire that finds
  the job busy waits in the job's buffer (:meth:`Scheduler.buffer`) and is launched
  when the job is idle again (:meth:`Scheduler.drain_buffer`, after every run of the
  job ends and after a retry sequence ends without a run), asking the gate again;
  one past the bound is told as a :class:`~cronstable.ports.MissedFire`
  (``buffer_full``).  A removed or disabled job, and the daemon's stop, drop it.
* Beside it, one job each: :mod:`~cronstable.runtime.concurrency` (may a new
  run start while others go: Allow, Forbid, Replace; with ``concurrencyScope:
  cluster`` a launch guard also holds the job's slot in the cluster's store and
  another node's Replace stops the runs here through
  :meth:`Scheduler.replace_runs`), :mod:`~cronstable.runtime.retries` (retry
  sequences and what each finished run reports) and
  :mod:`~cronstable.runtime.restore` (what a previous daemon's records put back).
* **@reboot** jobs run once when :meth:`Scheduler.run` starts, never again in
  that daemon's life (also not when a reload adds one).
* **Workflows** are scheduled as jobs are (a :class:`FlowSlot` in the same heap,
  with the same lateness, catch-up, clock-step and swap rules, the same cluster
  gate, launch guards and durable fire records, through the workflow's
  :attr:`~cronstable.config.desired.Workflow.job`); a fire starts a workflow run
  (:mod:`~cronstable.runtime.workflows`) instead of a process, after
  ``concurrencyPolicy`` decided over the workflow's runs going.  Each task then runs
  as a run of the job ``WORKFLOW.TASK``, launched and watched here like any run.

Time comes from an injected :class:`~cronstable.runtime.clock.Clock` and runs
from an injected spawner, so the semantics are tested in milliseconds.

Two jobs stay in this module, on purpose: the schedule (heap, table swap, loop)
and the life of each run it starts (launch, gate and guards, watch, tell).  Both
own the same records (a job's slot holds its next fire *and* its runs going), and
every swap, fire and stop touches both at once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Final

from cronstable import xcom
from cronstable.config.desired import Job, Workflow
from cronstable.config.models import TaskConfig
from cronstable.ports import (
    FAILURES,
    WORKFLOW_RUN_ENV,
    ClusterGate,
    FinishedRun,
    FlowKind,
    FlowListener,
    FlowRunView,
    Launch,
    LaunchGuard,
    LaunchKind,
    MissedFire,
    MissedReason,
    Moment,
    PendingRetry,
    ReportListener,
    Run,
    RunListener,
    RunOutcome,
    RunResult,
    RunStart,
    StateHooks,
    run_id,
    run_outcome,
)
from cronstable.runtime import concurrency, jitter
from cronstable.runtime.backoff import RetryState
from cronstable.runtime.clock import Clock
from cronstable.runtime.concurrency import Admission, runs_going
from cronstable.runtime.pools import Pools, Ticket
from cronstable.runtime.restore import Restore
from cronstable.runtime.retries import Retries
from cronstable.runtime.table import (
    Buffered,
    FlowRun,
    FlowSlot,
    JobSlot,
    LiveRun,
    SchedulerStats,
)
from cronstable.runtime.workflows import Flows
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

LATE_TOLERANCE = 5.0
"""Seconds a fire may be found late and still count as on time."""
BIG_STEP = 3 * 3600.0
"""A backward clock step at least this long (seconds) re-plans every job, fixed-time
ones too (Vixie cron's limit); a shorter one re-plans wildcard jobs only."""
EXPLAINED = frozenset({"reboot_ran", "slot_held", "slot_not_freed", "fire_taken"})
"""Refusals whose guard logged why (naming what the reason alone cannot): the
scheduler's own line for them is DEBUG; any other refusal is a WARNING."""
MISSED_SCAN_LIMIT = 10_000
"""Most missed fires enumerated one by one after a jump (a per-second job after a
day-long suspend would otherwise take seconds to count)."""


Spawner = Callable[[Job, datetime, int], Run]
"""(job, scheduled time, attempt) → a run not yet started."""


class StartRefused(Exception):
    """A start on request that concurrencyPolicy (or a shutdown) refuses; says why."""


@dataclass(frozen=True, slots=True)
class SwapSummary:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]


WORKFLOW_RUN_ID = WORKFLOW_RUN_ENV
"""The variable that tells a task's process its workflow run's id."""


def _timing(job: Job) -> tuple[str, str, bool]:
    return (job.schedule.text, str(job.timezone), job.config.enabled)


class Scheduler:
    """See the module docstring.  What the scheduler asks and tells is handed to it here
    and does not change afterwards: ``gate``, asked before every scheduled fire and retry
    (None lets all run); ``guards``, asked in this order before every run starts (the
    cluster slot, then durable state); ``hooks``, told of fires and retries to keep across
    restarts (None keeps nothing); ``run_listeners``, told of every run's start and end
    (run history, metrics, events, statsd, durable state); ``report_listeners``, told
    what to report; ``pools``, the pools launches wait for (a table of its own, on this
    clock, when not given: its section configures it)."""

    def __init__(
        self,
        clock: Clock,
        spawner: Spawner,
        *,
        late_tolerance: float = LATE_TOLERANCE,
        gate: ClusterGate | None = None,
        guards: Sequence[LaunchGuard] = (),
        hooks: StateHooks | None = None,
        run_listeners: Sequence[RunListener] = (),
        report_listeners: Sequence[ReportListener] = (),
        flow_listeners: Sequence[FlowListener] = (),
        pools: Pools | None = None,
        revision: Callable[[], str | None] = lambda: None,
    ) -> None:
        """``revision``: the source revision running now (each run's start records it)."""
        self.clock = clock
        self.revision = revision
        self.spawner = spawner
        self.late_tolerance = late_tolerance
        self.stats = SchedulerStats()
        self._slots: dict[str, JobSlot] = {}
        self._table: Mapping[str, Job] = {}
        """The jobs installed, in configuration order (``_slots`` may be in another)."""
        self._order = 0
        """The largest slot order given (a partial swap numbers on from it)."""
        self._jobs_view: Mapping[str, Job] | None = None
        self._flows_view: Mapping[str, Workflow] | None = None
        self._scheduled_view: Mapping[str, Job] | None = None
        """What :attr:`jobs`, :attr:`workflows` and :attr:`scheduled` answer until the
        next swap (None: made when first read)."""
        self._names: list[str] | None = None
        """The table's names in order, made when a page is read (None: not since the swap)."""
        self._positions: dict[str, int] | None = None
        self._flows: dict[str, FlowSlot] = {}
        """The applied workflows' slots, by name (no job has a workflow's name)."""
        self._task_jobs: dict[str, Job] = {}
        """The applied workflows' tasks, by their name as jobs (``WORKFLOW.TASK``)."""
        self._generations = itertools.count(1)
        """Every plan of a slot's next fire takes the next number: a heap entry is stale
        unless its slot still has its number (unique across jobs and workflows)."""
        self._heap: list[tuple[datetime, int, int, str]] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._started = False
        self._tasks = TaskSet("the scheduler")
        """The runs' supervising tasks."""
        self._live: set[LiveRun] = set()
        """Every run not yet finished, also of jobs a swap removed."""
        self.run_listeners: Final = tuple(run_listeners)
        """Told of every run's start and end (metrics, run history)."""
        self.report_listeners: Final = tuple(report_listeners)
        """Told what to report: the moments of finished runs, missed fires (reporting)."""
        self.flow_listeners: Final = tuple(flow_listeners)
        """Told of every workflow run's start, change and end (history, metrics, state)."""
        self.gate: Final = gate
        """Asked before every scheduled fire and retry; None lets all run."""
        self.guards: Final = tuple(guards)
        """Asked, in order, before every run starts (cluster slots, state)."""
        self.state: Final = hooks
        """Told of fires and retries to keep across restarts; None keeps nothing."""
        self.pools: Final = pools if pools is not None else Pools(clock)
        """The pools a launch of a job with ``pool`` waits for."""
        self.retries = Retries(self)
        self.flows = Flows(self)
        self._restore = Restore(self)
        self._reboot_waiting: set[str] = set()
        """@reboot jobs held back while the leadership was unknown: they start once it is
        known and the gate lets them."""

    # ------------------------------------------------------------ the job table

    @property
    def started(self) -> bool:
        """Whether :meth:`run` has begun (the first revision's jobs are being scheduled)."""
        return self._started

    @property
    def jobs(self) -> Mapping[str, Job]:
        """The applied jobs (not the workflows' tasks) by name, in configuration order
        (one mapping per swap: the rounds that walk it each few seconds build nothing)."""
        if self._jobs_view is None:
            slots = self._slots
            self._jobs_view = MappingProxyType({name: slots[name].job for name in self._table})
        return self._jobs_view

    @property
    def workflows(self) -> Mapping[str, Workflow]:
        """The applied workflows by name (one mapping per swap)."""
        if self._flows_view is None:
            self._flows_view = MappingProxyType(
                {name: slot.workflow for name, slot in self._flows.items()}
            )
        return self._flows_view

    @property
    def scheduled(self) -> Mapping[str, Job]:
        """The jobs, then the workflows' own jobs, by name (one mapping per swap)."""
        if self._scheduled_view is None:
            self._scheduled_view = MappingProxyType(
                {**self.jobs, **{name: flow.job for name, flow in self.workflows.items()}}
            )
        return self._scheduled_view

    def has_job(self, name: str) -> bool:
        """Whether ``name`` is an applied job or a task of an applied workflow."""
        return name in self._slots or name in self._task_jobs

    def job_count(self) -> int:
        return len(self._slots)

    def page(self, start: int, limit: int) -> list[tuple[int, Job]]:
        """At most ``limit`` jobs from position ``start`` of the table (configuration
        order), each with its position: what a page of ``/status`` reads, in time of the
        page, not of the table."""
        names = self._names
        if names is None:  # once per swap, when a page is first asked for
            names = self._names = list(self._table)
        chosen = names[start : start + limit]
        return [(i, self._slots[name].job) for i, name in enumerate(chosen, start)]

    def position(self, name: str) -> int | None:
        """Where ``name`` is in the table (configuration order); None if it is not there."""
        positions = self._positions
        if positions is None:  # once per swap, when a page is first resumed
            positions = self._positions = {n: i for i, n in enumerate(self._table)}
        return positions.get(name)

    def job(self, name: str) -> Job | None:
        """The applied definition of ``name`` (a job, a workflow's task ``WORKFLOW.TASK``,
        or a workflow as its :attr:`~cronstable.config.desired.Workflow.job`); None for
        one not (or no longer) applied."""
        slot = self._slots.get(name) or self._flows.get(name)
        if slot is not None:
            return slot.job
        return self._task_jobs.get(name)

    def flow_slot(self, name: str) -> FlowSlot | None:
        """The applied workflow ``name``'s slot; None for a workflow not applied."""
        return self._flows.get(name)

    def next_fire(self, name: str) -> datetime | None:
        slot = self._slots.get(name) or self._flows.get(name)
        return slot.next_fire if slot is not None else None

    def next_start(self, name: str) -> datetime | None:
        """When the next fire of job (or workflow) ``name`` starts (its ``jitter``
        applied)."""
        slot = self._slot_named(name)
        return slot.next_start if slot is not None else None

    def running(self, name: str) -> int:
        slot = self._slots.get(name)
        return len(slot.running) if slot else 0

    def running_total(self) -> int:
        return sum(1 for task in self._tasks if not task.done())

    def last_result(self, name: str) -> RunResult | None:
        slot = self._slots.get(name)
        return slot.last_result if slot else None

    def retry_pending(self, name: str) -> bool:
        slot = self._slots.get(name)
        return slot is not None and Retries.pending(slot)

    def pending_retry(self, name: str) -> PendingRetry | None:
        """The retry of ``name`` waiting to start (its attempt, when, the fire it
        retries); None when none waits."""
        task_job = self._task_jobs.get(name)
        if task_job is not None:
            return self._task_retry(task_job)
        slot = self._slots.get(name)
        if slot is None or slot.retry is None or not Retries.pending(slot):
            return None
        state = slot.retry
        if state.fire is None:
            return None
        return PendingRetry(state.count + 1, state.due, state.fire)

    def _task_retry(self, job: Job) -> PendingRetry | None:
        """The retry of workflow task ``job`` waiting to start in one of its workflow's runs."""
        flow = self._flows.get(str(job.workflow))
        for run in flow.runs if flow is not None else ():
            task = run.tasks.get(str(job.task))
            if task is not None and task.live is None and task.retry_at is not None:
                return PendingRetry(task.attempts + 1, task.retry_at, run.scheduled)
        return None

    def flow_run(self, workflow: str, run: str) -> FlowRun | None:
        """The run ``run`` (its id) of workflow ``workflow`` going here; None when none is."""
        flow = self._flows.get(workflow)
        for going in flow.runs if flow is not None else ():
            if going.id == run:
                return going
        return None

    # ------------------------------------------------------------ on request

    def start_now(self, name: str, when: datetime) -> str:
        """Start a run of ``name`` now, even when the job is disabled; its run id.

        The scheduled time is ``when``, the attempt 1, and a retry sequence in
        progress is left alone.  ``concurrencyPolicy`` holds: Forbid raises
        :class:`StartRefused` while a run is going, Replace stops it first.  A job
        with ``pool`` waits in the pool's queue like any launch (:meth:`queued`).
        Raises KeyError for an unknown job.
        """
        if name in self._task_jobs:
            workflow = self._task_jobs[name].workflow
            raise StartRefused(
                f"a task runs in its workflow's runs: start workflow {workflow!r} instead"
            )
        slot = self._slots[name]
        if self._stopping:
            raise StartRefused("the daemon is shutting down")
        room = self.admit(slot, "manual")
        if room.forbidden:
            policy = slot.job.config.concurrency_policy
            raise StartRefused(
                f"{runs_going(room.going)} still going and concurrencyPolicy is {policy}"
                + (" (a start on request is not buffered)" if policy != "Forbid" else "")
            )
        inst = self.launch(slot, when, 1, None, room.waits, kind="manual")
        return run_id(name, inst.scheduled_time, inst.attempt)

    def queued(self, run: str) -> tuple[str, int] | None:
        """(pool, place in its queue, 1 first) of the launch ``run`` while it waits for a
        pool's slot; None when it does not wait (or no longer)."""
        return self.pools.queued(run)

    def cancel_runs(self, name: str, run: str | None = None) -> list[str]:
        """Stop the running runs of ``name`` (only run id ``run`` when given); their ids.

        A cancelled run ends with outcome ``cancelled``, is not reported and ends
        the job's retry sequence.  Returns at once; the runs stop in the background.
        Raises KeyError for an unknown job.  A workflow's task (``WORKFLOW.TASK``) ends
        ``cancelled`` in its workflow run, whose other tasks decide on that.
        """
        if name in self._task_jobs:
            return self._cancel_task_runs(name, run)
        slot = self._slots[name]
        stopped: list[str] = []
        for inst in slot.running:
            ident = run_id(name, inst.scheduled_time, inst.attempt)
            if inst.cancelled or inst.replaced or (run is not None and ident != run):
                continue
            inst.cancelled = True
            stopped.append(ident)
            if inst.ticket is not None:
                inst.ticket.withdraw()  # waiting in its pool's queue: it leaves it
            inst.stopping = asyncio.ensure_future(inst.run.cancel())
        if stopped:
            self.retries.end(slot)
            logger.info("Job %s: cancelling %s", name, ", ".join(stopped), extra={"job": name})
        return stopped

    def _cancel_task_runs(self, name: str, run: str | None) -> list[str]:
        stopped: list[str] = []
        for flow in self._flows.values():
            for going in flow.runs:
                for task in going.tasks.values():
                    live = task.live
                    if live is None or live.job.name != name or live.cancelled:
                        continue
                    if run is not None and live.launch.id != run:
                        continue
                    live.cancelled = True
                    stopped.append(live.launch.id)
                    if live.ticket is not None:
                        live.ticket.withdraw()  # waiting in its pool's queue: it leaves it
                    live.stopping = asyncio.ensure_future(live.run.cancel())
        if stopped:
            logger.info("Job %s: cancelling %s", name, ", ".join(stopped), extra={"job": name})
        return stopped

    # ------------------------------------------------------------ workflows on request

    def start_flow(self, name: str, when: datetime) -> str:
        """Start a run of workflow ``name`` now, even when it is disabled; its run id.

        ``concurrencyPolicy`` holds: Forbid raises :class:`StartRefused` while a run is
        going, Replace cancels it and the new run starts once it ended.  Raises KeyError
        for an unknown workflow."""
        slot = self._flows[name]
        if self._stopping:
            raise StartRefused("the daemon is shutting down")
        going = slot.going()
        policy = slot.job.config.concurrency_policy
        if policy == "Forbid" and (going or slot.starting):
            count = len(going) + slot.starting
            raise StartRefused(
                f"{count} run{'' if count == 1 else 's'} still going and concurrencyPolicy "
                "is Forbid"
            )
        waits = self._replaced_flows(slot, going) if policy == "Replace" else ()
        return self.flows.start(slot, when, "manual", waits).id

    def cancel_flow(self, name: str, run: str | None = None) -> list[str]:
        """Cancel the running runs of workflow ``name`` (only run id ``run`` when given);
        their ids.  Raises KeyError for an unknown workflow."""
        slot = self._flows[name]
        stopped = []
        for going in list(slot.runs):
            if run is not None and going.id != run:
                continue
            if self.flows.cancel(going):
                stopped.append(going.id)
        return stopped

    def _replaced_flows(
        self, slot: FlowSlot, going: Sequence[FlowRun]
    ) -> tuple[asyncio.Event, ...]:
        """Cancel ``going`` for a new run (concurrencyPolicy Replace): what it waits for."""
        for run in going:
            self.flows.cancel(run, "cancelled (concurrencyPolicy Replace starts a new run)")
            self.stats.replaced += 1
        return tuple(run.done for run in going if not run.done.is_set())

    def replace_runs(self, name: str, why: str) -> list[str]:
        """Stop the running runs of ``name`` as replaced (another node's run takes over:
        concurrencyPolicy Replace with concurrencyScope cluster); their ids.

        A replaced run is no failure: it is not reported and arms no retry, and the
        job's retry sequence ends.  Returns at once; the runs stop in the background.
        An unknown job has none.
        """
        slot = self._slots.get(name)
        if slot is None:
            return []
        active = [inst for inst in slot.running if not inst.replaced and not inst.cancelled]
        if not active:
            return []
        self.retries.end(slot)
        concurrency.replace(slot, active, why)
        self.stats.replaced += len(active)
        return [run_id(name, inst.scheduled_time, inst.attempt) for inst in active]

    def replace_jobs(
        self,
        jobs: Mapping[str, Job],
        workflows: Mapping[str, Workflow] | None = None,
        *,
        only: Collection[str] | None = None,
    ) -> SwapSummary:
        """Install a new job table (and, given ``workflows``, a new workflow table) in one
        step (see the module docstring).

        ``only``: the names of jobs that may differ from the table installed (added,
        changed or removed); every other job of ``jobs`` is the very one installed.  The
        swap then costs those (a one-file edit among 100,000 jobs), and ``unchanged`` is
        not listed.
        """
        now = self.clock.now()
        if workflows is not None:
            self._replace_flows(workflows, now, len(jobs))
        old = self._slots
        added: list[str] = []
        changed: list[str] = []
        unchanged: list[str] = []
        gone: list[JobSlot] = []
        if only is None or not old:
            slots: dict[str, JobSlot] = {}
            for order, (name, job) in enumerate(jobs.items()):
                slots[name] = self._swap(old.get(name), job, order, now, added, changed, unchanged)
            removed = [name for name in old if name not in jobs]
            gone = [old[name] for name in removed]
        else:
            slots = old  # changed in place: nothing runs between here and the end of the swap
            removed = []
            for name in only:
                new = jobs.get(name)
                if new is None:
                    if name in slots:
                        gone.append(slots.pop(name))
                        removed.append(name)
                    continue
                self._order += 1
                slots[name] = self._swap(slots.get(name), new, self._order, now, added, changed, [])
        for slot in gone:
            slot.generation = next(self._generations)
            slot.next_fire = None
            self.retries.end(slot, "removed")
            self._drop_buffer(slot, "the job was removed")
        self._slots = slots
        self._table = jobs
        self._jobs_view = self._flows_view = self._scheduled_view = None
        self._names = None
        self._positions = None
        self._order = max(self._order, len(jobs))
        for name in changed:
            # its pending retry ended: the fires waiting for it need not wait any more
            self.drain_buffer(slots[name])
        self._wake.set()
        return SwapSummary(tuple(added), tuple(removed), tuple(changed), tuple(unchanged))

    def _swap(
        self,
        slot: JobSlot | None,
        job: Job,
        order: int,
        now: datetime,
        added: list[str],
        changed: list[str],
        unchanged: list[str],
    ) -> JobSlot:
        """The slot of ``job`` in the new table (see :meth:`replace_jobs`)."""
        if slot is None:
            slot = JobSlot(job=job, order=order, cursor=now)
            self.plan(slot, now)
            added.append(job.name)
        elif slot.job.digest == job.digest:
            slot.order = order
            unchanged.append(job.name)
        else:
            retimed = _timing(slot.job) != _timing(job)
            disabled = not job.config.enabled
            self.retries.end(slot, "disabled" if disabled else "redefined")
            slot.job = job
            slot.order = order
            if disabled:
                self._drop_buffer(slot, "the job was disabled")
            if retimed:
                # a new fire sequence: none of it from before the swap; the cursor
                # is later than now only after a backward clock step, when a
                # fixed-time fire already handled must not run again
                slot.cursor = max(slot.cursor, now)
                self.plan(slot, slot.cursor)
            changed.append(job.name)
        return slot

    def _replace_flows(self, workflows: Mapping[str, Workflow], now: datetime, base: int) -> None:
        """The workflow half of :meth:`replace_jobs`: a changed workflow's runs going keep
        the definition they started with; a removed one's start nothing more."""
        old = self._flows
        flows: dict[str, FlowSlot] = {}
        for order, (name, flow) in enumerate(workflows.items(), start=base):
            slot = old.get(name)
            if slot is None:
                slot = FlowSlot(job=flow.job, order=order, cursor=now, flow=flow)
                self.plan(slot, now)
            else:
                retimed = _timing(slot.job) != _timing(flow.job)
                slot.flow, slot.job, slot.order = flow, flow.job, order
                if retimed:
                    slot.cursor = max(slot.cursor, now)
                    self.plan(slot, slot.cursor)
            flows[name] = slot
        for name, slot in old.items():
            if name not in workflows:
                slot.generation = next(self._generations)
                slot.next_fire = None
                for run in list(slot.runs):
                    self.flows.retire(run)
        self._flows = flows
        self._task_jobs = {
            job.name: job for flow in workflows.values() for job in flow.tasks.values()
        }

    def plan(self, slot: JobSlot, after: datetime) -> None:
        """Compute and index the slot's next fire strictly after ``after``."""
        slot.generation = next(self._generations)
        job = slot.job
        slot.next_fire = slot.next_start = None
        if not job.config.enabled or job.schedule.is_reboot:
            return
        fire = self._next(job, after)
        slot.next_fire = fire
        if fire is not None:
            slot.next_start = self.start_of(job, fire)
            heapq.heappush(self._heap, (slot.next_start, slot.order, slot.generation, job.name))

    def start_of(self, job: Job, fire: datetime) -> datetime:
        """When ``job``'s scheduled ``fire`` starts: delayed by its ``jitter``
        (:mod:`~cronstable.runtime.jitter`), kept below the next fire."""
        spread = job.config.jitter
        if not spread:
            return fire
        return fire + jitter.offset(job.name, fire, self._next(job, fire), spread)

    def _slot_named(self, name: str) -> JobSlot | None:
        return self._slots.get(name) or self._flows.get(name)

    def _all_slots(self) -> list[JobSlot]:
        return [*self._slots.values(), *self._flows.values()]

    @staticmethod
    def _next(job: Job, after: datetime) -> datetime | None:
        """The job's next fire as a UTC instant.

        Fires are compared and stored in UTC only: two aware datetimes with the
        same zone compare by wall time, so the two 01:30s of a fall-back night
        would be equal.
        """
        fire = job.schedule.next_fire(after, job.timezone)
        return None if fire is None else fire.astimezone(UTC)

    # ------------------------------------------------------------ the loop

    def wake(self) -> None:
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (no new run starts but a manual one)."""
        return self._stopping

    def stop(self) -> None:
        """Stop spawning; :meth:`run` then cancels pending retries and waits for running jobs.
        Launches waiting in a pool's queue do not run."""
        self._stopping = True
        for slot in self._slots.values():
            self._drop_buffer(slot, "the daemon stops")
        dropped = self.pools.withdraw_all()
        if dropped:
            logger.info(
                "%d launch%s waiting in a pool's queue will not run: the daemon stops",
                dropped,
                "" if dropped == 1 else "es",
            )
        self._wake.set()

    async def cancel_running(self) -> None:
        """Stop every running run now (a second shutdown signal), removed jobs' runs included."""
        await asyncio.gather(*(inst.run.cancel() for inst in self._live), return_exceptions=True)

    async def run(self) -> None:
        """Schedule until :meth:`stop`, then drain."""
        self._started = True
        now = self.clock.now()
        for slot in self._all_slots():
            if slot.job.config.enabled and slot.job.schedule.is_reboot:
                if slot.retry is not None:
                    continue  # a retry re-armed from durable state goes on with this boot's run
                self._fire(slot, now)
        last_wall, last_mono = now, self.clock.monotonic()
        while not self._stopping:
            self._wake.clear()
            now, mono = self.clock.now(), self.clock.monotonic()
            drift = (now - last_wall).total_seconds() - (mono - last_mono)
            if drift < -self.late_tolerance:
                self.stats.clock_jumps += 1
                self._stepped_back(now, -drift)
            elif drift > self.late_tolerance:
                self.stats.clock_jumps += 1
                logger.warning(
                    "The wall clock moved %+.1f s against the monotonic clock "
                    "(suspend, NTP step or a stalled daemon)",
                    drift,
                )
            last_wall, last_mono = now, mono
            if self._reboot_waiting:
                self._reboot_when_known(now)
            self._service(now)
            await self.clock.sleep_until(self._soonest(), self._wake, precise=True)
        if self.gate is not None:
            # before the drain, which may last long: another node takes over meanwhile
            try:
                await self.gate.release()
            except Exception:
                logger.exception("Releasing the cluster leadership failed")
        await self._drain()

    def _reboot_when_known(self, now: datetime) -> None:
        """Start the @reboot jobs that waited for the leadership, once the gate decides."""
        for name in sorted(self._reboot_waiting):
            slot = self._slot_named(name)
            if slot is None or not slot.job.config.enabled or not slot.job.schedule.is_reboot:
                self._reboot_waiting.discard(name)
                continue
            reason = self.gate_says(slot.job)
            if reason == "leadership_unknown":
                continue
            self._reboot_waiting.discard(name)
            if reason is None:
                self._fire(slot, now)

    def _stepped_back(self, now: datetime, step: float) -> None:
        """Re-plan after the wall clock stepped back ``step`` seconds (Vixie cron's rule)."""
        every = step >= BIG_STEP
        # from the current whole second: a fire in it (the one the loop woke up for,
        # in the old time) runs, as Vixie cron runs the current minute's wildcard jobs
        start = now.replace(microsecond=0) - timedelta(microseconds=1)
        count = 0
        for slot in self._all_slots():
            if every or slot.job.schedule.is_wildcard:
                slot.cursor = start
                self.plan(slot, start)
                count += 1
        self.stats.replanned += count
        logger.warning(
            "The wall clock stepped back %.1f s against the monotonic clock (NTP step?): "
            "%s planned from the new time%s",
            step,
            f"all {count} job{'' if count == 1 else 's'}"
            if every
            else f"{count} wildcard job{'' if count == 1 else 's'}",
            "" if every else "; fixed-time jobs run again once the clock passes their last fire",
        )

    def _soonest(self) -> datetime | None:
        while self._heap:
            fire, _, generation, name = self._heap[0]
            slot = self._slot_named(name)
            if slot is not None and slot.generation == generation:
                return fire
            heapq.heappop(self._heap)
        return None

    def _service(self, now: datetime) -> None:
        while self._heap and self._heap[0][0] <= now:
            _, _, generation, name = heapq.heappop(self._heap)
            slot = self._slot_named(name)
            if slot is None or slot.generation != generation or slot.next_fire is None:
                continue
            self._due(slot, slot.next_fire, now)

    def _due(self, slot: JobSlot, fire: datetime, now: datetime) -> None:
        job = slot.job
        resumed, slot.resumed = slot.resumed, False
        # after a restart, every fire before now was missed while the daemon was down:
        # none of them is ordinary scheduling delay
        on_time = now if resumed else now - timedelta(seconds=self.late_tolerance)
        # on time or late by when each fire was to start (its jitter applied)
        if self.start_of(job, fire) >= on_time:
            slot.cursor = fire
            self._fire(slot, fire)
            self.plan(slot, fire)
            return
        # Found too late: walk the missed fires up to the on-time window.
        deadline = job.config.starting_deadline_seconds
        window = now - timedelta(seconds=deadline) if deadline is not None else None
        catch_up: datetime | None = None
        last_missed = fire
        missed = 0
        cursor: datetime | None = fire
        while (
            cursor is not None
            and self.start_of(job, cursor) < on_time
            and missed < MISSED_SCAN_LIMIT
        ):
            if window is not None and cursor >= window:
                catch_up = cursor
            last_missed = cursor
            missed += 1
            cursor = self._next(job, cursor)
        counted = catch_up is not None  # the catch-up fire is among the `missed` counted
        capped = cursor is not None and self.start_of(job, cursor) < on_time
        if capped:
            # too many to enumerate: resume at the on-time window; in the deadline
            # window take its first fire rather than walking to its last
            cursor = self._next(job, on_time - timedelta(microseconds=1))
            if window is not None and catch_up is None:
                first = self._next(job, window - timedelta(microseconds=1))
                catch_up = first if first is not None and first < on_time else None
        if counted:
            missed -= 1  # it runs after all
        self.stats.missed += missed
        if missed:
            self._missed(
                job,
                MissedFire(
                    job.name,
                    fire,
                    "daemon_down"
                    if resumed
                    else "deadline"
                    if deadline is not None
                    else "clock_jump",
                    missed,
                    last_missed,
                ),
            )
            if catch_up is not None:
                advice = "; running the latest within startingDeadlineSeconds once"
            elif deadline is None:
                advice = "; set startingDeadlineSeconds to catch up"
            else:
                advice = ""
            logger.warning(
                "Job %s missed %s%d fire%s from %s to %s (%s)%s",
                job.name,
                "at least " if capped else "",
                missed,
                "" if missed == 1 else "s",
                fire.isoformat(),
                last_missed.isoformat(),
                "while the daemon was down"
                if resumed
                else f"found {(now - fire).total_seconds():.1f} s late",
                advice,
                extra={"job": job.name, "missed": missed},
            )
        slot.cursor = last_missed
        if catch_up is not None:
            self.stats.catch_ups += 1
            self._fire(slot, catch_up)
        elif resumed and self.state is not None:
            self.state.fire_handled(job, last_missed)  # not reported missed again
        # fires inside the on-time window, if any, run as usual
        while cursor is not None and self.start_of(job, cursor) <= now:
            slot.cursor = cursor
            self._fire(slot, cursor)
            cursor = self._next(job, cursor)
        # every fire due to start before now has been handled (run or missed); after a
        # capped walk, every fire before the on-time window
        self.plan(
            slot, max(slot.cursor, on_time - timedelta(microseconds=1)) if capped else slot.cursor
        )

    # ------------------------------------------------------------ after a restart

    def resume(self, name: str, last_fire: datetime) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.resume`."""
        return self._restore.resume(name, last_fire)

    def rearm_retry(self, name: str, count: int, delay: float, scheduled: datetime) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.rearm_retry`."""
        return self._restore.rearm_retry(name, count, delay, scheduled)

    def resume_flow(
        self, run: FlowRunView, adopt: Mapping[str, tuple[int, int]], lost: str
    ) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.resume_flow`."""
        return self._restore.resume_flow(run, adopt, lost)

    def report_lost(self, name: str, start: RunStart, reason: str) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.report_lost`."""
        return self._restore.report_lost(name, start, reason)

    def gate_allows(self, job: Job) -> bool:
        return self.gate_says(job) is None

    def adopt(
        self,
        name: str,
        pid: int,
        start_ticks: int,
        scheduled: datetime,
        attempt: int,
        started_at: datetime,
    ) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.adopt`."""
        return self._restore.adopt(name, pid, start_ticks, scheduled, attempt, started_at)

    # ------------------------------------------------------------ runs

    def slot(self, name: str) -> JobSlot | None:
        """The applied job (or workflow) ``name``'s slot; None for one not applied."""
        return self._slot_named(name)

    def applied(self, slot: JobSlot) -> bool:
        """Whether ``slot`` is still the applied one of its job (no swap removed it)."""
        return self._slot_named(slot.job.name) is slot

    def gate_says(self, job: Job) -> str | None:
        """The cluster gate's answer for ``job`` now (None: it may start)."""
        if self.gate is None:
            return None
        try:
            return self.gate.allows(job)
        except Exception:  # a gate that cannot answer fails closed
            logger.exception("Job %s: the cluster gate failed; please report this", job.name)
            return "gate_error"

    def held_back(self, job: Job, scheduled: datetime, what: str) -> str | None:
        """Why the cluster gate refuses ``job`` here now (logged at DEBUG, counted); None
        when it may start."""
        reason = self.gate_says(job)
        if reason is None:
            return None
        self._count_skip(reason)
        logger.debug(
            "Job %s: %s at %s not started here (clusterPolicy %s: %s)",
            job.name,
            what,
            scheduled.isoformat(),
            job.config.cluster_policy,
            reason,
            extra={"job": job.name, "scheduled_time": scheduled.isoformat()},
        )
        return reason

    def _count_skip(self, reason: str) -> None:
        self.stats.skipped_cluster[reason] = self.stats.skipped_cluster.get(reason, 0) + 1

    def _fire(self, slot: JobSlot, scheduled: datetime) -> None:
        """A scheduled fire (or catch-up) of ``slot``'s job, or an @reboot job's one run."""
        job = slot.job
        reboot = job.schedule.is_reboot
        held = self.held_back(job, scheduled, "fire")
        if held is not None:
            if reboot and held == "leadership_unknown":
                self._reboot_waiting.add(job.name)  # runs once the leadership is known
            return
        self._reboot_waiting.discard(job.name)
        if self.state is not None:
            self.state.fire_handled(job, scheduled)
        if isinstance(slot, FlowSlot):
            self._fire_flow(slot, scheduled, "reboot" if reboot else "fire")
            return
        kind: LaunchKind = "reboot" if reboot else "fire"
        room = self.admit(slot, kind)
        if room.full:
            self._buffer_full(slot, scheduled, room)
            return
        if room.buffer:
            self.buffer(slot, Buffered(scheduled, kind, since=self.clock.now()), room)
            return
        if room.forbidden:
            self.stats.skipped_forbid += 1
            logger.info(
                "Job %s: fire at %s skipped, %s still going (concurrencyPolicy Forbid)",
                job.name,
                scheduled.isoformat(),
                runs_going(room.going),
                extra={"job": job.name, "scheduled_time": scheduled.isoformat()},
            )
            self._missed(job, MissedFire(job.name, scheduled, "forbid"))
            return
        self.retries.begin(slot)
        self.stats.fires += 1
        self.launch(slot, scheduled, 1, slot.retry, room.waits, kind=kind)

    # ------------------------------------------------------------ the buffer

    def buffer(self, slot: JobSlot, entry: Buffered, room: Admission) -> None:
        """``entry`` waits in ``slot``'s buffer for the runs going (BufferOne, BufferAll):
        a retry at the head, a fire at the back."""
        job = slot.job
        if entry.kind == "retry":
            slot.buffer.appendleft(entry)
        else:
            slot.buffer.append(entry)
        self.stats.buffered += 1
        logger.info(
            "Job %s: %s at %s buffered, %s (concurrencyPolicy %s; %d of %d waiting)",
            job.name,
            "retry" if entry.kind == "retry" else "fire",
            entry.scheduled.isoformat(),
            f"waits for {runs_going(room.going)}" if room.going else "waits for its pending retry",
            job.config.concurrency_policy,
            concurrency.buffered(slot),
            concurrency.buffer_bound(job),
            extra={"job": job.name, "scheduled_time": entry.scheduled.isoformat()},
        )

    def _buffer_full(self, slot: JobSlot, scheduled: datetime, room: Admission) -> None:
        job = slot.job
        self.stats.skipped_buffer_full += 1
        policy = job.config.concurrency_policy
        logger.info(
            "Job %s: fire at %s skipped, its buffer is full (%d waiting, %s going; "
            "concurrencyPolicy %s%s)",
            job.name,
            scheduled.isoformat(),
            room.buffered,
            runs_going(room.going),
            policy,
            f", bufferLimit {job.config.buffer_limit}" if policy == "BufferAll" else "",
            extra={"job": job.name, "scheduled_time": scheduled.isoformat()},
        )
        self._missed(job, MissedFire(job.name, scheduled, "buffer_full"))

    def buffered(self, name: str) -> tuple[datetime, ...]:
        """The fires (and retries) of job ``name`` waiting in its buffer, the next first,
        with the launches waiting for another node's run before them."""
        slot = self._slots.get(name)
        if slot is None:
            return ()
        waiting = [live.scheduled_time for live in slot.running if live.waiting_for]
        return (*waiting, *(entry.scheduled for entry in slot.buffer))

    def drain_buffer(self, slot: JobSlot) -> None:
        """Launch the head of ``slot``'s buffer once the job is idle: no run going, no
        retry pending.  A buffered fire asks the cluster gate again (a pause or a lost
        leadership since it was buffered drops it, counted under the gate's reason)."""
        while slot.buffer:
            if slot.running or concurrency.retry_pending(slot):
                return
            if self._stopping or not self.applied(slot):
                self._drop_buffer(
                    slot, "the daemon stops" if self._stopping else "the job was removed"
                )
                return
            entry = slot.buffer.popleft()
            job = slot.job
            waited = (
                (self.clock.now() - entry.since).total_seconds() if entry.since is not None else 0.0
            )
            if entry.kind == "retry":
                state = entry.retry
                if state is None or state.cancelled or state is not slot.retry:
                    continue  # its sequence ended while it waited
                logger.info(
                    "Job %s: buffered retry %d starts (it waited %.1f s)",
                    job.name,
                    state.count,
                    waited,
                    extra={"job": job.name},
                )
                self.launch(slot, entry.scheduled, entry.attempt, state, kind="retry")
                return
            if self.held_back(job, entry.scheduled, "buffered fire") is not None:
                continue
            logger.info(
                "Job %s: buffered fire at %s starts (it waited %.1f s; %d still waiting)",
                job.name,
                entry.scheduled.isoformat(),
                waited,
                len(slot.buffer),
                extra={"job": job.name, "scheduled_time": entry.scheduled.isoformat()},
            )
            self.retries.begin(slot)
            self.stats.fires += 1
            self.launch(slot, entry.scheduled, 1, slot.retry, kind=entry.kind)
            return

    def _drop_buffer(self, slot: JobSlot, why: str) -> None:
        """The fires waiting in ``slot``'s buffer will not run (logged, counted)."""
        if not slot.buffer:
            return
        dropped = len(slot.buffer)
        slot.buffer.clear()
        self.stats.buffer_dropped += dropped
        logger.warning(
            "Job %s: %d buffered fire%s will not run: %s",
            slot.job.name,
            dropped,
            "" if dropped == 1 else "s",
            why,
            extra={"job": slot.job.name},
        )

    def slot_wait(self, launch: Launch, node: str | None) -> None:
        """``launch`` waits for node ``node``'s run of its job before it may start (None:
        no longer): concurrencyPolicy BufferOne or BufferAll with concurrencyScope cluster.
        While it waits it counts as the job's buffered fire here."""
        for live in self._live:
            if live.launch is launch:
                live.waiting_for = node
                return

    def abandoned(self, launch: Launch) -> bool:
        """Whether ``launch`` no longer wants to start: cancelled, replaced, its job
        removed, or the daemon stopping (a launch waiting for another node gives up)."""
        if self._stopping and launch.kind != "manual":
            return True
        for live in self._live:
            if live.launch is launch:
                if live.cancelled or live.replaced:
                    return True
                if live.flow is not None:
                    return live.flow.cancelled or live.flow.retired
                return self._slots.get(launch.job.name) is None
        return True

    def _fire_flow(self, slot: FlowSlot, scheduled: datetime, kind: FlowKind) -> None:
        """A fire of a workflow: concurrencyPolicy over its runs going, then (once the
        launch guards let it: durable state records the fire first) a run."""
        job = slot.job
        going = slot.going()
        policy = job.config.concurrency_policy
        if policy == "Forbid" and (going or slot.starting):
            self.stats.skipped_forbid += 1
            count = len(going) + slot.starting
            logger.info(
                "Workflow %s: fire at %s skipped, %d run%s still going (concurrencyPolicy Forbid)",
                job.name,
                scheduled.isoformat(),
                count,
                "" if count == 1 else "s",
                extra={"workflow": job.name, "scheduled_time": scheduled.isoformat()},
            )
            self._missed(job, MissedFire(job.name, scheduled, "forbid"))
            return
        waits = self._replaced_flows(slot, going) if policy == "Replace" and going else ()
        self.stats.fires += 1
        slot.starting += 1
        task = asyncio.create_task(self._guarded_flow(slot, scheduled, kind, waits))
        self._tasks.add(task)

    async def _guarded_flow(
        self,
        slot: FlowSlot,
        scheduled: datetime,
        kind: FlowKind,
        waits: tuple[asyncio.Event, ...],
    ) -> None:
        launch = Launch(slot.job, scheduled, 1, kind)
        admitted: list[LaunchGuard] = []
        try:
            for guard in self.guards:
                refused = await guard.admit(launch)
                if refused is not None:
                    self._refused(launch, refused)
                    return
                admitted.append(guard)
        finally:
            slot.starting -= 1
            for guard in admitted:
                try:
                    guard.release(launch)
                except Exception:
                    logger.exception("A launch guard failed to release %s", launch.id)
        if self._stopping or not self.applied(slot):
            return
        self.flows.start(slot, scheduled, kind, waits)

    def launch_task(self, run: FlowRun, job: Job, attempt: int) -> LiveRun:
        """Start a run of ``job``, a task of workflow run ``run`` (its definition), for the
        workflow run's fire: watched like any run, its end told to the workflow run.

        The process is told the workflow run's fire as its ``CRONSTABLE_SCHEDULED_TIME``,
        its own run id (``WORKFLOW.TASK@<fire>#<attempt>``) as ``CRONSTABLE_RUN_ID``, and
        the workflow run's id as ``CRONSTABLE_WORKFLOW_RUN_ID`` (added to the copy of the
        task's definition the process is made from; the run is watched as ``job``)."""
        launch = Launch(job, run.scheduled, attempt, "task")
        told = replace(
            job,
            environment={**job.environment, WORKFLOW_RUN_ID: run.id, **_xcom_env(job, run)},
        )
        live = LiveRun(
            self.spawner(told, run.scheduled, attempt),
            launch,
            None,
            flow=run,
            on_end=self.flows.task_ended,
        )
        # a task with ``pool`` waits in the pool's queue as a job's launch does (its
        # ticket taken now, so the run's view shows it queued at once)
        live.ticket = self.pools.take(launch)
        self.watch_task(run, live)
        return live

    def watch_task(self, run: FlowRun, live: LiveRun) -> None:
        """Watch ``live``, a task's run of ``run``, in the workflow run's own slot of it."""
        job = live.job
        task = str(job.task)
        slot = run.slots.get(task)
        if slot is None or slot.job is not job:
            slot = run.slots[task] = JobSlot(job=job, order=-1, cursor=run.scheduled)
        self.watch(slot, live)

    def tell_flow(self, event: str, view: FlowRunView) -> None:
        for listener in self.flow_listeners:
            try:
                getattr(listener, event)(view)
            except Exception:
                logger.exception("A workflow listener failed (%s)", event)

    def admit(self, slot: JobSlot, kind: LaunchKind = "fire") -> Admission:
        """concurrencyPolicy's answer for a new run of ``slot``'s job (counted)."""
        room = concurrency.admit(slot, kind)
        if room.replaced:
            self.stats.replaced += room.replaced
        return room

    def launch(
        self,
        slot: JobSlot,
        scheduled: datetime,
        attempt: int,
        retry: RetryState | None,
        waits: tuple[asyncio.Future[None], ...] = (),
        *,
        kind: LaunchKind = "fire",
    ) -> LiveRun:
        launch = Launch(slot.job, scheduled, attempt, kind)
        live = LiveRun(self.spawner(slot.job, scheduled, attempt), launch, retry)
        # at once, so a start on request knows its place; a launch replacing one that
        # waited in the queue takes its place there (else a Replace job firing more often
        # than its pool admits it would never reach the head)
        place = min(
            (r.ticket for r in slot.running if r.replaced and r.ticket and not r.ticket.holding),
            key=lambda ticket: ticket.seq,
            default=None,
        )
        live.ticket = self.pools.take(launch, place=place)
        self.watch(slot, live, waits)
        return live

    def watch(
        self, slot: JobSlot, live: LiveRun, waits: tuple[asyncio.Future[None], ...] = ()
    ) -> None:
        """Watch ``live`` (once ``waits`` are done) until it ends, as a run of ``slot``'s job."""
        slot.running.append(live)
        self._live.add(live)
        live.task = asyncio.create_task(self._supervise(slot, live, waits))
        self._tasks.add(live.task)

    async def _supervise(
        self, slot: JobSlot, inst: LiveRun, waits: tuple[asyncio.Future[None], ...]
    ) -> None:
        try:
            await self._watch_run(slot, inst, waits)
        finally:
            if inst.flow is None and slot.buffer:
                self.drain_buffer(slot)
            if inst.on_end is not None:
                try:
                    inst.on_end(inst)
                except Exception:
                    logger.exception(
                        "Job %s: ending its workflow task failed; please report this",
                        inst.job.name,
                    )

    async def _watch_run(
        self, slot: JobSlot, inst: LiveRun, waits: tuple[asyncio.Future[None], ...]
    ) -> None:
        name = slot.job.name
        launch = inst.launch
        scheduled, attempt = launch.scheduled, launch.attempt
        fields = {"job": name, "scheduled_time": scheduled.isoformat(), "attempt": attempt}
        admitted: list[LaunchGuard] = []
        try:
            if waits:
                await asyncio.gather(*waits, return_exceptions=True)
                # while the old run was dying, this one may have been replaced in turn,
                # the daemon told to stop, or the job removed: then it never starts
                if inst.replaced or self._stopping or self._slots.get(name) is not slot:
                    return
            if inst.adopted is not None:
                inst.ticket = self.pools.hold(launch)  # it is going: it holds a slot at once
            elif inst.ticket is not None:
                admission = await self.pools.wait(inst.ticket)
                if admission != "admitted":
                    if admission in ("timeout", "full"):
                        self._pool_refused(inst, inst.ticket, admission)
                        # a workflow's task ends failed on that (its dependents decide)
                        inst.refused = "pool_timeout" if admission == "timeout" else "pool_full"
                    return
                if inst.replaced or inst.cancelled or (self._stopping and launch.kind != "manual"):
                    return  # replaced, cancelled or stopped just as it was admitted
                if inst.flow is not None:
                    if inst.flow.cancelled or inst.flow.retired:
                        inst.cancelled = True  # its run was cancelled, or its workflow removed
                        return
                elif self._slots.get(name) is not slot:
                    logger.info(
                        "Job %s: the %s at %s admitted by pool %s does not run: the job "
                        "was removed while it waited",
                        name,
                        launch.kind,
                        fields["scheduled_time"],
                        inst.ticket.pool.name,
                        extra=fields,
                    )
                    return
            if inst.adopted is None:
                for guard in self.guards:
                    refused = await guard.admit(launch)
                    if refused is not None:
                        self._refused(launch, refused)
                        inst.refused = refused
                        return
                    admitted.append(guard)
                if inst.replaced or inst.cancelled or (self._stopping and launch.kind != "manual"):
                    return  # stopped while the guards were asked
            await inst.run.start()
            start = RunStart(
                id=launch.id,
                job=name,
                scheduled_time=scheduled,
                attempt=attempt,
                started_at=inst.adopted or self.clock.now(),
                pid=inst.run.pid,
                start_ticks=inst.run.start_ticks,
                adopted=inst.adopted is not None,
                manual=launch.kind == "manual",
                pool_wait=inst.ticket.waited if inst.ticket is not None else None,
                planned_start=self.start_of(launch.job, scheduled)
                if launch.kind == "fire"
                else None,
                backfill=launch.kind == "backfill",
                # an adopted run started under a revision of the daemon before: not known
                revision=None if inst.adopted else self.revision(),
                digest=None if inst.adopted else launch.job.digest,
            )
            inst.start = start
            self._tell("run_started", start)
            if inst.flow is not None:
                self.flows.task_started(inst)
            logger.info(
                "Job %s %s: scheduled %s, attempt %d, pid %s",
                name,
                "adopted (it outlived the previous daemon)" if inst.adopted else "started",
                fields["scheduled_time"],
                attempt,
                inst.run.pid,
                extra=fields | {"pid": inst.run.pid},
            )
            result = await inst.run.wait()
        except Exception:
            # the process layer reports job failures as results; this is a bug, not a job failure
            logger.exception("Job %s: the run failed unexpectedly; please report this", name)
            return
        finally:
            self._live.discard(inst)
            if inst in slot.running:
                slot.running.remove(inst)
            for guard in admitted:
                try:
                    guard.release(launch)
                except Exception:
                    logger.exception("A launch guard failed to release %s", launch.id)
            if inst.ticket is not None:
                self.pools.release(inst.ticket)
        slot.last_result = result
        outcome: RunOutcome = (
            "unknown"
            if inst.adopted is not None
            else "cancelled"
            if inst.cancelled
            else run_outcome(result, replaced=inst.replaced)
        )
        inst.outcome = outcome
        self._tell("run_finished", start, result, outcome)
        logger.info(
            "Job %s finished: %s%s, exit code %s, %.3f s, scheduled %s, attempt %d",
            name,
            outcome,
            f" ({result.fail_reason})" if outcome in FAILURES else "",
            result.returncode,
            result.duration,
            fields["scheduled_time"],
            attempt,
            extra=fields
            | {
                "outcome": outcome,
                "exit_code": result.returncode,
                "duration": round(result.duration, 6),
                "fail_reason": result.fail_reason,
            },
        )
        record = FinishedRun.of(start, result, outcome)
        inst.outcome, inst.record = outcome, record
        if outcome in ("replaced", "cancelled", "unknown"):
            return  # not reported, no retry
        if record.failed:
            _log_output(record)
        if inst.flow is not None:
            return  # its workflow run reports it and decides on a retry (on_end)
        self.retries.finished(slot, inst, record)

    def _tell(self, event: str, *args: object) -> None:
        for listener in self.run_listeners:
            try:
                getattr(listener, event)(*args)
            except Exception:
                logger.exception("A run listener failed (%s)", event)

    def _pool_refused(self, inst: LiveRun, ticket: Ticket, outcome: str) -> None:
        """``inst`` waited past poolTimeout, or found its pool's queue full: it does not
        run, and is told as a missed fire (counted, logged)."""
        launch = inst.launch
        job = launch.job
        pool = ticket.pool
        fields = {
            "job": job.name,
            "scheduled_time": launch.scheduled.isoformat(),
            "pool": pool.name,
        }
        if outcome == "timeout":
            self.stats.skipped_pool_timeout += 1
            logger.warning(
                "Job %s: %s at %s skipped: it waited %.1f s for a slot of pool %s "
                "(poolTimeout; %d of %d slots in use, %d waiting)",
                job.name,
                launch.kind,
                launch.scheduled.isoformat(),
                job.config.pool_timeout or 0.0,
                pool.name,
                pool.in_use,
                pool.slots,
                len(pool.queue),
                extra=fields,
            )
            reason: MissedReason = "pool_timeout"
        else:
            self.stats.skipped_pool_full += 1
            logger.warning(
                "Job %s: %s at %s skipped: the queue of pool %s is full (%d waiting)",
                job.name,
                launch.kind,
                launch.scheduled.isoformat(),
                pool.name,
                len(pool.queue),
                extra=fields,
            )
            reason = "pool_full"
        if launch.kind == "retry":
            self.retries.settle(job, reason)  # its durable record: not to be re-armed
        self._missed(job, MissedFire(job.name, launch.scheduled, reason))

    def _refused(self, launch: Launch, reason: str) -> None:
        """A launch guard refused ``launch`` (logged, counted)."""
        self._count_skip(reason)
        logger.log(
            logging.DEBUG if reason in EXPLAINED else logging.WARNING,
            "Job %s: %s at %s not started (%s)",
            launch.job.name,
            launch.kind,
            launch.scheduled.isoformat(),
            reason,
            extra={"job": launch.job.name, "scheduled_time": launch.scheduled.isoformat()},
        )

    def report(self, job: Job, record: FinishedRun, moments: tuple[Moment, ...]) -> None:
        if not moments:
            return
        for listener in self.report_listeners:
            try:
                listener.run_reported(job, record, moments)
            except Exception:
                logger.exception("A report listener failed for job %s", job.name)

    def _missed(self, job: Job, missed: MissedFire) -> None:
        for listener in self.report_listeners:
            try:
                listener.fire_missed(job, missed)
            except Exception:
                logger.exception("A report listener failed for job %s", job.name)

    async def _drain(self) -> None:
        for slot in self._slots.values():
            self.retries.end(slot, settle=False)
        for flow in self._flows.values():
            for run in flow.runs:
                for task in run.tasks.values():
                    if task.retry_task is not None:
                        task.retry_task.cancel()  # the retry stays recorded (retry_at)
                        task.retry_task = None
        await self.flows.drain()
        pending = [task for task in self._tasks if not task.done()]
        if pending:
            logger.info(
                "Waiting for %d running job%s", len(pending), "" if len(pending) == 1 else "s"
            )
            await asyncio.gather(*pending, return_exceptions=True)


def _log_output(record: FinishedRun) -> None:
    """A failed run's captured output, at WARNING (head and tail within saveLimit, with
    the discarded-lines marker, as captured)."""
    for stream, text in (("stdout", record.stdout), ("stderr", record.stderr)):
        if text:
            logger.warning(
                "Job %s failed (%s); its %s:\n%s",
                record.start.job,
                record.fail_reason,
                stream,
                text.rstrip("\n"),
                extra={"job": record.start.job, "run_id": record.start.id, "stream": stream},
            )


def _xcom_env(job: Job, run: FlowRun) -> dict[str, str]:
    """The values a task declares in ``xcomEnv`` that its run's upstream tasks left, as
    its environment has them (:func:`cronstable.xcom.env_name`)."""
    config = job.config
    if not isinstance(config, TaskConfig) or not config.xcom_env:
        return {}
    found: dict[str, str] = {}
    for entry in config.xcom_env:
        task, _, key = entry.partition(".")
        value = run.xcom.get((task, key))
        if value is not None:
            found[xcom.env_name(task, key)] = value
    return found
