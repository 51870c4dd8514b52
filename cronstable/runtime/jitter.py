"""``jitter``: how long a scheduled fire waits before it starts.

The offset of a fire is a pure function of the job's name, the fire's time and the
job's next fire: a SHA-256 of ``"<name>\\n<fire in UTC>"`` read as a fraction of
2⁶⁴, times the spread, where the spread is ``jitter`` or, when the next fire comes
sooner, the time until it (so a fire never starts at or after the next one).  Every
node computes the same offset for the same fire, so a leadership change moves no
fire; two fires of one job get unrelated offsets, and two jobs firing at the same
instant get different ones, which is the point: a fleet of ``0 * * * *`` jobs no
longer starts in the same second.

The offset is floored to the microsecond, so it stays strictly below its spread.
Only scheduled fires wait: a catch-up, a retry, a backfill and a start on request
start when they are asked to.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta

from cronstable.ports import utc_text

_BITS = 53
"""Bits of the hash a fraction keeps: as many as a float holds exactly, so the largest
fraction stays below 1."""


def fraction(name: str, fire: datetime) -> float:
    """A number in [0, 1) fixed by ``name`` and ``fire`` (the same on every node)."""
    digest = hashlib.sha256(f"{name}\n{utc_text(fire)}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") >> (64 - _BITS)) / float(2**_BITS)


def offset(
    name: str, fire: datetime, following: datetime | None, jitter: float | None
) -> timedelta:
    """How long the fire of job ``name`` at ``fire`` waits (0 without ``jitter``), below
    both ``jitter`` seconds and the time until the job's ``following`` fire."""
    if not jitter:
        return timedelta(0)
    spread = jitter
    if following is not None:
        spread = min(spread, (following - fire).total_seconds())
    micros = math.ceil(spread * 1_000_000) - 1  # the longest wait below the spread
    if micros <= 0:
        return timedelta(0)
    return timedelta(microseconds=min(micros, int(fraction(name, fire) * spread * 1_000_000)))
