"""The contract's harness for a local directory (the origin is the directory itself)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from cronstable.snapshot import content_revision
from cronstable.sources.base import Source
from cronstable.sources.local import LocalDirSource


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a hidden temporary file beside ``path``, then rename it over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    """Make ``root`` hold exactly ``files``: write each atomically, delete the rest."""
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        write_atomically(root / name, data)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        here = Path(dirpath)
        for name in filenames:
            if (here / name).relative_to(root).as_posix() not in files:
                (here / name).unlink()
        for name in dirnames:
            sub = here / name
            if not sub.is_symlink() and not any(sub.iterdir()):
                sub.rmdir()


class LocalHarness:
    kind = "local"
    supports_cache = False

    def __init__(self, root: Path) -> None:
        self.root = root

    async def publish(self, files: dict[str, bytes]) -> str | None:
        await asyncio.to_thread(make_tree, self.root, files)
        return content_revision(files)

    def source(self, cache_dir: Path) -> Source:
        return LocalDirSource(self.root)

    async def stop_origin(self) -> None:
        raise NotImplementedError("a local directory has no cache to fall back on")


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[LocalHarness]:
    root = tmp_path / "origin"
    root.mkdir()
    yield LocalHarness(root)
