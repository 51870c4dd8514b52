"""The gate's rule for every policy, distribution and state of knowledge."""

from __future__ import annotations

import itertools

import pytest

from cronstable.cluster.gate import Seen, refusal
from cronstable.cluster.hashing import owner

MEMBERS = ("a", "b", "c")


def seen(
    node: str = "a", *, known: bool = True, leader: str | None = "a", conflict: bool = False
) -> Seen:
    return Seen(
        node,
        known,
        leader if known else None,
        known and leader == node,
        MEMBERS if known else (),
        conflict,
    )


@pytest.mark.parametrize("distribution", ["single-leader", "spread"])
def test_every_node_always_runs(distribution: str) -> None:
    for state in (seen(), seen(known=False), seen(leader="b"), seen(conflict=True)):
        assert refusal("EveryNode", "j", distribution, state) is None  # type: ignore[arg-type]


def test_leader_runs_only_on_the_leader_and_fails_closed() -> None:
    assert refusal("Leader", "j", "single-leader", seen()) is None
    assert refusal("Leader", "j", "single-leader", seen(leader="b")) == "not_leader"
    assert refusal("Leader", "j", "single-leader", seen(leader=None)) == "not_leader"
    assert refusal("Leader", "j", "single-leader", seen(known=False)) == "leadership_unknown"
    assert refusal("Leader", "j", "single-leader", seen(conflict=True)) == "node_name_conflict"


def test_prefer_leader_runs_on_the_leader_or_anywhere_without_one() -> None:
    assert refusal("PreferLeader", "j", "single-leader", seen()) is None
    assert refusal("PreferLeader", "j", "single-leader", seen(leader="b")) == "not_leader"
    assert refusal("PreferLeader", "j", "single-leader", seen(leader=None)) is None
    assert refusal("PreferLeader", "j", "single-leader", seen(known=False)) is None


def test_spread_runs_each_leader_job_on_exactly_one_member() -> None:
    jobs = [f"job-{i}" for i in range(200)]
    for job, policy in itertools.product(jobs, ("Leader", "PreferLeader")):
        runners = [
            node
            for node in MEMBERS
            if refusal(policy, job, "spread", Seen(node, True, "a", node == "a", MEMBERS)) is None  # type: ignore[arg-type]
        ]
        assert runners == [owner(job, MEMBERS)]
    # every member owns some
    assert {owner(job, MEMBERS) for job in jobs} == set(MEMBERS)
    assert refusal("Leader", "j", "spread", seen(known=False)) == "leadership_unknown"
    assert refusal("PreferLeader", "j", "spread", seen(known=False)) is None
