"""A job's child process: spawned here, and reaped here with ``os.wait4``.

asyncio's own child watchers reap with ``waitpid`` and throw the child's
resource use away, so runs are not spawned through ``loop.subprocess_exec``:
the child is started with :class:`subprocess.Popen`, its captured pipes are
attached to the loop, and it is reaped by ``os.wait4(pid, WNOHANG)`` once its
pidfd (Linux 5.3+) turns readable, or by a blocking ``os.wait4`` in a thread
of its own where there is no pidfd.

The rusage of a reaped child covers it and every descendant it reaped in turn
(a shell's commands): :attr:`Usage.cpu_seconds` is their user + system CPU
time; :attr:`Usage.max_rss` is the resident set of the largest single one of
them, in bytes (the kernel keeps a maximum, not a sum).  Descendants that were
never reaped by the job (daemonised helpers) are not counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cronstable.platform import maxrss_bytes, pidfd_open

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Usage:
    """What a reaped child used (it and the descendants it reaped)."""

    cpu_seconds: float
    """User plus system CPU time."""
    max_rss: int
    """Bytes: the largest resident set among the child and its reaped descendants."""


class Child:
    """A spawned child: its pid, its captured pipes, its exit (:attr:`exited`) and usage.

    Created by :func:`spawn`.  :attr:`exited` resolves once the child is reaped;
    :attr:`returncode` is then its exit code, or minus the signal that killed it.
    """

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._popen = popen  # kept: a collected Popen would reap the child behind our back
        self.pid = popen.pid
        self.returncode: int | None = None
        self.usage: Usage | None = None
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes: dict[int, asyncio.ReadTransport] = {}
        self._loop = loop
        self._pidfd = pidfd_open(self.pid)
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self._poll)
        else:
            threading.Thread(
                target=self._wait_blocking, name=f"cronstable-reap-{self.pid}", daemon=True
            ).start()

    def close(self) -> None:
        """Close the captured pipes; the child is still reaped when it exits."""
        for pipe in self.pipes.values():
            if not pipe.is_closing():
                pipe.close()

    # ---------------------------------------------------------------- reaping

    def _poll(self) -> None:
        try:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: the exit status is lost
            pid, status, rusage = self.pid, None, None
        if pid == 0:
            return  # not a zombie yet (cannot happen once the pidfd is readable)
        self._stop_polling()
        self._reaped(status, rusage)

    def _stop_polling(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _wait_blocking(self) -> None:
        try:
            _, status, rusage = os.wait4(self.pid, 0)
        except ChildProcessError:
            status, rusage = None, None
        try:
            self._loop.call_soon_threadsafe(self._reaped, status, rusage)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _reaped(self, status: int | None, rusage: Any) -> None:
        if status is None:
            logger.warning("pid %d was reaped by someone else; its exit status is lost", self.pid)
        else:
            self.returncode = os.waitstatus_to_exitcode(status)
            self.usage = Usage(
                cpu_seconds=rusage.ru_utime + rusage.ru_stime,
                max_rss=maxrss_bytes(rusage.ru_maxrss),
            )
        self._popen.returncode = self.returncode if self.returncode is not None else -1
        if not self.exited.done():
            self.exited.set_result(None)


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    capture: Sequence[int],
    reader_limit: int,
    stdin: bytes | None = None,
    **popen_kwargs: Any,
) -> tuple[Child, dict[int, asyncio.StreamReader]]:
    """Start ``argv`` in a session of its own; readers of ``capture``.

    ``stdin`` is written to the child's standard input, which is then closed (EOF);
    without it the child reads /dev/null.

    ``capture`` names the descriptors (1, 2) to pipe; the others are inherited.
    Raises what :class:`subprocess.Popen` raises when the command cannot start.
    """
    loop = asyncio.get_running_loop()
    # as loop.subprocess_exec does: the fork/exec itself is quick, and a failed exec
    # is reported by Popen on the spot (its error pipe)
    popen = subprocess.Popen(  # noqa: ASYNC220
        list(argv),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE if 1 in capture else None,
        stderr=subprocess.PIPE if 2 in capture else None,
        env=dict(env),
        start_new_session=True,
        bufsize=0,
        **popen_kwargs,
    )
    child = Child(popen, loop)
    if stdin is not None and popen.stdin is not None:
        # buffered by the transport and flushed before the pipe closes; a child that
        # exits without reading it breaks the pipe, which asyncio only logs in debug mode
        writer, _ = await loop.connect_write_pipe(asyncio.Protocol, popen.stdin)
        writer.write(stdin)
        writer.close()
    readers: dict[int, asyncio.StreamReader] = {}
    for fd, pipe in ((1, popen.stdout), (2, popen.stderr)):
        if pipe is None:
            continue
        reader = asyncio.StreamReader(limit=reader_limit, loop=loop)
        transport, _ = await loop.connect_read_pipe(
            lambda r=reader: asyncio.StreamReaderProtocol(r, loop=loop),  # type: ignore[misc]
            pipe,
        )
        child.pipes[fd] = transport
        readers[fd] = reader
    return child, readers
