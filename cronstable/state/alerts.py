"""Late, stuck and stale: what a job (or a workflow) should have done by now and has not.

Every :data:`CHECK_EVERY` seconds of the scheduler's clock (:meth:`AlertWatch.check`):

* **onLate.**  Each fire of a job with ``onLate.grace`` is judged once its planned
  start (its time, delayed by ``jitter``) is ``grace`` old.  It is *accounted for*
  when a run of it started (its first attempt, a catch-up included) or it was told
  as a missed fire (skipped by Forbid, ``buffer_full``, ``pool_timeout`` …): those
  have reports of their own.  Otherwise it is late, and reported through
  ``onLate.report``.

  On a state store the nodes share (etcd), every node judges every fire, whichever
  node should run it, and a put-if-absent record ``alerts/late/<job>/<fire>`` makes
  it once across the cluster: the node that starts (or skips) a fire creates the
  record (``started``, ``skipped``), and a node that finds the fire late creates it
  as ``late`` and reports only when it was the one to create it.  So a fire the
  leader never started (it died, its pool was full, it was cut off) is reported by
  whichever node sees it first, once.  The records are deleted :data:`LATE_KEEP`
  seconds after their fire was judged.

  Without a shared store each node judges only the fires it would run itself (the
  cluster gate lets it: ``EveryNode`` jobs, the leader's, and every ``Leader`` job
  while nobody leads), from what it saw here, so each node reports at most once per
  fire; a job with ``concurrencyScope: cluster`` is judged only with a shared store
  (another node may have run the fire).  A paused job's fires are never late.

* **onStuck.**  A run going for longer than ``expectedDuration``, or, without one,
  ``p95Factor`` times the 95th percentile (nearest rank) of the durations of the last
  :data:`SAMPLES` successful runs of the run history (at least :data:`MIN_SAMPLES`),
  is reported once per run through ``onStuck.report``.  It is not stopped.  A run is
  judged where it goes: once per run on the cluster, without any record.

* **onStale.**  A job whose last success is older than ``maxSuccessAge`` is reported
  once through ``onStale.report``, and again only after another success grew old.  The
  last success is the newest of this node's run history and, on a shared store, of
  ``alerts/success/<job>`` (written by the node where a run succeeds), so a ``Leader``
  job is judged on every node against the cluster's last success.  A job that never
  succeeded counts from when this daemon applied it, or from when the job could be
  judged again (a pause ended; without a shared store: this node came to run it).
  The report is claimed with ``alerts/stale/<job>`` (the instance is the last success
  it is about), once across the cluster and across restarts; without a store, once
  per node.

Workflows are judged as jobs are (their fires, their runs as a whole, their last
successful run); a workflow's tasks take ``onStuck`` (each task's run is a job's run),
not ``onLate`` or ``onStale``.

It is a section of the applier (after the state section: it reads the store that one
committed) whose commit notes when each job was first applied and starts the rounds.
Time comes from the scheduler's clock, so a manual clock drives every rule in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.config.desired import DesiredState, Job
from cronstable.ports import (
    AlertSink,
    FinishedRun,
    FlowRunView,
    JobAlerts,
    LateNow,
    MissedFire,
    Moment,
    RunOutcome,
    RunResult,
    RunStart,
    StaleNow,
    StuckNow,
    StuckRun,
    utc_text,
)
from cronstable.reconcile.plan import Plan
from cronstable.redact import redact
from cronstable.state.base import (
    Record,
    StateError,
    StateStore,
    claim_report,
    key,
    record_time,
    segments,
)
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

CHECK_EVERY = 1.0
"""Seconds between two rounds of judgement."""
LATE_KEEP = 300.0
"""Seconds a late record outlives the moment its fire is judged (every node has judged
it by then: rounds are a second apart, clocks a second or so)."""
CLEAN_EVERY = 60.0
"""Seconds between two sweeps of the late records past their time."""
SUCCESS_READ_EVERY = 5.0
"""Seconds between two reads of the cluster's last successes (shared store only)."""
MAX_FIRES = 1000
"""Most fires of one job judged in one round (after a long stall the rest is skipped)."""
MAX_WRITES = 100
"""Most records being written at once; beyond it a start is not recorded (logged)."""
SAMPLES = 20
"""Successful runs whose durations ``p95Factor`` looks at (the newest)."""
MIN_SAMPLES = 5
"""Fewer successful runs than this: ``p95Factor`` judges nothing yet."""
LATE = "late"
STUCK = "stuck"
STALE = "stale"
SUCCESS = "success"
ALERTS = "alerts"


