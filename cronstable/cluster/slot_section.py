"""The Applier section of the cluster slots: which store the slot guard holds slots in.

* prepare: when a revision has a ``cluster`` section and a job that holds a slot
  (``concurrencyScope: cluster`` with Forbid or Replace), build the slot store of
  the cluster's backend and reach it once; a store that refuses
  (:mod:`cronstable.store_errors`) rejects the revision, naming the key.
  ``electLeader: false`` changes nothing here: slots use the store all the same.
  An unchanged store stays.
* commit: the guard holds slots in the new store from now on; the old one is
  closed (etcd: its lease revoked; the guard takes its slots again in the new one).
  A store that did not answer is committed all the same, *connecting*: until it
  answers every claim fails, and ``onStoreUnavailable`` decides as in any outage
  (degrade: node-local concurrency only; fail-closed: ``slot_unavailable``); its
  :class:`~cronstable.store_link.StoreLink` tries it again with capped back-off.
* discard: close the prepared store.

The steps are :class:`~cronstable.reconcile.backend_section.BackendSection`'s,
written once for the cluster, slot and state sections; this module says what is
its own (which store, how it is reached, what is logged).

Metrics: ``cronstable_cluster_slots_held`` and the slot counters (cancel records
sent and obeyed, slots lost, store failures); slot refusals are counted with the
other skipped fires (``cronstable_fires_skipped{reason="slot_held"}`` …).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.cluster.claims import SlotGuard, uses_slot
from cronstable.cluster.factory import make_slots
from cronstable.cluster.section import check_timeout, store_key
from cronstable.cluster.slots import SlotError, SlotStore
from cronstable.config import DesiredState
from cronstable.config.models import ClusterConfig
from cronstable.errors import KeyPath
from cronstable.etcd import EtcdError, EtcdPools, login_from_environment
from cronstable.reconcile.backend_section import BackendSection, Reach, Retire
from cronstable.store_link import StoreLink, retry_cap

logger = logging.getLogger(__name__)


class _SlotOwner(Protocol):
    """What holds records in a section's slot store: the slot guard, a pool's or the
    locks' :class:`~cronstable.cluster.pool_slots.PoolSlots`."""

    node: str
    instance: str

    def use(self, store: SlotStore | None) -> SlotStore | None: ...

    async def close(self) -> None: ...


class SlotStoreSection(BackendSection[ClusterConfig, SlotStore, None]):
    """A slot store of the cluster's backend in one key space (``kind``), held by one
    owner: the steps and log lines the slot, pool and lock sections share.  A subclass
    says which revisions want it and, for the log, who holds what (``holds``) and who
    follows ``onStoreUnavailable`` while the store does not answer (``follows``)."""

    build_errors = (EtcdError, ValueError)
    check_errors = (SlotError,)
    kind = "slots"
    """The key space in the cluster's store."""
    holds = ""
    follows = ""

    def __init__(self, owner: _SlotOwner, *, pools: EtcdPools | None = None) -> None:
        super().__init__()
        self.owner = owner
        self.pools = pools

    def where(self, config: ClusterConfig) -> KeyPath:
        return store_key(config)

    def build(self, config: ClusterConfig, desired: DesiredState) -> SlotStore:
        login = login_from_environment() if config.backend == "etcd" else (None, None)
        owner = self.owner
        return make_slots(
            config, owner.node, owner.instance, login=login, pools=self.pools, kind=self.kind
        )

    def reach(
        self, backend: SlotStore, config: ClusterConfig, desired: DesiredState
    ) -> Reach[None]:
        return Reach(backend.check, check_timeout(config), retry_cap(config.lease_ttl))

    def swap(
        self,
        new: SlotStore | None,
        old: SlotStore | None,
        desired: DesiredState,
        *,
        waiting: str | None,
    ) -> Retire | None:
        self.owner.use(new)  # the owner takes its records again in the new store
        return old.close if old is not None else None  # etcd: its lease revoked

    def started(self, backend: SlotStore, result: None, desired: DesiredState) -> None:
        logger.info("%s: %s in %r (leaseTtl %s s)", self.title, self.holds, backend, backend.ttl)

    def waits(
        self,
        backend: SlotStore,
        link: StoreLink[None],
        reach: Reach[None],
        desired: DesiredState,
    ) -> None:
        logger.warning(
            "%s: the %s store does not answer (%s); until it does, %s onStoreUnavailable "
            "(trying again with back-off up to %g s)",
            self.title,
            backend.backend,
            link.last_error,
            self.follows,
            link.cap,
        )

    def answered(self, backend: SlotStore, result: None) -> None:
        logger.info("%s: %s in %r", self.title, self.holds, backend)

    async def shut(self) -> None:
        await self.owner.close()


class SlotSection(SlotStoreSection):
    """``pools``: the daemon's connections to etcd (shared with the leadership and the
    state store)."""

    name = "cluster-slots"
    store = "slots"
    title = "Cluster slots"
    refused_for = " for concurrencyScope cluster"
    holds = "jobs with concurrencyScope cluster hold their slot"
    follows = "jobs with concurrencyScope cluster follow"

    def __init__(
        self,
        guard: SlotGuard,
        registry: CollectorRegistry | None = None,
        *,
        pools: EtcdPools | None = None,
    ) -> None:
        super().__init__(guard, pools=pools)
        self.guard = guard
        if registry is not None:
            registry.register(_slot_collector(guard))

    def wanted(self, desired: DesiredState) -> ClusterConfig | None:
        if desired.cluster is None or not any(uses_slot(job) for job in desired.jobs.values()):
            return None
        return desired.cluster  # the jobs count too: slots only while one holds them


@dataclass(frozen=True, slots=True)
class Figure:
    """One metric of a slot store's owner: its name, help text and current value."""

    name: str
    help: str
    value: Callable[[], float]


class SlotStoreCollector(Collector):
    """The metrics of the owner of a slot store (the slot guard, the cluster pools',
    the named locks'): a gauge of the records it holds now, then its counters."""

    def __init__(self, held: Figure, *counters: Figure) -> None:
        self.held = held
        self.counters = counters

    def collect(self) -> Iterator[Metric]:
        held = self.held
        yield GaugeMetricFamily(held.name, held.help, value=held.value())
        for counter in self.counters:
            yield CounterMetricFamily(counter.name, counter.help, value=counter.value())


def _slot_collector(guard: SlotGuard) -> SlotStoreCollector:
    return SlotStoreCollector(
        Figure(
            "cronstable_cluster_slots_held",
            "Cluster concurrency slots this node holds now (concurrencyScope cluster).",
            lambda: len(guard.held()),
        ),
        Figure(
            "cronstable_cluster_slot_cancels_sent",
            "Cancel records this node sent to another node's slot (concurrencyPolicy Replace).",
            lambda: guard.stats.cancels_sent,
        ),
        Figure(
            "cronstable_cluster_slot_cancels_obeyed",
            "Cancel records aimed at this node's slot that it obeyed (its runs replaced).",
            lambda: guard.stats.cancels_obeyed,
        ),
        Figure(
            "cronstable_cluster_slots_lost",
            "Slots another node took while a run here still went (a possible overlap).",
            lambda: guard.stats.lost,
        ),
        Figure(
            "cronstable_cluster_slot_store_failures",
            "Operations on the cluster slot store that failed.",
            lambda: guard.stats.store_failures,
        ),
    )
