"""``POST /jobs/{name}/pause`` and ``POST /jobs/{name}/resume`` (and the same under
``/workflows/{name}``), in the style of :mod:`cronstable.web.calls`: each function
returns the answer's JSON or raises :class:`~cronstable.web.calls.Refused`.

A pause's body is JSON: ``{"reason": TEXT, "until": TIME}``, ``reason`` required (at
most :data:`MAX_REASON` characters), ``until`` optional (ISO 8601 with an offset or
``Z``, in the future).  Who paused is the name of the token the request carried.  A
resume has no body; it lifts the API pause only, never the repository's ``suspend``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from cronstable.ports import PauseRefused
from cronstable.web import encode
from cronstable.web.calls import Json, Refused, no_such_job, no_such_workflow, shown
from cronstable.web.view import DaemonApi

MAX_REASON = 1000
"""Longest reason a pause takes (characters)."""


def json_object(body: bytes) -> dict[str, Any]:
    """A request body as a JSON object (empty: ``{}``); Refused (400) otherwise."""
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise Refused(400, "the body must be a JSON object")
    return data


def moment(value: object, field: str) -> datetime:
    """An ISO 8601 time with an offset, from a request; Refused (400) otherwise."""
    if not isinstance(value, str):
        raise Refused(
            400, f"{field} must be a time (ISO 8601 with an offset, like 2026-05-01T09:00Z)"
        )
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
    except ValueError:
        raise Refused(400, f"{field} is not an ISO 8601 time: {shown(text)}") from None
    if parsed.utcoffset() is None:
        raise Refused(400, f"{field} has no offset: add one (+02:00) or Z for UTC")
    return parsed


def pause_request(body: bytes) -> tuple[str, datetime | None]:
    """(reason, until) of a pause's body; Refused (400)."""
    data = json_object(body)
    unknown = sorted(set(data) - {"reason", "until"})
    if unknown:
        raise Refused(400, f"unknown field {shown(unknown[0])}: a pause takes reason and until")
    reason = data.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise Refused(400, "a pause needs a reason (a non-empty text)")
    if len(reason) > MAX_REASON:
        raise Refused(400, f"the reason is longer than {MAX_REASON} characters")
    until = data.get("until")
    return reason.strip(), None if until is None else moment(until, "until")


def _known(daemon: DaemonApi, name: str, workflow: bool) -> Refused | None:
    """The 404 for a name that is no job (or no workflow); None when it is one."""
    if workflow:
        return None if daemon.has_workflow(name) else no_such_workflow(name)
    return None if daemon.has_job(name) else no_such_job(name)


async def pause(
    daemon: DaemonApi, name: str, body: bytes, by: str | None, *, workflow: bool = False
) -> Json:
    """``POST /jobs/{name}/pause`` (``workflow``: ``POST /workflows/{name}/pause``);
    ``by``: the name of the token that asks."""
    what = "workflow" if workflow else "job"
    unknown = _known(daemon, name, workflow)
    if unknown is not None:
        raise unknown
    reason, until = pause_request(body)
    try:
        held, durable, pauses = await daemon.pause(
            name, reason=reason, by=by, until=until, workflow=workflow
        )
    except KeyError:
        raise no_such_workflow(name) if workflow else no_such_job(name) from None
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    except PauseRefused as exc:
        raise Refused(503, f"{what} {name!r} not paused: {exc}", **{what: name}) from None
    return {
        what: name,
        "pause": encode.pause(held),
        "durable": durable,
        "pauses": encode.job_pauses(pauses),
    }


async def resume(daemon: DaemonApi, name: str, by: str | None, *, workflow: bool = False) -> Json:
    """``POST /jobs/{name}/resume`` (``workflow``: ``POST /workflows/{name}/resume``);
    ``by``: the name of the token that asks."""
    what = "workflow" if workflow else "job"
    unknown = _known(daemon, name, workflow)
    if unknown is not None:
        raise unknown
    try:
        lifted, pauses = await daemon.resume(name, by=by, workflow=workflow)
    except KeyError:
        raise no_such_workflow(name) if workflow else no_such_job(name) from None
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    except PauseRefused as exc:
        raise Refused(503, f"{what} {name!r} not resumed: {exc}", **{what: name}) from None
    if lifted is None:
        why = (
            "; the repository pauses it (suspend): remove that in a commit"
            if pauses.config is not None
            else ""
        )
        raise Refused(
            409, f"{what} {name!r} has no pause asked through the API{why}", **{what: name}
        )
    return {what: name, "resumed": encode.pause(lifted), "pauses": encode.job_pauses(pauses)}
