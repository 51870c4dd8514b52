"""--node-name and CRONSTABLE_NODE_NAME reach the daemon; bad names are usage errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess

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


def test_the_node_name_from_the_environment_names_the_cluster_member(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "c.yaml").write_text(
        f"cluster: {{backend: filesystem, leaseTtl: 2, filesystem: {{path: {shared}}}}}\njobs: []\n"
    )
    daemon = DaemonProcess(
        tmp_path / "conf",
        tmp_path / "daemon.log",
        env=os.environ | {"CRONSTABLE_NODE_NAME": "from-env"},
    )
    daemon_procs.append(daemon.start())
    member = shared / "members" / "from-env.json"
    try:
        daemon.wait_log("Cluster: node from-env is now the leader")
        assert member.exists()
    finally:
        daemon.stop(20)
    assert "node from-env released the leadership" in daemon.output()
    assert not member.exists()  # released on a graceful stop
