"""What etcd does that cronstable's leadership relies on, measured on a real etcd.

Each test pins one behaviour of etcd (3.4, through its JSON gateway) and how
:class:`cronstable.etcd.EtcdClient` and :class:`cronstable.cluster.etcd.EtcdLeadership`
take it.  docs/clustering.md states these facts for operators; if an etcd upgrade
changes one, a test here fails first.

1. A lease and the keys on it survive an etcd restart, and etcd starts the lease's
   time again from its full TTL: a dead leader's key outlives the restart by a
   whole TTL, however long the outage lasted.
2. A keepalive of a lease etcd does not know (expired, revoked, never granted)
   answers HTTP 200 with no TTL: the client reads that as lost.
3. When etcd goes away under a watch, the client hears of it at once (the
   gateway's last word on a graceful stop is a gRPC 14 error with no newline) and
   keeps reconnecting; closing the client ends the watch even while etcd is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import until
from etcd_server import EtcdServer

from cronstable.cluster.etcd import EtcdLeadership
from cronstable.etcd import (
    EtcdClient,
    EtcdError,
    EtcdLeaseNotFound,
    EtcdUnavailable,
    WatchEvent,
    _error,
)

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

UNKNOWN_LEASE = 0x5EED_0000_0001
"""A lease id no test grants."""


@pytest_asyncio.fixture
async def etcd(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    """A client of a server of its own, which the test may stop and restart."""
    async with EtcdClient(etcd_server.endpoint, backoff_initial=0.05, backoff_max=0.2) as client:
        yield client


async def gateway(endpoint: str, path: str, body: dict[str, object]) -> tuple[int, object]:
    """One raw request to the JSON gateway: (HTTP status, decoded answer)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(endpoint + path, json=body, timeout=aiohttp.ClientTimeout(total=5)) as answer,
    ):
        return answer.status, json.loads(await answer.read())


# ------------------------------------------------------------------ 1. leases and restarts


async def test_a_lease_and_its_key_outlive_a_restart_with_their_ttl_started_again(
    etcd_server: EtcdServer, etcd: EtcdClient
) -> None:
    lease, granted = await etcd.lease_grant(3)
    assert granted == 3
    await etcd.put("/leader", b"n1", lease=lease)
    await asyncio.sleep(1)
    before = await etcd.lease_time_to_live(lease)
    assert before is not None and before <= 2  # counting down: 3 - 1 s, rounded down
    etcd_server.stop()
    await asyncio.sleep(2.5)  # the outage outlasts what was left of the lease
    began = time.monotonic()
    etcd_server.start()
    after = await etcd.lease_time_to_live(lease)
    elapsed = time.monotonic() - began
    # Back to the full TTL when etcd came back (less the time since, rounded down);
    # without the reset the lease would have expired during the outage.
    assert after is not None and after >= granted - math.ceil(elapsed), (after, elapsed)
    [kv] = (await etcd.range("/leader")).kvs
    assert kv.value == b"n1" and kv.lease == lease
    # and its holder can renew it as if nothing happened
    assert await etcd.lease_keepalive(lease) == granted


async def test_a_killed_etcd_keeps_leases_and_keys_too(
    etcd_server: EtcdServer, etcd: EtcdClient
) -> None:
    lease, granted = await etcd.lease_grant(5)
    await etcd.put("/leader", b"n1", lease=lease)
    etcd_server.kill()  # no graceful shutdown: what was acknowledged is on disk
    etcd_server.start()
    # a new client: the old one's pooled connection died with etcd, unnoticed while
    # the blocking start() held the loop
    async with EtcdClient(etcd_server.endpoint) as fresh:
        assert (await fresh.range("/leader")).kvs[0].lease == lease
        assert await fresh.lease_keepalive(lease) == granted


# ------------------------------------------------------------------ 2. unknown leases


