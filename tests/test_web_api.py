"""The HTTP API over real sockets on loopback: listeners, auth, routes, errors."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_stack import Stack

from cronstable import __version__
from cronstable.published import secret_digest
from cronstable.web.openapi import document
from cronstable.web.routes import ROUTES, aiohttp_path

pytestmark = pytest.mark.timeout(60)

JOBS = """\
jobs:
  - name: hello world
    command: echo hi there
    schedule: "@yearly"
    captureStdout: true
    environment:
      - {key: PASSWORD, value: hunter2}
  - name: sleeper
    command: sleep 30
    schedule: "@yearly"
    concurrencyPolicy: Forbid
    killTimeout: 1
"""

TOKENS = """\
  authToken: {value: admin-secret}
  authTokens:
    - {name: grafana, value: read-secret, scopes: [read]}
    - {name: ci, value: ci-secret, scopes: [trigger]}
"""


def web(listen: str = "http://127.0.0.1:0", extra: str = TOKENS) -> str:
    return f"web:\n  listen: [{listen}]\n{extra}" + JOBS


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def call(
    http: aiohttp.ClientSession, method: str, url: str, **kwargs: Any
) -> tuple[int, Any]:
    async with http.request(method, url, **kwargs) as response:
        text = await response.text()
        if response.content_type == "application/json":
            import json

            return response.status, json.loads(text)
        return response.status, text


@pytest.mark.asyncio
async def test_scopes_decide_who_may_do_what(stack: Stack, http: aiohttp.ClientSession) -> None:
    assert (await stack.apply(web())).outcome == "applied"
    base = stack.url()
    assert await call(http, "GET", f"{base}/version") == (200, {"version": __version__})
    assert await call(http, "GET", f"{base}/healthz") == (200, {"status": "ok"})
    assert await call(http, "GET", f"{base}/readyz") == (200, {"ready": True})
    status, body = await call(http, "GET", f"{base}/status")
    assert (status, body["missingScope"]) == (401, "read")
    status, body = await call(http, "GET", f"{base}/status", headers=bear("wrong"))
    assert (status, body["error"]) == (401, "the token is not valid")
    status, body = await call(http, "GET", f"{base}/status", headers=bear("read-secret"))
    assert status == 200 and [j["name"] for j in body["jobs"]] == ["hello world", "sleeper"]
    assert body["applied"]["jobSetId"].startswith("v1:") and body["lastRejected"] is None
    status, body = await call(http, "GET", f"{base}/config", headers=bear("read-secret"))
    assert (status, body["missingScope"]) == (403, "admin")
    status, body = await call(
        http, "POST", f"{base}/jobs/sleeper/start", headers=bear("read-secret")
    )
    assert (status, body["missingScope"]) == (403, "trigger")
    # the scheme is case-insensitive; admin implies every scope
    status, body = await call(
        http, "GET", f"{base}/config", headers={"Authorization": "bEaReR admin-secret"}
    )
    assert status == 200
    config = body["jobs"]["hello world"]["config"]
    assert config["environment"] == {"PASSWORD": secret_digest("hunter2")}
    assert body["sections"]["web"]["authToken"]["value"] == secret_digest("admin-secret")
    assert "hunter2" not in str(body) and "ci-secret" not in str(body)
    status, _ = await call(http, "GET", f"{base}/metrics", headers=bear("ci-secret"))
    assert status == 403


def bear(token: str) -> dict[str, str]:
    return bearer(token)


@pytest.mark.asyncio
async def test_start_runs_cancel_and_status_text(stack: Stack, http: aiohttp.ClientSession) -> None:
    await stack.apply(web())
    base = stack.url()
    ci = bear("ci-secret")
    status, body = await call(http, "POST", f"{base}/jobs/hello%20world/start", headers=ci)
    assert status == 202 and body["run"].startswith("hello world@")
    run_id = body["run"]
    async with asyncio.timeout(15):
        while True:
            _, runs = await call(
                http, "GET", f"{base}/jobs/hello%20world/runs", headers=bear("read-secret")
            )
            if runs["runs"] and runs["runs"][0]["outcome"] != "running":
                break
            await asyncio.sleep(0.05)
    [run] = runs["runs"]
    assert (run["id"], run["outcome"], run["exitCode"], run["stdout"]) == (
        run_id,
        "succeeded",
        0,
        "hi there",
    )
    status, body = await call(http, "POST", f"{base}/jobs/sleeper/start", headers=ci)
    assert status == 202
    sleeper = body["run"]
    status, body = await call(http, "POST", f"{base}/jobs/sleeper/start", headers=ci)
    assert status == 409 and "concurrencyPolicy is Forbid" in body["error"]
    async with asyncio.timeout(10):
        while (
            "sleeper: running (pid: "
            not in (
                await call(
                    http,
                    "GET",
                    f"{base}/status",
                    headers={**bear("read-secret"), "Accept": "text/plain"},
                )
            )[1]
        ):
            await asyncio.sleep(0.05)
    status, body = await call(
        http, "POST", f"{base}/jobs/sleeper/cancel", params={"run": "sleeper@x#1"}, headers=ci
    )
    assert status == 404
    status, body = await call(http, "POST", f"{base}/jobs/sleeper/cancel", headers=ci)
    assert (status, body["cancelled"]) == (200, [sleeper])
    status, body = await call(http, "POST", f"{base}/jobs/nope/start", headers=ci)
    assert (status, body["error"]) == (404, "no job named 'nope'")
    status, body = await call(http, "DELETE", f"{base}/status", headers=ci)
    assert status == 405 and body["allowed"] == ["GET", "HEAD"]  # every GET route answers HEAD
    status, _ = await call(http, "POST", f"{base}/reload", headers=bear("admin-secret"))
    assert status == 202
    status, text = await call(http, "GET", f"{base}/metrics", headers=bear("read-secret"))
    assert status == 200
    assert 'cronstable_job_runs_total{job="hello world",outcome="succeeded"} 1.0' in text


@pytest.mark.asyncio
async def test_without_tokens_loopback_may_read_only(
    stack: Stack, http: aiohttp.ClientSession
) -> None:
    await stack.apply(web(extra=""))
    base = stack.url()
    assert (await call(http, "GET", f"{base}/status"))[0] == 200
    status, body = await call(http, "POST", f"{base}/jobs/sleeper/start")
    assert (status, body["missingScope"]) == (401, "trigger")
    assert (await call(http, "GET", f"{base}/config"))[0] == 401


@pytest.mark.asyncio
async def test_token_swap_keeps_the_socket_and_a_bad_revision_keeps_the_server(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    extra = f"  authToken: {{fromFile: {token_file}}}\n"
    await stack.apply(web(extra=extra))
    base = stack.url()
    assert (await call(http, "GET", f"{base}/status", headers=bear("first")))[0] == 200
    # a new revision re-reads the file; the address stays bound, the same port answers
    token_file.write_text("second\n")
    assert (await stack.apply(web(extra=extra) + "# another\n")).outcome == "unchanged"
    assert stack.url() == base
    assert (await call(http, "GET", f"{base}/status", headers=bear("first")))[0] == 401
    assert (await call(http, "GET", f"{base}/status", headers=bear("second")))[0] == 200
    # a port in use rejects the revision with file, line and key; the old server serves on
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        two = f"http://127.0.0.1:0, http://127.0.0.1:{port}"
        record = await stack.apply(web(listen=two, extra=extra))
    finally:
        taken.close()
    assert record.outcome == "rejected"
    assert record.errors[0].startswith(f"c.yaml:2:32: web.listen[1]: http://127.0.0.1:{port}: ")
    assert "in use" in record.errors[0]
    assert stack.web.urls() == [base]
    assert (await call(http, "GET", f"{base}/status", headers=bear("second")))[0] == 200
    # an empty token fails closed, also on a later revision
    token_file.write_text("  \n")
    record = await stack.apply(web(extra=extra) + "# third\n")
    assert record.outcome == "rejected"
    assert record.errors == (
        f"c.yaml:3:3: web.authToken: the token resolves empty (the file {token_file} is "
        "empty); refusing to serve without it",
    )
    assert (await call(http, "GET", f"{base}/status", headers=bear("second")))[0] == 200
    # removing the section closes the listener (a connection already open may finish)
    assert (await stack.apply(JOBS)).outcome == "applied"
    async with aiohttp.ClientSession() as fresh:
        with pytest.raises(aiohttp.ClientConnectionError):
            await call(fresh, "GET", f"{base}/healthz")


@pytest.mark.asyncio
async def test_https_with_a_real_certificate_and_a_bad_one_rejected(
    stack: Stack, tmp_path: Path
) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    tls = f"  tls: {{cert: {tmp_path / 'server.pem'}, key: {tmp_path / 'key.pem'}}}\n"
    assert (await stack.apply(web("https://127.0.0.1:0", extra=tls))).outcome == "applied"
    base = stack.url()
    assert base.startswith("https://127.0.0.1:")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    connector = aiohttp.TCPConnector(ssl=client)
    async with aiohttp.ClientSession(connector=connector) as https:
        assert await call(https, "GET", f"{base}/version") == (200, {"version": __version__})
        (tmp_path / "bad.pem").write_text("not a certificate\n")
        bad = f"  tls: {{cert: {tmp_path / 'bad.pem'}, key: {tmp_path / 'key.pem'}}}\n"
        record = await stack.apply(web("https://127.0.0.1:0", extra=bad))
        assert record.outcome == "rejected"
        assert record.errors[0].startswith(
            "c.yaml:3:3: web.tls: cannot load the certificate and key: "
        )
        assert await call(https, "GET", f"{base}/healthz") == (200, {"status": "ok"})
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(aiohttp.ClientError):
            await call(plain, "GET", f"{base}/healthz")  # untrusted CA


@pytest.mark.asyncio
async def test_unix_socket_listener_with_its_mode(stack: Stack, tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    extra = "  socketMode: '0600'\n"
    assert (await stack.apply(web(f"unix://{path}", extra=extra))).outcome == "applied"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(path))) as uds:
        status, body = await call(uds, "GET", "http://localhost/status")
        assert status == 200 and len(body["jobs"]) == 2
    await stack.web.close()
    assert not path.exists()


def test_openapi_lists_exactly_the_routes_the_router_serves() -> None:
    from cronstable.web.app import Holder, make_app

    app = make_app(object(), Holder())  # type: ignore[arg-type]
    served = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    documented = {
        (
            method.upper(),
            aiohttp_path(path).replace("{name:.+}", "{name}").replace("{id:[^/]+}", "{id}"),
        )
        for path, operations in document()["paths"].items()
        for method in operations
    }
    assert served == documented
    assert len(documented) == len(ROUTES)
    assert document()["openapi"] == "3.1.0"


PATHS = [
    aiohttp_path(r.path).replace("{name:.+}", "sleeper").replace("{id:[^/]+}", "x%40y")
    for r in ROUTES
] + [
    "/",
    "/jobs//start",
    "/jobs/%00/runs",
    "/jobs/sleeper/cancel?run=%ff",
]


@pytest.mark.asyncio
async def test_random_requests_never_get_a_5xx(stack: Stack) -> None:
    await stack.apply(web())
    base = stack.url()
    failures: list[str] = []
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
        path=st.one_of(
            st.sampled_from(PATHS),
            st.text(st.characters(codec="ascii", exclude_characters="#?\r\n"), max_size=30).map(
                lambda text: "/" + text.lstrip("/")
            ),
        ),
        token=st.sampled_from([None, "admin-secret", "ci-secret", "read-secret", "x", ""]),
        accept=st.sampled_from([None, "text/plain", "application/json", "*/*", "\x7f"]),
        body=st.one_of(st.none(), st.binary(max_size=300), st.just(b"x" * 200_000)),
    )
    def probe(
        method: str, path: str, token: str | None, accept: str | None, body: bytes | None
    ) -> None:
        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if accept is not None:
            headers["Accept"] = accept
        future = asyncio.run_coroutine_threadsafe(_one(base, method, path, headers, body), loop)
        status = future.result(20)
        if status >= 500 and not (status == 503 and path == "/readyz"):
            failures.append(f"{method} {path} -> {status}")

    await asyncio.to_thread(probe)
    assert failures == []


async def _one(
    base: str, method: str, path: str, headers: dict[str, str], body: bytes | None
) -> int:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        try:
            async with session.request(
                method, base + path, headers=headers, data=body, skip_auto_headers=["Accept"]
            ) as response:
                if response.content_type == "text/event-stream":
                    return response.status  # GET /events streams until the client leaves
                await response.read()
                if response.status >= 400 and method != "HEAD" and response.status != 400:
                    assert response.content_type == "application/json", (method, path)
                return response.status
        except (ValueError, aiohttp.InvalidURL):
            return 0  # the client refused to send it
