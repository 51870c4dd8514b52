"""``cronstable status|start|cancel|runs|reload|pause|resume``: ask a running daemon over
its HTTP API.

The daemon is ``--url``, else ``$CRONSTABLE_URL``, else the local socket (see
:func:`cronstable.platform.default_api_sockets`: the first that exists).  The
token is read from ``--token-file``, else ``$CRONSTABLE_TOKEN``; none is sent
without one (a local socket answers the read routes without a token).

Exit codes: 0 done, 1 refused (a 4xx answer other than 401/403), 2 usage,
3 unreachable (or a 5xx answer, or an answer that is not what the route gives),
4 unauthorized (401 or 403).

Every string of an answer is the answering server's choice: it is printed
through :func:`cronstable.cli.untrusted.escape` (``--json`` through
:func:`~cronstable.cli.untrusted.json_text`), so that no control sequence in a
job name, an error or a run's output reaches the terminal.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from cronstable.cli.api_client import (
    DEFAULT_TIMEOUT,
    Answer,
    ApiError,
    Endpoint,
    Unreachable,
    call,
)
from cronstable.cli.untrusted import escape, json_text
from cronstable.redact import redact

EXIT_DONE = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_UNAUTHORIZED = 4


@dataclass(frozen=True, slots=True)
class Target:
    """Which daemon to ask and how."""

    endpoint: Endpoint
    token: str | None
    timeout: float = DEFAULT_TIMEOUT
    cafile: str | None = None
    defaulted: bool = False
    """The URL is the local default (no --url, no $CRONSTABLE_URL)."""

    def call(self, method: str, path: str, body: Any = None) -> Answer:
        return call(
            self.endpoint,
            method,
            path,
            token=self.token,
            timeout=self.timeout,
            cafile=self.cafile,
            body=body,
        )


def default_url() -> tuple[str, bool]:
    """(URL, whether it is the local default): $CRONSTABLE_URL, else a local socket."""
    given = os.environ.get("CRONSTABLE_URL", "").strip()
    if given:
        return given, False
    from cronstable.platform import default_api_sockets

    candidates = default_api_sockets()
    for path in candidates:
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                return f"unix://{path}", True
        except OSError:
            continue
    return f"unix://{candidates[0]}", True


def read_token(token_file: str | None) -> str | None:
    """The token from ``token_file``, else ``$CRONSTABLE_TOKEN``; ApiError if unusable."""
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ApiError(f"--token-file {token_file}: {reason}") from exc
        if not token:
            raise ApiError(f"--token-file {token_file} is empty")
        return token
    return os.environ.get("CRONSTABLE_TOKEN", "").strip() or None


def target_from(
    url: str | None, token_file: str | None, timeout: float, cafile: str | None
) -> Target:
    defaulted = False
    if url is None:
        url, defaulted = default_url()
    if not timeout > 0:
        raise ApiError("--timeout must be more than 0 seconds")
    return Target(Endpoint.parse(url), read_token(token_file), timeout, cafile, defaulted)


# ------------------------------------------------------------ human output


def _shown(value: Any) -> str:
    """A value of the answer for one line of text: control characters escaped."""
    return escape(str(value))


def _when(text: Any) -> str:
    if not text:
        return "-"
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):  # not a time: shown as it came
        return _shown(text)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in rows
    )


def _duration(seconds: Any) -> str:
    if seconds is None:
        return "-"
    if not isinstance(seconds, int | float):
        return _shown(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _last(run: dict[str, Any] | None) -> str:
    if not run:
        return "-"
    code = run.get("exitCode")
    shown = _shown(run.get("outcome", "?"))
    if code is not None:
        shown += f" (exit {_shown(code)})"
    return f"{shown} {_duration(run.get('duration'))} at {_when(run.get('finishedAt'))}"


def status_text(status: dict[str, Any]) -> str:
    out = []
    applied = status.get("applied")
    if applied:
        out.append(
            f"applied {_shown(applied['revision'])} from {_shown(applied['source'])} "
            f"at {_when(applied['time'])}\n"
        )
    else:
        out.append("no revision applied yet\n")
    rejected = status.get("lastRejected")
    if rejected:
        out.append(f"rejected {_shown(rejected['revision'])} at {_when(rejected['time'])}:\n")
        out.extend(f"  {_shown(problem)}\n" for problem in rejected.get("errors", []))
    jobs = status.get("jobs") or []
    if not jobs:
        out.append("no jobs\n")
        return "".join(out)
    rows = [["JOB", "SCHEDULE", "NEXT FIRE", "RUNNING", "LAST RUN"]]
    for job in jobs:
        running = ", ".join(f"pid {_shown(run['pid'])}" for run in job.get("running") or [])
        next_fire = _when(job.get("nextFire")) if job.get("enabled") else "disabled"
        if job.get("retryPending"):
            next_fire += " (retry pending)"
        waiting = job.get("buffered") or []
        if waiting:
            next_fire += f" ({len(waiting)} buffered)"
        if job.get("paused"):
            next_fire = "paused"
        rows.append(
            [
                _shown(job["name"]),
                _shown(job["schedule"]),
                next_fire,
                running or "-",
                _last(job.get("lastRun")),
            ]
        )
    out.append("\n" + _table(rows))
    out.extend(_pause_lines(jobs))
    out.extend(_alert_lines([*jobs, *(status.get("workflows") or [])]))
    return "".join(out)


def _alert_lines(jobs: list[dict[str, Any]]) -> list[str]:
    """One line per late fire, stuck run and stale job (onLate, onStuck, onStale)."""
    lines = []
    for job in jobs:
        alerts = job.get("alerts")
        if not isinstance(alerts, dict):
            continue
        name = _shown(job.get("name"))
        late = alerts.get("late")
        if isinstance(late, dict):
            by = late.get("reportedBy")
            told = f"; reported by {_shown(by)} at {_when(late.get('reportedAt'))}" if by else ""
            lines.append(
                f"{name}: late: the fire at {_when(late.get('fire'))} has not started "
                f"(late since {_when(late.get('lateSince'))}{told})\n"
            )
        for run in alerts.get("stuck") or []:
            if not isinstance(run, dict):
                continue
            task = f" (task {_shown(run['job'])})" if run.get("job") != job.get("name") else ""
            lines.append(
                f"{name}: stuck: run {_shown(run.get('run'))}{task} going "
                f"{_duration(run.get('runningFor'))}, over {_duration(run.get('threshold'))} "
                f"({_shown(run.get('basis'))}); reported at {_when(run.get('reportedAt'))}\n"
            )
        stale = alerts.get("stale")
        if isinstance(stale, dict):
            last = stale.get("lastSuccess")
            success = f"last success {_when(last)}" if last else "no success yet"
            at = stale.get("reportedAt")
            lines.append(
                f"{name}: stale: {success} (stale since {_when(stale.get('staleSince'))}), "
                f"over maxSuccessAge {_duration(stale.get('maxSuccessAge'))}"
                f"{f'; reported at {_when(at)}' if at else ''}\n"
            )
    return ["\n", *lines] if lines else []


def _pause_lines(jobs: list[dict[str, Any]]) -> list[str]:
    """One line per pause holding a job: the repository's and the API's apart."""
    lines = []
    for job in jobs:
        for source, pause in sorted((job.get("pause") or {}).items()):
            if not pause:
                continue
            who = "the repository (suspend)" if source == "config" else _shown(pause.get("by"))
            until = f" until {_when(pause['until'])}" if pause.get("until") else ""
            reason = f": {_shown(pause['reason'])}" if pause.get("reason") else ""
            lines.append(
                f"{_shown(job['name'])}: paused by {who} since {_when(pause.get('since'))}"
                f"{until}{reason}\n"
            )
    return ["\n", *lines] if lines else []


def runs_text(job: str, runs: list[dict[str, Any]], output: bool) -> str:
    if not runs:
        return f"{_shown(job)}: no runs recorded since the daemon started\n"
    rows = [["RUN", "OUTCOME", "EXIT", "STARTED", "DURATION"]]
    for run in runs:
        code = run.get("exitCode")
        rows.append(
            [
                _shown(run["id"]),
                _shown(run.get("outcome", "?")) + (" (manual)" if run.get("manual") else ""),
                "-" if code is None else _shown(code),
                _when(run.get("startedAt")),
                _duration(run.get("duration")),
            ]
        )
    text = _table(rows)
    if output:
        for run in runs:
            for stream in ("stdout", "stderr"):
                captured = run.get(stream)
                if captured:
                    # the output's own lines and tabs stay; every other control is escaped
                    shown = escape(str(captured).rstrip(), block=True)
                    text += f"\n--- {_shown(run['id'])} {stream}\n{shown}\n"
    return text


# ------------------------------------------------------------ commands


def _route(command: str, job: str | None, run: str | None) -> tuple[str, str]:
    segment = quote(job or "", safe="")
    if command == "status":
        return "GET", "/status"
    if command == "reload":
        return "POST", "/reload"
    if command == "start":
        return "POST", f"/jobs/{segment}/start"
    if command == "runs":
        return "GET", f"/jobs/{segment}/runs"
    if command in ("pause", "resume"):
        return "POST", f"/jobs/{segment}/{command}"
    query = f"?{urlencode({'run': run}, quote_via=quote)}" if run is not None else ""
    return "POST", f"/jobs/{segment}/cancel{query}"


PAGE = 10_000
"""Jobs asked for in each later page of ``/status``: the daemon's largest ``?limit=``."""
MAX_PAGES = 1000
"""Pages of ``/status`` the client reads at most (ten million jobs)."""


