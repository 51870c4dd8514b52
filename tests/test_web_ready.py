"""GET /readyz: a revision applied AND the source's origin answered recently.

A real daemon following a real ``git daemon`` remote; the source error metric is
read from GET /metrics.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest
from daemon_proc import until
from git_server import GitDaemon, WorkRepo
from web_stack import Stack, section_named

from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.runtime.control import DaemonControl
from cronstable.runtime.daemon import Daemon
from cronstable.sources.factory import open_source
from cronstable.web.section import WebSection

pytestmark = pytest.mark.timeout(90)

CONFIG = "web: {listen: [http://127.0.0.1:0]}\njobs: []\n"


async def get(url: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(url) as response,
    ):
        return response.status, await response.text()


async def start(remote: str, cache: Path) -> tuple[Daemon, WebSection, asyncio.Task[int]]:
    daemon = build_daemon(open_source(f"{remote}?interval=1", cache_dir=cache), NodeFacts())
    web = section_named(daemon, "web")
    running = asyncio.create_task(daemon.run())
    await until(lambda: bool(web.urls()), 15, "listener")
    return daemon, web, running


@pytest.mark.asyncio
async def test_a_start_from_the_cache_is_not_ready_until_the_origin_answers(
    tmp_path: Path,
) -> None:
    repo = WorkRepo.create(tmp_path / "remotes", "cron")
    repo.commit({"cronstable.yaml": CONFIG})
    repo.push()
    server = GitDaemon(tmp_path / "remotes")
    server.start()
    try:
        remote = server.url("cron.git")
        daemon, web, running = await start(remote, tmp_path / "cache")
        try:
            status, body = await get(web.urls()[0] + "/readyz")
            assert (status, body) == (200, '{"ready": true}')
        finally:
            daemon.request_stop()
            assert await asyncio.wait_for(running, 15) == 0
        server.stop()  # the remote is down: the next daemon starts from its cache
        daemon, web, running = await start(remote, tmp_path / "cache")
        try:
            base = web.urls()[0]
            status, body = await get(base + "/readyz")
            assert status == 503 and "has not answered yet" in body, body
            _, metrics = await get(base + "/metrics")
            assert 'cronstable_source_errors_total{kind="git"} 1.0' in metrics, metrics
            server.start()
            await until(lambda: daemon.control.ready() is None, 20, "ready")
            assert (await get(base + "/readyz"))[0] == 200
        finally:
            daemon.request_stop()
            assert await asyncio.wait_for(running, 15) == 0
    finally:
        server.stop()


@pytest.mark.asyncio
async def test_a_source_silent_longer_than_its_window_is_not_ready(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    await stack.start()
    try:
        now = [time.monotonic()]
        control = DaemonControl(
            status=stack.daemon.applier.status,
            scheduler=stack.daemon.scheduler,
            history=stack.daemon.history,
            metrics=stack.daemon.metrics,
            reload=lambda: None,
            source=stack.daemon.source,
            monotonic=lambda: now[0],
        )
        assert control.ready() == "no configuration revision has been applied yet"
        assert (await stack.apply(CONFIG)).outcome == "applied"
        assert control.ready() is None
        now[0] += 59
        assert control.ready() is None
        now[0] += 2
        reason = control.ready() or ""
        assert "last answered 61 s ago (more than the 60 s allowed)" in reason
    finally:
        await stack.stop()


def test_a_git_source_is_followed_within_three_intervals_and_never_less_than_a_minute(
    tmp_path: Path,
) -> None:
    slow = open_source("git://127.0.0.1:9/x.git?interval=3600", cache_dir=tmp_path)
    fast = open_source("git://127.0.0.1:9/x.git?interval=5", cache_dir=tmp_path)
    local = open_source(str(tmp_path))
    assert (slow.contact_window(), fast.contact_window(), local.contact_window()) == (
        10800,
        60,
        60,
    )


@pytest.mark.asyncio
async def test_an_idle_etcd_is_asked_so_it_stays_followed_and_its_failures_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness_etcd

    from cronstable.sources.etcd import source as etcd_module

    monkeypatch.setattr(etcd_module, "CONTACT_REFRESH", 0.2)
    async with harness_etcd.harness(tmp_path) as h:
        await h.publish({"c.yaml": b"jobs: []\n"})
        source = h.source(tmp_path / "cache")
        failures: list[str] = []
        source.error_hook = failures.append
        await source.start()
        try:
            first = source.last_contact
            assert first is not None
            await until(lambda: source.last_contact != first, 15, "a contact while idle")
            await h.stop_origin()
            await until(lambda: bool(failures), 15, "a counted failure")
            assert set(failures) == {"etcd"}
        finally:
            await source.close()
