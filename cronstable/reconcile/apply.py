"""The Applier: the only code that changes the running daemon.

A revision is applied whole or not at all.  Phase one *prepares* every section
the plan touches (jobs: resolve users and groups; logging: build the handlers
and formatters, not yet installed; the daemon-wide sections
:func:`cronstable.daemon.build.build_daemon` lists, in its order: cluster, state and
slots reach their stores, web binds its listeners); if any preparation
fails, everything prepared is discarded and the previous revision keeps running
untouched.  Phase two *commits* each prepared
section; commits do not fail.

Every attempt is recorded (:class:`ReconcileStatus`) and counted in metrics;
a rejected revision is not retried in a loop — the next revision is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from cronstable import logconfig, ports
from cronstable.config import ConfigError, DesiredState, Limits, LoadCache, Problem, load_snapshot
from cronstable.config.crontab import is_crontab_name
from cronstable.logs import LogOverrides
from cronstable.metrics import DaemonMetrics
from cronstable.ports import AuditEntry, RevisionView, Trigger
from cronstable.reconcile.plan import Plan, plan
from cronstable.redact import redact
from cronstable.snapshot import Snapshot

logger = logging.getLogger(__name__)

P = TypeVar("P")

AUDIT_ERRORS = 20
"""A rejected revision's problems an audit entry keeps at most (the first)."""
AUDIT_ERROR_LENGTH = 1000
"""Characters of each problem an audit entry keeps."""
UNKNOWN_TRIGGER = Trigger("watch")
"""What an attempt is credited to when its caller said nothing (the source noticed it)."""

Recheck = Callable[[Snapshot], Awaitable[bool]]
"""A source's answer to "this revision did not load: was it read mid-write?"."""


class Section(ports.Section[P], Protocol[P]):
    """A :class:`cronstable.ports.Section` the Applier drives: it also says whether a
    plan touches it (every section is prepared for the first revision)."""

    def affected(self, plan: Plan) -> bool: ...


@dataclass(frozen=True, slots=True)
class RevisionRecord:
    revision: str
    source: str
    time: datetime
    outcome: str
    """"applied", "unchanged" or "rejected"; "superseded" (never recorded) when a
    revision that did not load was read mid-write and the source has a newer one."""
    duration: float
    job_set_id: str | None = None
    summary: dict[str, Any] | None = None
    errors: tuple[str, ...] = ()
    trigger: Trigger = UNKNOWN_TRIGGER
    """What made the daemon try it (:class:`cronstable.ports.Trigger`)."""

    def audit(self, node: str) -> AuditEntry:
        """This attempt as the audit trail keeps it (its ``id`` is the trail's to give):
        every text redacted, the problems cut to a bound."""
        summary = self.summary or {}
        errors = tuple(
            _cut(redact(error, strict=True), AUDIT_ERROR_LENGTH)
            for error in self.errors[:AUDIT_ERRORS]
        )
        if len(self.errors) > AUDIT_ERRORS:
            errors += (f"… and {len(self.errors) - AUDIT_ERRORS} more",)
        return AuditEntry(
            id="",
            node=node,
            time=self.time,
            outcome="rejected" if self.outcome == "rejected" else "applied",
            revision=redact(self.revision),
            source=redact(self.source),
            trigger=self.trigger,
            job_set_id=self.job_set_id,
            duration=self.duration,
            changes={key: int(summary.get(key, 0)) for key in ("added", "changed", "removed")}
            if self.outcome != "rejected"
            else {},
            sections=tuple(str(name) for name in summary.get("sections", ())),
            errors=errors,
        )

    def view(self) -> RevisionView:
        """This attempt as the daemon shows it (``/status``, the live events)."""
        return RevisionView(
            self.revision,
            self.source,
            self.time,
            self.job_set_id,
            rejected=self.outcome == "rejected",
            errors=self.errors,
        )


@dataclass(slots=True)
class ReconcileStatus:
    applied: RevisionRecord | None = None
    last_failed: RevisionRecord | None = None
    attempts: int = 0
    history: list[RevisionRecord] = field(default_factory=list)
    observers: list[Callable[[RevisionRecord], None]] = field(default_factory=list)
    """Told of every recorded attempt (the live event stream); must not block or raise."""
    applied_state: DesiredState | None = None
    """The revision running now, loaded (None before the first is applied)."""

    def applied_revision(self) -> str | None:
        """The revision running now (None before the first is applied)."""
        return self.applied.revision if self.applied is not None else None

    def record(self, entry: RevisionRecord) -> None:
        self.attempts += 1
        self.history.append(entry)
        del self.history[:-20]
        if entry.outcome == "rejected":
            self.last_failed = entry
        else:
            self.applied = entry
        for observer in self.observers:
            try:
                observer(entry)
            except Exception:
                logger.exception("A revision observer failed; please report this")


