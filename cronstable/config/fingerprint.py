"""Fingerprints of a configuration: per-job digests and the job-set id.

* :func:`canonical_job` — the job's resolved settings (after defaults, with the
  env file folded into ``environment`` and the schedule in canonical text) as
  plain JSON data.  Key order, comments, whitespace and the way a value was
  spelled (``yes``/``true``, a mapping schedule or its string) do not show;
  settings equal to the built-in default are left out, so a setting written
  out with its default value and one left unset fingerprint alike.
* :func:`job_digest` — SHA-256 over the canonical JSON of one job, so editing
  one job changes that job's digest only.
* :func:`job_set_id` — SHA-256 over the sorted digests: independent of the
  order of jobs and files.

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

from cronstable.config.models import JobConfig
from cronstable.schedule import Schedule

SCHEME_VERSION = "v1"


def canonical_job(
    config: JobConfig, schedule: Schedule, environment: Mapping[str, str]
) -> dict[str, Any]:
    data = config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["schedule"] = schedule.text
    data["environment"] = dict(sorted(environment.items()))
    data.pop("env_file", None)
    return data


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(data: Any) -> bytes:
    """``json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)`` as UTF-8, through one encoder made once (``dumps`` with options
    makes a new encoder for every call: a third of the cost of a job's digest)."""
    return _ENCODER.encode(data).encode("utf-8")


def job_digest(config: JobConfig, schedule: Schedule, environment: Mapping[str, str]) -> str:
    body = canonical_json(canonical_job(config, schedule, environment))
    return f"{SCHEME_VERSION}:{hashlib.sha256(body).hexdigest()}"


def job_set_id(digests: Iterable[str]) -> str:
    h = hashlib.sha256(SCHEME_VERSION.encode())
    ordered = sorted(digests)
    if ordered:  # "\n" before each digest, in one update (the bytes of one update per part)
        h.update(("\n" + "\n".join(ordered)).encode())
    return f"{SCHEME_VERSION}:{h.hexdigest()}"
