"""The blocking client of a run's channel, for the job-side commands.

The standard library only, and neither asyncio nor aiohttp: ``cronstable state
get`` and ``cronstable lock`` start in the time Python itself takes.  Every wait
is bounded by a deadline over the whole exchange (connecting, sending, the whole
answer), not by a timeout per read.  Failures, by what the caller makes of them::

    ChannelError      the base: a message and an exit status
    ├── NotInRun      the variables of a run are not set (exit 2)
    ├── Unreachable   no answer: no socket, refused, timeout, a broken answer (exit 3)
    └── Refused       the daemon said no: its code and message (exit by code)
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from cronstable.channel import protocol

EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_UNAUTHORIZED = 4
EXIT_UNAVAILABLE = 69
"""``lock``: the lock was lost while the command ran (EX_UNAVAILABLE); the command was
stopped."""
EXIT_TEMPFAIL = 75
"""``lock``: not held within ``--wait``, or too many wait for it (EX_TEMPFAIL)."""

_STATUS = {
    protocol.UNAUTHORIZED: EXIT_UNAUTHORIZED,
    protocol.ENDED: EXIT_UNAUTHORIZED,
    protocol.NOT_FOUND: EXIT_NOT_FOUND,
    protocol.BAD_REQUEST: EXIT_USAGE,
    protocol.TIMEOUT: EXIT_TEMPFAIL,
    protocol.BUSY: EXIT_TEMPFAIL,
}


class ChannelError(Exception):
    """What went wrong, and the exit status it means."""

    status = EXIT_UNREACHABLE


class NotInRun(ChannelError):
    status = EXIT_USAGE


class Unreachable(ChannelError):
    status = EXIT_UNREACHABLE


class Refused(ChannelError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = _STATUS.get(code, EXIT_UNREACHABLE)


class Channel:
    """A run's socket and token, from its environment (:meth:`from_environment`).  (A
    plain class: dataclasses would double the client's import time.)"""

    __slots__ = ("path", "token")

    def __init__(self, path: str, token: str) -> None:
        self.path = path
        self.token = token

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> Channel:
        env = os.environ if environ is None else environ
        path, token = env.get(protocol.SOCKET_ENV, ""), env.get(protocol.TOKEN_ENV, "")
        if not path or not token:
            raise NotInRun(
                f"${protocol.SOCKET_ENV} and ${protocol.TOKEN_ENV} are not set: this command "
                "works in a job that cronstable runs"
            )
        return cls(path, token)

    def connect(self, op: str, timeout: float, **fields: Any) -> Connection:
        """Connect, send the request for ``op``; the connection (its answer not read yet)."""
        deadline = time.monotonic() + timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(self.path)
            request = {"v": protocol.VERSION, "token": self.token, "op": op, **fields}
            data = protocol.encode(request)
            if len(data) > protocol.MAX_REQUEST:
                raise Refused(
                    protocol.BAD_REQUEST, f"the request is over {protocol.MAX_REQUEST} bytes"
                )
            try:
                _send(sock, data, deadline)
            except (BrokenPipeError, ConnectionResetError):
                pass  # it closed first: what it said then (a refusal) is still to be read
        except OSError as exc:
            sock.close()
            raise Unreachable(f"cannot reach the daemon at {self.path}: {_reason(exc)}") from exc
        except BaseException:
            sock.close()
            raise
        return Connection(sock, self.path)

    def request(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """One request and its answer (``ok`` true); raises :class:`ChannelError`."""
        deadline = time.monotonic() + timeout
        connection = self.connect(op, timeout, **fields)
        try:
            return connection.answer(deadline)
        finally:
            connection.close()


class Connection:
    """One connection to a run's socket, its request sent."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path
        self._buffer = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def peer_pid(self) -> int | None:
        """The daemon's pid (the socket's peer), where the OS says (Linux)."""
        option = getattr(socket, "SO_PEERCRED", None)
        if option is None:
            return None
        import struct

        try:
            raw = self.sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
        except OSError:
            return None
        pid: int = struct.unpack("3i", raw)[0]
        return pid or None

    def line(self, deadline: float | None) -> dict[str, Any] | None:
        """The next line the daemon sends, as an object; None at the end of the stream.
        Raises :class:`Unreachable` past ``deadline`` (None: no deadline)."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > protocol.MAX_ANSWER:
                raise Unreachable(f"{self.path}: an answer over {protocol.MAX_ANSWER} bytes")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise Unreachable(f"{self.path}: no answer in time")
            try:
                self.sock.settimeout(left)
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise Unreachable(f"{self.path}: no answer in time") from None
            except OSError as exc:
                raise Unreachable(f"{self.path}: {_reason(exc)}") from exc
            if not chunk:
                if self._buffer:
                    raise Unreachable(f"{self.path}: the answer was cut short")
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return protocol.decode(line)
        except ValueError as exc:
            raise Unreachable(f"{self.path}: not an answer ({exc})") from None

    def answer(self, deadline: float | None) -> dict[str, Any]:
        """The answer to the request: its object when ``ok``; raises :class:`Refused` (or
        :class:`Unreachable`)."""
        answer = self.line(deadline)
        if answer is None:
            raise Unreachable(f"{self.path}: the daemon closed the connection without an answer")
        if answer.get("ok") is True:
            return answer
        code = answer.get("code")
        error = answer.get("error")
        raise Refused(
            code if isinstance(code, str) else "?",
            error if isinstance(error, str) else "refused",
        )

    def close(self) -> None:
        self.sock.close()


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request could not be sent in time")
        sock.settimeout(left)
        sent = sock.send(view)
        view = view[sent:]


def _reason(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return exc.strerror or str(exc) or type(exc).__name__
