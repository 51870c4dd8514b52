"""Leader failover: three real daemons, the leader killed with SIGKILL again and again.

    .venv/bin/python bench/bench_failover.py [ROUNDS] [etcd|filesystem]

For each backend (a real etcd on loopback, a shared directory), with leaseTtl 2 s,
three daemons run a per-second Leader job that appends NODE SCHEDULED-TIME to a
shared file.  ROUNDS times (default 20), the leader is killed with SIGKILL and
started again under its name.  Reports takeover time (kill → the first scheduled
second run by the new leader) p50/max (target ≤ leaseTtl + 1 s), the seconds with
no run, and double runs (target 0).
"""

from __future__ import annotations

import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from etcd_server import EtcdServer  # noqa: E402
from test_cluster_e2e import (  # noqa: E402
    NODES,
    TTL,
    Cluster,
    doubles,
    etcd_section,
    filesystem_section,
    runs,
    wait_for,
)


def failovers(cluster: Cluster, rounds: int) -> tuple[list[float], int, int]:
    for name in NODES:
        cluster.start(name)
    lead = cluster.leader_file()
    wait_for(lambda: len(runs(lead)) >= 2, timeout=30)
    takeovers: list[float] = []
    for _ in range(rounds):
        leader = cluster.current_leader()
        victim = cluster.nodes[leader]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(5)
        killed = datetime.now(UTC)
        cluster.start(leader)
        wait_for(lambda at=killed: any(w > at for _, w in runs(lead)), timeout=10 * TTL)
        first = min(w for _, w in runs(lead) if w > killed)
        takeovers.append((first - killed).total_seconds())
        time.sleep(1.0)
    cluster.stop()
    seconds = sorted({w for _, w in runs(lead)})
    span = int((seconds[-1] - seconds[0]).total_seconds()) + 1
    missing = sum(1 for i in range(span) if seconds[0] + timedelta(seconds=i) not in set(seconds))
    return takeovers, missing, len(doubles(lead))


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    only = sys.argv[2] if len(sys.argv) > 2 else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = EtcdServer(root / "etcd")
        server.start()
        try:
            shared = root / "fs" / "shared"
            shared.mkdir(parents=True)
            for backend, section, where in (
                ("etcd", etcd_section(server, "/bench/"), root / "etcd-run"),
                ("filesystem", filesystem_section(shared), root / "fs"),
            ):
                if only is not None and backend != only:
                    continue
                where.mkdir(exist_ok=True)
                takeovers, missing, doubled = failovers(Cluster(where, section), rounds)
                print(
                    f"{backend:10s} {rounds} failovers, leaseTtl {TTL} s: takeover "
                    f"p50 {statistics.median(takeovers):.2f} s, max {max(takeovers):.2f} s "
                    f"(target ≤ {TTL + 1} s); seconds with no run {missing}; "
                    f"double runs {doubled} (target 0)"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
