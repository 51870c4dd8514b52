"""statsd over real UDP on loopback: byte-exact datagrams, dead targets, the daemon's wiring."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from cronstable.config import Job, MemoryTree, load
from cronstable.ports import RunResult, RunStart
from cronstable.reporting.statsd import ENDPOINT_LIFETIME, StatsdListener
from cronstable.runtime.process import JobProcess

pytestmark = pytest.mark.timeout(30)
async_test = pytest.mark.asyncio

SCHEDULED = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


class Receiver(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.datagrams: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.datagrams.put_nowait(data)

    async def next(self, within: float = 5.0) -> bytes:
        return await asyncio.wait_for(self.datagrams.get(), within)


async def listen(port: int = 0) -> tuple[asyncio.DatagramTransport, Receiver]:
    loop = asyncio.get_running_loop()
    transport, receiver = await loop.create_datagram_endpoint(
        Receiver, local_addr=("127.0.0.1", port)
    )
    return transport, receiver


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[tuple[int, Receiver]]:
    transport, protocol = await listen()
    yield transport.get_extra_info("sockname")[1], protocol
    transport.close()


def closed_udp_port() -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def make_job(
    command: str | list[str],
    port: int | None,
    prefix: str = "cron.backup",
    host: str = "127.0.0.1",
) -> Job:
    """A job sending to ``host:port`` (no statsd key when ``port`` is None)."""
    entry: dict[str, Any] = {"name": "backup", "schedule": "* * * * *", "command": command}
    if port is not None:
        entry["statsd"] = {"host": host, "port": port, "prefix": prefix}
    state = load(MemoryTree({"c.yaml": yaml.safe_dump({"jobs": [entry]}).encode()}), "c.yaml")
    return next(iter(state.jobs.values()))


async def run_told(listener: StatsdListener, job: Job, pool_wait: float | None = None) -> RunResult:
    """A real run of ``job``, told to ``listener`` as the scheduler tells its listeners."""
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    start = RunStart(
        id=f"{job.name}@x#1",
        job=job.name,
        scheduled_time=SCHEDULED,
        attempt=1,
        started_at=SCHEDULED,
        pid=proc.pid,
        manual=False,
        pool_wait=pool_wait,
    )
    listener.run_started(start)
    result = await proc.wait()
    listener.run_finished(start, result, "failed" if result.failed else "succeeded")
    return result


def expected_stop(prefix: str, result: RunResult, success: int) -> bytes:
    # written out here rather than taken from the module: yacron 0.19's three lines
    # (yacron/statsd.py, job_stopped), then cpu and max_rss
    assert result.cpu_seconds is not None and result.max_rss is not None
    return (
        f"{prefix}.stop:1|g\n"
        f"{prefix}.success:{success}|g\n"
        f"{prefix}.duration:{int(round(result.duration * 1000))}|ms|@0.1\n"
        f"{prefix}.cpu:{int(round(result.cpu_seconds * 1000))}|ms\n"
        f"{prefix}.max_rss:{result.max_rss}|g\n"
    ).encode()


@async_test
async def test_a_successful_run_sends_start_then_one_stop_datagram(
    receiver: tuple[int, Receiver],
) -> None:
    port, received = receiver
    job = make_job([sys.executable, "-c", "pass"], port)
    listener = StatsdListener(lambda name: job if name == job.name else None)
    result = await run_told(listener, job)
    assert await received.next() == b"cron.backup.start:1|g\n"
    assert await received.next() == expected_stop("cron.backup", result, 1)
    await listener.close()
    assert received.datagrams.empty()


@async_test
async def test_a_run_that_waited_for_its_pool_says_how_long_at_start(
    receiver: tuple[int, Receiver],
) -> None:
    port, received = receiver
    job = make_job([sys.executable, "-c", "pass"], port)
    listener = StatsdListener(lambda name: job)
    result = await run_told(listener, job, pool_wait=2.5004)
    assert await received.next() == b"cron.backup.start:1|g\ncron.backup.pool_wait:2500|ms\n"
    assert await received.next() == expected_stop("cron.backup", result, 1)
    await listener.close()


@async_test
async def test_a_failed_run_sends_success_0(receiver: tuple[int, Receiver]) -> None:
    port, received = receiver
    job = make_job("exit 3", port, prefix="p")
    listener = StatsdListener(lambda name: job)
    result = await run_told(listener, job)
    assert result.failed
    assert await received.next() == b"p.start:1|g\n"
    assert await received.next() == expected_stop("p", result, 0)
    await listener.close()


@async_test
async def test_a_run_that_could_not_start_sends_yacrons_three_lines(
    receiver: tuple[int, Receiver],
) -> None:
    port, received = receiver
    job = make_job(["/nonexistent/command"], port, prefix="p")
    listener = StatsdListener(lambda name: job)
    result = await run_told(listener, job)
    assert result.returncode == 127
    assert await received.next() == b"p.start:1|g\n"
    ms = int(round(result.duration * 1000))
    assert await received.next() == f"p.stop:1|g\np.success:0|g\np.duration:{ms}|ms|@0.1\n".encode()
    await listener.close()


@async_test
async def test_a_job_without_statsd_sends_nothing(receiver: tuple[int, Receiver]) -> None:
    _, received = receiver
    plain = make_job(["true"], None)
    listener = StatsdListener(lambda name: plain)
    await run_told(listener, plain)
    await listener.close()
    await asyncio.sleep(0.2)
    assert received.datagrams.empty()


@async_test
async def test_a_closed_port_disturbs_no_run_and_the_endpoint_is_rebuilt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "cronstable.reporting.statsd")
    port = closed_udp_port()
    job = make_job(["true"], port, prefix="p")
    listener = StatsdListener(lambda name: job)
    first = await run_told(listener, job)  # start and stop into a closed port
    assert first.returncode == 0 and not first.failed
    target = listener.target("127.0.0.1", port)
    assert target is not None
    for _ in range(100):  # the ICMP port unreachable comes back as error_received
        if target.transport is None and target.task is not None and target.task.done():
            break
        await asyncio.sleep(0.02)
    assert target.transport is None, "the failed endpoint was not dropped"
    assert "ConnectionRefusedError" in caplog.text
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per target and minute, not per datagram
    built = target.endpoints

    # the statsd server comes up on that port: the next run's metrics reach it
    transport, received = await listen(port)
    try:
        second = await run_told(listener, job)
        assert await received.next() == b"p.start:1|g\n"
        assert await received.next() == expected_stop("p", second, 1)
        assert target.endpoints == built + 1
    finally:
        transport.close()
        await listener.close()


@async_test
async def test_an_unresolvable_host_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    bad = make_job(["true"], 8125, host="statsd.invalid")
    listener = StatsdListener(lambda name: bad)
    result = await run_told(listener, bad)
    assert result.returncode == 0
    await listener.close()
    assert "statsd statsd.invalid:8125" in caplog.text


@async_test
async def test_the_endpoint_is_rebuilt_every_minute(receiver: tuple[int, Receiver]) -> None:
    port, received = receiver
    now = [1000.0]
    job = make_job(["true"], port, prefix="p")
    listener = StatsdListener(lambda name: job, clock=lambda: now[0])
    await run_told(listener, job)
    await received.next()
    await received.next()
    target = listener.target("127.0.0.1", port)
    assert target is not None and target.endpoints == 1
    now[0] += ENDPOINT_LIFETIME - 1
    await run_told(listener, job)
    await received.next()
    await received.next()
    assert target.endpoints == 1
    now[0] += 2
    await run_told(listener, job)
    await received.next()
    await received.next()
    assert target.endpoints == 2  # resolved and opened again
    await listener.close()


@async_test
async def test_the_daemon_sends_statsd_for_its_runs(
    tmp_path: Path, receiver: tuple[int, Receiver]
) -> None:
    port, received = receiver
    (tmp_path / "c.yaml").write_text(
        textwrap.dedent(
            f"""\
            jobs:
              - name: hello
                command: "true"
                schedule: "@reboot"
                statsd: {{host: 127.0.0.1, port: {port}, prefix: cron.hello}}
            """
        )
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronstable",
        "run",
        "-c",
        str(tmp_path / "c.yaml"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert await received.next(within=15) == b"cron.hello.start:1|g\n"
        stop = (await received.next(within=15)).decode()
        lines = stop.splitlines()
        assert lines[:2] == ["cron.hello.stop:1|g", "cron.hello.success:1|g"]
        assert lines[2].startswith("cron.hello.duration:") and lines[2].endswith("|ms|@0.1")
        assert lines[3].startswith("cron.hello.cpu:") and lines[3].endswith("|ms")
        assert lines[4].startswith("cron.hello.max_rss:") and lines[4].endswith("|g")
        assert stop.endswith("\n") and len(lines) == 5
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
