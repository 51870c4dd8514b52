"""cronstable.etcd against a real etcd: key-value, transactions, leases, watches, errors."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from etcd_server import EtcdServer, TLSFiles, free_port

from cronstable.errors import CronstableError
from cronstable.etcd import (
    DeleteResult,
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    EtcdLeaseNotFound,
    EtcdTLS,
    EtcdUnavailable,
    EventType,
    KeyValue,
    PutResult,
    RangeResult,
    TxnResult,
    WatchEvent,
    compare,
    parse_etcd_url,
    prefix_range_end,
    request_delete,
    request_put,
    request_range,
)

pytestmark = pytest.mark.timeout(30)


@pytest_asyncio.fixture
async def etcd(shared_etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    async with EtcdClient(shared_etcd_server.endpoint) as client:
        yield client


@pytest_asyncio.fixture
async def own_etcd(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    """A client of a server of its own, which the test may stop and restart."""
    async with EtcdClient(etcd_server.endpoint, backoff_initial=0.05, backoff_max=0.5) as client:
        yield client


class Collector:
    """Runs a watch in a task and keeps what it delivers."""

    def __init__(self, watch: AsyncIterator[WatchEvent]) -> None:
        self.events: list[WatchEvent] = []
        self.error: BaseException | None = None
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run(watch))

    async def _run(self, watch: AsyncIterator[WatchEvent]) -> None:
        try:
            async for event in watch:
                self.events.append(event)
                self._changed.set()
        except EtcdError as exc:
            self.error = exc
            self._changed.set()

    async def wait_for(self, count: int, within: float = 10.0) -> list[WatchEvent]:
        async with asyncio.timeout(within):
            while len(self.events) < count and self.error is None:
                self._changed.clear()
                await self._changed.wait()
        return self.events

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


# ------------------------------------------------------------------ pure helpers


def test_prefix_range_end() -> None:
    assert prefix_range_end("/cron/") == b"/cron0"
    assert prefix_range_end(b"a\xff") == b"b"
    assert prefix_range_end(b"a\xff\xff") == b"b"
    assert prefix_range_end(b"\xff") == b"\0"
    assert prefix_range_end(b"") == b"\0"


def test_builders() -> None:
    assert compare("k", "version", "==", 0) == {
        "key": "aw==",
        "target": "VERSION",
        "result": "EQUAL",
        "version": "0",
    }
    assert compare(b"k", "value", "!=", b"v")["value"] == "dg=="
    assert compare("k", "mod_revision", "<", 7)["mod_revision"] == "7"
    assert request_put("k", b"v", lease=5) == {
        "request_put": {"key": "aw==", "value": "dg==", "lease": "5"}
    }
    assert request_delete("/a/", prefix=True) == {
        "request_delete_range": {"key": "L2Ev", "range_end": "L2Ew"}
    }
    with pytest.raises(TypeError):
        compare("k", "value", "==", 1)
    with pytest.raises(TypeError):
        compare("k", "version", "==", b"1")
    with pytest.raises(ValueError):
        compare("k", "colour", "==", 1)  # type: ignore[arg-type]


def test_key_value_repr_hides_the_value() -> None:
    kv = KeyValue(b"/k", b"s3cret", 1, 2, 1, 0)
    assert "s3cret" not in repr(kv)
    assert "6 bytes" in repr(kv)


def test_client_repr_hides_the_password() -> None:
    client = EtcdClient("http://127.0.0.1:1", username="root", password="hunter2")
    assert "hunter2" not in repr(client)
    with pytest.raises(ValueError):
        EtcdClient("127.0.0.1:2379")
    with pytest.raises(ValueError):
        EtcdClient("http://127.0.0.1:2379", username="root")


def test_errors_are_cronstable_errors() -> None:
    assert issubclass(EtcdError, CronstableError)
    for cls in (EtcdUnavailable, EtcdCompacted, EtcdLeaseNotFound):
        assert issubclass(cls, EtcdError)


# ------------------------------------------------------------------ key-value


@pytest.mark.asyncio
async def test_put_and_range(etcd: EtcdClient, etcd_prefix: str) -> None:
    p = etcd_prefix
    first = await etcd.put(p + "a", b"1")
    second = await etcd.put(p + "b/c", b"2")
    await etcd.put(p[:-1] + "x", b"outside")  # shares the text but not the prefix
    await etcd.put(p + "empty", b"")
    assert second > first

    one = await etcd.range(p + "a")
    assert one.revision >= second
    assert [(kv.key, kv.value, kv.version) for kv in one.kvs] == [(p.encode() + b"a", b"1", 1)]
    assert one.kvs[0].create_revision == one.kvs[0].mod_revision == first
    assert one.count == 1

    everything = await etcd.range(p, prefix=True)
    assert [kv.key for kv in everything.kvs] == [
        (p + name).encode() for name in ("a", "b/c", "empty")
    ]
    assert everything.kvs[2].value == b""

    await etcd.put(p + "a", b"one")
    now = await etcd.range(p + "a")
    assert now.kvs[0].value == b"one" and now.kvs[0].version == 2
    then = await etcd.range(p + "a", revision=first)
    assert then.kvs[0].value == b"1"

    keys = await etcd.range(p, prefix=True, keys_only=True)
    assert all(kv.value == b"" for kv in keys.kvs) and len(keys.kvs) == 3
    limited = await etcd.range(p, prefix=True, limit=1)
    assert len(limited.kvs) == 1 and limited.count == 3 and limited.more

    missing = await etcd.range(p + "nope")
    assert missing.kvs == [] and missing.count == 0 and missing.revision > 0


@pytest.mark.asyncio
async def test_delete(etcd: EtcdClient, etcd_prefix: str) -> None:
    p = etcd_prefix
    for name in ("a", "b", "c"):
        await etcd.put(p + name, b"v")
    one = await etcd.delete(p + "a")
    assert one.deleted == 1 and one.revision > 0
    assert (await etcd.delete(p + "a")).deleted == 0
    rest = await etcd.delete(p, prefix=True)
    assert rest.deleted == 2 and rest.revision > one.revision
    assert (await etcd.range(p, prefix=True)).kvs == []


@pytest.mark.asyncio
async def test_txn_success_and_failure(etcd: EtcdClient, etcd_prefix: str) -> None:
    lock = etcd_prefix + "lock"
    create = (
        [compare(lock, "version", "==", 0)],
        [request_put(lock, b"me")],
        [request_range(lock)],
    )
    won = await etcd.txn(*create)
    assert won.succeeded and won.responses == [PutResult(revision=won.revision)]

    lost = await etcd.txn(*create)
    assert not lost.succeeded
    assert lost.revision == won.revision  # a read-only branch writes nothing
    (answer,) = lost.responses
    assert isinstance(answer, RangeResult) and answer.kvs[0].value == b"me"

    mine = compare(lock, "value", "==", b"me")
    unchanged = compare(lock, "mod_revision", "==", won.revision)
    released = await etcd.txn([mine, unchanged], [request_delete(lock)])
    assert released.succeeded and released.responses == [
        DeleteResult(revision=released.revision, deleted=1)
    ]
    assert released.revision == won.revision + 1


@pytest.mark.asyncio
async def test_a_txn_writes_every_key_at_one_revision(etcd: EtcdClient, etcd_prefix: str) -> None:
    result = await etcd.txn([], [request_put(etcd_prefix + n, b"v") for n in "abc"])
    read = await etcd.range(etcd_prefix, prefix=True)
    assert {kv.mod_revision for kv in read.kvs} == {result.revision}
    nested = await etcd.txn([], [{"request_txn": {"success": [request_range(etcd_prefix + "a")]}}])
    (inner,) = nested.responses
    assert isinstance(inner, TxnResult) and isinstance(inner.responses[0], RangeResult)


@pytest.mark.asyncio
async def test_etcd_refuses_a_txn_deleting_a_range_it_also_puts(
    etcd: EtcdClient, etcd_prefix: str
) -> None:
    with pytest.raises(EtcdError, match="duplicate key") as info:
        await etcd.txn(
            [], [request_delete(etcd_prefix, prefix=True), request_put(etcd_prefix + "a", b"v")]
        )
    assert info.value.code == 3
    assert not isinstance(info.value, EtcdUnavailable)


# ------------------------------------------------------------------ leases


@pytest.mark.asyncio
async def test_lease_grant_keepalive_revoke(etcd: EtcdClient, etcd_prefix: str) -> None:
    lease, ttl = await etcd.lease_grant(10)
    assert lease > 0 and ttl == 10
    await etcd.put(etcd_prefix + "leased", b"v", lease=lease)
    assert (await etcd.range(etcd_prefix + "leased")).kvs[0].lease == lease
    assert await etcd.lease_keepalive(lease) == 10

    await etcd.lease_revoke(lease)
    assert (await etcd.range(etcd_prefix + "leased")).kvs == []
    await etcd.lease_revoke(lease)  # revoking again is no error
    with pytest.raises(EtcdLeaseNotFound):
        await etcd.lease_keepalive(lease)
    with pytest.raises(EtcdLeaseNotFound):
        await etcd.put(etcd_prefix + "leased", b"v", lease=lease)


@pytest.mark.asyncio
async def test_a_key_goes_with_its_expired_lease(etcd: EtcdClient, etcd_prefix: str) -> None:
    lease, ttl = await etcd.lease_grant(1)
    assert ttl >= 1
    await etcd.put(etcd_prefix + "ephemeral", b"v", lease=lease)
    for _ in range(10 * (ttl + 5)):  # etcd expires leases every 500 ms
        if not (await etcd.range(etcd_prefix + "ephemeral")).kvs:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the key outlived its lease")
    with pytest.raises(EtcdLeaseNotFound):
        await etcd.lease_keepalive(lease)


# ------------------------------------------------------------------ watch


@pytest.mark.asyncio
async def test_watch_puts_and_deletes(etcd: EtcdClient, etcd_prefix: str) -> None:
    p = etcd_prefix
    start = await etcd.put(p + "before", b"old")
    watch = Collector(etcd.watch(p, prefix=True, start_revision=start + 1))
    try:
        await asyncio.sleep(0.1)
        put = await etcd.put(p + "a", b"1")
        await etcd.put(p[:-1] + "-elsewhere", b"x")
        gone = await etcd.delete(p + "before")
        both = await etcd.txn([], [request_put(p + "b", b"2"), request_put(p + "c", b"3")])
        events = await watch.wait_for(4)
    finally:
        await watch.stop()
    assert [(e.type, e.kv.key, e.kv.value, e.revision) for e in events] == [
        (EventType.PUT, (p + "a").encode(), b"1", put),
        (EventType.DELETE, (p + "before").encode(), b"", gone.revision),
        (EventType.PUT, (p + "b").encode(), b"2", both.revision),
        (EventType.PUT, (p + "c").encode(), b"3", both.revision),
    ]


@pytest.mark.asyncio
async def test_watch_replays_history_from_its_start_revision(
    etcd: EtcdClient, etcd_prefix: str
) -> None:
    first = await etcd.put(etcd_prefix + "k", b"1")
    await etcd.put(etcd_prefix + "k", b"2")
    watch = Collector(etcd.watch(etcd_prefix + "k", start_revision=first))
    try:
        events = await watch.wait_for(2)
    finally:
        await watch.stop()
    assert [e.kv.value for e in events] == [b"1", b"2"]
    assert events[1].kv.version == 2


@pytest.mark.asyncio
async def test_watch_resumes_across_a_restart_without_losing_events(
    etcd_server: EtcdServer, own_etcd: EtcdClient
) -> None:
    statuses: list[EtcdUnavailable | None] = []
    lost = asyncio.Event()

    def on_status(status: EtcdUnavailable | None) -> None:
        statuses.append(status)
        lost.set()

    start = await own_etcd.put("/w/a", b"1")
    watching = EtcdClient(etcd_server.endpoint, backoff_initial=0.5, backoff_max=0.5)
    watch = Collector(watching.watch("/w/", prefix=True, start_revision=start, on_status=on_status))
    try:
        await watch.wait_for(1)
        etcd_server.stop()
        await asyncio.wait_for(lost.wait(), 20)  # a loaded machine is slow to notice
        etcd_server.start()
        # written before the watch gets back (it waits 0.25–0.5 s between attempts)
        b = await own_etcd.put("/w/b", b"2")
        c = await own_etcd.delete("/w/a")
        events = await watch.wait_for(3)
        await own_etcd.put("/w/d", b"4")
        events = await watch.wait_for(4)
    finally:
        await watch.stop()
        await watching.close()
    assert [(e.type, e.kv.key, e.revision) for e in events] == [
        (EventType.PUT, b"/w/a", start),
        (EventType.PUT, b"/w/b", b),
        (EventType.DELETE, b"/w/a", c.revision),
        (EventType.PUT, b"/w/d", c.revision + 1),
    ]
    assert len(statuses) == 2
    assert isinstance(statuses[0], EtcdUnavailable) and statuses[1] is None


@pytest.mark.asyncio
async def test_watch_from_a_compacted_revision(etcd: EtcdClient, etcd_prefix: str) -> None:
    first = await etcd.put(etcd_prefix + "k", b"1")
    latest = await etcd.put(etcd_prefix + "k", b"2")
    await etcd.compact(latest)
    with pytest.raises(EtcdCompacted) as info:
        async for _ in etcd.watch(etcd_prefix, prefix=True, start_revision=first):
            pass
    assert info.value.compact_revision == latest
    with pytest.raises(EtcdCompacted) as ranged:
        await etcd.range(etcd_prefix, prefix=True, revision=first)
    assert ranged.value.compact_revision is None
    # the compacted revision itself is still there to read and watch from
    assert (await etcd.range(etcd_prefix + "k", revision=latest)).kvs[0].value == b"2"


@pytest.mark.asyncio
async def test_watch_ends_when_the_client_closes(etcd_server: EtcdServer) -> None:
    client = EtcdClient(etcd_server.endpoint)
    watch = Collector(client.watch("/x", start_revision=1))
    await asyncio.sleep(0.2)
    await client.close()
    await asyncio.wait_for(watch.task, 5)
    assert watch.error is None


# ------------------------------------------------------------------ errors


@pytest.mark.asyncio
async def test_errors_when_nothing_listens() -> None:
    async with EtcdClient(f"http://127.0.0.1:{free_port()}", timeout=2) as client:
        with pytest.raises(EtcdUnavailable) as info:
            await client.range("/k")
        assert isinstance(info.value.__cause__, aiohttp.ClientError)
        with pytest.raises(EtcdUnavailable):
            await client.put("/k", b"v")
        with pytest.raises(EtcdUnavailable):
            await client.lease_grant(5)


@pytest.mark.asyncio
async def test_error_messages_read_as_words(etcd: EtcdClient) -> None:
    """No ``b'/k'`` bytes repr, no aiohttp ``ssl:default`` on plain HTTP."""
    port = free_port()
    async with EtcdClient(f"http://127.0.0.1:{port}", timeout=2) as client:
        with pytest.raises(EtcdUnavailable) as info:
            await client.range("/cron/", prefix=True)
    message = str(info.value)
    assert message.startswith(f"etcd range /cron/: http://127.0.0.1:{port}: cannot connect to ")
    assert f"127.0.0.1:{port}" in message and "b'" not in message
    assert "ssl:default" not in message
    with pytest.raises(EtcdError) as refused:
        await etcd.put(b"", b"v")
    assert "b''" not in str(refused.value)


@pytest.mark.asyncio
async def test_errors_once_the_server_stops(
    etcd_server: EtcdServer, own_etcd: EtcdClient, caplog: pytest.LogCaptureFixture
) -> None:
    await own_etcd.put("/k", b"top secret value")
    etcd_server.stop()
    caplog.set_level(logging.DEBUG, logger="cronstable.etcd")
    with pytest.raises(EtcdUnavailable) as info:
        await own_etcd.range("/k")
    assert isinstance(info.value.__cause__, aiohttp.ClientError)
    assert "127.0.0.1" in str(info.value)
    with pytest.raises(EtcdUnavailable):
        await own_etcd.txn([], [request_put("/k", b"top secret value")])
    etcd_server.start()
    assert (await own_etcd.range("/k")).kvs[0].value == b"top secret value"
    assert "top secret" not in caplog.text


@pytest.mark.asyncio
async def test_etcd_errors_are_translated(etcd: EtcdClient) -> None:
    future = (await etcd.range("/nothing")).revision + 1000
    with pytest.raises(EtcdError, match="future revision") as info:
        await etcd.range("/k", revision=future)
    assert info.value.code == 11 and not isinstance(info.value, EtcdCompacted)
    with pytest.raises(EtcdError, match="key is not provided") as bad:
        await etcd.put(b"", b"v")
    assert not isinstance(bad.value, EtcdUnavailable)


@pytest.mark.asyncio
async def test_closed_client_refuses_requests(etcd_server: EtcdServer) -> None:
    client = EtcdClient(etcd_server.endpoint)
    await client.put("/k", b"v")
    await client.close()
    assert client.closed
    with pytest.raises(EtcdError, match="closed"):
        await client.range("/k")


@pytest.mark.asyncio
async def test_shared_session_is_left_open(etcd_server: EtcdServer) -> None:
    async with aiohttp.ClientSession() as session:
        async with EtcdClient(etcd_server.endpoint, session=session) as client:
            await client.put("/k", b"v")
        assert not session.closed


@pytest.mark.asyncio
async def test_authentication(etcd_server: EtcdServer) -> None:
    async with EtcdClient(etcd_server.endpoint) as admin:
        for path, body in (
            ("/v3/auth/user/add", {"name": "root", "password": "pw"}),
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        ):
            await admin._call(path, body, what=path)

        with pytest.raises(EtcdError, match="user name is empty") as missing:
            await admin.range("/k")
        # where a login comes from
        assert "CRONSTABLE_ETCD_USERNAME" in str(missing.value)
        assert "CRONSTABLE_ETCD_PASSWORD" in str(missing.value)

    async with EtcdClient(etcd_server.endpoint, username="root", password="wrong") as wrong:
        with pytest.raises(EtcdError, match="authentication failed") as info:
            await wrong.range("/k")
        assert "wrong" not in str(info.value)
        assert "check the login CRONSTABLE_ETCD_USERNAME=root" in str(info.value)

    async with EtcdClient(etcd_server.endpoint, username="root", password="pw") as client:
        revision = await client.put("/k", b"v")
        watch = Collector(client.watch("/k", start_revision=revision))
        try:
            assert (await watch.wait_for(1))[0].kv.value == b"v"
        finally:
            await watch.stop()
        client._conn.token = "expired"  # as etcd forgets tokens after --auth-token-ttl
        assert (await client.range("/k")).kvs[0].value == b"v"
        client._conn.token = "expired"
        watch = Collector(client.watch("/k", start_revision=revision))
        try:
            assert (await watch.wait_for(1))[0].kv.value == b"v"
        finally:
            await watch.stop()


# -- TLS (etcds://) against a real etcd serving TLS only, client certificates required


def test_parse_etcd_url() -> None:
    url = parse_etcd_url("etcds://127.0.0.1:2379/cron/?ca=/c.pem&cert=/u.pem&key=/u.key&x=1")
    assert url.endpoint == "https://127.0.0.1:2379" and url.path == "/cron/"
    assert url.tls == EtcdTLS(ca="/c.pem", cert="/u.pem", key="/u.key")
    assert dict(url.options) == {"x": "1"}
    plain = parse_etcd_url("etcd://[::1]:2379/p")
    assert plain.endpoint == "http://[::1]:2379" and plain.tls is None
    assert parse_etcd_url("etcds://h:1/p").tls == EtcdTLS()  # the system's CAs
    for bad, why in [
        ("etcd://h:1/p?ca=/c.pem", "use etcds://h:1"),
        ("etcds://h:1/p?key=/u.key", "key= needs cert="),
        ("etcds://h:1/p?ca=", "empty"),
        ("etcds://h:1/p?ca=/a&ca=/b", "given twice"),
        ("etcd://root:hunter2@h:1/p", "CRONSTABLE_ETCD_USERNAME"),
        ("etcd://h/p", "HOST:PORT"),
        ("https://h:1/p", "etcds://"),
    ]:
        with pytest.raises(ValueError, match=why) as info:
            parse_etcd_url(bad)
        assert "hunter2" not in str(info.value)


@pytest.mark.asyncio
async def test_tls_with_a_ca_and_a_client_certificate(tls_etcd_server: EtcdServer) -> None:
    files = tls_etcd_server.tls
    assert files is not None and tls_etcd_server.endpoint.startswith("https://")
    tls = EtcdTLS(ca=str(files.ca), cert=str(files.client_cert), key=str(files.client_key))
    async with EtcdClient(tls_etcd_server.endpoint, tls=tls) as client:
        revision = await client.put("/k", b"v")
        assert (await client.range("/k")).kvs[0].value == b"v"
        watch = Collector(client.watch("/k", start_revision=revision))
        try:
            assert (await watch.wait_for(1))[0].kv.value == b"v"
        finally:
            await watch.stop()


@pytest.mark.asyncio
async def test_tls_failures_say_what_is_wrong(tls_etcd_server: EtcdServer) -> None:
    files = tls_etcd_server.tls
    assert files is not None
    endpoint = tls_etcd_server.endpoint
    # a server certificate the client does not trust: the system's CAs, another CA
    for tls in (EtcdTLS(), EtcdTLS(ca=str(files.other_ca))):
        async with EtcdClient(endpoint, tls=tls, timeout=5) as client:
            with pytest.raises(EtcdError, match="not trusted.*give its CA with ca="):
                await client.range("/k")
    # trusted, but no client certificate where etcd requires one
    async with EtcdClient(endpoint, tls=EtcdTLS(ca=str(files.ca)), timeout=5) as client:
        with pytest.raises(EtcdError, match=r"wants a client certificate .*\(cert=, key=\)"):
            await client.range("/k")
    # plain HTTP to a TLS-only etcd
    plain = endpoint.replace("https://", "http://")
    async with EtcdClient(plain, timeout=5) as client:
        with pytest.raises(EtcdError, match="use etcds://") as info:
            await client.range("/k")
        assert "ssl:default" not in str(info.value)
    # files that cannot be used fail at once, naming the file
    with pytest.raises(EtcdError, match=f"ca={files.ca}.missing"):
        EtcdClient(endpoint, tls=EtcdTLS(ca=f"{files.ca}.missing"))
    with pytest.raises(EtcdError, match=f"cert={files.ca}"):
        EtcdClient(endpoint, tls=EtcdTLS(ca=str(files.ca), cert=str(files.ca)))
    with pytest.raises(ValueError, match="https://"):
        EtcdClient(plain, tls=EtcdTLS())


def test_tls_files_fixture_makes_distinct_cas(tmp_path: Path) -> None:
    files = TLSFiles.make(tmp_path)
    assert files.ca.read_bytes() != files.other_ca.read_bytes()
