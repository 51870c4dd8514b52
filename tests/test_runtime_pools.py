"""Pools (runtime/pools.py) on a manual clock: the queue's order, poolTimeout, the
bound, withdrawals, a revision changing the slots, and what the views show.

Then the same rules through the real scheduler, with stand-in runs on the same
clock (the manual-clock harness, manual_harness.py): Forbid counts a queued launch as
going, Replace takes it out of the queue, a retry queues again, a stop drops
the queue.  Real processes and the HTTP API are in test_pools_e2e.py.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from manual_harness import Harness

from cronstable.config import DesiredState, MemoryTree, load
from cronstable.ports import Launch, run_id
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.pools import Pools, Ticket

T0 = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)

CONFIG = """\
pools:
  - {name: db, slots: 2}
  - {name: one, slots: 1}
jobs:
  - {name: low, command: "true", schedule: "@reboot", pool: db}
  - {name: high, command: "true", schedule: "@reboot", pool: db, poolPriority: 5}
  - {name: patient, command: "true", schedule: "@reboot", pool: db, poolTimeout: 30s}
  - {name: hasty, command: "true", schedule: "@reboot", pool: db, poolTimeout: 0}
  - {name: free, command: "true", schedule: "@reboot"}
"""


def state(text: str = CONFIG) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


class Table:
    """A Pools on a manual clock, and launches of CONFIG's jobs (each a distinct fire)."""

    def __init__(self, text: str = CONFIG, *, queue_limit: int = 1000) -> None:
        self.state = state(text)
        self.clock = ManualClock(T0)
        self.pools = Pools(self.clock, queue_limit=queue_limit)
        self.pools.configure(self.state.pools)
        self._n = 0

    def launch(self, job: str) -> Launch:
        self._n += 1
        return Launch(self.state.jobs[job], T0 + timedelta(seconds=self._n), 1, "fire")

    def take(self, job: str) -> Ticket:
        ticket = self.pools.take(self.launch(job))
        assert ticket is not None
        return ticket


def outcome(ticket: Ticket) -> str | None:
    return ticket.decided.result() if ticket.decided.done() else None


@pytest.mark.asyncio
async def test_a_job_with_no_pool_takes_no_ticket() -> None:
    t = Table()
    assert t.pools.take(t.launch("free")) is None


@pytest.mark.asyncio
async def test_free_slots_admit_at_once_then_the_queue_waits() -> None:
    t = Table()
    first, second, third = t.take("low"), t.take("low"), t.take("low")
    assert [outcome(x) for x in (first, second, third)] == ["admitted", "admitted", None]
    assert t.pools.queued(third.launch.id) == ("db", 1)
    assert t.pools.queued(first.launch.id) is None  # admitted: not waiting
    t.pools.release(first)
    assert outcome(third) == "admitted"
    view = t.pools.views()[0]
    assert (view.name, view.slots, view.in_use, view.queued, view.admitted) == ("db", 2, 2, 0, 3)


@pytest.mark.asyncio
async def test_the_queue_admits_the_highest_priority_first_then_the_oldest() -> None:
    t = Table()
    holders = [t.take("low"), t.take("low")]
    waiting: list[Ticket] = []
    for job in ("low", "high", "low", "high", "low"):
        waiting.append(t.take(job))
        await t.clock.advance(1)
    positions = [t.pools.queued(x.launch.id) for x in waiting]
    # the highs before the lows, each kind in the order it came
    assert positions == [("db", 3), ("db", 1), ("db", 4), ("db", 2), ("db", 5)]
    admitted: list[Ticket] = []
    pool = holders[0].pool
    while any(outcome(x) is None for x in waiting):
        before = {id(x) for x in waiting if outcome(x) == "admitted"}
        t.pools.release(pool.holders[0])  # the run holding a slot longest ends
        admitted += [x for x in waiting if outcome(x) == "admitted" and id(x) not in before]
    assert [x.launch.job.name for x in admitted] == ["high", "high", "low", "low", "low"]
    assert admitted == [waiting[1], waiting[3], waiting[0], waiting[2], waiting[4]]
    # each waited from its own arrival until its admission, on the injected clock
    assert waiting[1].waited == pytest.approx(4.0)


@pytest.mark.asyncio
async def test_pool_timeout_bounds_the_wait_on_the_injected_clock() -> None:
    t = Table()
    t.take("low"), t.take("low")
    patient = t.take("patient")
    waiter = asyncio.create_task(t.pools.wait(patient))
    await t.clock.advance(29)
    assert not waiter.done() and t.pools.queued(patient.launch.id) == ("db", 1)
    await t.clock.advance(1)
    assert await waiter == "timeout"
    assert t.pools.queued(patient.launch.id) is None
    view = t.pools.views()[0]
    assert (view.queued, view.timeouts) == (0, 1)


