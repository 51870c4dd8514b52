"""concurrencyPolicy's one decision (runtime/concurrency.py), on a job's own records.

The scheduler asks it for a fire, a retry and a start on request alike (the
scheduler tests cover each way through the real scheduler); here, what it answers
for each policy and what Replace does to the runs going.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from manual_harness import StandInRun, jobs

from cronstable.ports import Launch
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.concurrency import admit, replace, runs_going
from cronstable.runtime.table import JobSlot, LiveRun

T0 = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def slot_of(policy: str, going: int, clock: ManualClock) -> JobSlot:
    text = f"""
    jobs:
      - name: j
        command: "true"
        schedule: "* * * * *"
        concurrencyPolicy: {policy}
    """
    job = jobs(text)["j"]
    slot = JobSlot(job=job, order=0, cursor=T0)
    for attempt in range(1, going + 1):
        run = StandInRun(clock, job, T0, attempt, 60.0, 0)
        slot.running.append(LiveRun(run, Launch(job, T0, attempt, "fire"), None))
    return slot


@pytest.mark.asyncio
@pytest.mark.parametrize("policy", ["Allow", "Forbid", "Replace"])
async def test_with_no_run_going_every_policy_starts_at_once(policy: str) -> None:
    room = admit(slot_of(policy, 0, ManualClock(T0)))
    assert (room.going, room.forbidden, room.replaced, room.waits) == (0, False, 0, ())


@pytest.mark.asyncio
async def test_allow_starts_beside_the_runs_going() -> None:
    slot = slot_of("Allow", 2, ManualClock(T0))
    room = admit(slot)
    assert (room.going, room.forbidden, room.replaced, room.waits) == (2, False, 0, ())
    assert not any(live.replaced or live.run.cancelled for live in slot.running)  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_forbid_refuses_and_leaves_the_runs_going_alone() -> None:
    slot = slot_of("Forbid", 1, ManualClock(T0))
    room = admit(slot)
    assert (room.going, room.forbidden, room.replaced, room.waits) == (1, True, 0, ())
    assert not slot.running[0].replaced and not slot.running[0].run.cancelled  # type: ignore[attr-defined]
    assert runs_going(room.going) == "1 run" and runs_going(3) == "3 runs"


@pytest.mark.asyncio
async def test_replace_stops_the_runs_going_and_the_new_one_waits_for_them() -> None:
    slot = slot_of("Replace", 2, ManualClock(T0))
    room = admit(slot)
    assert (room.going, room.forbidden, room.replaced) == (2, False, 2)
    assert all(live.replaced for live in slot.running)
    assert {id(w) for w in room.waits} == {id(live.stopping) for live in slot.running}
    await asyncio.gather(*room.waits)
    assert all(live.run.cancelled for live in slot.running)  # type: ignore[attr-defined]
    # runs a Replace is stopping already do not count again: nothing more to stop
    again = admit(slot)
    assert (again.going, again.replaced, again.waits) == (0, 0, ())


@pytest.mark.asyncio
async def test_a_replacement_waits_for_every_run_of_the_job_still_dying() -> None:
    clock = ManualClock(T0)
    slot = slot_of("Replace", 1, clock)
    first = admit(slot)
    job = slot.job
    newer = LiveRun(StandInRun(clock, job, T0, 1, 60.0, 0), Launch(job, T0, 1, "fire"), None)
    slot.running.append(newer)  # the replacement, going while the first still dies
    second = admit(slot)
    assert second.replaced == 1 and newer.replaced
    assert len(second.waits) == 2 and first.waits[0] in second.waits
    await asyncio.gather(*second.waits)


@pytest.mark.asyncio
async def test_another_nodes_replace_stops_the_runs_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    slot = slot_of("Allow", 1, ManualClock(T0))
    with caplog.at_level("INFO", logger="cronstable.runtime.scheduler"):
        waits = replace(slot, slot.active(), "replaced by node n2")
    await asyncio.gather(*waits)
    assert slot.running[0].replaced and slot.running[0].run.cancelled  # type: ignore[attr-defined]
    assert any("(replaced by node n2)" in message for message in caplog.messages)
