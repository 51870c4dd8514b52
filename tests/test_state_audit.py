"""The audit trail (:mod:`cronstable.state.audit`) on every state store, and the book that
credits each revision to its trigger (:mod:`cronstable.runtime.triggers`).

The trail writes through a real :class:`~cronstable.state.writer.Writer` over the store,
as the keeper's does; a second trail on the same store plays the daemon restarted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from backends import StateBackend
from etcd_server import EtcdServer

from cronstable.ports import AuditEntry, Trigger
from cronstable.reconcile.apply import AUDIT_ERRORS, RevisionRecord
from cronstable.runtime.triggers import ASKED_WINDOW, NAMED_WINDOW, Triggers
from cronstable.state.audit import AuditTrail, audit_key, read_entry
from cronstable.state.base import Record, StateStore, key
from cronstable.state.etcd import EtcdStore
from cronstable.state.filesystem import FilesystemStore
from cronstable.state.writer import Writer

pytestmark = [pytest.mark.timeout(60)]

T0 = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)


def entry(revision: str, trigger: Trigger | None = None, **fields: object) -> AuditEntry:
    record = RevisionRecord(
        revision=revision,
        source="test",
        time=T0,
        outcome=str(fields.pop("outcome", "applied")),
        duration=0.01,
        job_set_id="v1:jobset",
        summary={"added": 1, "changed": 0, "removed": 0, "unchanged": 0, "sections": []},
        trigger=trigger or Trigger("poll"),
        **fields,  # type: ignore[arg-type]
    )
    return record.audit("n1")


def ticking(start: int) -> Callable[[], int]:
    """A wall clock in nanoseconds from ``start`` seconds that moves on a second at every
    read."""
    counter = itertools.count(start)
    return lambda: next(counter) * 1_000_000_000


LIVES = itertools.count(1_777_000_000, 1000)
"""Each trail made is a later daemon: its clock starts 1000 s after the last one's."""


def trail(store: StateStore | None, writer: Writer | None, keep: int = 1000) -> AuditTrail:
    def submit(key_text: str, record: Record | None) -> None:
        if writer is not None:
            writer.submit(key_text, record)

    return AuditTrail(
        "n1", lambda: store, submit, keep=keep, clock=ticking(next(LIVES)), backoff=0.05
    )


async def until(what: str, check: Callable[[], object], within: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest_asyncio.fixture
async def store(state_backend: StateBackend, tmp_path: Path) -> AsyncIterator[StateStore]:
    made = state_backend.store(tmp_path / "state")
    try:
        yield made
    finally:
        await made.close()


async def stored(store: StateStore) -> list[str]:
    """The ids of the trail's records in the store, oldest first."""
    records = await store.list(key("audit", "n1") + "/")
    return [record["id"] for record in records.values() if record is not None]


@pytest.mark.asyncio
async def test_entries_survive_a_restart_and_merge_with_those_made_meanwhile(
    store: StateStore,
) -> None:
    writer = Writer(store)
    first = trail(store, writer)
    for revision in ("r1", "r2", "r3"):
        first.add(entry(revision))
    assert await writer.flush(within=10)
    ids = [e.id for e in first.entries()]
    assert ids == sorted(ids) and await stored(store) == ids
    await first.close()
    # restarted: its first entry comes before the store was read back
    again = trail(store, writer)
    again.add(entry("r4", Trigger("start")))
    await until("the stored entries", lambda: len(again.entries()) == 4)
    page = again.page(10)
    assert [e.revision for e in page.entries] == ["r4", "r3", "r2", "r1"]
    assert page.entries[0].trigger == Trigger("start") and page.durable
    assert int(page.entries[0].id) > int(ids[-1])  # ids keep growing across the restart
    assert await writer.flush(within=10)
    assert len(await stored(store)) == 4
    await again.close()
    await writer.close()


@pytest.mark.asyncio
async def test_the_trail_is_bounded_in_memory_and_in_the_store(store: StateStore) -> None:
    writer = Writer(store)
    small = trail(store, writer, keep=5)
    for number in range(8):
        small.add(entry(f"r{number}"))
    assert [e.revision for e in small.entries()] == [f"r{n}" for n in range(3, 8)]
    assert await writer.flush(within=10)
    assert await stored(store) == [e.id for e in small.entries()]
    await small.close()
    # a daemon that keeps fewer cuts the store to its bound when it reads it back
    smaller = trail(store, writer, keep=3)
    smaller.add(entry("r8"))
    await until("the merge", lambda: len(smaller.entries()) == 3)
    assert [e.revision for e in smaller.entries()] == ["r6", "r7", "r8"]
    assert await writer.flush(within=10)
    assert await stored(store) == [e.id for e in smaller.entries()]
    await smaller.close()
    await writer.close()


@pytest.mark.asyncio
async def test_a_record_that_does_not_read_is_cut(store: StateStore) -> None:
    writer = Writer(store)
    await store.put(audit_key("n1", "00000000000000000001"), {"id": "x", "what": "not one"})
    reader = trail(store, writer)
    reader.add(entry("r1"))
    await until("the merge", lambda: reader._loading is not None and reader._loading.done())
    assert [e.revision for e in reader.entries()] == ["r1"]
    assert await writer.flush(within=10)
    assert await stored(store) == [reader.entries()[0].id]
    await reader.close()
    await writer.close()


def test_pages_go_newest_first_with_a_cursor_and_refuse_a_foreign_one() -> None:
    memory = trail(None, None)
    for number in range(7):
        memory.add(entry(f"r{number}"))
    seen: list[str] = []
    cursor = None
    sizes = []
    while True:
        page = memory.page(3, cursor)
        seen += [e.revision for e in page.entries]
        sizes.append(len(page.entries))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"r{n}" for n in range(6, -1, -1)] and sizes == [3, 3, 1]
    assert (page.kept, page.bound, page.durable) == (7, 1000, False)
    for bad in ("abc", "1", "-" * 20):
        with pytest.raises(ValueError):
            memory.page(3, bad)
    assert memory.page(3, "0" * 20).entries == []  # older than every entry: an empty page


