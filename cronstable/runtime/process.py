"""One run of a job: spawn it, capture its output, enforce its timeout, stop it.

A job runs in a session (and process group) of its own, so stopping a run
signals everything the job started, not only the direct child (yacron bug #70):
SIGTERM to the group, ``killTimeout`` seconds for the child to exit, then SIGKILL
to the group, always, since descendants may survive the child and hold its pipes.

A run ends when its main process has exited and its captured pipes reached EOF,
or :data:`STREAM_GRACE` seconds after that exit, whichever comes first: a
descendant that keeps a pipe open (``setsid helper &``) cannot keep the run
going.  The pipes are then closed and a warning names the job and the pids
still holding them; those processes are left alone.

Nothing here raises because of the job: a command that cannot be spawned ends
as a :class:`RunResult` with return code 127.

Every run is monitored: the child is reaped with ``os.wait4``
(:mod:`cronstable.runtime.child`, through the exec shim where it is built) and
its CPU time and largest resident set land in the result.  A job's ``monitor``
limits are judged once it has exited: a run over one fails (``monitor: maxRss
exceeded``), and nothing is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from cronstable.config.desired import Job
from cronstable.config.models import RunSettings
from cronstable.platform import pipe_holders
from cronstable.ports import (
    SPAWN_FAILED_RETURNCODE,
    RunChannel,
    RunGrant,
    RunOwner,
    RunResult,
    run_id,
)
from cronstable.runtime.child import Child, Usage, spawn
from cronstable.runtime.identity import Identity
from cronstable.runtime.output import CHUNK_SIZE, OutputMirror, StreamCapture, StreamName

logger = logging.getLogger(__name__)

TIMEOUT_RETURNCODE = -100
"""Return code of a run stopped by ``executionTimeout`` (yacron's value)."""
REAP_GRACE = 5.0
"""Seconds to wait for the child to be reaped after SIGKILL."""
STREAM_GRACE = 5.0
"""Seconds captured pipes may stay open once the main process has exited (or its group
was killed) before they are closed and the run ends."""

Outcome = Literal["exit", "cancel", "timeout"]


def utc_now() -> datetime:
    """The current time, aware, in UTC (the default wall clock)."""
    return datetime.now(UTC)


def command_argv(config: RunSettings) -> list[str]:
    """What is executed: a list as is, a string as ``[shell, "-c", command]``."""
    if isinstance(config.command, str):
        return [config.shell, "-c", config.command]
    return list(config.command)


def job_environment(
    job: Job, scheduled_time: datetime, attempt: int, base: Mapping[str, str]
) -> dict[str, str]:
    """The base (daemon's) environment, then the job's, then the ``CRONSTABLE_*`` variables:
    the job's name, the time the run stands for (:func:`scheduled_text`), the attempt and
    the run's id (:func:`cronstable.ports.run_id`, as the API and the logs name it)."""
    env = dict(base)
    env.update(job.environment)
    env["CRONSTABLE_JOB_NAME"] = job.name
    env["CRONSTABLE_SCHEDULED_TIME"] = scheduled_text(job, scheduled_time)
    env["CRONSTABLE_ATTEMPT"] = str(attempt)
    env["CRONSTABLE_RUN_ID"] = run_id(job.name, as_utc(scheduled_time), attempt)
    return env


def scheduled_text(job: Job, scheduled_time: datetime) -> str:
    """The time a run stands for, ISO 8601 with the offset of the job's zone
    (``2026-03-08T03:00:00-04:00`` for a job in America/New_York): its fire (a catch-up's
    missed fire, a retry's failed fire, a backfill's fire in the range), or the start of a
    run started on request."""
    return as_utc(scheduled_time).astimezone(job.timezone).isoformat()


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _describe_returncode(returncode: int) -> str:
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"killed by signal {-returncode}"
    return f"killed by signal {-returncode} ({name})"


def fail_reason(
    config: RunSettings,
    returncode: int | None,
    stdout_produced: bool,
    stderr_produced: bool,
) -> str | None:
    """failsWhen, in order: always, nonzeroReturn, producesStdout, producesStderr.

    ``*_produced`` are false for a stream that was not captured.
    """
    when = config.fails_when
    if when.always:
        return "always"
    if when.nonzero_return and returncode != 0:
        shown = "unknown exit status" if returncode is None else _describe_returncode(returncode)
        return f"nonzeroReturn ({shown})"
    if when.produces_stdout and stdout_produced:
        return "producesStdout"
    if when.produces_stderr and stderr_produced:
        return "producesStderr"
    return None


def monitor_reason(config: RunSettings, usage: Usage | None) -> str | None:
    """The ``monitor`` limit ``usage`` went over (maxRss first), or None."""
    limits = config.monitor
    if limits is None or usage is None:
        return None
    if limits.max_rss is not None and usage.max_rss is not None and usage.max_rss > limits.max_rss:
        return "monitor: maxRss exceeded"
    if limits.max_cpu_seconds is not None and usage.cpu_seconds > limits.max_cpu_seconds:
        return "monitor: maxCpuSeconds exceeded"
    return None


class JobProcess:
    """One run of a job: :meth:`start` it, then :meth:`wait` for its :class:`RunResult`.

    ``identity`` comes from :func:`cronstable.runtime.identity.resolve_identity`;
    ``mirror`` receives captured lines (None: captured output is not mirrored);
    ``base_environment`` defaults to the daemon's ``os.environ``;
    ``stream_grace`` is how long captured pipes may outlive the main process
    (default :data:`STREAM_GRACE`);
    ``channel`` opens the run's channel to the daemon (:mod:`cronstable.channel`)
    just before the spawn, whose variables the job's environment gets, and which is
    revoked once the run ended (None: the run gets none).
    """

    def __init__(
        self,
        job: Job,
        *,
        scheduled_time: datetime,
        attempt: int,
        identity: Identity | None = None,
        base_environment: Mapping[str, str] | None = None,
        mirror: OutputMirror | None = None,
        wall_clock: Callable[[], datetime] = utc_now,
        stream_grace: float | None = None,
        channel: RunChannel | None = None,
    ) -> None:
        self.job = job
        self.scheduled_time = scheduled_time
        self.attempt = attempt
        self.identity = identity
        self._base_environment = base_environment
        self._mirror = mirror
        self._wall_clock = wall_clock
        self._stream_grace = stream_grace
        self._channel = channel
        self._grant: RunGrant | None = None
        self.pid: int | None = None
        self.start_ticks: int | None = None
        """When the command started (``/proc/PID/stat`` field 22) as the exec shim read
        it; None without the shim or /proc (the state keeper then reads it itself)."""
        self._started = False
        self._started_at: datetime | None = None
        self._started_mono = 0.0
        self._captures: dict[StreamName, StreamCapture] = {}
        self._capture_ends: list[asyncio.Future[None]] = []
        """Each captured stream's end (its pipe closed, the capture fed its end)."""
        self._run_task: asyncio.Task[RunResult] | None = None
        self._result: RunResult | None = None
        self._stop: asyncio.Future[None] | None = None
        """Resolved by :meth:`cancel` (made by :meth:`start`, which has a loop)."""

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def running(self) -> bool:
        """Started, and not finished yet (the process or its captured pipes are alive)."""
        return self._run_task is not None and not self._run_task.done()

    # ------------------------------------------------------------------ public

    async def start(self) -> None:
        """Spawn the process.  A spawn failure is logged and recorded, never raised."""
        if self._started:
            raise RuntimeError("JobProcess.start() called twice")
        self._started = True
        loop = asyncio.get_running_loop()
        self._stop = loop.create_future()
        config = self.job.config
        captures: dict[int, StreamCapture] = {}
        ends: dict[int, asyncio.Future[None]] = {}
        streams: tuple[tuple[int, StreamName, bool], ...] = (
            (1, "stdout", config.capture_stdout),
            (2, "stderr", config.capture_stderr),
        )
        for fd, stream, on in streams:
            if on:
                captures[fd] = self._captures[stream] = StreamCapture(
                    stream,
                    save_limit=config.save_limit,
                    max_line_length=config.max_line_length,
                    job_name=self.name,
                    mirror=self._mirror,
                    prefix=self._prefix(stream),
                )
                ends[fd] = loop.create_future()
        self._capture_ends = list(ends.values())
        self._started_at = self._wall_clock()
        self._started_mono = time.monotonic()
        if self._channel is not None:
            identity = self.identity
            self._grant = await self._channel.open(
                run_id(self.name, self.scheduled_time, self.attempt),
                self.job,
                None if identity is None else RunOwner(identity.uid, identity.gid),
            )
        try:
            env = job_environment(
                self.job,
                self.scheduled_time,
                self.attempt,
                os.environ if self._base_environment is None else self._base_environment,
            )
            if self._grant is not None:
                env.update(self._grant.environment)
            child, _ = await spawn(
                command_argv(config),
                env=env,
                capture=list(captures),
                reader_limit=CHUNK_SIZE,
                stdin=None if config.stdin is None else config.stdin.encode(),
                identity=self.identity,
                protocols={
                    fd: functools.partial(capture.protocol, ends[fd])
                    for fd, capture in captures.items()
                },
            )
        except (OSError, ValueError, UnicodeEncodeError, subprocess.SubprocessError) as exc:
            logger.error("job %s: could not start the command: %s", self.name, exc)
            self._captures.clear()  # nothing was captured: the result has no output
            self._capture_ends.clear()
            self._revoke()
            self._result = self._make_result(
                returncode=SPAWN_FAILED_RETURNCODE,
                outcome="exit",
                reason=f"spawn failed: {exc}",
            )
            return
        pid = child.pid
        self.pid = pid
        self.start_ticks = child.start_ticks
        logger.debug("job %s: started, pid %d, attempt %d", self.name, pid, self.attempt)
        if config.priority is not None:
            self._set_priority(pid, config.priority)
        self._run_task = asyncio.create_task(
            self._supervise(child), name=f"job {self.name} pid {pid}"
        )

    async def wait(self) -> RunResult:
        """Wait for the process to exit and its captured pipes to close; the run's result.

        The pipes get at most the stream grace after the exit: a descendant
        still holding them then is reported and left running, and the run ends.

        ``executionTimeout`` is enforced whether or not anyone waits.  Cancelling
        a waiter does not stop the run (use :meth:`cancel`).
        """
        if self._result is not None:
            return self._result
        if self._run_task is None:
            raise RuntimeError("JobProcess.wait() before start()")
        return await asyncio.shield(self._run_task)

    async def cancel(self) -> None:
        """Stop the run: SIGTERM to its process group, ``killTimeout`` for the child,
        then SIGKILL to the group.  Returns once the run has finished.

        Idempotent; does nothing when the run was never started or has finished.
        Called while :meth:`start` is still spawning, it marks the run to be stopped
        as soon as it is up, and returns at once.
        """
        if not self._started or self._result is not None:
            return
        if self._stop is not None and not self._stop.done():
            self._stop.set_result(None)
        if self._run_task is not None:
            await asyncio.shield(self._run_task)

    # --------------------------------------------------------------- internals

    async def _supervise(self, child: Child) -> RunResult:
        pid = child.pid
        exited = child.exited
        stop = self._stop
        assert stop is not None  # made by start()
        ends = self._capture_ends
        drained: asyncio.Future[Any] | None = None
        outcome: Outcome = "exit"
        orderly = False
        try:
            # 1. the main process exits (unless stopped or timed out first)
            ended = await self._until(exited, stop, None)
            if ended == "done" and ends:
                # 2. its pipes reach EOF, within the grace: a descendant that keeps
                # them open (a daemonised helper) must not keep the run going
                drained = ends[0] if len(ends) == 1 else asyncio.gather(*ends)
                ended = await self._until(drained, stop, self._grace())
                if ended == "grace":
                    await self._abandon_pipes(child, "its main process exited")
            if ended in ("cancel", "timeout"):
                outcome = "cancel" if ended == "cancel" else "timeout"
                if outcome == "cancel":
                    logger.info("job %s: stopping pid %d (cancelled)", self.name, pid)
                else:
                    logger.warning(
                        "job %s: execution timeout of %g s exceeded; stopping pid %d",
                        self.name,
                        self.job.config.execution_timeout,
                        pid,
                    )
                await self._terminate(child)
            orderly = True
        except asyncio.CancelledError:
            # Torn down without an orderly cancel(): leave no orphans behind.
            self._signal_group(child, signal.SIGKILL)
            raise
        finally:
            if drained is not None and len(ends) > 1 and not drained.done():
                drained.cancel()  # the gathering only: closing the pipes ends the streams
            child.close()
            if not orderly:
                self._revoke()  # the run ended: its channel's token is good no more
        exit_status = child.returncode
        returncode = TIMEOUT_RETURNCODE if outcome == "timeout" else exit_status
        if outcome == "timeout":
            reason: str | None = f"executionTimeout ({self.job.config.execution_timeout:g} s)"
        elif outcome == "cancel":
            reason = "cancelled"
        else:
            reason = fail_reason(
                self.job.config,
                exit_status,
                self._produced("stdout"),
                self._produced("stderr"),
            ) or self._over_limit(child.usage)
        left = await self._settle_grant(keep=outcome != "cancel")
        reason = reason or left
        self._result = self._make_result(
            returncode=returncode, outcome=outcome, reason=reason, usage=child.usage
        )
        logger.debug(
            "job %s: pid %d finished: return code %s, %.3f s, %s",
            self.name,
            pid,
            returncode,
            self._result.duration,
            reason or "success",
        )
        return self._result

    async def _until(
        self, target: asyncio.Future[Any], stop: asyncio.Future[None], grace: float | None
    ) -> Literal["done", "cancel", "timeout", "grace"]:
        """Wait for ``target``, a stop request, ``executionTimeout`` or ``grace`` seconds."""
        timeout = self.job.config.execution_timeout
        remaining = (
            None if timeout is None else max(0.0, self._started_mono + timeout - time.monotonic())
        )
        timeout_first = remaining is not None and (grace is None or remaining <= grace)
        limit = remaining if timeout_first else grace
        done, _ = await asyncio.wait(
            {target, stop}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
        )
        if target in done:
            return "done"
        if stop in done:
            return "cancel"
        return "timeout" if timeout_first else "grace"

    def _revoke(self) -> None:
        grant, self._grant = self._grant, None
        if grant is not None:
            grant.revoke()

    async def _settle_grant(self, *, keep: bool) -> str | None:
        """The run ended: its channel takes what it left (``keep``: a workflow task's
        values) and is revoked; why the run fails for what it left (None: nothing)."""
        grant, self._grant = self._grant, None
        if grant is None:
            return None
        if not keep:
            grant.revoke()
            return None
        return await grant.finish()

    def _grace(self) -> float:
        return STREAM_GRACE if self._stream_grace is None else self._stream_grace

    def _over_limit(self, usage: Usage | None) -> str | None:
        """The monitor limit this run went over, logged with the figures; nothing is killed."""
        reason = monitor_reason(self.job.config, usage)
        if reason is not None and usage is not None:
            logger.warning(
                "job %s: %s (cpu %.3f s, max rss %s bytes; limits %s)",
                self.name,
                reason,
                usage.cpu_seconds,
                usage.max_rss,
                self.job.config.monitor,
                extra={"job": self.name},
            )
        return reason

    async def _terminate(self, child: Child) -> None:
        pid = child.pid
        exited = child.exited
        self._signal_group(child, signal.SIGTERM)
        kill_timeout = self.job.config.kill_timeout
        if not exited.done() and kill_timeout > 0:
            await asyncio.wait([exited], timeout=kill_timeout)
        self._signal_group(child, signal.SIGKILL)
        if not exited.done():
            await asyncio.wait([exited], timeout=REAP_GRACE)
            if not exited.done():
                logger.error(
                    "job %s: pid %d still not reaped %g s after SIGKILL; giving up on it",
                    self.name,
                    pid,
                    REAP_GRACE,
                )
        pending = [end for end in self._capture_ends if not end.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=self._grace())
            if still:
                await self._abandon_pipes(child, "its process group was killed")

    async def _abandon_pipes(self, child: Child, why: str) -> None:
        """Close captured pipes still open after the grace; report who holds them.

        The holders are processes that left the job's process group (``setsid``)
        or outlived its main process: they are named, never signalled.
        """
        pending = [end for end in self._capture_ends if not end.done()]
        streams = [capture.stream_name for capture in self._captures.values() if not capture.ended]
        pipes = [pipe for pipe in child.pipes.values() if not pipe.is_closing()]
        inodes: set[int] = set()
        for pipe in pipes:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                inodes.add(os.fstat(pipe.get_extra_info("pipe").fileno()).st_ino)
        holders = await asyncio.to_thread(pipe_holders, inodes) if inodes else []
        logger.warning(
            "job %s: %s but its %s %s still open %g s later, held by %s; closing %s "
            "and leaving %s running",
            self.name,
            why,
            " and ".join(streams) or "output",
            "is" if len(streams) == 1 else "are",
            self._grace(),
            f"pid{'s' if len(holders) > 1 else ''} {', '.join(map(str, holders))}"
            if holders
            else "processes this daemon cannot see",
            "it" if len(streams) == 1 else "them",
            "it" if len(holders) == 1 else "them",
            extra={"job": self.name, "pids": holders},
        )
        for pipe in pipes:
            pipe.close()
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    def _signal_group(self, child: Child, sig: signal.Signals) -> None:
        """Signal the run's process group (pgid == pid: the job is a session leader)."""
        pgid = child.pid
        if child.exited.done():
            # The child is reaped and its pid free for reuse, except that a pgid stays
            # reserved while its group has a member: an empty group means nothing to signal.
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            except PermissionError as exc:
                logger.warning("job %s: cannot signal process group %d: %s", self.name, pgid, exc)
                return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            logger.debug("job %s: process group %d already gone", self.name, pgid)
        except PermissionError as exc:
            logger.warning(
                "job %s: cannot send %s to process group %d: %s", self.name, sig.name, pgid, exc
            )

    def _set_priority(self, pid: int, priority: int) -> None:
        try:
            os.setpriority(os.PRIO_PGRP, pid, priority)
        except OSError as exc:
            logger.warning("job %s: cannot set priority %d: %s", self.name, priority, exc)

    def _prefix(self, stream: StreamName) -> str:
        try:
            return self.job.config.stream_prefix.format(job_name=self.name, stream_name=stream)
        except (ValueError, KeyError, IndexError, AttributeError):
            return f"[{self.name} {stream}] "

    def _produced(self, stream: StreamName) -> bool:
        capture = self._captures.get(stream)
        return capture is not None and capture.produced

    def _make_result(
        self,
        *,
        returncode: int | None,
        outcome: Outcome,
        reason: str | None,
        usage: Usage | None = None,
    ) -> RunResult:
        assert self._started_at is not None
        out = self._captures.get("stdout")
        err = self._captures.get("stderr")
        config = self.job.config
        return RunResult(
            job_name=self.name,
            scheduled_time=self.scheduled_time,
            attempt=self.attempt,
            started_at=self._started_at,
            finished_at=self._wall_clock(),
            duration=time.monotonic() - self._started_mono,
            returncode=returncode,
            stdout=out.text() if out is not None else ("" if config.capture_stdout else None),
            stderr=err.text() if err is not None else ("" if config.capture_stderr else None),
            stdout_discarded=out.discarded if out is not None else 0,
            stderr_discarded=err.discarded if err is not None else 0,
            fail_reason=reason,
            timed_out=outcome == "timeout",
            cancelled=outcome == "cancel",
            pid=self.pid,
            cpu_seconds=usage.cpu_seconds if usage is not None else None,
            max_rss=usage.max_rss if usage is not None else None,
        )
