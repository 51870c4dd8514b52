"""The ``web`` section's keys: listeners, TLS, socket mode and tokens, with located errors."""

from __future__ import annotations

import pytest

from cronstable.config import ConfigError, MemoryTree, load


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")
    return [str(p) for p in info.value.problems]


def test_every_key_of_the_web_section() -> None:
    text = """\
web:
  listen:
    - https://127.0.0.1:8443
    - http://[::1]:8080
    - unix:///run/cronstable/api.sock
  tls: {cert: /etc/c/cert.pem, key: /etc/c/key.pem}
  socketMode: '0660'
  metricsPublic: yes
  authToken: {fromEnvVar: ADMIN_TOKEN}
  authTokens:
    - {name: ci, fromFile: /run/secrets/ci, scopes: [read, trigger]}
    - {name: grafana, value: s3cret, scopes: read}
"""
    state = load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")
    web = state.web
    assert web is not None
    assert web.tls is not None and web.tls.key == "/etc/c/key.pem"
    assert web.mode == 0o660
    assert web.metrics_public is True
    assert web.auth_token is not None and web.auth_token.from_env_var == "ADMIN_TOKEN"
    assert [(t.name, t.scopes) for t in web.auth_tokens] == [
        ("ci", ["read", "trigger"]),
        ("grafana", ["read"]),
    ]
    located = state.problem(("web", "listen", 2), "x")
    assert str(located) == "c.yaml:5:7: web.listen[2]: x"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "  listen: [https://127.0.0.1:1]\n",
            "c.yaml:1:1: web: an https:// listener needs tls: {cert: PATH, key: PATH}",
        ),
        (
            "  listen: [http://127.0.0.1:1]\n  tls: {cert: /a, key: /b}\n",
            "c.yaml:1:1: web: tls is set but no listener is https://",
        ),
        (
            "  listen: [http://127.0.0.1:1]\n  socketMode: '0660'\n",
            "c.yaml:1:1: web: socketMode is set but no listener is unix://",
        ),
        (
            "  listen: [unix:///s]\n  socketMode: rw\n",
            "c.yaml:3:3: web.socketMode: 'rw' is not an octal file mode like '0660'",
        ),
        (
            "  listen: []\n  authToken: {}\n",
            "c.yaml:3:3: web.authToken: give one of value, fromFile or fromEnvVar",
        ),
        (
            "  listen: []\n  authToken: {fromFile: token.txt}\n",
            "c.yaml:3:15: web.authToken.fromFile: 'token.txt' is not an absolute path "
            "(it names a file on the node, not in the repository)",
        ),
        (
            "  listen: []\n  authTokens:\n    - {name: a, value: x, scopes: [write]}\n",
            "c.yaml:4:36: web.authTokens[0].scopes[0]: expected one of read, trigger, "
            "reload, admin, got 'write'",
        ),
        (
            "  listen: []\n  authTokens:\n    - {name: a, value: x, scopes: [read]}\n"
            "    - {name: a, value: y, scopes: [read]}\n",
            "c.yaml:1:1: web: two authTokens are named 'a'",
        ),
    ],
)
def test_web_section_problems(body: str, expected: str) -> None:
    assert problems("web:\n" + body) == [expected]


def test_a_token_with_several_sources_warns_and_the_first_set_wins() -> None:
    # the seeds' and yacron's precedence, as for every other secret (issue 7, item 12)
    text = """\
web:
  listen: []
  authToken: {fromFile: /run/t, fromEnvVar: T}
  authTokens:
    - {name: ci, scopes: [read], value: v, fromFile: /run/ci, fromEnvVar: CI}
    - {name: ok, scopes: [read], fromEnvVar: OK}
"""
    state = load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")
    assert [str(w) for w in state.warnings] == [
        "c.yaml:3:3: web.authToken: fromFile and fromEnvVar are both set; only fromFile "
        "is used (the first set of value, fromFile, fromEnvVar wins)",
        "c.yaml:5:7: web.authTokens[0]: value, fromFile and fromEnvVar are all set; only "
        "value is used (the first set of value, fromFile, fromEnvVar wins)",
    ]
    assert state.web is not None and state.web.auth_token is not None
    assert state.web.auth_token.chosen() == ("fromFile", "/run/t")


def test_the_request_limits_and_allowed_hosts() -> None:
    plain = load(MemoryTree({"c.yaml": b"web: {listen: []}\n"}), "c.yaml").web
    assert plain is not None
    assert (plain.allowed_hosts, plain.body_timeout) == ([], 30.0)
    assert (plain.webhook_max_body_bytes, plain.webhook_budget) == (25 << 20, 100 << 20)
    text = """\
web:
  listen: [http://0.0.0.0:8080]
  allowedHosts: [Cron.Example.com, 'ops.example.com:8443', '[::1]:80', 10.0.0.7]
  bodyTimeout: 5
  webhookMaxBodyBytes: 1M
  webhookBodyBudgetBytes: 8M
"""
    web = load(MemoryTree({"c.yaml": text.encode()}), "c.yaml").web
    assert web is not None
    assert web.allowed_hosts == ["cron.example.com", "ops.example.com", "::1", "10.0.0.7"]
    assert (web.body_timeout, web.webhook_max_body_bytes, web.webhook_budget) == (
        5,
        1 << 20,
        8 << 20,
    )
    only_limit = text.replace("  webhookBodyBudgetBytes: 8M\n", "")
    web = load(MemoryTree({"c.yaml": only_limit.encode()}), "c.yaml").web
    assert web is not None and web.webhook_budget == 4 << 20


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "  listen: []\n  allowedHosts: ['http://cron.example.com/']\n",
            "c.yaml:3:18: web.allowedHosts[0]: 'http://cron.example.com/' is not a host name "
            "(like cron.example.com, optionally with :PORT)",
        ),
        (
            "  listen: []\n  bodyTimeout: 0\n",
            "c.yaml:3:3: web.bodyTimeout: must be more than 0, got 0",
        ),
        (
            "  listen: []\n  webhookMaxBodyBytes: 1M\n  webhookBodyBudgetBytes: 512K\n",
            "c.yaml:1:1: web: webhookBodyBudgetBytes (524288) is smaller than "
            "webhookMaxBodyBytes (1048576): no delivery of the largest size could ever be "
            "received",
        ),
    ],
)
def test_request_limit_problems(body: str, expected: str) -> None:
    assert problems("web:\n" + body) == [expected]
