"""Durable state end to end: real daemons killed with SIGKILL and started again.

Each job appends ``ATTEMPT SCHEDULED-TIME START-EPOCH`` to a file, so the tests
read what ran when.  The store is a state directory or a real etcd (the
``cluster`` section's, with leader election off).
"""

from __future__ import annotations

import base64
import json
import os
import re
import textwrap
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import StateBackend
from daemon_proc import DaemonProcess, wait_for
from etcd_server import EtcdServer

from cronstable.ports import run_id
from cronstable.state.base import node_key

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

LINE = 'echo "$CRONSTABLE_ATTEMPT $CRONSTABLE_SCHEDULED_TIME $(date +%s.%N)"'


def lines(path: Path) -> list[tuple[int, datetime, float]]:
    """(attempt, scheduled time, start epoch) of every run recorded in ``path``."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        attempt, scheduled, began = line.split()
        found.append((int(attempt), datetime.fromisoformat(scheduled), float(began)))
    return found


def state_daemon(root: Path, config: Path, name: str = "n1") -> DaemonProcess:
    """``cronstable run`` on ``config`` as node ``name``, with its own ``--state-dir``."""
    return DaemonProcess(
        config,
        root / f"{name}.log",
        args=["--node-name", name, "--state-dir", str(root / f"state-{name}")],
    )


class Section(str):
    """The configuration text of a state section, and how to read its records."""

    read: Callable[[Path, str], dict[str, Any] | None]


def _read_file(root: Path, key: str) -> dict[str, Any] | None:
    """Through the store's own log, as a second process (``cronstable state``) reads it."""
    from cronstable.state.journal import RecordLog

    log = RecordLog(root / "state-n1")
    try:
        return log.get(key)
    finally:
        log.close()


@pytest.fixture
def state_section(state_backend: StateBackend) -> Section:
    if state_backend.server is None:
        section = Section("state: {backend: filesystem}\n")
        section.read = _read_file
        return section
    server, etcd_prefix = state_backend.server, state_backend.prefix
    section = Section(
        textwrap.dedent(
            f"""\
            cluster:
              backend: etcd
              electLeader: false
              etcd: {{endpoints: ["{server.endpoint}"], prefix: "{etcd_prefix}"}}
            state: {{backend: etcd}}
            """
        )
    )

    def read(root: Path, key: str) -> dict[str, Any] | None:
        full = base64.b64encode(f"{etcd_prefix}state/{key}".encode()).decode()
        body = json.dumps({"key": full}).encode()
        request = urllib.request.Request(f"{server.endpoint}/v3/kv/range", data=body)
        with urllib.request.urlopen(request, timeout=5) as response:
            kvs = json.loads(response.read()).get("kvs") or []
        return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None

    section.read = read
    return section


def make_config(root: Path, head: str, jobs: str) -> Path:
    config = root / "config"
    config.mkdir(exist_ok=True)
    (config / "cronstable.yaml").write_text(
        head + "jobs:\n" + textwrap.indent(textwrap.dedent(jobs), "  ")
    )
    return config


