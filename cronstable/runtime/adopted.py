"""A run that outlived the daemon that started it, watched by the next one.

After a kill -9 of the daemon its job processes live on (each in its own
process group), re-parented to init.  Durable state recorded each run's pid,
boot id and start time; a restarted daemon that finds the same pid alive with
the same start time in the same boot adopts it as an :class:`AdoptedRun`:
it counts as running for concurrencyPolicy and is watched (a pidfd, readable
when it exits; a 1 s poll where there is none) until it ends.  Its exit status
is lost with its parent, so it ends with outcome ``unknown``.  Its captured
output pipes were the dead daemon's: its next write to them gets SIGPIPE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from datetime import UTC, datetime

from cronstable.platform import pidfd_open, process_start_ticks
from cronstable.ports import RunResult

logger = logging.getLogger(__name__)

POLL = 1.0
"""Seconds between two looks at a process without a pidfd."""


def same_process(pid: int, start_ticks: int | None) -> bool:
    """Whether ``pid`` is alive and is the process that started at ``start_ticks``."""
    if start_ticks is None:
        return False
    return process_start_ticks(pid) == start_ticks


class AdoptedRun:
    """A :class:`~cronstable.ports.Run` of a process this daemon did not start."""

    def __init__(
        self,
        name: str,
        pid: int,
        start_ticks: int,
        *,
        scheduled_time: datetime,
        attempt: int,
        started_at: datetime,
        kill_timeout: float,
    ) -> None:
        self.name = name
        self._pid = pid
        self.start_ticks = start_ticks
        self.scheduled_time = scheduled_time
        self.attempt = attempt
        self.started_at = started_at
        self.kill_timeout = kill_timeout
        self._cancelled = False
        self._exited = asyncio.Event()
        self._began = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self._pid

    async def start(self) -> None:
        return None  # it runs already

    def alive(self) -> bool:
        return same_process(self._pid, self.start_ticks)

    async def _watch(self) -> None:
        fd = pidfd_open(self._pid)
        if fd is not None and self.alive():  # the pidfd is of the right process
            loop = asyncio.get_running_loop()
            loop.add_reader(fd, self._exited.set)
            try:
                await self._exited.wait()
            finally:
                loop.remove_reader(fd)
                os.close(fd)
            return
        if fd is not None:
            os.close(fd)
        while self.alive():  # no pidfd (an old kernel): look every POLL seconds
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exited.wait(), timeout=POLL)
        self._exited.set()

    async def wait(self) -> RunResult:
        await self._watch()
        return RunResult(
            job_name=self.name,
            scheduled_time=self.scheduled_time,
            attempt=self.attempt,
            started_at=self.started_at,
            finished_at=datetime.now(UTC),
            duration=(datetime.now(UTC) - self.started_at).total_seconds(),
            returncode=None,
            stdout=None,
            stderr=None,
            stdout_discarded=0,
            stderr_discarded=0,
            fail_reason=None,
            timed_out=False,
            cancelled=self._cancelled,
            pid=self._pid,
        )

    def _signal(self, sig: signal.Signals) -> None:
        if not self.alive():  # gone, or its pid reused: never signal a stranger
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._pid, sig)  # the job was a session leader: pgid == pid

    async def cancel(self) -> None:
        """SIGTERM to the run's process group, SIGKILL after killTimeout."""
        self._cancelled = True
        try:
            self._signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exited.wait(), timeout=self.kill_timeout)
            if not self._exited.is_set():
                self._signal(signal.SIGKILL)
        except PermissionError as exc:
            logger.warning(
                "job %s: cannot signal adopted process group %d: %s", self.name, self._pid, exc
            )
