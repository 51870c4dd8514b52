"""The named locks of ``cronstable lock``: a mutex per name, held by one run's client.

* **On the node.** Each name has at most one holder and a queue of takers, served
  first come, first served; a taker gives up when its ``wait`` runs out
  (:class:`LockTimeout`) or when it goes away.  A name nobody holds or waits for
  is forgotten.  At most :data:`QUEUE_LIMIT` takers wait for one name
  (:class:`LockBusy` past it).
* **Across the cluster.** With a cluster section, a lock is also a record in the
  cluster's store (:class:`SharedLocks`: the cluster pools' machinery over the
  ``locks`` key space, a lock being a pool of one slot): the node's holder takes
  the record once it holds the name here, asking again every ``poll_interval``
  while another node has it.  The record is renewed while held and frees by
  expiry (``leaseTtl``) when its node dies.  A hold handed to the next taker on
  this node keeps the record, unless another node asked for it: then it is freed,
  so the nodes take turns.  A record another node took while this one held it
  (this node lost the store for longer than ``leaseTtl``) makes the hold *lost*
  (:meth:`Hold.lost`); the client stops its command.
* A store that cannot answer: ``onStoreUnavailable`` of the state section
  (``degrade`` without one), as for pools: ``degrade`` lets the taker hold the
  lock on this node alone (a WARNING), ``fail-closed`` keeps it waiting.

Locks are not re-entrant: a second taker of a name its own run holds waits like
any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from cronstable.ports import SlotsUnavailable
from cronstable.redact import redact

logger = logging.getLogger(__name__)

QUEUE_LIMIT = 1000
"""Most takers waiting for one name on this node."""

Scope = Literal["node", "cluster"]


class LockTimeout(Exception):
    """Not held within the wait."""


class LockBusy(Exception):
    """Too many takers wait for this name."""


class SharedLocks(Protocol):
    """The locks' records in the cluster's store (a
    :class:`~cronstable.cluster.pool_slots.PoolSlots` over the ``locks`` key space,
    each lock a pool of one slot)."""

    @property
    def poll_interval(self) -> float: ...

    def on_unavailable(self) -> Literal["degrade", "fail-closed"]: ...

    def in_use(self) -> bool:
        """Whether a revision with a cluster section gave the locks a store."""
        ...

    async def take(self, pool: str, slots: int) -> int | None:
        """Slot 0 of ``pool`` (the lock) when this daemon got it; None when another daemon
        holds it.  Raises :class:`~cronstable.ports.SlotsUnavailable`."""
        ...

    def wanted(self, pool: str, index: int) -> bool: ...

    def lost(self, pool: str, index: int) -> bool: ...

    def give_back(self, pool: str, index: int) -> None: ...


@dataclass(eq=False, slots=True)
class Hold:
    """One taker's hold of a lock, until :meth:`release`."""

    name: str
    run: str
    """The id of the run whose client holds it."""
    scope: Scope
    """``cluster`` when the record in the cluster's store is held too."""
    owner: Locks
    since: float
    released: bool = False

    def release(self) -> None:
        """Let go (the next taker gets it).  Idempotent."""
        self.owner._release(self)

    def lost(self) -> str | None:
        """Why the hold cannot be kept any more; None while it holds."""
        return self.owner._lost(self)


@dataclass(eq=False, slots=True)
class _Taker:
    run: str
    granted: asyncio.Future[Hold]


@dataclass(eq=False, slots=True)
class _Lock:
    name: str
    holder: Hold | None = None
    takers: deque[_Taker] = field(default_factory=deque)
    record: bool = False
    """This daemon holds the lock's record in the cluster's store."""


