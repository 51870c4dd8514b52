"""onLate, onStuck and onStale (:mod:`cronstable.state.alerts`) on a manual clock.

The watch hears a real scheduler (stand-in runs on the same clock, as in
manual_harness.py) and a real run history; what it reports is written down
by a real sink.  Two watches on one etcd store play two nodes of a cluster: a late
fire, and a stale job, are reported once between them.  On a node's own state
directory (or none) each node judges what it would run itself.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from backends import StateBackend
from heard_reports import HeardReports
from manual_harness import T0, StandInRun
from prometheus_client import CollectorRegistry

from cronstable.config import DesiredState, MemoryTree, load
from cronstable.config.desired import Job
from cronstable.ports import JobAlerts, StuckRun
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.history import FlowHistory, RunHistory
from cronstable.runtime.scheduler import Scheduler
from cronstable.state.alerts import LATE_KEEP, AlertWatch, late_key, p95
from cronstable.state.base import StateStore

pytestmark = [pytest.mark.timeout(60)]

MINUTE = timedelta(minutes=1)


def desired(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


@dataclass
class Sink:
    """A real AlertSink: what would have been reported."""

    late: list[tuple[str, datetime, datetime, float]] = field(default_factory=list)
    stuck: list[tuple[str, StuckRun]] = field(default_factory=list)
    stale: list[tuple[str, datetime | None, float]] = field(default_factory=list)

    def fire_late(self, job: Job, fire: datetime, planned: datetime, grace: float) -> None:
        self.late.append((job.name, fire, planned, grace))

    def run_stuck(self, job: Job, run: StuckRun) -> None:
        self.stuck.append((job.name, run))

    def success_stale(
        self, job: Job, last_success: datetime | None, age: float, limit: float
    ) -> None:
        self.stale.append((job.name, last_success, age))


class Gate:
    """The cluster gate's answer, set by the test (a real ClusterGate)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.asked = 0

    def allows(self, job: Job) -> str | None:
        self.asked += 1
        return self.reason

    async def release(self) -> None:
        return None


class Node:
    """One node: a scheduler on the shared manual clock, its run history and its watch."""

    def __init__(
        self, name: str, text: str, clock: ManualClock, store: StateStore | None = None
    ) -> None:
        self.state = desired(text)
        self.clock = clock
        self.gate = Gate()
        self.paused: set[str] = set()
        self.sink = Sink()
        self.heard = HeardReports()
        self.history = RunHistory()
        self.flows = FlowHistory()
        self.behaviour: dict[str, tuple[float, int]] = {}
        self.registry = CollectorRegistry()

        def spawner(job: Job, scheduled: datetime, attempt: int) -> StandInRun:
            duration, code = self.behaviour.get(job.name, (1.0, 0))
            return StandInRun(clock, job, scheduled, attempt, duration, code)

        self.watch = AlertWatch(
            name,
            lambda: store,
            lambda: self.jobs,
            lambda job: self.scheduler.job(job),
            clock.now,
            sleep=clock.sleep,
            gate=self.gate.allows,
            paused=lambda job: job.name in self.paused,
            start_of=lambda job, fire: self.scheduler.start_of(job, fire),
            durations=lambda name: (
                self.history.success_durations(name) or self.flows.success_durations(name)
            ),
            last_success=lambda name: (
                self.history.last_success_at(name) or self.flows.last_success(name)
            ),
            sink=self.sink,
            registry=self.registry,
        )
        self.scheduler = Scheduler(
            clock,
            spawner,
            gate=self.gate,
            run_listeners=[self.history, self.watch],
            report_listeners=[self.heard, self.watch],
            flow_listeners=[self.flows, self.watch],
        )
        self.scheduler.replace_jobs(self.state.jobs, self.state.workflows)
        self.watch.commit(None, self.state)
        self.task: asyncio.Task[None] | None = None

    @property
    def jobs(self) -> Mapping[str, Job]:
        return self.scheduler.scheduled

    def start(self) -> Node:
        self.task = asyncio.create_task(self.scheduler.run())
        return self

    def metric(self, name: str, job: str) -> float | None:
        return self.registry.get_sample_value(name, {"job": job})

    async def stop(self) -> None:
        self.scheduler.stop()
        await self.scheduler.cancel_running()
        await self.watch.close()
        if self.task is not None:
            await self.clock.advance(7200)
            await asyncio.wait_for(self.task, 5)


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Callable[..., Node]]:
    """Nodes on one manual clock (started: their schedulers and watch rounds run)."""
    clock = ManualClock(T0)
    made: list[Node] = []

    def make(text: str, name: str = "n1", store: StateStore | None = None) -> Node:
        node = Node(name, text, clock, store).start()
        made.append(node)
        return node

    yield make
    for node in made:
        await node.stop()


