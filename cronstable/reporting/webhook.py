"""Webhook reports: POST the report to a URL, retrying transient failures (tenacity).

``format``: ``json`` (the run's record and the rendered message), ``slack``
(``{"text": MESSAGE}``, what Slack, Mattermost and Rocket.Chat incoming hooks
take) or ``text`` (the message as text/plain).  The message is ``body``
rendered, by default the mail subject and body.  Connection errors, 429 and 5xx
answers are retried (at most :data:`ATTEMPTS` tries, waits 0.5 s doubling);
everything, retries included, ends within the reporter's ``timeout``.  Header
values are secrets: they are sent, never logged, and errors name only the URL
(redacted).
"""

from __future__ import annotations

import logging
from typing import Any

import tenacity

from cronstable.config.models import DEFAULT_BODY_TEMPLATE, DEFAULT_SUBJECT_TEMPLATE, WebhookReport
from cronstable.redact import redact
from cronstable.reporting.base import Message, Reporter, ReportError, resolve_secret_async

logger = logging.getLogger(__name__)

ATTEMPTS = 3
FIRST_WAIT = 0.5
DEFAULT_TEMPLATE = DEFAULT_SUBJECT_TEMPLATE + "\n" + DEFAULT_BODY_TEMPLATE


class _Transient(Exception):
    """An answer or error worth another try."""


def payload(message: Message, text: str) -> dict[str, Any]:
    v = message.variables
    data: dict[str, Any] = {
        "job": v["name"],
        "moment": message.moment,
        "success": v["success"],
        "hostname": v["hostname"],
        "revision": v["revision"],
        "jobSetId": v["job_set_id"],
        "scheduledTime": v["scheduled_time"],
        "suppressedCount": v["suppressed_count"],
        "message": text,
    }
    if message.missed is not None:
        data |= {"reason": v["reason"], "missedCount": v["missed_count"]}
    elif message.moment == "paused":
        data |= {
            "reason": "paused",
            "pauseSource": v["pause_source"],
            "pauseReason": v["pause_reason"],
            "pausedBy": v["paused_by"],
            "pausedSince": v["paused_since"],
            "pausedUntil": v["paused_until"],
            "pausedSeconds": v["paused_seconds"],
        }
    else:
        data |= {
            "runId": v["run_id"],
            "outcome": v["outcome"],
            "failReason": v["fail_reason"],
            "exitCode": v["exit_code"],
            "attempt": v["attempt"],
            "startedAt": v["started_at"],
            "finishedAt": v["finished_at"],
            "duration": v["duration"],
            "stdout": v["stdout"],
            "stderr": v["stderr"],
            "stdoutDropped": v["stdout_dropped"],
            "stderrDropped": v["stderr_dropped"],
        }
    return data


class WebhookReporter(Reporter):
    key = "webhook"

    async def send(self, settings: Any, message: Message) -> None:
        import aiohttp

        hook: WebhookReport = settings
        assert hook.url is not None
        url = hook.url
        shown = redact(url, strict=True)  # a configured URL: every credential goes
        text = message.render(hook.body or DEFAULT_TEMPLATE, what="webhook body").strip()
        headers: dict[str, str] = {}
        for name, source in hook.headers.items():
            value = await resolve_secret_async(source)
            if value is not None:
                headers[name] = value
        kwargs: dict[str, Any]
        if hook.format == "json":
            kwargs = {"json": payload(message, text)}
        elif hook.format == "slack":
            kwargs = {"json": {"text": text}}
        else:
            kwargs = {"data": text.encode(), "headers": {"Content-Type": "text/plain"}}
        kwargs["headers"] = {**kwargs.get("headers", {}), **headers}

        def log_retry(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            logger.info(
                "Job %s: webhook %s: attempt %d failed (%s); retrying",
                message.job.name,
                shown,
                state.attempt_number,
                error,
                extra={"job": message.job.name},
            )

        timeout = aiohttp.ClientTimeout(total=hook.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                async for attempt in tenacity.AsyncRetrying(
                    stop=tenacity.stop_after_attempt(ATTEMPTS),
                    wait=tenacity.wait_exponential(multiplier=FIRST_WAIT, max=4),
                    retry=tenacity.retry_if_exception_type(_Transient),
                    before_sleep=log_retry,
                    reraise=True,
                ):
                    with attempt:
                        await self._post(session, url, shown, kwargs)
            except _Transient as exc:
                raise ReportError(f"{exc} (after {ATTEMPTS} attempts)") from None

    @staticmethod
    async def _post(session: Any, url: str, shown: str, kwargs: dict[str, Any]) -> None:
        import aiohttp

        try:
            async with session.post(url, **kwargs) as response:
                if response.status == 429 or response.status >= 500:
                    raise _Transient(f"{shown} answered {response.status}")
                if response.status >= 400:
                    raise ReportError(f"{shown} answered {response.status}")
                await response.read()
        except aiohttp.ClientConnectionError as exc:
            raise _Transient(f"cannot reach {shown}: {redact(str(exc))}") from None
        except aiohttp.ClientError as exc:
            raise ReportError(f"{shown}: {redact(str(exc))}") from None