def test_every_text_of_an_entry_is_redacted_and_the_problems_are_bounded() -> None:
    secret_url = "https://ghp_s3cr3tT0ken@github.com/acme/cron.git"
    record = RevisionRecord(
        revision="rev?token=hunter2",
        source=f"git {secret_url}",
        time=T0,
        outcome="rejected",
        duration=0.5,
        errors=(
            f"c.yaml:3: cannot reach {secret_url}",
            "c.yaml:9: reporter url http://u:pw@hooks.example/x?key=abc",
            *(f"c.yaml:{n}: problem" for n in range(40)),
            "x" * 5000,
        ),
        trigger=Trigger("webhook", requested_at=T0, delivery="d-1", sender="octocat"),
    )
    audited = record.audit("n1")
    text = json.dumps([audited.revision, audited.source, *audited.errors, audited.trigger.sender])
    for secret in ("ghp_s3cr3tT0ken", "hunter2", ":pw@", "key=abc"):
        assert secret not in text
    assert "<hidden>" in audited.source
    assert len(audited.errors) == AUDIT_ERRORS + 1 and audited.errors[-1] == "… and 23 more"
    assert audited.outcome == "rejected" and audited.changes == {}
    stored = AuditTrail("n1", lambda: None, lambda k, r: None)
    stored.add(audited)
    back = read_entry(json.loads(json.dumps(_record(stored))))
    assert back is not None and back.trigger == audited.trigger and back.errors == audited.errors


def _record(trail: AuditTrail) -> Record:
    from cronstable.state.audit import entry_record

    return entry_record(trail.entries()[0])


