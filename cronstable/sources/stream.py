"""A configuration read once per request: ``run -c -``, ``/dev/stdin``, a FIFO.

* At start the stream is read to its end, as one file (:mod:`cronstable.config.onefile`:
  include and env_file are refused).
* A reload request (SIGHUP) reads it again, in the background: a FIFO waits for a
  writer to open it (write the new configuration to it, before or after the signal),
  and its content is the next revision.  Standard input at its end, a drained pipe,
  gives no bytes: the daemon logs that the stream gives its bytes once and keeps the
  loaded configuration.  Requests that arrive while a read waits share that read.
* Nothing is watched otherwise, and nothing is cached: there is nothing to re-read
  after a restart.

Reads run in a daemon thread of their own, so one waiting on a FIFO never holds the
daemon's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import threading
from collections.abc import AsyncIterator

from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.config.onefile import display_name, read_once
from cronstable.snapshot import Snapshot, content_revision
from cronstable.sources.base import Source, SourceError

logger = logging.getLogger(__name__)


class StreamSource(Source):
    kind = "stream"

    def __init__(self, path: str, *, limits: Limits = DEFAULT_LIMITS) -> None:
        self.path = path
        self.limits = limits
        self.name = display_name(path)
        self.description = self.name
        try:
            self._fifo = stat.S_ISFIFO(os.stat(path).st_mode)
        except (OSError, ValueError):
            self._fifo = False
        self._pending: list[Snapshot] = []
        self._last: str | None = None
        self._reading: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False

    async def _read(self) -> bytes:
        """The stream's bytes, read in a daemon thread (a FIFO may wait for a writer)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()

        def deliver(data: bytes | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(data or b"")

        def work() -> None:
            data: bytes | None = None
            error: BaseException | None = None
            try:
                data = read_once(self.path, self.limits.max_file_bytes)
            except BaseException as exc:  # handed to the loop, raised there
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(deliver, data, error)

        threading.Thread(target=work, name=f"read {self.name}", daemon=True).start()
        return await future

    def _snapshot(self, data: bytes) -> Snapshot:
        files = {self.name: data}
        return Snapshot(content_revision(files), self.description, files, self.name, read_once=True)

    async def start(self) -> None:
        try:
            data = await self._read()
        except OSError as exc:
            raise SourceError(f"{self.name}: {exc.strerror or exc}") from exc
        if not data:
            raise SourceError(f"{self.name}: read no configuration (it gave no bytes)")
        self.contacted()
        first = self._snapshot(data)
        self._pending.append(first)
        self._last = first.revision

    def contact_window(self) -> None:
        """Read once: there is no origin to follow, so readiness asks nothing of it."""
        return None

    def watch(self) -> AsyncIterator[Snapshot]:
        return self._watch()

    async def _watch(self) -> AsyncIterator[Snapshot]:
        while not self._closed:
            if self._pending:
                yield self._pending.pop(0)
                continue
            self._wake.clear()
            await self._wake.wait()

    def nudge(self, revision: str | None = None) -> None:
        if self._closed:
            return
        if self._reading is not None and not self._reading.done():
            logger.info("%s: a read is already waiting; this request shares it", self.name)
            return
        self._reading = asyncio.ensure_future(self._reload())

    async def _reload(self) -> None:
        waits = " (waiting for a writer to open the FIFO)" if self._fifo else ""
        logger.info("%s: reading the configuration again%s", self.name, waits)
        try:
            data = await self._read()
        except OSError as exc:
            self.contact_failed()
            logger.error(
                "%s: cannot read it again: %s; keeping the loaded configuration",
                self.name,
                exc.strerror or exc,
            )
            return
        if self._closed:
            return
        if not data:
            logger.warning(
                "Reload read no configuration from %s, which gives its bytes once; "
                "keeping the loaded configuration (restart the daemon to load another)",
                self.name,
            )
            return
        snapshot = self._snapshot(data)
        if snapshot.revision == self._last:
            logger.info("%s: unchanged (%s)", self.name, snapshot.revision)
            return
        self._last = snapshot.revision
        self._pending.append(snapshot)
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
