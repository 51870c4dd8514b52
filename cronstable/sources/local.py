"""A configuration on the local file system: a directory, or one file and its directory.

* A **directory** spec: every regular file below it is in the snapshot
  (``entry = ""``).
* A **file** spec: the root is the file's directory (as named, not resolved:
  ``/cfg/jobs.yaml -> ..data/jobs.yaml`` keeps ``/cfg``) and ``entry`` is the
  file's name; every regular file below that directory is in the snapshot too,
  so that ``include`` and ``env_file`` resolve.

What is read:

* names starting with ``.`` are skipped at any depth (``.git``, editor swap
  files, a Kubernetes ConfigMap's ``..data`` and ``..2026_…`` directories, whose
  files are reached through the visible links ``jobs.yaml -> ..data/jobs.yaml``).
  ``_`` names *are* read: the loader skips them when it loads a directory, but a
  file may include them.  A file spec's own file is read even when hidden;
* symlinks are followed when they resolve inside the root (its real path,
  recomputed on every scan).  Links leaving it are not read but named in the
  snapshot (:attr:`~cronstable.snapshot.Snapshot.outside`): loading one (a
  configuration file of a loaded directory, an include, an env_file) is an
  error, as in ``cronstable validate``; the others are logged at DEBUG only.
  Dangling links, link loops and anything neither a regular file nor a
  directory are skipped (and logged);
* a scan is capped at ``limits.max_files`` files (and as many directories) and
  ``limits.max_revision_bytes`` (:class:`~cronstable.config.limits.Limits`): a
  file spec in a crowded directory should get a directory of its own.  Over
  the cap, :meth:`LocalDirSource.start` fails; later, the last snapshot is kept
  and a warning logged;
* in a directory, a file that cannot be read fails the scan (the last snapshot
  is kept: a chmod must not silently drop a team's jobs); beside a file spec,
  whose directory may be shared (``/etc``), unreadable siblings are skipped.

The revision is :func:`~cronstable.snapshot.content_revision` of the files:
touching a file, or saving it unchanged, yields nothing new.

A snapshot is never half-written: each file's inode, size and mtime are compared
before and after it is read, and a scan is delivered only once a second scan,
:attr:`LocalDirSource.settle` seconds later, finds the same tree (an editor
writing in place is caught between the two; atomic renames are fine).  A tree
that keeps changing is retried until it holds still (a warning is logged after
:attr:`LocalDirSource.settle_timeout` seconds).

Watching: :func:`watchfiles.awatch` of exactly the directories a scan read (each
once, by real path), not recursively.  Events are only a cue — every batch means
"rescan the whole tree" — since a rename shows as added+deleted, an atomic save
as ``added``, and a ConfigMap swap names only ``..data``.  When a scan finds
another set of directories (a new one, a ConfigMap's new timestamped one) the
watch is re-armed and the tree scanned once more, for what changed in between.
Not ``recursive=True`` on the root: the notify crate follows symlinks out of the
root, and sets the whole walk up holding the GIL (a worker thread does not help)
— measured, arming a directory holding one link to a 4,000-directory tree took
0.1 s, one linking to ``/usr`` 0.75 s, and a link to ``/`` would watch the machine.

Every :attr:`LocalDirSource.poll_interval` seconds the source checks that the
root still is the directory it watches (it holds it open, so that its inode
cannot be reused): a root deleted and recreated, or a symlinked root pointed
elsewhere, silences the watch without an error.  A root that is gone keeps the
last snapshot (with a warning) until it is back, then is rescanned.  A full
rescan also runs every :attr:`LocalDirSource.resync_interval` seconds, in case an
event was lost.  Scanning, reading and hashing run in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from watchfiles import awatch

from cronstable.config.limits import DEFAULT_LIMITS, OPTION_REVISION_BYTES, Limits, size_text
from cronstable.config.tree import is_loadable_name
from cronstable.snapshot import Snapshot, content_revision
from cronstable.sources.base import Source, SourceError

logger = logging.getLogger(__name__)

Identity = tuple[int, int]
"""``(st_dev, st_ino)`` of a directory."""


class _Gone(Exception):
    """The root directory, or a file spec's file, does not exist (now)."""


class _Problem(Exception):
    """Something the operator must fix before a snapshot can be taken."""


