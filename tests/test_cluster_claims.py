"""The slot guard on real stores (etcd on loopback, a shared directory): what Forbid,
Replace and Allow do with a cluster slot, and a store that cannot answer.

Two guards stand for two daemons; launches are the scheduler's own ``Launch``."""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from backends import ClusterBackend
from daemon_proc import until

from cronstable.cluster.claims import OnUnavailable, SlotGuard
from cronstable.cluster.factory import make_slots
from cronstable.config import MemoryTree, load
from cronstable.config.desired import Job
from cronstable.config.models import ClusterConfig
from cronstable.ports import Launch, LaunchKind

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

TTL = 2
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def job(policy: str, scope: str = "cluster") -> Job:
    text = f"""\
        cluster: {{backend: filesystem, filesystem: {{path: /unused}}}}
        jobs:
          - name: report
            command: "true"
            schedule: "* * * * *"
            concurrencyPolicy: {policy}
            concurrencyScope: {scope}
        """
    state = load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")
    return state.jobs["report"]


def launch(of: Job, second: int = 0, kind: LaunchKind = "fire") -> Launch:
    return Launch(of, T0.replace(second=second), 1, kind)


class Node:
    """One daemon's guard, and what it was asked to stop."""

    def __init__(self, name: str, config: ClusterConfig, policy: OnUnavailable) -> None:
        self.name = name
        self.replaced: list[tuple[str, str]] = []
        self.policy = policy
        self.waits: list[tuple[str, str | None]] = []
        """(launch id, node) the guard told: a launch waits for that node's run (None: no
        longer)."""
        self.gone: set[str] = set()
        """Launch ids the scheduler would call abandoned."""
        self.guard = SlotGuard(
            name,
            replace_runs=self._replace,
            on_unavailable=lambda: self.policy,
            waiting=lambda launch, node: self.waits.append((launch.id, node)),
            abandoned=lambda launch: launch.id in self.gone,
        )
        self.guard.use(make_slots(config, name, self.guard.instance))

    def _replace(self, job: str, why: str) -> list[str]:
        self.replaced.append((job, why))
        return [f"{job}@run"]


Make = Callable[..., Node]


@pytest_asyncio.fixture
async def make(cluster_backend: ClusterBackend) -> AsyncIterator[Make]:
    config = cluster_backend.config(leaseTtl=TTL)
    nodes: list[Node] = []

    def factory(name: str, policy: OnUnavailable = "degrade") -> Node:
        node = Node(name, config, policy)
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        await node.guard.close()


async def test_forbid_refuses_while_another_node_holds_the_slot(make: Make) -> None:
    a, b = make("a"), make("b")
    forbid = job("Forbid")
    first = launch(forbid)
    assert await a.guard.admit(first) is None
    assert a.guard.held() == ["report"]
    assert await b.guard.admit(launch(forbid, 1)) == "slot_held"
    assert await b.guard.refusal(forbid) == (
        "node a holds its cluster slot (concurrencyPolicy Forbid, concurrencyScope cluster)"
    )
    assert await a.guard.refusal(forbid) is None  # its own runs: the local policy answers
    # a second local launch (Replace or manual, here) shares the hold; the slot is
    # released only when the last one ends
    second = launch(forbid, 2, "manual")
    assert await a.guard.admit(second) is None
    a.guard.release(first)
    await asyncio.sleep(0.2)
    assert await b.guard.admit(launch(forbid, 3)) == "slot_held"
    a.guard.release(second)
    await until(lambda: a.guard.held() == [])
    third = launch(forbid, 4)
    assert await b.guard.admit(third) is None
    assert b.guard.held() == ["report"]
    assert await a.guard.admit(launch(forbid, 5, "manual")) == "slot_held"


async def test_replace_stops_the_holder_and_takes_the_slot_once_it_is_free(make: Make) -> None:
    a, b = make("a"), make("b")
    replace = job("Replace")
    running = launch(replace)
    assert await a.guard.admit(running) is None
    waiting = asyncio.create_task(b.guard.admit(launch(replace, 1)))
    # a finds the cancel record at its next renewal and stops its run, once
    await until(lambda: a.replaced != [])
    assert a.replaced == [
        ("report", "node b replaces it: concurrencyPolicy Replace, concurrencyScope cluster")
    ]
    assert not waiting.done()  # b waits for the slot, not for the record
    a.guard.release(running)  # the stopped run ended
    assert await asyncio.wait_for(waiting, TTL) is None
    assert b.guard.held() == ["report"]
    assert (a.guard.stats.cancels_obeyed, b.guard.stats.cancels_sent) == (1, 1)
    await asyncio.sleep(TTL / 2)  # more renewals: the old record reaches no later hold
    assert len(a.replaced) == 1


