"""Lease records (``coordination.k8s.io/v1``) as the Kubernetes backends read and write
them, and the rule that says when one has expired.  Pure: no I/O.

A Lease's ``spec`` carries ``holderIdentity``, ``leaseDurationSeconds``,
``acquireTime``, ``renewTime`` and ``leaseTransitions``; the API server stores
them as data and judges nothing.  Like the Kubernetes client-go leader election
(``k8s.io/client-go/tools/leaderelection``), a reader never compares a
``renewTime`` with its own wall clock: it notes when it first saw a Lease in a
given state (holder, renewTime, resourceVersion) on its *own monotonic clock*,
and takes the Lease for expired only once that state has stayed unchanged for
``leaseDurationSeconds`` (:class:`Sightings`).  Host clocks may then disagree
by any amount; only their rates must be close.

Names (:func:`member_name`, :func:`slot_lease_name`) are DNS subdomains built from
the configured ``leaseName``: a node or job name that is not one is lower-cased,
its other characters replaced by ``-``, and a hash of the original appended, so two
names never share a Lease.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

API_VERSION = "coordination.k8s.io/v1"

LABEL_CLUSTER = "cronstable.io/cluster"
"""On every Lease of a cluster: its ``leaseName``."""
LABEL_ROLE = "cronstable.io/role"
"""``leader``, ``member``, ``duplicate`` or ``slot``."""
LABEL_MEMBERSHIP = "cronstable.io/membership"
"""``"true"`` on member and duplicate Leases: what a round lists."""
ANNOTATION_INSTANCE = "cronstable.io/instance"
"""The holder's daemon instance (a restart under the same node name gets a new one)."""
ANNOTATION_JOB_SET = "cronstable.io/job-set-id"
ANNOTATION_REVISION = "cronstable.io/revision"
"""On a member Lease: the revision its node applied (the fleet view)."""
ANNOTATION_JOB = "cronstable.io/job"
"""On a slot Lease: the job's name as written."""
ANNOTATION_CANCEL = "cronstable.io/cancel"
"""On a slot Lease: a cancel record (JSON: instance, fence, by) aimed at one hold."""
ANNOTATION_REBOOT = "cronstable.io/reboot-ran"
"""On the leader Lease: the @reboot ran-set (JSON, :mod:`.kubernetes`)."""

_NOT_DNS = re.compile(r"[^a-z0-9.-]+")
_NAME_LIMIT = 253