@pytest.mark.asyncio
async def test_a_wait_admitted_in_time_is_not_a_timeout() -> None:
    t = Table()
    holder, _ = t.take("low"), t.take("low")
    patient = t.take("patient")
    waiter = asyncio.create_task(t.pools.wait(patient))
    await t.clock.advance(10)
    t.pools.release(holder)
    assert await waiter == "admitted" and patient.waited == pytest.approx(10.0)
    await t.clock.advance(60)
    assert t.pools.views()[0].timeouts == 0


@pytest.mark.asyncio
async def test_a_zero_timeout_does_not_wait() -> None:
    t = Table()
    assert outcome(t.take("hasty")) == "admitted"  # room: admitted at once all the same
    t.take("low")
    hasty = t.take("hasty")
    assert await t.pools.wait(hasty) == "timeout"


@pytest.mark.asyncio
async def test_without_a_timeout_the_wait_lasts_until_admitted() -> None:
    t = Table()
    holder, _ = t.take("low"), t.take("low")
    low = t.take("low")
    waiter = asyncio.create_task(t.pools.wait(low))
    await t.clock.advance(30 * 24 * 3600)
    assert not waiter.done()
    t.pools.release(holder)
    assert await waiter == "admitted"


@pytest.mark.asyncio
async def test_the_queue_is_bounded() -> None:
    t = Table(queue_limit=2)
    t.take("low"), t.take("low")
    queued = [t.take("low"), t.take("low")]
    refused = t.take("high")  # priority does not make room in a full queue
    assert [outcome(x) for x in queued] == [None, None] and outcome(refused) == "full"
    assert await t.pools.wait(refused) == "full"
    assert t.pools.views()[0].refused_full == 1 and t.pools.views()[0].queued == 2


@pytest.mark.asyncio
async def test_a_withdrawn_ticket_leaves_the_queue_and_frees_its_place() -> None:
    t = Table()
    holder, _ = t.take("low"), t.take("low")
    first, second = t.take("low"), t.take("low")
    waiter = asyncio.create_task(t.pools.wait(first))
    first.withdraw()
    assert await waiter == "withdrawn"
    assert t.pools.queued(second.launch.id) == ("db", 1)
    t.pools.release(holder)
    assert outcome(second) == "admitted"
    first.withdraw()  # again: nothing
    t.pools.release(first)  # a run that never started: nothing either
    assert t.pools.views()[0].in_use == 2


@pytest.mark.asyncio
async def test_a_cancelled_wait_withdraws_its_ticket() -> None:
    t = Table()
    t.take("low"), t.take("low")
    low = t.take("low")
    waiter = asyncio.create_task(t.pools.wait(low))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert outcome(low) == "withdrawn" and t.pools.views()[0].queued == 0


@pytest.mark.asyncio
async def test_fewer_slots_stop_nothing_and_admit_again_below_the_new_count() -> None:
    t = Table(CONFIG.replace("{name: db, slots: 2}", "{name: db, slots: 3}"))
    holders = [t.take("low") for _ in range(3)]
    waiting = t.take("low")
    t.pools.configure(state().pools)  # 3 → 2
    view = t.pools.views()[0]
    assert (view.slots, view.in_use, view.queued) == (2, 3, 1)
    t.pools.release(holders[0])
    assert outcome(waiting) is None  # 2 still hold: not below 2
    t.pools.release(holders[1])
    assert outcome(waiting) == "admitted"


@pytest.mark.asyncio
async def test_more_slots_admit_the_queue_at_once() -> None:
    t = Table()
    t.take("low"), t.take("low")
    waiting = [t.take("low"), t.take("high"), t.take("low")]
    t.pools.configure(state(CONFIG.replace("{name: db, slots: 2}", "{name: db, slots: 4}")).pools)
    assert [outcome(x) for x in waiting] == ["admitted", "admitted", None]  # high, then the oldest


@pytest.mark.asyncio
async def test_a_removed_pool_keeps_its_runs_and_queue_under_its_last_count() -> None:
    t = Table()
    holder, _ = t.take("low"), t.take("low")
    waiting = t.take("low")
    gone = CONFIG.replace("  - {name: db, slots: 2}\n", "").replace(", pool: db", "")
    t.pools.configure(state(gone).pools)
    assert [(v.name, v.retired, v.in_use, v.queued) for v in t.pools.views()] == [
        ("one", False, 0, 0),
        ("db", True, 2, 1),
    ]
    t.pools.release(holder)
    assert outcome(waiting) == "admitted"
    for ticket in list(t.pools._retired[0].holders):
        t.pools.release(ticket)
    assert [v.name for v in t.pools.views()] == ["one"]  # gone once nothing holds it