class _Torn(Exception):
    """The tree changed while it was being read: scan again."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class _Unstable(Exception):
    """The tree kept changing for longer than the source waits."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = sorted(set(paths))
        super().__init__(", ".join(self.paths[:5]) or "its directory listing")


@dataclass(frozen=True, slots=True)
class _Scan:
    """One consistent reading of a tree."""

    files: dict[str, bytes]
    revision: str
    identity: Identity
    """The root directory that was read."""
    watch: frozenset[str]
    """Real paths of the directories to watch: every one walked, and the ones that
    symlinked files live in (a ConfigMap's current timestamped directory)."""
    notes: tuple[str, ...]
    """Entries skipped on purpose (an unreadable sibling, a link loop…)."""
    outside: dict[str, str]
    """Links leaving the root (path → target; a directory's path ends in ``/``)."""
    mtimes: dict[str, float]
    """Each file's modification time (``st_mtime``, wall clock)."""
    taken: float
    """Wall-clock time the scan started."""


class _Tree(Protocol):
    """What :meth:`LocalDirSource._same` compares: a scan, or the snapshot made of one."""

    @property
    def revision(self) -> str: ...
    @property
    def files(self) -> Mapping[str, bytes]: ...
    @property
    def outside(self) -> Mapping[str, str]: ...


def _identity(path: str) -> Identity | None:
    """The directory ``path`` names (following symlinks); None if it names none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _resolve_spec(path: Path) -> tuple[str, str]:
    """``(root, entry)``: a directory and ``""``, or a file's directory and its name."""
    spec = os.path.abspath(path)
    try:
        st = os.stat(spec)
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        return spec, ""
    if stat.S_ISREG(st.st_mode):
        return os.path.dirname(spec), os.path.basename(spec)
    raise SourceError(f"{path} is neither a file nor a directory")


def _preload_watch_backend() -> None:
    """Import what awatch imports lazily on first use: anyio's asyncio backend.

    Cold, that import takes ~100 ms, on the event loop; in a worker thread it costs
    the loop nothing.
    """
    with contextlib.suppress(ImportError):
        importlib.import_module("anyio._backends._asyncio")


def _same_state(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) == (
        b.st_dev,
        b.st_ino,
        b.st_size,
        b.st_mtime_ns,
    )


