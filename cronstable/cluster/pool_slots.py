"""The slots of ``scope: cluster`` pools, held in the cluster's shared store.

A cluster pool of ``slots`` slots is ``slots`` records in the store the cluster
section names, each one a :class:`~cronstable.cluster.slots.SlotStore` slot
(the same stores and the same transactions as ``concurrencyScope: cluster``:
etcd keys on this daemon's lease, or files in the shared directory with an
expiry), under the ``pools`` key space and named ``<pool>#<n>``.  A run of a job
of the pool starts only once its daemon holds one of them, so however many nodes
run the pool's jobs, at most ``slots`` runs go at once.

* :meth:`PoolSlots.take` tries the pool's records in order, skipping those this
  daemon holds, and takes the first that is free (or expired); none free: None,
  and the runtime's queue asks again every :attr:`PoolSlots.poll_interval`.  It
  then also asks for each record held by another daemon, once per hold, with the
  store's *cancel record* aimed at that hold (the same record ``Replace`` writes
  for a job's slot; here it means "a node waits for this slot", never "stop").
* Fairness between nodes: a run that ends hands its record on to the next run
  waiting on its own node, unless another node asked for it (seen at renewal,
  :meth:`PoolSlots.wanted`): then the record is freed, and this daemon leaves it
  for :data:`STAND_BACK` poll intervals, long enough for the asking node's next
  try.  So saturated nodes take turns, and an uncontended node loses no time.
* Held slots are renewed every quarter of ``leaseTtl``; a daemon that dies
  stops renewing them and they free by expiry (etcd: with its lease).  One found
  taken by another node while a run here holds it (this node lost the store for
  longer than ``leaseTtl``) is logged and counted: the two runs may overlap.
* :meth:`PoolSlots.give_back` frees a slot in the background when its run ends.
* A store that cannot answer: ``onStoreUnavailable`` of the state section
  (``degrade`` without one), as for the cluster slots of jobs: ``degrade`` starts
  the run with the node-local cap only (a WARNING), ``fail-closed`` keeps it
  waiting, so ``poolTimeout`` decides.

The guarantee is the cluster slots' (at least once, not exactly once): see
:mod:`.claims`.

The named locks of ``cronstable lock`` (:mod:`cronstable.channel.locks`) are held
the same way, by a second instance over the ``locks`` key space: a lock is a pool
of one slot whose record is named after the lock alone (``naming``), and its
messages start "Cluster locks" (``title``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from cronstable.cluster.holding import HoldingStats, SlotHolding
from cronstable.cluster.slots import Holder, SlotError
from cronstable.ports import SlotsUnavailable

logger = logging.getLogger(__name__)

OnUnavailable = Literal["degrade", "fail-closed"]


STAND_BACK = 2.0
"""Poll intervals during which a daemon does not take again a record it freed."""


def record_name(pool: str, index: int) -> str:
    """The store's name of slot ``index`` of ``pool``."""
    return f"{pool}#{index}"


@dataclass(slots=True)
class PoolSlotStats(HoldingStats):
    taken: int = 0
    """Slots taken in the store."""
    lost: int = 0
    """Slots another node took while a run here held them (the store lost this node)."""


