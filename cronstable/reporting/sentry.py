"""Sentry reports: one ``sentry_sdk.Client`` per DSN, each used through its own scope.

``sentry_sdk.init`` is never called: the daemon's own errors never go to a
user's DSN, and two jobs with two DSNs never share a client.  Clients are made
without default or auto-enabling integrations, kept for reuse, and flushed and
closed when the daemon stops.  Capturing only queues the event (the SDK's
transport sends it from its own thread); the report waits, in a thread, for
the queue to flush, within the reporter's timeout.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cronstable.config.models import SentryReport
from cronstable.reporting.base import Message, Reporter, ReportError, resolve_secret_async

logger = logging.getLogger(__name__)


class SentryReporter(Reporter):
    key = "sentry"

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}

    def _client(self, dsn: str, environment: str | None, max_length: int) -> Any:
        import sentry_sdk

        key = f"{dsn}\0{environment}\0{max_length}"
        client = self._clients.get(key)
        if client is None:
            try:
                client = sentry_sdk.Client(
                    dsn,
                    default_integrations=False,
                    auto_enabling_integrations=False,
                    environment=environment,
                    max_value_length=max_length,
                )
            except Exception as exc:  # a malformed DSN: its text is a secret
                raise ReportError(f"the Sentry DSN is not valid ({type(exc).__name__})") from None
            self._clients[key] = client
        return client

    async def send(self, settings: Any, message: Message) -> None:
        import sentry_sdk

        sentry: SentryReport = settings
        dsn = await resolve_secret_async(sentry.dsn)
        if dsn is None:
            logger.info(
                "Job %s: the Sentry DSN resolves empty; no Sentry report",
                message.job.name,
                extra={"job": message.job.name},
            )
            return
        client = self._client(dsn, sentry.environment, sentry.max_string_length)
        text = message.render(sentry.body, what="Sentry body")[: sentry.max_string_length]
        fingerprint = [
            message.render(part, what="Sentry fingerprint") for part in sentry.fingerprint
        ]
        v = message.variables
        scope = sentry_sdk.Scope()
        scope.set_client(client)
        scope.fingerprint = fingerprint
        # set_level, not the level attribute: sentry-sdk 3 dropped the attribute's setter;
        # the level is the configuration's text, which Sentry takes as it is
        level: Any = sentry.level or ("info" if message.success else "error")
        scope.set_level(level)
        for key, value in sentry.extra.items():
            scope.set_extra(key, value)
        scope.set_tag("job", v["name"])
        scope.set_tag("moment", message.moment)
        scope.set_extra("job", v["name"])
        for name in (
            "outcome",
            "exit_code",
            "fail_reason",
            "attempt",
            "scheduled_time",
            "reason",
            "missed_count",
            "revision",
            "job_set_id",
            "hostname",
        ):
            if name in v:
                scope.set_extra(name, v[name])
        # the client's own capture: Scope.capture_* would look up the global client
        client.capture_event({"message": text}, scope=scope)
        await asyncio.to_thread(client.flush, sentry.timeout)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await asyncio.to_thread(client.close, 5.0)
