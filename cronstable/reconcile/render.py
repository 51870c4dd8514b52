"""A Plan as text (colour on a terminal), JSON, or Markdown for a pull-request comment.

Beside the settings that change, each job and workflow shows its effects in time
(:mod:`cronstable.reconcile.effects`): its next fires before and after, in its zone
with UTC beside them, and what the apply itself runs now (flagged) or does not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cronstable.config.desired import Job, Pool, Workflow
from cronstable.config.models import JobConfig, WorkflowSettings
from cronstable.reconcile.effects import (
    ApplyEffect,
    DaemonFacts,
    Fire,
    Fires,
    PlanTimes,
    TimeEffects,
    time_effects,
)
from cronstable.reconcile.plan import FieldChange, JobChange, Plan, PoolChange, WorkflowChange
from cronstable.schedule import uses_h


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


def _utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def fire_shown(fire: Fire | datetime) -> str:
    """A fire in its job's zone, UTC beside it when the zone's offset is not 0, and why it
    is skipped: ``2026-03-29T03:30:00+01:00 (2026-03-29T02:30:00Z) [skipped: suspend]``."""
    at = fire.at if isinstance(fire, Fire) else fire
    text = at.isoformat()
    if at.utcoffset():
        text += f" ({_utc_text(at)})"
    if isinstance(fire, Fire) and fire.skipped:
        text += f" [skipped: {fire.skipped}]"
    return text


def fires_shown(fires: Fires | None) -> str:
    if fires is None:
        return "—"
    if not fires.fires:
        return f"({fires.none})" if fires.none != "@reboot" else "@reboot"
    return ", ".join(fire_shown(f) for f in fires.fires)


_APPLIED = {"reload": "at apply (reload)", "start": "at apply (start)"}
_KIND = {
    "reboot": "@reboot",
    "catchUp": "catch-up",
    "retry": "retry",
    "running": "runs going",
    "pool": "pool",
}


def effect_shown(effect: ApplyEffect) -> str:
    """``at apply (start): runs now: @reboot: …`` or ``at apply (reload): catch-up of …``."""
    what = _KIND[effect.kind]
    if effect.fire is not None:
        what += f" of {fire_shown(effect.fire)}"
    now = "runs now: " if effect.runs else ""
    return f"{_APPLIED[effect.applied]}: {now}{what}: {effect.detail}"


def _times_lines(times: TimeEffects, indent: str = "    ") -> list[tuple[str, str]]:
    """(paint kind, line) of a change's fires and effects."""
    out: list[tuple[str, str]] = []
    if times.before is None:
        out.append(("dim", f"{indent}next: {fires_shown(times.after)}"))
    elif times.after is None:
        out.append(("dim", f"{indent}was next: {fires_shown(times.before)}"))
    elif times.same_times:
        out.append(("dim", f"{indent}next: {fires_shown(times.after)} (unchanged)"))
    else:
        out.append(("dim", f"{indent}next before: {fires_shown(times.before)}"))
        out.append(("dim", f"{indent}next after:  {fires_shown(times.after)}"))
    for effect in times.apply:
        flag = "! " if effect.runs else "  "
        out.append(("runs" if effect.runs else "dim", f"{indent[:-2]}{flag}{effect_shown(effect)}"))
    return out


# ------------------------------------------------------------------------ JSON


def _field_json(f: FieldChange) -> dict[str, Any]:
    return {"path": f.path, "old": f.old, "new": f.new}


def _pool_json(change: PoolChange, times: PlanTimes) -> dict[str, Any]:
    pool = change.new or change.old
    assert pool is not None
    return {
        "name": change.name,
        "change": change.kind,
        "slots": pool.slots,
        "scope": pool.scope,
        "fields": [_field_json(f) for f in change.fields],
        "atApply": [effect_json(e) for e in times.pools.get(change.name, ())],
    }


def to_json(plan: Plan, at: datetime, facts: DaemonFacts | str | None = None) -> str:
    return json.dumps(plan_data(plan, at, facts), indent=2, ensure_ascii=False) + "\n"


def _fire_json(fire: Fire | datetime) -> dict[str, Any]:
    at = fire.at if isinstance(fire, Fire) else fire
    out: dict[str, Any] = {"local": at.isoformat(), "utc": _utc_text(at)}
    if isinstance(fire, Fire):
        out["skipped"] = fire.skipped
    return out


def _fires_json(fires: Fires | None) -> dict[str, Any] | None:
    if fires is None:
        return None
    return {
        "zone": fires.zone,
        "fires": [_fire_json(f) for f in fires.fires],
        "none": fires.none,
    }


