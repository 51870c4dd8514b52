"""Leadership on Kubernetes Leases (``coordination.k8s.io/v1``), over the API server.

Leases in the configured namespace (:mod:`.kube_leases` names and reads them)::

    <leaseName>                             the leader: holderIdentity = the leader's node
                                            name, annotation cronstable.io/instance its
                                            daemon; leaseTransitions is the fence; the
                                            @reboot ran-set in cronstable.io/reboot-ran
    <leaseName>-member-<node>               one per node: holderIdentity = node name,
                                            annotations instance and job-set id
    <leaseName>-duplicate-<node>-<instance> kept by a second live daemon with a taken name

A round, as the client-go leader election does it (``tools/leaderelection``,
``LeaseLock``): renew this node's membership Lease (a replace carrying the
``resourceVersion`` it last wrote; 404 → create, 409 → read it again); read the
leader Lease: none → create it holding it; held by this daemon → renew it; held
by nobody (released), or held by another whose (holder, renewTime,
resourceVersion) has not changed for ``leaseDurationSeconds`` since this node
first saw it, measured on this node's monotonic clock → take it over, with
``leaseTransitions`` + 1; every write is a replace with the ``resourceVersion``
read, so of two contenders one gets 409 and has lost.  Then list the membership
Leases (a label selector) and drop those expired by the same rule.

A round that began at monotonic ``t`` and renewed the leader Lease proves it
until ``t + ttl`` (:mod:`.base`): the write landed after ``t``, and every other
node first sees the renewed state after it landed, then waits a whole
``leaseDurationSeconds`` on its own clock before it takes over.  Only the clocks'
*rates* matter, never their readings; but a contender that first sees a dead
leader's Lease waits a full duration from then, so a takeover after a kill -9
takes between one and two ``leaseTtl``.

Release (a graceful stop): the leader Lease gets an empty holder and a duration
of 1 s (client-go's release; the transitions stay, so the next fence is
greater), and the membership Lease is deleted.  The leader deletes membership
Leases that expired.  A Lease deleted by hand and made again starts its
transitions at 0: compare fences within one Lease's life only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Collection
from typing import Any

from cronstable.cluster.base import (
    Leadership,
    LeadershipError,
    LeadershipStats,
    Member,
    Observation,
)
from cronstable.cluster.kube_api import KubeClient, KubeConflict, KubeError, KubeNotFound
from cronstable.cluster.kube_leases import (
    ANNOTATION_INSTANCE,
    ANNOTATION_JOB_SET,
    ANNOTATION_REBOOT,
    ANNOTATION_REVISION,
    LABEL_CLUSTER,
    LABEL_MEMBERSHIP,
    LABEL_ROLE,
    Lease,
    Sightings,
    duplicate_name,
    epoch_of,
    holding,
    member_name,
    membership_selector,
    micro_time,
    new_lease,
    released,
)

logger = logging.getLogger(__name__)

REBOOT_FORMAT = 1
"""Version of the @reboot ran-set annotation's JSON."""


