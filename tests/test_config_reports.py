"""Report settings at load time: templates compile, partial reporters warn, mail needs a host."""

from __future__ import annotations

import textwrap

from cronstable.config import ConfigError, MemoryTree, load
from cronstable.config.desired import DesiredState


def _load(*parts: str) -> DesiredState:
    """The parts joined (job settings after JOB are indented by 4)."""
    text = "".join(parts)
    return load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")


def _problems(*parts: str) -> list[str]:
    try:
        _load(*parts)
    except ConfigError as exc:
        return [str(p) for p in exc.problems]
    raise AssertionError("the configuration loaded")


JOB = """\
jobs:
  - name: j
    command: "true"
    schedule: "@daily"
"""


def test_a_template_that_does_not_compile_is_an_error_with_file_and_line() -> None:
    found = _problems(
        JOB,
        "    onFailure:\n"
        "      report:\n"
        "        mail:\n"
        "          from: a@example.com\n"
        "          to: b@example.com\n"
        "          smtpHost: localhost\n"
        "          body: |\n"
        "            fine\n"
        "            {% if stdout %}never closed\n",
    )
    assert len(found) == 1
    assert found[0].startswith("c.yaml:11:11: jobs[0].onFailure.report.mail.body: ")
    assert "does not compile" in found[0] and "line 2 of the template" in found[0]


def test_every_template_field_is_compiled() -> None:
    for where in (
        "webhook: {url: 'http://h/', body: '{{ x'}",
        "sentry: {dsn: {value: 'http://k@h/1'}, fingerprint: ['{{ ']}",
        "sentry: {body: '{% endif %}'}",
        "mail: {subject: '{{ }}'}",
    ):
        found = _problems(JOB, f"    onSuccess: {{report: {{{where}}}}}\n")
        assert len(found) == 1 and "does not compile" in found[0], (where, found)


def test_mail_with_from_and_to_but_no_host_is_an_error_on_the_merged_job() -> None:
    found = _problems(
        textwrap.dedent(
            """\
            defaults:
              onFailure:
                report:
                  mail: {from: a@example.com, to: b@example.com}
            """
        ),
        JOB,
    )
    assert found == [
        "c.yaml:4:7: defaults.onFailure.report.mail: job 'j': mail has from and to but no "
        "smtpHost: set the SMTP server's host"
    ]
    # the host given by the job itself completes what the defaults started
    state = _load(
        textwrap.dedent(
            """\
            defaults:
              onFailure:
                report:
                  mail: {from: a@example.com, to: b@example.com}
            """
        ),
        JOB,
        "    onFailure: {report: {mail: {smtpHost: mail.example.com}}}\n",
    )
    assert state.jobs["j"].config.on_failure.report.mail.enabled
    assert state.warnings == ()


def test_a_reporter_with_some_required_keys_warns_and_stays_off() -> None:
    state = _load(JOB, "    onPermanentFailure: {report: {mail: {to: b@example.com}}}\n")
    assert [str(w) for w in state.warnings] == [
        "c.yaml:5:35: jobs[0].onPermanentFailure.report.mail: job 'j': mail sets to but not "
        "from and smtpHost: this reporter stays off until all are set"
    ]
    assert not state.jobs["j"].config.on_permanent_failure.report.mail.enabled


def test_webhook_headers_are_secrets_and_rate_limits_default_as_documented() -> None:
    state = _load(
        JOB,
        "    onFailure:\n"
        "      report:\n"
        "        webhook:\n"
        "          url: http://127.0.0.1:9/hook\n"
        "          headers: {X-Plain: text, Authorization: {fromEnvVar: HOOK_TOKEN}}\n",
    )
    config = state.jobs["j"].config
    hook = config.on_failure.report.webhook
    assert hook.headers["X-Plain"].value == "text"
    assert hook.headers["Authorization"].from_env_var == "HOOK_TOKEN"
    assert (hook.timeout, hook.format, hook.enabled) == (30, "json", True)
    assert config.on_failure.rate_limit == 0
    assert config.on_success.rate_limit == 0
    assert config.on_missed.rate_limit == 3600
