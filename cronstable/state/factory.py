"""The one place that names a concrete state store (imported lazily)."""

from __future__ import annotations

from pathlib import Path

from cronstable.config.models import ClusterConfig, StateConfig
from cronstable.etcd import EtcdPools, etcd_tls
from cronstable.state.base import StateStore


def make_store(
    config: StateConfig,
    cluster: ClusterConfig | None,
    state_dir: str | Path,
    *,
    login: tuple[str | None, str | None] = (None, None),
    pools: EtcdPools | None = None,
) -> StateStore:
    """The store ``config`` names: ``filesystem`` in ``state_dir`` (shared by the nodes
    with ``shared: true``), ``etcd`` on the etcd of
    the ``cluster`` section (the loader refuses a state on etcd without one).

    ``login``: etcd's username and password, from the daemon's environment; ``pools``:
    the daemon's connections to etcd (the cluster's pool, shared)."""
    if config.backend == "filesystem":
        from cronstable.state.filesystem import FilesystemStore

        return FilesystemStore(state_dir, shared=config.shared)
    from cronstable.state.etcd import EtcdStore

    etcd = cluster.etcd if cluster is not None else None
    if etcd is None:
        raise ValueError("state backend etcd needs the etcd settings of the cluster section")
    return EtcdStore(
        etcd.endpoints,
        prefix=etcd.prefix,
        tls=etcd_tls(etcd),
        username=login[0],
        password=login[1],
        pools=pools,
    )