class _Walker:
    """One scan of a tree: list it (stat only, capped), then read every file."""

    def __init__(self, root: str, entry: str, max_files: int, max_bytes: int) -> None:
        self.root = root
        self.entry = entry
        self.lenient = bool(entry)  # beside a file spec: skip what cannot be read
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.real_root = ""
        self.found: list[tuple[str, str, os.stat_result]] = []
        self.dirs = 0
        self.watch: set[str] = set()
        self.notes: list[str] = []
        self.outside: dict[str, str] = {}
        self.total = 0

    def scan(self) -> _Scan:
        try:
            self.real_root = os.path.realpath(self.root, strict=True)
            root_stat = os.stat(self.real_root)
        except OSError:
            raise _Gone(f"{self.root} does not exist") from None
        if not stat.S_ISDIR(root_stat.st_mode):
            raise _Gone(f"{self.root} is not a directory")
        identity = (root_stat.st_dev, root_stat.st_ino)
        taken = time.time()
        self._walk(self.root, self.real_root, "", frozenset({identity}))
        if self.entry and not any(rel == self.entry for rel, _, _ in self.found):
            self._explain_missing_entry()
        files: dict[str, bytes] = {}
        for rel, full, st in self.found:
            data = self._read(rel, full, st)
            if data is not None:
                files[rel] = data
        return _Scan(
            files=files,
            revision=_revision(files, self.outside),
            outside=dict(sorted(self.outside.items())),
            identity=identity,
            watch=frozenset(self.watch),
            notes=tuple(self.notes),
            mtimes={rel: st.st_mtime for rel, _, st in self.found if rel in files},
            taken=taken,
        )

    # -- listing ---------------------------------------------------------------

    def _inside(self, real: str) -> bool:
        prefix = self.real_root if self.real_root.endswith(os.sep) else self.real_root + os.sep
        return real == self.real_root or real.startswith(prefix)

    def _skip(self, rel: str, why: str) -> None:
        self.notes.append(f"{rel}: {why}")

    def _unreadable(self, rel: str, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        if self.lenient and rel != self.entry:
            self._skip(rel, f"cannot be read ({why}); skipped")
            return
        raise _Problem(f"cannot read {os.path.join(self.root, rel)}: {why}") from exc

    def _too_big(self, what: str) -> _Problem:
        if self.entry:
            return _Problem(
                f"{self.root} holds {what}: a configuration file is read with everything "
                f"below its directory (for include and env_file); give {self.entry} a "
                f"directory of its own"
            )
        return _Problem(
            f"{self.root} holds {what}: a configuration directory should hold the "
            f"configuration only (at most {self.max_files} files, {size_text(self.max_bytes)}; "
            f"raise the byte limit with {OPTION_REVISION_BYTES})"
        )

    def _walk(self, path: str, real: str, rel: str, ancestors: frozenset[Identity]) -> None:
        self.watch.add(real)
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            if not rel:
                raise _Gone(f"{self.root} does not exist") from None
            raise _Torn(rel) from None  # a directory vanished while we listed its parent
        except NotADirectoryError:
            raise _Torn(rel or ".") from None
        except OSError as exc:
            if not rel:
                raise _Problem(f"cannot read {self.root}: {exc.strerror or exc}") from exc
            self._unreadable(rel, exc)
            return
        subdirs: list[tuple[str, str, str, os.stat_result]] = []
        for item in entries:
            child = f"{rel}/{item.name}" if rel else item.name
            if item.name.startswith(".") and child != self.entry:
                continue
            found = self._stat(item, child)
            if found is None:
                continue
            st, target = found
            if stat.S_ISDIR(st.st_mode):
                subdirs.append((item.path, target or os.path.join(real, item.name), child, st))
            elif stat.S_ISREG(st.st_mode):
                if target is not None:
                    self.watch.add(os.path.dirname(target))
                self.found.append((child, item.path, st))
                self.total += st.st_size
                if len(self.found) > self.max_files:
                    raise self._too_big(f"more than {self.max_files} files")
                if self.total > self.max_bytes:
                    raise self._too_big(f"more than {size_text(self.max_bytes)}")
            else:
                self._skip(child, "neither a regular file nor a directory; skipped")
        for full, child_real, child, st in subdirs:
            key = (st.st_dev, st.st_ino)
            if key in ancestors:
                self._skip(child, "a link back to a directory above it; skipped")
                continue
            self.dirs += 1
            if self.dirs > self.max_files:
                raise self._too_big(f"more than {self.max_files} directories")
            self._walk(full, child_real, child, ancestors | {key})

    def _stat(self, item: os.DirEntry[str], rel: str) -> tuple[os.stat_result, str | None] | None:
        """The entry's stat (through a symlink: the target's, and its real path)."""
        try:
            if not item.is_symlink():
                return item.stat(follow_symlinks=False), None
            target = os.path.realpath(item.path)
            if not self._inside(target):
                # not read; the loader fails on it only if it would read it
                is_dir = os.path.isdir(target)
                self.outside[rel + "/" if is_dir else rel] = target
                return None
            return os.stat(item.path), target
        except FileNotFoundError:
            # a dangling link (a ConfigMap key being removed), or an entry removed
            # since the listing: the settle scan confirms the tree without it
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._skip(rel, "a symlink loop; skipped")
                return None
            self._unreadable(rel, exc)
            return None

    def _explain_missing_entry(self) -> None:
        full = os.path.join(self.root, self.entry)
        if not os.path.lexists(full):
            raise _Gone(f"{full} does not exist")
        target = os.path.realpath(full)
        if not self._inside(target):
            raise _Problem(
                f"{full} is a link to {target}, outside its directory {self.real_root}: "
                f"name the file where it is, or give it a directory of its own"
            )
        if not os.path.exists(full):
            raise _Gone(f"{full} is a dangling link")
        raise _Problem(f"{full} is not a regular file")

    # -- reading ---------------------------------------------------------------

    def _read(self, rel: str, full: str, listed: os.stat_result) -> bytes | None:
        try:
            # O_NONBLOCK: a FIFO swapped in since the listing must not hang the scan
            fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise _Torn(rel) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _Torn(rel) from None
            self._unreadable(rel, exc)
            return None
        with open(fd, "rb", closefd=True) as fh:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode) or not _same_state(opened, listed):
                raise _Torn(rel)
            try:
                data = fh.read(listed.st_size + 1)
            except OSError as exc:
                self._unreadable(rel, exc)
                return None
            after = os.fstat(fd)
        if len(data) != listed.st_size or not _same_state(after, listed):
            raise _Torn(rel)
        return data


