"""DesiredState: what one configuration revision asks the daemon to run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import tzinfo

from cronstable.config.models import (
    ClusterConfig,
    LoggingConfig,
    MetricsConfig,
    OnFailure,
    PoolConfig,
    RunSettings,
    StateConfig,
    WebConfig,
    WorkflowSettings,
)
from cronstable.errors import KeyPath, Problem
from cronstable.schedule import Schedule
from cronstable.workflows.dag import Dag, outline

Position = tuple[str, int | None, int | None]
"""(file, line, column) of a key in the revision."""


@dataclass(frozen=True, slots=True)
class Job:
    """A validated job with everything the runtime needs resolved; or a workflow's task
    (:attr:`workflow` set), named ``WORKFLOW.TASK``, which never fires on its own."""

    config: RunSettings
    """A :class:`~cronstable.config.models.JobConfig`, or a task's
    :class:`~cronstable.config.models.TaskConfig` (its name made ``WORKFLOW.TASK``)."""
    schedule: Schedule
    """The job's schedule; a task's is its workflow's (it fires only through the workflow)."""
    timezone: tzinfo
    environment: Mapping[str, str]
    """environment entries over env_file, by key; the daemon's own environment is not in it."""
    file: str
    """File that defines the job, relative to the configuration root."""
    line: int
    """Line of the job in that file."""
    digest: str
    """Per-job fingerprint (:func:`cronstable.config.fingerprint.job_digest`)."""
    workflow: str | None = None
    """The workflow whose task this is; None for a job."""

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def task(self) -> str | None:
        """The task's name within its workflow (``load`` of ``etl.load``); None for a job."""
        return None if self.workflow is None else self.name[len(self.workflow) + 1 :]


@dataclass(frozen=True, slots=True)
class Workflow:
    """A validated workflow: its settings, schedule, and tasks (each a :class:`Job`)."""

    config: WorkflowSettings
    schedule: Schedule
    timezone: tzinfo
    tasks: Mapping[str, Job]
    """Its tasks by their name within the workflow, in definition order."""
    dag: Dag
    """The tasks' dependencies and runWhen (:mod:`cronstable.workflows.dag`)."""
    file: str
    line: int
    digest: str
    """Fingerprint of the whole definition, tasks included
    (:func:`cronstable.config.fingerprint.workflow_digest`)."""
    job: Job
    """The workflow as the scheduler's fire logic, the cluster gate, durable state and the
    reporters see a job (:func:`workflow_job`): its name, schedule, zone, enabled,
    startingDeadlineSeconds, clusterPolicy, concurrencyPolicy, reports and statsd; its
    command is the outline of its tasks.  Never run as a process."""

    @property
    def name(self) -> str:
        return self.config.name


def workflow_job(
    config: WorkflowSettings,
    schedule: Schedule,
    timezone: tzinfo,
    dag: Dag,
    *,
    digest: str,
    file: str = "",
    line: int = 0,
) -> Job:
    """The :attr:`Workflow.job` of a workflow (built from its validated settings)."""
    settings = RunSettings.model_construct(
        name=config.name,
        command=f"workflow {config.name}: {outline(dag)}",
        utc=config.utc,
        timezone=config.timezone,
        enabled=config.enabled,
        starting_deadline_seconds=config.starting_deadline_seconds,
        cluster_policy=config.cluster_policy,
        concurrency_policy=config.concurrency_policy,
        on_failure=OnFailure.model_construct(
            report=config.on_failure.report, rate_limit=config.on_failure.rate_limit
        ),
        on_success=config.on_success,
        on_missed=config.on_missed,
        statsd=config.statsd,
        suspend=config.suspend,
        on_paused=config.on_paused,
        jitter=config.jitter,
        on_late=config.on_late,
        on_stuck=config.on_stuck,
        on_stale=config.on_stale,
    )
    return Job(
        config=settings,
        schedule=schedule,
        timezone=timezone,
        environment={},
        file=file,
        line=line,
        digest=digest,
    )


@dataclass(frozen=True, slots=True)
class Pool:
    """A validated pool and where it is defined."""

    config: PoolConfig
    file: str
    """File that defines the pool, relative to the configuration root."""
    line: int
    """Line of the pool in that file."""
    digest: str
    """Its fingerprint (:func:`cronstable.config.fingerprint.pool_digest`)."""

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def slots(self) -> int:
        return self.config.slots

    @property
    def scope(self) -> str:
        return self.config.scope


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
    workflows: Mapping[str, Workflow] = field(default_factory=dict)
    """Workflows by name, in configuration order."""
    pools: Mapping[str, Pool] = field(default_factory=dict)
    """Pools by name, in configuration order."""
    secrets: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    """The inline secrets written in the revision (see :mod:`cronstable.config.secrets`),
    masked in every error found after loading (:meth:`Problem.hiding`)."""

    def tasks(self) -> dict[str, Job]:
        """Every workflow's tasks by their full name (``WORKFLOW.TASK``)."""
        return {job.name: job for flow in self.workflows.values() for job in flow.tasks.values()}

    def problem(self, key: KeyPath, message: str) -> Problem:
        """A problem about a section's value, at the nearest of ``key``'s positions."""
        for depth in range(len(key), 0, -1):
            where = self.positions.get(key[:depth])
            if where is not None:
                return Problem(where[0], where[1], where[2], key, message)
        return Problem("", None, None, key, message)
