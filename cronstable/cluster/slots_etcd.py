"""Concurrency slots on etcd (see :mod:`.slots` for the keys).

One lease per daemon instance carries all its slots; every claim keeps it alive
first (a new one when etcd says it is gone: the slots it carried were deleted
with it, and the claim takes them anew if they are still free; silently when no
claim kept it for longer than its ttl: nothing was held on it).  A slot is taken
in one transaction: ``version == 0`` → put it on the lease and delete any stale
cancel record; otherwise read the slot and its cancel record.  Every request
goes to the endpoint that answered last and fails over to the next ones in order.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from cronstable.cluster.slots import Claim, Holder, SlotError, SlotStore, slot_name
from cronstable.etcd import (
    EtcdClient,
    EtcdLeaseNotFound,
    EtcdPool,
    EtcdPools,
    EtcdTLS,
    KeyValue,
    TxnResult,
    compare,
    first_kv,
    request_delete,
    request_put,
    request_range,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
FORMAT_VERSION = 1


class EtcdSlots(SlotStore):
    backend = "etcd"

    def __init__(
        self,
        node: str,
        instance: str,
        *,
        ttl: float,
        endpoints: Sequence[str],
        prefix: str = "/cronstable/",
        tls: EtcdTLS | None = None,
        username: str | None = None,
        password: str | None = None,
        pools: EtcdPools | None = None,
        kind: str = "slots",
    ) -> None:
        """``pools``: where the connections to this etcd come from (shared with the
        leadership and the state store); without it the slots make their own.
        ``kind``: the key space under the prefix (``slots``, or ``pools`` for the slots
        of cluster-scoped pools)."""
        super().__init__(node, instance, ttl=ttl)
        base = prefix if prefix.endswith("/") else prefix + "/"
        self.base = base + kind + "/"
        self.pool = (pools.pool if pools is not None else EtcdPool)(
            endpoints,
            # a call is bounded by ttl/2 (claims.py): every endpoint gets its share
            timeout=max(0.2, self.ttl / 2 / max(1, len(endpoints)) * 0.9),
            username=username,
            password=password,
            tls=tls,
        )
        self.lease = 0
        self._granted = 0
        """The lease's ttl as etcd granted it (it may give more than asked)."""
        self._kept = 0.0
        """Monotonic time the last keepalive (or the grant) was sent."""

    def __repr__(self) -> str:
        return f"EtcdSlots({self.pool.endpoints}, {self.base!r})"

    def key(self, job: str) -> str:
        return self.base + slot_name(job)

    def cancel_key(self, job: str) -> str:
        return self.key(job) + "/cancel"

    async def _call(self, request: Callable[[EtcdClient], Awaitable[_T]]) -> _T:
        return await self.pool.call_as(SlotError, request)

    async def check(self) -> None:
        await self._call(lambda etcd: etcd.range(self.base, prefix=True, keys_only=True, limit=1))

    async def _keep_lease(self) -> int:
        """The lease, kept alive: a new one when it is gone, or when it was left to lapse
        (no claim for longer than its ttl: nothing was held on it)."""
        lease = self.lease
        began = time.monotonic()
        if lease:
            # tried even when it was left to lapse: an etcd restart renews every lease
            try:
                await self._call(lambda etcd: etcd.lease_keepalive(lease))
                self._kept = began
                return lease
            except SlotError as exc:
                if not isinstance(exc.__cause__, EtcdLeaseNotFound):
                    raise
                if began - self._kept < self._granted:
                    logger.warning(
                        "Cluster slots: etcd lease %x of node %s was lost (its slots with it)",
                        lease,
                        self.node,
                    )
        ttl = max(1, math.ceil(self.ttl))
        self.lease, self._granted = await self._call(lambda etcd: etcd.lease_grant(ttl))
        self._kept = began
        return self.lease

    async def claim(self, jobs: Sequence[str]) -> dict[str, Claim]:
        lease = await self._keep_lease()
        value = json.dumps(
            {"version": FORMAT_VERSION, "node": self.node, "instance": self.instance}
        ).encode()
        claims: dict[str, Claim] = {}
        for job in jobs:
            key, cancel = self.key(job), self.cancel_key(job)
            for _ in range(3):  # a slot freed between the compare and the read: again
                done = await self._call(self._taking(key, cancel, value, lease))
                if done.succeeded:
                    claims[job] = Claim(Holder(self.node, self.instance, done.revision))
                    break
                held = _holder(first_kv(done.responses[0]))
                if held is None:
                    continue
                asked = _json(first_kv(done.responses[1]))
                aimed = (asked.get("instance"), asked.get("fence")) == (held.instance, held.fence)
                claims[job] = Claim(held, str(asked.get("by", "?")) if aimed else None)
                break
            else:
                raise SlotError(f"etcd slot {key} changes too fast to be claimed")
        return claims

    def _taking(
        self, key: str, cancel: str, value: bytes, lease: int
    ) -> Callable[[EtcdClient], Awaitable[TxnResult]]:
        return lambda etcd: etcd.txn(
            [compare(key, "version", "==", 0)],
            [request_put(key, value, lease=lease), request_delete(cancel)],
            [request_range(key), request_range(cancel)],
        )

    async def holder(self, job: str) -> Holder | None:
        key = self.key(job)
        found = await self._call(lambda etcd: etcd.range(key))
        return _holder(found.kvs[0] if found.kvs else None)

    async def release(self, job: str, hold: Holder) -> None:
        key = self.key(job)
        await self._call(
            lambda etcd: etcd.txn(
                [compare(key, "create_revision", "==", hold.fence)], [request_delete(key)]
            )
        )

    async def request_cancel(self, job: str, hold: Holder) -> None:
        key = self.cancel_key(job)
        value = json.dumps(
            {
                "version": FORMAT_VERSION,
                "instance": hold.instance,
                "fence": hold.fence,
                "by": self.node,
            }
        ).encode()
        await self._call(lambda etcd: etcd.put(key, value))

    async def close(self) -> None:
        try:
            if self.lease:
                lease, self.lease = self.lease, 0
                await self._call(lambda etcd: etcd.lease_revoke(lease))  # its slots go with it
        finally:
            await self.pool.close()


def _json(kv: KeyValue | None) -> dict[str, object]:
    if kv is None:
        return {}
    try:
        data = json.loads(kv.value)
    except ValueError:
        return {}
    return data if isinstance(data, dict) and data.get("version") == FORMAT_VERSION else {}


def _holder(kv: KeyValue | None) -> Holder | None:
    if kv is None:
        return None
    data = _json(kv)
    return Holder(str(data.get("node", "?")), str(data.get("instance", "")), kv.create_revision)
