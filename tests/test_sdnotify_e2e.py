"""End to end: a real ``cronstable run`` under a fake systemd notify socket.

The test binds a unix datagram socket in the abstract namespace (``NOTIFY_SOCKET=@NAME``,
as systemd itself does) and starts the daemon with ``WATCHDOG_USEC``; it reads what
the daemon says through one lifecycle: the first apply, the watchdog's pace, a
reload, a rejected revision, a stop.  That the pings stop while the loop is blocked
is shown in-process (``test_sdnotify.py``): nothing an operator does can block a
real daemon's loop on purpose.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, wait_for
from notify_socket import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

WATCHDOG_USEC = 600_000
"""A ping every 0.3 s."""


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def jobs(out: Path, names: list[str]) -> str:
    """Jobs that run once at start, each writing its environment to ``out/NAME.env``."""
    return "jobs:\n" + "".join(
        f'  - name: {name}\n    command: env > {out}/{name}.env\n    schedule: "@reboot"\n'
        for name in names
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver(f"\0cronstable-e2e-{os.getpid()}-{time.monotonic_ns()}")
    yield got
    got.close()


def messages_after(receiver: Receiver, index: int) -> list[str]:
    return receiver.texts()[index:]


def fields(message: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in message.split("\n"))


def test_a_daemon_tells_systemd_its_lifecycle(
    tmp_path: Path, receiver: Receiver, daemon_procs: list[DaemonProcess]
) -> None:
    conf, out = tmp_path / "conf", tmp_path / "out"
    conf.mkdir()
    out.mkdir()
    write(conf / "jobs.yaml", jobs(out, ["first"]))
    name = receiver.sock.getsockname()  # bytes for an abstract name
    assert isinstance(name, bytes) and name.startswith(b"\0")
    env = os.environ | {
        "NOTIFY_SOCKET": "@" + name[1:].decode(),
        "WATCHDOG_USEC": str(WATCHDOG_USEC),
    }
    daemon = DaemonProcess(conf, tmp_path / "daemon.log", env=env)
    daemon_procs.append(daemon.start())

    # READY=1 once the first revision is applied, with that revision in STATUS
    applied = daemon.wait_log(r"Revision (\S+) from .* applied in ")
    ready = wait_for(
        lambda: next((m for m in receiver.texts() if m.startswith("READY=1")), None),
        what=lambda: receiver.texts(),
    )
    status = fields(ready)["STATUS"]
    assert f"Running revision {applied[1]}" in status, status
    starting = receiver.texts().index(ready)
    assert any(m.startswith("STATUS=Starting") for m in receiver.texts()[:starting])
    # the jobs do not inherit the notify socket or the watchdog
    job_env = wait_for(lambda: (out / "first.env").exists() and (out / "first.env").read_text())
    assert "NOTIFY_SOCKET" not in job_env and "WATCHDOG_" not in job_env

    # the watchdog: a ping every half of WATCHDOG_USEC
    seen = len(receiver.messages)
    wait_for(
        lambda: sum(t == "WATCHDOG=1" for t in messages_after(receiver, seen)) >= 8,
        what=lambda: receiver.texts()[seen:],
    )
    pings = [at for at, text in receiver.messages[seen:] if text == "WATCHDOG=1"]
    gaps = [b - a for a, b in zip(pings, pings[1:], strict=False)]
    assert 0.2 <= statistics.median(gaps) <= 0.45, gaps

    # a new revision and SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1
    seen = len(receiver.messages)
    write(conf / "jobs.yaml", jobs(out, ["first", "second"]))
    daemon.send(signal.SIGHUP)
    second = daemon.wait_log(r"Revision (\S+) from .* applied in ", count=2)
    wait_for(
        lambda: any(m.startswith("READY=1") for m in messages_after(receiver, seen)),
        what=lambda: receiver.texts()[seen:],
    )
    said = [m for m in messages_after(receiver, seen) if m != "WATCHDOG=1"]
    reloading = next(i for i, m in enumerate(said) if m.startswith("RELOADING=1"))
    assert re.fullmatch(r"RELOADING=1\nMONOTONIC_USEC=\d+", said[reloading])
    ready_again = next(m for m in said[reloading:] if m.startswith("READY=1"))
    assert f"Running revision {second[1]}" in fields(ready_again)["STATUS"]

    # a rejected revision: READY again (the old one runs on), and STATUS says so
    seen = len(receiver.messages)
    write(conf / "jobs.yaml", "jobs:\n  - name: broken\n    schedule: nonsense\n")
    rejected = daemon.wait_log(r"Revision (\S+) from .* rejected ")
    wait_for(
        lambda: any(m.startswith("READY=1") for m in messages_after(receiver, seen)),
        what=lambda: receiver.texts()[seen:],
    )
    last = [m for m in messages_after(receiver, seen) if m.startswith("READY=1")][-1]
    status = fields(last)["STATUS"]
    assert f"Running revision {second[1]}" in status, status
    assert f"revision {rejected[1]} rejected" in status, status

    # SIGTERM: STOPPING=1, and the pings end with the process
    seen = len(receiver.messages)
    assert daemon.stop() == 0
    time.sleep(0.3)  # what the receiver thread has not read yet
    after = messages_after(receiver, seen)
    assert any(m.startswith("STOPPING=1") for m in after), after
