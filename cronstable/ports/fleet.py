"""The fleet view (``GET /fleet``): every member of the cluster and, per job, where it
last ran, its next fire and which node will run it.

Read from what the stores already hold, never from another node: the membership
records of the cluster's store (each node writes its own at every round:
:class:`FleetMember`), and the run records of the state store (:class:`FleetRecords`:
the last run of each job, written when a run ends; the runs going, each node's
``running/`` records and, for the ``Leader`` jobs whose records are the cluster's
(the handoff), each job's ``running/`` records).  Which node runs a job's next fire
follows from the job's ``clusterPolicy``, the leader and, under ``distribution:
spread``, the rendezvous hash of the job's name over the live members
(:class:`Placement`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

FleetKind = Literal["job", "workflow"]


@dataclass(frozen=True, slots=True)
class FleetMember:
    """A live member, as its membership record says."""

    name: str
    instance: str
    revision: str | None
    """The revision it applied (None from a daemon that does not say)."""
    job_set_id: str
    same_job_set: bool
    """Whether it applied the job set the node answering applied."""
    leader: bool
    last_seen: datetime | None
    """Its last round with the store, by its own record (None when it does not say)."""
    this_node: bool


@dataclass(frozen=True, slots=True)
class FleetCluster:
    """The cluster as the node answering sees it now."""

    backend: str | None
    """None without leader election (no ``cluster`` section, or ``electLeader: false``)."""
    distribution: str | None
    known: bool
    """Whether the node trusts its view (its lease is renewed)."""
    leader: str | None
    members: tuple[FleetMember, ...]
    unknown_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Which node will run a job's next scheduled fire, and why."""

    nodes: tuple[str, ...]
    """The node(s) that will; empty when none will (or none is known)."""
    every_node: bool
    """It runs on every node (``EveryNode``, or no leader election, or ``PreferLeader``
    while no leader is known)."""
    reason: str
    """``every node``, ``leader``, ``owner`` (spread), ``leadership unknown``, ``no leader``,
    ``paused``, ``disabled``, ``@reboot``, ``no more fires``."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the state store keeps it for the fleet view."""

    job: str
    node: str
    run_id: str
    scheduled: datetime
    started_at: datetime
    finished_at: datetime | None = None
    """None for a run going."""
    outcome: str = "running"


@dataclass(frozen=True, slots=True)
class FleetJob:
    """One job (or workflow) across the fleet."""

    name: str
    kind: FleetKind
    cluster_policy: str
    enabled: bool
    paused: bool
    next_fire: datetime | None
    next_start: datetime | None
    """``next_fire`` delayed by the job's ``jitter`` (the same on every node)."""
    runs_next: Placement
    last_run: RunRecord | None
    running: tuple[RunRecord, ...]
    """Its runs going now, on any node whose records the store holds."""


@dataclass(frozen=True, slots=True)
class FleetView:
    """A page of the fleet: the cluster, and the jobs after ``after`` in name order."""

    node: str
    at: datetime
    cluster: FleetCluster
    state_backend: str | None
    state_shared: bool
    """Whether every node writes its runs into the store read (etcd): otherwise where
    a job last ran is this node's knowledge only."""
    jobs: tuple[FleetJob, ...]
    total: int
    """Jobs and workflows applied here, every page."""
    next_after: str | None
    """The name to ask ``after`` for the next page; None on the last one."""
    notes: tuple[str, ...] = ()
    """What this answer could not know, and why."""


class FleetRecords(Protocol):
    """The run records of the state store the fleet view reads (bounded, each call)."""

    @property
    def backend(self) -> str | None:
        """The store in use (None without a ``state`` section)."""
        ...

    @property
    def shared(self) -> bool:
        """Whether the nodes share it (their records meet in it)."""
        ...

    async def last_runs(
        self, names: Sequence[tuple[FleetKind, str]]
    ) -> Mapping[tuple[FleetKind, str], RunRecord]:
        """The last run recorded of each (kind, name), when there is one."""
        ...

    async def running(self, nodes: Sequence[str], jobs: Sequence[str] = ()) -> Sequence[RunRecord]:
        """The runs going on ``nodes``, as their ``running/`` records say, and the runs
        going of ``jobs`` on any node, as the records the nodes running them keep under
        the job (a ``Leader`` job's, handed off: ``cluster/jobs/<job>/running/``), each
        naming its node; a run is listed once."""
        ...
