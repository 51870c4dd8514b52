"""Secrets never in errors: every secret-bearing field × every output that shows errors.

The table has one row per field the models mark as holding a secret (found from the
models themselves: a new secret field without a row fails
:func:`test_every_secret_field_has_a_row`).  Each row is a configuration whose
rejection, before redaction, quoted the secret; each output must name the file, the
line and the key, show ``<hidden>`` and never the secret:

* ``validate`` and ``diff``: ``python -m cronstable`` in a subprocess;
* the daemon's log, ``/status`` (``lastRejected``, which is also what the dashboard
  renders) and ``/events``: one real daemon (``cronstable run``) for the whole module,
  given each row's revision in turn.

Then ``GET /config`` (and ``cronstable diff`` against a daemon): every marked URL with
its userinfo and query values as digests, on the in-process daemon of
``tests/web_stack.py``, and a problem a section finds after loading, through the real
applier.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import DaemonProcess, http, wait_for
from web_stack import Stack

from cronstable.config import ConfigError, DesiredState
from cronstable.config.secrets import secret_fields
from cronstable.published import secret_digest
from cronstable.reconcile.plan import Plan

LISTEN = "http://127.0.0.1:0"
HINT = "give a secret as fromFile: PATH or fromEnvVar: NAME"

GOOD = """\
web:
  listen: [{listen}]
jobs:
  - {{name: tick, command: "true", schedule: "@yearly"}}
"""
REPORT = """\
web:
  listen: [{listen}]
jobs:
  - name: tick
    command: "true"
    schedule: "@yearly"
    onFailure:
      report:
