"""systemd's service notifications (``sd_notify(3)``), on the standard library alone.

A service started with ``Type=notify`` finds the address of the service manager's
socket in ``NOTIFY_SOCKET``: a path, or ``@NAME`` for a name in the abstract
namespace.  Each notification is one datagram of ``KEY=VALUE`` lines.  The daemon
sends

* ``READY=1`` once its first revision is applied (systemd holds ``systemctl start``
  and every unit ordered after this one until then);
* ``RELOADING=1`` with ``MONOTONIC_USEC=`` (the ``CLOCK_MONOTONIC`` time the reload
  began, which systemd 253 and later want beside it) when it starts reconciling a new
  revision, and ``READY=1`` once that revision is applied or rejected;
* ``STOPPING=1`` when it is asked to stop;
* ``STATUS=`` (one line, what ``systemctl status`` shows): the running revision,
  and the last rejected one when the newest revision was rejected;
* ``WATCHDOG=1`` every half of ``WATCHDOG_USEC`` (``WatchdogSec=``), when
  ``WATCHDOG_PID`` is unset or names this process.  The pings come from a task on the
  event loop (:meth:`ServiceNotifier.watchdog`), never from a thread: a loop that is
  blocked sends none, and systemd then kills and restarts the daemon.

Without ``NOTIFY_SOCKET`` every method does nothing.  A notification that cannot be
sent is logged once (a WARNING, then DEBUG) and never stops the daemon.
:meth:`ServiceNotifier.from_environment` removes the three variables from the
environment it reads, as ``sd_notify``'s ``unset_environment`` does, so the jobs the
daemon starts do not inherit them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import MutableMapping

logger = logging.getLogger(__name__)

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"

STATUS_MAX = 1000
"""Characters of a ``STATUS=`` line at most (systemd shows one line; the datagram is small)."""


def socket_address(value: str) -> str | None:
    """``NOTIFY_SOCKET`` as an ``AF_UNIX`` address (``@NAME``: the abstract ``\\0NAME``);
    None for a form this module does not speak (``vsock:``) or an empty value."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def watchdog_interval(environ: MutableMapping[str, str], pid: int) -> float | None:
    """Seconds between two ``WATCHDOG=1`` (half of ``WATCHDOG_USEC``); None when the
    watchdog is off or is another process's (``WATCHDOG_PID``)."""
    owner = environ.get(WATCHDOG_PID, "")
    if owner and owner.strip() != str(pid):
        return None
    try:
        usec = int(environ.get(WATCHDOG_USEC, ""))
    except ValueError:
        return None
    return usec / 2_000_000 if usec > 0 else None


def one_line(text: str) -> str:
    """``text`` fit for ``STATUS=``: one line (a newline would start a new field), bounded."""
    flat = " ".join(text.split())
    return flat if len(flat) <= STATUS_MAX else flat[: STATUS_MAX - 1] + "…"


class ServiceNotifier:
    """Sends notifications to ``address`` (None: does nothing); see the module docstring."""

    def __init__(self, address: str | None, *, watchdog: float | None = None) -> None:
        self.address = address
        self.watchdog_interval = watchdog if address is not None else None
        """Seconds between two watchdog pings; None when there is no watchdog to ping."""
        self._socket: socket.socket | None = None
        self._failed = False

    @classmethod
    def from_environment(
        cls, environ: MutableMapping[str, str] | None = None, *, pid: int | None = None
    ) -> ServiceNotifier:
        """The notifier the environment asks for; the variables are removed from it."""
        env = os.environ if environ is None else environ
        value = env.get(NOTIFY_SOCKET, "")
        interval = watchdog_interval(env, os.getpid() if pid is None else pid)
        for name in (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID):
            env.pop(name, None)
        address = socket_address(value) if value else None
        if value and address is None:
            logger.warning(
                "%s=%s is not a unix socket address; no service notifications are sent",
                NOTIFY_SOCKET,
                value,
            )
        return cls(address, watchdog=interval)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    # ------------------------------------------------------------- the messages

    def ready(self, status: str | None = None) -> None:
        self.send("READY=1", *self._status(status))

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self, status: str | None = None) -> None:
        self.send("STOPPING=1", *self._status(status))

    def status(self, status: str) -> None:
        self.send(*self._status(status))

    def ping(self) -> None:
        self.send("WATCHDOG=1")

    async def watchdog(self) -> None:
        """Ping the watchdog at its interval, from this event loop, until cancelled
        (returns at once when there is no watchdog)."""
        interval = self.watchdog_interval
        if interval is None:
            return
        logger.info("systemd watchdog: pinging every %.3g s from the event loop", interval)
        while True:
            self.ping()
            await asyncio.sleep(interval)

    @staticmethod
    def _status(status: str | None) -> tuple[str, ...]:
        return () if status is None else (f"STATUS={one_line(status)}",)

    # ------------------------------------------------------------- the socket

    def send(self, *fields: str) -> bool:
        """One datagram of ``fields``; whether it was sent (False: no socket, or an error,
        logged once)."""
        if self.address is None or not fields:
            return False
        message = "\n".join(fields).encode("utf-8", "replace")
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.setblocking(False)  # a full receiver must not stall the loop
            self._socket.sendto(message, self.address)
        except OSError as exc:
            level = logging.DEBUG if self._failed else logging.WARNING
            self._failed = True
            logger.log(
                level,
                "Cannot send a service notification (%s) to %s: %s",
                fields[0].partition("=")[0],
                self.address.replace("\0", "@"),
                exc,
            )
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
