"""The one place that names a concrete cluster backend: leadership and concurrency slots
(imported lazily)."""

from __future__ import annotations

from cronstable.cluster.base import Leadership, LeadershipStats
from cronstable.cluster.slots import SlotStore
from cronstable.config.models import ClusterConfig
from cronstable.etcd import EtcdPools, etcd_tls


def make_leadership(
    config: ClusterConfig,
    node_name: str,
    *,
    login: tuple[str | None, str | None] = (None, None),
    stats: LeadershipStats | None = None,
    pools: EtcdPools | None = None,
) -> Leadership:
    """The backend ``config`` names, for node ``node_name`` (not started).

    ``login``: etcd's username and password, from the daemon's environment; ``pools``:
    the daemon's connections to etcd (one pool per cluster, shared)."""
    if config.backend == "etcd":
        from cronstable.cluster.etcd import EtcdLeadership

        etcd = config.etcd
        assert etcd is not None  # the model requires it
        return EtcdLeadership(
            node_name,
            ttl=config.lease_ttl,
            endpoints=etcd.endpoints,
            prefix=etcd.prefix,
            tls=etcd_tls(etcd),
            username=login[0],
            password=login[1],
            stats=stats,
            pools=pools,
        )
    from cronstable.cluster.filesystem import FilesystemLeadership

    filesystem = config.filesystem
    assert filesystem is not None
    return FilesystemLeadership(node_name, ttl=config.lease_ttl, path=filesystem.path, stats=stats)


def make_slots(
    config: ClusterConfig,
    node_name: str,
    instance: str,
    *,
    login: tuple[str | None, str | None] = (None, None),
    pools: EtcdPools | None = None,
) -> SlotStore:
    """The concurrency slots of daemon ``instance`` on node ``node_name``, in the store
    ``config`` names (the leadership's etcd prefix or shared directory)."""
    if config.backend == "etcd":
        from cronstable.cluster.slots_etcd import EtcdSlots

        etcd = config.etcd
        assert etcd is not None  # the model requires it
        return EtcdSlots(
            node_name,
            instance,
            ttl=config.lease_ttl,
            endpoints=etcd.endpoints,
            prefix=etcd.prefix,
            tls=etcd_tls(etcd),
            username=login[0],
            password=login[1],
            pools=pools,
        )
    from cronstable.cluster.slots_filesystem import FilesystemSlots

    filesystem = config.filesystem
    assert filesystem is not None
    return FilesystemSlots(node_name, instance, ttl=config.lease_ttl, path=filesystem.path)
