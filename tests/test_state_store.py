"""State store contract tests, run against every backend: a directory and a real etcd."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
import pytest_asyncio
from backends import StateBackend, state_backend_of
from hypothesis import given
from hypothesis import strategies as st

from cronstable.state.base import StateError, StateStore, key, node_key, segments
from cronstable.state.etcd import EtcdStore
from cronstable.state.filesystem import FilesystemStore

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture(params=["filesystem", "filesystem-shared", "etcd"])
def state_backend(request: pytest.FixtureRequest) -> StateBackend:
    """Both layouts of a directory: a node's own (one log) and a shared one (a file each)."""
    return state_backend_of(request)


@pytest_asyncio.fixture
async def store(state_backend: StateBackend, tmp_path: Path) -> AsyncIterator[StateStore]:
    made = state_backend.store(tmp_path / "state")
    await made.check()
    yield made
    await made.close()


def test_keys_quote_every_segment() -> None:
    assert key("nodes", "a/b", "..") == "nodes/a%2Fb/%2E."
    assert segments(key("nodes", "a/b", ".hidden", "x y")) == ["nodes", "a/b", ".hidden", "x y"]
    assert node_key("n1", "retries", "job") == "nodes/n1/retries/job"


@given(st.text(alphabet="aZ09._-~/ %@:#\u00e9\u65e5", max_size=200))
def test_a_segment_is_what_quoting_makes_of_it(text: str) -> None:
    """A name quoting leaves alone is taken as it is without quoting (the fast path):
    every segment is still the quoted text, its leading dot escaped, a long one cut."""
    quoted = quote(text, safe="")
    quoted = "%2E" + quoted[1:] if quoted.startswith(".") else quoted
    got = key(text)
    if len(quoted) <= 180:
        assert got == quoted
    else:
        assert len(got) <= 180 and "~" in got
    assert segments(got) == [text] or "~" in got


@pytest.mark.asyncio
async def test_put_get_delete(store: StateStore) -> None:
    k = node_key("n1", "retries", "backup/nightly")
    assert await store.get(k) is None
    await store.put(k, {"status": "pending", "attempt": 2})
    got = await store.get(k)
    assert got is not None and got["status"] == "pending" and got["attempt"] == 2
    assert got["version"] == 1
    await store.put(k, {"status": "settled"})
    got = await store.get(k)
    assert got is not None and got["status"] == "settled" and "attempt" not in got
    assert await store.delete(k) is True
    assert await store.delete(k) is False
    assert await store.get(k) is None


@pytest.mark.asyncio
async def test_apply_writes_and_removes_in_order(store: StateStore) -> None:
    running = node_key("n1", "running", "job@2026-01-01T00:00:00Z#1")
    history = node_key("n1", "history", "job")
    await store.apply([(running, {"pid": 1}), (history, {"runs": []}), (running, {"pid": 2})])
    got = await store.get(running)
    assert got is not None and got["pid"] == 2
    assert await store.get(history) is not None
    await store.apply([(running, None), (history, {"runs": [1]})])
    assert await store.get(running) is None
    got = await store.get(history)
    assert got is not None and got["runs"] == [1]
    assert list(await store.list(node_key("n1", ""))) == [history]


def test_only_a_running_runs_record_is_boot_scoped() -> None:
    from cronstable.state.base import boot_scoped

    assert boot_scoped(node_key("n1", "running", "a/b@x#1"))
    assert not boot_scoped(node_key("n1", "history", "running"))
    assert not boot_scoped(node_key("running", "retries", "job"))
    assert not boot_scoped(key("cluster", "running", "x", "y"))


@pytest.mark.asyncio
async def test_create_is_put_if_absent(store: StateStore) -> None:
    k = key("cluster", "reboot", "migrate")
    assert await store.create(k, {"digest": "a"}) is True
    assert await store.create(k, {"digest": "b"}) is False
    got = await store.get(k)
    assert got is not None and got["digest"] == "a"


