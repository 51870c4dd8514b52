"""Reports end to end: real processes, the real scheduler and dispatcher, real local servers."""

from __future__ import annotations

import asyncio
import logging
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email import message_from_bytes
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from report_servers import http_receiver, silent_server, smtp_server

from cronstable.config import MemoryTree, load
from cronstable.reporting.dispatcher import ReportDispatcher
from cronstable.runtime.clock import SystemClock
from cronstable.runtime.daemon import ProcessSpawner
from cronstable.runtime.scheduler import Scheduler


@asynccontextmanager
async def running(text: str) -> AsyncIterator[ReportDispatcher]:
    """The jobs of ``text`` scheduled for real (``@reboot`` ones start at once)."""
    state = load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")
    reports = ReportDispatcher(CollectorRegistry(), revision=lambda: "rev-1")
    scheduler = Scheduler(SystemClock(), ProcessSpawner(None), report_listeners=[reports])
    reports.scheduler = scheduler  # type: ignore[attr-defined]
    reports.commit(None, state)
    scheduler.replace_jobs(state.jobs)
    task = asyncio.create_task(scheduler.run())
    try:
        yield reports
    finally:
        scheduler.stop()
        await scheduler.cancel_running()
        await task
        await reports.close()


async def settled(reports: ReportDispatcher, timeout: float = 20) -> None:
    """Every report started so far has ended."""
    async with asyncio.timeout(timeout):
        await asyncio.sleep(0.05)
        await reports.drain()


def sent(reports: ReportDispatcher, reporter: str, result: str) -> float:
    return reports.sent.labels(reporter, result)._value.get()


@pytest.mark.asyncio
async def test_an_always_failing_job_with_two_retries_reports_three_failures_one_permanent() -> (
    None
):
    async with (
        http_receiver() as hook,
        running(
            f"""\
        jobs:
          - name: broken
            command: "echo oops >&2; exit 3"
            schedule: "@reboot"
            onFailure:
              retry: {{maximumRetries: 2, initialDelay: 0.1}}
              report: {{webhook: {{url: "{hook.url("/failure")}"}}}}
            onPermanentFailure:
              report: {{webhook: {{url: "{hook.url("/permanent")}"}}}}
            onSuccess:
              report: {{webhook: {{url: "{hook.url("/success")}"}}}}
        """
        ) as reports,
    ):
        await hook.wait_for(4)
        await asyncio.sleep(0.5)  # nothing more comes
        await settled(reports)
    paths = [r.path for r in hook.requests]
    assert sorted(paths) == ["/failure"] * 3 + ["/permanent"]
    bodies = [r.json() for r in hook.requests]
    assert sorted(b["attempt"] for b in bodies if b["moment"] == "failure") == [1, 2, 3]
    permanent = next(b for b in bodies if b["moment"] == "permanent_failure")
    assert permanent["attempt"] == 3
    assert permanent["outcome"] == "failed"
    assert permanent["failReason"] == "nonzeroReturn (exit code 3)"
    assert permanent["stderr"] == "oops"
    assert permanent["exitCode"] == 3
    assert permanent["revision"] == "rev-1"


@pytest.mark.asyncio
async def test_mail_reaches_an_smtp_server_with_the_rendered_templates() -> None:
    async with (
        smtp_server() as (port, box),
        running(
            f"""\
        jobs:
          - name: mailer
            command: "echo 'a <b> line'; exit 1"
            captureStdout: true
            schedule: "@reboot"
            onFailure:
              report:
                mail:
                  from: cron@example.com
                  to: ops@example.com, dev@example.com
                  smtpHost: 127.0.0.1
                  smtpPort: {port}
                  timeout: 5
                  html: true
                  subject: "{{{{ name }}}} {{{{ outcome }}}} on attempt {{{{ attempt }}}}"
                  body: "<pre>{{{{ stdout }}}}</pre> {{{{ exit_code }}}}"
        """
        ) as reports,
    ):
        async with asyncio.timeout(20):
            await box.arrived.wait()
        await settled(reports)
    (envelope,) = box.mails
    assert envelope.mail_from == "cron@example.com"
    assert envelope.rcpt_tos == ["ops@example.com", "dev@example.com"]
    assert isinstance(envelope.content, bytes)
    mail = message_from_bytes(envelope.content)
    assert mail["Subject"] == "mailer failed on attempt 1"
    assert mail.get_content_type() == "text/html"
    body = mail.get_payload(decode=True)
    assert isinstance(body, bytes)
    assert b"<pre>a &lt;b&gt; line</pre> 1" in body  # autoescaped for html


@pytest.mark.asyncio
async def test_a_success_mail_whose_body_renders_empty_is_not_sent() -> None:
    async with (
        smtp_server() as (port, box),
        running(
            f"""\
        jobs:
          - name: quiet
            command: "true"
            schedule: "@reboot"
            onSuccess:
              report:
                mail:
                  from: cron@example.com
                  to: ops@example.com
                  smtpHost: 127.0.0.1
                  smtpPort: {port}
                  body: "{{% if stdout %}}{{{{ stdout }}}}{{% endif %}}"
        """
        ) as reports,
    ):
        await asyncio.sleep(0.5)
        await settled(reports)
    assert box.mails == []
    assert sent(reports, "mail", "sent") == 1  # handled, deliberately silent


