"""The ``cluster`` section of the Applier, and the gate the scheduler asks.

* prepare: when the section changed, build the backend the revision names and
  reach its store once (etcd answers, the shared directory is writable).  A
  store that *refuses* (a login or certificate etcd does not accept, a directory
  this daemon may not write: :mod:`cronstable.store_errors`) rejects the
  revision, naming the key; one that does not answer does not.  An unchanged
  section keeps the running backend (and its leadership).
* commit: the new backend starts and the old one is stopped (its leadership
  released); every revision's job-set id goes into this node's membership
  record.  A backend whose store did not answer is committed *connecting*: it
  does not campaign, so ``Leader`` jobs wait (``leadership_unknown``) while the
  others run, and its :class:`~cronstable.store_link.StoreLink` tries the store
  again with capped back-off; the first answer starts it, with no new revision.
* discard: close the prepared backend.

The steps are :class:`~cronstable.reconcile.backend_section.BackendSection`'s,
written once for the cluster, slot and state sections; this module says what is
its own (which store, how it is reached, what is logged).

Without a ``cluster`` section, or with ``electLeader: false``, the gate lets
every job run (today's behaviour on one node).  The node's name comes from the
command line (``--node-name``), never from the repository.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.cluster.base import Leadership, LeadershipError, LeadershipStats
from cronstable.cluster.factory import make_leadership
from cronstable.cluster.gate import Seen, refusal
from cronstable.cluster.placement import placement
from cronstable.cluster.view import cluster_view, fleet_cluster
from cronstable.config import DesiredState, Job
from cronstable.config.models import ClusterConfig
from cronstable.errors import KeyPath
from cronstable.etcd import EtcdError, EtcdPools, login_from_environment
from cronstable.ports import ClusterView, FleetCluster, Placement
from cronstable.reconcile.backend_section import BackendSection, Reach, Retire
from cronstable.store_link import StoreLink, retry_cap

logger = logging.getLogger(__name__)


def check_timeout(config: ClusterConfig) -> float:
    """How long reaching the cluster's store may take (a lease, at least 2 s)."""
    return max(2.0, float(config.lease_ttl))


def store_key(config: ClusterConfig) -> KeyPath:
    """Where a problem with the cluster's store is reported."""
    if config.backend == "etcd":
        return ("cluster", "etcd", "endpoints")
    if config.backend == "kubernetes":
        kubernetes = config.kubernetes
        if kubernetes is not None and kubernetes.kubeconfig is not None:
            return ("cluster", "kubernetes", "kubeconfig")
        return ("cluster", "kubernetes")
    return ("cluster", "filesystem", "path")


