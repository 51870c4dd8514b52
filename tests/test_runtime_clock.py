"""The real clock's waits: a wake ends them, a deadline ends them on time.

For a ``precise`` deadline (a fire) the loop's wait ends short of it and the
thread sleeps the last few milliseconds itself (:data:`cronstable.runtime.clock.SETTLE`);
any other deadline (a poll) is the loop's alone.  These tests check the split and
that a caller's loop reaches its deadline, never how precisely (timing is the
bench's: bench/bench_scale.py, fire lateness).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from cronstable.runtime import clock as clock_module
from cronstable.runtime.clock import LEAD, MAX_SLEEP, SETTLE, SystemClock

pytestmark = pytest.mark.timeout(30)
async_test = pytest.mark.asyncio

_T = TypeVar("_T")

SLEW = timedelta(microseconds=50)
"""What the wall clock may fall behind the monotonic one over a few milliseconds
while NTP slews it (500 ppm at most): a deadline counts as reached within it."""


@pytest.fixture
def loop_waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The timeouts the clock gives the event loop's waits, in order."""
    given: list[float] = []
    real = asyncio.wait_for

    def recording(waited: Awaitable[_T], timeout: float | None) -> Awaitable[_T]:
        assert timeout is not None
        given.append(timeout)
        return real(waited, timeout)

    monkeypatch.setattr(clock_module.asyncio, "wait_for", recording)
    yield given


async def _loop_turned(waiting: Awaitable[None]) -> bool:
    """Whether a callback queued just before ``waiting`` ran while it was awaited: the
    loop had a turn (the wait was the loop's, not the thread's own sleep)."""
    ran: list[bool] = []
    asyncio.get_running_loop().call_soon(ran.append, True)
    await waiting
    return ran == [True]


@async_test
@pytest.mark.parametrize("precise", [True, False])
async def test_a_wake_already_set_returns_at_once(loop_waits: list[float], precise: bool) -> None:
    clock = SystemClock()
    wake = asyncio.Event()
    wake.set()
    await clock.sleep_until(clock.now() + timedelta(hours=1), wake, precise=precise)
    assert loop_waits == []


@async_test
async def test_a_precise_deadline_passed_returns_after_one_turn(loop_waits: list[float]) -> None:
    clock = SystemClock()
    past = clock.now() - timedelta(seconds=1)
    # the loop's other work had its turn
    assert await _loop_turned(clock.sleep_until(past, asyncio.Event(), precise=True))
    assert loop_waits == []


async def _woken_in_20_ms(deadline_in: float | None) -> None:
    """A precise wait for a deadline ``deadline_in`` seconds away (None: none) that a
    wake ends 20 ms in: what the tests look at is the loop's wait it began."""
    clock = SystemClock()
    wake = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, wake.set)
    deadline = None if deadline_in is None else clock.now() + timedelta(seconds=deadline_in)
    async with asyncio.timeout(10):
        await clock.sleep_until(deadline, wake, precise=True)
    assert wake.is_set()


@async_test
async def test_a_wake_ends_a_wait_without_deadline(loop_waits: list[float]) -> None:
    await _woken_in_20_ms(None)
    assert loop_waits == [MAX_SLEEP]


@async_test
async def test_the_loop_wait_aims_short_of_a_precise_deadline(loop_waits: list[float]) -> None:
    await _woken_in_20_ms(1.0)  # not a second's wait: the wake ends it
    (given,) = loop_waits
    # the kernel's thousandth and LEAD taken off: the loop's wait ends before the deadline
    assert given <= 1.0 - LEAD - 0.9 / 1000
    assert given > 1.0 - LEAD - 1.0 / 1000 - 0.5  # and not long before it


@async_test
async def test_a_far_precise_deadline_is_waited_for_in_capped_turns(
    loop_waits: list[float],
) -> None:
    await _woken_in_20_ms(MAX_SLEEP + 5)
    assert loop_waits == [MAX_SLEEP]


