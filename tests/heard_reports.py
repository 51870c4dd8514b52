"""A real ReportListener for tests: it writes down what the scheduler asks to report."""

from __future__ import annotations

from cronstable.config.desired import Job
from cronstable.ports import FinishedRun, MissedFire, Moment


class HeardReports:
    def __init__(self) -> None:
        self.moments: list[tuple[str, Moment, int]] = []
        """(job, moment, attempt) in the order they were asked for."""
        self.records: list[tuple[Job, FinishedRun, tuple[Moment, ...]]] = []
        self.missed: list[MissedFire] = []

    def run_reported(self, job: Job, run: FinishedRun, moments: tuple[Moment, ...]) -> None:
        self.records.append((job, run, moments))
        self.moments += [(job.name, moment, run.start.attempt) for moment in moments]

    def fire_missed(self, job: Job, missed: MissedFire) -> None:
        self.missed.append(missed)
