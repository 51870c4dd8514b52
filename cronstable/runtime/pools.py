"""Pools: slots shared by the runs of the jobs that name one, and each pool's queue.

Every launch of a job with ``pool`` (a scheduled fire, a catch-up, a retry, an
@reboot run, a start on request: anything that becomes a
:class:`~cronstable.ports.Launch`) takes a :class:`Ticket` when it is launched
(:meth:`Pools.take`, synchronous, so a start on request knows its place at
once).  The ticket is *admitted* at once when the pool has a free slot and
nobody waits; otherwise it waits in the pool's queue, which admits the highest
``poolPriority`` first and, among equals, the one that began waiting first.  The
slot is held until the run ends (:meth:`Pools.release`), and then goes to the
head of the queue.

* ``poolTimeout`` bounds the wait (:meth:`Pools.wait`, on the scheduler's clock):
  a ticket not admitted by then leaves the queue, ``timeout``; ``0`` does not
  wait at all.  A queue holds at most :data:`QUEUE_LIMIT` tickets: one more is
  refused at once, ``full``.  What a refusal leads to (a missed fire) is the
  scheduler's business.
* A ticket leaves the queue without running when its launch is replaced,
  cancelled or dropped (:meth:`Ticket.withdraw`), and when the daemon stops
  (:meth:`Pools.withdraw_all`): ``withdrawn``.
* A revision's pools come in through :meth:`Pools.configure`, in one step.  A
  pool whose ``slots`` shrink stops nothing: it admits again once fewer runs hold
  slots than the new count; one whose ``slots`` grow admits at once.  A pool the
  revision removes, or whose ``scope`` changes, is *retired*: its holders and its
  queue keep it, under its last count, until both are empty; new launches go to
  the pool of the new revision.  No pre-emption, ever.
* A run adopted after a restart (it outlived the previous daemon) holds a slot
  at once, over the count if need be (:meth:`Pools.hold`): it is running.

``scope: cluster`` pools take each slot in the cluster's shared store as well,
through :class:`~cronstable.ports.SharedSlots`: a ticket is admitted once this node
holds one of the pool's records there (and has fewer runs of the pool going than
``slots``).  One task per pool with a queue (:meth:`Pools._pump`) takes them, for
the head of the queue, asking again every ``poll_interval`` while other nodes hold
them all; a run that ends hands its record on to the head of the queue here, or
frees it when another node asked for it (so saturated nodes take turns).  A store
that cannot answer: ``degrade`` admits with the node-local cap
only, ``fail-closed`` keeps waiting.  A run adopted after a restart holds only a
node-local slot (its previous daemon's record expires with its lease).

Time is the scheduler's injected :class:`~cronstable.runtime.clock.Clock`, so
the queue's order and timeouts are tested in milliseconds.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from cronstable.config.desired import Pool
from cronstable.ports import Launch, PoolView, QueuedView, SharedSlots, SlotsUnavailable
from cronstable.runtime.clock import Clock
from cronstable.tasks import TaskSet

# the scheduler's own lines: a logging section quiets them by its name (docs/configuration.md)
logger = logging.getLogger("cronstable.runtime.scheduler")

QUEUE_LIMIT = 1000
"""Most tickets one pool's queue holds; a launch finding it full is refused (``full``)."""
SHOWN_WAITING = 100
"""Most queued launches a pool's view lists (its count is always exact)."""

Outcome = Literal["admitted", "timeout", "full", "withdrawn"]


@dataclass(eq=False, slots=True)
class Ticket:
    """One launch's claim on a slot of its pool: queued, then admitted (holding), then
    released; or refused (``timeout``, ``full``) or withdrawn before it was admitted."""

    pool: PoolState
    launch: Launch
    priority: int
    seq: int
    since: datetime
    """When it began waiting (wall clock, for views)."""
    since_mono: float
    decided: asyncio.Future[Outcome]
    holding: bool = False
    released: bool = False
    waited: float = 0.0
    """Seconds it waited before it was admitted."""
    shared: int | None = None
    """The record of a cluster pool it holds in the shared store (None: none)."""

    @property
    def key(self) -> tuple[int, int]:
        """Its place in the queue: higher priority first, then the first to wait."""
        return (-self.priority, self.seq)

    @property
    def queued(self) -> bool:
        return not self.decided.done()

    def withdraw(self) -> None:
        """Leave the queue without running (no-op once admitted or refused)."""
        self.pool.owner.decide(self, "withdrawn")


