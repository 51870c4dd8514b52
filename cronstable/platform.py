"""Every OS-specific decision lives here (leaf module: imports nothing of cronstable)."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection
from datetime import UTC, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DEFAULT_CONFIG_PATH = "/etc/cronstable.d"
DEFAULT_SHELL = "/bin/sh"


@lru_cache(maxsize=1)
def local_timezone() -> tzinfo:
    """The daemon's local zone, with its DST rules (not just today's offset).

    ``TZ`` wins, then ``/etc/localtime``; UTC when neither names a zone.
    """
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        target = os.path.realpath("/etc/localtime")
        marker = "/zoneinfo/"
        if marker in target:
            return ZoneInfo(target.split(marker, 1)[1])
        with open("/etc/localtime", "rb") as fh:
            return ZoneInfo.from_file(fh, key="localtime")
    except (OSError, ZoneInfoNotFoundError, ValueError):
        return UTC


def pipe_holders(inodes: Collection[int]) -> list[int]:
    """Pids of the processes, other than this one, that hold a pipe with one of ``inodes`` open.

    Linux answers from ``/proc/*/fd``; a process whose descriptors this user
    cannot read (another user's, as non-root) is not seen.  Elsewhere: ``[]``.
    Blocking (it reads every process's descriptor table): call it from a thread.
    """
    wanted = {f"pipe:[{inode}]" for inode in inodes}
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found: list[int] = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # exited meanwhile, or not ours to look at
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in wanted:
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return sorted(found)


def maxrss_bytes(ru_maxrss: int) -> int:
    """``ru_maxrss`` of :func:`os.wait4` in bytes: Linux (and the BSDs) count KiB, macOS bytes."""
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024


def pidfd_open(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once it exits), or None where the OS has none.

    Linux 5.3 and later; elsewhere the caller waits for the child in a thread.
    """
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:  # ENOSYS on an old kernel, or a seccomp filter saying no
        return None
    return fd
