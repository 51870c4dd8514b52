"""The Applier section of the pools, and their Prometheus metrics.

* prepare: nothing can fail (the loader checked every pool and every job naming
  one), so it hands the revision's pools on.
* commit: :meth:`Pools.configure <cronstable.runtime.pools.Pools.configure>`
  swaps the pool table in one step, right after the job table (the section comes
  second in ``build_daemon``), so no launch between the two commits can meet a job
  whose pool is not there yet: commits do not await.

Metrics, read from the pools when scraped (one series per pool name):
``cronstable_pool_slots``, ``cronstable_pool_slots_in_use``,
``cronstable_pool_queue_length``, ``cronstable_pool_oldest_wait_seconds`` (0 with
an empty queue), and the counters ``cronstable_pool_admitted``,
``cronstable_pool_timeouts``, ``cronstable_pool_queue_full`` and
``cronstable_pool_waited_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.config import DesiredState, Pool
from cronstable.reconcile.plan import Plan
from cronstable.runtime.pools import Pools


class PoolsSection:
    """See the module docstring."""

    name = "pools"

    def __init__(self, pools: Pools, registry: CollectorRegistry | None = None) -> None:
        self.pools = pools
        if registry is not None:
            registry.register(PoolCollector(pools))

    def affected(self, plan: Plan) -> bool:
        return bool(plan.pools)

    async def prepare(self, desired: DesiredState) -> Mapping[str, Pool]:
        return desired.pools

    def commit(self, prepared: Mapping[str, Pool], desired: DesiredState) -> None:
        self.pools.configure(prepared)

    async def discard(self, prepared: Mapping[str, Pool]) -> None:
        return None

    async def close(self) -> None:
        return None


class PoolCollector(Collector):
    def __init__(self, pools: Pools) -> None:
        self.pools = pools

    def collect(self) -> Iterator[Metric]:
        gauges = {
            "slots": GaugeMetricFamily(
                "cronstable_pool_slots",
                "Slots of the pool (its configured count).",
                labels=["pool"],
            ),
            "in_use": GaugeMetricFamily(
                "cronstable_pool_slots_in_use",
                "Slots of the pool held by runs now (above the count for a while after it shrank).",
                labels=["pool"],
            ),
            "queued": GaugeMetricFamily(
                "cronstable_pool_queue_length",
                "Launches waiting in the pool's queue.",
                labels=["pool"],
            ),
            "oldest": GaugeMetricFamily(
                "cronstable_pool_oldest_wait_seconds",
                "How long the launch waiting longest in the pool's queue has waited (0: none "
                "waits).",
                labels=["pool"],
            ),
        }
        counters = {
            "admitted": CounterMetricFamily(
                "cronstable_pool_admitted",
                "Launches the pool admitted (given a slot).",
                labels=["pool"],
            ),
            "timeouts": CounterMetricFamily(
                "cronstable_pool_timeouts",
                "Launches skipped after waiting poolTimeout in the pool's queue.",
                labels=["pool"],
            ),
            "full": CounterMetricFamily(
                "cronstable_pool_queue_full",
                "Launches refused because the pool's queue was full.",
                labels=["pool"],
            ),
            "waited": CounterMetricFamily(
                "cronstable_pool_waited_seconds",
                "Seconds the admitted launches waited in the pool's queue, summed.",
                labels=["pool"],
            ),
        }
        seen: set[str] = set()
        for view in self.pools.views():  # the applied pools first: a retired twin is not shown
            if view.name in seen:
                continue
            seen.add(view.name)
            labels = [view.name]
            gauges["slots"].add_metric(labels, view.slots)
            gauges["in_use"].add_metric(labels, view.in_use)
            gauges["queued"].add_metric(labels, view.queued)
            gauges["oldest"].add_metric(labels, view.oldest_wait or 0.0)
            counters["admitted"].add_metric(labels, view.admitted)
            counters["timeouts"].add_metric(labels, view.timeouts)
            counters["full"].add_metric(labels, view.refused_full)
            counters["waited"].add_metric(labels, view.waited_total)
        yield from gauges.values()
        yield from counters.values()
