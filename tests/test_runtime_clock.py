"""The real clock's waits: a wake ends them, a deadline ends them on time.

The loop's wait aims short of a deadline and the thread sleeps the last few
milliseconds itself (:data:`cronstable.runtime.clock.SETTLE`): these tests check
the split and that a caller's loop reaches its deadline, never how precisely
(timing is the bench's: bench/bench_scale.py, fire lateness).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronstable.runtime import clock as clock_module
from cronstable.runtime.clock import LEAD, MAX_SLEEP, SETTLE, SystemClock

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

SLEW = timedelta(microseconds=50)
"""What the wall clock may fall behind the monotonic one over a few milliseconds
while NTP slews it (500 ppm at most): a deadline counts as reached within it."""


@pytest.fixture
def loop_waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The timeouts the clock gives the event loop's waits, in order."""
    given: list[float] = []
    real = asyncio.timeout

    def recording(delay: float | None) -> Any:
        assert delay is not None
        given.append(delay)
        return real(delay)

    monkeypatch.setattr(clock_module.asyncio, "timeout", recording)
    yield given


async def test_a_deadline_passed_returns_at_once(loop_waits: list[float]) -> None:
    clock = SystemClock()
    await clock.sleep_until(clock.now() - timedelta(seconds=1), asyncio.Event())
    assert loop_waits == []


async def test_a_wake_already_set_returns_at_once(loop_waits: list[float]) -> None:
    clock = SystemClock()
    wake = asyncio.Event()
    wake.set()
    await clock.sleep_until(clock.now() + timedelta(hours=1), wake)
    assert loop_waits == []


async def test_a_wake_ends_a_wait_without_deadline(loop_waits: list[float]) -> None:
    clock = SystemClock()
    wake = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, wake.set)
    await asyncio.wait_for(clock.sleep_until(None, wake), 10)
    assert wake.is_set()
    assert loop_waits == [MAX_SLEEP]


async def test_the_loop_wait_aims_short_of_the_deadline(loop_waits: list[float]) -> None:
    clock = SystemClock()
    wake = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, wake.set)  # not a second's wait: a wake ends it
    before = clock.now()
    await asyncio.wait_for(clock.sleep_until(before + timedelta(seconds=1), wake), 10)
    (given,) = loop_waits
    # the kernel's thousandth and LEAD taken off: the loop's wait ends before the deadline
    assert given <= 1.0 - LEAD - 0.9 / 1000
    assert given > 1.0 - LEAD - 1.0 / 1000 - 0.5  # and not long before it


async def test_the_last_milliseconds_are_slept_by_the_thread(loop_waits: list[float]) -> None:
    clock = SystemClock()
    ran: list[bool] = []
    asyncio.get_running_loop().call_soon(ran.append, True)
    deadline = clock.now() + timedelta(seconds=SETTLE / 2)
    await clock.sleep_until(deadline, asyncio.Event())
    assert clock.now() >= deadline - SLEW  # reached in the one call
    assert ran == []  # without handing the loop over: no callback ran meanwhile
    assert loop_waits == []


async def test_one_call_ends_at_the_deadline(loop_waits: list[float]) -> None:
    """The loop's wait ends short of the deadline, the thread sleeps the rest: the
    caller wakes once, at its deadline (asyncio's timers here never fire early)."""
    clock = SystemClock()
    deadline = clock.now() + timedelta(milliseconds=50)
    await clock.sleep_until(deadline, asyncio.Event())
    assert clock.now() >= deadline - SLEW
    (given,) = loop_waits
    assert given < 0.050 - LEAD


async def test_a_caller_reaches_its_deadline_in_a_few_calls(loop_waits: list[float]) -> None:
    """The scheduler's use: sleep, re-read the clock, sleep again until the deadline."""
    clock = SystemClock()
    deadline = clock.now() + timedelta(milliseconds=60)
    calls = 0
    while clock.now() < deadline - SLEW:
        calls += 1
        assert calls <= 6, "the waits do not converge on the deadline"
        await clock.sleep_until(deadline, asyncio.Event())
    assert loop_waits and all(0 < given < 0.060 for given in loop_waits)


@contextlib.asynccontextmanager
async def _never(delay: float | None) -> AsyncIterator[None]:
    raise AssertionError("a wait within SETTLE of its deadline went to the loop")
    yield  # pragma: no cover


async def test_past_settle_a_wake_cannot_cut_the_sleep_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within SETTLE the call blocks (the loop is not asked): at most SETTLE, once."""
    monkeypatch.setattr(clock_module.asyncio, "timeout", _never)
    clock = SystemClock()
    wake = asyncio.Event()
    asyncio.get_running_loop().call_soon(wake.set)
    deadline = clock.now() + timedelta(seconds=SETTLE * 0.9)
    await clock.sleep_until(deadline, wake)
    assert clock.now() >= deadline - SLEW
    assert not wake.is_set()  # the loop did not run while the thread slept