class LoggingSection:
    """The ``logging`` section (Python's dictConfig schema), applied when it changes.

    Prepare builds every formatter, filter and handler without touching the
    running logging (:mod:`cronstable.logconfig`); one that cannot be built
    rejects the revision, naming its place in the file.  Commit installs them;
    discard closes them.  ``overrides`` (``-l``/``--log-format`` given on the
    command line) are applied again after every commit, so they keep winning.
    """

    name = "logging"

    def __init__(self, overrides: LogOverrides | None = None) -> None:
        self.overrides = overrides if overrides is not None else LogOverrides()

    def affected(self, plan: Plan) -> bool:
        return any(s.section == "logging" for s in plan.sections)

    async def prepare(self, desired: DesiredState) -> logconfig.BuiltLogging | None:
        if desired.logging is None:
            return None
        try:
            return await asyncio.to_thread(logconfig.build, desired.logging.dict_config())
        except logconfig.LoggingSetupError as exc:
            raise ConfigError([desired.problem(("logging", *exc.key), exc.message)]) from exc

    def commit(self, prepared: logconfig.BuiltLogging | None, desired: DesiredState) -> None:
        if prepared is None:
            return  # a removed section leaves the logging as it is
        try:
            prepared.install()
        except Exception:  # checked in prepare; never let logging stop a revision
            logger.exception("The logging section could not be installed completely")
        self.overrides.apply()

    async def discard(self, prepared: logconfig.BuiltLogging | None) -> None:
        if prepared is not None:
            await asyncio.to_thread(prepared.close)

    async def close(self) -> None:
        """Nothing to release: the installed logging outlives the daemon's stop."""


