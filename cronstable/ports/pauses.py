"""A job held back: its fires are skipped while a :class:`Pause` holds.

A job may be paused two ways, kept apart everywhere they are shown:

* ``config``: ``suspend`` in the repository (what a revision says; a later revision
  removes it);
* ``api``: ``POST /jobs/{name}/pause`` (or ``cronstable pause``), recorded in the state
  store by the token that asked, lifted by ``POST /jobs/{name}/resume`` or its ``until``;
  a revision never lifts it.

The durable state's pause book (:mod:`cronstable.state.pauses`) keeps them; the
daemon's control asks it through :class:`PauseControl`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

PauseSource = Literal["config", "api"]


@dataclass(frozen=True, slots=True)
class Pause:
    """One pause of one job."""

    job: str
    source: PauseSource
    reason: str | None
    by: str | None
    """The API token's name that asked (None for a pause written in the repository)."""
    since: datetime | None
    """When it was asked (api), or when this daemon applied the revision saying it
    (config)."""
    until: datetime | None
    """When it ends by itself; None: until lifted."""
    node: str | None = None
    """The node that recorded it (api)."""

    def holds(self, now: datetime) -> bool:
        return self.until is None or now < self.until


@dataclass(frozen=True, slots=True)
class JobPauses:
    """The pauses holding a job now, each source apart (None: not paused that way)."""

    config: Pause | None = None
    api: Pause | None = None

    @property
    def paused(self) -> bool:
        return self.config is not None or self.api is not None


class PauseRefused(Exception):
    """A pause or resume cannot be done now (the state store does not answer); says why."""


class PauseControl(Protocol):
    """What the daemon's control may ask of the pauses."""

    def pauses(self, job: str, *, workflow: bool = False) -> JobPauses:
        """The pauses holding ``job`` (with ``workflow``: workflow ``job``) now."""
        ...

    async def pause(
        self,
        job: str,
        *,
        reason: str,
        by: str | None,
        until: datetime | None,
        workflow: bool = False,
    ) -> tuple[Pause, bool]:
        """Pause ``job`` (or workflow ``job``) through the API (replacing an API pause it
        has): the pause, and whether it is durable (kept in a state store).  Raises
        :class:`PauseRefused`."""
        ...

    async def resume(self, job: str, *, by: str | None, workflow: bool = False) -> Pause | None:
        """Lift ``job``'s (or workflow ``job``'s) API pause: the pause lifted, None when
        it had none.  Raises :class:`PauseRefused`."""
        ...
