"""Prometheus metrics, in a registry the daemon owns (it outlives web-server restarts).

The HTTP API that serves them comes with its own feature; until then they are
kept and can be rendered with :func:`render`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.config_revision_info = Gauge(
            "cronstable_config_revision_info",
            "The applied configuration revision (value 1; the revision is in the labels).",
            ["revision", "job_set_id", "source"],
            registry=self.registry,
        )
        self.config_last_reload_successful = Gauge(
            "cronstable_config_last_reload_successful",
            "1 if the last configuration revision tried was applied, 0 if it was rejected.",
            registry=self.registry,
        )
        self.reconcile_duration_seconds = Histogram(
            "cronstable_reconcile_duration_seconds",
            "Time from a snapshot's arrival to the end of its reconcile (load, plan, apply).",
            ["outcome"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )

        self.source_errors = Counter(
            "cronstable_source_errors",
            "Failed attempts to reach the configuration source's origin (fetch, read, scan).",
            ["kind"],
            registry=self.registry,
        )

    def source_error(self, kind: str) -> None:
        """A source's hook: reaching its origin failed once."""
        self.source_errors.labels(kind).inc()

    def applied(self, revision: str, job_set_id: str, source: str) -> None:
        self.config_revision_info.clear()
        self.config_revision_info.labels(revision, job_set_id, source).set(1)
        self.config_last_reload_successful.set(1)

    def rejected(self) -> None:
        self.config_last_reload_successful.set(0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
