"""``cronstable state ls|get|rm``: the durable records a daemon keeps, for an operator.

The store is the one a configuration's ``state`` section names (with its ``cluster``
section's etcd for ``backend: etcd``), in ``--state-dir`` for ``backend:
filesystem``; this node's part of it is ``nodes/<--node-name>/``, both defaulting as
for ``cronstable run``.

Keys are shown and typed decoded (``retries/backup/nightly``, not
``retries/backup%2Fnightly``): a key of this node is ``KIND/NAME``, another node's
``nodes/NODE/KIND/NAME``, the cluster's ``cluster/KIND/NAME``.  A node name has no
``/`` and every kind is one segment, so the name is everything after them.

A running daemon keeps its own copy of what it recorded in memory and writes it
again: ``rm`` is for the records of a stopped daemon, or stale ones.  Removing the
``running/`` record of a run that is still alive makes a daemon started later
blind to it (a ``Forbid`` job may then start a second copy), so ``rm`` asks for
``--yes`` before it removes such a record, as it does for more than one record.

Exit status: 0 done; 1 no such record (``get``, ``rm``) or an invalid
configuration; 2 a usage error, a configuration without a state section, a store
that cannot be used, or ``rm`` refused for want of ``--yes``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from cronstable.cli.exits import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from cronstable.redact import redact
from cronstable.state.base import Record, StateStore, key, node_key, segments

_T = TypeVar("_T")
Format = Literal["text", "json"]

KINDS = {
    "retries": "retry",
    "fires": "fire",
    "running": "running",
    "reboot": "reboot",
    "history": "history",
}
"""A record's kind (the key segment that names it → how it is shown)."""
NAMED_BY_JOB = frozenset({"retries", "fires", "reboot", "history"})
"""The kinds whose key names the job (``running/`` is named by the run id)."""


class _Refused(Exception):
    """One line for stderr, and the exit status."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def _error(message: str) -> None:
    print(f"cronstable state: {redact(message)}", file=sys.stderr)


# ------------------------------------------------------------------ keys


def store_key(text: str, node: str) -> str:
    """The store key of a key as typed (see the module docstring); ``_Refused`` when it is
    not one."""
    parts = text.split("/")
    if parts[0] == "nodes" and len(parts) >= 4 and all(parts[:3]):
        name = "/".join(parts[3:])
        if name:
            return key("nodes", parts[1], parts[2], name)
    elif parts[0] == "cluster" and len(parts) >= 3 and parts[1]:
        name = "/".join(parts[2:])
        if name:
            return key("cluster", parts[1], name)
    elif parts[0] and len(parts) >= 2:
        name = "/".join(parts[1:])
        if name:
            return node_key(node, parts[0], name)
    raise _Refused(
        f"{text!r} is not a key: give KIND/NAME (this node's, e.g. retries/backup), "
        "nodes/NODE/KIND/NAME or cluster/KIND/NAME"
    )


@dataclass(frozen=True, slots=True)
class Entry:
    """One record as shown: its key decoded, and what it is."""

    store_key: str
    shown: str
    """The key decoded; without ``nodes/<this node>/`` when it is this node's."""
    kind_segment: str
    name: str
    record: Record | None

    @property
    def kind(self) -> str:
        return KINDS.get(self.kind_segment, self.kind_segment)

    @property
    def job(self) -> str | None:
        if self.record is not None and isinstance(self.record.get("job"), str):
            job: str = self.record["job"]
            return job
        return self.name if self.kind_segment in NAMED_BY_JOB else None


def entry(store_key_text: str, record: Record | None, node: str) -> Entry:
    parts = segments(store_key_text)
    if parts[0] == "nodes" and len(parts) >= 4:
        kind, name = parts[2], "/".join(parts[3:])
        mine = parts[1] == node
    elif parts[0] == "cluster" and len(parts) >= 3:
        kind, name, mine = parts[1], "/".join(parts[2:]), False
    else:
        kind, name, mine = "", "/".join(parts), False
    shown = "/".join(parts[2:] if mine else parts)
    return Entry(store_key_text, shown, kind, name, record)