@pytest.mark.asyncio
async def test_list_under_a_prefix_in_key_order(store: StateStore) -> None:
    for job in ("b", "a", "c/d"):
        await store.put(node_key("n1", "fires", job), {"job": job})
    await store.put(node_key("n2", "fires", "a"), {"job": "other node"})
    await store.put(node_key("n1", "retries", "a"), {"job": "a"})
    listed = await store.list(node_key("n1", "fires") + "/")
    assert list(listed) == [node_key("n1", "fires", j) for j in ("a", "b", "c/d")]
    assert [r["job"] for r in listed.values() if r] == ["a", "b", "c/d"]
    everything = await store.list()
    assert node_key("n2", "fires", "a") in everything
    assert await store.list("nodes/nobody/") == {}


@pytest.mark.asyncio
async def test_a_record_of_another_version_reads_as_none(store: StateStore) -> None:
    k = node_key("n1", "fires", "x")
    if isinstance(store, FilesystemStore) and store.shared:
        path = store.root / "nodes" / "n1" / "fires" / "x.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"version": 99}')
    elif isinstance(store, FilesystemStore):
        await store.put(k, {"version": 99})  # a later format's record, in the log
    else:
        assert isinstance(store, EtcdStore)
        await store.pool.clients[0].put(store.prefix + k, b"not json")
    assert await store.get(k) is None
    assert (await store.list(k)) == {k: None}


@pytest.mark.asyncio
async def test_a_directory_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = tmp_path / "file"
        target.write_text("a file, not a directory")
        store = FilesystemStore(target / "state")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        store = FilesystemStore(locked / "state")
    with pytest.raises(StateError, match="cannot write records"):
        await store.check()


@pytest.mark.asyncio
async def test_an_etcd_that_does_not_answer_is_refused_in_time(tmp_path: Path) -> None:
    from etcd_server import free_port

    store = EtcdStore([f"http://127.0.0.1:{free_port()}"], timeout=1.0)
    try:
        with pytest.raises(StateError):
            await store.check()
        with pytest.raises(StateError):
            await store.put("nodes/n1/fires/x", {})
    finally:
        await store.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("shared", [False, True])
async def test_the_filesystem_store_leaves_no_temporary_files(tmp_path: Path, shared: bool) -> None:
    store = FilesystemStore(tmp_path / "s", shared=shared)
    await store.check()
    for n in range(5):
        await store.put(node_key("n1", "history", "j"), {"n": n})
        await store.create(key("cluster", "reboot", "j"), {"n": n})
    names = [p.name for p in (tmp_path / "s").rglob("*") if p.is_file()]
    # a node's own directory holds one log; a shared one a file per record
    assert sorted(names) == (["j.json", "j.json"] if shared else ["records.log"])
    if shared:
        mode = (tmp_path / "s" / "nodes").stat().st_mode & 0o777
        assert mode == 0o700
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700
    await store.close()


def test_a_long_segment_keeps_a_readable_start_and_a_digest() -> None:
    long = "日本語" * 30 + "@2026-06-01T12:00:00Z#1"
    segment = key(long)
    assert len(segment) <= 180 and "~" in segment
    assert segment != key(long + "x")  # the digest tells long names apart
    assert "%" not in segment[segment.rindex("%") :][3:4]  # no escape cut in half
    assert segments(segment)[0].startswith("日本語日本語")


@pytest.mark.asyncio
async def test_a_record_with_a_very_long_job_name_is_written(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "state")
    k = node_key("n1", "running", "ジョブ" * 40 + "@2026-06-01T12:00:00Z#1")
    await store.put(k, {"job": "long"})
    got = await store.get(k)
    assert got is not None and got["job"] == "long"


def test_a_records_time_reads_in_utc_and_what_is_not_one_is_none() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from cronstable.state.base import record_time

    noon = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    assert record_time("2026-06-01T12:00:00Z") == noon
    east = record_time("2026-06-01T14:00:00+02:00")
    assert east == noon and east is not None and east.tzinfo is UTC
    assert record_time(noon.astimezone(timezone(timedelta(hours=-5))).isoformat()) == noon
    for bad in (None, 3, "", "noon", "2026-06-01T12:00:00"):  # the last has no zone
        assert record_time(bad) is None
