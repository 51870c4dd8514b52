"""The git source's spec: what ``git+https://…``, ``git+http://…``, ``git+ssh://…``,
``git+file://…`` and ``git://…`` say, with ``?ref=BRANCH|TAG|SHA&path=SUBDIR``,
``&interval=SECONDS`` (default 60) and ``&timeout=SECONDS`` (each wait on the
remote, default 30).

Parsing and checking a spec, the name a source goes by (:func:`describe`, never
holding credentials: :func:`cronstable.redact.without_userinfo`), and the spelling a
bare remote URL was meant as (``https://…`` for ``git+https://…``).  Light: the
factory reads it to dispatch, without importing dulwich or asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from cronstable.redact import redact, without_userinfo
from cronstable.sources.base import SourceError

SCHEMES = ("git+https", "git+http", "git+ssh", "git+file", "git")
DEFAULT_INTERVAL = 60.0
DEFAULT_TIMEOUT = 30.0

# schemes people type for a git remote, and the source scheme they mean
_MEANT = {"https": "git+https", "http": "git+http", "ssh": "git+ssh", "file": "git+file"}


@dataclass(frozen=True, slots=True)
class GitSpec:
    url: str
    """The URL git itself understands (``git+`` removed, query removed)."""
    ref: str | None
    path: str
    interval: float
    timeout: float = DEFAULT_TIMEOUT
    """Seconds a fetch may wait for the remote (to connect, and for each read)."""


def parse_git_spec(spec: str) -> GitSpec:
    parts = urlsplit(spec)
    scheme = parts.scheme
    if scheme not in SCHEMES:
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

    interval = DEFAULT_INTERVAL
    raw_interval = one("interval")
    if raw_interval is not None:
        try:
            interval = float(raw_interval)
        except ValueError:
            raise SourceError(f"interval {raw_interval!r} is not a number of seconds") from None
        if not interval > 0:
            raise SourceError("interval must be more than 0 seconds")
    timeout = DEFAULT_TIMEOUT
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


def describe(spec: GitSpec) -> str:
    """The source spec that names this source, without credentials (``git+URL?ref=…&path=…``)."""
    safe_url = without_userinfo(spec.url)
    prefix = "" if urlsplit(safe_url).scheme == "git" else "git+"
    options = [(name, value) for name, value in (("ref", spec.ref), ("path", spec.path)) if value]
    query = urlencode(options, safe="/")
    return f"{prefix}{safe_url}{'?' + query if query else ''}"


def meant_spec(spec: str) -> str | None:
    """The git source spec a bare remote URL (``https://…``, ``ssh://…``) was meant as,
    redacted; None for another scheme."""
    meant = _MEANT.get(urlsplit(spec).scheme.lower())
    if meant is None:
        return None
    return f"{meant}://{redact(spec).split('://', 1)[1]}"
