"""A git remote as a configuration source, fetched with dulwich into a bare cache repository.

:class:`GitSource` keeps one bare repository per remote URL under
``CACHE_DIR/git/<first 16 hex digits of sha256(url without credentials)>`` and
fetches into it: the remote's branches and tags are kept as ``refs/heads/*`` and
``refs/tags/*``, so every fetch negotiates from what is already there and
transfers only new objects.  Only the objects the source needs are fetched: the
configured branch or tag (or the remote's default branch), or every branch and
tag while a configured commit sha is not yet in the cache.  Files are read from
the object store at the commit: there is no work tree.

``ref`` may be:

* absent (or ``HEAD``): the remote's default branch, as its ``HEAD`` symref
  names it (else the branch ``HEAD`` points at, else ``main``, else ``master``);
* a branch or tag name, resolved the way ``git rev-parse`` does (``refs/NAME``,
  then ``refs/tags/NAME``, then ``refs/heads/NAME``), or a full ``refs/…`` name;
  an annotated tag is peeled to its commit;
* a full or abbreviated (at least 4 hex digits) commit sha.

Each snapshot is one commit: ``revision`` is its sha, ``files`` every regular
file of its tree (below ``path`` when set).  Submodules (gitlinks) are skipped;
symlinks are never followed: each is skipped with a warning.

Polling and nudges: the remote is fetched every ``interval`` seconds and at once
on :meth:`GitSource.nudge`.  ``nudge(sha)`` keeps fetching, with back-off, for up
to :data:`NUDGE_WINDOW` seconds until the remote shows that commit, since a
webhook may arrive before the remote serves the push.  A ref that moves to a
commit that does not descend from the current one (a force push, a reset) is
applied like any change and logged at WARNING.  Errors reaching the remote are
logged at WARNING once per outage (INFO on recovery) and retried with
exponential back-off (up to :data:`MAX_ERROR_BACKOFF` seconds); ``watch()`` only
ends on :meth:`GitSource.close`.

Last good revision: :meth:`GitSource.applied` records the applied commit in the
cache (``refs/cronstable/applied/<key>`` plus ``cronstable/applied-<key>.json``,
one per ``ref`` and ``path``).  When :meth:`GitSource.start` cannot fetch (or
resolve the ref, or find ``path``), it starts from that commit with a WARNING;
the objects are already in the cache.  With nothing recorded it raises
:class:`~cronstable.sources.base.SourceError`.

Credentials never appear in logs, errors or ``description``:

* HTTP(S): basic credentials from the URL's userinfo
  (``https://USER:TOKEN@host/repo.git``) or, when the URL has none, from
  ``CRONSTABLE_GIT_USERNAME`` with ``CRONSTABLE_GIT_PASSWORD`` or
  ``CRONSTABLE_GIT_PASSWORD_FILE`` (a file holding the password or token, read
  at every fetch so it can be rotated; surrounding whitespace is stripped).
* SSH (``ssh://[USER@]HOST[:PORT]/PATH``): dulwich runs the ``ssh`` program, so
  keys, ``known_hosts`` and ``~/.ssh/config`` apply as for ``git``.  The command
  is ``$GIT_SSH_COMMAND`` (else ``$GIT_SSH``) when set, for example
  ``GIT_SSH_COMMAND="ssh -i /etc/cronstable/deploy_key -o IdentitiesOnly=yes"``
  for a deploy key; otherwise :data:`DEFAULT_SSH_COMMAND`, which never prompts
  (``BatchMode``), so an unknown host key or a missing key is an error in the
  log rather than a hung fetch.  Passwords in ssh URLs are not supported.
* ``git://`` and ``file://`` take no credentials.

Hung remotes: over ``git://`` and HTTP(S), connecting and every read wait at
most the spec's ``timeout`` (30 s by default; see
:mod:`cronstable.sources.git_transport`), so a remote that accepts and never
answers fails the fetch like an unreachable one (a WARNING naming it, then
back-off).  Fetches run on daemon threads that nothing joins:
:meth:`GitSource.close` waits :data:`CLOSE_WAIT` seconds at most for one in
progress, so a hung fetch never holds the daemon's exit.

The cache is created with mode 0700 (it holds the configuration).  Every dulwich
call runs in a worker thread, one at a time per cache repository (in this
process and, through a lock file, across processes).  Writing the cache's refs
never stops the source: a failure (a full disk) is logged once per ref, and a
dulwich ``*.lock`` file older than :data:`STALE_LOCK_AGE` (left by a kill -9)
is removed.

:func:`snapshot_from_local_repo` reads a snapshot from a local repository at a
revision, for ``cronstable diff git:REPO@REF[:SUBDIR]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import random
import re
import shutil
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

import urllib3
from dulwich.client import HTTPUnauthorized
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.file import FileLocked
from dulwich.graph import can_fast_forward
from dulwich.object_store import BaseObjectStore, ObjectStoreGraphWalker
from dulwich.objects import S_ISGITLINK, Commit, ObjectID, ShaFile, Tag, Tree
from dulwich.protocol import PEELED_TAG_SUFFIX
from dulwich.refs import LOCAL_BRANCH_PREFIX, LOCAL_TAG_PREFIX, Ref, check_ref_format
from dulwich.repo import Repo

from cronstable.config.limits import DEFAULT_LIMITS, OPTION_REVISION_BYTES, Limits, size_text
from cronstable.redact import redact
from cronstable.retrying import transient
from cronstable.snapshot import Snapshot
from cronstable.sources.base import DEFAULT_CONTACT_WINDOW, Origin, Source, SourceError
from cronstable.sources.factory import GitSpec
from cronstable.sources.git_transport import close_client, is_timeout, open_client

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

ENV_USERNAME = "CRONSTABLE_GIT_USERNAME"
ENV_PASSWORD = "CRONSTABLE_GIT_PASSWORD"
ENV_PASSWORD_FILE = "CRONSTABLE_GIT_PASSWORD_FILE"
DEFAULT_SSH_COMMAND = (
    "ssh -o BatchMode=yes -o ConnectTimeout=30 -o ServerAliveInterval=15 -o ServerAliveCountMax=4"
)
NUDGE_WINDOW = 30.0
"""How long ``nudge(sha)`` keeps fetching until the remote shows ``sha``."""
NUDGE_FIRST_DELAY = 0.25
NUDGE_MAX_DELAY = 4.0
MAX_ERROR_BACKOFF = 300.0
"""Longest wait between two fetches while the remote fails (never less than the interval)."""
STATE_FORMAT = 1
"""Version of the ``applied-*.json`` state files."""
REPACK_PACKS = 50
"""Repack the cache when it holds more packs than this (and less than REPACK_MAX_BYTES)."""
REPACK_MAX_BYTES = 256 * 1024 * 1024
CLOSE_WAIT = 0.5
"""Seconds :meth:`GitSource.close` waits for a fetch in progress (a hung one goes on alone)."""
STALE_LOCK_AGE = 10.0
"""Age in seconds past which a dulwich ``*.lock`` file in the cache is stale (``_cache_write``)."""

_HEX = re.compile(r"[0-9a-f]+")
_PSEUDO_REF = re.compile(r"[A-Z][A-Z_]*")
_APPLIED_REF_PREFIX = b"refs/cronstable/applied/"
_STATE_DIR = "cronstable"

_process_locks: dict[str, threading.Lock] = {}
_process_locks_guard = threading.Lock()


# --------------------------------------------------------------------------- helpers


async def _in_worker(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` on a new daemon thread, awaited; cancelling leaves it to end alone.

    Not :func:`asyncio.to_thread`: the default executor's threads are joined when
    ``asyncio.run`` returns and again at interpreter exit, so a fetch hung on a
    silent remote would hold the daemon's exit until its timeout.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        def apply() -> None:
            if not future.done():
                outcome()

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(apply)

    def work() -> None:
        try:
            result = function(*args)
        except BaseException as exc:
            settle(partial(future.set_exception, exc))
        else:
            settle(partial(future.set_result, result))

    threading.Thread(target=work, name=f"git {function.__name__}", daemon=True).start()
    return await future


def redact_url(url: str) -> str:
    """``url`` without its userinfo (``user:password@``)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _describe(spec: GitSpec, safe_url: str) -> str:
    """The source spec that names this source, without credentials (``git+URL?ref=…&path=…``)."""
    prefix = "" if urlsplit(safe_url).scheme == "git" else "git+"
    options = [(name, value) for name, value in (("ref", spec.ref), ("path", spec.path)) if value]
    query = urlencode(options, safe="/")
    return f"{prefix}{safe_url}{'?' + query if query else ''}"


