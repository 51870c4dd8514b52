"""Per-job Prometheus metrics, fed by the scheduler through a run listener.

They live in the daemon's registry (:class:`cronstable.metrics.DaemonMetrics`),
so a web-server change never resets them; a job's series are dropped at the
commit that removes the job.  Next fires and skipped fires are read from the
scheduler when scraped.  Last success is absent, not 0, until a run succeeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.config.models import BUFFER_POLICIES
from cronstable.ports import RUN_OUTCOMES, FlowRunView, RunOutcome, RunResult, RunStart
from cronstable.runtime.scheduler import Scheduler
from cronstable.workflows.dag import OUTCOMES


class _SchedulerCollector(Collector):
    def __init__(self, scheduler: Callable[[], Scheduler], per_job: Callable[[], bool]) -> None:
        self._scheduler = scheduler
        self._per_job = per_job

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler()

    def describe(self) -> Iterator[Metric]:
        """The families :meth:`collect` yields, without reading the scheduler (it is asked
        when registered, before the scheduler exists)."""
        yield GaugeMetricFamily("cronstable_job_next_fire_timestamp_seconds", "", labels=["job"])
        yield GaugeMetricFamily(
            "cronstable_workflow_next_fire_timestamp_seconds", "", labels=["workflow"]
        )
        yield CounterMetricFamily("cronstable_fires_skipped", "", labels=["reason"])
        yield GaugeMetricFamily("cronstable_job_fires_buffered", "", labels=["job"])
        yield CounterMetricFamily("cronstable_fires_buffered", "")
        yield CounterMetricFamily("cronstable_fires_buffer_dropped", "")

    def collect(self) -> Iterator[Metric]:
        nxt = GaugeMetricFamily(
            "cronstable_job_next_fire_timestamp_seconds",
            "When the job fires next (Unix time); absent for a job with no next fire.",
            labels=["job"],
        )
        if self._per_job():
            for name in self.scheduler.jobs:
                fire = self.scheduler.next_fire(name)
                if fire is not None:
                    nxt.add_metric([name], fire.timestamp())
        yield nxt
        flow_next = GaugeMetricFamily(
            "cronstable_workflow_next_fire_timestamp_seconds",
            "When the workflow fires next (Unix time); absent for one with no next fire.",
            labels=["workflow"],
        )
        for name in self.scheduler.workflows:
            fire = self.scheduler.next_fire(name)
            if fire is not None:
                flow_next.add_metric([name], fire.timestamp())
        yield flow_next
        stats = self.scheduler.stats
        skipped = CounterMetricFamily(
            "cronstable_fires_skipped",
            "Scheduled fires that did not start a run, by reason: missed (found too late: "
            "clock jump, suspend, stall), forbid (a run was still going, concurrencyPolicy "
            "Forbid), pool_timeout (waited poolTimeout in its pool's queue; retries and "
            "starts on request too), pool_full (the pool's queue was full) or buffer_full "
            "(the job's buffer was full: concurrencyPolicy BufferOne, BufferAll); with leader "
            "election, the cluster gate's reasons (not_leader, not_owner, leadership_unknown, "
            "node_name_conflict); with concurrencyScope cluster, the slot's (slot_held, "
            "slot_not_freed, slot_unavailable, fire_taken).",
            labels=["reason"],
        )
        skipped.add_metric(["missed"], stats.missed)
        skipped.add_metric(["forbid"], stats.skipped_forbid)
        skipped.add_metric(["pool_timeout"], stats.skipped_pool_timeout)
        skipped.add_metric(["pool_full"], stats.skipped_pool_full)
        skipped.add_metric(["buffer_full"], stats.skipped_buffer_full)
        for reason, count in sorted(stats.skipped_cluster.items()):
            skipped.add_metric([reason], count)
        yield skipped
        waiting = GaugeMetricFamily(
            "cronstable_job_fires_buffered",
            "Fires of the job waiting now for its runs going (concurrencyPolicy BufferOne or "
            "BufferAll; with concurrencyScope cluster, also a launch waiting for another "
            "node's run); absent for jobs of the other policies.",
            labels=["job"],
        )
        for name, job in self.scheduler.jobs.items():
            if job.config.concurrency_policy in BUFFER_POLICIES:
                waiting.add_metric([name], len(self.scheduler.buffered(name)))
        yield waiting
        yield CounterMetricFamily(
            "cronstable_fires_buffered",
            "Fires (and retries) that waited in their job's buffer for the runs going "
            "(concurrencyPolicy BufferOne, BufferAll).",
            value=stats.buffered,
        )
        yield CounterMetricFamily(
            "cronstable_fires_buffer_dropped",
            "Buffered fires that never ran: their job was removed or disabled, or the daemon "
            "stopped.",
            value=stats.buffer_dropped,
        )


class RunMetrics:
    """A :class:`~cronstable.ports.RunListener` counting runs per job (a workflow's task as
    ``WORKFLOW.TASK``), and a :class:`~cronstable.ports.FlowListener` counting workflow
    runs per workflow.

    ``scheduler`` gives the scheduler whose job table the metrics read (a listener of
    the scheduler is built before it: :class:`~cronstable.later.Later`)."""

    def __init__(self, registry: CollectorRegistry, scheduler: Callable[[], Scheduler]) -> None:
        self.runs = Counter(
            "cronstable_job_runs",
            "Finished runs by job and outcome (" + ", ".join(RUN_OUTCOMES) + ").",
            ["job", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "cronstable_job_run_duration_seconds",
            "How long finished runs took (not a run found lost: when it ended is unknown).",
            ["job"],
            buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
            registry=registry,
        )
        self.cpu = Histogram(
            "cronstable_job_run_cpu_seconds",
            "User + system CPU time of finished runs (the job's process and the descendants "
            "it waited for).",
            ["job"],
            buckets=(0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600),
            registry=registry,
        )
        self.max_rss = Gauge(
            "cronstable_job_run_max_rss_bytes",
            "Largest resident set of the job's biggest single process in its last finished run.",
            ["job"],
            registry=registry,
        )
        self.retries = Counter(
            "cronstable_job_retries", "Retry runs started, by job.", ["job"], registry=registry
        )
        self.running = Gauge(
            "cronstable_job_running", "Runs going now, by job.", ["job"], registry=registry
        )
        self.last_success = Gauge(
            "cronstable_job_last_success_timestamp_seconds",
            "When the job's last successful run ended (Unix time); absent until one has.",
            ["job"],
            registry=registry,
        )
        self.flow_runs = Counter(
            "cronstable_workflow_runs",
            "Finished workflow runs by workflow and outcome (" + ", ".join(OUTCOMES) + ").",
            ["workflow", "outcome"],
            registry=registry,
        )
        self.flow_duration = Histogram(
            "cronstable_workflow_run_duration_seconds",
            "How long finished workflow runs took, from their start to their last task's end.",
            ["workflow"],
            buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
            registry=registry,
        )
        self.flow_running = Gauge(
            "cronstable_workflow_running",
            "Workflow runs going now, by workflow.",
            ["workflow"],
            registry=registry,
        )
        self.flow_last_success = Gauge(
            "cronstable_workflow_last_success_timestamp_seconds",
            "When the workflow's last successful run ended (Unix time); absent until one has.",
            ["workflow"],
            registry=registry,
        )
        self._scheduler = scheduler
        self.per_job = True
        """Whether the series labelled by job are kept (``metrics.perJob``)."""
        self._counted: set[str] = set()
        """The runs going whose start ``running`` counted (a run started while the
        series were off is not taken off it when it ends)."""
        self._flows_going: set[str] = set()
        self._series: dict[str, dict[tuple[object, str], Any]] = {}
        """Each job's series made so far, by (metric, outcome): ``labels()`` checks and
        locks on every call, which a run's end paid six times.  Dropped with the series."""
        registry.register(_SchedulerCollector(scheduler, lambda: self.per_job))

    def _of(self, metric: Counter | Gauge | Histogram, job: str, outcome: str = "") -> Any:
        """``metric``'s series of ``job`` (and ``outcome``), made on first use."""
        series = self._series.get(job)
        if series is None:
            series = self._series[job] = {}
        child = series.get((metric, outcome))
        if child is None:
            child = series[(metric, outcome)] = (
                metric.labels(job, outcome) if outcome else metric.labels(job)
            )
        return child

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler()

    def run_started(self, run: RunStart) -> None:
        if not self.per_job or not self.scheduler.has_job(run.job):
            return
        self._counted.add(run.id)
        self._of(self.running, run.job).inc()
        if run.attempt > 1 and not run.manual:
            self._of(self.retries, run.job).inc()

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        counted = run.id in self._counted
        self._counted.discard(run.id)
        if not self.per_job or not self.scheduler.has_job(run.job):
            return  # a run of a job a revision removed: its series are gone
        job = run.job
        if counted:
            self._of(self.running, job).dec()
        self._of(self.runs, job, outcome).inc()
        if outcome != "lost":
            # a lost run's "duration" runs to when another node found its node dead, not
            # to its end (unknown): it would put a failover's wait into the histogram
            self._of(self.duration, job).observe(result.duration)
        if result.cpu_seconds is not None:
            self._of(self.cpu, job).observe(result.cpu_seconds)
        if result.max_rss is not None:
            self._of(self.max_rss, job).set(result.max_rss)
        if outcome == "succeeded":
            self._of(self.last_success, job).set(result.finished_at.timestamp())

    def keep_per_job(self, keep: bool) -> None:
        """Keep the series labelled by job, or drop every one of them and keep none."""
        if not keep and self.per_job:
            for metric in (
                self.runs,
                self.duration,
                self.cpu,
                self.max_rss,
                self.retries,
                self.running,
                self.last_success,
            ):
                metric.clear()
            self._counted.clear()
            self._series.clear()
        self.per_job = keep

    def flow_started(self, run: FlowRunView) -> None:
        if run.id not in self._flows_going:
            self._flows_going.add(run.id)
            self.flow_running.labels(run.workflow).inc()

    def flow_changed(self, run: FlowRunView) -> None:
        return None

    def flow_finished(self, run: FlowRunView) -> None:
        if run.id in self._flows_going:
            self._flows_going.discard(run.id)
            self.flow_running.labels(run.workflow).dec()
        if run.outcome is None or run.finished_at is None:
            return
        self.flow_runs.labels(run.workflow, run.outcome).inc()
        duration = run.duration
        if duration is not None:
            self.flow_duration.labels(run.workflow).observe(duration)
        if run.outcome == "succeeded":
            self.flow_last_success.labels(run.workflow).set(run.finished_at.timestamp())

    def forget_workflows(self, workflows: Iterable[str]) -> None:
        """Drop every series of ``workflows`` (removed by a revision)."""
        for workflow in workflows:
            for outcome in OUTCOMES:
                _remove(self.flow_runs, workflow, outcome)
            for metric in (self.flow_duration, self.flow_running, self.flow_last_success):
                _remove(metric, workflow)

    def forget(self, jobs: Iterable[str]) -> None:
        """Drop every series of ``jobs`` (removed by a revision)."""
        for job in jobs:
            self._series.pop(job, None)
            for outcome in RUN_OUTCOMES:
                _remove(self.runs, job, outcome)
            for metric in (
                self.duration,
                self.cpu,
                self.max_rss,
                self.retries,
                self.running,
                self.last_success,
            ):
                _remove(metric, job)


def _remove(metric: Counter | Gauge | Histogram, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass
