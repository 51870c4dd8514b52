"""Cluster-wide concurrency slots: the store half (one base, one module per backend).

A job with ``concurrencyScope: cluster`` (and ``concurrencyPolicy`` Forbid or
Replace) runs only while its daemon holds the job's *slot* in the shared store:
one record per job naming the holder (node, daemon instance) and a *fence* that
grows with every new holder.  A hold lasts ``ttl`` seconds unless renewed; the
holder renews its slots every quarter of it while a local run of the job lives,
so a crashed holder's slot frees by expiry.

The same stores keep the slots of cluster-scoped pools, under ``pools`` instead of
``slots``: one record per slot of a pool, named ``<pool>#<n>`` (quoted as job names
are), taken and renewed the same way (:mod:`.pool_slots`).

* etcd: ``<prefix>slots/<job>`` on the holder's lease, created in a transaction
  that succeeds only while the key does not exist; the fence is the key's create
  revision.  Releasing deletes the key (if it is still that hold); losing the lease
  deletes every slot on it.
* a shared directory: ``slots/<job>.json`` with the holder, a fence counter and
  ``expires`` (wall time + ttl), written under the directory's lock; taken over
  only once expired by more than the clock allowance
  (:data:`~.shareddir.CLOCK_SKEW`); releasing sets ``expires`` to 0 and keeps the
  counter.

A *cancel record* (concurrencyPolicy Replace) asks one hold to end: it names the
holder's instance and fence, so it never reaches a later hold; taking a slot
anew drops it.  etcd: ``<prefix>slots/<job>/cancel``; directory:
``slots/<job>.cancel``.  Job names are percent-quoted in keys and file names
(:func:`slot_name`).

The guard that uses a store, decides what a refusal means and obeys cancel
records is :mod:`.claims`.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote


class SlotError(Exception):
    """The store cannot be used now (unreachable, refused, locked too long); says why."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a slot: a node, its daemon instance, and the hold's fence."""

    node: str
    instance: str
    fence: int


@dataclass(frozen=True, slots=True)
class Claim:
    """What claiming one slot found: its holder now, and a cancel record aimed at that
    hold (the requesting node's name), if there is one."""

    holder: Holder
    cancel_from: str | None = None


def slot_name(job: str, *, limit: int = 200) -> str:
    """``job`` as one key segment or file name: percent-quoted (no ``/``, never a hidden
    name); a quoted name longer than ``limit`` becomes ``%%`` and its SHA-256."""
    quoted = quote(job, safe="")
    if quoted.startswith("."):
        quoted = "%2E" + quoted[1:]
    if len(quoted) > limit:
        return "%%" + hashlib.sha256(job.encode()).hexdigest()  # quote never writes "%%"
    return quoted


class SlotStore(ABC):
    """The slots of one daemon instance (``instance``, on node ``node``) in one store.

    Every method raises :class:`SlotError` when the store cannot answer; none is
    bounded here (the caller bounds each call)."""

    backend = "?"

    def __init__(self, node: str, instance: str, *, ttl: float) -> None:
        self.node = node
        self.instance = instance
        self.ttl = float(ttl)

    def mine(self, holder: Holder) -> bool:
        return holder.instance == self.instance

    @abstractmethod
    async def check(self) -> None:
        """Reach the store once (a revision naming an unusable store is rejected)."""

    @abstractmethod
    async def claim(self, jobs: Sequence[str]) -> dict[str, Claim]:
        """For each job: keep its slot if this instance holds it (renew), take it if it is
        free (a new fence, any stale cancel record dropped), else say who holds it."""

    @abstractmethod
    async def holder(self, job: str) -> Holder | None:
        """The live holder of ``job``'s slot (read only); None when it is free."""

    @abstractmethod
    async def release(self, job: str, hold: Holder) -> None:
        """End this instance's ``hold`` of ``job``'s slot (nothing if it is not held so)."""

    @abstractmethod
    async def request_cancel(self, job: str, hold: Holder) -> None:
        """Ask ``hold`` (another node's) to end: write the cancel record aimed at it."""

    async def close(self) -> None:
        """Free what the store holds open; slots still held end (etcd: with the lease)
        or expire."""
        return None
