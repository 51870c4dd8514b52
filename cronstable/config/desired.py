"""DesiredState: what one configuration revision asks the daemon to run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import tzinfo

from cronstable.config.models import (
    ClusterConfig,
    JobConfig,
    LoggingConfig,
    MetricsConfig,
    StateConfig,
    WebConfig,
)
from cronstable.errors import KeyPath, Problem
from cronstable.schedule import Schedule

Position = tuple[str, int | None, int | None]
"""(file, line, column) of a key in the revision."""


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
    """Per-job fingerprint (:func:`cronstable.config.fingerprint.job_digest`)."""

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
    warnings: tuple[Problem, ...] = ()
    """What is accepted but probably not meant (a secret with two sources): located
    like problems; ``validate`` prints them and the daemon logs them."""
    positions: Mapping[KeyPath, Position] = field(default_factory=dict)
    """Where the ``web``, ``logging`` and ``cluster`` sections and every key and list item in them
    are written, for errors found after loading (binding a listener, building a handler)."""
    cluster: ClusterConfig | None = None
    """Leader election between the nodes (None: every job runs on every node)."""
    state: StateConfig | None = None
    """Durable state (None: retries, last fires and run history live in memory only)."""
    metrics: MetricsConfig | None = None
    """What ``GET /metrics`` serves (None: the defaults)."""
    groups: tuple[Mapping[str, Job], ...] = field(default=(), repr=False, compare=False)
    """Every job again, by the file (batch) it came from: a load with a cache hands a file
    that did not change the same mapping as the revision before, so a plan compares those
    by identity and the jobs of the others one by one (empty: compare every job)."""
    secrets: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    """The inline secrets written in the revision (see :mod:`cronstable.config.secrets`),
    masked in every error found after loading (:meth:`Problem.hiding`)."""

    def problem(self, key: KeyPath, message: str) -> Problem:
        """A problem about a section's value, at the nearest of ``key``'s positions."""
        for depth in range(len(key), 0, -1):
            where = self.positions.get(key[:depth])
            if where is not None:
                return Problem(where[0], where[1], where[2], key, message)
        return Problem("", None, None, key, message)
