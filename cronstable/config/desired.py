"""DesiredState: what one configuration revision asks the daemon to run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import tzinfo

from cronstable.config.models import JobConfig, LoggingConfig, WebConfig
from cronstable.errors import KeyPath, Problem
from cronstable.schedule import Schedule


@dataclass(frozen=True, slots=True)
class SectionOrigin:
    """Where a daemon-wide section was written, so a later stage (binding a listener,
    reading a token file) can name the file, line and key of what failed."""

    file: str
    positions: Mapping[KeyPath, tuple[int, int]]
    """Line and column of every key and list item inside the section, by key path."""

    def problem(self, key: KeyPath, message: str) -> Problem:
        """A problem at ``key`` (located at its deepest known ancestor)."""
        for end in range(len(key), -1, -1):
            position = self.positions.get(key[:end])
            if position is not None:
                return Problem(self.file, position[0], position[1], key, message)
        return Problem(self.file, None, None, key, message)


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
    web_origin: SectionOrigin | None = None
    """Where the ``web`` section was written."""
