"""POST /webhooks/github against a real daemon following a real ``git daemon`` remote.

Polling is set to one hour, so only the webhook can explain a revision applied
within seconds of a push.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import until
from git_server import GitDaemon, WorkRepo
from web_stack import Stack, section_named

from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.runtime.daemon import Daemon
from cronstable.sources.factory import open_source
from cronstable.web.github import MAX_BODY, repository_name, why_not_ours
from cronstable.web.section import WebSection

pytestmark = pytest.mark.timeout(90)

SECRET = "It's a Secret to Everybody"


def config(extra: str = "") -> str:
    return (
        "web:\n"
        "  listen: [http://127.0.0.1:0]\n"
        "  webhooks:\n"
        f"    github: {{secret: {{value: {SECRET!r}}}}}\n"
        "jobs:\n"
        "  - {name: a, command: 'true', schedule: '@yearly'}\n"
        f"{extra}"
    )


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass
class Hooked:
    repo: WorkRepo
    daemon: Daemon
    web: WebSection
    http: aiohttp.ClientSession
    deliveries: int = 0

    @property
    def url(self) -> str:
        return self.web.urls()[0] + "/webhooks/github"

    def applied(self) -> str | None:
        record = self.daemon.applier.status.applied
        return record.revision if record is not None else None

    async def post(
        self,
        payload: dict[str, Any] | bytes | io.BytesIO,
        *,
        event: str = "push",
        signature: str | None = "sign",
        content_type: str = "application/json",
        delivery: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        body = payload if isinstance(payload, bytes | io.BytesIO) else json.dumps(payload).encode()
        self.deliveries += 1
        headers = {
            "Content-Type": content_type,
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or f"delivery-{self.deliveries}",
        }
        if signature is not None:
            signed = body.getvalue() if isinstance(body, io.BytesIO) else body
            headers["X-Hub-Signature-256"] = sign(signed) if signature == "sign" else signature
        async with self.http.post(self.url, data=body, headers=headers) as response:
            return response.status, await response.json()

    def push_payload(self, after: str, ref: str = "refs/heads/main", **repo: Any) -> Any:
        repository = {"full_name": "Acme/Cron", "default_branch": "main"} | repo
        return {"ref": ref, "after": after, "repository": repository}


@pytest_asyncio.fixture
async def hooked(tmp_path: Path) -> AsyncIterator[Hooked]:
    repo = WorkRepo.create(tmp_path / "remotes" / "acme", "cron")
    repo.commit({"cronstable.yaml": config()})
    repo.push()
    with GitDaemon(tmp_path / "remotes") as server:
        source = open_source(
            f"{server.url('acme/cron.git')}?interval=3600", cache_dir=tmp_path / "cache"
        )
        daemon = build_daemon(source, NodeFacts())
        web = section_named(daemon, "web")
        running = asyncio.create_task(daemon.run())
        try:
            await until(lambda: bool(web.urls()), 15, "listener")
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
                yield Hooked(repo, daemon, web, http)
        finally:
            daemon.request_stop()
            assert await asyncio.wait_for(running, 15) == 0


@pytest.mark.asyncio
async def test_a_signed_push_is_applied_at_once_with_polling_at_one_hour(hooked: Hooked) -> None:
    second = hooked.repo.commit({"cronstable.yaml": config("# second\n")})
    hooked.repo.push()
    status, body = await hooked.post(hooked.push_payload(second))
    assert (status, body) == (202, {"action": "fetching", "after": second})
    await until(lambda: hooked.applied() == second, 10, "second revision")


@pytest.mark.asyncio
async def test_a_webhook_ahead_of_the_remote_keeps_fetching_until_the_commit_shows(
    hooked: Hooked,
) -> None:
    """GitHub may notify before its mirror serves the push: the fetch that finds nothing
    new must not end the wait."""
    ahead = hooked.repo.commit({"cronstable.yaml": config("# ahead\n")})
    status, body = await hooked.post(hooked.push_payload(ahead))
    assert (status, body["action"]) == (202, "fetching")
    source = hooked.daemon.source
    contact = source.last_contact
    await until(lambda: source.last_contact != contact, 15, "a fetch before the push")
    assert hooked.applied() != ahead
    hooked.repo.push()
    await until(lambda: hooked.applied() == ahead, 10, "the pushed revision")


@pytest.mark.asyncio
async def test_a_push_matches_by_clone_url_and_the_form_encoding_is_accepted(
    hooked: Hooked,
) -> None:
    second = hooked.repo.commit({"cronstable.yaml": config("# form\n")})
    hooked.repo.push()
    origin = hooked.daemon.control.git_origin()
    assert origin is not None and origin[1] == "refs/heads/main"
    payload = hooked.push_payload(second, full_name="someone/else", clone_url=origin[0])
    form = urlencode({"payload": json.dumps(payload)}).encode()
    status, body = await hooked.post(form, content_type="application/x-www-form-urlencoded")
    assert (status, body["action"]) == (202, "fetching")
    await until(lambda: hooked.applied() == second, 10, "second revision")


@pytest.mark.asyncio
async def test_other_refs_repositories_and_events_do_nothing(hooked: Hooked) -> None:
    first = hooked.applied()
    hooked.repo.checkout("other", create=True)
    other = hooked.repo.commit({"cronstable.yaml": config("# other branch\n")})
    hooked.repo.push("other")
    source = hooked.daemon.source
    contact = source.last_contact
    cases = [
        hooked.push_payload(other, ref="refs/heads/other"),
        hooked.push_payload(other, full_name="acme/elsewhere"),
        hooked.push_payload(other, ref="refs/tags/main"),
        hooked.push_payload("0" * 40) | {"deleted": True},
    ]
    for payload in cases:
        status, body = await hooked.post(payload)
        assert (status, body["action"]) == (202, "ignored"), body
    status, body = await hooked.post(hooked.push_payload(other), event="issues")
    assert (status, body) == (202, {"action": "ignored", "reason": "issues event"})
    status, body = await hooked.post({"zen": "Keep it logically awesome."}, event="ping")
    assert (status, body) == (200, {"action": "pong"})
    await asyncio.sleep(0.5)
    assert source.last_contact == contact, "an ignored delivery made the source fetch"
    assert hooked.applied() == first


@pytest.mark.asyncio
async def test_a_redelivered_id_is_handled_once(hooked: Hooked) -> None:
    second = hooked.repo.commit({"cronstable.yaml": config("# second\n")})
    status, body = await hooked.post(hooked.push_payload(second), delivery="same-id")
    assert body["action"] == "fetching"
    status, body = await hooked.post(hooked.push_payload(second), delivery="same-id")
    assert (status, body) == (202, {"action": "ignored", "reason": "delivery same-id was handled"})


@pytest.mark.asyncio
async def test_every_refusal_is_a_4xx_with_a_json_error(hooked: Hooked) -> None:
    first = hooked.applied()
    payload = hooked.push_payload(first or "")
    status, body = await hooked.post(payload, signature=None)
    assert (status, body["error"]) == (401, "missing or wrong X-Hub-Signature-256")
    status, _ = await hooked.post(payload, signature=sign(b"another body"))
    assert status == 401
    status, _ = await hooked.post(payload, signature="sha1=" + "0" * 40)
    assert status == 401
    status, body = await hooked.post(b"ref=refs/heads/main", content_type="text/plain")
    # the answer names the accepted types and does not quote the one sent
    assert status == 415 and "application/json" in body["error"]
    assert "text/plain" not in body["error"]
    status, body = await hooked.post(b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]
    status, body = await hooked.post(b"[1, 2]")
    assert (status, body["error"]) == (400, "the payload is not a JSON object")
    status, body = await hooked.post(b"other=1", content_type="application/x-www-form-urlencoded")
    assert (status, body["error"]) == (400, "the form body has no single payload= field")
    too_big = io.BytesIO(b"{" + b" " * MAX_BODY + b"}")
    status, body = await hooked.post(too_big)
    assert status == 413 and str(MAX_BODY) in body["error"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the cap counts bytes read
        for _ in range(MAX_BODY // (1 << 20) + 1):
            yield b" " * (1 << 20)

    async with hooked.http.post(
        hooked.url,
        data=chunks(),
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",  # a missing event header is refused before the body
            "X-Hub-Signature-256": sign(b""),
        },
    ) as response:
        assert response.status == 413
    assert hooked.applied() == first


@pytest.mark.asyncio
async def test_without_a_secret_the_route_is_not_there(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    await stack.start()
    try:
        assert (await stack.apply("web: {listen: [http://127.0.0.1:0]}\n")).outcome == "applied"
        async with aiohttp.ClientSession() as http:
            body = json.dumps({"zen": "hi"}).encode()
            async with http.post(
                stack.url() + "/webhooks/github",
                data=body,
                headers={"X-Hub-Signature-256": sign(body), "X-GitHub-Event": "ping"},
            ) as response:
                assert response.status == 404
                assert "no GitHub webhook" in (await response.json())["error"]
            # a secret set: the ping answers; a push for a daemon following no git repo does nothing
            assert (await stack.apply(config())).outcome == "applied"
            async with http.post(
                stack.url() + "/webhooks/github",
                data=body,
                headers={
                    "X-Hub-Signature-256": sign(body),
                    "X-GitHub-Event": "push",
                    "Content-Type": "application/json",
                },
            ) as response:
                assert response.status == 202
                assert "follows no git repository" in (await response.json())["reason"]
    finally:
        await stack.stop()


@pytest.mark.asyncio
async def test_a_webhook_secret_that_resolves_empty_rejects_the_revision(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    await stack.start()
    try:
        record = await stack.apply(
            "web:\n  listen: [http://127.0.0.1:0]\n"
            "  webhooks:\n    github:\n      secret: {fromEnvVar: CRONSTABLE_TEST_UNSET_SECRET}\n"
        )
        assert record.outcome == "rejected"
        [error] = record.errors
        assert "c.yaml:5" in error and "web.webhooks.github.secret" in error, error
        assert "CRONSTABLE_TEST_UNSET_SECRET is unset or empty" in error
    finally:
        await stack.stop()


def test_which_pushes_are_ours() -> None:
    url = "https://github.com/Acme/cron.git"
    assert repository_name(url) == "acme/cron"
    assert repository_name("ssh://git@github.com/acme/cron") == "acme/cron"
    push = {"ref": "refs/heads/main", "after": "a" * 40}
    ours = push | {"repository": {"full_name": "ACME/Cron"}}
    assert why_not_ours(ours, url, "refs/heads/main") is None
    by_clone = push | {"repository": {"full_name": "x/y", "clone_url": url}}
    assert why_not_ours(by_clone, url, "refs/heads/main") is None
    default = push | {"repository": {"full_name": "acme/cron", "default_branch": "main"}}
    assert why_not_ours(default, url, None) is None
    assert why_not_ours(default | {"ref": "refs/heads/dev"}, url, None) is not None
    assert why_not_ours(ours, url, "refs/heads/prod") is not None
    assert why_not_ours(ours | {"after": "nope"}, url, "refs/heads/main") is not None
