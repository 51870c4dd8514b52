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

The steps are :class:`~cronstable.reconcile.backend_section.BackendSection`'s,
written once for the cluster, slot and state sections; this module says what is
its own (which store, how it is reached, what is logged).

The node's name and ``--state-dir`` come from the command line, never from the
repository.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.config import DesiredState
from cronstable.config.models import ClusterEtcd, StateConfig
from cronstable.errors import KeyPath
from cronstable.etcd import EtcdError, EtcdPools, login_from_environment
from cronstable.reconcile.backend_section import BackendSection, Reach, Retire
from cronstable.state.base import OP_TIMEOUT, Record, StateError, StateStore, key, node_key
from cronstable.state.factory import make_store
from cronstable.state.keeper import Policy, StateKeeper
from cronstable.state.pauses import PAUSES, PauseBook
from cronstable.state.writer import Writer
from cronstable.store_link import StoreLink, retry_cap

logger = logging.getLogger(__name__)

JOBS = key("cluster", "jobs")
"""Where a ``Leader`` job's records meet on a store the nodes share (:mod:`.keeper`)."""

Wanted: TypeAlias = tuple[StateConfig, ClusterEtcd | None]
"""The state section, and the cluster's etcd when the store is on it."""
Records: TypeAlias = Mapping[str, Record | None] | None
"""This node's records, read to be restored (None: no restore is owed)."""


@dataclass(frozen=True, slots=True)
class _Reach(Reach[Records]):
    restore: bool = False
    """Whether the store's first answer restores what a previous daemon left."""


