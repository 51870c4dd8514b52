"""DesiredState: what one configuration revision asks the daemon to run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import tzinfo

from cronstable.config.models import JobConfig, LoggingConfig, WebConfig
from cronstable.errors import KeyPath, Problem
from cronstable.schedule import Schedule


@dataclass(frozen=True, slots=True)
class Job:
    """A validated job with everything the runtime needs resolved."""

    config: JobConfig
    schedule: Schedule
    timezone: tzinfo
    environment: Mapping[str, str]
    """environment entries over env_file, by key; the daemon's own environment is not in it."""
    file: str
    """File that defines the job, relative to the configuration root."""
    line: int
    """Line of the job in that file."""
    digest: str
    """Per-job fingerprint (:func:`cronstable.fingerprint.job_digest`)."""

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True, slots=True)
class SectionSite:
    """Where a daemon-wide section is written, so later checks can point at it."""

    file: str
    """The file holding the section, as problems show it."""
    positions: Mapping[KeyPath, tuple[int, int]]
    """Line and column of the section's key and of its keys a few levels down,
    by document path (``("logging", "handlers", "file")``)."""

    def problem(self, key: KeyPath, message: str) -> Problem:
        """A problem at ``key``, located at the deepest part of it that has a position."""
        for depth in range(len(key), 0, -1):
            found = self.positions.get(key[:depth])
            if found is not None:
                return Problem(self.file, found[0], found[1], key, message)
        return Problem(self.file, None, None, key, message)


@dataclass(frozen=True, slots=True)
class DesiredState:
    """Frozen, fingerprinted result of loading one revision."""

    jobs: Mapping[str, Job]
    """Jobs by name, in configuration order."""
    web: WebConfig | None
    logging: LoggingConfig | None
    job_set_id: str
    files: tuple[str, ...]
    """Every file the load read (configuration and env files), in the order read."""
    directories: tuple[str, ...] = ()
    """Every directory whose configuration files the load listed (``""`` is the root)."""
    logging_site: SectionSite | None = None
    """Where the ``logging`` section is written (None without one)."""
