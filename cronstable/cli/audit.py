"""``cronstable audit``: the daemon's audit trail, newest first.

``GET /audit`` (scope ``read``) page after page (:data:`PAGE` entries each), following
each page's ``nextCursor`` until the trail ends or ``--limit`` entries were read: every
revision the daemon applied or rejected, when, its job-set id, and what triggered it
(the start, the source's poll or watch, SIGHUP, a GitHub delivery and its sender, an
API reload and the token's name).  ``--format json`` (or ``--json``) prints one object,
``{"entries": [...], "kept", "bound", "durable"}``.

Exit codes as the other client commands (:mod:`cronstable.cli.client`).
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote, urlencode

from cronstable.cli.api_client import DEFAULT_TIMEOUT, ApiError
from cronstable.cli.backfill import _ask
from cronstable.cli.client import (
    EXIT_DONE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    _say,
    _shown,
    _table,
    _when,
    target_from,
)
from cronstable.cli.untrusted import json_text

PAGE = 1000
"""Entries asked for in each page (the daemon's largest ``?limit=``)."""
MAX_PAGES = 100
"""Pages read at most (the daemon keeps 1,000 entries: one page)."""


def _short(text: Any, length: int = 12) -> str:
    shown = _shown(text) if text else "-"
    return shown if len(shown) <= length else shown[: length - 1] + "…"


def trigger_text(trigger: dict[str, Any]) -> str:
    """``webhook delivery 72d3… by octocat``, ``api (http) token ops``, ``sighup`` …"""
    kind = _shown(trigger.get("kind", "?"))
    if kind == "webhook":
        sender = trigger.get("sender")
        by = f" by {_shown(sender)}" if sender else ""
        return f"webhook {_short(trigger.get('delivery'), 40)}{by}"
    if kind == "api":
        token = trigger.get("token")
        who = f"token {_shown(token)}" if token else "no token"
        return f"api ({_shown(trigger.get('via') or 'http')}) {who}"
    return kind


def _changes(entry: dict[str, Any]) -> str:
    if entry.get("outcome") == "rejected":
        errors = entry.get("errors") or []
        return f"{len(errors)} problem{'' if len(errors) == 1 else 's'}"
    changes = entry.get("changes") or {}
    counts = [f"{_shown(changes.get(k, 0))} {k}" for k in ("added", "changed", "removed")]
    sections = entry.get("sections") or []
    if sections:
        counts.append("sections " + ",".join(_shown(s) for s in sections))
    return ", ".join(counts)


def audit_text(trail: dict[str, Any]) -> str:
    """The entries as a table, newest first; a rejected one's problems below it."""
    entries = trail["entries"]
    kept = "" if trail.get("durable") else " (no state store: kept in memory only)"
    head = f"{len(entries)} of {_shown(trail.get('kept', len(entries)))} entries{kept}\n"
    if not entries:
        return head
    rows = [["TIME", "OUTCOME", "REVISION", "JOB SET", "TRIGGER", "CHANGES"]]
    problems: list[str] = []
    for entry in entries:
        rows.append(
            [
                _when(entry["time"]),
                _shown(entry["outcome"]),
                _short(entry.get("revision")),
                _short(entry.get("jobSetId"), 16),
                trigger_text(entry.get("trigger") or {}),
                _changes(entry),
            ]
        )
        if entry.get("errors"):
            problems.append(f"\n{_shown(entry['revision'])} rejected at {_when(entry['time'])}:\n")
            problems.extend(f"  {_shown(error)}\n" for error in entry["errors"])
    return head + "\n" + _table(rows) + "".join(problems)


def cmd_audit(
    *,
    url: str | None,
    token_file: str | None,
    as_json: bool,
    limit: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    cafile: str | None = None,
) -> int:
    prog = "cronstable audit"
    try:
        target = target_from(url, token_file, timeout, cafile)
    except ApiError as exc:
        _say(f"{prog}: {exc}")
        return EXIT_USAGE
    if limit is not None and limit < 1:
        _say(f"{prog}: --limit must be 1 or more")
        return EXIT_USAGE
    merged: dict[str, Any] | None = None
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        have = len(merged["entries"]) if merged is not None else 0
        size = PAGE if limit is None else min(PAGE, limit - have)
        query = {"limit": str(size)} | ({"cursor": cursor} if cursor is not None else {})
        answer = _ask(target, prog, "GET", f"/audit?{urlencode(query, quote_via=quote)}")
        if isinstance(answer, int):
            return answer
        entries = answer.get("entries")
        if not isinstance(entries, list):
            _say(f"{prog}: the answer to GET /audit has no list of entries")
            return EXIT_UNREACHABLE
        if merged is None:
            merged = answer
        else:
            merged["entries"] += entries
        following = answer.get("nextCursor")
        full = limit is not None and len(merged["entries"]) >= limit
        if not isinstance(following, str) or not entries or full:
            break
        cursor = following
    assert merged is not None
    merged.pop("nextCursor", None)
    if as_json:
        sys.stdout.write(json_text(merged))
        return EXIT_DONE
    try:
        sys.stdout.write(audit_text(merged))
    except (KeyError, TypeError, AttributeError, ValueError, IndexError):
        _say(f"{prog}: the answer to GET /audit is not an audit trail")
        return EXIT_UNREACHABLE
    return EXIT_DONE
