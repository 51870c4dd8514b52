"""The source contract's etcd backend: a real etcd on loopback, the prefix ``/cron/``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from etcd_server import EtcdServer

from cronstable.etcd import EtcdClient, request_delete, request_put
from cronstable.sources.base import Source
from cronstable.sources.etcd.source import EtcdSource
from cronstable.sources.etcd.spec import EtcdSpec

PREFIX = "/cron/"


class EtcdHarness:
    kind = "etcd"
    supports_cache = True

    def __init__(self, server: EtcdServer, client: EtcdClient, prefix: str = PREFIX) -> None:
        self.server = server
        self.client = client
        self.prefix = prefix

    async def publish(self, files: dict[str, bytes]) -> str | None:
        """Replace the prefix's whole content in one transaction; its revision.

        etcd refuses a delete range that overlaps a put of the same transaction,
        so the keys that go are deleted one by one.
        """
        current = await self.client.range(self.prefix, prefix=True, keys_only=True)
        keys = {(self.prefix + path).encode() for path in files}
        gone = [kv.key for kv in current.kvs if kv.key not in keys]
        result = await self.client.txn(
            [],
            [request_delete(key) for key in gone]
            + [request_put(self.prefix + path, data) for path, data in sorted(files.items())],
        )
        assert result.succeeded
        return str(result.revision)

    def source(self, cache_dir: Path) -> Source:
        return EtcdSource(
            EtcdSpec(endpoint=self.server.endpoint, prefix=self.prefix), cache_dir=cache_dir
        )

    async def stop_origin(self) -> None:
        self.server.stop()


@contextlib.asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[EtcdHarness]:
    with EtcdServer(tmp_path / "etcd") as server:
        async with EtcdClient(server.endpoint) as client:
            yield EtcdHarness(server, client)
