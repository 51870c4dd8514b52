"""The source contract's git backend: a bare repository served by ``git daemon`` on loopback.

(Smart HTTP through ``git http-backend`` is covered by ``test_sources_git.py``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from git_server import GitDaemon, WorkRepo

from cronstable.sources.base import Source
from cronstable.sources.git.source import GitSource
from cronstable.sources.git.spec import GitSpec

INTERVAL = 0.5


class GitHarness:
    kind = "git"
    supports_cache = True

    def __init__(self, repo: WorkRepo, daemon: GitDaemon) -> None:
        self.repo = repo
        self.daemon = daemon
        self.url = daemon.url(repo.bare.name)

    async def publish(self, files: dict[str, bytes]) -> str | None:
        """Commit exactly ``files`` on ``main``, push; the commit's sha."""

        def commit_and_push() -> str:
            sha = self.repo.commit(files)
            self.repo.push("HEAD:refs/heads/main")
            return sha

        return await asyncio.to_thread(commit_and_push)

    def source(self, cache_dir: Path) -> Source:
        return GitSource(GitSpec(self.url, None, "", INTERVAL), cache_dir=cache_dir)

    async def stop_origin(self) -> None:
        await asyncio.to_thread(self.daemon.stop)


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[GitHarness]:
    root = tmp_path / "origin"
    root.mkdir()
    repo = WorkRepo.create(root, "config")
    daemon = GitDaemon(root)
    await asyncio.to_thread(daemon.start)
    try:
        yield GitHarness(repo, daemon)
    finally:
        await asyncio.to_thread(daemon.stop)
