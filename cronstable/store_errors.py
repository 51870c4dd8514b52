"""A store that failed: *unreachable* (an outage to ride out) or *refused* (a
configuration to fix).

The cluster, slot and state sections reach their store when a revision is
applied.  A store that refuses what is asked rejects the revision, as any other
configuration error does; a store that does not answer does not: the section is
committed and waits for it (:mod:`cronstable.store_link`).  The line between the
two is drawn by the error, never by how long it took, in one place per family
of backend:

* etcd: :func:`cronstable.etcd.etcd_fault`;
* a directory (the cluster's shared directory, the node's state directory):
  :func:`directory_fault`;
* a client that draws the line itself (the Kubernetes API client,
  :mod:`cronstable.cluster.kube_api`) raises a :class:`StoreFailure` carrying it.

:func:`fault_of` finds the error a backend's own exception was raised from (its
``__cause__`` chain) and asks the family it belongs to.
"""

from __future__ import annotations

import errno
from typing import Literal

from cronstable.etcd import EtcdError, etcd_fault

Fault = Literal["unreachable", "refused"]

UNREACHABLE_ERRNOS = frozenset(
    code
    for code in (
        errno.ENOENT,  # the directory is not there: its share is not mounted (yet)
        errno.EIO,
        errno.ESTALE,  # an NFS handle from before the server restarted
        errno.ETIMEDOUT,
        errno.ENOTCONN,  # a FUSE mount whose daemon went away
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.ENODEV,
        errno.ENXIO,
        errno.ENOLCK,  # the lock manager does not answer
        errno.EAGAIN,
        errno.EINTR,
        errno.EBUSY,
        errno.ENOSPC,  # full: it takes writes again once space is freed
        errno.EDQUOT,
        getattr(errno, "EREMOTEIO", errno.EIO),
        getattr(errno, "ECOMM", errno.EIO),
        getattr(errno, "ESHUTDOWN", errno.EIO),
    )
)
"""What a directory answers when it (or the server or mount behind it) is absent, down
or full.  Anything else, above all EACCES, EPERM and EROFS (a directory that exists
but this daemon may not write) and ENOTDIR (a file where the directory should be), is
a refusal: waiting does not fix a permission."""


class StoreFailure(Exception):
    """An error of a store client that knows whether its store is unreachable or
    refused: :attr:`fault` says which, and :func:`fault_of` takes its word."""

    fault: Fault = "refused"

    def __init__(self, message: str, *, fault: Fault | None = None) -> None:
        super().__init__(message)
        if fault is not None:
            self.fault = fault


def directory_fault(exc: OSError) -> Fault:
    """Whether a directory failing with ``exc`` is unreachable or refuses (see
    :data:`UNREACHABLE_ERRNOS`); the one place that draws that line for directories.
    A timeout (:class:`TimeoutError`, a lock not had in time) is unreachable."""
    if isinstance(exc, TimeoutError) or exc.errno in UNREACHABLE_ERRNOS:
        return "unreachable"
    return "refused"


def fault_of(exc: BaseException) -> Fault:
    """Unreachable or refused, for ``exc`` raised by a store backend: the first etcd
    error, :class:`StoreFailure`, timeout or OS error in its chain of causes decides.
    An error with none of them in its chain is a refusal (the revision is rejected, as
    before)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, EtcdError):
            return etcd_fault(current)
        if isinstance(current, StoreFailure):
            return current.fault
        if isinstance(current, TimeoutError):
            return "unreachable"
        if isinstance(current, OSError):
            return directory_fault(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return "refused"
