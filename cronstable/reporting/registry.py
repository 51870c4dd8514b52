"""The reporters by configuration key; each module is imported when first used.

Adding a reporter: a module with a :class:`~.base.Reporter` subclass, a line
here, and its settings model under ``Report`` in :mod:`cronstable.config.models`.
"""

from __future__ import annotations

import importlib

from cronstable.reporting.base import Reporter

REPORTERS: dict[str, str] = {
    "sentry": "cronstable.reporting.sentry:SentryReporter",
    "mail": "cronstable.reporting.mail:MailReporter",
    "shell": "cronstable.reporting.shell:ShellReporter",
    "webhook": "cronstable.reporting.webhook:WebhookReporter",
}


class ReporterRegistry:
    """One instance of each reporter, made on first use."""

    def __init__(self) -> None:
        self._made: dict[str, Reporter] = {}

    def get(self, key: str) -> Reporter:
        reporter = self._made.get(key)
        if reporter is None:
            module_name, _, class_name = REPORTERS[key].partition(":")
            cls = getattr(importlib.import_module(module_name), class_name)
            reporter = self._made[key] = cls()
        return reporter

    def made(self) -> list[Reporter]:
        return list(self._made.values())
