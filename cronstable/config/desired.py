"""DesiredState: what one configuration revision asks the daemon to run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import tzinfo

from cronstable.config.models import JobConfig, LoggingConfig, WebConfig
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
