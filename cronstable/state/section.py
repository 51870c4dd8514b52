"""The ``state`` section of the Applier.

* prepare: when the section (or the etcd it uses) changed, build the store the
  revision names and prove it writable; a store that refuses
  (:mod:`cronstable.store_errors`: a directory this daemon may not write, a login
  etcd does not accept) rejects the revision, naming the key.  The first store of
  the daemon's life is also read: this node's records, which commit restores.
* commit: the keeper writes to the new store from now on; the first time, the
  records a previous daemon left are restored (adopted runs, resumed schedules,
  re-armed retries, the run history).  Commit runs after the jobs section's, so
  the restored records meet the revision's jobs.  A store that did not answer is
  committed all the same, *connecting*: launches that need a record follow
  ``onStoreUnavailable`` at once, records wait in memory, and the section's
  :class:`~cronstable.store_link.StoreLink` tries the store again with capped
  back-off.  Its first answer reads the records (when a restore is still owed) and
  hands them to :meth:`~cronstable.state.keeper.StateKeeper.came_up`, which
  restores them under the rules for a late store, then writes what was queued.
* discard: close the prepared store.

The node's name and ``--state-dir`` come from the command line, never from the
repository.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.config import ConfigError, DesiredState
from cronstable.config.models import ClusterEtcd, StateConfig
from cronstable.etcd import EtcdError, login_from_environment
from cronstable.reconcile.plan import Plan
from cronstable.redact import redact
from cronstable.state.base import OP_TIMEOUT, Record, StateError, StateStore, node_key
from cronstable.state.factory import make_store
from cronstable.state.keeper import Policy, StateKeeper
from cronstable.store_errors import fault_of
from cronstable.store_link import StoreLink, retry_cap

logger = logging.getLogger(__name__)

_KEEP = object()
"""prepare's answer for an unchanged section: the store in use stays."""


class StateSection:
    name = "state"

    def __init__(
        self,
        keeper: StateKeeper,
        state_dir: str | Path,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.keeper = keeper
        self.state_dir = Path(state_dir)
        self.config: tuple[StateConfig, ClusterEtcd | None] | None = None
        self.link: StoreLink[Any] | None = None
        """The store in use: up, or connecting while it does not answer."""
        self._restored = False
        self._retiring: set[asyncio.Task[None]] = set()
        if registry is not None:
            registry.register(_StateCollector(keeper))

    def affected(self, plan: Plan) -> bool:
        return True  # prepare tells an unchanged section apart (the cluster's etcd counts)

    def _wanted(self, desired: DesiredState) -> tuple[StateConfig, ClusterEtcd | None] | None:
        if desired.state is None:
            return None
        etcd = desired.cluster.etcd if desired.cluster is not None else None
        return (desired.state, etcd if desired.state.backend == "etcd" else None)

    async def prepare(self, desired: DesiredState) -> Any:
        wanted = self._wanted(desired)
        if wanted == self.config:
            return _KEEP
        if wanted is None:
            return None
        config = wanted[0]
        if self.config is not None and _same_store(self.config, wanted):
            return _Policy(config.on_store_unavailable)  # the store and its queue stay
        where = ("state", "backend")
        try:
            login = login_from_environment() if config.backend == "etcd" else (None, None)
            store = make_store(config, desired.cluster, self.state_dir, login=login)
        except (EtcdError, ValueError, OSError) as exc:
            raise ConfigError([desired.problem(where, redact(str(exc)))]) from exc
        restore = self._owes_restore()
        try:
            records = await self._reach(store, restore)
        except (StateError, TimeoutError) as exc:
            if fault_of(exc) == "unreachable":
                # on etcd, the cluster's: a node looks for its etcd at least once a lease
                ttl = desired.cluster.lease_ttl if desired.cluster is not None else None
                cap = retry_cap(ttl if config.backend == "etcd" else None)
                return _Waiting(store, exc, restore, cap)
            await store.close()
            reason = str(exc) or "no answer in time"
            raise ConfigError(
                [desired.problem(where, f"cannot use the {config.backend} store: {redact(reason)}")]
            ) from exc
        return (store, records)

    def _owes_restore(self) -> bool:
        """Whether the records a previous daemon left are still to be restored: only before
        the first fire (a section added to a running daemon must not move its schedules
        back to a previous life's records), or while the store the daemon started with
        has not answered yet."""
        waited = self.link is not None and self.link.connecting
        return not self._restored and (not self.keeper.scheduler.started or waited)

    async def _reach(self, store: StateStore, restore: bool) -> dict[str, Record | None] | None:
        """Prove ``store`` writable; this node's records when ``restore``."""
        await asyncio.wait_for(store.check(), timeout=OP_TIMEOUT * 2)
        if not restore:
            return None
        prefix = node_key(self.keeper.node) + "/"
        return await asyncio.wait_for(store.list(prefix), timeout=OP_TIMEOUT * 2)

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        if prepared is _KEEP:
            return
        self.config = self._wanted(desired)
        if isinstance(prepared, _Policy):
            self.keeper.policy = prepared.policy
            logger.info("State: onStoreUnavailable is now %s", prepared.policy)
            return
        old_writer = self.keeper.writer
        old_link, self.link = self.link, None
        policy: Policy = (
            desired.state.on_store_unavailable if desired.state is not None else "degrade"
        )
        if prepared is None:
            old = self.keeper.use(None)
            if old is not None:
                logger.info("State: no state section any more; nothing is kept from now on")
        elif isinstance(prepared, _Waiting):
            old = self._wait_for(prepared, policy)
        else:
            store, records = prepared
            old = self.keeper.use(store, policy)
            self.link = StoreLink.up("state", store.backend, title="State")
            logger.info(
                "State: records of node %s kept in %r (onStoreUnavailable: %s)",
                self.keeper.node,
                store,
                policy,
            )
            if records is not None and not self._restored:
                self.keeper.restore(records, self.keeper.scheduler.clock.now())
            elif not self._restored:
                _not_restored()
            self._restored = True
        if old is not None or old_link is not None:
            self._retire_later(old, old_writer, old_link)

    def _wait_for(self, waiting: _Waiting, policy: Policy) -> StateStore | None:
        """Use ``waiting.store`` connecting: records wait in memory until it answers."""
        store = waiting.store
        link: StoreLink[Mapping[str, Record | None] | None] = StoreLink.waiting(
            "state",
            store.backend,
            title="State",
            error=waiting.error,
            probe=lambda: self._reach(store, waiting.restore and not self._restored),
            on_up=lambda records: self._came_up(store, records),
            timeout=OP_TIMEOUT * 4,
            cap=waiting.cap,
        )
        old = self.keeper.use(store, policy, waiting=link.last_error or "no answer in time")
        self.link = link
        logger.warning(
            "State: the %s store does not answer (%s); records of node %s wait in memory "
            "until it does, and launches that need one follow onStoreUnavailable: %s "
            "(trying again with back-off up to %g s)",
            store.backend,
            link.last_error,
            self.keeper.node,
            policy,
            link.cap,
        )
        if not waiting.restore and not self._restored:
            _not_restored()
            self._restored = True
        link.start()
        return old

    def _came_up(self, store: StateStore, records: Mapping[str, Record | None] | None) -> None:
        if store is not self.keeper.store:
            return  # replaced meanwhile
        restore = records is not None and not self._restored
        self.keeper.came_up(records if restore else None, self.keeper.scheduler.clock.now())
        self._restored = True
        logger.info(
            "State: records of node %s kept in %r from now on%s",
            self.keeper.node,
            store,
            f"; the {len(records or ())} records a previous daemon left are restored"
            if restore
            else "",
        )

    def _retire_later(
        self, store: StateStore | None, writer: Any, link: StoreLink[Any] | None
    ) -> None:
        async def retire() -> None:
            if link is not None:
                await link.close()
            if store is not None:
                await self.keeper.retire(writer)
                await store.close()

        task = asyncio.ensure_future(retire())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def discard(self, prepared: Any) -> None:
        if isinstance(prepared, _Waiting):
            await prepared.store.close()
        elif isinstance(prepared, tuple):
            await prepared[0].close()

    async def close(self) -> None:
        if self.link is not None:
            await self.link.close()
        if self._retiring:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._retiring, return_exceptions=True)
        await self.keeper.close()


