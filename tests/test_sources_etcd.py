"""EtcdSource specifics, against a real etcd (the shared contract is test_sources_contract.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from etcd_server import EtcdServer
from harness_etcd import EtcdHarness

import cronstable.sources.etcd.source as etcd_source
from cronstable.etcd import EtcdClient, EtcdTLS, request_put
from cronstable.snapshot import Snapshot, content_revision
from cronstable.sources.base import SourceError
from cronstable.sources.etcd.source import EtcdSource, key_path
from cronstable.sources.etcd.spec import EtcdSpec
from cronstable.sources.factory import open_source

pytestmark = pytest.mark.timeout(30)

PREFIX = "/cron/"
LOGGER = "cronstable.sources.etcd"


@pytest_asyncio.fixture
async def etcd(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    async with EtcdClient(etcd_server.endpoint) as client:
        yield client


def make_source(server: EtcdServer, cache: Path, **options: float) -> EtcdSource:
    return EtcdSource(EtcdSpec(endpoint=server.endpoint, prefix=PREFIX), cache_dir=cache, **options)


async def next_snapshot(it: AsyncIterator[Snapshot], within: float = 10.0) -> Snapshot:
    return await asyncio.wait_for(anext(it), within)


async def no_snapshot(it: AsyncIterator[Snapshot], within: float = 0.5) -> None:
    """Nothing is yielded for ``within`` seconds (the pending anext is cancelled, ending ``it``)."""
    with pytest.raises(TimeoutError):
        await next_snapshot(it, within)


def test_key_paths() -> None:
    prefix = b"/cron/"
    assert key_path(b"/cron/a.yaml", prefix) == "a.yaml"
    assert key_path(b"/cron/jobs/b.yaml", prefix) == "jobs/b.yaml"
    assert key_path("/cron/jobs/é.yaml".encode(), prefix) == "jobs/é.yaml"
    for bad in (
        b"/cron/",
        b"/cron//abs.yaml",
        b"/cron/../up.yaml",
        b"/cron/a/../b.yaml",
        b"/cron/./a.yaml",
        b"/cron/a//b.yaml",
        b"/cron/dir/",
        b"/cron/nul\0.yaml",
        b"/cron/\xff.yaml",
        b"/cron/..",
        b"/other/a.yaml",
    ):
        assert key_path(bad, prefix) is None, bad


def test_description_and_factory(tmp_path: Path) -> None:
    source = open_source("etcd://127.0.0.1:2379/cron", cache_dir=tmp_path)
    assert isinstance(source, EtcdSource)
    assert source.description == "etcd://127.0.0.1:2379/cron/"
    assert source.prefix == b"/cron/"
    assert source.cache_path.parent == tmp_path / "etcd"
    other = open_source("etcd://127.0.0.1:2379/other/", cache_dir=tmp_path)
    assert isinstance(other, EtcdSource) and other.cache_path != source.cache_path


@pytest.mark.asyncio
async def test_keys_are_files_and_bad_keys_are_skipped(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    good = {"/cron/cronstable.yaml": b"a", "/cron/jobs/b.yaml": b"b", "/cron/jobs/c/d.yml": b""}
    bad = [b"/cron/", b"/cron//abs", b"/cron/../up", b"/cron/x/./y", b"/cron/n\0l", b"/cron/\xff"]
    for key, value in good.items():
        await etcd.put(key, value)
    for raw in bad:
        await etcd.put(raw, b"bad")
    await etcd.put("/cron/jobs", b"a file that is also a directory")
    await etcd.put("/cronx/outside.yaml", b"not under the prefix")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        snapshot = await next_snapshot(source.watch())
        assert dict(snapshot.files) == {k.removeprefix(PREFIX): v for k, v in good.items()}
        assert snapshot.source == source.description
        skipped = [r.getMessage() for r in caplog.records if "skipping key" in r.getMessage()]
        assert len(skipped) == len(bad) + 1
        assert any("also a directory" in message for message in skipped)
        assert not any("bad" in message.replace("b'", "") for message in skipped)  # no values
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_multi_key_txn_is_one_snapshot(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    await etcd.put("/cron/a.yaml", b"1")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        it = source.watch()
        await next_snapshot(it)
        txn = await etcd.txn(
            [], [request_put(f"/cron/{name}.yaml", name.encode()) for name in ("a", "b", "c")]
        )
        snapshot = await next_snapshot(it)
        assert snapshot.revision == str(txn.revision)
        assert dict(snapshot.files) == {"a.yaml": b"a", "b.yaml": b"b", "c.yaml": b"c"}
        await no_snapshot(it)
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_burst_of_writes_is_one_snapshot(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    await etcd.put("/cron/0.yaml", b"0")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        it = source.watch()
        await next_snapshot(it)
        revisions = await asyncio.gather(
            *(etcd.put(f"/cron/{i}.yaml", str(i).encode()) for i in range(1, 11))
        )
        snapshot = await next_snapshot(it)
        assert snapshot.revision == str(max(revisions))
        assert dict(snapshot.files) == {f"{i}.yaml": str(i).encode() for i in range(11)}
        await no_snapshot(it)
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_delete_changes_the_revision(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    await etcd.put("/cron/a.yaml", b"a")
    await etcd.put("/cron/b.yaml", b"b")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        it = source.watch()
        first = await next_snapshot(it)
        deleted = await etcd.delete("/cron/a.yaml")
        second = await next_snapshot(it)
        assert dict(second.files) == {"b.yaml": b"b"}
        assert second.revision == str(deleted.revision) != first.revision
        # writes elsewhere move etcd's revision, not the prefix's
        await etcd.put("/elsewhere", b"x")
        source.nudge()
        await no_snapshot(it)
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_delete_before_start_is_not_mistaken_for_the_old_content(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    await etcd.put("/cron/a.yaml", b"a")
    both = await etcd.put("/cron/b.yaml", b"b")  # {a, b} is revision `both`
    await etcd.delete("/cron/a.yaml")  # {b}: its newest mod_revision is still `both`
    latest = await etcd.put("/elsewhere", b"x")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        snapshot = await next_snapshot(source.watch())
        assert dict(snapshot.files) == {"b.yaml": b"b"}
        assert snapshot.revision != str(both)
        assert snapshot.revision == str(latest)  # the read's revision: true, if not the earliest
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_unchanged_content_keeps_its_revision_across_restarts(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    await etcd.put("/cron/a.yaml", b"a")
    await etcd.put("/cron/b.yaml", b"b")
    await etcd.delete("/cron/a.yaml")
    await etcd.put("/elsewhere", b"1")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    first = await next_snapshot(source.watch())
    source.applied(first)
    await source.close()
    await etcd.put("/elsewhere", b"2")
    again = make_source(etcd_server, tmp_path)
    await again.start()
    try:
        assert (await next_snapshot(again.watch())).revision == first.revision
    finally:
        await again.close()


@pytest.mark.asyncio
async def test_an_outage_while_watching_then_recovery(
    etcd_server: EtcdServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with EtcdClient(etcd_server.endpoint) as etcd:
        harness = EtcdHarness(etcd_server, etcd)
        await harness.publish({"a.yaml": b"1"})
    source = make_source(etcd_server, tmp_path, retry_max=0.2)
    await source.start()
    try:
        it = source.watch()
        await next_snapshot(it)
        etcd_server.stop()
        source.nudge()  # a read fails too, without a second warning
        await asyncio.sleep(1.0)
        etcd_server.start()
        async with EtcdClient(etcd_server.endpoint) as etcd:
            revision = await EtcdHarness(etcd_server, etcd).publish({"a.yaml": b"2"})
        snapshot = await next_snapshot(it)
        assert dict(snapshot.files) == {"a.yaml": b"2"}
        assert snapshot.revision == revision
    finally:
        await source.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
    infos = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(infos) == 1 and infos[0].levelno == logging.INFO


@pytest.mark.asyncio
async def test_the_watch_recovers_from_compaction_during_an_outage(
    etcd_server: EtcdServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    # the watch comes back 1 s after losing etcd: time to write and compact before that
    monkeypatch.setattr(EtcdClient, "_backoff", lambda self, failures: 1.0)
    async with EtcdClient(etcd_server.endpoint) as etcd:
        await etcd.put("/cron/a.yaml", b"1")
        source = make_source(etcd_server, tmp_path)
        await source.start()
        try:
            it = source.watch()
            await next_snapshot(it)
            etcd_server.stop()
            await asyncio.sleep(0.1)
            etcd_server.start()
            changed = await etcd.put("/cron/a.yaml", b"2")
            compacted = await etcd.put("/elsewhere", b"x")
            await etcd.compact(compacted)
            snapshot = await next_snapshot(it)
            assert dict(snapshot.files) == {"a.yaml": b"2"}
            # read before the unrelated put, the change's revision is the read's; after
            # the compaction it can no longer be proven: the content names the snapshot
            assert snapshot.revision in (str(changed), content_revision({"a.yaml": b"2"}))
            for _ in range(50):
                if "compacted" in caplog.text:
                    break
                await asyncio.sleep(0.05)
            assert "is compacted" in caplog.text
            # the watch goes on from the re-read
            third = await etcd.put("/cron/a.yaml", b"3")
            snapshot = await next_snapshot(it)
            assert dict(snapshot.files) == {"a.yaml": b"3"}
            assert snapshot.revision == str(third)
        finally:
            await source.close()


@pytest.mark.asyncio
async def test_restart_from_the_cache_while_etcd_is_down(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await etcd.put("/cron/a.yaml", b"secret: 1")
    source = make_source(etcd_server, tmp_path, retry_max=0.2)
    await source.start()
    first = await next_snapshot(source.watch())
    source.applied(first)
    await source.close()

    document = json.loads(source.cache_path.read_text())
    assert document["format"] == etcd_source.CACHE_FORMAT
    assert document["revision"] == first.revision
    assert "secret" not in source.cache_path.read_text()  # base64, not plain text
    assert stat.S_IMODE(source.cache_path.stat().st_mode) == 0o600
    assert [p.name for p in source.cache_path.parent.iterdir()] == [source.cache_path.name]

    etcd_server.stop()
    caplog.set_level(logging.INFO, logger=LOGGER)
    again = make_source(etcd_server, tmp_path, retry_max=0.2)
    await again.start()
    try:
        it = again.watch()
        cached = await next_snapshot(it)
        assert cached.revision == first.revision and dict(cached.files) == dict(first.files)
        assert "cached last good revision" in caplog.text
        etcd_server.start()
        await no_snapshot(it, within=1.0)  # etcd is back with the same content: no change
        assert "reachable again" in caplog.text
    finally:
        await again.close()


@pytest.mark.asyncio
async def test_restart_from_the_cache_picks_up_changes_once_etcd_is_back(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    async with EtcdClient(etcd_server.endpoint) as etcd:
        await etcd.put("/cron/a.yaml", b"1")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    source.applied(await next_snapshot(source.watch()))
    await source.close()
    etcd_server.stop()
    again = make_source(etcd_server, tmp_path, retry_max=0.2)
    await again.start()
    try:
        it = again.watch()
        await next_snapshot(it)
        again.nudge()  # fails: etcd is down; the source keeps trying
        await asyncio.sleep(0.3)
        etcd_server.start()
        async with EtcdClient(etcd_server.endpoint) as etcd:
            revision = await etcd.put("/cron/a.yaml", b"2")
        snapshot = await next_snapshot(it)
        assert dict(snapshot.files) == {"a.yaml": b"2"}
        assert snapshot.revision == str(revision)
    finally:
        await again.close()


@pytest.mark.asyncio
async def test_nothing_cached_and_etcd_down_is_a_source_error(
    etcd_server: EtcdServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    etcd_server.stop()
    source = make_source(etcd_server, tmp_path)
    with pytest.raises(SourceError, match="no earlier revision to start from instead"):
        await source.start()
    await source.close()

    (tmp_path / "etcd").mkdir()
    source.cache_path.write_text("{not json")
    broken = make_source(etcd_server, tmp_path)
    with pytest.raises(SourceError):
        await broken.start()
    await broken.close()
    assert "ignoring the unreadable cache" in caplog.text


@pytest.mark.asyncio
async def test_nudge_with_a_revision_waits_for_it(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_watch(self: EtcdSource) -> None:
        await asyncio.Event().wait()

    # Without its watch, the source only reads when nudged: what this test is about.
    monkeypatch.setattr(EtcdSource, "_watcher", no_watch)
    start = await etcd.put("/cron/a.yaml", b"1")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        it = source.watch()
        await next_snapshot(it)
        source.nudge(str(start + 2))  # the revision a webhook heard of, not yet in etcd
        await asyncio.sleep(0.3)
        await etcd.put("/elsewhere", b"x")  # start + 1
        await asyncio.sleep(0.3)
        await etcd.put("/cron/a.yaml", b"2")  # start + 2
        snapshot = await next_snapshot(it, within=5)
        assert snapshot.revision == str(start + 2)
        assert dict(snapshot.files) == {"a.yaml": b"2"}
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_nudge_gives_up_on_a_revision_etcd_never_reaches(
    etcd_server: EtcdServer,
    etcd: EtcdClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(etcd_source, "NUDGE_WAIT", 0.5)
    await etcd.put("/cron/a.yaml", b"1")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        it = source.watch()
        await next_snapshot(it)
        source.nudge("1000000")
        source.nudge("not-a-revision")
        await no_snapshot(it, within=1.5)
        assert "short of the 1000000 it was nudged with" in caplog.text
        assert "not an etcd revision" in caplog.text
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_an_empty_prefix_is_an_empty_snapshot(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        it = source.watch()
        empty = await next_snapshot(it)
        assert dict(empty.files) == {} and empty.revision
        revision = await etcd.put("/cron/a.yaml", b"1")
        assert (await next_snapshot(it)).revision == str(revision)
        deleted = await etcd.delete("/cron/a.yaml")
        again = await next_snapshot(it)
        assert dict(again.files) == {} and again.revision == str(deleted.revision)
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_credentials_come_from_the_environment_and_are_never_logged(
    etcd_server: EtcdServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with EtcdClient(etcd_server.endpoint) as admin:
        await admin.put(PREFIX + "c.yaml", b"jobs: []\n")
        for path, body in (
            ("/v3/auth/user/add", {"name": "root", "password": "s3cret-pw"}),
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        ):
            await admin._call(path, body, what=path)

    caplog.set_level(logging.DEBUG)
    # without credentials the server refuses, and nothing is cached: where a login goes
    with pytest.raises(SourceError, match="CRONSTABLE_ETCD_USERNAME with CRONSTABLE_ETCD_PASSW"):
        await make_source(etcd_server, tmp_path / "none").start()

    secret = tmp_path / "password"
    secret.write_text("s3cret-pw\n")
    monkeypatch.setenv("CRONSTABLE_ETCD_USERNAME", "root")
    monkeypatch.setenv("CRONSTABLE_ETCD_PASSWORD_FILE", str(secret))
    source = make_source(etcd_server, tmp_path / "cache")
    await source.start()
    try:
        snap = await next_snapshot(aiter(source.watch()))
        assert dict(snap.files) == {"c.yaml": b"jobs: []\n"}
    finally:
        await source.close()
    assert "s3cret-pw" not in caplog.text

    monkeypatch.delenv("CRONSTABLE_ETCD_PASSWORD_FILE")
    with pytest.raises(SourceError, match="CRONSTABLE_ETCD_PASSWORD"):
        await make_source(etcd_server, tmp_path / "half").start()


@pytest.mark.asyncio
async def test_after_a_compaction_the_label_is_the_content_not_the_read_revision(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    """The prefix's last change was compacted away: it cannot be proven, and the read's
    own revision moves with every write elsewhere; the content hash is stable."""
    await etcd.put(PREFIX + "a.yaml", b"jobs: []\n")
    await etcd.put(PREFIX + "b.yaml", b"jobs: []\n")
    await etcd.compact(await etcd.put("/elsewhere", b"1"))
    labels = []
    for n in range(2):
        source = make_source(etcd_server, tmp_path / f"node-{n}")  # a fresh node each time
        await source.start()
        try:
            snap = await next_snapshot(aiter(source.watch()))
        finally:
            await source.close()
        labels.append(snap.revision)
        await etcd.put("/elsewhere", b"moves the header revision")
    expected = content_revision({"a.yaml": b"jobs: []\n", "b.yaml": b"jobs: []\n"})
    assert labels == [expected, expected]


@pytest.mark.asyncio
async def test_an_uncompacted_last_change_still_names_the_snapshot(
    etcd_server: EtcdServer, etcd: EtcdClient, tmp_path: Path
) -> None:
    changed = await etcd.put(PREFIX + "a.yaml", b"jobs: []\n")
    await etcd.put("/elsewhere", b"1")
    source = make_source(etcd_server, tmp_path)
    await source.start()
    try:
        assert (await next_snapshot(aiter(source.watch()))).revision == str(changed)
    finally:
        await source.close()


def test_a_login_in_the_spec_is_refused_with_where_it_goes(tmp_path: Path) -> None:
    """etcd://user:pass@ used to be silently ignored (the source ran unauthenticated)."""
    for spec in ("etcd://deploy:hunter2@127.0.0.1:2379/cron/", "etcds://deploy@127.0.0.1:2379/c/"):
        with pytest.raises(SourceError, match="CRONSTABLE_ETCD_USERNAME") as info:
            open_source(spec, cache_dir=tmp_path)
        assert "hunter2" not in str(info.value)
    with pytest.raises(SourceError, match="etcds://"):
        open_source("etcd://127.0.0.1:2379/cron/?ca=/etc/ca.pem", cache_dir=tmp_path)
    with pytest.raises(SourceError, match="unknown etcd source option"):
        open_source("etcd://127.0.0.1:2379/cron/?timeout=3", cache_dir=tmp_path)


