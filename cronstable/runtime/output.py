"""Output of job processes: capture (head and tail of each stream) and mirroring.

:class:`StreamCapture` turns the bytes of one stream of one run into lines, keeps
the first and last lines of it within ``saveLimit`` and hands every complete line
to the :class:`OutputMirror`, which writes it, prefixed, to the daemon's own
stdout/stderr from a writer thread of its own.

Memory stays bounded whatever a job writes: the stream is read in chunks (never
``readline()``), a line longer than ``maxLineLength`` bytes is dropped while it
streams, and only ``saveLimit`` lines are retained.  Lines are kept as bytes and
decoded (UTF-8, invalid sequences replaced) only when :meth:`StreamCapture.text`
is asked for.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import sys
import threading
from typing import Literal, Protocol

logger = logging.getLogger(__name__)

StreamName = Literal["stdout", "stderr"]

CHUNK_SIZE = 64 * 1024
"""Bytes asked of the stream reader at a time."""

DEFAULT_MAX_PENDING = 16 * 1024 * 1024
"""Bytes the mirror may hold waiting for a slow terminal before dropping lines."""


class BinaryTarget(Protocol):
    """Where mirrored output goes: ``sys.stdout.buffer`` or any binary file-like object."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> object: ...


def discarded_marker(count: int) -> str:
    """The line standing in for ``count`` lines left out of captured text."""
    return f"[.... {count} lines discarded ...]"


class OutputMirror:
    """Writes job output lines to the daemon's stdout/stderr from one writer thread.

    :meth:`write` only queues (it never blocks the event loop, however slow the
    terminal or pipe behind the daemon's output is); the thread writes and flushes.
    The queue is bounded by bytes (``max_pending``): when the output cannot keep up,
    further lines are dropped and a note saying how many is written once it catches
    up.  One instance serves the whole daemon; :meth:`close` drains it and joins
    the thread (a blocking call: run it at shutdown, e.g. via ``asyncio.to_thread``).
    """

    def __init__(
        self,
        stdout: BinaryTarget | None = None,
        stderr: BinaryTarget | None = None,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self._targets: dict[StreamName, BinaryTarget] = {
            "stdout": stdout if stdout is not None else sys.stdout.buffer,
            "stderr": stderr if stderr is not None else sys.stderr.buffer,
        }
        self._max_pending = max_pending
        self._pending = 0
        self._dropped: dict[StreamName, int] = {"stdout": 0, "stderr": 0}
        self._failed: set[StreamName] = set()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[StreamName, bytes] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, name="cronstable-output-mirror", daemon=True
        )
        self._thread.start()

    def write(self, stream: StreamName, data: bytes) -> None:
        """Queue ``data`` (whole lines, newline-terminated) for the daemon's ``stream``."""
        if not data or self._closed:
            return
        size = len(data)
        with self._lock:
            if self._pending and self._pending + size > self._max_pending:
                self._dropped[stream] += data.count(b"\n")
                return
            self._pending += size
        self._queue.put((stream, data))

    def close(self, timeout: float | None = 5.0) -> None:
        """Write what is queued, then stop the thread (waiting at most ``timeout`` s).

        Idempotent; later writes are ignored.
        """
        if not self._closed:
            self._closed = True
            self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("output mirror: still writing after %s s; giving up on it", timeout)

    # ------------------------------------------------------------- writer thread

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while True:  # take everything already queued, then flush once
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            touched: set[StreamName] = set()
            for item in batch:
                if item is None:
                    stop = True
                    continue
                stream, data = item
                self._emit(stream, data)
                touched.add(stream)
                with self._lock:
                    self._pending -= len(data)
            with self._lock:
                notes = {s: n for s, n in self._dropped.items() if n}
                for s in notes:
                    self._dropped[s] = 0
            for stream, count in notes.items():
                note = f"[cronstable: {count} lines of job output not mirrored: output too slow]\n"
                self._emit(stream, note.encode())
                touched.add(stream)
            for stream in touched:
                self._flush(stream)

    def _emit(self, stream: StreamName, data: bytes) -> None:
        try:
            self._targets[stream].write(data)
        except Exception as exc:  # a broken terminal must not kill the thread
            self._target_failed(stream, exc)

    def _flush(self, stream: StreamName) -> None:
        try:
            self._targets[stream].flush()
        except Exception as exc:
            self._target_failed(stream, exc)

    def _target_failed(self, stream: StreamName, exc: Exception) -> None:
        if stream not in self._failed:
            self._failed.add(stream)
            logger.warning("output mirror: cannot write to the daemon's %s: %s", stream, exc)


