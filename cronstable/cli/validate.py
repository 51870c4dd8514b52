"""``cronstable validate`` and ``cronstable job-set-id``."""

from __future__ import annotations

import sys

from cronstable.cli.exits import EXIT_INVALID, EXIT_OK
from cronstable.cli.side import SideError
from cronstable.cli.sides import resolve
from cronstable.cli.untrusted import escape
from cronstable.config import ConfigError, DesiredState, Limits
from cronstable.config.desired import Workflow
from cronstable.config.limits import DEFAULT_LIMITS
from cronstable.workflows.dag import outline


def flow_outline(flow: Workflow) -> str:
    """``4 tasks: extract → transform-a, transform-b → load`` (tasks by depth)."""
    count = len(flow.dag.tasks)
    return f"{count} task{'s' if count != 1 else ''}: {outline(flow.dag)}"


def report_invalid(label: str, exc: ConfigError) -> None:
    """``LABEL: invalid (N problems)`` and one indented line per problem, on stderr."""
    count = len(exc.problems)
    print(f"{label}: invalid ({count} problem{'s' if count != 1 else ''})", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)


def load_or_report(
    text: str, command: str, limits: Limits = DEFAULT_LIMITS
) -> tuple[str, DesiredState] | None:
    """(label, state) of a configuration as typed (any side ``diff`` takes), or None once
    its problems are on stderr."""
    try:
        side = resolve(text, limits)
    except SideError as exc:
        print(f"cronstable {command}: {exc}", file=sys.stderr)
        return None
    try:
        return side.label, side.load()
    except ConfigError as exc:
        report_invalid(side.label, exc)
        return None


def cmd_validate(paths: list[str], limits: Limits = DEFAULT_LIMITS) -> int:
    status = EXIT_OK
    for path in paths:
        loaded = load_or_report(path, "validate", limits)
        if loaded is None:
            status = EXIT_INVALID
            continue
        label, state = loaded
        count = len(state.jobs)
        flows = len(state.workflows)
        shown_flows = f", {flows} workflow{'s' if flows != 1 else ''}" if flows else ""
        print(
            f"{label}: valid, {count} job{'s' if count != 1 else ''}{shown_flows}, "
            f"job-set id {state.job_set_id}"
        )
        for flow in state.workflows.values():
            print(escape(f"  workflow {flow.name}: {flow_outline(flow)}"))
        for warning in state.warnings:
            print(f"  warning: {warning}", file=sys.stderr)
    return status


def cmd_job_set_id(path: str) -> int:
    loaded = load_or_report(path, "job-set-id")
    if loaded is None:
        return EXIT_INVALID
    print(loaded[1].job_set_id)
    return EXIT_OK
