"""etcd as a configuration source: every key under a prefix is a file.

``etcd://HOST:PORT/cron/`` serves the key ``/cron/jobs/backup.yaml`` as the file
``jobs/backup.yaml``.  Keys whose remainder is not a canonical relative POSIX
path (empty, absolute, with ``.``/``..``/empty components, a NUL, a trailing
``/``, not UTF-8), or that name a directory of other keys, are skipped with a
warning.

Snapshots are consistent.  Each is read with ONE range over the whole prefix,
at one etcd revision, so a multi-key transaction is never seen half-applied.
The source watches the prefix from the revision after that read; a burst of
events is debounced (:data:`DEBOUNCE` seconds of quiet, at most
:data:`DEBOUNCE_MAX`) and then the prefix is read again, whole.

Revisions.  A snapshot's revision is decimal text naming an etcd revision at
which the prefix held exactly the snapshot's keys and values (or, after a
compaction, a digest of them, see 4) — normally the
revision of the prefix's last change, i.e. the revision of the transaction
that published it, and the same on every node.  How it is found, for a read
served at header revision ``H``:

1. the same keys, mod revisions and values as the last snapshot: its revision
   (nothing changed, nothing is yielded; this also holds against the cached
   last good snapshot, across restarts);
2. else the candidate ``C`` = the highest of the keys' ``mod_revision`` and of
   the revisions of the watch events seen up to ``H`` (a deletion leaves no
   ``mod_revision`` behind, but the watch saw it);
3. ``C`` is used when it is ``H`` or when a keys-only range at ``C`` shows the
   very same keys and mod revisions (it proves the prefix did not change after
   ``C``: a deletion the watch had not reported yet, or one from before the
   source started, would show);
4. when etcd has compacted ``C`` away, so that it cannot be proven, the content
   itself names the snapshot: :func:`~cronstable.snapshot.content_revision` of
   its files (``sha256:…``, as a directory source does), never an unproven
   revision, nor ``H``, which would change with every read;
5. else ``H`` itself, true by construction.

The header revision alone would not do (it moves with every write anywhere in
etcd, so an unchanged prefix would get new revisions), nor would the highest
``mod_revision`` alone (deleting a key leaves it unchanged, so a changed prefix
could keep its revision).  Because every revision names the exact content at
that etcd revision, two different contents never share one.

Last good snapshot.  :meth:`EtcdSource.applied` keeps the applied snapshot in
``CACHE_DIR/etcd/<digest of endpoint and prefix>.json`` (written atomically,
mode 0600, contents base64); :meth:`EtcdSource.start` falls back to it, with a
warning, when etcd cannot be read.

Outages.  While etcd is down the source retries with capped back-off (one
WARNING when the outage starts, one INFO when etcd answers again) and picks up
whatever changed meanwhile; :meth:`EtcdSource.watch` ends only with
:meth:`EtcdSource.close`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import posixpath
import random
import tempfile
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cronstable.config.limits import DEFAULT_LIMITS, OPTION_REVISION_BYTES, Limits, size_text
from cronstable.etcd import (
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    KeyValue,
    key_bytes,
    login_from_environment,
    show_key,
)
from cronstable.snapshot import Snapshot, content_revision
from cronstable.sources.base import Source, SourceError
from cronstable.sources.etcd.spec import EtcdSpec, describe

logger = logging.getLogger("cronstable.sources.etcd")  # the name it had as one module

CACHE_FORMAT = 1
"""Version of the cache file's layout; a file of another version is ignored."""
DEBOUNCE = 0.05
"""Seconds without a new watch event before the prefix is re-read."""
DEBOUNCE_MAX = 0.5
"""A steady stream of events delays the re-read at most this long."""
RETRY_INITIAL = 0.1
RETRY_MAX = 5.0
"""Capped exponential back-off (seconds) of reads and the watch while etcd is down."""
NUDGE_WAIT = 30.0
"""How long :meth:`EtcdSource.nudge` with a revision keeps re-reading until etcd reaches it."""
_REMEMBERED = 16
CONTACT_REFRESH = 20.0
"""Seconds without any read or watch event after which etcd is asked once (a keys-only
read of one key), so readiness knows the origin still answers while nothing changes."""
"""Identities kept of the latest snapshots yielded, for :meth:`EtcdSource.applied`."""
_MAX_EVENT_REVISIONS = 4096

