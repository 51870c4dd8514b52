"""Rendezvous hashing: agreement, balance and minimal movement, over many sets."""

from __future__ import annotations

import itertools
from collections import Counter

from cronstable.cluster.hashing import owner, score

JOBS = [f"job-{i}" for i in range(3000)]
NODES = [f"node-{c}" for c in "abcdefgh"]


def test_no_members_no_owner() -> None:
    assert owner("backup", []) is None
    assert owner("backup", ["only"]) == "only"


def test_the_owner_does_not_depend_on_member_order() -> None:
    for perm in itertools.permutations(NODES[:5]):
        assert [owner(j, perm) for j in JOBS[:200]] == [owner(j, NODES[:5]) for j in JOBS[:200]]


def test_the_score_separates_member_and_key() -> None:
    # "ab" + "c" and "a" + "bc" are different pairs
    assert score("ab", "c") != score("a", "bc")


def test_balance_for_every_cluster_size() -> None:
    for size in range(2, len(NODES) + 1):
        members = NODES[:size]
        counts = Counter(owner(job, members) for job in JOBS)
        assert set(counts) == set(members)
        expected = len(JOBS) / size
        for member in members:
            # 3000 jobs: a fair share within ±20 % (binomial spread is ~ ±6 % here)
            assert abs(counts[member] - expected) < 0.2 * expected, (size, counts)


def test_a_leaving_member_moves_only_its_own_jobs() -> None:
    for size in range(2, len(NODES) + 1):
        members = NODES[:size]
        before = {job: owner(job, members) for job in JOBS}
        for gone in members:
            rest = [m for m in members if m != gone]
            for job in JOBS:
                after = owner(job, rest)
                if before[job] != gone:
                    assert after == before[job]
                else:
                    assert after in rest


def test_a_joining_member_takes_jobs_only_for_itself() -> None:
    for size in range(1, len(NODES)):
        members = NODES[:size]
        joined = [*members, NODES[size]]
        moved = 0
        for job in JOBS:
            after = owner(job, joined)
            if after != owner(job, members):
                assert after == NODES[size]
                moved += 1
        # it takes about its fair share, 1/(size+1) of the jobs
        share = len(JOBS) / (size + 1)
        assert abs(moved - share) < 0.2 * share
