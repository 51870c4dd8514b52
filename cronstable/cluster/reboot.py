"""The @reboot guard: a ``Leader`` @reboot job runs once per definition in the cluster,
on a leadership store that keeps a ran-set.

A launch guard of the scheduler, asked after the durable state's.  For an @reboot
run of a job that runs once per cluster (``clusterPolicy: Leader`` under leader
election) on a backend whose store keeps an @reboot ran-set
(:attr:`~.base.Leadership.keeps_reboot_ran`: the kubernetes backend, on its leader
Lease), it asks the leadership to record the run first
(:meth:`~.base.Leadership.claim_reboot`): a definition (job digest) recorded before,
by this node or another, is not run again (``reboot_ran``).  Other backends leave
the once-per-cluster rule to a shared state store (``cluster/reboot/<job>`` on etcd),
and this guard admits everything.

Only the leader writes the ran-set: under ``distribution: spread`` a job's owner
that does not lead runs it as it would without one.  When the store cannot say
(it does not answer, this node lost the leader Lease meanwhile),
``onStoreUnavailable`` of the state section decides, as for the state's own
@reboot marker: ``degrade`` (the default) runs it, ``fail-closed`` does not
(``leadership_unknown``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Literal

from cronstable.cluster.base import Leadership, LeadershipError
from cronstable.config import Job
from cronstable.ports import Launch
from cronstable.redact import redact

logger = logging.getLogger(__name__)


class RebootGuard:
    """``leadership()``: the leadership in use (None without election); ``one_run(job)``:
    whether ``job`` runs once per cluster; ``scope()``: the applied revision's @reboot
    jobs that do; ``on_unavailable()``: the state section's ``onStoreUnavailable``."""

    def __init__(
        self,
        leadership: Callable[[], Leadership | None],
        one_run: Callable[[Job], bool],
        scope: Callable[[], Collection[str]],
        *,
        on_unavailable: Callable[[], Literal["degrade", "fail-closed"]] = lambda: "degrade",
    ) -> None:
        self.leadership = leadership
        self.one_run = one_run
        self.scope = scope
        self.on_unavailable = on_unavailable

    async def admit(self, launch: Launch) -> str | None:
        job = launch.job
        lead = self.leadership()
        if launch.kind != "reboot" or lead is None or not lead.keeps_reboot_ran:
            return None
        if not self.one_run(job) or not lead.is_leader():
            return None  # under spread, an owner that does not lead: as without a ran-set
        try:
            ran_by = await asyncio.wait_for(
                lead.claim_reboot(job.name, job.digest, self.scope()),
                timeout=max(1.0, lead.ttl / 2),
            )
        except (LeadershipError, TimeoutError) as exc:
            reason = redact(str(exc) or "no answer in time")
            if self.on_unavailable() == "fail-closed":
                logger.warning(
                    "Job %s: the @reboot ran-set on the %s store cannot be read (%s); not run "
                    "(onStoreUnavailable: fail-closed)",
                    job.name,
                    lead.backend,
                    reason,
                    extra={"job": job.name},
                )
                return "leadership_unknown"
            logger.warning(
                "Job %s: the @reboot ran-set on the %s store cannot be read (%s); it runs "
                "(onStoreUnavailable: degrade)",
                job.name,
                lead.backend,
                reason,
                extra={"job": job.name},
            )
            return None
        if ran_by is not None:
            logger.info(
                "Job %s: @reboot already ran in the cluster (by node %s); not run again",
                job.name,
                ran_by,
                extra={"job": job.name},
            )
            return "reboot_ran"
        return None

    def release(self, launch: Launch) -> None:
        return None


def reboot_scope(jobs: Collection[Job], one_run: Callable[[Job], bool]) -> frozenset[str]:
    """The names of the @reboot jobs in ``jobs`` that run once per cluster."""
    return frozenset(job.name for job in jobs if job.schedule.is_reboot and one_run(job))
