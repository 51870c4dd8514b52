"""The cluster section: two-phase apply against a real etcd and directory, the gate it
serves the scheduler, /cluster's view and the cluster metrics."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

import pytest
from etcd_server import EtcdServer, free_port
from prometheus_client import CollectorRegistry, generate_latest

from cronstable.cluster.section import ClusterSection
from cronstable.config import ConfigError, DesiredState, MemoryTree, load

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]


def desired(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


JOBS = """\
jobs:
  - {name: lead, command: "true", schedule: "@hourly", clusterPolicy: Leader}
  - {name: prefer, command: "true", schedule: "@hourly", clusterPolicy: PreferLeader}
  - {name: every, command: "true", schedule: "@hourly"}
"""


async def until_true(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def apply(section: ClusterSection, state: DesiredState) -> None:
    section.commit(await section.prepare(state), state)


async def test_without_a_cluster_section_every_policy_runs() -> None:
    section = ClusterSection("n1")
    state = desired(JOBS)
    await apply(section, state)
    assert [section.allows(job) for job in state.jobs.values()] == [None, None, None]
    assert section.view() == {"enabled": False, "node": "n1"}


async def test_elect_leader_false_runs_every_policy(tmp_path: Path) -> None:
    section = ClusterSection("n1")
    text = (
        f"cluster: {{backend: filesystem, electLeader: false, filesystem: {{path: {tmp_path}}}}}\n"
    )
    state = desired(text + JOBS)
    await apply(section, state)
    assert [section.allows(job) for job in state.jobs.values()] == [None, None, None]


async def test_an_etcd_cluster_leads_then_releases(
    shared_etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    registry = CollectorRegistry()
    section = ClusterSection("n1", registry)
    text = (
        "cluster:\n  backend: etcd\n  leaseTtl: 2\n"
        f"  etcd: {{endpoints: ['{shared_etcd_server.endpoint}'], prefix: '{etcd_prefix}'}}\n"
    )
    state = desired(text + JOBS)
    lead, prefer, every = state.jobs.values()
    await apply(section, state)
    # before the first round: Leader fails closed, the others run
    assert section.allows(lead) == "leadership_unknown"
    assert section.allows(prefer) is None and section.allows(every) is None
    await until_true(lambda: section.allows(lead) is None)
    view = section.view()
    assert (view["role"], view["leader"], view["known"]) == ("leader", "n1", True)
    assert view["members"] == [
        {
            "name": "n1",
            "instance": view["members"][0]["instance"],
            "jobSetId": state.job_set_id,
            "sameJobSet": True,
        }
    ]
    metrics = generate_latest(registry).decode()
    assert "cronstable_cluster_is_leader 1.0" in metrics
    assert "cronstable_cluster_members 1.0" in metrics
    # an unchanged section keeps the running election
    await apply(section, state)
    assert section.allows(lead) is None
    await section.release()
    assert section.allows(lead) == "leadership_unknown"
    assert section.allows(prefer) is None
    assert "cronstable_cluster_is_leader 0.0" in generate_latest(registry).decode()
    await section.close()


async def test_an_unreachable_store_rejects_the_revision_at_its_key(tmp_path: Path) -> None:
    section = ClusterSection("n1")
    text = (
        "cluster:\n  backend: etcd\n  leaseTtl: 2\n"
        f"  etcd:\n    endpoints: ['http://127.0.0.1:{free_port()}']\n"
    )
    with pytest.raises(ConfigError) as caught:
        await section.prepare(desired(text + JOBS))
    [problem] = caught.value.problems
    assert (problem.file, problem.line) == ("c.yaml", 5)
    assert "cannot use the etcd store" in problem.message
    missing = tmp_path / "absent"
    text = f"cluster:\n  backend: filesystem\n  filesystem:\n    path: {missing}\n"
    with pytest.raises(ConfigError) as caught:
        await section.prepare(desired(text + JOBS))
    [problem] = caught.value.problems
    assert (problem.line, problem.key) == (4, ("cluster", "filesystem", "path"))
    assert "is not a directory" in problem.message
