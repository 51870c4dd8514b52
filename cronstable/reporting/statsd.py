"""statsd metrics of every run of a job with a ``statsd`` key, over UDP.

Per run, two datagrams, byte-identical to yacron 0.19's (then ours appended):

* at start: ``{prefix}.start:1|g``, then, for a job with ``pool``,
  ``{prefix}.pool_wait:<ms>|ms`` (how long the run waited for its pool's slot)
* at stop, one datagram: ``{prefix}.stop:1|g``, ``{prefix}.success:0|1|g``,
  ``{prefix}.duration:<ms>|ms|@0.1``, then ``{prefix}.cpu:<ms>|ms`` and
  ``{prefix}.max_rss:<bytes>|g`` when the run's resource use is known
  (every run whose process was started and reaped).

Each line ends with a newline.  Every target (host, port) has one UDP endpoint,
shared by the jobs sending there and rebuilt every :data:`ENDPOINT_LIFETIME`
seconds (so a changed DNS answer is followed) and after an error (an ICMP port
unreachable, a failed resolution).  Sends to one target go out in order; at
most :data:`MAX_PENDING` wait per target, further ones are dropped and counted.
Nothing here raises into the caller: statsd is telemetry, and a target that is
down is logged (at most once per :data:`WARN_EVERY` seconds per target).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cronstable.config.desired import Job
from cronstable.config.models import Statsd
from cronstable.ports import FlowRunView, RunOutcome, RunResult, RunStart

logger = logging.getLogger(__name__)

ENDPOINT_LIFETIME = 60.0
"""Seconds an endpoint is used before it is rebuilt (and its host resolved again)."""
CONNECT_TIMEOUT = 5.0
"""Seconds to resolve a target's host and open its endpoint."""
MAX_PENDING = 1000
"""Datagrams that may wait for one target; more are dropped."""
WARN_EVERY = 60.0
"""Seconds between two warnings about the same target."""


def start_datagram(prefix: str, pool_wait: float | None = None) -> bytes:
    text = f"{prefix}.start:1|g\n"
    if pool_wait is not None:
        text += f"{prefix}.pool_wait:{int(round(pool_wait * 1000))}|ms\n"
    return text.encode()


