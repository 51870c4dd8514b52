"""Two real daemons on a real etcd (cluster and state): ``cronstable status --fleet`` on
either shows both members, the leader, and per job where it last ran and which node runs
it next, from the stores alone; a kill -9 of the leader moves it all to the other node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_proc import DaemonProcess, stop_all, wait_for
from etcd_server import EtcdServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parent.parent
TOKEN = "fleet-token"


def _config(etcd: EtcdServer, prefix: str) -> str:
    return textwrap.dedent(
        f"""\
        web: {{listen: ["http://127.0.0.1:0"], authToken: {{value: {TOKEN}}}}}
        cluster:
          backend: etcd
          leaseTtl: 2
          etcd: {{endpoints: ["{etcd.endpoint}"], prefix: "{prefix}"}}
        state: {{backend: etcd}}
        jobs:
          - {{name: tick, command: "true", schedule: "* * * * * * *", clusterPolicy: Leader}}
          - {{name: by-hand, command: "true", schedule: "@yearly"}}
        """
    )


def fleet(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONSTABLE_")}
    env |= {"PYTHONPATH": str(REPO), "CRONSTABLE_TOKEN": TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "cronstable", "status", "--fleet", "--url", url, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def as_json(url: str) -> dict[str, Any]:
    done = fleet(url, "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.fixture
def nodes(
    shared_etcd_server: EtcdServer, etcd_prefix: str, tmp_path: Path
) -> Iterator[dict[str, DaemonProcess]]:
    config = tmp_path / "config"
    config.mkdir()
    (config / "cronstable.yaml").write_text(_config(shared_etcd_server, etcd_prefix))
    started = {
        name: DaemonProcess(config, tmp_path / f"{name}.log", args=["--node-name", name]).start()
        for name in ("n1", "n2")
    }
    try:
        yield started
    finally:
        stop_all(started.values(), timeout=15)


def test_status_fleet_on_two_daemons_and_a_kill_9(nodes: dict[str, DaemonProcess]) -> None:
    urls = {name: proc.url(30) for name, proc in nodes.items()}

    def both_known() -> dict[str, Any] | None:
        body = as_json(urls["n2"])
        members = body["members"]
        ready = [m["name"] for m in members] == ["n1", "n2"] and all(m["revision"] for m in members)
        tick = next(j for j in body["jobs"] if j["name"] == "tick")
        return body if ready and tick["lastRun"] is not None else None

    body = wait_for(both_known, 30, "both members and a run of tick in n2's fleet")
    leader = body["cluster"]["leader"]
    follower = "n2" if leader == "n1" else "n1"
    assert [m["name"] for m in body["members"] if m["leader"]] == [leader]
    assert len({m["revision"] for m in body["members"]}) == 1
    jobs = {job["name"]: job for job in body["jobs"]}
    assert jobs["tick"]["runsNext"]["nodes"] == [leader]
    assert jobs["tick"]["lastRun"]["node"] == leader  # a Leader job runs on the leader only
    assert jobs["by-hand"]["runsNext"]["everyNode"]
    assert body["state"] == {"backend": "etcd", "shared": True} and body["notes"] == []
    # a run on the follower: the leader's fleet says where it ran, read from etcd
    env = os.environ | {"PYTHONPATH": str(REPO), "CRONSTABLE_TOKEN": TOKEN}
    started = subprocess.run(
        [sys.executable, "-m", "cronstable", "start", "by-hand", "--url", urls[follower]],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr

    def by_hand_ran() -> dict[str, Any] | None:
        seen = next(j for j in as_json(urls[leader])["jobs"] if j["name"] == "by-hand")
        return seen if seen["lastRun"] is not None else None

    ran = wait_for(by_hand_ran, 20, "the follower's run in the leader's fleet")
    assert ran["lastRun"]["node"] == follower
    text = fleet(urls[leader])
    assert text.returncode == 0, text.stderr
    print(text.stdout)
    assert f"fleet as {leader} sees it" in text.stdout and "etcd, single-leader" in text.stdout
    assert f"{leader} (this node)" in text.stdout
    assert f"{follower}: succeeded at " in text.stdout
    # kill -9 the leader: once its lease expires the follower leads, alone, and runs tick
    nodes[leader].kill9()

    def taken_over() -> dict[str, Any] | None:
        seen = as_json(urls[follower])
        tick = next(j for j in seen["jobs"] if j["name"] == "tick")
        alone = [m["name"] for m in seen["members"]] == [follower]
        moved = tick["runsNext"]["nodes"] == [follower] and tick["lastRun"]["node"] == follower
        return seen if alone and moved and seen["cluster"]["leader"] == follower else None

    after = wait_for(taken_over, 30, "the follower to lead, alone, and run tick")
    assert after["members"][0]["leader"] and after["members"][0]["thisNode"]
