"""The one place that names a concrete leadership backend (imported lazily)."""

from __future__ import annotations

from cronstable.cluster.base import Leadership, LeadershipStats
from cronstable.config.models import ClusterConfig
from cronstable.etcd import EtcdTLS


def make_leadership(
    config: ClusterConfig,
    node_name: str,
    *,
    login: tuple[str | None, str | None] = (None, None),
    stats: LeadershipStats | None = None,
) -> Leadership:
    """The backend ``config`` names, for node ``node_name`` (not started).

    ``login``: etcd's username and password, from the daemon's environment."""
    if config.backend == "etcd":
        from cronstable.cluster.etcd import EtcdLeadership

        etcd = config.etcd
        assert etcd is not None  # the model requires it
        tls = None
        if etcd.ca_file is not None or etcd.cert_file is not None:
            tls = EtcdTLS(ca=etcd.ca_file, cert=etcd.cert_file, key=etcd.key_file)
        return EtcdLeadership(
            node_name,
            ttl=config.lease_ttl,
            endpoints=etcd.endpoints,
            prefix=etcd.prefix,
            tls=tls,
            username=login[0],
            password=login[1],
            stats=stats,
        )
    from cronstable.cluster.filesystem import FilesystemLeadership

    filesystem = config.filesystem
    assert filesystem is not None
    return FilesystemLeadership(node_name, ttl=config.lease_ttl, path=filesystem.path, stats=stats)