Identity = frozenset[tuple[bytes, int, bytes]]
"""What a prefix holds: (key, mod_revision, digest of the value) of each key."""


def _digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=16).digest()


def _identity(kvs: Iterable[KeyValue]) -> Identity:
    return frozenset((kv.key, kv.mod_revision, _digest(kv.value)) for kv in kvs)


def _backoff(failures: int, maximum: float) -> float:
    delay = min(maximum, RETRY_INITIAL * 2.0 ** max(0, failures - 1))
    return delay * random.uniform(0.5, 1.0)


def key_path(key: bytes, prefix: bytes) -> str | None:
    """The file path of ``key`` under ``prefix``, or None if it is not a canonical relative
    POSIX path (or not UTF-8)."""
    if not key.startswith(prefix):
        return None
    try:
        path = key[len(prefix) :].decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not path or "\0" in path or path.startswith("/"):
        return None
    if path != posixpath.normpath(path):  # "a/", "a//b", "./a", "a/./b", "a/../b"
        return None
    if ".." in path.split("/"):
        return None
    return path


@dataclass(frozen=True, slots=True)
class _Read:
    """One read of the prefix: the snapshot, what it holds, the header revision it was read at."""

    snapshot: Snapshot
    identity: Identity
    header: int


def etcd_credentials() -> tuple[str | None, str | None]:
    """etcd authentication from the daemon's environment (never from the spec, never logged).

    ``CRONSTABLE_ETCD_USERNAME`` with ``CRONSTABLE_ETCD_PASSWORD`` or
    ``CRONSTABLE_ETCD_PASSWORD_FILE`` (the file's content, stripped).
    """
    try:
        return login_from_environment()
    except EtcdError as exc:
        raise SourceError(str(exc)) from exc


