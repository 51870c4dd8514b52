"""Unreachable or refused: each store family's errors, as real stores raise them."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from etcd_server import EtcdServer, free_port

from cronstable.cluster.base import LeadershipError
from cronstable.cluster.filesystem import FilesystemLeadership
from cronstable.cluster.shareddir import LockBusy, locked
from cronstable.cluster.slots import SlotError
from cronstable.cluster.slots_filesystem import FilesystemSlots
from cronstable.etcd import EtcdClient, EtcdError, EtcdTLS, EtcdUnavailable, etcd_fault
from cronstable.state.base import StateError
from cronstable.state.etcd import EtcdStore
from cronstable.state.filesystem import FilesystemStore
from cronstable.store_errors import directory_fault, fault_of

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]


async def etcd_error(client: EtcdClient) -> EtcdError:
    try:
        await client.range("/k")
    except EtcdError as exc:
        return exc
    finally:
        await client.close()
    raise AssertionError("etcd answered")


@pytest_asyncio.fixture
async def failing_gateway() -> AsyncIterator[str]:
    """A loopback HTTP server answering like a broken proxy before etcd: /v3/kv/range with
    a 503 page, anything else with a 500 JSON error that has no gRPC code."""

    async def unavailable(request: web.Request) -> web.Response:
        if request.path == "/v3/kv/range":
            return web.Response(status=503, text="<html>upstream down</html>")
        return web.json_response({"error": "internal"}, status=500)

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", unavailable)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_etcd_that_does_not_answer_is_unreachable(
    etcd_server: EtcdServer, failing_gateway: str
) -> None:
    refused = await etcd_error(EtcdClient(f"http://127.0.0.1:{free_port()}", timeout=2))
    assert isinstance(refused, EtcdUnavailable) and etcd_fault(refused) == "unreachable"
    page = await etcd_error(EtcdClient(failing_gateway, timeout=2))
    assert "HTTP 503" in str(page) and etcd_fault(page) == "unreachable"
    async with EtcdClient(failing_gateway, timeout=2) as client:
        with pytest.raises(EtcdError) as caught:
            await client.put("/k", b"v")
    assert etcd_fault(caught.value) == "unreachable"  # a 500 without a gRPC code
    etcd_server.stop()
    stopped = await etcd_error(EtcdClient(etcd_server.endpoint, timeout=2))
    assert etcd_fault(stopped) == "unreachable"
    # as a store sees it: the backend's own error, raised from etcd's
    store = EtcdStore([etcd_server.endpoint], timeout=2)
    with pytest.raises(StateError) as state:
        await store.check()
    await store.close()
    assert fault_of(state.value) == "unreachable"


async def test_etcd_that_refuses_is_refused(
    tls_etcd_server: EtcdServer, etcd_server: EtcdServer
) -> None:
    files = tls_etcd_server.tls
    assert files is not None
    endpoint = tls_etcd_server.endpoint
    untrusted = await etcd_error(EtcdClient(endpoint, tls=EtcdTLS(ca=str(files.other_ca))))
    assert "not trusted" in str(untrusted) and etcd_fault(untrusted) == "refused"
    no_cert = await etcd_error(EtcdClient(endpoint, tls=EtcdTLS(ca=str(files.ca))))
    assert "client certificate" in str(no_cert) and etcd_fault(no_cert) == "refused"
    async with EtcdClient(etcd_server.endpoint) as client:
        with pytest.raises(EtcdError) as future:
            await client.range("/k", revision=10**9)  # etcd refuses the request itself
        assert etcd_fault(future.value) == "refused"
        for path, body in (
            ("/v3/auth/user/add", {"name": "root", "password": "pw"}),
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        ):
            await client._call(path, body, what=path)
    no_login = await etcd_error(EtcdClient(etcd_server.endpoint))
    wrong = await etcd_error(EtcdClient(etcd_server.endpoint, username="root", password="x"))
    assert etcd_fault(no_login) == etcd_fault(wrong) == "refused"


async def test_directory_errors_sort_by_what_the_directory_answers(tmp_path: Path) -> None:
    with pytest.raises(OSError) as missing:
        os.stat(tmp_path / "not-mounted")
    assert directory_fault(missing.value) == "unreachable"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError) as not_dir:
        (blocker / "sub").mkdir()
    assert directory_fault(not_dir.value) == "refused"
    if os.geteuid() != 0:
        locked_dir = tmp_path / "ro"
        locked_dir.mkdir(mode=0o500)
        with pytest.raises(OSError) as denied:
            (locked_dir / "x").write_text("")
        assert directory_fault(denied.value) == "refused"
    # what a network filesystem or a full disk answers, and what a permission answers
    for code, fault in [
        (errno.EIO, "unreachable"),
        (errno.ESTALE, "unreachable"),
        (errno.ENOTCONN, "unreachable"),
        (errno.ETIMEDOUT, "unreachable"),
        (errno.ENOSPC, "unreachable"),
        (errno.EACCES, "refused"),
        (errno.EPERM, "refused"),
        (errno.EROFS, "refused"),
        (errno.ENOTDIR, "refused"),
    ]:
        assert directory_fault(OSError(code, os.strerror(code))) == fault, errno.errorcode[code]


async def test_shared_directory_backends_say_unreachable_or_refused(tmp_path: Path) -> None:
    absent = tmp_path / "mnt" / "cronstable"
    blocker = tmp_path / "file"
    blocker.write_text("")
    for path, fault, said in [
        (absent, "unreachable", "does not exist (is its share mounted?)"),
        (blocker, "refused", "is not a directory"),
    ]:
        leadership = FilesystemLeadership("n1", ttl=2, path=path)
        with pytest.raises(LeadershipError) as lead:
            await leadership.check()
        slots = FilesystemSlots("n1", "i1", ttl=2, path=path)
        with pytest.raises(SlotError) as slot:
            await slots.check()
        assert fault_of(lead.value) == fault_of(slot.value) == fault, path
        assert str(lead.value) == str(slot.value) == f"{path} {said}"
    # a lock another holder keeps past the time allowed: no answer in time
    shared = tmp_path / "shared"
    shared.mkdir()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with locked(shared, 1.0):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        with pytest.raises(LeadershipError) as busy:
            await FilesystemLeadership("n2", ttl=0.4, path=shared).check()
        assert isinstance(busy.value.__cause__, LockBusy)
        assert fault_of(busy.value) == "unreachable"
    finally:
        release.set()
        await asyncio.to_thread(holder.join, 10)
    # the node's own state directory: a file in its way is refused
    state = FilesystemStore(blocker / "state")
    with pytest.raises(StateError) as refused:
        await state.check()
    assert fault_of(refused.value) == "refused"
    assert fault_of(ValueError("no cause")) == "refused"
