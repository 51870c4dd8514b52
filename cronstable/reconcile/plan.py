"""plan(): (desired, applied) → Plan.  Pure: no I/O, no clock.

A Plan lists jobs added, removed and changed (with field-level differences
over each job's resolved settings), workflows added, removed and changed (their
own settings, and each task as a job change named ``WORKFLOW.TASK``), pools
added, removed and changed (by their settings), and the daemon-wide sections
that changed.  Jobs and workflows are compared by their digests first, so an
unchanged one costs one string comparison.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cronstable.config.desired import DesiredState, Job, Pool, Workflow
from cronstable.config.models import WorkflowSettings
from cronstable.published import hide_secrets

JobChangeKind = Literal["added", "removed", "changed"]
SECTIONS = ("web", "logging", "cluster", "state", "metrics")


@dataclass(frozen=True, slots=True)
class FieldChange:
    path: str
    """Dotted path of the setting (``onFailure.retry.maximumRetries``, ``environment.FOO``)."""
    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class JobChange:
    name: str
    kind: JobChangeKind
    old: Job | None
    new: Job | None
    fields: tuple[FieldChange, ...] = ()

    @property
    def schedule_changed(self) -> bool:
        return self.kind == "changed" and any(f.path in TIMING for f in self.fields)


TIMING = ("schedule", "timezone", "utc", "enabled")
"""The settings that decide when a job or workflow fires."""


@dataclass(frozen=True, slots=True)
class WorkflowChange:
    """A workflow added, removed or changed: its own settings that differ (``fields``) and
    each task added, removed or changed (``tasks``, named ``WORKFLOW.TASK``)."""

    name: str
    kind: JobChangeKind
    old: Workflow | None
    new: Workflow | None
    fields: tuple[FieldChange, ...] = ()
    tasks: tuple[JobChange, ...] = ()

    @property
    def schedule_changed(self) -> bool:
        return self.kind == "changed" and any(f.path in TIMING for f in self.fields)


@dataclass(frozen=True, slots=True)
class PoolChange:
    name: str
    kind: JobChangeKind
    old: Pool | None
    new: Pool | None
    fields: tuple[FieldChange, ...] = ()


@dataclass(frozen=True, slots=True)
class SectionChange:
    section: str
    old: Any
    new: Any

    @property
    def fields(self) -> tuple[FieldChange, ...]:
        """The settings that differ, flattened like a job's (``handlers.console.level``)."""
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        _flatten("", self.old or {}, before)
        _flatten("", self.new or {}, after)
        return _differences(before, after)


@dataclass(frozen=True, slots=True)
class Plan:
    old_revision: str | None
    new_revision: str | None
    old_job_set_id: str | None
    new_job_set_id: str
    jobs: tuple[JobChange, ...] = ()
    sections: tuple[SectionChange, ...] = ()
    unchanged: int = 0
    workflows: tuple[WorkflowChange, ...] = ()
    unchanged_workflows: int = 0
    pools: tuple[PoolChange, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.jobs and not self.sections and not self.workflows and not self.pools

    @property
    def has_workflows(self) -> bool:
        """Whether either side has workflows (the summary counts them then)."""
        return bool(self.workflows) or self.unchanged_workflows > 0

    def count(self, kind: JobChangeKind) -> int:
        return sum(1 for change in self.jobs if change.kind == kind)

    def count_workflows(self, kind: JobChangeKind) -> int:
        return sum(1 for change in self.workflows if change.kind == kind)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "added": self.count("added"),
            "removed": self.count("removed"),
            "changed": self.count("changed"),
            "unchanged": self.unchanged,
            # the pools count as one section here: the counts above are the jobs'
            "sections": [s.section for s in self.sections] + (["pools"] if self.pools else []),
        }
        if self.has_workflows:
            out["workflows"] = {
                "added": self.count_workflows("added"),
                "removed": self.count_workflows("removed"),
                "changed": self.count_workflows("changed"),
                "unchanged": self.unchanged_workflows,
            }
        return out

    def task_changes(self) -> tuple[JobChange, ...]:
        """Every workflow's task changes (``WORKFLOW.TASK``)."""
        return tuple(task for flow in self.workflows for task in flow.tasks)


