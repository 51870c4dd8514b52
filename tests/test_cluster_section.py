"""The cluster section: two-phase apply against a real etcd and directory, the gate it
serves the scheduler, /cluster's view and the cluster metrics."""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path

import pytest
from daemon_proc import until
from etcd_server import EtcdServer
from prometheus_client import CollectorRegistry, generate_latest

from cronstable.cluster.section import ClusterSection
from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.etcd import EtcdClient
from cronstable.store_link import StoreLinks
from cronstable.web import encode

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]


def desired(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


JOBS = """\
jobs:
  - {name: lead, command: "true", schedule: "@hourly", clusterPolicy: Leader}
  - {name: prefer, command: "true", schedule: "@hourly", clusterPolicy: PreferLeader}
  - {name: every, command: "true", schedule: "@hourly"}
"""


async def apply(section: ClusterSection, state: DesiredState) -> None:
    section.commit(await section.prepare(state), state)


async def test_without_a_cluster_section_every_policy_runs() -> None:
    section = ClusterSection("n1")
    state = desired(JOBS)
    await apply(section, state)
    assert [section.allows(job) for job in state.jobs.values()] == [None, None, None]
    assert encode.cluster(section.view()) == {"enabled": False, "node": "n1"}


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
    await until(lambda: section.allows(lead) is None)
    view = encode.cluster(section.view())
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


def leader_revision(backend: str, where: str, ttl: int = 2) -> str:
    head = f"cluster:\n  backend: {backend}\n  leaseTtl: {ttl}\n"
    if backend == "etcd":
        return head + f"  etcd:\n    endpoints: ['{where}']\n"
    return head + f"  filesystem:\n    path: {where}\n"


def link_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("store-link-")]


@pytest.mark.parametrize("backend", ["etcd", "filesystem"])
async def test_a_store_that_does_not_answer_is_waited_for_then_joined_without_a_reload(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "etcd":
        server: EtcdServer = request.getfixturevalue("etcd_server")
        server.stop()  # down before the revision is applied
        where, back = server.endpoint, server.start
    else:
        shared = tmp_path / "mnt" / "cronstable"  # the share is not mounted yet

        def back() -> None:
            shared.mkdir(parents=True)

        where = str(shared)
    registry = CollectorRegistry()
    section = ClusterSection("n1", registry)
    links = StoreLinks({"cluster": lambda: section.link})
    registry.register(links.collector())
    state = desired(leader_revision(backend, where) + JOBS)
    lead, prefer, every = state.jobs.values()
    await apply(section, state)  # applied, not rejected
    assert section.link is not None and section.link.connecting
    assert section.link.fault == "unreachable" and section.link.last_error
    # meanwhile: Leader waits, PreferLeader follows its no-leader rule (runs), EveryNode runs
    assert section.allows(lead) == "leadership_unknown"
    assert section.allows(prefer) is None and section.allows(every) is None
    view = encode.cluster(section.view())
    assert (view["role"], view["store"]["state"]) == ("unknown", "connecting")
    assert f"the {backend} store has not answered since" in view["unknownReason"]
    assert encode.stores(links.view())["cluster"]["state"] == "connecting"
    metrics = generate_latest(registry).decode()
    assert 'cronstable_store_unreachable{store="cluster"} 1.0' in metrics
    # a revision that changes a job only keeps waiting on the same link
    waiting = section.link
    more = desired(
        leader_revision(backend, where)
        + JOBS
        + '  - {name: extra, command: "true", schedule: "@daily"}\n'
    )
    await apply(section, more)
    assert section.link is waiting and len(link_tasks()) == 1
    back()
    await until(lambda: section.allows(lead) is None, timeout=15)
    assert not section.link.connecting and encode.cluster(section.view())["role"] == "leader"
    assert encode.cluster(section.view())["members"][0]["jobSetId"] == more.job_set_id
    assert 'cronstable_store_unreachable{store="cluster"} 0.0' in generate_latest(registry).decode()
    await section.close()
    assert link_tasks() == []


async def test_a_waiting_section_replaced_or_closed_leaves_no_task(tmp_path: Path) -> None:
    section = ClusterSection("n1")
    absent = tmp_path / "absent"
    await apply(section, desired(leader_revision("filesystem", str(absent)) + JOBS))
    first = section.link
    assert first is not None and first.connecting and len(link_tasks()) == 1
    # the cluster section changes while its store is still down: applied, a new wait
    await apply(section, desired(leader_revision("filesystem", str(absent), ttl=3) + JOBS))
    assert section.link is not first and section.link is not None and section.link.connecting
    await until(lambda: len(link_tasks()) == 1)  # the first one was stopped
    # the section goes away: nothing waits any more
    await apply(section, desired(JOBS))
    assert section.link is None
    await until(lambda: link_tasks() == [])
    await apply(section, desired(leader_revision("filesystem", str(absent)) + JOBS))
    await section.close()
    assert link_tasks() == []


async def test_a_store_that_refuses_rejects_the_revision_at_its_key(
    tmp_path: Path, etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = ClusterSection("n1")
    async with EtcdClient(etcd_server.endpoint) as admin:
        for path, body in (
            ("/v3/auth/user/add", {"name": "root", "password": "right-pw"}),
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        ):
            await admin._call(path, body, what=path)
    monkeypatch.setenv("CRONSTABLE_ETCD_USERNAME", "root")
    monkeypatch.setenv("CRONSTABLE_ETCD_PASSWORD", "wrong-pw")
    with pytest.raises(ConfigError) as caught:
        await section.prepare(desired(leader_revision("etcd", etcd_server.endpoint) + JOBS))
    [problem] = caught.value.problems
    assert (problem.file, problem.line) == ("c.yaml", 5)
    assert "cannot use the etcd store" in problem.message
    assert "authentication failed" in problem.message and "wrong-pw" not in problem.message
    # a file where the shared directory should be
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError) as caught:
        await section.prepare(desired(leader_revision("filesystem", str(blocker)) + JOBS))
    [problem] = caught.value.problems
    assert (problem.line, problem.key) == (5, ("cluster", "filesystem", "path"))
    assert "is not a directory" in problem.message
    if os.geteuid() != 0:  # a directory that exists but this daemon may not write
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="Permission denied"):
            await section.prepare(desired(leader_revision("filesystem", str(locked)) + JOBS))
    assert section.link is None and link_tasks() == []
