"""The pause book (:mod:`cronstable.state.pauses`) against every state store, and the
scheduler holding a paused job's fires on a manual clock.

Two books on one store play two nodes of a cluster: on etcd, and on one directory
(a state directory two nodes share), a pause recorded by one holds on the other once
it reads the store again.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from backends import StateBackend
from manual_harness import T0, Harness, jobs

from cronstable.config import DesiredState, MemoryTree, load
from cronstable.config.desired import Job
from cronstable.ports import Pause, PauseRefused
from cronstable.runtime.clock import ManualClock
from cronstable.state.base import StateStore
from cronstable.state.etcd import EtcdStore
from cronstable.state.pauses import PauseBook, PauseGate, pause_key

pytestmark = [pytest.mark.timeout(60)]

TABLE = """\
jobs:
  - name: tick
    command: "true"
    schedule: "* * * * *"
    startingDeadlineSeconds: 3600
    onPaused:
      alertAfter: 1h
      report: {shell: {command: "true"}}
  - {name: other, command: "true", schedule: "* * * * *"}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def desired(text: str = TABLE) -> DesiredState:
    return load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")


class Node:
    """One node's book on a store, with a manual clock and the alerts it sent."""

    def __init__(self, name: str, store: StateStore | None, clock: ManualClock) -> None:
        self.state = desired()
        self.clock = clock
        self.alerts: list[tuple[str, Pause]] = []
        self.book = PauseBook(
            name,
            lambda: store,
            lambda: self.state.jobs,
            clock.now,
            on_alert=lambda job, pause: self.alerts.append((job.name, pause)),
            poll_every=3600,  # the tests refresh by hand
        )

    def job(self, name: str) -> Job:
        return self.state.jobs[name]

    def apply(self, text: str) -> None:
        self.state = desired(text)
        self.book.commit(None, self.state)


@pytest_asyncio.fixture
async def store(state_backend: StateBackend, tmp_path: Path) -> AsyncIterator[StateStore]:
    made = state_backend.store(tmp_path / "state")
    await made.check()
    yield made
    await made.close()


@pytest_asyncio.fixture
async def nodes(store: StateStore) -> AsyncIterator[Callable[[str], Node]]:
    clock = ManualClock(T0)
    made: list[Node] = []

    def make(name: str) -> Node:
        node = Node(name, store, clock)
        node.book.commit(None, node.state)
        made.append(node)
        return node

    yield make
    for node in made:
        await node.book.close()


@pytest.mark.asyncio
async def test_a_pause_is_recorded_and_holds_on_every_node_sharing_the_store(
    nodes: Callable[[str], Node], store: StateStore
) -> None:
    n1, n2 = nodes("n1"), nodes("n2")
    until = T0 + timedelta(hours=2)
    pause, durable = await n1.book.pause("tick", reason="migration", by="ops", until=until)
    assert durable
    assert (pause.source, pause.by, pause.reason, pause.since, pause.until, pause.node) == (
        "api",
        "ops",
        "migration",
        T0,
        until,
        "n1",
    )
    record = await store.get(pause_key("tick"))
    assert (
        record is not None and record["by"] == "ops" and record["until"] == "2026-06-01T14:00:00Z"
    )
    assert n1.book.holding(n1.job("tick")) == pause
    assert n2.book.holding(n2.job("tick")) is None  # not read yet
    await n2.book.refresh()
    assert n2.book.holding(n2.job("tick")) == pause
    assert n2.book.pauses("tick").api == pause and n2.book.pauses("tick").config is None
    assert n2.book.holding(n2.job("other")) is None

    # a resume on the other node: the record goes, and the first node follows
    lifted = await n2.book.resume("tick", by="ops2")
    assert lifted == pause
    assert await store.get(pause_key("tick")) is None
    await n1.book.refresh()
    assert n1.book.holding(n1.job("tick")) is None
    assert await n1.book.resume("tick", by="ops") is None  # nothing left to lift


@pytest.mark.asyncio
async def test_until_ends_the_pause_by_itself(nodes: Callable[[str], Node]) -> None:
    n1 = nodes("n1")
    await n1.book.pause("tick", reason="short", by="ops", until=T0 + timedelta(minutes=5))
    assert n1.book.holding(n1.job("tick")) is not None
    await n1.clock.advance(300)
    assert n1.book.holding(n1.job("tick")) is None
    assert not n1.book.pauses("tick").paused
    with pytest.raises(ValueError, match="not in the future"):
        await n1.book.pause("tick", reason="late", by="ops", until=T0)


