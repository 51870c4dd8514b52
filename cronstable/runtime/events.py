"""Live events for the HTTP API's ``GET /events``: runs started and ended, revisions.

:class:`EventHub` hears the scheduler (it is a :class:`RunListener`) and the
applier (it observes every :class:`RevisionRecord`), and hands each event to
every subscriber's bounded queue without ever waiting: a subscriber whose queue
is full is dropped (its stream ends, the client reconnects and reloads), so a
slow client can never hold up the daemon.  The number of subscribers is bounded
too.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cronstable.ports import EventData, RunEnded, RunOutcome, RunResult, RunStart
from cronstable.reconcile.apply import RevisionRecord

QUEUE_SIZE = 1024
"""Events a subscriber may have waiting before it is dropped."""
MAX_SUBSCRIBERS = 64


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    """``run-started``, ``run-ended``, ``revision-applied`` or ``revision-rejected``."""
    data: EventData
    """What happened, as a read model (the web layer writes it as JSON)."""


@dataclass(eq=False, slots=True)
class Subscription:
    """One client's queue; ``next()`` gives None once the subscription is closed."""

    queue: asyncio.Queue[Event | None] = field(
        default_factory=lambda: asyncio.Queue(QUEUE_SIZE + 1)
    )
    dropped: bool = False
    """Closed because the client did not keep up (rather than by the daemon or itself)."""
    closed: bool = False

    def _offer(self, event: Event) -> bool:
        """Queue ``event``; False (and closed) when the queue was full."""
        if self.closed:
            return False
        if self.queue.qsize() >= QUEUE_SIZE:
            self.dropped = True
            self._close()
            return False
        self.queue.put_nowait(event)
        return True

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)  # the one spare slot: wakes the reader

    async def next(self) -> Event | None:
        """The next event; None once the subscription is closed."""
        return await self.queue.get()


class EventHub:
    def __init__(self, max_subscribers: int = MAX_SUBSCRIBERS) -> None:
        self.max_subscribers = max_subscribers
        self._subscribers: set[Subscription] = set()

    def subscribe(self) -> Subscription | None:
        """A new subscription; None when :attr:`max_subscribers` are open already."""
        if len(self._subscribers) >= self.max_subscribers:
            return None
        subscription = Subscription()
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)
        subscription._close()

    def close(self) -> None:
        """End every subscription (the daemon or its web server is stopping)."""
        for subscription in list(self._subscribers):
            self.unsubscribe(subscription)

    def publish(self, event: Event) -> None:
        for subscription in list(self._subscribers):
            if not subscription._offer(event):
                self._subscribers.discard(subscription)

    # ------------------------------------------------------------ what it hears

    def run_started(self, run: RunStart) -> None:
        self.publish(Event("run-started", run))

    def run_finished(self, run: RunStart, result: RunResult, outcome: RunOutcome) -> None:
        ended = RunEnded(run, outcome, result.returncode, result.finished_at, result.duration)
        self.publish(Event("run-ended", ended))

    def revision(self, record: RevisionRecord) -> None:
        """An applier attempt: applied and rejected revisions are events, unchanged ones not."""
        if record.outcome not in ("applied", "rejected"):
            return
        self.publish(Event(f"revision-{record.outcome}", record.view()))
