"""A node's own state directory as one append-only log: ``<state-dir>/records.log``.

Every new file costs an inode, and on some filesystems (ext4 without a journal) a new
inode costs up to a millisecond of kernel CPU: one file per record made a burst of runs
expensive.  A directory only this node uses (``state.shared: false``) keeps its records
in one file instead, a line per change::

    <crc32 of the JSON, 8 lowercase hex> {"k": "<key>", "r": <record, or null: removed>}

The record is what :func:`~cronstable.state.base.encode` makes (with ``version``).
Memory holds an index (key -> offset and length of its latest line), not the records:
a read takes the line from the file.  An append writes a batch in one ``write`` and
flushes it once (not when every change is a :func:`~cronstable.state.base.boot_scoped`
record, as with the files).  Another process (``cronstable state rm``) may write the
same log: appends hold ``flock(LOCK_EX)``, each process first indexes what others
appended, and a compaction (another file renamed over the log) is noticed by its inode.
A crash mid-append leaves a last line torn (no newline, or a bad checksum): readers
ignore it and the next append cuts it off.  A bad line in the middle is skipped.

When the log is over :data:`COMPACT_AT` and more than twice its live lines, the live
lines are written to a new file renamed over it.  A directory of the older layout (one
``<key>.json`` per record) is imported on first use and its files removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import threading
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cronstable.state.base import Record, boot_scoped, encode, readable

logger = logging.getLogger(__name__)

LOG_NAME = "records.log"
COMPACT_AT = 4 * 1024 * 1024
"""Bytes past which a log more than twice its live lines is rewritten."""
OLD_SUFFIX = ".json"
"""A record file of the one-file-per-record layout (``nodes/n1/fires/x.json``)."""
_CHUNK = 1 << 20
_MIGRATE_BATCH = 16 << 20
_TEMP_PREFIX = f".{LOG_NAME}.tmp-"
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC

Change = tuple[str, Record | None]
Entry = tuple[int, int]
"""Where a key's latest line is: offset and length (newline included)."""


def make_dirs(path: Path) -> None:
    """``path`` and its missing parents, each 0700 (``mkdir(parents=True)`` gives the
    parents the default mode)."""
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _line(key: str, payload: bytes) -> bytes:
    body = b'{"k": ' + json.dumps(key).encode() + b', "r": ' + payload + b"}"
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def record_line(key: str, record: Record | None) -> bytes:
    """The line that writes ``record`` at ``key`` (None: removes it)."""
    return _line(key, b"null" if record is None else encode(record))


def parse_line(line: bytes) -> tuple[str, Any] | None:
    """The key and the ``r`` value of a line (without its newline); None for a line
    that is not one (torn, a bad checksum, not our JSON)."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    body = line[9:]
    try:
        crc = int(line[:8], 16)
        value = json.loads(body) if zlib.crc32(body) == crc else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("k"), str) or "r" not in value:
        return None
    return value["k"], value["r"]


def old_records(root: Path) -> Iterator[tuple[str, Path]]:
    """The record files of the one-file-per-record layout under ``root``, by key."""
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.endswith(OLD_SUFFIX) and not name.startswith("."):
                path = Path(directory, name)
                yield path.relative_to(root).as_posix()[: -len(OLD_SUFFIX)], path


def _old_payload(data: bytes) -> bytes:
    """An old record file's content as a line's ``r``: its JSON, or (not JSON, or null)
    the text as a string, so the key stays and reads as unreadable (None), as before."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        value = None
    if value is None:
        value = data.decode("utf-8", "replace")
    return json.dumps(value, sort_keys=True).encode()


