"""The one interface every configuration source implements.

A source fetches complete :class:`~cronstable.snapshot.Snapshot` s of one
configuration and notices when it changes (a file watch, a poll, an etcd
watch, a nudge from a webhook or SIGHUP).  It never parses YAML: it cannot
judge a revision, so the applier tells it which one it applied
(:meth:`Source.applied`) and the source keeps that one as its last good
snapshot, to start from when its origin is unreachable after a restart.

Lifecycle::

    source = open_source(spec, cache_dir=...)
    await source.start()                  # may fall back to the cached last good
    async for snapshot in source.watch():  # the current snapshot first, then each change
        ... load, plan, apply ...
        source.applied(snapshot)
    await source.close()                  # ends watch()

Errors reaching the origin are logged and retried by the source itself; they
surface as :class:`SourceError` only from :meth:`Source.start` when there is
neither an origin nor a cached snapshot to start from.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Collection

from cronstable.errors import CronstableError
from cronstable.snapshot import Snapshot


class SourceError(CronstableError):
    """A source cannot produce a snapshot (origin unreachable and nothing cached, bad spec)."""


class Source(abc.ABC):
    """A watched configuration origin."""

    description: str
    """Human description, safe to log (no credentials)."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Open resources and fetch the first snapshot (or load the cached last good one).

        Raises :class:`SourceError` when there is nothing to start from.
        """

    @abc.abstractmethod
    def watch(self) -> AsyncIterator[Snapshot]:
        """Yield the current snapshot, then one snapshot per new revision, until closed.

        A revision equal to the last one yielded is never yielded twice.
        """

    @abc.abstractmethod
    def nudge(self, revision: str | None = None) -> None:
        """Look for a new revision now (webhook, SIGHUP).

        ``revision``, when given, is one the origin is known to have (a pushed
        commit sha): the source keeps fetching, with back-off and a bound, until
        it sees it, since the origin may lag behind the notification.
        """

    def applied(  # noqa: B027 - optional hook
        self, snapshot: Snapshot, reads: Collection[str] | None = None
    ) -> None:
        """The applier committed ``snapshot``: keep it as the last good one.

        ``reads`` are the files its load read (configuration and env files) and the
        directories it listed, with a trailing ``/`` (``"conf.d/"``, ``"/"`` for the
        root): a source may watch those, and ignore churn in other files beside them.
        """

    def rejected(self, snapshot: Snapshot) -> None:  # noqa: B027 - optional hook
        """The applier rejected ``snapshot``; the last applied one stays the last good one.

        Whatever a source stopped watching because the applied revision did not
        read it may matter now (the fix may add the file the rejected one named).
        """

    async def recheck(self, snapshot: Snapshot) -> bool:
        """``snapshot`` failed to load: was it read while its files were being written?

        True means the source has a newer revision (published now, or already),
        which :meth:`watch` yields next: the caller drops ``snapshot`` without
        rejecting it.  A source that cannot be caught mid-write (a git commit, an
        etcd revision) keeps this default, False.  Parsing stays the loader's: the
        source only knows which files were written just before it read them.
        """
        return False

    async def last_applied(self) -> Snapshot | None:
        """The last snapshot :meth:`applied` recorded (across restarts), if the source keeps one.

        A daemon restarting after a bad revision was pushed starts from it rather
        than from nothing.
        """
        return None

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources; :meth:`watch` ends."""
