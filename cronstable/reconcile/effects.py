"""A plan's effects in time: when each changed job fires, and what the apply runs now.

Pure: no I/O, no clock (the caller says what "now" is, ``at``).  :func:`time_effects`
gives, for every job and workflow a :class:`~cronstable.reconcile.plan.Plan` adds,
removes or changes, its next :data:`FIRES_SHOWN` fires before and after the change
(:class:`Fires`: each fire in the job's zone, UTC beside it when rendered, marked when
a pause skips it), and the runs the apply itself would start now or would not
(:class:`ApplyEffect`), under the daemon's own rules (:mod:`cronstable.runtime.scheduler`,
:mod:`cronstable.state.keeper`).  There are two ways a revision is applied:

* **reload** — a running daemon takes it (a poll, a watch, SIGHUP, a webhook).  A new
  job, and a job whose schedule, zone or ``enabled`` changed, first fires at its first
  fire *after* the apply; any other change keeps the job's place in its schedule.  So
  a reload runs no missed fire (unlike a Kubernetes CronJob, whose controller may run a
  fire between its last run and now at once), and does not run an ``@reboot`` job it
  adds.  It drops a changed job's pending retry; its runs going finish under the
  definition they started with.  A pool whose ``slots`` grow admits launches waiting
  in its queue at once: the one run a reload starts by itself.
* **start** — a daemon starts with it (a restart, a new node).  An ``@reboot`` job that
  is new or changed runs now (once per boot of the machine; ``clusterPolicy: Leader``
  under leader election: once per definition in the cluster).  A changed job starts
  anew: the fire record of its old definition is not resumed, so nothing of it is
  caught up.  Unchanged jobs are not in a plan; a restart catches up their fires missed
  while it was down, within ``startingDeadlineSeconds``, as before.

What a running daemon knows and the files do not (its pending retries, its runs going,
the pauses asked through its API, its pools' queues) comes in :class:`DaemonFacts`, read
from a daemon's ``GET /status`` by the caller; without it, :attr:`PlanTimes.unknown` says
what could not be judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal

from cronstable.config.desired import Job
from cronstable.reconcile.plan import JobChange, Plan, PoolChange, WorkflowChange

FIRES_SHOWN = 3

Applied = Literal["reload", "start"]
"""How the revision is applied: a running daemon reloads, or a daemon starts with it."""
EffectKind = Literal["reboot", "catchUp", "retry", "running", "pool"]


@dataclass(frozen=True, slots=True)
class Fire:
    """One coming fire of a job."""

    at: datetime
    """The fire, in the job's zone (its ``fold`` tells a repeated wall time apart)."""
    skipped: str | None = None
    """Why it will not run: ``suspend`` (the repository's pause) or ``api pause``."""

    @property
    def utc(self) -> datetime:
        return self.at.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Fires:
    """A side's next fires, or why it has none to list."""

    zone: str
    fires: tuple[Fire, ...] = ()
    none: str | None = None
    """``disabled``, ``@reboot`` or ``no more fires`` when :attr:`fires` is empty."""


@dataclass(frozen=True, slots=True)
class ApplyEffect:
    """A run the apply itself starts now (``runs``), or one it could be expected to start
    and does not, and why."""

    applied: Applied
    kind: EffectKind
    runs: bool
    detail: str
    fire: datetime | None = None
    """The fire it concerns, in the job's zone (a catch-up's), if any."""
    count: int = 0
    """How many runs (a pool's waiting launches)."""


@dataclass(frozen=True, slots=True)
class TimeEffects:
    """One job's or workflow's effects in time."""

    name: str
    before: Fires | None
    """None for one the plan adds."""
    after: Fires | None
    """None for one the plan removes."""
    apply: tuple[ApplyEffect, ...] = ()

    @property
    def same_times(self) -> bool:
        """Whether the fires (and what skips them) are the same before and after."""
        return self.before is not None and self.before == self.after


