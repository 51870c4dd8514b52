"""One pool of connections per etcd cluster (EtcdPools), shared by leadership, cluster
slots and durable state, against a real etcd."""

from __future__ import annotations

import asyncio
import socket
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from etcd_server import EtcdServer

from cronstable.cluster.claims import SlotGuard
from cronstable.cluster.section import ClusterSection
from cronstable.cluster.slot_section import SlotSection
from cronstable.config import DesiredState, MemoryTree, load
from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.etcd import EtcdClient, EtcdError, EtcdPools
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.history import RunHistory
from cronstable.runtime.scheduler import Scheduler
from cronstable.sources.factory import open_source
from cronstable.state.keeper import StateKeeper
from cronstable.state.section import StateSection

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]


async def enable_login(endpoint: str) -> None:
    async with EtcdClient(endpoint) as admin:
        for path, body in (
            ("/v3/auth/user/add", {"name": "root", "password": "pw"}),
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        ):
            await admin._call(path, body, what=path)


async def test_the_users_of_one_etcd_share_its_connections_and_its_login(
    etcd_server: EtcdServer,
) -> None:
    await enable_login(etcd_server.endpoint)
    pools = EtcdPools()
    login = {"username": "root", "password": "pw"}
    a = pools.pool([etcd_server.endpoint], timeout=0.7, **login)
    b = pools.pool([etcd_server.endpoint], timeout=3.0, **login)
    assert len(pools) == 1
    assert (a.clients[0].timeout, b.clients[0].timeout) == (0.7, 3.0)  # each its own bound
    await a.call(lambda etcd: etcd.put("/k", b"v"))
    token = a.clients[0]._conn.token
    assert token is not None and b.clients[0]._conn.token == token  # one login for both
    assert (await b.call(lambda etcd: etcd.range("/k"))).kvs[0].value == b"v"
    assert b.clients[0]._conn.token == token  # b did not log in again
    session = b.clients[0]._conn.session
    assert session is not None and a.clients[0]._conn.session is session

    await a.close()
    await a.close()  # given back once
    assert len(pools) == 1 and not session.closed
    assert (await b.call(lambda etcd: etcd.range("/k"))).kvs[0].value == b"v"
    with pytest.raises(EtcdError, match="closed"):
        await a.call(lambda etcd: etcd.range("/k"))
    await b.close()  # the last one back closes the connections
    assert len(pools) == 0 and session.closed

    c = pools.pool([etcd_server.endpoint], timeout=3.0, **login)  # a new one, later
    assert (await c.call(lambda etcd: etcd.range("/k"))).kvs[0].value == b"v"
    await pools.close()  # what was not given back is closed at the daemon's stop
    assert c.clients[0].closed


async def test_another_login_or_endpoint_list_is_another_pool() -> None:
    pools = EtcdPools()
    one = pools.pool(["http://127.0.0.1:2379"], timeout=1.0)
    pools.pool(["http://127.0.0.1:2379"], timeout=2.0)
    pools.pool(["http://127.0.0.1:2379"], timeout=1.0, username="u", password="p")
    pools.pool(["http://127.0.0.1:2379", "http://127.0.0.1:2380"], timeout=1.0)
    assert len(pools) == 3
    with pytest.raises(ValueError, match="at least one"):
        pools.pool([], timeout=1.0)
    assert len(pools) == 3
    await pools.close()
    assert len(pools) == 0 and one.clients[0].closed


