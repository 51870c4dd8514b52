"""``GET /audit`` and ``cronstable audit`` against a real daemon following a real
``git daemon`` remote, polling once an hour: every revision after the first is fetched
because something asked (a signed GitHub push, ``POST /reload`` with a named token, a
SIGHUP to this process), and the trail says which; runs name the revision and job digest
they ran under.  The CLI is the real command, in a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import until
from git_server import GitDaemon, WorkRepo
from test_web_github import SECRET, sign
from web_stack import section_named

from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.runtime.daemon import Daemon
from cronstable.sources.factory import open_source
from cronstable.web.section import WebSection

pytestmark = pytest.mark.timeout(90)

TOKEN = "ops-secret"


def config(comment: str = "") -> str:
    return (
        "web:\n"
        "  listen: [http://127.0.0.1:0]\n"
        f"  authTokens: [{{name: ops, value: {TOKEN}, scopes: [read, reload, trigger]}}]\n"
        "  webhooks:\n"
        f"    github: {{secret: {{value: {SECRET!r}}}}}\n"
        "jobs:\n"
        "  - {name: a, command: 'true', schedule: '@yearly'}\n"
        f"# {comment}\n"
    )


@dataclass
class Audited:
    repo: WorkRepo
    daemon: Daemon
    web: WebSection
    http: aiohttp.ClientSession
    token_file: Path

    @property
    def url(self) -> str:
        return str(self.web.urls()[0])

    def applied(self) -> str | None:
        record = self.daemon.applier.status.applied
        return record.revision if record is not None else None

    async def get(self, path: str, status: int = 200) -> tuple[Any, Any]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with self.http.get(self.url + path, headers=headers) as response:
            assert response.status == status, await response.text()
            return await response.json(), response.headers

    async def cli(self, *args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cronstable",
            "audit",
            "--url",
            self.url,
            "--token-file",
            str(self.token_file),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()


@pytest_asyncio.fixture
async def audited(tmp_path: Path) -> AsyncIterator[Audited]:
    repo = WorkRepo.create(tmp_path / "remotes" / "acme", "cron")
    repo.commit({"cronstable.yaml": config("first")})
    repo.push()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with GitDaemon(tmp_path / "remotes") as server:
        source = open_source(
            f"{server.url('acme/cron.git')}?interval=3600", cache_dir=tmp_path / "cache"
        )
        daemon = build_daemon(source, NodeFacts(name="n1"))
        web = section_named(daemon, "web")
        running = asyncio.create_task(daemon.run())
        try:
            await until(lambda: bool(web.urls()), 15, "listener")
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
                yield Audited(repo, daemon, web, http, token_file)
        finally:
            daemon.request_stop()
            assert await asyncio.wait_for(running, 15) == 0


async def push_by_webhook(audited: Audited, sha: str, delivery: str) -> None:
    payload = {
        "ref": "refs/heads/main",
        "after": sha,
        "repository": {"full_name": "Acme/Cron", "default_branch": "main"},
        "sender": {"login": "octocat\x1b[31m"},
    }
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(body),
    }
    async with audited.http.post(audited.url + "/webhooks/github", data=body, headers=headers) as r:
        assert r.status == 202, await r.text()


@pytest.mark.asyncio
async def test_the_trail_names_each_trigger_and_the_cli_pages_through_it(
    audited: Audited,
) -> None:
    first = audited.applied()
    # a signed push
    second = audited.repo.commit({"cronstable.yaml": config("second")})
    audited.repo.push()
    await push_by_webhook(audited, second, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
    await until(lambda: audited.applied() == second, 15, "the pushed revision")
    # POST /reload with the token named ops
    third = audited.repo.commit({"cronstable.yaml": config("third")})
    audited.repo.push()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with audited.http.post(audited.url + "/reload", headers=headers) as response:
        assert response.status == 202
    await until(lambda: audited.applied() == third, 15, "the reloaded revision")
    # SIGHUP: the daemon's own handler, as `kill -HUP` reaches it
    bad = audited.repo.commit({"cronstable.yaml": "jobs: [oops\n"})
    audited.repo.push()
    os.kill(os.getpid(), signal.SIGHUP)
    status = audited.daemon.applier.status
    await until(lambda: status.last_failed is not None, 15, "the bad revision rejected")

    page, _ = await audited.get("/audit")
    entries = page["entries"]
    assert [e["revision"] for e in entries] == [bad, third, second, first]
    assert [e["outcome"] for e in entries] == ["rejected", "applied", "applied", "applied"]
    kinds = [e["trigger"]["kind"] for e in entries]
    assert kinds == ["sighup", "api", "webhook", "start"]
    webhook, api = entries[2]["trigger"], entries[1]["trigger"]
    assert webhook["delivery"] == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert webhook["sender"] == "octocat\\x1b[31m"  # escaped where it was read
    assert webhook["revision"] == second and webhook["requestedAt"].endswith("Z")
    assert (api["via"], api["token"]) == ("http", "ops")
    assert entries[0]["errors"] == [
        "cronstable.yaml:1:7: invalid YAML: the '[' opened here is never closed"
    ]
    assert entries[0]["changes"] is None and entries[0]["jobSetId"] is None
    assert entries[3]["jobSetId"].startswith("v1:") and entries[3]["node"] == "n1"
    assert (page["kept"], page["bound"], page["durable"], page["nextCursor"]) == (
        4,
        1000,
        False,
        None,
    )
    assert TOKEN not in json.dumps(page)

    # pages of two: the Link header names the next one, whose cursor gives the older two
    newest, headers = await audited.get("/audit?limit=2")
    cursor = newest["nextCursor"]
    assert [e["revision"] for e in newest["entries"]] == [bad, third]
    assert headers["Link"] == f'</audit?limit=2&cursor={cursor}>; rel="next"'
    older, headers = await audited.get(f"/audit?limit=2&cursor={cursor}")
    assert [e["revision"] for e in older["entries"]] == [second, first]
    assert older["nextCursor"] is None and "Link" not in headers
    await audited.get("/audit?limit=0", 400)
    await audited.get("/audit?limit=1001", 400)
    await audited.get("/audit?cursor=nope", 400)

    # a run names the revision and job digest it ran under
    async with audited.http.post(audited.url + "/jobs/a/start", headers=headers_of()) as r:
        assert r.status == 202
    control = audited.daemon.control
    await until(lambda: control.history.last("a") is not None, 15, "the run of a")
    runs, _ = await audited.get("/jobs/a/runs")
    job = audited.daemon.scheduler.job("a")
    assert job is not None
    assert (runs["runs"][0]["revision"], runs["runs"][0]["jobDigest"]) == (third, job.digest)

    # the CLI reads the same trail, page after page
    code, out, err = await audited.cli("--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["entries"] == entries
    code, out, err = await audited.cli("--limit", "3")
    assert code == 0, err
    assert "3 of 4 entries (no state store: kept in memory only)" in out
    assert "api (http) token ops" in out and "webhook 72d3162e" in out
    assert "by octocat\\x1b[31m" in out and "\x1b" not in out
    assert "sighup" in out and "1 problem" in out and "start" not in out.split("\n", 3)[-1]


def headers_of() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_the_audit_command_loads_no_event_loop_and_says_when_nothing_answers() -> None:
    import socket
    import subprocess

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cronstable", "audit", "--url",
         f"http://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 3
    assert f"cronstable audit: cannot reach http://127.0.0.1:{port}" in done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert not imported & {"asyncio", "aiohttp"}
