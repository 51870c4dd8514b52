"""The cluster gate's rule: may this node start this job now?  Pure, no I/O.

=================  =========================================  ===========================
clusterPolicy      runs                                       leadership unknown
=================  =========================================  ===========================
EveryNode          on every node                              runs
Leader             on the leader (spread: on the job's owner)  stands down (fail closed)
PreferLeader       on the leader (spread: the job's owner),    runs (never skips)
                   or anywhere when none is known
=================  =========================================  ===========================

A node whose name another live daemon also uses stands ``Leader`` jobs down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cronstable.cluster.hashing import owner

Policy = Literal["EveryNode", "Leader", "PreferLeader"]
Distribution = Literal["single-leader", "spread"]


@dataclass(frozen=True, slots=True)
class Seen:
    """What the node knows of the leadership right now."""

    node: str
    known: bool
    leader: str | None
    """The leader's name (known only)."""
    is_leader: bool
    members: Sequence[str]
    """Live members' names (known only)."""
    conflict: bool = False


def refusal(policy: Policy, job: str, distribution: Distribution, seen: Seen) -> str | None:
    """None when the job may start here; otherwise the reason it may not (a metric label)."""
    if policy == "EveryNode":
        return None
    if policy == "Leader":
        if not seen.known:
            return "leadership_unknown"
        if seen.conflict:
            return "node_name_conflict"
        if distribution == "spread":
            return None if owner(job, seen.members) == seen.node else "not_owner"
        return None if seen.is_leader else "not_leader"
    # PreferLeader: never skips for want of knowledge
    if not seen.known:
        return None
    if distribution == "spread":
        chosen = owner(job, seen.members)
        return None if chosen is None or chosen == seen.node else "not_owner"
    return None if seen.leader is None or seen.is_leader else "not_leader"