@pytest.mark.asyncio
async def test_an_etcds_spec_reads_a_tls_etcd_with_a_client_certificate(
    tls_etcd_server: EtcdServer, tmp_path: Path
) -> None:
    files = tls_etcd_server.tls
    assert files is not None
    tls = EtcdTLS(ca=str(files.ca), cert=str(files.client_cert), key=str(files.client_key))
    async with EtcdClient(tls_etcd_server.endpoint, tls=tls) as admin:
        await admin.put(PREFIX + "a.yaml", b"jobs: []\n")
    address = tls_etcd_server.endpoint.removeprefix("https://")
    spec = f"etcds://{address}/cron/?ca={files.ca}&cert={files.client_cert}&key={files.client_key}"
    source = open_source(spec, cache_dir=tmp_path)
    assert source.description == f"etcds://{address}/cron/"
    await source.start()
    try:
        it = aiter(source.watch())
        assert dict((await next_snapshot(it)).files) == {"a.yaml": b"jobs: []\n"}
        async with EtcdClient(tls_etcd_server.endpoint, tls=tls) as admin:
            await admin.put(PREFIX + "a.yaml", b"jobs: [] # watched over TLS\n")
        assert (await next_snapshot(it)).files["a.yaml"].endswith(b"over TLS\n")
    finally:
        await source.close()
    # a CA file that cannot be read fails the start at once, naming it
    broken = open_source(f"etcds://{address}/cron/?ca={tmp_path}/nope.pem", cache_dir=tmp_path)
    with pytest.raises(SourceError, match="nope.pem"):
        await broken.start()
    # without the client certificate etcd refuses, and the error says so
    refused = open_source(f"etcds://{address}/other/?ca={files.ca}", cache_dir=tmp_path)
    with pytest.raises(SourceError, match="client certificate"):
        await refused.start()
