"""The git source's cache: one bare repository per remote URL, mirroring its branches and
tags, and each source's record in it of the commit it last applied.

The repository is ``CACHE_DIR/git/<first 16 hex digits of sha256(url without
credentials)>``: the remote's branches and tags are kept as ``refs/heads/*`` and
``refs/tags/*`` (:meth:`GitCache.mirror`), so every fetch negotiates from what is
already there and transfers only new objects (:class:`CacheRepo` counts tags and
the applied commit as "haves" too).

Last good revision: :meth:`GitCache.record_applied` writes
``cronstable/applied-<key>.json`` and then, from the worker, the ref
``refs/cronstable/applied/<key>`` (one per ``ref`` and ``path``), which keeps the
commit reachable; the objects are already in the cache when a source starts from
it (:meth:`GitCache.read_state`).

The cache is created with mode 0700 (it holds the configuration).  Every dulwich
call runs under :meth:`GitCache.locked`: one at a time per cache repository, in
this process and, through a lock file, across processes.  Writing the cache's refs
never stops the source: a failure (a full disk) is logged once per ref, and a
dulwich ``*.lock`` file older than :data:`STALE_LOCK_AGE` (left by a kill -9) is
removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from dulwich.errors import NotGitRepository
from dulwich.file import FileLocked
from dulwich.object_store import ObjectStoreGraphWalker
from dulwich.objects import ObjectID
from dulwich.refs import Ref, check_ref_format
from dulwich.repo import Repo

from cronstable.sources.base import SourceError
from cronstable.sources.git.refs import is_hex, peel_to_commit, short

logger = logging.getLogger("cronstable.sources.git")  # one logger for the whole git source

STATE_FORMAT = 1
"""Version of the ``applied-*.json`` state files."""
REPACK_PACKS = 50
"""Repack the cache when it holds more packs than this (and less than REPACK_MAX_BYTES)."""
REPACK_MAX_BYTES = 256 * 1024 * 1024
STALE_LOCK_AGE = 10.0
"""Age in seconds past which a dulwich ``*.lock`` file in the cache is stale (``_write``)."""

_APPLIED_REF_PREFIX = b"refs/cronstable/applied/"
_STATE_DIR = "cronstable"

_process_locks: dict[str, threading.Lock] = {}
_process_locks_guard = threading.Lock()


class CacheRepo(Repo):
    """The bare cache: negotiates fetches from every commit it holds a ref to.

    dulwich advertises only ``refs/heads/*`` as "haves"; the tips of tags and of
    the last applied commit count too, so a tag-pinned source does not download
    history it already has.
    """

    def get_graph_walker(self, heads: list[ObjectID] | None = None) -> ObjectStoreGraphWalker:
        if heads is None:
            heads = self.local_tips()
        return super().get_graph_walker(heads)

    def local_tips(self) -> list[ObjectID]:
        tips: dict[ObjectID, None] = {}
        for name, sha in self.refs.as_dict().items():
            if name == b"HEAD":
                continue
            with contextlib.suppress(KeyError, SourceError):
                tips[peel_to_commit(self.object_store, sha, "").id] = None
        return list(tips)


class GitCache:
    """The cache repository of ``safe_url`` as one source (``ref`` and ``path``) uses it.

    ``description`` names the source in log lines and errors.  The methods ending in
    ``_sync``, and every use of :attr:`repo`, run on a worker thread under
    :meth:`locked`.
    """

    def __init__(
        self, cache_dir: Path, safe_url: str, *, description: str, ref: str | None, path: str
    ) -> None:
        self.description = description
        self._ref = ref
        self._path = path
        url_key = hashlib.sha256(safe_url.encode("utf-8")).hexdigest()[:16]
        self.path = cache_dir / "git" / url_key
        """The bare cache repository."""
        state_key = f"{ref or 'HEAD'}:{path}"
        key = hashlib.sha256(state_key.encode("utf-8")).hexdigest()[:16]
        self._state_file = self.path / _STATE_DIR / f"applied-{key}.json"
        self.applied_ref = Ref(_APPLIED_REF_PREFIX + key.encode())
        with _process_locks_guard:
            self._lock = _process_locks.setdefault(os.path.abspath(self.path), threading.Lock())
        self.repo: CacheRepo | None = None
        """Open between :meth:`open_sync` and :meth:`close_sync`."""
        self.applied_ref_pending: str | None = None
        """An applied commit whose ref is still to be written (at the next fetch)."""
        self._failing: set[bytes] = set()
        """Cache refs whose last write failed (each logged at WARNING once)."""

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One dulwich operation at a time on the cache, in this process and across processes."""
        with self._lock, contextlib.ExitStack() as stack:
            try:
                lock_file = stack.enter_context(open(self.path / _STATE_DIR / "lock", "a"))
            except OSError as exc:  # the cache vanished: still serialize within this process
                logger.debug("%s: cannot open the cache's lock file: %s", self.description, exc)
            else:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
            yield

    def open_sync(self) -> None:
        """Open the cache repository, creating it (atomically) on first use."""
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not path.exists():
                tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.mkdir(mode=0o700)
                Repo.init_bare(str(tmp)).close()
                (tmp / _STATE_DIR).mkdir()
                try:
                    tmp.rename(path)
                except OSError:  # created meanwhile by another process
                    shutil.rmtree(tmp, ignore_errors=True)
            (path / _STATE_DIR).mkdir(exist_ok=True)
            with self.locked():
                self.repo = CacheRepo(str(path))
                pending = self.read_state()
                if pending is not None and ObjectID(pending.encode()) in self.repo.object_store:
                    self.applied_ref_pending = pending
        except NotGitRepository as exc:
            raise SourceError(
                f"{self.description}: the cache {path} is not a git repository; remove it"
            ) from exc
        except OSError as exc:
            raise SourceError(
                f"{self.description}: cannot use the cache {path}: {exc.strerror or exc}"
            ) from exc

    def close_sync(self) -> None:
        with self.locked():
            repo, self.repo = self.repo, None
            if repo is None:
                return
            try:
                if self.applied_ref_pending is not None:
                    self.write_applied_ref(repo, self.applied_ref_pending)
            finally:
                repo.close()

    # ----------------------------------------------------------------- the applied commit

    def record_applied(self, revision: str) -> bool:
        """Write the state file naming ``revision`` (its ref follows at the next fetch);
        whether it was written (a failure is logged)."""
        state = {
            "format": STATE_FORMAT,
            "source": self.description,
            "ref": self._ref,
            "path": self._path,
            "commit": revision,
            "applied_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        try:
            self._state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._state_file.with_name(f".{self._state_file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, self._state_file)
        except OSError as exc:
            logger.warning(
                "%s: cannot record applied commit %s in %s: %s",
                self.description,
                short(revision),
                self._state_file,
                exc.strerror or exc,
            )
            return False
        self.applied_ref_pending = revision  # the worker updates the ref on its next run
        return True

    def read_state(self) -> str | None:
        """The commit recorded by :meth:`record_applied` for this ref and path, if any."""
        try:
            raw = self._state_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("%s: cannot read %s: %s", self.description, self._state_file, exc)
            return None
        try:
            state: Any = json.loads(raw)
            if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
                raise ValueError(f"unknown format {state.get('format')!r}")
            commit = state["commit"]
            if state.get("ref") != self._ref or state.get("path") != self._path:
                raise ValueError("recorded for another ref or path")
            if not isinstance(commit, str) or not (len(commit) == 40 and is_hex(commit)):
                raise ValueError(f"bad commit {commit!r}")
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("%s: ignoring %s: %s", self.description, self._state_file, exc)
            return None
        return commit

    def write_applied_ref(self, repo: Repo, revision: str) -> None:
        """Point this ref and path's ``refs/cronstable/applied/*`` at ``revision``.

        It keeps the commit reachable (``git gc`` on the cache keeps it) and
        makes it a "have" when negotiating fetches.  A failed write stays
        pending, to be tried again at the next fetch.
        """
        sha = ObjectID(revision.encode("ascii"))
        ref = self.applied_ref
        if sha in repo.object_store and not self._write(
            "record the applied commit as", ref, partial(repo.refs.__setitem__, ref, sha)
        ):
            return
        if self.applied_ref_pending == revision:
            self.applied_ref_pending = None

    # ----------------------------------------------------------------- the mirror

    def mirror(self, repo: Repo, refs: Mapping[bytes, bytes]) -> None:
        """Keep the remote's branches and tags whose objects the cache holds as local refs."""
        store = repo.object_store
        local = {
            k: v
            for k, v in repo.refs.as_dict().items()
            if k.startswith((b"refs/heads/", b"refs/tags/"))
        }
        for name, sha in refs.items():
            if not name.startswith((b"refs/heads/", b"refs/tags/")) or not check_ref_format(
                Ref(name)
            ):
                continue
            if local.get(Ref(name)) != sha and ObjectID(sha) in store:
                update = partial(repo.refs.__setitem__, Ref(name), ObjectID(sha))
                self._write("update", name, update)
        for name in local:
            if name not in refs:
                self._write("remove", name, partial(repo.refs.remove_if_equals, name, None))

    def maybe_repack(self, repo: Repo) -> None:
        pack_dir = Path(repo.object_store.path) / "pack"
        try:
            packs = [e for e in os.scandir(pack_dir) if e.name.endswith(".pack")]
            if len(packs) <= REPACK_PACKS:
                return
            if sum(e.stat().st_size for e in packs) > REPACK_MAX_BYTES:
                return
            repo.object_store.repack()
            logger.debug("%s: repacked %d packs in the cache", self.description, len(packs))
        except OSError as exc:
            logger.debug("%s: cannot repack the cache: %s", self.description, exc)

    def _write(self, what: str, ref: bytes, write: Callable[[], object]) -> bool:
        """Run ``write`` (an update of ``ref`` in the cache); whether it succeeded.

        A failure (a full disk, a lock file) is logged, never raised: the cache's
        refs only speed fetches up and keep the applied commit reachable, so
        they must never stop the source following its remote.  Run under
        :meth:`locked`: no other cronstable process writes the cache meanwhile,
        so a lock file older than :data:`STALE_LOCK_AGE` was left by an
        interrupted write (a kill -9, a full disk); it is removed and the write
        tried once more.
        """
        problem = ""
        for attempt in (1, 2):
            try:
                write()
            except FileLocked as exc:
                lock = os.fsdecode(exc.lockfilename)
                if attempt == 1 and self._remove_stale_lock(lock):
                    continue
                problem = f"{lock} exists (another writer, or one that was interrupted)"
            except OSError as exc:
                problem = f"{exc.strerror or exc}"
                if exc.filename is not None:
                    problem += f": {os.fsdecode(exc.filename)}"
            else:
                if ref in self._failing:
                    self._failing.discard(ref)
                    logger.info("%s: %s is written again", self.description, ref.decode())
                return True
            break
        if ref in self._failing:
            logger.debug("%s: cannot %s %s: %s", self.description, what, ref.decode(), problem)
        else:
            self._failing.add(ref)
            logger.warning(
                "%s: cannot %s %s in the cache %s: %s; following the remote goes on",
                self.description,
                what,
                ref.decode(),
                self.path,
                problem,
            )
        return False

    def _remove_stale_lock(self, lock: str) -> bool:
        """Remove ``lock`` if it is stale (see :meth:`_write`); whether it is gone."""
        try:
            age = time.time() - os.stat(lock).st_mtime
            if age < STALE_LOCK_AGE:
                return False
            os.unlink(lock)
        except FileNotFoundError:
            return True  # released meanwhile
        except OSError as exc:
            logger.debug("%s: cannot remove %s: %s", self.description, lock, exc)
            return False
        logger.warning(
            "%s: removed the stale lock file %s (%.0f s old, left by an interrupted write)",
            self.description,
            lock,
            age,
        )
        return True
