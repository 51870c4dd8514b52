"""The systemd notifier against a real unix datagram socket, in this process.

The watchdog case blocks this test's own event loop with ``time.sleep`` from a
callback: the pings must stop for exactly as long (they come from the loop, not a
thread).  The daemon's use of the notifier is tested end to end in
``test_sdnotify_e2e.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from notify_socket import Receiver

from cronstable.runtime.sdnotify import (
    ServiceNotifier,
    one_line,
    socket_address,
    watchdog_interval,
)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    got = Receiver(str(tmp_path / "notify.sock"))
    yield got
    got.close()


def wait_until(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_addresses_and_the_watchdog_variables() -> None:
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("@abstract/name") == "\0abstract/name"
    assert socket_address("vsock:2:1234") is None
    assert socket_address("@") is None
    me = os.getpid()
    assert watchdog_interval({"WATCHDOG_USEC": "3000000"}, me) == 1.5
    assert watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(me)}, me) == 1.5
    # another process's watchdog (a parent that did not unset it), or none at all
    assert watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}, me) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}, me) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}, me) is None
    assert watchdog_interval({}, me) is None
    assert one_line("a\nb\n  c") == "a b c"
    assert len(one_line("x" * 5000)) == 1000


def test_from_environment_removes_the_variables_the_jobs_would_inherit(
    receiver: Receiver,
) -> None:
    env = {
        "NOTIFY_SOCKET": receiver.sock.getsockname(),
        "WATCHDOG_USEC": "1000000",
        "WATCHDOG_PID": str(os.getpid()),
        "PATH": "/usr/bin",
    }
    notifier = ServiceNotifier.from_environment(env)
    assert env == {"PATH": "/usr/bin"}
    assert notifier.enabled and notifier.watchdog_interval == 0.5
    notifier.ready("Running revision abc\nwith a newline")
    notifier.reloading()
    notifier.stopping()
    wait_until(lambda: len(receiver.messages) == 3)
    ready, reloading, stopping = receiver.texts()
    assert ready == "READY=1\nSTATUS=Running revision abc with a newline"
    assert reloading.startswith("RELOADING=1\nMONOTONIC_USEC=")
    usec = int(reloading.rsplit("=", 1)[1])
    assert abs(usec - time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000) < 5_000_000
    assert stopping == "STOPPING=1"
    notifier.close()


def test_an_abstract_socket_is_reached() -> None:
    name = f"cronstable-test-{os.getpid()}-{time.monotonic_ns()}"
    got = Receiver("\0" + name)
    try:
        notifier = ServiceNotifier.from_environment({"NOTIFY_SOCKET": "@" + name})
        assert notifier.send("READY=1")
        wait_until(lambda: got.texts() == ["READY=1"])
        notifier.close()
    finally:
        got.close()


def test_without_notify_socket_nothing_is_sent_and_nothing_fails() -> None:
    notifier = ServiceNotifier.from_environment({"WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled and notifier.watchdog_interval is None
    assert notifier.send("READY=1") is False
    asyncio.run(asyncio.wait_for(notifier.watchdog(), 1))  # returns at once


def test_a_send_error_is_logged_once_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = ServiceNotifier(str(tmp_path / "nobody-listens.sock"))
    with caplog.at_level(logging.DEBUG, logger="cronstable.runtime.sdnotify"):
        for _ in range(3):
            assert notifier.send("WATCHDOG=1") is False
    notifier.close()
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "WATCHDOG" in caplog.records[0].getMessage()


def test_watchdog_pings_come_from_the_loop_and_stop_while_it_is_blocked(
    receiver: Receiver,
) -> None:
    # WATCHDOG_USEC 0.2 s: a ping every 0.1 s
    notifier = ServiceNotifier.from_environment(
        {"NOTIFY_SOCKET": receiver.sock.getsockname(), "WATCHDOG_USEC": "200000"}
    )
    assert notifier.watchdog_interval == 0.1
    blocked: list[float] = []

    def block() -> None:  # a callback that never yields, as a stuck loop would
        blocked.append(time.monotonic())
        time.sleep(1.0)
        blocked.append(time.monotonic())

    async def main() -> None:
        pings = asyncio.create_task(notifier.watchdog())
        await asyncio.sleep(0.6)
        asyncio.get_running_loop().call_soon(block)
        await asyncio.sleep(0.05)  # the callback runs (and blocks) before this returns
        await asyncio.sleep(0.6)
        pings.cancel()
        await asyncio.gather(pings, return_exceptions=True)

    asyncio.run(main())
    notifier.close()
    time.sleep(0.2)  # the receiver thread reads what is queued
    times = [t for t, text in receiver.messages if text == "WATCHDOG=1"]
    start, end = blocked
    before = [t for t in times if t < start]
    during = [t for t in times if start + 0.05 < t < end]
    after = [t for t in times if t >= end]
    assert len(before) >= 3, times
    assert during == [], (start, end, times)
    assert len(after) >= 3, times
    # at the loop's pace otherwise, not a flood: in the 0.6 s before the block, at most one
    # ping per 0.1 s (counted, not timed between two: the receiver thread stamps a ping
    # when it gets to read it, which a loaded machine delays and bunches)
    assert len(before) <= 7, times
