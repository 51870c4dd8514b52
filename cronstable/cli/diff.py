"""``cronstable diff OLD NEW``: what applying NEW over OLD would change.

A side may be a running daemon (``http://…``, ``https://…``, ``unix:///…``):
its applied configuration, read with ``GET /config``.  What that daemon sent
(job names, commands, environment keys) is printed escaped by
:func:`cronstable.cli.untrusted.escape`, in every format; colour codes are only
added to a text diff that has nothing to escape.

Beside the settings, each change shows its effects in time
(:mod:`cronstable.reconcile.effects`): its next fires before and after, and what the
apply itself runs now.  With a daemon as OLD, what it knows and the files do not (its
``GET /status``: pending retries, runs going, API pauses, pool queues) informs them; when
that cannot be read the diff says so and goes on.

Exit codes follow diff(1), ``flux diff`` and ``argocd app diff``: 0 no changes,
1 changes, 2 error (a side cannot be read, or NEW is invalid).  An invalid OLD
is reported and compared as nothing, so a change fixing a broken base still
gets its diff.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING

from cronstable.cli.exits import EXIT_USAGE
from cronstable.cli.next import parse_after
from cronstable.cli.side import Side, SideError
from cronstable.cli.sides import resolve
from cronstable.cli.untrusted import escape
from cronstable.cli.validate import report_invalid
from cronstable.config import ConfigError, DesiredState, Limits
from cronstable.config.limits import DEFAULT_LIMITS

if TYPE_CHECKING:
    from cronstable.reconcile.effects import DaemonFacts

EXIT_SAME = 0
EXIT_CHANGED = 1


def _load(side: Side) -> DesiredState | None:
    try:
        return side.load()
    except ConfigError as exc:
        report_invalid(side.label, exc)
        return None


def cmd_diff(
    old_text: str,
    new_text: str,
    fmt: str,
    at_text: str | None,
    limits: Limits = DEFAULT_LIMITS,
) -> int:
    try:
        at: datetime = parse_after(at_text).replace(microsecond=0)
    except ValueError:
        print(f"cronstable diff: --at {at_text!r} is not an ISO 8601 time", file=sys.stderr)
        return EXIT_USAGE
    try:
        old_side, new_side = resolve(old_text, limits), resolve(new_text, limits)
    except SideError as exc:
        print(f"cronstable diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    new_state = _load(new_side)
    if new_state is None:
        return EXIT_USAGE
    for warning in new_state.warnings:
        print(f"cronstable diff: warning: {warning}", file=sys.stderr)
    try:
        old_state: DesiredState | None = old_side.load()
    except ConfigError as exc:
        # a change that fixes a broken base must still get a diff: compare with nothing,
        # which is what a daemon that never applied the base would do
        report_invalid(old_side.label, exc)
        print(
            f"cronstable diff: {old_side.label} is invalid; comparing with nothing", file=sys.stderr
        )
        old_state = None
    if old_side.published != new_side.published:
        # a daemon's side shows secrets and environment values as digests: so must the other
        from cronstable.cli.remote import republish

        if old_side.published:
            new_state = republish(new_state)
        elif old_state is not None:
            old_state = republish(old_state)
    from cronstable.reconcile.plan import plan
    from cronstable.reconcile.render import to_json, to_markdown, to_text

    known = _facts(old_side)

    result = plan(
        new_state,
        old_state,
        revision=new_side.revision or new_side.label,
        applied_revision=old_side.revision or old_side.label,
    )
    if fmt == "json":
        sys.stdout.write(escape(to_json(result, at, known), for_json=True))
    elif fmt == "markdown":
        sys.stdout.write(escape(to_markdown(result, at, known), block=True))
    else:
        plain = to_text(result, at, facts=known)
        shown = escape(plain, block=True)
        if shown == plain and sys.stdout.isatty():
            # the only escape sequences are then the colours the renderer adds
            shown = to_text(result, at, colour=True, facts=known)
        sys.stdout.write(shown)
    return EXIT_SAME if result.empty else EXIT_CHANGED


def _facts(side: Side) -> DaemonFacts | str | None:
    """What OLD's daemon knows (None for files), or why it could not be read (the diff
    goes on without it: a warning, not an error)."""
    if side.facts is None:
        return None
    try:
        return side.facts()
    except SideError as exc:
        print(f"cronstable diff: warning: {exc}", file=sys.stderr)
        return str(exc)
