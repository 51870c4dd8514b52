"""``cronstable run -c -`` and ``run -c FIFO``: read once at start, again on SIGHUP."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess

DAILY = "jobs:\n  - {name: a, command: 'true', schedule: '@daily'}\n"
HOURLY = "jobs:\n  - {name: a, command: 'true', schedule: '@hourly'}\n"


@pytest.fixture
def reader(tmp_path: Path, daemon_procs: list[DaemonProcess]) -> Callable[..., DaemonProcess]:
    """``start(args, stdin)``: ``cronstable run ARGS`` reading ``stdin``, killed after the test."""

    def start(args: list[str], stdin: int) -> DaemonProcess:
        daemon = DaemonProcess(None, tmp_path / "daemon.log", args=args, stdin=stdin)
        daemon_procs.append(daemon.start())
        return daemon

    return start


def wait_log(daemon: DaemonProcess, text: str, count: int = 1) -> None:
    """Until ``text`` shows ``count`` times in the daemon's log (it must not exit)."""
    daemon.wait_log(re.escape(text), 30, count=count)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_run_reads_standard_input_once_and_keeps_it_on_reload(
    name: str, reader: Callable[..., DaemonProcess]
) -> None:
    read, write = os.pipe()
    os.write(write, DAILY.encode())
    os.close(write)
    try:
        daemon = reader(["-c", name], stdin=read)
    finally:
        os.close(read)
    shown = "<stdin>" if name == "-" else name
    wait_log(daemon, f"from {shown} applied")
    daemon.send(signal.SIGHUP)
    wait_log(daemon, f"Reload read no configuration from {shown}, which gives its bytes once")
    assert daemon.stop(30, sig=signal.SIGINT) == 0
    assert "cronstable.runtime.daemon: Stopped" in daemon.output()
    assert "rejected" not in daemon.output()


def _write_later(path: Path, text: str) -> threading.Thread:
    def writer() -> None:
        with open(path, "w") as fifo:
            fifo.write(text)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_run_reads_a_fifo_at_start_and_on_each_reload(
    tmp_path: Path, reader: Callable[..., DaemonProcess]
) -> None:
    fifo = tmp_path / "cron.fifo"
    os.mkfifo(fifo)
    writer = _write_later(fifo, DAILY)
    daemon = reader(["-c", str(fifo)], stdin=subprocess.DEVNULL)
    wait_log(daemon, f"from {fifo} applied")
    assert "1 added" in daemon.output()
    writer.join(timeout=10)
    daemon.send(signal.SIGHUP)
    wait_log(daemon, "waiting for a writer to open the FIFO")
    writer = _write_later(fifo, HOURLY)
    wait_log(daemon, "0 added, 1 changed")
    writer.join(timeout=10)
    # a reload that waits for a writer never holds the stop
    daemon.send(signal.SIGHUP)
    wait_log(daemon, "waiting for a writer to open the FIFO", count=2)
    assert daemon.stop(30, sig=signal.SIGINT) == 0
    assert "cronstable.runtime.daemon: Stopped" in daemon.output()


@pytest.mark.slow
def test_run_refuses_include_from_a_stream(reader: Callable[..., DaemonProcess]) -> None:
    read, write = os.pipe()
    os.write(write, b"include: [other.yaml]\njobs: []\n")
    os.close(write)
    try:
        daemon = reader(["-"], stdin=read)
    finally:
        os.close(read)
    status = daemon.wait(30)
    assert status == 1
    assert "read once, as one file on its own" in daemon.output()
