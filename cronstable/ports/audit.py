"""The audit trail's values: what made the daemon try a revision (:class:`Trigger`), one
attempt as the trail keeps it (:class:`AuditEntry`), a page of them (:class:`AuditPage`)
and who answers for the pages (:class:`AuditLog`).

A trigger is made where the request comes in (the SIGHUP handler, ``POST /reload``, the
MCP ``reload`` tool, the GitHub webhook) and carried to the apply; the source noticing a
change by itself is ``poll`` (a git source) or ``watch`` (the others), and the first
revision a daemon applies is ``start``.  No field holds a secret: a token is named, never
quoted, and every text from a request is cut and escaped where it is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, get_args

TriggerKind = Literal["start", "poll", "watch", "sighup", "webhook", "api"]
TRIGGER_KINDS: tuple[TriggerKind, ...] = get_args(TriggerKind)

AuditOutcome = Literal["applied", "rejected"]


@dataclass(frozen=True, slots=True)
class Trigger:
    """What made the daemon look for (and so try) a revision."""

    kind: TriggerKind
    requested_at: datetime | None = None
    """When it was asked (None for ``start``, ``poll`` and ``watch``)."""
    via: str | None = None
    """``api``: ``http`` (``POST /reload``) or ``mcp`` (the ``reload`` tool)."""
    token: str | None = None
    """``api``: the name of the token that asked (None: no token, a local peer)."""
    delivery: str | None = None
    """``webhook``: GitHub's ``X-GitHub-Delivery`` id."""
    sender: str | None = None
    """``webhook``: the login of the push's ``sender``."""
    revision: str | None = None
    """``webhook``: the commit the push announced (the revision it is matched to)."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One revision a daemon applied or rejected, and why it tried it."""

    id: str
    """Its place in the trail: ids grow with time on one node (the cursor of a page)."""
    node: str
    time: datetime
    outcome: AuditOutcome
    revision: str
    """The source's revision (a commit sha, an etcd revision, a content digest)."""
    source: str
    """Where it came from (credentials redacted)."""
    trigger: Trigger
    job_set_id: str | None = None
    """The applied revision's job-set id (None for a rejected one)."""
    duration: float = 0.0
    """Seconds the attempt took (load, plan, prepare, commit)."""
    changes: Mapping[str, int] = field(default_factory=dict)
    """Jobs ``added``, ``changed``, ``removed`` (an applied revision; all 0: nothing
    changed)."""
    sections: tuple[str, ...] = ()
    """The daemon-wide sections the revision changed."""
    errors: tuple[str, ...] = ()
    """A rejected revision's problems, redacted (cut to a bound)."""


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Entries newest first; ``next_cursor`` asks for the older ones (None: no more)."""

    entries: Sequence[AuditEntry]
    next_cursor: str | None
    kept: int
    """Entries the trail holds in all."""
    bound: int
    """The most it keeps (the oldest go first)."""
    durable: bool
    """Whether a state store keeps them (else only this daemon's memory)."""


class AuditLog(Protocol):
    """Answers the pages of ``GET /audit``."""

    def page(self, limit: int, cursor: str | None = None) -> AuditPage:
        """At most ``limit`` entries older than ``cursor`` (the newest without one);
        ValueError for a cursor this trail did not give."""
        ...
