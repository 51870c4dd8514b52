"""One explicit way out of a construction cycle: :class:`Later`.

The scheduler is built with its gate, guards, state hooks and listeners, and some
of those call the scheduler back (a cluster slot another node replaces stops the
runs here; the state restore resumes schedules; the run metrics read the job
table).  They are built first, each given a :class:`Later` of the scheduler;
the composition root sets it once the scheduler exists
(:func:`cronstable.daemon.build.build_daemon`).  What takes one types it as a
zero-argument callable (``Callable[[], Scheduler]``), so a test may hand it
``lambda: scheduler``.

A leaf: the standard library only.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Later(Generic[T]):
    """A reference to ``what``, set once after the objects that hold it were built."""

    __slots__ = ("_value", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self._value: T | None = None

    def set(self, value: T) -> None:
        if self._value is not None:
            raise RuntimeError(f"{self.what} was already set")
        self._value = value

    def __call__(self) -> T:
        value = self._value
        if value is None:
            raise RuntimeError(f"{self.what} was used before it was built")
        return value