@dataclass(frozen=True, slots=True)
class LastRun:
    scheduled: datetime
    started: datetime
    outcome: str


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a running daemon says of one of its jobs (or workflows)."""

    next_fire: datetime | None = None
    last_run: LastRun | None = None
    running: int = 0
    retry_pending: bool = False
    api_paused: bool = False
    api_pause_until: datetime | None = None
    api_pause_reason: str | None = None


@dataclass(frozen=True, slots=True)
class PoolFacts:
    slots: int
    in_use: int
    queued: int


@dataclass(frozen=True, slots=True)
class DaemonFacts:
    """What the daemon that would apply the revision knows (its ``GET /status``)."""

    label: str
    """The daemon, as the user named it."""
    jobs: Mapping[str, JobFacts] = field(default_factory=dict)
    workflows: Mapping[str, JobFacts] = field(default_factory=dict)
    pools: Mapping[str, PoolFacts] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlanTimes:
    """Every change's effects in time, by name."""

    at: datetime
    jobs: Mapping[str, TimeEffects]
    workflows: Mapping[str, TimeEffects]
    pools: Mapping[str, tuple[ApplyEffect, ...]]
    facts: str | None
    """Where the daemon's knowledge came from (its label); None without one."""
    unknown: tuple[str, ...] = ()
    """What could not be judged without a daemon's knowledge (or why it is missing)."""


UNKNOWN_FROM_FILES = (
    "a running daemon's pending retries, runs going, pauses asked through its API and "
    "pool queues are not in the files (name a daemon's URL as the old side to see them)"
)


def _zone_name(zone: tzinfo) -> str:
    key = getattr(zone, "key", None)
    return str(key) if key else str(zone)


def _pause_until(job: Job) -> tuple[bool, datetime | None]:
    """Whether the repository pauses ``job`` (``suspend``), and until when."""
    suspend = getattr(job.config, "suspend", None)
    if suspend is None:
        return False, None
    return True, suspend.until


def _skip_reason(job: Job, fire: datetime, api: tuple[bool, datetime | None] | None) -> str | None:
    paused, until = _pause_until(job)
    if paused and (until is None or fire < until):
        return "suspend"
    if api is not None and api[0] and (api[1] is None or fire < api[1]):
        return "api pause"
    return None


def fires_of(
    job: Job | None,
    at: datetime,
    api: tuple[bool, datetime | None] | None = None,
    count: int = FIRES_SHOWN,
) -> Fires | None:
    """``job``'s next ``count`` fires strictly after ``at``, each marked when a pause
    (its ``suspend``, or ``api``: an API pause and its end) skips it."""
    if job is None:
        return None
    zone = _zone_name(job.timezone)
    if not job.config.enabled:
        return Fires(zone, none="disabled")
    if job.schedule.is_reboot:
        return Fires(zone, none="@reboot")
    found = job.schedule.fires(at, job.timezone, count)
    if not found:
        return Fires(zone, none="no more fires")
    return Fires(zone, tuple(Fire(f, _skip_reason(job, f, api)) for f in found))


def latest_fire_within(job: Job, at: datetime, seconds: float) -> datetime | None:
    """The latest fire of ``job`` in ``[at - seconds, at]`` (in its zone); None if none.

    Searched backwards by doubling steps from ``at``, so a busy schedule (one a second)
    and a long window (a day) cost a few dozen steps, not a walk of the window."""
    start = at - timedelta(seconds=seconds)
    step = 1.0
    while True:
        lower = max(start, at - timedelta(seconds=step))
        first = job.schedule.next_fire(lower - timedelta(microseconds=1), job.timezone)
        if first is not None and first <= at:
            latest = first
            for _ in range(10_000):  # within the last step: a bounded walk
                following = job.schedule.next_fire(latest, job.timezone)
                if following is None or following > at:
                    break
                latest = following
            return latest
        if lower <= start:
            return None
        step *= 2


