"""The configuration format and its loader (pure: no daemon imports)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cronstable.config.desired import DesiredState, Job, Pool
from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.config.loader import LoadCache, load
from cronstable.config.tree import ConfigTree, DiskTree, MemoryTree
from cronstable.errors import ConfigError, Problem

if TYPE_CHECKING:
    from cronstable.snapshot import Snapshot

__all__ = [
    "ConfigError",
    "ConfigTree",
    "DesiredState",
    "DiskTree",
    "Job",
    "Limits",
    "LoadCache",
    "MemoryTree",
    "Pool",
    "Problem",
    "load",
    "load_path",
    "load_snapshot",
]


def load_path(path: str, limits: Limits = DEFAULT_LIMITS) -> DesiredState:
    """Load a configuration file or directory from disk.

    Problems name files as the user would (``PATH/jobs/a.yaml``), not relative
    to the tree root.  A file over ``limits.max_file_bytes`` is refused without
    being read whole.
    """
    if os.path.isdir(path):
        root, entry = path, ""
    elif os.path.exists(path):
        root, entry = os.path.dirname(path) or ".", os.path.basename(path)
    else:
        raise ConfigError([Problem(path, None, None, (), "no such file or directory")])
    tree = DiskTree(root, max_file_bytes=limits.max_file_bytes)
    return load(tree, entry, display_root=root, limits=limits)


def load_snapshot(
    snapshot: Snapshot, *, cache: LoadCache | None = None, limits: Limits = DEFAULT_LIMITS
) -> DesiredState:
    """Load a source's snapshot: its files as a :class:`MemoryTree` (the links it did not
    follow among them), from its ``entry``; a read-once snapshot as its one file alone."""
    tree: MemoryTree
    if snapshot.read_once:
        from cronstable.config.onefile import OneFileTree

        tree = OneFileTree(snapshot.entry, snapshot.files[snapshot.entry])
    else:
        tree = MemoryTree(snapshot.files, snapshot.outside)
    return load(tree, snapshot.entry, cache=cache, limits=limits)