def _every_page(target: Target, first: dict[str, Any]) -> dict[str, Any]:
    """The status with the jobs of every page (``/status`` answers a page at a time)."""
    jobs = list(first.get("jobs") or [])
    cursor = first.get("nextCursor")
    pages = 1
    while isinstance(cursor, str) and pages < MAX_PAGES:
        query = urlencode({"limit": PAGE, "cursor": cursor}, quote_via=quote)
        answer = target.call("GET", f"/status?{query}")
        page = answer.json()
        if not 200 <= answer.status < 300 or not isinstance(page, dict):
            break  # the pages read so far are shown; the answer said why it stopped
        jobs.extend(page.get("jobs") or [])
        cursor = page.get("nextCursor")
        pages += 1
    return first | {"jobs": jobs, "nextCursor": cursor if isinstance(cursor, str) else None}


def _human(command: str, data: Any, show_output: bool) -> str:
    if command == "status":
        return status_text(data)
    if command == "runs":
        return runs_text(data["job"], data["runs"], show_output)
    if command == "start":
        if data.get("queued") is True:  # its pool is full: it waits in the pool's queue
            return (
                f"started {_shown(data['run'])}, waiting in pool {_shown(data.get('pool'))}"
                f" at place {_shown(data.get('queuePosition'))}\n"
            )
        return f"started {_shown(data['run'])}\n"
    if command == "pause":
        pause = data["pause"]
        until = f" until {_when(pause['until'])}" if pause.get("until") else ""
        kept = "" if data.get("durable") else " (no state section: kept until the daemon stops)"
        return f"paused {_shown(data['job'])}{until}{kept}\n"
    if command == "resume":
        still = data.get("pauses", {}).get("config")
        left = " (still paused by the repository: suspend)" if still else ""
        return f"resumed {_shown(data['job'])}{left}\n"
    if command == "cancel":
        stopped = data.get("cancelled") or []
        if not stopped:
            return f"{_shown(data['job'])}: nothing running\n"
        return "".join(f"cancelling {_shown(run)}\n" for run in stopped)
    return "reload requested\n"


