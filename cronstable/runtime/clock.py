"""Time as the scheduler sees it, injectable so schedule tests run in milliseconds.

The scheduler reads the wall clock (fires are wall-clock instants) and a
monotonic clock (to notice when the wall clock jumps), and sleeps until a
wall-clock deadline or until something wakes it.

:class:`SystemClock` is the real one.  :class:`ManualClock` is a complete
clock whose time moves only when a test moves it; sleepers wake in deadline
order as it advances, so days of schedule run in milliseconds.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import select
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

MAX_SLEEP = 30.0
"""Longest single sleep of the real clock: asyncio sleeps on the monotonic clock,
which stands still while the machine is suspended, so a long sleep would notice a
resume (or an NTP step) late."""


class Clock(Protocol):
    def now(self) -> datetime:
        """The wall-clock time, aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps."""
        ...

    async def sleep_until(
        self, deadline: datetime | None, wake: asyncio.Event, *, precise: bool = False
    ) -> None:
        """Return at ``deadline`` (None: never), when ``wake`` is set, or earlier.

        Callers re-read :meth:`now` after it returns: an early return is allowed.
        ``precise``: the deadline is a fire, worth a few milliseconds of the thread's
        own sleep (see :data:`SETTLE`); a poll's deadline is not.
        """
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep for a duration (retry back-off)."""
        ...


SETTLE = 0.003
"""Seconds before a precise deadline below which the thread sleeps the rest itself.

A wait of the event loop ends late: the kernel lets a poll's timeout run over by
a thousandth of it (a millisecond on a one-second wait) and the loops count their
timeouts in whole milliseconds, so a fire the loop alone waited for started 1-3 ms
after its second.  For a ``precise`` deadline the loop's wait therefore ends short
of it (by :data:`LEAD` and a thousandth of the wait), and what is left, when it is
at most this long, is slept by the thread on a high-resolution timer, late by tens
of microseconds.  That blocks the loop for at most this long per such wait, and
costs no CPU."""
LEAD = 0.002
"""Seconds a precise wait of the loop ends before its deadline, besides the kernel's
thousandth of the wait."""


def _short_of(seconds: float) -> float:
    """How long the loop waits for a precise deadline ``seconds`` away."""
    return seconds - LEAD - seconds / 1000


async def _wait(wake: asyncio.Event, seconds: float) -> bool:
    """Whether ``wake`` was set within ``seconds`` (the event loop's wait)."""
    try:
        await asyncio.wait_for(wake.wait(), seconds)
    except TimeoutError:
        return False
    return True


def _block_for(seconds: float) -> None:
    """Sleep the thread, on purpose, loop and all (at most :data:`SETTLE`).

    ``select`` with no descriptors, not :func:`time.sleep`: libfaketime (0.9.10) fails
    the latter's absolute monotonic sleep under ``FAKETIME_DONT_FAKE_MONOTONIC``."""
    select.select([], [], [], seconds)


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep_until(
        self, deadline: datetime | None, wake: asyncio.Event, *, precise: bool = False
    ) -> None:
        """Wait on the loop; for a ``precise`` deadline, until just short of it, the
        thread sleeping the rest (:data:`SETTLE`).

        A precise wait returns when ``wake`` is set, after :data:`MAX_SLEEP`, or at
        the deadline measured on the monotonic clock from the call: a wall clock that
        stepped meanwhile is the caller's to notice when it re-reads :meth:`now`, at
        the moment it asked to be woken (not a few milliseconds before it, in
        another second)."""
        if wake.is_set():
            return
        if deadline is None:
            await _wait(wake, MAX_SLEEP)
            return
        left = (deadline - self.now()).total_seconds()
        if not precise:
            await _wait(wake, min(MAX_SLEEP, max(0.0, left)))
            return
        if left <= 0:
            await asyncio.sleep(0)  # past due already: the loop's other work gets a turn
            return
        end = time.monotonic() + left
        while left > SETTLE:
            if _short_of(left) > MAX_SLEEP:
                await _wait(wake, MAX_SLEEP)
                return
            if await _wait(wake, _short_of(left)):
                return
            # a loop's timer may fire a little early (uvloop reckons from the time its
            # turn began): wait again, so that the caller wakes when it asked to
            left = end - time.monotonic()
        if left > 0:
            _block_for(left)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock driven by the test: ``await clock.advance(seconds)`` or ``clock.jump(...)``."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware start time")
        self._now = start.astimezone(UTC)
        self._mono = 1000.0
        self._sleepers: list[tuple[datetime, int, asyncio.Future[Any]]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    async def sleep_until(
        self, deadline: datetime | None, wake: asyncio.Event, *, precise: bool = False
    ) -> None:
        if wake.is_set() or (deadline is not None and deadline <= self._now):
            return
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if deadline is not None:
            heapq.heappush(self._sleepers, (deadline, next(self._seq), future))
        waiter: asyncio.Future[Any] = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({future, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not future.done():
                future.cancel()

    async def sleep(self, seconds: float) -> None:
        never = asyncio.Event()
        await self.sleep_until(self._now + timedelta(seconds=seconds), never)

    async def _settle(self) -> None:
        # let woken tasks run until they block again (they may spawn and sleep anew)
        for _ in range(20):
            await asyncio.sleep(0)

    async def advance(self, seconds: float, *, step: float | None = None) -> None:
        """Move time forward, waking every sleeper whose deadline passes, in order."""
        target = self._now + timedelta(seconds=seconds)
        await self._settle()
        while True:
            self._sleepers = [s for s in self._sleepers if not s[2].done()]
            heapq.heapify(self._sleepers)
            if not self._sleepers or self._sleepers[0][0] > target:
                break
            deadline, _, future = heapq.heappop(self._sleepers)
            if deadline > self._now:
                self._mono += (deadline - self._now).total_seconds()
                self._now = deadline
            future.set_result(None)
            await self._settle()
        self._mono += (target - self._now).total_seconds()
        self._now = target
        await self._settle()

    async def advance_to(self, moment: datetime) -> None:
        await self.advance((moment - self._now).total_seconds())

    def jump(self, seconds: float) -> None:
        """Step the wall clock without the monotonic clock (NTP step, suspend/resume).

        Forward, every sleeper whose deadline it passes wakes (an early return).
        Backward, every sleeper wakes at the same monotonic instant as before the
        step, as with :class:`SystemClock`, whose sleeps are durations on the
        monotonic clock: the deadlines move back with the wall clock.
        """
        step = timedelta(seconds=seconds)
        self._now += step
        if seconds < 0:
            self._sleepers = [(d + step, seq, f) for d, seq, f in self._sleepers if not f.done()]
            heapq.heapify(self._sleepers)
            return
        for deadline, _, future in self._sleepers:
            if deadline <= self._now and not future.done():
                future.set_result(None)
