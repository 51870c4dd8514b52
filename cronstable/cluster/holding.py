"""What the holders of slots in a :class:`~cronstable.cluster.slots.SlotStore` share.

The slot guard of ``concurrencyScope: cluster`` (:mod:`.claims`) and the slots of
cluster pools and named locks (:mod:`.pool_slots`) each hold records in the
cluster's slot store and keep them by renewal.  :class:`SlotHolding` is their
common round: the store in use (swapped by :meth:`~SlotHolding.use`, closed by
:meth:`~SlotHolding.close`), one store operation at a time (``_io``), each one
bounded by half of ``leaseTtl`` (at least a second), a failing store counted
every time and logged once per outage, and :meth:`~SlotHolding._renew` called
every quarter of ``leaseTtl`` until closed.  What a hold means, and what a
renewal does with its answer, is the subclass's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from cronstable.cluster.slots import SlotError, SlotStore
from cronstable.redact import redact
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(slots=True)
class HoldingStats:
    store_failures: int = 0
    """Operations on the slot store that failed."""


class SlotHolding:
    """See the module docstring.  ``title`` starts every log line (``Cluster slots``);
    the renewal task is named after it."""

    def __init__(self, title: str, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.title = title
        self.monotonic = monotonic
        self.store: SlotStore | None = None
        self.stats: HoldingStats = HoldingStats()
        self._io = asyncio.Lock()
        """One store operation at a time: what is held is decided under it."""
        self._failing = False
        self._task: asyncio.Task[None] | None = None
        self._background = TaskSet(title)
        """Slots being freed."""
        self._closing = False

    @property
    def ttl(self) -> float:
        return self.store.ttl if self.store is not None else 0.0

    def use(self, store: SlotStore | None) -> SlotStore | None:
        """Hold slots in ``store`` from now on (None: none); the previous store, for the
        caller to close.  Slots held in the old one are taken in ``store`` at the next
        renewal."""
        old, self.store = self.store, store
        if store is not None and self._task is None:
            self._task = asyncio.create_task(
                self._rounds(), name=self.title.lower().replace(" ", "-")
            )
        return old

    async def close(self) -> None:
        """Stop renewing and close the store (etcd: its lease and slots end at once)."""
        self._closing = True
        task, self._task = self._task, None
        bound = max(1.0, 2 * self.ttl)
        if task is not None:
            task.cancel()
            # Python 3.11's wait_for can swallow a cancel: the loop checks _closing too
            await asyncio.wait([task], timeout=bound)
        await self._background.wait(within=bound)
        store, self.store = self.store, None
        if store is not None:
            try:
                await asyncio.wait_for(store.close(), timeout=max(1.0, store.ttl))
            except (SlotError, TimeoutError) as exc:
                logger.warning(
                    "%s: could not release the slots at stop (%s); they expire",
                    self.title,
                    redact(str(exc) or "no answer in time"),
                )
            self._closed()

    def _closed(self) -> None:
        """The store is closed: forget what was held in it."""

    async def _bounded(self, store: SlotStore, operation: Awaitable[_T]) -> _T:
        result = await asyncio.wait_for(operation, timeout=max(1.0, store.ttl / 2))
        if self._failing:
            self._failing = False
            logger.info("%s: the %s store answers again", self.title, store.backend)
        return result

    def _failed(self, store: SlotStore, exc: Exception) -> str:
        """Count and log (once per outage) a store failure; its reason."""
        self.stats.store_failures += 1
        reason = redact(str(exc) or "no answer in time")
        if not self._failing:
            self._failing = True
            logger.warning(
                "%s: the %s store does not answer: %s", self.title, store.backend, reason
            )
        return reason

    async def _rounds(self) -> None:
        while not self._closing:
            began = self.monotonic()
            try:
                await self._renew()
            except Exception:
                logger.exception(
                    "%s: a renewal failed unexpectedly; please report this", self.title
                )
            interval = self.ttl / 4 if self.ttl else 1.0
            await asyncio.sleep(max(0.05, interval - (self.monotonic() - began)))

    async def _renew(self) -> None:
        """One renewal round (under ``_io``, bounded): the subclass's."""
        raise NotImplementedError
