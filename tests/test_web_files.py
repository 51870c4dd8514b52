"""Token and TLS files are read again when their modification time changes, between
revisions, without dropping open connections; a file that breaks keeps the old value."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import trustme
from daemon_proc import until
from web_stack import Stack

from cronstable.web import section as section_module

pytestmark = pytest.mark.timeout(60)


@pytest_asyncio.fixture
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    monkeypatch.setattr(section_module, "FILE_CHECK_INTERVAL", 0.05)
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


def rewrite(path: Path, data: bytes) -> None:
    """Write ``data`` and move the mtime forward (a coarse clock must not hide the change)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_bytes(data)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def counting_session(**connector: Any) -> tuple[aiohttp.ClientSession, list[int]]:
    """A session on one connection at most, and the count of connections it opened."""
    opened = [0]

    async def on_open(*_: Any) -> None:
        opened[0] += 1

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(on_open)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1, **connector), trace_configs=[trace]
    )
    return session, opened


async def status_with(http: aiohttp.ClientSession, url: str, token: str) -> int:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as response:
        await response.read()
        return response.status


@pytest.mark.asyncio
async def test_a_token_file_changed_is_read_again_on_the_same_connection(
    stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = tmp_path / "token"
    rewrite(token, b"first-token\n")
    config = (
        "web:\n  listen: [http://127.0.0.1:0]\n"
        f"  authTokens: [{{name: ci, fromFile: {token}, scopes: [read]}}]\n"
    )
    assert (await stack.apply(config)).outcome == "applied"
    url = stack.url() + "/status"
    http, opened = counting_session()
    async with http:
        assert await status_with(http, url, "first-token") == 200
        rewrite(token, b"second-token\n")

        async def rotated() -> bool:
            return await status_with(http, url, "second-token") == 200

        await until(rotated, what="rotated token", every=0.05)
        assert await status_with(http, url, "first-token") == 401
        # emptied, then gone: the token read last stays, with an ERROR each time
        for broken in ("empty", "gone"):
            caplog.clear()
            if broken == "empty":
                rewrite(token, b"")
            else:
                token.unlink()

            async def complained() -> bool:
                return any(
                    r.levelno == logging.ERROR and "token 'ci' resolves empty" in r.getMessage()
                    for r in caplog.records
                )

            await until(complained, what=f"ERROR for a token file {broken}", every=0.05)
            assert await status_with(http, url, "second-token") == 200
    assert opened == [1], "a connection was dropped"
    assert "second-token" not in caplog.text and "first-token" not in caplog.text


async def served_certificate(port: int, client: ssl.SSLContext) -> bytes:
    """The certificate a new TLS connection to ``port`` is shown."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert isinstance(der, bytes)
        return der
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


@pytest.mark.asyncio
async def test_a_certificate_renewed_on_disk_is_served_to_new_connections(
    stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    cert_path, key_path = tmp_path / "server.pem", tmp_path / "key.pem"

    def install(cert: trustme.LeafCert) -> bytes:
        rewrite(key_path, cert.private_key_pem.bytes())
        rewrite(cert_path, cert.cert_chain_pems[0].bytes())
        return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())

    old = install(ca.issue_cert("127.0.0.1"))
    config = (
        f"web:\n  listen: [https://127.0.0.1:0]\n  tls: {{cert: {cert_path}, key: {key_path}}}\n"
    )
    assert (await stack.apply(config)).outcome == "applied"
    url = stack.url() + "/healthz"
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    client = ssl.create_default_context()
    ca.configure_trust(client)
    assert await served_certificate(port, client) == old
    kept, opened = counting_session(ssl=client)
    async with kept:
        async with kept.get(url) as response:
            assert response.status == 200
        new = install(ca.issue_cert("127.0.0.1"))
        assert new != old

        async def renewed() -> bool:
            return await served_certificate(port, client) == new

        await until(renewed, what="renewed certificate", every=0.05)
        async with kept.get(url) as response:  # the connection opened before goes on
            assert response.status == 200
        caplog.clear()
        rewrite(cert_path, b"not a certificate\n")

        async def complained() -> bool:
            return "cannot load the certificate" in caplog.text

        await until(complained, what="ERROR for a broken certificate", every=0.05)
        assert await served_certificate(port, client) == new
        async with kept.get(url) as response:
            assert response.status == 200
    assert opened == [1], "a connection was dropped"
