"""The HTTP API's route table: what each route is, not how it is served.

A leaf both sides read: :mod:`cronstable.web.app` serves every route of
:data:`ROUTES` (the method names the handler of its ``Api``), and
:mod:`cronstable.web.openapi` documents the same table, so the document cannot
list a route the daemon does not answer, nor miss one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    scope: str | None
    """None: no token needed."""
    summary: str
    handler: str
    responses: tuple[int, ...] = (200,)
    page: bool = False
    """A static page (no data in it): no token needed, but with no token configured only
    the peers the read routes would answer get it."""
    signed: bool = False
    """Authenticated by a signature over its body, which it reads itself: the Host rule
    does not apply (its callers reach the daemon by a public name)."""


STATUS_PAGE = 1000
"""Jobs in a ``/status`` answer without ``?limit=`` (the rest are a cursor away)."""
STATUS_PAGE_MAX = 10_000
"""The largest ``?limit=`` of ``/status``: every answer stays a bounded size."""

ROUTES: tuple[Route, ...] = (
    Route("GET", "/version", None, "The daemon's version.", "version"),
    Route("GET", "/healthz", None, "The process is up.", "healthz"),
    Route("GET", "/readyz", None, "A revision is applied (503 with the reason if not).",
          "readyz", (200, 503)),
    Route("GET", "/status", "read",
          "Applied and last rejected revisions, and the jobs a page at a time (?limit=, "
          "?cursor=).", "status", (200, 400)),
    Route("GET", "/config", "admin",
          "The applied configuration in canonical form, secrets as sha256 digests.",
          "config", (200, 404)),
    Route("POST", "/reload", "reload", "Ask the source to look for a new revision now.",
          "reload", (202,)),
    Route("GET", "/audit", "read",
          "The audit trail: each revision applied or rejected, newest first, with what "
          "triggered it (?limit=100&cursor=).", "audit", (200, 400)),
    Route("GET", "/metrics", "read", "Prometheus metrics.", "metrics"),
    Route("POST", "/jobs/{name}/start", "trigger",
          "Start the job now (also when disabled; a job with a pool may wait in its queue: "
          "queuePosition); 409 when concurrencyPolicy refuses.",
          "start", (202, 404, 409)),
    Route("POST", "/jobs/{name}/pause", "trigger",
          "Pause the job: its fires are skipped until it is resumed or {until}; body "
          "{reason, until?}. Kept in the state store, apart from the repository's suspend.",
          "pause", (200, 400, 404, 503)),
    Route("POST", "/jobs/{name}/resume", "trigger",
          "Lift the job's API pause (not the repository's suspend); 409 when it has none.",
          "resume", (200, 404, 409, 503)),
    Route("POST", "/jobs/{name}/backfill", "trigger",
          "Run every fire of the job's schedule in [from, to), one after another; body "
          "{from, to, dryRun?, max?, ignorePause?}; dryRun lists them.", "backfill",
          (200, 202, 400, 404, 409)),
    Route("GET", "/jobs/{name}/backfill", "read",
          "The job's backfill going (or its last): fires, progress, outcomes.",
          "backfill_progress", (200, 404)),
    Route("POST", "/jobs/{name}/cancel", "trigger",
          "Stop the job's running runs (only ?run=ID when given).", "cancel", (200, 404)),
    Route("GET", "/jobs/{name}/runs", "read",
          "Running runs, then the last finished ones with captured output.", "runs",
          (200, 404)),
    Route("GET", "/openapi.json", "read", "This API as an OpenAPI 3.1 document.", "openapi"),
    Route("GET", "/jobs/{name}/next", "read",
          "The job's fires in the next ?hours=24 (at most 500, else bands).", "next_fires",
          (200, 400, 404)),
    Route("GET", "/events", "read",
          "Live events (server-sent): runs started and ended, revisions applied and rejected.",
          "events", (200, 429)),
    Route("GET", "/", None, "The dashboard: one static HTML page that reads the API.",
          "dashboard", page=True),
    Route("POST", "/webhooks/github", None,
          "A GitHub push (signed with the webhook secret) makes the source fetch now.",
          "github", (200, 202, 400, 401, 404, 408, 413, 415, 503), signed=True),
    Route("GET", "/cluster", "read",
          "Members, leader, lease and this node's role ({enabled: false} without election).",
          "cluster"),
    Route("GET", "/workflows", "read",
          "Every workflow: its tasks, its runs going and its last run with each task's state.",
          "workflows"),
    Route("GET", "/workflows/{name}/runs", "read",
          "The workflow's runs going, then its last finished ones, with each task's state.",
          "workflow_runs", (200, 404)),
    Route("POST", "/workflows/{name}/start", "trigger",
          "Start a run of the workflow now (also when disabled); 409 when concurrencyPolicy "
          "refuses.", "start_workflow", (202, 404, 409)),
    Route("POST", "/workflows/{name}/pause", "trigger",
          "Pause the workflow: its fires start no run until it is resumed or {until}; body "
          "{reason, until?}. Kept in the state store, apart from the repository's suspend.",
          "pause_workflow", (200, 400, 404, 503)),
    Route("POST", "/workflows/{name}/resume", "trigger",
          "Lift the workflow's API pause (not the repository's suspend); 409 when it has none.",
          "resume_workflow", (200, 404, 409, 503)),
    Route("POST", "/workflows/{name}/runs/{id}/cancel", "trigger",
          "Cancel the workflow run: its pending tasks are cancelled, its running ones stopped.",
          "cancel_workflow", (200, 404)),
    Route("GET", "/pools", "read",
          "Every pool: slots, slots in use, the queue in admission order, the oldest wait.",
          "pools"),
    Route("GET", "/fleet", "read",
          "Every member (revision, job-set id, leader, last seen) and a page of jobs "
          "(?after=NAME&limit=100): where each last ran, its next fire, which node runs it.",
          "fleet", (200, 400)),
)  # fmt: skip


def aiohttp_path(path: str) -> str:
    """A route path as aiohttp matches it (a job or workflow name, and a run id, is one
    percent-encoded segment)."""
    return path.replace("{name}", "{name:.+}").replace("{id}", "{id:[^/]+}")
