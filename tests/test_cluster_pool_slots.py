"""The slots of cluster-scoped pools (cluster/pool_slots.py) on every cluster store: a
real etcd on loopback and a real shared directory, two daemon instances each with
its own PoolSlots; then the runtime's pools (runtime/pools.py) over them, so two
"nodes" in this process share one cap.  Two real daemons are in
test_pools_cluster_e2e.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import pytest
import pytest_asyncio
from backends import ClusterBackend
from daemon_proc import until
from prometheus_client import CollectorRegistry
from test_runtime_pools import state

from cronstable.cluster.claims import SlotGuard
from cronstable.cluster.factory import make_slots
from cronstable.cluster.lock_section import LockSlotSection, lock_record
from cronstable.cluster.pool_section import PoolSlotSection
from cronstable.cluster.pool_slots import PoolSlots
from cronstable.cluster.slot_section import SlotSection
from cronstable.ports import Launch, SlotsUnavailable
from cronstable.runtime.clock import SystemClock
from cronstable.runtime.pools import Pools, Ticket

pytestmark = [pytest.mark.timeout(60)]

TTL = 2
Make = Callable[[str], PoolSlots]


@pytest_asyncio.fixture
async def make(cluster_backend: ClusterBackend) -> AsyncIterator[Make]:
    """PoolSlots of one cluster, one daemon instance each, named after its node."""
    config = cluster_backend.config(leaseTtl=TTL)
    made: list[PoolSlots] = []

    def factory(node: str) -> PoolSlots:
        slots = PoolSlots(node, instance=f"{node}-instance")
        slots.use(make_slots(config, node, slots.instance, kind="pools"))
        made.append(slots)
        return slots

    yield factory
    for slots in made:
        await slots.close()


@pytest.mark.asyncio
async def test_the_records_of_a_pool_are_shared_by_the_nodes(make: Make) -> None:
    a, b = make("a"), make("b")
    assert [await a.take("db", 2), await a.take("db", 2)] == [0, 1]
    assert await a.take("db", 2) is None  # a holds both: none left for a third run
    assert await b.take("db", 2) is None  # nor for b
    assert await b.take("db", 3) == 2  # a wider count has a record more
    a.give_back("db", 0)

    async def b_takes() -> bool:
        return await b.take("db", 2) is not None

    await until(b_takes, what="b takes the freed record")
    assert a.held() == ["db#1"] and sorted(b.held()) == ["db#0", "db#2"]
    assert await b.take("other", 1) == 0  # another pool, its own records


@pytest.mark.asyncio
async def test_held_records_are_renewed_past_their_ttl(make: Make) -> None:
    a, b = make("a"), make("b")
    assert await a.take("db", 1) == 0
    await asyncio.sleep(TTL * 1.75)  # a renews every ttl/4
    assert await b.take("db", 1) is None


@pytest.mark.asyncio
async def test_the_records_of_pools_are_apart_from_the_slots_of_jobs(
    cluster_backend: ClusterBackend, make: Make
) -> None:
    a = make("a")
    assert await a.take("db", 1) == 0
    jobs = make_slots(cluster_backend.config(leaseTtl=TTL), "b", "b-instance")
    try:
        claim = (await jobs.claim(["db#0"]))["db#0"]  # a job of that very name
        assert jobs.mine(claim.holder)
    finally:
        await jobs.close()


@pytest.mark.asyncio
async def test_without_a_store_a_take_is_unavailable() -> None:
    with pytest.raises(SlotsUnavailable):
        await PoolSlots("a").take("db", 1)


# ------------------------------------------------------------ the runtime over them

CLUSTERED = """\
pools:
  - {name: db, slots: 2, scope: cluster}
cluster: {backend: filesystem, filesystem: {path: /nowhere}}
jobs:
  - {name: j, command: "true", schedule: "@reboot", pool: db}
  - {name: k, command: "true", schedule: "@reboot", pool: db, poolPriority: 1}