class StateSection(BackendSection[Wanted, StateStore, Records]):
    """``pools``: the daemon's connections to etcd (the cluster's, shared with the
    leadership and the slots); ``pauses``: the book the API pauses read with the
    restore are handed to."""

    name = "state"
    store = "state"
    title = "State"
    build_errors = (EtcdError, ValueError, OSError)
    check_errors = (StateError,)

    def __init__(
        self,
        keeper: StateKeeper,
        state_dir: str | Path,
        registry: CollectorRegistry | None = None,
        *,
        pools: EtcdPools | None = None,
        pauses: PauseBook | None = None,
    ) -> None:
        super().__init__()
        self.keeper = keeper
        self.pauses = pauses
        """Handed the API pauses read with the restore (they hold from the first fire)."""
        self.state_dir = Path(state_dir)
        self.pools = pools
        self._restored = False
        if registry is not None:
            registry.register(_StateCollector(keeper))

    def wanted(self, desired: DesiredState) -> Wanted | None:
        if desired.state is None:
            return None
        etcd = desired.cluster.etcd if desired.cluster is not None else None
        return (desired.state, etcd if desired.state.backend == "etcd" else None)

    def adjusts(self, old: Wanted, new: Wanted) -> bool:
        # the same store: only onStoreUnavailable changed; the store and its queue stay
        return (old[0].backend, old[1]) == (new[0].backend, new[1])

    def where(self, config: Wanted) -> KeyPath:
        return ("state", "backend")

    def build(self, config: Wanted, desired: DesiredState) -> StateStore:
        state = config[0]
        login = login_from_environment() if state.backend == "etcd" else (None, None)
        return make_store(state, desired.cluster, self.state_dir, login=login, pools=self.pools)

    def reach(self, backend: StateStore, config: Wanted, desired: DesiredState) -> _Reach:
        restore = self._owes_restore()
        # on etcd, the cluster's: a node looks for its etcd at least once a lease
        ttl = desired.cluster.lease_ttl if desired.cluster is not None else None
        return _Reach(
            lambda: self._reach(backend, restore and not self._restored),
            OP_TIMEOUT * 4,
            retry_cap(ttl if config[0].backend == "etcd" else None),
            restore,
        )

    def _owes_restore(self) -> bool:
        """Whether the records a previous daemon left are still to be restored: only before
        the first fire (a section added to a running daemon must not move its schedules
        back to a previous life's records), or while the store the daemon started with
        has not answered yet."""
        waited = self.link is not None and self.link.connecting
        return not self._restored and (not self.keeper.scheduler.started or waited)

    async def _reach(self, store: StateStore, restore: bool) -> Records:
        """Prove ``store`` writable; this node's records when ``restore``, and the API
        pauses (``pauses/``), so they hold from the first fire."""
        await asyncio.wait_for(store.check(), timeout=OP_TIMEOUT * 2)
        if not restore:
            return None
        prefix = node_key(self.keeper.node) + "/"
        records = dict(await asyncio.wait_for(store.list(prefix), timeout=OP_TIMEOUT * 2))
        if store.shared:  # the runs this node started of jobs it handed off
            jobs = await asyncio.wait_for(store.list(JOBS + "/"), timeout=OP_TIMEOUT * 2)
            records.update(jobs)
        if self.pauses is not None:
            pauses = await asyncio.wait_for(store.list(PAUSES + "/"), timeout=OP_TIMEOUT * 2)
            records.update(pauses)
        return records

    def adjust(self, desired: DesiredState) -> None:
        assert desired.state is not None
        self.keeper.policy = desired.state.on_store_unavailable
        logger.info("State: onStoreUnavailable is now %s", self.keeper.policy)

    def swap(
        self,
        new: StateStore | None,
        old: StateStore | None,
        desired: DesiredState,
        *,
        waiting: str | None,
    ) -> Retire | None:
        writer = self.keeper.writer
        if new is None:
            self.keeper.use(None)
            if old is not None:
                logger.info("State: no state section any more; nothing is kept from now on")
        else:
            self.keeper.use(new, _policy(desired), waiting=waiting)
        if old is None:
            return None
        return lambda: self._retire_store(old, writer)

    async def _retire_store(self, store: StateStore, writer: Writer | None) -> None:
        await self.keeper.retire(writer)  # what was queued for it is written first
        await store.close()

    def started(self, backend: StateStore, result: Records, desired: DesiredState) -> None:
        logger.info(
            "State: records of node %s kept in %r (onStoreUnavailable: %s)",
            self.keeper.node,
            backend,
            _policy(desired),
        )
        if result is not None and not self._restored:
            if self.pauses is not None:
                self.pauses.load(result)
            self.keeper.restore(result, self.keeper.scheduler.clock.now())
        elif not self._restored:
            _not_restored()
        self._restored = True

    def waits(
        self,
        backend: StateStore,
        link: StoreLink[Records],
        reach: Reach[Records],
        desired: DesiredState,
    ) -> None:
        """Records wait in memory until the store answers."""
        logger.warning(
            "State: the %s store does not answer (%s); records of node %s wait in memory "
            "until it does, and launches that need one follow onStoreUnavailable: %s "
            "(trying again with back-off up to %g s)",
            backend.backend,
            link.last_error,
            self.keeper.node,
            _policy(desired),
            link.cap,
        )
        restore = isinstance(reach, _Reach) and reach.restore
        if not restore and not self._restored:
            _not_restored()
            self._restored = True

    def answered(self, backend: StateStore, result: Records) -> None:
        """Restore what was read (the rules for a late store), then write what was queued."""
        if backend is not self.keeper.store:
            return  # replaced meanwhile
        restore = result is not None and not self._restored
        if restore and self.pauses is not None and result is not None:
            self.pauses.load(result)
        self.keeper.came_up(result if restore else None, self.keeper.scheduler.clock.now())
        self._restored = True
        logger.info(
            "State: records of node %s kept in %r from now on%s",
            self.keeper.node,
            backend,
            f"; the {len(result or ())} records a previous daemon left are restored"
            if restore
            else "",
        )

    def committed(self, desired: DesiredState) -> None:
        # after the jobs section's commit: a job a revision added or changed may be one
        # this node owns already, with records another node left (the keeper looks)
        self.keeper.jobs_applied(desired.job_set_id)

    async def shut(self) -> None:
        await self.keeper.close()


def _policy(desired: DesiredState) -> Policy:
    return desired.state.on_store_unavailable if desired.state is not None else "degrade"


def _not_restored() -> None:
    logger.info(
        "State: added while the daemon runs; records a previous daemon left are "
        "not restored (they are settled or replaced as jobs run)"
    )


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