class EtcdSource(Source):
    """Every key under ``spec.prefix`` in the etcd at ``spec.endpoint`` is a file.

    ``timeout`` bounds each etcd request; ``retry_max`` caps the back-off
    while etcd is down (both in seconds).
    """

    kind = "etcd"

    def __init__(
        self,
        spec: EtcdSpec,
        *,
        cache_dir: Path,
        timeout: float = 5.0,
        retry_max: float = RETRY_MAX,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.spec = spec
        self.limits = limits
        self.prefix = key_bytes(spec.prefix)
        self.description = describe(spec)
        anchor = hashlib.sha256(f"{spec.endpoint}\0{spec.prefix}".encode()).hexdigest()[:32]
        self.cache_path = cache_dir / "etcd" / f"{anchor}.json"
        self._timeout = timeout
        self._retry_max = retry_max

        self._client: EtcdClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._latest: Snapshot | None = None
        """The newest snapshot; what watch() yields next if it has not yet."""
        self._known: tuple[Identity, str] | None = None
        """What the newest snapshot (or the cached one) holds, and its revision."""
        self._identities: OrderedDict[str, Identity] = OrderedDict()
        self._wakeup = asyncio.Event()
        """Set (and replaced) whenever ``_latest`` changes or the source closes."""

        self._dirty = asyncio.Event()
        """Set when the prefix may have changed (a watch event, a nudge, a reconnection)."""
        self._marks = 0
        self._urgent = False
        self._event_revisions: list[int] = []
        self._watch_base = asyncio.Event()
        """Set when ``_watch_from`` is known: the watch starts after the last full read."""
        self._watch_from = 0
        self._wanted: int | None = None
        self._wanted_deadline = 0.0
        self._wanted_attempts = 0
        self._down = False
        self._warned: set[bytes] = set()

    def __repr__(self) -> str:
        return f"EtcdSource({self.description!r})"

    # ------------------------------------------------------------------ Source API

    async def start(self) -> None:
        """Read the prefix; if etcd cannot be read, fall back (with a warning) to the cached
        last good snapshot, or raise :class:`SourceError` when there is none."""
        if self._client is not None:
            raise SourceError(f"{self.description}: already started")
        if self._closed:
            raise SourceError(f"{self.description}: closed")
        username, password = etcd_credentials()
        try:
            self._client = EtcdClient(
                self.spec.endpoint,
                timeout=self._timeout,
                username=username,
                password=password,
                tls=self.spec.tls,
            )
        except EtcdError as exc:  # a CA or certificate file that cannot be used
            raise SourceError(f"{self.description}: {exc}") from exc
        cached = await asyncio.to_thread(self._load_cache)
        if cached is not None and cached[1] is not None:
            self._known = (cached[1], cached[0].revision)
        try:
            read = await self._read()
        except EtcdError as exc:
            if cached is None:
                await self._client.close()
                # the cause says why etcd cannot be read: what a caller without a cache
                # (validate, diff, next) reports; the daemon also learns there is no cache
                unreadable = SourceError(f"{self.description}: {exc}")
                unreadable.__cause__ = exc
                raise SourceError(
                    f"{self.description}: {exc}; and there is no earlier revision to start "
                    "from instead (none was applied with the cache directory "
                    f"{self.cache_path.parent.parent})"
                ) from unreadable
            snapshot = cached[0]
            logger.warning(
                "%s: etcd cannot be read (%s); starting from the cached last good revision %s",
                self.description,
                exc,
                snapshot.revision,
            )
            self._down = True
            self._latest = snapshot
            self._remember(snapshot.revision, cached[1])
            self._mark(urgent=True)
        except BaseException:
            await self._client.close()
            raise
        else:
            self.contacted()
            self._latest = read.snapshot
            self._known = (read.identity, read.snapshot.revision)
            self._remember(read.snapshot.revision, read.identity)
            self._watch_from = read.header + 1
            self._watch_base.set()
        self._tasks = [
            asyncio.create_task(self._reader(), name=f"{self.description} reader"),
            asyncio.create_task(self._watcher(), name=f"{self.description} watch"),
        ]

    async def watch(self) -> AsyncIterator[Snapshot]:
        if self._client is None:
            raise SourceError(f"{self.description}: watch() before start()")
        last: str | None = None
        while not self._closed:
            snapshot = self._latest
            if snapshot is not None and snapshot.revision != last:
                last = snapshot.revision
                yield snapshot
                continue
            await self._wakeup.wait()

    def nudge(self, revision: str | None = None) -> None:
        """Re-read the prefix now; with ``revision`` (an etcd revision, as text), keep
        re-reading with back-off until etcd's revision reaches it, for :data:`NUDGE_WAIT`
        seconds at most."""
        if self._closed:
            return
        if revision is not None:
            try:
                wanted = int(revision)
            except ValueError:
                logger.warning(
                    "%s: nudged with %r, which is not an etcd revision; reading now",
                    self.description,
                    revision,
                )
            else:
                self._wanted = max(self._wanted or 0, wanted)
                self._wanted_deadline = time.monotonic() + NUDGE_WAIT
                self._wanted_attempts = 0
        self._mark(urgent=True)

    def applied(self, snapshot: Snapshot, reads: Collection[str] | None = None) -> None:
        """Keep ``snapshot`` in the cache file as the last good one (a failure to write it
        is logged, never raised)."""
        identity = self._identities.get(snapshot.revision)
        document: dict[str, Any] = {
            "format": CACHE_FORMAT,
            "endpoint": self.spec.endpoint,
            "prefix": self.spec.prefix,
            "source": snapshot.source,
            "revision": snapshot.revision,
            "files": {
                path: base64.b64encode(data).decode("ascii")
                for path, data in sorted(snapshot.files.items())
            },
        }
        if identity is not None:
            document["keys"] = [
                [base64.b64encode(key).decode("ascii"), mod_revision, digest.hex()]
                for key, mod_revision, digest in sorted(identity)
            ]
        try:
            self._write_cache(json.dumps(document, indent=1).encode())
        except OSError as exc:
            logger.warning(
                "%s: cannot keep revision %s as the last good one in %s: %s",
                self.description,
                snapshot.revision,
                self.cache_path,
                exc,
            )

    async def close(self) -> None:
        """Stop reading and watching; :meth:`watch` ends."""
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
        self._wake()

    # ------------------------------------------------------------------ reading

    async def _read(self) -> _Read:
        """Read the whole prefix at one revision and name that content's revision."""
        assert self._client is not None
        result = await self._client.range(self.prefix, prefix=True)
        total = sum(len(kv.value) for kv in result.kvs)
        if total > self.limits.max_revision_bytes:
            # an EtcdError: kept as an outage (the last snapshot stays, retried with back-off)
            raise EtcdError(
                f"the prefix holds {size_text(total)}, more than "
                f"{size_text(self.limits.max_revision_bytes)} "
                f"(raise the limit with {OPTION_REVISION_BYTES})"
            )
        header = result.revision
        identity = _identity(result.kvs)
        seen = [revision for revision in self._event_revisions if revision <= header]
        self._event_revisions = [r for r in self._event_revisions if r > header]
        revision = await self._revision(result.kvs, identity, header, seen)
        snapshot = Snapshot(
            revision=revision, source=self.description, files=self._files(result.kvs)
        )
        return _Read(snapshot=snapshot, identity=identity, header=header)

    async def _revision(
        self, kvs: list[KeyValue], identity: Identity, header: int, seen: list[int]
    ) -> str:
        """The revision naming the content ``kvs`` read at ``header`` (see the module doc)."""
        if self._known is not None and self._known[0] == identity:
            return self._known[1]
        candidate = max([0, *(kv.mod_revision for kv in kvs), *seen])
        if candidate == header or candidate <= 0:
            return str(header)
        assert self._client is not None
        try:
            past = await self._client.range(
                self.prefix, prefix=True, revision=candidate, keys_only=True
            )
        except EtcdCompacted:
            # C cannot be proven any more, and H moves with every write anywhere in
            # etcd: name the content itself, the same on every node and every read
            return content_revision(self._files(kvs))
        then = {(kv.key, kv.mod_revision) for kv in past.kvs}
        now = {(kv.key, kv.mod_revision) for kv in kvs}
        return str(candidate) if then == now else str(header)

    def _files(self, kvs: list[KeyValue]) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        keys: dict[str, bytes] = {}
        for kv in kvs:
            path = key_path(kv.key, self.prefix)
            if path is None:
                self._skip(kv.key, "is not a relative path to a file")
                continue
            files[path] = kv.value
            keys[path] = kv.key
        directories: set[str] = set()
        for path in files:
            parent = posixpath.dirname(path)
            while parent and parent not in directories:
                directories.add(parent)
                parent = posixpath.dirname(parent)
        for path in sorted(directories & files.keys()):
            self._skip(keys[path], "is also a directory of other keys")
            del files[path]
        return files

    def _skip(self, key: bytes, why: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("%s: skipping key %s: it %s", self.description, show_key(key), why)

    # ------------------------------------------------------------------ background

    def _mark(self, *, urgent: bool = False) -> None:
        self._marks += 1
        if urgent:
            self._urgent = True
        self._dirty.set()

    async def _debounce(self) -> None:
        deadline = time.monotonic() + DEBOUNCE_MAX
        while not self._urgent:
            marks = self._marks
            await asyncio.sleep(DEBOUNCE)
            if self._marks == marks or time.monotonic() >= deadline:
                return

    async def _reader(self) -> None:
        """Re-read the prefix whenever it may have changed; publish what is new."""
        failures = 0
        while True:
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
                async with asyncio.timeout(CONTACT_REFRESH):
                    await self._dirty.wait()
            except TimeoutError:
                await self._ping()
                continue
            await self._debounce()
            self._dirty.clear()
            self._urgent = False
            try:
                read = await self._read()
            except Exception as exc:  # EtcdError, or a bug: keep the source alive either way
                failures += 1
                self.contact_failed()
                if not isinstance(exc, EtcdError):
                    logger.exception("%s: reading etcd failed", self.description)
                self._outage(exc)
                await asyncio.sleep(_backoff(failures, self._retry_max))
                self._mark(urgent=True)
                continue
            failures = 0
            self.contacted()
            self._recovered()
            self._publish(read)
            if not self._watch_base.is_set():
                self._watch_from = read.header + 1
                self._watch_base.set()
            self._chase_wanted(read.header)

    async def _ping(self) -> None:
        """Ask etcd one cheap question, to know it still answers (see CONTACT_REFRESH)."""
        assert self._client is not None
        if self.last_contact is not None and time.monotonic() - self.last_contact < CONTACT_REFRESH:
            return
        try:
            await self._client.range(self.prefix, prefix=True, keys_only=True, limit=1)
        except EtcdError as exc:
            self.contact_failed()
            self._outage(exc)
            self._mark(urgent=True)  # read it whole, with back-off, until it answers
        else:
            self.contacted()

    def _chase_wanted(self, header: int) -> None:
        wanted = self._wanted
        if wanted is None:
            return
        if header >= wanted:
            self._wanted = None
        elif time.monotonic() >= self._wanted_deadline:
            logger.warning(
                "%s: etcd is still at revision %d, short of the %d it was nudged with; giving up",
                self.description,
                header,
                wanted,
            )
            self._wanted = None
        else:
            self._wanted_attempts += 1
            delay = _backoff(self._wanted_attempts, 2.0)
            asyncio.get_running_loop().call_later(delay, self._mark_if_open)

    def _mark_if_open(self) -> None:
        if not self._closed:
            self._mark(urgent=True)

    async def _watcher(self) -> None:
        """Follow the prefix's changes from the revision after the last full read."""
        assert self._client is not None
        failures = 0
        while True:
            await self._watch_base.wait()
            try:
                async for event in self._client.watch(
                    self.prefix,
                    prefix=True,
                    start_revision=self._watch_from,
                    on_status=self._on_watch_status,
                ):
                    failures = 0
                    self.contacted()
                    self._event_revisions.append(event.revision)
                    if len(self._event_revisions) > _MAX_EVENT_REVISIONS:
                        del self._event_revisions[: -_MAX_EVENT_REVISIONS // 2]
                    self._mark()
                return  # the client was closed
            except EtcdCompacted as exc:
                logger.info("%s: %s; reading the prefix again", self.description, exc)
                self._watch_base.clear()
                self._mark(urgent=True)
            except Exception as exc:  # refused for good (permissions…), or a bug
                failures += 1
                self.contact_failed()
                if not isinstance(exc, EtcdError):
                    logger.exception("%s: watching etcd failed", self.description)
                self._outage(exc)
                await asyncio.sleep(_backoff(failures, self._retry_max))

    def _on_watch_status(self, error: EtcdError | None) -> None:
        if error is not None:
            self.contact_failed()
            self._outage(error)
        else:
            self.contacted()
            self._recovered()
            self._mark(urgent=True)  # whatever changed meanwhile, read it whole

    def _outage(self, exc: BaseException) -> None:
        if not self._down:
            self._down = True
            logger.warning("%s: etcd is unreachable (%s); retrying", self.description, exc)

    def _recovered(self) -> None:
        if self._down:
            self._down = False
            logger.info("%s: etcd is reachable again", self.description)

    def _publish(self, read: _Read) -> None:
        if self._known is not None and self._known[0] == read.identity:
            return
        self._known = (read.identity, read.snapshot.revision)
        self._remember(read.snapshot.revision, read.identity)
        self._latest = read.snapshot
        self._wake()

    def _remember(self, revision: str, identity: Identity | None) -> None:
        if identity is None:
            return
        self._identities[revision] = identity
        self._identities.move_to_end(revision)
        while len(self._identities) > _REMEMBERED:
            self._identities.popitem(last=False)

    def _wake(self) -> None:
        wakeup, self._wakeup = self._wakeup, asyncio.Event()
        wakeup.set()

    # ------------------------------------------------------------------ cache

    def _write_cache(self, data: bytes) -> None:
        directory = self.cache_path.parent
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.cache_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    async def last_applied(self) -> Snapshot | None:
        cached = await asyncio.to_thread(self._load_cache)
        return cached[0] if cached is not None else None

    def _load_cache(self) -> tuple[Snapshot, Identity | None] | None:
        """The cached last good snapshot (and what its prefix held), or None."""
        try:
            raw = self.cache_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning(
                "%s: cannot read the cache %s: %s", self.description, self.cache_path, exc
            )
            return None
        try:
            document = json.loads(raw)
            return self._parse_cache(document)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            logger.warning(
                "%s: ignoring the unreadable cache %s: %s", self.description, self.cache_path, exc
            )
            return None

    def _parse_cache(self, document: Mapping[str, Any]) -> tuple[Snapshot, Identity | None] | None:
        if document.get("format") != CACHE_FORMAT:
            logger.warning(
                "%s: ignoring the cache %s of another format (%r)",
                self.description,
                self.cache_path,
                document.get("format"),
            )
            return None
        if document["endpoint"] != self.spec.endpoint or document["prefix"] != self.spec.prefix:
            raise ValueError("it belongs to another etcd source")
        revision = document["revision"]
        if not isinstance(revision, str) or not revision:
            raise ValueError("no revision")
        files = {
            str(path): base64.b64decode(data, validate=True)
            for path, data in document["files"].items()
        }
        identity: Identity | None = None
        if "keys" in document:
            identity = frozenset(
                (base64.b64decode(key, validate=True), int(mod_revision), bytes.fromhex(digest))
                for key, mod_revision, digest in document["keys"]
            )
        return Snapshot(revision=revision, source=self.description, files=files), identity
