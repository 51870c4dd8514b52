"""GitSource specifics (the shared behaviour is in test_sources_contract.py), against real
remotes: ``git daemon`` and ``git http-backend`` on loopback, repositories made with ``git``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from daemon_proc import until
from git_server import GitDaemon, GitHttpServer, SilentServer, WorkRepo, git, outage

from cronstable.snapshot import Snapshot
from cronstable.sources.base import SourceError
from cronstable.sources.factory import open_source
from cronstable.sources.git import cache as git_cache
from cronstable.sources.git import source as git_source
from cronstable.sources.git.files import snapshot_from_local_repo
from cronstable.sources.git.source import GitSource
from cronstable.sources.git.spec import GitSpec, parse_git_spec

pytestmark = [pytest.mark.timeout(60)]

CONFIG = {"cronstable.yaml": b"jobs: []\n"}
LOGGER = "cronstable.sources.git"


# --------------------------------------------------------------------------- fixtures, helpers


@pytest.fixture(autouse=True)
def debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "origin"
    path.mkdir()
    return path


@pytest.fixture
def repo(root: Path) -> WorkRepo:
    return WorkRepo.create(root, "config")


@pytest.fixture
def daemon(root: Path) -> Iterator[GitDaemon]:
    with GitDaemon(root) as server:
        yield server


def make_source(
    url: str,
    cache: Path,
    *,
    ref: str | None = None,
    path: str = "",
    interval: float = 0.3,
    timeout: float = 30.0,
) -> GitSource:
    return GitSource(GitSpec(url, ref, path, interval, timeout), cache_dir=cache)


async def next_snapshot(it: AsyncIterator[Snapshot], within: float = 10.0) -> Snapshot:
    return await asyncio.wait_for(anext(it), within)


async def first_snapshot(source: GitSource) -> Snapshot:
    await source.start()
    return await next_snapshot(source.watch())


async def wait_for_log(caplog: pytest.LogCaptureFixture, text: str) -> None:
    await until(lambda: count(caplog, text) > 0, what=f"log line containing {text!r}")


def count(caplog: pytest.LogCaptureFixture, text: str, level: int | None = None) -> int:
    """How many of the source's log lines contain ``text`` (at ``level``)."""
    return sum(
        1
        for r in caplog.records
        if r.name == LOGGER and text in r.getMessage() and (level is None or r.levelno == level)
    )


def push(repo: WorkRepo, files: dict[str, bytes], branch: str = "main") -> str:
    sha = repo.commit(files)
    repo.push(f"HEAD:refs/heads/{branch}")
    return sha


# --------------------------------------------------------------------------- which commit


@pytest.mark.asyncio
async def test_default_ref_is_the_remote_head_branch(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path
) -> None:
    push(repo, {"main.yaml": b"main\n"})
    repo.checkout("trunk", create=True)
    trunk = push(repo, {"trunk.yaml": b"trunk\n"}, "trunk")
    repo.set_origin_head("trunk")
    source = make_source(daemon.url("config.git"), tmp_path / "cache")
    try:
        snap = await first_snapshot(source)
        assert snap.revision == trunk
        assert dict(snap.files) == {"trunk.yaml": b"trunk\n"}
        assert snap.source == source.description == daemon.url("config.git")
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_default_ref_falls_back_to_main_when_head_is_unborn(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path
) -> None:
    main = push(repo, CONFIG)
    repo.set_origin_head("no-such-branch")
    source = make_source(daemon.url("config.git"), tmp_path / "cache")
    try:
        assert (await first_snapshot(source)).revision == main
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_branch_ref_follows_that_branch_only(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path
) -> None:
    push(repo, {"a.yaml": b"main 1\n"})
    repo.checkout("staging", create=True)
    staging = push(repo, {"a.yaml": b"staging 1\n"}, "staging")
    source = make_source(daemon.url("config.git"), tmp_path / "cache", ref="staging")
    try:
        await source.start()
        it = source.watch()
        assert (await next_snapshot(it)).revision == staging
        repo.checkout("main")
        push(repo, {"a.yaml": b"main 2\n"})
        source.nudge()
        pending = asyncio.ensure_future(anext(it))  # never cancelled, unlike wait_for's
        done, _ = await asyncio.wait({pending}, timeout=1.0)
        assert not done
        repo.checkout("staging")
        staging2 = push(repo, {"a.yaml": b"staging 2\n"}, "staging")
        source.nudge()
        await asyncio.wait({pending}, timeout=10.0)
        snap = pending.result()
        assert (snap.revision, dict(snap.files)) == (staging2, {"a.yaml": b"staging 2\n"})
        assert "ref=staging" in source.description
    finally:
        await source.close()


