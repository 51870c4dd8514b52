"""``cronstable validate`` and ``cronstable job-set-id``."""

from __future__ import annotations

import sys

from cronstable.cli import EXIT_INVALID, EXIT_OK
from cronstable.config import ConfigError, DesiredState, Limits, load_path
from cronstable.config.limits import DEFAULT_LIMITS


def report_invalid(label: str, exc: ConfigError) -> None:
    """``LABEL: invalid (N problems)`` and one indented line per problem, on stderr."""
    count = len(exc.problems)
    print(f"{label}: invalid ({count} problem{'s' if count != 1 else ''})", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)


def load_or_report(path: str, limits: Limits = DEFAULT_LIMITS) -> DesiredState | None:
    try:
        return load_path(path, limits)
    except ConfigError as exc:
        report_invalid(path, exc)
        return None


def cmd_validate(paths: list[str], limits: Limits = DEFAULT_LIMITS) -> int:
    status = EXIT_OK
    for path in paths:
        state = load_or_report(path, limits)
        if state is None:
            status = EXIT_INVALID
            continue
        count = len(state.jobs)
        print(
            f"{path}: valid, {count} job{'s' if count != 1 else ''}, job-set id {state.job_set_id}"
        )
        for warning in state.warnings:
            print(f"  warning: {warning}", file=sys.stderr)
    return status


def cmd_job_set_id(path: str) -> int:
    state = load_or_report(path)
    if state is None:
        return EXIT_INVALID
    print(state.job_set_id)
    return EXIT_OK
