"""A real daemon that starts, and reloads, while its cluster store is down.

On each backend: etcd stopped before the daemon starts (with durable state on it
too), and a shared directory whose share is not mounted yet (its path does not
exist).  The configuration has a ``Leader`` job and a plain one, each appending a
line per run to a file of its own.  The daemon must start and run the plain job,
hold the ``Leader`` job, say in ``/readyz``, ``/status`` and ``/metrics`` which
store it waits for, apply a revision that changes a job meanwhile, and lead (and
run the ``Leader`` job) once the store is back, with no reload.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, http, wait_for, write_config
from etcd_server import EtcdServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def revision(cluster: str, out: Path, plain: str, *, slot: bool = False) -> str:
    held = "    concurrencyPolicy: Forbid\n    concurrencyScope: cluster\n" if slot else ""
    return (
        textwrap.dedent(cluster)
        + 'web: {listen: ["http://127.0.0.1:0"]}\n'
        + "jobs:\n"
        + '  - name: plain\n    schedule: "* * * * * * *"\n'
        + held
        + f'    command: echo "$CRONSTABLE_SCHEDULED_TIME" >> {out / plain}\n'
        + '  - name: lead\n    schedule: "* * * * * * *"\n    clusterPolicy: Leader\n'
        + f'    command: echo "$CRONSTABLE_SCHEDULED_TIME" >> {out / "lead"}\n'
    )


@pytest.mark.parametrize("backend", ["etcd", "filesystem"])
def test_a_node_starts_and_reloads_while_its_store_is_down_then_leads_when_it_is_back(
    backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    daemon_procs: list[DaemonProcess],
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    back: Callable[[], None]
    if backend == "etcd":
        server: EtcdServer = request.getfixturevalue("etcd_server")
        server.stop()  # down before the daemon starts
        cluster = f"""\
            cluster:
              backend: etcd
              leaseTtl: 2
              etcd: {{endpoints: ["{server.endpoint}"], prefix: /store-down/}}
            state: {{backend: etcd}}
            """
        back = server.start
    else:
        (tmp_path / "mnt").mkdir()
        shared = tmp_path / "mnt" / "cronstable"  # the share is not mounted yet
        cluster = f"""\
            cluster:
              backend: filesystem
              leaseTtl: 2
              filesystem: {{path: "{shared}"}}
            """

        def back() -> None:
            shared.mkdir()

    config = write_config(tmp_path / "config", revision(cluster, out, "plain"))
    daemon = DaemonProcess(
        config,
        tmp_path / "n1.log",
        args=["--node-name", "n1", "--state-dir", str(tmp_path / "state")],
    )
    daemon_procs.append(daemon)
    daemon.start()
    base = daemon.url()
    wait_for(lambda: len(lines(out / "plain")) >= 2, what="the plain job runs")
    assert lines(out / "lead") == []
    status, _, ready = http(base + "/readyz")
    assert status == 503 and f"the cluster store ({backend}) has not answered" in ready["reason"]
    _, _, body = http(base + "/status")
    store = body["stores"]["cluster"]
    assert (store["backend"], store["state"]) == (backend, "connecting")
    assert store["fault"] == "unreachable"
    assert store["since"].endswith("Z") and store["lastError"]
    if backend == "etcd":
        assert body["stores"]["state"]["state"] == "connecting"
        assert body["state"]["connecting"] is True
    _, _, metrics = http(base + "/metrics")
    assert 'cronstable_store_unreachable{store="cluster"} 1.0' in metrics
    _, _, cluster_view = http(base + "/cluster")
    assert cluster_view["role"] == "unknown" and "has not answered" in cluster_view["unknownReason"]

    # a reload while the store is down: the plain job changes (and now holds a cluster
    # slot, so the slot store is needed too): applied, not rejected
    write_config(config, revision(cluster, out, "plain2", slot=True))
    wait_for(lambda: len(lines(out / "plain2")) >= 1, what="the changed plain job runs")
    _, _, body = http(base + "/status")
    assert body["lastRejected"] is None, body["lastRejected"]
    assert body["stores"]["slots"]["state"] == "connecting"
    assert lines(out / "lead") == []

    back()
    wait_for(lambda: len(lines(out / "lead")) >= 1, timeout=30, what="the Leader job runs")
    daemon.wait_log(r"Cluster: node n1 is now the leader")
    wait_for(lambda: http(base + "/readyz")[0] == 200, what="ready once the store answers")
    _, _, body = http(base + "/status")
    assert {name: s["state"] for name, s in body["stores"].items()} == (
        # lock-slots: the store of `cronstable lock`, kept whenever a cluster is
        {"cluster": "up", "slots": "up", "lock-slots": "up", "state": "up"}
        if backend == "etcd"
        else {"cluster": "up", "slots": "up", "lock-slots": "up"}
    )
    _, _, metrics = http(base + "/metrics")
    assert 'cronstable_store_unreachable{store="cluster"} 0.0' in metrics
    assert "Revision" in daemon.current() and " rejected " not in daemon.current()
    assert daemon.stop() == 0