@contextlib.contextmanager
def _first_revision_gc() -> Iterator[None]:
    """Until the first revision is applied, no cyclic collection; then everything alive is
    frozen (:func:`gc.freeze`): never walked by the collector again.

    Start-up makes most of the objects a daemon ever holds (3 million for 100,000 jobs),
    and the collector would walk them three times over as they age through its
    generations (a fifth of the start-up, measured) to free none of them.  Reference
    counting still frees frozen objects: a revision's state holds no cycles (models, jobs,
    schedules, parsed documents), so the revision that replaces this one frees it.  What
    freezing could keep is a frozen object that later becomes part of a garbage cycle;
    the set is fixed once, at start-up (again only while no revision was applied yet), so
    such a leak is bounded by it and never grows with time or reloads.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _internal(exc: Exception) -> Problem:
    return Problem("", None, None, (), f"internal error ({type(exc).__name__}: {exc})")


class Applier:
    """Loads snapshots, plans them against what runs, and applies them two-phase."""

    def __init__(
        self,
        sections: Sequence[Section[Any]],
        metrics: DaemonMetrics | None = None,
        *,
        limits: Limits | None = None,
        status: ReconcileStatus | None = None,
        freeze_start_up: bool = False,
    ) -> None:
        """``sections``: prepared and committed in this order; ``status``: where the
        attempts are recorded (its observers hear of each); ``freeze_start_up``: the
        process is this daemon's own, and what its first revision made is frozen out of
        the cyclic collector's walks (:func:`_first_revision_gc`)."""
        self.sections: list[Section[Any]] = list(sections)
        self.metrics = metrics
        self.limits = limits if limits is not None else Limits()
        self.status = status if status is not None else ReconcileStatus()
        self.cache = LoadCache()
        self.freeze_start_up = freeze_start_up
        self._lock = asyncio.Lock()
        self._crontabs_seen: set[str] = set()

    @property
    def applied_state(self) -> DesiredState | None:
        return self.status.applied_state

    def _announce_crontabs(self, revision: str, desired: DesiredState) -> None:
        """Upgrade notice: crontab files did not load before; say so the first time each does."""
        for path in desired.files:
            if is_crontab_name(path) and path not in self._crontabs_seen:
                self._crontabs_seen.add(path)
                logger.warning(
                    "Revision %s loads the crontab file %s as configuration (crontab and "
                    "*.crontab files are loaded like YAML; a leading _ in its name opts it out)",
                    revision,
                    path,
                )

    def _load(self, snapshot: Snapshot) -> DesiredState:
        return load_snapshot(snapshot, cache=self.cache, limits=self.limits)

    async def reconcile(
        self,
        snapshot: Snapshot,
        *,
        recheck: Recheck | None = None,
        trigger: Trigger = UNKNOWN_TRIGGER,
    ) -> RevisionRecord:
        """Try one revision; returns the record of the attempt (never raises ConfigError).

        ``trigger``: what made the daemon try it, kept in the record (the audit trail).

        ``recheck`` (the source's :meth:`~cronstable.sources.base.Source.recheck`) is
        asked before a revision that does not load is rejected: when it answers that
        the revision was read mid-write and a newer one is coming, the attempt is
        dropped unrecorded (outcome "superseded").
        """
        async with self._lock:
            if self.status.applied_state is not None or not self.freeze_start_up:
                return await self._reconcile(snapshot, recheck, trigger)
            with _first_revision_gc():
                return await self._reconcile(snapshot, recheck, trigger)

    async def _reconcile(
        self, snapshot: Snapshot, recheck: Recheck | None, trigger: Trigger
    ) -> RevisionRecord:
        started = time.perf_counter()
        try:
            desired = await asyncio.to_thread(self._load, snapshot)
        except ConfigError as exc:
            if recheck is not None and await recheck(snapshot):
                logger.info(
                    "Revision %s from %s does not load; it was read while being written, "
                    "and the newer revision is tried instead",
                    snapshot.revision,
                    snapshot.source,
                )
                return RevisionRecord(
                    revision=snapshot.revision,
                    source=snapshot.source,
                    time=datetime.now(UTC),
                    outcome="superseded",
                    duration=time.perf_counter() - started,
                    trigger=trigger,
                )
            return self._rejected(snapshot, started, exc.problems, None, trigger)
        except Exception as exc:  # a loader bug must not stop the daemon following its source
            logger.exception("Loading revision %s failed unexpectedly", snapshot.revision)
            return self._rejected(snapshot, started, [_internal(exc)], None, trigger)
        for warning in desired.warnings:
            logger.warning("Revision %s: %s", snapshot.revision, warning)
        self._announce_crontabs(snapshot.revision, desired)
        applied_revision = self.status.applied.revision if self.status.applied else None
        the_plan = plan(
            desired,
            self.applied_state,
            revision=snapshot.revision,
            applied_revision=applied_revision,
        )
        first = self.applied_state is None
        touched = [s for s in self.sections if first or s.affected(the_plan)]
        prepared: list[tuple[Section[Any], Any]] = []
        try:
            for section in touched:
                prepared.append((section, await section.prepare(desired)))
        except Exception as exc:
            for section, state in prepared:
                await section.discard(state)
            if isinstance(exc, ConfigError):
                problems: Sequence[Problem] = exc.problems
            else:
                logger.exception("Preparing revision %s failed unexpectedly", snapshot.revision)
                problems = [_internal(exc)]
            # what a section found may quote the revision's values: its inline secrets go
            problems = [p.hiding(desired.secrets) for p in problems]
            return self._rejected(snapshot, started, problems, the_plan, trigger)
        for section, state in prepared:
            section.commit(state, desired)
        self.status.applied_state = desired
        outcome = "unchanged" if the_plan.empty and not first else "applied"
        record = RevisionRecord(
            revision=snapshot.revision,
            source=snapshot.source,
            time=datetime.now(UTC),
            outcome=outcome,
            duration=time.perf_counter() - started,
            job_set_id=desired.job_set_id,
            summary=the_plan.summary(),
            trigger=trigger,
        )
        self.status.record(record)
        if self.metrics is not None:
            self.metrics.applied(snapshot.revision, desired.job_set_id, snapshot.source)
            self.metrics.reconcile_duration_seconds.labels("applied").observe(record.duration)
        s = the_plan.summary()
        logger.info(
            "Revision %s from %s %s in %.1f ms: %d added, %d changed, %d removed, "
            "%d unchanged%s; job-set id %s",
            snapshot.revision,
            snapshot.source,
            outcome,
            record.duration * 1000,
            s["added"],
            s["changed"],
            s["removed"],
            s["unchanged"],
            f"; sections changed: {', '.join(s['sections'])}" if s["sections"] else "",
            desired.job_set_id,
        )
        return record

    def _rejected(
        self,
        snapshot: Snapshot,
        started: float,
        problems: Sequence[Problem],
        the_plan: Plan | None,
        trigger: Trigger = UNKNOWN_TRIGGER,
    ) -> RevisionRecord:
        errors = tuple(str(p) for p in problems)
        record = RevisionRecord(
            revision=snapshot.revision,
            source=snapshot.source,
            time=datetime.now(UTC),
            outcome="rejected",
            duration=time.perf_counter() - started,
            summary=the_plan.summary() if the_plan else None,
            errors=errors,
            trigger=trigger,
        )
        self.status.record(record)
        if self.metrics is not None:
            self.metrics.rejected()
            self.metrics.reconcile_duration_seconds.labels("rejected").observe(record.duration)
        running = self.status.applied.revision if self.status.applied else "nothing"
        logger.error(
            "Revision %s from %s rejected (%d problem%s; still running %s): %s",
            snapshot.revision,
            snapshot.source,
            len(errors),
            "" if len(errors) == 1 else "s",
            running,
            "; ".join(errors),
        )
        return record
