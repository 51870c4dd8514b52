"""The audit trail: each revision this node applied or rejected, and what made it try it.

* One entry per attempt the applier recorded (applied, nothing changed, rejected; a
  revision read mid-write and superseded is not one): its source revision, job-set id,
  time, outcome, the trigger (:class:`~cronstable.ports.Trigger`: ``start``, ``poll``,
  ``watch``, ``sighup``, ``webhook`` with the delivery id and sender, ``api`` with the
  token's name), the job counts it changed and a rejected one's problems (redacted, cut
  to a bound by :meth:`~cronstable.reconcile.apply.RevisionRecord.audit`).
* The newest :data:`KEEP` entries are kept in memory (a ring: the oldest goes first) and
  ``GET /audit`` is answered from there, newest first, a page at a time.
* With a state store, each entry is also a record ``audit/<node>/<id>``, written through
  the keeper's writer (queued, coalesced, retried in the background: an apply never waits
  for the store, and a store that is down costs it nothing); the entry the ring drops is
  removed from the store the same way.  The store's records are read back once per store
  (after a restart, or when a revision names another store), merged with the entries made
  meanwhile, and cut to the newest :data:`KEEP` again; a store that does not answer is
  read again with back-off (up to :data:`LOAD_BACKOFF_MAX` s) until it does.

An entry's id is the microseconds since the epoch when it was made (one more than the
last id when the clock did not move on), zero-padded: ids sort by time, on one node, and
a page's cursor is the id of its last entry.  Ids are per node: on a store the nodes share
(etcd) each node keeps its own trail under its name.

The record's form (the store's version 1, :data:`~cronstable.state.base.FORMAT_VERSION`)::

    {"version": 1, "id": "00001777777777000000", "node": "n1",
     "time": "2026-05-01T03:00:00.250000Z", "outcome": "applied",
     "revision": "3f2c…", "source": "git https://…", "jobSetId": "v1:…", "duration": 0.01,
     "trigger": {"kind": "webhook", "requestedAt": "…", "delivery": "…", "sender": "…",
                 "revision": "3f2c…"},
     "changes": {"added": 1, "changed": 0, "removed": 0}, "sections": ["web"],
     "errors": []}

A record that does not read as one is skipped (and cut with the oldest).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from cronstable.ports import TRIGGER_KINDS, AuditEntry, AuditPage, Trigger, utc_text
from cronstable.redact import redact
from cronstable.state.base import (
    OP_TIMEOUT,
    Record,
    StateError,
    StateStore,
    key,
    record_time,
    segments,
)
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

AUDIT = "audit"
KEEP = 1000
"""Entries kept (in memory, and in the store)."""
ID_DIGITS = 20
LOAD_BACKOFF_FIRST = 1.0
LOAD_BACKOFF_MAX = 60.0


def audit_key(node: str, entry_id: str) -> str:
    return key(AUDIT, node, entry_id)


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else utc_text(moment)


def trigger_record(trigger: Trigger) -> Record:
    data: Record = {"kind": trigger.kind}
    for name, value in (
        ("requestedAt", _time(trigger.requested_at)),
        ("via", trigger.via),
        ("token", trigger.token),
        ("delivery", trigger.delivery),
        ("sender", trigger.sender),
        ("revision", trigger.revision),
    ):
        if value is not None:
            data[name] = value
    return data


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def read_trigger(data: object) -> Trigger | None:
    if not isinstance(data, dict):
        return None
    kind = data.get("kind")
    if kind not in TRIGGER_KINDS:
        return None
    return Trigger(
        kind,
        requested_at=record_time(data.get("requestedAt")),
        via=_text(data.get("via")),
        token=_text(data.get("token")),
        delivery=_text(data.get("delivery")),
        sender=_text(data.get("sender")),
        revision=_text(data.get("revision")),
    )


def entry_record(entry: AuditEntry) -> Record:
    """``entry`` as its record keeps it (see the module docstring)."""
    return {
        "id": entry.id,
        "node": entry.node,
        "time": utc_text(entry.time),
        "outcome": entry.outcome,
        "revision": entry.revision,
        "source": entry.source,
        "jobSetId": entry.job_set_id,
        "duration": round(entry.duration, 6),
        "trigger": trigger_record(entry.trigger),
        "changes": dict(entry.changes),
        "sections": list(entry.sections),
        "errors": list(entry.errors),
    }


def read_entry(data: object) -> AuditEntry | None:
    """The entry :func:`entry_record` wrote; None for anything else."""
    if not isinstance(data, dict):
        return None
    entry_id, moment = data.get("id"), record_time(data.get("time"))
    trigger, outcome = read_trigger(data.get("trigger")), data.get("outcome")
    revision, source = data.get("revision"), data.get("source")
    if not isinstance(entry_id, str) or not entry_id.isdigit() or moment is None:
        return None
    if trigger is None or outcome not in ("applied", "rejected"):
        return None
    if not isinstance(revision, str) or not isinstance(source, str):
        return None
    changes = data.get("changes")
    errors, sections = data.get("errors"), data.get("sections")
    try:
        return AuditEntry(
            id=entry_id,
            node=str(data.get("node", "")),
            time=moment,
            outcome=outcome,
            revision=revision,
            source=source,
            trigger=trigger,
            job_set_id=_text(data.get("jobSetId")),
            duration=float(data.get("duration") or 0.0),
            changes={str(k): int(v) for k, v in changes.items()}
            if isinstance(changes, dict)
            else {},
            sections=tuple(str(s) for s in sections) if isinstance(sections, list) else (),
            errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (),
        )
    except (TypeError, ValueError):
        return None


class AuditTrail:
    """See the module docstring.  ``store``: the state store in use (None: none);
    ``submit``: the keeper's writer (:meth:`~cronstable.state.keeper.StateKeeper.submit`,
    which queues nothing without a store)."""

    def __init__(
        self,
        node: str,
        store: Callable[[], StateStore | None],
        submit: Callable[[str, Record | None], None],
        *,
        keep: int = KEEP,
        clock: Callable[[], int] = time.time_ns,
        backoff: float = LOAD_BACKOFF_FIRST,
    ) -> None:
        self.node = node
        self._store = store
        self._submit = submit
        self.keep = keep
        self._clock = clock
        self._backoff = backoff
        self._entries: list[AuditEntry] = []
        """Oldest first, by id."""
        self._last = 0
        self._read_from: StateStore | None = None
        """The store whose records are merged in (or being read)."""
        self._loading: asyncio.Task[None] | None = None
        self._tasks = TaskSet("the audit trail")

    # ------------------------------------------------------------ writing

    def add(self, entry: AuditEntry) -> None:
        """Keep ``entry`` (given its id here); never blocks, never raises for the store."""
        self._last = max(self._last + 1, self._clock() // 1000)
        entry = replace(entry, id=f"{self._last:0{ID_DIGITS}d}", node=self.node)
        self._entries.append(entry)
        self._submit(audit_key(self.node, entry.id), entry_record(entry))
        self._cut()
        self._follow_store()

    def _cut(self) -> None:
        while len(self._entries) > self.keep:
            dropped = self._entries.pop(0)
            self._submit(audit_key(self.node, dropped.id), None)

    def _follow_store(self) -> None:
        """Read the store's records once per store in use (in the background)."""
        store = self._store()
        if store is self._read_from:
            return
        self._read_from = store
        if self._loading is not None:
            self._loading.cancel()
            self._loading = None
        if store is not None:
            self._loading = self._tasks.start(self._load(store), name="audit-load")

    async def _load(self, store: StateStore) -> None:
        delay = self._backoff
        prefix = key(AUDIT, self.node) + "/"
        while True:
            try:
                records = await asyncio.wait_for(store.list(prefix), timeout=OP_TIMEOUT * 2)
            except (StateError, TimeoutError) as exc:
                logger.debug(
                    "Audit: cannot read the trail from the store yet (%s); again in %.0f s",
                    redact(str(exc) or "no answer in time"),
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, LOAD_BACKOFF_MAX)
                if self._store() is not store:
                    return  # replaced meanwhile: the new one is read instead
                continue
            break
        if self._store() is store:
            self.merge(records)

    def merge(self, records: Mapping[str, Record | None]) -> None:
        """Merge the store's ``records`` (keys ``audit/<node>/<id>``) into the trail, the
        newest :attr:`keep` kept; the ones cut are removed from the store."""
        known = {entry.id for entry in self._entries}
        for full, record in records.items():
            parts = segments(full)
            if len(parts) != 3 or parts[0] != AUDIT or parts[1] != self.node:
                continue
            entry = read_entry(record)
            if entry is None or entry.id != parts[2]:
                self._submit(full, None)  # unreadable: cut with the oldest
                continue
            if entry.id not in known:
                bisect.insort(self._entries, entry, key=lambda e: e.id)
                known.add(entry.id)
        if self._entries:
            self._last = max(self._last, int(self._entries[-1].id))
        self._cut()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self._tasks.wait(OP_TIMEOUT)

    # ------------------------------------------------------------ reading

    def entries(self) -> list[AuditEntry]:
        """Every entry kept, oldest first."""
        return list(self._entries)

    def page(self, limit: int, cursor: str | None = None) -> AuditPage:
        """At most ``limit`` entries older than ``cursor``, newest first; ValueError for a
        cursor that is not an id."""
        self._follow_store()
        if cursor is not None and (not cursor.isdigit() or len(cursor) != ID_DIGITS):
            raise ValueError(cursor)
        end = (
            len(self._entries)
            if cursor is None
            else bisect.bisect_left(self._entries, cursor, key=lambda e: e.id)
        )
        start = max(0, end - limit)
        chosen = self._entries[start:end][::-1]
        return AuditPage(
            entries=chosen,
            next_cursor=chosen[-1].id if start > 0 and chosen else None,
            kept=len(self._entries),
            bound=self.keep,
            durable=self._store() is not None,
        )
