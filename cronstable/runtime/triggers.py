"""Which request a revision answers: the triggers waiting for the source to yield one.

A reload request (SIGHUP, ``POST /reload``, the MCP ``reload`` tool) and a GitHub push
only *nudge* the source, which fetches and yields a revision later, or none when nothing
changed.  :class:`Triggers` keeps the requests not answered yet (at most
:data:`PENDING_MAX`) and credits each revision the source yields to one of them
(:meth:`Triggers.take`):

1. a push that announced this very revision (the webhook's ``after`` sha), if one waits;
2. else the newest request that named no revision, asked at most :data:`ASKED_WINDOW`
   seconds ago;
3. else the source noticed the change itself: ``poll`` for a git source, ``watch`` for
   the others.

A revision answers every request that named none (the source fetched after them all);
a push that named another revision waits for it, up to :data:`NAMED_WINDOW` seconds
(a git source keeps fetching for its commit 30 s).  A request that found nothing new is
answered by nothing and forgotten when its window passes, so a revision the source
notices in that window by itself is credited to it: the windows are short for that.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cronstable.ports import Trigger, TriggerKind

PENDING_MAX = 64
"""Requests kept waiting at most (the oldest is forgotten first)."""
ASKED_WINDOW = 30.0
"""Seconds a request that named no revision may be answered by the next revision."""
NAMED_WINDOW = 60.0
"""Seconds a push that named its revision waits for it."""


def noticed_kind(source_kind: str) -> TriggerKind:
    """How a source of ``source_kind`` notices a change by itself."""
    return "poll" if source_kind == "git" else "watch"


@dataclass(frozen=True, slots=True)
class _Pending:
    trigger: Trigger
    at: float
    """:func:`time.monotonic` when it was noted."""


class Triggers:
    """See the module docstring.  ``noticed``: a revision no request asked for."""

    def __init__(
        self, noticed: TriggerKind = "watch", *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.noticed = Trigger(noticed)
        self._monotonic = monotonic
        self._pending: list[_Pending] = []

    def note(self, trigger: Trigger) -> None:
        """``trigger`` asked the source to look now."""
        self._pending.append(_Pending(trigger, self._monotonic()))
        del self._pending[:-PENDING_MAX]

    def pending(self) -> int:
        return len(self._pending)

    def take(self, revision: str) -> Trigger:
        """What the source yielding ``revision`` now answers (see the module docstring)."""
        now = self._monotonic()
        self._pending = [
            item
            for item in self._pending
            if now - item.at <= (NAMED_WINDOW if item.trigger.revision else ASKED_WINDOW)
        ]
        named = [item for item in self._pending if item.trigger.revision == revision]
        unnamed = [item for item in self._pending if item.trigger.revision is None]
        chosen = named[-1] if named else unnamed[-1] if unnamed else None
        self._pending = [
            item
            for item in self._pending
            if item.trigger.revision is not None and item.trigger.revision != revision
        ]
        return chosen.trigger if chosen is not None else self.noticed
