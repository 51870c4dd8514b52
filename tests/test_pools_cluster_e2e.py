"""Two real daemons share a pool with ``scope: cluster``: on a real etcd and on a shared
directory.

Each node runs two jobs of the pool every second (clusterPolicy EveryNode,
concurrencyPolicy Allow), each run lasting longer than the period, so unchecked
they would have about six runs going at once; the pool has two slots.  Every run
appends ``NODE JOB start|end TIME`` (bash's clock) to one shared file, so the test
reads the whole cluster's history from the jobs' own stamps: never more than two
runs at once, both nodes get runs, and after one node is killed (kill -9, so
nothing is released) its records free by expiry and the other node uses both.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import ClusterBackend
from daemon_proc import DaemonProcess, stop_all, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TTL = 2
STAMP = 'echo "$CRONSTABLE_NODE_NAME {job} {what} $EPOCHREALTIME" >> "$RUNS"'


class Cluster:
    def __init__(self, root: Path, backend: ClusterBackend) -> None:
        self.root = root
        self.out = root / "runs"
        self.config = root / "config"
        self.config.mkdir()
        jobs = ""
        for job in ("a", "b"):
            script = root / f"{job}.sh"
            script.write_text(
                f"{STAMP.format(job=job, what='start')}\nsleep 1.5\n"
                f"{STAMP.format(job=job, what='end')}\n"
            )
            jobs += textwrap.dedent(
                f"""\
                  - name: {job}
                    command: exec bash {script}
                    schedule: "* * * * * * *"
                    pool: db
                """
            )
        text = (
            backend.yaml(TTL)
            + "pools:\n  - {name: db, slots: 2, scope: cluster}\n"
            + "jobs:\n"
            + jobs
        )
        (self.config / "cronstable.yaml").write_text(text)
        self.daemons: dict[str, DaemonProcess] = {}

    def start(self, name: str) -> DaemonProcess:
        daemon = self.daemons[name] = DaemonProcess(
            self.config,
            self.root / f"{name}.log",
            args=["--node-name", name, "--state-dir", str(self.root / f"state-{name}")],
            env=os.environ | {"CRONSTABLE_NODE_NAME": name, "RUNS": str(self.out)},
        )
        return daemon.start()

    def events(self) -> list[tuple[float, str, str, str]]:
        """(time, start|end, node, job) of every stamp, by time."""
        if not self.out.exists():
            return []
        out = []
        for line in self.out.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                node, job, what, when = parts
                out.append((float(when), what, node, job))
        return sorted(out)


def most_at_once(
    events: list[tuple[float, str, str, str]], node: str | None = None, after: float = 0.0
) -> int:
    """The most runs (of ``node``: of every node when None) going at one moment later
    than ``after``, from their own stamps."""
    going = top = 0
    for when, what, at, _ in events:
        if node is not None and at != node:
            continue
        going += 1 if what == "start" else -1
        if when > after:
            top = max(top, going)
    return top


@pytest.fixture
def cluster(cluster_backend: ClusterBackend, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path, cluster_backend)
    try:
        yield made
    finally:
        stop_all(list(made.daemons.values()), signals=2, timeout=15)


def test_a_cluster_pool_caps_the_runs_of_every_node_and_frees_a_dead_nodes_slots(
    cluster: Cluster,
) -> None:
    cluster.start("n1")
    cluster.start("n2")
    wait_for(
        lambda: {node for _, what, node, _ in cluster.events() if what == "end"} == {"n1", "n2"},
        timeout=30,
        what="runs ended on both nodes",
    )
    wait_for(lambda: len(cluster.events()) >= 16, timeout=30, what="eight runs")
    before = cluster.events()
    assert most_at_once(before) == 2  # the pool's two slots, never more, across both nodes
    # n1 dies without a word: its runs go on to their end, its records expire (leaseTtl)
    cluster.daemons["n1"].kill9()
    killed = time.time()

    def n2_uses_both() -> bool:
        return most_at_once(cluster.events(), "n2", after=killed + TTL) == 2

    wait_for(n2_uses_both, timeout=30, what="n2 holding both slots once n1's expired")
    stop_all([cluster.daemons["n2"]], timeout=15)
    events = cluster.events()
    # the whole history: never more than two at once, n1's orphans included
    assert most_at_once(events) <= 2
