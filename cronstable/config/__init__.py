"""The configuration format and its loader (pure: no daemon imports)."""

from __future__ import annotations

import os

from cronstable.config.desired import DesiredState, Job
from cronstable.config.loader import LoadCache, load
from cronstable.config.tree import ConfigTree, DiskTree, MemoryTree
from cronstable.errors import ConfigError, Problem

__all__ = [
    "ConfigError",
    "ConfigTree",
    "DesiredState",
    "DiskTree",
    "Job",
    "LoadCache",
    "MemoryTree",
    "Problem",
    "load",
    "load_path",
]


def load_path(path: str) -> DesiredState:
    """Load a configuration file or directory from disk.

    Problems name files as the user would (``PATH/jobs/a.yaml``), not relative
    to the tree root.
    """
    if os.path.isdir(path):
        root, entry = path, ""
    elif os.path.exists(path):
        root, entry = os.path.dirname(path) or ".", os.path.basename(path)
    else:
        raise ConfigError([Problem(path, None, None, (), "no such file or directory")])
    return load(DiskTree(root), entry, display_root=root)
