"""The fleet view: where each job runs next (pure), the run records it reads (on every
state store), and GET /fleet of two daemons built as `run` builds them, in one process,
on each cluster store (etcd with its state on the same etcd; a shared directory and the
Kubernetes Lease double with each node's own state directory)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from backends import ClusterBackend, StateBackend
from web_stack import Stack, section_named

from cronstable.cluster.gate import Seen
from cronstable.cluster.hashing import owner
from cronstable.cluster.placement import placement
from cronstable.ports import FlowRunView, RunResult, RunStart
from cronstable.state.base import job_key
from cronstable.state.fleet import LastRuns, StoreFleetRecords, last_run_key
from cronstable.state.writer import Writer

pytestmark = [pytest.mark.timeout(60)]

KNOWN = Seen("n2", True, "n1", False, ("n1", "n2", "n3"))
UNKNOWN = Seen("n2", False, None, False, ())


def test_placement_follows_cluster_policy_leader_and_spread() -> None:
    assert placement("EveryNode", "j", "single-leader", KNOWN).every_node
    assert placement("Leader", "j", None, UNKNOWN).every_node  # no leader election
    leader = placement("Leader", "j", "single-leader", KNOWN)
    assert (leader.nodes, leader.every_node, leader.reason) == (("n1",), False, "leader")
    spread = placement("Leader", "j", "spread", KNOWN)
    assert spread.nodes == (owner("j", KNOWN.members),) and spread.reason == "owner"
    # the owners of many jobs are spread over the members, the same on every node
    owners = {placement("Leader", f"job-{i}", "spread", KNOWN).nodes[0] for i in range(60)}
    assert owners == {"n1", "n2", "n3"}
    lost = placement("Leader", "j", "single-leader", UNKNOWN)
    assert (lost.nodes, lost.every_node, lost.reason) == ((), False, "leadership unknown")
    assert placement("PreferLeader", "j", "single-leader", UNKNOWN).every_node
    leaderless = Seen("n2", True, None, False, ("n2",))
    assert placement("Leader", "j", "single-leader", leaderless).reason == "no leader"
    assert placement("PreferLeader", "j", "single-leader", leaderless).every_node


def _start(job: str, at: datetime) -> RunStart:
    return RunStart(f"{job}@{at.isoformat()}#1", job, at, 1, at, 4242, False)


def _result(job: str, at: datetime) -> RunResult:
    return RunResult(
        job_name=job,
        scheduled_time=at,
        attempt=1,
        started_at=at,
        finished_at=at,
        duration=0.5,
        returncode=0,
        stdout=None,
        stderr=None,
        stdout_discarded=0,
        stderr_discarded=0,
        fail_reason=None,
        timed_out=False,
        cancelled=False,
        pid=4242,
    )


def test_a_nodes_own_store_gets_no_last_run_records() -> None:
    """Only this node would read them, and its run history has them: a run's end on a
    node's own store writes nothing; once the store in use is shared, it does."""
    written: list[str] = []
    shared = False
    recorder = LastRuns("n1", lambda key, record: written.append(key), lambda: shared)
    at = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
    flow = FlowRunView("etl@t", "etl", "d", at, at, "fire", (), at, "succeeded")
    recorder.run_finished(_start("nightly", at), _result("x", at), "succeeded")
    recorder.flow_finished(flow)
    assert written == []
    shared = True
    recorder.run_finished(_start("nightly", at), _result("x", at), "succeeded")
    recorder.flow_finished(flow)
    assert written == [last_run_key("job", "nightly"), last_run_key("workflow", "etl")]