class RecordLog:
    """The records of a private state directory (see the module docstring).  Blocking
    and thread-safe: :class:`~cronstable.state.filesystem.FilesystemStore` calls it in
    a thread; OSError goes out as it is."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / LOG_NAME
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._inode: tuple[int, int] = (0, 0)
        self._index: dict[str, Entry] = {}
        self._dirs: dict[str, set[str]] = {}
        """The index's keys by their directory (the key up to its last ``/``): a list of
        one kind of record (the pauses, every 2 s) reads that kind's keys, not every
        key of a node whose 100,000 jobs each have a history."""
        self._end = 0
        """The offset after the last good line indexed: where this process's next
        append goes, once a torn tail is cut off."""
        self._live = 0
        """Bytes of the lines the index points to (what a compaction keeps)."""

    # ------------------------------------------------------------ the operations

    def get(self, key: str) -> Record | None:
        with self._lock:
            if not self._readable():
                return None
            entry = self._index.get(key)
            return None if entry is None else self._read(entry)

    def list(self, prefix: str = "") -> dict[str, Record | None]:
        with self._lock:
            if not self._readable():
                return {}
            index = self._index
            return {k: self._read(index[k]) for k in sorted(self._keys_under(prefix))}

    def put(self, key: str, record: Record) -> None:
        self.apply([(key, record)])

    def create(self, key: str, record: Record) -> bool:
        with self._exclusive():
            if key in self._index:  # decided after others' appends are indexed
                return False
            self._append([(key, record)])
            return True

    def delete(self, key: str) -> bool:
        with self._exclusive():
            if key not in self._index:
                return False
            self._append([(key, None)])
            return True

    def apply(self, changes: Sequence[Change]) -> None:
        with self._exclusive():
            self._append(changes)

    def check(self) -> None:
        """Open the log for appending and lock it (proves the directory writable)."""
        with self._exclusive():
            pass

    def close(self) -> None:
        with self._lock:
            self._close()

    # ------------------------------------------------------------ opening and locking

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._forget_index()

    def _forget_index(self) -> None:
        """Nothing indexed: the next read indexes the file from its start."""
        self._index, self._end, self._live = {}, 0, 0
        self._dirs = {}

    def _open(self) -> int:
        """The log's fd, opened (created) and indexed from the start if need be."""
        if self._fd is None:
            make_dirs(self.root)
            fd = os.open(self.path, _OPEN_FLAGS, 0o600)
            stat = os.fstat(fd)
            self._fd, self._inode = fd, (stat.st_dev, stat.st_ino)
            self._forget_index()
        return self._fd

    def _current(self, mode: int) -> int:
        """Lock the file the log's path names now (``mode``: LOCK_SH or LOCK_EX), another
        process's compaction followed, and index what was appended since; its size.
        On an error nothing stays locked."""
        while True:
            fd = self._open()
            fcntl.flock(fd, mode)
            try:
                stat = _stat(self.path)
                if stat is not None and (stat.st_dev, stat.st_ino) == self._inode:
                    if stat.st_size != self._end:
                        self._replay(stat.st_size)
                    return stat.st_size
            except BaseException:
                fcntl.flock(fd, fcntl.LOCK_UN)
                raise
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._close()  # replaced (compacted) or removed: open what is there now

    def _readable(self) -> bool:
        """Whether there is a log to read, brought up to date (another process's appends
        indexed); a directory without one (and no records of the older layout) stays
        as it is, as a read found it."""
        if self._fd is None:
            if not self.path.exists() and next(old_records(self.root), None) is None:
                return False
            with self._locked():  # the first use: it may import the older layout
                return True
        stat = _stat(self.path)
        if stat is not None and (stat.st_dev, stat.st_ino) == self._inode:
            if stat.st_size == self._end:
                return True  # the common case: nothing new, no lock taken
        self._current(fcntl.LOCK_SH)  # not while another process is mid-append
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        return True

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The log locked against every other writer (thread or process), up to date."""
        with self._lock, self._locked():
            yield

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """:meth:`_exclusive` within the thread lock: LOCK_EX, others' appends indexed,
        a torn tail cut; at the first open, the older layout imported."""
        first = self._fd is None
        self._current(fcntl.LOCK_EX)
        assert self._fd is not None
        try:
            self._cut(os.fstat(self._fd).st_size)
            if first:
                self._remove_stale_temps()
                self._migrate()
            yield
        finally:
            if self._fd is not None:  # the log's file now: a compaction locked its own
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _cut(self, size: int) -> None:
        """Cut off a torn tail (a crash mid-append), so the next line starts clean."""
        if size > self._end:
            assert self._fd is not None
            logger.warning(
                "state log %s: a torn last record (%d bytes, a crash while writing) cut off",
                self.path,
                size - self._end,
            )
            os.ftruncate(self._fd, self._end)

    # ------------------------------------------------------------ reading the file

    def _read(self, entry: Entry) -> Record | None:
        assert self._fd is not None
        offset, length = entry
        parsed = parse_line(os.pread(self._fd, length, offset)[:-1])
        return None if parsed is None else readable(parsed[1])

    def _note(self, key: str, present: bool, offset: int, length: int) -> None:
        old = self._index.pop(key, None)
        if old is not None:
            self._live -= old[1]
        if present:
            self._index[key] = (offset, length)
            self._live += length
            if old is None:
                self._dirs.setdefault(key.rpartition("/")[0], set()).add(key)
        elif old is not None:
            directory = key.rpartition("/")[0]
            keys = self._dirs[directory]
            keys.discard(key)
            if not keys:
                del self._dirs[directory]

    def _keys_under(self, prefix: str) -> Iterator[str]:
        """The index's keys that start with ``prefix``, through :attr:`_dirs`."""
        if not prefix:
            yield from self._index
            return
        for directory, keys in self._dirs.items():
            whole = directory + "/" if directory else ""
            if whole.startswith(prefix):  # every key in it
                yield from keys
            elif prefix.startswith(whole):  # the prefix goes on into the keys' last part
                yield from (key for key in keys if key.startswith(prefix))

    def _replay(self, size: int) -> None:
        """Index the lines from ``self._end`` to ``size`` (appended by another process,
        or the whole file at the first open).  ``self._end`` moves past each good line;
        a bad one followed by a good one is skipped and counted, bad ones at the end
        (a torn tail) are left past ``self._end``."""
        if size < self._end:  # shorter than what was indexed: read it again whole
            self._forget_index()
        bad = pending = 0
        for offset, line in self._lines(size):
            parsed = parse_line(line)
            if parsed is None:
                pending += 1  # skipped if a good line follows, a torn tail if none does
                continue
            bad, pending = bad + pending, 0
            self._note(parsed[0], parsed[1] is not None, offset, len(line) + 1)
            self._end = offset + len(line) + 1
        if bad:
            logger.warning("state log %s: %d unreadable records skipped", self.path, bad)

    def _lines(self, size: int) -> Iterator[tuple[int, bytes]]:
        """The complete lines (offset, the line without its newline) from ``self._end``
        to ``size``, read a chunk at a time (a log may be large, its lines up to MiBs)."""
        assert self._fd is not None
        offset, carry = self._end, b""
        while offset + len(carry) < size:
            at = offset + len(carry)
            chunk = os.pread(self._fd, min(_CHUNK, size - at), at)
            if not chunk:
                return
            data, start = carry + chunk, 0
            while (newline := data.find(b"\n", start)) >= 0:
                yield offset + start, data[start:newline]
                start = newline + 1
            carry, offset = data[start:], offset + start

    # ------------------------------------------------------------ writing the file

    def _append(self, changes: Sequence[Change]) -> None:
        """The changes' lines in one write, flushed once unless every change is
        boot-scoped; a removal of a key that has no record writes nothing."""
        self._write([(key, record_line(key, record)) for key, record in changes], flush=None)

    def _write(
        self, lines: Sequence[tuple[str, bytes]], *, flush: bool | None, compact: bool = True
    ) -> None:
        """Append ``lines`` (key, line).  ``flush``: None decides by the keys; ``compact``:
        False while a batch is written in parts (a compaction would switch files)."""
        alive: dict[str, bool] = {}
        kept: list[tuple[str, bytes]] = []
        for key, line in lines:
            present = alive_line(line)
            if not present and not alive.get(key, key in self._index):
                continue
            alive[key] = present
            kept.append((key, line))
        if not kept:
            return
        data = b"".join(line for _, line in kept)
        assert self._fd is not None
        _write_all(self._fd, data)
        if flush or (flush is None and not all(boot_scoped(key) for key, _ in kept)):
            os.fsync(self._fd)
        offset = self._end
        for key, line in kept:
            self._note(key, alive_line(line), offset, len(line))
            offset += len(line)
        self._end = offset
        if compact:
            self._maybe_compact()

    def _maybe_compact(self) -> None:
        if self._end > COMPACT_AT and self._end > 2 * self._live:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the live lines to a new file renamed over the log (under LOCK_EX on
        the old one, which every writer locks first and then finds replaced)."""
        assert self._fd is not None
        temp = self.root / f"{_TEMP_PREFIX}{secrets.token_hex(4)}"
        fd = os.open(temp, _OPEN_FLAGS | os.O_EXCL, 0o600)
        try:
            index: dict[str, Entry] = {}
            offset, pending = 0, bytearray()
            for key, (at, length) in sorted(self._index.items(), key=lambda item: item[1]):
                pending += os.pread(self._fd, length, at)
                index[key] = (offset, length)
                offset += length
                if len(pending) >= _CHUNK:
                    _write_all(fd, bytes(pending))
                    pending.clear()
            _write_all(fd, bytes(pending))
            os.fsync(fd)
            os.replace(temp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        try:
            fsync_dir(self.root)
            # the new file locked before the old one is let go, so nothing comes between
            # this and the caller's unlock; a process that opened the new file first
            # appends and unlocks (it waits for nothing of ours)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        os.close(self._fd)  # its lock goes with it: a writer waiting for it reopens
        stat = os.fstat(fd)
        self._fd, self._inode = fd, (stat.st_dev, stat.st_ino)
        self._index, self._end, self._live = index, offset, offset
        if stat.st_size != offset:
            self._replay(stat.st_size)  # appended by another process in between

    def _remove_stale_temps(self) -> None:
        """A compaction's file a crash left behind (under LOCK_EX no compaction is going:
        each holds it)."""
        for name in os.listdir(self.root):
            if name.startswith(_TEMP_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.root / name)

    def _migrate(self) -> None:
        """Import the record files of the older layout (flushed once, at the end), then
        remove them and the directories they leave empty.  A key the log holds already
        wins (a leftover of an import cut short)."""
        old = list(old_records(self.root))
        if not old:
            return
        batch: list[tuple[str, bytes]] = []
        size = 0
        for name, path in old:
            if name in self._index:
                continue
            batch.append((name, _line(name, _old_payload(path.read_bytes()))))
            size += len(batch[-1][1])
            if size >= _MIGRATE_BATCH:
                # in parts: records may be MiBs each
                self._write(batch, flush=False, compact=False)
                batch, size = [], 0
        self._write(batch, flush=False, compact=False)
        assert self._fd is not None
        os.fsync(self._fd)
        self._maybe_compact()
        for _, path in old:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._remove_empty_dirs({path.parent for _, path in old})
        logger.info("state directory %s: %d records moved into %s", self.root, len(old), LOG_NAME)

    def _remove_empty_dirs(self, emptied: set[Path]) -> None:
        """Remove the directories left empty; flush the ones that stay and the root, so
        the removals are durable before anything new is written (an old file found
        again later would bring back a record the log has since changed)."""
        for directory, _dirs, _files in os.walk(self.root, topdown=False):
            path = Path(directory)
            if path != self.root and not path.name.startswith("."):
                with contextlib.suppress(OSError):
                    path.rmdir()
        for path in sorted(emptied | {self.root}):
            if path.is_dir():
                fsync_dir(path)


def alive_line(line: bytes) -> bool:
    """Whether ``line`` writes a record (not a removal)."""
    return not line.endswith(b', "r": null}\n')