def test_a_retry_pending_at_kill_9_fires_at_its_original_time(
    tmp_path: Path, state_section: Section, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "flaky.out"
    config = make_config(
        tmp_path,
        state_section,
        f"""\
        - name: flaky
          schedule: "@reboot"
          command: {LINE} >> {out}; exit 1
          onFailure:
            retry: {{maximumRetries: 2, initialDelay: 3, backoffMultiplier: 1}}
        """,
    )
    daemon = state_daemon(tmp_path, config)
    daemon_procs.append(daemon)
    daemon.start()
    wait_for(lambda: "retry 1 of 2 in 3.0 s" in daemon.output(), what="the first failure")

    def pending() -> bool:
        record = state_section.read(tmp_path, "nodes/n1/retries/flaky")
        return record is not None and record["status"] == "pending"

    # the pending record is queued as the retry is armed and written a moment later
    wait_for(pending, timeout=2.5, what="the pending retry recorded")
    daemon.kill9()
    record = state_section.read(tmp_path, "nodes/n1/retries/flaky")
    assert record is not None
    due = datetime.fromisoformat(record["notBefore"]).timestamp()
    first = lines(out)
    assert [attempt for attempt, _, _ in first] == [1]
    daemon.start()
    wait_for(lambda: "re-armed from durable state" in daemon.current(), what="the re-arm")
    rearmed = time.time()
    wait_for(lambda: len(lines(out)) >= 2, what="the retry after the restart")
    (a1, s1, t1), (a2, s2, t2) = lines(out)[:2]
    assert (a1, a2) == (1, 2) and s1 == s2  # the same fire's retry, not a new @reboot run
    assert 2.7 <= due - t1 <= 3.5  # the delay counted from the failure, not the restart
    # at its original time (or at once, had the restart taken longer than the delay)
    assert due - 0.2 <= t2 <= max(due, rearmed) + 1.0, (t2 - due, rearmed - due)
    wait_for(lambda: len(lines(out)) >= 3, what="the last retry")
    assert [a for a, _, _ in lines(out)] == [1, 2, 3]
    assert daemon.stop() == 0


def test_kill_9_during_a_forbid_run_never_starts_a_second_copy(
    tmp_path: Path, state_section: Section, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "long.out"
    config = make_config(
        tmp_path,
        state_section,
        f"""\
        - name: long
          schedule: "* * * * * * *"
          concurrencyPolicy: Forbid
          command: {LINE} >> {out}; sleep 4
        """,
    )
    daemon = state_daemon(tmp_path, config)
    daemon_procs.append(daemon)
    daemon.start()
    wait_for(lambda: len(lines(out)) == 1, what="the first run")
    run = run_id("long", lines(out)[0][1], 1)
    # the run's record is queued as it starts and written a moment later
    wait_for(
        lambda: state_section.read(tmp_path, node_key("n1", "running", run)) is not None,
        timeout=2.5,
        what="the running run recorded",
    )
    daemon.kill9()
    daemon.start()
    wait_for(lambda: "outlived the previous daemon" in daemon.current(), what="the adoption")
    began = lines(out)[0][2]
    # the adopted run lasts 4 s from its start: no other run may start meanwhile
    wait_for(lambda: len(lines(out)) == 2, timeout=15, what="a run after the adopted one")
    (_, _, t1), (_, _, t2) = lines(out)
    assert t2 >= began + 4.0 - 0.05, (began, t2)
    assert re.search(r"Job long finished: unknown", daemon.current())
    assert daemon.stop() == 0


def test_a_fire_missed_while_down_catches_up_once_within_the_deadline(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "tick.out"
    config = make_config(
        tmp_path,
        "state: {backend: filesystem}\n",
        f"""\
        - name: tick
          schedule: "@every 2s"
          startingDeadlineSeconds: 30
          timezone: Asia/Kolkata
          command: {LINE} >> {out}
        """,
    )
    daemon = state_daemon(tmp_path, config)
    daemon_procs.append(daemon)
    daemon.start()
    wait_for(lambda: len(lines(out)) >= 1, what="a first run")
    daemon.kill9()
    before = lines(out)
    time.sleep(4.5)  # two fires or more are missed
    daemon.start()
    said = re.compile(
        r"missed (\d+) fires? from (\S+) to (\S+) \(while the daemon was down\); "
        r"running the latest"
    )
    wait_for(lambda: said.search(daemon.current()) is not None, what="the missed fires logged")
    found = said.search(daemon.current())
    assert found is not None and int(found[1]) >= 1  # besides the one that runs
    first, last = datetime.fromisoformat(found[2]), datetime.fromisoformat(found[3])
    assert first > before[-1][1]
    wait_for(lambda: len(lines(out)) > len(before), what="the catch-up")
    # of the fires missed while down, exactly one runs: the latest
    caught = [s for _, s, _ in lines(out)[len(before) :] if s <= last]
    assert caught == [last], (caught, last)
    # the catch-up's CRONSTABLE_SCHEDULED_TIME is the missed fire's, in the job's zone
    assert all(s.utcoffset() == timedelta(hours=5, minutes=30) for _, s, _ in lines(out))
    assert daemon.stop() == 0


def test_reboot_runs_once_per_boot_and_again_when_redefined(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "boot.out"

    def configure(word: str) -> Path:
        return make_config(
            tmp_path,
            "state: {backend: filesystem}\n",
            f"""\
            - name: boot
              schedule: "@reboot"
              command: echo {word} >> {out}
            """,
        )

    daemon = state_daemon(tmp_path, configure("one"))
    daemon_procs.append(daemon)
    for _ in range(2):
        daemon.start()
        wait_for(lambda: "applied" in daemon.current(), what="the revision applied")
        time.sleep(0.5)
        assert daemon.stop() == 0
    assert out.read_text().split() == ["one"]
    assert "@reboot already ran in this boot" in daemon.current()
    configure("two")
    daemon.start()
    wait_for(lambda: out.read_text().split() == ["one", "two"], what="the redefined job ran")
    assert daemon.stop() == 0


def test_the_run_history_survives_a_restart(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    config = make_config(
        tmp_path,
        "state: {backend: filesystem}\nweb: {listen: [http://127.0.0.1:0]}\n",
        """\
        - name: hello
          schedule: "@reboot"
          command: echo hello from before
          captureStdout: true
        """,
    )
    daemon = state_daemon(tmp_path, config)
    daemon_procs.append(daemon)
    daemon.start()
    wait_for(lambda: "Job hello finished" in daemon.current(), what="the run")
    assert daemon.stop() == 0  # a graceful stop writes the history at once
    daemon.start()
    url = daemon.url()
    found: list[Any] = []

    def listed() -> bool:
        with urllib.request.urlopen(f"{url}/jobs/hello/runs", timeout=5) as response:
            found[:] = json.loads(response.read())["runs"]
        return bool(found)

    wait_for(listed, what="the runs listed")
    [run] = found
    assert (run["outcome"], run["stdout"]) == ("succeeded", "hello from before")
    with urllib.request.urlopen(f"{url}/status", timeout=5) as response:
        state = json.loads(response.read())["state"]
    assert state == {
        "enabled": True,
        "backend": "filesystem",
        "node": "n1",
        "onStoreUnavailable": "degrade",
        "connecting": False,
        "available": True,
        "lastError": None,
        "queued": 0,
    }
    assert daemon.stop() == 0


@pytest.mark.parametrize("policy", ["degrade", "fail-closed"])
def test_an_etcd_outage_runs_or_skips_per_on_store_unavailable(
    tmp_path: Path, etcd_server: EtcdServer, daemon_procs: list[DaemonProcess], policy: str
) -> None:
    etcd_server.start()
    out = tmp_path / "tick.out"
    config = make_config(
        tmp_path,
        textwrap.dedent(
            f"""\
            cluster:
              backend: etcd
              electLeader: false
              etcd: {{endpoints: ["{etcd_server.endpoint}"], prefix: /outage/}}
            state: {{backend: etcd, onStoreUnavailable: {policy}}}
            """
        ),
        f"""\
        - name: tick
          schedule: "* * * * * * *"
          startingDeadlineSeconds: 60
          command: {LINE} >> {out}
        """,
    )
    daemon = state_daemon(tmp_path, config)
    daemon_procs.append(daemon)
    daemon.start()
    wait_for(lambda: len(lines(out)) >= 2, what="runs while etcd is up")
    etcd_server.stop()
    stopped = time.time()
    time.sleep(6)
    during = [t for _, _, t in lines(out) if t > stopped + 1.0]
    if policy == "degrade":
        assert len(during) >= 3, during
        assert "jobs run as if stateless meanwhile" in daemon.current()
    else:
        assert during == [], during
        assert "state_unavailable" in daemon.current()
    etcd_server.start()
    back = time.time()
    wait_for(
        lambda: any(t > back for _, _, t in lines(out)), timeout=20, what="runs once etcd is back"
    )
    assert daemon.stop() == 0


def test_environment_has_no_stray_state_dir(tmp_path: Path) -> None:
    """Without a state section nothing is written to --state-dir."""
    config = make_config(
        tmp_path,
        "",
        """\
        - name: once
          schedule: "@reboot"
          command: "true"
        """,
    )
    daemon = state_daemon(tmp_path, config)
    daemon.start()
    try:
        wait_for(lambda: "Job once finished" in daemon.output(), what="the run")
    finally:
        assert daemon.stop() == 0
    assert not (tmp_path / "state-n1").exists()
    assert os.listdir(tmp_path) != []


def test_a_leader_reboot_job_runs_once_per_cluster_across_restarts(
    tmp_path: Path,
    shared_etcd_server: EtcdServer,
    etcd_prefix: str,
    daemon_procs: list[DaemonProcess],
) -> None:
    out = tmp_path / "migrate.out"
    head = textwrap.dedent(
        f"""\
        cluster:
          backend: etcd
          leaseTtl: 2
          etcd: {{endpoints: ["{shared_etcd_server.endpoint}"], prefix: "{etcd_prefix}"}}
        state: {{backend: etcd}}
        """
    )
    config = make_config(
        tmp_path,
        head,
        f"""\
        - name: migrate
          schedule: "@reboot"
          clusterPolicy: Leader
          command: echo ran >> {out}
        """,
    )
    nodes = [state_daemon(tmp_path, config, name) for name in ("n1", "n2")]
    daemon_procs.extend(nodes)
    for _ in range(2):
        for node in nodes:
            node.start()
        wait_for(
            lambda: all("Cluster: node" in node.current() for node in nodes),
            what="both nodes see the leadership",
        )
        wait_for(lambda: out.exists(), what="the leader ran the @reboot job")
        time.sleep(1.5)
        for node in nodes:
            assert node.stop() == 0
    assert len(out.read_text().split()) == 1, out.read_text()
    assert any("@reboot already ran in the cluster" in node.output() for node in nodes)