@dataclass(eq=False, slots=True)
class PoolState:
    """One pool as it runs: its settings, the tickets holding slots and the queue."""

    owner: Pools
    name: str
    slots: int
    scope: str
    holders: list[Ticket] = field(default_factory=list)
    queue: list[Ticket] = field(default_factory=list)
    """In admission order (:attr:`Ticket.key`)."""
    retired: bool = False
    admitted: int = 0
    """Tickets admitted so far (adopted runs included)."""
    timeouts: int = 0
    refused_full: int = 0
    waited_total: float = 0.0
    """Seconds the admitted tickets waited, summed."""
    pump: asyncio.Task[None] | None = None
    """A cluster pool's task taking records of the shared store for its queue."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the pump should look again at once (a local slot freed)."""
    degraded: bool = False
    """The shared store did not answer and onStoreUnavailable is degrade."""

    @property
    def in_use(self) -> int:
        return len(self.holders)

    def has_room(self) -> bool:
        return len(self.holders) < self.slots

    def position(self, ticket: Ticket) -> int | None:
        """1 for the next to be admitted; None when ``ticket`` is not queued here."""
        index = bisect.bisect_left(self.queue, ticket.key, key=lambda t: t.key)
        if index < len(self.queue) and self.queue[index] is ticket:
            return index + 1
        return None


