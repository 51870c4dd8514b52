"""The dispatcher: hears the scheduler, holds back floods, runs each reporter as a task.

* It is a :class:`~cronstable.ports.ReportListener`: for each report
  moment of a finished run (and each missed fire) it builds one
  :class:`~.base.Message` and starts one task per enabled reporter of that
  moment's ``report``.  It never blocks the scheduler: it only creates tasks.
* Each task is bounded by its reporter's ``timeout`` (all attempts together);
  a reporter that fails, hangs or raises is logged with the job's name and
  counted, and the others go on.
* Flood control: a moment's ``rateLimit`` (seconds) lets one report per job
  through per window (per reason, for missed fires); the ones held back are
  counted in ``cronstable_reports_suppressed_total`` and the next one sent says
  how many (``suppressed_count``).
* It is a daemon section as well: a commit brings the job-set id the templates
  show; :meth:`close`, when the daemon stops, waits for the reports in flight
  (each at most its timeout) and closes the reporters (Sentry's flush).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from cronstable.config.desired import DesiredState, Job
from cronstable.config.models import OnLate, OnMissed, OnPaused, OnReport, OnStale, OnStuck, Report
from cronstable.ports import FinishedRun, MissedFire, Moment, Pause, StuckRun, utc_text
from cronstable.reconcile.plan import Plan
from cronstable.redact import redact
from cronstable.reporting.base import Message, job_environment
from cronstable.reporting.registry import ReporterRegistry
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

WANTED_KEPT = 4096
"""Report settings whose "any reporter on?" answer is kept (:meth:`ReportDispatcher._wanted`)."""


class ReportDispatcher:
    name = "reporting"

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        revision: Callable[[], str | None] = lambda: None,
        reporters: ReporterRegistry | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reporters = reporters if reporters is not None else ReporterRegistry()
        self.revision = revision
        self.monotonic = monotonic
        self.job_set_id: str | None = None
        self.hostname = socket.gethostname()
        self._tasks = TaskSet("reporting")
        """The reports being sent."""
        self._windows: dict[tuple[str, ...], tuple[float, int]] = {}
        """(job, moment[, reason]) → (when the last report was let through, held back since)."""
        self._wanted_by: dict[int, tuple[Report, bool]] = {}
        """:meth:`_wanted`'s answers, by the model's id (at most :data:`WANTED_KEPT`)."""
        self.sent = Counter(
            "cronstable_reports",
            "Reports attempted, by reporter and result (sent, failed, timeout).",
            ["reporter", "result"],
            registry=registry,
        )
        self.suppressed = Counter(
            "cronstable_reports_suppressed",
            "Reports held back by a moment's rateLimit, by job and moment.",
            ["job", "moment"],
            registry=registry,
        )

    # ------------------------------------------------------------ section

    def affected(self, plan: Plan) -> bool:
        return True

    async def prepare(self, desired: DesiredState) -> None:
        return None  # nothing to build: commit reads the revision's job set

    def commit(self, prepared: None, desired: DesiredState) -> None:
        self.job_set_id = desired.job_set_id
        names = {*desired.jobs, *desired.workflows, *desired.tasks()}
        gone = [key for key in self._windows if key[0] not in names]
        for key in gone:
            del self._windows[key]

    async def discard(self, prepared: None) -> None:
        return None

    async def close(self) -> None:
        """Wait for the reports in flight (each bounded by its timeout), close reporters."""
        await self.drain()
        for reporter in self.reporters.made():
            try:
                await reporter.close()
            except Exception:
                logger.exception("Closing the %s reporter failed", reporter.key)

    async def drain(self) -> None:
        await self._tasks.wait()

    # ------------------------------------------------------------ listener

    def run_reported(self, job: Job, run: FinishedRun, moments: tuple[Moment, ...]) -> None:
        for moment in moments:
            settings: OnReport = {
                "failure": job.config.on_failure,
                "permanent_failure": job.config.on_permanent_failure,
                "success": job.config.on_success,
            }[moment]  # type: ignore[assignment]
            if not self._wanted(settings.report):
                continue
            held = self._let_through(job.name, (moment,), settings.rate_limit)
            if held is None:
                continue
            variables = self._run_variables(job, run, moment, held)
            self._dispatch(settings.report, Message(job, moment, variables, run=run))

    def fire_missed(self, job: Job, missed: MissedFire) -> None:
        settings: OnMissed = job.config.on_missed
        if not self._wanted(settings.report):
            return
        held = self._let_through(job.name, ("missed", missed.reason), settings.rate_limit)
        if held is None:
            return
        variables = {
            "name": job.name,
            "scheduled_time": utc_text(missed.scheduled_time),
            "last_scheduled_time": utc_text(missed.last_scheduled_time or missed.scheduled_time),
            "reason": missed.reason,
            "missed_count": missed.count,
            "success": False,
            "moment": "missed",
            "suppressed_count": held,
            **self._daemon_variables(),
            "command": job.config.command,
            "shell": job.config.shell,
            "environment": job_environment(job),
        }
        self._dispatch(settings.report, Message(job, "missed", variables, missed=missed))

    def pause_exceeded(self, job: Job, pause: Pause) -> None:
        """``job`` has been paused for longer than its ``onPaused.alertAfter``."""
        settings: OnPaused = job.config.on_paused
        if not self._wanted(settings.report):
            return
        held = self._let_through(job.name, ("paused",), settings.rate_limit)
        if held is None:
            return
        since = pause.since
        lasted = 0.0 if since is None else (datetime.now(UTC) - since).total_seconds()
        variables = {
            "name": job.name,
            "success": False,
            "moment": "paused",
            "reason": "paused",
            "pause_source": pause.source,
            "pause_reason": pause.reason,
            "paused_by": pause.by,
            "paused_since": utc_text(since) if since is not None else None,
            "paused_until": utc_text(pause.until) if pause.until is not None else None,
            "paused_for": _lasted(lasted),
            "paused_seconds": round(lasted, 3),
            "scheduled_time": utc_text(since) if since is not None else None,
            "suppressed_count": held,
            **self._daemon_variables(),
            "command": job.config.command,
            "shell": job.config.shell,
            "environment": job_environment(job),
        }
        logger.warning(
            "Job %s has been paused for %s (%s); reporting (onPaused)",
            job.name,
            variables["paused_for"],
            pause.source,
            extra={"job": job.name},
        )
        self._dispatch(settings.report, Message(job, "paused", variables))

    # ------------------------------------------------------------ late, stuck, stale

    def fire_late(self, job: Job, fire: datetime, planned: datetime, grace: float) -> None:
        """``job``'s fire at ``fire`` has not started within ``onLate.grace``."""
        settings: OnLate = job.config.on_late
        if not self._wanted(settings.report):
            return
        held = self._let_through(job.name, ("late",), settings.rate_limit)
        if held is None:
            return
        variables = {
            "name": job.name,
            "success": False,
            "moment": "late",
            "reason": "late",
            "scheduled_time": utc_text(fire),
            "planned_start": utc_text(planned),
            "grace": round(grace, 3),
            "suppressed_count": held,
            **self._job_variables(job),
        }
        self._dispatch(settings.report, Message(job, "late", variables))

    def run_stuck(self, job: Job, run: StuckRun) -> None:
        """A run of ``job`` has been going for longer than its ``onStuck`` threshold."""
        settings: OnStuck = job.config.on_stuck
        if not self._wanted(settings.report):
            return
        held = self._let_through(job.name, ("stuck",), settings.rate_limit)
        if held is None:
            return
        variables = {
            "name": job.name,
            "success": False,
            "moment": "stuck",
            "reason": "stuck",
            "run_id": run.id,
            "scheduled_time": utc_text(run.scheduled),
            "started_at": utc_text(run.started_at),
            "attempt": run.attempt,
            "pid": run.pid,
            "running_for": round(run.running_for, 3),
            "running_for_text": _lasted(run.running_for),
            "threshold": round(run.threshold, 3),
            "threshold_basis": run.basis,
            "suppressed_count": held,
            **self._job_variables(job),
        }
        self._dispatch(settings.report, Message(job, "stuck", variables))

    def success_stale(
        self, job: Job, last_success: datetime | None, age: float, limit: float
    ) -> None:
        """``job``'s last success is older than its ``onStale.maxSuccessAge``."""
        settings: OnStale = job.config.on_stale
        if not self._wanted(settings.report):
            return
        held = self._let_through(job.name, ("stale",), settings.rate_limit)
        if held is None:
            return
        variables = {
            "name": job.name,
            "success": False,
            "moment": "stale",
            "reason": "stale",
            "last_success": utc_text(last_success) if last_success is not None else None,
            "scheduled_time": utc_text(last_success) if last_success is not None else None,
            "success_age": round(age, 3),
            "success_age_text": _lasted(age),
            "max_success_age": round(limit, 3),
            "suppressed_count": held,
            **self._job_variables(job),
        }
        self._dispatch(settings.report, Message(job, "stale", variables))

    def _job_variables(self, job: Job) -> dict[str, Any]:
        return {
            **self._daemon_variables(),
            "command": job.config.command,
            "shell": job.config.shell,
            "environment": job_environment(job),
        }

    # ------------------------------------------------------------ internals

    def _wanted(self, report: Report) -> bool:
        """Whether any of ``report``'s reporters is on.  Asked at every run's end, and
        asking each reporter costs several µs: the answer is kept by model (frozen, and
        most jobs share one), the model held so that its id is not another's."""
        known = self._wanted_by.get(id(report))
        if known is not None and known[0] is report:
            return known[1]
        wanted = any(settings.enabled for settings in report.reporters().values())
        if len(self._wanted_by) >= WANTED_KEPT:  # past revisions' models: start again
            self._wanted_by.clear()
        self._wanted_by[id(report)] = (report, wanted)
        return wanted

    def _let_through(self, job: str, what: tuple[str, ...], rate_limit: float) -> int | None:
        """How many reports were held back before this one, or None to hold it back."""
        key = (job, *what)
        now = self.monotonic()
        last, held = self._windows.get(key, (None, 0))
        if rate_limit > 0 and last is not None and now - last < rate_limit:
            self._windows[key] = (last, held + 1)
            self.suppressed.labels(job, what[0]).inc()
            logger.info(
                "Job %s: %s report held back by rateLimit (%g s); %d held back so far",
                job,
                " ".join(what),
                rate_limit,
                held + 1,
                extra={"job": job},
            )
            return None
        self._windows[key] = (now, 0)
        return held

    def _daemon_variables(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "revision": self.revision(),
            "job_set_id": self.job_set_id,
        }

    def _run_variables(
        self, job: Job, run: FinishedRun, moment: Moment, held: int
    ) -> dict[str, Any]:
        start = run.start
        return {
            # yacron's
            "name": job.name,
            "success": run.outcome == "succeeded",
            "fail_reason": run.fail_reason,
            "stdout": run.stdout,
            "stderr": run.stderr,
            "exit_code": run.exit_code,
            "command": job.config.command,
            "shell": job.config.shell,
            "environment": job_environment(job),
            # ours
            "outcome": run.outcome,
            "moment": moment,
            "run_id": start.id,
            "scheduled_time": utc_text(start.scheduled_time),
            "started_at": utc_text(start.started_at),
            "finished_at": utc_text(run.finished_at),
            "attempt": start.attempt,
            "duration": round(run.duration, 3),
            "stdout_dropped": run.stdout_dropped,
            "stderr_dropped": run.stderr_dropped,
            "suppressed_count": held,
            **self._daemon_variables(),
        }

    def _dispatch(self, report: Report, message: Message) -> None:
        for key, settings in report.reporters().items():
            if not settings.enabled:
                continue
            self._tasks.start(
                self._send(key, settings, message), name=f"report {key} {message.job.name}"
            )

    async def _send(self, key: str, settings: Any, message: Message) -> None:
        name = message.job.name
        timeout = settings.timeout
        try:
            reporter = self.reporters.get(key)
            async with asyncio.timeout(timeout):
                await reporter.send(settings, message)
        except TimeoutError:
            self.sent.labels(key, "timeout").inc()
            logger.error(
                "Job %s: the %s report (%s) gave up after its timeout of %g s",
                name,
                key,
                message.moment,
                timeout,
                extra={"job": name, "reporter": key},
            )
        except Exception as exc:
            self.sent.labels(key, "failed").inc()
            logger.error(
                "Job %s: the %s report (%s) failed: %s",
                name,
                key,
                message.moment,
                redact(f"{type(exc).__name__}: {exc}"),
                extra={"job": name, "reporter": key},
            )
        else:
            self.sent.labels(key, "sent").inc()
            logger.info(
                "Job %s: %s report (%s) sent",
                name,
                key,
                message.moment,
                extra={"job": name, "reporter": key},
            )


def _lasted(seconds: float) -> str:
    """``3 h 20 min``, ``2 days 4 h``: how long a pause has lasted, for a report."""
    minutes = int(seconds // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} day{'' if days == 1 else 's'} {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else f"{int(seconds)} s"
