"""Three real daemons, one cluster: on a real etcd, and on a shared directory.

Every run of a per-second job appends ``NODE SCHEDULED-TIME`` to a shared file,
so the tests read the whole cluster's history from it: a ``Leader`` job never
runs twice for one scheduled second, a kill -9 of the leader is taken over
within 5 × leaseTtl, and a store outage stands ``Leader`` jobs down everywhere
while ``PreferLeader`` and ``EveryNode`` jobs keep running.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from backends import ClusterBackend
from daemon_proc import DaemonProcess, stop_all, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TTL = 2
NODES = ("n1", "n2", "n3")


def runs(path: Path) -> list[tuple[str, datetime]]:
    """(node, scheduled time) of every run recorded in ``path``."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        node, _, when = line.partition(" ")
        if when:
            found.append((node, datetime.fromisoformat(when)))
    return found


def doubles(path: Path) -> list[datetime]:
    counts = Counter(when for _, when in runs(path))
    return sorted(when for when, count in counts.items() if count > 1)


class Cluster:
    """Daemons, one per node name, on one configuration: three per-second jobs, one per
    clusterPolicy, on ``backend``."""

    def __init__(
        self,
        root: Path,
        backend: ClusterBackend,
        jobs: str | None = None,
        *,
        sections: str = "",
        args: tuple[str, ...] = (),
    ) -> None:
        """``jobs``: the jobs section's entries (``{out}`` stands for :attr:`out`),
        ``sections``: more sections, ``args``: more daemon arguments (else the three
        per-second jobs)."""
        self.root = root
        self.backend = backend
        self.out = root / "out"
        self.out.mkdir()
        self.config = root / "config"
        self.config.mkdir()
        self.args = args
        line = "$CRONSTABLE_NODE_NAME $CRONSTABLE_SCHEDULED_TIME"
        entries = (
            jobs.replace("{out}", str(self.out))
            if jobs is not None
            else "".join(
                f"""
              - name: {policy.lower()}
                schedule: "* * * * * * *"
                clusterPolicy: {policy}
                command: echo "{line}" >> {self.out / policy}
            """
                for policy in ("Leader", "PreferLeader", "EveryNode")
            )
        )
        text = backend.yaml(TTL) + textwrap.dedent(sections) + "jobs:" + textwrap.dedent(entries)
        (self.config / "cronstable.yaml").write_text(text)
        self.nodes: dict[str, DaemonProcess] = {}

    def start(self, name: str) -> DaemonProcess:
        """Node ``name`` (again, after a kill: under the same name, the same log)."""
        if name not in self.nodes:
            self.nodes[name] = DaemonProcess(
                self.config,
                self.root / f"{name}.log",
                args=["--node-name", name, *self.args],
                env=os.environ | {"CRONSTABLE_NODE_NAME": name},
            )
        return self.nodes[name].start()

    def leader_file(self) -> Path:
        return self.out / "Leader"

    def current_leader(self) -> str:
        return runs(self.leader_file())[-1][0]

    def stop(self) -> None:
        stop_all(self.nodes.values(), timeout=15)


@pytest.fixture
def cluster(own_cluster_backend: ClusterBackend, tmp_path: Path) -> Iterator[Cluster]:
    """On a store of the test's own: the outage test stops it."""
    made = Cluster(tmp_path, own_cluster_backend)
    try:
        yield made
    finally:
        made.stop()


def test_three_daemons_one_leader_and_kill_9_failovers(cluster: Cluster) -> None:
    for name in NODES:
        cluster.start(name)
    lead = cluster.leader_file()
    wait_for(lambda: len(runs(lead)) >= 2)
    takeovers: list[float] = []
    for _ in range(3):
        leader = cluster.current_leader()
        cluster.nodes[leader].kill9()
        killed = datetime.now(UTC)
        cluster.start(leader)  # it comes back under the same name (and may lead again)
        wait_for(lambda at=killed: any(w > at for _, w in runs(lead)), timeout=5 * TTL)
        first = min(w for n, w in runs(lead) if w > killed)
        takeovers.append((first - killed).total_seconds())
    time.sleep(1.5)
    cluster.stop()
    print(f"\n{cluster.backend.name} takeovers after kill -9: {takeovers}")
    assert max(takeovers) < 5 * TTL
    assert doubles(lead) == []
    # EveryNode runs everywhere; every node logged what it saw, as one INFO line a change
    assert {n for n, _ in runs(cluster.out / "EveryNode")} == set(NODES)
    for node in cluster.nodes.values():
        assert "Cluster: node" in node.output()


def test_a_store_outage_stands_leader_jobs_down_and_others_keep_running(
    cluster: Cluster,
) -> None:
    for name in NODES:
        cluster.start(name)
    lead = cluster.leader_file()
    wait_for(lambda: len(runs(lead)) >= 2)
    server, shared = cluster.backend.server, cluster.backend.shared
    if server is not None:
        server.stop()
    else:
        assert shared is not None
        shared.rename(shared.with_name("shared.gone"))  # the mount is gone
    down = datetime.now(UTC)
    time.sleep(TTL + 3)  # every lease deemed lost, then three seconds of outage
    up = datetime.now(UTC)
    if server is not None:
        server.start()
    else:
        shared.with_name("shared.gone").rename(shared)
    wait_for(lambda: any(w > up for _, w in runs(lead)), timeout=5 * TTL)
    time.sleep(1)
    cluster.stop()
    # a leader trusts its lease for at most ttl - margin after its last renewal
    during = [w for _, w in runs(lead) if down.timestamp() + TTL < w.timestamp() < up.timestamp()]
    assert during == []
    window = [
        (n, w)
        for n, w in runs(cluster.out / "PreferLeader")
        if down.timestamp() + TTL < w.timestamp() < up.timestamp()
    ]
    assert {n for n, _ in window} == set(NODES)  # no leader known: anywhere, never skipped
    every = [
        n
        for n, w in runs(cluster.out / "EveryNode")
        if w.timestamp() > down.timestamp() + TTL and w < up
    ]
    assert set(every) == set(NODES)
    assert doubles(lead) == []
    for node in cluster.nodes.values():
        assert "leadership unknown" in node.output()
