"""Between the scheduler and the state store: what is recorded when, and the restore.

The keeper is the scheduler's :class:`~cronstable.ports.LaunchGuard`,
its :class:`~cronstable.ports.StateHooks` and a run listener.  With no
store (no ``state`` section) every call is a no-op.  Records (:mod:`.base` keys,
in this node's part of the store):

* A ``Leader`` job under leader election (not @reboot, not a workflow), on a store
  the nodes share, keeps its last fire, pending retry and runs going under
  ``cluster/jobs/<job>/`` (``fire``, ``retry``, ``running/<run id>``) instead of the
  node's ``fires``, ``retries`` and ``running`` below, each with the name of the node
  that wrote it (the owner; a run's own node; a retry's, the node whose run failed).
  :meth:`StateKeeper.inherit` looks each time this node's view of the leadership
  (who leads, the members: under ``spread`` a job moves when its owner leaves) or the
  job set applied changes: for each such job it owns now and did not before, or
  whose definition a revision changed (records of another definition stay as they
  are, for a node that applies it), it resumes the schedule from that last fire (the
  latest fire missed within ``startingDeadlineSeconds`` runs once), re-arms a pending
  retry at its time, keeps another live member's run (that node adopts it when it
  returns; the retry its failure arms passes here: watched every :data:`FLOW_BEAT`)
  and reports a dead node's run ``lost``
  (:data:`LOST_THERE`; it ends here for the run listeners, so it goes into this
  node's history of the job, and its ``cluster/lastrun`` record names the dead
  node).  The inherited catch-up and retry are claimed first (put-if-absent
  ``claims/<scheduled>#<attempt>``): of two nodes that would run one, the first to
  claim does.  Without a shared store these stay per node, as below.
* ``fires/<job>``, for jobs with ``startingDeadlineSeconds``: the last fire handled
  (written before the launch, awaited), so a restart resumes the schedule there and
  catches up a fire missed while down, once, within the deadline.
* ``retries/<job>``: ``pending`` when a retry is armed (attempt count, notBefore),
  ``settled`` with a reason when it launches (written before the launch, awaited)
  or will not run; a graceful stop leaves it pending, for the next start.
* ``running/<run id>``: pid (= process group), boot id, start ticks, from start to
  finish, so a restart adopts a run that is still alive.  Written
  :data:`RUNNING_LINGER` after the start: a run that ended by then (most do) leaves
  no record to write and then remove.
* ``reboot/<job>``: the boot id and digest an @reboot job last ran for (written
  before the launch); a ``Leader`` @reboot job under leader election uses
  ``cluster/reboot/<job>`` (its digest, once per cluster) instead.
* ``history/<job>``: the last finished runs, output capped at :data:`HISTORY_OUTPUT`
  bytes per stream, written at most every :data:`HISTORY_EVERY` seconds, and one job's
  at most once in :data:`HISTORY_GAP` seconds (each write is the whole history: a job
  that runs every few seconds would rewrite 20 runs at each of its runs); a graceful
  stop writes every change.
* ``flows/<run id>``: a workflow run going, rewritten at each change (each task's
  state, attempts, pending retry, and a running task's pid, boot id and start
  ticks), removed when it ends; ``flowhistory/<workflow>``: its last finished
  runs.  A restart resumes each run of an unchanged workflow (finished tasks stay,
  running ones are adopted, pending ones start when their dependencies allow); a
  changed workflow's run is dropped.  A ``Leader`` workflow under leader election,
  on a store the nodes share, keeps its runs under ``cluster/flows/<run id>``
  with the node that drives it and a heartbeat (:data:`FLOW_BEAT`): the leader
  goes on with a run whose driver is itself (a restart) or has been silent for
  :data:`FLOW_STALE` seconds (it died or lost the leadership); the tasks that ran
  on another node count as failed (their outcome is that node's).

When a write before a launch fails, ``onStoreUnavailable`` decides: ``degrade``
launches anyway (as if stateless; a WARNING when the store first fails, INFO when
it answers again), ``fail-closed`` skips the launch (reason ``state_unavailable``).
Every ambiguous record at restart settles rather than runs: the bias is toward no
run over a double run.

A store that did not answer when the daemon started is used *waiting*
(:meth:`StateKeeper.use` with ``waiting``): it counts as unavailable from the
first launch (``onStoreUnavailable`` decides at once, with no wait), and records
are queued but not written.  When it first answers, :meth:`StateKeeper.came_up`
restores what the previous daemon left, read before any of this daemon's records
is written, as a start would, except that what this daemon did meanwhile wins:

* a key this daemon already queued a value for (the last fire of a job it fired
  or skipped, a retry it armed or settled) keeps this daemon's value: that fire
  is not resumed, that retry not re-armed;
* a pending retry of a job that started a run here meanwhile is settled
  (``superseded_by_run``): a newer run came first;
* the rest is restored as at a start (a missed fire still within
  ``startingDeadlineSeconds``, judged now, runs once; a pending retry is re-armed;
  a run still alive is adopted; the previous runs go before this daemon's in the
  history, which is then written whole).

Why guard, hooks, listener and restore are one class: they share one ordering rule,
not just one store.  The restore must read before any record of this daemon is
written, and :meth:`StateKeeper.came_up` decides between a restored value and one
the guard or hooks queued meanwhile by looking at that same queue
(:class:`~cronstable.state.writer.Writer` owns the writes themselves: coalescing,
retry and the bound).  Split apart, the four would have to share the queue and the
set of restored keys through a fifth object, which is this class under another name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from cronstable.config.desired import Job
from cronstable.config.models import JobConfig
from cronstable.platform import boot_id, process_start_ticks
from cronstable.ports import (
    FinishedRun,
    FlowRecords,
    FlowRunView,
    History,
    Launch,
    Restorable,
    RunOutcome,
    RunResult,
    RunStart,
    StateView,
    tail_text,
    utc_text,
)
from cronstable.redact import redact
from cronstable.state.base import (
    BOOT_SCOPED,
    Record,
    StateError,
    StateStore,
    job_key,
    key,
    node_key,
    record_time,
    segments,
)
from cronstable.state.fleet import last_run_key, last_run_record
from cronstable.state.records import (
    StoredFlow,
    flow_history_record,
    flow_history_runs,
    flow_run_record,
    history_record,
    history_runs,
    read_flow_run,
)
from cronstable.state.writer import Writer

logger = logging.getLogger(__name__)

HISTORY_EVERY = 5.0
"""Seconds between two writes of the run history (changed jobs only)."""
HISTORY_GAP = 60.0
"""Least seconds between two writes of one job's history by the rounds: a write is the
job's whole history (up to 20 runs, each with its output), so at one per run its cost
grew with the history, not with the run (measured: a burst of 500 runs' flush went
from 70 to 190 ms of CPU as the histories grew from 1 to 12 runs).  After a crash,
a job that ran often may miss its last minute of runs; its first run after a quiet
minute is written within :data:`HISTORY_EVERY`, and a graceful stop writes all."""
HISTORY_OUTPUT = 16 * 1024
"""Bytes of each captured stream a persisted run keeps (the end)."""
RECORD_WAIT = 2.0
"""Seconds a launch waits for the record written before it (then onStoreUnavailable)."""
HISTORY_RECORD = 1024 * 1024
"""Most bytes of one job's history record (older runs are left out to fit)."""
RUNNING_LINGER = 1.0
"""Seconds a run's ``running`` record waits before it is queued; a run that ends sooner
is never written (a burst of 500 short runs wrote 1,000 records for nothing: each
record, then its removal).  A daemon killed within this time of a start does not adopt
that run when it comes back (the process runs on; its end is not recorded).  A graceful
stop writes the waiting records of the runs it leaves going."""
FLUSH_AT_CLOSE = 5.0
"""Seconds a stopping daemon waits for queued records to be written."""
FLOW_BEAT = 2.0
"""Seconds between two heartbeats of a cluster-wide workflow run (its record rewritten),
and between two looks for cluster-wide runs this node should go on with."""
FLOW_STALE = 5 * FLOW_BEAT
"""Seconds without a heartbeat after which the leader goes on with a cluster-wide run."""
CLAIM_KEEP = 3600.0
"""Seconds a claim on an inherited fire or retry (``cluster/jobs/<job>/claims/…``) is
kept; the node that claims next removes older ones."""
LOST_THERE = "lost: node {node} died while the run was going (it is no longer a member)"
"""fail_reason of a ``Leader`` job's run that went on a node that died (outcome ``lost``)."""
LOST_HERE = "outcome unknown: it ended while no daemon watched it"
"""fail_reason of a task that was running when the daemon stopped and was gone after."""
_JOBS = key("cluster", "jobs") + "/"
"""Where the handed-off jobs' records are (``cluster/jobs/<job>/…``)."""

