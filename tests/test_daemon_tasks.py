"""A daemon build_daemon built owns every task it starts: after a reload that replaced
its cluster stores and a second stop request that stopped a running job, ``run()``
returns with no task of the daemon's left behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.sources.factory import open_source

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]


def config(shared: Path) -> str:
    return f"""\
web: {{listen: ["http://127.0.0.1:0"]}}
cluster:
  backend: filesystem
  leaseTtl: 2
  filesystem: {{path: "{shared}"}}
state: {{backend: filesystem}}
jobs:
  - name: long
    command: sleep 30
    schedule: "@reboot"
    clusterPolicy: EveryNode
    concurrencyPolicy: Forbid
    concurrencyScope: cluster
"""


async def until(predicate: Callable[[], object], what: str, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"still no {what} after {within} s"
        await asyncio.sleep(0.02)


async def test_a_stopped_daemon_leaves_no_task_behind(tmp_path: Path) -> None:
    root = tmp_path / "config"
    root.mkdir()
    for shared in ("one", "two"):
        (tmp_path / shared).mkdir()
    (root / "cronstable.yaml").write_text(config(tmp_path / "one"))
    before = asyncio.all_tasks()
    daemon = build_daemon(open_source(str(root)), NodeFacts("n1", state_dir=tmp_path / "state"))
    running = asyncio.create_task(daemon.run())
    await until(lambda: daemon.scheduler.running("long") == 1, "run of long")
    first = daemon.applier.status.applied
    (root / "cronstable.yaml").write_text(config(tmp_path / "two"))  # new leadership, slots
    await until(lambda: daemon.applier.status.applied != first, "second revision")
    daemon.request_stop()
    daemon.request_stop()  # the second one stops the running job
    assert await asyncio.wait_for(running, 30) == 0
    left = asyncio.all_tasks() - before - {asyncio.current_task()}
    assert left == set(), sorted(task.get_name() for task in left)