@pytest.mark.asyncio
async def test_sentry_gets_an_envelope_through_its_own_client(tmp_path: Path) -> None:
    async with http_receiver() as sentry_server:
        dsn = f"http://key@127.0.0.1:{sentry_server.port}/1"
        (tmp_path / "dsn").write_text(dsn + "\n")
        async with running(
            f"""\
            jobs:
              - name: sentried
                command: "echo broken >&2; exit 2"
                schedule: "@reboot"
                onPermanentFailure:
                  report:
                    sentry:
                      dsn: {{fromFile: "{tmp_path / "dsn"}"}}
                      environment: staging
                      level: warning
                      extra: {{team: ops}}
                      timeout: 10
            """
        ) as reports:
            (request,) = await sentry_server.wait_for(1)
            await settled(reports)
        import sentry_sdk

        assert sentry_sdk.get_client().is_active() is False  # sentry_sdk.init never called
    assert request.path == "/api/1/envelope/"
    assert "sentry_key=key" in request.headers.get("X-Sentry-Auth", "")
    items = [line for line in request.body.split(b"\n") if line.startswith(b"{")]
    import json

    event = next(json.loads(i) for i in items if b'"message"' in i or b'"logentry"' in i)
    text = json.dumps(event)
    assert "Cron job 'sentried' failed" in text and "broken" in text
    assert event["level"] == "warning"
    assert event["environment"] == "staging"
    assert event["extra"]["team"] == "ops"
    assert event["fingerprint"][0] == "cronstable" and event["fingerprint"][2] == "sentried"


@pytest.mark.asyncio
async def test_shell_report_sees_yacron_and_cronstable_variables(tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    async with running(
        f"""\
        jobs:
          - name: shelled
            command: "echo to-stdout; exit 4"
            captureStdout: true
            schedule: {{minute: "*/5", hour: "3"}}
            onFailure:
              report:
                shell:
                  command: env | grep -E '^(YACRON|CRONSTABLE)_' | sort > {out}
        """
    ) as reports:
        reports.scheduler.start_now("shelled", datetime.now(UTC))  # type: ignore[attr-defined]
        async with asyncio.timeout(20):
            while not out.exists() or not out.read_text():
                await asyncio.sleep(0.05)
        await settled(reports)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert env["YACRON_JOB_NAME"] == env["CRONSTABLE_JOB_NAME"] == "shelled"
    assert env["YACRON_FAILED"] == "1"
    assert env["YACRON_RETCODE"] == "4"
    assert env["YACRON_STDOUT"] == "to-stdout"
    assert env["YACRON_FAIL_REASON"] == "nonzeroReturn (exit code 4)"
    assert env["CRONSTABLE_OUTCOME"] == "failed"
    assert env["CRONSTABLE_ATTEMPT"] == "1"
    # yacron crashes here on a mapping-form schedule; the canonical 7-field text
    assert env["YACRON_JOB_SCHEDULE"] == "0 */5 3 * * * *"


@pytest.mark.asyncio
async def test_hanging_servers_cost_each_reporter_its_timeout_and_no_more(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with silent_server() as smtp_port, http_receiver() as hook, http_receiver() as ok:
        hook.hang = True
        began = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="cronstable.reporting.dispatcher"):
            async with running(
                f"""\
                jobs:
                  - name: slowreport
                    command: "exit 1"
                    schedule: "@reboot"
                    onFailure:
                      report:
                        mail:
                          from: a@example.com
                          to: b@example.com
                          smtpHost: 127.0.0.1
                          smtpPort: {smtp_port}
                          timeout: 1
                        webhook: {{url: "{hook.url()}", timeout: 1}}
                  - name: other
                    command: "exit 1"
                    schedule: "@reboot"
                    onFailure:
                      report:
                        webhook: {{url: "{ok.url()}", timeout: 1}}
                """
            ) as reports:
                await ok.wait_for(1)
                quick = time.monotonic() - began
                await settled(reports)
            elapsed = time.monotonic() - began
    assert quick < 1  # a hung reporter never delays another job's report
    assert elapsed < 4  # both hung reporters gave up after their 1 s, together
    assert sent(reports, "mail", "timeout") == 1
    assert sent(reports, "webhook", "timeout") == 1
    gave_up = [m for m in caplog.messages if "gave up after its timeout of 1 s" in m]
    assert len(gave_up) == 2 and all("slowreport" in m for m in gave_up)


@pytest.mark.asyncio
async def test_webhook_retries_transient_answers_and_never_logs_header_secrets(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "s3cret-token")
    async with http_receiver() as hook:
        hook.statuses = [503, 502]
        with caplog.at_level(logging.DEBUG):
            async with running(
                f"""\
                jobs:
                  - name: hooked
                    command: "exit 1"
                    schedule: "@reboot"
                    onFailure:
                      report:
                        webhook:
                          url: "{hook.url()}"
                          format: slack
                          headers: {{Authorization: {{fromEnvVar: HOOK_TOKEN}}}}
                          body: "{{{{ name }}}} {{{{ outcome }}}}"
                """
            ) as reports:
                await hook.wait_for(3)
                await settled(reports)
    assert [r.json() for r in hook.requests] == [{"text": "hooked failed"}] * 3
    assert all(r.headers["Authorization"] == "s3cret-token" for r in hook.requests)
    assert sent(reports, "webhook", "sent") == 1
    assert "s3cret-token" not in caplog.text


@pytest.mark.asyncio
async def test_webhook_logs_never_show_the_credentials_of_its_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with http_receiver() as hook:
        hook.statuses = [503, 503, 503]
        url = hook.url("/h?token=hooktok77&x=hookx").replace("://", "://hookuser:hookpw99@")
        with caplog.at_level(logging.DEBUG):
            async with running(
                f"""\
                jobs:
                  - name: hooked
                    command: "exit 1"
                    schedule: "@reboot"
                    onFailure:
                      report:
                        webhook: {{url: "{url}"}}
                """
            ) as reports:
                await hook.wait_for(3)
                await settled(reports)
    assert sent(reports, "webhook", "failed") == 1
    retried = [m for m in caplog.messages if "attempt 1 failed" in m]
    assert retried and "webhook http://<hidden>@127.0.0.1:" in retried[0], caplog.messages
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("cronstable"))
    for secret in ("hookuser", "hookpw99", "hooktok77", "hookx"):  # (the receiver logs its own)
        assert secret not in ours


