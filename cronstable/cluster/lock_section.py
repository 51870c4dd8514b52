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

from prometheus_client import CollectorRegistry

from cronstable.cluster.pool_section import PoolSlotSection
from cronstable.cluster.pool_slots import PoolSlots
from cronstable.cluster.slot_section import Figure, SlotStoreCollector
from cronstable.config import DesiredState
from cronstable.config.models import ClusterConfig
from cronstable.etcd import EtcdPools

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
    kind = KIND
    holds = "cronstable lock holds its locks"
    follows = "cronstable lock follows"

    def __init__(
        self,
        slots: PoolSlots,
        registry: CollectorRegistry | None = None,
        *,
        pools: EtcdPools | None = None,
    ) -> None:
        super().__init__(slots, None, pools=pools)
        if registry is not None:
            registry.register(_lock_collector(slots))

    def wanted(self, desired: DesiredState) -> ClusterConfig | None:
        return desired.cluster


def _lock_collector(slots: PoolSlots) -> SlotStoreCollector:
    return SlotStoreCollector(
        Figure(
            "cronstable_lock_cluster_held",
            "Named locks (cronstable lock) this node holds in the cluster's store now.",
            lambda: len(slots.held()),
        ),
        Figure(
            "cronstable_lock_cluster_lost",
            "Named locks another node took while a run here held them (a possible overlap).",
            lambda: slots.stats.lost,
        ),
        Figure(
            "cronstable_lock_cluster_store_failures",
            "Operations on the store of the named locks that failed.",
            lambda: slots.stats.store_failures,
        ),
    )
