"""Who hears of runs: :class:`RunListener` (every start and end) and
:class:`ReportListener` (what is to be reported).

A listener must not block and must not raise; the scheduler logs an exception
and goes on.
"""

from __future__ import annotations

from typing import Protocol

from cronstable.config.desired import Job
from cronstable.ports.runs import FinishedRun, MissedFire, Moment, RunOutcome, RunResult, RunStart


class RunListener(Protocol):
    """Told when each run starts and ends (metrics, the run history, durable state,
    the live events)."""

    def run_started(self, run: RunStart) -> None: ...

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None: ...


class ReportListener(Protocol):
    """Hears what is to be reported, per finished run the report moments it calls for
    (:func:`~cronstable.ports.runs.report_moments`), and every missed fire."""

    def run_reported(self, job: Job, run: FinishedRun, moments: tuple[Moment, ...]) -> None:
        """``run`` (of ``job``, the definition that ran it) calls for ``moments``."""

    def fire_missed(self, job: Job, missed: MissedFire) -> None:
        """Fires of ``job`` did not run."""
