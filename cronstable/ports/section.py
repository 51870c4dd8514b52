"""A part of the daemon a revision configures, in two phases (:class:`Section`)."""

from __future__ import annotations

from typing import Protocol, TypeVar

from cronstable.config.desired import DesiredState

P = TypeVar("P")
"""What :meth:`Section.prepare` built for :meth:`Section.commit` (or :meth:`Section.discard`)."""


class Section(Protocol[P]):
    """One part of the daemon a revision configures.

    Phase one prepares every touched section; if any prepare fails, each one
    prepared is discarded and the running revision stays.  Phase two commits
    them, in the order they were given.  ``P`` is what prepare hands to commit
    or discard: a section says what it builds rather than passing ``Any``.
    """

    name: str
    """Names the section in logs (``jobs``, ``cluster``, ``state`` …)."""

    async def prepare(self, desired: DesiredState) -> P:
        """Everything that can fail, with no visible effect; raises ConfigError."""
        ...

    def commit(self, prepared: P, desired: DesiredState) -> None:
        """Make ``prepared`` live; must not fail."""
        ...

    async def discard(self, prepared: P) -> None:
        """Release what :meth:`prepare` acquired (listeners, connections)."""
        ...

    async def close(self) -> None:
        """The daemon stops: release what the committed revision holds."""
        ...