@pytest.mark.parametrize("annotated", [True, False], ids=["annotated", "lightweight"])
@pytest.mark.asyncio
async def test_a_tag_ref_is_peeled_to_its_commit(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, annotated: bool
) -> None:
    tagged = push(repo, {"a.yaml": b"v1\n"})
    repo.tag("v1.0", message="release 1.0" if annotated else None)
    repo.push("refs/tags/v1.0")
    push(repo, {"a.yaml": b"after v1\n"})
    source = make_source(daemon.url("config.git"), tmp_path / "cache", ref="v1.0")
    try:
        snap = await first_snapshot(source)
        assert (snap.revision, dict(snap.files)) == (tagged, {"a.yaml": b"v1\n"})
    finally:
        await source.close()


@pytest.mark.parametrize("length", [40, 7])
@pytest.mark.asyncio
async def test_a_sha_ref_that_is_no_tip(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, length: int
) -> None:
    old = push(repo, {"a.yaml": b"old\n"})
    push(repo, {"a.yaml": b"new\n"})
    source = make_source(daemon.url("config.git"), tmp_path / "cache", ref=old[:length])
    try:
        snap = await first_snapshot(source)
        assert (snap.revision, dict(snap.files)) == (old, {"a.yaml": b"old\n"})
    finally:
        await source.close()


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no-such-branch", "ref 'no-such-branch' not found on the remote"),
        ("0" * 40, "is not on any branch or tag"),
    ],
)
@pytest.mark.asyncio
async def test_an_unknown_ref_at_start_is_an_error(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, ref: str, message: str
) -> None:
    push(repo, CONFIG)
    source = make_source(daemon.url("config.git"), tmp_path / "cache", ref=ref)
    with pytest.raises(SourceError, match=message):
        await source.start()
    await source.close()


# --------------------------------------------------------------------------- which files


