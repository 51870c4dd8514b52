"""The single-node daemon: load a configuration, schedule it, reload it, stop cleanly.

* Start: the configuration is loaded and *prepared* (each job's user/group
  resolved, which fails if unknown or if the daemon may not switch); an invalid
  configuration exits 1 with every error.
* SIGHUP reloads now (yacron dies on SIGHUP).  A configuration that fails to
  load or prepare is logged with every error and the running one stays.
* SIGTERM/SIGINT stop spawning, cancel pending retries and wait for running
  jobs, then exit 0; a second signal stops the running jobs too.
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronstable.config import ConfigError, DesiredState, Job, Problem, load_path
from cronstable.runtime.clock import Clock, SystemClock
from cronstable.runtime.identity import Identity, IdentityError, resolve_identity
from cronstable.runtime.output import OutputMirror
from cronstable.runtime.process import JobProcess
from cronstable.runtime.scheduler import Scheduler

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A revision ready to commit: loaded, validated, identities resolved."""

    state: DesiredState
    identities: Mapping[str, Identity | None]


def prepare(state: DesiredState) -> Prepared:
    """Resolve what the machine must provide; raises ConfigError with every problem."""
    identities: dict[str, Identity | None] = {}
    problems: list[Problem] = []
    for name, job in state.jobs.items():
        try:
            identities[name] = resolve_identity(job.config.user, job.config.group)
        except IdentityError as exc:
            problems.append(Problem(job.file, job.line, None, (), f"job {name!r}: {exc.message}"))
    if problems:
        raise ConfigError(problems)
    return Prepared(state, identities)


class ProcessSpawner:
    """Creates the real runs; the identities follow the applied revision."""

    def __init__(self, mirror: OutputMirror | None) -> None:
        self.mirror = mirror
        self.identities: Mapping[str, Identity | None] = {}

    def __call__(self, job: Job, scheduled: datetime, attempt: int) -> JobProcess:
        return JobProcess(
            job,
            scheduled_time=scheduled,
            attempt=attempt,
            identity=self.identities.get(job.name),
            mirror=self.mirror,
        )


def log_problems(prefix: str, exc: ConfigError) -> None:
    logger.error(
        "%s: %d problem%s", prefix, len(exc.problems), "" if len(exc.problems) == 1 else "s"
    )
    for problem in exc.problems:
        logger.error("  %s", problem)


class Daemon:
    def __init__(
        self, config_path: str, *, clock: Clock | None = None, mirror: OutputMirror | None = None
    ) -> None:
        self.config_path = config_path
        self.mirror = mirror if mirror is not None else OutputMirror()
        self.spawner = ProcessSpawner(self.mirror)
        self.scheduler = Scheduler(clock or SystemClock(), self.spawner)
        self.applied: Prepared | None = None
        self._applied_logging: dict[str, Any] | None = None
        self._reload = asyncio.Event()
        self._signals = 0

    def load(self) -> Prepared:
        """Load and prepare the configuration (blocking: run it in a thread)."""
        return prepare(load_path(self.config_path))

    def apply(self, prepared: Prepared) -> None:
        """Commit a prepared revision: one swap of the job table."""
        self.spawner.identities = prepared.identities
        summary = self.scheduler.replace_jobs(prepared.state.jobs)
        self._apply_logging(prepared.state)
        self.applied = prepared
        logger.info(
            "Applied configuration %s: %d jobs (%d added, %d changed, %d removed), job-set id %s",
            self.config_path,
            len(prepared.state.jobs),
            len(summary.added),
            len(summary.changed),
            len(summary.removed),
            prepared.state.job_set_id,
        )

    def _apply_logging(self, state: DesiredState) -> None:
        wanted = state.logging.dict_config() if state.logging else None
        if wanted is None or wanted == self._applied_logging:
            return
        try:
            logging.config.dictConfig(wanted)
        except (ValueError, TypeError, AttributeError, ImportError) as exc:
            logger.error(
                "The logging section could not be applied (%s); see the "
                "logging.config dictionary schema in Python's documentation",
                exc,
            )
            return
        self._applied_logging = wanted

    def request_reload(self) -> None:
        self._reload.set()

    def request_stop(self) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info("Shutting down: no new runs; waiting for running jobs to finish")
            self.scheduler.stop()
        else:
            logger.warning("Second stop request: stopping running jobs")
            asyncio.ensure_future(self.scheduler.cancel_running())

    async def _reloader(self) -> None:
        while True:
            await self._reload.wait()
            self._reload.clear()
            logger.info("Reloading %s", self.config_path)
            try:
                prepared = await asyncio.to_thread(self.load)
            except ConfigError as exc:
                log_problems("Reload failed; keeping the running configuration", exc)
                continue
            self.apply(prepared)

    async def run(self) -> int:
        """Run until stopped; the process exit code."""
        try:
            prepared = await asyncio.to_thread(self.load)
        except ConfigError as exc:
            log_problems(f"Invalid configuration {self.config_path}", exc)
            return 1
        self.apply(prepared)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        reloader = asyncio.create_task(self._reloader())
        try:
            await self.scheduler.run()
        finally:
            reloader.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            await asyncio.to_thread(self.mirror.close)
        logger.info("Stopped")
        return 0