def _not_restored() -> None:
    logger.info(
        "State: added while the daemon runs; records a previous daemon left are "
        "not restored (they are settled or replaced as jobs run)"
    )


@dataclass(frozen=True, slots=True)
class _Waiting:
    """prepare's answer when the store did not answer: it is committed connecting."""

    store: StateStore
    error: BaseException
    restore: bool
    """Whether its first answer restores what a previous daemon left."""
    cap: float
    """The longest wait between two attempts."""


@dataclass(frozen=True, slots=True)
class _Policy:
    """prepare's answer when only onStoreUnavailable changed."""

    policy: Policy


def _same_store(
    old: tuple[StateConfig, ClusterEtcd | None], new: tuple[StateConfig, ClusterEtcd | None]
) -> bool:
    return (old[0].backend, old[1]) == (new[0].backend, new[1])


class _StateCollector(Collector):
    def __init__(self, keeper: StateKeeper) -> None:
        self.keeper = keeper

    def collect(self) -> Iterator[Metric]:
        keeper = self.keeper
        stats = keeper.stats
        yield GaugeMetricFamily(
            "cronstable_state_enabled",
            "1 when a state section is applied.",
            value=int(keeper.store is not None),
        )
        yield GaugeMetricFamily(
            "cronstable_state_store_available",
            "0 while the last write to the state store failed.",
            value=int(keeper.store is not None and keeper.available),
        )
        yield GaugeMetricFamily(
            "cronstable_state_records_queued",
            "Records waiting to be written to the state store.",
            value=keeper.writer.queued() if keeper.writer is not None else 0,
        )
        yield CounterMetricFamily(
            "cronstable_state_write_failures",
            "Writes to the state store that failed (each is tried again).",
            value=stats.write_failures,
        )
        restored = CounterMetricFamily(
            "cronstable_state_restored",
            "What the last start restored from durable state, by kind.",
            labels=["kind"],
        )
        restored.add_metric(["resumed_schedule"], stats.restored_fires)
        restored.add_metric(["rearmed_retry"], stats.rearmed_retries)
        restored.add_metric(["settled_retry"], stats.settled_at_restore)
        restored.add_metric(["adopted_run"], stats.adopted_runs)
        yield restored