# ------------------------------------------------------------------ what is shown


def _text(value: object) -> str:
    """A value for a text line: one line, control characters escaped."""
    text = str(value)
    return text if text.isprintable() else repr(text)[1:-1]


def summary(item: Entry) -> str:
    record = item.record
    if record is None:
        return "unreadable (not a record this version of cronstable writes)"
    kind = item.kind_segment
    if kind == "retries":
        status = record.get("status")
        if status == "pending":
            count = record.get("count")
            done = f"{count} retr{'y' if count == 1 else 'ies'} so far"
            return f"pending, {done}, next not before {record.get('notBefore')}"
        reason = record.get("reason")
        return f"{status} ({reason})" if reason else str(status)
    if kind == "fires":
        return f"last fire {record.get('fire')}"
    if kind == "running":
        return (
            f"pid {record.get('pid')}, boot {record.get('bootId')}, "
            f"started {record.get('startedAt')}"
        )
    if kind == "reboot" and item.store_key.startswith("cluster/"):
        return f"ran by node {record.get('node')} at {record.get('at')}"
    if kind == "reboot":
        return f"boot {record.get('bootId')}, at {record.get('at')}"
    if kind == "history":
        runs = record.get("runs")
        if not isinstance(runs, list):
            return "no runs"
        text = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
        last = runs[-1] if runs else None
        if isinstance(last, dict):
            text += f", last {last.get('outcome')} at {last.get('finishedAt')}"
        return text
    return ", ".join(f"{name} {value}" for name, value in record.items() if name != "version")