@pytest.fixture
def hung_endpoint() -> Iterator[str]:
    """An endpoint that takes connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_the_endpoint_one_user_failed_over_to_is_the_next_users_first(
    shared_etcd_server: EtcdServer, etcd_prefix: str, hung_endpoint: str
) -> None:
    pools = EtcdPools()
    endpoints = [hung_endpoint, shared_etcd_server.endpoint]
    quick = pools.pool(endpoints, timeout=0.5)
    patient = pools.pool(endpoints, timeout=20.0)
    await quick.call(lambda etcd: etcd.put(etcd_prefix + "k", b"v"))  # past the hung one
    began = time.monotonic()
    found = await patient.call(lambda etcd: etcd.range(etcd_prefix + "k"))
    # straight to the endpoint that answered, not 20 s on the hung one first
    assert found.kvs[0].value == b"v" and time.monotonic() - began < 10
    await pools.close()


def desired(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


async def test_leadership_slots_and_state_on_one_etcd_use_one_pool(
    shared_etcd_server: EtcdServer, etcd_prefix: str, tmp_path: Path
) -> None:
    revision = desired(
        f"""\
        cluster:
          backend: etcd
          leaseTtl: 2
          etcd: {{endpoints: ["{shared_etcd_server.endpoint}"], prefix: "{etcd_prefix}"}}
        state: {{backend: etcd}}
        jobs:
          - name: one
            command: "true"
            schedule: "@yearly"
            concurrencyPolicy: Forbid
            concurrencyScope: cluster
        """
    )

    def spawner(*args: Any) -> Any:
        raise AssertionError("nothing runs in this test")

    scheduler = Scheduler(ManualClock(datetime(2026, 6, 1, tzinfo=UTC)), spawner)
    scheduler.replace_jobs(revision.jobs)
    pools = EtcdPools()
    cluster = ClusterSection("n1", pools=pools)
    keeper = StateKeeper("n1", lambda: scheduler, RunHistory(), boot="boot-1")
    state = StateSection(keeper, tmp_path / "state", pools=pools)
    slots = SlotSection(SlotGuard("n1", replace_runs=lambda job, why: []), pools=pools)
    sections = [cluster, state, slots]
    for section in sections:
        section.commit(await section.prepare(revision), revision)
    assert [s.link.state if s.link else None for s in sections] == ["up", "up", "up"]
    assert len(pools) == 1
    assert cluster.leadership is not None and keeper.store is not None
    assert slots.guard.store is not None
    conns = {
        id(backend.pool.clients[0]._conn)  # type: ignore[attr-defined]
        for backend in (cluster.leadership, keeper.store, slots.guard.store)
    }
    assert len(conns) == 1
    for section in sections:
        await section.close()
    assert len(pools) == 0  # closed once, by the last of the three


async def test_a_built_daemon_talks_to_its_etcd_through_one_pool_closed_at_its_stop(
    shared_etcd_server: EtcdServer, etcd_prefix: str, tmp_path: Path
) -> None:
    root = tmp_path / "config"
    root.mkdir()
    (root / "cronstable.yaml").write_text(
        textwrap.dedent(
            f"""\
            cluster:
              backend: etcd
              leaseTtl: 2
              etcd: {{endpoints: ["{shared_etcd_server.endpoint}"], prefix: "{etcd_prefix}"}}
            state: {{backend: etcd}}
            jobs:
              - name: one
                command: "true"
                schedule: "@yearly"
                concurrencyPolicy: Forbid
                concurrencyScope: cluster
            """
        )
    )
    node = NodeFacts(name="n1", state_dir=tmp_path / "state")
    daemon = build_daemon(open_source(str(root)), node)
    running = asyncio.create_task(daemon.run())
    try:
        deadline = time.monotonic() + 30
        while daemon.applier.status.applied is None:
            assert time.monotonic() < deadline and not running.done(), "not applied in time"
            await asyncio.sleep(0.02)
        by_name = {section.name: section for section in daemon.applier.sections}
        backends = (
            by_name["cluster"].leadership,  # type: ignore[attr-defined]
            by_name["state"].keeper.store,  # type: ignore[attr-defined]
            by_name["cluster-slots"].guard.store,  # type: ignore[attr-defined]
        )
        [conn] = {backend.pool.clients[0]._conn for backend in backends}
        session = conn.session
        assert session is not None and not session.closed
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(running, 30) == 0
    assert conn.closed and session.closed  # once, by the last section closed
