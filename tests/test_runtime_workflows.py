"""Workflow runs in the scheduler, on an injected clock.

Runs are stand-ins driven by the manual clock (each task's duration and exit code
set per task); the scheduler, the workflow runs and the DAG core are the real ones.
Real processes: tests/test_workflows_e2e.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from manual_harness import T0, Harness
from manual_harness import desired as state

from cronstable.config import DesiredState
from cronstable.config.desired import Job
from cronstable.ports import FlowRunView, TaskRunView
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.jitter import offset as jitter_offset
from cronstable.runtime.scheduler import StartRefused
from cronstable.state.pauses import PauseBook, PauseGate

ETL = """\
workflows:
  - name: etl
    schedule: "0 * * * *"
    tasks:
      - {name: extract, command: "true"}
      - {name: ta, command: "true", dependsOn: [extract]}
      - {name: tb, command: "true", dependsOn: [extract]}
      - {name: load, command: "true", dependsOn: [ta, tb]}
"""
HOUR = T0 + timedelta(hours=1)


@pytest.mark.asyncio
async def test_ready_tasks_start_at_once_in_parallel(harness: Callable[..., Harness]) -> None:
    h = harness(state(ETL))
    h.behaviour["etl.ta"] = [(5.0, 0)]
    h.behaviour["etl.tb"] = [(2.0, 0)]
    assert h.scheduler.next_fire("etl") == HOUR
    await h.clock.advance(3600 + 60)
    assert h.started("etl.extract") == [HOUR]
    after = HOUR + timedelta(seconds=1)
    assert h.started("etl.ta") == [after] and h.started("etl.tb") == [after]
    assert h.started("etl.load") == [after + timedelta(seconds=5)]  # after the slower one
    run = h.last("etl")
    assert run.id == "etl@2026-06-01T13:00:00Z" and run.outcome == "succeeded"
    assert h.states("etl") == dict.fromkeys(("extract", "ta", "tb", "load"), "succeeded")
    assert [t.level for t in run.tasks] == [0, 1, 1, 2]
    assert run.task("load").run_id == "etl.load@2026-06-01T13:00:00Z#1"
    # per task and per workflow reports
    assert ("etl.load", "success", 1) in h.heard.moments
    assert ("etl", "success", 1) in h.heard.moments
    events = [event for event, _ in h.flows.events]
    assert events[0] == "started" and events[-1] == "finished"
    # the same fire index and gate as jobs: the next fire is an hour later
    assert h.scheduler.next_fire("etl") == HOUR + timedelta(hours=1)


@pytest.mark.asyncio
async def test_retries_finish_before_dependents_decide(harness: Callable[..., Harness]) -> None:
    h = harness(
        state(
            """\
            workflows:
              - name: w
                schedule: "0 * * * *"
                tasks:
                  - name: flaky
                    command: "true"
                    onFailure: {retry: {maximumRetries: 2, initialDelay: 10}}
                  - {name: next, command: "true", dependsOn: [flaky]}
            """
        )
    )
    h.behaviour["w.flaky"] = [(1.0, 1), (1.0, 1), (1.0, 0)]
    await h.clock.advance(3600 + 1.5)
    view = h.scheduler.flow_slot("w").runs[0]  # type: ignore[union-attr]
    flaky = view.tasks["flaky"]
    assert flaky.state == "running" and flaky.retry_at == HOUR + timedelta(seconds=11)
    await h.clock.advance(120)
    assert h.started("w.flaky") == [
        HOUR,
        HOUR + timedelta(seconds=11),
        HOUR + timedelta(seconds=32),  # back-off doubles
    ]
    assert h.started("w.next") == [HOUR + timedelta(seconds=33)]
    assert h.states("w") == {"flaky": "succeeded", "next": "succeeded"}
    assert h.last("w").task("flaky").attempts == 3
    assert [m for m in h.heard.moments if m[0] == "w.flaky"] == [
        ("w.flaky", "failure", 1),
        ("w.flaky", "failure", 2),
        ("w.flaky", "success", 3),
    ]
    assert h.last("w").outcome == "succeeded"


SKIPS = """\
workflows:
  - name: s
    schedule: "0 * * * *"
    tasks:
      - {name: a, command: "false"}
      - {name: ok, command: "true"}
      - {name: b, command: "true", dependsOn: [a]}
      - {name: c, command: "true", dependsOn: [b], runWhen: allDone}
      - {name: d, command: "true", dependsOn: [a, ok], runWhen: anyFailed}
      - {name: e, command: "true", dependsOn: [a], runWhen: allFailed}
      - {name: f, command: "true", dependsOn: [ok], runWhen: allFailed}
      - {name: g, command: "true", dependsOn: [f]}
