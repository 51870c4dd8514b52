"""LocalDirSource against real file edits: editors, atomic saves, ConfigMaps, lost roots."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess
from daemon_proc import until as wait_until
from harness_local import make_tree, write_atomically

from cronstable.config.limits import Limits
from cronstable.reconcile.apply import Applier
from cronstable.runtime.daemon import source_reads
from cronstable.snapshot import Snapshot, content_revision
from cronstable.sources import local
from cronstable.sources.base import SourceError
from cronstable.sources.local import LocalDirSource

pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio]

JOB = b"jobs:\n  - name: %s\n    command: echo\n    schedule: '* * * * *'\n"
BASE = {"cronstable.yaml": b"jobs: []\n", "jobs/a.yaml": b"jobs:\n  - {name: a}\n"}


async def next_snapshot(it: AsyncIterator[Snapshot], wait: float = 5.0) -> Snapshot:
    return await asyncio.wait_for(anext(it), wait)


async def nothing_within(it: AsyncIterator[Snapshot], seconds: float) -> None:
    waiter = asyncio.ensure_future(anext(it))
    done, _ = await asyncio.wait({waiter}, timeout=seconds)
    waiter.cancel()
    assert not done, f"unexpected snapshot {dict(waiter.result().files)!r}"


async def until(
    it: AsyncIterator[Snapshot], files: dict[str, bytes], wait: float = 5.0
) -> Snapshot:
    """The first snapshot holding exactly ``files`` (earlier ones are checked complete)."""
    deadline = time.monotonic() + wait
    while True:
        snap = await next_snapshot(it, max(0.01, deadline - time.monotonic()))
        if dict(snap.files) == files:
            return snap


@asynccontextmanager
async def running(path: Path) -> AsyncIterator[tuple[LocalDirSource, AsyncIterator[Snapshot]]]:
    source = LocalDirSource(path)
    await source.start()
    try:
        yield source, source.watch()
    finally:
        await source.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    make_tree(tmp_path / "cfg", BASE)
    return tmp_path / "cfg"


# -- editors --------------------------------------------------------------------------


async def test_in_place_write(root: Path) -> None:
    async with running(root) as (_, it):
        first = await next_snapshot(it)
        assert dict(first.files) == BASE and first.entry == ""
        assert first.revision == content_revision(BASE)
        (root / "jobs/a.yaml").write_bytes(b"jobs:\n  - {name: changed}\n")
        snap = await next_snapshot(it)
        assert snap.files["jobs/a.yaml"] == b"jobs:\n  - {name: changed}\n"
        assert snap.revision == content_revision(dict(snap.files))


async def test_atomic_save(root: Path) -> None:
    async with running(root) as (_, it):
        await next_snapshot(it)
        write_atomically(root / "cronstable.yaml", b"jobs: [saved]\n")
        snap = await next_snapshot(it)
        assert dict(snap.files) == {**BASE, "cronstable.yaml": b"jobs: [saved]\n"}


async def test_rename(root: Path) -> None:
    async with running(root) as (_, it):
        await next_snapshot(it)
        (root / "jobs/a.yaml").rename(root / "jobs/b.yaml")
        snap = await next_snapshot(it)
        assert set(snap.files) == {"cronstable.yaml", "jobs/b.yaml"}


async def test_delete(root: Path) -> None:
    async with running(root) as (_, it):
        await next_snapshot(it)
        (root / "jobs/a.yaml").unlink()
        snap = await next_snapshot(it)
        assert dict(snap.files) == {"cronstable.yaml": b"jobs: []\n"}


async def test_new_subdirectory_with_a_file_created_right_after_mkdir(root: Path) -> None:
    async with running(root) as (_, it):
        await next_snapshot(it)
        (root / "teams/data/nightly").mkdir(parents=True)
        (root / "teams/data/nightly/x.yaml").write_bytes(b"jobs: []\n")
        (root / "teams/web").mkdir()
        (root / "teams/web/y.yaml").write_bytes(b"jobs: []\n")
        both = {
            **BASE,
            "teams/data/nightly/x.yaml": b"jobs: []\n",
            "teams/web/y.yaml": b"jobs: []\n",
        }
        await until(it, both)
        await asyncio.sleep(1.1)  # the new directories are watched now: an edit is an event
        (root / "teams/data/nightly/x.yaml").write_bytes(b"jobs: [edited]\n")
        await until(it, {**both, "teams/data/nightly/x.yaml": b"jobs: [edited]\n"})


async def test_a_burst_of_50_writes_is_one_complete_snapshot(root: Path) -> None:
    versions = [f"jobs:\n  - {{name: v{i}}}\n".encode() * 20 for i in range(50)]
    async with running(root) as (_, it):
        await next_snapshot(it)
        for data in versions:  # in place: truncate, then write
            (root / "jobs/a.yaml").write_bytes(data)
            await asyncio.sleep(0.002)
        seen = [await next_snapshot(it)]
        with pytest.raises(TimeoutError):
            while True:
                seen.append(await next_snapshot(it, wait=1.0))
    assert len(seen) <= 2, [s.files["jobs/a.yaml"][:20] for s in seen]
    assert all(s.files["jobs/a.yaml"] in versions for s in seen)
    assert seen[-1].files["jobs/a.yaml"] == versions[-1]


async def test_touching_or_saving_unchanged_yields_nothing(root: Path) -> None:
    async with running(root) as (source, it):
        await next_snapshot(it)
        os.utime(root / "jobs/a.yaml")
        write_atomically(root / "cronstable.yaml", BASE["cronstable.yaml"])
        (root / "jobs/a.yaml").write_bytes(BASE["jobs/a.yaml"])
        source.nudge()
        await nothing_within(it, 0.8)


async def test_the_same_content_again_is_not_yielded_twice(root: Path) -> None:
    async with running(root) as (_, it):
        await next_snapshot(it)
        (root / "jobs/a.yaml").write_bytes(b"x\n")
        await next_snapshot(it)
        (root / "jobs/a.yaml").write_bytes(b"y\n")
        (root / "jobs/a.yaml").write_bytes(b"x\n")  # back before the scan settles
        await nothing_within(it, 0.8)


# -- the root -------------------------------------------------------------------------


async def test_a_missing_root_at_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="nowhere"):
        await LocalDirSource(tmp_path / "nowhere").start()


async def test_root_deleted_then_recreated_is_re_armed(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="cronstable.sources.local")
    checks = 0
    identity = local._identity

    def counted(path: str) -> tuple[int, int] | None:
        nonlocal checks
        checks += 1
        return identity(path)

    monkeypatch.setattr(local, "_identity", counted)
    async with running(root) as (_, it):
        first = await next_snapshot(it)
        shutil.rmtree(root)
        checks = 0
        await nothing_within(it, 1.2)  # the last snapshot stays
        assert checks <= 3  # polled about once a second, never spinning
        assert any(
            r.levelno == logging.WARNING
            and "keeping the last snapshot" in r.getMessage()
            and first.revision.removeprefix("sha256:")[:12] in r.getMessage()
            for r in caplog.records
        )
        make_tree(tmp_path / "next", {"cronstable.yaml": b"jobs: [recreated]\n"})
        (tmp_path / "next").rename(root)
        await until(it, {"cronstable.yaml": b"jobs: [recreated]\n"})
        assert any("is back" in r.getMessage() for r in caplog.records)
        await asyncio.sleep(1.2)  # past the re-arm's own rescan: only the watch is left
        (root / "cronstable.yaml").write_bytes(b"jobs: [watched]\n")
        await until(it, {"cronstable.yaml": b"jobs: [watched]\n"})


async def test_root_recreated_in_place_by_mkdir(root: Path) -> None:
    async with running(root) as (_, it):
        await next_snapshot(it)
        shutil.rmtree(root)
        os.mkdir(root)
        (root / "cronstable.yaml").write_bytes(b"jobs: [again]\n")
        await until(it, {"cronstable.yaml": b"jobs: [again]\n"})
        (root / "cronstable.yaml").write_bytes(b"jobs: [watched]\n")
        await until(it, {"cronstable.yaml": b"jobs: [watched]\n"})


async def test_a_symlinked_root_pointed_elsewhere(tmp_path: Path) -> None:
    make_tree(tmp_path / "releases/1", {"cronstable.yaml": b"jobs: [one]\n"})
    make_tree(tmp_path / "releases/2", {"cronstable.yaml": b"jobs: [two]\n"})
    current = tmp_path / "current"
    current.symlink_to("releases/1")
    async with running(current) as (_, it):
        assert dict((await next_snapshot(it)).files) == {"cronstable.yaml": b"jobs: [one]\n"}
        (tmp_path / "current.tmp").symlink_to("releases/2")
        os.replace(tmp_path / "current.tmp", current)
        await until(it, {"cronstable.yaml": b"jobs: [two]\n"})
        (tmp_path / "releases/2/cronstable.yaml").write_bytes(b"jobs: [edited]\n")
        await until(it, {"cronstable.yaml": b"jobs: [edited]\n"})


# -- what is read ---------------------------------------------------------------------


def configmap(root: Path, files: dict[str, bytes], stamp: str) -> None:
    """What the kubelet does to a ConfigMap volume: new dir, ``..data`` swap, links, cleanup."""
    root.mkdir(exist_ok=True)
    new = root / f"..{stamp}"
    new.mkdir()
    for name, data in files.items():
        (new / name).write_bytes(data)
    old = os.readlink(root / "..data") if (root / "..data").is_symlink() else None
    (root / "..data_tmp").symlink_to(new.name)
    os.replace(root / "..data_tmp", root / "..data")
    for name in files:
        if not (root / name).is_symlink():
            (root / name).symlink_to(f"..data/{name}")
    for link in root.iterdir():
        if not link.name.startswith(".") and link.name not in files:
            link.unlink()
    if old:
        shutil.rmtree(root / old)


async def test_a_configmap_symlink_swap(tmp_path: Path) -> None:
    root = tmp_path / "cfg"
    configmap(root, {"cronstable.yaml": b"jobs: [one]\n", "old.env": b"A=1\n"}, "2026_11_29_1")
    async with running(root) as (_, it), running(root / "cronstable.yaml") as (_, file_it):
        first = await next_snapshot(it)
        assert dict(first.files) == {"cronstable.yaml": b"jobs: [one]\n", "old.env": b"A=1\n"}
        assert (await next_snapshot(file_it)).entry == "cronstable.yaml"
        configmap(root, {"cronstable.yaml": b"jobs: [two]\n", "new.env": b"B=2\n"}, "2026_11_29_2")
        await until(it, {"cronstable.yaml": b"jobs: [two]\n", "new.env": b"B=2\n"})
        snap = await until(file_it, {"cronstable.yaml": b"jobs: [two]\n", "new.env": b"B=2\n"})
        assert snap.entry == "cronstable.yaml"  # the root stays /cfg, not the dated directory


async def test_hidden_entries_are_skipped_private_ones_are_not(root: Path) -> None:
    make_tree(
        root,
        {
            **BASE,
            ".git/HEAD": b"ref: refs/heads/main\n",
            ".hidden.yaml": b"jobs: [hidden]\n",
            "jobs/.a.yaml.swp": b"\0swap",
            "_templates/base.yaml": b"defaults: {}\n",
        },
    )
    async with running(root) as (source, it):
        snap = await next_snapshot(it)
        assert dict(snap.files) == {**BASE, "_templates/base.yaml": b"defaults: {}\n"}
        (root / ".git/HEAD").write_bytes(b"ref: refs/heads/other\n")
        (root / "jobs/.a.yaml.swp").write_bytes(b"\0swap2")
        source.nudge()
        await nothing_within(it, 0.8)


async def test_symlinks_inside_are_followed_outside_and_loops_are_not(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="cronstable.sources.local")
    (tmp_path / "secret").write_bytes(b"outside\n")
    (root / "shared").mkdir()
    (root / "shared/env").write_bytes(b"A=1\n")
    (root / "linked-dir").symlink_to("shared")
    (root / "linked-file.yaml").symlink_to("jobs/a.yaml")
    (root / "escape").symlink_to(tmp_path / "secret")
    (root / "escape-dir").symlink_to(tmp_path)
    (root / "shared/loop").symlink_to("..")
    (root / "dangling").symlink_to("nowhere")
    os.mkfifo(root / "fifo")
    async with running(root) as (_, it):
        snap = await next_snapshot(it)
    assert dict(snap.files) == {
        **BASE,
        "shared/env": b"A=1\n",
        "linked-dir/env": b"A=1\n",
        "linked-file.yaml": BASE["jobs/a.yaml"],
    }
    # links leaving the root are not read, but named: the loader decides (below)
    real = await asyncio.to_thread(os.path.realpath, tmp_path)
    assert dict(snap.outside) == {"escape": f"{real}/secret", "escape-dir/": real}
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "fifo" in warned and "escape" not in warned  # not loaded: DEBUG only


@pytest.mark.parametrize(
    ("link", "files", "error"),
    [
        # a configuration file of the loaded directory
        ("jobs/escape.yaml", {}, "jobs/escape.yaml"),
        # an include target
        ("_inc.yaml", {"cronstable.yaml": b"include: [_inc.yaml]\n"}, "cannot include"),
        # an env_file target
        (
            "app.env",
            {"jobs/a.yaml": JOB % b"a" + b"    env_file: ../app.env\n"},
            "cannot read env_file",
        ),
        # a file below a linked directory, through an include
        ("_d", {"cronstable.yaml": b"include: [_d/x.yaml]\n"}, "cannot include"),
    ],
    ids=["loadable-name", "include", "env-file", "include-through-dir-link"],
)
async def test_a_link_leaving_the_tree_that_the_load_reads_is_an_error_as_in_validate(
    tmp_path: Path, link: str, files: dict[str, bytes], error: str
) -> None:
    from cronstable.config import ConfigError, load
    from cronstable.config.tree import DiskTree

    outside = tmp_path / "outside"
    make_tree(outside, {"x.yaml": JOB % b"x", "app.env": b"A=1\n"})
    target = outside if link == "_d" else outside / ("app.env" if link == "app.env" else "x.yaml")
    root = tmp_path / "cfg"
    make_tree(root, {**BASE, "jobs/a.yaml": JOB % b"a", **files})
    (root / link).symlink_to(target)
    (root / "notes.txt").symlink_to(outside / "x.yaml")  # never loaded: fine in both

    with pytest.raises(ConfigError, match="resolves outside") as on_disk:  # validate's view
        load(DiskTree(root))
    assert error in str(on_disk.value)
    applier = Applier([])
    async with running(root) as (_, it):
        snap = await next_snapshot(it)
        record = await applier.reconcile(snap)  # the daemon's view
    assert record.outcome == "rejected", record
    assert any("resolves outside" in e and error in e for e in record.errors), record.errors

    (root / link).unlink()  # the same content inside the tree loads in both
    if target.is_dir():
        shutil.copytree(target, root / link)
    else:
        (root / link).write_bytes(target.read_bytes())
    load(DiskTree(root))
    async with running(root) as (_, it):
        assert (await applier.reconcile(await next_snapshot(it))).outcome == "applied"


async def test_a_file_spec_reads_its_siblings(root: Path) -> None:
    make_tree(root, {**BASE, "env/prod.env": b"A=1\n", ".main.yaml": b"jobs: []\n"})
    async with running(root / "cronstable.yaml") as (source, it):
        snap = await next_snapshot(it)
        assert snap.entry == "cronstable.yaml"
        assert dict(snap.files) == {**BASE, "env/prod.env": b"A=1\n"}
        assert source.description == str(root / "cronstable.yaml")
        (root / "env/prod.env").write_bytes(b"A=2\n")
        snap = await until(it, {**BASE, "env/prod.env": b"A=2\n"})
        assert snap.entry == "cronstable.yaml"
    async with running(root / ".main.yaml") as (_, it):  # a hidden entry is still read
        snap = await next_snapshot(it)
        assert snap.entry == ".main.yaml" and ".main.yaml" in snap.files


async def test_a_file_spec_in_a_crowded_directory_is_refused(root: Path) -> None:
    for i in range(30):
        (root / f"other-{i}").write_bytes(b"x")
    with pytest.raises(SourceError, match="give cronstable.yaml a directory of its own"):
        await LocalDirSource(root / "cronstable.yaml", limits=Limits(max_files=20)).start()
    with pytest.raises(SourceError, match="more than 40 bytes.*--max-revision-bytes"):
        await LocalDirSource(root, limits=Limits(max_revision_bytes=40)).start()


async def test_a_file_spec_whose_file_goes_away_keeps_the_last_snapshot(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(root / "cronstable.yaml") as (_, it):
        await next_snapshot(it)
        (root / "cronstable.yaml").unlink()
        await nothing_within(it, 0.8)
        assert any("keeping the last snapshot" in r.getMessage() for r in caplog.records)
        (root / "cronstable.yaml").write_bytes(b"jobs: [back]\n")
        await until(it, {**BASE, "cronstable.yaml": b"jobs: [back]\n"})


def deny(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> None:
    """Make opening ``paths`` fail with EACCES (chmod does not stop root)."""
    denied = {os.fspath(p) for p in paths}
    real_open = os.open

    def guarded(path: str, flags: int, *args: int, **kwargs: int) -> int:
        if os.fspath(path) in denied:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)


async def test_an_unreadable_file_keeps_the_last_snapshot(
    root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(root) as (_, it):
        await next_snapshot(it)
        deny(monkeypatch, root / "teams/b.yaml")
        (root / "teams").mkdir()
        (root / "teams/b.yaml").write_bytes(b"jobs: []\n")
        await nothing_within(it, 0.8)
        assert any(
            r.levelno == logging.WARNING
            and "cannot read" in r.getMessage()
            and "keeping the last snapshot" in r.getMessage()
            for r in caplog.records
        )
        # readable again, without an event (and in a directory not watched yet): polled
        monkeypatch.undo()
        await until(it, {**BASE, "teams/b.yaml": b"jobs: []\n"}, wait=3.0)


async def test_beside_a_file_spec_unreadable_siblings_are_skipped(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "shadow").write_bytes(b"secret\n")
    deny(monkeypatch, root / "shadow")
    async with running(root / "cronstable.yaml") as (_, it):
        assert dict((await next_snapshot(it)).files) == BASE
    deny(monkeypatch, root / "shadow", root / "cronstable.yaml")
    with pytest.raises(SourceError, match="cannot read"):
        await LocalDirSource(root / "cronstable.yaml").start()


# -- consistency and the event loop ---------------------------------------------------


async def test_a_file_being_written_in_place_is_never_delivered_half_written(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 256 * 1024
    versions = [bytes([65 + i]) * size + b"\n" for i in range(12)]
    target = root / "big.txt"
    target.write_bytes(versions[0])
    raw: list[bytes | None] = []
    scan = local.scan_tree

    def recording_scan(*args: object, **kwargs: int) -> object:
        try:
            result = scan(*args, **kwargs)  # type: ignore[arg-type]
        except local._Torn:
            raw.append(None)
            raise
        raw.append(result.files.get("big.txt"))
        return result

    monkeypatch.setattr(local, "scan_tree", recording_scan)

    def writer() -> None:
        for i, data in enumerate(versions[1:], start=1):
            with open(target, "r+b") as fh:  # in place, like an editor without atomic saves
                fh.truncate(0)
                for offset in range(0, len(data), 8 * 1024):
                    fh.write(data[offset : offset + 8 * 1024])
                    fh.flush()
                    time.sleep(0.003)
            time.sleep(0.4 if i % 4 == 0 else 0.01)

    async with running(root) as (source, it):
        await next_snapshot(it)
        delivered: list[bytes] = []
        final = asyncio.Event()

        async def collect() -> None:
            async for snap in it:
                delivered.append(snap.files["big.txt"])
                if delivered[-1] == versions[-1]:
                    final.set()

        collector = asyncio.create_task(collect())
        thread = threading.Thread(target=writer)
        thread.start()
        while thread.is_alive():
            source.nudge()  # scan as often as possible, mid-write
            await asyncio.sleep(0.05)
        thread.join()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(final.wait(), 5)
        collector.cancel()
    torn = [r for r in raw if r is None or r not in versions]
    assert torn, "the scans never met a half-written file: the test proves nothing"
    assert delivered and delivered[-1] == versions[-1]
    assert all(d in versions for d in delivered), [d[:1] + d[-2:] for d in delivered]
    print(f"\nscans {len(raw)}, torn {len(torn)}, delivered {len(delivered)}: all complete")


async def test_a_large_scan_does_not_block_the_event_loop(tmp_path: Path) -> None:
    root = tmp_path / "big"
    root.mkdir()
    chunk = os.urandom(16 * 1024)
    for i in range(2000):  # 2,000 files, 32 MiB
        (root / f"f{i:04d}.txt").write_bytes(chunk + str(i).encode())
    for i in range(3000):  # a link to a big tree outside: neither read nor watched
        (tmp_path / f"outside/{i // 50}/{i}").mkdir(parents=True)
    (root / "outside").symlink_to(tmp_path / "outside")
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            before = loop.time()
            await asyncio.sleep(0.005)
            lags.append(loop.time() - before - 0.005)

    tick = asyncio.create_task(ticker())
    began = time.monotonic()
    async with running(root) as (_, it):
        snap = await next_snapshot(it, wait=20)
        took = time.monotonic() - began
    stop = True
    await tick
    assert len(snap.files) == 2000
    print(
        f"\nstart() of 2,000 files / 32 MiB: {took:.2f} s; loop lag max {max(lags) * 1000:.1f} ms"
    )
    assert took > 0.1  # the scans really ran while the ticker did
    assert max(lags) < 0.1


async def test_notice_latency_of_an_atomic_save(root: Path) -> None:
    samples: list[float] = []
    async with running(root) as (_, it):
        await next_snapshot(it)
        for i in range(5):
            saved = time.monotonic()
            write_atomically(root / "cronstable.yaml", f"jobs: [{i}]\n".encode())
            await next_snapshot(it)
            samples.append(time.monotonic() - saved)
            await asyncio.sleep(0.1)
    print(
        f"\natomic save -> snapshot: median {statistics.median(samples) * 1000:.0f} ms, "
        f"max {max(samples) * 1000:.0f} ms"
    )
    assert max(samples) < 1.5


# -- files that matter ---------------------------------------------------------------


async def test_after_apply_churn_beside_a_file_spec_makes_no_snapshot(tmp_path: Path) -> None:
    # a daemon started as `cronstable run -c /etc/x/jobs.yaml 2>> /etc/x/daemon.log`
    make_tree(tmp_path / "x", {"jobs.yaml": b"jobs: []\n", "env": b"A=1\n"})
    async with running(tmp_path / "x" / "jobs.yaml") as (source, it):
        first = await next_snapshot(it)
        source.applied(first, {"jobs.yaml", "env"})
        log = tmp_path / "x" / "daemon.log"
        for n in range(15):  # a log file written all the time
            with log.open("a") as fh:
                fh.write(f"line {n}\n")
            await asyncio.sleep(0.05)
        await nothing_within(it, 1.0)
        write_atomically(tmp_path / "x" / "env", b"A=2\n")  # a file the revision read
        snap = await next_snapshot(it)
        assert snap.files["env"] == b"A=2\n"
        assert "daemon.log" in snap.files  # the snapshot stays complete


async def test_after_apply_a_directory_still_sees_new_configuration_files(root: Path) -> None:
    async with running(root) as (source, it):
        first = await next_snapshot(it)
        source.applied(first, {"cronstable.yaml", "jobs/a.yaml", "/"})
        write_atomically(root / "README.md", b"notes\n")
        await nothing_within(it, 1.0)
        write_atomically(root / "jobs" / "b.yaml", b"jobs: []\n")
        snap = await next_snapshot(it)
        assert snap.files["jobs/b.yaml"] == b"jobs: []\n"


@pytest.mark.parametrize(
    ("files", "spec", "edit", "new"),
    [
        # a new file in a directory a file spec includes
        (
            {"main.yaml": b"include: [conf.d]\n", "conf.d/a.yaml": JOB % b"a"},
            "main.yaml",
            None,
            ("conf.d/b.yaml", JOB % b"b"),
        ),
        # a new file in an included _private directory of a directory spec
        (
            {"main.yaml": b"include: [_lib]\n", "_lib/a.yaml": JOB % b"a"},
            "",
            None,
            ("_lib/b.yaml", JOB % b"b"),
        ),
        # an include naming a file that does not exist yet: rejected, then the file comes
        (
            {"main.yaml": JOB % b"a"},
            "main.yaml",
            ("main.yaml", b"include: [extra.yaml]\n"),
            ("extra.yaml", JOB % b"b"),
        ),
        # an env file named before it exists, in a directory spec
        (
            {"main.yaml": JOB % b"a"},
            "",
            ("main.yaml", JOB % b"a" + b"    env_file: app.env\n"),
            ("app.env", b"A=1\n"),
        ),
    ],
    ids=["included-dir", "private-dir", "include-before-file", "env-file-before-file"],
)
async def test_every_file_a_fix_can_bring_is_seen(
    tmp_path: Path,
    files: dict[str, bytes],
    spec: str,
    edit: tuple[str, bytes] | None,
    new: tuple[str, bytes],
) -> None:
    from cronstable.reconcile.apply import Applier
    from cronstable.runtime.daemon import source_reads

    root = tmp_path / "x"
    make_tree(root, files)
    applier = Applier([])

    async def reconcile(snap: Snapshot, source: LocalDirSource) -> str:
        record = await applier.reconcile(snap)  # as Daemon.reconcile does
        if record.outcome == "rejected":
            source.rejected(snap)
        else:
            assert applier.applied_state is not None
            source.applied(snap, source_reads(applier.applied_state))
        return record.outcome

    async with running(root / spec if spec else root) as (source, it):
        assert await reconcile(await next_snapshot(it), source) == "applied"
        if edit is not None:
            write_atomically(root / edit[0], edit[1])
            assert await reconcile(await next_snapshot(it), source) == "rejected"
        write_atomically(root / new[0], new[1])
        assert await reconcile(await next_snapshot(it), source) == "applied"


# -- slow in-place saves (--settle, recheck) ------------------------------------------

FOUR_JOBS = b"jobs:\n" + b"".join(
    b"  - name: j%d\n    command: 'true'\n    schedule: '0 0 * * *'\n" % i for i in range(4)
)
# the first half of FOUR_JOBS is a valid configuration with two jobs: the truncated
# revision the issue saw applied ("2 removed", then "2 added")
VALID_HALF = len(b"jobs:\n") + 2 * len(
    b"  - name: j0\n    command: 'true'\n    schedule: '0 0 * * *'\n"
)
# cut inside the third job's quoted command: a half that does not parse
BROKEN_HALF = FOUR_JOBS.index(b"true", VALID_HALF) + 2

SLOW_WRITER = """
import sys, time
path, cut, data = sys.argv[1], int(sys.argv[2]), sys.stdin.buffer.read()
with open(path, "r+b") as fh:  # in place, as an editor without atomic saves does
    fh.truncate(0)
    fh.write(data[:cut])
    fh.flush()
    time.sleep(0.5)
    fh.write(data[cut:])
