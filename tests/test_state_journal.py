"""A node's own state directory as one log (``records.log``, :mod:`cronstable.state.journal`):
a crash's torn tail, a corrupt line, compaction, other processes writing the same log
(real processes, as ``cronstable state rm`` beside a daemon), the import of a directory
of the older layout, and what it costs: no new files, no flush for a running record."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cronstable.state import journal
from cronstable.state.base import Record, key, node_key
from cronstable.state.filesystem import FilesystemStore
from cronstable.state.journal import LOG_NAME, parse_line, record_line

pytestmark = [pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import asyncio, json, os, sys, time
from pathlib import Path
from cronstable.state import journal
from cronstable.state.filesystem import FilesystemStore

args = json.loads(sys.argv[1])
journal.COMPACT_AT = args.get("compact_at", journal.COMPACT_AT)
go = args.get("go")
while go and not os.path.exists(go):
    time.sleep(0.001)

async def main():
    store = FilesystemStore(Path(args["root"]))
    out = []
    try:
        for op, k, record in args["ops"]:
            if op == "put":
                await store.put(k, record)
            elif op == "create":
                out.append(await store.create(k, record))
            else:
                out.append(await store.delete(k))
    finally:
        await store.close()
    print(json.dumps(out))

asyncio.run(main())
"""


