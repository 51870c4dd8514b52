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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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


def make_formatter(fmt: str) -> logging.Formatter:
    """The formatter of a ``--log-format`` (``text`` or ``json``)."""
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


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


def setup_logging(level: str, fmt: str) -> None:
    """Route the root logger to stderr in the chosen format (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # watchfiles logs every batch of file events at INFO; the source logs what matters
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
