"""A real daemon core (applier, scheduler, real processes) with its web section, in-process."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.reconcile.apply import RevisionRecord
from cronstable.runtime.clock import Clock
from cronstable.runtime.daemon import Daemon
from cronstable.snapshot import Snapshot, content_revision
from cronstable.sources.factory import open_source


def section_named(daemon: Daemon, name: str) -> Any:
    """The section ``name`` of a daemon build_daemon built (``web``, ``cluster`` …)."""
    return next(s for s in daemon.applier.sections if s.name == name)


class Stack:
    def __init__(
        self,
        root: Path,
        node: str = "localhost",
        clock: Clock | None = None,
        state_dir: Path | None = None,
    ) -> None:
        """``state_dir``: the ``--state-dir`` (default ``root/.state``; one directory for
        several stacks is a shared one, ``state: {backend: filesystem, shared: true}``)."""
        facts = NodeFacts(name=node, state_dir=state_dir or root / ".state")
        self.daemon = build_daemon(open_source(str(root)), facts, clock=clock)
        self.web = section_named(self.daemon, "web")
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
        for what, close in self.daemon.closing:
            if what == "run channels":  # the node's socket, which outlives every run
                await close()
        await self.web.close()
