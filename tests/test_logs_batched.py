"""The daemon's stderr handler: records logged on the event loop's thread are written a
loop iteration at a time, in order, and none is lost at a flush or at exit.

Real loops (asyncio's and uvloop's), real threads, a real stream that counts its
writes, and a real ``cronstable run`` whose log is read after it stopped.
"""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop
from daemon_proc import DaemonProcess, write_config

from cronstable.logs import LoopBatchedHandler, make_formatter

pytestmark = pytest.mark.timeout(30)


class CountingStream(io.StringIO):
    """A text stream that keeps each write apart."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, CountingStream, LoopBatchedHandler]]:
    stream = CountingStream()
    handler = LoopBatchedHandler(stream, asyncio._get_running_loop)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("cronstable.tests.batched")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    yield log, stream, handler
    log.removeHandler(handler)
    handler.close()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_burst_on_the_loop_is_one_write_after_the_iteration(
    logged: tuple[logging.Logger, CountingStream, LoopBatchedHandler], loop_kind: str
) -> None:
    log, stream, _ = logged

    async def burst() -> list[str]:
        for i in range(500):
            log.info("line %d", i)
        seen_during = list(stream.writes)  # nothing written yet: the iteration goes on
        await asyncio.sleep(0)  # the loop's next iteration writes them
        await asyncio.sleep(0)
        return seen_during

    runner = asyncio.run if loop_kind == "asyncio" else uvloop.run
    seen_during = runner(burst())
    assert seen_during == []
    assert len(stream.writes) == 1
    assert stream.getvalue() == "".join(f"line {i}\n" for i in range(500))


def test_a_record_from_another_thread_comes_after_the_loops_pending_ones(
    logged: tuple[logging.Logger, CountingStream, LoopBatchedHandler],
) -> None:
    log, stream, _ = logged

    async def mixed() -> None:
        log.info("loop 1")
        log.info("loop 2")
        # another thread logs while the loop's lines still wait: they are written first
        thread = threading.Thread(target=log.info, args=("thread",))
        thread.start()
        thread.join()
        log.info("loop 3")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(mixed())
    assert stream.getvalue() == "loop 1\nloop 2\nthread\nloop 3\n"


def test_outside_a_loop_a_record_is_written_at_once(
    logged: tuple[logging.Logger, CountingStream, LoopBatchedHandler],
) -> None:
    log, stream, _ = logged
    log.info("one")
    assert stream.writes == ["one\n"]
    log.info("two")
    assert stream.getvalue() == "one\ntwo\n"


def test_lines_pending_when_the_loop_stops_are_written_by_a_flush(
    logged: tuple[logging.Logger, CountingStream, LoopBatchedHandler],
) -> None:
    log, stream, handler = logged
    loop = asyncio.new_event_loop()
    try:

        async def last_words() -> None:
            log.info("stopping")
            loop.stop()  # the write was to come in the next iteration, which never runs

        loop.create_task(last_words())
        loop.run_forever()
    finally:
        loop.close()
    assert stream.getvalue() == ""
    handler.flush()  # what logging.shutdown() does at exit
    assert stream.getvalue() == "stopping\n"


def test_a_loop_that_stopped_with_lines_pending_does_not_hold_back_the_next_ones(
    logged: tuple[logging.Logger, CountingStream, LoopBatchedHandler],
) -> None:
    log, stream, _ = logged
    first = asyncio.new_event_loop()
    try:

        async def last_words() -> None:
            log.info("first loop")
            first.stop()  # its write never runs

        first.create_task(last_words())
        first.run_forever()
    finally:
        first.close()

    async def next_loop() -> None:
        log.info("second loop")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(next_loop())  # no flush: the second loop writes both, in order
    assert stream.getvalue() == "first loop\nsecond loop\n"


def test_an_exception_is_formatted_when_logged(
    logged: tuple[logging.Logger, CountingStream, LoopBatchedHandler],
) -> None:
    log, stream, handler = logged
    handler.setFormatter(make_formatter("text"))

    async def failing() -> None:
        try:
            raise ValueError("first")
        except ValueError:
            log.exception("it failed")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(failing())
    assert "it failed" in stream.getvalue()
    assert "ValueError: first" in stream.getvalue()


@pytest.mark.slow
def test_the_daemon_logs_every_run_and_its_last_line(tmp_path: Path) -> None:
    # a real daemon: its runs' lines reach its stderr, and so does "Stopped", logged on
    # the loop as it ends (written by the flush at exit, if not by the loop)
    config = write_config(
        tmp_path / "etc",
        'jobs:\n  - {name: tick, command: "true", schedule: "* * * * * * *"}\n',
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        daemon.wait_log(r"Job tick finished", 20, count=2)
    finally:
        assert daemon.stop() == 0
    text = daemon.current()
    started = text.count("Job tick started")
    assert started >= 2
    assert text.count("Job tick finished") >= started - 1
    assert text.rstrip().splitlines()[-1].endswith("Stopped"), text[-2000:]