def scan_tree(root: str, entry: str = "", *, limits: Limits = DEFAULT_LIMITS) -> _Scan:
    """One scan of ``root`` (blocking).  Raises _Gone, _Problem or _Torn."""
    return _Walker(root, entry, limits.max_files, limits.max_revision_bytes).scan()


def _revision(files: Mapping[str, bytes], outside: Mapping[str, str]) -> str:
    """The content revision; links leaving the tree count too (a new one may break a load)."""
    if not outside:
        return content_revision(files)
    # "\0" cannot be in a file name: these entries never collide with a file's
    marked = {f"{path}\0outside": target.encode() for path, target in outside.items()}
    return content_revision({**files, **marked})


def _changed_paths(a: _Scan, b: _Scan) -> set[str]:
    return {p for p in a.files.keys() | b.files.keys() if a.files.get(p) != b.files.get(p)}


def _short(revision: str) -> str:
    return revision.removeprefix("sha256:")[:12]


class _Watch:
    """One consumer's view of a source: it remembers the last revision it yielded.

    Unlike an async generator, it survives a cancelled ``anext`` (say
    ``asyncio.wait_for(anext(it), t)`` timing out) and can be awaited again.
    """

    def __init__(self, source: LocalDirSource) -> None:
        self._source = source
        self._last: str | None = None

    def __aiter__(self) -> _Watch:
        return self

    async def __anext__(self) -> Snapshot:
        source = self._source
        while not source._closed:
            snapshot = source._latest
            if snapshot is not None and snapshot.revision != self._last:
                self._last = snapshot.revision
                return snapshot
            await source._changed.wait()
        raise StopAsyncIteration


