"""Snapshot: one immutable revision of a configuration, as a source delivers it.

A leaf: sources build snapshots and the loader reads them
(:func:`cronstable.config.load_snapshot` makes the tree it loads from one's files);
nothing here knows how a configuration is parsed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A complete view of one revision: never a half-written checkout or a half-applied
    etcd transaction.

    ``files`` maps relative POSIX paths to bytes; ``entry`` is what the loader
    loads inside them (``""`` for every configuration file of the tree, or one
    file's path).
    """

    revision: str
    """Commit sha, etcd revision, or a digest of a local tree's contents."""
    source: str
    """A human description of where it came from (never containing credentials)."""
    files: Mapping[str, bytes] = field(repr=False)
    entry: str = ""
    outside: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Links the source did not follow because they leave the tree (path → target):
    an error when the loader would read one (see :class:`cronstable.config.MemoryTree`)."""
    read_once: bool = False
    """The one file ``entry`` was read once from a stream (standard input, a FIFO):
    nothing beside it can be read, so the loader refuses include and env_file, saying
    why (see :mod:`cronstable.config.onefile`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", MappingProxyType(dict(self.files)))
        object.__setattr__(self, "outside", MappingProxyType(dict(self.outside)))


def content_revision(files: Mapping[str, bytes]) -> str:
    """A revision for trees that have none of their own: a digest of paths and contents."""
    digest = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        digest.update(path.encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
        digest.update(str(len(data)).encode())
        digest.update(b"\0")
        digest.update(data)
    return "sha256:" + digest.hexdigest()