Policy = Literal["degrade", "fail-closed"]


@dataclass(slots=True)
class StateStats:
    write_failures: int = 0
    restored_fires: int = 0
    rearmed_retries: int = 0
    settled_at_restore: int = 0
    adopted_runs: int = 0
    inherited_fires: int = 0
    inherited_retries: int = 0
    lost_runs: int = 0


class StateKeeper:
    """See the module docstring.  ``scheduler`` gives the scheduler this keeper records
    for and restores into (the keeper is one of its guards, built before it:
    :class:`~cronstable.later.Later`); ``cluster_wide(job)``: whether ``job`` is one run
    per cluster (a ``Leader`` job under leader election); ``gated(job)``: whether the
    leadership decides where ``job`` runs (not ``EveryNode``, under leader election);
    ``leadership()``: what this node sees of the leadership now (any value that compares
    equal while nothing changed: who leads, the members); ``members()``: the live
    members' names, None while unknown."""

    def __init__(
        self,
        node: str,
        scheduler: Callable[[], Restorable],
        history: History,
        *,
        cluster_wide: Callable[[Job], bool] = lambda job: False,
        gated: Callable[[Job], bool] = lambda job: False,
        boot: str | None = None,
        flow_history: FlowRecords | None = None,
        leadership: Callable[[], object] = lambda: None,
        members: Callable[[], Collection[str] | None] = lambda: None,
    ) -> None:
        self.node = node
        self._scheduler = scheduler
        self.history = history
        self.cluster_wide = cluster_wide
        self.gated = gated
        self.boot = boot if boot is not None else boot_id()
        self.store: StateStore | None = None
        self.policy: Policy = "degrade"
        self.writer: Writer | None = None
        self.stats = StateStats()
        self.available = True
        self.last_error: str | None = None
        self._dirty_history: set[str] = set()
        self._history_written: dict[str, float] = {}
        """When the rounds last wrote each job's history (``monotonic``), for the jobs
        written in the last :data:`HISTORY_GAP` seconds."""
        self.monotonic: Callable[[], float] = time.monotonic
        self._history_task: asyncio.Task[None] | None = None
        self._flow_task: asyncio.Task[None] | None = None
        self._queued_meanwhile: set[str] = set()
        """Last-fire and retry keys this daemon queued while its store had not answered
        yet (at most two a job)."""
        self._ran_meanwhile: set[str] = set()
        """Jobs that started a run here while the store had not answered yet."""
        self._running_meanwhile: set[str] = set()
        """Records of runs going now that started while the store had not answered yet."""
        self.flow_history = flow_history
        self._flows: dict[str, tuple[str, FlowRunView]] = {}
        """The workflow runs this node drives: (record key, latest view) by run id."""
        self._dirty_flow_history: set[str] = set()
        self.leadership = leadership
        self.members = members
        self._seen: object = _UNSEEN
        """The leadership and the job set :meth:`inherit` last looked at."""
        self._job_set: str | None = None
        """The id of the job set applied last (:meth:`jobs_applied`)."""
        self._owned: dict[str, str] = {}
        """The handed-off jobs this node owned at that look, with their digests."""
        self._wrote: set[str] = set()
        """The ``cluster/jobs/<job>/fire`` and ``…/retry`` keys this daemon queued a record
        for since it last took the job: while it owns the job on, the store holds its
        own record there or an older one, never one to inherit."""
        self._catching_up: set[str] = set()
        """Jobs resumed from an inherited last fire: their next fire claims its time."""
        self._inherited_retries: set[str] = set()
        """Jobs whose retry was re-armed from a record: its launch claims it."""
        self._remote: dict[str, dict[str, str]] = {}
        """Owned jobs with a run going on another live node: record key → node."""
        self._running_keys: dict[str, str] = {}
        """The record key of each run going here (run id → key)."""
        self._lingering: dict[str, tuple[float, RunStart, int | None, str | None]] = {}
        """The ``running`` records not queued yet (:data:`RUNNING_LINGER`), by key, in
        the order the runs started: when (the loop's time, as its timer's), the start,
        its ticks and the job's digest."""
        self._linger_timer: asyncio.TimerHandle | None = None

    @property
    def scheduler(self) -> Restorable:
        return self._scheduler()

    # ------------------------------------------------------------ the store in use

    def use(
        self, store: StateStore | None, policy: Policy = "degrade", *, waiting: str | None = None
    ) -> StateStore | None:
        """Write to ``store`` from now on (None: stop keeping state); the previous store,
        for the caller to close once :meth:`retire` flushed its queue.  ``waiting``: why
        ``store`` has not answered yet; records are queued, not written, until
        :meth:`came_up`."""
        old = self.store
        self._write_lingering()  # to the store they started under, as the rest
        self.store, self.policy = store, policy
        self.writer = (
            Writer(store, on_result=self._written, held=waiting is not None)
            if store is not None
            else None
        )
        self._queued_meanwhile.clear()
        self._ran_meanwhile.clear()
        self._running_meanwhile.clear()
        self._seen, self._owned = _UNSEEN, {}
        self._wrote.clear()
        self._remote.clear()
        if waiting is not None:
            self.available, self.last_error = False, redact(waiting)
        elif store is not None:
            self.available, self.last_error = True, None  # it answered when prepared
        if store is not None and self._history_task is None:
            self._history_task = asyncio.create_task(self._history_rounds(), name="state-history")
        if store is not None and store.shared and self._flow_task is None:
            self._flow_task = asyncio.create_task(self._flow_rounds(), name="state-flows")
        return old

    @property
    def waiting(self) -> bool:
        """Whether the store in use has not answered yet (records wait in memory)."""
        return self.writer is not None and self.writer.held

    def came_up(self, records: Mapping[str, Record | None] | None, now: datetime) -> None:
        """The store waited for answers: restore ``records`` (this node's, read before any
        record of this daemon's was written; None: nothing to restore) with the rules of
        the module docstring, then write what was queued meanwhile."""
        if records is not None:
            self.restore(records, now)
            self._flush_history()  # a merged history replaces the one queued meanwhile
        self.available, self.last_error = True, None
        self._queued_meanwhile.clear()
        self._ran_meanwhile.clear()
        self._running_meanwhile.clear()
        if self.writer is not None:
            self.writer.release()

    async def retire(self, writer: Writer | None) -> None:
        if writer is not None:
            await writer.flush(within=FLUSH_AT_CLOSE)
            await writer.close()

    async def close(self) -> None:
        """Write the history and what is queued (bounded by :data:`FLUSH_AT_CLOSE`)."""
        for task in (self._history_task, self._flow_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._history_task = self._flow_task = None
        self._write_lingering()  # the runs left going: the next start adopts them
        self._flush_history()
        writer, self.writer = self.writer, None
        if writer is not None:
            if not await writer.flush(within=FLUSH_AT_CLOSE):
                logger.warning(
                    "State: %d records not written at stop (the store does not answer)",
                    writer.queued(),
                )
            await writer.close()
        store, self.store = self.store, None
        if store is not None:
            await store.close()

    def view(self) -> StateView | None:
        """What ``/status`` shows of durable state; None while none is kept."""
        if self.store is None:
            return None
        return StateView(
            backend=self.store.backend,
            node=self.node,
            on_store_unavailable=self.policy,
            connecting=self.waiting,
            available=self.available,
            last_error=self.last_error,
            queued=self.writer.queued() if self.writer is not None else 0,
        )

    def _key(self, *rest: str) -> str:
        return node_key(self.node, *rest)

    def submit(self, key_text: str, record: Record | None) -> None:
        """Queue ``record`` (None: remove) at ``key_text`` through the writer, as this
        keeper's own records go (coalesced, retried, bounded); nothing without a store.
        For records of others that share the store (the fleet view's last runs)."""
        self._submit(key_text, record)

    def _submit(self, key_text: str, record: Record | None) -> asyncio.Future[bool] | None:
        if self.writer is None:
            return None
        if key_text.startswith(_JOBS) and key_text.endswith(("/fire", "/retry")):
            self._wrote.add(key_text)
        if self.writer.held and (
            key_text.startswith((self._key("fires") + "/", self._key("retries") + "/"))
            or (key_text.startswith(_JOBS) and key_text.endswith(("/fire", "/retry")))
        ):
            self._queued_meanwhile.add(key_text)
        return self.writer.submit(key_text, record)

    def _written(self, ok: bool, error: str | None) -> None:
        if ok:
            if not self.available:
                logger.info("State: the %s store answers again", self._backend())
            self.available, self.last_error = True, None
            return
        self.stats.write_failures += 1
        error = redact(error or "no answer in time")
        self.last_error = error
        if self.available:
            logger.warning(
                "State: the %s store cannot be written (%s); %s",
                self._backend(),
                error,
                "launches that need a record are skipped (onStoreUnavailable: fail-closed)"
                if self.policy == "fail-closed"
                else "jobs run as if stateless meanwhile (onStoreUnavailable: degrade)",
            )
        self.available = False

    def _backend(self) -> str:
        return self.store.backend if self.store is not None else "state"

    def _unavailable(self, what: str, job: Job) -> str | None:
        """A record before a launch could not be written: the policy's answer."""
        if self.policy == "fail-closed":
            return "state_unavailable"
        logger.warning(
            "Job %s: %s not recorded (the store does not answer); starting anyway "
            "(onStoreUnavailable: degrade)",
            job.name,
            what,
            extra={"job": job.name},
        )
        return None

    async def _recorded(self, future: asyncio.Future[bool] | None) -> bool:
        """Whether a record queued before a launch was written: at once False while the
        store is known to fail (the record stays queued for when it answers again), else
        waited for at most :data:`RECORD_WAIT` seconds."""
        if future is None:
            return True
        if not self.available:
            return False
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=RECORD_WAIT)
        except TimeoutError:
            self._written(False, f"no answer in {RECORD_WAIT:g} s")
            return False

    # ------------------------------------------------------------ LaunchGuard

    async def admit(self, launch: Launch) -> str | None:
        if self.store is None:
            return None
        job = launch.job
        if launch.kind == "reboot":
            return await self._reboot(job)
        if launch.kind == "retry":
            if job.name in self._inherited_retries:
                self._inherited_retries.discard(job.name)
                if self._hands_off(job):
                    refused = await self._claim(job, launch, "the inherited retry")
                    if refused is not None:
                        return refused
            future = self._submit(
                self._retry_key(job),
                self._retry_record(job, "settled", reason="launched", attempt=launch.attempt),
            )
            if not await self._recorded(future):
                return self._unavailable("the retry's launch", job)
            return None
        if launch.kind == "fire" and self._resumes(job):
            if job.name in self._catching_up:
                self._catching_up.discard(job.name)
                if self._hands_off(job):
                    refused = await self._claim(job, launch, "the inherited catch-up")
                    if refused is not None:
                        return refused
            future = self._submit(self._fire_key(job), self._fire_record(job, launch.scheduled))
            if not await self._recorded(future):
                return self._unavailable("the fire", job)
        return None

    def release(self, launch: Launch) -> None:
        return None

    async def _reboot(self, job: Job) -> str | None:
        """Once per boot (and job digest) on this host; once per digest in the cluster
        for a ``Leader`` job under leader election.  Recorded before the launch.  When the
        store cannot tell, ``onStoreUnavailable`` decides, and a run it lets start has its
        marker queued for when the store answers."""
        store = self.store
        assert store is not None
        now = utc_text(datetime.now(UTC))
        cluster = self._once_per_cluster(job)
        if cluster:
            marker = key("cluster", "reboot", job.name)
            mine: Record = {"job": job.name, "digest": job.digest, "node": self.node, "at": now}
        elif self.boot is None:
            return None  # no boot id here: every start is a boot
        else:
            marker = self._key("reboot", job.name)
            mine = {"job": job.name, "digest": job.digest, "bootId": self.boot, "at": now}
        if self.available:  # not while the store is known not to answer
            try:
                held = await store.get(marker)
                if cluster and held is not None and held.get("digest") == job.digest:
                    return self._ran_before(job, f"in the cluster (by node {held.get('node')})")
                if (
                    not cluster
                    and held is not None
                    and (held.get("bootId"), held.get("digest")) == (self.boot, job.digest)
                ):
                    return self._ran_before(job, "in this boot")
                await store.put(marker, mine)
                return None
            except (StateError, TimeoutError) as exc:
                self._written(False, str(exc) or "no answer in time")
        refused = self._unavailable("the @reboot run", job)
        if refused is None:
            self._submit(marker, mine)  # it runs: say so once the store answers
        return refused

    def _once_per_cluster(self, job: Job) -> bool:
        """A ``Leader`` @reboot job under leader election, on a store the nodes share (on a
        node's own directory it is once per boot of that node, like any other)."""
        return self.cluster_wide(job) and self.store is not None and self.store.shared

    def _hands_off(self, job: Job) -> bool:
        """Whether ``job``'s last fire, pending retry and runs going are the cluster's
        (``cluster/jobs/<job>/…``), for the node that owns it next to inherit: a
        ``Leader`` job (not @reboot, not a workflow) under leader election, on a store
        the nodes share."""
        return (
            self._once_per_cluster(job)
            and not job.schedule.is_reboot
            and isinstance(job.config, JobConfig)  # a workflow (or a task) is not one
        )

    def _fire_key(self, job: Job) -> str:
        return job_key(job.name, "fire") if self._hands_off(job) else self._key("fires", job.name)

    def _retry_key(self, job: Job) -> str:
        if self._hands_off(job):
            return job_key(job.name, "retry")
        return self._key("retries", job.name)

    async def _claim(self, job: Job, launch: Launch, what: str) -> str | None:
        """Put-if-absent ``cluster/jobs/<job>/claims/<scheduled>#<attempt>`` before an
        inherited launch: of the nodes that would run it (a restarted old owner, the new
        one), the first to claim it does.  ``fire_taken`` when another node claimed it;
        ``onStoreUnavailable`` decides when the store cannot tell."""
        store = self.store
        assert store is not None
        claims = job_key(job.name, "claims")
        marker = f"{claims}/{key(f'{utc_text(launch.scheduled)}#{launch.attempt}')}"
        now = datetime.now(UTC)
        mine: Record = {
            "job": job.name,
            "node": self.node,
            "scheduled": utc_text(launch.scheduled),
            "attempt": launch.attempt,
            "at": utc_text(now),
        }
        try:
            if not await store.create(marker, mine):
                held = await store.get(marker)
                logger.info(
                    "Job %s: %s at %s (attempt %d) was claimed by node %s; not run here",
                    job.name,
                    what,
                    utc_text(launch.scheduled),
                    launch.attempt,
                    held.get("node") if held is not None else "?",
                    extra={"job": job.name},
                )
                return "fire_taken"
            old = await store.list(claims + "/")
        except (StateError, TimeoutError) as exc:
            self._written(False, str(exc) or "no answer in time")
            return self._unavailable(what, job)
        for full, record in old.items():
            at = record_time(record.get("at")) if record is not None else None
            if full != marker and (at is None or (now - at).total_seconds() > CLAIM_KEEP):
                self._submit(full, None)
        return None

    def _ran_before(self, job: Job, where: str) -> str:
        logger.info(
            "Job %s: @reboot already ran %s; not run again",
            job.name,
            where,
            extra={"job": job.name},
        )
        return "reboot_ran"

    # ------------------------------------------------------------ StateHooks

    def _fire_record(self, job: Job, fire: datetime) -> Record:
        return {"job": job.name, "digest": job.digest, "fire": utc_text(fire), "node": self.node}

    def _resumes(self, job: Job) -> bool:
        """Whether ``job``'s schedule resumes from its last fire after a restart: it has a
        deadline and this node alone decides its fires (a job the leadership places has
        its fires handled by whichever node leads; this node's record would be stale)."""
        if job.config.starting_deadline_seconds is None or job.schedule.is_reboot:
            return False
        return not self.gated(job) or self._hands_off(job)

    def fire_handled(self, job: Job, fire: datetime) -> None:
        if not self._resumes(job):
            return
        if self._hands_off(job) and not self.scheduler.gate_allows(job):
            return  # the record is the owner's to write
        self._submit(self._fire_key(job), self._fire_record(job, fire))

    def _retry_record(self, job: Job, status: str, **fields: Any) -> Record:
        return {
            "job": job.name,
            "digest": job.digest,
            "status": status,
            "node": self.node,
            **fields,
        }

    def retry_armed(self, job: Job, count: int, not_before: datetime, scheduled: datetime) -> None:
        # armed by the node whose run failed, owner or not: a run that went on here
        # after another node took the job over leaves its retry for the owner to inherit
        self._submit(
            self._retry_key(job),
            self._retry_record(
                job,
                "pending",
                count=count,
                notBefore=utc_text(not_before),
                scheduled=utc_text(scheduled),
            ),
        )

    def retry_settled(self, job: Job, reason: str) -> None:
        if self._hands_off(job) and not self.scheduler.gate_allows(job):
            return  # not this node's to settle: the owner may have inherited it
        self._submit(self._retry_key(job), self._retry_record(job, "settled", reason=reason))

    # ------------------------------------------------------------ RunListener

    def run_started(self, run: RunStart) -> None:
        if self.writer is None:
            return
        if self.writer.held:
            self._ran_meanwhile.add(run.job)
        if run.pid is None:
            return
        job = self.scheduler.job(run.job)
        shared = job is not None and self._hands_off(job)
        running = job_key(run.job, "running", run.id) if shared else self._key(BOOT_SCOPED, run.id)
        self._running_keys[run.id] = running
        ticks = run.start_ticks
        if ticks is None:  # spawned without the exec shim, or adopted without them
            ticks = process_start_ticks(run.pid)
        digest = job.digest if job is not None else None
        if self.writer.held:
            self._running_meanwhile.add(running)
        elif not shared and not run.adopted:
            # (another node may read a Leader job's record, and an adopted run's is in
            # the store already: its end must remove it; neither is held back)
            self._lingering[running] = (asyncio.get_running_loop().time(), run, ticks, digest)
            if self._linger_timer is None:
                self._arm_linger(RUNNING_LINGER)
            return
        self._submit(running, self._running_record(run, ticks, digest))

    def _running_record(self, run: RunStart, ticks: int | None, digest: str | None) -> Record:
        return {
            "job": run.job,
            "digest": digest,
            "runId": run.id,
            "pid": run.pid,
            "pgid": run.pid,
            "bootId": self.boot,
            "startTicks": ticks,
            "scheduled": utc_text(run.scheduled_time),
            "attempt": run.attempt,
            "startedAt": utc_text(run.started_at),
            "manual": run.manual,
            "node": self.node,
        }

    def _arm_linger(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._linger_timer = loop.call_later(max(0.0, delay), self._linger_passed)

    def _linger_passed(self) -> None:
        """Queue the ``running`` records of the runs going for :data:`RUNNING_LINGER`;
        wait again for the next one's time."""
        self._linger_timer = None
        now = asyncio.get_running_loop().time()
        while self._lingering:
            running, (since, run, ticks, digest) = next(iter(self._lingering.items()))
            if now - since < RUNNING_LINGER:
                self._arm_linger(since + RUNNING_LINGER - now)
                return
            del self._lingering[running]
            self._submit(running, self._running_record(run, ticks, digest))

    def _write_lingering(self) -> None:
        """Queue every ``running`` record that waits (a stop, a switch of store)."""
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        lingering, self._lingering = self._lingering, {}
        for running, (_, run, ticks, digest) in lingering.items():
            self._submit(running, self._running_record(run, ticks, digest))

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        if self.writer is None:
            return
        if outcome == "lost":  # another node's run: :meth:`_judge_run` removed its record
            self._dirty_history.add(run.job)
            return
        running = self._running_keys.pop(run.id, None) or self._key(BOOT_SCOPED, run.id)
        if self._lingering.pop(running, None) is not None:
            pass  # it ended before its record was queued: there is nothing to remove
        elif running in self._running_meanwhile:
            # started and ended while nothing was written: the store never had it
            self._running_meanwhile.discard(running)
            self.writer.forget(running)
        else:
            self._submit(running, None)
        self._dirty_history.add(run.job)

    # ------------------------------------------------------------ the run history

    async def _history_rounds(self) -> None:
        while True:
            await asyncio.sleep(HISTORY_EVERY)
            self._flush_history(spaced=True)

    async def _flow_rounds(self) -> None:
        while True:
            await asyncio.sleep(FLOW_BEAT)
            self._beat()
            try:
                await self.take_over()
            except Exception:
                logger.exception("State: going on with workflow runs failed; please report this")
            try:
                await self.inherit()
            except Exception:
                logger.exception("State: inheriting Leader jobs failed; please report this")

    def _flush_history(self, *, spaced: bool = False) -> None:
        """Write the changed histories; ``spaced`` (the rounds): only the jobs whose
        history was not written in the last :data:`HISTORY_GAP` seconds."""
        dirty, self._dirty_history = self._dirty_history, set()
        if spaced and dirty:  # (idle rounds leave the times as they are: nothing to weigh)
            now = self.monotonic()
            written = self._history_written = {
                job: at for job, at in self._history_written.items() if now - at < HISTORY_GAP
            }
            self._dirty_history = {job for job in dirty if job in written}
            dirty -= self._dirty_history
            written.update(dict.fromkeys(dirty, now))
        for job in sorted(dirty):
            runs = [_capped(run) for run in self.history.finished(job)]
            # within HISTORY_RECORD bytes (etcd refuses a request over 1.5 MiB; escaped
            # output can grow past the per-stream cap)
            self._submit(self._key("history", job), history_record(job, runs, HISTORY_RECORD))
        flows, self._dirty_flow_history = self._dirty_flow_history, set()
        if self.flow_history is not None:
            for workflow in sorted(flows):
                self._submit(
                    self._key("flowhistory", workflow),
                    flow_history_record(
                        workflow, self.flow_history.finished(workflow), self.node, HISTORY_RECORD
                    ),
                )

    # ------------------------------------------------------------ FlowListener

    def _flow_key(self, run: FlowRunView) -> str:
        known = self._flows.get(run.id)
        if known is not None:
            return known[0]
        job = self.scheduler.job(run.workflow)
        if job is not None and self._once_per_cluster(job):
            return key("cluster", "flows", run.id)
        return self._key("flows", run.id)

    def _write_flow(self, run: FlowRunView) -> None:
        if self.writer is None:
            return
        if run.detached:  # another node drives it now: the record is its to write
            self._flows.pop(run.id, None)
            return
        record_key = self._flow_key(run)
        self._flows[run.id] = (record_key, run)
        processes = {
            task.task: (task.pid, process_start_ticks(task.pid), self.boot)
            for task in run.tasks
            if task.pid is not None and task.state == "running"
        }
        self._submit(record_key, flow_run_record(run, self.node, datetime.now(UTC), processes))

    def flow_started(self, run: FlowRunView) -> None:
        self._write_flow(run)

    def flow_changed(self, run: FlowRunView) -> None:
        self._write_flow(run)

    def flow_finished(self, run: FlowRunView) -> None:
        if self.writer is None:
            return
        known = self._flows.pop(run.id, None)
        if not run.detached:
            self._submit(known[0] if known is not None else self._flow_key(run), None)
        self._dirty_flow_history.add(run.workflow)

    def _beat(self) -> None:
        """Rewrite the cluster-wide runs this node drives: they are not silent."""
        cluster = key("cluster", "flows") + "/"
        for record_key, run in list(self._flows.values()):
            if record_key.startswith(cluster):
                self._write_flow(run)

    async def take_over(self) -> None:
        """Go on with the cluster-wide workflow runs this node may drive now (it leads)
        whose driver is this node or has been silent for :data:`FLOW_STALE` seconds."""
        store = self.store
        if store is None or not store.shared or self.waiting or not self.available:
            return
        try:
            records = await store.list(key("cluster", "flows") + "/")
        except (StateError, TimeoutError):
            return
        now = datetime.now(UTC)
        for full, record in records.items():
            stored = read_flow_run(record) if record is not None else None
            if stored is None or stored.view.id in self._flows:
                continue
            job = self.scheduler.job(stored.view.workflow)
            if job is None or not self.scheduler.gate_allows(job):
                continue
            silent = (now - stored.beat).total_seconds()
            if stored.node != self.node and silent < FLOW_STALE:
                continue
            if job.digest != stored.view.digest:
                self._submit(full, None)  # no node can finish it on this definition
                continue
            self._resume_flow(
                stored,
                f"outcome unknown: it ran on node {stored.node}, which no longer drives the run",
            )

    def _resume_flow(self, stored: StoredFlow, lost: str) -> bool:
        adopt = {
            task: (pid, ticks)
            for task, (pid, ticks, boot) in stored.processes.items()
            if ticks is not None
            and boot is not None
            and boot == self.boot
            and process_start_ticks(pid) == ticks
        }
        if stored.node != self.node:
            adopt = {}  # another node's processes are not this node's to watch
        resumed = self.scheduler.resume_flow(stored.view, adopt, lost)
        if resumed:
            logger.warning(
                "Workflow %s: run %s goes on from durable state (left by %s)",
                stored.view.workflow,
                stored.view.id,
                "this node's previous daemon" if stored.node == self.node else stored.node,
                extra={"workflow": stored.view.workflow, "flow_run": stored.view.id},
            )
        return resumed

    # ------------------------------------------------------------ the handoff

    def jobs_applied(self, job_set_id: str) -> None:
        """A revision was applied (its job set ``job_set_id``; every commit tells, an
        unchanged one too): the next :meth:`inherit` looks again when it changed."""
        self._job_set = job_set_id

    async def inherit(self) -> None:
        """When what this node sees of the leadership, or the job set applied, changed:
        inherit the records of the handed-off jobs it owns now and did not before, or
        whose definition changed since (a revision added or changed them, here or on the
        node that wrote the records first: :meth:`_take`); every round, look at the runs
        of owned jobs that go on other live nodes (:meth:`_watch_remote`).  A round in
        which neither changed costs no look at the jobs."""
        store = self.store
        if store is None or not store.shared or self.waiting or not self.available:
            return
        seen = (self.leadership(), self._job_set)
        if seen != self._seen:
            scheduler = self.scheduler
            owned = {
                name: job.digest
                for name, job in scheduler.jobs.items()
                if self._hands_off(job) and scheduler.gate_allows(job)
            }
            before = self._owned
            new = {name for name, digest in owned.items() if before.get(name) != digest}
            if new:
                try:
                    records = await store.list(_JOBS)
                except (StateError, TimeoutError):
                    return  # looked at again next round
                by_job: dict[str, dict[str, Record | None]] = {}
                for full, record in records.items():
                    by_job.setdefault(segments(full)[2], {})[full] = record
                now = scheduler.clock.now()
                for name in sorted(new):
                    job = scheduler.job(name)
                    if job is not None and job.digest == owned[name]:
                        self._take(job, by_job.get(name, {}), now, fresh=name not in before)
            for name in set(self._remote) - owned.keys():
                del self._remote[name]
            self._wrote = {full for full in self._wrote if segments(full)[2] in owned}
            self._seen, self._owned = seen, owned
        await self._watch_remote(store)

    def _take(
        self, job: Job, records: Mapping[str, Record | None], now: datetime, *, fresh: bool
    ) -> None:
        """This node now owns ``job``: resume its schedule from the last fire handled (a
        missed fire within ``startingDeadlineSeconds`` runs once, claimed), re-arm a
        pending retry at its time, and judge the runs going on other nodes.  A last fire
        or retry of another definition is left as it is: it may be of a revision this
        node has not applied yet, whose swap takes it.  ``fresh``: this node did not own
        the job at the last look (else a revision changed it while this node owned it,
        and a record this daemon wrote since is its own: not inherited)."""
        name = job.name
        if fresh:
            self._wrote.difference_update(job_key(name, kind) for kind in ("fire", "retry"))
        for full, record in records.items():
            if record is None or full in self._wrote:
                continue
            kind = segments(full)[3:]
            if kind == ["fire"]:
                fire = record_time(record.get("fire"))
                if fire is None or record.get("digest") != job.digest:
                    continue
                if not self._resumes(job):
                    continue
                self._catching_up.add(name)
                if self.scheduler.resume(name, fire):
                    self.stats.inherited_fires += 1
                    if record.get("node") != self.node:
                        logger.info(
                            "Job %s: inherited from node %s (last fire %s)",
                            name,
                            record.get("node"),
                            utc_text(fire),
                            extra={"job": name},
                        )
            elif kind == ["retry"]:
                self._inherit_retry(full, record, now)
            elif len(kind) == 2 and kind[0] == BOOT_SCOPED:
                self._judge_run(job, full, record)

    def _inherit_retry(self, full: str, record: Record, now: datetime) -> None:
        if record.get("status") != "pending":
            return
        name = str(record.get("job"))
        job = self.scheduler.job(name)
        if job is None or record.get("digest") != job.digest:
            return  # another definition's: see _take
        self._inherited_retries.add(name)
        if self._restore_retry(full, record, now, {}):
            self.stats.inherited_retries += 1
        else:
            self._inherited_retries.discard(name)

    def _judge_run(self, job: Job, full: str, record: Record) -> None:
        """A run of ``job`` (this node owns it) that another node's record says goes: kept
        while that node is a live member (it finishes or adopts it), reported ``lost``
        once it is not."""
        node = record.get("node")
        if not isinstance(node, str) or node == self.node:
            return
        members = self.members()
        if members is None or node in members:
            self._remote.setdefault(job.name, {})[full] = node
            return
        scheduled, started = (
            record_time(record.get("scheduled")),
            record_time(record.get("startedAt")),
        )
        attempt, digest = record.get("attempt"), record.get("digest")
        if scheduled is not None and started is not None:
            start = RunStart(
                id=str(record.get("runId")),
                job=job.name,
                scheduled_time=scheduled,
                attempt=attempt if isinstance(attempt, int) else 1,
                started_at=started,
                pid=None,
                manual=bool(record.get("manual")),
                digest=digest if isinstance(digest, str) else None,
            )
            reason = LOST_THERE.format(node=node)
            logger.warning(
                "Job %s: run %s %s",
                job.name,
                start.id,
                reason.removeprefix("lost: "),
                extra={"job": job.name, "node": node, "outcome": "lost"},
            )
            if self.scheduler.report_lost(job.name, start, reason):
                self.stats.lost_runs += 1
                # the fleet view's last run names the node the run went on, not this one
                now = self.scheduler.clock.now()
                self._submit(
                    last_run_key("job", job.name), last_run_record(start, node, now, "lost")
                )
        self._submit(full, None)

    async def _watch_remote(self, store: StateStore) -> None:
        """For each owned job with a run going on another node: once that run's record is
        gone (it ended there), inherit the retry its failure armed; while it stays, judge
        its node again (it may have died since)."""
        for name in sorted(self._remote):
            job = self.scheduler.job(name)
            if job is None or not self.scheduler.gate_allows(job):
                del self._remote[name]
                continue
            try:
                records = await store.list(job_key(name) + "/")
            except (StateError, TimeoutError):
                return
            watched = self._remote.pop(name)
            for full in watched:
                record = records.get(full)
                if record is not None:
                    self._judge_run(job, full, record)
            if name in self._remote:
                continue  # a run still goes there
            retry = records.get(job_key(name, "retry"))
            if retry is not None and retry.get("node") != self.node:
                self._inherit_retry(job_key(name, "retry"), retry, self.scheduler.clock.now())

    # ------------------------------------------------------------ the restore

    def restore(self, records: Mapping[str, Record | None], now: datetime) -> None:
        """Apply what a previous daemon on this node left (its records, read at prepare):
        adopt live runs, resume schedules, re-arm pending retries, load the history."""
        prefix = self._key() + "/"
        by_kind: dict[str, dict[str, Record | None]] = {}
        for full, record in records.items():
            kind = full.removeprefix(prefix).partition("/")[0]
            by_kind.setdefault(kind, {})[full] = record
        for record in by_kind.get("history", {}).values():
            self._restore_history(record)
        for record in by_kind.get("flowhistory", {}).values():
            self._restore_flow_history(record)
        adopted: set[str] = set()
        for full, record in by_kind.get("flows", {}).items():
            adopted |= self._restore_flow(full, record)
        for full, record in by_kind.get("running", {}).items():
            if record is not None and record.get("runId") in adopted:
                continue  # its workflow run watches it; its end removes the record
            self._restore_run(full, record)
        for full, record in by_kind.get("cluster", {}).items():
            # a handed-off job's run this node started (the owner inherits the rest)
            parts = segments(full)
            if (
                record is not None
                and len(parts) == 5
                and parts[3] == BOOT_SCOPED
                and record.get("node") == self.node
            ):
                self._restore_run(full, record)
        for full, record in by_kind.get("fires", {}).items():
            if full not in self._queued_meanwhile:  # this daemon handled a fire since
                self._restore_fire(full, record)
        booted = {
            str(record.get("job")): (record.get("bootId"), record.get("digest"))
            for record in by_kind.get("reboot", {}).values()
            if record is not None
        }
        for full, record in by_kind.get("retries", {}).items():
            if full not in self._queued_meanwhile:  # this daemon armed or settled one since
                self._restore_retry(full, record, now, booted)

    def _restore_flow(self, full: str, record: Record | None) -> set[str]:
        """Resume a workflow run a previous daemon on this node left; the ids of the task
        runs it adopted."""
        stored = read_flow_run(record) if record is not None else None
        if stored is None:
            self._submit(full, None)
            return set()
        if full in self._queued_meanwhile:
            return set()
        job = self.scheduler.job(stored.view.workflow)
        why: str | None = None
        if job is None:
            why = "removed"
        elif job.digest != stored.view.digest:
            why = "redefined"
        elif not self._resume_flow(stored, LOST_HERE):
            why = "not resumable"
        if why is not None:
            self.stats.settled_at_restore += 1
            logger.info(
                "Workflow %s: the run %s a previous daemon left is dropped (%s)",
                stored.view.workflow,
                stored.view.id,
                why,
                extra={"workflow": stored.view.workflow},
            )
            self._submit(full, None)
            return set()
        return {
            str(task.run_id)
            for task in stored.view.tasks
            if task.state == "running" and task.run_id is not None
        }

    def _restore_flow_history(self, record: Record | None) -> None:
        read = flow_history_runs(record) if record is not None else None
        if read is None or self.flow_history is None:
            return
        workflow, runs = read
        if self.scheduler.job(workflow) is not None and runs:
            late = bool(self.flow_history.finished(workflow))
            self.flow_history.restore(workflow, runs)
            if late:
                self._dirty_flow_history.add(workflow)

    def _restore_history(self, record: Record | None) -> None:
        read = history_runs(record) if record is not None else None
        if read is None:
            return
        job, runs = read
        if self.scheduler.job(job) is not None and runs:
            late = bool(self.history.finished(job))
            self.history.restore(job, runs)
            if late:  # runs of this daemon's came first: write the merged history
                self._dirty_history.add(job)

    def _restore_run(self, full: str, record: Record | None) -> None:
        adopted = False
        if record is not None:
            pid, ticks = record.get("pid"), record.get("startTicks")
            name = str(record.get("job"))
            job = self.scheduler.job(name)
            scheduled, started = (
                record_time(record.get("scheduled")),
                record_time(record.get("startedAt")),
            )
            if (
                isinstance(pid, int)
                and isinstance(ticks, int)
                and self.boot is not None
                and record.get("bootId") == self.boot
                and job is not None
                and scheduled is not None
                and started is not None
            ):
                attempt = record.get("attempt")
                adopted = self.scheduler.adopt(
                    name,
                    pid,
                    ticks,
                    scheduled,
                    attempt if isinstance(attempt, int) else 1,
                    started,
                )
                if adopted:
                    self.stats.adopted_runs += 1
                    self._running_keys[str(record.get("runId"))] = full
                    logger.warning(
                        "Job %s: run %s (pid %d) outlived the previous daemon; watching it "
                        "until it ends (outcome unknown)",
                        name,
                        record.get("runId"),
                        pid,
                        extra={"job": name, "pid": pid},
                    )
        if not adopted:
            self._submit(full, None)  # ended while no daemon watched (or not ours to watch)

    def _restore_fire(self, full: str, record: Record | None) -> None:
        name = str(record.get("job")) if record is not None else ""
        job = self.scheduler.job(name)
        fire = record_time(record.get("fire")) if record is not None else None
        if (
            job is None
            or record is None
            or fire is None
            or not self._resumes(job)
            or self._hands_off(job)  # the cluster's record: its owner resumes from it
        ):
            self._submit(full, None)
            return
        if record.get("digest") != job.digest:
            return  # a changed job starts anew; its next fire rewrites the record
        if self.scheduler.resume(name, fire):
            self.stats.restored_fires += 1

    def _restore_retry(
        self,
        full: str,
        record: Record | None,
        now: datetime,
        booted: Mapping[str, tuple[object, object]],
    ) -> bool:
        """Re-arm the pending retry ``record`` says (whether it was), or settle it."""
        if record is None:
            self._submit(full, None)
            return False
        if record.get("status") != "pending":
            return False
        name = str(record.get("job"))
        job = self.scheduler.job(name)
        not_before, scheduled = (
            record_time(record.get("notBefore")),
            record_time(record.get("scheduled")),
        )
        count = record.get("count")
        why: str | None = None
        if job is None:
            why = "removed"
        elif not job.config.enabled:
            why = "disabled"
        elif record.get("digest") != job.digest:
            why = "redefined"
        elif name in self._ran_meanwhile:
            why = "superseded_by_run"  # the store answered late; a newer run came first
        elif not_before is None or scheduled is None or not isinstance(count, int):
            why = "malformed"
        elif (
            job.schedule.is_reboot
            and not self._once_per_cluster(job)
            and booted.get(name) != (self.boot, job.digest)
        ):
            why = "superseded_by_reboot"  # this boot's @reboot run starts a new sequence
        else:
            overdue = (now - not_before).total_seconds()
            deadline = job.config.starting_deadline_seconds
            if overdue > self.scheduler.late_tolerance and (deadline is None or overdue > deadline):
                why = "overdue"
            elif self.scheduler.rearm_retry(name, count, max(0.0, -overdue), scheduled):
                self.stats.rearmed_retries += 1
                logger.info(
                    "Job %s: retry %d re-armed from durable state, due %s",
                    name,
                    count,
                    utc_text(not_before),
                    extra={"job": name, "attempt": count + 1},
                )
                return True
            else:
                why = "exhausted"
        self.stats.settled_at_restore += 1
        logger.info(
            "Job %s: the retry a previous daemon left pending is dropped (%s)",
            name,
            why,
            extra={"job": name},
        )
        self._submit(
            full,
            {
                "job": name,
                "digest": record.get("digest"),
                "status": "settled",
                "reason": why,
                "node": self.node,
            },
        )
        return False


_UNSEEN = object()
"""What :meth:`StateKeeper.inherit` has seen before its first look: nothing."""


def _capped(run: FinishedRun) -> FinishedRun:
    """``run`` with at most :data:`HISTORY_OUTPUT` bytes of each stream (the end)."""
    stdout, out_cut = tail_text(run.stdout, HISTORY_OUTPUT)
    stderr, err_cut = tail_text(run.stderr, HISTORY_OUTPUT)
    if not (out_cut or err_cut):
        return run  # (frozen: the run as it is; a history's flush copied every run)
    return replace(
        run,
        stdout=stdout,
        stderr=stderr,
        stdout_dropped=run.stdout_dropped + out_cut,
        stderr_dropped=run.stderr_dropped + err_cut,
    )
