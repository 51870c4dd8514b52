"""A log line for something that can happen thousands of times a second.

:class:`ThrottledLog` counts occurrences and writes at most one line per
interval, saying how many there were since its last line: the first occurrence
after a quiet interval is logged at once, the ones that follow within the
interval are counted and logged together when it ends.  No occurrence is lost
from the count, none gets a line (or a traceback) of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

LOG_INTERVAL = 60.0
"""Seconds between two lines of one throttled log."""


class ThrottledLog:
    """``message`` is %-formatted with the count and the kinds seen, e.g.
    ``"refused %(count)d connections (%(kinds)s)"``."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        message: str,
        interval: float = LOG_INTERVAL,
    ) -> None:
        self.logger = logger
        self.level = level
        self.message = message
        self.interval = interval
        self.total = 0
        """Every occurrence since this log was made."""
        self.lines = 0
        """Lines written."""
        self._pending: Counter[str] = Counter()
        self._last: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def add(self, kind: str = "", count: int = 1) -> None:
        """``count`` more occurrences of ``kind`` (shown in the line as ``kind ×N``)."""
        self.total += count
        self._pending[kind] += count
        if self._handle is not None:
            return  # the line at the end of this interval will say it
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._last is None or now - self._last >= self.interval:
            self.flush()
        else:
            self._handle = loop.call_at(self._last + self.interval, self.flush)

    def flush(self) -> None:
        """Write the line for what was counted since the last one (nothing if nothing was)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._pending:
            return
        count = sum(self._pending.values())
        kinds = ", ".join(
            f"{kind} ×{n}" if n > 1 else kind for kind, n in self._pending.most_common() if kind
        )
        self._pending.clear()
        self._last = asyncio.get_running_loop().time()
        self.lines += 1
        self.logger.log(self.level, self.message, {"count": count, "kinds": kinds or "-"})

    def close(self) -> None:
        """Write what is pending now and stop the timer."""
        self.flush()