def stop_datagram(prefix: str, result: RunResult) -> bytes:
    """The stop metrics of ``result`` (yacron's three lines, then cpu and max_rss)."""
    duration = int(round(result.duration * 1000))
    text = (
        f"{prefix}.stop:1|g\n"
        f"{prefix}.success:{0 if result.failed else 1}|g\n"
        f"{prefix}.duration:{duration}|ms|@0.1\n"
    )
    if result.cpu_seconds is not None:
        text += f"{prefix}.cpu:{int(round(result.cpu_seconds * 1000))}|ms\n"
    if result.max_rss is not None:
        text += f"{prefix}.max_rss:{result.max_rss}|g\n"
    return text.encode()


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, target: _Target) -> None:
        self.target = target

    def error_received(self, exc: Exception) -> None:
        self.target.failed(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.target.failed(exc)


@dataclass(eq=False)
class _Target:
    """One (host, port): its endpoint, its queue of datagrams and its sender task."""

    host: str
    port: int
    clock: Callable[[], float]
    transport: asyncio.DatagramTransport | None = None
    built_at: float = 0.0
    endpoints: int = 0
    """Endpoints built so far (each rebuild adds one)."""
    dropped: int = 0
    queue: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(MAX_PENDING))
    task: asyncio.Task[None] | None = None
    _warned_at: float | None = None

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"

    def put(self, datagram: bytes) -> None:
        try:
            self.queue.put_nowait(datagram)
        except asyncio.QueueFull:
            self.dropped += 1
            self.warn(f"{MAX_PENDING} datagrams waiting; {self.dropped} dropped so far")
            return
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._send_all(), name=f"statsd {self.name}")

    def failed(self, exc: BaseException) -> None:
        """The endpoint had an error: the next datagram goes through a new one."""
        self.warn(f"{type(exc).__name__}: {exc}")
        self.drop_endpoint()

    def drop_endpoint(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def warn(self, what: str) -> None:
        now = self.clock()
        level = logging.DEBUG
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            level = logging.WARNING
        logger.log(level, "statsd %s: %s (metrics are dropped meanwhile)", self.name, what)

    async def _send_all(self) -> None:
        while not self.queue.empty():
            datagram = self.queue.get_nowait()
            try:
                transport = await self._endpoint()
                transport.sendto(datagram)
            except (OSError, TimeoutError) as exc:
                self.failed(exc)
            except Exception as exc:  # never into the scheduler
                logger.exception("statsd %s: sending failed", self.name)
                self.failed(exc)

    async def _endpoint(self) -> asyncio.DatagramTransport:
        now = self.clock()
        if self.transport is not None and now - self.built_at >= ENDPOINT_LIFETIME:
            self.drop_endpoint()
        if self.transport is None or self.transport.is_closing():
            loop = asyncio.get_running_loop()
            transport, _ = await asyncio.wait_for(
                loop.create_datagram_endpoint(
                    lambda: _Protocol(self), remote_addr=(self.host, self.port)
                ),
                CONNECT_TIMEOUT,
            )
            self.transport = transport
            self.built_at = now
            self.endpoints += 1
        return self.transport


class StatsdListener:
    """A :class:`~cronstable.ports.RunListener` sending each run's metrics.

    ``job`` finds a job of the applied revision by name; the ``statsd`` settings
    a run started with are the ones its stop is sent with.
    """

    def __init__(
        self, job: Callable[[str], Job | None], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._job = job
        self._clock = clock
        self._targets: dict[tuple[str, int], _Target] = {}
        self._running: dict[str, Statsd] = {}

    def target(self, host: str, port: int) -> _Target | None:
        return self._targets.get((host, port))

    def run_started(self, run: RunStart) -> None:
        try:
            job = self._job(run.job)
            config = job.config.statsd if job is not None else None
            if config is None:
                return
            self._running[run.id] = config
            self._send(config, start_datagram(config.prefix, run.pool_wait))
        except Exception:
            logger.exception("statsd: job %s: the start metric failed", run.job)

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        try:
            config = self._running.pop(run.id, None)
            if config is not None:
                self._send(config, stop_datagram(config.prefix, result))
        except Exception:
            logger.exception("statsd: job %s: the stop metrics failed", run.job)

    # a workflow's runs, with the workflow's own statsd settings (its tasks send theirs as
    # jobs do): start at its start, stop, success and duration at its end

    def flow_started(self, run: FlowRunView) -> None:
        try:
            job = self._job(run.workflow)
            config = job.config.statsd if job is not None else None
            if config is None or run.id in self._running:
                return
            self._running[run.id] = config
            self._send(config, start_datagram(config.prefix))
        except Exception:
            logger.exception("statsd: workflow %s: the start metric failed", run.workflow)

    def flow_changed(self, run: FlowRunView) -> None:
        return None

    def flow_finished(self, run: FlowRunView) -> None:
        try:
            config = self._running.pop(run.id, None)
            if config is None:
                return
            duration = int(round((run.duration or 0.0) * 1000))
            text = (
                f"{config.prefix}.stop:1|g\n"
                f"{config.prefix}.success:{1 if run.outcome == 'succeeded' else 0}|g\n"
                f"{config.prefix}.duration:{duration}|ms|@0.1\n"
            )
            self._send(config, text.encode())
        except Exception:
            logger.exception("statsd: workflow %s: the stop metrics failed", run.workflow)

    def _send(self, config: Statsd, datagram: bytes) -> None:
        key = (config.host, config.port)
        target = self._targets.get(key)
        if target is None:
            target = self._targets[key] = _Target(config.host, config.port, self._clock)
        target.put(datagram)

    async def close(self) -> None:
        """Send what is queued (waiting at most :data:`CONNECT_TIMEOUT` s), then close."""
        tasks = [t.task for t in self._targets.values() if t.task is not None and not t.task.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CONNECT_TIMEOUT)
            for task in pending:
                task.cancel()
        for target in self._targets.values():
            target.drop_endpoint()
        self._targets.clear()
