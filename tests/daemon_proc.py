"""One harness for end-to-end tests that run ``cronstable run`` as a real process.

A test writes its configuration into a directory, starts a :class:`DaemonProcess`
on it and talks to it over real sockets.  The harness knows how to wait for the
API's listeners (their URLs are read from the daemon's own log line, so
``listen: [http://127.0.0.1:0]`` works), how to read the process's RSS and
open descriptors from ``/proc``, and how to stop it (SIGTERM, then SIGKILL)::

    daemon = DaemonProcess(write_config(tmp_path / "conf", TEXT), tmp_path / "n1.log",
                           args=["--node-name", "n1"], env=os.environ | {"TZ": "UTC"})
    daemon_procs.append(daemon.start())   # the fixture kills it after the test
    daemon.wait_log(r" applied in ")
    daemon.kill9()                        # a crash ...
    daemon.start()                        # ... and a restart: the same log, appended
    daemon.current()                      # the log of this start only
    assert daemon.stop() == 0             # SIGTERM (``sig=`` another), its exit status

``config=None`` leaves the configuration to ``args`` (``-c PATH``, ``--source SPEC``).
Several daemons stop together with :func:`stop_all` (every one signalled, then
waited for), as a cluster does.

Use :func:`wait_for` for every condition a test waits on, and :func:`until` in
an ``async`` test: both poll, never sleep a fixed time, and name the condition
when they time out.
"""

from __future__ import annotations

import asyncio
import inspect
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

_LISTENING = re.compile(r"HTTP API listening on (\S+?)(?:,|\s|$)")


Described = str | Callable[[], object]
"""What a wait is for: a text, or a callable that describes the state when time is up."""


def _late(timeout: float, what: Described) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(f"condition not met within {timeout:g} s: {said}")


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: Described = "") -> Any:
    """Poll ``predicate`` every 50 ms until it is true (its value); AssertionError after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise _late(timeout, what)


async def until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    what: Described = "",
    *,
    every: float = 0.01,
) -> Any:
    """:func:`wait_for` in a coroutine: await ``predicate`` (a plain or an ``async``
    callable) every ``every`` s until it is true (its value); AssertionError after
    ``timeout`` s.  The event loop runs meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _late(timeout, what)
        await asyncio.sleep(every)


def write_config(root: Path, text: str, name: str = "cronstable.yaml") -> Path:
    """``text`` as ``root/name``; ``root`` (created) is the directory the daemon follows."""
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)
    return root


class DaemonProcess:
    """``cronstable run CONFIG ARGS`` in a process of its own, its stdout and stderr in
    ``log``; each :meth:`start` appends to it after a line ``=== start N``."""

    def __init__(
        self,
        config: Path | None,
        log: Path,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        nofile: int | None = None,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
    ) -> None:
        self.config, self.log = config, log
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.nofile = nofile
        """A soft and hard RLIMIT_NOFILE for the daemon (a low ``ulimit -n``)."""
        self.stdin = stdin
        """The daemon's standard input (``run -c -`` reads its configuration there)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def argv(self) -> list[str]:
        config = [] if self.config is None else [str(self.config)]
        return [sys.executable, "-m", "cronstable", "run", *config, *self.args]

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
                self.argv(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=self.stdin,
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

    def send(self, sig: int = signal.SIGTERM) -> None:
        """Signal the daemon (SIGHUP reloads, SIGTERM or SIGINT stops), if it still runs."""
        assert self.proc is not None, "the daemon was not started"
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 20.0) -> int:
        """Its exit status; SIGKILL (and AssertionError) if it does not exit in time."""
        assert self.proc is not None, "the daemon was not started"
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"the daemon did not exit within {timeout:g} s") from None

    def stop(self, timeout: float = 20.0, *, sig: int = signal.SIGTERM) -> int:
        """``sig`` (SIGTERM) and :meth:`wait`: its exit status."""
        self.send(sig)
        return self.wait(timeout)

    def kill9(self) -> None:
        """SIGKILL, as a crash would (nothing if it is not running)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    # ------------------------------------------------------------- its log

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def current(self) -> str:
        """The log of the current start."""
        return self.output().rsplit(f"=== start {self.starts}\n", 1)[-1]

    def wait_log(self, pattern: str, timeout: float = 20.0, *, count: int = 1) -> re.Match[str]:
        """The ``count``-th match of the regular expression ``pattern`` in this start's
        log; AssertionError (with the log) if the daemon exits first."""
        found: list[re.Match[str]] = []

        def seen() -> bool:
            if not self.alive():
                raise AssertionError(f"the daemon exited:\n{self.current()[-4000:]}")
            found[:] = list(re.finditer(pattern, self.current()))[:count]
            return len(found) == count

        wait_for(seen, timeout, f"{pattern!r} in the daemon's log")
        return found[-1]

    def url(self, timeout: float = 20.0) -> str:
        """The first URL the API listens on (the real port when the config said 0)."""
        return self.wait_log(_LISTENING.pattern, timeout)[1]

    def urls(self, timeout: float = 20.0) -> list[str]:
        """Every URL the API listens on, in the order the log line gives them."""
        return self.wait_log(r"HTTP API listening on (.+)", timeout)[1].strip().split(", ")

    # ------------------------------------------------------------- /proc

    def rss_bytes(self) -> int:
        """The daemon's resident set now (VmRSS)."""
        return _status_kib(self.pid, "VmRSS") * 1024

    def peak_rss_bytes(self) -> int:
        """The daemon's largest resident set so far (VmHWM)."""
        return _status_kib(self.pid, "VmHWM") * 1024

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


def stop_all(
    daemons: Iterable[DaemonProcess], *, signals: int = 1, timeout: float = 20.0
) -> list[int]:
    """``signals`` SIGTERMs to every running daemon at once (a second one stops their
    runs), then wait for each: their exit statuses, or AssertionError if one does not
    exit in time (every one is still waited for, or killed)."""
    daemons = [daemon for daemon in daemons if daemon.proc is not None]
    for _ in range(signals):
        for daemon in daemons:
            daemon.send()
    statuses: list[int] = []
    late: list[str] = []
    for daemon in daemons:
        try:
            statuses.append(daemon.wait(timeout))
        except AssertionError:
            late.append(str(daemon.log))
    if late:
        raise AssertionError(f"daemons did not stop within {timeout:g} s: {late}")
    return statuses


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