"""


@dataclass(frozen=True)
class Row:
    text: str
    """The configuration (``{listen}`` is the web section's address)."""
    line: int
    """Where the error is located (the column is checked to be there)."""
    key: str
    """The key path the error names."""
    secrets: tuple[str, ...]
    """Texts that no output may show."""
    hint: bool = True
    """The error says to use fromFile or fromEnvVar (a plain text where a secret was due)."""
    shown: str = "got <hidden>"
    """What the error shows instead of the secret."""


ROWS: dict[str, Row] = {
    "SentryReport.dsn": Row(
        REPORT + '        sentry: {{dsn: "https://sentrykey7f3a@o1.ingest.example/1"}}\n',
        9,
        "jobs[0].onFailure.report.sentry.dsn",
        ("sentrykey7f3a", "o1.ingest.example"),
    ),
    # the case: a short secret is hidden where its own key is reported
    "MailReport.password": Row(
        REPORT + "        mail:\n          from: cron@example.com\n          to: ops@example.com\n"
        '          smtpHost: smtp.example.com\n          password: "pw"\n',
        13,
        "jobs[0].onFailure.report.mail.password",
        ("'pw'", '"pw"', " pw"),
    ),
    "WebhookReport.headers": Row(
        REPORT + "        webhook:\n          url: https://hooks.example/h\n"
        '          headers: "Bearer hdrsecret42"\n',
        11,
        "jobs[0].onFailure.report.webhook.headers",
        ("hdrsecret42", "Bearer"),
    ),
    "WebhookReport.url": Row(
        REPORT + "        webhook:\n"
        '          url: "ftp://hookuser:hookpw99@hooks.example/h?token=hooktok77&x=hookx"\n',
        10,
        "jobs[0].onFailure.report.webhook.url",
        ("hookuser", "hookpw99", "hooktok77", "hookx"),
        hint=False,
        shown="'ftp://<hidden>@hooks.example/h?token=<hidden>&x=<hidden>' is not an http://",
    ),
    "WebConfig.authToken": Row(
        GOOD.replace("\njobs:", '\n  authToken: "admintok5501"\njobs:'),
        3,
        "web.authToken",
        ("admintok5501",),
    ),
    "WebConfig.authTokens": Row(
        GOOD.replace("\njobs:", '\n  authTokens: ["scopedtok6602"]\njobs:'),
        3,
        "web.authTokens[0]",
        ("scopedtok6602",),
    ),
    "GitHubWebhook.secret": Row(
        GOOD.replace("\njobs:", '\n  webhooks: {{github: {{secret: "ghsecret7703"}}}}\njobs:'),
        3,
        "web.webhooks.github.secret",
        ("ghsecret7703",),
    ),
    "ClusterEtcd.endpoints": Row(
        GOOD
        + "cluster:\n  backend: etcd\n  etcd:\n    endpoints:\n"
        + '      - "https://etcduser:etcdpw8804@127.0.0.1:2379/x?key=etcdkey9905"\n',
        9,
        "cluster.etcd.endpoints[0]",
        ("etcduser", "etcdpw8804", "etcdkey9905"),
        hint=False,
        shown="'https://<hidden>@127.0.0.1:2379/x?key=<hidden>' is not http://HOST:PORT",
    ),
}


def test_every_secret_field_has_a_row() -> None:
    fields = {field.name for field in secret_fields()}
    assert fields == set(ROWS), (
        "every field holding a secret needs a row in ROWS (a configuration whose error "
        f"would quote it): missing {sorted(fields - set(ROWS))}, stale {sorted(set(ROWS) - fields)}"
    )


def check(row: Row, problems: list[str], everything: str, where: str) -> None:
    """``problems`` (one output's lines) hold the row's problem, located and hidden;
    ``everything`` (the whole output) shows none of the row's secrets."""
    pattern = re.compile(rf"cronstable\.yaml:{row.line}:\d+: {re.escape(row.key)}: ")
    mine = [p for p in problems if pattern.search(p)]
    assert mine, f"{where}: no problem at cronstable.yaml:{row.line} {row.key}:\n{problems}"
    for problem in mine:
        assert row.shown in problem, f"{where}: {problem}"
        assert (HINT in problem) == row.hint, f"{where}: {problem}"
    for secret in row.secrets:
        assert secret not in everything, f"{where} shows {secret!r}:\n{everything[-3000:]}"


def write(root: Path, text: str) -> None:
    """The configuration replaced at once (the daemon never reads half of it)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / ".cronstable.yaml.tmp"
    tmp.write_text(text)
    os.replace(tmp, root / "cronstable.yaml")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"NO_COLOR": "1"},
    )


# ------------------------------------------------------------ validate, diff


@pytest.mark.parametrize("name", ROWS)
def test_validate_hides_the_secret(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    write(tmp_path / "bad", row.text.format(listen=LISTEN))
    done = cli("validate", str(tmp_path / "bad"))
    assert done.returncode == 1, done.stderr
    check(row, done.stderr.splitlines(), done.stdout + done.stderr, "validate")


@pytest.mark.parametrize("name", ROWS)
def test_diff_hides_the_secret(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    write(tmp_path / "good", GOOD.format(listen=LISTEN))
    write(tmp_path / "bad", row.text.format(listen=LISTEN))
    done = cli("diff", str(tmp_path / "good"), str(tmp_path / "bad"))
    assert done.returncode == 2, done.stderr
    check(row, done.stderr.splitlines(), done.stdout + done.stderr, "diff")
    # an invalid base is reported too (and compared as nothing)
    done = cli("diff", str(tmp_path / "bad"), str(tmp_path / "good"))
    assert done.returncode == 1, done.stderr
    check(row, done.stderr.splitlines(), done.stdout + done.stderr, "diff (base)")


# ------------------------------------------------------------ a real daemon: log, /status, /events


class EventReader:
    """``GET /events`` read in a thread for the life of the daemon."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self._connection = HTTPConnection(parts.hostname, parts.port, timeout=120)
        self._connection.request("GET", "/events")
        self._response = self._connection.getresponse()
        assert self._response.status == 200
        self.raw: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        kind = ""
        try:
            for line in self._response:
                text = line.decode("utf-8").rstrip("\n")
                with self._lock:
                    self.raw.append(text)
                    if text.startswith("event: "):
                        kind = text[len("event: ") :]
                    elif text.startswith("data: "):
                        self.events.append((kind, json.loads(text[len("data: ") :])))
        except (OSError, ValueError):
            pass  # the daemon stopped

    def rejected(self, revision: str) -> dict[str, Any] | None:
        with self._lock:
            for kind, data in self.events:
                if kind == "revision-rejected" and data.get("revision") == revision:
                    return data
        return None

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.raw)

    def close(self) -> None:
        """After the daemon stopped: its stream has ended."""
        self._thread.join(10)
        assert not self._thread.is_alive(), "the /events stream outlived the daemon"
        self._connection.close()


@dataclass
class Running:
    daemon: DaemonProcess
    url: str
    root: Path
    events: EventReader


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    base = tmp_path_factory.mktemp("secret-daemon")
    root = base / "conf"
    write(root, GOOD.format(listen=LISTEN))
    daemon = DaemonProcess(root, base / "daemon.log").start()
    try:
        url = daemon.url()
        events = EventReader(url)
        try:
            yield Running(daemon, url, root, events)
        finally:
            daemon.stop()
            events.close()
    finally:
        daemon.kill9()


def _rejection(running: Running, row: Row) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def rejected() -> bool:
        status, _, body = http(f"{running.url}/status")
        assert status == 200, body
        last = body["lastRejected"]
        if last is not None and any(f"{row.key}: " in e for e in last["errors"]):
            found.append(last)
        return bool(found)

    wait_for(rejected, 20, f"the revision with {row.key} rejected in /status")
    return found[0]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ROWS)
