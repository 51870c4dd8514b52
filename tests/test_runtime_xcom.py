"""Values between the tasks of a workflow run (xcom) in the scheduler, on an injected
clock (the stand-in runs of test_runtime_workflows.py): kept with the run, bounded,
given to the tasks that declare them in ``xcomEnv``, shown in the run's view, put back
with a resumed run, kept within a budget by the history and round-tripped by the
state records.  Real processes and the clients: test_xcom_e2e.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from manual_harness import Harness
from manual_harness import desired as state
from test_runtime_workflows import HOUR

from cronstable import xcom
from cronstable.ports import WORKFLOW_RUN_ENV, FlowRunView, TaskRunView, XcomValue, keep_values
from cronstable.runtime.history import XCOM_KEPT, FlowHistory
from cronstable.state.records import (
    flow_history_record,
    flow_history_runs,
    flow_run_record,
    read_flow_run,
)

ETL = """\
workflows:
  - name: etl
    schedule: "0 * * * *"
    tasks:
      - {name: extract, command: "true"}
      - {name: check, command: "true", dependsOn: [extract]}
      - name: load
        command: "true"
        dependsOn: [check]
        xcomEnv: [extract.rows, extract.path, check.missing]
"""


def going(h: Harness) -> tuple[str, str]:
    """(workflow run id, task) of the task whose run started last."""
    run = h.runs[-1]
    return run.job.environment[WORKFLOW_RUN_ENV], str(run.job.task)


def push(h: Harness, values: dict[str, str]) -> str | None:
    run_id, task = going(h)
    found = h.scheduler.flow_run("etl", run_id)
    assert found is not None
    return h.scheduler.flows.push(found, task, values)


@pytest.mark.asyncio
async def test_values_reach_the_tasks_that_declare_them(harness: Callable[..., Harness]) -> None:
    h = harness(state(ETL))
    h.behaviour["etl.extract"] = [(10.0, 0)]
    await h.clock.advance(3600 + 1)  # extract is running
    assert [r.job.name for r in h.runs] == ["etl.extract"]
    assert push(h, {"rows": "42", "path": "/data"}) is None
    assert push(h, {"rows": "43"}) is None  # the same key again: the later value
    run_id, _ = going(h)
    found = h.scheduler.flow_run("etl", run_id)
    assert found is not None
    assert h.scheduler.flows.pull(found, "extract", "rows") == "43"
    assert h.scheduler.flows.pull(found, "extract", "nope") is None
    assert found.xcom_bytes == xcom.size("rows", "43") + xcom.size("path", "/data")
    await h.clock.advance(60)
    load = next(r for r in h.runs if r.job.name == "etl.load")
    env = load.job.environment
    assert env["CRONSTABLE_XCOM_EXTRACT_ROWS"] == "43"
    assert env["CRONSTABLE_XCOM_EXTRACT_PATH"] == "/data"
    assert "CRONSTABLE_XCOM_CHECK_MISSING" not in env  # check left none: unset
    check = next(r for r in h.runs if r.job.name == "etl.check")
    assert not any(key.startswith("CRONSTABLE_XCOM_") for key in check.job.environment)
    run = h.last("etl")
    assert run.outcome == "succeeded"
    assert run.xcom == (
        XcomValue("extract", "rows", "43", xcom.size("rows", "43")),
        XcomValue("extract", "path", "/data", xcom.size("path", "/data")),
    )
    assert h.scheduler.flows.push(found, "extract", {"late": "x"}) is not None  # ended


@pytest.mark.asyncio
async def test_a_runs_values_are_bounded_together(harness: Callable[..., Harness]) -> None:
    h = harness(state(ETL))
    h.behaviour["etl.extract"] = [(10.0, 0)]
    await h.clock.advance(3600 + 1)
    big = "x" * (xcom.MAX_VALUE - 10)
    values = {f"k{n:02d}": big for n in range(16)}  # 16 x 64 KiB: just under 1 MiB
    assert push(h, values) is None
    refused = push(h, {"one-more": big})
    assert refused is not None and "at most 1048576" in refused
    assert push(h, {"k00": "small"}) is None  # replacing a value counts the difference
    assert push(h, {"one-more": big[:1000]}) is None


@pytest.mark.asyncio
async def test_a_resumed_run_keeps_its_values(harness: Callable[..., Harness]) -> None:
    desired = state(ETL)
    h = harness(desired, start=HOUR + timedelta(seconds=30))
    flow = desired.workflows["etl"]

    def task(name: str, task_state: str, **more: object) -> TaskRunView:
        return TaskRunView(
            task=name,
            name=f"etl.{name}",
            state=task_state,  # type: ignore[arg-type]
            depends_on=(),
            run_when="allSucceeded",
            level=0,
            **more,  # type: ignore[arg-type]
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
            task("check", "succeeded", attempts=1),
            task("load", "pending"),
        ),
        xcom=(XcomValue("extract", "rows", "7", 5), XcomValue("extract", "path", None, 9)),
    )
    assert h.scheduler.resume_flow(stored, {}, "lost with the daemon")
    await h.clock.advance(60)
    load = next(r for r in h.runs if r.job.name == "etl.load")
    assert load.job.environment["CRONSTABLE_XCOM_EXTRACT_ROWS"] == "7"
    assert "CRONSTABLE_XCOM_EXTRACT_PATH" not in load.job.environment  # its value was gone
    assert [item.key for item in h.last("etl").xcom] == ["rows"]


def view(number: int, values: tuple[XcomValue, ...]) -> FlowRunView:
    at = HOUR + timedelta(hours=number)
    return FlowRunView(
        id=f"etl@{number}",
        workflow="etl",
        digest="v1:x",
        scheduled_time=at,
        started_at=at,
        kind="fire",
        tasks=(TaskRunView("a", "etl.a", "succeeded", (), "allSucceeded", 0),),
        finished_at=at + timedelta(seconds=5),
        outcome="succeeded",
        xcom=values,
    )


def test_the_history_keeps_the_newest_values_within_its_budget() -> None:
    half = "y" * (XCOM_KEPT // 2 - 10)
    runs = [view(n, (XcomValue("a", "v", half, xcom.size("v", half)),)) for n in range(4)]
    kept = keep_values(runs, XCOM_KEPT)
    assert [run.xcom[0].value is not None for run in kept] == [False, False, True, True]
    assert all(run.xcom[0].size == xcom.size("v", half) for run in kept)  # sizes stay
    history = FlowHistory()
    for run in runs:
        history.flow_finished(run)
    assert [run.xcom[0].value is not None for run in history.finished("etl")] == [
        False,
        False,
        True,
        True,
    ]


def test_the_state_records_keep_the_values() -> None:
    values = (XcomValue("a", "rows", "42", 6), XcomValue("a", "gone", None, 100))
    run = view(1, values)
    record = flow_run_record(run, "n1", run.started_at, {})
    assert record["xcom"] == [
        {"task": "a", "key": "rows", "value": "42", "size": 6},
        {"task": "a", "key": "gone", "value": None, "size": 100},
    ]
    back = read_flow_run(record)
    assert back is not None and back.view.xcom == values
    older = {k: v for k, v in record.items() if k != "xcom"}  # written before values existed
    again = read_flow_run(older)
    assert again is not None and again.view.xcom == ()
    history = flow_history_runs(flow_history_record("etl", [run], "n1", 1 << 20))
    assert history is not None and history[1][0].xcom == values


@pytest.mark.asyncio
async def test_a_tasks_pending_retry_is_its_state(harness: Callable[..., Harness]) -> None:
    h = harness(
        state(
            """\
            workflows:
              - name: etl
                schedule: "0 * * * *"
                tasks:
                  - name: extract
                    command: "false"
                    onFailure: {retry: {maximumRetries: 1, initialDelay: 30}}
            """
        )
    )
    h.behaviour["etl.extract"] = [(1.0, 1), (1.0, 0)]
    await h.clock.advance(3600 + 5)  # the first attempt failed; its retry waits
    pending = h.scheduler.pending_retry("etl.extract")
    assert pending is not None
    assert (pending.attempt, pending.scheduled_time) == (2, HOUR)
    assert pending.due == HOUR + timedelta(seconds=31)
    await h.clock.advance(60)
    assert h.scheduler.pending_retry("etl.extract") is None
    assert h.last("etl").outcome == "succeeded"
