"""A section's link to its store: *up*, or *connecting* while the store does not answer.

A section (cluster, slots, state) whose store is unreachable when a revision is
applied (:func:`cronstable.store_errors.fault_of`) is committed all the same and
waits for it: the link's task tries the store again after about
:data:`RETRY_FIRST` seconds, the delay doubling up to its cap (:data:`RETRY_MAX`,
or the cluster's ``leaseTtl`` when that is shorter: :func:`retry_cap`), each wait
drawn between half and all of the current delay, so nodes started together do not
knock in step.  The first answer hands the probe's result to the section
(``on_up``) and the link is up.  The section owns its link: it closes it when the
store is replaced or the daemon stops, and the task is awaited.

A store that answers with a refusal while the link waits (etcd up again but the
login no longer accepted) does not end the wait: that revision was applied, so
the link keeps trying at its cap and says so (an ERROR once, and in ``lastError``).

What the links know (since when, how many attempts, the last error, redacted) is
what ``/readyz``, ``/status`` and the ``cronstable_store_unreachable`` metrics show
(:class:`StoreLinks`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.ports import StoreView
from cronstable.redact import redact
from cronstable.store_errors import Fault, fault_of

logger = logging.getLogger(__name__)

T = TypeVar("T")
LinkState = Literal["up", "connecting"]

RETRY_FIRST = 1.0
"""Seconds before the first new attempt (then doubled at each further one)."""
RETRY_MAX = 30.0
"""Longest wait between two attempts."""


def retry_cap(lease_ttl: float | None) -> float:
    """The longest wait between two attempts: :data:`RETRY_MAX`, or ``lease_ttl`` (a cluster
    store's) when that is shorter, so a node rejoins within about a lease of its store's
    return; never under :data:`RETRY_FIRST`."""
    if lease_ttl is None:
        return RETRY_MAX
    return max(RETRY_FIRST, min(RETRY_MAX, float(lease_ttl)))


def describe(exc: BaseException) -> str:
    """A store error in words, redacted."""
    return redact(str(exc) or "no answer in time")


class StoreLink(Generic[T]):
    """One section's store (``store``: ``cluster``, ``slots`` or ``state``; ``backend``:
    ``etcd`` or ``filesystem``).  Built up (:meth:`up`) or waiting (:meth:`waiting`);
    ``title`` starts its log lines (``Cluster``, ``State`` …)."""

    def __init__(
        self,
        store: str,
        backend: str,
        *,
        title: str,
        error: BaseException | None = None,
        probe: Callable[[], Awaitable[T]] | None = None,
        on_up: Callable[[T], None] | None = None,
        timeout: float = 10.0,
        cap: float = RETRY_MAX,
        first: float = RETRY_FIRST,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.backend = backend
        self.title = title
        self.timeout = timeout
        self.cap = max(first, cap)
        self.first = first
        self._probe = probe
        self._on_up = on_up
        self._monotonic = monotonic
        self.state: LinkState = "up" if error is None else "connecting"
        self.since = datetime.now(UTC).replace(microsecond=0)
        """When the store answered (up), or when the wait began (connecting)."""
        self._since = monotonic()
        self.attempts = 0 if error is None else 1
        self.last_error: str | None = None if error is None else describe(error)
        self.fault: Fault | None = None if error is None else fault_of(error)
        self._next_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def up(cls, store: str, backend: str, *, title: str) -> StoreLink[Any]:
        """A link to a store that answered when the section was prepared."""
        return cls(store, backend, title=title)

    @classmethod
    def waiting(
        cls,
        store: str,
        backend: str,
        *,
        title: str,
        error: BaseException,
        probe: Callable[[], Awaitable[T]],
        on_up: Callable[[T], None],
        timeout: float,
        cap: float = RETRY_MAX,
        first: float = RETRY_FIRST,
    ) -> StoreLink[T]:
        """A link to a store that did not answer (``error``): :meth:`start` tries ``probe``
        (each attempt bounded by ``timeout``) until it succeeds, then calls ``on_up`` with
        its result."""
        return cls(
            store,
            backend,
            title=title,
            error=error,
            probe=probe,
            on_up=on_up,
            timeout=timeout,
            cap=cap,
            first=first,
        )

    @property
    def connecting(self) -> bool:
        return self.state == "connecting"

    def unreachable_for(self) -> float:
        """Seconds the section has waited for its store; 0 once it answered."""
        return self._monotonic() - self._since if self.connecting else 0.0

    def view(self) -> StoreView:
        """What ``/status`` shows of this store."""
        next_in = None
        if self.connecting and self._next_at is not None:
            next_in = max(0.0, self._next_at - self._monotonic())
        return StoreView(
            backend=self.backend,
            state=self.state,
            since=self.since,
            unreachable_for=self.unreachable_for(),
            attempts=self.attempts,
            last_error=self.last_error,
            fault=self.fault,
            next_attempt_in=next_in,
        )

    # ------------------------------------------------------------ the task

    def start(self) -> None:
        """Try the store in the background until it answers (a waiting link only)."""
        if self.connecting and self._task is None and not self._closed:
            self._task = asyncio.create_task(
                self._retry(), name=f"store-link-{self.store}-{self.backend}"
            )

    def cancel(self) -> None:
        """Stop trying (the task ends soon; :meth:`close` waits for it)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    async def close(self) -> None:
        """Stop trying and wait for the task to end (bounded)."""
        self.cancel()
        task, self._task = self._task, None
        if task is not None:
            # Python 3.11's wait_for can swallow a cancel: the loop checks _closed too
            await asyncio.wait([task], timeout=self.timeout + 1.0)
            if task.done() and not task.cancelled() and task.exception() is not None:
                logger.error("%s: the store link ended with %r", self.title, task.exception())

    async def _retry(self) -> None:
        assert self._probe is not None and self._on_up is not None
        delay = self.first
        while not self._closed:
            wait = delay * random.uniform(0.5, 1.0)
            self._next_at = self._monotonic() + wait
            await asyncio.sleep(wait)
            delay = min(delay * 2, self.cap)
            if self._closed:
                return
            self.attempts += 1
            try:
                result = await asyncio.wait_for(self._probe(), timeout=self.timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure is tried again
                self._failed(exc)
                continue
            if self._closed:
                return
            self._answered()
            try:
                self._on_up(result)
            except Exception:
                logger.exception(
                    "%s: bringing the section up failed; please report this", self.title
                )
            return

    def _failed(self, exc: BaseException) -> None:
        fault = fault_of(exc)
        self.last_error = describe(exc)
        if fault == "refused" and self.fault != "refused":
            logger.error(
                "%s: the %s store answers but refuses (%s); the section stays connecting and "
                "tries again every %g s: fix the store or its settings",
                self.title,
                self.backend,
                self.last_error,
                self.cap,
            )
        else:
            logger.debug(
                "%s: the %s store still does not answer (attempt %d): %s",
                self.title,
                self.backend,
                self.attempts,
                self.last_error,
            )
        self.fault = fault

    def _answered(self) -> None:
        waited = self.unreachable_for()
        self.state = "up"
        self.since = datetime.now(UTC).replace(microsecond=0)
        self._since = self._monotonic()
        self._next_at = None
        self.last_error, self.fault = None, None
        logger.info(
            "%s: the %s store answers after %.0f s (%d attempts)",
            self.title,
            self.backend,
            waited,
            self.attempts,
        )


class StoreLinks:
    """The store links of the daemon's sections, by store (``cluster``, ``slots``,
    ``state``): each name with a callable giving its section's link now (None while the
    section uses no store)."""

    def __init__(self, links: Mapping[str, Callable[[], StoreLink[Any] | None]]) -> None:
        self.links = dict(links)

    def current(self) -> Iterator[tuple[str, StoreLink[Any]]]:
        for name, get in self.links.items():
            link = get()
            if link is not None:
                yield name, link

    def view(self) -> dict[str, StoreView]:
        """What ``/status`` shows: every store in use, by name."""
        return {name: link.view() for name, link in self.current()}

    def collector(self) -> Collector:
        return _StoreCollector(self)


class _StoreCollector(Collector):
    def __init__(self, links: StoreLinks) -> None:
        self.links = links

    def collect(self) -> Iterator[Metric]:
        current = dict(self.links.current())
        unreachable = GaugeMetricFamily(
            "cronstable_store_unreachable",
            "1 while a section waits for its store (it has not answered since the section "
            "was applied: Leader jobs wait, state follows onStoreUnavailable).",
            labels=["store"],
        )
        seconds = GaugeMetricFamily(
            "cronstable_store_unreachable_seconds",
            "Seconds a section has waited for its store; 0 once it answered.",
            labels=["store"],
        )
        for name in self.links.links:
            link = current.get(name)
            unreachable.add_metric([name], int(link is not None and link.connecting))
            seconds.add_metric([name], link.unreachable_for() if link is not None else 0.0)
        yield unreachable
        yield seconds
