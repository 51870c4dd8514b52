"""A real daemon core (applier, scheduler, real processes) with its web section, in-process."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

from cronstable.reconcile.apply import RevisionRecord
from cronstable.runtime.daemon import Daemon
from cronstable.snapshot import Snapshot, content_revision
from cronstable.sources.factory import open_source
from cronstable.web.section import WebSection


class Stack:
    def __init__(self, root: Path) -> None:
        self.daemon = Daemon(open_source(str(root)))
        self.web = WebSection(self.daemon.control, self.daemon.metrics.registry)
        self.daemon.add_section(self.web)
        self._loop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.create_task(self.daemon.scheduler.run())

    async def apply(self, text: str) -> RevisionRecord:
        files = {"c.yaml": textwrap.dedent(text).encode()}
        snapshot = Snapshot(content_revision(files), "test", files, "c.yaml")
        self.daemon.source.contacted()  # the stack plays the source: its origin just answered
        return await self.daemon.applier.reconcile(snapshot)

    def url(self, index: int = 0) -> str:
        return self.web.urls()[index]

    async def stop(self) -> None:
        await self.daemon.scheduler.cancel_running()
        self.daemon.scheduler.stop()
        if self._loop is not None:
            await self._loop
        await self.web.close()