@pytest.mark.asyncio
async def test_the_repositorys_suspend_and_the_apis_pause_are_apart(
    nodes: Callable[[str], Node],
) -> None:
    n1 = nodes("n1")
    suspended = TABLE.replace(
        "startingDeadlineSeconds: 3600",
        "startingDeadlineSeconds: 3600\n    suspend: {reason: frozen for the audit}",
    )
    await n1.clock.advance(60)
    n1.apply(suspended)
    config = n1.book.pauses("tick").config
    assert config is not None and (config.source, config.reason, config.by) == (
        "config",
        "frozen for the audit",
        None,
    )
    assert config.since == T0 + timedelta(seconds=60)  # when this daemon applied it
    await n1.book.pause("tick", reason="api too", by="ops", until=None)
    held = n1.book.pauses("tick")
    assert held.config is not None and held.api is not None
    # a commit that removes suspend does not lift the API pause
    n1.apply(TABLE)
    held = n1.book.pauses("tick")
    assert held.config is None and held.api is not None and held.api.reason == "api too"
    # and a resume lifts the API pause only
    n1.apply(suspended)
    await n1.book.resume("tick", by="ops")
    held = n1.book.pauses("tick")
    assert held.api is None and held.config is not None


@pytest.mark.asyncio
async def test_a_pause_read_at_restore_holds_before_the_first_refresh(
    nodes: Callable[[str], Node], store: StateStore
) -> None:
    n1 = nodes("n1")
    await n1.book.pause("tick", reason="kept", by="ops", until=None)
    n2 = nodes("n2")  # a restarted daemon: the state section hands it the records it read
    n2.book.load(await store.list("pauses/"))
    held = n2.book.holding(n2.job("tick"))
    assert held is not None and held.reason == "kept" and held.node == "n1"


@pytest.mark.asyncio
async def test_on_paused_reports_once_per_pause_across_the_nodes(
    nodes: Callable[[str], Node],
) -> None:
    n1, n2 = nodes("n1"), nodes("n2")
    await n1.book.pause("tick", reason="forgotten", by="ops", until=None)
    await n2.book.refresh()
    await n1.clock.advance(3599)
    for node in (n1, n2):
        await node.book.check_alerts()
    assert n1.alerts == n2.alerts == []  # not yet alertAfter
    await n1.clock.advance(1)
    for _ in range(3):
        for node in (n1, n2):
            await node.book.check_alerts()
    # one report in all (put-if-absent on the store both read), for this pause
    sent = n1.alerts + n2.alerts
    assert [(job, pause.reason) for job, pause in sent] == [("tick", "forgotten")]
    # a new pause is a new instance: reported again once it lasts
    await n1.book.resume("tick", by="ops")
    await n1.book.pause("tick", reason="again", by="ops", until=None)
    await n2.book.refresh()
    await n1.clock.advance(3600)
    for node in (n2, n1):
        await node.book.check_alerts()
    assert [p.reason for _, p in n1.alerts + n2.alerts] == ["forgotten", "again"]
    # a job without an onPaused reporter is never claimed
    await n1.book.pause("other", reason="quiet", by="ops", until=None)
    await n1.clock.advance(86400)
    await n1.book.check_alerts()
    assert [p.reason for _, p in n1.alerts + n2.alerts] == ["forgotten", "again"]


@pytest.mark.asyncio
async def test_a_store_that_does_not_answer_refuses_the_pause_and_keeps_none() -> None:
    down = EtcdStore([f"http://127.0.0.1:{free_port()}"], timeout=0.5)  # nothing listens
    node = Node("n1", down, ManualClock(T0))
    with pytest.raises(PauseRefused, match="does not answer"):
        await node.book.pause("tick", reason="x", by="ops", until=None)
    assert node.book.holding(node.job("tick")) is None
    await down.close()
    without = Node("n1", None, ManualClock(T0))  # no state section: kept in memory
    pause, durable = await without.book.pause("tick", reason="x", by="ops", until=None)
    assert not durable and without.book.holding(without.job("tick")) == pause


# ------------------------------------------------------------------ the scheduler


