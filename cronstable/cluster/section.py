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

Without a ``cluster`` section, or with ``electLeader: false``, the gate lets
every job run (today's behaviour on one node).  The node's name comes from the
command line (``--node-name``), never from the repository.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.cluster.base import Leadership, LeadershipError, LeadershipStats
from cronstable.cluster.factory import make_leadership
from cronstable.cluster.gate import Seen, refusal
from cronstable.cluster.view import cluster_view
from cronstable.config import ConfigError, DesiredState, Job
from cronstable.config.models import ClusterConfig
from cronstable.errors import KeyPath
from cronstable.etcd import EtcdError, login_from_environment
from cronstable.ports import ClusterView
from cronstable.reconcile.plan import Plan
from cronstable.redact import redact
from cronstable.store_errors import fault_of
from cronstable.store_link import StoreLink, retry_cap

logger = logging.getLogger(__name__)

_KEEP = object()
"""prepare's answer for an unchanged section: the running backend stays."""


@dataclass(frozen=True, slots=True)
class _Waiting:
    """prepare's answer when the store did not answer: the backend, committed connecting."""

    leadership: Leadership
    error: BaseException


def _check_timeout(config: ClusterConfig) -> float:
    return max(2.0, float(config.lease_ttl))


def _store_key(config: ClusterConfig) -> KeyPath:
    return (
        ("cluster", "etcd", "endpoints")
        if config.backend == "etcd"
        else (
            "cluster",
            "filesystem",
            "path",
        )
    )


class ClusterSection:
    """The cluster section and the :class:`~cronstable.ports.ClusterGate`."""

    name = "cluster"

    def __init__(self, node_name: str, registry: CollectorRegistry | None = None) -> None:
        self.node_name = node_name
        self.config: ClusterConfig | None = None
        self.leadership: Leadership | None = None
        self.stats = LeadershipStats()
        self._stopping: set[asyncio.Task[None]] = set()
        self._released = False
        self.link: StoreLink[Any] | None = None
        """The store of the leadership in use: up, or connecting while it does not answer."""
        self.on_change: Callable[[], None] | None = None
        """Called when what this node sees of the leadership changed (wakes the scheduler)."""
        if registry is not None:
            registry.register(_ClusterCollector(self))

    # ------------------------------------------------------------ section

    def affected(self, plan: Plan) -> bool:
        return True  # every revision's job-set id goes into the membership record

    async def prepare(self, desired: DesiredState) -> Any:
        config = desired.cluster
        if config == self.config or self._released:
            return _KEEP  # unchanged, or the daemon is stopping: no new leadership
        if config is None or not config.elect_leader:
            return None
        where = _store_key(config)
        try:
            login = login_from_environment() if config.backend == "etcd" else (None, None)
            leadership = make_leadership(config, self.node_name, login=login, stats=self.stats)
        except (EtcdError, ValueError) as exc:
            raise ConfigError([desired.problem(where, redact(str(exc)))]) from exc
        try:
            await asyncio.wait_for(leadership.check(), timeout=_check_timeout(config))
        except (LeadershipError, TimeoutError) as exc:
            if fault_of(exc) == "unreachable":
                return _Waiting(leadership, exc)
            await leadership.close()
            reason = str(exc) or "no answer in time"
            raise ConfigError(
                [desired.problem(where, f"cannot use the {config.backend} store: {redact(reason)}")]
            ) from exc
        return leadership

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        if prepared is not _KEEP:
            waiting = prepared if isinstance(prepared, _Waiting) else None
            new = waiting.leadership if waiting is not None else prepared
            old, self.leadership = self.leadership, new
            old_link, self.link = self.link, None
            self.config = desired.cluster
            if old is not None:
                self._stop_later(old, old_link)
            if isinstance(new, Leadership):
                new.job_set_id = desired.job_set_id
                new.on_change = self.on_change
                if waiting is None:
                    self.link = StoreLink.up("cluster", new.backend, title="Cluster")
                    self._join(new)
                else:
                    self._wait_for(new, waiting.error, desired.cluster)
            elif old is not None:
                logger.info("Cluster: leader election is off; every job runs on this node")
        if self.leadership is not None:
            self.leadership.job_set_id = desired.job_set_id

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

    def _wait_for(
        self, leadership: Leadership, error: BaseException, config: ClusterConfig | None
    ) -> None:
        """Commit ``leadership`` connecting: it joins when its store first answers."""
        assert config is not None

        def answered(_: None) -> None:
            if leadership is self.leadership and not self._released:
                self._join(leadership)
                if self.on_change is not None:
                    self.on_change()

        link: StoreLink[None] = StoreLink.waiting(
            "cluster",
            leadership.backend,
            title="Cluster",
            error=error,
            probe=leadership.check,
            on_up=answered,
            timeout=_check_timeout(config),
            cap=retry_cap(config.lease_ttl),
        )
        self.link = link
        logger.warning(
            "Cluster: the %s store does not answer (%s); node %s waits for it: Leader jobs "
            "do not run meanwhile, PreferLeader and EveryNode jobs do (trying again with "
            "back-off up to %g s)",
            leadership.backend,
            link.last_error,
            self.node_name,
            link.cap,
        )
        link.start()

    async def discard(self, prepared: Any) -> None:
        if isinstance(prepared, _Waiting):
            await prepared.leadership.close()
        elif isinstance(prepared, Leadership):
            await prepared.close()

    def _stop_later(self, leadership: Leadership, link: StoreLink[Any] | None) -> None:
        async def stop() -> None:
            if link is not None:
                await link.close()
            await leadership.stop()

        task = asyncio.ensure_future(stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        await self.release()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

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

    async def release(self) -> None:
        """Give up the leadership now (before the shutdown drain): Leader jobs stop here."""
        self._released = True
        if self.link is not None:
            await self.link.close()  # a store that answers now must not start it
        lead = self.leadership
        if lead is not None:
            await lead.stop()

    # ------------------------------------------------------------ visibility

    def view(self, jobs: Iterator[Job] | None = None) -> ClusterView:
        """What ``GET /cluster`` shows (:func:`cronstable.cluster.view.cluster_view`)."""
        return cluster_view(self, jobs)


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