@pytest.mark.asyncio
async def test_a_template_failing_to_render_sends_a_fallback_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with http_receiver() as hook:
        async with running(
            f"""\
            jobs:
              - name: badtemplate
                command: "exit 5"
                schedule: "@reboot"
                onFailure:
                  report:
                    webhook:
                      url: "{hook.url()}"
                      format: text
                      body: "{{{{ 1 / 0 }}}}"
            """
        ) as reports:
            (request,) = await hook.wait_for(1)
            await settled(reports)
    assert request.body.decode().startswith("Job badtemplate failed (exit code 5")
    assert any("template failed to render" in m for m in caplog.messages)


@pytest.mark.asyncio
async def test_rate_limit_holds_back_reports_and_the_next_one_counts_them() -> None:
    async with http_receiver() as hook:
        async with running(
            f"""\
            jobs:
              - name: flood
                command: "exit 1"
                schedule: "@reboot"
                onFailure:
                  retry: {{maximumRetries: 3, initialDelay: 0.05, backoffMultiplier: 1}}
                  rateLimit: 3600
                  report: {{webhook: {{url: "{hook.url()}"}}}}
            """
        ) as reports:
            await hook.wait_for(1)
            await asyncio.sleep(1.0)
            await settled(reports)
    assert len(hook.requests) == 1
    assert reports.suppressed.labels("flood", "failure")._value.get() == 3
    reports.monotonic = lambda: time.monotonic() + 7200  # an hour later
    held = reports._let_through("flood", ("failure",), 3600)
    assert held == 3


@pytest.mark.asyncio
async def test_missed_fires_report_once_per_reason_per_hour_by_default() -> None:
    async with http_receiver() as hook:
        async with running(
            f"""\
            jobs:
              - name: slow
                command: "sleep 30"
                schedule: "* * * * * * *"
                concurrencyPolicy: Forbid
                onMissed:
                  report: {{webhook: {{url: "{hook.url()}"}}}}
            """
        ) as reports:
            (request,) = await hook.wait_for(1)
            await asyncio.sleep(2.5)  # more fires are skipped: held back by the hour's limit
            await settled(reports)
    assert len(hook.requests) == 1
    body = request.json()
    assert (body["job"], body["moment"], body["reason"], body["missedCount"]) == (
        "slow",
        "missed",
        "forbid",
        1,
    )
    assert "did not run: forbid" in body["message"]
    assert reports.suppressed.labels("slow", "missed")._value.get() >= 1


def test_whether_a_report_is_wanted_is_kept_by_model_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # asked at every run's end; the answer is kept by (frozen) model, within a bound
    from cronstable.config.models import Report
    from cronstable.reporting import dispatcher as module

    monkeypatch.setattr(module, "WANTED_KEPT", 2)
    reports = ReportDispatcher()
    off = Report()
    on = Report.model_validate({"shell": {"command": "true"}})
    for _ in range(2):
        assert reports._wanted(off) is False
        assert reports._wanted(on) is True
    others = [Report.model_validate({"shell": {"command": f"echo {n}"}}) for n in range(5)]
    assert all(reports._wanted(report) for report in others)
    assert len(reports._wanted_by) <= 2
    assert reports._wanted(off) is False
    # a model made anew (a revision's) is judged anew, whatever its id
    del others
    assert [reports._wanted(Report()) for _ in range(3)] == [False] * 3
