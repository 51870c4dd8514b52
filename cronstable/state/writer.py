"""Queued, coalesced writes to a state store, in the background.

The scheduler's notifications must return at once, so records are written by
one task: :meth:`Writer.submit` queues the newest value of a key (a record, or
None to remove it) and replaces a value of that key still waiting, so a burst of
changes to one key costs one write.  Keys are written in the order of their
latest change, up to :data:`BATCH` of them in one call of the store
(:meth:`~cronstable.state.base.StateStore.apply`).  A write that fails keeps its key
queued (unless a newer value came meanwhile) and the task backs off
(:data:`BACKOFF_FIRST` doubling to :data:`BACKOFF_MAX`) before it tries again, so an
outage loses no record that was not superseded.  At most :data:`MAX_QUEUED` keys wait;
past that the oldest is dropped with a warning.

A writer made *held* queues without writing until :meth:`Writer.release`: the
state keeper holds its writes while it waits for a store that has not answered
yet, so the records a previous daemon left are read before any of this one's
replaces them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from cronstable.state.base import OP_TIMEOUT, Record, StateError, StateStore

logger = logging.getLogger(__name__)

MAX_QUEUED = 10_000
BATCH = 256
"""Keys written in one call of the store at most."""
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 5.0


class Writer:
    """See the module docstring.  ``on_result(ok, error)`` hears every write's outcome."""

    def __init__(
        self,
        store: StateStore,
        *,
        on_result: Callable[[bool, str | None], None] | None = None,
        max_queued: int = MAX_QUEUED,
        held: bool = False,
    ) -> None:
        self.store = store
        self.on_result = on_result
        self.max_queued = max_queued
        self.dropped = 0
        self._queued: dict[str, tuple[Record | None, list[asyncio.Future[bool]]]] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()
        if not held:
            self._open.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def held(self) -> bool:
        """Whether writes wait for :meth:`release`."""
        return not self._open.is_set()

    def release(self) -> None:
        """Write what is queued, and every record from now on."""
        self._open.set()

    def submit(self, key: str, record: Record | None) -> asyncio.Future[bool]:
        """Queue ``record`` (None: remove) for ``key``; the future says whether it (or a
        newer value of the key) was written (False when a write of it failed)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiting = self._queued.pop(key, None)
        futures = [*(waiting[1] if waiting else ()), future]
        if waiting is None and len(self._queued) >= self.max_queued:
            oldest = next(iter(self._queued))
            _, lost = self._queued.pop(oldest)
            _settle(lost, False)
            self.dropped += 1
            logger.warning(
                "State: %d records wait to be written; dropped %s", self.max_queued, oldest
            )
        self._queued[key] = (record, futures)
        self._idle.clear()
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="state-writer")
        return future

    def queued(self) -> int:
        return len(self._queued)

    def forget(self, key: str) -> None:
        """Drop what is queued for ``key`` unwritten (a held writer's record that came and
        went before anything was written: the store never had it)."""
        waiting = self._queued.pop(key, None)
        if waiting is not None:
            _settle(waiting[1], False)
        if not self._queued and self.held:
            self._idle.set()

    async def _run(self) -> None:
        backoff = BACKOFF_FIRST
        while not self._closing:
            if not self._open.is_set():
                await self._open.wait()
                continue
            if not self._queued:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            # up to BATCH keys, oldest change first, in one call of the store (a burst of
            # runs costs one round, not a round a record)
            batch = list(itertools.islice(self._queued.items(), BATCH))
            for key, _ in batch:
                del self._queued[key]
            try:
                await asyncio.wait_for(
                    self.store.apply([(key, record) for key, (record, _) in batch]),
                    timeout=OP_TIMEOUT,
                )
            except (StateError, TimeoutError) as exc:
                error = str(exc) or "no answer in time"
                for key, (record, futures) in batch:
                    _settle(futures, False)
                    if key not in self._queued:  # nothing newer: try this one again
                        self._queued[key] = (record, [])
                self._report(False, error)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            except Exception:
                logger.exception(
                    "State: writing %s failed unexpectedly; please report this", batch[0][0]
                )
                for _, (_, futures) in batch:
                    _settle(futures, False)
                continue
            backoff = BACKOFF_FIRST
            for _, (_, futures) in batch:
                _settle(futures, True)
            self._report(True, None)

    def _report(self, ok: bool, error: str | None) -> None:
        if self.on_result is not None:
            try:
                self.on_result(ok, error)
            except Exception:
                logger.exception("State: a write listener failed")

    async def flush(self, *, within: float) -> bool:
        """Wait until nothing is queued (at most ``within`` seconds); whether it emptied.
        A held writer does not wait: it writes nothing until released."""
        if self.held:
            return not self._queued
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=within)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop writing (what is still queued is lost; :meth:`flush` first)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # a cancel that wait_for swallows (Python 3.11) still ends the loop: _closing
            await asyncio.wait([task], timeout=OP_TIMEOUT)
        for _, futures in self._queued.values():
            _settle(futures, False)
        self._queued.clear()
        self._idle.set()


def _settle(futures: list[asyncio.Future[bool]], ok: bool) -> None:
    for future in futures:
        if not future.done():
            future.set_result(ok)
