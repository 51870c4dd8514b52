"""Leadership contract tests, run against every backend: a real etcd on loopback and a
real shared directory.  Short TTLs (2 s) keep them quick."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
from backends import ClusterBackend
from daemon_proc import until

from cronstable.cluster.base import Leadership
from cronstable.cluster.factory import make_leadership

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

TTL = 2

Make = Callable[[str], Leadership]


@pytest_asyncio.fixture
async def make(cluster_backend: ClusterBackend) -> AsyncIterator[Make]:
    """A factory of leaderships of one cluster (one etcd prefix, or one shared directory)."""
    config = cluster_backend.config(leaseTtl=TTL)
    made: list[Leadership] = []

    def factory(name: str) -> Leadership:
        leadership = make_leadership(config, name)
        made.append(leadership)
        return leadership

    yield factory
    for leadership in made:
        await leadership.stop()


async def held_at(predicate: Callable[[], bool], timeout: float = 10.0) -> float:
    """Wait :func:`until` ``predicate()``; the monotonic time it first held."""
    await until(predicate, timeout)
    return time.monotonic()


async def started(make: Make, *names: str) -> list[Leadership]:
    nodes = [make(name) for name in names]
    for node in nodes:
        await node.check()
        node.job_set_id = "set-1"
        node.start()
    await until(lambda: all(n.known() and n.leader() is not None for n in nodes))
    return nodes


def leaders(nodes: list[Leadership]) -> list[str]:
    return [n.node_name for n in nodes if n.is_leader()]


async def test_one_leader_every_member_seen(make: Make) -> None:
    nodes = await started(make, "a", "b", "c")
    await until(lambda: all(len(n.members()) == 3 for n in nodes))
    [leader] = leaders(nodes)
    assert {n.leader() for n in nodes} == {leader}
    assert {m.name for m in nodes[0].members()} == {"a", "b", "c"}
    assert {m.job_set_id for m in nodes[0].members()} == {"set-1"}
    holder = next(n for n in nodes if n.is_leader())
    assert holder.fence() is not None
    assert all(n.fence() is None for n in nodes if n is not holder)


async def test_a_released_leadership_moves_at_once_with_a_greater_fence(make: Make) -> None:
    nodes = await started(make, "a", "b")
    holder = next(n for n in nodes if n.is_leader())
    other = next(n for n in nodes if n is not holder)
    first = holder.fence()
    assert first is not None
    began = time.monotonic()
    await holder.stop()
    assert not holder.is_leader() and not holder.known()
    took = await held_at(other.is_leader) - began
    # no expiry to wait for: a round or two
    assert took < TTL
    fence = other.fence()
    assert fence is not None and fence > first


async def test_a_silent_leader_stops_trusting_itself_before_another_can_win(
    make: Make,
) -> None:
    """A leader whose rounds stop (a hung process, a partition) gives up at last renewal +
    ttl - margin; the store lets another node win only after its lease expired."""
    nodes = await started(make, "a", "b")
    holder = next(n for n in nodes if n.is_leader())
    other = next(n for n in nodes if n is not holder)
    assert holder._task is not None
    holder._task.cancel()  # no more rounds, no release: as if frozen
    gave_up = await held_at(lambda: not holder.is_leader())
    won = await held_at(other.is_leader, timeout=5 * TTL)
    gap = won - gave_up
    logging.getLogger(__name__).warning("%s: gave up %.3f s before the other won", make, gap)
    # the margin (0.5 s at ttl 2) less a round's lateness, at the least
    assert gap > 0.25, gap
    assert won - gave_up < TTL + 2.0  # and takeover is prompt (filesystem adds 1 s of skew)


async def test_a_duplicate_node_name_stands_both_down(make: Make) -> None:
    first = make("same")
    first.start()
    await until(first.is_leader)
    second = make("same")
    second.start()
    await until(lambda: first.conflict() and second.conflict())
    assert not first.is_leader() and not second.is_leader()
    await second.stop()
    # once the second one's marker is gone (its lease ended), the first leads again
    await until(first.is_leader, timeout=3 * TTL)


async def test_a_restarted_node_waits_for_its_old_record_then_leads(make: Make) -> None:
    old = make("a")
    old.start()
    await until(old.is_leader)
    assert old._task is not None
    old._task.cancel()  # kill -9: nothing released
    new = make("a")
    new.start()
    await until(new.is_leader, timeout=5 * TTL)
    assert not new.conflict()
