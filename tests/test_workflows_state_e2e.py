"""Workflow runs across a kill -9 and a restart, on both state stores, with real daemons.

Every task appends its name when it starts (and ``NAME.end`` when it is done) to one
file, so the tests read what ran, how often, and in which order.  The store is a
state directory or a real etcd (the ``cluster`` section's, leader election off):
``state_section`` of tests/test_state_e2e.py.
"""

from __future__ import annotations

import base64
import json
import os
import re
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from daemon_proc import DaemonProcess, wait_for
from test_state_e2e import Section, state_daemon, state_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
__all__ = ["state_section"]  # the fixture, used by name


def task(out: Path, name: str, body: str = "true", extra: str = "") -> str:
    command = f"echo {name} >> {out}; {body}; echo {name}.end >> {out}"
    return f"      - name: {name}\n        command: '{command}'\n{extra}"


def marks(out: Path) -> list[str]:
    return out.read_text().split() if out.exists() else []


def flow_records(root: Path, section: Section) -> list[dict[str, Any]]:
    """The workflow-run records in the store (node n1's)."""
    if section.startswith("state: {backend: filesystem}"):
        from cronstable.state.journal import RecordLog

        log = RecordLog(root / "state-n1")  # the store's own log, read as a second process
        try:
            return [r for r in log.list("nodes/n1/flows/").values() if r is not None]
        finally:
            log.close()
    endpoint = section.split('endpoints: ["', 1)[1].split('"', 1)[0]
    prefix = section.split('prefix: "', 1)[1].split('"', 1)[0] + "state/nodes/n1/flows/"
    return etcd_records(endpoint, prefix)


def etcd_records(endpoint: str, prefix: str) -> list[dict[str, Any]]:
    """The records under ``prefix`` of the etcd at ``endpoint``."""
    start = base64.b64encode(prefix.encode()).decode()
    end = base64.b64encode(prefix[:-1].encode() + b"0").decode()
    body = json.dumps({"key": start, "range_end": end}).encode()
    request = urllib.request.Request(f"{endpoint}/v3/kv/range", data=body)
    with urllib.request.urlopen(request, timeout=5) as response:
        kvs = json.loads(response.read()).get("kvs") or []
    return [json.loads(base64.b64decode(kv["value"])) for kv in kvs]


def running_with_pid(records: list[dict[str, Any]], name: str) -> bool:
    return any(
        r["tasks"][name]["state"] == "running" and r["tasks"][name]["pid"] is not None
        for r in records
    )


