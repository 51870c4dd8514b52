"""Leadership: which node of a cluster may start ``Leader`` jobs now.

One base class, one module per backend (:mod:`.etcd`, :mod:`.filesystem`,
:mod:`.kubernetes`),
chosen by :mod:`.factory`.  A backend implements one *round* with its store —
renew this node's lease, keep its membership record, campaign for (or keep)
the leader record, read the members — and the base runs the rounds, keeps
what the last one saw and decides how long that stays true.

Safety rests on one rule: a round that began at monotonic time ``t`` proves
the node's lease lasts at least until ``t + ttl`` in the store (the store
renews it no earlier than the request was sent), so the node trusts what the
round saw until ``t + ttl - margin`` (:attr:`Leadership.margin`) and not a
moment longer.  Another node can win only once the store has let the lease
expire, so a leader that stops renewing stops starting ``Leader`` jobs at
least ``margin`` seconds before anyone else can start them.  Past that instant
the node's view is *unknown*: ``Leader`` jobs stand down (fail closed),
``PreferLeader`` jobs run anywhere.

Every change of what a node sees (leader, its own role, unknown) is logged as
one INFO line, so the history of a failover can be read on every node.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

MIN_MARGIN = 0.5
"""Fewest seconds a node stops trusting its lease before the store can expire it."""
TAKEOVER_SLACK = 0.02
"""Seconds a contender's round lands after the instant the leader record may be taken."""


class LeadershipError(Exception):
    """The store cannot be used now (unreachable, refused, misconfigured); says why."""


@dataclass(frozen=True, slots=True)
class Member:
    """A live node, as its membership record in the store says."""

    name: str
    instance: str
    """Random id of the daemon process (a restart gets a new one)."""
    job_set_id: str
    """The job-set id of the revision that node applied."""
    revision: str = ""
    """The revision that node applied (its source's id: a commit sha, an etcd revision);
    empty from a daemon that does not write it."""
    seen: float | None = None
    """Wall time (seconds since the epoch) of the member's last round, as its record says;
    None when the record does not say."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What one successful round with the store saw."""

    leader: str | None
    """Node name of the leader record's holder; None when nobody holds it."""
    fence: int | None
    """This node's fencing token while it holds the leader record, else None.  It
    only grows from one holder to the next (etcd: the record's create revision;
    filesystem: a counter in the lock file; kubernetes: the Lease's leaseTransitions)."""
    members: tuple[Member, ...]
    duplicate: bool = False
    """Another live daemon uses this node's name: both stand ``Leader`` jobs down."""


@dataclass(slots=True)
class LeadershipStats:
    """Counters that outlive a backend swap (the metrics read them)."""

    transitions: int = 0
    """Times this node became or stopped being the leader."""
    renew_failures: int = 0
    """Rounds with the store that failed."""


@dataclass(slots=True)
class _View:
    observation: Observation | None = None
    valid_until: float = 0.0
    """Monotonic time until which :attr:`observation` may be trusted."""
    unknown_reason: str = "no round with the store yet"
    extra: dict[str, object] = field(default_factory=dict)


