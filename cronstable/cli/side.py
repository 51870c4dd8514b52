"""One side of ``cronstable diff`` (and what ``validate``, ``next`` and ``job-set-id``
read): a configuration as the user named it, loaded on demand.

A leaf: :mod:`cronstable.cli.sides` turns what the user typed into a :class:`Side`,
and each kind of side (a path, a source spec, a running daemon in
:mod:`cronstable.cli.remote`) builds one; none of them imports another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cronstable.config import DesiredState
from cronstable.errors import CronstableError

if TYPE_CHECKING:
    from cronstable.reconcile.effects import DaemonFacts


class SideError(CronstableError):
    """A side cannot be read (not its configuration being invalid: that is a ConfigError)."""


@dataclass(frozen=True, slots=True)
class Side:
    label: str
    """What the user typed, credentials masked."""
    revision: str | None
    load: Callable[[], DesiredState]
    """Raises ConfigError (invalid configuration) or SideError (cannot read)."""
    published: bool = False
    """Secrets and environment values are already ``sha256:`` digests (a daemon's
    ``GET /config``): the other side must be compared in the same form."""
    facts: Callable[[], DaemonFacts] | None = None
    """What a running daemon knows that its files do not (its ``GET /status``: pending
    retries, runs going, API pauses, pool queues), read on demand; None for files.
    Raises SideError."""