def print_table(entries: list[Entry]) -> None:
    """KEY, KIND, JOB and SUMMARY columns, one line per record."""
    rows = [("KEY", "KIND", "JOB", "SUMMARY")] + [
        (_text(item.shown), item.kind, _text(item.job or "-"), _text(summary(item)))
        for item in entries
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for shown, kind, job, text in rows:
        print(f"{shown.ljust(widths[0])}  {kind.ljust(widths[1])}  {job.ljust(widths[2])}  {text}")


def as_json(item: Entry) -> dict[str, Any]:
    return {"key": item.shown, "record": item.record}


def _dump(value: object) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


# ------------------------------------------------------------------ the actions


async def _present(store: StateStore, store_key_text: str) -> tuple[bool, Record | None]:
    """Whether there is a record at the key (readable or not), and the record."""
    found = await store.list(store_key_text)
    if store_key_text in found:
        return True, found[store_key_text]
    return False, None


async def do_ls(
    store: StateStore, node: str, prefix: str | None, all_nodes: bool, fmt: Format
) -> int:
    found = await store.list("" if all_nodes else node_key(node) + "/")
    entries = [entry(k, record, node if not all_nodes else "") for k, record in found.items()]
    if prefix:
        entries = [item for item in entries if item.shown.startswith(prefix)]
    if fmt == "json":
        _dump([as_json(item) for item in entries])
        return EXIT_OK
    if not entries:
        where = "the store" if all_nodes else f"node {node}"
        under = f" under {prefix}" if prefix else ""
        print(f"no records of {where}{under} in {redact(repr(store))}", file=sys.stderr)
        return EXIT_OK
    print_table(entries)
    return EXIT_OK


async def do_get(store: StateStore, node: str, text: str, fmt: Format) -> int:
    full = store_key(text, node)
    present, record = await _present(store, full)
    if not present:
        raise _Refused(f"no record {text} in {repr(store)}", EXIT_INVALID)
    if record is None:
        raise _Refused(
            f"{text}: a record this version of cronstable cannot read (remove it with rm)",
            EXIT_INVALID,
        )
    _dump(as_json(entry(full, record, node)) if fmt == "json" else record)
    return EXIT_OK


def _live_run(item: Entry) -> int | None:
    """The pid of the run a ``running/`` record names when that process is alive on this
    host, in this boot, with the recorded start time; else None."""
    from cronstable.platform import boot_id
    from cronstable.runtime.adopted import same_process

    record = item.record
    if item.kind_segment != "running" or record is None:
        return None
    pid, ticks = record.get("pid"), record.get("startTicks")
    if not isinstance(pid, int) or not isinstance(ticks, int) or pid <= 0:
        return None
    if record.get("bootId") is None or record.get("bootId") != boot_id():
        return None
    return pid if same_process(pid, ticks) else None


async def do_rm(store: StateStore, node: str, keys: list[str], job: str | None, yes: bool) -> int:
    chosen: list[Entry] = []
    if job is not None:
        found = await store.list(node_key(node) + "/")
        chosen = [
            item for k, record in found.items() if (item := entry(k, record, node)).job == job
        ]
        if not chosen:
            raise _Refused(f"no record of job {job!r} on node {node}", EXIT_INVALID)
    else:
        for text in dict.fromkeys(keys):
            full = store_key(text, node)
            present, record = await _present(store, full)
            if present:
                chosen.append(entry(full, record, node))
            else:
                _error(f"no record {_text(text)}")
        if not chosen:
            return EXIT_INVALID  # each key is named on stderr
    live = {item.store_key: pid for item in chosen if (pid := _live_run(item)) is not None}
    if not yes and (len(chosen) > 1 or live):
        for item in chosen:
            pid = live.get(item.store_key)
            note = f" (pid {pid} is still running)" if pid is not None else ""
            print(f"would remove {_text(item.shown)}{note}", file=sys.stderr)
        why = (
            f"{len(chosen)} records"
            if len(chosen) > 1
            else "the record of a run that is still going (a daemon started later "
            "would not know of it, and may start a second copy of a Forbid job)"
        )
        raise _Refused(f"not removed: give --yes to remove {why}")
    removed = 0
    for item in chosen:
        if await store.delete(item.store_key):
            removed += 1
            print(f"removed {_text(item.shown)}")
    return EXIT_OK if removed else EXIT_INVALID


# ------------------------------------------------------------------ the command


def _open_store(config_path: str, state_dir: str) -> StateStore | int:
    """The store the configuration names, or the exit status once the reason is on stderr."""
    from cronstable.cli.validate import load_or_report
    from cronstable.etcd import EtcdError, login_from_environment
    from cronstable.state.factory import make_store

    loaded = load_or_report(config_path, "state")
    if loaded is None:
        return EXIT_INVALID
    label, desired = loaded
    if desired.state is None:
        _error(
            f"{label} has no state section, so a daemon running it keeps no records "
            "(give the configuration the daemon runs with -c PATH)"
        )
        return EXIT_USAGE
    try:
        login = login_from_environment() if desired.state.backend == "etcd" else (None, None)
        return make_store(desired.state, desired.cluster, state_dir, login=login)
    except (EtcdError, ValueError, OSError) as exc:
        _error(f"{label}: cannot use the {desired.state.backend} store: {exc}")
        return EXIT_USAGE


def cmd_state(
    action: str,
    *,
    config: str,
    node: str,
    state_dir: str,
    prefix: str | None = None,
    all_nodes: bool = False,
    fmt: Format = "text",
    keys: list[str] | None = None,
    job: str | None = None,
    yes: bool = False,
) -> int:
    from cronstable.errors import CronstableError

    opened = _open_store(config, state_dir)
    if isinstance(opened, int):
        return opened
    store = opened

    def call() -> Awaitable[int]:
        if action == "ls":
            return do_ls(store, node, prefix, all_nodes, fmt)
        if action == "get":
            return do_get(store, node, (keys or [""])[0], fmt)
        return do_rm(store, node, keys or [], job, yes)

    try:
        return asyncio.run(_closing(store, call))
    except _Refused as exc:
        _error(str(exc))
        return exc.status
    except (CronstableError, OSError) as exc:  # StateError among them
        _error(f"{exc}")
        return EXIT_USAGE
    except TimeoutError:
        _error(f"{store!r}: no answer in time")
        return EXIT_USAGE


async def _closing(store: StateStore, call: Callable[[], Awaitable[_T]]) -> _T:
    try:
        return await call()
    finally:
        await store.close()
