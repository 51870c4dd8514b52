"""Accepting connections on a listening socket without starving the jobs of descriptors.

asyncio's own accept loop (``loop.create_server``) answers ``EMFILE`` by
logging a traceback through the loop's exception handler and retrying a second
later, and it keeps calling ``accept()`` for the rest of the backlog in the
same tick, scheduling one retry per failure: with a low ``ulimit -n`` and a
flood of connections that is tens of thousands of tracebacks a second, and every
descriptor the jobs need to spawn goes to idle HTTP clients.

:class:`Acceptor` is the accept loop instead (``loop.add_reader`` on the
listening socket, ``loop.connect_accepted_socket`` for each connection):

* before accepting it asks the process-wide :class:`DescriptorBudget` how many
  descriptors are free beyond the reserve kept for job spawns
  (``web.fdReserve``); at the reserve it stops reading the socket (new
  connections wait in the kernel's backlog) and the budget looks again every
  :data:`RESUME_POLL` seconds until there is room;
* an ``accept()`` that fails is counted and logged at most once a minute with the
  count (:class:`~cronstable.web.throttle.ThrottledLog`), never with a traceback;
  one that ran out of descriptors or memory pauses the listener as above;
* each connection takes a slot of its listener (``web.maxConnections``) or is
  closed at once.

Free descriptors are counted by listing ``/proc/self/fd`` (O(open
descriptors)): at most once every :data:`RECOUNT_INTERVAL` seconds while far
from the reserve, at each readiness once within :data:`RECOUNT_MARGIN` of it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable

from cronstable.platform import free_descriptors, open_files_limit
from cronstable.tasks import TaskSet
from cronstable.web.connections import ConnectionMetrics, ConnectionSlots, Slot
from cronstable.web.throttle import ThrottledLog

logger = logging.getLogger(__name__)

ACCEPT_BURST = 100
"""Connections accepted at most per readiness of a listening socket (asyncio's figure)."""
RESUME_POLL = 0.2
"""Seconds between two looks at the free descriptors while the listeners are paused."""
RECOUNT_INTERVAL = 1.0
"""Seconds an estimate of the free descriptors is trusted while far from the reserve."""
RECOUNT_MARGIN = 64
"""Within this many descriptors of the reserve, every readiness counts them afresh."""
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

ProtocolFactory = Callable[[Slot], asyncio.Protocol]


class DescriptorBudget:
    """The descriptors the listeners may take: free ones beyond the reserve (one per process)."""

    def __init__(self, reserve: int, metrics: ConnectionMetrics) -> None:
        self._reserve = reserve
        self.metrics = metrics
        self._spare: int | None = None
        self._counted_at = 0.0
        self._paused: set[Acceptor] = set()
        self._poll: asyncio.TimerHandle | None = None
        self.pauses = ThrottledLog(logger, logging.WARNING, self._pause_message())

    def _pause_message(self) -> str:
        return (
            "Web: stopped accepting connections %(count)d time(s) since the last such line "
            f"(%(kinds)s; open-files limit {open_files_limit()}, fdReserve {self.reserve}): "
            "new connections wait in the backlog until descriptors are free again"
        )

    @property
    def reserve(self) -> int:
        """``fdReserve``, but at most half the open-files limit (a tiny limit still serves)."""
        return min(self._reserve, open_files_limit() // 2)

    def set_reserve(self, reserve: int) -> None:
        self._reserve = reserve
        self._spare = None
        self.pauses.message = self._pause_message()

    def spare(self) -> int | None:
        """How many connections may be accepted now; None when descriptors cannot be counted."""
        now = asyncio.get_running_loop().time()
        if (
            self._spare is None
            or self._spare <= RECOUNT_MARGIN
            or now - self._counted_at >= RECOUNT_INTERVAL
        ):
            free = free_descriptors()
            if free is None:
                return None
            self._spare, self._counted_at = free - self.reserve, now
        return self._spare

    def took(self, count: int = 1) -> None:
        """``count`` descriptors went to connections since the last count."""
        if self._spare is not None:
            self._spare -= count

    def pause(self, acceptor: Acceptor, why: str = "free descriptors below fdReserve") -> None:
        """``acceptor`` stopped reading its socket: resume it when there is room."""
        if acceptor not in self._paused:
            self._paused.add(acceptor)
            self.metrics.accept_pauses.inc()
            self.pauses.add(why)
        self._spare = None  # count afresh at the next look
        if self._poll is None:
            self._poll = asyncio.get_running_loop().call_later(RESUME_POLL, self._look)

    def forget(self, acceptor: Acceptor) -> None:
        self._paused.discard(acceptor)

    def _look(self) -> None:
        self._poll = None
        if not self._paused:
            return
        spare = self.spare()
        if spare is not None and spare <= 0:
            self._poll = asyncio.get_running_loop().call_later(RESUME_POLL, self._look)
            return
        paused, self._paused = self._paused, set()
        for acceptor in paused:
            acceptor.resume()

    def close(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        self._paused.clear()
        self.pauses.close()


class AcceptErrors:
    """Failed ``accept()`` calls of every listener: counted, logged at most once a minute."""

    def __init__(self, metrics: ConnectionMetrics) -> None:
        self.metrics = metrics
        self.log = ThrottledLog(
            logger,
            logging.WARNING,
            "Web: accept() failed %(count)d times since the last such line (%(kinds)s)",
        )

    def add(self, exc: OSError) -> None:
        name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        self.metrics.accept_errors.labels(name).inc()
        self.log.add(name)

    def close(self) -> None:
        self.log.close()


class Acceptor:
    """Accepts the connections of one listening socket (a duplicate the acceptor owns).

    ``setups``: where each accepted connection's set-up (its TLS handshake) runs; the
    web section owns it, across acceptors, and cancels what is left when it closes."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        protocol: ProtocolFactory,
        slots: ConnectionSlots,
        budget: DescriptorBudget,
        errors: AcceptErrors,
        setups: TaskSet,
        context: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self.sock = sock
        self.setups = setups
        self.protocol = protocol
        self.slots = slots
        self.budget = budget
        self.errors = errors
        self.context = context
        self.handshake_timeout = handshake_timeout if context is not None else None
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self._closed = False

    def start(self) -> None:
        """Begin accepting (again)."""
        if not self._closed and not self._reading:
            self._loop.add_reader(self.sock.fileno(), self._readable)
            self._reading = True

    resume = start

    def _stop_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False

    def _pause(self, why: str = "free descriptors below fdReserve") -> None:
        self._stop_reading()
        self.budget.pause(self, why)

    def _readable(self) -> None:
        spare = self.budget.spare()
        room = ACCEPT_BURST if spare is None else min(ACCEPT_BURST, spare)
        if room <= 0:
            self._pause()
            return
        for _ in range(room):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.errors.add(exc)
                if exc.errno in OUT_OF_RESOURCES:
                    self._pause(f"accept() {errno.errorcode.get(exc.errno or 0, 'failed')}")
                    return
                continue  # ECONNABORTED, EPROTO, EPERM (a firewall): the next one may do
            slot = self.slots.take()
            if slot is None:
                conn.close()
                continue
            self.budget.took()
            self.setups.start(self._connect(conn, slot), name="web connection setup")

    async def _connect(self, conn: socket.socket, slot: Slot) -> None:
        try:
            conn.setblocking(False)
            await self._loop.connect_accepted_socket(
                lambda: self.protocol(slot),
                conn,
                ssl=self.context,
                ssl_handshake_timeout=self.handshake_timeout,
            )
        except BaseException as exc:
            slot.release()
            conn.close()
            if not isinstance(exc, Exception):
                raise
            logger.debug("A connection closed before it was set up: %s", exc)

    def close(self) -> None:
        """Stop accepting and close the socket; connections accepted go on, and so do their
        TLS handshakes (in ``setups``: its owner cancels them when the daemon stops)."""
        self._closed = True
        self._stop_reading()
        self.budget.forget(self)
        self.sock.close()