class Leadership(ABC):
    """The leadership of one node (``node_name``) in one cluster.

    ``ttl``: seconds of the node's lease in the store.  Rounds run every
    :attr:`interval` (a quarter of it).  ``on_change`` is called (with no
    argument) after every change of :meth:`is_leader`, :meth:`leader` or
    :meth:`known`.  ``stats`` is shared across backends for metrics.
    """

    backend = "?"

    def __init__(
        self,
        node_name: str,
        *,
        ttl: float,
        instance: str | None = None,
        stats: LeadershipStats | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_name = node_name
        self.ttl = float(ttl)
        self.instance = instance or uuid.uuid4().hex[:16]
        self.stats = stats if stats is not None else LeadershipStats()
        self.monotonic = monotonic
        self.margin = max(MIN_MARGIN, self.ttl * 0.25)
        self.interval = self.ttl / 4
        self.job_set_id = ""
        """The applied revision's job-set id, kept in this node's membership record."""
        self.revision = ""
        """The applied revision, kept in this node's membership record (the fleet view)."""
        self.on_change: Callable[[], None] | None = None
        self._view = _View()
        self._task: asyncio.Task[None] | None = None
        self._last_said: tuple[object, ...] | None = None
        self._failing = False
        self._stopped = False
        self._duplicate_since: float | None = None
        self._duplicate_said = False

    # ------------------------------------------------------------ what a backend does

    @abstractmethod
    async def check(self) -> None:
        """Reach the store once (prepare: a revision naming an unusable store is rejected).

        Raises :class:`LeadershipError` saying what is wrong."""

    @abstractmethod
    async def round(self) -> Observation:
        """Renew the lease, keep the membership record, campaign, read the members.

        Called every :attr:`interval`; raises :class:`LeadershipError`."""

    @abstractmethod
    async def release(self) -> None:
        """Give up the leader and membership records now, so another node takes over at
        once (best effort: the lease's expiry frees them anyway)."""

    async def close(self) -> None:
        """Free what the backend holds open (connections)."""
        return None

    keeps_reboot_ran = False
    """Whether the store keeps an @reboot ran-set (:meth:`claim_reboot`): the kubernetes
    backend, on its leader Lease.  The others leave it to a shared state store."""

    async def claim_reboot(self, job: str, digest: str, scope: Collection[str]) -> str | None:
        """Record that the leader runs the @reboot job ``job`` (definition ``digest``) now:
        None when it may run, else the node that ran that definition before.  ``scope``:
        the @reboot ``Leader`` jobs of the applied revision (the set keeps those only).
        Raises :class:`LeadershipError`; a backend without a ran-set lets every run go."""
        return None

    # ------------------------------------------------------------ life

    def start(self) -> None:
        """Run rounds in the background until :meth:`stop` (in the running loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._rounds(), name=f"leadership-{self.backend}")

    async def stop(self) -> None:
        """Stop the rounds, release leadership (bounded by the ttl) and close."""
        if self._stopped:
            return
        self._stopped = True
        task, self._task = self._task, None
        if task is None:  # never started (its store never answered): nothing to release
            self._view = _View(unknown_reason="stopped")
            await self.close()
            return
        if task is not None:
            task.cancel()
            # Python 3.11's wait_for can swallow a cancel that lands as the round ends:
            # the loop also checks _stopped, and the wait is bounded
            await asyncio.wait([task], timeout=self.ttl)
            if not task.done():
                logger.warning("Cluster: the rounds did not stop within %s s", self.ttl)
            elif not task.cancelled() and task.exception() is not None:
                logger.error("Cluster: the rounds ended with %r", task.exception())
        was_leader = self.is_leader()
        self._view = _View(unknown_reason="stopped")
        try:
            await asyncio.wait_for(self.release(), timeout=self.ttl)
            if was_leader:
                logger.info("Cluster: node %s released the leadership", self.node_name)
        except (LeadershipError, TimeoutError) as exc:
            logger.warning(
                "Cluster: could not release the leadership (%s); it ends with the lease", exc
            )
        finally:
            await self.close()
        self._changed()

    async def _rounds(self) -> None:
        while not self._stopped:
            began = self.monotonic()
            try:
                observation = await asyncio.wait_for(self.round(), timeout=self.ttl - self.margin)
            except (LeadershipError, TimeoutError) as exc:
                self.stats.renew_failures += 1
                reason = str(exc) or "the store did not answer in time"
                if not self._failing:
                    logger.warning(
                        "Cluster: a round with the %s store failed: %s", self.backend, reason
                    )
                self._failing = True
                self._view.unknown_reason = f"the {self.backend} store: {reason}"
            except Exception:
                self.stats.renew_failures += 1
                logger.exception("Cluster: a round failed unexpectedly; please report this")
            else:
                if self._failing:
                    logger.info("Cluster: the %s store answers again", self.backend)
                self._failing = False
                self._view = _View(observation, began + self.ttl - self.margin)
                self._judge_duplicate(observation.duplicate)
            self._changed()
            elapsed = self.monotonic() - began
            wait = self.interval - elapsed
            takeover = self.takeover_in()
            if takeover is not None:  # be there when the leader's record may be taken
                wait = min(wait, takeover - elapsed + TAKEOVER_SLACK)
            await asyncio.sleep(max(0.0, wait))

    def takeover_in(self) -> float | None:
        """Seconds from the start of the last round until another node's leader record may
        be taken over, when the backend knows (it judges expiry itself); None otherwise."""
        return None

    def _judge_duplicate(self, duplicate: bool) -> None:
        """A record of a crashed previous instance expires within a ttl: a name still
        taken after longer than that is a second live daemon (ERROR, once)."""
        now = self.monotonic()
        if not duplicate:
            self._duplicate_since = None
            self._duplicate_said = False
            return
        if self._duplicate_since is None:
            self._duplicate_since = now
        elif not self._duplicate_said and now - self._duplicate_since > self.ttl + self.margin:
            self._duplicate_said = True
            logger.error(
                "Cluster: another live daemon also calls itself %r: Leader jobs stand down "
                "on both until one is renamed (--node-name) or stopped",
                self.node_name,
            )

    # ------------------------------------------------------------ what the gate reads

    def known(self) -> bool:
        """Whether the last round is recent enough to be trusted."""
        return self._view.observation is not None and self.monotonic() < self._view.valid_until

    def _seen(self) -> Observation | None:
        return self._view.observation if self.known() else None

    def is_leader(self) -> bool:
        """This node holds the leader record, and knows it still does."""
        seen = self._seen()
        return seen is not None and seen.fence is not None and not seen.duplicate

    def leader(self) -> str | None:
        """The leader's node name, when known."""
        seen = self._seen()
        return seen.leader if seen is not None else None

    def fence(self) -> int | None:
        """This node's fencing token while it leads."""
        seen = self._seen()
        return seen.fence if seen is not None and self.is_leader() else None

    def conflict(self) -> bool:
        """Another live daemon uses this node's name."""
        seen = self._seen()
        return seen is not None and seen.duplicate

    def members(self) -> tuple[Member, ...]:
        """The live members (this node included), when known; else none."""
        seen = self._seen()
        return seen.members if seen is not None else ()

    def lease_valid_for(self) -> float | None:
        """Seconds this node still trusts its lease; None when it does not."""
        if not self.known():
            return None
        return max(0.0, self._view.valid_until - self.monotonic())

    def unknown_reason(self) -> str | None:
        """Why the leadership is unknown; None when it is known."""
        if self.known():
            return None
        if self._view.observation is not None:
            return f"no round with the {self.backend} store succeeded within the lease"
        return self._view.unknown_reason

    def _changed(self) -> None:
        """Log one INFO line when what this node sees changed, and tell ``on_change``."""
        said = (self.known(), self.is_leader(), self.leader(), self.conflict())
        if said == self._last_said:
            return
        before = self._last_said
        self._last_said = said
        known, leads, leader, duplicate = said
        if before is not None and before[1] != leads:
            self.stats.transitions += 1
        if duplicate and (before is None or not before[3]):
            logger.info(
                "Cluster: another daemon's record holds the name %r: Leader jobs stand down "
                "until it expires (a previous instance of this node) or it stops",
                self.node_name,
            )
        if not known:
            if before is not None and before[0]:
                logger.info(
                    "Cluster: leadership unknown on node %s (%s): Leader jobs stand down",
                    self.node_name,
                    self.unknown_reason(),
                )
        elif leads:
            logger.info(
                "Cluster: node %s is now the leader (fence %s)", self.node_name, self.fence()
            )
        elif leader is None:
            logger.info("Cluster: no node leads now (node %s campaigns)", self.node_name)
        else:
            logger.info("Cluster: node %s leads; node %s follows", leader, self.node_name)
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:
                logger.exception("Cluster: a leadership listener failed")
