"""The exec shim: the small C program (``shim/cronstable-exec.c``) jobs are started from.

On Linux an exec charges the new program, as its peak resident size, the
memory of the process that exec'd it: a command spawned straight from the
daemon would report the daemon's peak (hundreds of MB after a busy moment) as
its own ``maxRss``.  So the daemon spawns the shim, a few hundred KiB, with
``[shim, REPORT_FD, IDS, NOFILE, *argv]``; the shim starts the command in a
session of its own (giving it back the open-files limit the daemon started with,
and taking the job's user and groups first), reaps it, and reports on the pipe
``REPORT_FD``:

* ``started PID``: the command runs, as PID (its own session and process group);
* ``failed ERRNO STAGE``: it could not start (``STAGE`` ``exec``: the command
  itself; ``setup``: the session, the ids, the fork); the shim exits 127;
* ``ended MAXRSS``: it exited; ``MAXRSS`` is its ``ru_maxrss`` (it and what it
  reaped).  The shim then exits as the command did (code or signal), so the
  daemon's ``wait4`` of the shim gives the exit status and the CPU time.

The shim is built when cronstable is installed (``setup.py``; ``make`` in a
checkout).  Without it (no C compiler there) jobs are spawned directly, as
before, and :func:`warn_if_missing` says once, at start, what that costs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from cronstable.platform import exec_shim_supported

logger = logging.getLogger(__name__)

SHIM_NAME = "cronstable-exec"
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")
SHIM_SOURCE = os.path.join(SHIM_DIR, SHIM_NAME + ".c")
FAILED_RETURNCODE = 127
"""The shim's exit code when the command could not start."""


@lru_cache(maxsize=1)
def shim_path() -> str | None:
    """The built shim beside its source, or None (not built, or not a POSIX system)."""
    path = os.path.join(SHIM_DIR, SHIM_NAME)
    if exec_shim_supported() and os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return None


def warn_if_missing(path: str | None) -> None:
    """One WARNING when jobs will be spawned without the shim (``path`` None)."""
    if path is not None or not exec_shim_supported():
        return
    logger.warning(
        "the exec shim %s is not built (no C compiler when cronstable was installed?): "
        "jobs are spawned directly, and each run's maxRss then includes the daemon's own "
        "memory at the spawn; reinstall cronstable with a C compiler (cc) at hand to fix it",
        os.path.join(SHIM_DIR, SHIM_NAME),
    )


def identity_argument(identity: tuple[int, int, Sequence[int]] | None) -> str:
    """The shim's IDS argument: ``-`` (keep the daemon's ids) or ``UID:GID:G1,G2``."""
    if identity is None:
        return "-"
    uid, gid, groups = identity
    return f"{uid}:{gid}:{','.join(str(g) for g in groups)}"


def nofile_argument(limit: int | None) -> str:
    """The shim's NOFILE argument: ``-`` (keep the inherited limit) or the soft limit."""
    return "-" if limit is None else str(limit)


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    start_ticks: int | None = None
    """When the command started, in clock ticks since boot (``/proc/PID/stat`` field 22),
    read by the shim; None from a shim without ``/proc`` (or built before it said so)."""


@dataclass(frozen=True, slots=True)
class Failed:
    errno: int
    stage: str
    """``exec`` (the command itself could not be executed) or ``setup``."""

    def error(self, argv0: str) -> OSError:
        """What :class:`subprocess.Popen` raises for the same failure."""
        message = os.strerror(self.errno)
        if self.stage == "exec":
            return OSError(self.errno, message, argv0)
        return OSError(self.errno, message)


def parse_first(line: bytes) -> Started | Failed | None:
    """The shim's first line; None when it is not one (a broken shim)."""
    words = line.split()
    try:
        if len(words) in (2, 3) and words[0] == b"started":
            return Started(int(words[1]), int(words[2]) if len(words) == 3 else None)
        if len(words) == 3 and words[0] == b"failed" and words[2] in (b"exec", b"setup"):
            return Failed(int(words[1]), words[2].decode())
    except ValueError:
        return None
    return None


def parse_ended(lines: Sequence[bytes]) -> int | None:
    """``ru_maxrss`` from the shim's ``ended`` line among ``lines``; None without one."""
    for line in lines:
        words = line.split()
        if len(words) == 2 and words[0] == b"ended":
            try:
                value = int(words[1])
            except ValueError:
                return None
            return value if value >= 0 else None
    return None
