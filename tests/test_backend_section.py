"""The generic BackendSection, through a small section whose backend the test drives (a
store that answers, refuses or does not answer; a close that takes its time): the
order of the steps, the link, the retirements owned and awaited."""

from __future__ import annotations

import asyncio
import errno
from dataclasses import dataclass, field
from typing import Any

import pytest

from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.errors import KeyPath
from cronstable.reconcile.backend_section import (
    ADJUST,
    KEEP,
    REMOVE,
    BackendSection,
    Reach,
    Ready,
    Retire,
    Unanswered,
)
from cronstable.store_link import StoreLink

pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio]


class StoreDown(OSError):
    def __init__(self) -> None:
        super().__init__(errno.ENOENT, "not mounted")


class StoreRefuses(OSError):
    def __init__(self) -> None:
        super().__init__(errno.EACCES, "permission denied")


@dataclass(eq=False)
class Store:
    """A backend: ``answers`` says how its store answers; closing waits for ``closable``
    (set, unless a test clears it)."""

    path: str
    answers: list[str] = field(default_factory=lambda: ["yes"])
    closable: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.closable.set()

    closed: bool = False
    backend: str = "filesystem"

    async def check(self) -> str:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer == "down":
            raise StoreDown
        if answer == "refuses":
            raise StoreRefuses
        return f"records of {self.path}"

    async def close(self) -> None:
        await self.closable.wait()
        self.closed = True


class Section(BackendSection[tuple[str, str], Store, str]):
    name = "toy"
    store = "toy"
    title = "Toy"
    build_errors = (ValueError,)
    check_errors = (OSError,)

    def __init__(self, answers: dict[str, list[str]]) -> None:
        super().__init__()
        self.answers = answers
        self.said: list[str] = []

    def wanted(self, desired: DesiredState) -> tuple[str, str] | None:
        cluster = desired.cluster
        if cluster is None or cluster.filesystem is None:
            return None
        return (cluster.filesystem.path.rsplit("/", 1)[-1], str(cluster.lease_ttl))

    def uses_backend(self, config: tuple[str, str]) -> bool:
        return config[0] != "off"

    def adjusts(self, old: tuple[str, str], new: tuple[str, str]) -> bool:
        return old[0] == new[0]  # only the mode changed

    def where(self, config: tuple[str, str]) -> KeyPath:
        return ("cluster", "filesystem", "path")

    def build(self, config: tuple[str, str], desired: DesiredState) -> Store:
        if config[0] == "bad":
            raise ValueError("no such store: bad")
        return Store(config[0], list(self.answers.get(config[0], ["yes"])))

    def reach(self, backend: Store, config: tuple[str, str], desired: DesiredState) -> Reach[str]:
        return Reach(backend.check, 1.0, 0.1)

    def swap(
        self, new: Store | None, old: Store | None, desired: DesiredState, *, waiting: str | None
    ) -> Retire | None:
        self.said.append(f"swap {old and old.path} -> {new and new.path} waiting={waiting}")
        return old.close if old is not None else None

    def started(self, backend: Store, result: str, desired: DesiredState) -> None:
        self.said.append(f"started {backend.path}: {result}")

    def waits(self, backend: Store, link: StoreLink[str], reach: Reach[str], d: Any) -> None:
        self.said.append(f"waits {backend.path}")

    def answered(self, backend: Store, result: str) -> None:
        self.said.append(f"answered {backend.path}: {result}")

    def adjust(self, desired: DesiredState) -> None:
        self.said.append(f"adjust {self.config}")

    def committed(self, desired: DesiredState) -> None:
        self.said.append("committed")


def desired(store: str, ttl: int = 5) -> DesiredState:
    """A revision naming the toy store ``store`` (its "settings": the lease ttl)."""
    text = f"cluster: {{backend: filesystem, leaseTtl: {ttl}, filesystem: {{path: /s/{store}}}}}\n"
    return load(MemoryTree({"c.yaml": (text + "jobs: []\n").encode()}), "c.yaml")


async def apply(section: Section, revision: DesiredState) -> Any:
    prepared = await section.prepare(revision)
    section.commit(prepared, revision)
    return prepared


async def until(predicate: Any, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_build_swap_keep_adjust_remove_in_order() -> None:
    section = Section({})
    first = await apply(section, desired("one"))
    assert isinstance(first, Ready) and section.in_use is first.backend
    assert section.link is not None and section.link.state == "up"
    assert section.said == [
        "swap None -> one waiting=None",
        "started one: records of one",
        "committed",
    ]
    first.backend.closable.clear()  # its close takes its time
    assert await apply(section, desired("one")) is KEEP
    assert await apply(section, desired("one", ttl=7)) is ADJUST
    assert section.in_use is first.backend and section.said[-2:] == [
        "adjust ('one', '7')",
        "committed",
    ]
    assert await apply(section, desired("off")) is REMOVE
    assert section.in_use is None and section.link is None
    assert section.said[-2:] == ["swap one -> None waiting=None", "committed"]
    # the replaced backend is retired in the background; close waits for it
    closing = asyncio.create_task(section.close())
    await asyncio.sleep(0.05)
    assert not closing.done() and not first.backend.closed
    first.backend.closable.set()
    await asyncio.wait_for(closing, 5)
    assert first.backend.closed
    assert [t for t in asyncio.all_tasks() if t.get_name() == "toy-retire"] == []
    assert await section.prepare(desired("two")) is KEEP  # closed: nothing new


async def test_settings_it_cannot_use_and_a_store_that_refuses_reject() -> None:
    section = Section({"no": ["refuses"]})
    with pytest.raises(ConfigError) as bad:
        await section.prepare(desired("bad"))
    assert bad.value.problems[0].key == ("cluster", "filesystem", "path")
    assert "no such store: bad" in str(bad.value.problems[0])
    prepared = section.prepare(desired("no"))
    with pytest.raises(ConfigError) as refused:
        await prepared
    assert "cannot use the filesystem store: " in str(refused.value.problems[0])
    assert section.in_use is None and section.link is None and section.said == []


async def test_a_store_that_does_not_answer_is_committed_connecting_then_comes_up() -> None:
    section = Section({"late": ["down", "down", "yes"]})
    prepared = await apply(section, desired("late"))
    assert isinstance(prepared, Unanswered)
    assert section.link is not None and section.link.connecting
    assert section.said[0] == "swap None -> late waiting=[Errno 2] not mounted"
    assert section.said[1:] == ["waits late", "committed"]
    await until(lambda: section.link is not None and not section.link.connecting)
    assert section.said[-1] == "answered late: records of late"
    await section.close()
    assert prepared.backend.closed


async def test_a_discarded_revision_closes_what_it_built() -> None:
    section = Section({})
    prepared = await section.prepare(desired("one"))
    assert isinstance(prepared, Ready)
    await section.discard(prepared)
    assert prepared.backend.closed and section.in_use is None
