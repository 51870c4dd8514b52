"""A new owner of a ``Leader`` job inherits what the old one owed, on real stores.

Real schedulers and keepers of several nodes (n1, n2, n3) on one state store the
nodes share (etcd, and a directory with ``shared``), a manual clock, the stand-in
runs of test_runtime_scheduler and a gate the test moves (who leads, who is a live
member; under ``spread``, each job's owner among the members, by the cluster's
rendezvous hash).  A "kill -9" of a node cancels its daemon with nothing settled.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from backends import StateBackend
from test_runtime_scheduler import StandInRun

from cronstable.cluster.hashing import owner
from cronstable.config import DesiredState, MemoryTree, load
from cronstable.config.desired import Job
from cronstable.ports import FinishedRun, MissedFire, Moment
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.history import RunHistory
from cronstable.runtime.scheduler import Scheduler
from cronstable.state.base import StateStore, job_key, node_key
from cronstable.state.etcd import EtcdStore
from cronstable.state.filesystem import FilesystemStore
from cronstable.state.fleet import LastRuns, last_run_key, read_run
from cronstable.state.keeper import LOST_THERE, StateKeeper
from cronstable.state.records import history_runs

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

T0 = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)

JOBS = """\
jobs:
  - name: flaky
    command: "false"
    schedule: "0 * * * *"
    clusterPolicy: Leader
    onFailure:
      retry: {maximumRetries: 3, initialDelay: 60, backoffMultiplier: 2, maximumDelay: 600}
  - name: tick
    command: "true"
    schedule: "*/10 * * * *"
    clusterPolicy: Leader
    startingDeadlineSeconds: 900
  - name: long
    command: "true"
    schedule: "30 12 * * *"
    clusterPolicy: Leader
"""


def table_digest(node: Node, name: str) -> str:
    job = node.scheduler.job(name)
    assert job is not None
    return job.digest


def revision(text: str = JOBS) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


@dataclass
class Leadership:
    """What every node sees: who leads, who is a live member."""

    leader: str | None = "n1"
    members: tuple[str, ...] = ("n1", "n2", "n3")


@dataclass
class Gate:
    """Node ``node``'s cluster gate over the shared :class:`Leadership`."""

    node: str
    seen: Leadership
    also: bool = False
    """This node believes it leads too (a split brain the claims must survive)."""
    spread: bool = False
    """``distribution: spread``: each job runs on its owner among the members."""
    asked: int = 0
    """How many times the gate was asked."""

    def allows(self, job: Job) -> str | None:
        self.asked += 1
        if self.spread:
            return None if owner(job.name, self.seen.members) == self.node else "not_owner"
        return None if self.also or self.seen.leader == self.node else "not_leader"

    def view(self) -> tuple[str | None, tuple[str, ...], bool]:
        return (self.seen.leader, self.seen.members, self.also)

    async def release(self) -> None:
        return None


@dataclass
class Reports:
    sent: list[tuple[str, FinishedRun, tuple[Moment, ...]]] = field(default_factory=list)

    def run_reported(self, job: Job, record: FinishedRun, moments: tuple[Moment, ...]) -> None:
        self.sent.append((job.name, record, moments))

    def fire_missed(self, job: Job, missed: MissedFire) -> None:
        return None


@dataclass
class Node:
    name: str
    clock: ManualClock
    scheduler: Scheduler
    keeper: StateKeeper
    gate: Gate
    runs: list[StandInRun]
    reports: Reports
    task: asyncio.Task[None]

    def apply(self, desired: DesiredState) -> None:
        """Apply a revision's jobs, as the jobs and state sections' commits do."""
        self.scheduler.replace_jobs(dict(desired.jobs))
        self.keeper.jobs_applied(desired.job_set_id)

    def ran(self, job: str) -> list[tuple[datetime, int, datetime | None]]:
        """(scheduled, attempt, started) of the runs of ``job`` that started here (a run a
        launch guard refused is made but never started)."""
        return [
            (r.scheduled, r.attempt, r.started)
            for r in self.runs
            if r.job.name == job and r.started is not None
        ]

    async def settle(self) -> None:
        assert self.keeper.writer is not None
        assert await self.keeper.writer.flush(within=5)

    async def kill9(self) -> None:
        await self.settle()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        for task in list(self.scheduler._tasks):
            task.cancel()
        await self.keeper.close()


