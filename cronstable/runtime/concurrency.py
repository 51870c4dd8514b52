"""concurrencyPolicy: may a new run of a job start while others of it are going?

:func:`admit` is the one decision, for every way a run starts (a scheduled fire,
a retry, a start on request): ``Allow`` starts another run, ``Forbid`` refuses
the new one, ``Replace`` stops the runs going (:func:`replace`) and lets the
new run start once they are gone.  A run waiting in its pool's queue is going:
Forbid refuses while it waits, and Replace takes it out of the queue (the new run
takes its place there).  A replaced run is not a failure: it is not reported and
triggers no retry.  What a refusal leads to (a fire counted as
missed, a retry settled, an error to the caller) is the caller's business.

``BufferOne`` and ``BufferAll`` make a fire *wait* instead: it goes into the job's
buffer (:attr:`~cronstable.runtime.table.JobSlot.buffer`) while a run of the job is
going, a retry of it is pending, or fires wait already (first in, first out), and
the scheduler launches the buffer's head once the job is idle again.  The bound is
one fire (BufferOne) or ``bufferLimit`` (BufferAll); a fire past it is refused as
``buffer_full``.  A retry that comes due while a run goes waits at the buffer's
head (it belongs to a fire that came before the fires waiting), outside the bound.
A start on request is never buffered: while a run goes it is refused as under Forbid.
A launch that waits for another node's run before it may start (concurrencyScope
cluster: :attr:`~cronstable.runtime.table.LiveRun.waiting_for`) counts as a buffered
fire, not as a run going.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from cronstable.config.desired import Job
from cronstable.config.models import BUFFER_POLICIES
from cronstable.ports import LaunchKind
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
    buffer: bool = False
    """BufferOne or BufferAll, and the job is busy: the new launch waits in its buffer."""
    full: bool = False
    """BufferOne or BufferAll, and the buffer is at its bound: the fire is refused
    (``forbidden`` is set too)."""
    buffered: int = 0
    """Fires waiting in the job's buffer (BufferOne, BufferAll) when it was asked."""


FREE = Admission(0)
"""The answer when no run of the job is going: start at once."""


def admit(slot: JobSlot, kind: LaunchKind = "fire") -> Admission:
    """Whether a new run of ``slot``'s job, launched as ``kind``, may start now; under
    Replace, the runs going are told to stop first; under BufferOne and BufferAll a fire
    (or a retry) may have to wait in the job's buffer."""
    policy = slot.job.config.concurrency_policy
    if policy in BUFFER_POLICIES:
        return _buffering(slot, kind)
    if not slot.running:
        return FREE  # the common case, on every fire: nothing to look at
    active = slot.active()
    if not active:
        return FREE
    if policy == "Forbid":
        return Admission(len(active), forbidden=True)
    if policy == "Replace":
        return Admission(len(active), replaced=len(active), waits=replace(slot, active))
    return Admission(len(active))  # Allow


def buffer_bound(job: Job) -> int:
    """How many fires may wait in ``job``'s buffer (BufferOne: one)."""
    return 1 if job.config.concurrency_policy == "BufferOne" else job.config.buffer_limit


def buffered(slot: JobSlot) -> int:
    """The fires waiting for ``slot``'s runs: its buffer, and the launches that wait for
    another node's run (concurrencyScope cluster)."""
    return len(slot.buffer) + sum(1 for live in slot.running if live.waiting_for is not None)


def retry_pending(slot: JobSlot) -> bool:
    """Whether a retry of ``slot``'s job waits for its back-off to pass."""
    retry = slot.retry
    return bool(retry and retry.task and not retry.task.done())


def _buffering(slot: JobSlot, kind: LaunchKind) -> Admission:
    """BufferOne and BufferAll (see the module docstring)."""
    going = len(slot.active())
    if kind == "retry":
        return FREE if not going else Admission(going, buffer=True, buffered=buffered(slot))
    if kind not in ("fire", "reboot"):
        # a start on request (or a backfill, which waits by itself) is never buffered
        return FREE if not going else Admission(going, forbidden=True)
    held = buffered(slot)
    if not going and not held and not retry_pending(slot):
        return FREE
    if held >= buffer_bound(slot.job):
        return Admission(going, forbidden=True, full=True, buffered=held)
    return Admission(going, buffer=True, buffered=held)


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
