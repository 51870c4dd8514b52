"""A running daemon as a side of ``cronstable diff``: its applied configuration.

``GET /config`` (scope ``admin``; the token from ``$CRONSTABLE_TOKEN``) gives
every job in canonical form with its digest, and the ``web`` and ``logging``
sections, secrets and environment values as ``sha256:<hex>``.
:func:`state_from_published` turns that answer back into a
:class:`~cronstable.config.DesiredState` the plan compares like any other.

A repository compared with a daemon goes through the same form first
(:func:`republish`): its secrets and environment values become the same
digests, so an unchanged secret compares equal and a changed one shows as a
changed digest, never as its text.  Job digests are the daemon's own, computed
over the real values, so they compare exactly.

The answer is the server's choice: a job must be filed under its own name,
and the strings that no model checks and that commands print as they are
(the job-set id, the revision) are escaped here, with
:func:`cronstable.cli.untrusted.escape`; what the diff renders is escaped
again when it is printed (:mod:`cronstable.cli.diff`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronstable.cli.side import Side, SideError
from cronstable.cli.untrusted import escape
from cronstable.config import DesiredState, Limits
from cronstable.redact import redact

if TYPE_CHECKING:
    from cronstable.reconcile.effects import DaemonFacts, JobFacts


def is_daemon_url(text: str) -> bool:
    """unix:///…, or http(s)://… not ending in ``.git`` (that one is a mistyped git remote,
    left to the source specs' hint: ``git+https://…``)."""
    if text.startswith("unix://"):
        return True
    if not text.startswith(("http://", "https://")):
        return False
    from urllib.parse import urlsplit

    return not urlsplit(text).path.rstrip("/").endswith(".git")


_GIT_HINT = " (a git repository is git+https://…)"


def _fail(label: str, message: str) -> SideError:
    return SideError(escape(f"{label}: {redact(message)}"))


def state_from_published(data: Any, label: str) -> DesiredState:
    """A DesiredState from ``GET /config``'s answer; SideError when it is not one."""
    from pydantic import ValidationError

    from cronstable.config.desired import Job, Pool
    from cronstable.config.loader import job_zone
    from cronstable.config.models import JobConfig, LoggingConfig, PoolConfig, WebConfig
    from cronstable.schedule import ScheduleError, parse_schedule

    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        raise _fail(label, "the answer to GET /config is not a configuration")
    jobs: dict[str, Job] = {}
    try:
        for name, entry in data["jobs"].items():
            canonical = dict(entry["config"])
            environment = canonical.pop("environment", None) or {}
            config = JobConfig.model_validate(canonical)
            if config.name != name:
                raise ValueError(f"the job filed as {name!r} is named {config.name!r}")
            schedule = parse_schedule(canonical["schedule"], name)
            jobs[name] = Job(
                config=config,
                schedule=schedule,
                timezone=job_zone(config, schedule.zone),
                environment={str(k): str(v) for k, v in environment.items()},
                file="",
                line=0,
                digest=str(entry["digest"]),
            )
        workflows = _published_workflows(data.get("workflows") or {})
        pools: dict[str, Pool] = {}
        for name, entry in (data.get("pools") or {}).items():  # none from an older daemon
            pool = PoolConfig.model_validate(entry["config"])
            if pool.name != name:
                raise ValueError(f"the pool filed as {name!r} is named {pool.name!r}")
            pools[name] = Pool(config=pool, file="", line=0, digest=str(entry["digest"]))
        sections = data.get("sections") or {}
        web = sections.get("web")
        logging = sections.get("logging")
        return DesiredState(
            jobs=jobs,
            workflows=workflows,
            web=None if web is None else WebConfig.model_validate(web),
            logging=None if logging is None else LoggingConfig.model_validate(logging),
            job_set_id=escape(str(data["jobSetId"])),
            files=(),
            pools=pools,
        )
    except (KeyError, TypeError, AttributeError, ValueError, ScheduleError) as exc:
        reason = f"{exc.error_count()} invalid values" if isinstance(exc, ValidationError) else exc
        raise _fail(label, f"GET /config gave an unexpected configuration ({reason})") from exc


