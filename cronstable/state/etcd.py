"""The state store on etcd: records under ``<cluster.etcd.prefix>state/``.

The same etcd (and login, TLS files, endpoint order) as the ``cluster`` section.
Every operation goes to the endpoint that answered last and fails over to the
next ones in order; each request is bounded by the client's timeout.  A record
is one key, written in one put (atomic); :meth:`EtcdStore.create` is a
transaction on the key's version (put-if-absent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from cronstable.etcd import (
    EtcdClient,
    EtcdPool,
    EtcdPools,
    EtcdTLS,
    compare,
    request_put,
)
from cronstable.state.base import OP_TIMEOUT, Record, StateError, StateStore, decode, encode

_T = TypeVar("_T")


class EtcdStore(StateStore):
    backend = "etcd"
    shared = True

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        prefix: str = "/cronstable/",
        tls: EtcdTLS | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: float = OP_TIMEOUT,
        pools: EtcdPools | None = None,
    ) -> None:
        """``pools``: where the connections to this etcd come from (shared with the
        cluster's leadership and slots); without it the store makes its own."""
        base = prefix if prefix.endswith("/") else prefix + "/"
        self.prefix = base + "state/"
        # each operation is bounded by ``timeout`` in all: every endpoint gets its share,
        # so a hung first one still leaves time for the next
        self.pool = (pools.pool if pools is not None else EtcdPool)(
            endpoints,
            timeout=max(0.5, timeout / max(1, len(endpoints))),
            username=username,
            password=password,
            tls=tls,
        )

    def __repr__(self) -> str:
        return f"EtcdStore({self.pool.endpoints}, {self.prefix!r})"

    async def _call(self, request: Callable[[EtcdClient], Awaitable[_T]]) -> _T:
        return await self.pool.call_as(StateError, request)

    async def check(self) -> None:
        probe = self.prefix + "probe"
        await self._call(lambda etcd: etcd.put(probe, encode({})))
        await self._call(lambda etcd: etcd.delete(probe))

    async def get(self, key: str) -> Record | None:
        found = await self._call(lambda etcd: etcd.range(self.prefix + key))
        return decode(found.kvs[0].value) if found.kvs else None

    async def put(self, key: str, record: Record) -> None:
        data = encode(record)
        await self._call(lambda etcd: etcd.put(self.prefix + key, data))

    async def create(self, key: str, record: Record) -> bool:
        full, data = self.prefix + key, encode(record)
        done = await self._call(
            lambda etcd: etcd.txn([compare(full, "version", "==", 0)], [request_put(full, data)])
        )
        return done.succeeded

    async def delete(self, key: str) -> bool:
        done = await self._call(lambda etcd: etcd.delete(self.prefix + key))
        return done.deleted > 0

    async def list(self, prefix: str = "") -> dict[str, Record | None]:
        found = await self._call(lambda etcd: etcd.range(self.prefix + prefix, prefix=True))
        return {
            kv.key.decode("utf-8", "replace")[len(self.prefix) :]: decode(kv.value)
            for kv in found.kvs
        }

    async def close(self) -> None:
        await self.pool.close()
