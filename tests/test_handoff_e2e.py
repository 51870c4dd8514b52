"""A new leader inherits what the old one owed: two real daemons, kill -9 of the leader.

On a real etcd (``state.backend: etcd``) and on a shared directory (every node's
``--state-dir`` one directory, ``state.shared``), with leaseTtl 2 s.  ``flaky`` fails
its first attempt and retries after 10 s; ``tick`` runs every 10 s with
``startingDeadlineSeconds``.  The leader is killed right after a ``flaky`` failure
and just before a ``tick`` fire, and started again once the other node, which leads then,
ran the pending retry at its time and the missed fire, each exactly once.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from backends import ClusterBackend
from daemon_proc import wait_for
from test_cluster_e2e import Cluster, doubles, runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

JOBS = """
  - name: flaky
    schedule: "0,30 * * * * * *"
    clusterPolicy: Leader
    command: >-
      echo "$CRONSTABLE_NODE_NAME $CRONSTABLE_SCHEDULED_TIME $CRONSTABLE_ATTEMPT
      $(date +%s.%N)" >> {out}/flaky; [ "$CRONSTABLE_ATTEMPT" -gt 1 ]
    onFailure:
      retry: {maximumRetries: 2, initialDelay: 10, maximumDelay: 10}
  - name: tick
    schedule: "5/10 * * * * * *"
    clusterPolicy: Leader
    startingDeadlineSeconds: 30
    command: echo "$CRONSTABLE_NODE_NAME $CRONSTABLE_SCHEDULED_TIME" >> {out}/tick
"""


def handoff_cluster(root: Path, backend: ClusterBackend) -> Cluster:
    """Two daemons' cluster on ``backend`` with durable state the nodes share."""
    if backend.server is not None:
        return Cluster(root, backend, JOBS, sections="state: {backend: etcd}\n")
    shared = root / "state-shared"
    return Cluster(
        root,
        backend,
        JOBS,
        sections="state: {backend: filesystem, shared: true}\n",
        args=("--state-dir", str(shared)),
    )


def attempts(path: Path) -> list[tuple[str, datetime, int, float]]:
    """(node, scheduled time, attempt, start in epoch seconds) of every run of ``flaky``."""
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        node, when, attempt, at = line.split()
        found.append((node, datetime.fromisoformat(when), int(attempt), float(at)))
    return found


def kill_and_check(cluster: Cluster) -> tuple[str, str]:
    """One failover: the leader is killed 4.3 s after a ``flaky`` fire (its retry pending
    until 10 s after it) and 0.7 s before a ``tick`` fire; (old leader, new leader)."""
    flaky, tick = cluster.out / "flaky", cluster.out / "tick"
    wait_for(lambda: runs(tick), timeout=20)  # the leader handled a fire of tick
    done = len(attempts(flaky))

    def fresh() -> list[tuple[str, datetime, int, float]]:
        """First attempts of fires after ``done`` (a retry of an earlier fire may come first)."""
        return [run for run in attempts(flaky)[done:] if run[2] == 1]

    wait_for(fresh, timeout=40)
    leader, fire, _, _ = fresh()[-1]
    time.sleep(max(0.0, (fire + timedelta(seconds=4.3) - datetime.now(UTC)).total_seconds()))
    cluster.nodes[leader].kill9()
    missed = fire + timedelta(seconds=5)

    def retried() -> list[tuple[str, float]]:
        return [(n, at) for n, w, a, at in attempts(flaky) if w == fire and a == 2]

    wait_for(lambda: retried() and any(w == missed for _, w in runs(tick)), timeout=30)
    time.sleep(3)  # a double would have come by now
    caught = [n for n, w in runs(tick) if w == missed]
    assert len(retried()) == 1, (fire, attempts(flaky))
    assert len(caught) == 1, (missed, runs(tick))
    [(node, at)] = retried()
    assert node != leader and caught[0] != leader
    # at its time: 10 s after the failed run, not when the new leader took over (~7 s)
    assert at >= fire.timestamp() + 9.5, at - fire.timestamp()
    return leader, node


@pytest.mark.parametrize("cluster_backend", ["etcd", "filesystem"], indirect=True)
def test_kill_9_of_the_leader_hands_its_retry_and_missed_fire_over_once(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    cluster = handoff_cluster(tmp_path, cluster_backend)
    try:
        for name in ("n1", "n2"):
            cluster.start(name)
        old, new = kill_and_check(cluster)
        cluster.stop()
        assert doubles(cluster.out / "tick") == []
        seen = [(w, a) for _, w, a, _ in attempts(cluster.out / "flaky")]
        assert len(seen) == len(set(seen))
        for node in cluster.nodes.values():
            assert "Traceback" not in node.output()
        assert f"inherited from node {old}" in cluster.nodes[new].output()
    finally:
        cluster.stop()
