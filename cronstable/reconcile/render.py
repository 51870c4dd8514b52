"""A Plan as text (colour on a terminal), JSON, or Markdown for a pull-request comment."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cronstable.config.desired import Job, Pool, Workflow
from cronstable.config.models import JobConfig, WorkflowSettings
from cronstable.reconcile.plan import FieldChange, JobChange, Plan, PoolChange, WorkflowChange
from cronstable.schedule import uses_h

FIRES_SHOWN = 3


def next_fires(job: Job | Workflow | None, at: datetime, count: int = FIRES_SHOWN) -> list[str]:
    """A job's or a workflow's next fires (a task fires only with its workflow)."""
    if job is None:
        return []
    if not job.config.enabled:
        return ["(disabled)"]
    if job.schedule.is_reboot:
        return ["@reboot"]
    return [t.isoformat() for t in job.schedule.fires(at, job.timezone, count)]


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _schedule_line(change: JobChange) -> str:
    """The schedule as written (a mapping schedule shows in its canonical text); one
    with Jenkins' H items shows what they resolve to for this job's name."""
    job = change.new or change.old
    assert job is not None
    return schedule_shown(job)


def schedule_shown(job: Job | Workflow) -> str:
    """``H H * * *`` → ``H H * * * (resolved: 0 17 4 * * * *)``; other schedules as written."""
    config = job.config
    written = config.schedule if isinstance(config, JobConfig | WorkflowSettings) else None
    if not isinstance(written, str):
        return job.schedule.text
    if uses_h(written):
        return f"{written} (resolved: {job.schedule.text})"
    return written


def pool_line(pool: Pool) -> str:
    """``4 slots, scope node``."""
    return f"{pool.slots} slot{'' if pool.slots == 1 else 's'}, scope {pool.scope}"


def _pool_shown(change: PoolChange) -> str:
    pool = change.new or change.old
    assert pool is not None
    return pool_line(pool)


# ------------------------------------------------------------------------ JSON


def _field_json(f: FieldChange) -> dict[str, Any]:
    return {"path": f.path, "old": f.old, "new": f.new}


def _pool_json(change: PoolChange) -> dict[str, Any]:
    pool = change.new or change.old
    assert pool is not None
    return {
        "name": change.name,
        "change": change.kind,
        "slots": pool.slots,
        "scope": pool.scope,
        "fields": [_field_json(f) for f in change.fields],
    }


def to_json(plan: Plan, at: datetime) -> str:
    return json.dumps(plan_data(plan, at), indent=2, ensure_ascii=False) + "\n"


def plan_data(plan: Plan, at: datetime) -> dict[str, Any]:
    """The plan as ``diff --format json`` prints it (and the daemon's ``diff_revision``)."""
    jobs = []
    for change in plan.jobs:
        entry: dict[str, Any] = {"name": change.name, "change": change.kind}
        if change.kind == "changed":
            entry["fields"] = [_field_json(f) for f in change.fields]
            if change.schedule_changed:
                entry["nextFires"] = {
                    "before": next_fires(change.old, at),
                    "after": next_fires(change.new, at),
                }
        elif change.kind == "added":
            entry["schedule"] = _schedule_line(change)
            entry["nextFires"] = {"after": next_fires(change.new, at)}
        else:
            entry["schedule"] = _schedule_line(change)
        jobs.append(entry)
    body: dict[str, Any] = {
        "changed": not plan.empty,
        "from": {"revision": plan.old_revision, "jobSetId": plan.old_job_set_id},
        "to": {"revision": plan.new_revision, "jobSetId": plan.new_job_set_id},
        "summary": plan.summary(),
        "jobs": jobs,
        "pools": [_pool_json(change) for change in plan.pools],
        "sections": [
            {
                "section": s.section,
                "old": s.old,
                "new": s.new,
                "fields": [_field_json(f) for f in s.fields],
            }
            for s in plan.sections
        ],
        "at": at.isoformat(),
    }
    if plan.has_workflows:
        body["workflows"] = [_workflow_json(change, at) for change in plan.workflows]
    return body


def _workflow_json(change: WorkflowChange, at: datetime) -> dict[str, Any]:
    flow = change.new or change.old
    assert flow is not None
    entry: dict[str, Any] = {
        "name": change.name,
        "change": change.kind,
        "schedule": schedule_shown(flow),
    }
    if change.kind == "changed":
        entry["fields"] = [_field_json(f) for f in change.fields]
        if change.schedule_changed:
            entry["nextFires"] = {
                "before": next_fires(change.old, at),
                "after": next_fires(change.new, at),
            }
    elif change.kind == "added":
        entry["nextFires"] = {"after": next_fires(change.new, at)}
    entry["tasks"] = [
        {"name": task.name, "change": task.kind}
        | ({"fields": [_field_json(f) for f in task.fields]} if task.kind == "changed" else {})
        for task in change.tasks
    ]
    return entry


# ------------------------------------------------------------------------ text

_COLOURS = {"added": "\033[32m", "removed": "\033[31m", "changed": "\033[33m", "dim": "\033[2m"}
_RESET = "\033[0m"
_SIGN = {"added": "+", "removed": "-", "changed": "~"}


def _headline(plan: Plan) -> str:
    s = plan.summary()
    parts = [f"{s['added']} added", f"{s['removed']} removed", f"{s['changed']} changed"]
    line = f"jobs: {', '.join(parts)}, {s['unchanged']} unchanged"
    flows = s.get("workflows")
    if flows is not None:
        line += (
            f"; workflows: {flows['added']} added, {flows['removed']} removed, "
            f"{flows['changed']} changed, {flows['unchanged']} unchanged"
        )
    if s["sections"]:
        line += f"; sections changed: {', '.join(s['sections'])}"
    return line


def to_text(plan: Plan, at: datetime, *, colour: bool = False) -> str:
    def paint(kind: str, text: str) -> str:
        return f"{_COLOURS[kind]}{text}{_RESET}" if colour else text

    lines: list[str] = []
    if plan.empty:
        return f"No changes ({_headline(plan)}).\n"
    lines.append(_headline(plan))
    for change in plan.jobs:
        sign = _SIGN[change.kind]
        lines.append(paint(change.kind, f"{sign} job {change.name} ({_schedule_line(change)})"))
        if change.kind == "added":
            lines.append(paint("dim", f"    next: {', '.join(next_fires(change.new, at))}"))
        for f in change.fields:
            lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
        if change.schedule_changed:
            lines.append(paint("dim", f"    next before: {', '.join(next_fires(change.old, at))}"))
            lines.append(paint("dim", f"    next after:  {', '.join(next_fires(change.new, at))}"))
    for flow in plan.workflows:
        lines.extend(_workflow_text(flow, at, paint))
    for pool in plan.pools:
        lines.append(paint(pool.kind, f"{_SIGN[pool.kind]} pool {pool.name} ({_pool_shown(pool)})"))
        for f in pool.fields:
            lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
    for section in plan.sections:
        if section.old is None or section.new is None:
            verb = "added" if section.old is None else "removed"
            lines.append(paint("changed", f"~ section {section.section} {verb}"))
            continue
        lines.append(paint("changed", f"~ section {section.section}"))
        for f in section.fields:
            lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
    return "\n".join(lines) + "\n"


def _workflow_text(
    change: WorkflowChange, at: datetime, paint: Callable[[str, str], str]
) -> list[str]:
    flow = change.new or change.old
    assert flow is not None
    sign = _SIGN[change.kind]
    lines = [paint(change.kind, f"{sign} workflow {change.name} ({schedule_shown(flow)})")]
    if change.kind == "added":
        lines.append(paint("dim", f"    next: {', '.join(next_fires(change.new, at))}"))
    for f in change.fields:
        lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
    if change.schedule_changed:
        lines.append(paint("dim", f"    next before: {', '.join(next_fires(change.old, at))}"))
        lines.append(paint("dim", f"    next after:  {', '.join(next_fires(change.new, at))}"))
    for task in change.tasks:
        job = task.new or task.old
        assert job is not None
        after = ", ".join(f"{change.name}.{d}" for d in _depends_on(job))
        lines.append(
            paint(task.kind, f"    {_SIGN[task.kind]} task {task.name}")
            + (f" (after {after})" if after and task.kind == "added" else "")
        )
        for f in task.fields:
            lines.append(f"        {f.path}: {_short(f.old)} -> {_short(f.new)}")
    return lines


def _depends_on(job: Job) -> list[str]:
    return list(getattr(job.config, "depends_on", ()))


# -------------------------------------------------------------------- markdown


def _md(value: Any) -> str:
    text = _short(value, 120).replace("|", "\\|").replace("`", "'")
    return f"`{text}`"


def to_markdown(plan: Plan, at: datetime) -> str:
    out = ["### cronstable diff", ""]
    if plan.empty:
        out.append(f"No changes ({_headline(plan)}).")
        return "\n".join(out) + "\n"
    out.append(_headline(plan))
    out.append("")
    if plan.jobs or not plan.workflows:
        out.append("| | job | schedule | next fires (from " + at.isoformat() + ") |")
        out.append("|---|---|---|---|")
    for change in plan.jobs:
        fires = ", ".join(next_fires(change.new, at)) if change.new else "—"
        out.append(
            f"| {_SIGN[change.kind]} | `{change.name}` | `{_schedule_line(change)}` | {fires} |"
        )
    changed = [c for c in plan.jobs if c.kind == "changed"]
    for change in changed:
        out += [
            "",
            f"<details><summary><code>{change.name}</code>: "
            f"{len(change.fields)} setting{'s' if len(change.fields) != 1 else ''} changed"
            "</summary>",
            "",
            "| setting | before | after |",
            "|---|---|---|",
        ]
        out += [f"| `{f.path}` | {_md(f.old)} | {_md(f.new)} |" for f in change.fields]
        if change.schedule_changed:
            out += [
                "",
                f"Next fires before: {', '.join(next_fires(change.old, at))}  ",
                f"Next fires after: {', '.join(next_fires(change.new, at))}",
            ]
        out += ["", "</details>"]
    if plan.workflows:
        out += [
            "",
            "| | workflow / task | schedule | next fires (from " + at.isoformat() + ") |",
            "|---|---|---|---|",
        ]
    for flow in plan.workflows:
        shown = flow.new or flow.old
        assert shown is not None
        fires = ", ".join(next_fires(flow.new, at)) if flow.new else "—"
        out.append(f"| {_SIGN[flow.kind]} | `{flow.name}` | `{schedule_shown(shown)}` | {fires} |")
        for task in flow.tasks:
            out.append(f"| {_SIGN[task.kind]} | `{task.name}` | | |")
    for flow in plan.workflows:
        changed_tasks = [t for t in flow.tasks if t.kind == "changed"]
        if not flow.fields and not changed_tasks:
            continue
        out += [
            "",
            f"<details><summary><code>{flow.name}</code>: workflow changed</summary>",
            "",
            "| setting | before | after |",
            "|---|---|---|",
        ]
        out += [f"| `{f.path}` | {_md(f.old)} | {_md(f.new)} |" for f in flow.fields]
        for task in changed_tasks:
            out += [
                f"| `{task.name}`: `{f.path}` | {_md(f.old)} | {_md(f.new)} |" for f in task.fields
            ]
        out += ["", "</details>"]
    if plan.pools:
        out += ["", "| | pool | slots, scope | changed |", "|---|---|---|---|"]
        for pool in plan.pools:
            settings = ", ".join(f"{f.path}: {_md(f.old)} → {_md(f.new)}" for f in pool.fields)
            out.append(
                f"| {_SIGN[pool.kind]} | `{pool.name}` | {_pool_shown(pool)} | {settings or '—'} |"
            )
    for section in plan.sections:
        out += ["", f"Section `{section.section}`:", "", "| setting | before | after |"]
        out += ["|---|---|---|"]
        out += [f"| `{f.path}` | {_md(f.old)} | {_md(f.new)} |" for f in section.fields]
    return "\n".join(out) + "\n"
