"""The named locks of ``cronstable lock`` (cronstable/channel/locks.py): on one node, and
across nodes through the cluster's store (the cluster pools' PoolSlots over the ``locks``
key space) on every cluster backend: a real etcd, a shared directory and the Lease API's
double, two "daemons" in this process.  Real clients and two daemons are in
test_jobside_cli.py and test_jobside_e2e.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
from backends import ClusterBackend
from daemon_proc import until

from cronstable.channel.locks import QUEUE_LIMIT, Hold, Locks, LockTimeout
from cronstable.cluster.factory import make_slots
from cronstable.cluster.lock_section import KIND, lock_record
from cronstable.cluster.pool_slots import PoolSlots

pytestmark = [pytest.mark.timeout(60)]

TTL = 2


@pytest.mark.asyncio
async def test_takers_are_served_in_order_and_a_name_is_forgotten_once_free() -> None:
    locks = Locks()
    first = await locks.acquire("db", "r1", None)
    assert (first.scope, locks.held()) == ("node", 1)
    got: list[str] = []

    async def take(run: str) -> None:
        hold = await locks.acquire("db", run, None)
        got.append(run)
        await asyncio.sleep(0.01)
        hold.release()

    waiting = [asyncio.create_task(take(f"r{n}")) for n in range(2, 6)]
    await until(lambda: locks.waiting() == 4, what="four takers queued")
    other = await locks.acquire("other", "r9", 0)  # another name is another lock
    other.release()
    first.release()
    first.release()  # idempotent
    await asyncio.gather(*waiting)
    assert got == ["r2", "r3", "r4", "r5"]
    assert (locks.held(), locks.waiting(), locks._locks) == (0, 0, {})
    assert locks.granted == 6


@pytest.mark.asyncio
async def test_a_wait_ends_and_a_taker_that_leaves_is_no_longer_queued() -> None:
    locks = Locks()
    hold = await locks.acquire("db", "r1", None)
    with pytest.raises(LockTimeout):
        await locks.acquire("db", "r2", 0)
    with pytest.raises(LockTimeout):
        await locks.acquire("db", "r2", 0.05)
    assert locks.timeouts == 2 and locks.waiting() == 0
    leaving = asyncio.create_task(locks.acquire("db", "r3", None))
    staying = asyncio.create_task(locks.acquire("db", "r4", None))
    await until(lambda: locks.waiting() == 2, what="two queued")
    leaving.cancel()
    await asyncio.gather(leaving, return_exceptions=True)
    assert locks.waiting() == 1
    hold.release()
    assert (await staying).run == "r4"


@pytest.mark.asyncio
async def test_a_hold_granted_as_its_taker_gives_up_goes_on_to_the_next() -> None:
    locks = Locks()
    hold = await locks.acquire("db", "r1", None)
    late = asyncio.create_task(locks.acquire("db", "r2", None))
    after = asyncio.create_task(locks.acquire("db", "r3", None))
    await until(lambda: locks.waiting() == 2, what="two queued")
    hold.release()  # r2 is granted it ...
    late.cancel()  # ... and leaves before it heard: r3 gets it
    await asyncio.gather(late, return_exceptions=True)
    assert (await after).run == "r3"


@pytest.mark.asyncio
async def test_a_queue_is_bounded() -> None:
    from cronstable.channel.locks import LockBusy

    locks = Locks()
    hold = await locks.acquire("db", "r0", None)
    takers = [asyncio.create_task(locks.acquire("db", f"r{n}", None)) for n in range(QUEUE_LIMIT)]
    await until(lambda: locks.waiting() == QUEUE_LIMIT, what="the queue full")
    with pytest.raises(LockBusy):
        await locks.acquire("db", "one-more", None)
    for task in takers:
        task.cancel()
    await asyncio.gather(*takers, return_exceptions=True)
    hold.release()


# ------------------------------------------------------------ across the cluster

Make = Callable[[str], Locks]


@pytest_asyncio.fixture
async def nodes(cluster_backend: ClusterBackend) -> AsyncIterator[Make]:
    """The locks of one daemon per node, sharing the cluster's store."""
    config = cluster_backend.config(leaseTtl=TTL)
    made: list[PoolSlots] = []

    def factory(node: str) -> Locks:
        slots = PoolSlots(
            node, instance=f"{node}-instance", title="Cluster locks", naming=lock_record
        )
        slots.use(make_slots(config, node, slots.instance, kind=KIND))
        made.append(slots)
        return Locks(slots)

    yield factory
    for slots in made:
        await slots.close()


@pytest.mark.asyncio
async def test_a_lock_is_held_by_one_node_at_a_time(nodes: Make) -> None:
    a, b = nodes("a"), nodes("b")
    held = await a.acquire("db", "a1", None)
    assert held.scope == "cluster"
    with pytest.raises(LockTimeout, match="held on another node"):
        await b.acquire("db", "b1", 0.5)
    assert b.held() == 0  # it gave the name back here too
    # a's next taker gets the record handed on, as long as nobody else asked
    after = asyncio.create_task(a.acquire("db", "a2", None))
    await until(lambda: a.waiting() == 1, what="a's second taker queued")
    held.release()
    second = await after
    assert second.scope == "cluster" and second.lost() is None
    waiting_b = asyncio.create_task(b.acquire("db", "b2", None))
    await asyncio.sleep(0.5)  # b asked meanwhile (its cancel record)
    assert not waiting_b.done()
    # a's turn ends: another taker on a, but b asked first, so a frees the record
    third = asyncio.create_task(a.acquire("db", "a3", None))
    await until(lambda: a.waiting() == 1, what="a's third taker queued")
    await until(
        lambda: a.shared is not None and a.shared.wanted("db", 0), what="a sees b asked", timeout=10
    )
    second.release()
    on_b = await asyncio.wait_for(waiting_b, 15)
    assert on_b.scope == "cluster" and not third.done()
    on_b.release()
    on_a: Hold = await asyncio.wait_for(third, 15)
    assert on_a.run == "a3"
    on_a.release()


@pytest.mark.asyncio
async def test_other_names_do_not_meet(nodes: Make) -> None:
    a, b = nodes("a"), nodes("b")
    one = await a.acquire("db", "a1", None)
    two = await b.acquire("mail", "b1", 0.5)
    assert (one.scope, two.scope) == ("cluster", "cluster")
    one.release()
    two.release()
