"""Runs on request (start, cancel), the run history and the per-job metrics, with real processes."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from heard_reports import HeardReports

from cronstable.config import MemoryTree, load
from cronstable.metrics import DaemonMetrics
from cronstable.ports import RunStart, run_id
from cronstable.runtime.clock import SystemClock
from cronstable.runtime.daemon import ProcessSpawner
from cronstable.runtime.history import OUTPUT_TAIL, RunHistory
from cronstable.runtime.run_metrics import RunMetrics
from cronstable.runtime.scheduler import Scheduler, StartRefused

JOBS = """\
jobs:
  - name: quick
    command: echo hello; echo oops >&2
    schedule: "@yearly"
    enabled: false
    failsWhen: {producesStderr: false}
    captureStdout: true
  - name: slow
    command: sleep 30
    schedule: "@yearly"
    concurrencyPolicy: Forbid
    killTimeout: 1
    onFailure:
      retry: {maximumRetries: 3, initialDelay: 60}
  - name: loud
    command: head -c 200000 /dev/zero | tr '\\0' x
    schedule: "@yearly"
    saveLimit: 1000000
    captureStdout: true
"""


class Rig:
    def __init__(self) -> None:
        state = load(MemoryTree({"c.yaml": textwrap.dedent(JOBS).encode()}), "c.yaml")
        self.heard = HeardReports()
        self.history = RunHistory(per_job=3)
        self.metrics = DaemonMetrics()
        self.run_metrics = RunMetrics(self.metrics.registry, lambda: self.scheduler)
        self.scheduler = Scheduler(
            SystemClock(),
            ProcessSpawner(None),
            run_listeners=[self.history, self.run_metrics],
            report_listeners=[self.heard],
        )
        self.scheduler.replace_jobs(state.jobs)

    async def finished(self, job: str, count: int) -> None:
        async with asyncio.timeout(20):
            while len(self.history.finished(job)) < count:
                await asyncio.sleep(0.02)


@pytest_asyncio.fixture
async def rig() -> AsyncIterator[Rig]:
    r = Rig()
    loop = asyncio.create_task(r.scheduler.run())
    yield r
    await r.scheduler.cancel_running()
    r.scheduler.stop()
    await loop


@pytest.mark.asyncio
async def test_a_manual_start_runs_a_disabled_job_and_is_recorded(rig: Rig) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ident = rig.scheduler.start_now("quick", when)
    assert ident == "quick@2026-01-02T03:04:05Z#1" == run_id("quick", when, 1)
    await rig.finished("quick", 1)
    [run] = rig.history.finished("quick")
    assert (run.start.id, run.outcome, run.exit_code) == (ident, "succeeded", 0)
    assert run.start.manual and run.stdout == "hello" and run.stderr == "oops"
    text = rig.metrics.render().decode()
    assert 'cronstable_job_runs_total{job="quick",outcome="succeeded"} 1.0' in text
    assert 'cronstable_job_last_success_timestamp_seconds{job="quick"}' in text
    assert 'cronstable_job_last_success_timestamp_seconds{job="slow"}' not in text


@pytest.mark.asyncio
async def test_forbid_refuses_a_second_start_and_cancel_ends_the_run_unreported(rig: Rig) -> None:
    first = rig.scheduler.start_now("slow", datetime.now(UTC))
    async with asyncio.timeout(10):
        while not rig.history.running("slow"):
            await asyncio.sleep(0.02)
    with pytest.raises(StartRefused, match="concurrencyPolicy is Forbid"):
        rig.scheduler.start_now("slow", datetime.now(UTC))
    assert 'cronstable_job_running{job="slow"} 1.0' in rig.metrics.render().decode()
    assert rig.scheduler.cancel_runs("slow", run="slow@nope#1") == []
    assert rig.scheduler.cancel_runs("slow") == [first]
    await rig.finished("slow", 1)
    [run] = rig.history.finished("slow")
    assert run.outcome == "cancelled"
    assert rig.heard.moments == []  # a cancelled run is not reported, so not retried either
    assert not rig.scheduler.retry_pending("slow")
    with pytest.raises(KeyError):
        rig.scheduler.start_now("nope", datetime.now(UTC))


@pytest.mark.asyncio
async def test_history_keeps_the_last_runs_and_the_tail_of_big_output(rig: Rig) -> None:
    for second in range(4):
        rig.scheduler.start_now("loud", datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC))
        await rig.finished("loud", min(second + 1, 3))
        await asyncio.sleep(0.05)
    async with asyncio.timeout(20):
        while rig.history.finished("loud")[-1].start.scheduled_time.second != 3:
            await asyncio.sleep(0.02)
    runs = rig.history.finished("loud")
    assert [r.start.scheduled_time.second for r in runs] == [1, 2, 3]
    assert runs[-1].stdout == "x" * OUTPUT_TAIL
    assert runs[-1].stdout_dropped == 200_000 - OUTPUT_TAIL
    rig.history.forget(["loud"])
    rig.run_metrics.forget(["loud"])
    assert rig.history.finished("loud") == []
    text = rig.metrics.render().decode()
    assert 'cronstable_job_runs_total{job="loud"' not in text
    assert 'cronstable_job_run_duration_seconds_count{job="loud"' not in text


@pytest.mark.asyncio
async def test_a_lost_run_counts_in_runs_total_but_not_in_the_duration_histogram(
    rig: Rig,
) -> None:
    rig.scheduler.start_now("quick", datetime.now(UTC))
    await rig.finished("quick", 1)
    # a run of another node, found lost an hour after it started: its end is unknown
    started = datetime.now(UTC) - timedelta(hours=1)
    lost = RunStart(run_id("slow", started, 1), "slow", started, 1, started, None, False)
    assert rig.scheduler.report_lost("slow", lost, "lost: node n9 died")
    [run] = rig.history.finished("slow")
    assert run.outcome == "lost" and run.duration >= 3600
    text = rig.metrics.render().decode()
    assert 'cronstable_job_runs_total{job="slow",outcome="lost"} 1.0' in text
    assert 'cronstable_job_run_duration_seconds_count{job="quick"} 1.0' in text
    assert 'cronstable_job_run_duration_seconds_count{job="slow"}' not in text
    assert 'cronstable_job_run_duration_seconds_bucket{job="slow"' not in text
