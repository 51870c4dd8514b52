"""The slot guard: ``concurrencyScope: cluster`` as the scheduler's launch guard.

Before a run of a job with ``concurrencyScope: cluster`` starts (after the local
``concurrencyPolicy`` check and the cluster gate), :meth:`SlotGuard.admit` takes
the job's slot in the cluster's store (:mod:`.slots`), unless a local run of the
job already holds it.  The slot is held while any local run of the job lives,
renewed every quarter of ``leaseTtl``, and released when the last one ends.

* ``Allow``: no slot (any number of runs anywhere).
* ``Forbid``: a live holder on another node refuses the launch (``slot_held``,
  a WARNING naming the holder).
* ``Replace``: a live holder on another node gets a cancel record aimed at its
  hold; the launch waits for the slot (polling) and gives up after twice
  ``leaseTtl`` (``slot_not_freed``, a WARNING): no run rather than a double run.
  The holder finds the record at its next renewal and stops its runs of the job
  as replaced (no report, no retry), through ``replace_runs``.
* ``BufferOne`` and ``BufferAll``: a live holder on another node makes the launch
  *wait* for the slot (polling, every ``leaseTtl``/8, no deadline: as a buffered fire
  waits for the run going on its own node), and the scheduler counts it as the job's
  buffered fire here meanwhile (``waiting``); it gives up only when it is
  ``abandoned`` (cancelled, its job removed, the daemon stopping).  A start on request
  is refused instead (``slot_held``), as locally.  Before a scheduled fire starts, its
  time is recorded beside the slot (:meth:`SlotStore.mark_fire`): a fire at or before
  the recorded one ran already (on another node, or a later fire did) and does not
  run again (``fire_taken``), so the nodes of an ``EveryNode`` job, which all buffer
  the same fires, run each once.  A waiting fire looks at that record each time it
  polls, and gives up at once when the fire ran elsewhere.
* A store that cannot answer: ``onStoreUnavailable`` of the state section
  (``degrade`` without one): ``degrade`` starts the run with node-local
  enforcement only (a WARNING), ``fail-closed`` refuses it (``slot_unavailable``).

A manual start (``kind`` ``manual``) takes the slot like any launch; the HTTP API
asks :meth:`SlotGuard.refusal` first, to answer 409 when the slot is held elsewhere.

The guarantee is at-least-once, not exactly-once: a holder cut off from the store
keeps running, so a node that takes the slot after it expired may overlap it (the
holder logs a WARNING when it finds its slot taken).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from cronstable.cluster.holding import HoldingStats, SlotHolding
from cronstable.cluster.slots import Claim, Holder, SlotError, SlotStore, later_or_same
from cronstable.config import Job
from cronstable.config.models import BUFFER_POLICIES
from cronstable.ports import Launch

logger = logging.getLogger(__name__)

OnUnavailable = Literal["degrade", "fail-closed"]


@dataclass(slots=True)
class SlotStats(HoldingStats):
    cancels_sent: int = 0
    """Cancel records written to another node's hold (Replace)."""
    cancels_obeyed: int = 0
    """Cancel records found aimed at this node's hold and obeyed."""
    lost: int = 0
    """Holds another node took while a run here still lived (the store lost this node)."""


def uses_slot(job: Job) -> bool:
    """Whether ``job``'s runs hold a cluster slot (scope cluster, Forbid or Replace)."""
    return job.config.concurrency_scope == "cluster" and job.config.concurrency_policy != "Allow"