@pytest.mark.asyncio
async def test_path_narrows_to_a_subdirectory_and_skips_links(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo.write({"deploy/cron/cronstable.yaml": "jobs: []\n", "deploy/cron/jobs/a.yaml": "a\n"})
    repo.write({"other/x.yaml": "x\n", "README": "hi\n"}, replace=False)
    os.symlink("/etc/passwd", repo.work / "deploy/cron/link.yaml")
    repo.git("add", "--all")
    # a submodule (gitlink) entry, as `git submodule add` would record it
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},deploy/cron/sub")
    repo.git("commit", "--quiet", "-m", "layout")
    repo.push("HEAD:refs/heads/main")
    source = make_source(daemon.url("config.git"), tmp_path / "cache", path="deploy/cron")
    try:
        snap = await first_snapshot(source)
        assert dict(snap.files) == {"cronstable.yaml": b"jobs: []\n", "jobs/a.yaml": b"a\n"}
        assert count(caplog, "skipping symlink link.yaml", logging.WARNING) == 1
        assert count(caplog, "skipping submodule sub", logging.DEBUG) == 1
        assert source.description.endswith("?path=deploy/cron")
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_missing_path_is_reported_clearly(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    push(repo, {"deploy/cronstable.yaml": b"jobs: []\n"})
    cache = tmp_path / "cache"
    source = make_source(daemon.url("config.git"), cache, path="nowhere")
    with pytest.raises(SourceError, match=r"path 'nowhere' does not exist in commit [0-9a-f]{12}"):
        await source.start()
    await source.close()

    # Later commits without the path are refused, and the current snapshot kept.
    source = make_source(daemon.url("config.git"), cache, path="deploy")
    try:
        await source.start()
        it = source.watch()
        first = await next_snapshot(it)
        bad = push(repo, {"elsewhere/cronstable.yaml": b"jobs: []\n"})
        source.nudge(bad)
        await wait_for_log(caplog, "path 'deploy' does not exist in commit")
        good = push(repo, {"deploy/cronstable.yaml": b"jobs: [1]\n"})
        source.nudge(good)
        second = await next_snapshot(it)
        assert first.revision != bad and second.revision == good
        assert count(caplog, "does not exist in commit", logging.ERROR) == 1
    finally:
        await source.close()


# --------------------------------------------------------------------------- the cache


def in_pack_objects(path: Path) -> int:
    stats = dict(line.split(": ") for line in git("count-objects", "-v", cwd=path).splitlines())
    return int(stats["count"]) + int(stats["in-pack"])


@pytest.mark.asyncio
async def test_fetched_refs_are_kept_and_a_refetch_transfers_nothing(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(10):
        repo.commit({"a.yaml": f"{i}\n".encode(), f"f{i}": os.urandom(2000)}, replace=False)
    tip = repo.rev_parse("HEAD")
    repo.push("HEAD:refs/heads/main")
    repo.tag("v1")
    repo.push("refs/tags/v1")
    cache = tmp_path / "cache"
    source = make_source(daemon.url("config.git"), cache, interval=0.1)
    try:
        await first_snapshot(source)
        path = source.cache_path
        assert path.parent == cache / "git"
        assert git("rev-parse", "refs/heads/main", cwd=path) == tip
        assert git("rev-parse", "refs/tags/v1", cwd=path) == tip  # mirrored, objects present
        objects = in_pack_objects(path)
        packs = sorted(p.name for p in (path / "objects/pack").glob("*.pack"))
        for _ in range(3):
            polls = count(caplog, "unchanged at")
            source.nudge()
            await until(lambda: count(caplog, "unchanged at") > polls, what="poll")  # noqa: B023
        assert in_pack_objects(path) == objects
        assert sorted(p.name for p in (path / "objects/pack").glob("*.pack")) == packs

        # A new commit brings its own objects (commit, tree, blob; maybe a delta base).
        new = repo.commit({"a.yaml": b"new\n"}, replace=False)
        repo.push("HEAD:refs/heads/main")
        source.nudge(new)
        await wait_for_log(caplog, f"to {new[:12]}")
        assert in_pack_objects(path) - objects <= 5  # not the history again
        assert git("rev-parse", "refs/heads/main", cwd=path) == new
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_the_cache_is_repacked_when_packs_pile_up(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(git_cache, "REPACK_PACKS", 3)
    push(repo, {"a.yaml": b"0\n"})
    source = make_source(daemon.url("config.git"), tmp_path / "cache", interval=3600)
    try:
        await source.start()
        it = source.watch()
        await next_snapshot(it)
        packs = source.cache_path / "objects" / "pack"
        counts = []
        for i in range(1, 6):
            sha = push(repo, {"a.yaml": f"{i}\n".encode()})
            source.nudge(sha)
            snap = await next_snapshot(it)
            assert (snap.revision, snap.files["a.yaml"]) == (sha, f"{i}\n".encode())
            counts.append(len(list(packs.glob("*.pack"))))
        assert max(counts) <= 4 and counts != sorted(counts), counts
        git("fsck", "--no-dangling", cwd=source.cache_path)
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_one_cache_per_url_without_credentials(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    plain = make_source("https://git.example.com/ops/config.git", cache)
    with_user = make_source("https://bot:hunter2@git.example.com/ops/config.git", cache)
    digest = hashlib.sha256(b"https://git.example.com/ops/config.git").hexdigest()[:16]
    assert plain.cache_path == with_user.cache_path == cache / "git" / digest
    assert (
        with_user.description == plain.description == "git+https://git.example.com/ops/config.git"
    )
    await plain.close()
    await with_user.close()


# --------------------------------------------------------------------------- changes


@pytest.mark.asyncio
async def test_a_force_push_and_a_rollback_are_applied_with_a_warning(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = push(repo, {"a.yaml": b"a\n"})
    b = push(repo, {"a.yaml": b"b\n"})
    source = make_source(daemon.url("config.git"), tmp_path / "cache")
    try:
        await source.start()
        it = source.watch()
        assert (await next_snapshot(it)).revision == b
        repo.reset_hard(a)
        c = repo.commit({"a.yaml": b"c\n"})
        repo.push("HEAD:refs/heads/main", force=True)
        source.nudge(c)
        snap = await next_snapshot(it)
        assert (snap.revision, dict(snap.files)) == (c, {"a.yaml": b"c\n"})
        assert count(caplog, f"refs/heads/main was force-pushed: {c[:12]}", logging.WARNING) == 1

        repo.push(f"{a}:refs/heads/main", force=True)
        source.nudge(a)
        assert (await next_snapshot(it)).revision == a
        assert count(caplog, f"moved backwards from {c[:12]} to its ancestor", logging.WARNING)

        repo.reset_hard(a)
        d = push(repo, {"a.yaml": b"d\n"})  # a plain fast-forward again
        source.nudge(d)
        assert (await next_snapshot(it)).revision == d
        assert count(caplog, f"moved from {a[:12]} to {d[:12]}", logging.INFO) == 1
        assert count(caplog, "", logging.WARNING) == 2
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_nudge_with_a_sha_waits_for_a_late_push(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    push(repo, {"a.yaml": b"1\n"})
    source = make_source(daemon.url("config.git"), tmp_path / "cache", interval=3600)
    try:
        await source.start()
        it = source.watch()
        await next_snapshot(it)
        late = repo.commit({"a.yaml": b"2\n"})  # the webhook fires before the remote has it
        source.nudge(late)
        await asyncio.sleep(1.0)
        repo.push("HEAD:refs/heads/main")
        snap = await next_snapshot(it, within=8.0)
        assert (snap.revision, dict(snap.files)) == (late, {"a.yaml": b"2\n"})
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_nudge_for_a_commit_that_never_comes_gives_up(
    repo: WorkRepo,
    daemon: GitDaemon,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(git_source, "NUDGE_WINDOW", 1.0)
    push(repo, CONFIG)
    source = make_source(daemon.url("config.git"), tmp_path / "cache", interval=3600)
    try:
        await source.start()
        source.nudge("ab" * 20)
        source.nudge("not a sha")
        await wait_for_log(caplog, f"commit {'ab' * 6}, announced by a nudge, is still not")
        assert count(caplog, "'not a sha', which is not a commit sha", logging.WARNING) == 1
    finally:
        await source.close()


# --------------------------------------------------------------------------- outages, last good


@pytest.mark.asyncio
async def test_an_outage_is_logged_once_and_recovered_from(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    push(repo, {"a.yaml": b"1\n"})
    source = make_source(daemon.url("config.git"), tmp_path / "cache", interval=0.05)
    try:
        await source.start()
        it = source.watch()
        await next_snapshot(it)
        with outage(daemon):
            await wait_for_log(caplog, "still failing (4)")
            changed = push(repo, {"a.yaml": b"2\n"})
        source.nudge()
        snap = await next_snapshot(it)
        assert snap.revision == changed
        assert count(caplog, "the remote answers again", logging.INFO) == 1
        assert count(caplog, "retrying with back-off", logging.WARNING) == 1
        assert count(caplog, "", logging.WARNING) == 1
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_start_with_the_remote_down_serves_the_applied_commit(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = push(repo, {"a.yaml": b"1\n"})
    cache = tmp_path / "cache"
    source = make_source(daemon.url("config.git"), cache)
    await source.start()
    source.applied(await next_snapshot(source.watch()))
    await source.close()
    state = json.loads(next((source.cache_path / "cronstable").glob("applied-*.json")).read_text())
    assert state["format"] == 1 and state["commit"] == first
    assert (
        git("for-each-ref", "--format=%(objectname)", "refs/cronstable", cwd=source.cache_path)
        == first
    )

    second = push(repo, {"a.yaml": b"2\n"})
    with outage(daemon):
        again = make_source(daemon.url("config.git"), cache)
        await again.start()
        it = again.watch()
        snap = await next_snapshot(it)
        assert (snap.revision, dict(snap.files)) == (first, {"a.yaml": b"1\n"})
        assert count(caplog, f"starting from the last applied commit {first[:12]}", logging.WARNING)

        # Another ref or path has no last good commit of its own.
        other = make_source(daemon.url("config.git"), cache, ref="main")
        with pytest.raises(SourceError, match="no earlier revision to start from"):
            await other.start()
        await other.close()
    try:
        again.nudge()
        assert (await next_snapshot(it)).revision == second
        assert count(caplog, "the remote answers again", logging.INFO) == 1
    finally:
        await again.close()


@pytest.mark.asyncio
async def test_start_with_the_remote_down_and_no_cache_is_an_error(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path
) -> None:
    push(repo, CONFIG)
    daemon.stop()
    source = make_source(daemon.url("config.git"), tmp_path / "cache")
    with pytest.raises(SourceError, match="Connection refused.*no earlier revision to start from"):
        await source.start()
    await source.close()


# --------------------------------------------------------------------------- cache faults


def applied_ref(source: GitSource) -> str:
    return git("for-each-ref", "--format=%(objectname)", "refs/cronstable", cwd=source.cache_path)


@pytest.mark.asyncio
async def test_a_stale_lock_file_in_the_cache_is_removed_and_following_goes_on(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill -9 (or a full disk) during a ref write leaves ``*.lock``: it never stops a source."""
    push(repo, {"a.yaml": b"1\n"})
    cache = tmp_path / "cache"
    source = make_source(daemon.url("config.git"), cache, interval=3600)
    try:
        await source.start()
        it = source.watch()
        first = await next_snapshot(it)
        lock = source.cache_path / f"{source._cache.applied_ref.decode()}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_bytes(b"")
        an_hour_ago = time.time() - 3600
        os.utime(lock, (an_hour_ago, an_hour_ago))
        source.applied(first)
        second = push(repo, {"a.yaml": b"2\n"})
        source.nudge(second)
        assert (await next_snapshot(it)).revision == second
        assert not lock.exists()
        assert applied_ref(source) == first.revision
        assert count(caplog, f"removed the stale lock file {lock}", logging.WARNING) == 1
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_a_live_lock_file_never_stops_the_source_nor_its_restart(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lock too young to be called stale is left alone: the write waits, following goes on."""
    push(repo, {"a.yaml": b"1\n"})
    cache = tmp_path / "cache"
    source = make_source(daemon.url("config.git"), cache, interval=3600)
    await source.start()
    it = source.watch()
    first = await next_snapshot(it)
    lock = source.cache_path / f"{source._cache.applied_ref.decode()}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_bytes(b"")
    try:
        source.applied(first)
        second = push(repo, {"a.yaml": b"2\n"})
        source.nudge(second)
        assert (await next_snapshot(it)).revision == second
        source.nudge()
        await until(lambda: count(caplog, "unchanged at") > 0, what="a second fetch")
        assert count(caplog, "cannot record the applied commit as", logging.WARNING) == 1
    finally:
        await source.close()  # the pending ref write fails again: logged, never raised
    assert lock.exists() and applied_ref(source) == ""

    # A restart with the lock still there starts, follows, and writes the ref once it is gone.
    again = make_source(daemon.url("config.git"), cache, interval=3600)
    try:
        await again.start()
        it = again.watch()
        assert (await next_snapshot(it)).revision == second
        lock.unlink()
        third = push(repo, {"a.yaml": b"3\n"})
        again.nudge(third)
        assert (await next_snapshot(it)).revision == third
        assert applied_ref(again) == first.revision
    finally:
        await again.close()


# --------------------------------------------------------------------------- transports


@pytest.mark.parametrize("how", ["env", "password-file", "url", "url-token"])
@pytest.mark.asyncio
async def test_http_basic_credentials_never_leak(
    repo: WorkRepo,
    root: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger: dulwich's and urllib3's too
    user, secret = "deploy-bot", "s3cr3t-t0ken-42"
    sha = push(repo, CONFIG)
    for name in (
        "CRONSTABLE_GIT_USERNAME",
        "CRONSTABLE_GIT_PASSWORD",
        "CRONSTABLE_GIT_PASSWORD_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    if how == "url-token":  # https://TOKEN@host/…, as some forges take it
        user, secret = secret, ""
    with GitHttpServer(root, credentials=(user, secret)) as server:
        url = server.url("config.git")
        if how == "url":
            url = url.replace("http://", f"http://{user}:{secret}@")
        elif how == "url-token":
            url = url.replace("http://", f"http://{user}@")
        else:
            monkeypatch.setenv("CRONSTABLE_GIT_USERNAME", user)
            if how == "env":
                monkeypatch.setenv("CRONSTABLE_GIT_PASSWORD", secret)
            else:
                (tmp_path / "token").write_text(f"{secret}\n")
                monkeypatch.setenv("CRONSTABLE_GIT_PASSWORD_FILE", str(tmp_path / "token"))
        source = make_source(url, tmp_path / "cache")
        try:
            snap = await first_snapshot(source)
            assert snap.revision == sha
            server.stop()  # an outage: its error line must not leak either
            source.nudge()
            await wait_for_log(caplog, "Connection refused")
        finally:
            await source.close()
        assert server.requests and all(r.status == 200 for r in server.requests)
        for credential in filter(None, (secret, user if how == "url-token" else None)):
            assert credential not in caplog.text
        for credential in filter(None, (secret, user)):
            assert credential not in source.description and credential not in snap.source


@pytest.mark.asyncio
async def test_http_without_or_with_wrong_credentials(
    repo: WorkRepo, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    push(repo, CONFIG)
    monkeypatch.delenv("CRONSTABLE_GIT_USERNAME", raising=False)
    monkeypatch.delenv("CRONSTABLE_GIT_PASSWORD", raising=False)
    monkeypatch.delenv("CRONSTABLE_GIT_PASSWORD_FILE", raising=False)
    with GitHttpServer(root, credentials=("bot", "right")) as server:
        source = make_source(server.url("config.git"), tmp_path / "cache")
        with pytest.raises(SourceError, match="requires credentials.*CRONSTABLE_GIT_USERNAME"):
            await source.start()
        await source.close()
        wrong = server.url("config.git").replace("http://", "http://bot:wrong-pw@")
        source = make_source(wrong, tmp_path / "cache")
        with pytest.raises(SourceError, match="rejected the credentials") as info:
            await source.start()
        await source.close()
        assert "wrong-pw" not in str(info.value)


@pytest.mark.asyncio
async def test_smart_http_and_file_urls(repo: WorkRepo, root: Path, tmp_path: Path) -> None:
    sha = push(repo, CONFIG)
    with GitHttpServer(root) as server:
        source = make_source(server.url("config.git"), tmp_path / "http-cache")
        try:
            assert (await first_snapshot(source)).revision == sha
        finally:
            await source.close()
    source = make_source(repo.bare.as_uri(), tmp_path / "file-cache")
    try:
        assert (await first_snapshot(source)).revision == sha
    finally:
        await source.close()


def test_credential_configuration_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CRONSTABLE_GIT_USERNAME", raising=False)
    monkeypatch.setenv("CRONSTABLE_GIT_PASSWORD", "x")
    with pytest.raises(SourceError, match="CRONSTABLE_GIT_USERNAME must be set"):
        make_source("https://example.com/r.git", tmp_path)
    monkeypatch.setenv("CRONSTABLE_GIT_USERNAME", "u")
    monkeypatch.setenv("CRONSTABLE_GIT_PASSWORD_FILE", "/nowhere")
    with pytest.raises(SourceError, match="not both"):
        make_source("https://example.com/r.git", tmp_path)
    with pytest.raises(SourceError, match="passwords in ssh URLs are not supported") as info:
        make_source("ssh://git:pw123@example.com/r.git", tmp_path)
    assert "pw123" not in str(info.value)
    source = open_source("git+ssh://git@example.com/r.git?ref=main&path=a/b", cache_dir=tmp_path)
    assert source.description == "git+ssh://example.com/r.git?ref=main&path=a/b"


# --------------------------------------------------------------------------- hung remotes


@pytest.mark.parametrize("scheme", ["git", "http"])
@pytest.mark.asyncio
async def test_a_remote_that_never_answers_fails_the_fetch_after_the_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, scheme: str
) -> None:
    with SilentServer() as silent:
        url = silent.url(scheme, "config.git")
        if scheme == "http":
            url = url.replace("http://", "http://bot:pa55word-42@")
        source = open_source(
            f"{'' if scheme == 'git' else 'git+'}{url}?timeout=1", cache_dir=tmp_path / "cache"
        )
        assert isinstance(source, GitSource) and source.spec.timeout == 1.0
        started = time.monotonic()
        with pytest.raises(SourceError) as info:
            await source.start()
        took = time.monotonic() - started
        await source.close()
    assert silent.accepted == 1  # connected, then waited: not retried at once
    assert 1.0 <= took < 5.0, took
    safe = silent.url(scheme, "config.git")
    assert f"cannot fetch {safe}: no answer within 1 s" in str(info.value)
    assert "pa55word" not in str(info.value) and "pa55word" not in caplog.text


@pytest.mark.parametrize("scheme", ["git", "http"])
@pytest.mark.asyncio
async def test_a_remote_that_hangs_later_is_a_warning_naming_it(
    repo: WorkRepo, root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, scheme: str
) -> None:
    """Started from the cache, the first fetch that times out is a WARNING naming the remote."""
    caplog.set_level(logging.DEBUG)  # every logger: dulwich's and urllib3's too
    push(repo, {"a.yaml": b"1\n"})
    cache = tmp_path / "cache"
    server = GitDaemon(root) if scheme == "git" else GitHttpServer(root)
    with server:
        source = make_source(server.url("config.git"), cache)
        source.applied(await first_snapshot(source))
        await source.close()
    with SilentServer() as silent:
        safe = silent.url(scheme, "config.git")
        url = safe if scheme == "git" else safe.replace("http://", "http://bot:pa55word-42@")
        hung = make_source(url, cache, interval=3600, timeout=1.0)
        # the cache is per URL: hand the recorded one to the silent server's URL
        os.rename(source.cache_path, hung.cache_path)
        started = time.monotonic()
        try:
            await hung.start()
            took = time.monotonic() - started
            assert (await next_snapshot(hung.watch())).revision == repo.rev_parse("HEAD")
        finally:
            await hung.close()
    assert 1.0 <= took < 5.0, took
    warning = f"cannot fetch {safe}: no answer within 1 s (timeout); starting from the last"
    assert count(caplog, warning, logging.WARNING) == 1
    assert hung.description in caplog.text and "pa55word" not in caplog.text


def test_the_timeout_option() -> None:
    assert parse_git_spec("git://h/r.git").timeout == 30.0
    assert parse_git_spec("git+https://h/r.git?ref=main&timeout=2.5").timeout == 2.5
    for bad, message in [
        ("0", "timeout must be a finite number of seconds, more than 0"),
        ("-1", "more than 0"),
        ("inf", "finite"),
        ("nan", "finite"),
        ("soon", "timeout 'soon' is not a number of seconds"),
    ]:
        with pytest.raises(SourceError, match=message):
            parse_git_spec(f"git://h/r.git?timeout={bad}")


@pytest.mark.asyncio
async def test_close_does_not_wait_for_a_hung_fetch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SilentServer() as silent:
        source = make_source(silent.url("git", "config.git"), tmp_path / "cache", timeout=20.0)
        starting = asyncio.ensure_future(source.start())
        await until(lambda: silent.accepted == 1, what="connection")
        started = time.monotonic()
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await source.close()
        took = time.monotonic() - started
    assert took < 2.0, took
    assert count(caplog, "not waiting for the fetch in progress to end", logging.INFO) == 1


# --------------------------------------------------------------------------- the event loop


def build_history(repo: WorkRepo, commits: int = 300, size: int = 24_000) -> str:
    """``commits`` commits of incompressible files on ``main``, fast (``git fast-import``)."""
    stream: list[bytes] = []
    for i in range(commits):
        message = b"commit %d" % i
        stream.append(
            b"commit refs/heads/main\ncommitter T <t@example.invalid> %d +0000\ndata %d\n%s\n"
            % (1_700_000_000 + i, len(message), message)
        )
        for j in range(2):
            data = os.urandom(size)
            stream.append(
                b"M 100644 inline d%d/%d.bin\ndata %d\n%s\n" % (j, i % 25, len(data), data)
            )
        stream.append(b"\n")
    git("fast-import", "--quiet", cwd=repo.bare, input=b"".join(stream))
    return git("rev-parse", "refs/heads/main", cwd=repo.bare)


@pytest.mark.asyncio
async def test_fetches_never_block_the_event_loop(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path
) -> None:
    tip = await asyncio.to_thread(build_history, repo)
    source = make_source(daemon.url("config.git"), tmp_path / "cache")
    gaps: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    beat = asyncio.create_task(heartbeat())
    try:
        started = time.monotonic()
        snap = await first_snapshot(source)
        took = time.monotonic() - started
    finally:
        done.set()
        await beat
        await source.close()
    assert snap.revision == tip and len(snap.files) == 50
    assert took > 0.1, "the fetch was too quick to tell anything"
    # a fetch on the loop would stall it for the whole fetch; off the loop, the loop
    # keeps ticking throughout (a busy machine may still delay a tick now and then)
    assert max(gaps) < took / 2, f"the event loop stalled {max(gaps) * 1000:.0f} ms"
    assert len(gaps) >= took / 0.01 / 4, f"{len(gaps)} ticks in {took:.2f} s"


# --------------------------------------------------------------------------- local repositories


@pytest.fixture
def local(repo: WorkRepo) -> dict[str, str]:
    """A work tree with history, a branch, a tag and a remote-tracking branch."""
    shas = {"one": repo.commit({"cfg/a.yaml": b"1\n", "top.txt": b"top\n"})}
    repo.tag("v1", message="first")
    shas["two"] = repo.commit({"cfg/a.yaml": b"2\n"})
    repo.push("HEAD:refs/heads/main")
    repo.git("fetch", "--quiet", "origin")  # refs/remotes/origin/main = two
    repo.checkout("feature", create=True)
    shas["feature"] = repo.commit({"cfg/a.yaml": b"feature\n"})
    repo.checkout("main")
    shas["three"] = repo.commit({"cfg/a.yaml": b"3\n"})
    (repo.work / "cfg/a.yaml").write_text("uncommitted\n")  # the work tree is never read
    return shas


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("HEAD", "three"),
        ("main", "three"),
        ("feature", "feature"),
        ("origin/main", "two"),
        ("refs/remotes/origin/main", "two"),
        ("v1", "one"),
        ("v1^{}", "one"),
        ("HEAD~1", "two"),
        ("HEAD^", "two"),
        ("main~2", "one"),
    ],
)
def test_snapshot_from_local_repo(
    repo: WorkRepo, local: dict[str, str], ref: str, expected: str
) -> None:
    snap = snapshot_from_local_repo(str(repo.work), ref)
    assert snap.revision == local[expected]
    content = {"one": b"1\n", "two": b"2\n", "three": b"3\n", "feature": b"feature\n"}
    assert snap.files["cfg/a.yaml"] == content[expected]
    assert snap.source == f"git:{repo.work}@{ref}"


def test_snapshot_from_local_repo_shas_and_subdirs(repo: WorkRepo, local: dict[str, str]) -> None:
    for sha in (local["two"], local["two"][:8], local["two"][:8].upper()):
        assert snapshot_from_local_repo(str(repo.work), sha).revision == local["two"]
    snap = snapshot_from_local_repo(str(repo.work), "v1", "cfg/")
    assert dict(snap.files) == {"a.yaml": b"1\n"}
    assert snap.source == f"git:{repo.work}@v1:cfg"
    bare = snapshot_from_local_repo(str(repo.bare), "main")
    assert bare.revision == local["two"]


@pytest.mark.parametrize(
    ("ref", "subdir", "message"),
    [
        ("nope", "", "unknown revision 'nope'"),
        ("deadbeef", "", "unknown revision 'deadbeef'"),
        ("HEAD~10", "", "has no parent"),
        ("HEAD", "missing", "path 'missing' does not exist in commit"),
        ("v1", "top.txt", "path 'top.txt' in commit [0-9a-f]+ is not a directory"),
        ("HEAD", "../x", "leaves the repository"),
        ("HEAD@{1}", "", "unknown revision"),
    ],
)
def test_snapshot_from_local_repo_errors(
    repo: WorkRepo, local: dict[str, str], ref: str, subdir: str, message: str
) -> None:
    with pytest.raises(SourceError, match=message):
        snapshot_from_local_repo(str(repo.work), ref, subdir)


def test_snapshot_from_a_directory_that_is_no_repository(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is not a git repository"):
        snapshot_from_local_repo(str(tmp_path), "HEAD")


# --------------------------------------------------------------------------- snapshot_at


@pytest.mark.asyncio
async def test_snapshot_at_reads_another_branch_a_tag_and_a_parent_without_following_them(
    repo: WorkRepo, daemon: GitDaemon, tmp_path: Path
) -> None:
    first = push(repo, {"c.yaml": b"one\n"})
    repo.tag("v1")
    repo.git("push", "--quiet", "origin", "v1")
    second = push(repo, {"c.yaml": b"two\n"})
    source = make_source(daemon.url("config.git"), tmp_path / "cache", ref="main")
    try:
        assert (await first_snapshot(source)).revision == second
        # a branch pushed after the source started, never fetched by its polls
        repo.checkout("feature", create=True)
        feature = push(repo, {"c.yaml": b"feature\n"}, "feature")
        at = await source.snapshot_at("feature")
        assert (at.revision, dict(at.files)) == (feature, {"c.yaml": b"feature\n"})
        assert at.source == source.description
        assert (await source.snapshot_at("v1")).revision == first
        assert (await source.snapshot_at("main~1")).revision == first
        assert (await source.snapshot_at("HEAD")).revision == second  # the followed ref
        assert (await source.snapshot_at(first[:10])).revision == first
        with pytest.raises(SourceError, match="not found"):
            await source.snapshot_at("no-such-branch")
        with pytest.raises(SourceError, match="no parent"):
            await source.snapshot_at(f"{first}~5")
        # the source still follows main: reading another revision changed nothing
        assert source.origin().ref == "refs/heads/main"
        with outage(daemon):  # the remote down: what the cache holds still answers
            assert (await source.snapshot_at("feature")).revision == feature
            with pytest.raises(SourceError):
                await source.snapshot_at("never-pushed")
    finally:
        await source.close()


@pytest.mark.asyncio
async def test_other_sources_say_they_read_no_other_revision(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("jobs: []\n")
    source = open_source(str(tmp_path))
    await source.start()
    try:
        with pytest.raises(SourceError, match="only a git source can read another revision"):
            await source.snapshot_at("main")
    finally:
        await source.close()
