"""The Applier section of the cluster slots: which store the slot guard holds slots in.

* prepare: when a revision has a ``cluster`` section and a job that holds a slot
  (``concurrencyScope: cluster`` with Forbid or Replace), build the slot store of
  the cluster's backend and reach it once; a store that refuses
  (:mod:`cronstable.store_errors`) rejects the revision, naming the key.
  ``electLeader: false`` changes nothing here: slots use the store all the same.
  An unchanged store stays.
* commit: the guard holds slots in the new store from now on; the old one is
  closed (etcd: its lease revoked; the guard takes its slots again in the new one).
  A store that did not answer is committed all the same, *connecting*: until it
  answers every claim fails, and ``onStoreUnavailable`` decides as in any outage
  (degrade: node-local concurrency only; fail-closed: ``slot_unavailable``); its
  :class:`~cronstable.store_link.StoreLink` tries it again with capped back-off.
* discard: close the prepared store.

Metrics: ``cronstable_cluster_slots_held`` and the slot counters (cancel records
sent and obeyed, slots lost, store failures); slot refusals are counted with the
other skipped fires (``cronstable_fires_skipped{reason="slot_held"}`` …).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.cluster.claims import SlotGuard, uses_slot
from cronstable.cluster.factory import make_slots
from cronstable.cluster.slots import SlotError, SlotStore
from cronstable.config import ConfigError, DesiredState
from cronstable.config.models import ClusterConfig
from cronstable.errors import KeyPath
from cronstable.etcd import EtcdError, login_from_environment
from cronstable.reconcile.plan import Plan
from cronstable.redact import redact
from cronstable.store_errors import fault_of
from cronstable.store_link import StoreLink, retry_cap

logger = logging.getLogger(__name__)

_KEEP = object()
"""prepare's answer for an unchanged store: the one in use stays."""


@dataclass(frozen=True, slots=True)
class _Waiting:
    """prepare's answer when the store did not answer: it is committed connecting."""

    store: SlotStore
    error: BaseException


def _check_timeout(config: ClusterConfig) -> float:
    return max(2.0, float(config.lease_ttl))


def _wanted(desired: DesiredState) -> ClusterConfig | None:
    if desired.cluster is None or not any(uses_slot(job) for job in desired.jobs.values()):
        return None
    return desired.cluster


def _store_key(config: ClusterConfig) -> KeyPath:
    if config.backend == "etcd":
        return ("cluster", "etcd", "endpoints")
    return ("cluster", "filesystem", "path")


class SlotSection:
    name = "cluster-slots"

    def __init__(self, guard: SlotGuard, registry: CollectorRegistry | None = None) -> None:
        self.guard = guard
        self.config: ClusterConfig | None = None
        self.link: StoreLink[Any] | None = None
        """The slot store in use: up, or connecting while it does not answer."""
        self._closing: set[asyncio.Task[None]] = set()
        if registry is not None:
            registry.register(_SlotCollector(guard))

    def affected(self, plan: Plan) -> bool:
        return True  # prepare tells an unchanged store apart (the jobs count too)

    async def prepare(self, desired: DesiredState) -> Any:
        config = _wanted(desired)
        if config == self.config:
            return _KEEP
        if config is None:
            return None
        where = _store_key(config)
        try:
            login = login_from_environment() if config.backend == "etcd" else (None, None)
            store = make_slots(config, self.guard.node, self.guard.instance, login=login)
        except (EtcdError, ValueError) as exc:
            raise ConfigError([desired.problem(where, redact(str(exc)))]) from exc
        try:
            await asyncio.wait_for(store.check(), timeout=_check_timeout(config))
        except (SlotError, TimeoutError) as exc:
            if fault_of(exc) == "unreachable":
                return _Waiting(store, exc)
            await store.close()
            reason = str(exc) or "no answer in time"
            raise ConfigError(
                [
                    desired.problem(
                        where,
                        f"cannot use the {config.backend} store for concurrencyScope cluster: "
                        f"{redact(reason)}",
                    )
                ]
            ) from exc
        return store

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        if prepared is _KEEP:
            return
        self.config = _wanted(desired)
        waiting = prepared if isinstance(prepared, _Waiting) else None
        store = waiting.store if waiting is not None else prepared
        old = self.guard.use(store)
        old_link, self.link = self.link, None
        if isinstance(store, SlotStore):
            if waiting is None:
                self.link = StoreLink.up("slots", store.backend, title="Cluster slots")
                logger.info(
                    "Cluster slots: jobs with concurrencyScope cluster hold their slot in %r "
                    "(leaseTtl %s s)",
                    store,
                    store.ttl,
                )
            else:
                self._wait_for(store, waiting.error)
        if old is not None or old_link is not None:
            task = asyncio.ensure_future(self._retire(old, old_link))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _wait_for(self, store: SlotStore, error: BaseException) -> None:
        config = self.config
        assert config is not None

        def answered(_: None) -> None:
            if store is self.guard.store:
                logger.info(
                    "Cluster slots: jobs with concurrencyScope cluster hold their slot in %r",
                    store,
                )

        link: StoreLink[None] = StoreLink.waiting(
            "slots",
            store.backend,
            title="Cluster slots",
            error=error,
            probe=store.check,
            on_up=answered,
            timeout=_check_timeout(config),
            cap=retry_cap(config.lease_ttl),
        )
        self.link = link
        logger.warning(
            "Cluster slots: the %s store does not answer (%s); until it does, jobs with "
            "concurrencyScope cluster follow onStoreUnavailable (trying again with back-off "
            "up to %g s)",
            store.backend,
            link.last_error,
            link.cap,
        )
        link.start()

    async def _retire(self, store: SlotStore | None, link: StoreLink[Any] | None) -> None:
        if link is not None:
            await link.close()
        if store is not None:
            await store.close()

    async def discard(self, prepared: Any) -> None:
        if isinstance(prepared, _Waiting):
            await prepared.store.close()
        elif isinstance(prepared, SlotStore):
            await prepared.close()

    async def close(self) -> None:
        if self.link is not None:
            await self.link.close()
        await self.guard.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class _SlotCollector(Collector):
    def __init__(self, guard: SlotGuard) -> None:
        self.guard = guard

    def collect(self) -> Iterator[Metric]:
        stats = self.guard.stats
        yield GaugeMetricFamily(
            "cronstable_cluster_slots_held",
            "Cluster concurrency slots this node holds now (concurrencyScope cluster).",
            value=len(self.guard.held()),
        )
        yield CounterMetricFamily(
            "cronstable_cluster_slot_cancels_sent",
            "Cancel records this node sent to another node's slot (concurrencyPolicy Replace).",
            value=stats.cancels_sent,
        )
        yield CounterMetricFamily(
            "cronstable_cluster_slot_cancels_obeyed",
            "Cancel records aimed at this node's slot that it obeyed (its runs replaced).",
            value=stats.cancels_obeyed,
        )
        yield CounterMetricFamily(
            "cronstable_cluster_slots_lost",
            "Slots another node took while a run here still went (a possible overlap).",
            value=stats.lost,
        )
        yield CounterMetricFamily(
            "cronstable_cluster_slot_store_failures",
            "Operations on the cluster slot store that failed.",
            value=stats.store_failures,
        )