def _short(sha: str | bytes) -> str:
    text = sha.decode("ascii") if isinstance(sha, bytes) else sha
    return text[:12]


def _is_hex(text: str, min_len: int = 4) -> bool:
    return min_len <= len(text) <= 40 and _HEX.fullmatch(text) is not None


def _ref_candidates(name: str) -> list[bytes]:
    """The full ref names ``name`` may mean, in ``git rev-parse`` order (remotes excluded)."""
    raw = name.encode("utf-8")
    candidates = []
    if name.startswith("refs/") or _PSEUDO_REF.fullmatch(name):
        candidates.append(raw)
    candidates += [b"refs/" + raw, LOCAL_TAG_PREFIX + raw, LOCAL_BRANCH_PREFIX + raw]
    return [c for c in candidates if c == b"HEAD" or check_ref_format(Ref(c))]


def _peel_to_commit(store: BaseObjectStore, sha: bytes, what: str) -> Commit:
    """The commit ``sha`` is or (through tags) points to."""
    try:
        obj: ShaFile = store[ObjectID(sha)]
        while isinstance(obj, Tag):
            obj = store[obj.object[1]]
    except KeyError as exc:
        raise SourceError(
            f"{what}: object {_short(exc.args[0] if exc.args else sha)} is missing"
        ) from exc
    if not isinstance(obj, Commit):
        raise SourceError(f"{what} is a {obj.type_name.decode()}, not a commit")
    return obj


