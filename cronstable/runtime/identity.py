"""Who a job runs as: resolving ``user``/``group`` to ids, once per revision.

Resolution happens when a revision is prepared, so an unknown user or a daemon
that cannot switch is reported with the configuration, not at 3 a.m. when the job
fires.  Spawning applies an :class:`Identity` in C between fork and exec, in the
safe order (supplementary groups, gid, uid): in the exec shim
(:mod:`cronstable.runtime.exec_shim`), or where it is not built through
:mod:`subprocess`'s own ``user=``/``group=``/``extra_groups=`` arguments.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass

from cronstable.errors import CronstableError

_MAX_ID = 2**32 - 2  # (uid_t)-1 means "unchanged" to the kernel


class IdentityError(CronstableError):
    """A job's user or group cannot be used: unknown, or the daemon cannot switch to it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Identity:
    """The ids a job's process takes before exec."""

    uid: int
    gid: int
    extra_groups: tuple[int, ...]
    """Supplementary groups (set with ``setgroups``; may be empty)."""


def _numeric(text: str, kind: str) -> int | None:
    if not text.isdigit():
        return None
    value = int(text)
    if value > _MAX_ID:
        raise IdentityError(f"{kind} {value} is out of range")
    return value


def _lookup_user(user: str) -> tuple[int, int | None, str | None]:
    """(uid, primary gid or None, name or None) of a user given by name or uid."""
    uid = _numeric(user, "uid")
    if uid is not None:
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            return uid, None, None
        return uid, entry.pw_gid, entry.pw_name
    try:
        entry = pwd.getpwnam(user)
    except (KeyError, ValueError):
        raise IdentityError(f"user {user!r} does not exist") from None
    return entry.pw_uid, entry.pw_gid, entry.pw_name


def _lookup_group(group: str) -> int:
    gid = _numeric(group, "gid")
    if gid is not None:
        return gid
    try:
        return grp.getgrnam(group).gr_gid
    except (KeyError, ValueError):
        raise IdentityError(f"group {group!r} does not exist") from None


def resolve_identity(user: str | None, group: str | None) -> Identity | None:
    """The identity a job with these ``user``/``group`` settings runs as.

    ``None`` when neither is set or when no switch is needed (the identity is the
    daemon's own).  A name is looked up in the user/group databases; digits are an
    id.  A user brings its primary group and its supplementary groups; ``group``
    overrides the gid.  With only ``group``, the daemon's user and supplementary
    groups are kept.  A uid without a passwd entry needs ``group`` (there is no
    primary group to take, and falling back to gid 0 would be a trap).

    Raises :class:`IdentityError` for an unknown user or group, and when the
    daemon is not root but the identity differs from the daemon's own.
    """
    if user is None and group is None:
        return None
    euid, egid = os.geteuid(), os.getegid()
    own_groups = tuple(os.getgroups())
    if user is not None:
        uid, gid, name = _lookup_user(user)
        if name is not None and gid is not None:
            extra = tuple(os.getgrouplist(name, gid))
        else:
            extra = ()
    else:
        uid, gid, extra = euid, egid, own_groups
    if group is not None:
        gid = _lookup_group(group)
    if gid is None:
        raise IdentityError(
            f"user {user!r} (uid {uid}) has no passwd entry, so no primary group; set group too"
        )
    identity = Identity(uid=uid, gid=gid, extra_groups=extra)
    if euid == 0:
        if uid == euid and gid == egid and set(extra) | {gid} == set(own_groups) | {egid}:
            return None
        return identity
    if uid == euid and gid == egid:
        # Not root: the job keeps the daemon's supplementary groups (it cannot set others).
        return None
    if uid != euid:
        raise IdentityError(
            f"job wants to run as user {user!r} (uid {uid}) but the daemon is not running as root"
        )
    raise IdentityError(
        f"job wants to run with group {group!r} (gid {gid}) but the daemon is not running as root"
    )
