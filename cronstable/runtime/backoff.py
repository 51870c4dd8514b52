"""One retry sequence's state: how many retries started, the back-off to the next
(exponential, capped at maximumDelay), and the pending retry's task."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

from cronstable.config.models import Retry


@dataclass(slots=True)
class RetryState:
    """One retry sequence: started by a scheduled fire, ended by success,
    exhaustion, a new fire or the job's removal."""

    maximum_retries: int
    """-1 retries forever."""
    delay: float
    multiplier: float
    maximum_delay: float
    count: int = 0
    """Retries started so far."""
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    cancelled: bool = False
    due: datetime | None = None
    """When the pending retry (``task``) starts, on the scheduler's clock."""
    fire: datetime | None = None
    """The scheduled time of the fire the pending retry retries."""

    @classmethod
    def from_config(cls, retry: Retry) -> RetryState:
        return cls(
            maximum_retries=retry.maximum_retries,
            delay=min(retry.initial_delay, retry.maximum_delay),
            multiplier=retry.backoff_multiplier,
            maximum_delay=retry.maximum_delay,
        )

    @property
    def exhausted(self) -> bool:
        return self.maximum_retries != -1 and self.count >= self.maximum_retries

    def next_delay(self) -> float:
        """The delay before the next retry; advances the sequence."""
        delay = self.delay
        self.delay = min(self.delay * self.multiplier, self.maximum_delay)
        self.count += 1
        return delay

    def cancel(self) -> None:
        self.cancelled = True
        if self.task is not None and not self.task.done():
            self.task.cancel()
