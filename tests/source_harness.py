"""What the source contract tests need from each backend's test harness.

Each backend has a module ``harness_<kind>.py`` beside this one exposing
``harness(tmp_path) -> AsyncContextManager[SourceHarness]``, backed by a real
origin (a directory, a git remote served on loopback, an etcd server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from cronstable.sources.base import Source


class SourceHarness(Protocol):
    kind: str
    supports_cache: bool
    """Whether a source started while the origin is down serves its cached last good snapshot."""

    async def publish(self, files: dict[str, bytes]) -> str | None:
        """Make ``files`` the origin's whole current content; the revision, when known."""
        ...

    def source(self, cache_dir: Path) -> Source:
        """A new, unstarted source on the origin (polling, if any, at ≤ 1 s)."""
        ...

    async def stop_origin(self) -> None:
        """Make the origin unreachable (only called when supports_cache)."""
        ...