@pytest.mark.asyncio
async def test_a_pool_defined_again_with_another_scope_starts_anew() -> None:
    t = Table()
    old = t.take("low")
    t.pools.configure(state(CONFIG.replace("{name: one, slots: 1}", "{name: one, slots: 1}")).pools)
    assert t.pools.pool("db") is old.pool  # same settings: the same pool
    assert outcome(t.take("low")) == "admitted" and outcome(t.take("low")) is None


@pytest.mark.asyncio
async def test_a_run_going_already_holds_a_slot_over_the_count() -> None:
    t = Table()
    t.take("low"), t.take("low")
    adopted = t.pools.hold(t.launch("low"))
    assert adopted is not None and outcome(adopted) == "admitted"
    assert t.pools.views()[0].in_use == 3
    assert t.pools.hold(t.launch("free")) is None


@pytest.mark.asyncio
async def test_the_view_lists_the_queue_in_order_with_the_oldest_wait() -> None:
    t = Table()
    holders = [t.take("low"), t.take("low")]
    low = t.take("low")
    await t.clock.advance(5)
    high = t.take("high")
    await t.clock.advance(2)
    view = t.pools.views()[0]
    assert view.holders == tuple(h.launch.id for h in holders)
    assert [(w.job, w.priority, w.kind, w.waited) for w in view.waiting] == [
        ("high", 5, "fire", 2.0),
        ("low", 0, "fire", 7.0),
    ]
    assert view.oldest_wait == 7.0 and view.waiting[1].since == T0
    assert t.pools.withdraw_all() == 2 and outcome(low) == outcome(high) == "withdrawn"
    assert t.pools.views()[0].oldest_wait is None


# ------------------------------------------------------------ through the scheduler

SCHEDULED = """\
pools:
  - {name: p, slots: 1}
jobs:
  - {name: hold, command: "true", schedule: "@reboot", pool: p}
  - name: every
    command: "true"
    schedule: "*/10 * * * * * *"
    pool: p
    concurrencyPolicy: POLICY
    poolTimeout: TIMEOUT
"""


def scheduled(policy: str = "Allow", timeout: str = "''") -> DesiredState:
    return state(SCHEDULED.replace("POLICY", policy).replace("TIMEOUT", timeout))


def start(h: Harness, desired: DesiredState) -> None:
    h.scheduler.pools.configure(desired.pools)


@pytest.mark.asyncio
async def test_forbid_counts_a_queued_launch_as_going(harness: Callable[..., Harness]) -> None:
    desired = scheduled("Forbid")
    h = harness(dict(desired.jobs))
    h.behaviour["hold"] = (100.0, 0)
    start(h, desired)
    await h.clock.advance(0)  # @reboot: hold takes the one slot for 100 s
    await h.clock.advance(35)
    # the fire at +10 s waits in the queue; those at +20 and +30 find it going: Forbid
    assert h.scheduler.queued(run_id("every", T0 + timedelta(seconds=10), 1)) == ("p", 1)
    assert [(m.reason, m.scheduled_time) for m in h.heard.missed] == [
        ("forbid", T0 + timedelta(seconds=20)),
        ("forbid", T0 + timedelta(seconds=30)),
    ]
    assert h.scheduler.stats.skipped_forbid == 2
    await h.clock.advance(70)  # hold ends at +100 s: the queued fire runs, alone
    assert h.starts("every") == [T0 + timedelta(seconds=100)]
    assert h.scheduled("every") == [T0 + timedelta(seconds=10)]


@pytest.mark.asyncio
async def test_replace_takes_the_queued_launch_out_of_the_queue(
    harness: Callable[..., Harness],
) -> None:
    desired = scheduled("Replace")
    h = harness(dict(desired.jobs))
    h.behaviour["hold"] = (100.0, 0)
    start(h, desired)
    await h.clock.advance(0)
    await h.clock.advance(35)
    # each fire replaced the one before while it waited: one waits, the last one
    view = h.scheduler.pools.views()[0]
    assert [w.run for w in view.waiting] == [run_id("every", T0 + timedelta(seconds=30), 1)]
    assert h.scheduler.stats.replaced == 2
    await h.clock.advance(70)
    # every fire replaced while it waited never started; the one waiting when hold ended
    # (+90 s) started, and the fire at +100 s replaced it at once
    started = [(r.scheduled, r.started) for r in h.runs if r.job.name == "every" and r.started]
    assert started == [
        (T0 + timedelta(seconds=90), T0 + timedelta(seconds=100)),
        (T0 + timedelta(seconds=100), T0 + timedelta(seconds=100)),
    ]
    assert [r.cancelled for r in h.runs if r.job.name == "every" and r.started] == [True, False]


