"""The daemon's end of the runs' channels: one socket for the node, a token for each run.

:class:`RunChannels` (a :class:`~cronstable.ports.RunChannel`) is asked by the
process layer for each run just before it spawns it, and gives a
:class:`RunSocket` (a :class:`~cronstable.ports.RunGrant`):

* **Where.** One socket for all the runs of this daemon, made at the first run:
  ``sock`` in a directory of the daemon's own, named by 24 random hex digits, in
  the daemon's directory of runs (``runs`` in its runtime directory,
  :func:`cronstable.platform.run_channel_dir`; ``0711`` as root, so that the user
  of a job that runs as another user can pass through it, ``0700`` otherwise).  As
  root the daemon's directory is ``0711`` and the socket ``0666``: any user may
  connect, and a request is answered only for the token of a run going *as the
  user who connects* (the peer's uid, ``SO_PEERCRED``, or root).  Otherwise both
  are the daemon's user's only (``0700``, ``0600``).  The job's environment gets
  ``CRONSTABLE_RUN_SOCKET`` (the socket's path) and ``CRONSTABLE_RUN_TOKEN``.
  One socket, not one a run: a socket and its directory are two new inodes, which
  cost a file system like ext4 up to a millisecond of kernel time each, at every
  run's start and again at its end.
* **Who.** A request must carry the token of a run going (tokens are looked up
  by their SHA-256, so the lookup tells nothing of a token's bytes); the token
  names the run, so a request is answered for that run only.  An unknown or ended
  token is refused (``unauthorized``), counted, and logged at WARNING (at most
  once every :data:`REFUSAL_LOG_EVERY` seconds, with the number refused meanwhile:
  any local user may knock as root).
* **How long.** Until the run ended (its process exited and its output closed, or
  it could not start): :meth:`RunSocket.revoke` refuses the token from then on,
  tells a lock holder its lock is gone and releases it, and closes every
  connection of the run.  Tokens are never written anywhere: a run adopted after a
  restart (it outlived the daemon that started it) keeps the socket path and token
  its first daemon gave it, whose socket no longer exists, so its clients fail
  (exit 3) and a ``cronstable lock`` in it stops its command.
* **A workflow's task** also gets a directory of its own for its values
  (``$CRONSTABLE_XCOM_DIR``, :data:`XCOM_DIR` in a directory named by 24 random hex
  digits in the daemon's, both ``0700`` and the job's user's), read and removed
  when its run ends.
* **Bounds.** One request per connection (a lock's connection then stays open as
  the hold), at most :data:`~.protocol.MAX_REQUEST` bytes, read within
  :data:`~.protocol.REQUEST_TIMEOUT` seconds; an answer must be taken within
  :data:`~.protocol.WRITE_TIMEOUT`; at most :data:`~.protocol.MAX_CONNECTIONS`
  connections per run, and :data:`MAX_NODE_CONNECTIONS` on the socket in all
  (one more is answered ``busy`` and closed).
* **Leftovers.** The first run's channel sweeps the directory of runs: a daemon's
  directory whose socket no one listens on any more (a daemon killed with SIGKILL
  left it) is removed.  Several daemons may share the directory of runs.

If the directory of runs or the socket cannot be made (or the socket's path is too
long for a unix socket), the daemon says so once at WARNING and runs go without a
channel; nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import math
import os
import secrets
import shutil
import socket
import stat
import struct
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
MAX_NODE_CONNECTIONS = 1024
"""Connections the node's socket has open at once, every run's together."""
MAX_TOKEN = 256
"""Longest token looked up (a run's is 43 characters)."""
REFUSAL_LOG_EVERY = 10.0
"""Seconds between two WARNINGs of refused tokens (the ones between are counted)."""
PEERCRED: int | None = getattr(socket, "SO_PEERCRED", None)
"""The socket option that tells a unix socket's peer (Linux); None elsewhere."""
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
        self.home: str | None = None
        """This daemon's directory in the directory of runs (None: not made yet)."""
        self.path: str | None = None
        """The socket every run's clients connect to (None: not made yet)."""
        self._ready: asyncio.Future[bool] | None = None
        """Whether the socket is up (resolved once, at the first run)."""
        self._server: asyncio.Server | None = None
        self._open_to_all = False
        """Whether any user may connect (as root, where the peer's uid can be read)."""
        self._grants: dict[bytes, RunSocket] = {}
        """The runs going, by the SHA-256 of their token."""
        self._connections: set[asyncio.StreamWriter] = set()
        """Every connection open on the socket (a run's or not yet anyone's)."""
        self._tasks = TaskSet("Run channels")
        self._closing = False
        self._refusals_unlogged = 0
        self._refusal_logged_at = -math.inf
        self.opened = 0
        """Channels opened since the daemon started."""
        self.refused = 0
        """Requests refused for a token that is no run's going."""

    @property
    def live(self) -> int:
        """Channels open now (one per run going)."""
        return len(self._grants)

    async def _prepare(self) -> bool:
        if self._ready is None:
            # the first run makes the socket; the runs that come meanwhile wait for it
            self._ready = ready = asyncio.get_running_loop().create_future()
            up = False
            try:
                up = await self._listen()
            finally:
                ready.set_result(up)
        return await asyncio.shield(self._ready)

    async def _listen(self) -> bool:
        """Make the directory of runs, this daemon's directory in it and its socket."""
        directory = self.directory
        if directory is None:
            return False
        longest = len(os.fsencode(directory)) + 2 + 2 * NAME_BYTES + len(SOCKET_NAME) + 1
        if longest > UNIX_PATH_MAX:
            logger.warning(
                "Runs get no channel (cronstable state get, lock): the socket path in %s "
                "would be longer than a unix socket allows (%d bytes); give --runtime-dir "
                "a shorter directory",
                directory,
                UNIX_PATH_MAX,
            )
            return False
        root = os.geteuid() == 0
        self._open_to_all = root and PEERCRED is not None
        home = os.path.join(directory, secrets.token_hex(NAME_BYTES))
        path = os.path.join(home, SOCKET_NAME)
        listener: socket.socket | None = None
        try:
            if os.path.dirname(directory) == fallback_runtime_dir():
                private_dir(fallback_runtime_dir(), 0o700)
            private_dir(directory, 0o711 if root else 0o700)
            os.mkdir(home, 0o700)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            # modes set once bound, in a directory only this daemon can enter yet
            os.chmod(path, 0o666 if self._open_to_all else 0o600)
            if root:
                os.chmod(home, 0o711)
            listener.listen(128)
            listener.setblocking(False)
            self._server = await asyncio.start_unix_server(
                self._serve, sock=listener, limit=protocol.MAX_REQUEST
            )
        except OSError as exc:
            if listener is not None:
                listener.close()
            _remove(home, path)
            logger.warning(
                "Runs get no channel (cronstable state get, lock): cannot use %s: %s",
                directory,
                exc.strerror or exc,
            )
            return False
        self.home, self.path = home, path
        self._tasks.start(asyncio.to_thread(_sweep, directory), name="run-channels-sweep")
        return True

    async def open(self, run: str, job: Job, owner: RunOwner | None) -> RunSocket | None:
        if self._closing or not await self._prepare():
            return None
        assert self.home is not None and self.path is not None
        flow_run = job.environment.get(WORKFLOW_RUN_ENV) if job.workflow is not None else None
        grant = RunSocket(self, run, job.name, self.path, secrets.token_urlsafe(32))
        grant.owner_uid = owner.uid if owner is not None else os.geteuid()
        if flow_run is not None:
            place = os.path.join(self.home, secrets.token_hex(NAME_BYTES))
            try:
                _make_values_dir(place, owner)
            except OSError as exc:
                _remove(place, None)
                logger.warning(
                    "Job %s: run %s gets no channel (cronstable xcom): %s",
                    job.name,
                    run,
                    exc.strerror or exc,
                    extra={"job": job.name, "run_id": run},
                )
                return None
            grant.place = place
            grant.task = (str(job.workflow), flow_run, str(job.task))
        self._grants[grant.digest] = grant
        self.opened += 1
        return grant

    def collector(self) -> Collector:
        """The channels' and the locks' metrics, for the daemon's registry."""
        return _ChannelCollector(self)

    def ended(self, grant: RunSocket) -> None:
        if self._grants.get(grant.digest) is grant:
            del self._grants[grant.digest]

    async def close(self) -> None:
        """Revoke what is left (every run has ended by now), close the socket and wait for
        the connections."""
        self._closing = True
        for grant in list(self._grants.values()):
            grant.revoke()
        if self._server is not None:
            self._server.close()  # no more connections; the open ones are closed here
        for writer in list(self._connections):
            writer.close()
        await self._tasks.wait(within=protocol.WRITE_TIMEOUT)
        if self.home is not None and self.path is not None:
            _remove(self.home, self.path)
        if self.directory is not None and self.home is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self.directory)  # when no other daemon's runs are in it

    # ------------------------------------------------------------ a connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        if self._closing:
            writer.close()
            return
        if len(self._connections) >= MAX_NODE_CONNECTIONS:
            with contextlib.suppress(ConnectionError, TimeoutError):
                await _answer(
                    writer,
                    protocol.refusal(
                        protocol.BUSY,
                        f"the socket has {MAX_NODE_CONNECTIONS} connections open already",
                    ),
                )
            writer.close()
            return
        self._connections.add(writer)
        try:
            found = await self._authenticated(reader, writer)
            if found is not None:
                grant, request = found
                await grant.serve(request, reader, writer)
        except (ConnectionError, TimeoutError):
            pass  # the client went away, or stopped reading
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _authenticated(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[RunSocket, dict[str, Any]] | None:
        """The run a request is for, and the request; None once a refusal was answered
        (or no line came)."""
        request = await _request(reader, writer)
        if request is None:
            return None
        token = request.get("token")
        grant = (
            self._grants.get(_digest(token))
            if isinstance(token, str) and 0 < len(token) <= MAX_TOKEN
            else None
        )
        if grant is not None and not grant.revoked and self._peer_may(writer, grant):
            return grant, request
        self._note_refusal(writer)
        await _refuse(writer, protocol.UNAUTHORIZED, "the token is no run's going (or not yours)")
        return None

    def _peer_may(self, writer: asyncio.StreamWriter, grant: RunSocket) -> bool:
        """Whether the process at the other end may use ``grant``: the run's user, the
        daemon's, or root.  Without ``_open_to_all`` only the daemon's user can connect."""
        if not self._open_to_all:
            return True
        uid = peer_uid(writer)
        return uid is not None and uid in (grant.owner_uid, 0, os.geteuid())

    def _note_refusal(self, writer: asyncio.StreamWriter) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at < REFUSAL_LOG_EVERY:
            self._refusals_unlogged += 1
            return
        uid = peer_uid(writer)
        logger.warning(
            "Run channels: refused a request whose token is no run's going%s%s",
            "" if uid is None else f" (from uid {uid})",
            f"; {self._refusals_unlogged} more refused in the last {REFUSAL_LOG_EVERY:g} s"
            if self._refusals_unlogged
            else "",
        )
        self._refusal_logged_at, self._refusals_unlogged = now, 0


class RunSocket:
    """One run's token on the node's socket (a :class:`~cronstable.ports.RunGrant`)."""

    def __init__(self, owner: RunChannels, run: str, job: str, path: str, token: str) -> None:
        self.owner = owner
        self.run = run
        self.job = job
        self.path = path
        self.token = token
        self.digest = _digest(token)
        self.place: str | None = None
        """A workflow task's directory of its own (its values in :data:`XCOM_DIR`)."""
        self.task: tuple[str, str, str] | None = None
        """(workflow, workflow run id, task) of a workflow's task; None for a job's run."""
        self.owner_uid = os.geteuid()
        """Who the run is of: the only user (root and the daemon's aside) whose processes
        the token serves, and whose files the values in its xcom directory must be."""
        self.revoked = False
        self._ended: asyncio.Future[None] | None = None
        self._connections: dict[asyncio.StreamWriter, Hold | None] = {}

    @property
    def environment(self) -> Mapping[str, str]:
        env = {protocol.SOCKET_ENV: self.path, protocol.TOKEN_ENV: self.token}
        if self.place is not None:
            env[xcom.DIR_ENV] = os.path.join(self.place, XCOM_DIR)
        return env

    @property
    def ended(self) -> asyncio.Future[None]:
        """Resolved when the run ended (made when first asked: most runs never are)."""
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
            if self.revoked:
                self._ended.set_result(None)
        return self._ended

    async def finish(self) -> str | None:
        """The run's process ended: keep the values a task's run wrote into its xcom
        directory, then :meth:`revoke`.  Why the run fails when they are refused (None:
        nothing to say)."""
        problem: str | None = None
        task, xcoms, home = self.task, self.owner.xcoms, self.owner.home
        place = self.place
        if (
            task is not None
            and xcoms is not None
            and home is not None
            and place is not None
            and not self.revoked
        ):
            try:
                values = await asyncio.to_thread(
                    _read_values, home, os.path.basename(place), self.owner_uid
                )
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
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
        for writer, hold in list(self._connections.items()):
            if hold is not None and not hold.released:
                with contextlib.suppress(Exception):
                    writer.write(protocol.encode({"event": "lost", "reason": "the run ended"}))
                self._let_go(hold, "the run ended")
            writer.close()
        if self.place is not None:
            _remove(self.place, None)
        self.owner.ended(self)

    # ------------------------------------------------------------ a connection

    async def serve(
        self, request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Answer ``request``, whose token is this run's (:class:`RunChannels` checked it);
        the connection stays this run's until it closes (a lock's hold)."""
        if len(self._connections) >= protocol.MAX_CONNECTIONS:
            await self._refuse(
                writer,
                protocol.BUSY,
                f"run {self.run} has {protocol.MAX_CONNECTIONS} connections open already",
            )
            return
        self._connections[writer] = None
        try:
            await self._dispatch(request, reader, writer)
        finally:
            hold = self._connections.pop(writer, None)
            if hold is not None:
                self._let_go(hold, "released")

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
            watched: set[asyncio.Future[Any]] = {taking, gone, self.ended}
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if not taking.done():
                taking.cancel()
                await asyncio.gather(taking, return_exceptions=True)
                if self.ended.done():
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
        watched: set[asyncio.Future[Any]] = {gone, self.ended}
        while True:
            await asyncio.wait(
                watched,
                timeout=LOST_CHECK if hold.scope == "cluster" else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if gone.done() or self.ended.done():
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
        await _refuse(writer, code, error)

    async def _answer(self, writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        await _answer(writer, message)


# ------------------------------------------------------------ the wire


async def _refuse(writer: asyncio.StreamWriter, code: str, error: str) -> None:
    await _answer(writer, protocol.refusal(code, redact(error)))


async def _answer(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(protocol.encode(message))
    await asyncio.wait_for(writer.drain(), protocol.WRITE_TIMEOUT)


async def _request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> dict[str, Any] | None:
    """The request line, checked but for its token; None once a refusal was answered (or
    no line came)."""
    try:
        line = await asyncio.wait_for(reader.readline(), protocol.REQUEST_TIMEOUT)
    except TimeoutError:
        await _refuse(
            writer, protocol.BAD_REQUEST, f"no request within {protocol.REQUEST_TIMEOUT:g} s"
        )
        return None
    except ValueError:  # the line overran the reader's limit
        await _refuse(
            writer, protocol.BAD_REQUEST, f"a request is at most {protocol.MAX_REQUEST} bytes"
        )
        return None
    if not line.endswith(b"\n"):
        return None  # closed before a whole line: nothing to answer
    try:
        request = protocol.decode(line)
    except ValueError as exc:
        await _refuse(writer, protocol.BAD_REQUEST, str(exc))
        return None
    if request.get("v") != protocol.VERSION:
        await _refuse(
            writer,
            protocol.BAD_REQUEST,
            f"protocol version {request.get('v')!r} is not {protocol.VERSION}",
        )
        return None
    return request


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The uid of the process at the other end of a unix socket (None: cannot tell)."""
    if PEERCRED is None:
        return None
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    try:
        _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, PEERCRED, 12))
    except (OSError, struct.error):
        return None
    return int(uid)


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
            "Requests the runs' socket refused: their token was no run's going "
            "(or another user's run's).",
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


def _make_values_dir(place: str, owner: RunOwner | None) -> None:
    """A workflow task's directory and its xcom directory in it, ``0700``, the job's user's."""
    values = os.path.join(place, XCOM_DIR)
    os.mkdir(place, 0o700)
    os.mkdir(values, 0o700)
    if owner is not None and owner.uid != os.geteuid():
        for made in (values, place):
            os.chown(made, owner.uid, owner.gid)


def _remove(place: str, path: str | None) -> None:
    if path is not None:
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