"""


@pytest.mark.asyncio
async def test_run_when_and_skip_propagation(harness: Callable[..., Harness]) -> None:
    h = harness(state(SKIPS))
    h.behaviour["s.a"] = [(1.0, 3)]
    await h.clock.advance(3600 + 30)
    assert h.states("s") == {
        "a": "failed",
        "ok": "succeeded",
        "b": "skipped",
        "c": "succeeded",
        "d": "succeeded",
        "e": "succeeded",
        "f": "skipped",
        "g": "skipped",
    }
    assert not h.started("s.b") and not h.started("s.g")
    run = h.last("s")
    assert run.outcome == "failed"
    assert run.task("a").fail_reason == "exit 3"
    [(job, record, moments)] = [r for r in h.heard.records if r[0].name == "s"]
    assert moments == ("failure", "permanent_failure")
    assert record.fail_reason == "task a failed (exit 3)"
    assert record.stdout is not None and "b: skipped" in record.stdout
    assert job.config.command == "workflow s: a, ok → b, d, e, f → c, g"


@pytest.mark.asyncio
async def test_cancel_a_run(harness: Callable[..., Harness]) -> None:
    h = harness(state(ETL))
    h.behaviour["etl.ta"] = [(600.0, 0)]
    await h.clock.advance(3600 + 10)
    (run,) = h.scheduler.flow_slot("etl").runs  # type: ignore[union-attr]
    assert h.scheduler.cancel_flow("etl", "nope") == []
    assert h.scheduler.cancel_flow("etl", run.id) == [run.id]
    await h.clock.advance(5)
    assert h.states("etl") == {
        "extract": "succeeded",
        "ta": "cancelled",
        "tb": "succeeded",
        "load": "cancelled",
    }
    assert h.last("etl").outcome == "cancelled" and h.last("etl").cancelled
    assert not [m for m in h.heard.moments if m[0] == "etl"]  # a cancelled run reports nothing
    assert h.scheduler.cancel_flow("etl") == []


@pytest.mark.asyncio
async def test_cancelling_one_task_lets_its_dependents_decide(
    harness: Callable[..., Harness],
) -> None:
    h = harness(
        state(
            """\
            workflows:
              - name: w
                schedule: "0 * * * *"
                tasks:
                  - {name: long, command: "true"}
                  - {name: after, command: "true", dependsOn: [long], runWhen: allDone}
            """
        )
    )
    h.behaviour["w.long"] = [(600.0, 0)]
    await h.clock.advance(3600 + 10)
    assert h.scheduler.cancel_runs("w.long") == ["w.long@2026-06-01T13:00:00Z#1"]
    await h.clock.advance(5)
    assert h.states("w") == {"long": "cancelled", "after": "succeeded"}
    assert h.last("w").outcome == "cancelled"
    with pytest.raises(StartRefused, match="start workflow 'w' instead"):
        h.scheduler.start_now("w.long", h.clock.now())


@pytest.mark.asyncio
async def test_forbid_skips_a_fire_while_a_run_goes(harness: Callable[..., Harness]) -> None:
    h = harness(
        state(
            """\
            workflows:
              - name: w
                schedule: "*/10 * * * *"
                concurrencyPolicy: Forbid
                tasks: [{name: slow, command: "true"}]
            """
        )
    )
    h.behaviour["w.slow"] = [(900.0, 0)]
    await h.clock.advance(24 * 60)
    assert h.started("w.slow") == [T0 + timedelta(minutes=10)]
    assert [(m.job, m.reason) for m in h.heard.missed] == [("w", "forbid")]
    with pytest.raises(StartRefused, match="concurrencyPolicy is Forbid"):
        h.scheduler.start_flow("w", h.clock.now())
    await h.clock.advance(10 * 60)
    assert h.started("w.slow")[-1] == T0 + timedelta(minutes=30)


@pytest.mark.asyncio
async def test_replace_cancels_the_run_going(harness: Callable[..., Harness]) -> None:
    h = harness(
        state(
            """\
            workflows:
              - name: w
                schedule: "*/10 * * * *"
                concurrencyPolicy: Replace
                tasks: [{name: slow, command: "true"}, {name: b, command: "true",
                         dependsOn: [slow]}]
            """
        )
    )
    h.behaviour["w.slow"] = [(900.0, 0)]
    await h.clock.advance(20 * 60 + 1)
    first, second = [run for event, run in h.flows.events if event == "finished"][:1] + [
        h.scheduler.flow_slot("w").runs[0].last_view  # type: ignore[union-attr]
    ]
    assert first.outcome == "cancelled" and first.task("slow").state == "cancelled"
    assert second is not None and second.task("slow").state == "running"
    assert h.started("w.slow") == [T0 + timedelta(minutes=10), T0 + timedelta(minutes=20)]


@pytest.mark.asyncio
async def test_a_changed_workflow_runs_on_with_its_definition(
    harness: Callable[..., Harness],
) -> None:
    h = harness(state(ETL))
    h.behaviour["etl.extract"] = [(30.0, 0)]
    await h.clock.advance(3600 + 10)
    new = state(
        ETL.replace(
            '{name: load, command: "true", dependsOn: [ta, tb]}',
            '{name: load2, command: "echo new", dependsOn: [ta]}',
        )
    )
    h.scheduler.replace_jobs(new.jobs, new.workflows)
    await h.clock.advance(60)
    assert h.states("etl") == dict.fromkeys(("extract", "ta", "tb", "load"), "succeeded")
    assert [r.job.config.command for r in h.runs if r.job.name == "etl.load"] == ["true"]
    # the next run is of the new definition
    await h.clock.advance(3600)
    assert h.states("etl") == dict.fromkeys(("extract", "ta", "tb", "load2"), "succeeded")


@pytest.mark.asyncio
async def test_a_removed_workflow_starts_nothing_more(harness: Callable[..., Harness]) -> None:
    h = harness(state(ETL))
    h.behaviour["etl.extract"] = [(30.0, 0)]
    await h.clock.advance(3600 + 10)
    h.scheduler.replace_jobs({}, {})
    await h.clock.advance(60)
    assert h.ended("etl.extract") == [HOUR + timedelta(seconds=30)]  # it finished
    assert not h.started("etl.ta")
    assert h.scheduler.flow_slot("etl") is None
    [run] = h.flows.finished()
    assert {t.task: t.state for t in run.tasks} == {
        "extract": "succeeded",
        "ta": "cancelled",
        "tb": "cancelled",
        "load": "cancelled",
    }


@pytest.mark.asyncio
async def test_reboot_catch_up_and_start_on_request(harness: Callable[..., Harness]) -> None:
    h = harness(
        state(
            """\
            workflows:
              - name: boot
                schedule: "@reboot"
                tasks: [{name: t, command: "true"}]
              - name: late
                schedule: "0 12 * * *"
                startingDeadlineSeconds: 600
                enabled: false
                tasks: [{name: t, command: "true"}]
              - name: daily
                schedule: "30 12 * * *"
                startingDeadlineSeconds: 600
                tasks: [{name: t, command: "true"}]
            """
        )
    )
    await h.clock.advance(5)
    assert h.started("boot.t") == [T0]
    # a wall-clock jump over the fire: caught up once, within the deadline
    h.clock.jump(31 * 60)
    await h.clock.advance(1)
    assert len(h.started("daily.t")) == 1
    # a disabled workflow starts on request
    ident = h.scheduler.start_flow("late", h.clock.now())
    await h.clock.advance(5)
    assert h.last("late").id == ident and h.last("late").kind == "manual"
    assert h.last("late").outcome == "succeeded"


class Gate:
    """A cluster gate as the scheduler sees one: this node leads while ``leader``."""

    def __init__(self) -> None:
        self.leader = True

    def allows(self, job: Job) -> str | None:
        if job.config.cluster_policy == "EveryNode" or self.leader:
            return None
        return "not_leader"

    async def release(self) -> None:
        return None


@pytest.mark.asyncio
async def test_cluster_policy_goes_through_the_jobs_gate(harness: Callable[..., Harness]) -> None:
    gate = Gate()
    h = harness(
        state(
            """\
            workflows:
              - name: lead
                schedule: "*/10 * * * *"
                clusterPolicy: Leader
                tasks:
                  - {name: a, command: "true"}
                  - {name: b, command: "true", dependsOn: [a]}
              - name: every
                schedule: "*/10 * * * *"
                tasks: [{name: a, command: "true"}]
            """
        ),
        gate=gate,
    )
    h.behaviour["lead.a"] = [(30.0, 0)]
    await h.clock.advance(10 * 60 + 1)
    assert h.started("lead.a") == [T0 + timedelta(minutes=10)]
    gate.leader = False  # the leadership moves while a runs: b is the new leader's
    await h.clock.advance(60)
    assert not h.started("lead.b")
    assert h.scheduler.flow_slot("lead").runs == []  # type: ignore[union-attr]
    [left] = [view for event, view in h.flows.events if view.detached][-1:]
    assert left.task("a").state == "succeeded" and left.task("b").state == "pending"
    await h.clock.advance(10 * 60)
    assert len(h.started("lead.a")) == 1  # the fire at +20 min was not this node's
    assert len(h.started("every.a")) == 2
    assert h.scheduler.stats.skipped_cluster == {"not_leader": 1}
    # a start on request runs here, whoever leads (as a job's does)
    h.behaviour["lead.a"] = [(1.0, 0)]
    ident = h.scheduler.start_flow("lead", h.clock.now())
    await h.clock.advance(5)
    assert h.last("lead").id == ident and h.last("lead").outcome == "succeeded"


POOLED = """\
pools:
  - {name: db, slots: 1}