class SlotGuard(SlotHolding):
    """See the module docstring.  ``replace_runs(job, why)`` stops the local runs of
    ``job`` as replaced; ``on_unavailable()`` says what a store that cannot answer
    means; ``stopping()`` whether the daemon stops (a waiting Replace gives up);
    ``waiting(launch, node)`` tells the scheduler a launch waits for ``node``'s run (None:
    no longer); ``abandoned(launch)`` whether a waiting launch should give up."""

    def __init__(
        self,
        node: str,
        *,
        replace_runs: Callable[[str, str], list[str]],
        on_unavailable: Callable[[], OnUnavailable] = lambda: "degrade",
        stopping: Callable[[], bool] = lambda: False,
        instance: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        waiting: Callable[[Launch, str | None], None] = lambda launch, node: None,
        abandoned: Callable[[Launch], bool] = lambda launch: False,
    ) -> None:
        super().__init__("Cluster slots", monotonic=monotonic)
        self.node = node
        self.waiting = waiting
        self.abandoned = abandoned
        self.instance = instance or uuid.uuid4().hex[:16]
        self.replace_runs = replace_runs
        self.on_unavailable = on_unavailable
        self.stopping = stopping
        self.stats: SlotStats = SlotStats()
        self._runs: dict[str, int] = {}
        """Admitted launches of each job not yet released (local runs alive)."""
        self._admitted: dict[str, int] = {}
        """Launch ids this guard admitted and counted, to release."""
        self._held: dict[str, Holder] = {}
        """This instance's holds, by job."""
        self._lost: dict[str, Holder] = {}
        """Jobs whose slot another node took while a run here lives: that node's hold."""
        self._asked: dict[str, Holder] = {}
        """The hold a cancel record was last sent to, by job."""
        self._obeyed: dict[str, Holder] = {}
        """This node's hold a cancel record stopped, by job (obeyed once)."""
        self._waits: dict[str, str] = {}
        """Launches waiting for another node's run (BufferOne, BufferAll): that node."""
        self._stale: set[str] = set()
        """Jobs whose slot this node may hold with no local run to keep it: a release
        that failed, or a claim whose answer was lost (etcd may have committed it).
        Each renewal round releases those that are this node's."""

    # ------------------------------------------------------------ the store in use

    def held(self) -> list[str]:
        """The jobs whose slot this node holds now."""
        return sorted(self._held)

    def _closed(self) -> None:
        self._held.clear()

    # ------------------------------------------------------------ LaunchGuard

    async def admit(self, launch: Launch) -> str | None:
        store = self.store
        if store is None or not uses_slot(launch.job):
            return None
        try:
            return await self._admit(store, launch)
        except (SlotError, TimeoutError) as exc:
            self._stale.add(launch.job.name)  # the claim may have been taken all the same
            reason = self._failed(store, exc)
            return self._unavailable(launch, reason)
        finally:
            if self._waits.pop(launch.id, None) is not None:
                self.waiting(launch, None)  # it waits no longer (started or refused)

    def _count(self, launch: Launch) -> None:
        name = launch.job.name
        self._runs[name] = self._runs.get(name, 0) + 1
        self._admitted[launch.id] = self._admitted.get(launch.id, 0) + 1

    async def _admit(self, store: SlotStore, launch: Launch) -> str | None:
        job = launch.job
        name = job.name
        policy = job.config.concurrency_policy
        buffering = policy in BUFFER_POLICIES
        deadline: float | None = None
        while True:
            async with self._io:
                if name in self._held:
                    self._count(launch)  # a local run holds it already (Replace, here)
                    return await self._fire_marked(store, launch) if buffering else None
                claim = (await self._bounded(store, store.claim([name])))[name]
                holder = claim.holder
                if store.mine(holder):
                    self._held[name] = holder
                    self._lost.pop(name, None)
                    self._asked.pop(name, None)
                    self._count(launch)
                    return await self._fire_marked(store, launch) if buffering else None
                if buffering:
                    refused = await self._buffer_wait(store, launch, holder)
                    if refused is not None:
                        return refused
                elif policy == "Forbid":
                    logger.warning(
                        "Job %s: %s at %s not started: node %s holds its cluster slot "
                        "(concurrencyPolicy Forbid, concurrencyScope cluster)",
                        name,
                        launch.kind,
                        launch.scheduled.isoformat(),
                        holder.node,
                        extra={"job": name, "holder": holder.node},
                    )
                    return "slot_held"
                elif self._asked.get(name) != holder:
                    await self._bounded(store, store.request_cancel(name, holder))
                    self._asked[name] = holder
                    self.stats.cancels_sent += 1
                    logger.info(
                        "Job %s: asking node %s to stop its run, to start the %s at %s here "
                        "(concurrencyPolicy Replace, concurrencyScope cluster)",
                        name,
                        holder.node,
                        launch.kind,
                        launch.scheduled.isoformat(),
                        extra={"job": name, "holder": holder.node},
                    )
            if buffering:
                await asyncio.sleep(max(0.1, store.ttl / 8))  # no deadline: it waits its turn
                continue
            now = self.monotonic()
            if deadline is None:
                deadline = now + 2 * store.ttl
            if self.stopping() and launch.kind != "manual":
                return "slot_not_freed"  # not started anyway: the daemon stops
            if now >= deadline:
                logger.warning(
                    "Job %s: node %s did not give up the cluster slot within %g s; "
                    "the %s at %s does not run (no run rather than a double run)",
                    name,
                    holder.node,
                    2 * store.ttl,
                    launch.kind,
                    launch.scheduled.isoformat(),
                    extra={"job": name, "holder": holder.node},
                )
                return "slot_not_freed"
            await asyncio.sleep(min(max(0.1, store.ttl / 8), deadline - now))

    async def _fire_marked(self, store: SlotStore, launch: Launch) -> str | None:
        """BufferOne, BufferAll, with the slot held for ``launch`` (counted): a scheduled
        fire records its time beside the slot, unless it (or a later fire) started
        already; then it does not start (``fire_taken``)."""
        if launch.kind not in ("fire", "reboot"):
            return None
        name = launch.job.name
        try:
            marked = await self._bounded(store, store.mark_fire(name, launch.scheduled))
        except (SlotError, TimeoutError):
            self.release(launch)  # not started: the slot goes back unless a run keeps it
            raise
        if marked:
            return None
        self.release(launch)
        logger.info(
            "Job %s: the fire at %s ran already in the cluster (or a later one did); not "
            "started here (concurrencyPolicy %s, concurrencyScope cluster)",
            name,
            launch.scheduled.isoformat(),
            launch.job.config.concurrency_policy,
            extra={"job": name},
        )
        return "fire_taken"

    async def _buffer_wait(self, store: SlotStore, launch: Launch, holder: Holder) -> str | None:
        """BufferOne, BufferAll: node ``holder.node`` holds the slot, and ``launch`` waits
        for it (told to the scheduler once); a refusal ends the wait."""
        job = launch.job
        name = job.name
        if launch.kind == "manual":
            logger.warning(
                "Job %s: start on request refused: node %s holds its cluster slot "
                "(concurrencyPolicy %s, concurrencyScope cluster: a start is not buffered)",
                name,
                holder.node,
                job.config.concurrency_policy,
                extra={"job": name, "holder": holder.node},
            )
            return "slot_held"
        if self.abandoned(launch):
            return "slot_not_freed"  # not started anyway: cancelled, removed, stopping
        if launch.kind in ("fire", "reboot"):
            last = await self._bounded(store, store.last_fire(name))
            if later_or_same(last, launch.scheduled):
                logger.info(
                    "Job %s: the fire at %s runs on node %s (or a later one did); not "
                    "waiting for it here (concurrencyPolicy %s, concurrencyScope cluster)",
                    name,
                    launch.scheduled.isoformat(),
                    holder.node,
                    job.config.concurrency_policy,
                    extra={"job": name, "holder": holder.node},
                )
                return "fire_taken"
        if self._waits.get(launch.id) != holder.node:
            self._waits[launch.id] = holder.node
            self.waiting(launch, holder.node)
            logger.info(
                "Job %s: the %s at %s waits for node %s's run (concurrencyPolicy %s, "
                "concurrencyScope cluster)",
                name,
                launch.kind,
                launch.scheduled.isoformat(),
                holder.node,
                job.config.concurrency_policy,
                extra={"job": name, "holder": holder.node},
            )
        return None

    def _unavailable(self, launch: Launch, reason: str) -> str | None:
        if self.on_unavailable() == "fail-closed":
            return "slot_unavailable"
        name = launch.job.name
        logger.warning(
            "Job %s: the cluster slot could not be taken (%s); the %s at %s starts with "
            "node-local concurrency only (onStoreUnavailable: degrade)",
            name,
            reason,
            launch.kind,
            launch.scheduled.isoformat(),
            extra={"job": name},
        )
        self._count(launch)
        return None

    def release(self, launch: Launch) -> None:
        admitted = self._admitted.get(launch.id, 0)
        if not admitted:
            return  # not one this guard counted (no slot needed, or refused)
        if admitted > 1:
            self._admitted[launch.id] = admitted - 1
        else:
            del self._admitted[launch.id]
        name = launch.job.name
        runs = self._runs.get(name, 0) - 1
        if runs > 0:
            self._runs[name] = runs
            return
        self._runs.pop(name, None)
        if name in self._held or name in self._lost:
            self._background.start(self._free(name), name=f"cluster-slot-free {name}")

    async def _free(self, name: str) -> None:
        async with self._io:
            if self._runs.get(name):
                return  # a new local run holds it on
            hold = self._held.pop(name, None)
            self._lost.pop(name, None)
            self._obeyed.pop(name, None)
            store = self.store
            if hold is None or store is None:
                return
            try:
                await self._bounded(store, store.release(name, hold))
            except (SlotError, TimeoutError) as exc:
                self._stale.add(name)
                self._failed(store, exc)
                logger.warning(
                    "Job %s: its cluster slot could not be released now; tried again at "
                    "each renewal",
                    name,
                    extra={"job": name},
                )

    # ------------------------------------------------------------ the HTTP API

    async def refusal(self, job: Job) -> str | None:
        """Why a manual start of ``job`` would be refused for its slot now (Forbid and a
        holder on another node, or fail-closed and no store); None when it may start."""
        store = self.store
        policy = job.config.concurrency_policy
        if (
            store is None
            or not uses_slot(job)
            or (policy != "Forbid" and policy not in BUFFER_POLICIES)
        ):
            return None
        if job.name in self._held:
            return None  # local runs: the local concurrencyPolicy answers
        try:
            async with self._io:
                holder = await self._bounded(store, store.holder(job.name))
        except (SlotError, TimeoutError) as exc:
            reason = self._failed(store, exc)
            if self.on_unavailable() != "fail-closed":
                return None
            return (
                f"the cluster slot store does not answer ({reason}; "
                "onStoreUnavailable: fail-closed)"
            )
        if holder is None or store.mine(holder):
            return None
        return (
            f"node {holder.node} holds its cluster slot "
            f"(concurrencyPolicy {policy}, concurrencyScope cluster"
            + ("" if policy == "Forbid" else ": a start on request is not buffered")
            + ")"
        )

    # ------------------------------------------------------------ renewal

    async def _renew(self) -> None:
        """Keep the held slots (take back lapsed ones, see who took lost ones) and obey
        the cancel records aimed at this node's holds."""
        async with self._io:
            store = self.store
            if store is not None and self._stale:
                await self._release_stale(store)
            jobs = sorted(set(self._held) | set(self._lost))
            if store is None or not jobs:
                return
            try:
                claims = await self._bounded(store, store.claim(jobs))
            except (SlotError, TimeoutError) as exc:
                self._failed(store, exc)
                return
            for name, claim in claims.items():
                self._renewed(store, name, claim)

    async def _release_stale(self, store: SlotStore) -> None:
        """Release the stale slots (see ``_stale``) that are this node's and no local run
        keeps; forget those another node holds or nobody does."""
        for name in sorted(self._stale):
            if self._runs.get(name) or name in self._held:
                continue  # a local run holds it on, and releases it at its end
            try:
                holder = await self._bounded(store, store.holder(name))
                if holder is not None and store.mine(holder):
                    await self._bounded(store, store.release(name, holder))
            except (SlotError, TimeoutError) as exc:
                self._failed(store, exc)
                return
            self._stale.discard(name)

    def _renewed(self, store: SlotStore, name: str, claim: Claim) -> None:
        holder = claim.holder
        if not store.mine(holder):
            self._lose(name, holder)
            return
        before = self._held.get(name)
        self._held[name] = holder
        if name in self._lost:
            del self._lost[name]
            logger.info(
                "Job %s: this node holds its cluster slot again (fence %d)",
                name,
                holder.fence,
                extra={"job": name},
            )
        elif before is not None and before != holder:
            logger.info(
                "Job %s: its cluster slot had lapsed; taken again (fence %d)",
                name,
                holder.fence,
                extra={"job": name},
            )
        if claim.cancel_from is not None and self._obeyed.get(name) != holder:
            self._obey(name, holder, claim.cancel_from)

    def _lose(self, name: str, holder: Holder) -> None:
        self._held.pop(name, None)
        if self._lost.get(name) == holder:
            return
        self._lost[name] = holder
        self.stats.lost += 1
        logger.warning(
            "Job %s: node %s took the cluster slot while a run here still goes (the store "
            "did not hear from this node within leaseTtl); the runs may overlap",
            name,
            holder.node,
            extra={"job": name, "holder": holder.node},
        )

    def _obey(self, name: str, hold: Holder, by: str) -> None:
        self._obeyed[name] = hold
        self.stats.cancels_obeyed += 1
        stopped = self.replace_runs(
            name, f"node {by} replaces it: concurrencyPolicy Replace, concurrencyScope cluster"
        )
        logger.info(
            "Job %s: node %s asked for the cluster slot; %s",
            name,
            by,
            f"stopping {len(stopped)} run{'' if len(stopped) == 1 else 's'} here"
            if stopped
            else "no run here to stop",
            extra={"job": name},
        )
