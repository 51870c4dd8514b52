"""A run's channel to its daemon: what the process layer asks for when it starts a run.

The daemon gives every run it starts a unix socket of its own and a token
(:mod:`cronstable.channel`), passed to the job in its environment, which the
job-side clients (``cronstable state get``, ``cronstable lock``) use to talk to
the daemon.  The process layer knows only these two protocols: it opens a
:class:`RunGrant` for the run just before it spawns it, puts the grant's
:attr:`~RunGrant.environment` into the job's, and revokes the grant once the
run ended (or could not start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from cronstable.config.desired import Job


@dataclass(frozen=True, slots=True)
class RunOwner:
    """Who a run's process runs as: its socket and directory are made theirs."""

    uid: int
    gid: int


class RunGrant(Protocol):
    """One run's socket and token, valid until :meth:`revoke`."""

    @property
    def environment(self) -> Mapping[str, str]:
        """What the job's environment gets (``CRONSTABLE_RUN_SOCKET``, ``CRONSTABLE_RUN_TOKEN``)."""
        ...

    def revoke(self) -> None:
        """The run ended: refuse its token from now on, close its connections (a lock it
        holds is released) and remove its socket.  Idempotent; never raises."""
        ...


class RunChannel(Protocol):
    """Opens the channel of each run the daemon starts."""

    async def open(self, run: str, job: Job, owner: RunOwner | None) -> RunGrant | None:
        """A grant for run ``run`` (its id) of ``job``, whose process runs as ``owner``
        (None: as the daemon); None when runs get no channel (the channel could not be
        set up: it said why once)."""
        ...
