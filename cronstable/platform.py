"""Every OS-specific decision lives here (leaf module: imports nothing of cronstable)."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection
from dataclasses import dataclass
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


def exec_shim_supported() -> bool:
    """Whether jobs are started through the exec shim (:mod:`cronstable.runtime.exec_shim`).

    On every POSIX system, where its C source builds (fork, vfork, wait4).  It matters
    on Linux, whose exec charges a program the peak resident size of the process that
    exec'd it (the daemon's, without the shim); elsewhere it costs one small exec.
    """
    return os.name == "posix"


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


# ------------------------------------------------------------- durable state

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This boot of the OS (Linux: a random UUID made at boot); None where there is none,
    and then an ``@reboot`` job runs at every daemon start and no run is adopted."""
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22), so a
    recorded pid can be told from a reused one; None for no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or ")"
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 counted from 1, after pid and comm
    except (IndexError, ValueError):
        return None


def default_state_dir() -> str:
    """/var/lib/cronstable as root, $XDG_STATE_HOME/cronstable (~/.local/state) otherwise."""
    if os.geteuid() == 0:
        return "/var/lib/cronstable"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "cronstable")


# ------------------------------------------------------------- the API's local socket

ROOT_API_SOCKET = "/run/cronstable/api.sock"
"""Where the CLI looks first as root (a system daemon's ``unix://`` listener)."""
RUNTIME_DIR_PLACEHOLDER = "${XDG_RUNTIME_DIR}"
"""The one variable a ``unix://`` listen path may start with (expanded on the node)."""
USER_SOCKET_NAME = "cronstable.sock"


def fallback_runtime_dir() -> str:
    """``<tmp>/cronstable-<uid>``: the runtime directory when ``XDG_RUNTIME_DIR`` is unset."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"cronstable-{os.geteuid()}")


def runtime_dir() -> str:
    """``$XDG_RUNTIME_DIR``, else :func:`fallback_runtime_dir` (tmux's rule)."""
    return os.environ.get("XDG_RUNTIME_DIR") or fallback_runtime_dir()


def expand_runtime_dir(path: str) -> str:
    """``path`` with a leading ``${XDG_RUNTIME_DIR}`` replaced by :func:`runtime_dir`."""
    if path.startswith(RUNTIME_DIR_PLACEHOLDER):
        return runtime_dir() + path[len(RUNTIME_DIR_PLACEHOLDER) :]
    return path


def ensure_socket_dir(path: str) -> None:
    """Create the fallback runtime directory (mode 0700) when ``path`` is a socket in it.

    Raises OSError when it exists but is not a directory of ours closed to
    others (another user could have made it first in the shared temp dir).
    """
    directory = fallback_runtime_dir()
    if os.path.dirname(path) != directory:
        return
    import stat

    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(directory)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise PermissionError(
            f"{directory} is not a directory of user {os.geteuid()} closed to others"
        )


def default_api_sockets() -> list[str]:
    """Where ``cronstable status`` and friends look for a local daemon, in order."""
    user = os.path.join(runtime_dir(), USER_SOCKET_NAME)
    return [ROOT_API_SOCKET, user] if os.geteuid() == 0 else [user]


# ------------------------------------------------------------- the runs' channels

SYSTEM_RUNTIME_DIR = "/run/cronstable"
"""The daemon's runtime directory as root (systemd's ``RuntimeDirectory=cronstable``)."""
UNIX_PATH_MAX = 104 if sys.platform == "darwin" else 108
"""Bytes of a unix socket's path, its final NUL included (``sun_path``)."""


def run_channel_dir(runtime_dir_given: str | None = None) -> str:
    """The directory of the runs' sockets (see :mod:`cronstable.channel`): ``runs`` in the
    daemon's own runtime directory, which is ``runtime_dir_given`` (``--runtime-dir``),
    else systemd's ``$RUNTIME_DIRECTORY`` (the first, when it names several), else
    :data:`SYSTEM_RUNTIME_DIR` as root; otherwise ``cronstable-runs`` in the user's
    :func:`runtime_dir` (``$XDG_RUNTIME_DIR``, shared with other programs)."""
    own = runtime_dir_given or os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if not own and os.geteuid() == 0:
        own = SYSTEM_RUNTIME_DIR
    if own:
        return os.path.join(own, "runs")
    return os.path.join(runtime_dir(), "cronstable-runs")


def private_dir(path: str, mode: int) -> None:
    """Make directory ``path`` (its parents 0755 as needed) with ``mode``, or take the one
    there: it must be a directory of this user that no one else may write to, and gets
    ``mode``.  Raises OSError (PermissionError: not one of ours closed to others)."""
    import stat

    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, 0o755, exist_ok=True)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise PermissionError(f"{path} is not a directory of user {os.geteuid()} closed to others")
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


# ------------------------------------------------------------- file descriptors

FD_DIRS = ("/proc/self/fd", "/dev/fd")
"""Where this process's open descriptors are listed (Linux, then macOS and the BSDs)."""


@dataclass(frozen=True, slots=True)
class OpenFilesLimit:
    """RLIMIT_NOFILE before and after :func:`raise_open_files_limit`."""

    soft_before: int
    soft: int
    hard: int
    error: str = ""
    """Why the soft limit could not be raised ("" when it was, or needed not be)."""


def raise_open_files_limit() -> OpenFilesLimit:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (as far as the OS lets).

    Children would inherit the raised soft limit (a program that closes every
    possible descriptor gets slow with a very high one), so the first raise records
    the soft limit the process was started with for :func:`jobs_open_files_limit`:
    jobs are given that one back.  An unlimited hard limit (macOS) is tried, then
    ``OPEN_MAX`` (10240) there."""
    import resource

    global _jobs_open_files
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return OpenFilesLimit(soft, soft, hard)
    targets = [hard] if hard != resource.RLIM_INFINITY else [hard, 10240]
    error = ""
    for target in targets:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            error = str(exc)
            continue
        if _jobs_open_files is None:
            _jobs_open_files = soft
        return OpenFilesLimit(soft, target, hard)
    return OpenFilesLimit(soft, soft, hard, error)


_jobs_open_files: int | None = None
"""The soft open-files limit the process started with, once it raised its own (a fact
about the process, recorded once, like the limit itself)."""


def jobs_open_files_limit() -> int | None:
    """The soft open-files limit jobs get: the one the daemon started with, or None when
    the daemon did not raise its own (jobs then inherit it as it is)."""
    return _jobs_open_files


def open_files_limit() -> int:
    """The soft RLIMIT_NOFILE now (a very large number when unlimited)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else sys.maxsize


def open_descriptors() -> int | None:
    """How many descriptors this process has open; None where the OS does not list them.

    O(open descriptors): a listing of ``/proc/self/fd``, about 0.2 ms for 1,000.  At
    the limit (the listing itself cannot open its directory) the answer is the limit."""
    import errno

    for directory in FD_DIRS:
        try:
            return len(os.listdir(directory)) - 1  # the listing's own descriptor
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                return open_files_limit()
            continue
    return None


def free_descriptors() -> int | None:
    """Descriptors this process may still open (limit minus open); None when unknown.

    What a spawn can consult before it makes its pipes; the web listeners stop
    accepting while this is below ``web.fdReserve``."""
    count = open_descriptors()
    return None if count is None else max(0, open_files_limit() - count)