class ClusterSection(BackendSection[ClusterConfig, Leadership, None]):
    """The cluster section and the :class:`~cronstable.ports.ClusterGate`.

    ``pools``: the daemon's connections to etcd (shared with the slots and the state
    store); ``on_change``: called when what this node sees of the leadership changed
    (it wakes the scheduler)."""

    name = "cluster"
    store = "cluster"
    title = "Cluster"
    build_errors = (EtcdError, ValueError)
    check_errors = (LeadershipError,)

    def __init__(
        self,
        node_name: str,
        registry: CollectorRegistry | None = None,
        *,
        pools: EtcdPools | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.node_name = node_name
        self.pools = pools
        self.on_change = on_change
        self.stats = LeadershipStats()
        self.revision = ""
        """The revision applied last (:meth:`revision_applied`), for the membership record."""
        if registry is not None:
            registry.register(_ClusterCollector(self))

    @property
    def leadership(self) -> Leadership | None:
        """The leadership in use (None without leader election)."""
        return self.in_use

    # ------------------------------------------------------------ section hooks

    def wanted(self, desired: DesiredState) -> ClusterConfig | None:
        return desired.cluster

    def uses_backend(self, config: ClusterConfig) -> bool:
        return config.elect_leader

    def where(self, config: ClusterConfig) -> KeyPath:
        return store_key(config)

    def build(self, config: ClusterConfig, desired: DesiredState) -> Leadership:
        login = login_from_environment() if config.backend == "etcd" else (None, None)
        return make_leadership(
            config, self.node_name, login=login, stats=self.stats, pools=self.pools
        )

    def reach(
        self, backend: Leadership, config: ClusterConfig, desired: DesiredState
    ) -> Reach[None]:
        return Reach(backend.check, check_timeout(config), retry_cap(config.lease_ttl))

    def swap(
        self,
        new: Leadership | None,
        old: Leadership | None,
        desired: DesiredState,
        *,
        waiting: str | None,
    ) -> Retire | None:
        if new is not None:
            new.job_set_id = desired.job_set_id
            new.revision = self.revision
            new.on_change = self.on_change
        elif old is not None:
            logger.info("Cluster: leader election is off; every job runs on this node")
        return old.stop if old is not None else None

    def started(self, backend: Leadership, result: None, desired: DesiredState) -> None:
        self._join(backend)

    def waits(
        self,
        backend: Leadership,
        link: StoreLink[None],
        reach: Reach[None],
        desired: DesiredState,
    ) -> None:
        logger.warning(
            "Cluster: the %s store does not answer (%s); node %s waits for it: Leader jobs "
            "do not run meanwhile, PreferLeader and EveryNode jobs do (trying again with "
            "back-off up to %g s)",
            backend.backend,
            link.last_error,
            self.node_name,
            link.cap,
        )

    def answered(self, backend: Leadership, result: None) -> None:
        self._join(backend)
        if self.on_change is not None:
            self.on_change()

    def committed(self, desired: DesiredState) -> None:
        # every revision's job-set id goes into the membership record
        if self.in_use is not None:
            self.in_use.job_set_id = desired.job_set_id

    async def shut(self) -> None:
        if self.in_use is not None:
            await self.in_use.stop()

    def _join(self, leadership: Leadership) -> None:
        leadership.start()
        config = self.config
        logger.info(
            "Cluster: node %s joins through %r (leaseTtl %s s, %s)",
            self.node_name,
            leadership,
            leadership.ttl,
            config.distribution if config is not None else "",
        )

    # ------------------------------------------------------------ the gate

    def allows(self, job: Job) -> str | None:
        """None when ``job`` may start on this node now; else why not."""
        config = self.config
        if config is None or not config.elect_leader:
            return None
        return refusal(job.config.cluster_policy, job.name, config.distribution, self.seen())

    def one_run(self, job: Job) -> bool:
        """Whether ``job`` runs once per cluster (a ``Leader`` job under leader election)."""
        config = self.config
        return config is not None and config.elect_leader and job.config.cluster_policy == "Leader"

    def gated(self, job: Job) -> bool:
        """Whether the leadership decides where ``job`` runs (not ``EveryNode``, under
        leader election)."""
        config = self.config
        return (
            config is not None and config.elect_leader and job.config.cluster_policy != "EveryNode"
        )

    def seen(self) -> Seen:
        lead = self.leadership
        if lead is None or not lead.known():
            return Seen(self.node_name, False, None, False, ())
        return Seen(
            self.node_name,
            True,
            lead.leader(),
            lead.is_leader(),
            tuple(m.name for m in lead.members()),
            lead.conflict(),
        )

    def members(self) -> tuple[str, ...] | None:
        """The live members' names; None while the leadership is unknown (or off)."""
        seen = self.seen()
        return tuple(seen.members) if seen.known else None

    async def release(self) -> None:
        """Give up the leadership now (before the shutdown drain): Leader jobs stop here,
        and no revision applied from now on starts a new one."""
        await self.stop_using()

    # ------------------------------------------------------------ visibility

    def view(self, jobs: Iterator[Job] | None = None) -> ClusterView:
        """What ``GET /cluster`` shows (:func:`cronstable.cluster.view.cluster_view`)."""
        return cluster_view(self, jobs)

    def fleet(self) -> FleetCluster:
        """The members as ``GET /fleet`` shows them (:func:`~.view.fleet_cluster`)."""
        return fleet_cluster(self)

    def placement(self, job: Job) -> Placement:
        """Which node will run ``job``'s next fire (:mod:`.placement`)."""
        config = self.config
        distribution = config.distribution if config is not None and config.elect_leader else None
        return placement(job.config.cluster_policy, job.name, distribution, self.seen())

    def revision_applied(self, revision: str) -> None:
        """The applier applied ``revision``: this node's membership record says so from its
        next round on."""
        self.revision = revision
        if self.in_use is not None:
            self.in_use.revision = revision


class _ClusterCollector(Collector):
    def __init__(self, section: ClusterSection) -> None:
        self.section = section

    def collect(self) -> Iterator[Metric]:
        section = self.section
        enabled = section.config is not None and section.config.elect_leader
        yield GaugeMetricFamily(
            "cronstable_cluster_enabled",
            "1 when leader election is configured.",
            value=int(enabled),
        )
        lead = section.leadership
        seen = section.seen()
        yield GaugeMetricFamily(
            "cronstable_cluster_is_leader",
            "1 while this node is the leader.",
            value=int(seen.is_leader),
        )
        yield GaugeMetricFamily(
            "cronstable_cluster_leadership_known",
            "1 while this node trusts its view of the leadership (its lease is renewed).",
            value=int(seen.known),
        )
        yield CounterMetricFamily(
            "cronstable_cluster_leader_transitions",
            "Times this node became or stopped being the leader.",
            value=section.stats.transitions,
        )
        yield CounterMetricFamily(
            "cronstable_cluster_lease_renew_failures",
            "Rounds with the leadership store that failed.",
            value=section.stats.renew_failures,
        )
        members = lead.members() if lead is not None else ()
        yield GaugeMetricFamily(
            "cronstable_cluster_members", "Live members this node sees.", value=len(members)
        )
        mine = next((m.job_set_id for m in members if m.name == section.node_name), None)
        yield GaugeMetricFamily(
            "cronstable_cluster_members_other_job_set",
            "Live members whose applied job-set id differs from this node's "
            "(nodes on different revisions).",
            value=sum(1 for m in members if mine is not None and m.job_set_id != mine),
        )
