"""The event loop the daemon runs on, and its default thread pool.

* ``--loop auto`` (the default) runs on uvloop when it can be imported (``pip install
  cronstable[speedups]``), else on the standard library's loop; ``--loop uvloop``
  insists (a usage error without it), ``--loop asyncio`` declines it.
* The loop's default executor (what ``asyncio.to_thread`` and ``run_in_executor(None,
  …)`` use: configuration loads, users and groups, file-backed secrets, metrics
  rendering) is a pool of :func:`default_executor_workers` threads unless
  ``--executor-workers`` says otherwise, its threads named ``cronstable-worker_N``
  (what ``top -H`` and ``py-spy`` show).  The long waits (git fetches, a stream
  source's reads, output mirroring) have threads of their own and never hold it.
* The cyclic garbage collector's youngest generation is collected every
  :data:`GC_YOUNG` net allocations of container objects, not 700
  (:func:`tune_collector`).
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

LoopChoice = Literal["auto", "asyncio", "uvloop"]
LOOP_CHOICES: tuple[LoopChoice, ...] = ("auto", "asyncio", "uvloop")
WORKER_THREAD_PREFIX = "cronstable-worker"
MAX_DEFAULT_WORKERS = 32
GC_YOUNG = 10_000
"""The daemon's threshold of the collector's youngest generation (the interpreter's is 700).

A run in flight holds a few hundred container objects (its task, futures, pipes'
transports, records), all alive until its end and then freed by reference counting:
in a burst of 500 starts the collector ran every few runs, walking them and moving them
into the older generations, whose collections walked them again (measured, CPU a
burst: 700, 290 ms; 10,000, 270 ms, two young collections and one of the middle
generation, 15 ms in all; 50,000, 260 ms, but a young collection then walks up to
50,000 objects, a pause of 13 ms).  A garbage cycle waits at most this many allocations
longer to be freed."""

_T = TypeVar("_T")


class LoopUnavailable(Exception):
    """``--loop uvloop`` without uvloop installed."""


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_executor_workers(cpus: int | None = None) -> int:
    """The default pool's size: the CPUs plus 4, at most 32 (the standard library's own
    rule for a pool of mostly waiting threads), counted from the CPUs this process
    may use rather than the machine's."""
    return min(MAX_DEFAULT_WORKERS, (available_cpus() if cpus is None else cpus) + 4)


@dataclass(frozen=True, slots=True)
class EventLoopPlan:
    """What :func:`run` runs on: a loop factory (None: asyncio's own) and its name."""

    name: str
    """``asyncio`` or ``uvloop X.Y.Z``, for the start-up log line."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None
    chosen: LoopChoice
    """The ``--loop`` choice that led here."""


def plan_loop(choice: LoopChoice = "auto") -> EventLoopPlan:
    """The loop ``choice`` means here; raises :class:`LoopUnavailable` for ``uvloop``
    without it."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise LoopUnavailable(
                    "--loop uvloop: uvloop is not installed (pip install 'cronstable[speedups]')"
                ) from None
        else:
            version = getattr(uvloop, "__version__", "")
            return EventLoopPlan(f"uvloop {version}".strip(), uvloop.new_event_loop, choice)
    return EventLoopPlan("asyncio", None, choice)


def tune_collector(young: int = GC_YOUNG) -> None:
    """Collect the youngest generation every ``young`` net allocations (the older
    generations' thresholds, counted in younger collections, stay as they are)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)


def run(
    main: Coroutine[Any, Any, _T],
    loop: EventLoopPlan,
    *,
    workers: int,
    on_start: Callable[[], None] | None = None,
) -> _T:
    """Run ``main`` to its end on ``loop`` with a default pool of ``workers`` named
    threads (shut down, waited for, when ``main`` ends); ``on_start`` is called on the
    loop first (the start-up log line)."""

    async def started() -> _T:
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix=WORKER_THREAD_PREFIX)
        )
        if on_start is not None:
            on_start()
        return await main

    with asyncio.Runner(loop_factory=loop.factory) as runner:
        return runner.run(started())
