"""End to end: pausing jobs on real daemons, through the API and the command line.

* an API pause skips the fires (counted as ``paused``), lets a start on request run,
  survives a kill -9 (the catch-up a restart owes is held too), reports ``onPaused``
  once, and a resume runs the next fire without catching up the skipped ones;
* ``suspend`` in the repository and an API pause are shown apart, a commit removing
  ``suspend`` does not lift the API pause, and ``--until`` ends a pause by itself;
* on a state store the nodes share (etcd), a pause asked of one node holds on the other;
* a workflow pauses through ``POST /workflows/{name}/pause`` (kept across a kill -9) and
  resumes, and its tasks are told the fire, their run id and the workflow run's id.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import StateBackend
from daemon_proc import DaemonProcess, http, stop_all, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOKEN = "t0ken"
WEB = """\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {name: ops, fromEnvVar: OPS_TOKEN, scopes: [read, trigger]}
"""


def count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``cronstable ARGS --url URL`` with the token in the environment."""
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=30,
        env=os.environ | {"CRONSTABLE_TOKEN": TOKEN},
    )


def status_of(url: str, job: str) -> dict[str, Any]:
    _, _, body = http(f"{url}/status", headers={"Authorization": f"Bearer {TOKEN}"})
    return next(entry for entry in body["jobs"] if entry["name"] == job)