@dataclass(frozen=True, slots=True)
class PlannedRevision:
    """A revision of the source planned against the running one, not applied: its plan,
    or why it does not load, or why the source could not read it."""

    ref: str
    """What was asked for (a branch, a tag, a commit)."""
    at: datetime
    """When it was planned (the next fires a plan shows are counted from it)."""
    revision: str | None = None
    """The revision ``ref`` names (None when it could not be read)."""
    source: str | None = None
    plan: Plan | None = None
    """None when the revision does not load (``errors``) or could not be read."""
    errors: tuple[str, ...] = ()
    """Every problem of a revision that does not load, as a rejection lists them."""
    unreadable: str | None = None
    """Why the source could not read ``ref`` (no such ref, a source that cannot)."""


def job_settings(job: Job) -> dict[str, Any]:
    """A job's resolved settings as flat ``path → value`` (what a diff compares); a task's
    without the schedule, which is its workflow's."""
    data = hide_secrets(job.config.model_dump(mode="json", by_alias=True), type(job.config))
    if job.workflow is None:
        data["schedule"] = job.schedule.text
    data["environment"] = dict(job.environment)
    data.pop("env_file", None)
    flat: dict[str, Any] = {}
    _flatten("", data, flat)
    return flat


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value


def _differences(before: dict[str, Any], after: dict[str, Any]) -> tuple[FieldChange, ...]:
    return tuple(
        FieldChange(path, before.get(path), after.get(path))
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    )


def job_fields(old: Job, new: Job) -> tuple[FieldChange, ...]:
    return _differences(job_settings(old), job_settings(new))


def workflow_settings(flow: Workflow) -> dict[str, Any]:
    """A workflow's own settings (its tasks aside) as flat ``path → value``."""
    data = flow.config.model_dump(mode="json", by_alias=True)
    data["schedule"] = flow.schedule.text
    flat: dict[str, Any] = {}
    _flatten("", hide_secrets(data, WorkflowSettings), flat)
    return flat


def _job_changes(
    old: Mapping[str, Job], new: Mapping[str, Job], *, by_name: bool = True
) -> tuple[list[JobChange], int]:
    """Changes removed, added, changed (each by name, or in definition order)."""
    changes: list[JobChange] = []
    unchanged = 0
    for name, job in old.items():
        if name not in new:
            changes.append(JobChange(name, "removed", job, None))
    for name, job in new.items():
        before = old.get(name)
        if before is None:
            changes.append(JobChange(name, "added", None, job))
        elif before.digest != job.digest:
            changes.append(JobChange(name, "changed", before, job, job_fields(before, job)))
        else:
            unchanged += 1
    changes.sort(key=lambda c: (_ORDER[c.kind], c.name if by_name else ""))
    return changes, unchanged


_ORDER = {"removed": 0, "added": 1, "changed": 2}


def _by_full_name(flow: Workflow | None) -> dict[str, Job]:
    return {} if flow is None else {job.name: job for job in flow.tasks.values()}


def _workflow_changes(
    desired: DesiredState, applied: DesiredState | None
) -> tuple[list[WorkflowChange], int]:
    old_flows = applied.workflows if applied is not None else {}
    changes: list[WorkflowChange] = []
    unchanged = 0
    for name in [*old_flows, *(n for n in desired.workflows if n not in old_flows)]:
        before, after = old_flows.get(name), desired.workflows.get(name)
        if before is not None and after is not None and before.digest == after.digest:
            unchanged += 1
            continue
        tasks, _ = _job_changes(_by_full_name(before), _by_full_name(after), by_name=False)
        if before is None:
            changes.append(WorkflowChange(name, "added", None, after, (), tuple(tasks)))
        elif after is None:
            changes.append(WorkflowChange(name, "removed", before, None, (), tuple(tasks)))
        else:
            own = _differences(workflow_settings(before), workflow_settings(after))
            changes.append(WorkflowChange(name, "changed", before, after, own, tuple(tasks)))
    changes.sort(key=lambda c: (_ORDER[c.kind], c.name))
    return changes, unchanged


