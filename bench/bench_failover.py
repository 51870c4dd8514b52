"""Leader failover: three real daemons, the leader killed with SIGKILL again and again.

    .venv/bin/python bench/bench_failover.py [ROUNDS] [etcd|filesystem|kubernetes]

For each backend (a real etcd on loopback, a shared directory, and Kubernetes Leases
on the tests' Lease API conformance double, tests/lease_server.py, over HTTPS),
with leaseTtl 2 s, three daemons run a per-second Leader job that appends NODE
SCHEDULED-TIME to a shared file.  ROUNDS times (default 20), the leader is killed
with SIGKILL and started again under its name.  Reports takeover time (kill → the
first scheduled second run by the new leader) p50/max (target ≤ leaseTtl + 1 s;
on Leases, where a contender waits a whole leaseTtl from when it first saw the
dead leader's last renewal, ≤ 2 × leaseTtl + 1 s), the seconds with no run, and
double runs (target 0), and each backend's p50 as a ratio of etcd's, measured in
the same run.

Then the handoff (etcd, and the shared directory with ``state.shared``; a Lease keeps
no records): three daemons with durable state the nodes share run ``flaky`` (fails
its first attempt, retries 10 s later) and ``tick`` (every 10 s,
``startingDeadlineSeconds``).  ROUNDS times the leader is killed 4.3 s after a
``flaky`` fire (its retry pending) and 0.7 s before a ``tick`` fire, and started
again at once.  Reports the retries and fires lost (never run) and doubled (run
twice) over the rounds (target 0 and 0).
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

from backends import ClusterBackend  # noqa: E402
from etcd_server import EtcdServer, TLSFiles  # noqa: E402
from lease_server import LeaseServer  # noqa: E402
from test_cluster_e2e import (  # noqa: E402
    NODES,
    TTL,
    Cluster,
    doubles,
    runs,
    wait_for,
)
from test_handoff_e2e import attempts, handoff_cluster  # noqa: E402


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


def handoffs(cluster: Cluster, rounds: int) -> tuple[int, int, int, int]:
    """(retries lost, retries doubled, fires lost, fires doubled) over ``rounds`` kills."""
    for name in NODES:
        cluster.start(name)
    flaky, tick = cluster.out / "flaky", cluster.out / "tick"
    wait_for(lambda: runs(tick), timeout=30)
    failed: list[datetime] = []
    for _ in range(rounds):
        done = len(attempts(flaky))
        wait_for(lambda done=done: len(attempts(flaky)) > done, timeout=60)
        leader, fire, attempt, _ = attempts(flaky)[-1]
        if attempt != 1:
            continue
        failed.append(fire)
        time.sleep(max(0.0, (fire + timedelta(seconds=4.3) - datetime.now(UTC)).total_seconds()))
        victim = cluster.nodes[leader]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(5)
        cluster.start(leader)
        time.sleep(max(0.0, (fire + timedelta(seconds=16) - datetime.now(UTC)).total_seconds()))
    time.sleep(2)
    cluster.stop()
    second = [(w, a) for _, w, a, _ in attempts(flaky)]
    retries_lost = sum(1 for fire in failed if (fire, 2) not in second)
    retries_doubled = sum(1 for fire in failed if second.count((fire, 2)) > 1)
    times = sorted({w for _, w in runs(tick)})
    span = int((times[-1] - times[0]).total_seconds()) // 10 + 1
    fires_lost = sum(1 for i in range(span) if times[0] + timedelta(seconds=10 * i) not in times)
    return retries_lost, retries_doubled, fires_lost, len(doubles(tick))


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    only = sys.argv[2] if len(sys.argv) > 2 else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = EtcdServer(root / "etcd")
        server.start()
        leases = LeaseServer(TLSFiles.make(root / "lease-tls"))
        leases.start()
        try:
            shared = root / "fs" / "shared"
            shared.mkdir(parents=True)
            backends = {
                "etcd": ClusterBackend("etcd", server=server, prefix="/bench/"),
                "filesystem": ClusterBackend("filesystem", shared=shared),
                "kubernetes": ClusterBackend(
                    "kubernetes",
                    leases=leases,
                    namespace="bench",
                    kubeconfig=leases.kubeconfig(root / "kubeconfig"),
                ),
            }
            medians: dict[str, float] = {}
            for backend, store in backends.items():
                if only is not None and backend != only:
                    continue
                where = root / f"{backend}-run"
                where.mkdir()
                takeovers, missing, doubled = failovers(Cluster(where, store), rounds)
                medians[backend] = statistics.median(takeovers)
                target = 2 * TTL + 1 if backend == "kubernetes" else TTL + 1
                ratio = (
                    f"; {medians[backend] / medians['etcd']:.2f}× etcd's p50"
                    if "etcd" in medians and backend != "etcd"
                    else ""
                )
                print(
                    f"{backend:10s} {rounds} failovers, leaseTtl {TTL} s: takeover "
                    f"p50 {medians[backend]:.2f} s, max {max(takeovers):.2f} s "
                    f"(target ≤ {target} s); seconds with no run {missing}; "
                    f"double runs {doubled} (target 0){ratio}",
                    flush=True,
                )
                if backend == "kubernetes":
                    continue  # a Lease keeps no records: the state is never shared there
                where = root / f"{backend}-handoff"
                where.mkdir()
                lost, twice, missed, again = handoffs(handoff_cluster(where, store), rounds)
                print(
                    f"{backend:10s} {rounds} failovers with the handoff: retries lost {lost}, "
                    f"doubled {twice}; fires lost {missed}, doubled {again} (target 0, 0)",
                    flush=True,
                )
        finally:
            leases.stop()
            server.stop()


if __name__ == "__main__":
    main()
