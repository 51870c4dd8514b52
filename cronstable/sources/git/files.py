"""A commit's files, read from a repository's object store (there is no work tree).

Each snapshot is one commit: ``files`` holds every regular file of its tree
(below ``path`` when set), at most a revision's worth of bytes
(:class:`~cronstable.config.limits.Limits`).  Submodules (gitlinks) are skipped;
symlinks are never followed: each is skipped with a warning.

The git source reads its commits from its cache this way, and
:func:`snapshot_from_local_repo` a local repository at a revision, for
``cronstable diff git:REPO@REF[:SUBDIR]`` (without asyncio: ``diff`` imports only
what its sides need).
"""

from __future__ import annotations

import logging
import stat

from dulwich.errors import NotGitRepository
from dulwich.object_store import BaseObjectStore
from dulwich.objects import S_ISGITLINK, Commit, Tree
from dulwich.repo import Repo

from cronstable.config.limits import DEFAULT_LIMITS, OPTION_REVISION_BYTES, Limits, size_text
from cronstable.snapshot import Snapshot
from cronstable.sources.base import SourceError
from cronstable.sources.git.refs import resolve_local_revision, short

logger = logging.getLogger("cronstable.sources.git")  # one logger for the whole git source


def normalize_subdir(subdir: str) -> str:
    """``subdir`` as a path below the repository's root (``""`` for the root itself)."""
    parts = [p for p in subdir.strip("/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SourceError(f"path {subdir!r} leaves the repository")
    return "/".join(parts)


def read_files(
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
    commit_name = short(commit.id)
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


def snapshot_from_local_repo(
    repo_path: str, ref: str, subdir: str = "", limits: Limits = DEFAULT_LIMITS
) -> Snapshot:
    """A snapshot of ``ref`` (see :func:`~cronstable.sources.git.refs.resolve_local_revision`)
    in a local repository.

    ``repo_path`` is a work tree with ``.git`` or a bare repository; ``subdir``
    narrows the snapshot to a directory, as a source's ``path=`` does.  Files are
    read from the object store, never from the work tree.  The snapshot's
    ``source`` is ``git:REPO@REF[:SUBDIR]``.  Raises :class:`SourceError` for a
    missing repository, an unknown revision or a missing ``subdir``; its message
    does not repeat ``git:REPO@REF`` (the caller names what it was asked).
    """
    subdir = normalize_subdir(subdir)
    where = f"git:{repo_path}@{ref}{':' + subdir if subdir else ''}"
    try:
        repo = Repo(repo_path)
    except NotGitRepository as exc:
        raise SourceError(f"{repo_path} is not a git repository") from exc
    except OSError as exc:
        raise SourceError(f"cannot open {repo_path}: {exc.strerror or exc}") from exc
    try:
        commit = resolve_local_revision(repo, ref)
        files = read_files(repo.object_store, commit, subdir, where, limits)
    finally:
        repo.close()
    return Snapshot(revision=commit.id.decode("ascii"), source=where, files=files)