"""


def slow_write(path: Path, data: bytes, cut: int) -> subprocess.Popen[bytes]:
    """A real writer process: ``data[:cut]``, a 0.5 s pause, then the rest, in place."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, str(path), str(cut)], stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.close()
    return proc


async def reconcile_as_the_daemon(applier: Applier, source: LocalDirSource, snap: Snapshot) -> str:
    record = await applier.reconcile(snap, recheck=source.recheck)
    if record.outcome == "rejected":
        source.rejected(snap)
    elif record.outcome != "superseded":
        assert applier.applied_state is not None
        source.applied(snap, source_reads(applier.applied_state))
    return record.outcome


async def test_a_writer_pausing_less_than_the_settle_time_is_never_seen_half_way(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cfg"
    make_tree(root, {"jobs.yaml": b"jobs: []\n"})
    source = LocalDirSource(root, settle=1.0)
    assert source.settle == 1.0
    await source.start()
    try:
        it = source.watch()
        await next_snapshot(it)
        writer = await asyncio.to_thread(slow_write, root / "jobs.yaml", FOUR_JOBS, VALID_HALF)
        snap = await next_snapshot(it, 10)
        assert snap.files["jobs.yaml"] == FOUR_JOBS, "the half-written file was delivered"
        assert await asyncio.to_thread(writer.wait, 10) == 0
    finally:
        await source.close()


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:  # the writer finishes, in place
        fh.write(data)


async def test_a_fresh_file_that_does_not_load_waits_one_more_settle(tmp_path: Path) -> None:
    """The source cannot parse, but the applier asks it before rejecting: the writer
    finishes during the extra settle, so nothing is rejected and the whole file applies."""
    root = tmp_path / "cfg"
    make_tree(root, {"jobs.yaml": FOUR_JOBS[:BROKEN_HALF]})  # a writer caught half way
    applier = Applier([])
    async with running(root) as (source, it):
        snap = await next_snapshot(it)
        checking = asyncio.create_task(reconcile_as_the_daemon(applier, source, snap))
        await asyncio.sleep(0)  # the load fails and recheck starts its extra settle
        await asyncio.to_thread(append, root / "jobs.yaml", FOUR_JOBS[BROKEN_HALF:])
        assert await checking == "superseded"
        assert applier.status.last_failed is None and applier.status.attempts == 0
        snap = await next_snapshot(it)
        assert snap.files["jobs.yaml"] == FOUR_JOBS
        assert await reconcile_as_the_daemon(applier, source, snap) == "applied"


async def test_a_file_that_does_not_load_is_rejected_once_it_holds_still(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cfg"
    make_tree(root, {"jobs.yaml": FOUR_JOBS[:BROKEN_HALF], "old.yaml": b"jobs: [\n"})
    applier = Applier([])
    async with running(root) as (source, it):
        snap = await next_snapshot(it)
        started = time.monotonic()
        assert await reconcile_as_the_daemon(applier, source, snap) == "rejected"
        assert time.monotonic() - started >= source.settle  # fresh: it waited once more
        # a file nobody wrote lately is rejected at once
        past = time.time() - 3600
        for name in ("jobs.yaml", "old.yaml"):
            os.utime(root / name, (past, past))
        (root / "jobs.yaml").unlink()
        snap = await next_snapshot(it)
        assert list(snap.files) == ["old.yaml"]
        started = time.monotonic()
        assert await reconcile_as_the_daemon(applier, source, snap) == "rejected"
        assert time.monotonic() - started < source.settle


@pytest.mark.slow  # a real `cronstable run` for 6 to 9 s
@pytest.mark.parametrize(
    ("settle", "cut"),
    [("1", VALID_HALF), ("0.4", BROKEN_HALF)],
    ids=["valid-half-settle-above-the-pause", "broken-half-one-more-settle"],
)
async def test_the_daemon_applies_no_truncated_revision_from_a_slow_writer(
    tmp_path: Path, settle: str, cut: int, daemon_procs: list[DaemonProcess]
) -> None:
    """`cronstable run --settle`: a real writer pausing 0.5 s mid-file.  A half that is a
    valid configuration needs a settle time above the pause; a half that does not load
    is held one more settle, which 0.4 s covers."""
    root = tmp_path / "cfg"
    make_tree(root, {"jobs.yaml": FOUR_JOBS})
    log = tmp_path / "daemon.log"
    daemon = DaemonProcess(root, log, args=["--settle", settle])
    daemon_procs.append(daemon.start())
    try:

        def applied() -> list[str]:
            return re.findall(r"(?:applied|unchanged) in .*", log.read_text())

        await wait_until(lambda: len(applied()) == 1, 15)
        for data in (FOUR_JOBS.replace(b"0 0", b"0 1"), FOUR_JOBS.replace(b"0 0", b"0 2")):
            before = len(applied())
            writer = await asyncio.to_thread(slow_write, root / "jobs.yaml", data, cut)
            assert await asyncio.to_thread(writer.wait, 10) == 0
            await wait_until(lambda: len(applied()) > before, 15)  # noqa: B023
            await asyncio.sleep(1.5)  # would a late scan of the tree add another?
            assert applied()[before:] == [applied()[before]], log.read_text()
            assert "4 changed, 0 removed" in applied()[before], log.read_text()
        assert "rejected" not in log.read_text(), log.read_text()
    finally:
        assert await asyncio.to_thread(daemon.stop, 10) == 0
