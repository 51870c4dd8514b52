"""A manual start of a ``concurrencyScope: cluster`` job through the real HTTP API of
two in-process daemons on one shared directory, built as ``run`` builds them:
409 while the other node holds the slot under Forbid, and the slot metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import until
from web_stack import Stack, section_named

from cronstable.cluster.claims import SlotGuard

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

HEADERS = {"Authorization": "Bearer t"}


def wired(root: Path, node: str) -> tuple[Stack, SlotGuard]:
    root.mkdir()
    stack = Stack(root, node)
    guard: SlotGuard = section_named(stack.daemon, "cluster-slots").guard
    return stack, guard


@pytest_asyncio.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[list[tuple[Stack, SlotGuard]]]:
    shared = tmp_path / "shared"
    shared.mkdir()
    made = [wired(tmp_path / name, name) for name in ("n1", "n2")]
    text = f"""\
        web: {{listen: ["http://127.0.0.1:0"], authToken: {{value: t}}}}
        cluster:
          backend: filesystem
          leaseTtl: 2
          electLeader: false
          filesystem: {{path: "{shared}"}}
        jobs:
          - name: long
            command: sleep 30
            schedule: "@yearly"
            concurrencyPolicy: Forbid
            concurrencyScope: cluster
        """
    for stack, _ in made:
        await stack.start()
        assert (await stack.apply(text)).outcome == "applied"
    yield made
    for stack, guard in made:
        await stack.stop()
        await guard.close()


async def post(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, object]]:
    async with http.post(url, headers=HEADERS) as response:
        return response.status, await response.json()


async def test_a_manual_start_answers_409_while_another_node_holds_the_slot(
    nodes: list[tuple[Stack, SlotGuard]],
) -> None:
    (one, slots_one), (two, slots_two) = nodes
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        status, _ = await post(http, f"{one.url()}/jobs/long/start")
        assert status == 202
        await until(lambda: slots_one.held() == ["long"])  # electLeader false: slots all the same
        status, body = await post(http, f"{two.url()}/jobs/long/start")
        assert status == 409
        assert body["error"] == (
            "job 'long' not started: node n1 holds its cluster slot "
            "(concurrencyPolicy Forbid, concurrencyScope cluster)"
        )
        async with http.get(f"{one.url()}/metrics", headers=HEADERS) as response:
            metrics = await response.text()
        assert "cronstable_cluster_slots_held 1.0" in metrics
        # the run on n1 is cancelled: its slot is released, and n2 may start
        status, _ = await post(http, f"{one.url()}/jobs/long/cancel")
        assert status == 200
        await until(lambda: slots_one.held() == [])
        status, _ = await post(http, f"{two.url()}/jobs/long/start")
        assert status == 202
        await until(lambda: slots_two.held() == ["long"])
        assert two.daemon.scheduler.running("long") == 1
