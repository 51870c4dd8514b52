"""The git source: a remote followed by polling and nudges, its commits delivered as
snapshots (see :mod:`cronstable.sources.git` for the parts it is made of).

Polling and nudges: the remote is fetched every ``interval`` seconds and at once
on :meth:`GitSource.nudge`.  ``nudge(sha)`` keeps fetching, with back-off, for up
to :data:`NUDGE_WINDOW` seconds until the remote shows that commit, since a
webhook may arrive before the remote serves the push.  A ref that moves to a
commit that does not descend from the current one (a force push, a reset) is
applied like any change and logged at WARNING.  Errors reaching the remote are
logged at WARNING once per outage (INFO on recovery) and retried with
exponential back-off (up to :data:`MAX_ERROR_BACKOFF` seconds); ``watch()`` only
ends on :meth:`GitSource.close`.

Last good revision: :meth:`GitSource.applied` records the applied commit in the
cache (:mod:`cronstable.sources.git.cache`).  When :meth:`GitSource.start` cannot
fetch (or resolve the ref, or find ``path``), it starts from that commit with a
WARNING; the objects are already in the cache.  With nothing recorded it raises
:class:`~cronstable.sources.base.SourceError`.

Hung remotes: every wait on the remote is bounded by the spec's ``timeout``
(:mod:`cronstable.sources.git.transport`), so a remote that accepts and never
answers fails the fetch like an unreachable one (a WARNING naming it, then
back-off).  Fetches run on daemon threads that nothing joins:
:meth:`GitSource.close` waits :data:`CLOSE_WAIT` seconds at most for one in
progress, so a hung fetch never holds the daemon's exit.  Every dulwich call runs
in such a worker thread, one at a time per cache repository.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from dulwich.objects import ObjectID
from dulwich.refs import Ref

from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.retrying import transient
from cronstable.snapshot import Snapshot
from cronstable.sources.base import DEFAULT_CONTACT_WINDOW, Origin, Source, SourceError
from cronstable.sources.git.cache import CacheRepo, GitCache
from cronstable.sources.git.files import normalize_subdir, read_files
from cronstable.sources.git.refs import (
    FollowedRef,
    advertised,
    is_ancestor,
    is_hex,
    peel_to_commit,
    resolve_local_revision,
    short,
    visible,
)
from cronstable.sources.git.spec import GitSpec, describe
from cronstable.sources.git.transport import Remote, is_transient

logger = logging.getLogger("cronstable.sources.git")  # one logger for the whole git source

_T = TypeVar("_T")

NUDGE_WINDOW = 30.0
"""How long ``nudge(sha)`` keeps fetching until the remote shows ``sha``."""
NUDGE_FIRST_DELAY = 0.25
NUDGE_MAX_DELAY = 4.0
MAX_ERROR_BACKOFF = 300.0
"""Longest wait between two fetches while the remote fails (never less than the interval)."""
CLOSE_WAIT = 0.5
"""Seconds :meth:`GitSource.close` waits for a fetch in progress (a hung one goes on alone)."""


async def _in_worker(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` on a new daemon thread, awaited; cancelling leaves it to end alone.

    Not :func:`asyncio.to_thread`: the default executor's threads are joined when
    ``asyncio.run`` returns and again at interpreter exit, so a fetch hung on a
    silent remote would hold the daemon's exit until its timeout.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        def apply() -> None:
            if not future.done():
                outcome()

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(apply)

    def work() -> None:
        try:
            result = function(*args)
        except BaseException as exc:
            settle(partial(future.set_exception, exc))
        else:
            settle(partial(future.set_result, result))

    threading.Thread(target=work, name=f"git {function.__name__}", daemon=True).start()
    return await future


@dataclass(slots=True)
class _Poll:
    """What one fetch found (computed in a worker thread)."""

    commit: str
    ref: str
    """The remote ref the commit was found at (or the configured sha)."""
    snapshot: Snapshot | None = None
    """The commit's snapshot, unless it was one the caller already knew."""
    problem: str | None = None
    """Why the commit cannot be a snapshot (``path`` missing in it), instead of ``snapshot``."""
    movement: str | None = None
    """How the ref moved when not forward: ``"backwards"`` or ``"rewritten"``."""
    seen: set[str] = field(default_factory=set)
    """The nudge targets now visible."""


