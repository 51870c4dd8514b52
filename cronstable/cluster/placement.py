"""Which node will run a job's next fire: the gate's rule (:mod:`.gate`) seen from the
whole cluster rather than from one node.  Pure, no I/O.

=================  ==================================================  ====================
clusterPolicy      with the leadership known                           unknown
=================  ==================================================  ====================
EveryNode          every node                                          every node
Leader             the leader (spread: the job's owner among members)  none (fail closed)
PreferLeader       the leader (spread: the owner), or every node        every node
                   when there is none
=================  ==================================================  ====================

Without leader election every node runs every job.  A job that will not fire (disabled,
paused, ``@reboot``, no fire left) says so instead.
"""

from __future__ import annotations

from cronstable.cluster.gate import Distribution, Policy, Seen
from cronstable.cluster.hashing import owner
from cronstable.ports import Placement

EVERY_NODE = Placement((), True, "every node")


def placement(policy: Policy, job: str, distribution: Distribution | None, seen: Seen) -> Placement:
    """Where the next fire of ``job`` (``policy``) runs; ``distribution`` None: no leader
    election."""
    if distribution is None or policy == "EveryNode":
        return EVERY_NODE
    if not seen.known:
        if policy == "Leader":
            return Placement((), False, "leadership unknown")
        return EVERY_NODE
    if distribution == "spread":
        chosen = owner(job, seen.members)
        if chosen is not None:
            return Placement((chosen,), False, "owner")
    elif seen.leader is not None:
        return Placement((seen.leader,), False, "leader")
    if policy == "Leader":
        return Placement((), False, "no leader")
    return EVERY_NODE
