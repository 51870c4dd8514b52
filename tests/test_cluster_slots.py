"""Slot store contract tests, run against every backend: a real etcd on loopback and a
real shared directory.  leaseTtl 2 s keeps the expiry tests short."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
from backends import ClusterBackend

from cronstable.cluster.factory import make_slots
from cronstable.cluster.slots import Holder, SlotStore, slot_name

pytestmark = [pytest.mark.timeout(60)]

TTL = 2
JOB = "backup/nightly"  # a slash stays inside one key segment

Make = Callable[[str], SlotStore]


@pytest_asyncio.fixture
async def make(cluster_backend: ClusterBackend) -> AsyncIterator[Make]:
    """A factory of slot stores of one cluster (one etcd prefix, or one shared
    directory), one daemon instance each, named after its node."""
    config = cluster_backend.config(leaseTtl=TTL)
    made: list[SlotStore] = []

    def factory(node: str) -> SlotStore:
        store = make_slots(config, node, f"{node}-instance")
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.close()


async def take(store: SlotStore, job: str = JOB) -> Holder:
    return (await store.claim([job]))[job].holder


@pytest.mark.asyncio
async def test_a_free_slot_is_taken_and_others_see_its_holder(make: Make) -> None:
    a, b = make("a"), make("b")
    await a.check()
    mine = await take(a)
    assert a.mine(mine) and mine.node == "a" and mine.fence > 0
    seen = await take(b)
    assert seen == mine and not b.mine(seen)
    assert await b.holder(JOB) == mine
    assert await b.holder("another job") is None
    # the same instance claiming again keeps its hold (renewal), fence unchanged
    assert await take(a) == mine


@pytest.mark.asyncio
async def test_a_renewed_slot_outlives_its_ttl(make: Make) -> None:
    a, b = make("a"), make("b")
    mine = await take(a)
    deadline = time.monotonic() + TTL * 1.25
    while time.monotonic() < deadline:
        await asyncio.sleep(TTL / 4)
        assert await take(a) == mine
        assert await take(b) == mine


@pytest.mark.asyncio
async def test_a_released_slot_is_taken_at_once_with_a_greater_fence(make: Make) -> None:
    a, b = make("a"), make("b")
    first = await take(a)
    await a.release(JOB, first)
    assert await b.holder(JOB) is None
    second = await take(b)
    assert b.mine(second) and second.fence > first.fence
    # releasing a hold that is no longer this one frees nothing
    await a.release(JOB, first)
    assert await a.holder(JOB) == second


@pytest.mark.asyncio
async def test_an_expired_slot_is_taken_over_only_after_its_ttl(make: Make) -> None:
    a, b = make("a"), make("b")
    first = await take(a)
    began = time.monotonic()
    # a stops renewing (a crash, a partition): b sees it held for most of the ttl
    while time.monotonic() - began < TTL * 0.75:
        assert await take(b) == first
        await asyncio.sleep(0.1)
    while not b.mine(held := await take(b)):
        assert time.monotonic() - began < TTL + 3.0  # ttl, the clock allowance, a margin
        await asyncio.sleep(0.1)
    assert held.fence > first.fence
    # a comes back: it sees b's hold, and takes the slot anew once b is done
    assert await take(a) == held
    await b.release(JOB, held)
    again = await take(a)
    assert a.mine(again) and again.fence > held.fence


@pytest.mark.asyncio
async def test_a_cancel_record_reaches_the_hold_it_names_and_no_later_one(make: Make) -> None:
    a, b = make("a"), make("b")
    first = await take(a)
    assert (await a.claim([JOB]))[JOB].cancel_from is None
    await b.request_cancel(JOB, first)
    claim = (await a.claim([JOB]))[JOB]
    assert claim.holder == first and claim.cancel_from == "b"
    # a obeys and releases; b takes the slot, and the record is gone with the old hold
    await a.release(JOB, first)
    second = await take(b)
    assert (await b.claim([JOB]))[JOB].cancel_from is None
    # a stale record (aimed at the first hold) never reaches a later one
    await a.request_cancel(JOB, first)
    assert (await b.claim([JOB]))[JOB].cancel_from is None
    await b.release(JOB, second)


@pytest.mark.asyncio
async def test_slots_of_different_jobs_are_apart(make: Make) -> None:
    a, b = make("a"), make("b")
    names = ["x", "x.cancel", ".hidden", "y" * 300]
    held = await a.claim(names[:2])
    assert all(a.mine(c.holder) for c in held.values())
    others = await b.claim(names)
    assert {job for job, c in others.items() if b.mine(c.holder)} == set(names[2:])


def test_slot_names_are_one_segment_never_hidden_and_bounded() -> None:
    assert slot_name("a/b") == "a%2Fb"
    assert slot_name(".x") == "%2Ex"
    long = slot_name("é" * 200)
    assert long.startswith("%%") and len(long) == 66
    assert slot_name("é" * 200) != slot_name("é" * 199)


@pytest.mark.asyncio
async def test_a_fire_mark_records_each_fire_once_and_only_moves_forward(make: Make) -> None:
    """BufferOne and BufferAll: the holder records the fire it starts; a fire at or before
    the mark ran already, whoever asks; the mark outlives the hold."""
    from datetime import UTC, datetime, timedelta

    a, b = make("a"), make("b")
    t1 = datetime(2026, 6, 1, 12, 1, tzinfo=UTC)
    assert await a.last_fire(JOB) is None
    hold = await take(a)
    assert await a.mark_fire(JOB, t1)
    assert not await a.mark_fire(JOB, t1)  # the same fire again: taken
    assert await b.last_fire(JOB) == t1
    await a.release(JOB, hold)
    await take(b)
    assert not await b.mark_fire(JOB, t1)  # it ran on a: not again on b
    assert not await b.mark_fire(JOB, t1 - timedelta(minutes=1))  # an older one neither
    t2 = t1 + timedelta(minutes=1, microseconds=250)
    assert await b.mark_fire(JOB, t2)
    assert await a.last_fire(JOB) == t2
    assert await a.last_fire("another job") is None