async def test_a_keepalive_of_an_unknown_lease_answers_200_with_no_ttl(
    shared_etcd_server: EtcdServer,
) -> None:
    status, answer = await gateway(
        shared_etcd_server.endpoint, "/v3/lease/keepalive", {"ID": str(UNKNOWN_LEASE)}
    )
    assert status == 200
    assert isinstance(answer, dict) and "error" not in answer
    assert answer["result"]["ID"] == str(UNKNOWN_LEASE)
    assert "TTL" not in answer["result"]  # 0, the gateway's way of leaving a field out
    # time-to-live of one answers 200 with TTL -1
    status, answer = await gateway(
        shared_etcd_server.endpoint, "/v3/lease/timetolive", {"ID": str(UNKNOWN_LEASE)}
    )
    assert status == 200 and isinstance(answer, dict) and answer["TTL"] == "-1"


async def test_the_client_takes_a_keepalive_with_no_ttl_as_a_lost_lease(
    shared_etcd_server: EtcdServer,
) -> None:
    async with EtcdClient(shared_etcd_server.endpoint) as etcd:
        with pytest.raises(EtcdLeaseNotFound):
            await etcd.lease_keepalive(UNKNOWN_LEASE)
        assert await etcd.lease_time_to_live(UNKNOWN_LEASE) is None

        revoked, _ = await etcd.lease_grant(5)
        await etcd.lease_revoke(revoked)
        with pytest.raises(EtcdLeaseNotFound):
            await etcd.lease_keepalive(revoked)
        assert await etcd.lease_time_to_live(revoked) is None

        # etcd's floor for a TTL is 1 s with the test server's election timeout
        expiring, granted = await etcd.lease_grant(1)
        assert granted == 1
        async with asyncio.timeout(10):
            while await etcd.lease_time_to_live(expiring) is not None:
                await asyncio.sleep(0.1)
        with pytest.raises(EtcdLeaseNotFound):
            await etcd.lease_keepalive(expiring)


# ------------------------------------------------------------------ 3. watches and outages


async def test_the_gateway_ends_a_watch_with_an_unterminated_grpc_14_when_etcd_stops(
    etcd_server: EtcdServer,
) -> None:
    received = bytearray()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            etcd_server.endpoint + "/v3/watch",
            json={"create_request": {"key": "L3c="}},  # /w
            timeout=aiohttp.ClientTimeout(total=15),
        ) as stream,
    ):
        received += await stream.content.readline()  # {"result": {..., "created": true}}
        etcd_server.stop()
        with contextlib.suppress(aiohttp.ClientPayloadError):
            async for chunk in stream.content.iter_any():
                received += chunk
    created, _, last = bytes(received).partition(b"\n")
    assert json.loads(created)["result"]["created"] is True
    assert not last.endswith(b"\n")
    error = json.loads(last)["error"]
    # which comes first in etcd's shutdown decides: the transport closing (UNAVAILABLE)
    # or the gateway's context canceled (CANCELLED); seen both ways on one machine
    assert error["grpc_code"] in (1, 14), error
    assert error["grpc_code"] == 1 or error["message"] == "transport is closing", error
    # and the client takes either for an outage to reconnect through, not a refusal
    assert isinstance(_error({"error": error}, status=None, what="watch"), EtcdUnavailable)


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_a_watch_hears_at_once_that_etcd_went_away_and_ends_when_closed(
    etcd_server: EtcdServer, etcd: EtcdClient, how: str
) -> None:
    statuses: list[EtcdUnavailable | None] = []
    gone = asyncio.Event()
    events: list[WatchEvent] = []
    seen = asyncio.Event()

    def on_status(status: EtcdUnavailable | None) -> None:
        statuses.append(status)
        gone.set()

    watching = EtcdClient(etcd_server.endpoint, backoff_initial=0.05, backoff_max=0.2)

    async def watch() -> None:
        async for event in watching.watch("/w", start_revision=1, on_status=on_status):
            events.append(event)
            seen.set()

    task = asyncio.create_task(watch())
    try:
        await etcd.put("/w", b"1")
        await asyncio.wait_for(seen.wait(), 15)  # the stream is up
        if how == "stop":
            etcd_server.stop()
        else:
            etcd_server.kill()
        await asyncio.wait_for(gone.wait(), 15)
        [status] = statuses
        assert isinstance(status, EtcdUnavailable)
        if how == "stop":  # the gateway's last message, read though it has no newline:
            # UNAVAILABLE "transport is closing", or, as the gateway's own connection
            # closes first (a loaded machine), CANCELLED "the client connection is closing"
            assert (status.code, "transport is closing" in str(status)) == (14, True) or (
                status.code,
                "client connection is closing" in str(status),
            ) == (1, True), status
        await asyncio.sleep(0.5)
        assert not task.done()  # still reconnecting (every 0.1-0.2 s), not ended
        await watching.close()  # etcd still down: the watch ends all the same
        await asyncio.wait_for(task, 15)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, EtcdError):
            await task
        await watching.close()
    assert [e.kv.value for e in events] == [b"1"]
    assert statuses == [status]  # never came back