workflows:
  - name: etl
    schedule: "0 * * * *"
    tasks:
      - {name: extract, command: "true"}
      - {name: ta, command: "true", dependsOn: [extract], pool: db}
      - {name: tb, command: "true", dependsOn: [extract], pool: db, poolTimeout: 100}
      - {name: load, command: "true", dependsOn: [ta, tb], runWhen: allDone}
"""


def pooled(h: Harness, desired: DesiredState) -> None:
    h.scheduler.pools.configure(desired.pools)


@pytest.mark.asyncio
async def test_tasks_sharing_a_pool_of_one_take_turns(harness: Callable[..., Harness]) -> None:
    desired = state(POOLED)
    h = harness(desired)
    pooled(h, desired)
    h.behaviour["etl.ta"] = [(30.0, 0)]
    h.behaviour["etl.tb"] = [(30.0, 0)]
    await h.clock.advance(3600 + 5)  # extract done, ta holds the slot, tb waits
    slot = h.scheduler.flow_slot("etl")
    assert slot is not None
    [run] = slot.runs
    seen = {t.task: t for t in h.scheduler.flows.view(run).tasks}
    assert (seen["ta"].state, seen["ta"].queued) == ("running", None)
    assert (seen["tb"].state, seen["tb"].queued, seen["tb"].pid) == ("running", "db", None)
    assert not h.started("etl.tb")
    await h.clock.advance(120)
    assert h.states("etl") == dict.fromkeys(("extract", "ta", "tb", "load"), "succeeded")
    [ta_end], [tb_start] = h.ended("etl.ta"), h.started("etl.tb")
    assert tb_start >= ta_end
    assert all(t.queued is None for t in h.last("etl").tasks)


@pytest.mark.asyncio
async def test_a_task_past_its_pool_timeout_fails_and_is_reported_missed(
    harness: Callable[..., Harness],
) -> None:
    desired = state(POOLED)
    h = harness(desired)
    pooled(h, desired)
    h.behaviour["etl.ta"] = [(300.0, 0)]  # holds the slot past tb's poolTimeout
    await h.clock.advance(3600 + 400)
    states = h.states("etl")
    assert states == {
        "extract": "succeeded",
        "ta": "succeeded",
        "tb": "failed",
        "load": "succeeded",
    }
    [tb] = [t for t in h.last("etl").tasks if t.task == "tb"]
    assert tb.fail_reason == "not started: pool_timeout"
    assert not h.started("etl.tb")
    assert h.last("etl").outcome == "failed"
    assert h.scheduler.stats.skipped_pool_timeout == 1


@pytest.mark.asyncio
async def test_cancelling_a_run_takes_its_waiting_task_out_of_the_queue(
    harness: Callable[..., Harness],
) -> None:
    desired = state(POOLED)
    h = harness(desired)
    pooled(h, desired)
    h.behaviour["etl.ta"] = [(300.0, 0)]
    await h.clock.advance(3600 + 5)
    slot = h.scheduler.flow_slot("etl")
    assert slot is not None
    [run] = slot.runs
    assert h.scheduler.cancel_flow("etl", run.id)
    await h.clock.advance(10)
    assert h.states("etl")["tb"] == "cancelled"
    assert not h.started("etl.tb")
    [view] = h.scheduler.pools.views()
    assert (view.in_use, view.queued) == (0, 0)


@pytest.mark.asyncio
async def test_a_task_stored_waiting_in_its_pool_is_pending_again_after_a_restart(
    harness: Callable[..., Harness],
) -> None:
    """The record a kill -9 left: ta held the slot (its process gone), tb waited in the
    pool's queue and never started: tb queues anew, ta counts as failed."""
    desired = state(POOLED)
    h = harness(desired, start=HOUR + timedelta(seconds=30))
    pooled(h, desired)
    flow = desired.workflows["etl"]

    def task(name: str, state: str, **more: Any) -> TaskRunView:
        return TaskRunView(
            task=name,
            name=f"etl.{name}",
            state=state,  # type: ignore[arg-type]
            depends_on=(),
            run_when="allSucceeded",
            level=0,
            **more,
        )

    stored = FlowRunView(
        id="etl@2026-06-01T13:00:00Z",
        workflow="etl",
        digest=flow.digest,
        scheduled_time=HOUR,
        started_at=HOUR,
        kind="fire",
        tasks=(
            task("extract", "succeeded", attempts=1),
            task("ta", "running", attempts=1),
            task("tb", "running", attempts=1, queued="db"),
            task("load", "pending"),
        ),
    )
    assert h.scheduler.resume_flow(stored, {}, "lost with the daemon")
    await h.clock.advance(60)
    assert h.states("etl") == {
        "extract": "succeeded",
        "ta": "failed",
        "tb": "succeeded",
        "load": "succeeded",
    }
    assert len(h.started("etl.tb")) == 1 and not h.started("etl.ta")


