"""concurrencyPolicy: may a new run of a job start while others of it are going?

:func:`admit` is the one decision, for every way a run starts (a scheduled fire,
a retry, a start on request): ``Allow`` starts another run, ``Forbid`` refuses
the new one, ``Replace`` stops the runs going (:func:`replace`) and lets the
new run start once they are gone.  A run waiting in its pool's queue is going:
Forbid refuses while it waits, and Replace takes it out of the queue (the new run
takes its place there).  A replaced run is not a failure: it is not reported and
triggers no retry.  What a refusal leads to (a fire counted as
missed, a retry settled, an error to the caller) is the caller's business.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from cronstable.runtime.table import JobSlot, LiveRun

# the scheduler's own lines: a logging section quiets them by its name (docs/configuration.md)
logger = logging.getLogger("cronstable.runtime.scheduler")


@dataclass(frozen=True, slots=True)
class Admission:
    """concurrencyPolicy's answer for one new run."""

    going: int
    """Runs of the job going (not being replaced already) when it was asked."""
    forbidden: bool = False
    """Forbid, and ``going`` runs are going: the new run does not start."""
    replaced: int = 0
    """Runs Replace stopped for the new one."""
    waits: tuple[asyncio.Future[None], ...] = ()
    """What the new run waits for before it starts: under Replace, every run of the job
    still dying (an Allow run starts at once)."""


FREE = Admission(0)
"""The answer when no run of the job is going: start at once."""


def admit(slot: JobSlot) -> Admission:
    """Whether a new run of ``slot``'s job may start now; under Replace, the runs going
    are told to stop first."""
    if not slot.running:
        return FREE  # the common case, on every fire: nothing to look at
    active = slot.active()
    if not active:
        return FREE
    policy = slot.job.config.concurrency_policy
    if policy == "Forbid":
        return Admission(len(active), forbidden=True)
    if policy == "Replace":
        return Admission(len(active), replaced=len(active), waits=replace(slot, active))
    return Admission(len(active))  # Allow


def replace(
    slot: JobSlot, runs: Sequence[LiveRun], why: str = "concurrencyPolicy Replace"
) -> tuple[asyncio.Future[None], ...]:
    """Stop ``runs`` as replaced; what a new run must wait for (every run of the job
    still dying)."""
    for live in runs:
        live.replaced = True
        if live.ticket is not None:
            live.ticket.withdraw()  # waiting in its pool's queue: it leaves it
        logger.info(
            "Job %s: stopping the run scheduled at %s (%s)",
            slot.job.name,
            live.scheduled_time.isoformat(),
            why,
            extra={"job": slot.job.name},
        )
        live.stopping = asyncio.ensure_future(live.run.cancel())
    return tuple(live.stopping for live in slot.running if live.stopping is not None)


def runs_going(count: int) -> str:
    """``1 run`` or ``3 runs`` (log lines and refusals)."""
    return f"{count} run{'' if count == 1 else 's'}"