def effect_json(effect: ApplyEffect) -> dict[str, Any]:
    return {
        "applied": effect.applied,
        "kind": effect.kind,
        "runs": effect.runs,
        "fire": None if effect.fire is None else _fire_json(effect.fire),
        "count": effect.count,
        "detail": effect.detail,
    }


def times_json(times: TimeEffects) -> dict[str, Any]:
    """A change's effects in time (``times`` in ``diff --format json``)."""
    return {
        "before": _fires_json(times.before),
        "after": _fires_json(times.after),
        "atApply": [effect_json(e) for e in times.apply],
    }


def _next_strings(fires: Fires | None) -> list[str]:
    """The fires as ``nextFires`` has always listed them (the job's zone only)."""
    if fires is None:
        return []
    if not fires.fires:
        return ["@reboot" if fires.none == "@reboot" else f"({fires.none})"]
    return [f.at.isoformat() for f in fires.fires]


def plan_data(plan: Plan, at: datetime, facts: DaemonFacts | str | None = None) -> dict[str, Any]:
    """The plan as ``diff --format json`` prints it (and the daemon's ``diff_revision``)."""
    times = time_effects(plan, at, facts)
    jobs = []
    for change in plan.jobs:
        entry: dict[str, Any] = {"name": change.name, "change": change.kind}
        own = times.jobs[change.name]
        if change.kind == "changed":
            entry["fields"] = [_field_json(f) for f in change.fields]
            entry["nextFires"] = {
                "before": _next_strings(own.before),
                "after": _next_strings(own.after),
            }
        elif change.kind == "added":
            entry["schedule"] = _schedule_line(change)
            entry["nextFires"] = {"after": _next_strings(own.after)}
        else:
            entry["schedule"] = _schedule_line(change)
        entry["times"] = times_json(own)
        jobs.append(entry)
    body: dict[str, Any] = {
        "changed": not plan.empty,
        "from": {"revision": plan.old_revision, "jobSetId": plan.old_job_set_id},
        "to": {"revision": plan.new_revision, "jobSetId": plan.new_job_set_id},
        "summary": plan.summary(),
        "jobs": jobs,
        "pools": [_pool_json(change, times) for change in plan.pools],
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
        "timeEffects": {
            "facts": times.facts,
            "unknown": list(times.unknown),
            "runsNow": _runs_now(times),
        },
    }
    if plan.has_workflows:
        body["workflows"] = [_workflow_json(change, times) for change in plan.workflows]
    return body


def _runs_now(times: PlanTimes) -> dict[str, int]:
    """How many effects run something now, by how the revision is applied."""
    counts = {"reload": 0, "start": 0}
    every = [e for t in (*times.jobs.values(), *times.workflows.values()) for e in t.apply]
    every += [e for effects in times.pools.values() for e in effects]
    for effect in every:
        if effect.runs:
            counts[effect.applied] += 1
    return counts


def _workflow_json(change: WorkflowChange, times: PlanTimes) -> dict[str, Any]:
    flow = change.new or change.old
    assert flow is not None
    own = times.workflows[change.name]
    entry: dict[str, Any] = {
        "name": change.name,
        "change": change.kind,
        "schedule": schedule_shown(flow),
    }
    if change.kind == "changed":
        entry["fields"] = [_field_json(f) for f in change.fields]
        entry["nextFires"] = {
            "before": _next_strings(own.before),
            "after": _next_strings(own.after),
        }
    elif change.kind == "added":
        entry["nextFires"] = {"after": _next_strings(own.after)}
    entry["times"] = times_json(own)
    entry["tasks"] = [
        {"name": task.name, "change": task.kind}
        | ({"fields": [_field_json(f) for f in task.fields]} if task.kind == "changed" else {})
        for task in change.tasks
    ]
    return entry


# ------------------------------------------------------------------------ text

_COLOURS = {
    "added": "\033[32m",
    "removed": "\033[31m",
    "changed": "\033[33m",
    "dim": "\033[2m",
    "runs": "\033[1;35m",
}
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