@pytest_asyncio.fixture
async def cluster(state_backend: StateBackend, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    nodes: list[Node] = []
    seen = Leadership()

    def store() -> StateStore:
        if state_backend.server is not None:
            return EtcdStore([state_backend.server.endpoint], prefix=state_backend.prefix)
        return FilesystemStore(tmp_path / "shared-state", shared=True)

    async def start(
        name: str,
        now: datetime,
        behaviour: dict[str, tuple[float, int]],
        *,
        jobs: str = JOBS,
        spread: bool = False,
    ) -> tuple[Node, Leadership]:
        clock = ManualClock(now)
        runs: list[StandInRun] = []

        def spawner(job: Job, scheduled: datetime, attempt: int) -> StandInRun:
            duration, code = behaviour.get(job.name, (1.0, 0))
            run = StandInRun(clock, job, scheduled, attempt, duration, code)
            runs.append(run)
            return run

        gate = Gate(name, seen, spread=spread)
        history = RunHistory()
        keeper = StateKeeper(
            name,
            lambda: scheduler,
            history,
            boot=f"boot-{name}",
            cluster_wide=lambda job: True,
            gated=lambda job: True,
            leadership=gate.view,
            members=lambda: seen.members,
        )
        reports = Reports()
        scheduler = Scheduler(
            clock,
            spawner,
            gate=gate,
            guards=[keeper],
            hooks=keeper,
            run_listeners=[history, keeper, LastRuns(name, keeper.submit, lambda: True)],
            report_listeners=[reports],
        )
        made = counted(store())
        await made.check()
        keeper.use(made)
        node = Node(
            name,
            clock,
            scheduler,
            keeper,
            gate,
            runs,
            reports,
            asyncio.create_task(scheduler.run()),
        )
        node.apply(revision(jobs))
        nodes.append(node)
        await asyncio.sleep(0)
        return node, seen

    yield start
    for node in nodes:
        if not node.task.done():
            node.scheduler.stop()
            await node.scheduler.cancel_running()
            await node.clock.advance(3600)
            await asyncio.wait_for(node.task, 5)
        await node.keeper.close()


IN_FLIGHT: dict[int, int] = {}
"""Store calls going, by id of the store: a step of the clock waits for them (a launch
that awaits a claim on a loaded machine must start before time moves on)."""


def counted(store: StateStore) -> StateStore:
    """``store``, its calls counted in :data:`IN_FLIGHT` while they go."""
    IN_FLIGHT[id(store)] = 0
    for name in ("get", "put", "create", "delete", "list", "apply"):
        call = getattr(store, name)

        async def wrapped(*args: Any, __call: Any = call, **kwargs: Any) -> Any:
            IN_FLIGHT[id(store)] += 1
            try:
                return await __call(*args, **kwargs)
            finally:
                IN_FLIGHT[id(store)] -= 1

        setattr(store, name, wrapped)
    return store


async def quiet(nodes: list[Node]) -> None:
    """Until no node's store call goes and what they woke has run (at most 10 s)."""
    for _ in range(10_000):
        for node in nodes:
            await node.settle()
        await asyncio.sleep(0.002)
        stores = [id(node.keeper.store) for node in nodes]
        if all(IN_FLIGHT.get(key, 0) == 0 for key in stores):
            for _ in range(20):
                await asyncio.sleep(0)
            if all(IN_FLIGHT.get(key, 0) == 0 for key in stores):
                return
    raise AssertionError("the stores' calls did not end within 10 s")


async def advance(nodes: list[Node], seconds: int, step: int = 1) -> None:
    """Every node's clock ``seconds`` on, ``step`` at a time; each node inherits what
    the leadership gave it since (as its round would) and writes its records."""
    for _ in range(seconds // step):
        for node in nodes:
            await node.clock.advance(step)
        await quiet(nodes)
        for node in nodes:
            await node.keeper.inherit()
        await quiet(nodes)


async def both_inherit(*nodes: Node) -> None:
    """The nodes look at the leadership at once (their reads of the records overlap)."""
    await asyncio.gather(*(node.keeper.inherit() for node in nodes))


async def test_the_new_leader_rearms_the_retry_at_its_time_once(
    cluster: Callable[..., Any],
) -> None:
    fail = {"flaky": (1.0, 1)}
    n1, seen = await cluster("n1", T0 + timedelta(minutes=59), fail)
    n2, _ = await cluster("n2", T0 + timedelta(minutes=59), fail)
    n3, _ = await cluster("n3", T0 + timedelta(minutes=59), fail)
    await advance([n1, n2, n3], 62)  # 13:00 fails at 13:00:01; retry 1 due 13:01:01
    assert n1.ran("flaky") == [(T0 + timedelta(hours=1), 1, T0 + timedelta(hours=1))]
    pending = await n1.keeper.store.get(job_key("flaky", "retry"))  # type: ignore[union-attr]
    assert pending is not None
    assert (pending["status"], pending["count"], pending["node"]) == ("pending", 1, "n1")
    await n1.kill9()
    seen.leader, seen.members = "n2", ("n2", "n3")
    n3.gate.also = True  # n3 believes it leads too: the claim lets one of them run it
    await both_inherit(n2, n3)
    await advance([n2, n3], 40)
    await advance([n2, n3], 30)
    retries = [r for r in n2.ran("flaky") + n3.ran("flaky") if r[1] == 2]
    assert retries == [(T0 + timedelta(hours=1), 2, T0 + timedelta(hours=1, seconds=61))]


async def test_the_new_leader_runs_a_missed_fire_within_the_deadline_once(
    cluster: Callable[..., Any],
) -> None:
    n1, seen = await cluster("n1", T0 + timedelta(minutes=9), {})
    n2, _ = await cluster("n2", T0 + timedelta(minutes=9), {})
    n3, _ = await cluster("n3", T0 + timedelta(minutes=9), {})
    await advance([n1, n2, n3], 120, step=10)  # n1 runs 12:10
    assert [s for s, _, _ in n1.ran("tick")] == [T0 + timedelta(minutes=10)]
    await n1.kill9()
    seen.leader, seen.members = None, ("n2", "n3")  # n1's lease has not expired yet
    await advance([n2, n3], 540, step=10)  # 12:20 passes with no leader
    assert n2.ran("tick") == n3.ran("tick") == []
    seen.leader = "n2"
    n3.gate.also = True
    await both_inherit(n2, n3)  # both read the last fire before either runs the catch-up
    await advance([n2, n3], 20, step=10)
    caught = [s for s, _, _ in n2.ran("tick") + n3.ran("tick")]
    assert caught == [T0 + timedelta(minutes=20)]
    # and the schedule goes on from there, once
    n3.gate.also = False
    await advance([n2, n3], 600, step=10)
    assert sorted(s for s, _, _ in n2.ran("tick") + n3.ran("tick")) == [
        T0 + timedelta(minutes=20),
        T0 + timedelta(minutes=30),
    ]


async def test_a_dead_nodes_run_is_lost_and_a_live_nodes_run_is_kept(
    cluster: Callable[..., Any],
) -> None:
    long = {"long": (3600.0, 0)}
    n1, seen = await cluster("n1", T0 + timedelta(minutes=29), long)
    n2, _ = await cluster("n2", T0 + timedelta(minutes=29), long)
    await advance([n1, n2], 62)
    assert [s for s, _, _ in n1.ran("long")] == [T0 + timedelta(minutes=30)]
    store = n2.keeper.store
    assert store is not None
    running = await store.list(job_key("long", "running") + "/")
    assert [r["node"] for r in running.values() if r is not None] == ["n1"]
    # n1 lives on (a member) but leads no more: its run stays its own
    seen.leader = "n2"
    await advance([n1, n2], 4)
    assert await store.list(job_key("long", "running") + "/") == running
    assert n2.reports.sent == []
    # n1 dies: the run is reported lost, naming it, as a permanent failure
    await n1.kill9()
    seen.members = ("n2",)
    await advance([n2], 4)
    [(name, lost, moments)] = n2.reports.sent
    assert (name, lost.outcome, moments) == ("long", "lost", ("failure", "permanent_failure"))
    assert lost.fail_reason == LOST_THERE.format(node="n1")
    assert lost.start.scheduled_time == T0 + timedelta(minutes=30)
    assert await store.list(job_key("long", "running") + "/") == {}
    # it is the last run in n2's history of the job (kept in the store too) and the
    # fleet view's last run, naming the node it went on
    [kept] = n2.keeper.history.finished("long")
    assert (kept.outcome, kept.fail_reason, kept.exit_code) == ("lost", lost.fail_reason, None)
    assert kept.start.id == lost.start.id
    assert kept.start.digest == table_digest(n2, "long")
    n2.keeper._flush_history()
    await n2.settle()
    stored = await store.get(node_key("n2", "history", "long"))
    assert stored is not None
    read = history_runs(stored)
    assert read is not None
    assert [(r.start.id, r.outcome, r.fail_reason) for r in read[1]] == [
        (lost.start.id, "lost", lost.fail_reason)
    ]
    last = read_run(await store.get(last_run_key("job", "long")))
    assert last is not None
    assert (last.node, last.run_id, last.outcome) == ("n1", lost.start.id, "lost")
    assert last.scheduled == T0 + timedelta(minutes=30)


# a new revision, applied on the old leader before the new one
CHANGED = (
    JOBS.replace("maximumRetries: 3", "maximumRetries: 4")
    + """\
  - name: added
    command: "false"
    schedule: "0 * * * *"
    clusterPolicy: Leader
    onFailure:
      retry: {maximumRetries: 3, initialDelay: 60, backoffMultiplier: 2, maximumDelay: 600}
"""
)


async def test_a_job_a_revision_adds_or_changes_is_inherited_when_its_swap_comes(
    cluster: Callable[..., Any],
) -> None:
    fail = {"flaky": (1.0, 1), "added": (1.0, 1)}
    n1, seen = await cluster("n1", T0 + timedelta(minutes=59), fail, jobs=CHANGED)
    n2, _ = await cluster("n2", T0 + timedelta(minutes=59), fail)
    n3, _ = await cluster("n3", T0 + timedelta(minutes=59), fail, jobs=CHANGED)
    await advance([n1, n2, n3], 62)  # n1 runs both at 13:00; they fail; retries pending
    first = [(T0 + timedelta(hours=1), 1, T0 + timedelta(hours=1))]
    assert n1.ran("flaky") == n1.ran("added") == first
    store = n2.keeper.store
    assert store is not None
    await n1.kill9()
    seen.leader, seen.members = "n2", ("n2", "n3")
    # n2 leads on the revision before: the changed job's retry is of a definition it
    # does not have, the added job not a job of its; both records stay as they are
    await advance([n2, n3], 8)
    for name in ("flaky", "added"):
        pending = await store.get(job_key(name, "retry"))
        assert pending is not None
        assert (pending["status"], pending["count"], pending["node"]) == ("pending", 1, "n1")
    # a round with neither the leadership nor the job set changed looks at no job
    n2.gate.asked = 0
    await n2.keeper.inherit()
    assert n2.gate.asked == 0
    # n2 applies the revision (13:00:10): its swap brings both; their retries run once,
    # at their time, on n2 only
    n2.apply(revision(CHANGED))
    await advance([n2, n3], 60)
    retried = [(T0 + timedelta(hours=1), 2, T0 + timedelta(hours=1, seconds=61))]
    for name in ("flaky", "added"):
        assert [r for r in n2.ran(name) if r[1] == 2] == retried
        assert n3.ran(name) == []


def owned_by(first: str, then: str, prefix: str) -> str:
    """A job name whose owner among n1, n2, n3 is ``first`` and, once n1 is gone,
    ``then`` among n2, n3 (the cluster's rendezvous hash)."""
    for number in range(1000):
        name = f"{prefix}{number}"
        if owner(name, ("n1", "n2", "n3")) == first and owner(name, ("n2", "n3")) == then:
            return name
    raise AssertionError("no such name")


SPREAD_FLAKY = owned_by("n1", "n2", "flaky")
SPREAD_TICK = owned_by("n1", "n3", "tick")
SPREAD = f"""\
jobs:
  - name: {SPREAD_FLAKY}
    command: "false"
    schedule: "0 * * * *"
    clusterPolicy: Leader
    onFailure:
      retry: {{maximumRetries: 3, initialDelay: 900, backoffMultiplier: 2, maximumDelay: 3600}}
  - name: {SPREAD_TICK}
    command: "true"
    schedule: "*/10 * * * *"
    clusterPolicy: Leader
    startingDeadlineSeconds: 900
"""


async def test_under_spread_the_dead_owners_jobs_are_inherited_by_their_new_owners(
    cluster: Callable[..., Any],
) -> None:
    fail = {SPREAD_FLAKY: (1.0, 1)}
    start = T0 + timedelta(minutes=59)
    n1, seen = await cluster("n1", start, fail, jobs=SPREAD, spread=True)
    n2, _ = await cluster("n2", start, fail, jobs=SPREAD, spread=True)
    n3, _ = await cluster("n3", start, fail, jobs=SPREAD, spread=True)
    nodes = [n1, n2, n3]
    await advance(nodes, 62)  # n1 owns both: runs them at 13:00; the retry is due 13:15:01
    assert [s for s, _, _ in n1.ran(SPREAD_FLAKY)] == [T0 + timedelta(hours=1)]
    assert [s for s, _, _ in n1.ran(SPREAD_TICK)] == [T0 + timedelta(hours=1)]
    await n1.kill9()
    # n1's lease has not expired yet: it owns its jobs still, and 13:10 passes unrun
    await advance([n2, n3], 600, step=10)
    seen.members = ("n2", "n3")  # 13:11:02: n1 is no member; its jobs move
    await advance([n2, n3], 20, step=10)
    # the new owner of the deadline job runs the fire missed at 13:10 once
    assert [s for s, _, _ in n3.ran(SPREAD_TICK)] == [T0 + timedelta(minutes=70)]
    assert n2.ran(SPREAD_TICK) == []
    # the new owner of the failing job re-arms its retry at its time (13:15:01), once
    await advance([n2, n3], 240, step=10)
    assert n2.ran(SPREAD_FLAKY) == n3.ran(SPREAD_FLAKY) == []
    await advance([n2, n3], 60, step=10)
    [(scheduled, attempt, started)] = n2.ran(SPREAD_FLAKY)
    assert (scheduled, attempt) == (T0 + timedelta(hours=1), 2)
    assert started is not None
    assert timedelta(minutes=75, seconds=1) <= started - T0 <= timedelta(minutes=75, seconds=11)
    assert n3.ran(SPREAD_FLAKY) == []
    # and the schedules go on from there on their new owners, once
    await advance([n2, n3], 300, step=10)  # 13:21:22
    assert [s for s, _, _ in n3.ran(SPREAD_TICK)] == [
        T0 + timedelta(minutes=70),
        T0 + timedelta(minutes=80),
    ]
    assert n2.ran(SPREAD_TICK) == []


async def test_a_revision_that_changes_an_owned_job_keeps_the_owners_own_retry(
    cluster: Callable[..., Any],
) -> None:
    fail = {"flaky": (1.0, 1)}
    n2, seen = await cluster("n2", T0 + timedelta(minutes=59, seconds=58), fail)
    n3, _ = await cluster("n3", T0 + timedelta(minutes=59, seconds=58), fail)
    seen.leader, seen.members = "n2", ("n2", "n3")
    await advance([n2, n3], 1)  # n2 owns the job (its first look)
    for node in (n2, n3):
        node.apply(revision(CHANGED))  # 12:59:59
    # the fire at 13:00 runs on the new definition and fails before n2's next look
    for _ in range(3):
        for node in (n2, n3):
            await node.clock.advance(1)
        await quiet([n2, n3])
    store = n2.keeper.store
    assert store is not None
    pending = await store.get(job_key("flaky", "retry"))
    assert pending is not None
    assert (pending["status"], pending["count"], pending["node"]) == ("pending", 1, "n2")
    # n2's look at the changed job leaves the retry its own run armed as it is
    await advance([n2, n3], 1)
    assert await store.get(job_key("flaky", "retry")) == pending
    await n2.kill9()
    seen.leader, seen.members = "n3", ("n3",)
    await advance([n3], 60)
    assert [r for r in n3.ran("flaky") if r[1] == 2] == [
        (T0 + timedelta(hours=1), 2, T0 + timedelta(hours=1, seconds=61))
    ]
