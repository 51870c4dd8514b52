"""One harness for end-to-end tests that run ``cronstable run`` as a real process.

A test writes its configuration into a directory, starts a :class:`DaemonProcess`
on it and talks to it over real sockets.  The harness knows how to wait for the
API's first listener (its URL is read from the daemon's own log line, so
``listen: [http://127.0.0.1:0]`` works), how to read the process's RSS and
open descriptors from ``/proc``, and how to stop it (SIGTERM, then SIGKILL).

Use :func:`wait_for` for every condition a test waits on: it polls, never
sleeps a fixed time, and names the condition when it times out.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

_LISTENING = re.compile(r"HTTP API listening on (\S+?)(?:,|\s|$)")


def wait_for(predicate: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    """Poll ``predicate`` every 50 ms until it is true; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout:g} s: {what}")


def write_config(root: Path, text: str, name: str = "cronstable.yaml") -> Path:
    """``text`` as ``root/name``; ``root`` (created) is the directory the daemon follows."""
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)
    return root


class DaemonProcess:
    """``cronstable run CONFIG`` in a process of its own, its log in ``log``."""

    def __init__(
        self,
        config: Path,
        log: Path,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        nofile: int | None = None,
    ) -> None:
        self.config, self.log = config, log
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.nofile = nofile
        """A soft and hard RLIMIT_NOFILE for the daemon (a low ``ulimit -n``)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # ------------------------------------------------------------- lifecycle

    def start(self) -> DaemonProcess:
        self.starts += 1
        limit = self.nofile

        def limits() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        with self.log.open("a") as out:
            out.write(f"=== start {self.starts}\n")
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cronstable", "run", str(self.config), *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                preexec_fn=limits if limit is not None else None,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the daemon was not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; SIGKILL (and AssertionError) if it does not stop in time."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"the daemon did not stop within {timeout:g} s") from None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    # ------------------------------------------------------------- its log

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def current(self) -> str:
        """The log of the current start."""
        return self.output().rsplit(f"=== start {self.starts}\n", 1)[-1]

    def wait_log(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """The first match of the regular expression ``pattern`` in this start's log."""
        found: list[re.Match[str]] = []

        def seen() -> bool:
            if not self.alive():
                raise AssertionError(f"the daemon exited:\n{self.current()[-4000:]}")
            match = re.search(pattern, self.current())
            if match is not None:
                found.append(match)
            return match is not None

        wait_for(seen, timeout, f"{pattern!r} in the daemon's log")
        return found[0]

    def url(self, timeout: float = 20.0) -> str:
        """The first URL the API listens on (the real port when the config said 0)."""
        return self.wait_log(_LISTENING.pattern, timeout)[1]

    # ------------------------------------------------------------- /proc

    def rss_bytes(self) -> int:
        """The daemon's resident set now (VmRSS)."""
        return _status_kib(self.pid, "VmRSS") * 1024

    def peak_rss_bytes(self) -> int:
        """The daemon's largest resident set so far (VmHWM)."""
        return _status_kib(self.pid, "VmHWM") * 1024

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no {field}")


def http(
    url: str,
    method: str = "GET",
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body or text) of one request; 4xx and 5xx are answers too."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, got, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, got, raw = exc.code, dict(exc.headers), exc.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, got, json.loads(text)
    except ValueError:
        return status, got, text


@pytest.fixture
def daemon_procs() -> Iterator[list[DaemonProcess]]:
    """Daemons a test appends here are killed after it, whatever happened."""
    made: list[DaemonProcess] = []
    yield made
    for daemon in made:
        daemon.kill9()
