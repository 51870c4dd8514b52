"""A configuration that can be read only once: standard input, a FIFO, ``/dev/stdin``.

``cronstable validate -``, ``next``, ``job-set-id``, either side of ``diff`` and
``run -c -`` read such a path once, to its end, as one configuration file.  Nothing
else can be read beside it (it has no directory), so ``include`` and ``env_file``
are refused with an error saying why.

Read-once paths: ``-`` (standard input), ``/dev/stdin`` and ``/dev/fd/N`` whatever
they name, and any path that is a FIFO, a terminal or another character device,
or a socket.
"""

from __future__ import annotations

import os
import stat
import sys

from cronstable.config.desired import DesiredState
from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.config.loader import load
from cronstable.config.tree import MemoryTree, TreeError
from cronstable.errors import ConfigError, Problem

STDIN = "-"


def is_read_once(path: str) -> bool:
    """True when ``path`` gives its bytes once (see the module documentation)."""
    if path == STDIN or path == "/dev/stdin" or path.startswith("/dev/fd/"):
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def display_name(path: str) -> str:
    """How problems name the configuration: ``<stdin>`` for ``-``, else the path."""
    return "<stdin>" if path == STDIN else path


def read_once(path: str, max_bytes: int = DEFAULT_LIMITS.max_file_bytes) -> bytes:
    """What ``path`` gives up to its end (a FIFO waits for a writer to open it), but
    at most ``max_bytes`` + 1 bytes: one past the file cap, so the loader refuses it
    without the whole stream ever being held.

    Raises OSError when it cannot be opened or read.
    """
    if path == STDIN:
        return sys.stdin.buffer.read(max_bytes + 1)
    with open(path, "rb") as stream:
        return stream.read(max_bytes + 1)


class OneFileTree(MemoryTree):
    """A tree of one file and nothing beside it: every other read is refused, saying why."""

    def __init__(self, name: str, data: bytes) -> None:
        super().__init__({name: data})
        self.name = name

    def read(self, path: str) -> bytes:
        if path == self.name:
            return super().read(path)
        raise TreeError(
            f"{self.name} is read once, as one file on its own, so include and env_file "
            "cannot be used with it (give a directory or a file on disk for that)"
        )

    def is_dir(self, path: str) -> bool:
        return False

    def config_files_below(self, path: str) -> list[str]:
        return []


def load_bytes(name: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> DesiredState:
    """Load ``data`` as the one configuration file ``name``; raises ConfigError."""
    if not data:
        raise ConfigError(
            [Problem(name, None, None, (), "read no configuration (it gave no bytes)")]
        )
    return load(OneFileTree(name, data), name, limits=limits)


def load_read_once(path: str, limits: Limits = DEFAULT_LIMITS) -> DesiredState:
    """Read ``path`` once and load it as one file; raises ConfigError."""
    name = display_name(path)
    try:
        data = read_once(path, limits.max_file_bytes)
    except OSError as exc:
        raise ConfigError([Problem(name, None, None, (), exc.strerror or str(exc))]) from exc
    return load_bytes(name, data, limits)
