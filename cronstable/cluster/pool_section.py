"""The Applier section of the cluster pools: which store their slots are held in.

Like the cluster slots' section (:mod:`.slot_section`), over the same stores: when
a revision has a ``cluster`` section and a pool with ``scope: cluster``, build the
slot store of the cluster's backend (key space ``pools``) and reach it once; a
store that refuses rejects the revision, naming the key; one that does not answer
is committed *connecting*, and until it answers ``onStoreUnavailable`` decides
for every launch of a cluster pool (degrade: the node-local cap only;
fail-closed: the launch waits).  An unchanged store stays.

Metrics: ``cronstable_pool_cluster_slots_held`` (slots of cluster pools this
node holds in the store now) and the counters ``cronstable_pool_cluster_slots_lost``
and ``cronstable_pool_cluster_slot_store_failures``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.cluster.factory import make_slots
from cronstable.cluster.pool_slots import PoolSlots
from cronstable.cluster.section import check_timeout, store_key
from cronstable.cluster.slots import SlotError, SlotStore
from cronstable.config import DesiredState
from cronstable.config.models import ClusterConfig
from cronstable.errors import KeyPath
from cronstable.etcd import EtcdError, EtcdPools, login_from_environment
from cronstable.reconcile.backend_section import BackendSection, Reach, Retire
from cronstable.store_link import StoreLink, retry_cap

logger = logging.getLogger(__name__)


def uses_cluster_pools(desired: DesiredState) -> bool:
    return any(pool.scope == "cluster" for pool in desired.pools.values())


class PoolSlotSection(BackendSection[ClusterConfig, SlotStore, None]):
    """``pools``: the daemon's connections to etcd (shared with the leadership, the
    job slots and the state store)."""

    name = "cluster-pools"
    store = "pool-slots"
    title = "Cluster pools"
    build_errors = (EtcdError, ValueError)
    check_errors = (SlotError,)
    refused_for = " for pools with scope cluster"

    def __init__(
        self,
        slots: PoolSlots,
        registry: CollectorRegistry | None = None,
        *,
        pools: EtcdPools | None = None,
    ) -> None:
        super().__init__()
        self.slots = slots
        self.pools = pools
        if registry is not None:
            registry.register(_PoolSlotCollector(slots))

    def wanted(self, desired: DesiredState) -> ClusterConfig | None:
        if desired.cluster is None or not uses_cluster_pools(desired):
            return None
        return desired.cluster

    def where(self, config: ClusterConfig) -> KeyPath:
        return store_key(config)

    def build(self, config: ClusterConfig, desired: DesiredState) -> SlotStore:
        login = login_from_environment() if config.backend == "etcd" else (None, None)
        slots = self.slots
        return make_slots(
            config, slots.node, slots.instance, login=login, pools=self.pools, kind="pools"
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
        self.slots.use(new)
        return old.close if old is not None else None

    def started(self, backend: SlotStore, result: None, desired: DesiredState) -> None:
        logger.info(
            "Cluster pools: pools with scope cluster hold their slots in %r (leaseTtl %s s)",
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
            "Cluster pools: the %s store does not answer (%s); until it does, launches of "
            "pools with scope cluster follow onStoreUnavailable (trying again with back-off "
            "up to %g s)",
            backend.backend,
            link.last_error,
            link.cap,
        )

    def answered(self, backend: SlotStore, result: None) -> None:
        logger.info("Cluster pools: pools with scope cluster hold their slots in %r", backend)

    async def shut(self) -> None:
        await self.slots.close()


class _PoolSlotCollector(Collector):
    def __init__(self, slots: PoolSlots) -> None:
        self.slots = slots

    def collect(self) -> Iterator[Metric]:
        stats = self.slots.stats
        yield GaugeMetricFamily(
            "cronstable_pool_cluster_slots_held",
            "Slots of pools with scope cluster this node holds in the shared store now.",
            value=len(self.slots.held()),
        )
        yield CounterMetricFamily(
            "cronstable_pool_cluster_slots_lost",
            "Slots of cluster pools another node took while a run here held them (a "
            "possible overlap).",
            value=stats.lost,
        )
        yield CounterMetricFamily(
            "cronstable_pool_cluster_slot_store_failures",
            "Operations on the store of the cluster pools that failed.",
            value=stats.store_failures,
        )