@pytest.mark.asyncio
async def test_last_runs_and_runs_going_on_every_state_store(
    state_backend: StateBackend, tmp_path: Path
) -> None:
    store = state_backend.store(tmp_path / "state")
    writer = Writer(store)
    try:
        at = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
        recorder = LastRuns("n1", lambda key, record: writer.submit(key, record), lambda: True)
        for minute in range(3):  # a burst: the last one stays
            moment = at.replace(minute=minute)
            recorder.run_finished(
                _start("nightly/export", moment), _result("x", moment), "succeeded"
            )
        recorder.flow_finished(
            FlowRunView("etl@t", "etl", "d", at, at, "fire", (), at, "succeeded")
        )
        recorder.flow_finished(  # a run another node goes on with: not this node's to write
            FlowRunView("etl@u", "etl", "d", at, at, "fire", (), at, "failed", detached=True)
        )
        assert await writer.flush(within=5)
        # a run going on node n2, as its keeper records it
        await store.put(
            "nodes/n2/running/r1",
            {"job": "nightly/export", "runId": "r1", "scheduled": "2026-05-01T04:00:00Z",
             "startedAt": "2026-05-01T04:00:01Z", "pid": 1},
        )  # fmt: skip
        records = StoreFleetRecords(lambda: store)
        assert records.backend == state_backend.name
        assert records.shared == (state_backend.name == "etcd")
        found = await records.last_runs(
            [("job", "nightly/export"), ("workflow", "etl"), ("job", "never")]
        )
        job = found[("job", "nightly/export")]
        assert (job.node, job.outcome, job.scheduled) == ("n1", "succeeded", at.replace(minute=2))
        assert found[("workflow", "etl")].run_id == "etl@t"
        assert ("job", "never") not in found
        [going] = await records.running(["n2", "n3"])
        assert (going.job, going.node, going.run_id) == ("nightly/export", "n2", "r1")
        # a Leader job's run handed off: recorded under the job, naming the node it goes on
        await store.put(
            job_key("nightly/export", "running", "r2"),
            {"job": "nightly/export", "runId": "r2", "scheduled": "2026-05-01T05:00:00Z",
             "startedAt": "2026-05-01T05:00:01Z", "pid": 2, "node": "n3"},
        )  # fmt: skip
        await store.put(  # the same run listed twice (under the node, and the job) is one
            job_key("nightly/export", "running", "r1"),
            {"job": "nightly/export", "runId": "r1", "scheduled": "2026-05-01T04:00:00Z",
             "startedAt": "2026-05-01T04:00:01Z", "pid": 1, "node": "n2"},
        )  # fmt: skip
        await store.put(  # one that names no node is not shown
            job_key("nightly/export", "running", "r3"),
            {"job": "nightly/export", "runId": "r3", "scheduled": "2026-05-01T05:00:00Z",
             "startedAt": "2026-05-01T05:00:01Z", "pid": 3},
        )  # fmt: skip
        both = await records.running(["n2", "n3"], ["nightly/export", "never"])
        assert sorted((r.node, r.run_id, r.outcome) for r in both) == [
            ("n2", "r1", "running"),
            ("n3", "r2", "running"),
        ]
        handed = {r.run_id: r for r in await records.running([], ["nightly/export"])}
        assert sorted(handed) == ["r1", "r2"] and handed["r2"].node == "n3"
        assert handed["r2"].scheduled == datetime(2026, 5, 1, 5, tzinfo=UTC)
        assert await StoreFleetRecords(lambda: None).last_runs([("job", "x")]) == {}
        assert last_run_key("job", "a/b") == "cluster/lastrun/a%2Fb"
        assert last_run_key("workflow", "etl") == "cluster/lastflow/etl"
    finally:
        await writer.close()
        await store.close()


CONFIG = """\
web: {{listen: ["http://127.0.0.1:0"], authToken: {{value: t}}}}
{cluster}
{state}
jobs:
  - {{name: a-leader, command: "true", schedule: "@yearly", clusterPolicy: Leader}}
  - {{name: b-every, command: "true", schedule: "@yearly"}}
  - {{name: c-prefer, command: "true", schedule: "@yearly", clusterPolicy: PreferLeader}}
  - {{name: d-off, command: "true", schedule: "@yearly", enabled: false}}
  - {{name: e-paused, command: "true", schedule: "@yearly", suspend: true}}
workflows:
  - name: f-flow
    schedule: "@yearly"
    clusterPolicy: Leader
    tasks:
      - {{name: only, command: "true"}}
"""


