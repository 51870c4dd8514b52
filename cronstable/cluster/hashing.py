"""Rendezvous (highest-random-weight) hashing: which member owns a job.

Pure, no I/O.  Every node that sees the same member set picks the same owner
for a job name, and a change of the member set moves only the jobs of the
members that left (to the others) or some jobs to a member that joined — never
a job between two members that both stayed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def score(member: str, key: str) -> int:
    """The weight of ``member`` for ``key``: 64 bits of SHA-256 over both, unambiguously joined."""
    data = f"{len(member)}:{member}\0{key}".encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def owner(key: str, members: Iterable[str]) -> str | None:
    """The member with the highest weight for ``key`` (ties by name); None without members."""
    best: tuple[int, str] | None = None
    for member in members:
        candidate = (score(member, key), member)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]