class KubernetesLeadership(Leadership):
    backend = "kubernetes"
    keeps_reboot_ran = True

    def __init__(
        self,
        node_name: str,
        *,
        ttl: float,
        client: KubeClient,
        lease_name: str = "cronstable",
        instance: str | None = None,
        stats: LeadershipStats | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``client``: the API server and namespace (closed with the leadership);
        ``monotonic``: the clock expiry is judged on."""
        super().__init__(node_name, ttl=ttl, instance=instance, stats=stats, monotonic=monotonic)
        self.api = client
        self.lease_name = lease_name
        self.duration = max(1, math.ceil(self.ttl))
        self.member_lease = member_name(lease_name, node_name)
        self.duplicate_lease = duplicate_name(lease_name, node_name, self.instance)
        self.sightings = Sightings()
        self._member: Lease | None = None
        """This node's membership Lease as last written (its resourceVersion is the next
        replace's precondition)."""
        self._marker: Lease | None = None
        """The duplicate marker this daemon keeps, while its name is taken."""
        self._takeover: float | None = None
        self._leader_writes = asyncio.Lock()
        """The rounds and the @reboot claim write the leader Lease one at a time."""

    def __repr__(self) -> str:
        return f"KubernetesLeadership({self.node_name!r}, Lease {self.lease_name!r}, {self.api!r})"

    def takeover_in(self) -> float | None:
        return self._takeover

    # ------------------------------------------------------------ Leadership

    async def check(self) -> None:
        try:
            await self.api.get(self.lease_name)
        except KubeError as exc:
            raise LeadershipError(str(exc)) from exc

    async def round(self) -> Observation:
        try:
            return await self._round()
        except KubeError as exc:
            raise LeadershipError(str(exc)) from exc

    async def release(self) -> None:
        try:
            async with self._leader_writes:
                lease = await self.api.get(self.lease_name)
                if lease is not None and lease.held_by(self.node_name, self.instance):
                    body = lease.changed(
                        spec=released(lease.transitions), annotations={ANNOTATION_INSTANCE: None}
                    )
                    try:
                        await self.api.replace(lease, body)
                    except KubeConflict:
                        pass  # it changed meanwhile: no longer this daemon's to give up
            member = await self.api.get(self.member_lease)
            if member is not None and member.held_by(self.node_name, self.instance):
                await self.api.delete(member)  # as read, or not at all
            self._member = None
            await self._drop_marker()
        except KubeError as exc:
            raise LeadershipError(str(exc)) from exc

    async def close(self) -> None:
        await self.api.close()

    # ------------------------------------------------------------ a round

    async def _round(self) -> Observation:
        began = self.monotonic()
        self._takeover = None
        duplicate = await self._keep_member(began)
        fence, leader = await self._campaign(began, duplicate)
        leases = await self.api.list(membership_selector(self.lease_name))
        now = self.monotonic()
        members: list[Member] = []
        for lease in leases:
            live = self.sightings.live(lease, now, self.ttl)
            role = lease.labels.get(LABEL_ROLE)
            if not live:
                if fence is not None and lease.name != self.member_lease:
                    await self.api.delete(lease)  # the leader tidies up (as read, or not)
                continue
            if role == "member":
                members.append(
                    Member(
                        lease.holder,
                        lease.instance,
                        lease.annotations.get(ANNOTATION_JOB_SET, ""),
                        lease.annotations.get(ANNOTATION_REVISION, ""),
                        epoch_of(lease.renew_time),
                    )
                )
            elif (
                role == "duplicate"
                and lease.holder == self.node_name
                and lease.instance != self.instance
            ):
                duplicate = True
        self.sightings.forget_except(
            {lease.name for lease in leases} | {self.lease_name},
            (f"{self.lease_name}-member-", f"{self.lease_name}-duplicate-"),
        )
        members.sort(key=lambda m: m.name)
        return Observation(leader, None if duplicate else fence, tuple(members), duplicate)

    def _member_annotations(self) -> dict[str, str | None]:
        return {
            ANNOTATION_INSTANCE: self.instance,
            ANNOTATION_JOB_SET: self.job_set_id,
            ANNOTATION_REVISION: self.revision,
        }

    def _labels(self, role: str) -> dict[str, str]:
        labels = {LABEL_CLUSTER: self.lease_name, LABEL_ROLE: role}
        if role in ("member", "duplicate"):
            labels[LABEL_MEMBERSHIP] = "true"
        return labels

    async def _keep_member(self, began: float) -> bool:
        """Renew (or take, or create) this node's membership Lease; True when another live
        daemon holds it (this one then keeps a duplicate marker instead)."""
        cached = self._member
        if cached is not None:
            try:
                self._member = await self.api.replace(cached, self._renewed(cached, mine=True))
            except (KubeConflict, KubeNotFound):
                self._member = None  # changed or deleted since: read it again
            else:
                await self._drop_marker()
                return False
        lease = await self.api.get(self.member_lease)
        if lease is None:
            body = new_lease(
                self.member_lease,
                spec=holding(self.node_name, self.duration, transitions=0, acquired=None),
                labels=self._labels("member"),
                annotations={
                    ANNOTATION_INSTANCE: self.instance,
                    ANNOTATION_JOB_SET: self.job_set_id,
                    ANNOTATION_REVISION: self.revision,
                },
            )
            try:
                self._member = await self.api.create(body)
            except KubeConflict:
                return await self._keep_marker()  # made meanwhile: next round decides
            await self._drop_marker()
            return False
        read = self.monotonic()  # the state was there when the answer came, not before
        mine = lease.held_by(self.node_name, self.instance)
        if mine or not self.sightings.live(lease, read, self.ttl):
            # ours (the answer to a write was lost), or a previous instance's that expired
            try:
                self._member = await self.api.replace(lease, self._renewed(lease, mine=mine))
            except KubeConflict:
                return await self._keep_marker()
            await self._drop_marker()
            return False
        self._soonest(self.sightings.expires_at(lease, read, self.ttl) - began)
        return await self._keep_marker()

    def _renewed(self, lease: Lease, *, mine: bool) -> dict[str, Any]:
        spec = holding(
            self.node_name,
            self.duration,
            transitions=lease.transitions if mine else lease.transitions + 1,
            acquired=lease.acquire_time if mine else None,
        )
        return lease.changed(spec=spec, annotations=self._member_annotations())

    async def _keep_marker(self) -> bool:
        """Keep (create or renew) the duplicate marker; True (the name is taken)."""
        marker = self._marker
        if marker is not None:
            try:
                self._marker = await self.api.replace(marker, self._renewed(marker, mine=True))
                return True
            except (KubeConflict, KubeNotFound):
                self._marker = None
        body = new_lease(
            self.duplicate_lease,
            spec=holding(self.node_name, self.duration, transitions=0, acquired=None),
            labels=self._labels("duplicate"),
            annotations={ANNOTATION_INSTANCE: self.instance},
        )
        try:
            self._marker = await self.api.create(body)
        except KubeConflict:
            found = await self.api.get(self.duplicate_lease)
            if found is not None:
                self._marker = await self.api.replace(found, self._renewed(found, mine=True))
        return True

    async def _drop_marker(self) -> None:
        marker, self._marker = self._marker, None
        if marker is not None:
            found = await self.api.get(marker.name)
            if found is not None:
                await self.api.delete(found)

    def _soonest(self, seconds: float) -> None:
        """Be there ``seconds`` after the round began (a Lease may be taken then)."""
        if self._takeover is None or seconds < self._takeover:
            self._takeover = max(0.0, seconds)

    async def _campaign(self, began: float, duplicate: bool) -> tuple[int | None, str | None]:
        """Keep or take the leader Lease (not while the name is taken): (this node's fence
        or None, the leader's name or None)."""
        async with self._leader_writes:
            lease = await self.api.get(self.lease_name)
            if lease is None:
                if duplicate:
                    return None, None
                body = new_lease(
                    self.lease_name,
                    spec=holding(self.node_name, self.duration, transitions=0, acquired=None),
                    labels=self._labels("leader"),
                    annotations={ANNOTATION_INSTANCE: self.instance},
                )
                try:
                    created = await self.api.create(body)
                    self.sightings.see(created, self.monotonic())
                    return created.transitions, self.node_name
                except KubeConflict:  # another node created it first
                    lease = await self.api.get(self.lease_name)
                    if lease is None:
                        return None, None
            for _ in range(2):
                # first seen when the answer came (never earlier: the holder's renewal
                # may have landed just before it was read)
                read = self.monotonic()
                mine = lease.held_by(self.node_name, self.instance)
                live = self.sightings.live(lease, read, self.ttl)
                if duplicate or not (mine or not live):
                    if live and not mine:
                        self._soonest(self.sightings.expires_at(lease, read, self.ttl) - began)
                    return None, lease.holder if live else None
                spec = holding(
                    self.node_name,
                    self.duration,
                    transitions=lease.transitions if mine else lease.transitions + 1,
                    acquired=lease.acquire_time if mine else None,
                )
                try:
                    won = await self.api.replace(
                        lease,
                        lease.changed(spec=spec, annotations={ANNOTATION_INSTANCE: self.instance}),
                    )
                except KubeConflict:  # another node wrote it first: read who
                    again = await self.api.get(self.lease_name)
                    if again is None:
                        return None, None
                    lease = again
                    continue
                self.sightings.see(won, self.monotonic())
                return won.transitions, self.node_name
            return None, None

    # ------------------------------------------------------------ @reboot ran-set

    async def claim_reboot(self, job: str, digest: str, scope: Collection[str]) -> str | None:
        """The leader records that it runs the @reboot job ``job`` (definition ``digest``)
        now, in the leader Lease's ran-set: None when it may run; the node that ran that
        definition before otherwise.  The ran-set keeps the jobs of ``scope`` (this
        revision's @reboot Leader jobs) and the job-set id of the revision that wrote it.
        Raises :class:`LeadershipError` when this daemon does not hold the Lease or the
        API server does not answer."""
        try:
            async with self._leader_writes:
                for _ in range(3):
                    lease = await self.api.get(self.lease_name)
                    if lease is None or not lease.held_by(self.node_name, self.instance):
                        raise LeadershipError("this node does not hold the leader Lease")
                    ran = reboot_ran(lease)
                    entry = ran.get(job)
                    if entry is not None and entry.get("digest") == digest:
                        return str(entry.get("node") or "?")
                    kept = {name: e for name, e in ran.items() if name in scope and name != job}
                    kept[job] = {"digest": digest, "node": self.node_name, "at": micro_time()}
                    value = json.dumps(
                        {"version": REBOOT_FORMAT, "jobSetId": self.job_set_id, "ran": kept},
                        sort_keys=True,
                        separators=(",", ":"),
                    )
                    try:
                        await self.api.replace(
                            lease, lease.changed(annotations={ANNOTATION_REBOOT: value})
                        )
                    except KubeConflict:
                        continue  # renewed or taken meanwhile: read it again
                    return None
        except KubeError as exc:
            raise LeadershipError(str(exc)) from exc
        raise LeadershipError("the leader Lease changed at every attempt")


def reboot_ran(lease: Lease) -> dict[str, dict[str, Any]]:
    """The @reboot ran-set a leader Lease carries: job name → {digest, node, at}."""
    try:
        data = json.loads(lease.annotations.get(ANNOTATION_REBOOT, "") or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict) or data.get("version") != REBOOT_FORMAT:
        return {}
    ran = data.get("ran")
    if not isinstance(ran, dict):
        return {}
    return {str(k): v for k, v in ran.items() if isinstance(v, dict)}
