"""``cronstable status --fleet``: the cluster as the asked node sees it, from the stores.

``GET /fleet`` (scope ``read``) page after page (:data:`PAGE` jobs each, at most
:data:`MAX_PAGES` pages): every member with the revision and job-set id it applied,
whether it leads and when it was last seen; then every job with its next fire, which
node will run it, and where it last ran.  ``--json`` prints one object: the first
page's members with every page's jobs.

Exit codes as the other client commands (:mod:`cronstable.cli.client`).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
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

PAGE = 500
MAX_PAGES = 200
"""Pages read at most (100,000 jobs); the rest is left out, and the output says so."""


def _ago(text: Any, now: datetime) -> str:
    if not isinstance(text, str):
        return "-"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return _shown(text)
    seconds = max(0.0, (now - moment).total_seconds())
    return f"{_when(text)} ({seconds:.0f}s ago)"


def _short(text: Any, length: int = 12) -> str:
    shown = _shown(text) if text else "-"
    return shown if len(shown) <= length else shown[: length - 1] + "…"


def _runs_next(where: dict[str, Any]) -> str:
    if where.get("everyNode"):
        return "every node"
    nodes = ", ".join(_shown(n) for n in where.get("nodes") or [])
    reason = _shown(where.get("reason", "?"))
    return f"{nodes} ({reason})" if nodes else f"none ({reason})"


def _last_ran(job: dict[str, Any]) -> str:
    going = job.get("running") or []
    if going:
        return "running on " + ", ".join(sorted({_shown(run["node"]) for run in going}))
    last = job.get("lastRun")
    if not last:
        return "-"
    return f"{_shown(last['node'])}: {_shown(last['outcome'])} at {_when(last['finishedAt'])}"


def fleet_text(fleet: dict[str, Any]) -> str:
    """The fleet as a members table and a jobs table, then what it could not know."""
    cluster = fleet["cluster"]
    now = datetime.fromisoformat(fleet["at"]) if fleet.get("at") else datetime.now(UTC)
    head = f"fleet as {_shown(fleet['node'])} sees it at {_when(fleet.get('at'))}"
    if cluster.get("backend"):
        leader = _shown(cluster["leader"]) if cluster.get("leader") else "none known"
        head += (
            f": {_shown(cluster['backend'])}, {_shown(cluster['distribution'])}, leader {leader}"
        )
    state = fleet.get("state") or {}
    if state.get("backend"):
        head += f"; state {_shown(state['backend'])}{'' if state.get('shared') else ' (own)'}"
    out = [head + "\n"]
    members = fleet.get("members") or []
    if members:
        rows = [["MEMBER", "LEADER", "REVISION", "JOB SET", "LAST SEEN"]]
        for member in members:
            name = _shown(member["name"]) + (" (this node)" if member.get("thisNode") else "")
            job_set = _short(member.get("jobSetId"), 16)
            if not member.get("sameJobSet", True):
                job_set += " (differs)"
            rows.append(
                [
                    name,
                    "yes" if member.get("leader") else "-",
                    _short(member.get("revision")),
                    job_set,
                    _ago(member.get("lastSeen"), now),
                ]
            )
        out.append("\n" + _table(rows))
    jobs = fleet.get("jobs") or []
    if jobs:
        rows = [["JOB", "POLICY", "NEXT FIRE", "RUNS NEXT ON", "LAST RAN"]]
        for job in jobs:
            name = _shown(job["name"]) + (" (workflow)" if job.get("kind") == "workflow" else "")
            next_fire = _when(job.get("nextFire")) if job.get("enabled") else "disabled"
            if job.get("paused"):
                next_fire += " (paused)"
            rows.append(
                [
                    name,
                    _shown(job.get("clusterPolicy", "?")),
                    next_fire,
                    _runs_next(job.get("runsNext") or {}),
                    _last_ran(job),
                ]
            )
        out.append("\n" + _table(rows))
    else:
        out.append("\nno jobs\n")
    notes = fleet.get("notes") or []
    if notes:
        out.append("\n" + "".join(f"note: {_shown(note)}\n" for note in notes))
    return "".join(out)


def cmd_fleet(
    *,
    url: str | None,
    token_file: str | None,
    as_json: bool,
    timeout: float = DEFAULT_TIMEOUT,
    cafile: str | None = None,
) -> int:
    prog = "cronstable status --fleet"
    try:
        target = target_from(url, token_file, timeout, cafile)
    except ApiError as exc:
        _say(f"{prog}: {exc}")
        return EXIT_USAGE
    merged: dict[str, Any] | None = None
    after: str | None = None
    for _ in range(MAX_PAGES):
        query = {"limit": str(PAGE)} | ({"after": after} if after is not None else {})
        answer = _ask(target, prog, "GET", f"/fleet?{urlencode(query, quote_via=quote)}")
        if isinstance(answer, int):
            return answer
        jobs = answer.get("jobs")
        if not isinstance(jobs, list):
            _say(f"{prog}: the answer to GET /fleet has no list of jobs")
            return EXIT_UNREACHABLE
        if merged is None:
            merged = answer
        else:
            merged["jobs"] += jobs
        following = answer.get("nextAfter")
        if not isinstance(following, str) or not jobs:
            merged["nextAfter"] = None
            break
        after = following
    assert merged is not None
    if merged.get("nextAfter") is not None:
        merged.setdefault("notes", []).append(
            f"only the first {PAGE * MAX_PAGES} jobs are shown (GET /fleet?after=… pages on)"
        )
    if as_json:
        sys.stdout.write(json_text(merged))
        return EXIT_DONE
    try:
        sys.stdout.write(fleet_text(merged))
    except (KeyError, TypeError, AttributeError, ValueError, IndexError):
        _say(f"{prog}: the answer to GET /fleet is not a fleet")
        return EXIT_UNREACHABLE
    return EXIT_DONE
