"""``GET /jobs/{name}/next?hours=24``: a job's coming fires, listed or as bands."""

from __future__ import annotations

import math

from aiohttp import web

from cronstable.web import encode
from cronstable.web.answers import no_such_job
from cronstable.web.view import DaemonApi

DEFAULT_HOURS = 24.0
MAX_HOURS = 24 * 7


async def next_fires(daemon: DaemonApi, request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    text = request.query.get("hours", str(DEFAULT_HOURS))
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not 0 < hours <= MAX_HOURS:  # also false for nan
        return web.json_response(
            {"error": f"hours must be a number above 0 and at most {MAX_HOURS}"},
            status=400,
        )
    try:
        return web.json_response(encode.job_forecast(daemon.next_fires(name, hours)))
    except KeyError:
        return no_such_job(name)