async def test_allow_and_node_scope_take_no_slot(make: Make) -> None:
    a, b = make("a"), make("b")
    for held in (job("Forbid", "node"), job("Allow")):
        assert await a.guard.admit(launch(held)) is None
        assert await b.guard.admit(launch(held)) is None
        assert a.guard.held() == b.guard.held() == []
        a.guard.release(launch(held))


@pytest.mark.parametrize("cluster_backend", ["filesystem"], indirect=True)
async def test_replace_gives_up_when_the_holder_does_not_let_go(make: Make) -> None:
    a, b = make("a"), make("b")
    a.guard.replace_runs = lambda job, why: []  # a run that ignores the request
    replace = job("Replace")
    assert await a.guard.admit(launch(replace)) is None
    began = time.monotonic()
    assert await b.guard.admit(launch(replace, 1)) == "slot_not_freed"
    assert time.monotonic() - began >= 2 * TTL
    assert a.guard.held() == ["report"]


@pytest.mark.parametrize("cluster_backend", ["filesystem"], indirect=True)
async def test_a_store_that_cannot_answer_degrades_or_fails_closed(
    make: Make, tmp_path: Path
) -> None:
    lax, strict = make("a", "degrade"), make("b", "fail-closed")
    forbid = job("Forbid")
    (tmp_path / "shared").rename(tmp_path / "gone")  # the mount is gone
    assert await lax.guard.admit(launch(forbid)) is None  # runs, node-local only
    assert await strict.guard.admit(launch(forbid)) == "slot_unavailable"
    assert (await strict.guard.refusal(forbid) or "").startswith(
        "the cluster slot store does not answer"
    )
    assert await lax.guard.refusal(forbid) is None
    assert lax.guard.held() == [] and lax.guard.stats.store_failures >= 1
    (tmp_path / "gone").rename(tmp_path / "shared")
    lax.guard.release(launch(forbid))
    assert await strict.guard.admit(launch(forbid, 1)) is None


async def test_buffer_waits_for_the_holders_run_and_runs_each_fire_once(make: Make) -> None:
    """BufferOne across the cluster: b's fire waits for a's run (told to the scheduler as
    waiting), starts once a lets go; the same fire waiting on a third node never runs."""
    a, b, c = make("a"), make("b"), make("c")
    buffered = job("BufferOne")
    first = launch(buffered)
    assert await a.guard.admit(first) is None
    nxt = launch(buffered, 30)
    on_b = asyncio.create_task(b.guard.admit(nxt))
    await until(lambda: b.waits == [(nxt.id, "a")])
    await asyncio.sleep(TTL)  # no deadline: it waits as long as the run goes
    assert not on_b.done()
    # the same fire on c (EveryNode: every node fires it) waits as well
    on_c = asyncio.create_task(c.guard.admit(launch(buffered, 30)))
    await until(lambda: len(c.waits) == 1)
    a.guard.release(first)
    # whichever of b and c gets the slot first records the fire and runs it; the other
    # finds the record (once it has the slot, or while it waits) and gives up
    answers = await asyncio.wait_for(asyncio.gather(on_b, on_c), 10)
    assert sorted(answers, key=str) == [None, "fire_taken"], answers
    winner = b if answers[0] is None else c
    assert b.waits[-1] == (nxt.id, None) and c.waits[-1][1] is None
    assert winner.guard.held() == ["report"]
    winner.guard.release(nxt)
    await until(lambda: winner.guard.held() == [])
    # the first fire, late on a node that never ran it, does not run either
    assert await a.guard.admit(launch(buffered, 0)) == "fire_taken"
    await until(lambda: a.guard.held() == [])  # the slot it took for it goes back
    # a retry of a fire is no fire: it is not compared with the record
    retry = Launch(buffered, T0.replace(second=30), 2, "retry")
    assert await a.guard.admit(retry) is None
    a.guard.release(retry)


async def test_buffer_refuses_a_start_on_request_and_gives_up_when_abandoned(
    make: Make,
) -> None:
    a, b = make("a"), make("b")
    buffered = job("BufferAll")
    assert await a.guard.admit(launch(buffered)) is None
    assert await b.guard.admit(launch(buffered, 1, "manual")) == "slot_held"
    assert await b.guard.refusal(buffered) == (
        "node a holds its cluster slot (concurrencyPolicy BufferAll, concurrencyScope "
        "cluster: a start on request is not buffered)"
    )
    waiting = launch(buffered, 2)
    task = asyncio.create_task(b.guard.admit(waiting))
    await until(lambda: b.waits == [(waiting.id, "a")])
    b.gone.add(waiting.id)  # cancelled, its job removed, the daemon stopping
    assert await asyncio.wait_for(task, 10) == "slot_not_freed"
    assert b.waits[-1] == (waiting.id, None)
