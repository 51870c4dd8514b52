"""The one place that names a concrete cluster backend: leadership and concurrency slots
(imported lazily)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cronstable.cluster.base import Leadership, LeadershipStats
from cronstable.cluster.slots import SlotStore
from cronstable.config.models import ClusterConfig, ClusterKubernetes
from cronstable.etcd import EtcdPools, etcd_tls

if TYPE_CHECKING:
    from cronstable.cluster.kube_api import KubeClient, KubeCredentials


def kube_client(settings: ClusterKubernetes, *, timeout: float) -> KubeClient:
    """A client of the API server ``settings`` name (its credentials are read at the
    first request): the kubeconfig file, else the pod's service account."""
    from cronstable.cluster.kube_api import KubeClient, from_kubeconfig, in_cluster

    path = settings.kubeconfig

    def credentials() -> KubeCredentials:
        return from_kubeconfig(path) if path is not None else in_cluster()

    return KubeClient(credentials, namespace=settings.namespace, timeout=timeout)


def kube_timeout(ttl: float) -> float:
    """Seconds one request to the API server may take: a round (a few requests) must
    end within ttl - margin, so a fifth of the ttl, at least 0.2 s."""
    return max(0.2, ttl / 5)


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
    if config.backend == "kubernetes":
        from cronstable.cluster.kubernetes import KubernetesLeadership

        kubernetes = config.kubernetes
        assert kubernetes is not None  # the model requires it
        return KubernetesLeadership(
            node_name,
            ttl=config.lease_ttl,
            client=kube_client(kubernetes, timeout=kube_timeout(config.lease_ttl)),
            lease_name=kubernetes.lease_name,
            stats=stats,
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
    kind: str = "slots",
) -> SlotStore:
    """The concurrency slots of daemon ``instance`` on node ``node_name``, in the store
    ``config`` names (the leadership's etcd prefix, shared directory or namespace);
    ``kind`` names their key space there (``slots``: the jobs'; ``pools``: the cluster
    pools')."""
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
            kind=kind,
        )
    if config.backend == "kubernetes":
        from cronstable.cluster.slots_kubernetes import KubernetesSlots

        kubernetes = config.kubernetes
        assert kubernetes is not None  # the model requires it
        return KubernetesSlots(
            node_name,
            instance,
            ttl=config.lease_ttl,
            # a call is bounded by ttl/2 (claims.py) and makes two requests or more
            client=kube_client(kubernetes, timeout=max(0.2, config.lease_ttl / 6)),
            lease_name=kubernetes.lease_name,
            kind=kind,
        )
    from cronstable.cluster.slots_filesystem import FilesystemSlots

    filesystem = config.filesystem
    assert filesystem is not None
    return FilesystemSlots(
        node_name, instance, ttl=config.lease_ttl, path=filesystem.path, kind=kind
    )