class PoolSlots(SlotHolding):
    """See the module docstring (a :class:`~cronstable.ports.SharedSlots`).
    ``on_unavailable()`` says what a store that cannot answer means."""

    def __init__(
        self,
        node: str,
        *,
        on_unavailable: Callable[[], OnUnavailable] = lambda: "degrade",
        instance: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        title: str = "Cluster pools",
        naming: Callable[[str, int], str] = record_name,
    ) -> None:
        """``title`` starts its log lines; ``naming`` gives the store's name of slot ``n``
        of pool ``p`` (:func:`record_name`: ``p#n``)."""
        super().__init__(title, monotonic=monotonic)
        self.node = node
        self.record = naming
        self.instance = instance or uuid.uuid4().hex[:16]
        self._on_unavailable = on_unavailable
        self.stats: PoolSlotStats = PoolSlotStats()
        self._held: dict[str, Holder] = {}
        """This daemon's holds, by record name."""
        self._lost: set[str] = set()
        self._wanted: set[str] = set()
        """Held records another daemon asked for (seen at the last renewal)."""
        self._asked: dict[str, Holder] = {}
        """The hold this daemon last asked for, by record."""
        self._freed: dict[str, float] = {}
        """Records this daemon freed, until when (monotonic) it leaves them to others."""

    # ------------------------------------------------------------ SharedSlots

    @property
    def poll_interval(self) -> float:
        return min(1.0, max(0.1, self.ttl / 8)) if self.store is not None else 1.0

    def on_unavailable(self) -> OnUnavailable:
        return self._on_unavailable()

    def held(self) -> list[str]:
        """The records this daemon holds now."""
        return sorted(self._held)

    async def take(self, pool: str, slots: int) -> int | None:
        store = self.store
        if store is None:
            raise SlotsUnavailable("no shared store is in use yet")
        now = self.monotonic()
        try:
            async with self._io:
                others: list[tuple[str, Holder]] = []
                for index in range(slots):
                    name = self.record(pool, index)
                    if name in self._held or name in self._lost:
                        continue
                    if self._freed.get(name, 0.0) > now:
                        continue  # freed for another node a moment ago: its turn first
                    self._freed.pop(name, None)
                    claim = (await self._bounded(store, store.claim([name])))[name]
                    if store.mine(claim.holder):
                        self._held[name] = claim.holder
                        self._asked.pop(name, None)
                        self.stats.taken += 1
                        return index
                    others.append((name, claim.holder))
                for name, holder in others:  # say that this node waits, once per hold
                    if self._asked.get(name) != holder:
                        await self._bounded(store, store.request_cancel(name, holder))
                        self._asked[name] = holder
                return None
        except (SlotError, TimeoutError) as exc:
            raise SlotsUnavailable(self._failed(store, exc)) from exc

    def wanted(self, pool: str, index: int) -> bool:
        return self.record(pool, index) in self._wanted

    def in_use(self) -> bool:
        """Whether a shared store is in use (a revision with a cluster section asked for
        one; it may be connecting still)."""
        return self.store is not None

    def lost(self, pool: str, index: int) -> bool:
        """Whether another daemon took slot ``index`` of ``pool`` while this one held it
        (seen at a renewal); it stays lost until given back."""
        return self.record(pool, index) in self._lost

    def give_back(self, pool: str, index: int) -> None:
        name = self.record(pool, index)
        self._lost.discard(name)
        if name in self._wanted:
            self._wanted.discard(name)
            self._freed[name] = self.monotonic() + STAND_BACK * self.poll_interval
        if name in self._held:
            self._background.start(self._free(name), name=f"cluster-pool-free {name}")

    async def _free(self, name: str) -> None:
        async with self._io:
            hold = self._held.pop(name, None)
            store = self.store
            if hold is None or store is None:
                return
            try:
                await self._bounded(store, store.release(name, hold))
            except (SlotError, TimeoutError) as exc:
                self._failed(store, exc)
                logger.warning(
                    "%s: slot %s could not be released now; it expires within leaseTtl",
                    self.title,
                    name,
                )

    # ------------------------------------------------------------ renewal

    def _closed(self) -> None:
        self._held.clear()

    async def _renew(self) -> None:
        store = self.store
        if store is None or not self._held:
            return
        async with self._io:
            names = sorted(self._held)
            try:
                claims = await self._bounded(store, store.claim(names))
            except (SlotError, TimeoutError) as exc:
                self._failed(store, exc)
                return
            for name, claim in claims.items():
                if name not in self._held:
                    continue
                if store.mine(claim.holder):
                    self._held[name] = claim.holder
                    if claim.cancel_from is not None:
                        self._wanted.add(name)  # node `cancel_from` waits for it
                    else:
                        self._wanted.discard(name)
                    continue
                del self._held[name]
                self._wanted.discard(name)
                self._lost.add(name)  # not taken again until its run gives it back
                self.stats.lost += 1
                logger.warning(
                    "%s: node %s took slot %s while a run here still holds it "
                    "(the store did not hear from this node within leaseTtl); the runs may "
                    "overlap",
                    self.title,
                    claim.holder.node,
                    name,
                )