LATE = """\
jobs:
  - name: tick
    command: "true"
    schedule: "* * * * *"
    onLate: {grace: 30s, rateLimit: 0}
"""


# ------------------------------------------------------------------ onLate


@pytest.mark.asyncio
async def test_fires_that_start_on_time_are_never_late(cluster: Callable[..., Node]) -> None:
    node = cluster(LATE)
    await node.clock.advance(10 * 60)
    assert len(node.history.finished("tick")) >= 9
    assert node.sink.late == []
    assert node.watch.view(node.jobs["tick"]) == JobAlerts()  # judged, nothing wrong


@pytest.mark.asyncio
async def test_a_job_without_the_three_alerts_shows_none(cluster: Callable[..., Node]) -> None:
    node = cluster("jobs: [{name: plain, command: 'true', schedule: '@daily'}]")
    assert node.watch.view(node.jobs["plain"]) is None


@pytest.mark.asyncio
async def test_a_round_judges_the_jobs_with_alerts_not_every_job(
    cluster: Callable[..., Node],
) -> None:
    plain = "".join(
        f"  - {{name: plain{i}, command: 'true', schedule: '@daily'}}\n" for i in range(2000)
    )
    node = cluster(LATE + plain)
    await node.watch.check()
    node.gate.asked = 0
    for _ in range(5):
        await node.watch.check()
    assert node.gate.asked == 5  # tick alone, each round
    # a swap that takes tick's onLate away forgets it; one that gives a job onLate judges it
    # from then on
    given = LATE.replace("tick", "late2").removeprefix("jobs:\n")
    given += "    onStale: {maxSuccessAge: 1h}\n"
    node.state = desired(LATE.replace("    onLate: {grace: 30s, rateLimit: 0}\n", "") + given)
    node.scheduler.replace_jobs(node.state.jobs, node.state.workflows)
    node.watch.commit(None, node.state)
    node.gate.reason = "leadership_unknown"
    node.gate.asked = 0
    await node.watch.check()
    assert node.gate.asked == 1
    assert node.watch.view(node.jobs["tick"]) is None
    await node.clock.advance(2 * 60)
    assert {name for name, _, _, _ in node.sink.late} == {"late2"}


@pytest.mark.asyncio
async def test_with_nobody_leading_every_fire_is_late_once(cluster: Callable[..., Node]) -> None:
    node = cluster(LATE)
    node.gate.reason = "leadership_unknown"  # a Leader job then runs nowhere
    await node.clock.advance(3 * 60 + 29)
    assert [fire for _, fire, _, _ in node.sink.late] == [T0 + MINUTE, T0 + 2 * MINUTE]
    await node.clock.advance(2)  # 12:03:31: the 12:03 fire's grace ended
    late = [fire for _, fire, _, _ in node.sink.late]
    assert late == [T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE]  # each once
    assert node.sink.late[0][2:] == (T0 + MINUTE, 30.0)  # planned start, grace
    assert node.metric("cronstable_fires_late_total", "tick") == 3
    # /status: the newest late fire, since when, who reported it and when
    fire = T0 + 3 * MINUTE
    shown = node.watch.view(node.jobs["tick"])
    assert shown is not None and shown.late is not None
    assert (shown.late.fire, shown.late.since, shown.late.reported_by) == (
        fire,
        fire + timedelta(seconds=30),
        "n1",
    )
    assert shown.late.reported_at == shown.last_late
    assert shown.late.reported_at is not None and shown.late.reported_at >= shown.late.since
    node.gate.reason = None  # a leader again: the next fire starts, it is no longer late
    await node.clock.advance(60)
    shown = node.watch.view(node.jobs["tick"])
    assert shown is not None and shown.late is None and shown.last_late is not None


