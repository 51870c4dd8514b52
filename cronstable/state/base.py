"""The durable state store: one base class, one module per backend.

A store keeps small JSON records under ``/``-separated keys (each segment made
with :func:`key`, so a job name may hold any character).  Every record carries
``version`` (:data:`FORMAT_VERSION`); a record this version cannot read is
treated as absent by its reader and settled.  Writes are atomic: a reader sees
the old record or the new one, never half of one.  Every operation is bounded
(:data:`OP_TIMEOUT`) and raises :class:`StateError` when the store cannot be
used, so the caller decides what an outage means (``onStoreUnavailable``).

Keys, under each node's own part of the store (``nodes/<node>/``)::

    retries/<job>        the job's retry sequence: pending (attempt, notBefore) or settled
    fires/<job>          the last fire handled, for catch-up across a restart
    running/<run id>     a run going now: pid, process group, boot id, start ticks
    reboot/<job>         the boot id and job digest an @reboot job last ran for
    history/<job>        the last finished runs (output capped)

and, for the cluster as a whole, ``cluster/jobs/<job>/…`` (a ``Leader`` job's last fire,
pending retry, runs going and claims, on a store the nodes share: :func:`job_key`,
:mod:`.keeper`), ``cluster/reboot/<job>`` (a ``Leader`` @reboot
job's digest, once per cluster) and ``cluster/lastrun/<job>``, ``cluster/lastflow/<name>``
(the last run that ended, on whichever node: the fleet view, :mod:`.fleet`).
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from cronstable.errors import CronstableError

FORMAT_VERSION = 1
OP_TIMEOUT = 5.0
"""Seconds one store operation may take before it counts as failed."""

Record = dict[str, Any]


class StateError(CronstableError):
    """The store cannot be used now (unreachable, refused, full); says why."""


MAX_SEGMENT = 180
"""Longest key segment (bytes): a file name must stay under NAME_MAX (255) with its suffix."""


_UNQUOTED = re.compile(rf"[A-Za-z0-9_~-][A-Za-z0-9_.~-]{{0,{MAX_SEGMENT - 1}}}")
"""A segment :func:`quote` leaves as it is (no leading dot, not too long): most job names,
node names and fixed segments, taken without the quoting's per-character walk."""


def _segment(text: str) -> str:
    if _UNQUOTED.fullmatch(text):
        return text
    quoted = quote(text, safe="")
    # never "." or "..", nor a hidden file name: a leading dot is quoted too
    quoted = "%2E" + quoted[1:] if quoted.startswith(".") else quoted
    if len(quoted) > MAX_SEGMENT:
        # a long name keeps a readable start and a digest of the whole (the record
        # itself holds the full name)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        cut = MAX_SEGMENT - 17
        escape = quoted.rfind("%", 0, cut)
        if escape > cut - 3:
            cut = escape  # never half of a %XX escape
        quoted = quoted[:cut] + "~" + digest
    return quoted


def key(*segments: str) -> str:
    """A store key from segments (each percent-quoted: ``/`` inside a name stays one segment,
    and none is ``.`` or ``..``)."""
    return "/".join(_segment(segment) for segment in segments)


def segments(key_text: str) -> list[str]:
    """The segments of a key (:func:`key` undone)."""
    return [unquote(segment) for segment in key_text.split("/")]


def node_key(node: str, *rest: str) -> str:
    """A key in node ``node``'s part of the store."""
    return key("nodes", node, *rest)


def job_key(job: str, *rest: str) -> str:
    """A key in job ``job``'s part of the cluster's records (``cluster/jobs/<job>/…``):
    what the node that owns a ``Leader`` job writes, for the next owner to inherit."""
    return key("cluster", "jobs", job, *rest)


BOOT_SCOPED = "running"
"""The kind of record that means something only until the machine reboots: a running
run's record (its pid and process group, the boot id it started in; a restart adopts a
run only within the same boot).  Kept on a node's disk it needs no flush: a daemon that
dies leaves it in the page cache, and after a power cut it would be dropped anyway."""


def boot_scoped(key_text: str) -> bool:
    """Whether the record at ``key_text`` is one of this node's :data:`BOOT_SCOPED`."""
    parts = key_text.split("/")
    return len(parts) == 4 and parts[0] == "nodes" and parts[2] == BOOT_SCOPED


def encode(record: Record) -> bytes:
    return json.dumps({"version": FORMAT_VERSION, **record}, sort_keys=True).encode()


def record_time(text: object) -> datetime | None:
    """A time a record holds (ISO 8601 with a zone, ``Z`` for UTC), in UTC; None when the
    value is not one (missing, not text, no zone): readers skip what they cannot use."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone(UTC) if moment.tzinfo is not None else None


def decode(data: bytes) -> Record | None:
    """The record in ``data``; None when it is not one this version writes."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return readable(value)


def readable(value: object) -> Record | None:
    """``value`` (decoded JSON) as a record; None when it is not one this version writes
    (:func:`decode`'s test, for a store that holds records inside its own JSON)."""
    if not isinstance(value, dict) or value.get("version") != FORMAT_VERSION:
        return None
    return value


async def claim_report(store: StateStore, marker: str, mine: Record) -> bool:
    """Whether the report ``mine`` names (its ``instance``: one pause, one last success)
    is this node's to send: put-if-absent at ``marker``, so one node of those sharing the
    store sends it, once, and again after a restart only for a new instance.  Raises
    :class:`StateError` when the store cannot tell."""
    if await store.create(marker, mine):
        return True
    held = await store.get(marker)
    if held is not None and held.get("instance") == mine["instance"]:
        return False  # reported already (by another node, or before a restart)
    await store.put(marker, mine)
    return True


class StateStore(ABC):
    """Records by key; see the module docstring."""

    backend = "?"
    shared = False
    """Whether every node of a cluster reaches the same records (etcd; not a node's own
    directory)."""

    @abstractmethod
    async def check(self) -> None:
        """Reach the store once and prove it writable (a revision naming an unusable store
        is rejected).  Raises :class:`StateError` saying what is wrong."""

    @abstractmethod
    async def get(self, key: str) -> Record | None:
        """The record at ``key``; None when there is none (or it is unreadable)."""

    @abstractmethod
    async def put(self, key: str, record: Record) -> None:
        """Write ``record`` at ``key`` (atomically, replacing any)."""

    @abstractmethod
    async def create(self, key: str, record: Record) -> bool:
        """Write ``record`` at ``key`` only if there is none; whether it was written."""

    @abstractmethod
    async def delete(self, key: str) -> bool:
        """Remove the record at ``key``; whether there was one."""

    @abstractmethod
    async def list(self, prefix: str = "") -> dict[str, Record | None]:
        """Every key under ``prefix`` (a key or a key ending in ``/``) with its record
        (None for one this version cannot read), in key order."""

    async def apply(self, changes: Sequence[tuple[str, Record | None]]) -> None:
        """Write each record (None: remove the key), in order; a store that can do them
        together does (one round for them all).  Raises :class:`StateError` at the first
        that fails (the ones before it may be written)."""
        for key_text, record in changes:
            if record is None:
                await self.delete(key_text)
            else:
                await self.put(key_text, record)

    async def close(self) -> None:
        """Free what the store holds open."""
        return None
