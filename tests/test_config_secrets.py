"""Where the models hold secrets, and the loader's errors that never show them."""

from __future__ import annotations

import textwrap
from typing import Annotated, Any

import pytest

from cronstable.config import ConfigError, DesiredState, load
from cronstable.config.models import (
    CREDENTIAL_URL,
    SECRET_TEXT,
    ClusterEtcd,
    GitHubWebhook,
    JobConfig,
    MailReport,
    Model,
    SecretSource,
    SentryReport,
    WebConfig,
    WebhookReport,
)
from cronstable.config.secrets import (
    hide_urls,
    inline_secrets,
    secret_at,
    secret_fields,
)
from cronstable.config.tree import MemoryTree
from cronstable.errors import Problem


def _load(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(text)
    return [str(p) for p in caught.value.problems]


def test_the_secret_fields_are_found_from_the_models() -> None:
    found = {(f.owner, f.key): f.kind for f in secret_fields()}
    assert found == {
        (SentryReport, "dsn"): "source",
        (MailReport, "password"): "source",
        (WebhookReport, "url"): "url",
        (WebhookReport, "headers"): "source",
        (WebConfig, "authToken"): "source",
        (WebConfig, "authTokens"): "source",
        (GitHubWebhook, "secret"): "source",
        (ClusterEtcd, "endpoints"): "url",
    }


class _Marked(Model):
    api_key: Annotated[str | None, SECRET_TEXT] = None
    hooks: Annotated[list[str], CREDENTIAL_URL] = []
    plain: str | None = None
    nested: dict[str, SecretSource] = {}


class _Root(Model):
    inner: list[_Marked] = []


def test_a_marked_text_is_a_secret_field_and_its_text_an_inline_secret() -> None:
    assert {(f.owner, f.key, f.kind) for f in secret_fields(_Root)} == {
        (_Marked, "api_key", "secret"),
        (_Marked, "hooks", "url"),
        (_Marked, "nested", "source"),
    }
    doc = {
        "inner": [
            {"api_key": "key-123", "plain": "not-a-secret", "hooks": ["http://u:p@h/"]},
            {"nested": {"a": {"value": "inline-1"}, "b": "inline-2", "c": {"fromFile": "/x"}}},
            "not a mapping",
        ]
    }
    # a URL's secrets are its parts (redact finds those); texts under 4 characters are
    # too short to look for in whole messages
    assert inline_secrets(doc, _Root) == {"key-123", "inline-1", "inline-2"}
    assert inline_secrets({"inner": [{"api_key": "abc"}]}, _Root) == set()
    assert secret_at(_Root, ("inner", 0, "api_key")) == "text"
    assert secret_at(_Root, ("inner", 1, "nested", "a")) == "text"
    assert secret_at(_Root, ("inner", 1, "nested", "a", "value")) == "text"
    assert secret_at(_Root, ("inner", 1, "nested", "a", "fromFile")) is None
    assert secret_at(_Root, ("inner", 0, "hooks", 0)) == "url"
    assert secret_at(_Root, ("inner", 0, "plain")) is None


def test_secret_positions_follow_every_container_of_the_format() -> None:
    report = ("onFailure", "report")
    assert secret_at(JobConfig, (*report, "mail", "password")) == "text"
    assert secret_at(JobConfig, (*report, "sentry", "dsn", "value")) == "text"
    assert secret_at(JobConfig, (*report, "webhook", "headers")) == "text"
    assert secret_at(JobConfig, (*report, "webhook", "headers", "Authorization")) == "text"
    assert secret_at(JobConfig, (*report, "mail", "username")) is None
    assert secret_at(JobConfig, (*report, "webhook", "url")) == "url"
    assert secret_at(ClusterEtcd, ("endpoints", 1)) == "url"
    assert secret_at(JobConfig, (*report, "mail", "password", "fromFile")) is None
    assert secret_at(WebConfig, ("authTokens", 2)) == "text"
    assert secret_at(WebConfig, ("authToken",)) == "text"
    assert secret_at(WebConfig, ("webhooks", "github", "secret", "value")) == "text"
    assert secret_at(WebConfig, ("authTokens", 0, "name")) is None


def test_hide_urls_rewrites_only_the_marked_urls_of_a_dump() -> None:
    dump: dict[str, Any] = {
        "name": "x",
        "command": ["curl", "http://u:p@h/"],
        "onFailure": {"report": {"webhook": {"url": "http://u:p@h/?t=1"}}},
    }
    hidden = hide_urls(dump, JobConfig, lambda url: "HIDDEN")
    assert hidden["onFailure"]["report"]["webhook"]["url"] == "HIDDEN"
    assert hidden["command"] == ["curl", "http://u:p@h/"]
    assert dump["onFailure"]["report"]["webhook"]["url"] == "http://u:p@h/?t=1"  # a copy


# ------------------------------------------------------------ the loader's errors

MAIL = """\
jobs:
  - name: backup
    command: pg_dump app
    schedule: "0 3 * * *"
    onFailure:
      report:
        mail:
          from: cron@example.com
          to: ops@example.com
          smtpHost: smtp.example.com
          password: {password}
"""


def test_a_plain_text_secret_is_an_error_that_names_the_place_not_the_secret() -> None:
    [problem] = _problems(MAIL.format(password='"pw"'))
    assert problem == (
        "c.yaml:11:11: jobs[0].onFailure.report.mail.password: expected a mapping, got "
        "<hidden>; give a secret as fromFile: PATH or fromEnvVar: NAME "
        "(value: TEXT would keep it in the repository)"
    )


def test_a_secret_quoted_elsewhere_in_the_revision_is_hidden_there_too() -> None:
    # the same text as the inline password, quoted by another key's error
    text = MAIL.format(password="{value: hunter2hunter2}") + "    timezone: hunter2hunter2\n"
    [problem] = _problems(text)
    assert "hunter2" not in problem
    assert problem.startswith("c.yaml:12:5: jobs[0].timezone: unknown time zone <hidden>")


def test_warnings_and_section_problems_hide_the_secrets_too() -> None:
    text = MAIL.format(password="{value: hunter2hunter2, fromEnvVar: SMTP_PASSWORD}")
    state = _load(text)
    assert state.secrets == frozenset({"hunter2hunter2"})
    [warning] = state.warnings
    assert "value and fromEnvVar are both set" in str(warning)
    # what a section finds after loading (the applier masks it with the revision's secrets)
    found = Problem("c.yaml", 1, None, ("web",), "cannot bind 'hunter2hunter2'")
    assert found.hiding(state.secrets).message == "cannot bind <hidden>"


def test_every_problem_hides_the_credentials_of_the_urls_it_quotes() -> None:
    problem = Problem("c.yaml", 3, 5, ("x",), "'http://u:PW@h:1/x?token=T&a=b' is wrong")
    assert problem.message == "'http://<hidden>@h:1/x?token=<hidden>&a=<hidden>' is wrong"
    [etcd] = _problems(
        """\
        cluster:
          backend: etcd
          etcd: {endpoints: ["https://root:EPW@h:2379/x?k=v"]}
        """
    )
    assert "EPW" not in etcd and "k=v" not in etcd
    assert etcd == (
        "c.yaml:3:22: cluster.etcd.endpoints[0]: 'https://<hidden>@h:2379/x?k=<hidden>' "
        "is not http://HOST:PORT or https://HOST:PORT"
    )


def test_a_webhook_url_must_be_http_and_its_credentials_never_show() -> None:
    text = """\
    jobs:
      - name: a
        command: "true"
        schedule: "@daily"
        onFailure:
          report:
            webhook: {url: "ftp://u:PW@host/h?token=T"}
    """
    [problem] = _problems(text)
    assert problem == (
        "c.yaml:7:19: jobs[0].onFailure.report.webhook.url: "
        "'ftp://<hidden>@host/h?token=<hidden>' is not an http:// or https:// URL"
    )
    good = _load(text.replace("ftp://", "https://"))
    assert good.jobs["a"].config.on_failure.report.webhook.url == "https://u:PW@host/h?token=T"


def test_a_marked_url_without_a_scheme_is_hidden_whole() -> None:
    # nothing tells the credentials of "user:pw@host/…" apart: the whole text goes
    [etcd] = _problems(
        """\
        cluster:
          backend: etcd
          etcd: {endpoints: ["root:etcdpw@h:2379"]}
        """
    )
    assert etcd == (
        "c.yaml:3:22: cluster.etcd.endpoints[0]: <hidden> is not http://HOST:PORT or "
        "https://HOST:PORT"
    )
