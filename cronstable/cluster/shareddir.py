"""A shared directory's lock and record files, for every cluster store kept in one
(the leadership of :mod:`.filesystem`, the concurrency slots of :mod:`.slots_filesystem`).

* ``.lock`` is a POSIX record lock (``lockf``, which NFS forwards to its lock
  manager and which the kernel drops when the holder dies), taken only for the
  few reads and writes of one round.  Daemons in one process (tests) and a round
  still running in its thread after its owner stopped also take a thread lock
  per directory, since a record lock excludes other processes only.
* A record is a JSON object with ``"version": 1`` written whole: to a temporary
  file of the writer's own, flushed, then renamed over the old one.  A torn or
  foreign file reads as absent.
* ``expires`` in a record is a wall time; host clocks must agree within
  :data:`CLOCK_SKEW`, and a contender waits that long past an expiry.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CLOCK_SKEW = 1.0
"""Seconds host clocks may disagree; a contender waits this long past an expiry."""
FORMAT_VERSION = 1
LOCK_POLL = 0.02


class LockBusy(TimeoutError):
    """The directory's lock was not had within the time allowed; says where.  A timeout:
    the directory (or whoever holds its lock) does not answer in time."""


def usable(path: Path, timeout: float, subdirectories: tuple[str, ...] = ()) -> None:
    """Prove ``path`` a directory this daemon can use: it exists (FileNotFoundError when
    not: its share is not mounted yet), is a directory (NotADirectoryError), holds
    ``subdirectories`` (made when missing) and its lock can be had within ``timeout``
    (:class:`LockBusy`).  Other OSErrors say why it cannot be written."""
    if not stat.S_ISDIR(os.stat(path).st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    for sub in subdirectories:
        (path / sub).mkdir(exist_ok=True)
    with locked(path, timeout):
        pass


def describe(path: Path, exc: OSError) -> str:
    """What went wrong with the shared directory ``path``, in words."""
    if isinstance(exc, LockBusy):
        return str(exc)
    named = str(exc.filename) if exc.filename is not None else str(path)
    if isinstance(exc, FileNotFoundError) and named == str(path):
        return f"{path} does not exist (is its share mounted?)"
    if isinstance(exc, NotADirectoryError) and named == str(path):
        return f"{path} is not a directory"
    return f"{path}: {exc.strerror or exc}"


@contextlib.contextmanager
def locked(path: Path, timeout: float) -> Iterator[None]:
    """Hold ``path/.lock`` (and this process's lock of ``path``); :class:`LockBusy` when
    it is not had within ``timeout`` seconds, OSError when the directory cannot be used."""
    deadline = time.monotonic() + timeout
    local = _local_lock(path)
    if not local.acquire(timeout=timeout):
        raise LockBusy(f"{path}/.lock is held too long")
    try:
        with _lockf(path, deadline):
            yield
    finally:
        local.release()


@contextlib.contextmanager
def _lockf(path: Path, deadline: float) -> Iterator[None]:
    fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LockBusy(f"{path}/.lock is held too long") from None
                time.sleep(LOCK_POLL)
        yield
    finally:
        os.close(fd)  # drops the lock


_LOCAL_LOCKS: dict[Path, threading.Lock] = {}
_LOCAL_LOCKS_GUARD = threading.Lock()


def _local_lock(path: Path) -> threading.Lock:
    """The lock of the shared directory ``path`` within this process (one per directory)."""
    with _LOCAL_LOCKS_GUARD:
        return _LOCAL_LOCKS.setdefault(path.resolve(), threading.Lock())


def live(record: dict[str, Any], now: float) -> bool:
    """Whether ``record``'s ``expires`` is after ``now`` (wall time)."""
    try:
        return float(record.get("expires", 0)) > now
    except (TypeError, ValueError):
        return False


def read(path: Path) -> dict[str, Any] | None:
    """The record in ``path``; None when there is none, or it is torn or foreign."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # a torn or foreign file counts as absent (it is replaced whole)
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        return None
    return data


def write(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` with ``data`` whole (``version`` is the caller's to set)."""
    # a name of its own per writer: two writers of one name would tear each other's file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as out:
        out.write(json.dumps(data).encode())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