class StreamCapture:
    """Lines of one output stream of one run: the first and last ones, and a count of the rest.

    Feed it bytes with :meth:`feed`/:meth:`feed_eof`, or connect its :meth:`protocol`
    to the stream's pipe.  The first ``save_limit // 2``
    lines and the last ``save_limit - save_limit // 2`` are kept; lines in between
    are counted in :attr:`discarded`.  A line longer than ``max_line_length`` bytes
    (newline excluded) is dropped as it streams, also counted in :attr:`discarded`,
    with one warning per stream.  A final line without a newline counts as a line.
    """

    def __init__(
        self,
        stream_name: StreamName,
        *,
        save_limit: int,
        max_line_length: int,
        job_name: str = "",
        mirror: OutputMirror | None = None,
        prefix: str = "",
    ) -> None:
        self.stream_name: StreamName = stream_name
        self.job_name = job_name
        self._max_line = max_line_length
        self._top_size = save_limit // 2
        self._top: list[bytes] = []
        self._bottom: collections.deque[bytes] = collections.deque(
            maxlen=save_limit - self._top_size
        )
        self._partial = bytearray()
        self._skipping = False
        self._warned = False
        self._discarded = 0
        self._produced = False
        self._ended = False
        self._mirror = mirror
        self._prefix = prefix.encode("utf-8", "replace")

    @property
    def discarded(self) -> int:
        """Lines left out of :meth:`text`: beyond ``save_limit``, or too long."""
        return self._discarded

    @property
    def produced(self) -> bool:
        """Whether the stream carried any byte at all (discarded lines included)."""
        return self._produced

    @property
    def ended(self) -> bool:
        """Whether the end of the stream was seen (:meth:`feed_eof`)."""
        return self._ended

    def text(self) -> str:
        """Kept lines, with a marker line where lines were discarded (when any were)."""
        parts = [b"\n".join(self._top)] if self._top else []
        if self._discarded:
            parts.append(discarded_marker(self._discarded).encode())
        if self._bottom:
            parts.append(b"\n".join(self._bottom))
        return b"\n".join(parts).decode("utf-8", "replace")

    def protocol(self, done: asyncio.Future[None]) -> CaptureProtocol:
        """A protocol for the stream's pipe that feeds this capture as bytes arrive and
        resolves ``done`` at its end: no reader, and no task of its own for every run."""
        return CaptureProtocol(self, done)

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the stream."""
        if not data:
            return
        self._produced = True
        if self._skipping:  # inside a line already known to be too long
            newline = data.find(b"\n")
            if newline < 0:
                return
            self._skipping = False
            data = data[newline + 1 :]
        lines = data.split(b"\n")
        rest = lines.pop()
        if lines and self._partial:
            self._partial += lines[0]
            lines[0] = bytes(self._partial)
            self._partial.clear()
        if lines:
            self._take(lines)
        if len(self._partial) + len(rest) > self._max_line:
            self._partial.clear()
            self._skipping = True
            self._drop_long_line()
        else:
            self._partial += rest

    def feed_eof(self) -> None:
        """End of the stream: a pending line without a newline is taken as the last line."""
        if self._partial:
            last = bytes(self._partial)
            self._partial.clear()
            self._take([last])
        self._skipping = False
        self._ended = True

    # ------------------------------------------------------------------ helpers

    def _take(self, lines: list[bytes]) -> None:
        if max(map(len, lines)) > self._max_line:
            kept = [line for line in lines if len(line) <= self._max_line]
            for _ in range(len(lines) - len(kept)):
                self._drop_long_line()
            lines = kept
            if not lines:
                return
        if self._mirror is not None:
            glue = b"\n" + self._prefix
            self._mirror.write(self.stream_name, self._prefix + glue.join(lines) + b"\n")
        room = self._top_size - len(self._top)
        if room > 0:
            self._top.extend(lines[:room])
            lines = lines[room:]
            if not lines:
                return
        keep = self._bottom.maxlen or 0
        overflow = len(self._bottom) + len(lines) - keep
        if overflow > 0:
            self._discarded += overflow
        if keep == 0:
            return
        self._bottom.extend(lines[-keep:])

    def _drop_long_line(self) -> None:
        self._discarded += 1
        if not self._warned:
            self._warned = True
            logger.warning(
                "job %s: %s line longer than %d bytes discarded "
                "(further such lines of this run's %s are discarded silently)",
                self.job_name,
                self.stream_name,
                self._max_line,
                self.stream_name,
            )


class CaptureProtocol(asyncio.Protocol):
    """A pipe's bytes fed to a :class:`StreamCapture` as they are read; ``done`` resolves
    once the pipe is closed (its end, or closed by the daemon), the capture fed its end."""

    def __init__(self, capture: StreamCapture, done: asyncio.Future[None]) -> None:
        self._capture = capture
        self._done = done

    def data_received(self, data: bytes) -> None:
        self._capture.feed(data)

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:  # a broken pipe ends the stream, not the run
            capture = self._capture
            logger.warning(
                "job %s: reading %s failed: %s", capture.job_name, capture.stream_name, exc
            )
        self._capture.feed_eof()
        if not self._done.done():
            self._done.set_result(None)
