"""The daemon's end of the runs' channels: a socket and a token for each run it starts.

:class:`RunChannels` (a :class:`~cronstable.ports.RunChannel`) is asked by the
process layer for each run just before it spawns it, and gives a
:class:`RunSocket` (a :class:`~cronstable.ports.RunGrant`):

* **Where.** A directory of the run's own, named by 24 random hex digits, mode
  ``0700``, in the daemon's directory of runs (``runs`` in its runtime directory,
  :func:`cronstable.platform.run_channel_dir`; ``0711`` as root, so the user of a
  job that runs as another user can reach its own run's directory and nothing
  else, ``0700`` otherwise), holding the socket ``sock``, mode ``0600``.  For a job
  with ``user``/``group`` both are given to that user.  The job's environment gets
  ``CRONSTABLE_RUN_SOCKET`` (the socket's path) and ``CRONSTABLE_RUN_TOKEN``.
* **Who.** A request must carry the run's token (compared in constant time); a
  token of another run is refused on this socket (``unauthorized``), and every
  socket serves one run only.
* **How long.** Until the run ended (its process exited and its output closed, or
  it could not start): :meth:`RunSocket.revoke` refuses the token from then on,
  tells a lock holder its lock is gone and releases it, closes every connection
  and removes the socket and its directory.  Tokens are never written anywhere: a
  run adopted after a restart (it outlived the daemon that started it) keeps the
  socket path and token its first daemon gave it, whose socket no longer answers,
  so its clients fail (exit 3) and a ``cronstable lock`` in it stops its command.
* **Bounds.** One request per connection (a lock's connection then stays open as
  the hold), at most :data:`~.protocol.MAX_REQUEST` bytes, read within
  :data:`~.protocol.REQUEST_TIMEOUT` seconds; an answer must be taken within
  :data:`~.protocol.WRITE_TIMEOUT`; at most :data:`~.protocol.MAX_CONNECTIONS`
  connections per run.
* **Leftovers.** The first run's channel sweeps the directory of runs: a run's
  directory whose socket no one listens on any more (a daemon killed with
  SIGKILL left it) is removed.  Several daemons may share the directory.

If the directory of runs cannot be made (or its path is too long for a unix
socket), the daemon says so once at WARNING and runs go without a channel;
nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import logging
import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable import xcom
from cronstable.channel import protocol
from cronstable.channel.locks import Hold, LockBusy, Locks, LockTimeout
from cronstable.config.desired import Job
from cronstable.platform import UNIX_PATH_MAX, fallback_runtime_dir, private_dir
from cronstable.ports import (
    WORKFLOW_RUN_ENV,
    FinishedRun,
    JobState,
    RunOwner,
    RunStart,
    utc_text,
)
from cronstable.redact import redact
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

NAME_BYTES = 12
"""Random bytes of a run's directory name (24 hex digits)."""
SOCKET_NAME = "sock"
STALE_AGE = 60.0
"""Seconds a run's directory must have existed before a sweep may take it for a leftover."""
LOST_CHECK = 1.0
"""Seconds between two looks at whether a held cluster lock was lost."""

XCOM_DIR = "xcom"
"""A task's run's directory of values, beside its socket (``$CRONSTABLE_XCOM_DIR``)."""
MAX_VALUE_FILES = 1000
"""Most entries an xcom directory may hold when its run ends."""

States = Callable[[str], JobState | None]
"""What ``state.get`` reads: a job's state by name (None: no such job)."""


class Xcoms(Protocol):
    """Where the values of workflow runs are kept (the daemon's control)."""

    def xcom_push(
        self, workflow: str, run: str, task: str, values: Mapping[str, str]
    ) -> str | None:
        """Keep ``values`` (by key) that ``task`` of workflow run ``run`` leaves; why not."""
        ...

    def xcom_pull(self, workflow: str, run: str, task: str, key: str) -> str | None:
        """The value ``task`` of workflow run ``run`` left under ``key``; None for none."""
        ...


