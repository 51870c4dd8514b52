"""A fake systemd notify socket for the tests: :class:`Receiver`."""

from __future__ import annotations

import socket
import threading
import time


class Receiver:
    """A bound datagram socket (a path, or an abstract name), read by a thread that
    records each message with the monotonic time it arrived."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def texts(self) -> list[str]:
        return [text for _, text in self.messages]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