class Locks:
    """The node's named locks (see the module docstring); ``shared``: their records in
    the cluster's store (None: node-local only)."""

    def __init__(
        self,
        shared: SharedLocks | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.shared = shared
        self.monotonic = monotonic
        self._locks: dict[str, _Lock] = {}
        self.granted = 0
        """Holds granted since the daemon started."""
        self.timeouts = 0
        """Takers whose wait ran out."""

    # ------------------------------------------------------------ reading

    def held(self) -> int:
        return sum(1 for lock in self._locks.values() if lock.holder is not None)

    def waiting(self) -> int:
        return sum(len(lock.takers) for lock in self._locks.values())

    def holder(self, name: str) -> Hold | None:
        lock = self._locks.get(name)
        return lock.holder if lock is not None else None

    # ------------------------------------------------------------ taking

    async def acquire(self, name: str, run: str, wait: float | None) -> Hold:
        """Hold ``name`` for run ``run``, waiting at most ``wait`` seconds (None: as long
        as it takes).  Raises :class:`LockTimeout` or :class:`LockBusy`; cancelling the
        call leaves the queue (nothing is held)."""
        deadline = None if wait is None else self.monotonic() + max(0.0, wait)
        hold = await self._take_here(name, run, deadline)
        try:
            hold.scope = await self._take_shared(hold, deadline)
        except BaseException:
            self._release(hold)
            raise
        self.granted += 1
        return hold

    def _left(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - self.monotonic())

    async def _take_here(self, name: str, run: str, deadline: float | None) -> Hold:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = _Lock(name)
        if lock.holder is None and not lock.takers:
            lock.holder = Hold(name, run, "node", self, self.monotonic())
            return lock.holder
        if len(lock.takers) >= QUEUE_LIMIT:
            raise LockBusy(f"{len(lock.takers)} takers wait for lock {name} on this node already")
        taker = _Taker(run, asyncio.get_running_loop().create_future())
        lock.takers.append(taker)
        granted = False
        try:
            hold = await asyncio.wait_for(asyncio.shield(taker.granted), self._left(deadline))
            granted = True
            return hold
        except TimeoutError:
            self.timeouts += 1
            raise LockTimeout(f"lock {name} not held within the wait") from None
        finally:
            if not granted:  # out of time, or the taker went away
                if taker in lock.takers:
                    lock.takers.remove(taker)
                if taker.granted.done() and not taker.granted.cancelled():
                    self._release(taker.granted.result())  # given just then: on it goes
                else:
                    taker.granted.cancel()
                self._forget(lock)

    async def _take_shared(self, hold: Hold, deadline: float | None) -> Scope:
        shared = self.shared
        lock = self._locks[hold.name]
        if shared is None or not shared.in_use():
            return "node"
        if lock.record:
            return "cluster"  # handed on by the previous holder here
        warned = False
        while True:
            try:
                got = await shared.take(hold.name, 1)
            except SlotsUnavailable as exc:
                if shared.on_unavailable() == "degrade":
                    logger.warning(
                        "Lock %s: the cluster's store cannot answer (%s); held on this node "
                        "only (onStoreUnavailable degrade)",
                        hold.name,
                        redact(str(exc)),
                    )
                    return "node"
                if not warned:
                    warned = True
                    logger.warning(
                        "Lock %s: the cluster's store cannot answer (%s); waiting for it "
                        "(onStoreUnavailable fail-closed)",
                        hold.name,
                        redact(str(exc)),
                    )
                got = None
            if got is not None:
                lock.record = True
                return "cluster"
            left = self._left(deadline)
            if left is not None and left <= 0:
                self.timeouts += 1
                raise LockTimeout(f"lock {hold.name} is held on another node")
            pause = shared.poll_interval
            await asyncio.sleep(pause if left is None else min(pause, left))

    # ------------------------------------------------------------ letting go

    def _release(self, hold: Hold) -> None:
        if hold.released:
            return
        hold.released = True
        lock = self._locks.get(hold.name)
        if lock is None or lock.holder is not hold:
            return
        lock.holder = None
        while lock.takers:
            taker = lock.takers.popleft()
            if taker.granted.done():
                continue
            lock.holder = Hold(hold.name, taker.run, "node", self, self.monotonic())
            self._hand_record(lock)
            taker.granted.set_result(lock.holder)
            return
        self._give_record(lock)
        self._forget(lock)

    def _hand_record(self, lock: _Lock) -> None:
        """The record goes on with the hold, unless another node asked for it."""
        shared = self.shared
        if lock.record and shared is not None:
            if shared.wanted(lock.name, 0) or shared.lost(lock.name, 0):
                self._give_record(lock)

    def _give_record(self, lock: _Lock) -> None:
        if lock.record and self.shared is not None:
            lock.record = False
            self.shared.give_back(lock.name, 0)

    def _forget(self, lock: _Lock) -> None:
        if lock.holder is None and not lock.takers and not lock.record:
            if self._locks.get(lock.name) is lock:
                del self._locks[lock.name]

    def _lost(self, hold: Hold) -> str | None:
        if hold.released:
            return "released"
        shared = self.shared
        if hold.scope == "cluster" and shared is not None and shared.lost(hold.name, 0):
            return (
                "another node took the lock in the cluster's store (this node did not "
                "renew it within leaseTtl)"
            )
        return None
