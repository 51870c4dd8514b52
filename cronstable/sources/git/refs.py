"""Which commit a name means: the ref a git source follows on its remote, and a revision
of a local repository (``cronstable diff git:REPO@REF``).

A source's ``ref`` (:class:`FollowedRef`) may be:

* absent (or ``HEAD``): the remote's default branch, as its ``HEAD`` symref
  names it (else the branch ``HEAD`` points at, else ``main``, else ``master``);
* a branch or tag name, resolved the way ``git rev-parse`` does (``refs/NAME``,
  then ``refs/tags/NAME``, then ``refs/heads/NAME``), or a full ``refs/…`` name;
  an annotated tag is peeled to its commit;
* a full or abbreviated (at least 4 hex digits) commit sha.

Only the objects it needs are fetched (:meth:`FollowedRef.wants`): the branch or
tag, the remote's default branch, or every branch and tag while a configured sha
is not yet in the cache.  :func:`resolve_local_revision` reads the forms of
``git rev-parse`` a local repository is asked with.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping
from typing import Any

from dulwich.graph import can_fast_forward
from dulwich.object_store import BaseObjectStore
from dulwich.objects import Commit, ObjectID, ShaFile, Tag
from dulwich.protocol import PEELED_TAG_SUFFIX
from dulwich.refs import LOCAL_BRANCH_PREFIX, LOCAL_TAG_PREFIX, Ref, check_ref_format
from dulwich.repo import Repo

from cronstable.sources.base import SourceError

logger = logging.getLogger("cronstable.sources.git")  # one logger for the whole git source

_HEX = re.compile(r"[0-9a-f]+")
_PSEUDO_REF = re.compile(r"[A-Z][A-Z_]*")
_REV_OPERATOR = re.compile(r"~(\d*)|\^\{(\w*)\}|\^(\d*)")


def short(sha: str | bytes) -> str:
    text = sha.decode("ascii") if isinstance(sha, bytes) else sha
    return text[:12]


def is_hex(text: str, min_len: int = 4) -> bool:
    return min_len <= len(text) <= 40 and _HEX.fullmatch(text) is not None


def ref_candidates(name: str) -> list[bytes]:
    """The full ref names ``name`` may mean, in ``git rev-parse`` order (remotes excluded)."""
    raw = name.encode("utf-8")
    candidates = []
    if name.startswith("refs/") or _PSEUDO_REF.fullmatch(name):
        candidates.append(raw)
    candidates += [b"refs/" + raw, LOCAL_TAG_PREFIX + raw, LOCAL_BRANCH_PREFIX + raw]
    return [c for c in candidates if c == b"HEAD" or check_ref_format(Ref(c))]


def peel_to_commit(store: BaseObjectStore, sha: bytes, what: str) -> Commit:
    """The commit ``sha`` is or (through tags) points to."""
    try:
        obj: ShaFile = store[ObjectID(sha)]
        while isinstance(obj, Tag):
            obj = store[obj.object[1]]
    except KeyError as exc:
        raise SourceError(
            f"{what}: object {short(exc.args[0] if exc.args else sha)} is missing"
        ) from exc
    if not isinstance(obj, Commit):
        raise SourceError(f"{what} is a {obj.type_name.decode()}, not a commit")
    return obj


def is_ancestor(repo: Repo, ancestor: bytes, descendant: bytes) -> bool | None:
    """Whether ``ancestor`` is an ancestor of (or equal to) ``descendant``; None if unknown."""
    store = repo.object_store
    if ObjectID(ancestor) not in store or ObjectID(descendant) not in store:
        return None
    try:
        return can_fast_forward(repo, ObjectID(ancestor), ObjectID(descendant))
    except (KeyError, AssertionError):
        return None


def advertised(refs: Mapping[Any, Any]) -> dict[bytes, bytes]:
    """Remote refs without the peeled ``^{}`` entries (protocol v0/v1)."""
    return {
        bytes(k): bytes(v)
        for k, v in refs.items()
        if v is not None and not bytes(k).endswith(PEELED_TAG_SUFFIX)
    }


def visible(repo: Repo, refs: Mapping[bytes, bytes], target: str) -> bool:
    """Whether the commit (or sha prefix) ``target`` is on the remote or in the cache."""
    if any(v.decode("ascii").startswith(target) for v in refs.values()):
        return True
    if len(target) == 40:
        return ObjectID(target.encode()) in repo.object_store
    return any(True for _ in repo.object_store.iter_prefix(target.encode()))


# --------------------------------------------------------------------------- a remote's ref


class FollowedRef:
    """The ``ref`` of a git source on its remote (None: the remote's default branch).

    ``where`` names the source in log lines.
    """

    def __init__(self, name: str | None, where: str) -> None:
        self.name = name
        self.where = where

    def wants(self, repo: Repo, refs: Mapping[bytes, bytes]) -> list[bytes]:
        """The remote shas a fetch asks for (some may be in the cache already)."""
        ref = self.name
        if ref is None:
            head = refs.get(b"HEAD")
            return [head] if head is not None else [default_branch(refs, {})[1]]
        name = self._named(refs)
        if name is not None:
            return [refs[name]]
        if is_hex(ref.lower()):
            sha = ref.lower()
            if len(sha) == 40 and ObjectID(sha.encode()) in repo.object_store:
                return []
            tips = [v for v in refs.values() if v.decode("ascii").startswith(sha)]
            if tips:
                return tips
            if len(sha) < 40 and find_short(repo, sha) is not None:
                return []
            # Not a tip: it may be anywhere in the history of any branch or tag.
            return [v for k, v in refs.items() if k.startswith((b"refs/heads/", b"refs/tags/"))]
        raise SourceError(f"ref {ref!r} not found on the remote")

    def resolve(
        self, repo: Repo, refs: Mapping[bytes, bytes], symrefs: Mapping[bytes, bytes]
    ) -> tuple[str, bytes]:
        """The remote ref the source follows (a label for logs) and the sha it points to."""
        if self.name is None:
            branch, sha = default_branch(refs, symrefs)
            return branch.decode("utf-8", "replace"), sha
        name = self._named(refs)
        if name is not None:
            return name.decode("utf-8", "replace"), refs[name]
        if is_hex(self.name.lower()):
            wanted = self.name.lower()
            if len(wanted) == 40:
                if ObjectID(wanted.encode()) in repo.object_store:
                    return wanted, wanted.encode()
            else:
                found = find_short(repo, wanted)
                if found is not None:
                    return wanted, found
            raise SourceError(f"commit {self.name} is not on any branch or tag of the remote")
        raise SourceError(f"ref {self.name!r} not found on the remote (no such branch or tag)")

    def _named(self, refs: Mapping[bytes, bytes]) -> bytes | None:
        assert self.name is not None
        found = [c for c in ref_candidates(self.name) if c in refs]
        if len(found) > 1 and found[0].startswith(LOCAL_TAG_PREFIX):
            logger.debug("%s: %r is both a tag and a branch; using the tag", self.where, self.name)
        return found[0] if found else None


def default_branch(
    refs: Mapping[bytes, bytes], symrefs: Mapping[bytes, bytes]
) -> tuple[bytes, bytes]:
    """The remote's default branch (its full name, or ``HEAD``) and the sha it points to."""
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


def find_short(repo: Repo, prefix: str) -> bytes | None:
    """The one commit or tag in the cache whose sha starts with ``prefix``, if any."""
    store = repo.object_store
    matches = []
    for sha in store.iter_prefix(prefix.encode("ascii")):
        with contextlib.suppress(KeyError):
            if isinstance(store[sha], Commit | Tag):
                matches.append(sha)
    if len(matches) > 1:
        raise SourceError(f"short sha {prefix!r} is ambiguous in the cache")
    return matches[0] if matches else None


# --------------------------------------------------------------------------- local repositories


def _resolve_local_base(repo: Repo, base: str) -> bytes:
    if base in ("HEAD", "@"):
        try:
            return repo.refs[Ref(b"HEAD")]
        except KeyError:
            raise SourceError("HEAD does not point to a commit yet") from None
    store = repo.object_store
    if len(base) == 40 and is_hex(base) and ObjectID(base.encode()) in store:
        return base.encode()
    candidates = ref_candidates(base)
    raw = base.encode("utf-8")
    remote = [b"refs/remotes/" + raw, b"refs/remotes/" + raw + b"/HEAD"]
    candidates += [c for c in remote if check_ref_format(Ref(c))]
    for name in candidates:
        if Ref(name) in repo.refs:
            try:
                return repo.refs[Ref(name)]
            except KeyError:  # a dangling symref
                continue
    if is_hex(base.lower()) and len(base) < 40:
        matches = []
        for sha in store.iter_prefix(base.lower().encode()):
            with contextlib.suppress(KeyError):
                if isinstance(store[sha], Commit | Tag):
                    matches.append(sha)
        if len(matches) == 1:
            return matches[0]
        if matches:
            names = ", ".join(sorted(short(m) for m in matches))
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
    commit = peel_to_commit(store, _resolve_local_base(repo, base), base)
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
                    raise SourceError(f"{rev}: commit {short(commit.id)} has no parent")
                commit = peel_to_commit(store, commit.parents[0], rev)
        else:
            number = int(caret or 1)
            if number == 0:
                continue
            if number > len(commit.parents):
                raise SourceError(f"{rev}: commit {short(commit.id)} has no parent #{number}")
            commit = peel_to_commit(store, commit.parents[number - 1], rev)
    return commit
