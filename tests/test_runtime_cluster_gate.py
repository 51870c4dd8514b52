"""The scheduler's cluster gate: asked before every fire and retry, released before the drain."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest
from manual_harness import T0, Harness, jobs

from cronstable.config.desired import Job

TABLE = """\
jobs:
  - name: lead
    command: "false"
    schedule: "*/10 * * * * * *"
    clusterPolicy: Leader
    onFailure: {retry: {maximumRetries: 1, initialDelay: 3, maximumDelay: 3}}
  - {name: every, command: "true", schedule: "*/10 * * * * * *"}
"""


class Gate:
    def __init__(self) -> None:
        self.leader = True
        self.released_with_running: list[int] = []
        self.scheduler_running: Callable[[], int] = lambda: 0

    def allows(self, job: Job) -> str | None:
        if job.config.cluster_policy == "EveryNode" or self.leader:
            return None
        return "not_leader"

    async def release(self) -> None:
        self.released_with_running.append(self.scheduler_running())


@pytest.mark.asyncio
async def test_the_gate_holds_back_fires_and_retries_and_counts_them(
    harness: Callable[..., Harness],
) -> None:
    gate = Gate()
    h = harness(jobs(TABLE), gate=gate)
    h.behaviour["lead"] = (1.0, 1)
    await h.clock.advance(10.5)  # lead fires at +10 and fails; its retry is due at +14
    assert h.scheduled("lead") == [T0 + timedelta(seconds=10)]
    gate.leader = False  # leadership lost before the retry
    await h.clock.advance(20)
    assert h.scheduled("lead") == [T0 + timedelta(seconds=10)]  # neither retry nor fires
    assert len(h.scheduled("every")) == 3
    assert h.scheduler.stats.skipped_cluster == {"not_leader": 3}  # one retry, two fires
    gate.leader = True
    await h.clock.advance(10)
    assert h.scheduled("lead")[-1] == T0 + timedelta(seconds=40)


@pytest.mark.asyncio
async def test_leadership_is_released_before_the_drain(
    harness: Callable[..., Harness],
) -> None:
    gate = Gate()
    h = harness(
        jobs('jobs: [{name: long, command: "true", schedule: "*/10 * * * * * *"}]'), gate=gate
    )
    h.behaviour["long"] = (100.0, 0)
    gate.scheduler_running = h.scheduler.running_total
    await h.clock.advance(11)
    assert h.scheduler.running_total() == 1
    h.scheduler.stop()
    for _ in range(20):
        await asyncio.sleep(0)
    # released while the long run still goes, not after it
    assert gate.released_with_running == [1]