@async_test
async def test_a_precise_deadline_just_past_the_cap_is_aimed_short_of(
    loop_waits: list[float],
) -> None:
    """A fire 30.01 s away: a plain 30 s wait could overrun it by the kernel's 30 ms."""
    await _woken_in_20_ms(MAX_SLEEP + 0.01)
    (given,) = loop_waits
    assert given < MAX_SLEEP


@async_test
async def test_the_last_milliseconds_are_slept_by_the_thread(loop_waits: list[float]) -> None:
    clock = SystemClock()
    deadline = clock.now() + timedelta(seconds=SETTLE / 2)
    # without handing the loop over: no callback ran meanwhile
    assert not await _loop_turned(clock.sleep_until(deadline, asyncio.Event(), precise=True))
    assert clock.now() >= deadline - SLEW  # reached in the one call
    assert loop_waits == []


@async_test
async def test_a_poll_deadline_is_the_loops_alone(loop_waits: list[float]) -> None:
    """Not precise (a pool's poll): never the thread's sleep, however close."""
    clock = SystemClock()
    deadline = clock.now() + timedelta(seconds=SETTLE / 2)
    assert await _loop_turned(clock.sleep_until(deadline, asyncio.Event()))
    assert len(loop_waits) == 1 and 0 < loop_waits[0] <= SETTLE / 2


@async_test
async def test_one_call_ends_at_a_precise_deadline(loop_waits: list[float]) -> None:
    """The loop's wait ends short of the deadline, the thread sleeps the rest: the
    caller wakes once, at its deadline (asyncio's timers here never fire early)."""
    clock = SystemClock()
    deadline = clock.now() + timedelta(milliseconds=50)
    await clock.sleep_until(deadline, asyncio.Event(), precise=True)
    assert clock.now() >= deadline - SLEW
    (given,) = loop_waits
    assert given < 0.050 - LEAD


class _SteppedBack(SystemClock):
    """The wall clock steps back an hour once the first reading was taken (the one
    :meth:`SystemClock.sleep_until` starts from)."""

    def __init__(self) -> None:
        self.readings = 0

    def now(self) -> datetime:
        self.readings += 1
        real = super().now()
        return real if self.readings == 1 else real - timedelta(hours=1)


@async_test
async def test_the_rest_is_measured_on_the_monotonic_clock() -> None:
    """A step of the wall clock during the wait does not cut it short: the call ends
    when it was asked to, and the caller notices the step then."""
    clock = _SteppedBack()
    started = time.monotonic()
    deadline = datetime.now(UTC) + timedelta(milliseconds=50)
    await clock.sleep_until(deadline, asyncio.Event(), precise=True)
    assert time.monotonic() - started >= 0.050 - SLEW.total_seconds()


@async_test
async def test_a_cancel_from_outside_goes_through(loop_waits: list[float]) -> None:
    """Shutdown cancels the scheduler while it waits: the wait must not swallow it."""
    clock = SystemClock()
    waiting = asyncio.create_task(
        clock.sleep_until(clock.now() + timedelta(seconds=5), asyncio.Event(), precise=True)
    )
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def _reach(deadline_in: float) -> int:
    """The scheduler's use: sleep, re-read the clock, sleep again until the deadline;
    how many calls it took (a precise wait returns at its deadline: one)."""
    clock = SystemClock()
    deadline = clock.now() + timedelta(seconds=deadline_in)
    calls = 0
    while clock.now() < deadline - SLEW:
        calls += 1
        assert calls <= 6, "the waits do not converge on the deadline"
        await clock.sleep_until(deadline, asyncio.Event(), precise=True)
    return calls


@async_test
async def test_a_caller_reaches_its_deadline_in_one_call() -> None:
    assert await _reach(0.060) == 1


def test_a_caller_reaches_its_deadline_in_one_call_on_uvloop() -> None:
    """uvloop reckons its timers in whole milliseconds from the time its turn began:
    one may fire a little early, and the clock then waits again itself."""
    uvloop: Any = pytest.importorskip("uvloop")
    assert uvloop.run(_reach(0.060)) == 1
