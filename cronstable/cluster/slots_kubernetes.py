"""Concurrency slots on Kubernetes Leases (see :mod:`.slots` for what a slot is).

One Lease per job, ``<leaseName>-slot-<job>`` (:func:`~.kube_leases.slot_lease_name`;
the job's name as written in the annotation ``cronstable.io/job``), labelled with
the cluster and ``cronstable.io/role: slot``:

* ``holderIdentity`` is the holder's node name, the annotation
  ``cronstable.io/instance`` its daemon; the hold's fence is ``leaseTransitions``,
  which grows by one with every new hold (the first is 1) and stays when a hold is
  released (an empty holder), so it never goes back;
* a hold expires as the leader Lease does: once its (holder, renewTime,
  resourceVersion) has not changed for ``leaseDurationSeconds`` since this daemon
  first saw it, on this daemon's monotonic clock (:class:`~.kube_leases.Sightings`);
* a cancel record is the annotation ``cronstable.io/cancel`` (JSON: the instance and
  fence of the hold it is aimed at, and the asking node); taking the slot anew
  drops it.

Every write is a replace with the ``resourceVersion`` read (409: read it again
and decide anew, at most three times).  The Leases stay when released, keeping
their counter; the store's :meth:`close` releases the holds it still knows of.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from cronstable.cluster.kube_api import KubeClient, KubeConflict, KubeError
from cronstable.cluster.kube_leases import (
    ANNOTATION_CANCEL,
    ANNOTATION_INSTANCE,
    ANNOTATION_JOB,
    LABEL_CLUSTER,
    LABEL_ROLE,
    Lease,
    Sightings,
    holding,
    new_lease,
    released,
    slot_lease_name,
)
from cronstable.cluster.slots import Claim, Holder, SlotError, SlotStore

_T = TypeVar("_T")
ATTEMPTS = 3


class KubernetesSlots(SlotStore):
    backend = "kubernetes"

    def __init__(
        self,
        node: str,
        instance: str,
        *,
        ttl: float,
        client: KubeClient,
        lease_name: str = "cronstable",
        monotonic: Callable[[], float] = time.monotonic,
        kind: str = "slots",
    ) -> None:
        """``client``: the API server and namespace (closed with the store); ``kind``:
        ``slots`` (the jobs', Leases ``<leaseName>-slot-*``), ``pools`` (the records of
        cluster pools, ``<leaseName>-pool-*``, role ``pool``) or ``locks`` (the named
        locks of ``cronstable lock``, ``<leaseName>-lock-*``, role ``lock``)."""
        super().__init__(node, instance, ttl=ttl)
        self.api = client
        self.lease_name = lease_name
        self.segment = {"slots": "slot", "locks": "lock"}.get(kind, "pool")
        self.duration = max(1, math.ceil(self.ttl))
        self.monotonic = monotonic
        self.sightings = Sightings()
        self._held: dict[str, Holder] = {}
        """The holds this store took and has not released, by job (released at close)."""

    def __repr__(self) -> str:
        return f"KubernetesSlots(Lease {self.lease_name!r}-{self.segment}-*, {self.api!r})"

    def lease(self, job: str) -> str:
        return slot_lease_name(self.lease_name, job, self.segment)

    async def _call(self, work: Awaitable[_T]) -> _T:
        try:
            return await work
        except KubeError as exc:
            raise SlotError(str(exc)) from exc

    async def check(self) -> None:
        await self._call(self.api.get(self.lease("")))

    # ------------------------------------------------------------ SlotStore

    async def claim(self, jobs: Sequence[str]) -> dict[str, Claim]:
        return {job: await self._call(self._claim(job)) for job in jobs}

    async def _claim(self, job: str) -> Claim:
        name = self.lease(job)
        for _ in range(ATTEMPTS):
            lease = await self.api.get(name)
            if lease is None:
                body = new_lease(
                    name,
                    spec=holding(self.node, self.duration, transitions=1, acquired=None),
                    labels={LABEL_CLUSTER: self.lease_name, LABEL_ROLE: self.segment},
                    annotations={ANNOTATION_JOB: job, ANNOTATION_INSTANCE: self.instance},
                )
                try:
                    made = await self.api.create(body)
                except KubeConflict:
                    continue  # another node made it first: read it
                return Claim(self._took(job, made))
            now = self.monotonic()
            mine = lease.held_by(self.node, self.instance)
            if not mine and self.sightings.live(lease, now, self.ttl):
                held = _holder(lease)
                asked = _cancel(lease)
                aimed = (asked.get("instance"), asked.get("fence")) == (held.instance, held.fence)
                return Claim(held, str(asked.get("by", "?")) if aimed else None)
            spec = holding(
                self.node,
                self.duration,
                transitions=lease.transitions if mine else lease.transitions + 1,
                acquired=lease.acquire_time if mine else None,
            )
            annotations: dict[str, str | None] = {ANNOTATION_INSTANCE: self.instance}
            if not mine:
                annotations[ANNOTATION_CANCEL] = None  # a new hold: an old record is stale
            try:
                written = await self.api.replace(
                    lease, lease.changed(spec=spec, annotations=annotations)
                )
            except KubeConflict:
                continue
            hold = self._took(job, written)
            asked = _cancel(written) if mine else {}
            aimed = (asked.get("instance"), asked.get("fence")) == (hold.instance, hold.fence)
            return Claim(hold, str(asked.get("by", "?")) if aimed else None)
        raise SlotError(f"slot Lease {name} changes too fast to be claimed")

    def _took(self, job: str, lease: Lease) -> Holder:
        self.sightings.see(lease, self.monotonic())
        hold = Holder(self.node, self.instance, lease.transitions)
        self._held[job] = hold
        return hold

    async def holder(self, job: str) -> Holder | None:
        lease = await self._call(self.api.get(self.lease(job)))
        if lease is None or not self.sightings.live(lease, self.monotonic(), self.ttl):
            return None
        return _holder(lease)

    async def release(self, job: str, hold: Holder) -> None:
        await self._call(self._release(job, hold))

    async def _release(self, job: str, hold: Holder) -> None:
        name = self.lease(job)
        for _ in range(ATTEMPTS):
            lease = await self.api.get(name)
            if lease is None or not lease.holder or _holder(lease) != hold:
                break  # not held so (any more): nothing to free
            body = lease.changed(
                spec=released(lease.transitions),
                annotations={ANNOTATION_INSTANCE: None, ANNOTATION_CANCEL: None},
            )
            try:
                await self.api.replace(lease, body)
            except KubeConflict:
                continue
            break
        if self._held.get(job) == hold:
            del self._held[job]

    async def request_cancel(self, job: str, hold: Holder) -> None:
        await self._call(self._request_cancel(job, hold))

    async def _request_cancel(self, job: str, hold: Holder) -> None:
        name = self.lease(job)
        record = json.dumps(
            {"instance": hold.instance, "fence": hold.fence, "by": self.node},
            sort_keys=True,
            separators=(",", ":"),
        )
        for _ in range(ATTEMPTS):
            lease = await self.api.get(name)
            if lease is None or _holder(lease) != hold:
                return  # that hold is gone: nothing to ask
            try:
                written = await self.api.replace(
                    lease, lease.changed(annotations={ANNOTATION_CANCEL: record})
                )
            except KubeConflict:
                continue
            self.sightings.see(written, self.monotonic())
            return
        raise SlotError(f"slot Lease {name} changes too fast to write a cancel record")

    async def close(self) -> None:
        try:
            for job, hold in sorted(self._held.items()):
                try:
                    await self._release(job, hold)
                except KubeError:
                    continue  # it expires
        finally:
            await self.api.close()


def _holder(lease: Lease) -> Holder:
    return Holder(lease.holder or "?", lease.instance, lease.transitions)


def _cancel(lease: Lease) -> dict[str, Any]:
    try:
        data = json.loads(lease.annotations.get(ANNOTATION_CANCEL, "") or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