# ------------------------------------------------------------------ pause, jitter, run env

PAUSABLE = """\
workflows:
  - name: etl
    schedule: "*/10 * * * *"
    tasks:
      - {name: a, command: "true"}
      - {name: b, command: "true", dependsOn: [a]}
  - name: other
    schedule: "*/10 * * * *"
    tasks: [{name: a, command: "true"}]
"""


@pytest.mark.asyncio
async def test_a_paused_workflow_starts_no_run_on_its_fires(
    harness: Callable[..., Harness],
) -> None:
    desired = state(PAUSABLE)
    clock_of: list[ManualClock] = []
    book = PauseBook(
        "n1",
        lambda: None,
        lambda: desired.jobs,
        lambda: clock_of[0].now(),
        poll_every=3600,
        workflows=lambda: desired.workflows,
    )
    h = harness(desired, gate=PauseGate(None, book))
    clock_of.append(h.clock)
    h.behaviour["etl.a"] = [(120.0, 0)]
    await h.clock.advance(10 * 60 + 1)
    assert h.started("etl.a") == [T0 + timedelta(minutes=10)]
    # the API pause of a workflow is its own (a job of that name would be apart)
    pause, durable = await book.pause("etl", reason="hold", by="ops", until=None, workflow=True)
    assert not durable and pause.job == "etl"
    assert book.pauses("etl", workflow=True).api == pause
    assert book.pauses("etl").api is None
    await h.clock.advance(30 * 60)
    # the run going finished (b ran after a), no fire started another
    assert h.started("etl.a") == [T0 + timedelta(minutes=10)]
    assert h.started("etl.b") == [T0 + timedelta(minutes=12)]
    assert h.scheduler.stats.skipped_cluster == {"paused": 3}
    assert len(h.started("other.a")) == 4  # the other workflow runs on
    # a start on request still runs
    ident = h.scheduler.start_flow("etl", h.clock.now())
    await h.clock.advance(200)
    assert h.last("etl").id == ident and h.last("etl").outcome == "succeeded"
    assert [p.job for p in book.active()] == ["etl"]
    await book.resume("etl", by="ops", workflow=True)
    await h.clock.advance(10 * 60)
    assert len(h.started("etl.a")) == 3  # the next fire runs; the skipped ones do not
    await book.close()