def start_child(root: Path, ops: list[tuple[str, str, Any]], **args: Any) -> subprocess.Popen[str]:
    """A real process running the store on ``root``: each op ``(put|create|delete, key,
    record)`` in turn; it prints what create and delete returned."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps({"root": str(root), "ops": ops, **args})],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(child: subprocess.Popen[str]) -> list[bool]:
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, err
    answers: list[bool] = json.loads(out)
    return answers


def run_child(root: Path, ops: list[tuple[str, str, Any]], **args: Any) -> list[bool]:
    return finish(start_child(root, ops, **args))


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[FilesystemStore]:
    made = FilesystemStore(tmp_path / "state")
    await made.check()
    yield made
    await made.close()


async def fresh_list(root: Path, prefix: str = "") -> dict[str, Record | None]:
    """What a store opened anew (the log read from its start) lists."""
    other = FilesystemStore(root)
    try:
        return await other.list(prefix)
    finally:
        await other.close()


def log_lines(root: Path) -> list[bytes]:
    return (root / LOG_NAME).read_bytes().split(b"\n")


def k(n: object) -> str:
    return node_key("n1", "fires", f"job{n}")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "torn",
    [b'0badcafe {"k": "nodes/n1/fires/half", "r": {"ver', b'00000000 {"k": "x", "r": null}\n'],
    ids=["no newline", "bad checksum"],
)
async def test_a_torn_tail_is_ignored_and_the_next_write_cuts_it(
    tmp_path: Path, store: FilesystemStore, torn: bytes
) -> None:
    await store.put(k(1), {"n": 1})
    await store.put(k(2), {"n": 2})
    path = tmp_path / "state" / LOG_NAME
    path.write_bytes(path.read_bytes() + torn)  # a crash in the middle of an append
    assert list(await fresh_list(tmp_path / "state")) == [k(1), k(2)]
    assert await store.get(k(2)) == {"n": 2, "version": 1}
    await store.put(k(3), {"n": 3})
    records = await fresh_list(tmp_path / "state")
    assert records == {k(n): {"n": n, "version": 1} for n in (1, 2, 3)}
    lines = log_lines(tmp_path / "state")
    assert lines[-1] == b"" and all(parse_line(line) for line in lines[:-1])


@pytest.mark.asyncio
async def test_a_corrupt_line_in_the_middle_is_skipped_and_the_others_kept(
    tmp_path: Path, store: FilesystemStore, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(3):
        await store.put(k(n), {"n": n})
    path = tmp_path / "state" / LOG_NAME
    data = path.read_bytes()
    at = data.index(b'"n": 1')
    path.write_bytes(data[:at] + b'"n": 7' + data[at + 6 :])  # same length, bad checksum
    with caplog.at_level(logging.WARNING, logger="cronstable.state.journal"):
        records = await fresh_list(tmp_path / "state")
    assert records == {k(0): {"n": 0, "version": 1}, k(2): {"n": 2, "version": 1}}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"state log {path}: 1 unreadable records skipped"]
    other = FilesystemStore(tmp_path / "state")
    await other.put(k(3), {"n": 3})  # the bad line is not a torn tail: nothing is cut
    assert list(await other.list()) == [k(0), k(2), k(3)]
    await other.close()


@pytest.mark.asyncio
async def test_compaction_keeps_exactly_the_live_records_and_shrinks_the_file(
    tmp_path: Path, store: FilesystemStore
) -> None:
    path = tmp_path / "state" / LOG_NAME
    big = "x" * 100_000
    expected: dict[str, Record | None] = {}
    inode = path.stat().st_ino
    for n in range(120):  # 12 MB written, at most ~1 MB live at any time
        history = node_key("n1", "history", f"job{n % 8}")
        await store.put(history, {"n": n, "out": big})
        expected[history] = {"n": n, "out": big, "version": 1}
        if n % 10 == 0:
            await store.put(k(n), {"n": n})
            expected[k(n)] = {"n": n, "version": 1}
        if n % 20 == 0 and n:
            assert await store.delete(k(n - 10))
            del expected[k(n - 10)]
    assert path.stat().st_ino != inode  # rewritten, more than once over 12 MB
    assert path.stat().st_size < journal.COMPACT_AT + 200_000
    assert await store.list() == dict(sorted(expected.items()))
    assert await fresh_list(tmp_path / "state") == dict(sorted(expected.items()))
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == [LOG_NAME]


@pytest.mark.asyncio
async def test_two_processes_writing_interleaved_keys_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "state"
    go = tmp_path / "go"
    children = []
    written = 0
    for who in ("a", "b"):
        ops: list[tuple[str, str, Any]] = []
        for n in range(300):
            ops.append(("put", node_key(who, "fires", f"k{n % 20}"), {"n": n, "pad": "p" * 200}))
            ops.append(("put", node_key(who, "history", f"h{n}"), {"n": n}))
        # a small compaction threshold: each process also renames new logs under the other
        children.append(start_child(root, ops, go=str(go), compact_at=50_000))
        written += sum(len(record_line(name, record)) for _, name, record in ops)
    await asyncio.sleep(1.0)  # both started and waiting
    go.touch()
    for child in children:
        finish(child)
    records = await fresh_list(root)
    for who in ("a", "b"):
        for n in range(20):
            assert records[node_key(who, "fires", f"k{n}")] == {
                "n": 280 + n,
                "pad": "p" * 200,
                "version": 1,
            }
        for n in range(300):
            assert records[node_key(who, "history", f"h{n}")] == {"n": n, "version": 1}
    assert len(records) == 2 * (20 + 300)
    # compacted while both wrote (without, the file would hold every line written)
    assert (root / LOG_NAME).stat().st_size < written * 0.75


@pytest.mark.asyncio
async def test_a_create_race_between_processes_has_exactly_one_winner(tmp_path: Path) -> None:
    root = tmp_path / "state"
    go = tmp_path / "go"
    keys = [key("cluster", "reboot", f"job{n}") for n in range(100)]
    children = [
        start_child(root, [("create", c, {"who": who}) for c in keys], go=str(go))
        for who in range(3)
    ]
    await asyncio.sleep(1.0)
    go.touch()
    won = [finish(child) for child in children]
    records = await fresh_list(root)
    for n, c in enumerate(keys):
        winners = [who for who in range(3) if won[who][n]]
        assert len(winners) == 1, (c, winners)
        assert records[c] == {"who": winners[0], "version": 1}


@pytest.mark.asyncio
async def test_a_live_store_sees_what_another_process_wrote(
    tmp_path: Path, store: FilesystemStore
) -> None:
    root = tmp_path / "state"
    for n in range(3):
        await store.put(k(n), {"n": n})
    assert list(await store.list()) == [k(0), k(1), k(2)]
    assert run_child(root, [("delete", k(1), None), ("put", k(5), {"n": 5})]) == [True]
    assert await store.get(k(1)) is None
    assert list(await store.list()) == [k(0), k(2), k(5)]
    assert await store.create(k(5), {"n": 6}) is False  # decided on the other's append
    # the other process compacts: its new file renamed over the log is followed
    padded = [("put", k(0), {"n": n, "pad": "p" * 1000}) for n in range(50)]
    run_child(root, [*padded, ("delete", k(2), None)], compact_at=10_000)
    assert await store.get(k(0)) == {"n": 49, "pad": "p" * 1000, "version": 1}
    assert list(await store.list()) == [k(0), k(5)]
    await store.put(k(9), {"n": 9})
    assert list(await fresh_list(root)) == [k(0), k(5), k(9)]


async def old_layout(root: Path) -> dict[str, Record | None]:
    """Records written as the one-file-per-record layout writes them (the shared
    directory's code, which is that layout's unchanged), and what each reads as."""
    written: dict[str, Record] = {
        node_key("n1", "retries", "backup/nightly"): {"status": "pending", "attempt": 2},
        node_key("n1", "history", "a"): {"runs": [{"id": "r1", "stdout": "ok\n"}]},
        node_key("n1", "running", "a@2026-01-01T00:00:00Z#1"): {"pid": 12},
        key("cluster", "lastrun", "a"): {"job": "a"},
    }

    old = FilesystemStore(root, shared=True)
    for name, record in written.items():
        await old.put(name, record)
    (root / "nodes" / "n1" / "fires").mkdir(mode=0o700)
    (root / "nodes" / "n1" / "fires" / "later.json").write_text('{"version": 99}')
    (root / "nodes" / "n1" / "fires" / "garbage.json").write_text("not json")
    expected: dict[str, Record | None] = {n: {**r, "version": 1} for n, r in written.items()}
    expected[node_key("n1", "fires", "later")] = None
    expected[node_key("n1", "fires", "garbage")] = None
    return dict(sorted(expected.items()))


@pytest.mark.asyncio
async def test_a_directory_of_the_older_layout_is_imported_and_its_files_removed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "state"
    expected = await old_layout(root)
    store = FilesystemStore(root)
    assert await store.list() == expected
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [LOG_NAME]
    assert await store.get(node_key("n1", "retries", "backup/nightly")) == {
        "status": "pending",
        "attempt": 2,
        "version": 1,
    }
    assert await store.delete(node_key("n1", "fires", "garbage")) is True
    await store.close()
    del expected[node_key("n1", "fires", "garbage")]
    assert await fresh_list(root) == expected  # imported once, not again


@pytest.mark.asyncio
async def test_the_first_check_may_take_its_time_to_import_the_older_layout(
    tmp_path: Path,
) -> None:
    # an upgrade on a large directory: the store's bound for one write would cut the
    # import short and the revision naming the store would be rejected at the start
    root = tmp_path / "state"
    old = FilesystemStore(root, shared=True, timeout=120)
    await old.apply([(node_key("n1", "history", f"job{n}"), {"runs": [n]}) for n in range(1000)])
    hurried = FilesystemStore(root, timeout=0.001)  # far less than the import takes
    await hurried.check()
    assert sorted(p.name for p in root.iterdir()) == [LOG_NAME]
    assert len(await FilesystemStore(root, timeout=120).list()) == 1000


@pytest.mark.asyncio
async def test_a_thousand_puts_make_no_new_file(tmp_path: Path, store: FilesystemStore) -> None:
    root = tmp_path / "state"

    def files() -> set[tuple[str, int]]:
        return {(str(p.relative_to(root)), p.stat().st_ino) for p in root.rglob("*")}

    before = files()
    for n in range(1000):
        run = node_key("n1", "running", f"job{n % 7}@2026-01-01T00:00:00Z#{n}")
        await store.apply([(run, {"pid": n})])
        await store.put(node_key("n1", "history", f"job{n % 50}"), {"runs": [n]})
        await store.apply([(run, None), (key("cluster", "lastrun", f"job{n % 50}"), {"n": n})])
    assert files() == before == {(LOG_NAME, (root / LOG_NAME).stat().st_ino)}
    assert len(await store.list()) == 100


@pytest.mark.asyncio
async def test_a_batch_of_running_records_only_is_not_flushed(
    store: FilesystemStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes = []
    real: Callable[[int], None] = os.fsync

    def counted(fd: int) -> None:
        flushes.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    runs = [node_key("n1", "running", f"job@2026-01-01T00:00:00Z#{n}") for n in range(3)]
    await store.apply([(run, {"pid": 1}) for run in runs])
    await store.put(runs[0], {"pid": 2})
    await store.delete(runs[1])
    assert flushes == []
    await store.apply([(runs[2], None), (node_key("n1", "history", "job"), {"runs": []})])
    assert len(flushes) == 1  # one flush for the batch
    await store.put(k(1), {"n": 1})
    assert len(flushes) == 2


@pytest.mark.asyncio
async def test_reading_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "none")
    assert await store.get(k(1)) is None
    assert await store.list() == {}
    assert not (tmp_path / "none").exists()
    await store.close()


@pytest.mark.asyncio
async def test_a_compactions_file_left_by_a_crash_is_removed_at_the_next_start(
    tmp_path: Path, store: FilesystemStore
) -> None:
    await store.put(k(1), {"n": 1})
    await store.close()
    stale = tmp_path / "state" / f".{LOG_NAME}.tmp-dead"
    stale.write_bytes(b"half a compaction")
    assert list(await fresh_list(tmp_path / "state")) == [k(1)]
    assert not stale.exists()


def test_a_list_by_prefix_reads_the_keys_of_that_prefix_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # listed by directory (a poll of the pauses must not walk 100,000 jobs' histories):
    # the same answers as a scan of every key, through puts, removals, another writer's
    # appends (replayed) and compactions
    monkeypatch.setattr(journal, "COMPACT_AT", 4096)
    log = journal.RecordLog(tmp_path / "state")
    other = journal.RecordLog(tmp_path / "state")  # as another process would append
    keys = [
        "top",
        "tops",
        "nodes/n1/history/a",
        "nodes/n1/history/ab",
        "nodes/n1/history/b",
        "nodes/n1/pauses/a",
        "nodes/n1/pauses/a/deeper",
        "nodes/n10/pauses/a",
        "nodes/n1/running/x#1",
        "cluster/lastrun/a",
    ]
    prefixes = ["", "t", "top", "nodes/", "nodes/n1", "nodes/n1/", "nodes/n1/pauses/"]
    prefixes += ["nodes/n1/pauses/a", "nodes/n1/history/a", "nodes/n1/running/x", "c", "zzz"]
    alive: set[str] = set()
    for step in range(60):
        name = keys[(step * 7) % len(keys)]
        writer = other if step % 5 == 0 else log
        if name in alive and step % 3 == 0:
            writer.apply([(name, None)])
            alive.discard(name)
        else:
            writer.apply([(name, {"step": step, "pad": "x" * 200})])
            alive.add(name)
        for prefix in prefixes:
            listed = log.list(prefix)
            assert list(listed) == sorted(k for k in alive if k.startswith(prefix)), prefix
            assert all(record is not None for record in listed.values())
    assert (tmp_path / "state" / LOG_NAME).stat().st_size < 40_000  # it was compacted
    log.close()
    other.close()
