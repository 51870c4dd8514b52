"""Runs as the rest of the daemon hears of them: ids, the listener interface, the history.

* Every run has an id ``<job>@<scheduled UTC>#<attempt>``
  (``backup@2024-05-01T03:00:00Z#2``).
* The scheduler tells each :class:`RunListener` when a run starts and when it
  ends (metrics, the run history and, later, reporting listen).  A listener
  must not block and must not raise; an exception is logged and ignored.
* :class:`RunHistory` keeps the runs going now and the last
  :data:`HISTORY_PER_JOB` finished runs of each job, with at most
  :data:`OUTPUT_TAIL` bytes of each captured stream (the tail).  It is in
  memory until durable state lands.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from cronstable.runtime.process import RunResult

HISTORY_PER_JOB = 20
OUTPUT_TAIL = 64 * 1024
"""Bytes of each captured stream a finished run keeps (the end of it)."""

RunOutcome = Literal["succeeded", "failed", "replaced", "cancelled"]


def utc_text(moment: datetime) -> str:
    """``2024-05-01T03:00:00Z`` (microseconds kept when there are some)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")


def run_id(job: str, scheduled: datetime, attempt: int) -> str:
    return f"{job}@{utc_text(scheduled)}#{attempt}"


@dataclass(frozen=True, slots=True)
class RunStart:
    """A run that has started."""

    id: str
    job: str
    scheduled_time: datetime
    attempt: int
    started_at: datetime
    pid: int | None
    manual: bool
    """Started through the API rather than by the schedule or a retry."""


class RunListener(Protocol):
    def run_started(self, run: RunStart) -> None: ...

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None: ...


def _tail(text: str | None) -> tuple[str | None, int]:
    """The last :data:`OUTPUT_TAIL` bytes of ``text`` and how many bytes were dropped."""
    if text is None:
        return None, 0
    data = text.encode("utf-8", "replace")
    if len(data) <= OUTPUT_TAIL:
        return text, 0
    kept = data[-OUTPUT_TAIL:].decode("utf-8", "ignore")
    return kept, len(data) - len(kept.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class FinishedRun:
    start: RunStart
    outcome: RunOutcome
    exit_code: int | None
    finished_at: datetime
    duration: float
    fail_reason: str | None
    stdout: str | None
    stderr: str | None
    stdout_dropped: int
    """Bytes of stdout not kept: the capture's own discards plus what the tail cut."""
    stderr_dropped: int
    cpu_seconds: float | None = None
    """User + system CPU of the child and the descendants it reaped; None if never reaped."""
    max_rss: int | None = None
    """Bytes: the largest resident set among the child and the descendants it reaped."""

    def as_json(self) -> dict[str, Any]:
        return {
            **_start_json(self.start),
            "outcome": self.outcome,
            "exitCode": self.exit_code,
            "finishedAt": utc_text(self.finished_at),
            "duration": round(self.duration, 6),
            "failReason": self.fail_reason,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdoutDropped": self.stdout_dropped,
            "stderrDropped": self.stderr_dropped,
            "cpuSeconds": None if self.cpu_seconds is None else round(self.cpu_seconds, 6),
            "maxRss": self.max_rss,
        }


def _start_json(start: RunStart) -> dict[str, Any]:
    return {
        "id": start.id,
        "job": start.job,
        "scheduledTime": utc_text(start.scheduled_time),
        "attempt": start.attempt,
        "startedAt": utc_text(start.started_at),
        "pid": start.pid,
        "manual": start.manual,
    }


def running_json(start: RunStart) -> dict[str, Any]:
    return _start_json(start)


class RunHistory:
    """The runs going now and the last finished ones of every job (a :class:`RunListener`)."""

    def __init__(self, per_job: int = HISTORY_PER_JOB) -> None:
        self.per_job = per_job
        self._running: dict[str, dict[str, RunStart]] = {}
        self._finished: dict[str, deque[FinishedRun]] = {}

    def run_started(self, run: RunStart) -> None:
        self._running.setdefault(run.job, {})[run.id] = run

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        going = self._running.get(run.job)
        if going is not None:
            going.pop(run.id, None)
            if not going:
                del self._running[run.job]
        stdout, out_cut = _tail(result.stdout)
        stderr, err_cut = _tail(result.stderr)
        finished = FinishedRun(
            start=run,
            outcome=outcome,
            exit_code=result.returncode,
            finished_at=result.finished_at,
            duration=result.duration,
            fail_reason=result.fail_reason,
            stdout=stdout,
            stderr=stderr,
            stdout_dropped=result.stdout_discarded + out_cut,
            stderr_dropped=result.stderr_discarded + err_cut,
            cpu_seconds=result.cpu_seconds,
            max_rss=result.max_rss,
        )
        self._finished.setdefault(run.job, deque(maxlen=self.per_job)).append(finished)

    def running(self, job: str) -> list[RunStart]:
        return list(self._running.get(job, {}).values())

    def finished(self, job: str) -> list[FinishedRun]:
        """Newest last."""
        return list(self._finished.get(job, ()))

    def last(self, job: str) -> FinishedRun | None:
        runs = self._finished.get(job)
        return runs[-1] if runs else None

    def forget(self, jobs: Iterable[str]) -> None:
        """Drop the finished runs of jobs a revision removed (runs still going stay)."""
        for job in jobs:
            self._finished.pop(job, None)