@dataclass(slots=True)
class _Going:
    """A run (or a workflow run) being watched for onStuck."""

    job: str
    id: str
    scheduled: datetime
    started_at: datetime
    attempt: int
    pid: int | None


@dataclass(frozen=True, slots=True)
class _Stuck:
    """A run reported stuck: what ``/status`` shows of it while it goes."""

    job: str
    threshold: float
    basis: str
    reported_at: datetime


def late_key(job: str, fire: datetime) -> str:
    return key(ALERTS, LATE, job, utc_text(fire))


def p95(durations: list[float]) -> float:
    """The 95th percentile of ``durations`` (nearest rank)."""
    ordered = sorted(durations)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class AlertWatch:
    """See the module docstring.  ``store`` gives the state store in use (None without a
    state section); ``scheduled`` the applied jobs and workflows (a workflow as its job)
    by name; ``job(name)`` any applied definition by name, a workflow's task included;
    ``now`` and ``sleep`` the scheduler's clock; ``gate(job)`` the cluster gate's answer
    now; ``paused(job)`` whether a pause holds the job now; ``start_of(job, fire)`` when
    a fire is planned to start (its jitter); ``durations(name)`` the durations of its
    last successful runs, oldest first, and ``last_success(name)`` when its last success
    ended (the run history's)."""

    name = "alerts"

    def __init__(
        self,
        node: str,
        store: Callable[[], StateStore | None],
        scheduled: Callable[[], Mapping[str, Job]],
        job: Callable[[str], Job | None],
        now: Callable[[], datetime],
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        gate: Callable[[Job], str | None] = lambda job: None,
        paused: Callable[[Job], bool] = lambda job: False,
        start_of: Callable[[Job, datetime], datetime] = lambda job, fire: fire,
        durations: Callable[[str], list[float]] = lambda name: [],
        last_success: Callable[[str], datetime | None] = lambda name: None,
        sink: AlertSink | None = None,
        registry: CollectorRegistry | None = None,
        every: float = CHECK_EVERY,
    ) -> None:
        self.node = node
        self._store = store
        self._scheduled = scheduled
        self._job = job
        self.now = now
        self.sleep = sleep
        self.gate = gate
        self.paused = paused
        self.start_of = start_of
        self.durations = durations
        self.last_success = last_success
        self.sink = sink
        self.every = every
        self._seen: dict[str, datetime] = {}
        """When this daemon first applied each job (and workflow)."""
        self._since: dict[str, datetime] = {}
        """Since when each job may be judged without a pause between (onStale's
        baseline for a job that never succeeded)."""
        self._judged: dict[str, bool] = {}
        self._judged_of: Mapping[str, Job] | None = None
        self._judged_set: dict[str, Job] = {}
        """The jobs with onLate or onStale of the job set ``_judged_of`` (see
        :meth:`_judged_jobs`)."""
        self._paused_at: dict[str, datetime] = {}
        """When each job was last seen paused (its fires due until then were skipped)."""
        self._cursor: dict[str, datetime] = {}
        """The last fire of each job judged for onLate."""
        self._accounted: dict[str, set[datetime]] = {}
        """Fires started or skipped here, not judged yet."""
        self._ranges: dict[str, list[tuple[datetime, datetime]]] = {}
        """Runs of fires told missed at once (a restart, a clock jump), not judged yet."""
        self._going: dict[str, _Going] = {}
        self._stuck: dict[str, _Stuck] = {}
        """The runs reported stuck (while they go), by id."""
        self._stuck_now: dict[str, int] = {}
        self._stale: dict[str, str] = {}
        """Jobs reported stale: the instance (last success) the report was about."""
        self._stale_now: dict[str, bool] = {}
        self._stale_shown: dict[str, StaleNow] = {}
        """The jobs stale now: what ``/status`` shows."""
        self._stale_at: dict[str, tuple[str, datetime]] = {}
        """When this node reported each job stale, and the instance it was about."""
        self._late_now: dict[str, LateNow] = {}
        """Each job's newest fire judged late and not accounted for since."""
        self._reported: dict[str, dict[str, datetime]] = {}
        """When this node last reported each job late, stuck, stale (by kind)."""
        self._age: dict[str, float | None] = {}
        """Each onStale job's last success age, as this node knows it."""
        self._shared_success: dict[str, datetime] = {}
        self._success_read: datetime | None = None
        self._cleaned: datetime | None = None
        self.late_total: dict[str, int] = {}
        self.stuck_total: dict[str, int] = {}
        self.stale_total: dict[str, int] = {}
        self._writes = TaskSet("alerts")
        self._checking = asyncio.Lock()
        self._store_failed = False
        """The store failed once this round: the late fires left are reported unasked."""
        self._task: asyncio.Task[None] | None = None
        if registry is not None:
            registry.register(_AlertCollector(self))

    # ------------------------------------------------------------ the store

    def _shared(self) -> StateStore | None:
        store = self._store()
        return store if store is not None and store.shared else None

    def _record(self, key_text: str, record: Record) -> None:
        """Create ``record`` at ``key_text`` in the background (put-if-absent)."""
        store = self._shared()
        if store is None:
            return
        if len(self._writes) >= MAX_WRITES:
            logger.debug("Alerts: %s not recorded (%d writes going)", key_text, MAX_WRITES)
            return
        self._writes.start(self._create(store, key_text, record), name=f"alerts {key_text}")

    async def _create(self, store: StateStore, key_text: str, record: Record) -> None:
        try:
            await store.create(key_text, record)
        except StateError as exc:
            logger.debug("Alerts: cannot write %s (%s)", key_text, redact(str(exc)))

    # ------------------------------------------------------------ what happened

    def _applied(self, name: str) -> Job | None:
        """The applied job or workflow (as its job) ``name``, a task never: what
        ``scheduled`` holds, looked up alone (a run's start or end must not copy every
        job's entry)."""
        job = self._job(name)
        return job if job is not None and job.workflow is None else None

    def _late_job(self, name: str) -> Job | None:
        job = self._applied(name)
        return job if job is not None and job.config.on_late.grace is not None else None

    def _mark(self, name: str, fire: datetime, state: str) -> None:
        """``fire`` of ``name`` started or was skipped here: it is accounted for."""
        job = self._late_job(name)
        if job is None:
            return
        cursor = self._cursor.get(name)
        if cursor is None or fire > cursor:
            self._accounted.setdefault(name, set()).add(fire)
        grace = job.config.on_late.grace or 0.0
        until = self.start_of(job, fire) + timedelta(seconds=grace + LATE_KEEP)
        self._record(
            late_key(name, fire),
            {
                "job": name,
                "fire": utc_text(fire),
                "state": state,
                "node": self.node,
                "until": utc_text(until),
            },
        )

    def run_started(self, run: RunStart) -> None:
        self._going[run.id] = _Going(
            run.job, run.id, run.scheduled_time, run.started_at, run.attempt, run.pid
        )
        if run.attempt == 1 and not run.manual and not run.backfill:
            self._mark(run.job, run.scheduled_time, "started")
            self._no_longer_late(run.job, run.scheduled_time)

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        self._going.pop(run.id, None)
        self._stuck.pop(run.id, None)
        if outcome == "succeeded":
            self._succeeded(run.job, result.finished_at)

    def run_reported(self, job: Job, run: FinishedRun, moments: tuple[Moment, ...]) -> None:
        return None

    def fire_missed(self, job: Job, missed: MissedFire) -> None:
        if job.config.on_late.grace is None:
            return
        last = missed.last_scheduled_time
        if missed.count <= 1 or last is None or last == missed.scheduled_time:
            self._mark(job.name, missed.scheduled_time, f"skipped: {missed.reason}")
        else:
            self._ranges.setdefault(job.name, []).append((missed.scheduled_time, last))

    def flow_started(self, run: FlowRunView) -> None:
        if run.id in self._going:
            return
        self._going[run.id] = _Going(
            run.workflow, run.id, run.scheduled_time, run.started_at, 1, None
        )
        if run.kind == "fire":
            self._mark(run.workflow, run.scheduled_time, "started")
            self._no_longer_late(run.workflow, run.scheduled_time)

    def flow_changed(self, run: FlowRunView) -> None:
        return None

    def flow_finished(self, run: FlowRunView) -> None:
        self._going.pop(run.id, None)
        self._stuck.pop(run.id, None)
        if run.outcome == "succeeded" and run.finished_at is not None:
            self._succeeded(run.workflow, run.finished_at)

    def _no_longer_late(self, name: str, fire: datetime) -> None:
        """A run of ``fire`` of ``name`` started: the late fire shown, if it is no later,
        is accounted for."""
        late = self._late_now.get(name)
        if late is not None and late.fire <= fire:
            del self._late_now[name]

    def _told(self, name: str, kind: str, at: datetime) -> None:
        self._reported.setdefault(name, {})[kind] = at

    def _succeeded(self, name: str, at: datetime) -> None:
        job = self._applied(name)
        if job is None or job.config.on_stale.max_success_age is None:
            return
        store = self._shared()
        if store is None or len(self._writes) >= MAX_WRITES:
            return
        known = self._shared_success.get(name)
        if known is None or at > known:
            self._shared_success[name] = at
            record = {"job": name, "at": utc_text(at), "node": self.node}
            self._writes.start(self._put(store, key(ALERTS, SUCCESS, name), record))

    async def _read(self, store: StateStore, key_text: str) -> Record | None:
        try:
            return await store.get(key_text)
        except StateError as exc:
            logger.debug("Alerts: cannot read %s (%s)", key_text, redact(str(exc)))
            return None

    async def _put(self, store: StateStore, key_text: str, record: Record) -> None:
        try:
            await store.put(key_text, record)
        except StateError as exc:
            logger.debug("Alerts: cannot write %s (%s)", key_text, redact(str(exc)))

    # ------------------------------------------------------------ judgement

    async def check(self) -> None:
        """One round: late fires, stuck runs, stale jobs (see the module docstring).
        Rounds never overlap (one may wait for the store)."""
        async with self._checking:
            await self._check()

    async def _check(self) -> None:
        self._store_failed = False
        now = self.now()
        shared = self._shared()
        jobs = self._judged_jobs(now)
        if shared is not None:
            await self._read_successes(shared, jobs, now)
        for name, job in jobs.items():
            paused = self.paused(job)
            if paused:
                self._paused_at[name] = now
            reason = None if paused else self.gate(job)
            judged = not paused and (shared is not None or _runs_here(reason))
            if judged and not self._judged.get(name, True):
                self._since[name] = now  # judged again from now (a pause ended …)
            self._judged[name] = judged
            await self._late(name, job, now, shared, reason, paused)
            await self._stale_check(name, job, now, judged)
        self._stuck_check(now)
        if shared is not None and _due(self._cleaned, now, CLEAN_EVERY):
            self._cleaned = now
            await self._clean(shared)

    def _judged_jobs(self, now: datetime) -> Mapping[str, Job]:
        """The jobs a round judges for onLate and onStale, worked out once per applied
        job set (the scheduler answers one mapping per swap): a round costs the jobs
        that have either, not every job.  A job that gains either is judged from now;
        one that loses both is forgotten."""
        scheduled = self._scheduled()
        if scheduled is not self._judged_of:
            judged = {
                name: job
                for name, job in scheduled.items()
                if job.config.on_late.grace is not None
                or job.config.on_stale.max_success_age is not None
            }
            for name in self._judged_set.keys() - judged.keys():
                self._forget_late(name)
                self._stale_now.pop(name, None)
                self._stale_shown.pop(name, None)
                self._age.pop(name, None)
            for name in judged.keys() - self._judged_set.keys():
                if self._judged_of is not None:
                    self._since[name] = now
            self._judged_of, self._judged_set = scheduled, judged
        return self._judged_set

    async def _late(
        self,
        name: str,
        job: Job,
        now: datetime,
        shared: StateStore | None,
        reason: str | None,
        paused: bool,
    ) -> None:
        grace = job.config.on_late.grace
        if grace is None or not job.config.enabled or job.schedule.is_reboot:
            self._forget_late(name)
            return
        cursor = self._cursor.get(name) or self._seen.get(name) or now
        judge = not paused and (
            shared is not None or (_runs_here(reason) and job.config.concurrency_scope != "cluster")
        )
        fire = _next(job, cursor)
        count = 0
        while fire is not None and count < MAX_FIRES:
            planned = self.start_of(job, fire)
            if planned + timedelta(seconds=grace) > now:
                break
            cursor = fire
            count += 1
            if judge and not self._was_accounted(name, fire) and not self._held(name, planned):
                await self._judge_late(job, fire, planned, grace, shared)
            else:
                self._late_now.pop(name, None)  # accounted for, held, or not ours to judge
            fire = _next(job, fire)
        if count == MAX_FIRES and fire is not None:
            skipped = now - timedelta(seconds=grace)
            logger.warning(
                "Job %s: more than %d fires to judge for onLate; the ones up to %s are not",
                name,
                MAX_FIRES,
                utc_text(skipped),
                extra={"job": name},
            )
            cursor = max(cursor, skipped)
        self._cursor[name] = cursor
        accounted = self._accounted.get(name)
        if accounted:
            accounted.difference_update({f for f in accounted if f <= cursor})
        ranges = self._ranges.get(name)
        if ranges:
            self._ranges[name] = [r for r in ranges if r[1] > cursor]

    def _held(self, name: str, planned: datetime) -> bool:
        """Whether a pause held ``name`` when a fire planned at ``planned`` was due (it
        was skipped as paused: not late)."""
        seen = self._paused_at.get(name)
        return seen is not None and planned <= seen

    def _was_accounted(self, name: str, fire: datetime) -> bool:
        if fire in self._accounted.get(name, ()):
            return True
        return any(first <= fire <= last for first, last in self._ranges.get(name, ()))

    async def _judge_late(
        self, job: Job, fire: datetime, planned: datetime, grace: float, shared: StateStore | None
    ) -> None:
        name = job.name
        now = self.now()
        if shared is not None and not self._store_failed:
            record = {
                "job": name,
                "fire": utc_text(fire),
                "state": LATE,
                "node": self.node,
                "until": utc_text(planned + timedelta(seconds=grace + LATE_KEEP)),
                "at": utc_text(now),
            }
            try:
                if not await shared.create(late_key(name, fire), record):
                    # started, skipped or reported by a node: not this one's to report;
                    # what the record says is what /status shows
                    held = await self._read(shared, late_key(name, fire))
                    if held is not None and held.get("state") == LATE:
                        by = held.get("node")
                        self._late_now[name] = LateNow(
                            fire,
                            planned,
                            planned + timedelta(seconds=grace),
                            grace,
                            by if isinstance(by, str) else None,
                            record_time(held.get("at")),
                        )
                    elif held is not None:
                        self._late_now.pop(name, None)
                    return
            except StateError as exc:
                self._store_failed = True  # not asked again this round: each try is bounded
                logger.warning(
                    "Job %s: cannot tell whether the fire at %s started on another node "
                    "(%s); reporting it late",
                    name,
                    utc_text(fire),
                    redact(str(exc)),
                    extra={"job": name},
                )
        self.late_total[name] = self.late_total.get(name, 0) + 1
        self._late_now[name] = LateNow(
            fire, planned, planned + timedelta(seconds=grace), grace, self.node, now
        )
        self._told(name, LATE, now)
        logger.warning(
            "Job %s: the fire at %s has not started %s after its planned start %s "
            "(onLate grace); reporting",
            name,
            utc_text(fire),
            _seconds(grace),
            utc_text(planned),
            extra={"job": name, "scheduled_time": utc_text(fire)},
        )
        if self.sink is not None:
            self.sink.fire_late(job, fire, planned, grace)

    def _forget_late(self, name: str) -> None:
        self._late_now.pop(name, None)
        self._cursor.pop(name, None)
        self._accounted.pop(name, None)
        self._ranges.pop(name, None)

    async def _clean(self, store: StateStore) -> None:
        """Delete the late records past their time (bounded by the store's timeouts)."""
        now = self.now()
        try:
            records = await store.list(key(ALERTS, LATE) + "/")
            for full, record in records.items():
                until = record_time(record.get("until")) if record is not None else None
                if until is None or until < now:
                    await store.delete(full)
        except StateError as exc:
            logger.debug("Alerts: cannot sweep the late records (%s)", redact(str(exc)))

    async def _read_successes(
        self, store: StateStore, jobs: Mapping[str, Job], now: datetime
    ) -> None:
        if not _due(self._success_read, now, SUCCESS_READ_EVERY):
            return
        if not any(job.config.on_stale.max_success_age is not None for job in jobs.values()):
            return
        self._success_read = now
        try:
            records = await store.list(key(ALERTS, SUCCESS) + "/")
        except StateError as exc:
            logger.debug("Alerts: cannot read the last successes (%s)", redact(str(exc)))
            return
        for full, record in records.items():
            parts = segments(full)
            at = record_time(record.get("at")) if record is not None else None
            if at is None or len(parts) != 3:
                continue
            known = self._shared_success.get(parts[2])
            if known is None or at > known:
                self._shared_success[parts[2]] = at

    async def _stale_check(self, name: str, job: Job, now: datetime, judged: bool) -> None:
        limit = job.config.on_stale.max_success_age
        if limit is None or not job.config.enabled:
            self._stale_now.pop(name, None)
            self._stale_shown.pop(name, None)
            self._age.pop(name, None)
            return
        known = [t for t in (self.last_success(name), self._shared_success.get(name)) if t]
        last = max(known) if known else None
        self._age[name] = (now - last).total_seconds() if last is not None else None
        starts = [t for t in (last, self._seen.get(name), self._since.get(name)) if t]
        baseline = max(starts) if starts else None
        if not judged or baseline is None:
            self._stale_now[name] = False
            self._stale_shown.pop(name, None)
            return
        age = (now - (last or baseline)).total_seconds()
        stale = (now - baseline).total_seconds() > limit
        self._stale_now[name] = stale
        if not stale:
            self._stale_shown.pop(name, None)
            return
        instance = utc_text(last) if last is not None else "never"
        told = self._stale_at.get(name)
        self._stale_shown[name] = StaleNow(
            last,
            age,
            limit,
            baseline + timedelta(seconds=limit),
            told[1] if told is not None and told[0] == instance else None,
        )
        if self._stale.get(name) == instance:
            return
        self._stale[name] = instance
        if not await self._claim_stale(name, instance):
            return
        self.stale_total[name] = self.stale_total.get(name, 0) + 1
        self._stale_at[name] = (instance, now)
        self._stale_shown[name] = dataclasses.replace(self._stale_shown[name], reported_at=now)
        self._told(name, STALE, now)
        logger.warning(
            "Job %s: its last success is %s (onStale maxSuccessAge %s); reporting",
            name,
            f"{_seconds(age)} old ({utc_text(last)})" if last is not None else "none yet",
            _seconds(limit),
            extra={"job": name},
        )
        if self.sink is not None:
            self.sink.success_stale(job, last, age, limit)

    async def _claim_stale(self, name: str, instance: str) -> bool:
        """Whether this node reports ``name`` stale for ``instance`` (put-if-absent in the
        store, if any: once across the cluster, and across restarts)."""
        store = self._store()
        if store is None:
            return True
        marker = key(ALERTS, STALE, name)
        mine: Record = {"job": name, "instance": instance, "node": self.node}
        try:
            return await claim_report(store, marker, mine)
        except StateError as exc:
            logger.warning(
                "Job %s: cannot tell whether it was reported stale already (%s); reporting",
                name,
                redact(str(exc)),
                extra={"job": name},
            )
            return True

    def _stuck_check(self, now: datetime) -> None:
        thresholds: dict[str, tuple[float, str] | None] = {}
        stuck_now: dict[str, int] = {}
        for going in list(self._going.values()):
            name = going.job
            if name not in thresholds:
                job = self._job(name)
                thresholds[name] = self._threshold(name, job) if job is not None else None
            limit = thresholds[name]
            if limit is None:
                continue
            threshold, basis = limit
            running_for = (now - going.started_at).total_seconds()
            if running_for <= threshold:
                continue
            stuck_now[name] = stuck_now.get(name, 0) + 1
            if going.id in self._stuck:
                continue
            job = self._job(name)
            if job is None:
                continue
            self._stuck[going.id] = _Stuck(name, threshold, basis, now)
            self._told(name, STUCK, now)
            self.stuck_total[name] = self.stuck_total.get(name, 0) + 1
            logger.warning(
                "Job %s: run %s has been going for %s, longer than %s (onStuck %s); reporting",
                name,
                going.id,
                _seconds(running_for),
                _seconds(threshold),
                basis,
                extra={"job": name, "run_id": going.id},
            )
            if self.sink is not None:
                self.sink.run_stuck(
                    job,
                    StuckRun(
                        going.id,
                        going.scheduled,
                        going.started_at,
                        going.attempt,
                        running_for,
                        threshold,
                        basis,
                        going.pid,
                    ),
                )
        self._stuck_now = stuck_now

    def _threshold(self, name: str, job: Job) -> tuple[float, str] | None:
        """How long a run of ``job`` may go before it is stuck, and on what basis."""
        settings = job.config.on_stuck
        if settings.expected_duration is not None:
            return settings.expected_duration, "expectedDuration"
        if settings.p95_factor is None:
            return None
        durations = self.durations(name)[-SAMPLES:]
        if len(durations) < MIN_SAMPLES:
            return None
        factor = settings.p95_factor
        return (
            factor * p95(durations),
            f"p95Factor: {factor:g} × p95 of the last {len(durations)} successful runs",
        )

    # ------------------------------------------------------------ what /status shows

    def view(self, job: Job, tasks: Iterable[Job] = ()) -> JobAlerts | None:
        """Where ``job`` (a workflow, with its ``tasks``) stands now: late, stuck, stale,
        and when this node last reported each; None when it has none of the three."""
        tasks = tuple(tasks)
        if not _watched(job) and not any(_watched(task) for task in tasks):
            return None
        name = job.name
        names = {name, *(task.name for task in tasks)}
        now = self.now()
        stuck = []
        for run, note in self._stuck.items():
            going = self._going.get(run)
            if note.job in names and going is not None:
                running_for = (now - going.started_at).total_seconds()
                stuck.append(
                    StuckNow(
                        note.job,
                        run,
                        going.started_at,
                        running_for,
                        note.threshold,
                        note.basis,
                        note.reported_at,
                    )
                )
        told = self._reported.get(name, {})
        stuck_told = [t for n in names if (t := self._reported.get(n, {}).get(STUCK))]
        return JobAlerts(
            late=self._late_now.get(name),
            stuck=tuple(sorted(stuck, key=lambda s: (s.started_at, s.run))),
            stale=self._stale_shown.get(name),
            last_late=told.get(LATE),
            last_stuck=max(stuck_told) if stuck_told else None,
            last_stale=told.get(STALE),
        )

    # ------------------------------------------------------------ the section

    def affected(self, plan: Plan) -> bool:
        return True

    async def prepare(self, desired: DesiredState) -> None:
        return None

    def commit(self, prepared: None, desired: DesiredState) -> None:
        """Note when each job was first applied here; start the rounds."""
        now = self.now()
        names = {*desired.jobs, *desired.workflows}
        for name in names:
            if name not in self._seen:
                self._seen[name] = now
                self._since[name] = now
        for table in (
            self._seen,
            self._since,
            self._judged,
            self._paused_at,
            self._cursor,
            self._accounted,
            self._ranges,
            self._stale,
            self._stale_now,
            self._stale_shown,
            self._stale_at,
            self._late_now,
            self._age,
            self._shared_success,
            self.late_total,
            self.stale_total,
        ):
            for name in [n for n in table if n not in names]:
                del table[name]
        tasks = set(desired.tasks())
        for name in {*self.stuck_total, *self._reported} - names - tasks:
            self.stuck_total.pop(name, None)
            self._reported.pop(name, None)
        if self._task is None:
            self._task = asyncio.create_task(self._rounds(), name="alerts")

    async def discard(self, prepared: None) -> None:
        return None

    async def _rounds(self) -> None:
        while True:
            await self.sleep(self.every)
            try:
                await self.check()
            except Exception:
                logger.exception("Alerts: a round failed; please report this")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._writes.wait(within=5.0)


