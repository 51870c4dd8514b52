"""A configuration as the user typed it: the sides of ``cronstable diff``, and what
``validate``, ``next`` and ``job-set-id`` read.

Resolution is a list of (recognise, open) pairs tried in order, so new kinds of
side plug in without touching the commands (the HTTP API will add a running
daemon's URL).  Each kind imports only what it needs: a path needs neither
asyncio nor aiohttp; a git side needs dulwich; an etcd side needs aiohttp.

* ``git:REPO@REF[:SUBDIR]`` — a local repository at a ref (``git:.@origin/main``);
* a source spec, anything with ``SCHEME://``: ``git+https://…``, ``git+ssh://…``,
  ``git+file://…``, ``git://…``, ``etcd://HOST:PORT/PREFIX/`` — its current
  revision (an unknown scheme is an error, not a path);
* ``http://…``, ``https://…``, ``unix:///…`` — a running daemon's applied
  configuration (``cli/remote.py``, registered below);
* ``-``, ``/dev/stdin``, a FIFO — read once, as one file;
* anything else: a file or directory.

A side's ``label`` and every :class:`~cronstable.cli.side.SideError` message are
redacted: what the user typed may hold a password.
"""

from __future__ import annotations

from collections.abc import Callable

from cronstable.cli.side import Side, SideError
from cronstable.config import Limits
from cronstable.config.limits import DEFAULT_LIMITS
from cronstable.redact import redact

Recogniser = Callable[[str], bool]
Opener = Callable[[str, Limits], Side]
"""Opens what the user typed; files and snapshots are read within the limits given."""


def _is_local_git(text: str) -> bool:
    return text.startswith("git:") and not text.startswith("git://")


def _open_local_git(text: str, limits: Limits) -> Side:
    repo, sep, rest = text[len("git:") :].partition("@")
    if not sep or not repo or not rest:
        raise SideError(f"{redact(text)!r}: expected git:REPO@REF[:SUBDIR], e.g. git:.@origin/main")
    ref, _, subdir = rest.partition(":")
    from cronstable.config import load_snapshot
    from cronstable.sources.base import SourceError
    from cronstable.sources.factory import local_repo_snapshot

    try:
        snapshot = local_repo_snapshot(repo, ref, subdir.strip("/"), limits)
    except SourceError as exc:
        raise SideError(f"{redact(text)}: {redact(str(exc))}") from exc
    return Side(
        redact(text),
        snapshot.revision,
        lambda: load_snapshot(snapshot, limits=limits),
    )


def _is_source_spec(text: str) -> bool:
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum()


def _open_source_spec(text: str, limits: Limits) -> Side:
    import asyncio
    import tempfile
    from pathlib import Path

    from cronstable.config import load_snapshot
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

    label = redact(text)
    try:
        revision, snapshot = asyncio.run(first())
    except SourceError as exc:
        # a source's start() falls back on the last revision a daemon applied with its
        # cache; a side has no such cache, so the fetch's own error (the cause) is the reason
        cause = exc.__cause__
        raise SideError(
            source_error(text, cause if isinstance(cause, SourceError) else exc)
        ) from exc
    from cronstable.snapshot import Snapshot

    assert isinstance(snapshot, Snapshot)
    return Side(label, revision, lambda: load_snapshot(snapshot, limits=limits))


def source_error(text: str, exc: Exception) -> str:
    """``SPEC: REASON`` for a source spec that cannot be used, the spec named once, redacted.

    A source's own messages may begin with its description (``git+https://host/x.git:``):
    that prefix is dropped rather than naming the source twice.
    """
    reason = str(exc)
    head, sep, rest = reason.partition(": ")
    if sep and "://" in head and not any(c.isspace() for c in head):
        reason = rest
    return f"{redact(text)}: {redact(reason)}"


def _is_read_once(text: str) -> bool:
    from cronstable.config.onefile import is_read_once

    return is_read_once(text)


def _open_read_once(text: str, limits: Limits) -> Side:
    from cronstable.config.onefile import display_name, load_bytes, read_once

    name = display_name(text)
    try:
        data = read_once(text, limits.max_file_bytes)
    except OSError as exc:
        raise SideError(f"{name}: {exc.strerror or exc}") from exc
    return Side(name, None, lambda: load_bytes(name, data, limits))


def _open_path(text: str, limits: Limits) -> Side:
    import os

    from cronstable.config import load_path

    if not os.path.exists(text):
        raise SideError(f"{redact(text)}: no such file or directory")
    return Side(redact(text), None, lambda: load_path(text, limits))


RESOLVERS: list[tuple[Recogniser, Opener]] = [
    (_is_local_git, _open_local_git),
    (_is_source_spec, _open_source_spec),
    (_is_read_once, _open_read_once),
]


def register(recognise: Recogniser, open_side: Opener) -> None:
    """Add a kind of side, tried before the built-in ones."""
    RESOLVERS.insert(0, (recognise, open_side))


def resolve(text: str, limits: Limits = DEFAULT_LIMITS) -> Side:
    for recognise, open_side in RESOLVERS:
        if recognise(text):
            return open_side(text, limits)
    return _open_path(text, limits)


def _is_daemon_url(text: str) -> bool:
    from cronstable.cli.remote import is_daemon_url

    return is_daemon_url(text)


def _open_daemon_url(text: str, limits: Limits) -> Side:
    from cronstable.cli.remote import open_daemon

    return open_daemon(text, limits)


register(_is_daemon_url, _open_daemon_url)
