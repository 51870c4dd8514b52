"""The stored form of workflow runs (cronstable.state.records): written, read back the same."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronstable.ports import FlowRunView, TaskRunView
from cronstable.state.base import decode, encode
from cronstable.state.records import (
    flow_history_record,
    flow_history_runs,
    flow_run_record,
    read_flow_run,
)

T = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)


def view(**changes: object) -> FlowRunView:
    tasks = (
        TaskRunView(
            task="extract",
            name="etl.extract",
            state="succeeded",
            depends_on=(),
            run_when="allSucceeded",
            level=0,
            attempts=2,
            run_id="etl.extract@2026-05-01T03:00:00Z#2",
            started_at=T,
            finished_at=T + timedelta(seconds=5),
            exit_code=0,
        ),
        TaskRunView(
            task="load",
            name="etl.load",
            state="running",
            depends_on=("extract",),
            run_when="allDone",
            level=1,
            attempts=1,
            run_id="etl.load@2026-05-01T03:00:00Z#1",
            started_at=T + timedelta(seconds=6),
            pid=4242,
            retry_at=None,
        ),
    )
    base = FlowRunView(
        id="etl@2026-05-01T03:00:00Z",
        workflow="etl",
        digest="v1:workflow:abc",
        scheduled_time=T,
        started_at=T,
        kind="fire",
        tasks=tasks,
    )
    return FlowRunView(**{**{f: getattr(base, f) for f in base.__slots__}, **changes})  # type: ignore[arg-type]


def test_a_run_reads_back_as_written() -> None:
    written = flow_run_record(view(), "n1", T + timedelta(seconds=7), {"load": (4242, 99, "b")})
    again = decode(encode(written))
    assert again is not None
    stored = read_flow_run(again)
    assert stored is not None
    assert (stored.node, stored.beat) == ("n1", T + timedelta(seconds=7))
    assert stored.processes == {"load": (4242, 99, "b")}
    got, want = stored.view, view()
    assert (got.id, got.workflow, got.digest, got.kind) == (
        want.id,
        want.workflow,
        want.digest,
        "fire",
    )
    assert [(t.task, t.state, t.attempts, t.run_id, t.pid) for t in got.tasks] == [
        (t.task, t.state, t.attempts, t.run_id, t.pid) for t in want.tasks
    ]
    assert got.tasks[0].finished_at == T + timedelta(seconds=5)


def test_what_is_not_a_run_reads_as_none() -> None:
    assert read_flow_run({"tasks": []}) is None
    record = flow_run_record(view(), "n1", T, {})
    record["tasks"]["load"]["state"] = "exploded"
    assert read_flow_run(record) is None
    assert read_flow_run(None) is None


def test_the_history_keeps_finished_runs_within_its_limit() -> None:
    done = [
        view(id=f"etl@{i}", finished_at=T + timedelta(hours=i), outcome="succeeded")
        for i in range(1, 30)
    ]
    record = flow_history_record("etl", done, "n1", 8 * 1024)
    read = flow_history_runs(decode(encode(record)) or {})
    assert read is not None
    workflow, runs = read
    assert workflow == "etl" and 1 <= len(runs) < len(done)
    assert runs[-1].id == "etl@29"  # the newest kept


def test_a_task_waiting_in_its_pool_reads_back_so() -> None:
    base = view()
    waiting = TaskRunView(
        task="tb",
        name="etl.tb",
        state="running",
        depends_on=("extract",),
        run_when="allSucceeded",
        level=1,
        attempts=1,
        run_id="etl.tb@2026-05-01T03:00:00Z#1",
        queued="warehouse-db",
    )
    written = flow_run_record(view(tasks=(*base.tasks, waiting)), "n1", T, {})
    assert written["tasks"]["tb"]["queuedIn"] == "warehouse-db"
    stored = read_flow_run(decode(encode(written)))
    assert stored is not None
    assert [(t.task, t.queued) for t in stored.view.tasks] == [
        ("extract", None),
        ("load", None),
        ("tb", "warehouse-db"),
    ]
