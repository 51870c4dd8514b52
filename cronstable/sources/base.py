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
neither an origin nor a cached snapshot to start from.  Each failed attempt is
also told to :attr:`Source.error_hook` (the daemon counts them in a metric), and
each successful one (a fetch, an etcd read or watch event, a scan or root check)
stamps :attr:`Source.last_contact`, which readiness compares with
:meth:`Source.contact_window`.
"""

from __future__ import annotations

import abc
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass

from cronstable.errors import CronstableError
from cronstable.snapshot import Snapshot


class SourceError(CronstableError):
    """A source cannot produce a snapshot (origin unreachable and nothing cached, bad spec)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """The git repository and ref a source follows (to match push notifications)."""

    url: str
    """The remote's URL, without credentials."""
    ref: str | None
    """The full name of the ref followed (``refs/heads/main``); None for the remote's
    default branch until the source has resolved it."""


DEFAULT_CONTACT_WINDOW = 60.0
"""Seconds since the last successful contact past which a source is not followed."""


class Source(abc.ABC):
    """A watched configuration origin."""

    description: str
    """Human description, safe to log (no credentials)."""
    kind: str = "source"
    """The source's kind, as metrics label it (``git``, ``etcd``, ``local``, ``stream``)."""
    last_contact: float | None = None
    """:func:`time.monotonic` of the last successful contact with the origin; None until
    the origin has answered once (a start from the cache is not a contact)."""
    error_hook: Callable[[str], None] | None = None
    """Called with :attr:`kind` each time reaching the origin fails."""

    def contacted(self) -> None:
        """The origin answered (a backend calls this after each successful read)."""
        self.last_contact = time.monotonic()

    def contact_failed(self) -> None:
        """Reaching the origin failed (a backend calls this for each failed attempt)."""
        if self.error_hook is not None:
            self.error_hook(self.kind)

    def contact_window(self) -> float | None:
        """Seconds a source may go without contact and still count as followed (None: no
        origin to follow, as for a stream read once)."""
        return DEFAULT_CONTACT_WINDOW

    def origin(self) -> Origin | None:
        """The git repository and ref this source follows; None for other kinds."""
        return None

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

    async def snapshot_at(self, ref: str) -> Snapshot:
        """The configuration as revision ``ref`` of the origin holds it (a branch, a tag, a
        commit, for a git source), read without following it: nothing is applied or kept.

        Raises :class:`SourceError` when ``ref`` names no revision, and, by default,
        because the source has no revisions but its current one (only the git source
        keeps a history to read from).
        """
        raise SourceError(
            f"{self.description} has no revisions to read but its current one "
            "(only a git source can read another revision)"
        )

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources; :meth:`watch` ends."""
