"""The daemon: follow a configuration source, reconcile each revision, run the jobs.

:class:`Daemon` runs what :func:`cronstable.daemon.build.build_daemon` built (the one
place the parts are made and wired); this module keeps the runtime's own parts of it:
the job table's section (:class:`JobsSection`) and the spawner of real runs.

* Start: the source's first snapshot is loaded, planned and applied; if it is
  invalid the daemon exits 1 with every error.  A source whose origin is down
  starts from its cached last good revision.  A cluster or state store that
  does not answer is no reason to exit: its section is applied connecting and
  waits for it (:mod:`cronstable.store_link`); only one that refuses rejects.
* Each new revision the source yields is reconciled (load → plan → two-phase
  apply); a rejected one is logged with every error and the running revision
  stays.  SIGHUP asks the source to look now (yacron dies on SIGHUP).
* SIGTERM/SIGINT stop spawning, cancel pending retries and wait for running
  jobs, then exit 0; a second signal stops the running jobs too.  They are
  handled from the start: a stop while the source is still fetching its first
  revision (a remote that does not answer) ends the daemon at once, exit 0.
* The follower (the task reading the source's revisions) is supervised, for
  every kind of source: if it ever ends or fails while the daemon runs, that is
  an ERROR, and it is restarted (a new ``watch()``) after 1 s, then 2 s, 4 s …
  up to :data:`FOLLOW_RESTART_MAX`; the running revision stays meanwhile.
* systemd (``Type=notify``, :mod:`cronstable.runtime.sdnotify`): READY once the first
  revision is applied, RELOADING then READY around each later revision, STOPPING at
  the first stop request, STATUS with the running (and a rejected) revision, and the
  watchdog pinged from this loop for as long as :meth:`Daemon.run` runs.
* Every task is owned: the follower runs in a task group beside the scheduler, a
  second stop request's stop of the running jobs is awaited, and what the daemon
  opened is closed through one exit stack, in the order the builder listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from cronstable.config import ConfigError, DesiredState, Job, Problem
from cronstable.metrics import DaemonMetrics
from cronstable.ports import RunChannel, Trigger
from cronstable.reconcile.apply import Applier
from cronstable.reconcile.plan import Plan, changed_groups
from cronstable.redact import redact
from cronstable.runtime import exec_shim
from cronstable.runtime.control import DaemonControl
from cronstable.runtime.identity import Identity, IdentityError, resolve_identity
from cronstable.runtime.output import OutputMirror
from cronstable.runtime.process import JobProcess
from cronstable.runtime.scheduler import Scheduler
from cronstable.runtime.sdnotify import ServiceNotifier
from cronstable.runtime.triggers import Triggers, noticed_kind
from cronstable.snapshot import Snapshot
from cronstable.sources.base import Source, SourceError
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

FOLLOW_RESTART_FIRST = 1.0
"""Seconds before the first restart of a follower that ended; doubled at each further one."""
FOLLOW_RESTART_MAX = 60.0
"""Longest wait between two restarts; a follower that ran this long starts the count again."""


class _StopRequested(Exception):
    """A stop request came while the daemon was still starting."""


def resolve_identities(
    state: DesiredState,
    names: Collection[str] | None = None,
    known: Mapping[str, Identity] | None = None,
) -> dict[str, Identity]:
    """The user/group as ids of each job that runs as another identity (a job missing
    runs as the daemon); raises ConfigError naming every job that cannot run.

    ``names``: only these jobs may differ from ``known`` (the identities of the revision
    running), whose others are kept as they are.  Only jobs with an identity are kept,
    so a one-file edit among 100,000 jobs copies a handful of entries, not 100,000
    (20 ms, a third of the edit, when it was every job's)."""
    identities: dict[str, Identity] = {}
    if names is not None and known is not None:
        identities = dict(known)
        for name in names:
            identities.pop(name, None)
    problems: list[Problem] = []
    jobs = state.jobs
    tasks = state.tasks()  # few: each resolved again (a group's delta names jobs only)
    chosen = (
        {**jobs, **tasks}.items()
        if names is None
        else [*((n, jobs[n]) for n in names if n in jobs), *tasks.items()]
    )
    for name, job in chosen:
        config = job.config
        if config.user is None and config.group is None:
            continue  # runs as the daemon (resolve_identity's None)
        try:
            identity = resolve_identity(config.user, config.group)
        except IdentityError as exc:
            problems.append(Problem(job.file, job.line, None, (), f"job {name!r}: {exc.message}"))
            continue
        if identity is not None:
            identities[name] = identity
    if problems:
        raise ConfigError(problems)
    return identities


def source_reads(state: DesiredState) -> list[str]:
    """What an applied revision read, as :meth:`Source.applied` takes it (dirs end in ``/``)."""
    return [*state.files, *(f"{d}/" if d else "/" for d in state.directories)]


class ProcessSpawner:
    """Creates the real runs; the identities follow the applied revision.  ``channel``
    opens each run's channel to the daemon (None: runs get none)."""

    def __init__(self, mirror: OutputMirror | None, channel: RunChannel | None = None) -> None:
        self.mirror = mirror
        self.channel = channel
        self.identities: Mapping[str, Identity] = {}
        """The identity of each job that runs as another user or group (others: none)."""
        # copied once: copying os.environ decodes every variable, on every run (bench_runtime)
        self.base_environment = dict(os.environ)

    def __call__(self, job: Job, scheduled: datetime, attempt: int) -> JobProcess:
        return JobProcess(
            job,
            scheduled_time=scheduled,
            attempt=attempt,
            identity=self.identities.get(job.name),
            base_environment=self.base_environment,
            mirror=self.mirror,
            channel=self.channel,
        )


class JobsSection:
    """The job table: users and groups are resolved when prepared; one swap on commit.

    A revision whose files mostly did not change (its groups: :func:`changed_groups`)
    resolves and swaps the jobs of the files that did, not every job."""

    name = "jobs"

    def __init__(self, scheduler: Scheduler, spawner: ProcessSpawner) -> None:
        self.scheduler = scheduler
        self.spawner = spawner
        self._installed: DesiredState | None = None
        """The revision whose jobs the scheduler's table holds."""

    def affected(self, plan: Plan) -> bool:
        return bool(plan.jobs) or bool(plan.workflows)

    async def prepare(self, desired: DesiredState) -> Any:
        delta = changed_groups(desired, self._installed)
        if delta is None:
            return await asyncio.to_thread(resolve_identities, desired), None
        only = {*delta[0], *delta[1]}
        return resolve_identities(desired, only, self.spawner.identities), only

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        identities, only = prepared
        self.spawner.identities = identities
        self.scheduler.replace_jobs(desired.jobs, desired.workflows, only=only)
        self._installed = desired

    async def discard(self, prepared: Any) -> None:
        return None

    async def close(self) -> None:
        return None


Closer = tuple[str, Callable[[], Awaitable[None]]]
"""What a stopping daemon closes: its name in a log line, and how."""


START = Trigger("start")
"""The first revision a daemon applies (or the last applied one it falls back to)."""


def _asker(trigger: Trigger) -> str:
    if trigger.kind == "api":
        token = f"token {trigger.token}" if trigger.token is not None else "no token"
        return f" (through {trigger.via or 'the API'}, {token})"
    return " (SIGHUP)" if trigger.kind == "sighup" else ""


def request_reload(
    source: Source, triggers: Triggers | None = None, trigger: Trigger | None = None
) -> None:
    """Ask ``source`` for its current revision now (SIGHUP, ``POST /reload``), noting
    ``trigger`` in ``triggers`` so the revision it yields is credited to it."""
    if triggers is not None and trigger is not None:
        triggers.note(trigger)
    logger.info(
        "Reload requested%s: asking %s for its current revision",
        _asker(trigger) if trigger is not None else "",
        source.description,
    )
    source.nudge()


class Daemon:
    """Runs a daemon :func:`cronstable.daemon.build.build_daemon` built (see the module
    docstring): follows ``source`` through ``applier`` while ``scheduler`` runs the jobs.

    ``closing``: closed in this order when the daemon stops, after the runs drained (a
    failure is logged and the next one closed all the same); then ``mirror``.
    ``notifier``: told of the daemon's lifecycle (systemd's ``Type=notify``; by default
    one that sends nothing), its watchdog pinged from this loop while the daemon runs.
    ``triggers``: the reload requests waiting for a revision (shared with the control,
    which notes the API's and the webhook's), to credit each revision to its trigger.
    """

    def __init__(
        self,
        source: Source,
        *,
        applier: Applier,
        scheduler: Scheduler,
        control: DaemonControl,
        metrics: DaemonMetrics,
        mirror: OutputMirror,
        closing: Sequence[Closer] = (),
        notifier: ServiceNotifier | None = None,
        triggers: Triggers | None = None,
    ) -> None:
        self.source = source
        self.triggers = triggers if triggers is not None else Triggers(noticed_kind(source.kind))
        self.applier = applier
        self.scheduler = scheduler
        self.control = control
        self.metrics = metrics
        self.history = control.history
        self.events = control.events
        self.mirror = mirror
        self.closing = tuple(closing)
        self.notifier = notifier if notifier is not None else ServiceNotifier(None)
        self._tasks = TaskSet("the daemon")
        """A second stop request's stop of the running jobs."""
        self._signals = 0
        self._stop_requested = asyncio.Event()
        self._last_revision: str | None = None

    def request_stop(self) -> None:
        self._signals += 1
        self._stop_requested.set()
        if self._signals == 1:
            logger.info("Shutting down: no new runs; waiting for running jobs to finish")
            self.notifier.stopping("Stopping: waiting for the running jobs to finish")
            self.scheduler.stop()
        else:
            logger.warning("Second stop request: stopping running jobs")
            self._tasks.start(self.scheduler.cancel_running(), name="cancel-running")

    def request_reload(self) -> None:
        """SIGHUP: ask the source to look now."""
        trigger = Trigger("sighup", requested_at=datetime.now(UTC))
        request_reload(self.source, self.triggers, trigger)

    async def reconcile(self, snapshot: Snapshot, trigger: Trigger | None = None) -> bool:
        """Try ``snapshot`` (credited to ``trigger``; by default to what the waiting
        requests say, :meth:`Triggers.take`); whether it runs now."""
        if trigger is None:
            trigger = self.triggers.take(snapshot.revision)
        return await self._attempt(snapshot, trigger) in ("applied", "unchanged")

    async def _attempt(self, snapshot: Snapshot, trigger: Trigger) -> str:
        """Reconcile ``snapshot`` and tell the source; the outcome (see RevisionRecord)."""
        record = await self.applier.reconcile(
            snapshot, recheck=self.source.recheck, trigger=trigger
        )
        if record.outcome == "superseded":
            if trigger.requested_at is not None:
                self.triggers.note(trigger)  # the newer revision answers it
            return record.outcome  # the source yields the newer revision next
        self._last_revision = snapshot.revision
        if record.outcome == "rejected":
            self.source.rejected(snapshot)
            return record.outcome
        state = self.applier.applied_state
        self.source.applied(snapshot, source_reads(state) if state is not None else None)
        return record.outcome

    async def _reconcile_first(self, snapshots: AsyncIterator[Snapshot]) -> bool:
        """Apply the first revision (one read mid-write gives way to the next)."""
        while True:
            snapshot = await self._unless_stopped(anext(snapshots))
            outcome = await self._attempt(snapshot, START)
            if outcome != "superseded":
                break
        started = outcome != "rejected" or await self._start_from_last_applied(snapshot)
        if started:
            self.notifier.ready(self.status_line())
        return started

    async def _follow(self, snapshots: AsyncIterator[Snapshot]) -> None:
        async for snapshot in snapshots:
            if snapshot.revision == self._last_revision:
                continue  # a restarted follower starts with the current revision again
            self.notifier.reloading()
            try:
                await self.reconcile(snapshot)
            except Exception:  # never stop following the source
                logger.exception(
                    "Reconciling revision %s failed; please report this", snapshot.revision
                )
            finally:
                self.notifier.ready(self.status_line())

    def status_line(self) -> str:
        """What ``systemctl status`` shows: the running revision, and the newest one when
        it was rejected."""
        status = self.applier.status
        applied, failed = status.applied, status.last_failed
        line = (
            f"Running revision {applied.revision} from {applied.source}"
            if applied is not None
            else "No revision applied"
        )
        if failed is not None and (applied is None or failed.time >= applied.time):
            errors = len(failed.errors)
            first = f": {failed.errors[0]}" if failed.errors else ""
            line += (
                f"; revision {failed.revision} rejected "
                f"({errors} error{'s' if errors != 1 else ''}){first}"
            )
        return redact(line)

    async def _start_from_last_applied(self, rejected: Snapshot) -> bool:
        """After a bad push, a restart runs the last good revision rather than nothing."""
        fallback = await self.source.last_applied()
        if fallback is None or fallback.revision == rejected.revision:
            return False
        logger.warning(
            "%s's current revision %s was rejected; starting from the last applied one, %s",
            self.source.description,
            rejected.revision,
            fallback.revision,
        )
        return await self.reconcile(fallback, START)

    async def _supervise(self, snapshots: AsyncIterator[Snapshot]) -> None:
        """Follow the source for as long as the daemon runs, restarting the follower."""
        loop = asyncio.get_running_loop()
        delay = FOLLOW_RESTART_FIRST
        follower: AsyncIterator[Snapshot] | None = snapshots
        while True:
            began = loop.time()
            try:
                if follower is None:
                    follower = aiter(self.source.watch())
                await self._follow(follower)
            except Exception as exc:
                error: Exception | None = exc
            else:
                error = None
            follower = None
            if loop.time() - began >= FOLLOW_RESTART_MAX:
                delay = FOLLOW_RESTART_FIRST
            logger.error(
                "Following %s stopped unexpectedly (%s); still running revision %s; "
                "restarting in %.0f s",
                self.source.description,
                f"{type(error).__name__}: {error}" if error is not None else "its watch ended",
                self._last_revision,
                delay,
                exc_info=error,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, FOLLOW_RESTART_MAX)
            logger.info("Following %s again", self.source.description)

    async def _unless_stopped(self, awaitable: Awaitable[_T]) -> _T:
        """``awaitable``'s result; raises :class:`_StopRequested` (cancelling it) on a stop."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
            await asyncio.gather(task, stop, return_exceptions=True)  # both end here
        if task.cancelled() and self._stop_requested.is_set():
            raise _StopRequested
        return task.result()

    async def run(self) -> int:
        """Run until stopped; the process exit code."""
        exec_shim.warn_if_missing(exec_shim.shim_path())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        # from this loop, so a loop that stalls stops the pings (and systemd restarts it)
        watchdog = loop.create_task(self.notifier.watchdog(), name="systemd-watchdog")
        self.notifier.status(
            f"Starting: fetching the first revision from {redact(self.source.description)}"
        )
        try:
            return await self._run()
        finally:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
            self.notifier.close()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)

    async def _run(self) -> int:
        try:
            await self._unless_stopped(self.source.start())
        except SourceError as exc:
            reason = str(exc).removeprefix(f"{self.source.description}: ")  # not said twice
            logger.error("Cannot start from %s: %s", self.source.description, redact(reason))
            await asyncio.to_thread(self.mirror.close)
            return 1
        except _StopRequested:
            pass  # closed below
        async with contextlib.AsyncExitStack() as stopping:
            stopping.push_async_callback(asyncio.to_thread, self.mirror.close)
            for what, close in reversed(self.closing):
                stopping.push_async_callback(self._close, what, close)
            stopping.push_async_callback(self._tasks.wait)
            try:
                if not self._stop_requested.is_set() and not await self._follow_and_run():
                    return 1
            except _StopRequested:
                pass
        logger.info("Stopped")
        return 0

    async def _follow_and_run(self) -> bool:
        """Apply the first revision, then run the jobs while following the source; False
        when there is no revision to start from."""
        snapshots = aiter(self.source.watch())
        if not await self._reconcile_first(snapshots):
            return False
        async with asyncio.TaskGroup() as tasks:
            follower = tasks.create_task(self._supervise(snapshots), name="follower")
            try:
                await self.scheduler.run()
            finally:
                follower.cancel()
        return True

    async def _close(self, what: str, close: Callable[[], Awaitable[None]]) -> None:
        try:
            await close()
        except Exception:
            logger.exception("Closing the %s failed", what)