class GitSource(Source):
    """A git remote, fetched into a bare cache repository (see the module documentation)."""

    kind = "git"

    def __init__(self, spec: GitSpec, *, cache_dir: Path, limits: Limits = DEFAULT_LIMITS) -> None:
        self.spec = spec
        self.limits = limits
        self.description = describe(spec)
        self._remote = Remote(spec.url, timeout=spec.timeout, description=self.description)
        self._ref = None if spec.ref in (None, "", "HEAD") else spec.ref
        self._path = normalize_subdir(spec.path)
        self._refs = FollowedRef(self._ref, self.description)
        self._cache = GitCache(
            cache_dir,
            self._remote.safe_url,
            description=self.description,
            ref=self._ref,
            path=self._path,
        )
        self.cache_path = self._cache.path
        """The bare cache repository."""
        self._started = False
        self._closed = False
        self._current: Snapshot | None = None
        self._rejected: str | None = None
        self._applied: str | None = None
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._targets: dict[str, float] = {}
        self._nudge_attempt = 0
        self._nudge_retry_at = 0.0
        self._failures = 0
        self._failing_since = 0.0
        self._followed: str | None = None
        """The full ref name the last fetch resolved ``ref`` (or the default branch) to."""

    # ----------------------------------------------------------------- Source API

    async def start(self) -> None:
        if self._started:
            raise RuntimeError(f"{self.description} was already started")
        self._started = True
        if self._remote.credentials_in_clear:
            logger.warning("%s: sending credentials over unencrypted http", self.description)
        await _in_worker(self._cache.open_sync)
        error: SourceError | None = None
        try:
            poll = await _in_worker(self._poll_sync, frozenset(), frozenset(), None, None)
        except SourceError as exc:  # the remote is unreachable, or has no such ref
            error = exc
            reason = self._remote.scrub(str(exc))
            self.contact_failed()
        except Exception as exc:  # a bug, or dulwich failing in an unforeseen way
            logger.debug("%s: first fetch failed", self.description, exc_info=True)
            error = SourceError(f"unexpected {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            reason = self._remote.scrub(str(error))
            self.contact_failed()
        else:
            self._answered(poll)
            if poll.snapshot is not None:
                logger.info("%s: at commit %s (%s)", self.description, short(poll.commit), poll.ref)
                self._current = poll.snapshot
                self._task = asyncio.create_task(self._poll_loop(), name=self.description)
                return
            reason = poll.problem or "no snapshot"
            error = SourceError(reason)  # the cause a caller without a cache reports
            self._rejected = poll.commit  # the poll loop will not report it again
        cached = await _in_worker(self._load_applied_sync)
        if cached is None:
            await _in_worker(self._cache.close_sync)
            raise SourceError(
                f"{self.description}: {reason}; and there is no earlier revision to start "
                "from instead (none was applied with the cache directory "
                f"{self.cache_path.parent.parent})"
            ) from error
        logger.warning(
            "%s: %s; starting from the last applied commit %s",
            self.description,
            reason,
            short(cached.revision),
        )
        self._current = cached
        self._applied = cached.revision
        if error is not None:
            self._failures = 1  # an outage is on: the poll loop logs its end
            self._failing_since = time.monotonic()
        self._task = asyncio.create_task(self._poll_loop(), name=self.description)

    async def watch(self) -> AsyncIterator[Snapshot]:
        """See :meth:`Source.watch`; raises :class:`SourceError` if polling ever stops.

        Polling stops only on :meth:`close`, or through a bug: then this raises,
        and the next ``watch()`` polls again (the daemon restarts its follower).
        """
        if not self._started:
            raise RuntimeError(f"start() {self.description} before watching it")
        self._ensure_polling()
        last: str | None = None
        while True:
            changed = self._changed
            if self._closed:
                return
            snapshot = self._current
            if snapshot is not None and snapshot.revision != last:
                last = snapshot.revision
                yield snapshot
                continue
            task = self._task
            if task is None or task.done():
                cause = None if task is None or task.cancelled() else task.exception()
                why = f"{type(cause).__name__}: {cause}" if cause else "it was cancelled"
                raise SourceError(f"{self.description}: polling stopped ({why})") from cause
            waiter = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()

    def _ensure_polling(self) -> None:
        """Start the poll loop unless it runs (again, after it stopped: polling at once)."""
        if self._closed or (self._task is not None and not self._task.done()):
            return
        if self._task is not None:
            self._wake.set()
        self._task = asyncio.create_task(self._poll_loop(), name=self.description)

    def nudge(self, revision: str | None = None) -> None:
        if self._closed:
            return
        if revision is not None:
            target = revision.strip().lower()
            if not is_hex(target):
                logger.warning(
                    "%s: nudged with %r, which is not a commit sha; fetching once",
                    self.description,
                    revision,
                )
            elif self._current is None or not self._current.revision.startswith(target):
                self._targets[target] = time.monotonic() + NUDGE_WINDOW
                self._nudge_attempt = 0
                self._nudge_retry_at = 0.0
        self._wake.set()

    def origin(self) -> Origin:
        ref = self._followed
        if ref is None and self._ref is not None:
            ref = self._ref if self._ref.startswith("refs/") else f"refs/heads/{self._ref}"
        return Origin(self._remote.safe_url, ref)

    def contact_window(self) -> float:
        return max(3 * self.spec.interval, DEFAULT_CONTACT_WINDOW)

    def _answered(self, poll: _Poll) -> None:
        self._followed = poll.ref if poll.ref.startswith("refs/") else self._followed
        self.contacted()

    async def last_applied(self) -> Snapshot | None:
        return await _in_worker(self._load_applied_sync)

    async def snapshot_at(self, ref: str) -> Snapshot:
        """See :meth:`Source.snapshot_at`.  ``ref`` is read as ``git rev-parse`` reads it: a
        branch or tag of the remote, a sha, each maybe followed by ``~N`` or ``^N``;
        ``HEAD`` is the ref this source follows.  The remote is fetched first, so a branch
        pushed a moment ago is seen; when it cannot be reached, the cache answers."""
        if not self._started or self._closed:
            raise SourceError(f"{self.description} is not running")
        return await _in_worker(self._snapshot_at_sync, ref)

    def applied(self, snapshot: Snapshot, reads: Collection[str] | None = None) -> None:
        revision = snapshot.revision
        if snapshot.source != self.description or not (len(revision) == 40 and is_hex(revision)):
            logger.warning(
                "%s: ignoring applied() for a snapshot of %s", self.description, snapshot.source
            )
            return
        if revision == self._applied:
            return
        if self._cache.record_applied(revision):
            self._applied = revision

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._changed.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._started:
            closing = asyncio.ensure_future(_in_worker(self._cache.close_sync))
            done, _ = await asyncio.wait({closing}, timeout=CLOSE_WAIT)
            if closing in done:
                closing.result()
            else:  # it closes the cache when the fetch ends (a timeout at the latest)
                closing.add_done_callback(lambda t: t.cancelled() or t.exception())
                logger.info("%s: not waiting for the fetch in progress to end", self.description)

    # ----------------------------------------------------------------- polling

    async def _poll_loop(self) -> None:
        interval = self.spec.interval
        next_poll = time.monotonic() + self._delay(interval)
        while not self._closed:
            due = min(next_poll, self._nudge_retry_at) if self._targets else next_poll
            wait = due - time.monotonic()
            if wait > 0 and not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
            if self._closed:
                return
            self._wake.clear()
            known = frozenset(r for r in (self._revision(), self._rejected) if r)
            try:
                poll = await _in_worker(
                    self._poll_sync,
                    frozenset(self._targets),
                    known,
                    self._revision(),
                    self._cache.applied_ref_pending,
                )
            except Exception as exc:
                self._failed(exc)
                self.contact_failed()
                self._after_nudge(set())
                next_poll = time.monotonic() + self._delay(interval)
                continue
            self._answered(poll)
            self._recovered()
            self._handle(poll)
            self._after_nudge(poll.seen)
            next_poll = time.monotonic() + interval

    def _delay(self, interval: float) -> float:
        if not self._failures:
            return interval
        backoff = interval * 2.0 ** min(self._failures - 1, 30)
        return min(backoff, max(interval, MAX_ERROR_BACKOFF)) * random.uniform(0.9, 1.1)

    def _revision(self) -> str | None:
        return self._current.revision if self._current is not None else None

    def _failed(self, exc: Exception) -> None:
        message = self._remote.scrub(str(exc)) if isinstance(exc, SourceError) else None
        if message is None:
            message = self._remote.scrub(f"unexpected {type(exc).__name__}: {exc}")
        self._failures += 1
        if self._failures == 1:
            self._failing_since = time.monotonic()
            logger.warning(
                "%s: %s; keeping commit %s and retrying with back-off",
                self.description,
                message,
                short(self._revision() or "none"),
                exc_info=not isinstance(exc, SourceError),
            )
        else:
            logger.debug("%s: still failing (%d): %s", self.description, self._failures, message)

    def _recovered(self) -> None:
        if self._failures:
            logger.info(
                "%s: the remote answers again (after %d failed fetches in %.0f s)",
                self.description,
                self._failures,
                time.monotonic() - self._failing_since,
            )
            self._failures = 0

    def _handle(self, poll: _Poll) -> None:
        if poll.commit == self._revision():
            logger.debug("%s: %s unchanged at %s", self.description, poll.ref, short(poll.commit))
            return
        if poll.problem is not None:
            if poll.commit != self._rejected:
                self._rejected = poll.commit
                logger.error(
                    "%s: %s; keeping commit %s",
                    self.description,
                    poll.problem,
                    short(self._revision() or "none"),
                )
            return
        if poll.snapshot is None:  # the rejected commit again
            return
        previous = short(self._revision() or "none")
        if poll.movement == "backwards":
            logger.warning(
                "%s: %s moved backwards from %s to its ancestor %s; applying it",
                self.description,
                poll.ref,
                previous,
                short(poll.commit),
            )
        elif poll.movement == "rewritten":
            logger.warning(
                "%s: %s was force-pushed: %s does not descend from %s; applying it",
                self.description,
                poll.ref,
                short(poll.commit),
                previous,
            )
        else:
            logger.info(
                "%s: %s moved from %s to %s",
                self.description,
                poll.ref,
                previous,
                short(poll.commit),
            )
        self._rejected = None
        self._current = poll.snapshot
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _after_nudge(self, seen: set[str]) -> None:
        if not self._targets:
            return
        now = time.monotonic()
        for target in seen:
            self._targets.pop(target, None)
        for target, deadline in list(self._targets.items()):
            if now >= deadline:
                del self._targets[target]
                logger.warning(
                    "%s: commit %s, announced by a nudge, is still not on the remote after %.0f s",
                    self.description,
                    short(target),
                    NUDGE_WINDOW,
                )
        if self._targets:
            delay = min(NUDGE_FIRST_DELAY * 2**self._nudge_attempt, NUDGE_MAX_DELAY)
            self._nudge_attempt += 1
            self._nudge_retry_at = now + delay

    # ----------------------------------------------------------------- worker thread

    def _load_applied_sync(self) -> Snapshot | None:
        with self._cache.locked():
            repo = self._cache.repo
            commit = self._cache.read_state()
            if repo is None or commit is None:
                return None
            try:
                files = read_files(
                    repo.object_store,
                    peel_to_commit(repo.object_store, commit.encode(), commit),
                    self._path,
                    self.description,
                    self.limits,
                )
            except SourceError as exc:
                logger.warning(
                    "%s: the recorded commit %s is unusable: %s",
                    self.description,
                    short(commit),
                    self._remote.scrub(str(exc)),
                )
                return None
            return Snapshot(revision=commit, source=self.description, files=files)

    def _poll_sync(
        self,
        targets: frozenset[str],
        known: frozenset[str],
        previous: str | None,
        applied: str | None,
    ) -> _Poll:
        """Fetch, resolve the ref, and read the commit's snapshot unless it is ``known``.

        ``targets`` are nudged shas to look for, ``previous`` the current
        revision (to tell how the ref moved), ``applied`` an applied commit to
        record as a ref.
        """
        with self._cache.locked():
            repo = self._cache.repo
            if repo is None:
                raise SourceError("closed")
            if applied is not None:
                self._cache.write_applied_ref(repo, applied)
            try:
                refs, symrefs = self._fetch(repo)
            except OSError as exc:  # writing to the cache (the transport's are SourceErrors)
                raise SourceError(
                    f"cannot update the cache {self.cache_path}: {exc.strerror or exc}"
                ) from exc
            self._cache.maybe_repack(repo)
            ref, sha = self._refs.resolve(repo, refs, symrefs)
            commit = peel_to_commit(repo.object_store, sha, ref)
            revision = commit.id.decode("ascii")
            poll = _Poll(revision, ref)
            poll.seen = {t for t in targets if visible(repo, refs, t)}
            if revision in known:
                return poll
            try:
                files = read_files(
                    repo.object_store, commit, self._path, self.description, self.limits
                )
            except SourceError as exc:
                poll.problem = self._remote.scrub(str(exc))
                return poll
            poll.snapshot = Snapshot(revision=revision, source=self.description, files=files)
            if previous is not None and previous != revision:
                if is_ancestor(repo, previous.encode(), commit.id) is False:
                    backwards = is_ancestor(repo, commit.id, previous.encode())
                    poll.movement = "backwards" if backwards else "rewritten"
            return poll

    def _snapshot_at_sync(self, ref: str) -> Snapshot:
        rev = ref.strip()
        cut = min((i for i in (rev.find("~"), rev.find("^")) if i >= 0), default=len(rev))
        base, operators = rev[:cut], rev[cut:]
        followed = self._refs if base in ("", "HEAD", "@") else FollowedRef(base, self.description)
        with self._cache.locked():
            repo = self._cache.repo
            if repo is None:
                raise SourceError("closed")
            try:
                refs, symrefs = self._fetch(repo, followed)
                start = followed.resolve(repo, refs, symrefs)[1].decode("ascii")
            except SourceError as exc:
                if followed is self._refs:
                    raise SourceError(self._remote.scrub(str(exc))) from exc
                start = base  # the remote is down, or has no such ref: the cache may know it
                fetch_error: SourceError | None = exc
            else:
                fetch_error = None
            try:
                commit = resolve_local_revision(repo, start + operators)
            except SourceError as exc:
                cause = fetch_error if fetch_error is not None else exc
                raise SourceError(self._remote.scrub(str(cause))) from cause
            files = read_files(repo.object_store, commit, self._path, self.description, self.limits)
        return Snapshot(revision=commit.id.decode("ascii"), source=self.description, files=files)

    def _fetch(
        self, repo: CacheRepo, followed: FollowedRef | None = None
    ) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
        """Fetch what ``followed`` (the source's ref) needs; the remote's refs and symrefs
        (the local mirror updated)."""
        store = repo.object_store
        wanted = followed if followed is not None else self._refs

        def determine_wants(
            refs: Mapping[Ref, ObjectID], depth: int | None = None
        ) -> list[ObjectID]:
            try:
                shas = wanted.wants(repo, advertised(refs))
            except SourceError:
                return []  # reported after the fetch, from the same refs
            return [ObjectID(sha) for sha in dict.fromkeys(shas) if ObjectID(sha) not in store]

        try:
            for attempt in transient(
                self.description,
                is_transient,
                lambda exc: (
                    self._remote.scrub(self._remote.failure(exc))
                    if isinstance(exc, Exception)
                    else ""
                ),
            ):
                with attempt:
                    result = self._remote.fetch_once(repo, determine_wants)
        except SourceError:
            raise
        except Exception as exc:  # the transport's many failure types, all "cannot fetch"
            raise SourceError(self._remote.failure(exc)) from exc
        refs = advertised({k: v for k, v in result.refs.items() if v is not None})
        self._cache.mirror(repo, refs)
        return refs, {bytes(k): bytes(v) for k, v in result.symrefs.items()}