def _normalize_subdir(subdir: str) -> str:
    parts = [p for p in subdir.strip("/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SourceError(f"path {subdir!r} leaves the repository")
    return "/".join(parts)


def _read_files(
    store: BaseObjectStore,
    commit: Commit,
    subdir: str,
    where: str,
    limits: Limits = DEFAULT_LIMITS,
) -> dict[str, bytes]:
    """Every regular file of ``commit``'s tree below ``subdir``, by path relative to it.

    ``where`` names the origin in log lines (skipped links); errors do not name it.
    Past ``limits.max_revision_bytes`` in all, reading stops with a SourceError.
    """
    commit_name = _short(commit.id)
    tree_id = commit.tree
    try:
        if subdir:
            root = store[tree_id]
            assert isinstance(root, Tree)
            try:
                mode, tree_id = root.lookup_path(store.__getitem__, subdir.encode("utf-8"))
            except (KeyError, ValueError) as exc:
                raise SourceError(
                    f"path {subdir!r} does not exist in commit {commit_name}"
                ) from exc
            if not stat.S_ISDIR(mode):
                raise SourceError(f"path {subdir!r} in commit {commit_name} is not a directory")
        files: dict[str, bytes] = {}
        total = 0
        for entry in store.iter_tree_contents(tree_id):
            name = entry.path.decode("utf-8", "surrogateescape")
            if S_ISGITLINK(entry.mode):
                logger.debug("%s: skipping submodule %s in commit %s", where, name, commit_name)
            elif stat.S_ISLNK(entry.mode):
                logger.warning(
                    "%s: skipping symlink %s in commit %s (symlinks are not followed)",
                    where,
                    name,
                    commit_name,
                )
            elif stat.S_ISREG(entry.mode):
                files[name] = store[entry.sha].as_raw_string()
                total += len(files[name])
                if total > limits.max_revision_bytes:
                    below = f" below {subdir!r}" if subdir else ""
                    raise SourceError(
                        f"commit {commit_name} holds more than "
                        f"{size_text(limits.max_revision_bytes)} of files{below} "
                        f"(raise the limit with {OPTION_REVISION_BYTES})"
                    )
    except SourceError:
        raise
    except Exception as exc:  # corrupt or incomplete object store, a subdir below a submodule
        raise SourceError(
            f"cannot read the tree of commit {commit_name}: {type(exc).__name__}: {exc}"
        ) from exc
    return files


def _is_ancestor(repo: Repo, ancestor: bytes, descendant: bytes) -> bool | None:
    """Whether ``ancestor`` is an ancestor of (or equal to) ``descendant``; None if unknown."""
    store = repo.object_store
    if ObjectID(ancestor) not in store or ObjectID(descendant) not in store:
        return None
    try:
        return can_fast_forward(repo, ObjectID(ancestor), ObjectID(descendant))
    except (KeyError, AssertionError):
        return None


# --------------------------------------------------------------------------- local repositories


_REV_OPERATOR = re.compile(r"~(\d*)|\^\{(\w*)\}|\^(\d*)")


def _resolve_local_base(repo: Repo, base: str) -> bytes:
    if base in ("HEAD", "@"):
        try:
            return repo.refs[Ref(b"HEAD")]
        except KeyError:
            raise SourceError("HEAD does not point to a commit yet") from None
    store = repo.object_store
    if len(base) == 40 and _is_hex(base) and ObjectID(base.encode()) in store:
        return base.encode()
    candidates = _ref_candidates(base)
    raw = base.encode("utf-8")
    remote = [b"refs/remotes/" + raw, b"refs/remotes/" + raw + b"/HEAD"]
    candidates += [c for c in remote if check_ref_format(Ref(c))]
    for name in candidates:
        if Ref(name) in repo.refs:
            try:
                return repo.refs[Ref(name)]
            except KeyError:  # a dangling symref
                continue
    if _is_hex(base.lower()) and len(base) < 40:
        matches = []
        for sha in store.iter_prefix(base.lower().encode()):
            with contextlib.suppress(KeyError):
                if isinstance(store[sha], Commit | Tag):
                    matches.append(sha)
        if len(matches) == 1:
            return matches[0]
        if matches:
            names = ", ".join(sorted(_short(m) for m in matches))
            raise SourceError(f"short sha {base!r} is ambiguous ({names})")
    raise SourceError(
        f"unknown revision {base!r} (no branch, tag, remote branch or commit of that name)"
    )


def resolve_local_revision(repo: Repo, rev: str) -> Commit:
    """The commit ``rev`` names in ``repo``, as ``git rev-parse`` reads the common forms.

    ``HEAD``/``@``, branch and tag names, ``refs/…`` names, remote-tracking
    branches (``origin/main``), full and abbreviated shas, each optionally
    followed by ``~N``, ``^N``, ``^{}`` or ``^{commit}``.  Raises
    :class:`SourceError` (whose message does not repeat ``repo``).
    """
    rev = rev.strip()
    cut = min((i for i in (rev.find("~"), rev.find("^")) if i >= 0), default=len(rev))
    base, operators = rev[:cut], rev[cut:]
    if not base:
        raise SourceError(f"no revision in {rev!r}")
    store = repo.object_store
    commit = _peel_to_commit(store, _resolve_local_base(repo, base), base)
    pos = 0
    while pos < len(operators):
        match = _REV_OPERATOR.match(operators, pos)
        if match is None:
            raise SourceError(f"cannot parse {operators[pos:]!r} in revision {rev!r}")
        pos = match.end()
        tilde, peel, caret = match.groups()
        if peel is not None:
            if peel not in ("", "commit"):
                raise SourceError(f"^{{{peel}}} is not supported (only ^{{}} and ^{{commit}})")
            continue  # commits are peeled already
        if tilde is not None:
            for _ in range(int(tilde or 1)):
                if not commit.parents:
                    raise SourceError(f"{rev}: commit {_short(commit.id)} has no parent")
                commit = _peel_to_commit(store, commit.parents[0], rev)
        else:
            number = int(caret or 1)
            if number == 0:
                continue
            if number > len(commit.parents):
                raise SourceError(f"{rev}: commit {_short(commit.id)} has no parent #{number}")
            commit = _peel_to_commit(store, commit.parents[number - 1], rev)
    return commit


def snapshot_from_local_repo(
    repo_path: str, ref: str, subdir: str = "", limits: Limits = DEFAULT_LIMITS
) -> Snapshot:
    """A snapshot of ``ref`` (see :func:`resolve_local_revision`) in a local repository.

    ``repo_path`` is a work tree with ``.git`` or a bare repository; ``subdir``
    narrows the snapshot to a directory, as a source's ``path=`` does.  Files are
    read from the object store, never from the work tree.  The snapshot's
    ``source`` is ``git:REPO@REF[:SUBDIR]``.  Raises :class:`SourceError` for a
    missing repository, an unknown revision or a missing ``subdir``; its message
    does not repeat ``git:REPO@REF`` (the caller names what it was asked).
    """
    subdir = _normalize_subdir(subdir)
    where = f"git:{repo_path}@{ref}{':' + subdir if subdir else ''}"
    try:
        repo = Repo(repo_path)
    except NotGitRepository as exc:
        raise SourceError(f"{repo_path} is not a git repository") from exc
    except OSError as exc:
        raise SourceError(f"cannot open {repo_path}: {exc.strerror or exc}") from exc
    try:
        commit = resolve_local_revision(repo, ref)
        files = _read_files(repo.object_store, commit, subdir, where, limits)
    finally:
        repo.close()
    return Snapshot(revision=commit.id.decode("ascii"), source=where, files=files)


# --------------------------------------------------------------------------- the cache repository


class _CacheRepo(Repo):
    """The bare cache: negotiates fetches from every commit it holds a ref to.

    dulwich advertises only ``refs/heads/*`` as "haves"; the tips of tags and of
    the last applied commit count too, so a tag-pinned source does not download
    history it already has.
    """

    def get_graph_walker(self, heads: list[ObjectID] | None = None) -> ObjectStoreGraphWalker:
        if heads is None:
            heads = self.local_tips()
        return super().get_graph_walker(heads)

    def local_tips(self) -> list[ObjectID]:
        tips: dict[ObjectID, None] = {}
        for name, sha in self.refs.as_dict().items():
            if name == b"HEAD":
                continue
            with contextlib.suppress(KeyError, SourceError):
                tips[_peel_to_commit(self.object_store, sha, "").id] = None
        return list(tips)


@dataclass(frozen=True, slots=True)
class _HttpCredentials:
    username: str | None
    password: str | None
    password_file: Path | None

    @property
    def configured(self) -> bool:
        return self.username is not None

    def resolve(self) -> tuple[str | None, str | None]:
        if self.password_file is None:
            return self.username, self.password
        try:
            password = self.password_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(
                f"cannot read {ENV_PASSWORD_FILE} {str(self.password_file)!r}: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ) from exc
        return self.username, password


def _http_credentials(url: str) -> _HttpCredentials:
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return _HttpCredentials(
            unquote(parts.username or ""),
            unquote(parts.password) if parts.password is not None else None,
            None,
        )
    username = os.environ.get(ENV_USERNAME) or None
    password = os.environ.get(ENV_PASSWORD) or None
    password_file = os.environ.get(ENV_PASSWORD_FILE) or None
    if password is not None and password_file is not None:
        raise SourceError(f"set {ENV_PASSWORD} or {ENV_PASSWORD_FILE}, not both")
    if (password is not None or password_file is not None) and username is None:
        raise SourceError(f"{ENV_USERNAME} must be set with {ENV_PASSWORD}/{ENV_PASSWORD_FILE}")
    return _HttpCredentials(username, password, Path(password_file) if password_file else None)


@dataclass(slots=True)
class _Poll:
    """What one fetch found (computed in a worker thread)."""

    commit: str
    ref: str
    """The remote ref the commit was found at (or the configured sha)."""
    snapshot: Snapshot | None = None
    """The commit's snapshot, unless it was one the caller already knew."""
    problem: str | None = None
    """Why the commit cannot be a snapshot (``path`` missing in it), instead of ``snapshot``."""
    movement: str | None = None
    """How the ref moved when not forward: ``"backwards"`` or ``"rewritten"``."""
    seen: set[str] = field(default_factory=set)
    """The nudge targets now visible."""


# --------------------------------------------------------------------------- the source


class GitSource(Source):
    """A git remote, fetched into a bare cache repository (see the module documentation)."""

    kind = "git"

    def __init__(self, spec: GitSpec, *, cache_dir: Path, limits: Limits = DEFAULT_LIMITS) -> None:
        self.spec = spec
        self.limits = limits
        parts = urlsplit(spec.url)
        self._scheme = parts.scheme
        self._safe_url = redact_url(spec.url)
        self.description = _describe(spec, self._safe_url)
        self._secrets: set[str] = set()
        self._http: _HttpCredentials | None = None
        self._ssh_command: str | None = None
        self._transport_url = spec.url
        if self._scheme in ("http", "https"):
            self._http = _http_credentials(spec.url)
            self._transport_url = self._safe_url
            if self._http.password:
                self._secrets.add(self._http.password)
        elif self._scheme == "ssh":
            if parts.password is not None:
                raise SourceError(f"{self.description}: passwords in ssh URLs are not supported")
            self._ssh_command = (
                os.environ.get("GIT_SSH_COMMAND")
                or os.environ.get("GIT_SSH")
                or DEFAULT_SSH_COMMAND
            )
        if parts.password:
            self._secrets |= {parts.password, unquote(parts.password)}
        elif parts.username and self._http is not None:
            # https://TOKEN@host/…: the user name is the secret
            self._secrets |= {parts.username, unquote(parts.username)}
        self._ref = None if spec.ref in (None, "", "HEAD") else spec.ref
        self._path = _normalize_subdir(spec.path)
        url_key = hashlib.sha256(self._safe_url.encode("utf-8")).hexdigest()[:16]
        self.cache_path = cache_dir / "git" / url_key
        """The bare cache repository."""
        self._state_key = f"{self._ref or 'HEAD'}:{self._path}"
        key = hashlib.sha256(self._state_key.encode("utf-8")).hexdigest()[:16]
        self._state_file = self.cache_path / _STATE_DIR / f"applied-{key}.json"
        self._applied_ref = Ref(_APPLIED_REF_PREFIX + key.encode())

        with _process_locks_guard:
            self._lock = _process_locks.setdefault(
                os.path.abspath(self.cache_path), threading.Lock()
            )
        self._repo: _CacheRepo | None = None
        self._started = False
        self._closed = False
        self._current: Snapshot | None = None
        self._rejected: str | None = None
        self._applied: str | None = None
        self._applied_ref_pending: str | None = None
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._targets: dict[str, float] = {}
        self._nudge_attempt = 0
        self._nudge_retry_at = 0.0
        self._failures = 0
        self._failing_since = 0.0
        self._cache_failing: set[bytes] = set()
        """Cache refs whose last write failed (each logged at WARNING once)."""
        self._followed: str | None = None
        """The full ref name the last fetch resolved ``ref`` (or the default branch) to."""

    # ----------------------------------------------------------------- Source API

    async def start(self) -> None:
        if self._started:
            raise RuntimeError(f"{self.description} was already started")
        self._started = True
        if self._http is not None and self._http.configured and self._scheme == "http":
            logger.warning("%s: sending credentials over unencrypted http", self.description)
        await _in_worker(self._open_sync)
        error: SourceError | None = None
        try:
            poll = await _in_worker(self._poll_sync, frozenset(), frozenset(), None, None)
        except SourceError as exc:  # the remote is unreachable, or has no such ref
            error = exc
            reason = self._scrub(str(exc))
            self.contact_failed()
        except Exception as exc:  # a bug, or dulwich failing in an unforeseen way
            logger.debug("%s: first fetch failed", self.description, exc_info=True)
            error = SourceError(f"unexpected {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            reason = self._scrub(str(error))
            self.contact_failed()
        else:
            self._answered(poll)
            if poll.snapshot is not None:
                logger.info(
                    "%s: at commit %s (%s)", self.description, _short(poll.commit), poll.ref
                )
                self._current = poll.snapshot
                self._task = asyncio.create_task(self._poll_loop(), name=self.description)
                return
            reason = poll.problem or "no snapshot"
            error = SourceError(reason)  # the cause a caller without a cache reports
            self._rejected = poll.commit  # the poll loop will not report it again
        cached = await _in_worker(self._load_applied_sync)
        if cached is None:
            await _in_worker(self._close_sync)
            raise SourceError(
                f"{self.description}: {reason}; and there is no earlier revision to start "
                "from instead (none was applied with the cache directory "
                f"{self.cache_path.parent.parent})"
            ) from error
        logger.warning(
            "%s: %s; starting from the last applied commit %s",
            self.description,
            reason,
            _short(cached.revision),
        )
        self._current = cached
        self._applied = cached.revision
        if error is not None:
            self._failures = 1  # an outage is on: the poll loop logs its end
            self._failing_since = time.monotonic()
        self._task = asyncio.create_task(self._poll_loop(), name=self.description)

    async def watch(self) -> AsyncIterator[Snapshot]:
        """See :meth:`Source.watch`; raises :class:`SourceError` if polling ever stops.

        Polling stops only on :meth:`close`, or through a bug: then this raises,
        and the next ``watch()`` polls again (the daemon restarts its follower).
        """
        if not self._started:
            raise RuntimeError(f"start() {self.description} before watching it")
        self._ensure_polling()
        last: str | None = None
        while True:
            changed = self._changed
            if self._closed:
                return
            snapshot = self._current
            if snapshot is not None and snapshot.revision != last:
                last = snapshot.revision
                yield snapshot
                continue
            task = self._task
            if task is None or task.done():
                cause = None if task is None or task.cancelled() else task.exception()
                why = f"{type(cause).__name__}: {cause}" if cause else "it was cancelled"
                raise SourceError(f"{self.description}: polling stopped ({why})") from cause
            waiter = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()

    def _ensure_polling(self) -> None:
        """Start the poll loop unless it runs (again, after it stopped: polling at once)."""
        if self._closed or (self._task is not None and not self._task.done()):
            return
        if self._task is not None:
            self._wake.set()
        self._task = asyncio.create_task(self._poll_loop(), name=self.description)

    def nudge(self, revision: str | None = None) -> None:
        if self._closed:
            return
        if revision is not None:
            target = revision.strip().lower()
            if not _is_hex(target):
                logger.warning(
                    "%s: nudged with %r, which is not a commit sha; fetching once",
                    self.description,
                    revision,
                )
            elif self._current is None or not self._current.revision.startswith(target):
                self._targets[target] = time.monotonic() + NUDGE_WINDOW
                self._nudge_attempt = 0
                self._nudge_retry_at = 0.0
        self._wake.set()

    def origin(self) -> Origin:
        ref = self._followed
        if ref is None and self._ref is not None:
            ref = self._ref if self._ref.startswith("refs/") else f"refs/heads/{self._ref}"
        return Origin(self._safe_url, ref)

    def contact_window(self) -> float:
        return max(3 * self.spec.interval, DEFAULT_CONTACT_WINDOW)

    def _answered(self, poll: _Poll) -> None:
        self._followed = poll.ref if poll.ref.startswith("refs/") else self._followed
        self.contacted()

    async def last_applied(self) -> Snapshot | None:
        return await _in_worker(self._load_applied_sync)

    def applied(self, snapshot: Snapshot, reads: Collection[str] | None = None) -> None:
        revision = snapshot.revision
        if snapshot.source != self.description or not (len(revision) == 40 and _is_hex(revision)):
            logger.warning(
                "%s: ignoring applied() for a snapshot of %s", self.description, snapshot.source
            )
            return
        if revision == self._applied:
            return
        state = {
            "format": STATE_FORMAT,
            "source": self.description,
            "ref": self._ref,
            "path": self._path,
            "commit": revision,
            "applied_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        try:
            self._state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._state_file.with_name(f".{self._state_file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, self._state_file)
        except OSError as exc:
            logger.warning(
                "%s: cannot record applied commit %s in %s: %s",
                self.description,
                _short(revision),
                self._state_file,
                exc.strerror or exc,
            )
            return
        self._applied = revision
        self._applied_ref_pending = revision  # the worker updates the ref on its next run

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._changed.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._started:
            closing = asyncio.ensure_future(_in_worker(self._close_sync))
            done, _ = await asyncio.wait({closing}, timeout=CLOSE_WAIT)
            if closing in done:
                closing.result()
            else:  # it closes the cache when the fetch ends (a timeout at the latest)
                closing.add_done_callback(lambda t: t.cancelled() or t.exception())
                logger.info("%s: not waiting for the fetch in progress to end", self.description)

    # ----------------------------------------------------------------- polling

    async def _poll_loop(self) -> None:
        interval = self.spec.interval
        next_poll = time.monotonic() + self._delay(interval)
        while not self._closed:
            due = min(next_poll, self._nudge_retry_at) if self._targets else next_poll
            wait = due - time.monotonic()
            if wait > 0 and not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
            if self._closed:
                return
            self._wake.clear()
            known = frozenset(r for r in (self._revision(), self._rejected) if r)
            try:
                poll = await _in_worker(
                    self._poll_sync,
                    frozenset(self._targets),
                    known,
                    self._revision(),
                    self._applied_ref_pending,
                )
            except Exception as exc:
                self._failed(exc)
                self.contact_failed()
                self._after_nudge(set())
                next_poll = time.monotonic() + self._delay(interval)
                continue
            self._answered(poll)
            self._recovered()
            self._handle(poll)
            self._after_nudge(poll.seen)
            next_poll = time.monotonic() + interval

    def _delay(self, interval: float) -> float:
        if not self._failures:
            return interval
        backoff = interval * 2.0 ** min(self._failures - 1, 30)
        return min(backoff, max(interval, MAX_ERROR_BACKOFF)) * random.uniform(0.9, 1.1)

    def _revision(self) -> str | None:
        return self._current.revision if self._current is not None else None

    def _failed(self, exc: Exception) -> None:
        message = self._scrub(str(exc)) if isinstance(exc, SourceError) else None
        if message is None:
            message = self._scrub(f"unexpected {type(exc).__name__}: {exc}")
        self._failures += 1
        if self._failures == 1:
            self._failing_since = time.monotonic()
            logger.warning(
                "%s: %s; keeping commit %s and retrying with back-off",
                self.description,
                message,
                _short(self._revision() or "none"),
                exc_info=not isinstance(exc, SourceError),
            )
        else:
            logger.debug("%s: still failing (%d): %s", self.description, self._failures, message)

    def _recovered(self) -> None:
        if self._failures:
            logger.info(
                "%s: the remote answers again (after %d failed fetches in %.0f s)",
                self.description,
                self._failures,
                time.monotonic() - self._failing_since,
            )
            self._failures = 0

    def _handle(self, poll: _Poll) -> None:
        if poll.commit == self._revision():
            logger.debug("%s: %s unchanged at %s", self.description, poll.ref, _short(poll.commit))
            return
        if poll.problem is not None:
            if poll.commit != self._rejected:
                self._rejected = poll.commit
                logger.error(
                    "%s: %s; keeping commit %s",
                    self.description,
                    poll.problem,
                    _short(self._revision() or "none"),
                )
            return
        if poll.snapshot is None:  # the rejected commit again
            return
        previous = _short(self._revision() or "none")
        if poll.movement == "backwards":
            logger.warning(
                "%s: %s moved backwards from %s to its ancestor %s; applying it",
                self.description,
                poll.ref,
                previous,
                _short(poll.commit),
            )
        elif poll.movement == "rewritten":
            logger.warning(
                "%s: %s was force-pushed: %s does not descend from %s; applying it",
                self.description,
                poll.ref,
                _short(poll.commit),
                previous,
            )
        else:
            logger.info(
                "%s: %s moved from %s to %s",
                self.description,
                poll.ref,
                previous,
                _short(poll.commit),
            )
        self._rejected = None
        self._current = poll.snapshot
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _after_nudge(self, seen: set[str]) -> None:
        if not self._targets:
            return
        now = time.monotonic()
        for target in seen:
            self._targets.pop(target, None)
        for target, deadline in list(self._targets.items()):
            if now >= deadline:
                del self._targets[target]
                logger.warning(
                    "%s: commit %s, announced by a nudge, is still not on the remote after %.0f s",
                    self.description,
                    _short(target),
                    NUDGE_WINDOW,
                )
        if self._targets:
            delay = min(NUDGE_FIRST_DELAY * 2**self._nudge_attempt, NUDGE_MAX_DELAY)
            self._nudge_attempt += 1
            self._nudge_retry_at = now + delay

    def _scrub(self, text: str) -> str:
        """``text`` without any credential this source knows of, then :func:`redact`-ed."""
        text = text.replace(self.spec.url, self._safe_url)
        return redact(text, [secret for secret in self._secrets if len(secret) >= 4])

    # ----------------------------------------------------------------- worker thread

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One dulwich operation at a time on the cache, in this process and across processes."""
        with self._lock, contextlib.ExitStack() as stack:
            try:
                lock_file = stack.enter_context(open(self.cache_path / _STATE_DIR / "lock", "a"))
            except OSError as exc:  # the cache vanished: still serialize within this process
                logger.debug("%s: cannot open the cache's lock file: %s", self.description, exc)
            else:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
            yield

    def _open_sync(self) -> None:
        """Open the cache repository, creating it (atomically) on first use."""
        path = self.cache_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not path.exists():
                tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.mkdir(mode=0o700)
                Repo.init_bare(str(tmp)).close()
                (tmp / _STATE_DIR).mkdir()
                try:
                    tmp.rename(path)
                except OSError:  # created meanwhile by another process
                    shutil.rmtree(tmp, ignore_errors=True)
            (path / _STATE_DIR).mkdir(exist_ok=True)
            with self._locked():
                self._repo = _CacheRepo(str(path))
                pending = self._read_state()
                if pending is not None and ObjectID(pending.encode()) in self._repo.object_store:
                    self._applied_ref_pending = pending
        except NotGitRepository as exc:
            raise SourceError(
                f"{self.description}: the cache {path} is not a git repository; remove it"
            ) from exc
        except OSError as exc:
            raise SourceError(
                f"{self.description}: cannot use the cache {path}: {exc.strerror or exc}"
            ) from exc

    def _close_sync(self) -> None:
        with self._locked():
            repo, self._repo = self._repo, None
            if repo is None:
                return
            try:
                if self._applied_ref_pending is not None:
                    self._write_applied_ref(repo, self._applied_ref_pending)
            finally:
                repo.close()

    def _write_applied_ref(self, repo: Repo, revision: str) -> None:
        """Point this ref and path's ``refs/cronstable/applied/*`` at ``revision``.

        It keeps the commit reachable (``git gc`` on the cache keeps it) and
        makes it a "have" when negotiating fetches.  A failed write stays
        pending, to be tried again at the next fetch.
        """
        sha = ObjectID(revision.encode("ascii"))
        ref = self._applied_ref
        if sha in repo.object_store and not self._cache_write(
            "record the applied commit as", ref, partial(repo.refs.__setitem__, ref, sha)
        ):
            return
        if self._applied_ref_pending == revision:
            self._applied_ref_pending = None

    def _cache_write(self, what: str, ref: bytes, write: Callable[[], object]) -> bool:
        """Run ``write`` (an update of ``ref`` in the cache); whether it succeeded.

        A failure (a full disk, a lock file) is logged, never raised: the cache's
        refs only speed fetches up and keep the applied commit reachable, so
        they must never stop the source following its remote.  Run under
        :meth:`_locked`: no other cronstable process writes the cache meanwhile,
        so a lock file older than :data:`STALE_LOCK_AGE` was left by an
        interrupted write (a kill -9, a full disk); it is removed and the write
        tried once more.
        """
        problem = ""
        for attempt in (1, 2):
            try:
                write()
            except FileLocked as exc:
                lock = os.fsdecode(exc.lockfilename)
                if attempt == 1 and self._remove_stale_lock(lock):
                    continue
                problem = f"{lock} exists (another writer, or one that was interrupted)"
            except OSError as exc:
                problem = f"{exc.strerror or exc}"
                if exc.filename is not None:
                    problem += f": {os.fsdecode(exc.filename)}"
            else:
                if ref in self._cache_failing:
                    self._cache_failing.discard(ref)
                    logger.info("%s: %s is written again", self.description, ref.decode())
                return True
            break
        if ref in self._cache_failing:
            logger.debug("%s: cannot %s %s: %s", self.description, what, ref.decode(), problem)
        else:
            self._cache_failing.add(ref)
            logger.warning(
                "%s: cannot %s %s in the cache %s: %s; following the remote goes on",
                self.description,
                what,
                ref.decode(),
                self.cache_path,
                problem,
            )
        return False

    def _remove_stale_lock(self, lock: str) -> bool:
        """Remove ``lock`` if it is stale (see :meth:`_cache_write`); whether it is gone."""
        try:
            age = time.time() - os.stat(lock).st_mtime
            if age < STALE_LOCK_AGE:
                return False
            os.unlink(lock)
        except FileNotFoundError:
            return True  # released meanwhile
        except OSError as exc:
            logger.debug("%s: cannot remove %s: %s", self.description, lock, exc)
            return False
        logger.warning(
            "%s: removed the stale lock file %s (%.0f s old, left by an interrupted write)",
            self.description,
            lock,
            age,
        )
        return True

    def _read_state(self) -> str | None:
        """The commit recorded by :meth:`applied` for this ref and path, if any."""
        try:
            raw = self._state_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("%s: cannot read %s: %s", self.description, self._state_file, exc)
            return None
        try:
            state: Any = json.loads(raw)
            if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
                raise ValueError(f"unknown format {state.get('format')!r}")
            commit = state["commit"]
            if state.get("ref") != self._ref or state.get("path") != self._path:
                raise ValueError("recorded for another ref or path")
            if not isinstance(commit, str) or not (len(commit) == 40 and _is_hex(commit)):
                raise ValueError(f"bad commit {commit!r}")
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("%s: ignoring %s: %s", self.description, self._state_file, exc)
            return None
        return commit

    def _load_applied_sync(self) -> Snapshot | None:
        with self._locked():
            repo = self._repo
            commit = self._read_state()
            if repo is None or commit is None:
                return None
            try:
                files = _read_files(
                    repo.object_store,
                    _peel_to_commit(repo.object_store, commit.encode(), commit),
                    self._path,
                    self.description,
                    self.limits,
                )
            except SourceError as exc:
                logger.warning(
                    "%s: the recorded commit %s is unusable: %s",
                    self.description,
                    _short(commit),
                    self._scrub(str(exc)),
                )
                return None
            return Snapshot(revision=commit, source=self.description, files=files)

    def _poll_sync(
        self,
        targets: frozenset[str],
        known: frozenset[str],
        previous: str | None,
        applied: str | None,
    ) -> _Poll:
        """Fetch, resolve the ref, and read the commit's snapshot unless it is ``known``.

        ``targets`` are nudged shas to look for, ``previous`` the current
        revision (to tell how the ref moved), ``applied`` an applied commit to
        record as a ref.
        """
        with self._locked():
            repo = self._repo
            if repo is None:
                raise SourceError("closed")
            if applied is not None:
                self._write_applied_ref(repo, applied)
            try:
                refs, symrefs = self._fetch(repo)
            except OSError as exc:  # writing to the cache (the transport's are SourceErrors)
                raise SourceError(
                    f"cannot update the cache {self.cache_path}: {exc.strerror or exc}"
                ) from exc
            self._maybe_repack(repo)
            ref, sha = self._resolve(repo, refs, symrefs)
            commit = _peel_to_commit(repo.object_store, sha, ref)
            revision = commit.id.decode("ascii")
            poll = _Poll(revision, ref)
            poll.seen = {t for t in targets if self._visible(repo, refs, t)}
            if revision in known:
                return poll
            try:
                files = _read_files(
                    repo.object_store, commit, self._path, self.description, self.limits
                )
            except SourceError as exc:
                poll.problem = self._scrub(str(exc))
                return poll
            poll.snapshot = Snapshot(revision=revision, source=self.description, files=files)
            if previous is not None and previous != revision:
                if _is_ancestor(repo, previous.encode(), commit.id) is False:
                    backwards = _is_ancestor(repo, commit.id, previous.encode())
                    poll.movement = "backwards" if backwards else "rewritten"
            return poll

    def _fetch(self, repo: _CacheRepo) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
        """Fetch what the ref needs; the remote's refs and symrefs (the local mirror updated)."""
        store = repo.object_store

        def determine_wants(
            refs: Mapping[Ref, ObjectID], depth: int | None = None
        ) -> list[ObjectID]:
            advertised = _advertised(refs)
            try:
                wanted = self._wanted(repo, advertised)
            except SourceError:
                return []  # reported after the fetch, from the same refs
            return [ObjectID(sha) for sha in dict.fromkeys(wanted) if ObjectID(sha) not in store]

        try:
            for attempt in transient(
                self.description,
                _is_transient,
                lambda exc: (
                    self._scrub(self._fetch_error(exc)) if isinstance(exc, Exception) else ""
                ),
            ):
                with attempt:
                    result = self._fetch_once(repo, determine_wants)
        except SourceError:
            raise
        except Exception as exc:  # the transport's many failure types, all "cannot fetch"
            raise SourceError(self._fetch_error(exc)) from exc
        refs = _advertised({k: v for k, v in result.refs.items() if v is not None})
        self._mirror(repo, refs)
        return refs, {bytes(k): bytes(v) for k, v in result.symrefs.items()}

    def _fetch_once(self, repo: _CacheRepo, determine_wants: Any) -> Any:
        username = password = None
        if self._http is not None:
            username, password = self._http.resolve()
            if password:
                self._secrets.add(password)
        try:
            client, path, pool = open_client(
                self._transport_url,
                timeout=self.spec.timeout,
                username=username,
                password=password,
                ssh_command=self._ssh_command,
            )
        except ValueError as exc:
            raise SourceError(f"unsupported git URL {self._safe_url}: {exc}") from exc
        try:
            return client.fetch(path, repo, determine_wants=determine_wants)
        finally:
            close_client(client, pool)

    def _fetch_error(self, exc: Exception) -> str:
        where = self._safe_url
        if is_timeout(exc):
            return f"cannot fetch {where}: no answer within {self.spec.timeout:g} s (timeout)"
        if isinstance(exc, HTTPUnauthorized):
            if self._http is not None and self._http.configured:
                return f"{where} rejected the credentials (HTTP 401)"
            return (
                f"{where} requires credentials (HTTP 401): set {ENV_USERNAME} and "
                f"{ENV_PASSWORD} or {ENV_PASSWORD_FILE}"
            )
        if isinstance(exc, HangupException):
            detail = b" ".join(exc.stderr_lines or ()).decode("utf-8", "replace").strip()
            return f"{where} hung up{': ' + detail if detail else ''}"
        if isinstance(exc, NotGitRepository):
            return f"{where} is not a git repository"
        if isinstance(exc, OSError):
            return f"cannot fetch {where}: {exc.strerror or exc}"
        cause = exc.__cause__
        if isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
            return f"cannot fetch {where}: {cause.reason}"
        if isinstance(exc, GitProtocolError):
            return f"cannot fetch {where}: {exc}"
        return f"cannot fetch {where}: {type(exc).__name__}: {exc}"

    def _wanted(self, repo: Repo, refs: Mapping[bytes, bytes]) -> list[bytes]:
        ref = self._ref
        if ref is None:
            head = refs.get(b"HEAD")
            return [head] if head is not None else [self._default_branch(refs, {})[1]]
        name = self._named_ref(refs)
        if name is not None:
            return [refs[name]]
        if _is_hex(ref.lower()):
            sha = ref.lower()
            if len(sha) == 40 and ObjectID(sha.encode()) in repo.object_store:
                return []
            tips = [v for v in refs.values() if v.decode("ascii").startswith(sha)]
            if tips:
                return tips
            if len(sha) < 40 and self._find_short(repo, sha) is not None:
                return []
            # Not a tip: it may be anywhere in the history of any branch or tag.
            return [v for k, v in refs.items() if k.startswith((b"refs/heads/", b"refs/tags/"))]
        raise SourceError(f"ref {ref!r} not found on the remote")

    def _named_ref(self, refs: Mapping[bytes, bytes]) -> bytes | None:
        assert self._ref is not None
        found = [c for c in _ref_candidates(self._ref) if c in refs]
        if len(found) > 1 and found[0].startswith(LOCAL_TAG_PREFIX):
            logger.debug(
                "%s: %r is both a tag and a branch; using the tag", self.description, self._ref
            )
        return found[0] if found else None

    def _default_branch(
        self, refs: Mapping[bytes, bytes], symrefs: Mapping[bytes, bytes]
    ) -> tuple[bytes, bytes]:
        target = symrefs.get(b"HEAD")
        if target is not None and target in refs:
            return target, refs[target]
        head = refs.get(b"HEAD")
        branches = {k: v for k, v in refs.items() if k.startswith(LOCAL_BRANCH_PREFIX)}
        if head is not None:
            at_head = [k for k, v in branches.items() if v == head]
            for preferred in (b"refs/heads/main", b"refs/heads/master"):
                if preferred in at_head:
                    return preferred, head
            if at_head:
                return sorted(at_head)[0], head
            return b"HEAD", head
        for preferred in (b"refs/heads/main", b"refs/heads/master"):
            if preferred in branches:
                return preferred, branches[preferred]
        if not branches:
            raise SourceError("the remote has no branches")
        raise SourceError("the remote names no default branch (HEAD) and has no main or master")

    def _find_short(self, repo: Repo, prefix: str) -> bytes | None:
        store = repo.object_store
        matches = []
        for sha in store.iter_prefix(prefix.encode("ascii")):
            with contextlib.suppress(KeyError):
                if isinstance(store[sha], Commit | Tag):
                    matches.append(sha)
        if len(matches) > 1:
            raise SourceError(f"short sha {prefix!r} is ambiguous in the cache")
        return matches[0] if matches else None

    def _resolve(
        self, repo: Repo, refs: Mapping[bytes, bytes], symrefs: Mapping[bytes, bytes]
    ) -> tuple[str, bytes]:
        """The remote ref the source follows (a label for logs) and the sha it points to."""
        if self._ref is None:
            branch, sha = self._default_branch(refs, symrefs)
            return branch.decode("utf-8", "replace"), sha
        name = self._named_ref(refs)
        if name is not None:
            return name.decode("utf-8", "replace"), refs[name]
        if _is_hex(self._ref.lower()):
            wanted = self._ref.lower()
            if len(wanted) == 40:
                if ObjectID(wanted.encode()) in repo.object_store:
                    return wanted, wanted.encode()
            else:
                found = self._find_short(repo, wanted)
                if found is not None:
                    return wanted, found
            raise SourceError(f"commit {self._ref} is not on any branch or tag of the remote")
        raise SourceError(f"ref {self._ref!r} not found on the remote (no such branch or tag)")

    def _visible(self, repo: Repo, refs: Mapping[bytes, bytes], target: str) -> bool:
        if any(v.decode("ascii").startswith(target) for v in refs.values()):
            return True
        if len(target) == 40:
            return ObjectID(target.encode()) in repo.object_store
        return any(True for _ in repo.object_store.iter_prefix(target.encode()))

    def _mirror(self, repo: Repo, refs: Mapping[bytes, bytes]) -> None:
        """Keep the remote's branches and tags whose objects the cache holds as local refs."""
        store = repo.object_store
        local = {
            k: v
            for k, v in repo.refs.as_dict().items()
            if k.startswith((b"refs/heads/", b"refs/tags/"))
        }
        for name, sha in refs.items():
            if not name.startswith((b"refs/heads/", b"refs/tags/")) or not check_ref_format(
                Ref(name)
            ):
                continue
            if local.get(Ref(name)) != sha and ObjectID(sha) in store:
                update = partial(repo.refs.__setitem__, Ref(name), ObjectID(sha))
                self._cache_write("update", name, update)
        for name in local:
            if name not in refs:
                self._cache_write("remove", name, partial(repo.refs.remove_if_equals, name, None))

    def _maybe_repack(self, repo: Repo) -> None:
        pack_dir = Path(repo.object_store.path) / "pack"
        try:
            packs = [e for e in os.scandir(pack_dir) if e.name.endswith(".pack")]
            if len(packs) <= REPACK_PACKS:
                return
            if sum(e.stat().st_size for e in packs) > REPACK_MAX_BYTES:
                return
            repo.object_store.repack()
            logger.debug("%s: repacked %d packs in the cache", self.description, len(packs))
        except OSError as exc:
            logger.debug("%s: cannot repack the cache: %s", self.description, exc)


def _is_transient(exc: BaseException) -> bool:
    """A failure worth a quick retry: the connection, not the remote's answer."""
    if isinstance(exc, HTTPUnauthorized | NotGitRepository | SourceError) or is_timeout(exc):
        return False  # a remote that does not answer in time is not retried at once
    if isinstance(exc, OSError | HangupException):
        return True
    return isinstance(exc.__cause__, urllib3.exceptions.MaxRetryError)


def _advertised(refs: Mapping[Any, Any]) -> dict[bytes, bytes]:
    """Remote refs without the peeled ``^{}`` entries (protocol v0/v1)."""
    return {
        bytes(k): bytes(v)
        for k, v in refs.items()
        if v is not None and not bytes(k).endswith(PEELED_TAG_SUFFIX)
    }
