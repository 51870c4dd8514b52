"""Source specs → sources: the factory only dispatches, and is the only module that names
concrete backends (imported lazily).

Each remote backend owns its spec: ``sources/<backend>/spec.py`` parses and checks
it and says how the source describes itself; the factory picks the backend by the
spec's scheme (each spec module's ``SCHEMES``).  Specs:

* a path (file or directory): :class:`~cronstable.sources.local.LocalDirSource`;
* ``git+https://…``, ``git+ssh://…``, ``git+file://…``, ``git://…``
  (:mod:`cronstable.sources.git.spec`):
  :class:`~cronstable.sources.git.source.GitSource`;
* ``etcd://HOST:PORT/PREFIX/``, ``etcds://`` for TLS (:mod:`cronstable.sources.etcd.spec`):
  :class:`~cronstable.sources.etcd.source.EtcdSource`;
* ``-``, ``/dev/stdin``, a FIFO: one file read at start and on each reload request
  (:class:`~cronstable.sources.stream.StreamSource`).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.redact import loose_password
from cronstable.snapshot import Snapshot
from cronstable.sources.base import Source, SourceError
from cronstable.sources.etcd import spec as etcd_spec
from cronstable.sources.git import spec as git_spec


def default_cache_dir() -> Path:
    """/var/cache/cronstable as root, $XDG_CACHE_HOME/cronstable (~/.cache) otherwise."""
    if os.geteuid() == 0:
        return Path("/var/cache/cronstable")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cronstable"


def unknown_scheme_message(spec: str) -> str:
    """Why ``spec`` names no source, with the spelling meant when it is a bare git URL."""
    message = f"unknown source scheme {urlsplit(spec).scheme!r}"
    meant = git_spec.meant_spec(spec)
    if meant is not None:
        message += f"; for a git repository write {meant}"
    return message


def is_remote_spec(spec: str) -> bool:
    scheme = urlsplit(spec).scheme
    return scheme in git_spec.SCHEMES or scheme in etcd_spec.SCHEMES


def open_source(
    spec: str,
    *,
    cache_dir: Path | None = None,
    limits: Limits = DEFAULT_LIMITS,
    settle: float | None = None,
) -> Source:
    """A (not yet started) source for ``spec``, holding at most ``limits`` of files.

    ``settle`` is a directory source's settle time (``run --settle``); remote
    sources deliver whole revisions and have none.

    A bad spec raises :class:`SourceError` whose message does not repeat the spec
    (the caller names it, through :func:`~cronstable.redact.redact`).
    """
    if loose_password(spec):
        # parsed, the host would end at that character and pieces of the password
        # would reach messages in places redact cannot tell apart
        raise SourceError(
            "the password in USER:PASSWORD@ holds an unencoded '/', '?' or '#': "
            "percent-encode them (%2F, %3F, %23)"
        )
    cache = cache_dir or default_cache_dir()
    scheme = urlsplit(spec).scheme
    if scheme in git_spec.SCHEMES:
        from cronstable.sources.git.source import GitSource

        return GitSource(git_spec.parse_git_spec(spec), cache_dir=cache, limits=limits)
    if scheme in etcd_spec.SCHEMES:
        from cronstable.sources.etcd.source import EtcdSource

        return EtcdSource(etcd_spec.parse_etcd_spec(spec), cache_dir=cache, limits=limits)
    if "://" in spec:
        raise SourceError(unknown_scheme_message(spec))
    from cronstable.config.onefile import is_read_once

    if is_read_once(spec):
        from cronstable.sources.stream import StreamSource

        return StreamSource(spec, limits=limits)
    from cronstable.sources.local import LocalDirSource

    return LocalDirSource(Path(spec), limits=limits, settle=settle)


def local_repo_snapshot(
    repo_path: str, ref: str, subdir: str = "", limits: Limits = DEFAULT_LIMITS
) -> Snapshot:
    """A local git repository's files at ``ref`` (``cronstable diff git:REPO@REF[:SUBDIR]``)."""
    from cronstable.sources.git.files import snapshot_from_local_repo

    return snapshot_from_local_repo(repo_path, ref, subdir, limits)
