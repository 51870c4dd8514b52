"""What the web layer may read from and ask of the daemon (nothing else)."""

from __future__ import annotations

from typing import Any, Protocol


class DaemonApi(Protocol):
    """Implemented by :class:`cronstable.runtime.control.DaemonControl`."""

    def has_job(self, name: str) -> bool: ...

    def ready(self) -> str | None:
        """None when ready, else why not."""
        ...

    def status(self) -> dict[str, Any]: ...

    def runs(self, name: str) -> list[dict[str, Any]]:
        """KeyError for an unknown job."""
        ...

    def applied_config(self) -> dict[str, Any] | None: ...

    def metrics_text(self) -> tuple[bytes, str]: ...

    def cluster_view(self) -> dict[str, Any]:
        """The leadership as this node sees it (``{"enabled": false}`` without election)."""
        ...

    async def start(self, name: str) -> tuple[str | None, str]:
        """(the new run's id, "") or (None, why concurrencyPolicy or the job's cluster slot
        refused); KeyError."""
        ...

    def cancel(self, name: str, run: str | None = None) -> list[str]: ...

    def reload(self) -> None: ...

    def next_fires(self, name: str, hours: float) -> dict[str, Any]:
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
    def data(self) -> dict[str, Any]: ...


class EventSubscription(Protocol):
    @property
    def dropped(self) -> bool:
        """Closed because the client fell behind."""
        ...

    async def next(self) -> Event | None:
        """The next event; None once the subscription is closed."""
        ...