@pytest.mark.asyncio
async def test_paused_fires_are_skipped_counted_and_never_caught_up(
    harness: Callable[..., Harness],
) -> None:
    table = jobs(TABLE)
    clock_of: list[ManualClock] = []
    book = PauseBook("n1", lambda: None, lambda: table, lambda: clock_of[0].now(), poll_every=3600)
    h = harness(table, gate=PauseGate(None, book))
    clock_of.append(h.clock)
    await h.clock.advance(60)
    assert h.scheduled("tick") == [T0 + timedelta(minutes=1)]
    await book.pause("tick", reason="hold", by="ops", until=None)
    await h.clock.advance(5 * 60)
    assert h.scheduled("tick") == [T0 + timedelta(minutes=1)]  # five fires skipped
    assert h.scheduler.stats.skipped_cluster == {"paused": 5}
    assert len(h.scheduled("other")) == 6  # the other job runs on
    # a start on request still runs
    h.scheduler.start_now("tick", h.clock.now())
    await h.clock.advance(0)
    assert h.scheduled("tick")[-1] == h.clock.now()
    await book.resume("tick", by="ops")
    await h.clock.advance(30)
    assert len(h.scheduled("tick")) == 2  # no catch-up of the skipped fires (deadline 1 h)
    await h.clock.advance(30)
    assert h.scheduled("tick")[-1] == T0 + timedelta(minutes=7)  # the next fire runs
    assert h.scheduler.stats.missed == 0
    await book.close()


@pytest.mark.asyncio
async def test_the_cluster_gate_answers_first() -> None:
    class NotLeader:
        def allows(self, job: Job) -> str | None:
            return "not_leader"

        async def release(self) -> None:
            return None

    state = desired()
    book = PauseBook("n1", lambda: None, lambda: state.jobs, lambda: datetime.now(UTC))
    gate = PauseGate(NotLeader(), book)
    await book.pause("tick", reason="x", by="ops", until=None)
    # a follower would not run it anyway: it says so, and counts no paused fire
    assert gate.allows(state.jobs["tick"]) == "not_leader"
    assert PauseGate(None, book).allows(state.jobs["tick"]) == "paused"
    assert PauseGate(None, book).allows(state.jobs["other"]) is None
    await asyncio.sleep(0)


# ------------------------------------------------------------------ workflows

FLOWS = """\
jobs:
  - {name: workflow, command: "true", schedule: "* * * * *"}
workflows:
  - name: etl
    schedule: "* * * * *"
    onPaused:
      alertAfter: 1h
      report: {shell: {command: "true"}}
    tasks: [{name: a, command: "true"}]
"""


@pytest.mark.asyncio
async def test_a_workflow_pause_has_its_own_key_and_holds_on_every_node(
    store: StateStore,
) -> None:
    state = desired(FLOWS)
    clock = ManualClock(T0)
    alerts: list[tuple[str, Pause]] = []

    def book(node: str) -> PauseBook:
        made = PauseBook(
            node,
            lambda: store,
            lambda: state.jobs,
            clock.now,
            on_alert=lambda job, pause: alerts.append((job.name, pause)),
            poll_every=3600,
            workflows=lambda: state.workflows,
        )
        made.commit(None, state)
        return made

    n1, n2 = book("n1"), book("n2")
    flow = state.workflows["etl"].job
    pause, durable = await n1.pause("etl", reason="quiet", by="ops", until=None, workflow=True)
    assert durable
    assert await store.get(pause_key("etl", workflow=True)) is not None
    assert await store.get(pause_key("etl")) is None
    await n2.refresh()
    assert n2.holding(flow) == pause and PauseGate(None, n2).allows(flow) == "paused"
    assert n2.pauses("etl", workflow=True).api == pause
    # the job named "workflow" (key pauses/workflow) is not touched by it, nor it by the job
    job = state.jobs["workflow"]
    assert n2.holding(job) is None
    await n2.pause("workflow", reason="job", by="ops", until=None)
    await n1.refresh()
    assert n1.holding(job) is not None and n1.holding(flow) == pause
    assert sorted((p.job, p.source) for p in n1.active()) == [("etl", "api"), ("workflow", "api")]
    # onPaused of a workflow: once across the nodes
    await clock.advance(3600)
    await n1.check_alerts()
    await n2.check_alerts()
    assert [name for name, _ in alerts] == ["etl"]
    lifted = await n2.resume("etl", by="ops", workflow=True)
    assert lifted == pause
    await n1.refresh()
    assert n1.holding(flow) is None and n1.holding(job) is not None
    await n1.close()
    await n2.close()
