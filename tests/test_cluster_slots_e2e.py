"""Two real daemons share a job with ``concurrencyScope: cluster``: on a real etcd and
on a shared directory.

Both nodes fire the job (clusterPolicy EveryNode) and each run lasts longer than
its period; every run appends ``NODE start|end UNIXTIME`` to a shared file,
so the tests read the whole cluster's history from it: with Forbid the runs never
overlap, also when the holder stops and the other node takes over; with Replace a
node's fire stops the other node's run (which is not a failure) before its own
starts (on etcd only, to keep the time down: test_cluster_claims covers Replace on
both stores).
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

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

TTL = 2


class Cluster:
    """Daemons on one configuration: one job running ``script``, with ``settings``."""

    def __init__(self, root: Path, backend: ClusterBackend, settings: str, script: str) -> None:
        self.root = root
        self.out = root / "runs"
        self.config = root / "config"
        self.config.mkdir()
        (root / "job.sh").write_text(textwrap.dedent(script))
        job = f"- name: report\n  command: exec bash {root / 'job.sh'}\n" + textwrap.indent(
            textwrap.dedent(settings), "  "
        )
        text = backend.yaml(TTL) + "jobs:\n" + textwrap.indent(job, "  ")
        (self.config / "cronstable.yaml").write_text(text)
        self.daemons: dict[str, DaemonProcess] = {}

    def start(self, name: str) -> None:
        if name not in self.daemons:
            self.daemons[name] = DaemonProcess(
                self.config,
                self.root / f"{name}.log",
                args=["--node-name", name],
                env=os.environ | {"CRONSTABLE_NODE_NAME": name, "RUNS": str(self.out)},
            )
        self.daemons[name].start()

    def log(self, name: str) -> str:
        return self.daemons[name].output()

    def stop(self, name: str) -> None:
        """SIGTERM (once) and wait: the node's runs end, then it stops."""
        self.stop_all([name])

    def stop_all(self, names: list[str] | None = None, *, signals: int = 1) -> None:
        """``signals`` SIGTERMs to each live daemon (a second one stops its runs), then wait."""
        stop_all(
            [self.daemons[name] for name in names or self.daemons], signals=signals, timeout=15
        )

    def runs(self) -> list[tuple[str, float, float | None]]:
        """(node, start, end or None while it goes) of every run, by start."""
        if not self.out.exists():
            return []
        going: dict[str, float] = {}
        done: list[tuple[str, float, float | None]] = []
        for line in self.out.read_text().splitlines():
            node, what, when = line.split()
            if what == "start":
                assert node not in going, f"two runs at once on {node}"
                going[node] = float(when)
            else:
                done.append((node, going.pop(node), float(when)))
        done += [(node, start, None) for node, start in going.items()]
        return sorted(done, key=lambda run: run[1])

    def finished(self) -> list[tuple[str, float, float | None]]:
        return [run for run in self.runs() if run[2] is not None]


def overlaps(runs: list[tuple[str, float, float | None]]) -> list[tuple[str, str]]:
    """Pairs of runs (on different nodes) where one started before the other ended."""
    found = []
    for before, after in zip(runs, runs[1:], strict=False):
        if before[2] is None or after[1] < before[2]:
            found.append((f"{before}", f"{after}"))
    return found


# bash's own clock (no `date` child): a stop signal to the run's process group that
# lands while a line is written can no longer kill the child that reads the time and
# leave the line without one
STAMP = 'echo "$CRONSTABLE_NODE_NAME {what} $EPOCHREALTIME" >> "$RUNS"'


@pytest.fixture
def forbid(cluster_backend: ClusterBackend, tmp_path: Path) -> Iterator[Cluster]:
    settings = """\
        schedule: "* * * * * * *"
        concurrencyPolicy: Forbid
        concurrencyScope: cluster
        """
    script = f"""\
        {STAMP.format(what="start")}
        sleep 1.2
        {STAMP.format(what="end")}
        """
    made = Cluster(tmp_path, cluster_backend, settings, script)
    try:
        yield made
    finally:
        made.stop_all(signals=2)


# the Lease backend's slots are covered in process (test_cluster_slots, test_cluster_claims)
@pytest.mark.parametrize("cluster_backend", ["etcd", "filesystem"], indirect=True)
def test_forbid_runs_never_overlap_across_nodes(forbid: Cluster) -> None:
    refusal = "holds its cluster slot (concurrencyPolicy Forbid, concurrencyScope cluster)"
    forbid.start("n1")
    forbid.start("n2")
    wait_for(lambda: len(forbid.finished()) >= 2)
    # both nodes fire every second: the one without the slot says who holds it
    wait_for(lambda: refusal in forbid.log("n1") + forbid.log("n2"))
    # the node that ran first stops (SIGTERM: its run ends, then it lets the slot go)
    # and the other one takes over
    first = forbid.runs()[0][0]
    other = "n2" if first == "n1" else "n1"
    forbid.stop(first)
    stopped = time.time()
    wait_for(lambda: any(n == other and s > stopped for n, s, e in forbid.finished()))
    forbid.stop_all()
    runs = forbid.runs()
    assert overlaps(runs) == []
    assert {node for node, _, _ in runs} == {"n1", "n2"}
    logs = forbid.log("n1") + forbid.log("n2")
    assert "Traceback" not in logs and "was lost" not in logs


@pytest.fixture
def replace(cluster_backend: ClusterBackend, tmp_path: Path) -> Iterator[Cluster]:
    settings = """\
        schedule: "*/3 * * * * * *"
        concurrencyPolicy: Replace
        concurrencyScope: cluster
        killTimeout: 5
        """
    # a run records its end when it is stopped too (its process group gets SIGTERM); the
    # handler ignores a second SIGTERM (a replace, then the daemon's stop)
    script = f"""\
        trap 'trap "" TERM; {STAMP.format(what="end")}; exit 0' TERM
        {STAMP.format(what="start")}
        sleep 30 &
        wait
        """
    made = Cluster(tmp_path, cluster_backend, settings, script)
    try:
        yield made
    finally:
        made.stop_all(signals=2)


@pytest.mark.parametrize("cluster_backend", ["etcd"], indirect=True)
def test_replace_stops_the_other_nodes_run_before_its_own_starts(replace: Cluster) -> None:
    replace.start("n1")
    replace.start("n2")
    # both nodes fire every three seconds: the one that did not get the slot asks the
    # holder to stop, and runs once it has
    wait_for(lambda: {n for n, _, _ in replace.runs()} == {"n1", "n2"})
    wait_for(lambda: len(replace.finished()) >= 2)
    replace.stop_all(signals=2)  # the runs would last 30 s: the second SIGTERM stops them
    runs = replace.runs()
    assert overlaps(runs) == []
    logs = replace.log("n1") + replace.log("n2")
    assert "asked for the cluster slot; stopping 1 run here" in logs
    assert "finished: replaced" in logs
    assert "finished: failed" not in logs and "Traceback" not in logs
    assert "was lost" not in logs  # an idle slot lease lapses silently