def _say(line: str) -> None:
    """One line on standard error; it quotes the server, so it is escaped whole."""
    print(escape(line), file=sys.stderr)


def _exit_for(status: int) -> int:
    if status in (401, 403):
        return EXIT_UNAUTHORIZED
    if 400 <= status < 500:
        return EXIT_REFUSED
    return EXIT_UNREACHABLE


def cmd_client(
    command: str,
    *,
    url: str | None,
    token_file: str | None,
    as_json: bool,
    timeout: float = DEFAULT_TIMEOUT,
    cafile: str | None = None,
    job: str | None = None,
    run: str | None = None,
    show_output: bool = False,
    body: Any = None,
) -> int:
    prog = f"cronstable {command}"
    try:
        target = target_from(url, token_file, timeout, cafile)
    except ApiError as exc:
        _say(f"{prog}: {exc}")
        return EXIT_USAGE
    method, path = _route(command, job, run)
    try:
        answer = target.call(method, path, body)
    except Unreachable as exc:
        hint = ""
        if target.defaulted:
            hint = " (no daemon on the local socket; give --url or set CRONSTABLE_URL)"
        _say(f"{prog}: {exc}{hint}")
        return EXIT_UNREACHABLE
    except ApiError as exc:
        _say(f"{prog}: {exc}")
        return EXIT_USAGE
    data = answer.json()
    where = redact(target.endpoint.url)
    if command == "status" and 200 <= answer.status < 300 and isinstance(data, dict):
        try:
            data = _every_page(target, data)
        except Unreachable as exc:
            _say(f"{prog}: {exc}")
            return EXIT_UNREACHABLE
        except ApiError as exc:
            _say(f"{prog}: {exc}")
            return EXIT_USAGE
    if 200 <= answer.status < 300 and data is not None:
        if as_json:
            sys.stdout.write(json_text(data))
            return EXIT_DONE
        try:
            shown = _human(command, data, show_output)
        except (KeyError, TypeError, AttributeError, ValueError, IndexError):
            what = f"{method} {path}"
            _say(f"{prog}: {where} answered {answer.status} with JSON that does not answer {what}")
            return EXIT_UNREACHABLE
        sys.stdout.write(shown)
        return EXIT_DONE
    if 200 <= answer.status < 300:
        _say(f"{prog}: {where} answered {answer.status} without JSON")
        return EXIT_UNREACHABLE
    if as_json and data is not None:
        sys.stdout.write(json_text(data))
    message = redact(answer.message())
    if answer.status in (401, 403) and target.token is None:
        message += " (set CRONSTABLE_TOKEN or give --token-file)"
    _say(f"{prog}: {where} answered {answer.status}: {message}")
    return _exit_for(answer.status)