def _api_pause(facts: JobFacts | None) -> tuple[bool, datetime | None] | None:
    if facts is None or not facts.api_paused:
        return None
    return True, facts.api_pause_until


def _retimed(old: Job, new: Job) -> bool:
    """The scheduler's test: a new fire sequence starts after the apply."""

    def timing(job: Job) -> tuple[str, str, bool]:
        return (job.schedule.text, str(job.timezone), job.config.enabled)

    return timing(old) != timing(new)


def _paused_at(job: Job, at: datetime, facts: JobFacts | None) -> str | None:
    """Why a pause refuses a run of ``job`` at ``at`` (its ``suspend``, an API pause)."""
    return _skip_reason(job, at, _api_pause(facts))


def _reboot_effects(
    old: Job | None, new: Job, at: datetime, facts: JobFacts | None
) -> list[ApplyEffect]:
    """A new or changed (or newly enabled) @reboot job: not at a reload; now at a start."""
    if not new.schedule.is_reboot or not new.config.enabled:
        return []
    if old is not None and old.digest == new.digest:
        return []
    what = "new" if old is None or not old.schedule.is_reboot else "changed"
    once = (
        "once per definition in the cluster, on the leader (clusterPolicy Leader under "
        "leader election; without it once per boot of each machine)"
        if new.config.cluster_policy == "Leader"
        else "once per boot of each machine"
    )
    paused = _paused_at(new, at, facts)
    start = (
        ApplyEffect("start", "reboot", False, f"not run: paused ({paused}), skipped as paused")
        if paused is not None
        else ApplyEffect("start", "reboot", True, once)
    )
    return [
        ApplyEffect(
            "reload",
            "reboot",
            False,
            f"not run: a reload does not run a {what} @reboot job (it runs when a daemon starts)",
        ),
        start,
    ]


def _catch_up_effects(
    old: Job | None, new: Job, at: datetime, facts: JobFacts | None
) -> list[ApplyEffect]:
    """A job whose deadline could make a fire just missed look runnable: none runs."""
    deadline = new.config.starting_deadline_seconds
    if deadline is None or not new.config.enabled or new.schedule.is_reboot:
        return []
    if old is not None:
        before = old.config.starting_deadline_seconds
        if before == deadline and not _retimed(old, new):
            return []
    fire = latest_fire_within(new, at, float(deadline))
    if fire is None:
        return []
    why = (
        "the job is new"
        if old is None
        else "its startingDeadlineSeconds changed"
        if old.config.starting_deadline_seconds != deadline
        else "its schedule changed"
    )
    ran = ""
    if facts is not None and facts.last_run is not None:
        last = facts.last_run
        if last.scheduled == fire.astimezone(UTC):
            ran = f"; it ran already ({last.outcome})"
        elif last.scheduled < fire.astimezone(UTC):
            ran = "; the daemon's last run is older"
    return [
        ApplyEffect(
            "reload",
            "catchUp",
            False,
            f"not run: a reload catches up no fire ({why}; the fire is within its "
            f"{deadline:g} s); its first fire is its next one after the apply{ran}",
            fire,
        ),
        ApplyEffect(
            "start",
            "catchUp",
            False,
            "not run: a new or changed job starts anew at a start too (only an unchanged "
            "job's fires missed while its daemon was down are caught up)",
            fire,
        ),
    ]