def test_a_daemon_hides_the_secret_in_its_log_status_and_events(
    name: str, running: Running
) -> None:
    row = ROWS[name]
    write(running.root, row.text.format(listen=LISTEN))
    running.daemon.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
    rejected = _rejection(running, row)
    revision = rejected["revision"]

    # /status, and the dashboard, which renders its lastRejected
    status, _, text = http(f"{running.url}/status", headers={"Accept": "application/json"})
    assert status == 200
    check(row, rejected["errors"], json.dumps(text), "/status")

    # /events
    wait_for(lambda: running.events.rejected(revision) is not None, 20, "revision-rejected")
    event = running.events.rejected(revision)
    assert event is not None
    check(row, event["errors"], running.events.text(), "/events")

    # the log: one line tells of the rejection, with every problem
    line = running.daemon.wait_log(rf"Revision {re.escape(revision)} from .* rejected.*")[0]
    check(row, [line], running.daemon.output(), "log")


# ------------------------------------------------------------ in process: /config, a section


WEBHOOK = "http://hookuser:hookpw99@hooks.example/h?token=hooktok77&x=hookx"
CONFIGURED = f"""\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {{name: admin, value: admin-tok-1234, scopes: [admin]}}
jobs:
  - name: tick
    command: "true"
    schedule: "@yearly"
    onFailure:
      report:
        webhook:
          url: "{WEBHOOK}"
          headers: {{Authorization: "Bearer hdrsecret42"}}
        sentry: {{dsn: {{value: "https://sentrykey7f3a@o1.ingest.example/1"}}}}
"""
ADMIN = {"Authorization": "Bearer admin-tok-1234"}


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_config_shows_the_credentials_of_every_url_as_digests(
    stack: Stack, tmp_path: Path
) -> None:
    assert (await stack.apply(CONFIGURED)).outcome == "applied"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        async with session.get(f"{stack.url()}/config", headers=ADMIN) as response:
            assert response.status == 200
            text = await response.text()
    for secret in ("hookuser", "hookpw99", "hooktok77", "hookx", "hdrsecret42", "sentrykey7f3a"):
        assert secret not in text
    report = json.loads(text)["jobs"]["tick"]["config"]["onFailure"]["report"]
    assert report["webhook"]["url"] == (
        f"http://{secret_digest('hookuser:hookpw99')}@hooks.example/h"
        f"?token={secret_digest('hooktok77')}&x={secret_digest('hookx')}"
    )
    assert report["webhook"]["headers"]["Authorization"]["value"] == secret_digest(
        "Bearer hdrsecret42"
    )
    assert report["sentry"]["dsn"]["value"] == secret_digest(
        "https://sentrykey7f3a@o1.ingest.example/1"
    )

    # cronstable diff against the daemon: the same configuration compares equal (a
    # digest is hidden again as itself); a changed URL shows as changed digests
    write(tmp_path / "local", CONFIGURED)
    env = os.environ | {"CRONSTABLE_TOKEN": "admin-tok-1234", "NO_COLOR": "1"}

    async def diff() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cronstable",
            "diff",
            "--format",
            "json",
            stack.url(),
            str(tmp_path / "local"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode()

    code, out = await diff()
    assert code == 0, out
    write(tmp_path / "local", CONFIGURED.replace("hooktok77", "hooktok78"))
    code, out = await diff()
    assert code == 1, out
    assert secret_digest("hooktok77") in out and secret_digest("hooktok78") in out, out
    assert "hooktok7" not in out and "hookpw99" not in out, out


class QuotingSection:
    """A section whose prepare fails quoting a value of the revision (as a store's or a
    handler's error may), to show the applier hides the revision's inline secrets in it."""

    name = "quoting"

    def affected(self, plan: Plan) -> bool:
        return True

    async def prepare(self, desired: DesiredState) -> Any:
        raise ConfigError(
            [desired.problem(("web",), "cannot use 'admin-tok-1234' at https://u:pw@h/?k=v")]
        )

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        raise AssertionError("never prepared")

    async def discard(self, prepared: Any) -> None:
        return None


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_problem_found_at_prepare_hides_the_revisions_secrets(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    assert (await stack.apply(GOOD.format(listen=LISTEN))).outcome == "applied"
    stack.daemon.applier.sections.append(QuotingSection())
    with caplog.at_level(logging.ERROR, logger="cronstable.reconcile.apply"):
        record = await stack.apply(CONFIGURED)
    assert record.outcome == "rejected"
    shown = "web: cannot use <hidden> at https://<hidden>@h/?k=<hidden>"
    assert [e.split(": ", 1)[1] for e in record.errors] == [shown]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        async with session.get(f"{stack.url()}/status") as response:
            status = await response.json()
    assert [e.split(": ", 1)[1] for e in status["lastRejected"]["errors"]] == [shown]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert shown in logged and "admin-tok-1234" not in logged
