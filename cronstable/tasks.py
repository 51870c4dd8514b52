"""Background tasks with an owner: :class:`TaskSet`.

Every task a component starts and does not await on the spot (a replaced store
being closed, a report being sent, a connection's TLS handshake) goes into the
component's :class:`TaskSet`.  The set keeps a reference until the task ends (the
event loop keeps only a weak one), logs a task that failed (else its error would
be seen only as "Task exception was never retrieved", or never), and lets the
owner wait for, or cancel, what is still going when it stops.

A leaf: the standard library only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class TaskSet:
    """The background tasks of one owner (``owner`` names it in log lines)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(
        self, coroutine: Coroutine[Any, Any, T], *, name: str | None = None
    ) -> asyncio.Task[T]:
        """Run ``coroutine`` as a task of this set."""
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self.add(task)
        return task

    def add(self, task: asyncio.Task[Any]) -> None:
        """Own ``task`` (started elsewhere) until it ends."""
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def discard(self, task: asyncio.Task[Any]) -> None:
        """Forget ``task`` (an ended task is forgotten by itself)."""
        self._tasks.discard(task)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error(
                "%s: the background task %s failed; please report this",
                self.owner,
                task.get_name(),
                exc_info=error,
            )

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    def pending(self) -> list[asyncio.Task[Any]]:
        """The tasks that have not ended yet."""
        return [task for task in self._tasks if not task.done()]

    async def wait(self, within: float | None = None) -> bool:
        """Wait until every task has ended, those started meanwhile too (at most ``within``
        seconds in all); whether they all did.  A task's error is not raised here."""
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        while pending := self.pending():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(pending, timeout=left)
        return True

    async def cancel(self, within: float | None = None) -> bool:
        """Cancel every task still going and wait for them to end (at most ``within``
        seconds in all); whether they all did."""
        for task in self.pending():
            task.cancel()
        return await self.wait(within)
