"""A run's channel to its daemon: what the process layer asks for when it starts a run.

The daemon gives every run it starts a unix socket of its own and a token
(:mod:`cronstable.channel`), passed to the job in its environment, which the
job-side clients (``cronstable state get``, ``cronstable lock``) use to talk to
the daemon.  The process layer knows only these two protocols: it opens a
:class:`RunGrant` for the run just before it spawns it, puts the grant's
:attr:`~RunGrant.environment` into the job's, and, once the run ended, lets
the grant :meth:`~RunGrant.finish` (a workflow task's values are taken then) or
revokes it (the run could not start, or was cancelled).
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

    async def finish(self) -> str | None:
        """The run's process ended: take what it left behind (a workflow task's values in
        ``$CRONSTABLE_XCOM_DIR``), then :meth:`revoke`.  Why the run fails for what it left
        (a value refused); None when nothing is wrong.  Never raises."""
        ...


class RunChannel(Protocol):
    """Opens the channel of each run the daemon starts."""

    async def open(self, run: str, job: Job, owner: RunOwner | None) -> RunGrant | None:
        """A grant for run ``run`` (its id) of ``job``, whose process runs as ``owner``
        (None: as the daemon); None when runs get no channel (the channel could not be
        set up: it said why once)."""
        ...