@pytest.mark.asyncio
async def test_a_queued_launch_past_its_timeout_is_a_missed_fire(
    harness: Callable[..., Harness],
) -> None:
    desired = scheduled("Allow", "15s")
    h = harness(dict(desired.jobs))
    h.behaviour["hold"] = (100.0, 0)
    start(h, desired)
    await h.clock.advance(0)
    await h.clock.advance(30)
    # the fire at +10 s gave up at +25 s; those at +20 s and +30 s wait
    assert [(m.job, m.reason, m.scheduled_time) for m in h.heard.missed] == [
        ("every", "pool_timeout", T0 + timedelta(seconds=10))
    ]
    assert h.scheduler.stats.skipped_pool_timeout == 1
    assert h.scheduler.pools.views()[0].queued == 2
    assert h.starts("every") == []


@pytest.mark.asyncio
async def test_a_retry_queues_again(harness: Callable[..., Harness]) -> None:
    text = """\
    pools:
      - {name: p, slots: 1}
    jobs:
      - name: flaky
        command: "false"
        schedule: "@reboot"
        pool: p
        onFailure: {retry: {maximumRetries: 1, initialDelay: 5}}
      - {name: other, command: "true", schedule: "0 0 1 1 *", pool: p}
    """
    desired = state(text)
    h = harness(dict(desired.jobs))
    h.behaviour["flaky"] = (2.0, 1)
    h.behaviour["other"] = (20.0, 0)
    start(h, desired)
    await h.clock.advance(1)
    h.scheduler.start_now("other", h.clock.now())  # waits: flaky holds the slot
    await h.clock.advance(1.5)  # flaky failed at +2 s; other holds the slot until +22 s
    await h.clock.advance(5)  # the retry came due at +7 s: it waits in the queue
    view = h.scheduler.pools.views()[0]
    assert [(w.job, w.kind) for w in view.waiting] == [("flaky", "retry")]
    await h.clock.advance(20)
    assert [(r.job.name, r.attempt, r.started) for r in h.runs] == [
        ("flaky", 1, T0),
        ("other", 1, T0 + timedelta(seconds=2)),
        ("flaky", 2, T0 + timedelta(seconds=22)),
    ]


@pytest.mark.asyncio
async def test_a_stop_drops_the_queue(harness: Callable[..., Harness]) -> None:
    desired = scheduled("Allow")
    h = harness(dict(desired.jobs))
    h.behaviour["hold"] = (100.0, 0)
    start(h, desired)
    await h.clock.advance(0)
    await h.clock.advance(25)
    assert h.scheduler.pools.views()[0].queued == 2
    h.scheduler.stop()
    await h.clock.advance(0)
    assert h.scheduler.pools.views()[0].queued == 0
    await h.clock.advance(200)
    assert h.starts("every") == [] and h.heard.missed == []


@pytest.mark.asyncio
async def test_a_replacing_launch_takes_the_place_of_the_one_it_replaced(
    harness: Callable[..., Harness],
) -> None:
    text = SCHEDULED.replace("POLICY", "Replace").replace("TIMEOUT", "''")
    text += '  - {name: other, command: "true", schedule: "0 0 1 1 *", pool: p}\n'
    desired = state(text)
    h = harness(dict(desired.jobs))
    h.behaviour["hold"] = (35.0, 0)
    start(h, desired)
    await h.clock.advance(15)  # every's fire at +10 s waits; then other comes
    h.scheduler.start_now("other", h.clock.now())
    await h.clock.advance(10)  # the fire at +20 s replaced the one at +10 s, in its place
    assert [w.job for w in h.scheduler.pools.views()[0].waiting] == ["every", "other"]
    await h.clock.advance(12)  # hold ends at +35 s
    started = sorted((r.started, r.job.name, r.scheduled) for r in h.runs if r.started)
    assert [(name, scheduled, at) for at, name, scheduled in started][1:] == [
        ("every", T0 + timedelta(seconds=30), T0 + timedelta(seconds=35)),
        ("other", T0 + timedelta(seconds=15), T0 + timedelta(seconds=36)),
    ]