def test_a_workflow_run_goes_on_after_kill_9(
    tmp_path: Path, state_section: Section, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "marks"
    config = tmp_path / "config"
    config.mkdir()
    (config / "cronstable.yaml").write_text(
        state_section + "workflows:\n"
        "  - name: etl\n"
        "    schedule: '@reboot'\n"
        "    tasks:\n"
        + task(out, "extract")
        + task(out, "side", "true", "        dependsOn: [extract]\n")
        + task(out, "long", "sleep 4", "        dependsOn: [extract]\n")
        + task(out, "load", "true", "        dependsOn: [long, side]\n        runWhen: allDone\n")
        + task(out, "never", "true", "        dependsOn: [long]\n")
    )
    daemon = state_daemon(tmp_path, config)
    daemon_procs.append(daemon)
    daemon.start()
    wait_for(lambda: "side.end" in marks(out) and "long" in marks(out), what="long running")
    wait_for(
        lambda: running_with_pid(flow_records(tmp_path, state_section), "long"),
        timeout=5,
        what="the run recorded with long's process",
    )
    daemon.kill9()
    assert "long.end" not in marks(out)
    daemon.start()
    wait_for(lambda: "goes on from durable state" in daemon.current(), what="the run resumed")
    wait_for(lambda: "load.end" in marks(out), timeout=30, what="load after the adopted task")
    seen = marks(out)
    # finished tasks were not run again, the running one was adopted (not started twice)
    assert seen.count("extract") == 1 and seen.count("side") == 1 and seen.count("long") == 1
    assert seen.index("load") > seen.index("long.end")
    assert "never" not in seen  # allSucceeded after a task whose outcome was lost: skipped
    wait_for(lambda: "Workflow etl finished" in daemon.current(), what="the run's end")
    current = daemon.current()
    assert "Workflow etl finished: failed" in current
    assert "long failed" in current and "load succeeded" in current
    wait_for(lambda: not flow_records(tmp_path, state_section), timeout=5, what="record gone")
    # @reboot ran once in this boot: the restart started no second run
    assert not re.search(r"Workflow etl: run \S+ started", current)
    assert daemon.stop() == 0


def test_a_graceful_restart_goes_on_where_the_run_was(
    tmp_path: Path, state_section: Section, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "marks"
    config = tmp_path / "config"
    config.mkdir()
    (config / "cronstable.yaml").write_text(
        state_section
        + textwrap.dedent(
            """\
            workflows:
              - name: flow
                schedule: '@reboot'
                tasks:
            """
        )
        + task(out, "first", "sleep 2")
        + task(out, "second", "true", "        dependsOn: [first]\n")
    )
    daemon = state_daemon(tmp_path, config)
    daemon_procs.append(daemon)
    daemon.start()
    wait_for(lambda: "first" in marks(out), what="first started")
    assert daemon.stop() == 0  # waits for first; second does not start during the stop
    assert marks(out) == ["first", "first.end"]
    daemon.start()
    wait_for(lambda: "second.end" in marks(out), what="second after the restart")
    assert marks(out) == ["first", "first.end", "second", "second.end"]
    wait_for(lambda: "Workflow flow finished: succeeded" in daemon.current(), what="the end")
    assert daemon.stop() == 0


def test_a_new_leader_goes_on_with_the_run_of_a_killed_one(
    tmp_path: Path, shared_etcd_server: Any, etcd_prefix: str, daemon_procs: list[DaemonProcess]
) -> None:
    """clusterPolicy Leader on real etcd: the leader is killed mid-run; the node that leads
    next goes on with the run from the shared store (once the dead one's heartbeat is
    stale), without running again what had finished."""
    out = tmp_path / "marks"
    config = tmp_path / "config"
    config.mkdir()

    def noted(name: str, body: str = "true", extra: str = "") -> str:
        command = (
            f'echo "$CRONSTABLE_NODE_NAME {name}" >> {out}; {body}; '
            f'echo "$CRONSTABLE_NODE_NAME {name}.end" >> {out}'
        )
        return f"      - name: {name}\n        command: '{command}'\n{extra}"

    (config / "cronstable.yaml").write_text(
        textwrap.dedent(
            f"""\
            cluster:
              backend: etcd
              leaseTtl: 2
              etcd: {{endpoints: ["{shared_etcd_server.endpoint}"], prefix: "{etcd_prefix}"}}
            state: {{backend: etcd}}
            workflows:
              - name: lead
                schedule: '@reboot'
                clusterPolicy: Leader
                tasks:
            """
        )
        + noted("a")
        + noted("b", "sleep 8", "        dependsOn: [a]\n")
        + noted("c", "true", "        dependsOn: [b]\n        runWhen: allDone\n")
    )
    nodes = {}
    for name in ("n1", "n2"):
        nodes[name] = DaemonProcess(
            config,
            tmp_path / f"{name}.log",
            args=["--node-name", name, "--state-dir", str(tmp_path / f"state-{name}")],
            env=os.environ | {"CRONSTABLE_NODE_NAME": name},
        )
        daemon_procs.append(nodes[name])
        nodes[name].start()

    def lines() -> list[tuple[str, str]]:
        if not out.exists():
            return []
        pairs = (line.split() for line in out.read_text().splitlines())
        return [(node, mark) for node, mark in pairs]

    wait_for(lambda: any(mark == "b" for _, mark in lines()), timeout=30, what="b running")
    leader = next(node for node, mark in lines() if mark == "b")
    other = "n2" if leader == "n1" else "n1"
    wait_for(
        lambda: running_with_pid(
            etcd_records(shared_etcd_server.endpoint, f"{etcd_prefix}state/cluster/flows/"), "b"
        ),
        timeout=5,
        what="the cluster-wide record with b's process",
    )
    nodes[leader].kill9()
    wait_for(
        lambda: f"goes on from durable state (left by {leader})" in nodes[other].output(),
        timeout=40,
        what="the new leader going on with the run",
    )
    wait_for(lambda: (other, "c.end") in lines(), timeout=20, what="c on the new leader")
    seen = lines()
    assert [m for m in seen if m[1] == "a"] == [(leader, "a")]  # finished: not run again
    assert [m for m in seen if m[1] == "b"] == [(leader, "b")]  # not started twice
    assert [m for m in seen if m[1] == "c"] == [(other, "c")]
    wait_for(lambda: "Workflow lead finished" in nodes[other].output(), what="the run's end")
    assert "(a succeeded, b failed, c succeeded)" in nodes[other].output()
    assert f"task b failed (outcome unknown: it ran on node {leader}" not in nodes[other].output()
