"""Source specs → sources.  The only module that names concrete backends (imported lazily).

Specs:

* a path (file or directory): :class:`~cronstable.sources.local.LocalDirSource`;
* ``git+https://…``, ``git+ssh://…``, ``git+file://…``, ``git://…`` with
  ``?ref=BRANCH|TAG|SHA&path=SUBDIR&interval=SECONDS`` (ref defaults to the
  remote's HEAD branch, interval to 60): :class:`~cronstable.sources.git.GitSource`;
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
from urllib.parse import parse_qs, urlsplit, urlunsplit

from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.redact import loose_password, redact
from cronstable.snapshot import Snapshot
from cronstable.sources.base import Source, SourceError

if TYPE_CHECKING:
    from cronstable.etcd import EtcdTLS

GIT_SCHEMES = ("git+https", "git+http", "git+ssh", "git+file", "git")
ETCD_SCHEMES = ("etcd", "etcds")
DEFAULT_GIT_INTERVAL = 60.0
DEFAULT_GIT_TIMEOUT = 30.0


def default_cache_dir() -> Path:
    """/var/cache/cronstable as root, $XDG_CACHE_HOME/cronstable (~/.cache) otherwise."""
    if os.geteuid() == 0:
        return Path("/var/cache/cronstable")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cronstable"


@dataclass(frozen=True, slots=True)
class GitSpec:
    url: str
    """The URL git itself understands (``git+`` removed, query removed)."""
    ref: str | None
    path: str
    interval: float
    timeout: float = DEFAULT_GIT_TIMEOUT
    """Seconds a fetch may wait for the remote (to connect, and for each read)."""


@dataclass(frozen=True, slots=True)
class EtcdSpec:
    endpoint: str
    """``http://HOST:PORT``, or ``https://HOST:PORT`` for ``etcds://``."""
    prefix: str
    tls: EtcdTLS | None = None
    """``etcds://``: the CA (``ca=``) and client certificate (``cert=``, ``key=``)."""


def parse_git_spec(spec: str) -> GitSpec:
    parts = urlsplit(spec)
    scheme = parts.scheme
    if scheme not in GIT_SCHEMES:
        raise SourceError(f"scheme {scheme!r} is not a git source scheme")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = set(query) - {"ref", "path", "interval", "timeout"}
    if unknown:
        raise SourceError(
            f"unknown git source option(s) {', '.join(sorted(unknown))} "
            "(the options are ref, path, interval and timeout)"
        )

    def one(name: str) -> str | None:
        values = query.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise SourceError(f"git source option {name!r} given twice")
        return values[0]

    interval = DEFAULT_GIT_INTERVAL
    raw_interval = one("interval")
    if raw_interval is not None:
        try:
            interval = float(raw_interval)
        except ValueError:
            raise SourceError(f"interval {raw_interval!r} is not a number of seconds") from None
        if not interval > 0:
            raise SourceError("interval must be more than 0 seconds")
    timeout = DEFAULT_GIT_TIMEOUT
    raw_timeout = one("timeout")
    if raw_timeout is not None:
        try:
            timeout = float(raw_timeout)
        except ValueError:
            raise SourceError(f"timeout {raw_timeout!r} is not a number of seconds") from None
        if not 0 < timeout < float("inf"):
            raise SourceError("timeout must be a finite number of seconds, more than 0")
    path = (one("path") or "").strip("/")
    if ".." in path.split("/"):
        raise SourceError(f"path {path!r} leaves the repository")
    url = urlunsplit((scheme.removeprefix("git+"), parts.netloc, parts.path, "", ""))
    return GitSpec(url, one("ref") or None, path, interval, timeout)


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


# schemes people type for a git remote, and the source scheme they mean
_GIT_HINTS = {"https": "git+https", "http": "git+http", "ssh": "git+ssh", "file": "git+file"}


def unknown_scheme_message(spec: str) -> str:
    """Why ``spec`` names no source, with the spelling meant when it is a bare git URL."""
    scheme = urlsplit(spec).scheme
    message = f"unknown source scheme {scheme!r}"
    meant = _GIT_HINTS.get(scheme.lower())
    if meant is not None:
        rest = redact(spec).split("://", 1)[1]
        message += f"; for a git repository write {meant}://{rest}"
    return message


def is_remote_spec(spec: str) -> bool:
    scheme = urlsplit(spec).scheme
    return scheme in GIT_SCHEMES or scheme in ETCD_SCHEMES


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
    if scheme in GIT_SCHEMES:
        from cronstable.sources.git import GitSource

        return GitSource(parse_git_spec(spec), cache_dir=cache, limits=limits)
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
    from cronstable.sources.git import snapshot_from_local_repo

    return snapshot_from_local_repo(repo_path, ref, subdir, limits)
