"""Workflow runs across a kill -9 and a restart, on both state stores, with real daemons.

Every task appends its name when it starts (and ``NAME.end`` when it is done) to one
file, so the tests read what ran, how often, and in which order.  The store is a
state directory or a real etcd (the ``cluster`` section's, leader election off):
``state_section`` of tests/test_state_e2e.py.
"""

from __future__ import annotations

import base64
import json
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
        folder = root / "state-n1" / "nodes" / "n1" / "flows"
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    endpoint = section.split('endpoints: ["', 1)[1].split('"', 1)[0]
    prefix = section.split('prefix: "', 1)[1].split('"', 1)[0] + "state/nodes/n1/flows/"
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
