"""Concurrency slots in a shared directory (see :mod:`.slots` for the files).

Every operation takes the directory's lock (:mod:`.shareddir`, as the leadership
does), reads and writes a few small records, and lets go; the blocking work runs
in a thread.  A slot file keeps its fence counter when released (``expires: 0``),
so the fence only grows.  Host clocks must agree within the clock allowance.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cronstable.cluster.shareddir import (
    CLOCK_SKEW,
    FORMAT_VERSION,
    describe,
    live,
    locked,
    read,
    usable,
    write,
)
from cronstable.cluster.slots import Claim, Holder, SlotError, SlotStore, slot_name

_T = TypeVar("_T")


class FilesystemSlots(SlotStore):
    backend = "filesystem"

    def __init__(
        self, node: str, instance: str, *, ttl: float, path: str | Path, kind: str = "slots"
    ) -> None:
        """``kind``: the subdirectory (``slots``, or ``pools`` for cluster-scoped pools)."""
        super().__init__(node, instance, ttl=ttl)
        self.path = Path(path)
        self.kind = kind
        self.slots = self.path / kind

    def __repr__(self) -> str:
        return f"FilesystemSlots({str(self.path)!r})"

    def file(self, job: str) -> Path:
        return self.slots / f"{slot_name(job)}.json"

    def cancel_file(self, job: str) -> Path:
        return self.slots / f"{slot_name(job)}.cancel"

    async def _locked(self, work: Callable[[], _T]) -> _T:
        def run() -> _T:
            with locked(self.path, max(0.5, self.ttl / 4)):
                self.slots.mkdir(exist_ok=True)
                return work()

        try:
            return await asyncio.to_thread(run)
        except OSError as exc:  # LockBusy too
            raise SlotError(describe(self.path, exc)) from exc

    async def check(self) -> None:
        try:
            await asyncio.to_thread(usable, self.path, max(0.5, self.ttl / 4), (self.kind,))
        except OSError as exc:
            raise SlotError(describe(self.path, exc)) from exc

    async def claim(self, jobs: Sequence[str]) -> dict[str, Claim]:
        return await self._locked(lambda: {job: self._claim(job) for job in jobs})

    def _claim(self, job: str) -> Claim:
        now = time.time()
        held = read(self.file(job)) or {}
        expires = now + self.ttl
        mine = held.get("instance") == self.instance
        if mine and live(held, now):
            write(self.file(job), held | {"expires": expires})
            hold = _holder(held)
        elif not mine and live(held, now - CLOCK_SKEW):
            hold = _holder(held)
        else:
            hold = Holder(self.node, self.instance, _fence(held) + 1)
            self.cancel_file(job).unlink(missing_ok=True)
            write(
                self.file(job),
                {
                    "version": FORMAT_VERSION,
                    "job": job,
                    "node": hold.node,
                    "instance": hold.instance,
                    "fence": hold.fence,
                    "expires": expires,
                },
            )
            return Claim(hold)
        asked = read(self.cancel_file(job)) or {}
        aimed = (asked.get("instance"), asked.get("fence")) == (hold.instance, hold.fence)
        return Claim(hold, str(asked.get("by", "?")) if aimed else None)

    async def holder(self, job: str) -> Holder | None:
        def look() -> Holder | None:
            held = read(self.file(job))
            return _holder(held) if held and live(held, time.time() - CLOCK_SKEW) else None

        return await self._locked(look)

    async def release(self, job: str, hold: Holder) -> None:
        def free() -> None:
            held = read(self.file(job))
            if held is not None and _holder(held) == hold:
                write(self.file(job), held | {"expires": 0})  # the counter stays

        await self._locked(free)

    async def request_cancel(self, job: str, hold: Holder) -> None:
        record = {
            "version": FORMAT_VERSION,
            "job": job,
            "instance": hold.instance,
            "fence": hold.fence,
            "by": self.node,
        }
        await self._locked(lambda: write(self.cancel_file(job), record))


def _fence(record: dict[str, Any]) -> int:
    try:
        return int(record.get("fence", 0) or 0)
    except (TypeError, ValueError):
        return 0


def _holder(record: dict[str, Any]) -> Holder:
    return Holder(str(record.get("node", "?")), str(record.get("instance", "")), _fence(record))
