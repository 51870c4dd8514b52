"""The records of runs, as every part of the daemon hears of them.

* Every run has an id ``<job>@<scheduled UTC>#<attempt>``
  (``backup@2024-05-01T03:00:00Z#2``): :func:`run_id`.
* A run that started is a :class:`RunStart`; how it went, as the process layer
  tells it, a :class:`RunResult`; once it ended it has one :data:`RunOutcome`
  (:func:`run_outcome`) and one record, :class:`FinishedRun`: logs,
  ``/status``, metric labels and report templates all use the same strings.
  ``failed``, ``timed_out`` and ``spawn_failed`` are failures; ``replaced``
  (concurrencyPolicy Replace) and ``cancelled`` (an operator's cancel, a second
  stop signal) are not, and are never reported; nor is ``unknown``: a run a
  restarted daemon adopted (it outlived the daemon that started it, which alone
  could reap it and learn its exit status).  ``lost`` is a failure: a run of a
  ``Leader`` job on a node that died while it went (a new owner found its record,
  and the node no longer a member); it reports onFailure and onPermanentFailure
  (no retry follows: the process may still live on a partitioned node).
* A fire that did not run is a :class:`MissedFire` with one of the
  :data:`MissedReason` strings.
* What a finished run reports is one rule, :func:`report_moments`.

These are plain values: how the HTTP API shows them is :mod:`cronstable.web.encode`'s
business, how durable state stores them :mod:`cronstable.state.records`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Literal, get_args

SPAWN_FAILED_RETURNCODE = 127
"""Return code of a run whose command could not be started (as a shell reports it)."""

RunOutcome = Literal[
    "succeeded", "failed", "timed_out", "spawn_failed", "cancelled", "replaced", "unknown", "lost"
]
RUN_OUTCOMES: tuple[RunOutcome, ...] = get_args(RunOutcome)
FAILURES: frozenset[RunOutcome] = frozenset({"failed", "timed_out", "spawn_failed", "lost"})
"""The outcomes that are failures (reported, retried)."""

MissedReason = Literal[
    "forbid",
    "daemon_down",
    "clock_jump",
    "deadline",
    "pool_timeout",
    "pool_full",
    "buffer_full",
]
"""Why a fire did not run: skipped by concurrencyPolicy Forbid, missed while the daemon
was down, found too late after the clock jumped (or the daemon stalled), past
``startingDeadlineSeconds``, waited in its pool's queue past ``poolTimeout``, found
its pool's queue full, or found the job's buffer full (concurrencyPolicy BufferOne,
or BufferAll at ``bufferLimit``).  A launch that is not a fire (a retry, a start on
request) skipped by its pool is reported the same way."""
MISSED_REASONS: tuple[MissedReason, ...] = get_args(MissedReason)

Moment = Literal["failure", "permanent_failure", "success"]
"""A report moment: onFailure, onPermanentFailure, onSuccess."""


def utc_text(moment: datetime) -> str:
    """``2024-05-01T03:00:00Z`` (microseconds kept when there are some)."""
    if moment.tzinfo is UTC:
        return _utc_text(moment)
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")


@lru_cache(maxsize=4096)
def _utc_text(moment: datetime) -> str:
    """:func:`utc_text` of a moment in UTC, cached (bounded): a fire's time is written in
    several records of each of its runs, and the runs of one instant share it.  Only UTC
    moments are cached: two equal moments of another zone may differ in ``fold``, and
    so in the instant they stand for."""
    return moment.isoformat().replace("+00:00", "Z")


def run_id(job: str, scheduled: datetime, attempt: int) -> str:
    return f"{job}@{utc_text(scheduled)}#{attempt}"


def tail_text(text: str | None, limit: int) -> tuple[str | None, int]:
    """The last ``limit`` bytes of ``text`` and how many bytes were dropped."""
    if text is None:
        return None, 0
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text, 0
    kept = data[-limit:].decode("utf-8", "ignore")
    return kept, len(data) - len(kept.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class RunResult:
    """How one run of a job went."""

    job_name: str
    scheduled_time: datetime
    attempt: int
    """1 for the first run of a fire, 2 for its first retry, ..."""
    started_at: datetime
    """Aware UTC, from the wall clock given to the process layer."""
    finished_at: datetime
    duration: float
    """Seconds, measured on the monotonic clock."""
    returncode: int | None
    """Exit code; 127 when the spawn failed; -100 on executionTimeout; minus the
    signal number when killed otherwise; None if the child could not be reaped."""
    stdout: str | None
    """Captured text (head, discarded marker, tail); None when not captured."""
    stderr: str | None
    stdout_discarded: int
    stderr_discarded: int
    fail_reason: str | None
    """None for a success; otherwise why the run failed."""
    timed_out: bool
    cancelled: bool
    """Stopped by a cancel (Replace, shutdown), not by a timeout."""
    pid: int | None
    cpu_seconds: float | None = None
    """User + system CPU time of the child and the descendants it reaped; None when
    the child was never started or could not be reaped."""
    max_rss: int | None = None
    """Bytes: the largest resident set among the child and the descendants it reaped."""

    @property
    def failed(self) -> bool:
        return self.fail_reason is not None


def run_outcome(result: RunResult, *, replaced: bool = False) -> RunOutcome:
    """The outcome of a finished run (``replaced``: stopped by concurrencyPolicy Replace)."""
    if replaced:
        return "replaced"
    if result.cancelled:
        return "cancelled"
    if not result.failed:
        return "succeeded"
    if result.timed_out:
        return "timed_out"
    if result.pid is None and result.returncode == SPAWN_FAILED_RETURNCODE:
        return "spawn_failed"
    return "failed"


def report_moments(outcome: RunOutcome, retry_follows: bool) -> tuple[Moment, ...]:
    """What a finished run reports, in order (yacron's): a failure reports onFailure, and
    onPermanentFailure as well when no retry follows; a success reports onSuccess;
    replaced and cancelled runs report nothing."""
    if outcome == "succeeded":
        return ("success",)
    if outcome in FAILURES:
        return ("failure",) if retry_follows else ("failure", "permanent_failure")
    return ()


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
    pool_wait: float | None = None
    """Seconds the run waited in its pool's queue; None for a job with no pool."""
    planned_start: datetime | None = None
    """When a scheduled fire was to start: its fire delayed by the job's ``jitter`` (the
    fire itself without one); None for a run that starts when asked (a retry, a start on
    request, a backfill, an @reboot run)."""
    backfill: bool = False
    """One fire of a backfill (``scheduled_time`` is that fire)."""
    revision: str | None = None
    """The source revision the daemon ran when the run started (None: not known, as for
    a run adopted from a previous daemon, or read from a record older than the field)."""
    digest: str | None = None
    """The job's digest (:attr:`cronstable.config.desired.Job.digest`) the run started
    with (None: not known, as for :attr:`revision`)."""
    start_ticks: int | None = None
    """When the process started, in clock ticks since boot (``/proc/PID/stat`` field
    22), where the run knew it (the exec shim reads it); None: read it from /proc."""
    adopted: bool = False
    """A run that outlived the previous daemon, watched by this one (its ``running``
    record is the previous daemon's, already in the store)."""


@dataclass(frozen=True, slots=True)
class MissedFire:
    """Fires of one job that did not run, for one reason (``count`` of them, the first
    at ``scheduled_time``, the last at ``last_scheduled_time``)."""

    job: str
    scheduled_time: datetime
    reason: MissedReason
    count: int = 1
    last_scheduled_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """The one record of a run that ended."""

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

    @classmethod
    def of(
        cls, start: RunStart, result: RunResult, outcome: RunOutcome, keep: int | None = None
    ) -> FinishedRun:
        """The record of a run; ``keep``: bytes of each stream kept (the end), None for all
        (the capture's head, discarded marker and tail, as reports show them)."""
        stdout, out_cut = (result.stdout, 0) if keep is None else tail_text(result.stdout, keep)
        stderr, err_cut = (result.stderr, 0) if keep is None else tail_text(result.stderr, keep)
        return cls(
            start=start,
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

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES
