"""The Applier section of the named locks: which store ``cronstable lock`` holds them in.

The cluster pools' section (:mod:`.pool_section`) over another key space: when a
revision has a ``cluster`` section, build the slot store of the cluster's backend
with key space ``locks`` (etcd ``<prefix>locks/<name>``, the shared directory's
``locks/``, Kubernetes Leases ``<leaseName>-lock-*``) and reach it once; a store
that refuses rejects the revision, naming the key; one that does not answer is
committed *connecting*, and until it answers ``onStoreUnavailable`` decides for
every lock taken (degrade: the lock holds on this node only; fail-closed: the
taker waits).  Without a cluster section the locks hold on the node alone.

Metrics: ``cronstable_lock_cluster_held`` (named locks this node holds in the store
now) and the counters ``cronstable_lock_cluster_lost`` and
``cronstable_lock_cluster_store_failures``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.cluster.factory import make_slots
from cronstable.cluster.pool_section import PoolSlotSection
from cronstable.cluster.pool_slots import PoolSlots
from cronstable.cluster.slots import SlotStore
from cronstable.config import DesiredState
from cronstable.config.models import ClusterConfig
from cronstable.etcd import EtcdPools, login_from_environment
from cronstable.reconcile.backend_section import Reach
from cronstable.store_link import StoreLink

logger = logging.getLogger(__name__)

KIND = "locks"
"""The locks' key space in the cluster's store."""


def lock_record(name: str, index: int) -> str:
    """The store's name of lock ``name`` (a lock is a pool of one slot): the name alone.
    Give it to the lock's :class:`PoolSlots` as ``naming``, with ``title="Cluster locks"``."""
    return name


class LockSlotSection(PoolSlotSection):
    """``locks``: the daemon's connections to etcd (shared with the other sections)."""

    name = "cluster-locks"
    store = "lock-slots"
    title = "Cluster locks"
    refused_for = " for cronstable lock"

    def __init__(
        self,
        slots: PoolSlots,
        registry: CollectorRegistry | None = None,
        *,
        pools: EtcdPools | None = None,
    ) -> None:
        super().__init__(slots, None, pools=pools)
        if registry is not None:
            registry.register(_LockCollector(slots))

    def wanted(self, desired: DesiredState) -> ClusterConfig | None:
        return desired.cluster

    def build(self, config: ClusterConfig, desired: DesiredState) -> SlotStore:
        login = login_from_environment() if config.backend == "etcd" else (None, None)
        slots = self.slots
        return make_slots(
            config, slots.node, slots.instance, login=login, pools=self.pools, kind=KIND
        )

    def started(self, backend: SlotStore, result: None, desired: DesiredState) -> None:
        logger.info(
            "Cluster locks: cronstable lock holds its locks in %r (leaseTtl %s s)",
            backend,
            backend.ttl,
        )

    def waits(
        self,
        backend: SlotStore,
        link: StoreLink[None],
        reach: Reach[None],
        desired: DesiredState,
    ) -> None:
        logger.warning(
            "Cluster locks: the %s store does not answer (%s); until it does, cronstable "
            "lock follows onStoreUnavailable (trying again with back-off up to %g s)",
            backend.backend,
            link.last_error,
            link.cap,
        )

    def answered(self, backend: SlotStore, result: None) -> None:
        logger.info("Cluster locks: cronstable lock holds its locks in %r", backend)


class _LockCollector(Collector):
    def __init__(self, slots: PoolSlots) -> None:
        self.slots = slots

    def collect(self) -> Iterator[Metric]:
        stats = self.slots.stats
        yield GaugeMetricFamily(
            "cronstable_lock_cluster_held",
            "Named locks (cronstable lock) this node holds in the cluster's store now.",
            value=len(self.slots.held()),
        )
        yield CounterMetricFamily(
            "cronstable_lock_cluster_lost",
            "Named locks another node took while a run here held them (a possible overlap).",
            value=stats.lost,
        )
        yield CounterMetricFamily(
            "cronstable_lock_cluster_store_failures",
            "Operations on the store of the named locks that failed.",
            value=stats.store_failures,
        )
