"""``cronstable run -c -`` and ``run -c FIFO``: read once at start, again on SIGHUP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

DAILY = "jobs:\n  - {name: a, command: 'true', schedule: '@daily'}\n"
HOURLY = "jobs:\n  - {name: a, command: 'true', schedule: '@hourly'}\n"


class Daemon:
    def __init__(self, args: list[str], stdin: int | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cronstable", "run", *args],
            cwd=REPO,
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, count: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while sum(text in line for line in self.lines) < count:
            assert time.monotonic() < deadline, f"no {text!r} in:\n{''.join(self.lines)}"
            assert self.proc.poll() is None, "".join(self.lines)
            time.sleep(0.05)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            status = self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=10)
            assert self.proc.stderr is not None
            self.proc.stderr.close()
        return status

    @property
    def output(self) -> str:
        return "".join(self.lines)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_run_reads_standard_input_once_and_keeps_it_on_reload(name: str) -> None:
    read, write = os.pipe()
    os.write(write, DAILY.encode())
    os.close(write)
    try:
        daemon = Daemon(["-c", name], stdin=read)
    finally:
        os.close(read)
    shown = "<stdin>" if name == "-" else name
    daemon.wait_for(f"from {shown} applied")
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for(f"Reload read no configuration from {shown}, which gives its bytes once")
    assert daemon.stop() == 0
    assert "cronstable.runtime.daemon: Stopped" in daemon.output
    assert "rejected" not in daemon.output


def _write_later(path: Path, text: str) -> threading.Thread:
    def writer() -> None:
        with open(path, "w") as fifo:
            fifo.write(text)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_run_reads_a_fifo_at_start_and_on_each_reload(tmp_path: Path) -> None:
    fifo = tmp_path / "cron.fifo"
    os.mkfifo(fifo)
    writer = _write_later(fifo, DAILY)
    daemon = Daemon(["-c", str(fifo)], stdin=subprocess.DEVNULL)
    daemon.wait_for(f"from {fifo} applied")
    assert "1 added" in daemon.output
    writer.join(timeout=10)
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for("waiting for a writer to open the FIFO")
    writer = _write_later(fifo, HOURLY)
    daemon.wait_for("0 added, 1 changed")
    writer.join(timeout=10)
    # a reload that waits for a writer never holds the stop
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_for("waiting for a writer to open the FIFO", count=2)
    assert daemon.stop() == 0
    assert "cronstable.runtime.daemon: Stopped" in daemon.output


@pytest.mark.slow
def test_run_refuses_include_from_a_stream() -> None:
    read, write = os.pipe()
    os.write(write, b"include: [other.yaml]\njobs: []\n")
    os.close(write)
    try:
        daemon = Daemon(["-"], stdin=read)
    finally:
        os.close(read)
    status = daemon.proc.wait(timeout=30)
    daemon._reader.join(timeout=10)
    assert daemon.proc.stderr is not None
    daemon.proc.stderr.close()
    assert status == 1
    assert "read once, as one file on its own" in daemon.output
