"""Leadership on a shared directory (an NFS or CephFS mount every node sees).

Files in the directory (each written whole to a temporary file, then renamed; the lock
and the record files are :mod:`.shareddir`'s)::

    leader.json                     {"version": 1, "node", "instance", "fence", "expires"}
    members/<node name>.json        {"version": 1, "instance", "jobSetId", "revision", "seen",
                                     "expires"}
    duplicates/<node name>.<id>     written by a second live daemon with a taken name
    .lock                           a POSIX record lock, held only during a round

A round takes ``.lock`` (``lockf``, which NFS forwards to its lock manager and
which the kernel drops when the holder dies), then renews or takes the leader
file and writes its membership file, each with ``expires`` = wall time + ttl.
A node takes the leader file over only once it expired more than
:data:`CLOCK_SKEW` seconds ago, and the fencing counter in it grows with each
new holder (it stays when the holder releases, so it never goes back).

Host clocks must agree within :data:`CLOCK_SKEW` (1 s): that is what lets a
wall-clock expiry written by one host be trusted by another.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from cronstable.cluster.base import (
    Leadership,
    LeadershipError,
    LeadershipStats,
    Member,
    Observation,
)
from cronstable.cluster.shareddir import (
    CLOCK_SKEW,
    FORMAT_VERSION,
    LockBusy,
    describe,
    live,
    locked,
    read,
    usable,
    write,
)

__all__ = ["CLOCK_SKEW", "FilesystemLeadership"]


class FilesystemLeadership(Leadership):
    backend = "filesystem"

    def __init__(
        self,
        node_name: str,
        *,
        ttl: float,
        path: str | Path,
        instance: str | None = None,
        stats: LeadershipStats | None = None,
    ) -> None:
        super().__init__(node_name, ttl=ttl, instance=instance, stats=stats)
        self.path = Path(path)
        self._leader_file = self.path / "leader.json"
        self._member_file = self.path / "members" / f"{node_name}.json"
        self._takeover: float | None = None

    def takeover_in(self) -> float | None:
        return self._takeover

    def __repr__(self) -> str:
        return f"FilesystemLeadership({self.node_name!r}, {str(self.path)!r})"

    async def check(self) -> None:
        await asyncio.to_thread(self._check)

    def _check(self) -> None:
        try:
            usable(self.path, self.ttl / 2, ("members", "duplicates"))
        except OSError as exc:  # LockBusy too
            raise LeadershipError(describe(self.path, exc)) from exc

    async def round(self) -> Observation:
        return await asyncio.to_thread(self._round)

    async def release(self) -> None:
        await asyncio.to_thread(self._release)

    # ------------------------------------------------------------ blocking work

    @contextlib.contextmanager
    def _locked(self, timeout: float) -> Iterator[None]:
        try:
            with locked(self.path, timeout):
                yield
        except LockBusy as exc:
            raise LeadershipError(str(exc)) from exc

    def _round(self) -> Observation:
        try:
            with self._locked(self.interval):
                if self._stopped:  # a round that outlived stop() must not lead again
                    raise LeadershipError("stopped")
                return self._round_locked()
        except OSError as exc:
            raise LeadershipError(describe(self.path, exc)) from exc

    def _round_locked(self) -> Observation:
        for sub in ("members", "duplicates"):
            (self.path / sub).mkdir(exist_ok=True)
        now = time.time()
        expires = now + self.ttl
        member = read(self._member_file)
        duplicate = (
            member is not None and member.get("instance") != self.instance and live(member, now)
        )
        if duplicate:
            write(
                self.path / "duplicates" / f"{self.node_name}.{self.instance}",
                {"version": FORMAT_VERSION, "expires": expires},
            )
        else:
            write(
                self._member_file,
                {
                    "version": FORMAT_VERSION,
                    "instance": self.instance,
                    "jobSetId": self.job_set_id,
                    "revision": self.revision,
                    "seen": now,
                    "expires": expires,
                },
            )
        held = read(self._leader_file) or {}
        fence: int | None = None
        mine = held.get("instance") == self.instance and held.get("node") == self.node_name
        self._takeover = None
        if not mine and not duplicate and live(held, now - CLOCK_SKEW):
            # a dead leader's record may be taken CLOCK_SKEW after it expires: the next
            # round is then, not up to a round interval later
            self._takeover = float(held["expires"]) + CLOCK_SKEW - now
        if not duplicate and (mine or not live(held, now - CLOCK_SKEW)):
            counter = int(held.get("fence", 0) or 0)
            fence = counter if mine and live(held, now) else counter + 1
            held = {
                "version": FORMAT_VERSION,
                "node": self.node_name,
                "instance": self.instance,
                "fence": fence,
                "expires": expires,
            }
            write(self._leader_file, held)
        leader = str(held["node"]) if live(held, now) and "node" in held else None
        members = []
        for file in sorted((self.path / "members").glob("*.json")):
            data = read(file)
            if data is not None and live(data, now):
                seen = data.get("seen")
                members.append(
                    Member(
                        file.stem,
                        str(data.get("instance", "")),
                        str(data.get("jobSetId", "")),
                        str(data.get("revision", "")),
                        float(seen) if isinstance(seen, int | float) else None,
                    )
                )
        for file in (self.path / "duplicates").glob(f"{self.node_name}.*"):
            data = read(file)
            if file.name != f"{self.node_name}.{self.instance}" and data and live(data, now):
                duplicate = True
        return Observation(leader, None if duplicate else fence, tuple(members), duplicate)

    def _release(self) -> None:
        try:
            with self._locked(self.interval):
                held = read(self._leader_file)
                if held is not None and held.get("instance") == self.instance:
                    write(self._leader_file, held | {"expires": 0})  # the counter stays
                member = read(self._member_file)
                if member is not None and member.get("instance") == self.instance:
                    self._member_file.unlink(missing_ok=True)
        except OSError as exc:
            raise LeadershipError(describe(self.path, exc)) from exc