@pytest.mark.asyncio
async def test_suspend_on_a_workflow_skips_its_fires_as_paused(
    harness: Callable[..., Harness],
) -> None:
    desired = state(
        """\
        workflows:
          - name: etl
            schedule: "*/10 * * * *"
            suspend: {reason: migration}
            tasks: [{name: a, command: "true"}]
        """
    )
    clock_of: list[ManualClock] = []
    book = PauseBook(
        "n1",
        lambda: None,
        lambda: desired.jobs,
        lambda: clock_of[0].now(),
        poll_every=3600,
        workflows=lambda: desired.workflows,
    )
    h = harness(desired, gate=PauseGate(None, book))
    clock_of.append(h.clock)
    book.commit(None, desired)
    held = book.pauses("etl", workflow=True).config
    assert held is not None and (held.source, held.reason, held.since) == (
        "config",
        "migration",
        T0,
    )
    await h.clock.advance(30 * 60 + 1)
    assert h.started("etl.a") == []
    assert h.scheduler.stats.skipped_cluster == {"paused": 3}
    await book.close()


@pytest.mark.asyncio
async def test_jitter_delays_a_workflow_fire_and_its_tasks_keep_the_fire_time(
    harness: Callable[..., Harness],
) -> None:
    h = harness(
        state(
            """\
            workflows:
              - name: etl
                schedule: "0 * * * *"
                jitter: 10m
                tasks:
                  - {name: a, command: "true"}
                  - {name: b, command: "true", dependsOn: [a]}
            """
        )
    )
    planned = HOUR + jitter_offset("etl", HOUR, HOUR + timedelta(hours=1), 600)
    assert HOUR < planned < HOUR + timedelta(minutes=10)
    assert h.scheduler.next_fire("etl") == HOUR
    assert h.scheduler.next_start("etl") == planned
    await h.clock.advance((planned - T0).total_seconds() - 0.5)
    assert h.started("etl.a") == []
    await h.clock.advance(1)
    assert h.started("etl.a") == [planned]
    await h.clock.advance(5)
    run = h.last("etl")
    assert run.id == "etl@2026-06-01T13:00:00Z" and run.scheduled_time == HOUR
    assert [r.scheduled for r in h.runs] == [HOUR, HOUR]  # the tasks stand for the fire
    # each task's process is told its workflow run's id
    assert {r.job.environment.get("CRONSTABLE_WORKFLOW_RUN_ID") for r in h.runs} == {run.id}
