"""GET /cluster and the cluster metrics through the real web section of a daemon built as
`run` builds it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from web_stack import Stack, section_named

from cronstable.cluster.section import ClusterSection

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[Stack, ClusterSection]]:
    s = Stack(tmp_path, "n1")
    cluster: ClusterSection = section_named(s.daemon, "cluster")
    await s.start()
    yield s, cluster
    await s.stop()
    await cluster.close()


async def test_get_cluster_and_metrics(stack: tuple[Stack, ClusterSection], tmp_path: Path) -> None:
    s, cluster = stack
    shared = tmp_path / "shared"
    shared.mkdir()
    text = f"""\
        web: {{listen: ["http://127.0.0.1:0"], authToken: {{value: t}}}}
        cluster:
          backend: filesystem
          leaseTtl: 2
          distribution: spread
          filesystem: {{path: "{shared}"}}
        jobs:
          - {{name: a, command: "true", schedule: "@yearly", clusterPolicy: Leader}}
          - {{name: b, command: "true", schedule: "@yearly", clusterPolicy: PreferLeader}}
          - {{name: c, command: "true", schedule: "@yearly"}}
        """
    assert (await s.apply(text)).outcome == "applied"
    deadline = time.monotonic() + 10
    while not cluster.seen().is_leader and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    headers = {"Authorization": "Bearer t"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        async with http.get(f"{s.url()}/cluster") as response:
            assert response.status == 401
        async with http.get(f"{s.url()}/cluster", headers=headers) as response:
            body = await response.json()
        async with http.get(f"{s.url()}/metrics", headers=headers) as response:
            metrics = await response.text()
    assert body["enabled"] and body["role"] == "leader" and body["node"] == "n1"
    assert (body["backend"], body["distribution"], body["leaseTtl"]) == ("filesystem", "spread", 2)
    assert [m["name"] for m in body["members"]] == ["n1"]
    assert body["ownedJobs"] == ["a", "b"]  # the only member owns every gated job
    assert 0 < body["leaseValidFor"] <= 2
    assert "cronstable_cluster_is_leader 1.0" in metrics
    assert "cronstable_cluster_members_other_job_set 0.0" in metrics
    assert 'cronstable_fires_skipped_total{reason="missed"}' in metrics
