"""The state store in a directory: the node's ``--state-dir``, in one of two layouts.

**A node's own directory** (``state.shared: false``, the default): every record is a
line of one append-only file, ``<dir>/records.log`` (:class:`~cronstable.state.journal.RecordLog`),
so a burst of runs writes no new files (a new inode is costly on some filesystems).  A
directory of the older layout below is imported into it on first use.

**A shared directory** (``state.shared: true``, nodes on a share): one JSON file per
record, ``nodes/n1/retries/backup`` is ``<dir>/nodes/n1/retries/backup.json``.  A write goes
to a temporary file beside the record (``.tmp-*``), is flushed to disk, then renamed
over the record, and the directory is flushed too, so a crash or a power cut leaves
the old record or the new one.  A running run's record is renamed the same way but
not flushed (:func:`~cronstable.state.base.boot_scoped`: it is only read within the
boot that wrote it, and a daemon that dies leaves it in the page cache).
:meth:`FilesystemStore.create` links the temporary file to the record's name, which
fails when one exists: put-if-absent without a lock (on a share too, over NFS v3+
and SMB, where a hard link is atomic).

Directories are made 0700.  The blocking calls run in a thread, each bounded by
:data:`~cronstable.state.base.OP_TIMEOUT`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from cronstable.state.base import (
    OP_TIMEOUT,
    Record,
    StateError,
    StateStore,
    boot_scoped,
    decode,
    encode,
)
from cronstable.state.journal import RecordLog, fsync_dir, make_dirs

_T = TypeVar("_T")
SUFFIX = ".json"
IMPORT_TIMEOUT = 600.0
"""Seconds the first check of a private directory may take: it may import a directory
of the older layout (100,000 jobs leave hundreds of thousands of files), which the
store's usual bound would cut short and the revision naming it be rejected for."""


class FilesystemStore(StateStore):
    backend = "filesystem"

    def __init__(
        self, root: str | Path, *, timeout: float = OP_TIMEOUT, shared: bool = False
    ) -> None:
        self.root = Path(root)
        self.timeout = timeout
        self.shared = shared
        """Whether every node uses this directory (``state.shared``: a share they all
        mount), so their records meet in it as on etcd: one file per record then,
        otherwise one log (the module docstring)."""
        self._log = None if shared else RecordLog(self.root)

    def __repr__(self) -> str:
        return f"FilesystemStore({str(self.root)!r})"

    async def _run(self, what: str, call: Callable[[], _T], bound: float | None = None) -> _T:
        bound = self.timeout if bound is None else bound
        try:
            return await asyncio.wait_for(asyncio.to_thread(call), timeout=bound)
        except TimeoutError as exc:
            raise StateError(f"{what} in {self.root}: no answer in {bound:g} s") from exc
        except OSError as exc:
            raise StateError(f"{what} in {self.root}: {exc.strerror or exc}") from exc

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/")).with_name(key.rsplit("/", 1)[-1] + SUFFIX)

    # ------------------------------------------------------------ blocking halves

    def _write_temp(self, path: Path, record: Record, flush: bool = True) -> str:
        make_dirs(path.parent)
        fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(encode(record))
                handle.flush()
                if flush:
                    os.fsync(handle.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        return temp

    def _put(self, key: str, record: Record, dirs: set[Path] | None = None) -> None:
        """``dirs``: where to note the directory to flush, instead of flushing it now."""
        path = self._path(key)
        flush = not boot_scoped(key)  # a running run's record is not flushed (base.py)
        temp = self._write_temp(path, record, flush)
        try:
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        if flush:
            if dirs is None:
                fsync_dir(path.parent)
            else:
                dirs.add(path.parent)

    def _create(self, key: str, record: Record) -> bool:
        path = self._path(key)
        temp = self._write_temp(path, record)
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        fsync_dir(path.parent)
        return True

    def _apply(self, changes: Sequence[tuple[str, Record | None]]) -> None:
        """Each change, and each directory they renamed into flushed once, at the end."""
        dirs: set[Path] = set()
        try:
            for key, record in changes:
                if record is None:
                    self._delete(key, dirs)
                else:
                    self._put(key, record, dirs)
        finally:
            for directory in sorted(dirs):
                fsync_dir(directory)

    def _get(self, key: str) -> Record | None:
        try:
            return decode(self._path(key).read_bytes())
        except FileNotFoundError:
            return None

    def _delete(self, key: str, dirs: set[Path] | None = None) -> bool:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        if not boot_scoped(key):
            if dirs is None:
                fsync_dir(path.parent)
            else:
                dirs.add(path.parent)
        return True

    def _list(self, prefix: str) -> dict[str, Record | None]:
        found: dict[str, Record | None] = {}
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root.joinpath(*base.split("/")) if base else self.root
        if not start.is_dir():
            return found
        for directory, dirs, files in os.walk(start):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in files:
                if name.startswith(".") or not name.endswith(SUFFIX):
                    continue
                path = Path(directory, name)
                relative = path.relative_to(self.root).as_posix()[: -len(SUFFIX)]
                if not relative.startswith(prefix):
                    continue
                try:
                    found[relative] = decode(path.read_bytes())
                except FileNotFoundError:
                    continue  # removed while listed
        return dict(sorted(found.items()))

    def _check(self) -> None:
        make_dirs(self.root)
        probe = self._write_temp(self.root / "probe", {})
        os.unlink(probe)

    # ------------------------------------------------------------ the store

    async def check(self) -> None:
        if self._log is not None:
            # the first use may import the older layout: not bounded as one write is
            first = not self._log.path.exists()
            await self._run(
                "cannot write records",
                self._log.check,
                max(self.timeout, IMPORT_TIMEOUT) if first else None,
            )
        else:
            await self._run("cannot write records", self._check)

    async def get(self, key: str) -> Record | None:
        read = self._log.get if self._log is not None else self._get
        return await self._run(f"cannot read {key}", lambda: read(key))

    async def put(self, key: str, record: Record) -> None:
        write = self._log.put if self._log is not None else self._put
        await self._run(f"cannot write {key}", lambda: write(key, record))

    async def create(self, key: str, record: Record) -> bool:
        write = self._log.create if self._log is not None else self._create
        return await self._run(f"cannot write {key}", lambda: write(key, record))

    async def delete(self, key: str) -> bool:
        remove = self._log.delete if self._log is not None else self._delete
        return await self._run(f"cannot remove {key}", lambda: remove(key))

    async def apply(self, changes: Sequence[tuple[str, Record | None]]) -> None:
        """Every change in one call of the thread (a burst of runs costs one round; in
        the log, one write and one flush)."""
        what = f"cannot write {changes[0][0]}" if len(changes) == 1 else "cannot write records"
        write = self._log.apply if self._log is not None else self._apply
        await self._run(what, lambda: write(changes))

    async def list(self, prefix: str = "") -> dict[str, Record | None]:
        read = self._log.list if self._log is not None else self._list
        return await self._run(f"cannot list {prefix or 'the records'}", lambda: read(prefix))

    async def close(self) -> None:
        if self._log is not None:
            await self._run("cannot close the records", self._log.close)
