"""Source specs → sources.  The only module that names concrete backends (imported lazily).

Specs:

* a path (file or directory): :class:`~cronstable.sources.local.LocalDirSource`;
* ``git+https://…``, ``git+ssh://…``, ``git+file://…``, ``git://…`` with
  ``?ref=BRANCH|TAG|SHA&path=SUBDIR&interval=SECONDS`` (ref defaults to the
  remote's HEAD branch, interval to 60): :class:`~cronstable.sources.git.source.GitSource`;
  ``&timeout=SECONDS`` bounds each wait on the remote (default 30);
* ``etcd://HOST:PORT/PREFIX/``: every key under the prefix is a file
  (:class:`~cronstable.sources.etcd.EtcdSource`); ``etcds://`` for TLS, with
  ``?ca=FILE&cert=FILE&key=FILE`` (a login comes from the environment, never the spec).
* ``-``, ``/dev/stdin``, a FIFO: one file read at start and on each reload request
  (:class:`~cronstable.sources.stream.StreamSource`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.redact import loose_password
from cronstable.snapshot import Snapshot
from cronstable.sources.base import Source, SourceError
from cronstable.sources.git import spec as git_spec

if TYPE_CHECKING:
    from cronstable.etcd import EtcdTLS

ETCD_SCHEMES = ("etcd", "etcds")


def default_cache_dir() -> Path:
    """/var/cache/cronstable as root, $XDG_CACHE_HOME/cronstable (~/.cache) otherwise."""
    if os.geteuid() == 0:
        return Path("/var/cache/cronstable")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cronstable"


@dataclass(frozen=True, slots=True)
class EtcdSpec:
    endpoint: str
    """``http://HOST:PORT``, or ``https://HOST:PORT`` for ``etcds://``."""
    prefix: str
    tls: EtcdTLS | None = None
    """``etcds://``: the CA (``ca=``) and client certificate (``cert=``, ``key=``)."""


def parse_etcd_spec(spec: str) -> EtcdSpec:
    """``etcd://HOST:PORT/PREFIX/``, or ``etcds://…?ca=&cert=&key=`` (see cronstable.etcd)."""
    from cronstable.etcd import parse_etcd_url

    usage = "etcd://HOST:PORT/PREFIX/ or etcds://HOST:PORT/PREFIX/?ca=&cert=&key="
    try:
        url = parse_etcd_url(spec)
    except ValueError as exc:
        raise SourceError(f"not an etcd source spec: {exc} ({usage})") from None
    if url.options:
        raise SourceError(
            f"unknown etcd source option(s) {', '.join(sorted(url.options))} "
            "(the options are ca, cert and key, with etcds://)"
        )
    prefix = url.path if url.path.endswith("/") else url.path + "/"
    if prefix == "/":
        raise SourceError(f"an etcd source needs a key prefix ({usage})")
    return EtcdSpec(endpoint=url.endpoint, prefix=prefix, tls=url.tls)


def unknown_scheme_message(spec: str) -> str:
    """Why ``spec`` names no source, with the spelling meant when it is a bare git URL."""
    message = f"unknown source scheme {urlsplit(spec).scheme!r}"
    meant = git_spec.meant_spec(spec)
    if meant is not None:
        message += f"; for a git repository write {meant}"
    return message


def is_remote_spec(spec: str) -> bool:
    scheme = urlsplit(spec).scheme
    return scheme in git_spec.SCHEMES or scheme in ETCD_SCHEMES


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
    if scheme in ETCD_SCHEMES:
        from cronstable.sources.etcd import EtcdSource

        return EtcdSource(parse_etcd_spec(spec), cache_dir=cache, limits=limits)
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