async def test_a_watch_notices_a_frozen_etcd_and_resumes_when_it_thaws(
    etcd_server: EtcdServer, etcd: EtcdClient
) -> None:
    """A frozen etcd (SIGSTOP) keeps the watch's connection open and silent: the reads
    beside the watch notice, the watch reconnects, and no event is lost."""
    statuses: list[EtcdUnavailable | None] = []
    events: list[WatchEvent] = []
    watching = EtcdClient(
        etcd_server.endpoint, timeout=1.0, watch_probe=0.5, backoff_initial=0.05, backoff_max=0.3
    )

    async def watch() -> None:
        async for event in watching.watch("/f", start_revision=1, on_status=statuses.append):
            events.append(event)

    task = asyncio.create_task(watch())
    pid = etcd_server._proc.pid if etcd_server._proc is not None else 0
    try:
        await etcd.put("/f", b"1")
        await until(lambda: len(events) == 1, 15, lambda: (statuses, events))
        os.kill(pid, signal.SIGSTOP)
        try:
            await until(lambda: bool(statuses), 10, lambda: (statuses, events))
            assert isinstance(statuses[0], EtcdUnavailable)
            assert "beside a silent watch" in str(statuses[0])
        finally:
            os.kill(pid, signal.SIGCONT)
        await etcd.put("/f", b"2")
        await until(lambda: len(events) == 2, 20, lambda: (statuses, events))
        assert [e.kv.value for e in events] == [b"1", b"2"]
        await until(lambda: statuses[-1] is None, 10, lambda: (statuses, events))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, EtcdError):
            await task
        await watching.close()


# ------------------------------------------------------------------ leadership over restarts


def leadership(server: EtcdServer, name: str = "n1") -> EtcdLeadership:
    return EtcdLeadership(name, ttl=2, endpoints=[server.endpoint], prefix="/c/")


async def test_the_leader_keeps_its_lease_key_and_fence_across_an_etcd_restart(
    etcd_server: EtcdServer,
) -> None:
    node = leadership(etcd_server)
    try:
        first = await node.round()
        lease = node.lease
        assert first.leader == "n1" and first.fence is not None
        await asyncio.to_thread(etcd_server.stop)
        await asyncio.sleep(2.5)  # longer than the lease's 2 s
        await asyncio.to_thread(etcd_server.start)
        again = await node.round()
    finally:
        await node.close()
    assert node.lease == lease
    assert again.leader == "n1" and again.fence == first.fence


async def test_a_lease_lost_with_etcd_data_is_replaced_and_leadership_taken_again(
    etcd_server: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    """etcd back without its data (a new member, a lost disk): the keepalive answers
    no TTL, the node grants a new lease and campaigns again."""
    node = leadership(etcd_server)
    other = leadership(etcd_server, "n2")
    try:
        assert (await node.round()).leader == "n1"
        old = node.lease
        await asyncio.to_thread(etcd_server.stop)
        shutil.rmtree(etcd_server.data_dir)
        await asyncio.to_thread(etcd_server.start)
        with caplog.at_level(logging.WARNING, logger="cronstable.cluster.etcd"):
            again = await node.round()
        follower = await other.round()
    finally:
        await node.close()
        await other.close()
    assert f"etcd lease {old:x} of node n1 was lost" in caplog.text
    assert node.lease not in (0, old)
    assert again.leader == "n1" and again.fence is not None
    assert [m.name for m in again.members] == ["n1"]
    assert follower.leader == "n1" and follower.fence is None
    assert [m.name for m in follower.members] == ["n1", "n2"]
