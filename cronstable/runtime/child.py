"""A job's child process: spawned here, and reaped here with ``os.wait4``.

asyncio's own child watchers reap with ``waitpid`` and throw the child's
resource use away, so runs are not spawned through ``loop.subprocess_exec``:
the child is started with :func:`os.posix_spawn` (the exec shim) or
:class:`subprocess.Popen` (a command spawned directly), its captured pipes are
attached to the loop, and it is reaped by ``os.wait4(pid, WNOHANG)`` once its
pidfd (Linux 5.3+) turns readable, or by a blocking ``os.wait4`` in a thread
of its own where there is no pidfd.

The child the daemon spawns is the exec shim (:mod:`cronstable.runtime.exec_shim`)
where it is built: the shim starts the job's command in a session of its own
and reports, on a pipe, the command's pid (:attr:`Child.pid`, the process group
the run is signalled through) and, once it ended, its peak resident size.  The
daemon reaps the shim, which exits as the command did.  Without the shim the
command itself is spawned and reaped.

The rusage of a reaped child covers it and every descendant it reaped in turn
(a shell's commands): :attr:`Usage.cpu_seconds` is their user + system CPU
time; :attr:`Usage.max_rss` is the resident set of the largest single one of
them, in bytes (the kernel keeps a maximum, not a sum).  Descendants that were
never reaped by the job (daemonised helpers) are not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from cronstable.platform import jobs_open_files_limit, maxrss_bytes, pidfd_open
from cronstable.runtime import exec_shim
from cronstable.runtime.identity import Identity

logger = logging.getLogger(__name__)

SHIM_EXIT_GRACE = 5.0
"""Seconds a spawn that failed waits for the exec shim to be reaped (it exits at once)."""


@dataclass(frozen=True, slots=True)
class Usage:
    """What a reaped child used (it and the descendants it reaped)."""

    cpu_seconds: float
    """User plus system CPU time."""
    max_rss: int | None
    """Bytes: the largest resident set among the command and its reaped descendants;
    None when the exec shim was killed before it could tell."""


class ShimReport:
    """The read end of the exec shim's report pipe (non-blocking, attached to the loop).

    :attr:`first` resolves with the shim's first line (``started``/``failed``), or
    None if the pipe ends without one; :meth:`ended` reads the rest once the shim is
    reaped, and closes the pipe.
    """

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self._fd: int | None = fd
        self._loop = loop
        self._buffer = b""
        self._eof = False
        self.first: asyncio.Future[bytes | None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)
        self._watching = True

    def _readable(self) -> None:
        self._drain()
        self._settle_first()

    def _drain(self) -> None:
        while self._fd is not None and not self._eof:
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._eof = True
            self._buffer += data

    def _settle_first(self) -> None:
        if self.first.done():
            return
        line, newline, rest = self._buffer.partition(b"\n")
        if newline:
            self._buffer = rest
            self.first.set_result(line)
        elif self._eof:
            self.first.set_result(None)
        else:
            return
        self._unwatch()

    def _unwatch(self) -> None:
        if self._watching and self._fd is not None:
            self._loop.remove_reader(self._fd)
            self._watching = False

    def ended(self) -> int | None:
        """``ru_maxrss`` of the command from the shim's last line (written before it
        exited), or None without one; the pipe is closed."""
        self._drain()
        self._settle_first()
        lines = self._buffer.split(b"\n")
        self.close()
        return exec_shim.parse_ended(lines)

    def close(self) -> None:
        self._unwatch()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self.first.done():
            self.first.set_result(None)


class Process(Protocol):
    """What :class:`Child` keeps of a started process: a :class:`subprocess.Popen`, or
    the :class:`Spawned` the exec shim is started as."""

    pid: int
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None
    returncode: Any


class Spawned:
    """The exec shim started with :func:`os.posix_spawn`: its pid and the daemon's ends
    of its pipes (unbuffered, as Popen's with ``bufsize=0``)."""

    __slots__ = ("pid", "stdin", "stdout", "stderr", "returncode")

    def __init__(
        self, pid: int, stdin: IO[bytes] | None, stdout: IO[bytes] | None, stderr: IO[bytes] | None
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: Any = None


class Child:
    """A spawned child: its pid, its captured pipes, its exit (:attr:`exited`) and usage.

    Created by :func:`spawn`.  :attr:`pid` is the command's (a session leader: its
    process group is the run's); with the exec shim the reaped process is the shim,
    its parent.  :attr:`exited` resolves once it is reaped; :attr:`returncode` is then
    the command's exit code, or minus the signal that killed it.
    """

    def __init__(
        self,
        popen: Process,
        loop: asyncio.AbstractEventLoop,
        report: ShimReport | None = None,
    ) -> None:
        self._popen = popen  # kept: a collected Popen would reap the child behind our back
        self.pid = popen.pid
        """The command's pid: the shim's until its ``started`` line gives the command's."""
        self.start_ticks: int | None = None
        """When the command started (``/proc/PID/stat`` field 22), as the shim read it;
        None when spawned without the shim, or from a shim that could not read it."""
        self.reaped_pid = popen.pid
        self._report = report
        self.returncode: int | None = None
        self.usage: Usage | None = None
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes: dict[int, asyncio.ReadTransport] = {}
        self._loop = loop
        self._pidfd = pidfd_open(self.reaped_pid)
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self._poll)
        else:
            threading.Thread(
                target=self._wait_blocking, name=f"cronstable-reap-{self.reaped_pid}", daemon=True
            ).start()

    def close(self) -> None:
        """Close the captured pipes; the child is still reaped when it exits (and the
        shim's report pipe closed then)."""
        for pipe in self.pipes.values():
            if not pipe.is_closing():
                pipe.close()

    async def command_started(self, argv0: str) -> None:
        """Wait (without blocking the loop) for the shim's first line: the command's pid
        becomes :attr:`pid`, or the error Popen would have raised is raised.  Cancelled
        meanwhile, the command is killed as soon as its pid is known."""
        report = self._report
        assert report is not None
        try:
            line = await asyncio.shield(report.first)
        except asyncio.CancelledError:
            report.first.add_done_callback(_kill_started)
            self.close_popen_pipes()
            raise
        answer = None if line is None else exec_shim.parse_first(line)
        if isinstance(answer, exec_shim.Started):
            self.pid = answer.pid
            self.start_ticks = answer.start_ticks
            return
        self.close_popen_pipes()
        # the shim exits right after its line: reaped (and its pipe closed) before the
        # error is raised, as Popen has reaped a child whose exec failed
        await asyncio.wait([self.exited], timeout=SHIM_EXIT_GRACE)
        if isinstance(answer, exec_shim.Failed):
            raise answer.error(argv0)
        raise subprocess.SubprocessError(
            f"the exec shim (pid {self.reaped_pid}) ended without starting the command"
            if line is None
            else f"the exec shim (pid {self.reaped_pid}) said {line[:80]!r}"
        )

    def close_popen_pipes(self) -> None:
        """Close the Popen's own pipe ends (a child that never started)."""
        for pipe in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            if pipe is not None:
                pipe.close()

    # ---------------------------------------------------------------- reaping

    def _poll(self) -> None:
        try:
            pid, status, rusage = os.wait4(self.reaped_pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: the exit status is lost
            pid, status, rusage = self.reaped_pid, None, None
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
            _, status, rusage = os.wait4(self.reaped_pid, 0)
        except ChildProcessError:
            status, rusage = None, None
        try:
            self._loop.call_soon_threadsafe(self._reaped, status, rusage)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _reaped(self, status: int | None, rusage: Any) -> None:
        # with the shim, the command's own peak; the shim's figure is the daemon's
        own_maxrss = rusage.ru_maxrss if rusage is not None else None
        if self._report is not None:
            own_maxrss = self._report.ended()
        if status is None:
            logger.warning(
                "pid %d was reaped by someone else; its exit status is lost", self.reaped_pid
            )
        else:
            self.returncode = os.waitstatus_to_exitcode(status)
            self.usage = Usage(
                cpu_seconds=rusage.ru_utime + rusage.ru_stime,
                max_rss=None if own_maxrss is None else maxrss_bytes(own_maxrss),
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
    identity: Identity | None = None,
    direct: bool = False,
    shim: str | None = None,
    protocols: Mapping[int, Callable[[], asyncio.Protocol]] | None = None,
) -> tuple[Child, dict[int, asyncio.StreamReader]]:
    """Start ``argv`` in a session of its own; readers of ``capture``.

    ``stdin`` is written to the child's standard input, which is then closed (EOF);
    without it the child reads /dev/null.  ``identity``: the user and groups the
    command runs as (None: the daemon's).

    ``capture`` names the descriptors (1, 2) to pipe; the others are inherited.  A
    captured descriptor with a factory in ``protocols`` is read by that protocol; the
    others by a :class:`asyncio.StreamReader` of ``reader_limit``, returned by descriptor.
    The command is started through the exec shim where it is built (``shim``: another
    build of it), unless ``direct``.  Raises what :class:`subprocess.Popen` raises when the command
    cannot start, with the same errno and message whichever way it was spawned.
    """
    loop = asyncio.get_running_loop()
    if direct:
        shim = None
    elif shim is None:
        shim = exec_shim.shim_path()
    if shim is None:
        popen: Process = _popen(list(argv), env, capture, stdin, identity, new_session=True)
        child = Child(popen, loop)
    else:
        read_end, write_end = _pipe()  # the shim takes no report descriptor below 3
        try:
            shim_argv = [
                shim,
                str(write_end),
                exec_shim.identity_argument(
                    None if identity is None else _identity_tuple(identity)
                ),
                exec_shim.nofile_argument(jobs_open_files_limit()),
                *argv,
            ]
            if POSIX_SPAWN:
                popen = _posix_spawn(shim_argv, env, capture, stdin, write_end)
            else:
                popen = _popen(
                    shim_argv, env, capture, stdin, None, new_session=False, pass_fds=(write_end,)
                )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        child = Child(popen, loop, ShimReport(read_end, loop))
        await child.command_started(argv[0])
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
        factory = None if protocols is None else protocols.get(fd)
        if factory is not None:
            child.pipes[fd], _ = await loop.connect_read_pipe(factory, pipe)
            continue
        reader = asyncio.StreamReader(limit=reader_limit, loop=loop)
        transport, _ = await loop.connect_read_pipe(
            lambda r=reader: asyncio.StreamReaderProtocol(r, loop=loop),  # type: ignore[misc]
            pipe,
        )
        child.pipes[fd] = transport
        readers[fd] = reader
    return child, readers


def _identity_tuple(identity: Identity) -> tuple[int, int, Sequence[int]]:
    return identity.uid, identity.gid, identity.extra_groups


def _popen(
    argv: list[str],
    env: Mapping[str, str],
    capture: Sequence[int],
    stdin: bytes | None,
    identity: Identity | None,
    *,
    new_session: bool,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """The spawn itself.  As loop.subprocess_exec does: the fork/exec is quick, and a
    failed exec is reported by Popen on the spot (its error pipe).  Straight from the
    daemon the command is a session leader; through the shim, the command is (the
    shim starts it so), and the shim stays in the daemon's group, out of reach of the
    signals the run's group gets, so that it can report on the command's end."""
    ids: dict[str, Any] = {}
    if identity is not None:
        ids = {
            "user": identity.uid,
            "group": identity.gid,
            "extra_groups": list(identity.extra_groups),
        }
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE if 1 in capture else None,
        stderr=subprocess.PIPE if 2 in capture else None,
        env=dict(env),
        start_new_session=new_session,
        pass_fds=pass_fds,
        bufsize=0,
        **ids,
    )


POSIX_SPAWN = hasattr(os, "posix_spawn") and hasattr(os, "POSIX_SPAWN_DUP2")
"""Whether the exec shim is started with :func:`os.posix_spawn` (else Popen)."""
_RESET_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)
"""What Python ignores and Popen's ``restore_signals`` gives back to a child."""


def _pipe() -> tuple[int, int]:
    """A pipe whose ends are above 2: in a daemon started with 0, 1 or 2 closed, a pipe
    may get those numbers, and the child's dup2 onto its 0, 1 and 2 (or the shim's
    report descriptor, which must be above 2) would then overwrite one with another."""
    read_end, write_end = os.pipe()
    return _above_std(read_end), _above_std(write_end)


def _above_std(fd: int) -> int:
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def _posix_spawn(
    argv: list[str],
    env: Mapping[str, str],
    capture: Sequence[int],
    stdin: bytes | None,
    report_fd: int,
) -> Spawned:
    """The exec shim, started as :func:`_popen` starts it, for a fraction of its cost.

    Popen's Python half (its error pipe, the environment encoded key by key, close_fds)
    was a fifth of the daemon's CPU in a burst of starts; posix_spawn (a vfork and an
    exec in the C library) does the rest.  What close_fds did, the shim does: it closes
    every descriptor but 0-2 and ``report_fd``, which is made inheritable here (the
    daemon's own descriptors are close-on-exec).  The shim stays in the daemon's
    session and process group, as with Popen.  Raises what Popen raises when the
    shim cannot be executed (an :class:`OSError` with its errno).
    """
    kept: list[int] = []  # the daemon's ends, handed to the Spawned
    given: list[int] = []  # the child's ends, closed here once it is started
    try:
        if stdin is None:
            child_stdin = _above_std(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            given.append(child_stdin)
            parent_stdin = None
        else:
            child_stdin, parent_stdin = _pipe()
            given.append(child_stdin)
            kept.append(parent_stdin)
        actions: list[tuple[int, int, int]] = [(os.POSIX_SPAWN_DUP2, child_stdin, 0)]
        parents: dict[int, int] = {}
        for fd in (1, 2):
            if fd in capture:
                parent_end, child_end = _pipe()
                kept.append(parent_end)
                given.append(child_end)
                parents[fd] = parent_end
                actions.append((os.POSIX_SPAWN_DUP2, child_end, fd))
        os.set_inheritable(report_fd, True)
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsigdef=_RESET_SIGNALS)
    except BaseException:
        for fd in kept:
            os.close(fd)
        raise
    finally:
        for fd in given:
            os.close(fd)
    return Spawned(
        pid,
        None if parent_stdin is None else open(parent_stdin, "wb", buffering=0),
        open(parents[1], "rb", buffering=0) if 1 in parents else None,
        open(parents[2], "rb", buffering=0) if 2 in parents else None,
    )


def _kill_started(first: asyncio.Future[bytes | None]) -> None:
    line = first.result()
    answer = None if line is None else exec_shim.parse_first(line)
    if isinstance(answer, exec_shim.Started):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(answer.pid, signal.SIGKILL)
