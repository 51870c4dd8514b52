"""The applied configuration as the daemon publishes it (``GET /config``): no secrets.

Pure.  Every inline secret (a ``value`` beside ``fromFile``/``fromEnvVar``, such
as a token, a mail password or a Sentry DSN) and every environment value is
replaced by ``sha256:<hex>`` of its text, so two configurations can still be
compared (``cronstable diff URL ...``) without either side showing the secret.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from cronstable.config.desired import DesiredState
from cronstable.fingerprint import canonical_job

_SECRET_KEYS = frozenset({"value", "fromFile", "fromEnvVar"})
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def secret_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def hide_secrets(data: Any) -> Any:
    """``data`` (a model dump) with every inline secret ``value`` as its digest.

    Idempotent: a value that already is a digest stays (a configuration read back
    from ``GET /config`` is hidden again when compared)."""
    if isinstance(data, dict):
        out = {key: hide_secrets(value) for key, value in data.items()}
        if (
            "value" in out
            and isinstance(out["value"], str)
            and _SECRET_KEYS & set(out)
            and not _DIGEST.match(out["value"])
        ):
            out["value"] = secret_digest(out["value"])
        return out
    if isinstance(data, list):
        return [hide_secrets(item) for item in data]
    return data


def published_config(state: DesiredState) -> dict[str, Any]:
    """The canonical form of every job and section, with per-job digests."""
    jobs: dict[str, Any] = {}
    for name, job in state.jobs.items():
        canonical = canonical_job(job.config, job.schedule, job.environment)
        canonical["environment"] = {
            key: secret_digest(value) for key, value in canonical["environment"].items()
        }
        jobs[name] = {"digest": job.digest, "config": hide_secrets(canonical)}
    sections = {
        name: None if value is None else hide_secrets(value.model_dump(mode="json", by_alias=True))
        for name, value in (("web", state.web), ("logging", state.logging))
    }
    return {"jobSetId": state.job_set_id, "jobs": jobs, "sections": sections}
