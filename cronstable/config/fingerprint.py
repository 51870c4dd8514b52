"""Fingerprints of a configuration: per-job digests and the job-set id.

* :func:`canonical_job` — the job's resolved settings (after defaults, with the
  env file folded into ``environment`` and the schedule in canonical text) as
  plain JSON data.  Key order, comments, whitespace and the way a value was
  spelled (``yes``/``true``, a mapping schedule or its string) do not show;
  settings equal to the built-in default are left out, so a setting written
  out with its default value and one left unset fingerprint alike.
* :func:`job_digest` — SHA-256 over the canonical JSON of one job, so editing
  one job changes that job's digest only.
* :func:`workflow_digest` — SHA-256 over a workflow's own settings and the
  digests of its tasks (each a :func:`job_digest` without a schedule), so a
  change to one task changes that task's digest and its workflow's.
* :func:`pool_digest` — the same over one pool's settings (``pool:`` in it, so
  it is never mistaken for a job's).
* :func:`job_set_id` — SHA-256 over the sorted digests (of jobs, workflows and
  pools): independent of the order of jobs, workflows, pools and files.

Digests are prefixed with :data:`SCHEME_VERSION` so a change of scheme is
recognised instead of being mistaken for a change of configuration.

Part of ``config/``: the loader computes them, and they read only the models and
the schedule, so nothing outside the package is needed to fingerprint a job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from cronstable.config.models import PoolConfig, RunSettings, WorkflowSettings
from cronstable.schedule import Schedule

SCHEME_VERSION = "v1"


def canonical_job(
    config: RunSettings, schedule: Schedule | None, environment: Mapping[str, str]
) -> dict[str, Any]:
    """``schedule`` None for a workflow's task (its workflow's schedule is its workflow's)."""
    data = config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if schedule is not None:
        data["schedule"] = schedule.text
    data["environment"] = dict(sorted(environment.items()))
    data.pop("env_file", None)
    return data


def canonical_json(data: Any) -> bytes:
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def job_digest(
    config: RunSettings, schedule: Schedule | None, environment: Mapping[str, str]
) -> str:
    body = canonical_json(canonical_job(config, schedule, environment))
    return f"{SCHEME_VERSION}:{hashlib.sha256(body).hexdigest()}"


def canonical_workflow(config: WorkflowSettings, schedule: Schedule) -> dict[str, Any]:
    """A workflow's own settings (its tasks aside), like :func:`canonical_job`."""
    data = config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["schedule"] = schedule.text
    return data


def workflow_digest(
    config: WorkflowSettings, schedule: Schedule, task_digests: Mapping[str, str]
) -> str:
    """``task_digests``: each task's :func:`job_digest` by its name in the workflow."""
    body = canonical_json(
        {"workflow": canonical_workflow(config, schedule), "tasks": dict(task_digests)}
    )
    return f"{SCHEME_VERSION}:workflow:{hashlib.sha256(body).hexdigest()}"


def pool_digest(config: PoolConfig) -> str:
    body = canonical_json({"pool": config.model_dump(mode="json", by_alias=True)})
    return f"{SCHEME_VERSION}:pool:{hashlib.sha256(body).hexdigest()}"


def job_set_id(digests: Iterable[str]) -> str:
    h = hashlib.sha256(SCHEME_VERSION.encode())
    for digest in sorted(digests):
        h.update(b"\n")
        h.update(digest.encode())
    return f"{SCHEME_VERSION}:{h.hexdigest()}"
