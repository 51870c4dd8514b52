"""Helpers of bench_runtime.py: daemons as subprocesses, /proc readings, wall-clock waits.

Every daemon is started through :class:`Daemons`, which stops them all (SIGTERM,
then SIGKILL) in :meth:`Daemons.stop_all`, called from a ``finally``.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
TERM_GRACE = 3.0
"""Seconds a daemon gets between SIGTERM and SIGKILL."""


class Stopped(Exception):
    """The run is being torn down (failure elsewhere, or Ctrl-C)."""


class Daemons:
    """Starts daemons with their stdout/stderr in files; stops every one of them."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def start(self, argv: list[str], out: Path, log: Path) -> subprocess.Popen[bytes]:
        """Start ``argv``; its stdout (inherited by jobs that do not capture it) is
        opened with O_APPEND on ``out``, so one-line writes from many jobs never mix."""
        with open(out, "ab") as out_f, open(log, "ab") as log_f:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_f,
                stderr=log_f,
                start_new_session=True,
            )
        with self._lock:
            self._procs.append(proc)
        return proc

    def terminate(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM, TERM_GRACE seconds, then SIGKILL to its process group."""
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(TERM_GRACE)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
        with self._lock:
            if proc in self._procs:
                self._procs.remove(proc)

    def stop_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + TERM_GRACE
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(5)
        with self._lock:
            self._procs.clear()

    def sleep(self, seconds: float) -> None:
        """Sleep, but raise :class:`Stopped` as soon as the run is torn down."""
        if seconds > 0 and self.stop.wait(seconds):
            raise Stopped

    def sleep_until(self, wall: float) -> None:
        self.sleep(wall - time.time())


# ------------------------------------------------------------------ /proc


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (threads included), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_settled(
    daemons: Daemons,
    proc: subprocess.Popen[bytes],
    timeout: float,
    *,
    quiet_for: float = 2.0,
    max_rate: float = 0.05,
    step: float = 0.25,
) -> float | None:
    """Wait until the process has used at most ``max_rate`` of a CPU for ``quiet_for``
    seconds in a row; return the seconds from this call to the start of that quiet
    stretch (the start-up time), or None on timeout."""
    start = time.monotonic()
    samples: list[tuple[float, float]] = []
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        now = time.monotonic()
        samples.append((now, cpu_seconds(proc.pid)))
        old = [s for s in samples if now - s[0] >= quiet_for]
        if old:
            t0, c0 = old[-1]
            if (samples[-1][1] - c0) <= max_rate * (now - t0):
                return t0 - start
        daemons.sleep(step)
    return None


# ------------------------------------------------------------------ wall clock


def next_minute(after: float) -> float:
    """The first whole minute strictly after ``after`` (epoch seconds)."""
    return (math.floor(after / 60) + 1) * 60.0


def clear_of_minute(daemons: Daemons, margin: float = 3.0, needs: float = 0.0) -> None:
    """Wait until at least ``margin`` s after a minute boundary and ``needs + margin``
    seconds before the next one (yacron does its per-minute work at the boundaries)."""
    while True:
        now = time.time()
        into = now % 60
        if margin <= into <= 60 - margin - needs:
            return
        target = math.floor(now / 60) * 60 + (60 if into > margin else 0) + margin
        daemons.sleep_until(target)


def read_times(path: Path) -> list[float]:
    """Epoch seconds written one per line by ``date +%s.%N``."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(float(line))
        except ValueError:
            pass
    return out


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (p99 of fewer than 100 values is the largest)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]
