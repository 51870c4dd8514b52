"""The state section against a real etcd that is down when the revision is applied, and
against a state directory that refuses."""

from __future__ import annotations

import asyncio
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from daemon_proc import until
from etcd_server import EtcdServer

from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.ports import utc_text
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.history import RunHistory
from cronstable.runtime.scheduler import Scheduler
from cronstable.state.base import node_key
from cronstable.state.etcd import EtcdStore
from cronstable.state.keeper import StateKeeper
from cronstable.state.section import StateSection
from cronstable.web import encode

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

T0 = datetime(2026, 6, 1, 12, 45, 0, tzinfo=UTC)


def desired(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


def keeper_on(table: DesiredState) -> StateKeeper:
    def spawner(*args: Any) -> Any:
        raise AssertionError("nothing runs in this test")

    scheduler = Scheduler(ManualClock(T0), spawner)
    scheduler.replace_jobs(table.jobs)
    return StateKeeper("n1", lambda: scheduler, RunHistory(), boot="boot-1")


async def test_a_state_store_down_at_start_is_waited_for_and_restored_when_it_answers(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    revision = desired(
        f"""\
        cluster:
          backend: etcd
          electLeader: false
          leaseTtl: 2
          etcd: {{endpoints: ["{etcd_server.endpoint}"]}}
        state: {{backend: etcd, onStoreUnavailable: fail-closed}}
        jobs:
          - {{name: t, command: "true", schedule: "*/10 * * * *", startingDeadlineSeconds: 900}}
        """
    )
    # what a previous daemon left: its last fire of t, at 12:30
    previous = EtcdStore([etcd_server.endpoint])
    job = revision.jobs["t"]
    fire = {"job": "t", "digest": job.digest, "fire": utc_text(T0 - timedelta(minutes=15))}
    await previous.put(node_key("n1", "fires", "t"), fire)
    await previous.close()
    etcd_server.stop()
    keeper = keeper_on(revision)
    section = StateSection(keeper, tmp_path / "state")
    section.commit(await section.prepare(revision), revision)  # applied, not rejected
    assert section.link is not None and section.link.connecting
    view = encode.state(keeper.view())
    assert (view["connecting"], view["available"], view["onStoreUnavailable"]) == (
        True,
        False,
        "fail-closed",
    )
    assert view["lastError"]
    assert keeper.stats.restored_fires == 0
    etcd_server.start()
    await until(lambda: not keeper.waiting, 15)
    assert not section.link.connecting and keeper.available
    assert keeper.stats.restored_fires == 1  # restored as a start would have
    assert keeper.scheduler.next_fire("t") == T0 - timedelta(minutes=5)  # 12:40, caught up
    await section.close()
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("store-link-")] == []


async def test_a_state_directory_that_refuses_rejects_the_revision(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the state directory should be")
    revision = desired("state: {backend: filesystem}\njobs: []\n")
    section = StateSection(keeper_on(revision), blocker / "state")
    with pytest.raises(ConfigError) as caught:
        await section.prepare(revision)
    [problem] = caught.value.problems
    assert problem.key == ("state", "backend") and "cannot use the filesystem store" in str(problem)
    assert section.link is None
