"""``cronstable diff OLD NEW``: what applying NEW over OLD would change.

Exit codes follow diff(1), ``flux diff`` and ``argocd app diff``: 0 no changes,
1 changes, 2 error (a side cannot be read or is invalid).
"""

from __future__ import annotations

import sys
from datetime import datetime

from cronstable.cli import EXIT_USAGE
from cronstable.cli.next import parse_after
from cronstable.cli.sides import Side, SideError, resolve
from cronstable.cli.validate import report_invalid
from cronstable.config import ConfigError, DesiredState

EXIT_SAME = 0
EXIT_CHANGED = 1


def _load(side: Side) -> DesiredState | None:
    try:
        return side.load()
    except ConfigError as exc:
        report_invalid(side.label, exc)
        return None


def cmd_diff(old_text: str, new_text: str, fmt: str, at_text: str | None) -> int:
    try:
        at: datetime = parse_after(at_text)
    except ValueError:
        print(f"cronstable diff: --at {at_text!r} is not an ISO 8601 time", file=sys.stderr)
        return EXIT_USAGE
    try:
        old_side, new_side = resolve(old_text), resolve(new_text)
    except SideError as exc:
        print(f"cronstable diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    old_state, new_state = _load(old_side), _load(new_side)
    if old_state is None or new_state is None:
        return EXIT_USAGE
    from cronstable.reconcile.plan import plan
    from cronstable.reconcile.render import to_json, to_markdown, to_text

    result = plan(
        new_state,
        old_state,
        revision=new_side.revision or new_side.label,
        applied_revision=old_side.revision or old_side.label,
    )
    if fmt == "json":
        sys.stdout.write(to_json(result, at))
    elif fmt == "markdown":
        sys.stdout.write(to_markdown(result, at))
    else:
        sys.stdout.write(to_text(result, at, colour=sys.stdout.isatty()))
    return EXIT_SAME if result.empty else EXIT_CHANGED
