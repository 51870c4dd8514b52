"""The daemon's own log output: plain text or one JSON object per line.

Job lines carry structured fields (``extra=``): job, scheduled_time, attempt,
pid, outcome, exit_code, duration, fail_reason, missed, pids (processes
still holding a finished run's output pipes).  The JSON format
emits them beside time, level, logger and message; the text format shows the
message alone, which already names them.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

JOB_FIELDS = (
    "job",
    "scheduled_time",
    "attempt",
    "pid",
    "outcome",
    "exit_code",
    "duration",
    "fail_reason",
    "missed",
    "pids",
)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT`, with the time's text made once a second (a burst of job
    starts logs thousands of lines within one)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._second: int | None = None
        self._second_text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:
            self._second_text = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        return f"{self._second_text},{int(record.msecs):03d}"


def make_formatter(fmt: str) -> logging.Formatter:
    """The formatter of a ``--log-format`` (``text`` or ``json``)."""
    return JsonFormatter() if fmt == "json" else TextFormatter()


_CALLER_SOURCE = logging._srcfile


def lean_records(lean: bool) -> None:
    """Whether records skip what no format of cronstable's own shows: the caller (file,
    line, function: a walk up the stack for each record), thread and process.  A
    quarter of the cost of the two lines each run logs (measured: 27 against 21 µs).
    Made lean with the daemon's own logging (:func:`setup_logging`); a ``logging``
    section, whose formats and filters may use any of them, puts them back."""
    logging._srcfile = None if lean else _CALLER_SOURCE
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = not lean


@dataclass(frozen=True, slots=True)
class LogOverrides:
    """``-l`` and ``--log-format`` as given on the command line (None: not given).

    Given, they win over a configuration's ``logging`` section: :meth:`apply`
    runs after every one is installed.
    """

    level: str | None = None
    format: str | None = None

    def apply(self) -> None:
        """Set the root logger's level and the formatter of each of its handlers."""
        root = logging.getLogger()
        if self.level is not None:
            root.setLevel(self.level)
        if self.format is not None:
            for handler in root.handlers:
                handler.setFormatter(make_formatter(self.format))


class _Loop(Protocol):
    def call_soon(self, callback: Callable[[], object], /) -> object: ...


class LoopBatchedHandler(logging.StreamHandler[TextIO]):
    """A stream handler that writes the records logged on a running event loop's thread
    together, once the loop's current iteration is done: one write for a burst of
    records (a burst of job starts logs two lines a run) instead of one each.

    Every write releases the GIL, and with another thread busy (the state writer
    encoding the same burst's records) taking it back cost the loop's thread about
    12 µs of CPU a line and up to the interpreter's switch interval of wall time
    (measured: 21 µs of CPU and 371 µs of wall time a line, 9 µs for both alone).
    Records are formatted at once; only the writing waits.  A record logged on any
    other thread is written at once, after the loop's pending ones, so the order
    holds.  Pending records are written by :meth:`flush` too, which
    :func:`logging.shutdown` calls at exit: a daemon killed with SIGKILL loses at
    most the lines of the iteration it was killed in.
    """

    def __init__(self, stream: TextIO, running_loop: Callable[[], _Loop | None]) -> None:
        super().__init__(stream)
        self._running_loop = running_loop
        self._pending: list[str] = []
        self._scheduled_on: _Loop | None = None
        """The loop a write of the pending records is scheduled on (None: none is): a
        loop that stopped before running it must not hold back the next loop's lines."""

    def emit(self, record: logging.LogRecord) -> None:  # called with the handler's lock held
        try:
            loop = self._running_loop()
            if loop is None:
                self._write_pending()
                super().emit(record)
                return
            self._pending.append(self.format(record) + self.terminator)
            if self._scheduled_on is not loop:
                self._scheduled_on = loop
                loop.call_soon(self._write_later)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def _write_later(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # made by createLock()
            self._scheduled_on = None
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError:
            pass  # stderr itself is gone: there is nowhere left to say so

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write_pending()
        super().flush()


def setup_logging(level: str, fmt: str) -> None:
    """Route the root logger to stderr in the chosen format (``text`` or ``json``): the
    daemon's, whose records logged on its event loop are written a loop iteration at a
    time (:class:`LoopBatchedHandler`)."""
    import asyncio  # the daemon's own logging: its event loop is about to run

    handler = LoopBatchedHandler(sys.stderr, asyncio._get_running_loop)
    handler.setFormatter(make_formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    lean_records(True)
    # watchfiles logs every batch of file events at INFO; the source logs what matters
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