class LocalDirSource(Source):
    """A directory (or a file and its directory) on the local file system."""

    kind = "local"

    settle: float = 0.2
    """Seconds between the two scans that must agree before a snapshot is delivered."""
    fresh_window: float = 3.0
    """A file modified less than this many :attr:`settle` s before a scan may still be
    being written (:meth:`recheck`): the scan that delivers a tree starts one settle
    after the scan before it, which follows the last write by the watch's batching."""
    settle_timeout: float = 5.0
    """How long a tree that keeps changing is rescanned before a warning (at start: an error)."""
    poll_interval: float = 1.0
    """Seconds between checks that the root is still the watched directory."""
    resync_interval: float = 60.0
    """Seconds between full rescans that need no event."""
    debounce_ms: int = 1_600
    """watchfiles: the longest a burst of events is grouped before a rescan."""
    step_ms: int = 250
    """watchfiles: a burst ends after this many quiet milliseconds.  The watch's thread
    wakes every step (to look for the stop request) even when nothing changes: at 50 ms
    those wakeups were a third of an idle daemon's CPU."""
    watch_timeout: float = 5.0
    """Seconds a watch's thread waits for events before it comes back to the loop empty
    (and is sent again): the first return proves the watch is up; later ones cost a round
    trip through a thread each.  Stopping does not wait for it (the stop is seen within a
    step)."""
    watch_retry: float = 30.0
    """Seconds of polling (a rescan per ``poll_interval``) after the watch failed to arm."""

    def __init__(
        self, path: Path, *, limits: Limits = DEFAULT_LIMITS, settle: float | None = None
    ) -> None:
        self.path = path
        self.description = str(path)
        self.limits = limits
        if settle is not None:
            self.settle = settle
        self._root = ""
        self._entry = ""
        self._latest: Snapshot | None = None
        self._latest_scan: _Scan | None = None
        self._scanning = asyncio.Lock()
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._nudged = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._watcher_stop: asyncio.Event | None = None
        self._armed: tuple[Identity, frozenset[str]] | None = None
        self._pin: int | None = None
        self._watch_failed_until = 0.0
        self._not_before = 0.0
        self._missing: str | None = None
        self._problem: str | None = None
        self._unstable_logged = False
        self._notes: tuple[str, ...] = ()
        self._reads: frozenset[str] | None = None
        self._listed: tuple[str, ...] = ()

    # -- Source ----------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None or self._closed:
            raise RuntimeError("LocalDirSource.start() called twice")
        self._root, self._entry = await asyncio.to_thread(_resolve_spec, self.path)
        await asyncio.to_thread(_preload_watch_backend)
        try:
            scan = await self._stable_scan()
        except (_Gone, _Problem) as exc:
            raise SourceError(str(exc)) from None
        except _Unstable as exc:
            raise SourceError(
                f"{self.path} kept changing for {self.settle_timeout:g} s ({exc}); "
                f"no complete snapshot could be taken"
            ) from None
        self.contacted()
        self._log_notes(scan.notes)
        self._publish(scan)
        await self._arm(scan)  # its first wake-up rescans, for what changed meanwhile
        self._task = asyncio.create_task(self._run(), name=f"local source {self.description}")

    def watch(self) -> AsyncIterator[Snapshot]:
        """The current snapshot, then each new revision, until closed (see :class:`_Watch`)."""
        if self._latest is None and not self._closed:
            raise RuntimeError("LocalDirSource.watch() before start()")
        return _Watch(self)

    def applied(self, snapshot: Snapshot, reads: Collection[str] | None = None) -> None:
        """From now on, only changes to the files that matter make a new snapshot.

        Those are the files the applied revision read and every configuration file
        of a directory it listed; a log file or an editor's swap file changing
        beside them neither makes a revision nor keeps the tree from settling.
        """
        if reads is not None:
            self._reads = frozenset(r for r in reads if not r.endswith("/"))
            self._listed = tuple("" if r == "/" else r for r in reads if r.endswith("/"))

    def rejected(self, snapshot: Snapshot) -> None:
        """Watch everything again until a revision applies: the fix may add any file."""
        self._reads = None

    def _matters(self, path: str) -> bool:
        if self._reads is None or path in self._reads or path == self._entry:
            return True
        # a new configuration file in a directory the load listed (the root, an include)
        return any(path.startswith(d) and is_loadable_name(path[len(d) :]) for d in self._listed)

    def _same(self, a: _Tree, b: _Tree) -> bool:
        """Whether two readings of the tree agree on what decides a snapshot: the files
        (and outside links) that matter.  Compared as they are, not hashed: the tree's
        revision already is, and a resync of a large tree compares it several times."""
        if a.revision == b.revision:
            return True
        return self._reads is not None and self._that_matter(a) == self._that_matter(b)

    def _that_matter(self, tree: _Tree) -> tuple[dict[str, bytes], dict[str, str]]:
        """``tree``'s files and outside links that matter (a directory's link always)."""
        matters = self._matters
        return (
            {p: d for p, d in tree.files.items() if matters(p)},
            {p: t for p, t in tree.outside.items() if p.endswith("/") or matters(p)},
        )

    async def recheck(self, snapshot: Snapshot) -> bool:
        """``snapshot`` did not load: True if it was read while a file was being written.

        A snapshot already replaced by a newer revision is dropped at once.  When a
        file that matters in it was modified shortly before it was read (within
        :attr:`fresh_window` settles), a writer may still be in the middle of it: the
        source waits one more :attr:`settle`, scans until the tree holds still, and
        publishes what it finds if that differs.  Otherwise (nothing fresh, or the
        tree unchanged) False: the snapshot is rejected as it is.
        """
        latest, scan = self._latest, self._latest_scan
        if latest is None or scan is None or self._closed:
            return False
        if latest.revision != snapshot.revision:
            return True  # watch() yields the newer one next
        window = self.fresh_window * self.settle
        if not any(
            scan.taken - mtime < window
            for path, mtime in scan.mtimes.items()
            if self._matters(path)
        ):
            return False
        await asyncio.sleep(self.settle)
        async with self._scanning:
            if self._latest is not latest:
                return True  # the watch published a newer revision meanwhile
            try:
                newer = await self._stable_scan()
            except (_Gone, _Problem, _Unstable):
                return False  # the watch reports these; reject what was read
            if self._same(newer, scan):
                return False
            logger.info(
                "%s: revision %s does not load and was read while %s was being written; "
                "using the revision written since",
                self.description,
                _short(snapshot.revision),
                ", ".join(_changed_paths(scan, newer)) or "a file",
            )
            self._publish(newer)
            self._wake.set()  # the loop re-arms the watch if the new tree needs it
            return True

    def nudge(self, revision: str | None = None) -> None:
        """Rescan now.  ``revision`` is not used: the directory is read directly."""
        self._nudged = True
        self._wake.set()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._disarm()

    # -- the watch -------------------------------------------------------------

    async def _arm(self, scan: _Scan) -> bool:
        """Watch the directories ``scan`` read, unless already watched.  True if (re)armed."""
        wanted = (scan.identity, scan.watch)
        if self._armed == wanted and self._watcher is not None and not self._watcher.done():
            return False
        await self._disarm()
        # hold the root open: while it is, its inode cannot be reused by a new root
        with contextlib.suppress(OSError):
            pin = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            pinned = os.fstat(pin)
            if (pinned.st_dev, pinned.st_ino) == scan.identity:
                self._pin = pin
            else:
                os.close(pin)
        self._armed = wanted
        self._watcher_stop = asyncio.Event()
        self._watcher = asyncio.create_task(
            self._events(sorted(scan.watch), self._watcher_stop), name=f"watch {self._root}"
        )
        await asyncio.sleep(0)  # awatch sets the watch up before its first await
        return True

    async def _disarm(self) -> None:
        self._armed = None
        if self._pin is not None:
            with contextlib.suppress(OSError):
                os.close(self._pin)
            self._pin = None
        watcher, stop = self._watcher, self._watcher_stop
        if watcher is None or stop is None:
            return
        stop.set()  # awatch sees it within step_ms and returns
        try:
            await asyncio.wait_for(asyncio.shield(watcher), 5)
        except TimeoutError:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        except asyncio.CancelledError:
            raise  # the watcher stays recorded: close() waits for it
        except Exception:
            pass  # a failed watch: _check_root reported it, or it no longer matters
        if self._watcher is watcher:
            self._watcher = self._watcher_stop = None

    async def _events(self, paths: list[str], stop: asyncio.Event) -> None:
        try:
            await self._watch_events(paths, stop)
        finally:
            if not stop.is_set():
                self._wake.set()  # a watch that ended unasked (a directory vanished): re-arm

    async def _watch_events(self, paths: list[str], stop: asyncio.Event) -> None:
        first = True
        async for changes in awatch(
            *paths,
            watch_filter=None,  # event paths are never trusted: any batch means "rescan"
            debounce=self.debounce_ms,
            step=self.step_ms,
            stop_event=stop,
            rust_timeout=int(self.watch_timeout * 1000),
            yield_on_timeout=True,
            recursive=False,
            force_polling=False,
            ignore_permission_denied=True,
        ):
            # the first yield, even a timeout, proves the watch is up: rescan then
            # too, for what changed while it was being set up
            if changes or first:
                first = False
                self._wake.set()

    async def _check_root(self, now: float) -> bool | None:
        """None while the root is gone; True when the tree must be rescanned."""
        watcher = self._watcher
        if watcher is not None and watcher.done():
            exc = None if watcher.cancelled() else watcher.exception()
            await self._disarm()
            if exc is not None and not isinstance(exc, FileNotFoundError):
                logger.warning(
                    "cannot watch %s (%s); rescanning it every %g s instead",
                    self._root,
                    exc,
                    self.poll_interval,
                )
                self._watch_failed_until = now + self.watch_retry
        identity = await asyncio.to_thread(_identity, self._root)
        if identity is None:
            await self._disarm()
            self._lost(f"{self._root} does not exist" if self._entry else f"{self.path} is gone")
            return None
        if self._missing is None and self._problem is None:
            self.contacted()  # the root is there and its last scan was read whole
        if self._armed is None or self._armed[0] != identity:
            return True  # not watching, or watching a directory the root no longer is
        # a file spec's file is missing, or the tree could not be read (perhaps in a
        # directory not watched yet): poll
        return self._missing is not None or self._problem is not None

    def _lost(self, why: str) -> None:
        if self._missing is None:
            revision = _short(self._latest.revision) if self._latest else "none"
            logger.warning(
                "%s; keeping the last snapshot (revision %s) until it is back", why, revision
            )
        self._missing = why

    # -- the loop --------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_resync = loop.time() + self.resync_interval
        pending = False
        while not self._closed:
            now = loop.time()
            deadline = min(now + self.poll_interval, next_resync)
            if pending and self._not_before > now:
                deadline = min(deadline, self._not_before)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - now)):
                    await self._wake.wait()
            now = loop.time()
            if self._wake.is_set():
                self._wake.clear()
                pending = True
            try:
                rescan = await self._check_root(now)
                if rescan is None:
                    pending = False  # nothing to scan until the root is back (then rescanned)
                    continue
                if now >= next_resync:
                    next_resync = now + self.resync_interval
                    rescan = True
                pending = pending or rescan
                if not pending or (now < self._not_before and not self._nudged):
                    continue
                pending = await self._refresh()
            except Exception:
                logger.exception("%s: unexpected error; retrying", self.description)
                self._not_before = loop.time() + self.poll_interval
                pending = True

    async def _refresh(self) -> bool:
        """Rescan, publish a new revision, re-arm; True if the tree must be scanned again."""
        loop = asyncio.get_running_loop()
        try:
            async with self._scanning:  # not beside recheck()'s scan
                scan = await self._stable_scan()
        except _Gone as exc:
            self.contact_failed()
            self._lost(str(exc))
            return False
        except _Problem as exc:
            self.contact_failed()
            if str(exc) != self._problem:
                logger.warning("%s; keeping the last snapshot", exc)
                self._problem = str(exc)
            return False
        except _Unstable as exc:
            if not self._unstable_logged:
                logger.warning(
                    "%s keeps changing (%s); the snapshot waits until it holds still",
                    self.description,
                    exc,
                )
                self._unstable_logged = True
            self._not_before = loop.time() + self.poll_interval
            return True
        if self._missing is not None:
            logger.info("%s is back", self.description)
            self._missing = None
        self._problem = None
        self.contacted()
        self._unstable_logged = False
        self._log_notes(scan.notes)
        self._publish(scan)
        if loop.time() < self._watch_failed_until:
            return False
        # new directories (or a new root) are watched from now on; scan once more for
        # what changed in them before the watch was up (a file created right after mkdir)
        return await self._arm(scan)

    async def _stable_scan(self) -> _Scan:
        """Scan until two scans ``settle`` seconds apart agree."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settle_timeout
        previous: _Scan | None = None
        moving: set[str] = set()
        while True:
            # a change before this scan starts is in it; one after it wakes us again
            self._wake.clear()
            self._nudged = False
            try:
                scan = await asyncio.to_thread(
                    scan_tree,
                    self._root,
                    self._entry,
                    limits=self.limits,
                )
            except _Torn as exc:
                moving.add(exc.path)
                previous = None
            else:
                if (
                    previous is not None
                    and previous.watch == scan.watch
                    and self._same(previous, scan)
                ):
                    return scan
                if previous is not None:
                    moving |= {p for p in _changed_paths(previous, scan) if self._matters(p)}
                previous = scan
            if loop.time() + self.settle > deadline:
                raise _Unstable(moving)
            await asyncio.sleep(self.settle)

    def _publish(self, scan: _Scan) -> None:
        self._latest_scan = scan
        latest = self._latest
        if latest is not None and self._same(latest, scan):
            return
        self._latest = Snapshot(
            revision=scan.revision,
            source=self.description,
            files=scan.files,
            entry=self._entry,
            outside=scan.outside,
        )
        new_links = scan.outside.keys() - (latest.outside.keys() if latest else set())
        for path in sorted(new_links):
            logger.debug(
                "%s: %s is a link to %s, outside the directory: not read (an error if "
                "the configuration loads it)",
                self.description,
                path.rstrip("/"),
                scan.outside[path],
            )
        logger.debug(
            "%s: revision %s (%d files)", self.description, _short(scan.revision), len(scan.files)
        )
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _log_notes(self, notes: tuple[str, ...]) -> None:
        old, self._notes = set(self._notes), notes
        new = [n for n in notes if n not in old]
        if not new:
            return
        # beside a file spec the directory is shared (/etc): its odd entries are expected
        level = logging.DEBUG if self._entry else logging.WARNING
        shown = "; ".join(new[:5]) + (f"; and {len(new) - 5} more" if len(new) > 5 else "")
        logger.log(level, "%s: %s", self.description, shown)
