"""The applied configuration as the daemon publishes it (``GET /config``): no secrets.

Pure.  Every inline secret (a ``value`` beside ``fromFile``/``fromEnvVar``, such
as a token, a mail password or a Sentry DSN) and every environment value is
replaced by ``sha256:<hex>`` of its text, so two configurations can still be
compared (``cronstable diff URL ...``) without either side showing the secret.
A URL the models mark as holding credentials (a webhook's ``url``, etcd's
``endpoints``) keeps its scheme, host and path; its userinfo and each query value
become their digests (``http://sha256:…@host/h?token=sha256:…``), masked by
:func:`cronstable.redact.redact`.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel

from cronstable.config.desired import DesiredState, Job
from cronstable.config.fingerprint import canonical_job, canonical_workflow
from cronstable.config.models import JobConfig, TaskConfig, WorkflowSettings
from cronstable.config.secrets import hide_urls
from cronstable.redact import redact

_SECRET_KEYS = frozenset({"value", "fromFile", "fromEnvVar"})
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def secret_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _digested_url(url: str) -> str:
    return redact(url, strict=True, mask=secret_digest)


def hide_secrets(data: Any, model: type[BaseModel] | None = None) -> Any:
    """``data`` (a model dump; of ``model`` when given) with every inline secret ``value``
    as its digest, and the credentials of every URL ``model`` marks as digests.

    Idempotent: a value that already is a digest stays (a configuration read back
    from ``GET /config`` is hidden again when compared)."""
    hidden = _hide_values(data)
    return hidden if model is None else hide_urls(hidden, model, _digested_url)


def _hide_values(data: Any) -> Any:
    if isinstance(data, dict):
        out = {key: _hide_values(value) for key, value in data.items()}
        if (
            "value" in out
            and isinstance(out["value"], str)
            and _SECRET_KEYS & set(out)
            and not _DIGEST.match(out["value"])
        ):
            out["value"] = secret_digest(out["value"])
        return out
    if isinstance(data, list):
        return [_hide_values(item) for item in data]
    return data


def _published_job(job: Job) -> dict[str, Any]:
    """A job's (or a task's, under its name in the workflow) canonical form and digest."""
    if job.workflow is None:
        canonical = canonical_job(job.config, job.schedule, job.environment)
        model: type[BaseModel] = JobConfig
    else:
        own = job.config.model_copy(update={"name": job.task})
        canonical = canonical_job(own, None, job.environment)
        model = TaskConfig
    canonical["environment"] = {
        key: secret_digest(value) for key, value in canonical["environment"].items()
    }
    return {"digest": job.digest, "config": hide_secrets(canonical, model)}


def published_config(state: DesiredState) -> dict[str, Any]:
    """The canonical form of every job, workflow, pool and section, with their digests (a
    workflow's ``tasks`` in definition order, each as a job is)."""
    jobs = {name: _published_job(job) for name, job in state.jobs.items()}
    workflows = {
        name: {
            "digest": flow.digest,
            "config": hide_secrets(canonical_workflow(flow.config, flow.schedule), WorkflowSettings)
            | {"tasks": [_published_job(task) for task in flow.tasks.values()]},
        }
        for name, flow in state.workflows.items()
    }
    sections = {
        name: None
        if value is None
        else hide_secrets(value.model_dump(mode="json", by_alias=True), type(value))
        for name, value in (("web", state.web), ("logging", state.logging))
    }
    pools = {
        name: {"digest": pool.digest, "config": pool.config.model_dump(mode="json", by_alias=True)}
        for name, pool in state.pools.items()
    }
    published: dict[str, Any] = {"jobSetId": state.job_set_id, "jobs": jobs}
    if workflows:
        published["workflows"] = workflows
    published["pools"] = pools
    published["sections"] = sections
    return published
