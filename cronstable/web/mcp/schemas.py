"""The MCP tools as data: name, scope, arguments and the JSON Schema of their results.

Each tool's result is the JSON of an HTTP route (:mod:`cronstable.web.calls`), so its
output schema describes what :mod:`cronstable.web.encode` writes; an MCP client checks
every result against it.  The input schema is built from the same :class:`Param` list
the arguments are checked with (:func:`cronstable.web.mcp.tools.arguments`), so the two
cannot disagree.  Nothing here imports the MCP SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cronstable.web.calls import (
    DEFAULT_HOURS,
    JOBS_MAX_PAGE,
    JOBS_PAGE,
    MAX_CURSOR_LENGTH,
    MAX_HOURS,
    MAX_REF_LENGTH,
)

Json = dict[str, Any]

_STRING: Json = {"type": "string"}
_TEXT: Json = {"type": ["string", "null"]}
_INT: Json = {"type": ["integer", "null"]}
_NUMBER: Json = {"type": ["number", "null"]}
_BOOL: Json = {"type": "boolean"}
_STRINGS: Json = {"type": "array", "items": _STRING}


def _object(required: dict[str, Json], optional: dict[str, Json] | None = None) -> Json:
    return {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
    }


def _nullable(schema: Json) -> Json:
    return {**schema, "type": [schema["type"], "null"]}


RUN_START = _object(
    {
        "id": _STRING,
        "job": _STRING,
        "scheduledTime": _STRING,
        "attempt": {"type": "integer"},
        "startedAt": _STRING,
        "pid": _INT,
        "manual": _BOOL,
    }
)
RUN = _object(
    {**RUN_START["properties"], "outcome": _STRING},
    {
        "exitCode": _INT,
        "finishedAt": _STRING,
        "duration": {"type": "number"},
        "failReason": _TEXT,
        "stdout": _TEXT,
        "stderr": _TEXT,
        "stdoutDropped": {"type": "integer"},
        "stderrDropped": {"type": "integer"},
        "cpuSeconds": _NUMBER,
        "maxRss": _INT,
    },
)
"""A run of ``GET /jobs/{name}/runs``: ``outcome`` is ``running`` until it ends."""
LAST_RUN = _nullable(
    _object(
        {
            "id": _STRING,
            "outcome": _STRING,
            "exitCode": _INT,
            "duration": {"type": "number"},
            "finishedAt": _STRING,
            "cpuSeconds": _NUMBER,
            "maxRss": _INT,
        }
    )
)
JOB = _object(
    {
        "name": _STRING,
        "schedule": _STRING,
        "timezone": _STRING,
        "enabled": _BOOL,
        "nextFire": _TEXT,
        "running": {"type": "array", "items": RUN_START},
        "lastRun": LAST_RUN,
        "retryPending": _BOOL,
    }
)
"""A job as ``GET /status`` lists it."""
REVISION = _nullable(
    _object(
        {"revision": _STRING, "source": _STRING, "time": _STRING, "jobSetId": _TEXT},
        {"errors": _STRINGS},
    )
)
"""An applied revision, or a rejected one with ``errors``."""
BANDS = {
    "type": ["array", "null"],
    "items": _object({"start": _STRING, "end": _STRING, "count": {"type": "integer"}}),
}


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: Literal["string", "number"]
    description: str
    required: bool = True
    default: float | None = None
    minimum_above: float | None = None
    """An exclusive minimum (numbers)."""
    maximum: float | None = None
    """The largest number, or the longest string."""

    def schema(self) -> Json:
        schema: Json = {"type": self.kind, "description": self.description}
        if self.default is not None:
            schema["default"] = self.default
        if self.minimum_above is not None:
            schema["exclusiveMinimum"] = self.minimum_above
        if self.maximum is not None:
            schema["maximum" if self.kind == "number" else "maxLength"] = self.maximum
        if self.kind == "string" and self.required:
            schema["minLength"] = 1
        return schema


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    scope: Literal["read", "trigger", "reload"]
    """The token scope a caller needs (as the HTTP route that answers the same)."""
    title: str
    description: str
    output: Json
    params: tuple[Param, ...] = ()
    read_only: bool = True
    destructive: bool = False

    def input_schema(self) -> Json:
        return {
            "type": "object",
            "properties": {p.name: p.schema() for p in self.params},
            "required": [p.name for p in self.params if p.required],
            "additionalProperties": False,
        }


_JOB = Param("job", "string", "The job's name, as the configuration writes it.")

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_jobs",
        "read",
        "List jobs",
        "The jobs of the applied revision a page at a time, in configuration order: "
        "schedule, time zone, next fire, the runs going and how the last one ended "
        "(GET /status?limit=&cursor=). jobCount is the number of jobs; pass nextCursor "
        "back as cursor for the next page (null after the last).",
        _object(
            {
                "jobs": {"type": "array", "items": JOB},
                "jobCount": {"type": "integer"},
                "nextCursor": _TEXT,
            }
        ),
        (
            Param(
                "limit",
                "number",
                f"Jobs in the page, a whole number (default {JOBS_PAGE}, at most {JOBS_MAX_PAGE}).",
                required=False,
                default=JOBS_PAGE,
                minimum_above=0,
                maximum=JOBS_MAX_PAGE,
            ),
            Param(
                "cursor",
                "string",
                "Where the page starts: the nextCursor of the page before (omit for the first).",
                required=False,
                maximum=MAX_CURSOR_LENGTH,
            ),
        ),
    ),
    ToolSpec(
        "job_status",
        "read",
        "Job status",
        "One job as GET /status lists it: next fire, runs going, the last run, a retry due.",
        JOB,
        (_JOB,),
    ),
    ToolSpec(
        "job_runs",
        "read",
        "Job runs",
        "The job's running runs, then its last finished ones, newest first, each with its "
        "outcome, exit code and captured stdout and stderr (GET /jobs/{name}/runs).",
        _object({"job": _STRING, "runs": {"type": "array", "items": RUN}}),
        (_JOB,),
    ),
    ToolSpec(
        "next_fires",
        "read",
        "Next fires",
        "When the job fires in the coming hours: each time (UTC), or bands of fires when "
        "there are more than 500 (GET /jobs/{name}/next).",
        _object(
            {
                "job": _STRING,
                "enabled": _BOOL,
                "from": _STRING,
                "until": _STRING,
                "complete": _BOOL,
                "fires": {"type": ["array", "null"], "items": _STRING},
                "bands": BANDS,
            }
        ),
        (
            _JOB,
            Param(
                "hours",
                "number",
                f"The window's length in hours (default {DEFAULT_HOURS:g}, at most {MAX_HOURS}).",
                required=False,
                default=DEFAULT_HOURS,
                minimum_above=0,
                maximum=MAX_HOURS,
            ),
        ),
    ),
    ToolSpec(
        "explain_rejection",
        "read",
        "Explain the last rejection",
        "The revision running, and the last revision rejected since with every error it "
        "had: file, line, key and what is wrong (null when none was rejected since).",
        _object({"applied": REVISION, "lastRejected": REVISION}),
    ),
    ToolSpec(
        "diff_revision",
        "read",
        "Diff a revision",
        "What applying another revision of the configuration's git repository (a branch, "
        "a tag or a commit, ~N and ^N allowed) would change in the running daemon: jobs "
        "added, removed and changed field by field, sections changed, or the errors it "
        "would be rejected with. Nothing is applied.",
        _object(
            {
                "ref": _STRING,
                "revision": _TEXT,
                "source": _TEXT,
                "loads": _BOOL,
                "errors": _STRINGS,
                "plan": {"type": ["object", "null"]},
            }
        ),
        (
            Param(
                "ref",
                "string",
                "A branch, tag or commit of the repository the daemon follows "
                "(HEAD: the ref it follows).",
                maximum=MAX_REF_LENGTH,
            ),
        ),
    ),
    ToolSpec(
        "start_job",
        "trigger",
        "Start a job",
        "Start the job now, also when it is disabled; refused when its concurrencyPolicy "
        "or its cluster slot says no (POST /jobs/{name}/start). Returns the run's id.",
        _object({"job": _STRING, "run": _STRING}),
        (_JOB,),
        read_only=False,
    ),
    ToolSpec(
        "cancel_run",
        "trigger",
        "Cancel runs",
        "Stop the job's running runs, or only the one with the given run id "
        "(POST /jobs/{name}/cancel). Returns the ids stopped.",
        _object({"job": _STRING, "cancelled": _STRINGS}),
        (
            _JOB,
            Param("run", "string", "Only this run (an id job_runs lists).", required=False),
        ),
        read_only=False,
        destructive=True,
    ),
    ToolSpec(
        "reload",
        "reload",
        "Reload",
        "Ask the configuration source to look for a new revision now (POST /reload); "
        "explain_rejection tells whether it was applied.",
        _object({"reload": _STRING}),
        read_only=False,
    ),
)

BY_NAME: dict[str, ToolSpec] = {tool.name: tool for tool in TOOLS}