class Pools:
    """Every pool of the applied revision (and the retired ones still in use)."""

    def __init__(
        self, clock: Clock, *, queue_limit: int = QUEUE_LIMIT, shared: SharedSlots | None = None
    ) -> None:
        """``shared``: where cluster pools take their slots (None: they are capped per
        node, as a node pool is)."""
        self.clock = clock
        self.queue_limit = queue_limit
        self.shared = shared
        self._pumps = TaskSet("the pools")
        self._active: dict[str, PoolState] = {}
        self._retired: list[PoolState] = []
        self._queued: dict[str, Ticket] = {}
        """Queued tickets by their launch's run id (a start on request asks its place)."""
        self._seq = itertools.count()

    # ------------------------------------------------------------ the table

    def configure(self, pools: Mapping[str, Pool]) -> None:
        """Use the pools of a revision from now on (see the module docstring)."""
        active: dict[str, PoolState] = {}
        for name, pool in pools.items():
            state = self._active.get(name)
            if state is not None and state.scope == pool.scope:
                if state.slots != pool.slots:
                    logger.info(
                        "Pool %s: %d slot%s (was %d)%s",
                        name,
                        pool.slots,
                        "" if pool.slots == 1 else "s",
                        state.slots,
                        f"; {state.in_use} in use, admitting again below {pool.slots}"
                        if state.in_use > pool.slots
                        else "",
                    )
                state.slots = pool.slots
            else:
                if state is not None:
                    self._retire(state)
                state = PoolState(self, name, pool.slots, pool.scope)
            active[name] = state
        for name, state in self._active.items():
            if name not in active:
                self._retire(state)
        self._active = active
        for state in self._all():
            self._service(state)

    def _retire(self, state: PoolState) -> None:
        state.retired = True
        if state.holders or state.queue:
            logger.info(
                "Pool %s: retired by the revision; its %d run%s going and %d waiting keep it",
                state.name,
                state.in_use,
                "" if state.in_use == 1 else "s",
                len(state.queue),
            )
            self._retired.append(state)

    def _all(self) -> Iterator[PoolState]:
        yield from self._active.values()
        yield from self._retired

    def pool(self, name: str) -> PoolState | None:
        """The applied pool ``name`` (None: no such pool in the applied revision)."""
        return self._active.get(name)

    # ------------------------------------------------------------ tickets

    def take(self, launch: Launch, *, place: Ticket | None = None) -> Ticket | None:
        """A ticket for ``launch`` in its job's pool: admitted at once, queued, or (the
        queue full) refused; None for a job with no pool.  ``place``: a ticket withdrawn
        for this launch (concurrencyPolicy Replace) whose place in the queue it takes."""
        name = launch.job.config.pool
        if name is None:
            return None
        state = self._active.get(name)
        if state is None:  # the loader refuses this; a bug if it happens
            logger.error(
                "Job %s: no pool %r is applied; its run is not capped", launch.job.name, name
            )
            return None
        ticket = Ticket(
            pool=state,
            launch=launch,
            priority=launch.job.config.pool_priority,
            seq=place.seq if place is not None and place.pool is state else next(self._seq),
            since=self.clock.now(),
            since_mono=self.clock.monotonic(),
            decided=asyncio.get_running_loop().create_future(),
        )
        if not state.queue and state.has_room() and not self._clustered(state):
            self._admit(ticket)
            return ticket
        if len(state.queue) >= self.queue_limit:
            state.refused_full += 1
            ticket.decided.set_result("full")
            return ticket
        bisect.insort(state.queue, ticket, key=lambda t: t.key)
        self._queued[launch.id] = ticket
        self._service(state)
        return ticket

    def hold(self, launch: Launch) -> Ticket | None:
        """A slot for a run that is already going (adopted after a restart): held at once,
        over the pool's count if need be; None for a job with no pool."""
        name = launch.job.config.pool
        state = self._active.get(name) if name is not None else None
        if state is None:
            return None
        ticket = Ticket(
            pool=state,
            launch=launch,
            priority=launch.job.config.pool_priority,
            seq=next(self._seq),
            since=self.clock.now(),
            since_mono=self.clock.monotonic(),
            decided=asyncio.get_running_loop().create_future(),
        )
        self._admit(ticket)
        return ticket

    async def wait(self, ticket: Ticket) -> Outcome:
        """Until ``ticket`` is admitted, refused or withdrawn, or its job's ``poolTimeout``
        passes (``timeout``).  Cancelled, the ticket is withdrawn."""
        if ticket.decided.done():
            return ticket.decided.result()
        timeout = ticket.launch.job.config.pool_timeout
        if timeout is not None:
            left = timeout - (self.clock.monotonic() - ticket.since_mono)
            if left <= 0:
                self.decide(ticket, "timeout")
                return ticket.decided.result()
        try:
            if timeout is None:
                await asyncio.shield(ticket.decided)
            else:
                sleeper = asyncio.ensure_future(self.clock.sleep(max(0.0, left)))
                either: set[asyncio.Future[Any]] = {ticket.decided, sleeper}
                try:
                    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
        except asyncio.CancelledError:
            ticket.withdraw()
            raise
        self.decide(ticket, "timeout")  # a no-op when it was decided meanwhile
        return ticket.decided.result()

    def decide(self, ticket: Ticket, outcome: Outcome) -> None:
        """Refuse or withdraw a queued ticket (no-op once it is decided)."""
        if ticket.decided.done():
            return
        state = ticket.pool
        self._unqueue(ticket)
        if outcome == "timeout":
            state.timeouts += 1
        ticket.decided.set_result(outcome)
        self._service(state)  # a ticket ahead of others left: they may be admitted now

    def release(self, ticket: Ticket) -> None:
        """The run of ``ticket`` ended (or never started): its slot goes to the queue."""
        if ticket.released:
            return
        ticket.released = True
        if not ticket.holding:
            ticket.withdraw()
            return
        state = ticket.pool
        state.holders.remove(ticket)
        if ticket.shared is not None:
            # the record this node holds goes on to the head of the queue here, unless
            # another node asked for it: then back to the store, for that node's turn
            wanted = self.shared is not None and self.shared.wanted(state.name, ticket.shared)
            if state.queue and state.has_room() and ticket.shared < state.slots and not wanted:
                head = state.queue[0]
                self._unqueue(head)
                head.shared = ticket.shared
                self._admit(head)
            elif self.shared is not None:
                self.shared.give_back(state.name, ticket.shared)
        self._service(state)
        if state.retired and not state.holders and not state.queue and state in self._retired:
            self._retired.remove(state)

    def withdraw_all(self) -> int:
        """Withdraw every queued ticket (the daemon stops); how many there were."""
        tickets = list(self._queued.values())
        for ticket in tickets:
            ticket.withdraw()
        return len(tickets)

    def queued(self, run: str) -> tuple[str, int] | None:
        """(pool, place in its queue, 1 first) of the queued launch with run id ``run``."""
        ticket = self._queued.get(run)
        if ticket is None:
            return None
        position = ticket.pool.position(ticket)
        return None if position is None else (ticket.pool.name, position)

    def _unqueue(self, ticket: Ticket) -> None:
        state = ticket.pool
        position = state.position(ticket)
        if position is not None:
            del state.queue[position - 1]
        if self._queued.get(ticket.launch.id) is ticket:
            del self._queued[ticket.launch.id]
        if state.retired and not state.holders and not state.queue and state in self._retired:
            self._retired.remove(state)

    def _admit(self, ticket: Ticket) -> None:
        state = ticket.pool
        ticket.holding = True
        ticket.waited = max(0.0, self.clock.monotonic() - ticket.since_mono)
        state.holders.append(ticket)
        state.admitted += 1
        state.waited_total += ticket.waited
        ticket.decided.set_result("admitted")

    def _clustered(self, state: PoolState) -> bool:
        return state.scope == "cluster" and self.shared is not None

    def _service(self, state: PoolState) -> None:
        """Admit from the head of ``state``'s queue while it has room (a cluster pool:
        have its pump take records for it)."""
        if self._clustered(state):
            if state.queue and state.has_room():
                state.wake.set()
                if state.pump is None or state.pump.done():
                    state.pump = self._pumps.start(self._pump(state), name=f"pool {state.name}")
            return
        while state.queue and state.has_room():
            ticket = state.queue[0]
            self._unqueue(ticket)
            self._admit(ticket)
            if ticket.waited > 0:
                logger.debug(
                    "Job %s: admitted by pool %s after %.1f s",
                    ticket.launch.job.name,
                    state.name,
                    ticket.waited,
                    extra={"job": ticket.launch.job.name, "pool": state.name},
                )

    async def _pump(self, state: PoolState) -> None:
        """Take records of the shared store for the head of ``state``'s queue while it
        has a queue and room here."""
        shared = self.shared
        assert shared is not None
        while state.queue and state.has_room():
            state.wake.clear()
            try:
                index = await shared.take(state.name, state.slots)
            except SlotsUnavailable as exc:
                index = None
                if shared.on_unavailable() == "degrade":
                    if not state.degraded:
                        state.degraded = True
                        logger.warning(
                            "Pool %s: the cluster's store does not answer (%s); its runs "
                            "start with the node-local cap only (onStoreUnavailable: degrade)",
                            state.name,
                            exc,
                        )
                    if state.queue and state.has_room():
                        head = state.queue[0]
                        self._unqueue(head)
                        self._admit(head)
                    continue
                if not state.degraded:
                    state.degraded = True
                    logger.warning(
                        "Pool %s: the cluster's store does not answer (%s); its launches "
                        "wait (onStoreUnavailable: fail-closed)",
                        state.name,
                        exc,
                    )
            else:
                if state.degraded:
                    state.degraded = False
                    logger.info("Pool %s: the cluster's store answers again", state.name)
            if index is not None:
                if state.queue and state.has_room():
                    head = state.queue[0]  # the head may have changed meanwhile: it gets it
                    self._unqueue(head)
                    head.shared = index
                    self._admit(head)
                else:
                    shared.give_back(state.name, index)
                continue
            if not state.wake.is_set():  # every record is held elsewhere: ask again soon
                deadline = self.clock.now() + timedelta(seconds=shared.poll_interval)
                await self.clock.sleep_until(deadline, state.wake)

    async def close(self) -> None:
        """Stop the pumps (the daemon stops; the queues were dropped)."""
        for task in self._pumps.pending():
            task.cancel()
        await self._pumps.wait(within=5.0)

    # ------------------------------------------------------------ views

    def views(self) -> tuple[PoolView, ...]:
        """Every pool (the applied ones in configuration order, then the retired ones)."""
        now = self.clock.monotonic()
        return tuple(self._view(state, now) for state in self._all())

    def _view(self, state: PoolState, now: float) -> PoolView:
        waiting = tuple(
            QueuedView(
                run=ticket.launch.id,
                job=ticket.launch.job.name,
                kind=ticket.launch.kind,
                priority=ticket.priority,
                since=ticket.since,
                waited=max(0.0, now - ticket.since_mono),
            )
            for ticket in state.queue[:SHOWN_WAITING]
        )
        oldest = max((now - t.since_mono for t in state.queue), default=None)
        return PoolView(
            name=state.name,
            slots=state.slots,
            scope=state.scope,
            in_use=state.in_use,
            queued=len(state.queue),
            oldest_wait=None if oldest is None else max(0.0, oldest),
            retired=state.retired,
            holders=tuple(ticket.launch.id for ticket in state.holders),
            waiting=waiting,
            admitted=state.admitted,
            timeouts=state.timeouts,
            refused_full=state.refused_full,
            waited_total=state.waited_total,
        )