def _published_workflows(data: Any) -> dict[str, Any]:
    """The workflows of ``GET /config``'s answer (raises as state_from_published catches)."""
    from cronstable.config.desired import Job, Workflow, workflow_job
    from cronstable.config.loader import job_zone
    from cronstable.config.models import TaskConfig, WorkflowSettings
    from cronstable.schedule import parse_schedule
    from cronstable.workflows.dag import Dag

    workflows: dict[str, Workflow] = {}
    for name, entry in dict(data).items():
        canonical = dict(entry["config"])
        published_tasks = canonical.pop("tasks")
        settings = WorkflowSettings.model_validate(canonical)
        if settings.name != name:
            raise ValueError(f"the workflow filed as {name!r} is named {settings.name!r}")
        schedule = parse_schedule(canonical["schedule"], name)
        zone = job_zone(settings, schedule.zone)
        tasks: dict[str, Job] = {}
        for task in published_tasks:
            own = dict(task["config"])
            environment = own.pop("environment", None) or {}
            config = TaskConfig.model_validate(own)
            tasks[config.name] = Job(
                config=config.model_copy(update={"name": f"{name}.{config.name}"}),
                schedule=schedule,
                timezone=zone,
                environment={str(k): str(v) for k, v in environment.items()},
                file="",
                line=0,
                digest=str(task["digest"]),
                workflow=name,
            )
        dag = Dag.of(
            {
                t: list(job.config.depends_on)
                for t, job in tasks.items()
                if isinstance(job.config, TaskConfig)
            },
            {
                t: job.config.run_when
                for t, job in tasks.items()
                if isinstance(job.config, TaskConfig)
            },
        )
        digest = str(entry["digest"])
        workflows[name] = Workflow(
            config=settings,
            schedule=schedule,
            timezone=zone,
            tasks=tasks,
            dag=dag,
            file="",
            line=0,
            digest=digest,
            job=workflow_job(settings, schedule, zone, dag, digest=digest),
        )
    return workflows


def republish(state: DesiredState) -> DesiredState:
    """``state`` as a daemon would publish it: secrets and environment as digests."""
    from cronstable.published import published_config

    return state_from_published(published_config(state), "published")


def open_daemon(text: str, limits: Limits) -> Side:
    """The applied configuration of the daemon at ``text`` (read now, once)."""
    from cronstable.cli.api_client import ApiError, Endpoint, call
    from cronstable.cli.client import read_token

    label = redact(text)
    try:
        answer = call(Endpoint.parse(text), "GET", "/config", token=read_token(None))
    except ApiError as exc:
        hint = _GIT_HINT if text.startswith("http") else ""
        raise SideError(escape(f"{exc}{hint}")) from exc
    if answer.status != 200:
        hint = ""
        if answer.status in (401, 403):
            hint = " (GET /config needs a token with scope 'admin' in CRONSTABLE_TOKEN)"
        elif answer.status == 404:
            hint = _GIT_HINT
        raise _fail(label, f"GET /config answered {answer.status}: {answer.message()}{hint}")
    data = answer.json()
    state = state_from_published(data, label)
    revision = data.get("revision")
    return Side(
        label,
        escape(str(revision)) if revision else None,
        lambda: state,
        published=True,
        facts=lambda: read_facts(text),
    )


def read_facts(text: str) -> DaemonFacts:
    """What the daemon at ``text`` knows now (``GET /status``, scope ``read``)."""
    from cronstable.cli.api_client import ApiError, Endpoint, call
    from cronstable.cli.client import read_token

    label = redact(text)
    try:
        answer = call(Endpoint.parse(text), "GET", "/status", token=read_token(None))
    except ApiError as exc:
        raise SideError(escape(str(exc))) from exc
    if answer.status != 200:
        raise _fail(label, f"GET /status answered {answer.status}: {answer.message()}")
    return facts_from_status(answer.json(), label)


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _job_facts(entry: Any) -> JobFacts | None:
    from cronstable.reconcile.effects import JobFacts, LastRun

    if not isinstance(entry, dict):
        return None
    last = entry.get("lastRun")
    last_run = None
    if isinstance(last, dict):
        scheduled, started = _moment(last.get("scheduledTime")), _moment(last.get("startedAt"))
        if scheduled is not None and started is not None:
            last_run = LastRun(scheduled, started, escape(str(last.get("outcome", "?"))))
    pause = entry.get("pause")
    api = pause.get("api") if isinstance(pause, dict) else None
    running = entry.get("running")
    return JobFacts(
        next_fire=_moment(entry.get("nextFire")),
        last_run=last_run,
        running=len(running) if isinstance(running, list) else 0,
        retry_pending=entry.get("retryPending") is True,
        api_paused=isinstance(api, dict),
        api_pause_until=_moment(api.get("until")) if isinstance(api, dict) else None,
        api_pause_reason=escape(str(api["reason"]))
        if isinstance(api, dict) and isinstance(api.get("reason"), str)
        else None,
    )


def facts_from_status(data: Any, label: str) -> DaemonFacts:
    """A daemon's knowledge from its ``GET /status`` answer (entries it cannot read are
    left out: they are the server's word, and only inform the diff)."""
    from cronstable.reconcile.effects import DaemonFacts, PoolFacts

    if not isinstance(data, dict):
        raise _fail(label, "the answer to GET /status is not a status")

    def named(key: str) -> dict[str, JobFacts]:
        out: dict[str, JobFacts] = {}
        entries = data.get(key)
        for entry in entries if isinstance(entries, list) else ():
            facts = _job_facts(entry)
            if facts is not None and isinstance(entry.get("name"), str):
                out[entry["name"]] = facts
        return out

    pools: dict[str, PoolFacts] = {}
    entries = data.get("pools")
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        values = [entry.get(k) for k in ("slots", "inUse", "queued")]
        counts = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if len(counts) == len(values):
            pools[entry["name"]] = PoolFacts(*counts)
    return DaemonFacts(label, named("jobs"), named("workflows"), pools)
