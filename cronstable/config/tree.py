"""Where configuration files come from: a read-only tree of files.

The loader never touches the file system directly; it asks a :class:`ConfigTree`.
Paths are relative POSIX paths inside the tree (``jobs/team.yaml``); the tree's
root is the boundary that ``include`` and ``env_file`` may not leave.

* :class:`MemoryTree` holds the files of one snapshot (a git commit, an etcd
  revision) in memory: what the sources of the GitOps pipeline produce.
* :class:`DiskTree` reads a directory lazily, for ``validate``/``next`` on a path.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Mapping
from typing import BinaryIO, Protocol

YAML_SUFFIXES = (".yaml", ".yml")


class TreeError(Exception):
    """A path is outside the tree or cannot be read."""


def normalize(base_dir: str, name: str) -> str:
    """Resolve ``name`` (relative to the directory ``base_dir``) to a tree path.

    Raises :class:`TreeError` if the result would leave the tree.
    """
    if not name:
        raise TreeError("empty path")
    if name.startswith("/"):
        raise TreeError(f"{name!r} is an absolute path; paths are relative to the file naming them")
    joined = posixpath.normpath(posixpath.join(base_dir, name))
    if joined == ".." or joined.startswith("../"):
        raise TreeError(f"{name!r} leaves the configuration tree")
    return "" if joined == "." else joined


def is_loadable_name(path: str) -> bool:
    """True for ``*.yaml``/``*.yml`` and crontabs (``crontab``, ``*.crontab``) whose own
    name and every parent avoid ``_`` and ``.``."""
    parts = path.split("/")
    if any(p.startswith(("_", ".")) for p in parts):
        return False
    name = parts[-1]
    return name.endswith(YAML_SUFFIXES) or name == "crontab" or name.endswith(".crontab")


class ConfigTree(Protocol):
    """A read-only view of the files of one configuration revision."""

    def read(self, path: str) -> bytes:
        """The bytes of a file; :class:`TreeError` if absent or unreadable."""
        ...

    def is_dir(self, path: str) -> bool:
        """True if ``path`` names a directory (``""`` is the root)."""
        ...

    def config_files_below(self, path: str) -> list[str]:
        """The configuration files directory ``path`` loads, recursively, in path order.

        That is every ``*.yaml``/``*.yml``, ``crontab`` and ``*.crontab`` below it
        whose name, and the name of every directory between, starts with neither
        ``_`` nor ``.``.
        """
        ...


class MemoryTree:
    """The files of one snapshot, held in memory.

    ``outside`` names the entries a source found but did not read because they are
    links leaving the tree (path → where they lead; a directory's path ends in
    ``/``): the loader meets them as a
    :class:`TreeError` exactly when it would read them (a configuration file of a
    loaded directory, an include, an env_file), as :class:`DiskTree` does.
    """

    def __init__(
        self, files: Mapping[str, bytes], outside: Mapping[str, str] | None = None
    ) -> None:
        self._outside = dict(outside or {})
        self._files = dict(files)
        dirs: set[str] = {""}
        for name in self._files:
            parent = posixpath.dirname(name)
            while parent and parent not in dirs:
                dirs.add(parent)
                parent = posixpath.dirname(parent)
        self._dirs = frozenset(dirs)

    @property
    def files(self) -> Mapping[str, bytes]:
        return self._files

    def _leaving(self, path: str) -> TreeError | None:
        for entry, target in self._outside.items():
            link = entry.rstrip("/")
            if path == link or path.startswith(link + "/"):
                return TreeError(
                    f"{path!r} resolves outside the configuration tree "
                    f"({link} is a link to {target})"
                )
        return None

    def read(self, path: str) -> bytes:
        try:
            return self._files[path]
        except KeyError:
            if path in self._dirs:
                raise TreeError(f"{path!r} is a directory") from None
            leaving = self._leaving(path)
            if leaving is not None:
                raise leaving from None
            raise TreeError(f"{path!r} does not exist") from None

    def is_dir(self, path: str) -> bool:
        return path in self._dirs

    def config_files_below(self, path: str) -> list[str]:
        prefix = f"{path}/" if path else ""
        # a link leaving the tree under a loadable name is listed, as on disk, so that
        # reading it fails; a directory link leaving it is not walked
        return sorted(
            name
            for name in [*self._files, *(o for o in self._outside if not o.endswith("/"))]
            if name.startswith(prefix) and is_loadable_name(name[len(prefix) :])
        )


def _read_capped(fh: BinaryIO, cap: int) -> bytes:
    """At most ``cap + 1`` bytes (more than ``cap`` tells the caller it is too big).

    ``read(n)`` allocates ``n`` bytes up front, so the size asked never exceeds
    what the file holds (a 64 KiB file is not read into a 1 GiB buffer).
    """
    st = os.fstat(fh.fileno())
    if not stat.S_ISREG(st.st_mode):
        chunks: list[bytes] = []
        total = 0
        while total <= cap and (chunk := fh.read(min(1 << 20, cap + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    want = min(st.st_size, cap) + 1
    data = fh.read(want)
    if len(data) == want and want <= cap:  # it grew since fstat
        data += fh.read(cap + 1 - want)
    return data


class DiskTree:
    """A directory on disk, read lazily.  Symlinks are followed but must stay inside."""

    def __init__(self, root: str | os.PathLike[str], *, max_file_bytes: int | None = None) -> None:
        self.root = os.path.realpath(os.fspath(root))
        self.max_file_bytes = max_file_bytes
        """Read at most one byte more than this of a file (the loader refuses it then)."""

    def _real(self, path: str) -> str:
        full = os.path.join(self.root, path) if path else self.root
        real = os.path.realpath(full)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise TreeError(f"{path!r} resolves outside the configuration tree")
        return real

    def read(self, path: str) -> bytes:
        real = self._real(path)
        try:
            with open(real, "rb") as fh:
                return (
                    fh.read()
                    if self.max_file_bytes is None
                    else _read_capped(fh, self.max_file_bytes)
                )
        except IsADirectoryError:
            raise TreeError(f"{path!r} is a directory") from None
        except FileNotFoundError:
            raise TreeError(f"{path!r} does not exist") from None
        except OSError as exc:
            raise TreeError(f"cannot read {path!r}: {exc.strerror or exc}") from exc

    def is_dir(self, path: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(self._real(path)).st_mode)
        except (OSError, TreeError):
            return False

    def config_files_below(self, path: str) -> list[str]:
        found: list[str] = []
        start = os.path.join(self.root, path) if path else self.root
        seen = {self._real(path)}
        # symlinked directories are followed while they stay inside the root, as the
        # directory source does (a Kubernetes ConfigMap mount is made of symlinks)
        for dirpath, dirnames, filenames in os.walk(start, followlinks=True):
            kept = []
            for name in dirnames:
                if name.startswith(("_", ".")):
                    continue  # hidden and private directories (.git, _templates)
                real = os.path.realpath(os.path.join(dirpath, name))
                inside = real == self.root or real.startswith(self.root + os.sep)
                if inside and real not in seen:
                    seen.add(real)
                    kept.append(name)
            dirnames[:] = kept
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/")
            for name in filenames:
                if is_loadable_name(name):
                    found.append(f"{rel}/{name}" if rel else name)
        return sorted(found)
