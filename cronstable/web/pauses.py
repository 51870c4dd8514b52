"""``POST /jobs/{name}/pause`` and ``POST /jobs/{name}/resume``, in the style of
:mod:`cronstable.web.calls`: each function returns the answer's JSON or raises
:class:`~cronstable.web.calls.Refused`.

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
from cronstable.web.calls import Json, Refused, no_such_job, shown
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


async def pause(daemon: DaemonApi, name: str, body: bytes, by: str | None) -> Json:
    """``POST /jobs/{name}/pause``; ``by``: the name of the token that asks."""
    if not daemon.has_job(name):
        raise no_such_job(name)
    reason, until = pause_request(body)
    try:
        held, durable, pauses = await daemon.pause(name, reason=reason, by=by, until=until)
    except KeyError:
        raise no_such_job(name) from None
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    except PauseRefused as exc:
        raise Refused(503, f"job {name!r} not paused: {exc}", job=name) from None
    return {
        "job": name,
        "pause": encode.pause(held),
        "durable": durable,
        "pauses": encode.job_pauses(pauses),
    }


async def resume(daemon: DaemonApi, name: str, by: str | None) -> Json:
    """``POST /jobs/{name}/resume``; ``by``: the name of the token that asks."""
    if not daemon.has_job(name):
        raise no_such_job(name)
    try:
        lifted, pauses = await daemon.resume(name, by=by)
    except KeyError:
        raise no_such_job(name) from None
    except PauseRefused as exc:
        raise Refused(503, f"job {name!r} not resumed: {exc}", job=name) from None
    if lifted is None:
        why = (
            "; the repository pauses it (suspend): remove that in a commit"
            if pauses.config is not None
            else ""
        )
        raise Refused(409, f"job {name!r} has no pause asked through the API{why}", job=name)
    return {"job": name, "resumed": encode.pause(lifted), "pauses": encode.job_pauses(pauses)}
