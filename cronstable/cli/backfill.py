"""``cronstable backfill JOB --from T1 --to T2``: run every past fire of a job in a range.

``POST /jobs/{name}/backfill`` (scope ``trigger``), then, unless ``--no-wait``, follow
its progress with ``GET /jobs/{name}/backfill`` (scope ``read``) once a second, one
line per run that ended, until the backfill is done or stopped.  ``--dry-run`` lists
the fires and runs nothing.  Interrupting the command stops following, not the
backfill (``cronstable cancel JOB`` stops it).

Exit codes as the other client commands (:mod:`cronstable.cli.client`), and 1 when
the backfill ran but a run did not succeed or it stopped before its last fire.
"""

from __future__ import annotations

import sys
import time
from typing import Any
from urllib.parse import quote

from cronstable.cli.api_client import DEFAULT_TIMEOUT, ApiError, Unreachable
from cronstable.cli.client import (
    EXIT_DONE,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Target,
    _exit_for,
    _say,
    _shown,
    _when,
    target_from,
)
from cronstable.cli.untrusted import json_text
from cronstable.redact import redact

POLL_EVERY = 1.0
"""Seconds between two looks at a backfill's progress."""


def _outcomes(backfill: dict[str, Any]) -> str:
    counts = backfill.get("outcomes") or {}
    return ", ".join(f"{_shown(count)} {_shown(outcome)}" for outcome, count in counts.items())


def _progress(backfill: dict[str, Any]) -> str:
    line = f"{_shown(backfill['done'])}/{_shown(backfill['total'])} done"
    counts = _outcomes(backfill)
    if counts:
        line += f" ({counts})"
    if backfill.get("current"):
        line += f", running {_when(backfill['current'])}"
    return line


def cmd_backfill(
    job: str,
    body: dict[str, Any],
    *,
    url: str | None,
    token_file: str | None,
    as_json: bool,
    timeout: float = DEFAULT_TIMEOUT,
    cafile: str | None = None,
    wait: bool = True,
) -> int:
    prog = "cronstable backfill"
    try:
        target = target_from(url, token_file, timeout, cafile)
    except ApiError as exc:
        _say(f"{prog}: {exc}")
        return EXIT_USAGE
    path = f"/jobs/{quote(job, safe='')}/backfill"
    answer = _ask(target, prog, "POST", path, body)
    if isinstance(answer, int):
        return answer
    if body.get("dryRun"):
        if as_json:
            sys.stdout.write(json_text(answer))
            return EXIT_DONE
        fires = answer["fires"]
        for fire in fires:
            sys.stdout.write(f"{_when(fire['scheduledTime'])}  {_shown(fire['local'])}\n")
        sys.stdout.write(f"{len(fires)} fire{'' if len(fires) == 1 else 's'} (dry run)\n")
        return EXIT_DONE
    backfill = answer["backfill"]
    if as_json and not wait:
        sys.stdout.write(json_text(answer))
        return EXIT_DONE
    if not as_json:
        sys.stdout.write(
            f"backfilling {_shown(job)}: {_shown(backfill['total'])} fires from "
            f"{_when(backfill['fires'][0]['scheduledTime'])} to "
            f"{_when(backfill['fires'][-1]['scheduledTime'])}\n"
        )
        sys.stdout.flush()
    if not wait:
        return EXIT_DONE
    shown = -1
    try:
        while True:
            if backfill["done"] != shown and not as_json:
                sys.stdout.write(_progress(backfill) + "\n")
                sys.stdout.flush()
                shown = backfill["done"]
            if backfill["state"] != "running":
                break
            time.sleep(POLL_EVERY)
            answer = _ask(target, prog, "GET", path)
            if isinstance(answer, int):
                return answer
            backfill = answer["backfill"]
            if backfill is None:
                _say(f"{prog}: the daemon no longer knows this backfill (restarted?)")
                return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        _say(f"{prog}: no longer following; the backfill goes on (cronstable cancel stops it)")
        return EXIT_REFUSED
    if as_json:
        sys.stdout.write(json_text(answer))
    elif backfill["state"] == "stopped":
        _say(f"{prog}: stopped: {backfill.get('stopReason')}")
    succeeded = (backfill.get("outcomes") or {}).get("succeeded", 0)
    complete = backfill["state"] == "done" and succeeded == backfill["total"]
    return EXIT_DONE if complete else EXIT_REFUSED


def _ask(
    target: Target, prog: str, method: str, path: str, body: Any = None
) -> dict[str, Any] | int:
    """The JSON answer of one request, or the exit status that ends the command."""
    try:
        answer = target.call(method, path, body)
    except Unreachable as exc:
        hint = " (no daemon on the local socket; give --url)" if target.defaulted else ""
        _say(f"{prog}: {exc}{hint}")
        return EXIT_UNREACHABLE
    except ApiError as exc:
        _say(f"{prog}: {exc}")
        return EXIT_USAGE
    data = answer.json()
    where = redact(target.endpoint.url)
    if 200 <= answer.status < 300 and isinstance(data, dict):
        return data
    if 200 <= answer.status < 300:
        _say(f"{prog}: {where} answered {answer.status} without the JSON of {method} {path}")
        return EXIT_UNREACHABLE
    message = redact(answer.message())
    if answer.status in (401, 403) and target.token is None:
        message += " (set CRONSTABLE_TOKEN or give --token-file)"
    _say(f"{prog}: {where} answered {answer.status}: {message}")
    return _exit_for(answer.status)
