"""--node-name and CRONSTABLE_NODE_NAME reach the daemon; bad names are usage errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        capture_output=True,
        text=True,
        env=os.environ | (env or {}),
        timeout=30,
    )


def test_a_bad_node_name_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("jobs: []\n")
    done = run("run", str(tmp_path), "--node-name", "a/b")
    assert done.returncode == 2
    assert "is not a node name" in done.stderr
    done = run("run", str(tmp_path), env={"CRONSTABLE_NODE_NAME": "bad name"})
    assert done.returncode == 2
    assert "CRONSTABLE_NODE_NAME" in done.stderr


def test_the_node_name_from_the_environment_names_the_cluster_member(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "c.yaml").write_text(
        f"cluster: {{backend: filesystem, leaseTtl: 2, filesystem: {{path: {shared}}}}}\njobs: []\n"
    )
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cronstable", "run", str(tmp_path / "conf")],
            env=os.environ | {"CRONSTABLE_NODE_NAME": "from-env"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    member = shared / "members" / "from-env.json"
    try:
        deadline = time.monotonic() + 20
        while "Cluster: node from-env is now the leader" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert member.exists()
    finally:
        proc.terminate()
        proc.wait(20)
    assert "node from-env released the leadership" in log.read_text()
    assert not member.exists()  # released on a graceful stop
