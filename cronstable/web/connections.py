"""Open connections per listener: the ``maxConnections`` cap and the metrics about it.

Every accepted connection takes a :class:`Slot` of its listener's
:class:`ConnectionSlots` and gives it back when it closes (or when its TLS
handshake fails).  A connection accepted while the listener already has
``maxConnections`` open is closed at once: counted, and logged at most once a
minute with the count.  ``GET /events`` streams hold a slot like any other
connection.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge

from cronstable.web.throttle import ThrottledLog

logger = logging.getLogger(__name__)


class ConnectionMetrics:
    """The web server's connection metrics, in the daemon's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.open = Gauge(
            "cronstable_http_connections",
            "Open HTTP connections, by listener.",
            ["listener"],
            registry=registry,
        )
        self.refused = Counter(
            "cronstable_http_connections_refused",
            "Connections closed at once because their listener had maxConnections open.",
            ["listener"],
            registry=registry,
        )
        self.header_timeouts = Counter(
            "cronstable_http_header_timeouts",
            "Connections closed because a request line and headers took over headerTimeout.",
            registry=registry,
        )
        self.accept_errors = Counter(
            "cronstable_http_accept_errors",
            "accept() calls that failed, by error (EMFILE, ENFILE, ECONNABORTED ...).",
            ["error"],
            registry=registry,
        )
        self.accept_pauses = Counter(
            "cronstable_http_accept_pauses",
            "Times the listeners stopped accepting because free descriptors fell below "
            "fdReserve (or accept() ran out of them).",
            registry=registry,
        )

    def forget(self, listener: str) -> None:
        """Drop a removed listener's series."""
        for metric in (self.open, self.refused):
            try:
                metric.remove(listener)
            except KeyError:
                pass


class Slot:
    """One open connection's place; :meth:`release` may be called any number of times."""

    __slots__ = ("_owner",)

    def __init__(self, owner: ConnectionSlots) -> None:
        self._owner: ConnectionSlots | None = owner

    def release(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.released()


class ConnectionSlots:
    """The open connections of one listener, at most :attr:`limit`."""

    def __init__(self, name: str, limit: int, metrics: ConnectionMetrics) -> None:
        self.name = name
        """The listener's address as configured (the metrics' label)."""
        self.limit = limit
        self.open = 0
        self._gauge = metrics.open.labels(name)
        self._refused = metrics.refused.labels(name)
        self.refusals = ThrottledLog(
            logger,
            logging.WARNING,
            f"Web: {name} has maxConnections ({limit}) open; closed %(count)d new "
            "connections at once since the last such line",
        )

    def set_limit(self, limit: int) -> None:
        if limit != self.limit:
            self.limit = limit
            self.refusals.message = (
                f"Web: {self.name} has maxConnections ({limit}) open; closed %(count)d new "
                "connections at once since the last such line"
            )

    def take(self) -> Slot | None:
        """A slot for a new connection, or None (counted and logged) when all are taken."""
        if self.open >= self.limit:
            self._refused.inc()
            self.refusals.add()
            return None
        self.open += 1
        self._gauge.set(self.open)
        return Slot(self)

    def released(self) -> None:
        self.open -= 1
        self._gauge.set(self.open)

    def close(self) -> None:
        self.refusals.close()