class RunChannels:
    """The runs' channels (see the module docstring), in ``directory`` (None: runs get
    none).  ``states`` answers ``state get``; ``locks`` are the named locks."""

    def __init__(
        self,
        directory: str | None,
        *,
        states: States,
        locks: Locks,
        xcoms: Xcoms | None = None,
    ) -> None:
        self.directory = directory
        self.states = states
        self.locks = locks
        self.xcoms = xcoms
        self._ready: bool | None = None
        """Whether the directory of runs is usable (None: not tried yet)."""
        self._grants: set[RunSocket] = set()
        self._tasks = TaskSet("Run channels")
        self._closing = False
        self.opened = 0
        """Channels opened since the daemon started."""
        self.refused = 0
        """Requests refused for a token that is not the run's."""

    @property
    def live(self) -> int:
        """Channels open now (one per run going)."""
        return len(self._grants)

    def _prepare(self) -> bool:
        if self._ready is not None:
            return self._ready
        directory = self.directory
        self._ready = False
        if directory is None:
            return False
        longest = len(os.fsencode(directory)) + 2 + 2 * NAME_BYTES + len(SOCKET_NAME) + 1
        if longest > UNIX_PATH_MAX:
            logger.warning(
                "Runs get no channel (cronstable state get, lock): the socket paths in %s "
                "would be longer than a unix socket allows (%d bytes); give --runtime-dir "
                "a shorter directory",
                directory,
                UNIX_PATH_MAX,
            )
            return False
        try:
            if os.path.dirname(directory) == fallback_runtime_dir():
                private_dir(fallback_runtime_dir(), 0o700)
            private_dir(directory, 0o711 if os.geteuid() == 0 else 0o700)
        except OSError as exc:
            logger.warning(
                "Runs get no channel (cronstable state get, lock): cannot use %s: %s",
                directory,
                exc.strerror or exc,
            )
            return False
        self._ready = True
        self._tasks.start(asyncio.to_thread(_sweep, directory), name="run-channels-sweep")
        return True

    async def open(self, run: str, job: Job, owner: RunOwner | None) -> RunSocket | None:
        if self._closing or not self._prepare():
            return None
        assert self.directory is not None
        place = os.path.join(self.directory, secrets.token_hex(NAME_BYTES))
        path = os.path.join(place, SOCKET_NAME)
        listener: socket.socket | None = None
        flow_run = job.environment.get(WORKFLOW_RUN_ENV) if job.workflow is not None else None
        try:
            os.mkdir(place, 0o700)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            os.chmod(path, 0o600)  # in a directory only this daemon can enter yet
            values = os.path.join(place, XCOM_DIR) if flow_run is not None else None
            if values is not None:
                os.mkdir(values, 0o700)
            if owner is not None and owner.uid != os.geteuid():
                for made in (path, values, place):
                    if made is not None:
                        os.chown(made, owner.uid, owner.gid)
            listener.listen(16)
            listener.setblocking(False)
            grant = RunSocket(self, run, job.name, place, path, secrets.token_urlsafe(32))
            if flow_run is not None:
                grant.task = (str(job.workflow), flow_run, str(job.task))
                grant.owner_uid = owner.uid if owner is not None else os.geteuid()
            grant.server = await asyncio.start_unix_server(
                grant.serve, sock=listener, limit=protocol.MAX_REQUEST
            )
        except OSError as exc:
            if listener is not None:
                listener.close()
            _remove(place, path)
            logger.warning(
                "Job %s: run %s gets no channel (cronstable state get, lock): %s",
                job.name,
                run,
                exc.strerror or exc,
                extra={"job": job.name, "run_id": run},
            )
            return None
        self._grants.add(grant)
        self.opened += 1
        return grant

    def collector(self) -> Collector:
        """The channels' and the locks' metrics, for the daemon's registry."""
        return _ChannelCollector(self)

    def serving(self, connection: asyncio.Task[Any]) -> None:
        self._tasks.add(connection)

    def ended(self, grant: RunSocket) -> None:
        self._grants.discard(grant)

    async def close(self) -> None:
        """Revoke what is left (every run has ended by now) and wait for the connections."""
        self._closing = True
        for grant in list(self._grants):
            grant.revoke()
        await self._tasks.wait(within=protocol.WRITE_TIMEOUT)
        if self._ready and self.directory is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self.directory)  # when no other daemon's runs are in it