"""


class Node:
    def __init__(self, slots: PoolSlots) -> None:
        self.desired = state(CLUSTERED)
        self.pools = Pools(SystemClock(), shared=slots)
        self.pools.configure(self.desired.pools)
        self._n = 0

    def take(self, job: str = "j") -> Ticket:
        self._n += 1
        launch = Launch(
            self.desired.jobs[job], datetime(2026, 1, 1, 0, 0, self._n, tzinfo=UTC), 1, "fire"
        )
        ticket = self.pools.take(launch)
        assert ticket is not None
        return ticket


def admitted(ticket: Ticket) -> bool:
    return ticket.decided.done() and ticket.decided.result() == "admitted"


@pytest.mark.asyncio
async def test_two_nodes_share_the_cap_of_a_cluster_pool(make: Make) -> None:
    one, two = Node(make("one")), Node(make("two"))
    first = [one.take(), one.take()]
    await until(lambda: all(admitted(t) for t in first), what="one takes both records")
    assert {t.shared for t in first} == {0, 1}
    # nobody else waits: a run that ends hands its record on to one's own queue at once
    later = one.take()
    one.pools.release(first[1])
    assert admitted(later) and later.shared == first[1].shared
    held = [first[0], later]
    waiting = [two.take("j"), two.take("k")]  # k has the higher priority
    await asyncio.sleep(TTL)  # two asks for the records; one sees it when it renews them
    assert not any(admitted(t) for t in waiting)  # both records are one's
    assert two.pools.views()[0].queued == 2
    # now a run of one that ends gives its record back (two asked for it), and one
    # leaves it to two although one has a launch waiting too
    again = one.take()
    one.pools.release(held[0])
    await until(lambda: admitted(waiting[1]), what="two's head takes the freed record")
    assert not admitted(waiting[0]) and waiting[1].shared == held[0].shared
    assert not admitted(again)
    one.pools.release(held[1])  # its record goes to two as well: two asked for it
    await until(lambda: admitted(waiting[0]), what="two's second")
    for ticket in waiting:
        two.pools.release(ticket)
    await until(lambda: admitted(again), what="one's turn again")
    one.pools.release(again)
    await one.pools.close()
    await two.pools.close()


@pytest.mark.asyncio
async def test_a_store_that_cannot_answer_follows_on_store_unavailable() -> None:
    degrade = Node(PoolSlots("d", on_unavailable=lambda: "degrade"))  # no store in use yet
    tickets = [degrade.take() for _ in range(3)]
    await until(lambda: admitted(tickets[0]) and admitted(tickets[1]), what="degraded")
    await asyncio.sleep(0.2)
    assert not admitted(tickets[2])  # the node-local cap still holds
    assert all(t.shared is None for t in tickets[:2])
    closed = Node(PoolSlots("f", on_unavailable=lambda: "fail-closed"))
    ticket = closed.take()
    await asyncio.sleep(0.3)
    assert not admitted(ticket) and closed.pools.views()[0].queued == 1
    for node in (degrade, closed):
        node.pools.withdraw_all()
        await node.pools.close()


@pytest.mark.asyncio
async def test_the_slot_store_metrics_of_jobs_pools_and_locks(make: Make) -> None:
    """One collector, three tables of names: each owner's holds and counters."""
    registry = CollectorRegistry()
    pools = make("a")
    locks = PoolSlots("a", title="Cluster locks", naming=lock_record)  # no store yet
    guard = SlotGuard("a", replace_runs=lambda job, why: [])
    SlotSection(guard, registry)
    PoolSlotSection(pools, registry)
    LockSlotSection(locks, registry)
    assert [await pools.take("db", 3), await pools.take("db", 3)] == [0, 1]
    locks.stats.lost, locks.stats.store_failures = 1, 2
    guard.stats.cancels_sent, guard.stats.cancels_obeyed = 3, 4
    seen = {
        name: registry.get_sample_value(name)
        for name in (
            "cronstable_pool_cluster_slots_held",
            "cronstable_pool_cluster_slots_lost_total",
            "cronstable_pool_cluster_slot_store_failures_total",
            "cronstable_lock_cluster_held",
            "cronstable_lock_cluster_lost_total",
            "cronstable_lock_cluster_store_failures_total",
            "cronstable_cluster_slots_held",
            "cronstable_cluster_slot_cancels_sent_total",
            "cronstable_cluster_slot_cancels_obeyed_total",
            "cronstable_cluster_slots_lost_total",
            "cronstable_cluster_slot_store_failures_total",
        )
    }
    assert list(seen.values()) == [2, 0, 0, 0, 1, 2, 0, 3, 4, 0, 0]
