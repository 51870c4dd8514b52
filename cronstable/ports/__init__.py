"""The leaf of interfaces: what the daemon's parts hand each other.

Nothing here does I/O or imports the daemon: only :mod:`cronstable.config`,
:mod:`cronstable.errors` and the standard library are below it.  Import the
names from ``cronstable.ports``; the modules inside only group them:

* :mod:`.section`: :class:`Section`, a part of the daemon a revision configures.
"""

from __future__ import annotations

from cronstable.ports.section import Section

__all__ = ["Section"]
