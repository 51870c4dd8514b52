"""The two sides of ``cronstable diff``, resolved from what the user typed.

Resolution is a list of (recognise, open) pairs tried in order, so new kinds of
side plug in without touching the command (the HTTP API will add a running
daemon's URL).  Each kind imports only what it needs: a path needs neither
asyncio nor aiohttp; a git side needs dulwich; an etcd side needs aiohttp.

* ``git:REPO@REF[:SUBDIR]`` — a local repository at a ref (``git:.@origin/main``);
* a source spec: ``git+https://…``, ``git+ssh://…``, ``git+file://…``,
  ``git://…``, ``etcd://HOST:PORT/PREFIX/`` — its current revision;
* anything else: a file or directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cronstable.config import DesiredState, Limits
from cronstable.config.limits import DEFAULT_LIMITS
from cronstable.errors import CronstableError


class SideError(CronstableError):
    """A side cannot be read (not its configuration being invalid: that is a ConfigError)."""


@dataclass(frozen=True, slots=True)
class Side:
    label: str
    revision: str | None
    load: Callable[[], DesiredState]
    """Raises ConfigError (invalid configuration) or SideError (cannot read)."""


Recogniser = Callable[[str], bool]
Opener = Callable[[str, Limits], Side]
"""Opens what the user typed; files and snapshots are read within the limits given."""


def _is_local_git(text: str) -> bool:
    return text.startswith("git:") and not text.startswith("git://")


def _open_local_git(text: str, limits: Limits) -> Side:
    repo, sep, rest = text[len("git:") :].partition("@")
    if not sep or not repo or not rest:
        raise SideError(f"{text!r}: expected git:REPO@REF[:SUBDIR], e.g. git:.@origin/main")
    ref, _, subdir = rest.partition(":")
    from cronstable.config import load
    from cronstable.sources.base import SourceError
    from cronstable.sources.factory import local_repo_snapshot

    try:
        snapshot = local_repo_snapshot(repo, ref, subdir.strip("/"), limits)
    except SourceError as exc:
        raise SideError(f"{text}: {exc}") from exc
    return Side(
        text, snapshot.revision, lambda: load(snapshot.tree(), snapshot.entry, limits=limits)
    )


def _is_source_spec(text: str) -> bool:
    from cronstable.sources.factory import is_remote_spec

    return is_remote_spec(text)


def _open_source_spec(text: str, limits: Limits) -> Side:
    import asyncio
    import tempfile
    from pathlib import Path

    from cronstable.config import load
    from cronstable.sources.base import SourceError
    from cronstable.sources.factory import open_source

    async def first() -> tuple[str, object]:
        with tempfile.TemporaryDirectory(prefix="cronstable-diff-") as cache:
            source = open_source(text, cache_dir=Path(cache), limits=limits)
            try:
                await source.start()
                snapshot = await anext(aiter(source.watch()))
            finally:
                await source.close()
        return snapshot.revision, snapshot

    try:
        revision, snapshot = asyncio.run(first())
    except SourceError as exc:
        raise SideError(f"{text}: {exc}") from exc
    from cronstable.snapshot import Snapshot

    assert isinstance(snapshot, Snapshot)
    return Side(text, revision, lambda: load(snapshot.tree(), snapshot.entry, limits=limits))


def _open_path(text: str, limits: Limits) -> Side:
    import os

    from cronstable.config import load_path

    if not os.path.exists(text):
        raise SideError(f"{text}: no such file or directory")
    return Side(text, None, lambda: load_path(text, limits))


RESOLVERS: list[tuple[Recogniser, Opener]] = [
    (_is_local_git, _open_local_git),
    (_is_source_spec, _open_source_spec),
]


def register(recognise: Recogniser, open_side: Opener) -> None:
    """Add a kind of side, tried before the built-in ones."""
    RESOLVERS.insert(0, (recognise, open_side))


def resolve(text: str, limits: Limits = DEFAULT_LIMITS) -> Side:
    for recognise, open_side in RESOLVERS:
        if recognise(text):
            return open_side(text, limits)
    return _open_path(text, limits)