def pool_settings(pool: Pool) -> dict[str, Any]:
    """A pool's settings (``slots``, ``scope``) as flat ``path → value``."""
    data = pool.config.model_dump(mode="json", by_alias=True)
    data.pop("name", None)
    return data


def pool_changes(desired: DesiredState, applied: DesiredState | None) -> tuple[PoolChange, ...]:
    """Pools removed, added and changed (by name within each kind)."""
    old = applied.pools if applied is not None else {}
    changes = [PoolChange(name, "removed", pool, None) for name, pool in old.items()]
    changes = [c for c in changes if c.name not in desired.pools]
    for name, pool in desired.pools.items():
        before = old.get(name)
        if before is None:
            changes.append(PoolChange(name, "added", None, pool))
        elif before.digest != pool.digest:
            fields = _differences(pool_settings(before), pool_settings(pool))
            changes.append(PoolChange(name, "changed", before, pool, fields))
    changes.sort(key=lambda c: ({"removed": 0, "added": 1, "changed": 2}[c.kind], c.name))
    return tuple(changes)


def _section(state: DesiredState | None, name: str) -> Any:
    if state is None:
        return None
    value = getattr(state, name)
    if value is None:
        return None
    # what the revision sets, an inline secret (a token) as its digest: a diff is
    # posted on pull requests and printed in CI logs
    return hide_secrets(
        value.model_dump(mode="json", by_alias=True, exclude_defaults=True), type(value)
    )


def changed_groups(
    desired: DesiredState, applied: DesiredState | None
) -> tuple[list[str], list[str]] | None:
    """The names of the jobs in the groups (files) of ``applied`` that ``desired`` does not
    have, and in those of ``desired`` that ``applied`` does not have; every other job is the
    same object in both.  None when the two cannot be told apart by their groups (no
    groups: loads without a cache), then every job is compared.  Costs the groups that
    changed, not the jobs: a one-file edit in 100,000 jobs compares that file's."""
    if applied is None or not desired.groups or not applied.groups:
        return None
    if sum(map(len, desired.groups)) != len(desired.jobs):
        return None
    if sum(map(len, applied.groups)) != len(applied.jobs):
        return None
    before = {id(group) for group in applied.groups}
    after = {id(group) for group in desired.groups}
    gone = [name for group in applied.groups if id(group) not in after for name in group]
    arrived = [name for group in desired.groups if id(group) not in before for name in group]
    return gone, arrived


def plan(
    desired: DesiredState,
    applied: DesiredState | None,
    *,
    revision: str | None = None,
    applied_revision: str | None = None,
) -> Plan:
    """What applying ``desired`` over ``applied`` (None: nothing running) changes."""
    old_jobs = applied.jobs if applied is not None else {}
    changes: list[JobChange] = []
    unchanged = 0
    maybe = changed_groups(desired, applied)
    if maybe is None:
        gone: Iterable[str] = old_jobs
        arrived: Iterable[str] = desired.jobs
    else:
        gone, arrived = maybe
        # the jobs of the files that did not change are the same objects as before
        unchanged = len(desired.jobs) - len(arrived)
    for name in gone:
        if name not in desired.jobs:
            changes.append(JobChange(name, "removed", old_jobs[name], None))
    for name in arrived:
        job = desired.jobs[name]
        before = old_jobs.get(name)
        if before is None:
            changes.append(JobChange(name, "added", None, job))
        elif before.digest != job.digest:
            changes.append(JobChange(name, "changed", before, job, job_fields(before, job)))
        else:
            unchanged += 1
    changes.sort(key=lambda c: ({"removed": 0, "added": 1, "changed": 2}[c.kind], c.name))
    flows, unchanged_flows = _workflow_changes(desired, applied)
    sections = tuple(
        SectionChange(name, old, new)
        for name in SECTIONS
        if (old := _section(applied, name)) != (new := _section(desired, name))
    )
    return Plan(
        old_revision=applied_revision,
        new_revision=revision,
        old_job_set_id=applied.job_set_id if applied is not None else None,
        new_job_set_id=desired.job_set_id,
        jobs=tuple(changes),
        sections=sections,
        unchanged=unchanged,
        workflows=tuple(flows),
        unchanged_workflows=unchanged_flows,
        pools=pool_changes(desired, applied),
    )
