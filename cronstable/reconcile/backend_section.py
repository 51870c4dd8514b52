"""One Applier section over a backend that talks to a store: :class:`BackendSection`.

The cluster leadership (:mod:`cronstable.cluster.section`), the cluster slots
(:mod:`cronstable.cluster.slot_section`) and durable state
(:mod:`cronstable.state.section`) each keep one backend, chosen by a part of the
revision, and each handles it the same way; that way is written here once:

* **prepare**: the part of the revision the section reads (:meth:`~BackendSection.wanted`)
  unchanged, or the section closing: :data:`KEEP`, the backend in use stays.  Gone (or
  asking for no backend): :data:`REMOVE`.  Changed only in settings the running backend
  takes as they are (:meth:`~BackendSection.adjusts`): :data:`ADJUST`.  Otherwise the
  backend is built (settings it cannot use reject the revision, naming the key) and its
  store reached once (:meth:`~BackendSection.reach`, bounded).  A store that *refuses*
  (:func:`cronstable.store_errors.fault_of`) rejects the revision; one that does not
  answer does not: :class:`Unanswered`, to be committed connecting.
* **commit**: the new backend replaces the old (:meth:`~BackendSection.swap`); the old
  one and its :class:`~cronstable.store_link.StoreLink` are retired in the background,
  in tasks the section owns.  A backend whose store answered is linked *up* and started
  (:meth:`~BackendSection.started`); one whose store did not is linked *connecting*
  (:meth:`~BackendSection.waits`), and the link tries the store again with capped
  back-off until its first answer (:meth:`~BackendSection.answered`), with no new
  revision.  Commits do not fail.
* **discard**: the prepared backend is closed.
* **close** (the daemon stops): the link stops trying, the backend in use is stopped
  (:meth:`~BackendSection.shut`) and the retirements still going are awaited.

A section says what is its own through the hooks; the order of the calls, the link and
the retiring tasks are this class's.  Type parameters: ``C`` the part of the revision
compared to tell an unchanged section, ``B`` the backend, ``R`` what reaching its store
gives (the records a restore needs; None for a plain check).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar

from cronstable import ports
from cronstable.config import ConfigError, DesiredState
from cronstable.errors import KeyPath
from cronstable.reconcile.plan import Plan
from cronstable.redact import redact
from cronstable.store_errors import fault_of
from cronstable.store_link import StoreLink
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

P = TypeVar("P")
C = TypeVar("C")
R = TypeVar("R")


class Backend(Protocol):
    """What the section needs of any backend: its kind and a way to close it."""

    @property
    def backend(self) -> str:
        """``etcd`` or ``filesystem``."""
        ...

    async def close(self) -> None: ...


B = TypeVar("B", bound=Backend)


@dataclass(frozen=True, slots=True)
class Keep:
    """prepare's answer for an unchanged section (or a closing one): the backend stays."""


@dataclass(frozen=True, slots=True)
class Remove:
    """prepare's answer when the revision asks for no backend: none from now on."""


@dataclass(frozen=True, slots=True)
class Adjust:
    """prepare's answer when only settings the running backend takes as they are
    changed: it stays, and :meth:`BackendSection.adjust` applies them."""


KEEP = Keep()
REMOVE = Remove()
ADJUST = Adjust()


@dataclass(frozen=True, slots=True)
class Reach(Generic[R]):
    """How to reach a backend's store: ``probe``, each attempt bounded by ``timeout``
    seconds; a link that waits for the store tries again at most ``cap`` seconds apart."""

    probe: Callable[[], Awaitable[R]]
    timeout: float
    cap: float


@dataclass(frozen=True, slots=True)
class Ready(Generic[B, R]):
    """prepare's answer when the backend's store answered (``result``: what it gave)."""

    backend: B
    result: R


@dataclass(frozen=True, slots=True)
class Unanswered(Generic[B, R]):
    """prepare's answer when the store did not answer (``error``): committed connecting."""

    backend: B
    error: BaseException
    reach: Reach[R]


Prepared: TypeAlias = Keep | Remove | Adjust | Ready[B, R] | Unanswered[B, R]
Retire = Callable[[], Awaitable[None]]
"""How to stop a replaced backend (run in the background once its link is closed)."""