def _fact_effects(
    old: Job | None, new: Job | None, facts: JobFacts | None, *, workflow: bool = False
) -> list[ApplyEffect]:
    """What a reload does to what the daemon has going for the job."""
    if facts is None or old is None:
        return []
    out: list[ApplyEffect] = []
    if facts.retry_pending and (new is None or new.digest != old.digest):
        reason = (
            "removed"
            if new is None
            else "disabled"
            if not new.config.enabled
            else "its definition changed"
        )
        out.append(
            ApplyEffect("reload", "retry", False, f"its pending retry is dropped ({reason})")
        )
    if facts.running:
        runs = f"{facts.running} run{'' if facts.running == 1 else 's'} going"
        what = "workflow run" if workflow else "run"
        out.append(
            ApplyEffect(
                "reload",
                "running",
                False,
                f"{runs}: each finishes under the definition it started with"
                if new is not None
                else f"{runs}: the {what} finishes; the job is gone after it",
                count=facts.running,
            )
        )
    return out


def _job_effects(
    change: JobChange, at: datetime, facts: DaemonFacts | None, *, workflow: bool = False
) -> TimeEffects:
    known = None
    if facts is not None:
        known = (facts.workflows if workflow else facts.jobs).get(change.name)
    api = _api_pause(known)
    before = fires_of(change.old, at, api)
    # an API pause holds across the apply (only a resume lifts it)
    after = fires_of(change.new, at, api)
    effects: list[ApplyEffect] = []
    if change.new is not None:
        effects += _reboot_effects(change.old, change.new, at, known)
        effects += _catch_up_effects(change.old, change.new, at, known)
    effects += _fact_effects(change.old, change.new, known, workflow=workflow)
    return TimeEffects(change.name, before, after, tuple(effects))


def _as_job_change(change: WorkflowChange) -> JobChange:
    old = change.old.job if change.old is not None else None
    new = change.new.job if change.new is not None else None
    return JobChange(change.name, change.kind, old, new)


def _pool_effects(change: PoolChange, facts: DaemonFacts | None) -> tuple[ApplyEffect, ...]:
    if change.kind != "changed" or change.old is None or change.new is None:
        return ()
    if change.new.slots <= change.old.slots or change.new.scope != change.old.scope:
        return ()
    more = change.new.slots - change.old.slots
    if facts is None:
        return (
            ApplyEffect(
                "reload",
                "pool",
                True,
                f"any launches waiting in its queue start now, up to {more} more at once "
                "(how many wait is not in the files)",
            ),
        )
    known = facts.pools.get(change.name)
    if known is None or not known.queued:
        return ()
    free = max(0, change.new.slots - known.in_use)
    starting = min(known.queued, free)
    if not starting:
        return ()
    return (
        ApplyEffect(
            "reload",
            "pool",
            True,
            f"{starting} of the {known.queued} launch{'' if known.queued == 1 else 'es'} "
            f"waiting in its queue start now ({known.in_use} of {change.new.slots} slots held)",
            count=starting,
        ),
    )


def time_effects(plan: Plan, at: datetime, known: DaemonFacts | str | None = None) -> PlanTimes:
    """Every change of ``plan`` in time, from ``at`` (see the module docstring); ``known``:
    what the daemon that would apply it knows, when a daemon is the old side (or why
    that could not be read)."""
    facts = known if isinstance(known, DaemonFacts) else None
    jobs = {change.name: _job_effects(change, at, facts) for change in plan.jobs}
    flows = {
        change.name: _job_effects(_as_job_change(change), at, facts, workflow=True)
        for change in plan.workflows
    }
    pools = {
        change.name: effects for change in plan.pools if (effects := _pool_effects(change, facts))
    }
    unknown: tuple[str, ...] = ()
    if isinstance(known, str):
        unknown = (f"what the daemon knows could not be read ({known})",)
    elif facts is None:
        unknown = (UNKNOWN_FROM_FILES,)
    return PlanTimes(at, jobs, flows, pools, facts.label if facts is not None else None, unknown)


__all__ = [
    "FIRES_SHOWN",
    "ApplyEffect",
    "DaemonFacts",
    "Fire",
    "Fires",
    "JobFacts",
    "LastRun",
    "PlanTimes",
    "PoolFacts",
    "TimeEffects",
    "fires_of",
    "latest_fire_within",
    "time_effects",
]
