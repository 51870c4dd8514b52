"""The reporter family's base: a :class:`Reporter` sends one :class:`Message`.

A reporter must finish (or give up) within its ``timeout``: the dispatcher
cancels it then.  It raises :class:`ReportError` (or anything) on failure; the
dispatcher logs that with the job's name, and the other reporters go on.
Secrets (passwords, DSNs, header values) must never appear in what it raises
or logs: text that may hold a URL goes through :func:`cronstable.redact.redact`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cronstable.config.desired import Job
from cronstable.config.models import (
    DEFAULT_BODY_TEMPLATE,
    DEFAULT_SUBJECT_TEMPLATE,
    ReporterSettings,
    SecretSource,
)
from cronstable.ports import FinishedRun, MissedFire
from cronstable.redact import redact
from cronstable.templates import render

logger = logging.getLogger(__name__)

MISSED_SUBJECT_TEMPLATE = "Cron job '{{name}}' did not run ({{reason}})"
MISSED_BODY_TEMPLATE = (
    "{{missed_count}} fire(s) of job '{{name}}' from {{scheduled_time}} did not run: {{reason}}"
    "{% if suppressed_count %}\n({{suppressed_count}} earlier reports held back by rateLimit)"
    "{% endif %}\n"
)
_MISSED_DEFAULTS = {
    DEFAULT_SUBJECT_TEMPLATE: MISSED_SUBJECT_TEMPLATE,
    DEFAULT_BODY_TEMPLATE: MISSED_BODY_TEMPLATE,
    DEFAULT_SUBJECT_TEMPLATE + "\n" + DEFAULT_BODY_TEMPLATE: MISSED_SUBJECT_TEMPLATE
    + "\n"
    + MISSED_BODY_TEMPLATE,
}
"""A missed fire has no output: the default run templates give way to these."""

PAUSED_SUBJECT_TEMPLATE = "Cron job '{{name}}' has been paused for {{paused_for}}"
PAUSED_BODY_TEMPLATE = (
    "Job '{{name}}' is paused {% if pause_source == 'config' %}by the repository (suspend)"
    "{% else %}by {{paused_by or 'an anonymous request'}}{% endif %} since {{paused_since}}"
    "{% if paused_until %}, until {{paused_until}}{% endif %}: "
    "{{pause_reason or '(no reason given)'}}\n"
    "Its scheduled fires are skipped until it is resumed.\n"
)
_PAUSED_DEFAULTS = {
    DEFAULT_SUBJECT_TEMPLATE: PAUSED_SUBJECT_TEMPLATE,
    DEFAULT_BODY_TEMPLATE: PAUSED_BODY_TEMPLATE,
    DEFAULT_SUBJECT_TEMPLATE + "\n" + DEFAULT_BODY_TEMPLATE: PAUSED_SUBJECT_TEMPLATE
    + "\n"
    + PAUSED_BODY_TEMPLATE,
}
"""A pause that lasted onPaused.alertAfter: no run, no output."""


def job_environment(job: Job) -> dict[str, str]:
    """The environment a template (and a shell report) sees: the daemon's, then the job's."""
    return {**os.environ, **job.environment}


class ReportError(Exception):
    """A report could not be sent; the message says why (no secrets in it)."""


@dataclass(slots=True)
class Message:
    """One report to send: a finished run (``run``) or missed fires (``missed``)."""

    job: Job
    """The definition that ran (or would have run)."""
    moment: str
    """failure, permanent_failure, success, missed or paused."""
    variables: dict[str, Any]
    """What templates see (see docs/reporting.md)."""
    run: FinishedRun | None = None
    missed: MissedFire | None = None
    render_failures: list[str] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return bool(self.variables.get("success"))

    def render(self, template: str, *, what: str, autoescape: bool = False) -> str:
        """``template`` rendered; a failure is logged and a plain fallback returned."""
        if self.missed is not None:
            template = _MISSED_DEFAULTS.get(template, template)
        elif self.moment == "paused":
            template = _PAUSED_DEFAULTS.get(template, template)
        try:
            return render(template, self.variables, autoescape=autoescape)
        except Exception as exc:
            error = redact(f"{type(exc).__name__}: {exc}")
            self.render_failures.append(error)
            logger.error(
                "Job %s: the %s template failed to render (%s); sending a plain %s instead",
                self.job.name,
                what,
                error,
                what,
                extra={"job": self.job.name},
            )
            return self.fallback()

    def fallback(self) -> str:
        """A plain text summary, when a template fails."""
        v = self.variables
        if self.moment == "paused":
            return (
                f"Job {v['name']} has been paused for {v['paused_for']} "
                f"({v['pause_source']}, by {v['paused_by']}): {v['pause_reason']}"
            )
        if self.missed is not None:
            return (
                f"Job {v['name']}: {v['missed_count']} fire(s) from {v['scheduled_time']} "
                f"did not run ({v['reason']})"
            )
        lines = [
            f"Job {v['name']} {v['outcome']} (exit code {v['exit_code']}, "
            f"attempt {v['attempt']}, scheduled {v['scheduled_time']})"
        ]
        if v.get("fail_reason"):
            lines.append(f"Failed because: {v['fail_reason']}")
        for stream in ("stdout", "stderr"):
            if v.get(stream):
                lines += [f"{stream.upper()}:", str(v[stream])]
        return "\n".join(lines)


def resolve_secret(source: SecretSource) -> str | None:
    """The secret's text (value, else fromFile, else fromEnvVar), stripped; None when
    unset or empty.  Blocking (a file read): call it in a thread from async code."""
    chosen = source.chosen()
    if chosen is None:
        return None
    key, text = chosen
    if key == "value":
        value: str | None = text
    elif key == "fromFile":
        try:
            with open(text, encoding="utf-8") as handle:
                value = handle.read()
        except OSError as exc:
            raise ReportError(f"cannot read the secret file {text}: {exc.strerror}") from None
    else:
        value = os.environ.get(text)
    value = value.strip() if value is not None else None
    return value or None


async def resolve_secret_async(source: SecretSource) -> str | None:
    if source.from_file is not None and source.value is None:
        return await asyncio.to_thread(resolve_secret, source)
    return resolve_secret(source)


class Reporter(ABC):
    """One kind of report (mail, sentry, ...): one long-lived instance per daemon."""

    key: ClassVar[str]
    """The configuration key under ``report``."""

    def enabled(self, settings: ReporterSettings) -> bool:
        """Whether ``settings`` ask for a report (every required key set)."""
        return settings.enabled

    @abstractmethod
    async def send(self, settings: Any, message: Message) -> None:
        """Send ``message`` as ``settings`` say; raise on failure."""

    async def close(self) -> None:
        """Release what the reporter keeps (clients); called when the daemon stops."""
        return None