class BackendSection(ports.Section["Prepared[B, R]"], ABC, Generic[C, B, R]):
    """See the module docstring.  A subclass sets the class attributes and the hooks."""

    name: str
    """The Applier section's name (``cluster``, ``cluster-slots``, ``state``)."""
    store: ClassVar[str]
    """The store's name in ``/status`` and the metrics (``cluster``, ``slots``, ``state``)."""
    title: ClassVar[str]
    """What starts the section's log lines (``Cluster``, ``Cluster slots``, ``State``)."""
    build_errors: ClassVar[tuple[type[Exception], ...]] = (ValueError,)
    """What :meth:`build` raises for settings it cannot use (the revision is rejected)."""
    check_errors: ClassVar[tuple[type[Exception], ...]] = ()
    """What reaching the store raises (besides a timeout): refused or unreachable."""
    refused_for: ClassVar[str] = ""
    """Said after "cannot use the etcd store" when a store refuses (what it is for)."""

    def __init__(self) -> None:
        self.config: C | None = None
        """The part of the applied revision this section reads."""
        self.in_use: B | None = None
        """The backend in use (None: none)."""
        self.link: StoreLink[Any] | None = None
        """The store of the backend in use: up, or connecting while it does not answer."""
        self._closing = False
        self._retiring = TaskSet(f"the {self.name} section")
        """Replaced backends being stopped."""

    # ------------------------------------------------------------ the hooks

    @abstractmethod
    def wanted(self, desired: DesiredState) -> C | None:
        """The part of ``desired`` this section reads (None: the section is absent)."""

    def uses_backend(self, config: C) -> bool:
        """Whether ``config`` asks for a backend at all."""
        return True

    def adjusts(self, old: C, new: C) -> bool:
        """Whether the backend in use for ``old`` serves ``new`` as it is."""
        return False

    @abstractmethod
    def where(self, config: C) -> KeyPath:
        """The key a problem with the backend or its store is reported at."""

    @abstractmethod
    def build(self, config: C, desired: DesiredState) -> B:
        """The backend ``config`` names, not started; raises one of :attr:`build_errors`."""

    @abstractmethod
    def reach(self, backend: B, config: C, desired: DesiredState) -> Reach[R]:
        """How to reach ``backend``'s store, at prepare and while its link waits."""

    @abstractmethod
    def swap(
        self, new: B | None, old: B | None, desired: DesiredState, *, waiting: str | None
    ) -> Retire | None:
        """Use ``new`` instead of ``old`` from now on (``waiting``: why ``new``'s store has
        not answered yet); how to stop ``old`` (None: nothing to stop)."""

    def started(self, backend: B, result: R, desired: DesiredState) -> None:
        """``backend`` is in use and its store answered at prepare (``result``)."""

    def waits(self, backend: B, link: StoreLink[R], reach: Reach[R], desired: DesiredState) -> None:
        """``backend`` is in use but its store has not answered; ``link`` will try it."""

    def answered(self, backend: B, result: R) -> None:
        """The store of ``backend``, still in use, answered for the first time."""

    def adjust(self, desired: DesiredState) -> None:
        """Apply the settings :meth:`adjusts` let the running backend take."""

    def committed(self, desired: DesiredState) -> None:
        """Every commit ends here (an unchanged section's too)."""

    async def shut(self) -> None:
        """Stop the backend in use (the daemon is stopping)."""
        if self.in_use is not None:
            await self.in_use.close()

    # ------------------------------------------------------------ the section

    def affected(self, plan: Plan) -> bool:
        return True  # prepare tells an unchanged section apart

    async def prepare(self, desired: DesiredState) -> Prepared[B, R]:
        wanted = self.wanted(desired)
        if self._closing or wanted == self.config:
            return KEEP
        if wanted is None or not self.uses_backend(wanted):
            return REMOVE
        if self.config is not None and self.adjusts(self.config, wanted):
            return ADJUST
        where = self.where(wanted)
        try:
            backend = self.build(wanted, desired)
        except self.build_errors as exc:
            raise ConfigError([desired.problem(where, redact(str(exc)))]) from exc
        reach = self.reach(backend, wanted, desired)
        failures: tuple[type[Exception], ...] = (*self.check_errors, TimeoutError)
        try:
            result = await asyncio.wait_for(reach.probe(), timeout=reach.timeout)
        except failures as exc:
            if fault_of(exc) == "unreachable":
                return Unanswered(backend, exc, reach)
            await backend.close()
            reason = redact(str(exc) or "no answer in time")
            problem = f"cannot use the {backend.backend} store{self.refused_for}: {reason}"
            raise ConfigError([desired.problem(where, problem)]) from exc
        return Ready(backend, result)

    def commit(self, prepared: Prepared[B, R], desired: DesiredState) -> None:
        if not isinstance(prepared, Keep):
            self.config = self.wanted(desired)
            if isinstance(prepared, Adjust):
                self.adjust(desired)
            else:
                self._replace(prepared, desired)
        self.committed(desired)

    def _replace(
        self, prepared: Remove | Ready[B, R] | Unanswered[B, R], desired: DesiredState
    ) -> None:
        new = None if isinstance(prepared, Remove) else prepared.backend
        waiting: StoreLink[R] | None = None
        if isinstance(prepared, Unanswered):
            backend, reach = prepared.backend, prepared.reach
            waiting = StoreLink.waiting(
                self.store,
                backend.backend,
                title=self.title,
                error=prepared.error,
                probe=reach.probe,
                on_up=lambda result: self._answered(backend, result),
                timeout=reach.timeout,
                cap=reach.cap,
            )
        old, self.in_use = self.in_use, new
        old_link, self.link = self.link, None
        retire = self.swap(
            new, old, desired, waiting=waiting.last_error if waiting is not None else None
        )
        if retire is not None or old_link is not None:
            self._retiring.start(self._retire(old_link, retire), name=f"{self.name}-retire")
        if isinstance(prepared, Ready):
            self.link = StoreLink.up(self.store, prepared.backend.backend, title=self.title)
            self.started(prepared.backend, prepared.result, desired)
        elif isinstance(prepared, Unanswered) and waiting is not None:
            self.link = waiting
            self.waits(prepared.backend, waiting, prepared.reach, desired)
            waiting.start()

    def _answered(self, backend: B, result: R) -> None:
        if backend is self.in_use and not self._closing:
            self.answered(backend, result)

    async def _retire(self, link: StoreLink[Any] | None, retire: Retire | None) -> None:
        if link is not None:
            await link.close()
        if retire is not None:
            await retire()

    async def discard(self, prepared: Prepared[B, R]) -> None:
        if isinstance(prepared, Ready | Unanswered):
            await prepared.backend.close()

    async def stop_using(self) -> None:
        """Stop trying the store and stop the backend in use; revisions applied from now
        on keep it stopped."""
        self._closing = True
        if self.link is not None:
            await self.link.close()  # a store that answers now must not start it
        await self.shut()

    async def close(self) -> None:
        await self.stop_using()
        await self._retiring.wait()
