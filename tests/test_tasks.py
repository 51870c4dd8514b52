"""TaskSet: background tasks kept until they end, a failure logged, waited for or
cancelled by their owner; Later: a reference set once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cronstable.later import Later
from cronstable.tasks import TaskSet

pytestmark = [pytest.mark.timeout(30)]


@pytest.mark.asyncio
async def test_a_task_is_kept_until_it_ends_and_waited_for() -> None:
    tasks = TaskSet("the owner")
    gate = asyncio.Event()
    done: list[str] = []

    async def work(name: str) -> None:
        await gate.wait()
        done.append(name)
        if name == "first":  # one started while the owner waits is waited for too
            tasks.start(work("late"), name="late")

    tasks.start(work("first"), name="first")
    assert len(tasks) == 1 and len(tasks.pending()) == 1
    assert not await tasks.wait(within=0.05)  # still going
    gate.set()
    assert await tasks.wait(within=5)
    assert done == ["first", "late"]
    await asyncio.sleep(0)
    assert len(tasks) == 0


@pytest.mark.asyncio
async def test_a_failed_task_is_logged_and_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskSet("the owner")

    async def fail() -> None:
        raise RuntimeError("boom")

    tasks.start(fail(), name="failing")
    assert await tasks.wait(within=5)  # never raises a task's error
    await asyncio.sleep(0)
    assert len(tasks) == 0
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "the owner: the background task failing failed" in record.getMessage()
    assert record.exc_info is not None and "boom" in str(record.exc_info[1])


@pytest.mark.asyncio
async def test_cancel_ends_every_task_and_waits_for_them() -> None:
    tasks = TaskSet("the owner")
    cleaned: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # its clean-up runs before cancel returns
            cleaned.append(True)

    started = [tasks.start(forever()) for _ in range(3)]
    outside = asyncio.get_running_loop().create_task(forever())
    tasks.add(outside)
    await asyncio.sleep(0)
    assert await tasks.cancel(within=5)
    assert cleaned == [True] * 4 and all(t.cancelled() for t in [*started, outside])


def test_later_is_set_once_and_not_used_before() -> None:
    later: Later[int] = Later("the number")
    with pytest.raises(RuntimeError, match="the number was used before it was built"):
        later()
    later.set(7)
    assert later() == 7
    with pytest.raises(RuntimeError, match="already set"):
        later.set(8)
