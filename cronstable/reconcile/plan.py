"""plan(): (desired, applied) → Plan.  Pure: no I/O, no clock.

A Plan lists jobs added, removed and changed (with field-level differences
over each job's resolved settings) and the daemon-wide sections that changed.
Jobs are compared by their digests first, so an unchanged job costs one string
comparison.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cronstable.config.desired import DesiredState, Job
from cronstable.config.models import JobConfig
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
        return self.kind == "changed" and any(
            f.path in ("schedule", "timezone", "utc", "enabled") for f in self.fields
        )


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

    @property
    def empty(self) -> bool:
        return not self.jobs and not self.sections

    def count(self, kind: JobChangeKind) -> int:
        return sum(1 for change in self.jobs if change.kind == kind)

    def summary(self) -> dict[str, Any]:
        return {
            "added": self.count("added"),
            "removed": self.count("removed"),
            "changed": self.count("changed"),
            "unchanged": self.unchanged,
            "sections": [s.section for s in self.sections],
        }


def job_settings(job: Job) -> dict[str, Any]:
    """A job's resolved settings as flat ``path → value`` (what a diff compares)."""
    data = hide_secrets(job.config.model_dump(mode="json", by_alias=True), JobConfig)
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
    )
