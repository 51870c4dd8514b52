"""Every store a cluster or the durable state lives on, as fixtures parametrized over them.

A contract test asks for ``cluster_backend`` (or ``state_backend``) and runs once per
backend, with the ids ``etcd``, ``filesystem`` and ``kubernetes``:

* ``cluster_backend``: ``etcd`` is the session's shared etcd (``shared_etcd_server``)
  under a key prefix of the test's own (``etcd_prefix``); ``filesystem`` is a fresh
  shared directory ``tmp_path / "shared"``; ``kubernetes`` is the session's Lease
  server (``lease_server``, the conformance double of :mod:`lease_server`) in a
  namespace of the test's own (``kube_namespace``), reached through a kubeconfig
  file.  Each server starts only for its own case.
* ``own_cluster_backend``: etcd and filesystem as above, with an etcd of the test's
  own (``etcd_server``) that it may stop and start again (outage tests).
* ``state_backend``: ``filesystem`` and ``etcd`` (the shared one, the test's prefix);
  a test may ask for ``filesystem-shared`` too (a directory with ``state.shared: true``,
  one file per record, where ``filesystem`` is a node's own directory, one log).

A test that needs one backend only narrows the parameters::

    @pytest.mark.parametrize("cluster_backend", ["etcd"], indirect=True)

Registered with ``pytest_plugins`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from etcd_server import EtcdServer
from lease_server import LeaseServer

if TYPE_CHECKING:  # imported where used: loading the plugin imports no cronstable module
    from cronstable.config.models import ClusterConfig
    from cronstable.state.base import StateStore

CLUSTER_BACKENDS = ["etcd", "filesystem", "kubernetes"]
OWN_CLUSTER_BACKENDS = ["etcd", "filesystem"]
STATE_BACKENDS = ["filesystem", "etcd"]


@dataclass(frozen=True)
class ClusterBackend:
    """One cluster store: etcd (``server`` and ``prefix``), a shared directory, or a
    Lease server (``leases``, with ``namespace`` and the ``kubeconfig`` file)."""

    name: str
    server: EtcdServer | None = None
    prefix: str = ""
    shared: Path | None = None
    leases: LeaseServer | None = None
    namespace: str = ""
    kubeconfig: Path | None = None

    def settings(self) -> dict[str, Any]:
        """The store's key of the cluster section: ``{"etcd": …}``, ``{"filesystem": …}``
        or ``{"kubernetes": …}``."""
        if self.server is not None:
            return {"etcd": {"endpoints": [self.server.endpoint], "prefix": self.prefix}}
        if self.leases is not None:
            return {"kubernetes": {"namespace": self.namespace, "kubeconfig": str(self.kubeconfig)}}
        return {"filesystem": {"path": str(self.shared)}}

    def config(self, **fields: Any) -> ClusterConfig:
        """The cluster section on this store, with ``fields`` (``leaseTtl=2``) besides."""
        from cronstable.config.models import ClusterConfig

        return ClusterConfig.model_validate({"backend": self.name, **fields} | self.settings())

    def yaml(self, ttl: int) -> str:
        """The cluster section as a configuration file says it (leaseTtl ``ttl``)."""
        if self.server is not None:
            store = f'etcd: {{endpoints: ["{self.server.endpoint}"], prefix: "{self.prefix}"}}'
        elif self.leases is not None:
            store = f'kubernetes: {{namespace: {self.namespace}, kubeconfig: "{self.kubeconfig}"}}'
        else:
            store = f'filesystem: {{path: "{self.shared}"}}'
        return textwrap.dedent(
            f"""\
            cluster:
              backend: {self.name}
              leaseTtl: {ttl}
              {store}
            """
        )


def _cluster_backend(request: pytest.FixtureRequest, tmp_path: Path, server: str) -> ClusterBackend:
    if request.param == "etcd":
        etcd: EtcdServer = request.getfixturevalue(server)
        prefix: str = request.getfixturevalue("etcd_prefix")
        return ClusterBackend("etcd", server=etcd, prefix=prefix)
    if request.param == "kubernetes":
        leases: LeaseServer = request.getfixturevalue("lease_server")
        namespace: str = request.getfixturevalue("kube_namespace")
        kubeconfig = leases.kubeconfig(tmp_path / "kubeconfig")
        return ClusterBackend(
            "kubernetes", leases=leases, namespace=namespace, kubeconfig=kubeconfig
        )
    shared = tmp_path / "shared"
    shared.mkdir()
    return ClusterBackend("filesystem", shared=shared)


@pytest.fixture(params=CLUSTER_BACKENDS)
def cluster_backend(request: pytest.FixtureRequest, tmp_path: Path) -> ClusterBackend:
    """Each cluster store in turn; etcd is the shared server (never stop it)."""
    return _cluster_backend(request, tmp_path, "shared_etcd_server")


@pytest.fixture(params=OWN_CLUSTER_BACKENDS)
def own_cluster_backend(request: pytest.FixtureRequest, tmp_path: Path) -> ClusterBackend:
    """Each cluster store in turn; etcd is a server of the test's own, free to stop."""
    return _cluster_backend(request, tmp_path, "etcd_server")


@dataclass(frozen=True)
class StateBackend:
    """One durable-state store: a directory (``shared``: the layout of a directory the
    nodes share), or etcd (``server`` and ``prefix``)."""

    name: str
    server: EtcdServer | None = None
    prefix: str = ""
    shared: bool = False

    def store(self, directory: Path) -> StateStore:
        """A client of this store; the filesystem one keeps its records in ``directory``."""
        from cronstable.state.etcd import EtcdStore
        from cronstable.state.filesystem import FilesystemStore

        if self.server is not None:
            return EtcdStore([self.server.endpoint], prefix=self.prefix)
        return FilesystemStore(directory, shared=self.shared)


@pytest.fixture(params=STATE_BACKENDS)
def state_backend(request: pytest.FixtureRequest) -> StateBackend:
    """Each state store in turn; etcd is the shared server (never stop it)."""
    return state_backend_of(request)


def state_backend_of(request: pytest.FixtureRequest) -> StateBackend:
    """The state store ``request.param`` names (``filesystem-shared`` too: a module
    that tests both layouts of a directory overrides ``state_backend`` with it)."""
    if request.param == "etcd":
        server: EtcdServer = request.getfixturevalue("shared_etcd_server")
        prefix: str = request.getfixturevalue("etcd_prefix")
        return StateBackend("etcd", server=server, prefix=prefix)
    return StateBackend("filesystem", shared=request.param == "filesystem-shared")
