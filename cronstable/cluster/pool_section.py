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

from prometheus_client import CollectorRegistry

from cronstable.cluster.pool_slots import PoolSlots
from cronstable.cluster.slot_section import Figure, SlotStoreCollector, SlotStoreSection
from cronstable.config import DesiredState
from cronstable.config.models import ClusterConfig
from cronstable.etcd import EtcdPools

logger = logging.getLogger(__name__)


def uses_cluster_pools(desired: DesiredState) -> bool:
    return any(pool.scope == "cluster" for pool in desired.pools.values())


class PoolSlotSection(SlotStoreSection):
    """``pools``: the daemon's connections to etcd (shared with the leadership, the
    job slots and the state store)."""

    name = "cluster-pools"
    store = "pool-slots"
    title = "Cluster pools"
    refused_for = " for pools with scope cluster"
    kind = "pools"
    holds = "pools with scope cluster hold their slots"
    follows = "launches of pools with scope cluster follow"

    def __init__(
        self,
        slots: PoolSlots,
        registry: CollectorRegistry | None = None,
        *,
        pools: EtcdPools | None = None,
    ) -> None:
        super().__init__(slots, pools=pools)
        self.slots = slots
        if registry is not None:
            registry.register(_pool_collector(slots))

    def wanted(self, desired: DesiredState) -> ClusterConfig | None:
        if desired.cluster is None or not uses_cluster_pools(desired):
            return None
        return desired.cluster


def _pool_collector(slots: PoolSlots) -> SlotStoreCollector:
    return SlotStoreCollector(
        Figure(
            "cronstable_pool_cluster_slots_held",
            "Slots of pools with scope cluster this node holds in the shared store now.",
            lambda: len(slots.held()),
        ),
        Figure(
            "cronstable_pool_cluster_slots_lost",
            "Slots of cluster pools another node took while a run here held them (a "
            "possible overlap).",
            lambda: slots.stats.lost,
        ),
        Figure(
            "cronstable_pool_cluster_slot_store_failures",
            "Operations on the store of the cluster pools that failed.",
            lambda: slots.stats.store_failures,
        ),
    )