class RunSocket:
    """One run's socket and token (a :class:`~cronstable.ports.RunGrant`)."""

    def __init__(
        self, owner: RunChannels, run: str, job: str, place: str, path: str, token: str
    ) -> None:
        self.owner = owner
        self.run = run
        self.job = job
        self.place = place
        self.path = path
        self.token = token
        self.server: asyncio.Server | None = None
        self.task: tuple[str, str, str] | None = None
        """(workflow, workflow run id, task) of a workflow's task; None for a job's run."""
        self.owner_uid = os.geteuid()
        """Who the run's files are of (the values in its xcom directory must be)."""
        self.revoked = False
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._connections: dict[asyncio.StreamWriter, Hold | None] = {}

    @property
    def environment(self) -> Mapping[str, str]:
        env = {protocol.SOCKET_ENV: self.path, protocol.TOKEN_ENV: self.token}
        if self.task is not None:
            env[xcom.DIR_ENV] = os.path.join(self.place, XCOM_DIR)
        return env

    async def finish(self) -> str | None:
        """The run's process ended: keep the values a task's run wrote into its xcom
        directory, then :meth:`revoke`.  Why the run fails when they are refused (None:
        nothing to say)."""
        problem: str | None = None
        task, xcoms, directory = self.task, self.owner.xcoms, self.owner.directory
        if task is not None and xcoms is not None and directory is not None and not self.revoked:
            name = os.path.basename(self.place)
            try:
                values = await asyncio.to_thread(_read_values, directory, name, self.owner_uid)
            except ValueError as exc:
                problem = f"xcom: {exc}"
            else:
                refusal = xcoms.xcom_push(*task, values) if values else None
                if refusal is not None:
                    problem = f"xcom: {refusal}"
            if problem is not None:
                logger.warning(
                    "Job %s: run %s fails: %s",
                    self.job,
                    self.run,
                    problem,
                    extra={"job": self.job, "run_id": self.run},
                )
        self.revoke()
        return problem

    def revoke(self) -> None:
        if self.revoked:
            return
        self.revoked = True
        self._ended.set_result(None)
        if self.server is not None:
            self.server.close()
        for writer, hold in list(self._connections.items()):
            if hold is not None and not hold.released:
                with contextlib.suppress(Exception):
                    writer.write(protocol.encode({"event": "lost", "reason": "the run ended"}))
                self._let_go(hold, "the run ended")
            writer.close()
        _remove(self.place, self.path)
        self.owner.ended(self)

    # ------------------------------------------------------------ a connection

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.owner.serving(task)
        if self.revoked:
            writer.close()
            return
        if len(self._connections) >= protocol.MAX_CONNECTIONS:
            await self._answer(
                writer,
                protocol.refusal(
                    protocol.BUSY,
                    f"run {self.run} has {protocol.MAX_CONNECTIONS} connections open already",
                ),
            )
            writer.close()
            return
        self._connections[writer] = None
        try:
            request = await self._request(reader, writer)
            if request is not None:
                await self._dispatch(request, reader, writer)
        except (ConnectionError, TimeoutError):
            pass  # the client went away, or stopped reading
        finally:
            hold = self._connections.pop(writer, None)
            if hold is not None:
                self._let_go(hold, "released")
            writer.close()

    async def _request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> dict[str, Any] | None:
        """The request line, checked; None once a refusal was answered (or no line came)."""
        try:
            line = await asyncio.wait_for(reader.readline(), protocol.REQUEST_TIMEOUT)
        except TimeoutError:
            await self._refuse(
                writer, protocol.BAD_REQUEST, f"no request within {protocol.REQUEST_TIMEOUT:g} s"
            )
            return None
        except ValueError:  # the line overran the reader's limit
            await self._refuse(
                writer,
                protocol.BAD_REQUEST,
                f"a request is at most {protocol.MAX_REQUEST} bytes",
            )
            return None
        if not line.endswith(b"\n"):
            return None  # closed before a whole line: nothing to answer
        try:
            request = protocol.decode(line)
        except ValueError as exc:
            await self._refuse(writer, protocol.BAD_REQUEST, str(exc))
            return None
        if request.get("v") != protocol.VERSION:
            await self._refuse(
                writer,
                protocol.BAD_REQUEST,
                f"protocol version {request.get('v')!r} is not {protocol.VERSION}",
            )
            return None
        token = request.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(
            token.encode("utf-8", "replace"), self.token.encode()
        ):
            self.owner.refused += 1
            logger.warning(
                "Job %s: run %s's channel refused a request with a token that is not the run's",
                self.job,
                self.run,
                extra={"job": self.job, "run_id": self.run},
            )
            await self._refuse(
                writer, protocol.UNAUTHORIZED, "the token is not this run's (or the run ended)"
            )
            return None
        if self.revoked:
            await self._refuse(writer, protocol.ENDED, f"run {self.run} ended")
            return None
        return request

    async def _dispatch(
        self,
        request: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        op = request.get("op")
        if op == "state.get":
            await self._state_get(request, writer)
        elif op == "lock":
            await self._lock(request, reader, writer)
        elif op in ("xcom.push", "xcom.pull"):
            await self._xcom(op, request, writer)
        else:
            await self._refuse(writer, protocol.BAD_REQUEST, f"no operation {op!r}")

    async def _state_get(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        job = request.get("job")
        if job is None:
            job = self.job
        if not isinstance(job, str) or not 0 < len(job) <= 200:
            await self._refuse(writer, protocol.BAD_REQUEST, "job must be a job's name")
            return
        view = self.owner.states(job)
        if view is None:
            await self._refuse(
                writer, protocol.NOT_FOUND, f"no job {job!r} in the applied revision"
            )
            return
        await self._answer(writer, {"ok": True, "state": state_json(view)})

    async def _xcom(self, op: str, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        task, xcoms = self.task, self.owner.xcoms
        if task is None or xcoms is None:
            await self._refuse(
                writer, protocol.BAD_REQUEST, f"run {self.run} is no task of a workflow"
            )
            return
        workflow, flow_run, name = task
        key = request.get("key")
        problem = xcom.key_problem(key)
        if problem is not None:
            await self._refuse(writer, protocol.BAD_REQUEST, problem)
            return
        assert isinstance(key, str)
        if op == "xcom.push":
            value = request.get("value")
            problem = xcom.value_problem(value)
            if problem is not None:
                await self._refuse(writer, protocol.BAD_REQUEST, problem)
                return
            assert isinstance(value, str)
            refusal = xcoms.xcom_push(workflow, flow_run, name, {key: value})
            if refusal is not None:
                await self._refuse(writer, protocol.REFUSED, refusal)
                return
            await self._answer(writer, {"ok": True})
            return
        source = request.get("task")
        if isinstance(source, str) and source.startswith(f"{workflow}."):
            source = source[len(workflow) + 1 :]
        if not isinstance(source, str) or not source:
            await self._refuse(writer, protocol.BAD_REQUEST, "task must be a task's name")
            return
        found = xcoms.xcom_pull(workflow, flow_run, source, key)
        if found is None:
            await self._refuse(
                writer,
                protocol.NOT_FOUND,
                f"task {source!r} of workflow run {flow_run} left no value {key!r}",
            )
            return
        await self._answer(writer, {"ok": True, "value": found})

    async def _lock(
        self,
        request: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        name = request.get("name")
        wait = request.get("wait")
        if not isinstance(name, str) or protocol.LOCK_NAME.fullmatch(name) is None:
            await self._refuse(
                writer,
                protocol.BAD_REQUEST,
                "a lock's name is 1-128 letters, digits and . _ : @ + / -, starting with a "
                "letter or digit",
            )
            return
        if wait is not None and (
            isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 1e9
        ):
            await self._refuse(writer, protocol.BAD_REQUEST, "wait must be seconds (0 or more)")
            return
        began = time.monotonic()
        taking = asyncio.ensure_future(self.owner.locks.acquire(name, self.run, wait))
        gone = asyncio.ensure_future(reader.read(1))
        try:
            watched: set[asyncio.Future[Any]] = {taking, gone, self._ended}
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if not taking.done():
                taking.cancel()
                await asyncio.gather(taking, return_exceptions=True)
                if self._ended.done():
                    await self._refuse(writer, protocol.ENDED, f"run {self.run} ended")
                return  # the client left while it waited
            try:
                hold = taking.result()
            except LockTimeout as exc:
                await self._refuse(writer, protocol.TIMEOUT, str(exc))
                return
            except LockBusy as exc:
                await self._refuse(writer, protocol.BUSY, str(exc))
                return
            if self.revoked or gone.done():
                hold.release()
                return
            self._connections[writer] = hold
            waited = time.monotonic() - began
            logger.info(
                "Job %s: run %s holds lock %s (%s), after %.1f s",
                self.job,
                self.run,
                name,
                "in the cluster" if hold.scope == "cluster" else "on this node",
                waited,
                extra={"job": self.job, "run_id": self.run, "lock": name},
            )
            await self._answer(
                writer, {"ok": True, "held": True, "name": name, "scope": hold.scope}
            )
            await self._keep(hold, gone, writer)
        finally:
            gone.cancel()

    async def _keep(
        self, hold: Hold, gone: asyncio.Future[bytes], writer: asyncio.StreamWriter
    ) -> None:
        """Hold until the client lets go (or leaves), the run ends or the hold is lost."""
        watched: set[asyncio.Future[Any]] = {gone, self._ended}
        while True:
            await asyncio.wait(
                watched,
                timeout=LOST_CHECK if hold.scope == "cluster" else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if gone.done() or self._ended.done():
                return  # released in serve(), or by revoke()
            reason = hold.lost()
            if reason is not None:
                logger.warning(
                    "Job %s: run %s lost lock %s: %s",
                    self.job,
                    self.run,
                    hold.name,
                    reason,
                    extra={"job": self.job, "run_id": self.run, "lock": hold.name},
                )
                await self._answer(writer, {"event": "lost", "reason": reason})
                return

    def _let_go(self, hold: Hold, why: str) -> None:
        if hold.released:
            return
        held = time.monotonic() - hold.since
        hold.release()
        logger.info(
            "Job %s: run %s let go of lock %s (%s) after %.1f s",
            self.job,
            self.run,
            hold.name,
            why,
            held,
            extra={"job": self.job, "run_id": self.run, "lock": hold.name},
        )

    async def _refuse(self, writer: asyncio.StreamWriter, code: str, error: str) -> None:
        await self._answer(writer, protocol.refusal(code, redact(error)))

    async def _answer(self, writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        writer.write(protocol.encode(message))
        await asyncio.wait_for(writer.drain(), protocol.WRITE_TIMEOUT)


class _ChannelCollector(Collector):
    def __init__(self, channels: RunChannels) -> None:
        self.channels = channels

    def collect(self) -> Iterator[Metric]:
        channels, locks = self.channels, self.channels.locks
        yield GaugeMetricFamily(
            "cronstable_run_channels_open",
            "Runs' channels open now (one per run going, when the runs get one).",
            value=channels.live,
        )
        yield CounterMetricFamily(
            "cronstable_run_channel_refused_tokens",
            "Requests a run's channel refused because their token was not the run's.",
            value=channels.refused,
        )
        yield GaugeMetricFamily(
            "cronstable_locks_held",
            "Named locks (cronstable lock) held on this node now.",
            value=locks.held(),
        )
        yield GaugeMetricFamily(
            "cronstable_locks_waiting",
            "Takers of named locks waiting on this node now.",
            value=locks.waiting(),
        )
        yield CounterMetricFamily(
            "cronstable_lock_wait_timeouts",
            "Takers of named locks whose --wait ran out.",
            value=locks.timeouts,
        )


# ------------------------------------------------------------ the answer's JSON


def state_json(view: JobState) -> dict[str, Any]:
    """``state get``'s answer: camelCase keys, times as ``utc_text``."""
    retry = view.pending_retry
    return {
        "job": view.job,
        "lastRun": _finished(view.last_run),
        "lastSuccess": _finished(view.last_success),
        "pendingRetry": None
        if retry is None
        else {
            "attempt": retry.attempt,
            "due": utc_text(retry.due) if retry.due is not None else None,
            "scheduledTime": utc_text(retry.scheduled_time),
        },
        "running": [_started(run) for run in view.running],
    }


def _started(run: RunStart) -> dict[str, Any]:
    return {
        "id": run.id,
        "scheduledTime": utc_text(run.scheduled_time),
        "attempt": run.attempt,
        "startedAt": utc_text(run.started_at),
        "pid": run.pid,
        "manual": run.manual,
    }


def _finished(run: FinishedRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return _started(run.start) | {
        "finishedAt": utc_text(run.finished_at),
        "duration": round(run.duration, 6),
        "outcome": run.outcome,
        "exitCode": run.exit_code,
        "failReason": run.fail_reason,
    }


# ------------------------------------------------------------ the directory of runs


def _remove(place: str, path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(place)
        return
    # a task's values are left in it (or the job made files there): all of it goes, and
    # no link the job made is followed (rmtree works by descriptors where the OS lets it)
    if os.path.islink(place):
        with contextlib.suppress(OSError):
            os.unlink(place)
        return
    shutil.rmtree(place, ignore_errors=True)


def _read_values(directory: str, name: str, uid: int) -> dict[str, str]:
    """The values a task's run wrote into its xcom directory ``directory/name/xcom``, one
    file a key (names starting with ``.`` skipped); ValueError saying why they are
    refused.  No link is followed, and only regular files of ``uid`` (the job's user) are
    read, so a job cannot make the daemon read a file it may not.  Blocking."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY
    runs = os.open(directory, flags)
    try:
        place = os.open(name, flags, dir_fd=runs)
        try:
            try:
                values_dir = os.open(XCOM_DIR, flags, dir_fd=place)
            except OSError as exc:
                raise ValueError(f"$CRONSTABLE_XCOM_DIR cannot be read: {exc.strerror}") from None
        finally:
            os.close(place)
    finally:
        os.close(runs)
    try:
        entries = sorted(os.listdir(values_dir))
        if len(entries) > MAX_VALUE_FILES:
            raise ValueError(f"$CRONSTABLE_XCOM_DIR holds more than {MAX_VALUE_FILES} entries")
        values: dict[str, str] = {}
        for entry in entries:
            if entry.startswith("."):
                continue
            problem = xcom.key_problem(entry)
            if problem is not None:
                raise ValueError(f"file {entry!r}: {problem}")
            values[entry] = _read_value(values_dir, entry, uid)
        return values
    finally:
        os.close(values_dir)


def _read_value(values_dir: int, entry: str, uid: int) -> str:
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=values_dir)
    except OSError as exc:
        raise ValueError(f"file {entry!r} cannot be read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid not in (uid, os.geteuid()):
            raise ValueError(f"{entry!r} is not a regular file of the job's user")
        if info.st_size > xcom.MAX_VALUE:
            raise ValueError(f"file {entry!r}: a value is at most {xcom.MAX_VALUE} bytes")
        data = os.read(fd, xcom.MAX_VALUE + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"file {entry!r}: a value is UTF-8 text") from None
    problem = xcom.value_problem(text)
    if problem is not None:
        raise ValueError(f"file {entry!r}: {problem}")
    return text


def _sweep(directory: str) -> int:
    """Remove the runs' directories in ``directory`` whose socket no one listens on (left
    by a daemon that was killed); how many.  Blocking: run it in a thread."""
    removed = 0
    now = time.time()
    try:
        entries = os.listdir(directory)
    except OSError:
        return 0
    for entry in entries:
        if len(entry) != 2 * NAME_BYTES or not all(c in "0123456789abcdef" for c in entry):
            continue
        place = os.path.join(directory, entry)
        path = os.path.join(place, SOCKET_NAME)
        try:
            info = os.lstat(place)
            if not stat.S_ISDIR(info.st_mode) or now - info.st_mtime < STALE_AGE:
                continue
        except OSError:
            continue
        if _listening(path):
            continue
        _remove(place, path)
        removed += 1
    if removed:
        logger.info("Run channels: removed %d left by a daemon that is gone", removed)
    return removed


def _listening(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(path)
    except OSError as exc:
        return exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK)
    finally:
        probe.close()
    return True