@pytest.mark.asyncio
async def test_another_nodes_fires_are_not_judged_without_a_shared_store(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(LATE)
    node.gate.reason = "not_leader"  # the leader runs them: nothing here can tell
    await node.clock.advance(5 * 60)
    assert node.sink.late == []


@pytest.mark.asyncio
async def test_a_fire_waiting_behind_a_run_is_late_and_a_skipped_one_is_not(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(
        """\
        jobs:
          - name: slow
            command: "true"
            schedule: "* * * * *"
            concurrencyPolicy: BufferOne
            onLate: {grace: 20s, rateLimit: 0}
        """
    )
    node.behaviour["slow"] = (150.0, 0)
    await node.clock.advance(6 * 60)
    # 12:01 runs till 12:03:30: 12:02 waits (late), 12:03 is skipped (buffer_full, told
    # as missed: not late); 12:02 runs till 12:06:00, 12:04 waits, 12:05 skipped
    assert [m.scheduled_time for m in node.heard.missed] == [T0 + 3 * MINUTE, T0 + 5 * MINUTE]
    assert [fire for _, fire, _, _ in node.sink.late] == [T0 + 2 * MINUTE, T0 + 4 * MINUTE]


@pytest.mark.asyncio
async def test_a_paused_job_is_never_late(cluster: Callable[..., Node]) -> None:
    node = cluster(LATE)
    node.gate.reason = "leadership_unknown"
    node.paused.add("tick")
    await node.clock.advance(3 * 60)
    assert node.sink.late == []
    node.paused.clear()
    await node.clock.advance(2 * 60)  # judged again from the next fire on
    assert [fire for _, fire, _, _ in node.sink.late] == [T0 + 4 * MINUTE]


@pytest.mark.asyncio
async def test_lateness_counts_from_the_planned_start_jitter_included(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(
        """\
        jobs:
          - name: spread
            command: "true"
            schedule: "@hourly"
            jitter: 30m
            onLate: {grace: 1m, rateLimit: 0}
        """
    )
    node.gate.reason = "leadership_unknown"
    fire = T0 + timedelta(hours=1)
    planned = node.scheduler.start_of(node.jobs["spread"], fire)
    assert planned > fire
    await node.clock.advance_to(planned + timedelta(seconds=59))
    assert node.sink.late == []
    await node.clock.advance(2)
    assert node.sink.late == [("spread", fire, planned, 60.0)]


# ------------------------------------------------------------------ onStuck


@pytest.mark.asyncio
async def test_a_run_past_its_expected_duration_is_stuck_once(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(
        """\
        jobs:
          - name: crawl
            command: "true"
            schedule: "0 * * * *"
            onStuck: {expectedDuration: 10m}
        """
    )
    node.behaviour["crawl"] = (1500.0, 0)  # 25 minutes
    await node.clock.advance(3600 + 9 * 60)
    assert node.sink.stuck == []
    await node.clock.advance(2 * 60)
    [(name, run)] = node.sink.stuck
    assert (name, run.basis, run.threshold) == ("crawl", "expectedDuration", 600.0)
    assert run.started_at == T0 + timedelta(hours=1) and 600 < run.running_for < 700
    assert node.metric("cronstable_job_runs_stuck", "crawl") == 1
    shown = node.watch.view(node.jobs["crawl"])
    assert shown is not None
    [going] = shown.stuck
    assert (going.run, going.threshold, going.basis) == (run.id, 600.0, "expectedDuration")
    assert going.running_for == (node.clock.now() - run.started_at).total_seconds()
    assert going.reported_at == shown.last_stuck
    await node.clock.advance(20 * 60)  # still stuck, then it ends: reported once
    assert len(node.sink.stuck) == 1
    shown = node.watch.view(node.jobs["crawl"])
    assert shown is not None and shown.stuck == () and shown.last_stuck == going.reported_at
    assert node.metric("cronstable_job_runs_stuck", "crawl") is None
    assert node.metric("cronstable_job_stuck_total", "crawl") == 1


@pytest.mark.asyncio
async def test_p95_factor_judges_from_the_last_successful_runs(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(
        """\
        jobs:
          - name: batch
            command: "true"
            schedule: "*/10 * * * *"
            onStuck: {p95Factor: 3}
        """
    )
    node.behaviour["batch"] = (200.0, 0)  # ~3 min each; stuck beyond 10 min
    await node.clock.advance(3 * 600)  # three runs: too few to judge
    node.behaviour["batch"] = (500.0, 0)
    await node.clock.advance(600)  # a long run, but 3 samples are not enough
    assert node.sink.stuck == []
    node.behaviour["batch"] = (200.0, 0)
    await node.clock.advance(2 * 600)  # now 6 successes: p95 is 500 (nearest rank)
    assert p95(node.history.success_durations("batch")) == 500.0
    node.behaviour["batch"] = (1700.0, 0)
    await node.clock.advance(600 + 1600)
    [(_, run)] = node.sink.stuck
    assert run.threshold == 1500.0 and run.basis.startswith("p95Factor: 3 × p95 of the last 6")


def test_p95_is_the_nearest_rank() -> None:
    assert p95([1.0] * 19 + [100.0]) == 1.0
    assert p95([float(n) for n in range(1, 21)]) == 19.0
    assert p95([5.0]) == 5.0


# ------------------------------------------------------------------ onStale


STALE = """\
jobs:
  - name: nightly
    command: "true"
    schedule: "*/30 * * * *"
    onStale: {maxSuccessAge: 1h}
"""


@pytest.mark.asyncio
async def test_a_job_without_success_for_max_success_age_is_stale_once(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(STALE)
    node.behaviour["nightly"] = (1.0, 1)  # every run fails
    await node.clock.advance(3600 + 1)  # an hour since it was applied, no success
    assert node.sink.stale == [("nightly", None, 3601.0)]
    assert node.metric("cronstable_job_stale", "nightly") == 1
    shown = node.watch.view(node.jobs["nightly"])
    assert shown is not None and shown.stale is not None
    assert (shown.stale.last_success, shown.stale.max_success_age) == (None, 3600.0)
    assert shown.stale.since == T0 + timedelta(hours=1)
    assert shown.stale.reported_at == shown.last_stale is not None
    await node.clock.advance(3600)
    assert len(node.sink.stale) == 1  # once, until a success grows old again
    node.behaviour["nightly"] = (1.0, 0)
    await node.clock.advance(30 * 60)
    assert node.metric("cronstable_job_stale", "nightly") == 0
    shown = node.watch.view(node.jobs["nightly"])
    assert shown is not None and shown.stale is None and shown.last_stale is not None
    succeeded = node.history.last_success_at("nightly")
    assert succeeded is not None
    node.behaviour["nightly"] = (1.0, 1)
    await node.clock.advance(3600 + 60)
    assert node.sink.stale[1][:2] == ("nightly", succeeded)
    assert node.metric("cronstable_job_stale_alerts_total", "nightly") == 2
    age = node.metric("cronstable_job_last_success_age_seconds", "nightly")
    assert age is not None and age > 3600


@pytest.mark.asyncio
async def test_a_pause_holds_off_stale_alerts_and_restarts_the_clock(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(STALE)
    node.behaviour["nightly"] = (1.0, 1)
    node.paused.add("nightly")
    await node.clock.advance(2 * 3600)
    assert node.sink.stale == []
    node.paused.clear()
    await node.clock.advance(30 * 60)
    assert node.sink.stale == []  # judged from the end of the pause
    await node.clock.advance(31 * 60)
    assert len(node.sink.stale) == 1


# ------------------------------------------------------------------ workflows


@pytest.mark.asyncio
async def test_a_workflow_is_judged_as_a_job_and_its_tasks_take_on_stuck(
    cluster: Callable[..., Node],
) -> None:
    node = cluster(
        """        defaults:
          onStuck: {expectedDuration: 5m}
        workflows:
          - name: etl
            schedule: "0 * * * *"
            onStuck: {expectedDuration: 15m}
            onStale: {maxSuccessAge: 30m}
            onLate: {grace: 1m, rateLimit: 0}
            tasks:
              - {name: extract, command: "true"}
              - {name: load, command: "true", dependsOn: [extract]}
        """
    )
    node.behaviour["etl.extract"] = (10 * 60.0, 1)  # 10 min, and it fails
    node.behaviour["etl.load"] = (1.0, 0)
    await node.clock.advance(3600 + 11 * 60)
    # the task ran past its 5 minutes (the file's defaults); the workflow run ended
    # failed after 10 min, within its own 15
    assert [(name, run.basis) for name, run in node.sink.stuck] == [
        ("etl.extract", "expectedDuration")
    ]
    # no success since it was applied (71 min > 30 min): stale, once
    assert [(name, last) for name, last, _ in node.sink.stale] == [("etl", None)]
    assert node.sink.late == []  # the 13:00 fire started its run on time
    flow = node.scheduler.workflows["etl"]
    shown = node.watch.view(flow.job, flow.tasks.values())
    assert shown is not None and shown.stale is not None and shown.late is None
    assert shown.last_stuck == node.sink.stuck[0][1].started_at + timedelta(minutes=5, seconds=1)
    node.gate.reason = "leadership_unknown"
    await node.clock.advance(3600)
    assert [(name, fire) for name, fire, _, _ in node.sink.late] == [
        ("etl", T0 + timedelta(hours=2))
    ]


@pytest.mark.asyncio
async def test_a_workflow_run_going_too_long_is_stuck(cluster: Callable[..., Node]) -> None:
    node = cluster(
        """        workflows:
          - name: etl
            schedule: "0 * * * *"
            onStuck: {expectedDuration: 15m}
            tasks:
              - {name: extract, command: "true"}
              - {name: load, command: "true", dependsOn: [extract]}
        """
    )
    node.behaviour["etl.extract"] = (10 * 60.0, 0)
    node.behaviour["etl.load"] = (10 * 60.0, 0)
    await node.clock.advance(3600 + 14 * 60)
    assert node.sink.stuck == []
    await node.clock.advance(2 * 60)
    [(name, run)] = node.sink.stuck
    assert (name, run.id, run.threshold) == ("etl", "etl@2026-06-01T13:00:00Z", 900.0)
    await node.clock.advance(10 * 60)
    assert len(node.sink.stuck) == 1


# ------------------------------------------------------------------ two nodes, one store


@pytest_asyncio.fixture
async def etcd_store(state_backend: StateBackend, tmp_path: Path) -> AsyncIterator[StateStore]:
    store = state_backend.store(tmp_path / "state")
    await store.check()
    yield store
    await store.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("state_backend", ["etcd"], indirect=True)
async def test_a_late_fire_is_reported_once_across_the_cluster(
    etcd_store: StateStore,
    cluster: Callable[..., Node],  # after the store: the nodes stop before it closes
) -> None:
    text = LATE.replace("* * * * *", "*/2 * * * *")
    leader = cluster(text, "n1", etcd_store)
    other = cluster(text, "n2", etcd_store)
    other.gate.reason = "not_leader"  # it fires nothing, but judges every fire
    await leader.clock.advance(4 * 60 + 40)
    await asyncio.sleep(0.2)  # the start records are written in the background
    assert leader.sink.late == other.sink.late == []  # 12:02 and 12:04 started on n1
    assert await etcd_store.get(late_key("tick", T0 + 2 * MINUTE)) is not None
    leader.gate.reason = "leadership_unknown"  # the leader is cut off: nobody starts them
    for _ in range(6):
        await leader.clock.advance(60)
        await asyncio.sleep(0.05)

    def reported() -> list[datetime]:
        return sorted(fire for node in (leader, other) for _, fire, _, _ in node.sink.late)

    # a round asks the store before it reports (real I/O, while the manual clock runs
    # ahead): one more round on each node judges every fire due by now
    await leader.watch.check()
    await other.watch.check()
    assert reported() == [T0 + 6 * MINUTE, T0 + 8 * MINUTE, T0 + 10 * MINUTE]  # once each
    record = await etcd_store.get(late_key("tick", T0 + 6 * MINUTE))
    assert record is not None and record["state"] == "late"
    # both nodes show the newest late fire, and which of them reported it
    views = [node.watch.view(node.jobs["tick"]) for node in (leader, other)]
    lates = [view.late for view in views if view is not None]
    assert len(lates) == 2 and lates[0] == lates[1] and lates[0] is not None
    assert lates[0].fire == T0 + 10 * MINUTE and lates[0].reported_by in ("n1", "n2")


@pytest.mark.asyncio
@pytest.mark.parametrize("state_backend", ["etcd"], indirect=True)
async def test_late_records_are_swept_once_past_their_time(
    etcd_store: StateStore,
    cluster: Callable[..., Node],  # after the store: the nodes stop before it closes
) -> None:
    node = cluster(LATE, "n1", etcd_store)
    await node.clock.advance(2 * 60)
    await asyncio.sleep(0.2)
    assert await etcd_store.get(late_key("tick", T0 + MINUTE)) is not None
    await node.clock.advance(LATE_KEEP + 3 * 60)
    for _ in range(20):
        if await etcd_store.get(late_key("tick", T0 + MINUTE)) is None:
            break
        await node.clock.advance(60)
        await asyncio.sleep(0.05)
    assert await etcd_store.get(late_key("tick", T0 + MINUTE)) is None


@pytest.mark.asyncio
@pytest.mark.parametrize("state_backend", ["etcd"], indirect=True)
async def test_stale_is_judged_against_the_clusters_last_success_once(
    etcd_store: StateStore,
    cluster: Callable[..., Node],  # after the store: the nodes stop before it closes
) -> None:
    runner = cluster(STALE, "n1", etcd_store)
    watcher = cluster(STALE, "n2", etcd_store)
    watcher.gate.reason = "not_leader"  # it never runs the job: no success of its own
    for _ in range(80):  # 80 min: n1 succeeds every half hour
        await runner.clock.advance(60)
        await asyncio.sleep(0.01)
    assert runner.sink.stale == watcher.sink.stale == []
    runner.behaviour["nightly"] = (1.0, 1)  # from now on every run fails
    for _ in range(100):
        await runner.clock.advance(60)
        await asyncio.sleep(0.01)
    await runner.watch.check()  # every judgement due by now is made (see above)
    await watcher.watch.check()
    reported = runner.sink.stale + watcher.sink.stale
    assert len(reported) == 1, reported
    assert reported[0][1] == runner.history.last_success_at("nightly")
