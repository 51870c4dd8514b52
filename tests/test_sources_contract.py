"""One contract, every source: a directory, a git remote, an etcd prefix — all real."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from source_harness import SourceHarness

from cronstable.snapshot import Snapshot
from cronstable.sources.base import Source

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

KINDS = ["local", "git", "etcd"]
FIRST = {"cronstable.yaml": b"jobs: []\n", "jobs/a.yaml": b"jobs:\n  - {name: a}\n"}
SECOND = {"cronstable.yaml": b"jobs: []\n", "jobs/a.yaml": b"jobs:\n  - {name: b}\n"}


@pytest_asyncio.fixture(params=KINDS)
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SourceHarness]:
    module = importlib.import_module(f"harness_{request.param}")
    async with module.harness(tmp_path) as h:
        yield h


async def next_snapshot(it: AsyncIterator[Snapshot], timeout: float = 15.0) -> Snapshot:
    return await asyncio.wait_for(anext(it), timeout)


async def started(h: SourceHarness, cache: Path) -> Source:
    source = h.source(cache)
    await source.start()
    return source


async def test_first_snapshot_is_the_current_content(
    harness: SourceHarness, tmp_path: Path
) -> None:
    revision = await harness.publish(FIRST)
    source = await started(harness, tmp_path / "cache")
    try:
        snap = await next_snapshot(source.watch())
        assert dict(snap.files) == FIRST
        assert snap.revision
        if revision is not None:
            assert snap.revision == revision
        assert source.description
    finally:
        await source.close()


async def test_a_change_yields_a_new_complete_snapshot(
    harness: SourceHarness, tmp_path: Path
) -> None:
    await harness.publish(FIRST)
    source = await started(harness, tmp_path / "cache")
    try:
        it = source.watch()
        first = await next_snapshot(it)
        revision = await harness.publish(SECOND)
        second = await next_snapshot(it)
        assert second.revision != first.revision
        assert dict(second.files) == SECOND
        if revision is not None:
            assert second.revision == revision
        assert dict(first.files) == FIRST  # the earlier snapshot is untouched
    finally:
        await source.close()


async def test_a_nudge_fetches_now_and_names_the_revision(
    harness: SourceHarness, tmp_path: Path
) -> None:
    await harness.publish(FIRST)
    source = await started(harness, tmp_path / "cache")
    try:
        it = source.watch()
        await next_snapshot(it)
        revision = await harness.publish(SECOND)
        source.nudge(revision)
        second = await next_snapshot(it, timeout=5.0)
        assert dict(second.files) == SECOND
    finally:
        await source.close()


async def test_no_change_yields_nothing(harness: SourceHarness, tmp_path: Path) -> None:
    await harness.publish(FIRST)
    source = await started(harness, tmp_path / "cache")
    try:
        it = source.watch()
        await next_snapshot(it)
        source.nudge()
        with pytest.raises(TimeoutError):
            await next_snapshot(it, timeout=2.0)
    finally:
        await source.close()


async def test_snapshots_are_immutable(harness: SourceHarness, tmp_path: Path) -> None:
    await harness.publish(FIRST)
    source = await started(harness, tmp_path / "cache")
    try:
        snap = await next_snapshot(source.watch())
        with pytest.raises(TypeError):
            snap.files["x"] = b""  # type: ignore[index]
    finally:
        await source.close()


async def test_close_ends_watch(harness: SourceHarness, tmp_path: Path) -> None:
    await harness.publish(FIRST)
    source = await started(harness, tmp_path / "cache")
    it = source.watch()
    await next_snapshot(it)
    waiter = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.1)
    await source.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiter, 10)


async def test_restart_with_origin_down_serves_last_applied(
    harness: SourceHarness, tmp_path: Path
) -> None:
    if not harness.supports_cache:
        pytest.skip(f"a {harness.kind} source reads its origin directly; there is no cache")
    cache = tmp_path / "cache"
    await harness.publish(FIRST)
    source = await started(harness, cache)
    it = source.watch()
    first = await next_snapshot(it)
    source.applied(first)
    revision = await harness.publish(SECOND)
    source.nudge(revision)
    second = await next_snapshot(it)  # fetched, but never applied (say it was invalid)
    assert second.revision != first.revision
    await source.close()
    await harness.stop_origin()
    again = await started(harness, cache)
    try:
        snap = await next_snapshot(again.watch())
        assert snap.revision == first.revision
        assert dict(snap.files) == FIRST
    finally:
        await again.close()