def metric(url: str, pattern: str) -> float | None:
    _, _, text = http(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    found = re.search(pattern + r" ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found[1]) if found else None


def still(path: Path, seconds: float) -> bool:
    """Whether nothing is appended to ``path`` for ``seconds``."""
    before = count(path)
    time.sleep(seconds)
    return count(path) == before


def test_an_api_pause_holds_across_a_kill_9_reports_once_and_resumes_without_catch_up(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out, alerts = tmp_path / "tick.out", tmp_path / "alerts.out"
    report = (
        'echo "$CRONSTABLE_MOMENT|$CRONSTABLE_PAUSE_SOURCE|$CRONSTABLE_PAUSED_BY|'
        f'$CRONSTABLE_PAUSE_REASON" >> {alerts}'
    )
    config = write_config(
        tmp_path / "conf",
        WEB
        + f"""\
state: {{backend: filesystem}}
jobs:
  - name: tick
    schedule: "* * * * * * *"
    startingDeadlineSeconds: 60
    command: echo "$CRONSTABLE_SCHEDULED_TIME" >> {out}
    onPaused:
      alertAfter: 1s
      report: {{shell: {{command: '{report}'}}}}
""",
    )
    daemon = DaemonProcess(
        config,
        tmp_path / "daemon.log",
        args=["--state-dir", str(tmp_path / "state")],
        env=os.environ | {"OPS_TOKEN": TOKEN},
    )
    daemon_procs.append(daemon.start())
    url = daemon.url()
    wait_for(lambda: count(out) >= 2, what="two fires of tick")

    paused = cli(url, "pause", "tick", "--reason", "db migration")
    assert (paused.returncode, paused.stdout) == (0, "paused tick\n"), paused.stderr
    time.sleep(1.2)  # a run started at the very instant may still write its line
    assert still(out, 2.5), "a paused job fired"
    job = status_of(url, "tick")
    assert job["paused"] is True and job["pause"]["config"] is None
    api = job["pause"]["api"]
    assert (api["source"], api["by"], api["reason"], api["until"]) == (
        "api",
        "ops",
        "db migration",
        None,
    )
    assert (metric(url, r'cronstable_fires_skipped_total\{reason="paused"\}') or 0) >= 2
    assert metric(url, r'cronstable_job_paused\{job="tick",source="api"\}') == 1
    assert metric(
        url, r'cronstable_job_paused_info\{[^}]*by="ops"[^}]*reason="db migration"[^}]*\}'
    )
    assert "tick: paused by ops since" in cli(url, "status").stdout
    wait_for(lambda: count(alerts) >= 1, 10, "the onPaused report")
    assert alerts.read_text() == "paused|api|ops|db migration\n"

    # a start on request still runs while paused
    before = count(out)
    started = cli(url, "start", "tick")
    assert started.returncode == 0, started.stderr
    wait_for(lambda: count(out) == before + 1, what="the run started on request")
    assert "." in out.read_text().splitlines()[-1]  # the start time, not a fire's whole second

    # kill -9: the pause is in the state store, and holds from the first fire of the restart
    daemon.kill9()
    killed = datetime.now(UTC)
    time.sleep(2)
    daemon.start()
    url = daemon.url()
    daemon.wait_log(r"applied in ")
    assert still(out, 3), "a paused job fired after the restart (or caught up)"
    assert status_of(url, "tick")["pause"]["api"]["by"] == "ops"
    time.sleep(2.5)  # a round of the pause book: the report is not sent again
    assert count(alerts) == 1

    resumed = cli(url, "resume", "tick")
    assert (resumed.returncode, resumed.stdout) == (0, "resumed tick\n"), resumed.stderr
    back = datetime.now(UTC)
    wait_for(lambda: count(out) > before + 1, what="a fire after the resume")
    fires = [datetime.fromisoformat(line) for line in out.read_text().splitlines()[before + 1 :]]
    # no fire from the pause (none of the skipped ones is caught up)
    assert all(fire >= back - timedelta(seconds=1) for fire in fires), (fires, killed, back)
    assert not status_of(url, "tick")["paused"]
    again = cli(url, "resume", "tick")
    assert again.returncode == 1 and "has no pause asked through the API" in again.stderr
    assert daemon.stop() == 0


def test_suspend_and_an_api_pause_are_apart_and_until_ends_a_pause(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    held, brief = tmp_path / "held.out", tmp_path / "brief.out"

    def jobs(suspend: str) -> str:
        return (
            WEB
            + f"""\
state: {{backend: filesystem}}
jobs:
  - name: held
    schedule: "* * * * * * *"
    command: echo x >> {held}{suspend}
  - name: brief
    schedule: "* * * * * * *"
    command: echo x >> {brief}
"""
        )

    frozen = '\n    suspend: {reason: "frozen for the audit"}'
    config = write_config(tmp_path / "conf", jobs(frozen))
    daemon = DaemonProcess(
        config,
        tmp_path / "daemon.log",
        args=["--state-dir", str(tmp_path / "state")],
        env=os.environ | {"OPS_TOKEN": TOKEN},
    )
    daemon_procs.append(daemon.start())
    url = daemon.url()
    wait_for(lambda: count(brief) >= 2, what="brief fires")
    assert count(held) == 0  # suspended from the first revision on
    config_pause = status_of(url, "held")["pause"]["config"]
    assert (config_pause["source"], config_pause["reason"], config_pause["by"]) == (
        "config",
        "frozen for the audit",
        None,
    )

    # an API pause beside it; then a commit removes suspend: the API pause stays
    status, _, body = http(
        f"{url}/jobs/held/pause",
        "POST",
        body=b'{"reason": "and the API too"}',
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert status == 200 and body["durable"] is True, body
    assert body["pauses"]["config"]["reason"] == "frozen for the audit"
    (config / "cronstable.yaml").write_text(jobs(""))
    daemon.send(1)  # SIGHUP: look now
    wait_for(lambda: status_of(url, "held")["pause"]["config"] is None, what="suspend removed")
    pauses = status_of(url, "held")["pause"]
    assert pauses["api"]["reason"] == "and the API too"
    assert still(held, 2.5), "the API pause was lifted by a commit"

    # --until: a pause that ends by itself
    until = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    paused = cli(url, "pause", "brief", "--reason", "a short hold", "--until", until)
    assert paused.returncode == 0, paused.stderr
    time.sleep(1.2)
    assert still(brief, 1.2), "a paused job fired"
    assert status_of(url, "brief")["pause"]["api"]["until"] is not None
    wait_for(lambda: not still(brief, 0.5), 10, "brief fires again after until")
    assert not status_of(url, "brief")["paused"]
    # a pause with a bad body is refused, naming what is wrong
    status, _, body = http(
        f"{url}/jobs/brief/pause",
        "POST",
        body=b'{"until": "tomorrow"}',
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert (status, body["error"]) == (400, "a pause needs a reason (a non-empty text)")
    assert daemon.stop() == 0


@pytest.mark.parametrize("state_backend", ["etcd"], indirect=True)
def test_a_pause_asked_of_one_node_holds_on_the_other(
    tmp_path: Path, state_backend: StateBackend, daemon_procs: list[DaemonProcess]
) -> None:
    assert state_backend.server is not None
    outs = {name: tmp_path / f"{name}.out" for name in ("n1", "n2")}

    def node(name: str) -> DaemonProcess:
        config = write_config(
            tmp_path / f"conf-{name}",
            WEB
            + f"""\
cluster:
  backend: etcd
  electLeader: false
  etcd: {{endpoints: ["{state_backend.server.endpoint}"], prefix: "{state_backend.prefix}"}}
state: {{backend: etcd}}
jobs:
  - name: everywhere
    schedule: "* * * * * * *"
    command: echo x >> {outs[name]}
""",
        )
        daemon = DaemonProcess(
            config,
            tmp_path / f"{name}.log",
            args=["--node-name", name],
            env=os.environ | {"OPS_TOKEN": TOKEN},
        )
        daemon_procs.append(daemon.start())
        return daemon

    n1, n2 = node("n1"), node("n2")
    url1, url2 = n1.url(), n2.url()
    both: Callable[[], bool] = lambda: all(count(out) >= 2 for out in outs.values())  # noqa: E731
    wait_for(both, 30, "both nodes fire")
    assert cli(url1, "pause", "everywhere", "--reason", "cluster-wide").returncode == 0
    wait_for(lambda: status_of(url2, "everywhere")["paused"], 10, "n2 sees the pause")
    assert status_of(url2, "everywhere")["pause"]["api"]["node"] == "n1"
    time.sleep(1.2)
    assert still(outs["n1"], 2) and still(outs["n2"], 0.1), "a node fired while paused"
    # resumed on the other node: both fire again
    assert cli(url2, "resume", "everywhere").returncode == 0
    marks = {name: count(out) for name, out in outs.items()}
    wait_for(
        lambda: all(count(out) > marks[name] for name, out in outs.items()), 10, "both fire again"
    )
    assert stop_all([n1, n2]) == [0, 0]


def workflow_of(url: str, name: str) -> dict[str, Any]:
    _, _, body = http(f"{url}/workflows", headers={"Authorization": f"Bearer {TOKEN}"})
    return next(entry for entry in body["workflows"] if entry["name"] == name)


def test_a_workflow_pauses_and_its_tasks_know_their_fire_and_run_ids(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "tasks.out"
    line = (
        f'echo "$CRONSTABLE_JOB_NAME|$CRONSTABLE_SCHEDULED_TIME|$CRONSTABLE_RUN_ID|'
        f'$CRONSTABLE_WORKFLOW_RUN_ID" >> {out}'
    )
    config = write_config(
        tmp_path / "conf",
        WEB
        + f"""\
state: {{backend: filesystem}}
workflows:
  - name: flow
    schedule: "* * * * * * *"
    concurrencyPolicy: Forbid
    timezone: America/New_York
    tasks:
      - {{name: a, command: '{line}'}}
      - {{name: b, command: '{line}', dependsOn: [a]}}
""",
    )
    daemon = DaemonProcess(
        config,
        tmp_path / "daemon.log",
        args=["--state-dir", str(tmp_path / "state")],
        env=os.environ | {"OPS_TOKEN": TOKEN},
    )
    daemon_procs.append(daemon.start())
    url = daemon.url()
    wait_for(lambda: count(out) >= 4, what="two runs of the workflow")

    # each task is told its workflow run's fire (in the workflow's zone), its own run
    # id and its workflow run's id
    runs: dict[str, list[tuple[str, str, str]]] = {}
    for entry in out.read_text().splitlines():
        name, scheduled, run, flow_run = entry.split("|")
        runs.setdefault(flow_run, []).append((name, scheduled, run))
    for flow_run, tasks in runs.items():
        fire = datetime.fromisoformat(tasks[0][1])
        assert fire.utcoffset() in (timedelta(hours=-4), timedelta(hours=-5))
        utc = fire.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert flow_run == f"flow@{utc}"
        for name, scheduled, run in tasks:
            assert scheduled == tasks[0][1] and run == f"{name}@{utc}#1"

    # POST /workflows/{name}/pause: its fires start no run (counted as paused)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    status, _, body = http(
        f"{url}/workflows/flow/pause", "POST", body=b'{"reason": "quiet"}', headers=headers
    )
    assert status == 200 and body["workflow"] == "flow" and body["durable"] is True, body
    assert (body["pause"]["by"], body["pause"]["reason"]) == ("ops", "quiet")
    time.sleep(1.5)  # a run started at the very instant finishes its tasks
    assert still(out, 2.5), "a paused workflow ran"
    shown = workflow_of(url, "flow")
    assert shown["paused"] is True and shown["pause"]["api"]["by"] == "ops"
    assert shown["pause"]["config"] is None
    assert (metric(url, r'cronstable_fires_skipped_total\{reason="paused"\}') or 0) >= 2
    assert metric(url, r'cronstable_job_paused\{job="flow",source="api"\}') == 1
    # a task pauses with its workflow; /jobs does not pause a workflow
    status, _, body = http(
        f"{url}/jobs/flow.a/pause", "POST", body=b'{"reason": "x"}', headers=headers
    )
    assert status == 400 and "pauses with its workflow 'flow'" in body["error"], body
    status, _, _ = http(f"{url}/jobs/flow/pause", "POST", body=b'{"reason": "x"}', headers=headers)
    assert status == 404
    status, _, _ = http(
        f"{url}/workflows/nope/pause", "POST", body=b'{"reason": "x"}', headers=headers
    )
    assert status == 404

    # the pause survives a restart (kept in the state store)
    daemon.kill9()
    daemon.start()
    url = daemon.url()
    daemon.wait_log(r"applied in ")
    assert workflow_of(url, "flow")["pause"]["api"]["reason"] == "quiet"
    assert still(out, 2.5), "a paused workflow ran after a restart"

    status, _, body = http(f"{url}/workflows/flow/resume", "POST", headers=headers)
    assert status == 200 and body["resumed"]["reason"] == "quiet", body
    wait_for(lambda: not still(out, 0.5), 10, "the workflow runs again after resume")
    status, _, body = http(f"{url}/workflows/flow/resume", "POST", headers=headers)
    assert status == 409
    assert daemon.stop() == 0
