"""Leadership on etcd: a lease, a leader key created in a transaction, membership keys.

Keys under the configured prefix (``/cronstable/`` by default)::

    <prefix>leader                       {"node": NAME, "instance": ID}, on the leader's lease
    <prefix>members/<node name>          {"instance", "jobSetId", "revision", "seen"}, on each
                                         node's lease (``seen``: the wall time of its round)
    <prefix>duplicates/<node name>/<id>  written by a second live daemon with a taken name

A round: keep the lease alive (a new one when etcd says it is gone), rewrite this
node's membership key while it is on this node's lease (one transaction), or create
it, create the leader key if nobody holds it
(``version == 0`` in one transaction), then read the prefix.  The holder is
fenced by the leader key's create revision, which grows with every new holder.

etcd facts this relies on (measured in tests/test_etcd_facts.py): keys and leases
survive an etcd restart and the lease's TTL is then reset to full, so a dead
leader's key outlives the restart by a whole TTL; a keepalive of an unknown lease
answers 200 with no TTL (:class:`~cronstable.etcd.EtcdLeaseNotFound` here: lost,
so the next round takes a new lease).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from cronstable.cluster.base import (
    Leadership,
    LeadershipError,
    LeadershipStats,
    Member,
    Observation,
)
from cronstable.etcd import (
    EtcdClient,
    EtcdLeaseNotFound,
    EtcdPool,
    EtcdPools,
    EtcdTLS,
    KeyValue,
    RangeResult,
    compare,
    first_kv,
    request_put,
    request_range,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class EtcdLeadership(Leadership):
    backend = "etcd"

    def __init__(
        self,
        node_name: str,
        *,
        ttl: float,
        endpoints: Sequence[str],
        prefix: str = "/cronstable/",
        tls: EtcdTLS | None = None,
        username: str | None = None,
        password: str | None = None,
        instance: str | None = None,
        stats: LeadershipStats | None = None,
        pools: EtcdPools | None = None,
    ) -> None:
        """``pools``: where the connections to this etcd come from (shared with the
        slots and the state store); without it the leadership makes its own."""
        super().__init__(node_name, ttl=ttl, instance=instance, stats=stats)
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.pool = (pools.pool if pools is not None else EtcdPool)(
            endpoints,
            # a round (several calls) is bounded by ttl - margin: a share per endpoint
            timeout=max(0.2, self.ttl / 4 / max(1, len(endpoints) - 1)),
            username=username,
            password=password,
            tls=tls,
        )
        self.lease = 0
        self.leader_key = self.prefix + "leader"
        self.member_key = f"{self.prefix}members/{node_name}"

    def __repr__(self) -> str:
        return f"EtcdLeadership({self.node_name!r}, {self.pool.endpoints})"

    async def _call(self, request: Callable[[EtcdClient], Awaitable[_T]]) -> _T:
        return await self.pool.call_as(LeadershipError, request)

    async def check(self) -> None:
        await self._call(lambda etcd: etcd.range(self.prefix, prefix=True, keys_only=True, limit=1))

    def _member_value(self) -> bytes:
        return json.dumps(
            {
                "instance": self.instance,
                "jobSetId": self.job_set_id,
                "revision": self.revision,
                "seen": round(time.time(), 3),
            }
        ).encode()

    async def _keep_lease(self) -> None:
        if self.lease:
            try:
                await self._call(lambda etcd: etcd.lease_keepalive(self.lease))
                return
            except LeadershipError as exc:
                if not isinstance(exc.__cause__, EtcdLeaseNotFound):
                    raise
                logger.warning(
                    "Cluster: etcd lease %x of node %s was lost", self.lease, self.node_name
                )
        ttl = max(1, math.ceil(self.ttl))
        self.lease, _ = await self._call(lambda etcd: etcd.lease_grant(ttl))

    async def round(self) -> Observation:
        await self._keep_lease()
        lease = self.lease
        value = self._member_value()
        # the record says when this node was last seen: rewritten at every round while it
        # is on this node's lease (one request), created when there is none
        kept = await self._call(
            lambda etcd: etcd.txn(
                [compare(self.member_key, "lease", "==", lease)],
                [request_put(self.member_key, value, lease=lease)],
                [request_range(self.member_key)],
            )
        )
        duplicate = False
        if not kept.succeeded:
            created = await self._call(
                lambda etcd: etcd.txn(
                    [compare(self.member_key, "version", "==", 0)],
                    [request_put(self.member_key, value, lease=lease)],
                    [request_range(self.member_key)],
                )
            )
            if not created.succeeded:
                held = first_kv(created.responses[0])
                if held is not None and held.lease == lease:  # put between the two
                    await self._call(lambda etcd: etcd.put(self.member_key, value, lease=lease))
                else:
                    duplicate = True
                    mark = f"{self.prefix}duplicates/{self.node_name}/{self.instance}"
                    await self._call(lambda etcd: etcd.put(mark, b"{}", lease=lease))
        fence: int | None = None
        if not duplicate:
            mine = json.dumps({"node": self.node_name, "instance": self.instance}).encode()
            won = await self._call(
                lambda etcd: etcd.txn(
                    [compare(self.leader_key, "version", "==", 0)],
                    [request_put(self.leader_key, mine, lease=lease)],
                    [request_range(self.leader_key)],
                )
            )
            if won.succeeded:
                fence = won.revision
        # one read of the leadership's own keys (never the whole prefix: durable state
        # and cluster slots live under it too)
        seen = await self._call(
            lambda etcd: etcd.txn(
                [],
                [
                    request_range(self.leader_key),
                    request_range(self.prefix + "members/", prefix=True),
                    request_range(f"{self.prefix}duplicates/{self.node_name}/", prefix=True),
                ],
            )
        )
        kvs = [kv for part in seen.responses if isinstance(part, RangeResult) for kv in part.kvs]
        return self._observe(kvs, fence, duplicate)

    def _observe(self, kvs: list[KeyValue], fence: int | None, duplicate: bool) -> Observation:
        leader: str | None = None
        members: list[Member] = []
        for kv in kvs:
            key = kv.key.decode("utf-8", "replace")
            rest = key[len(self.prefix) :]
            data = _json(kv.value)
            if key == self.leader_key:
                leader = str(data.get("node", "?"))
                if kv.lease == self.lease and data.get("instance") == self.instance:
                    fence = kv.create_revision
                else:
                    fence = None
            elif rest.startswith("members/"):
                seen = data.get("seen")
                members.append(
                    Member(
                        rest.removeprefix("members/"),
                        str(data.get("instance", "")),
                        str(data.get("jobSetId", "")),
                        str(data.get("revision", "")),
                        float(seen) if isinstance(seen, int | float) else None,
                    )
                )
            elif rest.startswith(f"duplicates/{self.node_name}/"):
                if rest.rsplit("/", 1)[1] != self.instance:
                    duplicate = True
        if leader is None:
            fence = None
        return Observation(leader, fence, tuple(members), duplicate)

    async def release(self) -> None:
        if self.lease:
            lease, self.lease = self.lease, 0
            # revoking deletes the leader and membership keys at once
            await self._call(lambda etcd: etcd.lease_revoke(lease))

    async def close(self) -> None:
        await self.pool.close()


def _json(value: bytes) -> dict[str, object]:
    try:
        data = json.loads(value)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
