"""What ``GET /cluster`` shows: this node's view of the leadership, as a read model
(:class:`~cronstable.ports.views.ClusterView`; :mod:`cronstable.web.encode` writes it),
and the members as the fleet view (``GET /fleet``) shows them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from cronstable.cluster.base import Leadership
from cronstable.cluster.gate import Seen
from cronstable.cluster.hashing import owner
from cronstable.config import Job
from cronstable.config.models import ClusterConfig
from cronstable.ports import (
    ClusterMember,
    ClusterView,
    Election,
    FleetCluster,
    FleetMember,
    utc_text,
)
from cronstable.store_link import StoreLink


class Observed(Protocol):
    """What the view reads of the cluster section."""

    @property
    def node_name(self) -> str: ...

    @property
    def config(self) -> ClusterConfig | None: ...

    @property
    def leadership(self) -> Leadership | None: ...

    @property
    def link(self) -> StoreLink[Any] | None: ...

    def seen(self) -> Seen: ...


def cluster_view(section: Observed, jobs: Iterator[Job] | None = None) -> ClusterView:
    """The section's leadership now; under ``spread`` with ``jobs`` given, the ones this
    node owns."""
    config = section.config
    if config is None or not config.elect_leader:
        return ClusterView(section.node_name, None)
    lead = section.leadership
    seen = section.seen()
    members = lead.members() if lead is not None else ()
    mine = next((m.job_set_id for m in members if m.name == section.node_name), None)
    owned = None
    if config.distribution == "spread" and jobs is not None and seen.known:
        owned = tuple(
            sorted(
                job.name
                for job in jobs
                if job.config.cluster_policy != "EveryNode"
                and owner(job.name, seen.members) == section.node_name
            )
        )
    link = section.link
    election = Election(
        backend=config.backend,
        distribution=config.distribution,
        lease_ttl=config.lease_ttl,
        known=seen.known,
        role="unknown" if not seen.known else "leader" if seen.is_leader else "follower",
        leader=seen.leader,
        fence=lead.fence() if lead is not None else None,
        lease_valid_for=lead.lease_valid_for() if lead is not None else None,
        unknown_reason=_unknown_reason(lead, link),
        node_name_conflict=seen.conflict,
        members=tuple(
            ClusterMember(m.name, m.instance, m.job_set_id, mine is None or m.job_set_id == mine)
            for m in members
        ),
        store=link.view() if link is not None else None,
        owned_jobs=owned,
    )
    return ClusterView(section.node_name, election)


def fleet_cluster(section: Observed) -> FleetCluster:
    """The live members with what their records say (revision, job-set id, last seen), and
    which one leads; empty without leader election."""
    config = section.config
    if config is None or not config.elect_leader:
        return FleetCluster(None, None, False, None, ())
    lead = section.leadership
    seen = section.seen()
    members = lead.members() if lead is not None else ()
    mine = next((m.job_set_id for m in members if m.name == section.node_name), None)
    return FleetCluster(
        backend=config.backend,
        distribution=config.distribution,
        known=seen.known,
        leader=seen.leader,
        members=tuple(
            FleetMember(
                name=m.name,
                instance=m.instance,
                revision=m.revision or None,
                job_set_id=m.job_set_id,
                same_job_set=mine is None or m.job_set_id == mine,
                leader=seen.leader == m.name,
                last_seen=None if m.seen is None else datetime.fromtimestamp(m.seen, UTC),
                this_node=m.name == section.node_name,
            )
            for m in sorted(members, key=lambda m: m.name)
        ),
        unknown_reason=_unknown_reason(lead, section.link) if not seen.known else None,
    )


def _unknown_reason(lead: Leadership | None, link: StoreLink[Any] | None) -> str | None:
    if link is not None and link.connecting:
        return (
            f"the {link.backend} store has not answered since {utc_text(link.since)}: "
            f"{link.last_error}"
        )
    return lead.unknown_reason() if lead is not None else "not started"