def micro_time(at: datetime | None = None) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339 in UTC with microseconds."""
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def epoch_of(text: str | None) -> float | None:
    """A ``MicroTime`` (or RFC 3339 time) as seconds since the epoch; None if it is not one.
    Shown only (the fleet view's last seen): expiry never reads a wall clock."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


def _segment(text: str, room: int) -> str:
    """``text`` as part of a DNS subdomain, at most ``room`` characters; anything changed
    on the way gets a hash of the original appended (distinct names stay distinct)."""
    slug = _NOT_DNS.sub("-", text.lower()).strip("-.") or "x"
    if slug == text and len(slug) <= room:
        return slug
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{slug[: max(1, room - 11)].rstrip('-.')}-{digest}"


def member_name(lease_name: str, node: str) -> str:
    """The membership Lease of ``node``: ``<leaseName>-member-<node>``."""
    head = f"{lease_name}-member-"
    return head + _segment(node, _NAME_LIMIT - len(head))


def duplicate_name(lease_name: str, node: str, instance: str) -> str:
    """The marker a second live daemon named ``node`` keeps, so the first one learns of
    it: ``<leaseName>-duplicate-<node>-<instance>``."""
    head = f"{lease_name}-duplicate-"
    tail = "-" + _segment(instance, 40)
    return head + _segment(node, _NAME_LIMIT - len(head) - len(tail)) + tail


def slot_lease_name(lease_name: str, job: str, segment: str = "slot") -> str:
    """The slot Lease of ``job``: ``<leaseName>-slot-<job>`` (always hashed: job names
    differ in case, Lease names cannot); ``segment`` ``pool`` names the Lease of a
    record of a cluster pool instead (``<leaseName>-pool-<pool>#<n>``)."""
    head = f"{lease_name}-{segment}-"
    room = min(80, _NAME_LIMIT - len(head))
    slug = _NOT_DNS.sub("-", job.lower()).strip("-.") or "x"
    digest = hashlib.sha256(job.encode()).hexdigest()[:10]
    return f"{head}{slug[: room - 11].rstrip('-.') or 'x'}-{digest}"


def membership_selector(lease_name: str) -> str:
    """The label selector of a cluster's member and duplicate Leases."""
    return f"{LABEL_CLUSTER}={lease_name},{LABEL_MEMBERSHIP}=true"


@dataclass(frozen=True, slots=True)
class Lease:
    """One Lease as read from the API server (:meth:`parse`); :meth:`changed` makes the
    body of a replace (PUT) that keeps everything else it held."""

    name: str
    resource_version: str
    holder: str
    """``holderIdentity``: the holder's node name; empty when nobody holds it."""
    duration: int | None
    renew_time: str | None
    acquire_time: str | None
    transitions: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> Lease:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            holder=str(spec.get("holderIdentity") or ""),
            duration=duration if isinstance(duration, int) and duration > 0 else None,
            renew_time=spec.get("renewTime"),
            acquire_time=spec.get("acquireTime"),
            transitions=transitions if isinstance(transitions, int) else 0,
            annotations=_texts(meta.get("annotations")),
            labels=_texts(meta.get("labels")),
            raw=obj,
        )

    @property
    def instance(self) -> str:
        return self.annotations.get(ANNOTATION_INSTANCE, "")

    @property
    def state(self) -> tuple[str, str | None, str]:
        """What a reader watches for change: (holder, renewTime, resourceVersion)."""
        return (self.holder, self.renew_time, self.resource_version)

    def held_by(self, node: str, instance: str) -> bool:
        return self.holder == node and self.instance == instance

    def changed(
        self,
        *,
        spec: Mapping[str, Any] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """The body of a replace: this Lease with ``spec`` fields set and ``annotations``
        set (a None value removes one); ``metadata.resourceVersion`` stays, so the API
        server refuses the write (409) if the Lease changed since it was read."""
        body = dict(self.raw)
        meta = dict(body.get("metadata") or {})
        meta["resourceVersion"] = self.resource_version
        if annotations is not None:
            kept = dict(_texts(meta.get("annotations")))
            for key, value in annotations.items():
                if value is None:
                    kept.pop(key, None)
                else:
                    kept[key] = value
            meta["annotations"] = kept
        body["metadata"] = meta
        body["spec"] = dict(body.get("spec") or {}) | dict(spec or {})
        body.setdefault("apiVersion", API_VERSION)
        body.setdefault("kind", "Lease")
        return body


def new_lease(
    name: str,
    *,
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    """The body of a create (POST)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Lease",
        "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations)},
        "spec": dict(spec),
    }


def holding(node: str, duration: int, *, transitions: int, acquired: str | None) -> dict[str, Any]:
    """The ``spec`` of a Lease ``node`` holds, renewed now (``acquired``: when this hold
    began; None: now)."""
    now = micro_time()
    return {
        "holderIdentity": node,
        "leaseDurationSeconds": duration,
        "acquireTime": acquired or now,
        "renewTime": now,
        "leaseTransitions": transitions,
    }


def released(transitions: int) -> dict[str, Any]:
    """The ``spec`` of a Lease its holder gave up (client-go's release: no holder, a
    duration of 1 s; the transitions stay, so the next holder's fence is greater)."""
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "renewTime": micro_time(),
        "leaseTransitions": transitions,
    }


class Sightings:
    """When this reader first saw each Lease in its current state, on its own monotonic
    clock; a Lease whose state has not changed for its ``leaseDurationSeconds`` since
    then has expired (client-go's ``observedTime`` rule).  Bounded: a Lease not seen
    in :meth:`forget_except`'s list is forgotten."""

    def __init__(self) -> None:
        self._first: dict[str, tuple[tuple[str, str | None, str], float]] = {}

    def see(self, lease: Lease, now: float) -> float:
        """Note ``lease`` as read at ``now``; when its current state was first seen."""
        state = lease.state
        known = self._first.get(lease.name)
        if known is not None and known[0] == state:
            return known[1]
        self._first[lease.name] = (state, now)
        return now

    def expires_at(self, lease: Lease, now: float, default: float) -> float:
        """The monotonic time ``lease`` expires at, for this reader (``default``: the
        duration to use when the Lease gives none); ``now`` for a Lease nobody holds."""
        first = self.see(lease, now)
        if not lease.holder:
            return now
        return first + float(lease.duration or default)

    def live(self, lease: Lease, now: float, default: float) -> bool:
        """Whether ``lease`` is held and has not expired for this reader."""
        return bool(lease.holder) and now < self.expires_at(lease, now, default)

    def forget(self, name: str) -> None:
        self._first.pop(name, None)

    def forget_except(self, names: set[str], prefixes: tuple[str, ...]) -> None:
        """Forget the Leases whose name starts with one of ``prefixes`` and is not in
        ``names``."""
        for name in [n for n in self._first if n.startswith(prefixes) and n not in names]:
            del self._first[name]


def _texts(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}