def _watched(job: Job) -> bool:
    """Whether ``job`` has onLate, onStuck or onStale."""
    config = job.config
    stuck = config.on_stuck
    return (
        config.on_late.grace is not None
        or stuck.expected_duration is not None
        or stuck.p95_factor is not None
        or config.on_stale.max_success_age is not None
    )


def _runs_here(reason: str | None) -> bool:
    """Whether the cluster gate's ``reason`` leaves a fire to this node, or to nobody
    (no leader known: a ``Leader`` job then runs nowhere, so its fires are late)."""
    return reason is None or reason == "leadership_unknown"


def _next(job: Job, after: datetime) -> datetime | None:
    fire = job.schedule.next_fire(after, job.timezone)
    return None if fire is None else fire.astimezone(UTC)


def _due(last: datetime | None, now: datetime, every: float) -> bool:
    """Whether ``every`` seconds have passed since ``last`` (None: never done)."""
    return last is None or (now - last).total_seconds() >= every


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


class _AlertCollector(Collector):
    def __init__(self, watch: AlertWatch) -> None:
        self.watch = watch

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily("cronstable_fires_late", "", labels=["job"])
        yield CounterMetricFamily("cronstable_job_stuck", "", labels=["job"])
        yield GaugeMetricFamily("cronstable_job_runs_stuck", "", labels=["job"])
        yield CounterMetricFamily("cronstable_job_stale_alerts", "", labels=["job"])
        yield GaugeMetricFamily("cronstable_job_stale", "", labels=["job"])
        yield GaugeMetricFamily("cronstable_job_last_success_age_seconds", "", labels=["job"])

    def collect(self) -> Iterator[Metric]:
        watch = self.watch
        yield _per_job(
            CounterMetricFamily,
            "cronstable_fires_late",
            "Fires this node reported late (onLate: not started within grace of their planned "
            "start; once per fire across the cluster on a shared state store).",
            watch.late_total,
        )
        yield _per_job(
            CounterMetricFamily,
            "cronstable_job_stuck",
            "Runs this node reported stuck (onStuck: going longer than expectedDuration, or "
            "p95Factor times the p95 of the last runs), by job.",
            watch.stuck_total,
        )
        yield _per_job(
            GaugeMetricFamily,
            "cronstable_job_runs_stuck",
            "Runs going now for longer than their onStuck threshold, by job.",
            watch._stuck_now,
        )
        yield _per_job(
            CounterMetricFamily,
            "cronstable_job_stale_alerts",
            "Times this node reported a job stale (onStale: its last success older than "
            "maxSuccessAge).",
            watch.stale_total,
        )
        yield _per_job(
            GaugeMetricFamily,
            "cronstable_job_stale",
            "1 while a job's last success is older than its onStale maxSuccessAge (as this "
            "node judges it), else 0; jobs with onStale only.",
            {name: 1 if flag else 0 for name, flag in watch._stale_now.items()},
        )
        yield _per_job(
            GaugeMetricFamily,
            "cronstable_job_last_success_age_seconds",
            "Seconds since the last success of a job with onStale ended (this node's run "
            "history and, on a shared store, the cluster's); absent until one has.",
            {name: age for name, age in watch._age.items() if age is not None},
        )


def _per_job(
    family: type[CounterMetricFamily | GaugeMetricFamily],
    name: str,
    documentation: str,
    values: Mapping[str, float],
) -> Metric:
    """One metric family labelled by job, a sample per job of ``values``, in name order."""
    made = family(name, documentation, labels=["job"])
    for job, value in sorted(values.items()):
        made.add_metric([job], value)
    return made