async def _until(what: str, check: Any, within: float = 15) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest_asyncio.fixture
async def pair(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> AsyncIterator[tuple[list[Stack], ClusterBackend]]:
    for name in ("n1", "n2"):
        (tmp_path / name).mkdir()
    stacks = [Stack(tmp_path / name, name) for name in ("n1", "n2")]
    state = (
        "state: {backend: etcd}"
        if cluster_backend.name == "etcd"
        else "state: {backend: filesystem}"
    )
    text = CONFIG.format(cluster=cluster_backend.yaml(2).rstrip(), state=state)
    for stack in stacks:
        await stack.start()
    try:
        for stack in stacks:
            assert (await stack.apply(text)).outcome == "applied"
        yield stacks, cluster_backend
    finally:
        for stack in stacks:
            await stack.stop()
            await section_named(stack.daemon, "cluster").close()
            await section_named(stack.daemon, "state").close()


async def _get(http: aiohttp.ClientSession, url: str, status: int = 200) -> Any:
    async with http.get(url, headers={"Authorization": "Bearer t"}) as response:
        assert response.status == status, await response.text()
        return await response.json()


@pytest.mark.asyncio
async def test_get_fleet_of_two_nodes(pair: tuple[list[Stack], ClusterBackend]) -> None:
    (n1, n2), backend = pair
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        url = f"{n2.url()}/fleet"

        async def both_seen() -> Any:
            body = await _get(http, url)
            members = body["members"]
            if [m["name"] for m in members] != ["n1", "n2"] or body["cluster"]["leader"] is None:
                return None
            if not all(m["revision"] for m in members):
                return None
            return body

        body = await _until("both members in n2's fleet", both_seen)
        revision = n2.daemon.applier.status.applied_revision()
        leader = body["cluster"]["leader"]
        assert body["node"] == "n2" and body["cluster"]["backend"] == backend.name
        for member in body["members"]:
            assert member["revision"] == revision
            assert member["sameJobSet"] and member["jobSetId"].startswith("v1:")
            assert member["leader"] == (member["name"] == leader)
            assert member["thisNode"] == (member["name"] == "n2")
            seen = datetime.fromisoformat(member["lastSeen"])
            assert 0 <= (datetime.now(UTC) - seen).total_seconds() < 30
        jobs = {job["name"]: job for job in body["jobs"]}
        assert list(jobs) == ["a-leader", "b-every", "c-prefer", "d-off", "e-paused", "f-flow"]
        assert body["total"] == 6 and body["nextAfter"] is None
        assert jobs["a-leader"]["runsNext"] == {"nodes": [leader], "everyNode": False,
                                                 "reason": "leader"}  # fmt: skip
        assert jobs["b-every"]["runsNext"]["everyNode"]
        assert jobs["c-prefer"]["runsNext"]["nodes"] == [leader]
        assert jobs["d-off"]["runsNext"]["reason"] == "disabled"
        assert jobs["e-paused"]["runsNext"]["reason"] == "paused" and jobs["e-paused"]["paused"]
        assert jobs["f-flow"]["kind"] == "workflow"
        assert jobs["f-flow"]["runsNext"]["nodes"] == [leader]
        assert jobs["a-leader"]["nextFire"].endswith("-01-01T00:00:00Z")
        # a run on n1, then n2's fleet says where it ran: from the shared store (etcd), or
        # not at all from n2's own directory (and the answer says why)
        async with http.post(
            f"{n1.url()}/jobs/b-every/start", headers={"Authorization": "Bearer t"}
        ) as started:
            assert started.status == 202
        if backend.name == "etcd":

            async def ran_on_n1() -> Any:
                found = await _get(http, f"{url}?after=a-leader&limit=1")
                last = found["jobs"][0]["lastRun"]
                return found if last is not None and last["outcome"] == "succeeded" else None

            page = await _until("n1's run in n2's fleet", ran_on_n1)
            assert page["state"] == {"backend": "etcd", "shared": True}
            assert page["jobs"][0]["lastRun"]["node"] == "n1"
            assert page["nextAfter"] == "b-every" and page["notes"] == []
        else:
            await _until("the run to end on n1", lambda: _ended(n1, "b-every"))
            page = await _get(http, f"{url}?after=a-leader&limit=1")
            assert page["jobs"][0]["lastRun"] is None
            assert page["state"] == {"backend": "filesystem", "shared": False}
            assert any("this node's own" in note for note in page["notes"])
        rest = await _get(http, f"{url}?after=b-every&limit=500")
        assert [j["name"] for j in rest["jobs"]] == ["c-prefer", "d-off", "e-paused", "f-flow"]
        await _get(http, f"{url}?limit=0", 400)
        await _get(http, f"{url}?limit=x", 400)


async def _ended(stack: Stack, job: str) -> bool:
    return stack.daemon.control.history.last(job) is not None


@pytest.mark.asyncio
async def test_fleet_without_leader_election(tmp_path: Path) -> None:
    stack = Stack(tmp_path, "solo")
    await stack.start()
    try:
        text = 'web: {listen: ["http://127.0.0.1:0"], authToken: {value: t}}\n'
        text += 'jobs: [{name: x, command: "true", schedule: "@yearly", clusterPolicy: Leader}]\n'
        assert (await stack.apply(text)).outcome == "applied"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            body = await _get(http, f"{stack.url()}/fleet")
        assert body["members"] == [] and body["cluster"]["backend"] is None
        assert body["jobs"][0]["runsNext"] == {"nodes": [], "everyNode": True,
                                               "reason": "every node"}  # fmt: skip
        assert body["state"] == {"backend": None, "shared": False}
        assert any("no leader election" in note for note in body["notes"])
    finally:
        await stack.stop()


HANDED = """\
web: {{listen: ["http://127.0.0.1:0"], authToken: {{value: t}}}}
{cluster}
{state}
jobs:
  - {{name: long-leader, command: "sleep 60", schedule: "@yearly", clusterPolicy: Leader,
      killTimeout: 1}}
"""


@pytest.mark.parametrize("cluster_backend", ["etcd", "filesystem"], indirect=True)
@pytest.mark.asyncio
async def test_fleet_lists_a_leader_jobs_run_handed_off_to_the_cluster(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    """On a state store the nodes share (etcd; a shared directory), a Leader job's run is
    recorded under the job (the handoff), not the node: the other node's fleet lists it."""
    shared = tmp_path / "state-shared"
    if cluster_backend.name == "etcd":
        state, state_dir = "state: {backend: etcd}", None
    else:
        state, state_dir = "state: {backend: filesystem, shared: true}", shared
    for name in ("n1", "n2"):
        (tmp_path / name).mkdir()
    stacks = [Stack(tmp_path / name, name, state_dir=state_dir) for name in ("n1", "n2")]
    text = HANDED.format(cluster=cluster_backend.yaml(2).rstrip(), state=state)
    for stack in stacks:
        await stack.start()
    try:
        for stack in stacks:
            assert (await stack.apply(text)).outcome == "applied"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

            async def leader_known() -> Any:
                body = await _get(http, f"{stacks[0].url()}/fleet")
                return body["cluster"]["leader"] if len(body["members"]) == 2 else None

            leader = await _until("a leader both see", leader_known)
            runner, other = stacks if leader == "n1" else stacks[::-1]
            async with http.post(
                f"{runner.url()}/jobs/long-leader/start", headers={"Authorization": "Bearer t"}
            ) as started:
                assert started.status == 202
                run = (await started.json())["run"]

            async def listed() -> Any:
                body = await _get(http, f"{other.url()}/fleet")
                [job] = body["jobs"]
                return job["running"] or None

            [going] = await _until("the leader's run in the other node's fleet", listed)
            assert (going["node"], going["id"]) == (leader, run)
            store = section_named(runner.daemon, "state").keeper.store
            records = await store.list(job_key("long-leader", "running") + "/")
            assert [r["node"] for r in records.values() if r] == [leader]  # under the job
            # the node running it lists it once (its own, from its history)
            [own] = (await _get(http, f"{runner.url()}/fleet"))["jobs"][0]["running"]
            assert (own["node"], own["id"]) == (leader, run)
    finally:
        for stack in stacks:
            await stack.stop()
            await section_named(stack.daemon, "cluster").close()
            await section_named(stack.daemon, "state").close()