def to_text(
    plan: Plan, at: datetime, *, colour: bool = False, facts: DaemonFacts | str | None = None
) -> str:
    def paint(kind: str, text: str) -> str:
        return f"{_COLOURS[kind]}{text}{_RESET}" if colour else text

    lines: list[str] = []
    if plan.empty:
        return f"No changes ({_headline(plan)}).\n"
    times = time_effects(plan, at, facts)
    lines.append(_headline(plan))
    for change in plan.jobs:
        sign = _SIGN[change.kind]
        lines.append(paint(change.kind, f"{sign} job {change.name} ({_schedule_line(change)})"))
        for f in change.fields:
            lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
        lines += [paint(k, line) for k, line in _times_lines(times.jobs[change.name])]
    for flow in plan.workflows:
        lines.extend(_workflow_text(flow, times.workflows[flow.name], paint))
    for pool in plan.pools:
        lines.append(paint(pool.kind, f"{_SIGN[pool.kind]} pool {pool.name} ({_pool_shown(pool)})"))
        for f in pool.fields:
            lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
        for effect in times.pools.get(pool.name, ()):
            lines.append(paint("runs", f"  ! {effect_shown(effect)}"))
    for section in plan.sections:
        if section.old is None or section.new is None:
            verb = "added" if section.old is None else "removed"
            lines.append(paint("changed", f"~ section {section.section} {verb}"))
            continue
        lines.append(paint("changed", f"~ section {section.section}"))
        for f in section.fields:
            lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
    if plan.jobs or plan.workflows or plan.pools:
        lines.append(paint("dim", _facts_line(times)))
    return "\n".join(lines) + "\n"


def _facts_line(times: PlanTimes) -> str:
    """Where the time effects' knowledge of the running daemon came from, or what it lacks."""
    counts = _runs_now(times)
    runs = (
        f"runs now: {counts['reload']} at a reload, {counts['start']} at a start"
        if counts["reload"] or counts["start"]
        else "runs now: nothing, at a reload or a start"
    )
    if times.facts is not None:
        return f"time effects from {times.at.isoformat()}, with what {times.facts} knows; {runs}"
    return f"time effects from {times.at.isoformat()}; {runs}; {'; '.join(times.unknown)}"


def _workflow_text(
    change: WorkflowChange, times: TimeEffects, paint: Callable[[str, str], str]
) -> list[str]:
    flow = change.new or change.old
    assert flow is not None
    sign = _SIGN[change.kind]
    lines = [paint(change.kind, f"{sign} workflow {change.name} ({schedule_shown(flow)})")]
    for f in change.fields:
        lines.append(f"    {f.path}: {_short(f.old)} -> {_short(f.new)}")
    lines += [paint(k, line) for k, line in _times_lines(times)]
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


def to_markdown(plan: Plan, at: datetime, facts: DaemonFacts | str | None = None) -> str:
    out = ["### cronstable diff", ""]
    if plan.empty:
        out.append(f"No changes ({_headline(plan)}).")
        return "\n".join(out) + "\n"
    times = time_effects(plan, at, facts)
    out.append(_headline(plan))
    out.append("")
    if plan.jobs or not plan.workflows:
        out.append("| | job | schedule | next fires (from " + at.isoformat() + ") |")
        out.append("|---|---|---|---|")
    for change in plan.jobs:
        fires = fires_shown(times.jobs[change.name].after)
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
        out += ["", *_md_fires(times.jobs[change.name]), "", "</details>"]
    if plan.workflows:
        out += [
            "",
            "| | workflow / task | schedule | next fires (from " + at.isoformat() + ") |",
            "|---|---|---|---|",
        ]
    for flow in plan.workflows:
        shown = flow.new or flow.old
        assert shown is not None
        fires = fires_shown(times.workflows[flow.name].after)
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
        out += ["", *_md_fires(times.workflows[flow.name]), "", "</details>"]
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
    if plan.jobs or plan.workflows or plan.pools:
        out += ["", *_md_effects(plan, times)]
    return "\n".join(out) + "\n"


def _md_fires(times: TimeEffects) -> list[str]:
    if times.same_times:
        return [f"Next fires (unchanged): {fires_shown(times.after)}"]
    return [
        f"Next fires before: {fires_shown(times.before)}  ",
        f"Next fires after: {fires_shown(times.after)}",
    ]


def _md_effects(plan: Plan, times: PlanTimes) -> list[str]:
    """What the apply runs now (flagged) and does not, as a list under its own heading."""
    rows: list[str] = []
    named = [
        *((f"job `{c.name}`", times.jobs[c.name].apply) for c in plan.jobs),
        *((f"workflow `{c.name}`", times.workflows[c.name].apply) for c in plan.workflows),
        *((f"pool `{c.name}`", times.pools.get(c.name, ())) for c in plan.pools),
    ]
    for what, effects in named:
        for effect in effects:
            flag = "**runs now**" if effect.runs else "no run"
            when = "at a reload" if effect.applied == "reload" else "at a daemon start"
            kind = _KIND[effect.kind]
            if effect.fire is not None:
                kind += f" of {fire_shown(effect.fire)}"
            rows.append(f"- {flag} · {what} · {when} · {_md_text(f'{kind}: {effect.detail}')}")
    out = ["**At apply**", ""]
    out += rows or ["- nothing runs now, at a reload or a start"]
    out += ["", f"<sub>{_md_text(_facts_line(times))}</sub>"]
    return out


def _md_text(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")