@pytest.mark.asyncio
async def test_a_store_that_cannot_be_written_costs_the_trail_nothing(tmp_path: Path) -> None:
    """A state directory that cannot be made (its parent is a file): entries are kept and
    paged all the same; once the directory can be made, the writer writes them."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the state directory's parent should be")
    store = FilesystemStore(blocker / "state")
    writer = Writer(store)
    down = trail(store, writer)
    for revision in ("r1", "r2"):
        down.add(entry(revision))
    assert [e.revision for e in down.page(10).entries] == ["r2", "r1"]
    assert not await writer.flush(within=0.5)  # still queued: the store refuses
    blocker.unlink()
    # the writer's next try may make the directory itself, between these two lines
    blocker.mkdir(exist_ok=True)
    assert await writer.flush(within=20)
    assert await stored(store) == [e.id for e in down.entries()]
    await down.close()
    await writer.close()


@pytest.mark.asyncio
async def test_a_stopped_etcd_costs_the_trail_nothing(etcd_server: EtcdServer) -> None:
    store = EtcdStore([etcd_server.endpoint], prefix="/audit-outage/", timeout=1.0)
    writer = Writer(store)
    etcd_server.stop()
    try:
        down = trail(store, writer)
        down.add(entry("r1"))
        down.add(entry("r2"))
        assert [e.revision for e in down.page(10).entries] == ["r2", "r1"]
        await asyncio.sleep(0.3)
        assert writer.queued() == 2
    finally:
        etcd_server.start()
    assert await writer.flush(within=30)
    await until("the store read back", lambda: down._loading is not None and down._loading.done())
    assert await stored(store) == [e.id for e in down.entries()]
    await down.close()
    await writer.close()
    await store.close()


# ---------------------------------------------------------------- which trigger


def test_a_push_is_credited_to_the_revision_it_named() -> None:
    clock = [0.0]
    book = Triggers("poll", monotonic=lambda: clock[0])
    hook = Trigger("webhook", delivery="d-1", sender="octocat", revision="b" * 40)
    book.note(Trigger("sighup"))
    book.note(hook)
    # the SIGHUP's fetch found another revision: the push still waits for its own
    assert book.take("a" * 40) == Trigger("sighup")
    assert book.pending() == 1
    assert book.take("b" * 40) == hook
    assert book.take("c" * 40) == Trigger("poll")  # nobody asked: the source noticed it


def test_requests_are_forgotten_after_their_window() -> None:
    clock = [0.0]
    book = Triggers("watch", monotonic=lambda: clock[0])
    book.note(Trigger("api", via="http", token="ops"))
    book.note(Trigger("webhook", revision="d" * 40))
    clock[0] = ASKED_WINDOW + 1
    assert book.take("x") == Trigger("watch")  # the reload found nothing; this is new
    clock[0] = NAMED_WINDOW + 1
    assert book.take("d" * 40) == Trigger("watch") and book.pending() == 0


def test_the_newest_request_answers_and_the_book_is_bounded() -> None:
    book = Triggers()
    for number in range(100):
        book.note(Trigger("api", via="http", token=f"t{number}"))
    assert book.pending() == 64
    assert book.take("r") == Trigger("api", via="http", token="t99")
    assert book.pending() == 0


@pytest.mark.asyncio
async def test_an_apply_with_its_state_store_down_is_not_held_and_is_kept_once_it_is_back(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    """The applier's own path (a real daemon core, its state on etcd): etcd is stopped
    before the first revision, which is applied (the store connecting) and in the trail at
    once; the records are written once etcd is back."""
    from web_stack import Stack

    etcd_server.stop()
    stack = Stack(tmp_path, "n1")
    await stack.start()
    text = (
        "cluster:\n  backend: etcd\n  leaseTtl: 2\n"
        f'  etcd: {{endpoints: ["{etcd_server.endpoint}"], prefix: /audit-down/}}\n'
        "state: {backend: etcd}\n"
        "jobs: [{name: a, command: 'true', schedule: '@yearly'}]\n"
    )
    try:
        record = await asyncio.wait_for(stack.apply(text), 30)
        assert record.outcome == "applied"
        page = stack.daemon.control.audit(10)
        assert [(e.revision, e.outcome) for e in page.entries] == [(record.revision, "applied")]
        assert page.durable
        second = await asyncio.wait_for(stack.apply(text + "# again\n"), 30)
        assert second.outcome == "unchanged"  # an applied revision that changed nothing
        assert len(stack.daemon.control.audit(10).entries) == 2
        etcd_server.start()
        reader = EtcdStore([etcd_server.endpoint], prefix="/audit-down/")
        try:

            async def written() -> bool:
                return len(await stored(reader)) == 2

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not await written():
                assert loop.time() < deadline, "the trail was not written once etcd was back"
                await asyncio.sleep(0.2)
        finally:
            await reader.close()
    finally:
        await stack.stop()
        for what, close in stack.daemon.closing:
            if what != "web section":  # closed by the stack
                await close()
