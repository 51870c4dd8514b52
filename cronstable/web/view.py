"""What the web layer may read from and ask of the daemon (nothing else).

Reads answer read models (:mod:`cronstable.ports.views`); :mod:`cronstable.web.encode`
turns them into the API's JSON.
"""

from __future__ import annotations

from typing import Any, Protocol

from cronstable.ports import (
    AppliedConfig,
    ClusterView,
    EventData,
    JobForecast,
    JobRuns,
    Status,
)


class DaemonApi(Protocol):
    """Implemented by :class:`cronstable.runtime.control.DaemonControl`."""

    def has_job(self, name: str) -> bool: ...

    def ready(self) -> str | None:
        """None when ready, else why not."""
        ...

    def status(self, limit: int | None = None, cursor: str | None = None) -> Status:
        """Every job, or at most ``limit`` from ``cursor``; ValueError for a bad cursor."""
        ...

    def runs(self, name: str) -> JobRuns:
        """KeyError for an unknown job."""
        ...

    def applied_config(self) -> AppliedConfig | None: ...

    def metrics_text(self) -> tuple[bytes, str]: ...

    def cluster_view(self) -> ClusterView | None:
        """The leadership as this node sees it (None without a cluster section)."""
        ...

    async def start(self, name: str) -> tuple[str | None, str]:
        """(the new run's id, "") or (None, why concurrencyPolicy or the job's cluster slot
        refused); KeyError."""
        ...

    def cancel(self, name: str, run: str | None = None) -> list[str]: ...

    def reload(self) -> None: ...

    def next_fires(self, name: str, hours: float) -> JobForecast:
        """The job's fires in the next ``hours``; KeyError for an unknown job."""
        ...

    def subscribe(self) -> EventSubscription | None:
        """Live events; None when too many subscriptions are open."""
        ...

    def unsubscribe(self, subscription: Any) -> None: ...

    def git_origin(self) -> tuple[str, str | None] | None:
        """(URL, full ref name or None for the default branch) of the followed git repository."""
        ...

    def nudge(self, revision: str) -> None:
        """The origin has ``revision``: fetch until it is visible."""
        ...


class Event(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def data(self) -> EventData: ...


class EventSubscription(Protocol):
    @property
    def dropped(self) -> bool:
        """Closed because the client fell behind."""
        ...

    async def next(self) -> Event | None:
        """The next event; None once the subscription is closed."""
        ...
