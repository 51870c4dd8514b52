"""Pauses: which jobs are held back now, who asked, why, until when.

* A **config pause** is a job's ``suspend`` (``true`` or ``{until, reason}``): what the
  applied revision says.  Its ``since`` is when this daemon applied the revision that
  paused the job.
* An **API pause** (``POST /jobs/{name}/pause``) is a record ``pauses/<job>`` in the
  state store, outside every node's part of it, so the nodes that share a store (etcd)
  see the same pauses: ``{job, reason, by, since, until, node}``, ``by`` the name of
  the token that asked.  A resume removes the record; one whose ``until`` passed is
  ignored (and replaced by the next pause).  No revision touches it: a commit that
  removes ``suspend`` does not lift it.  Without a state section an API pause is kept
  in memory, on the node asked, until the daemon stops.

The book reads the records once before the first fire (the state section's restore
reads them with this node's own) and then every :data:`POLL_EVERY` seconds, so a
pause asked on one node holds on the others within that time.  A fire of a paused
job is refused by :class:`PauseGate` (reason ``paused``: counted in
``cronstable_fires_skipped_total``, never caught up on resume); a start on request
is not asked.

**onPaused.** A pause that has lasted ``onPaused.alertAfter`` is reported once, through
the job's ``onPaused.report``.  With a store the nodes share, the node that first
creates ``alerts/paused/<job>/<source>`` for that pause reports it (put-if-absent:
once across the cluster); on a node's own store (or none), each node reports once.

**Workflows** pause through this same book, each way a job does: a workflow's
``suspend`` (the same model, :class:`~cronstable.config.models.Suspend`, held by
:meth:`PauseBook.held` through the workflow's
:attr:`~cronstable.config.desired.Workflow.job`), and an API pause (``POST
/workflows/{name}/pause``) recorded under its own key, ``pauses/workflow/<name>``.  The
gate refuses a paused workflow's fires as it refuses a job's (``paused``: no run
starts); the runs going and their tasks are not stopped, and a task is never paused
on its own (a task has no ``suspend``).  onPaused and the metrics count workflows
too (their ``job`` label is the workflow's name: no job has it).

It is an applier section of its own (after the state section: it reads the store the
state section committed), whose commit notes the config pauses of the revision and
starts the rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cronstable.config.desired import DesiredState, Job, Workflow
from cronstable.config.models import Suspend
from cronstable.ports import ClusterGate, JobPauses, Pause, PauseRefused, utc_text
from cronstable.reconcile.plan import Plan
from cronstable.redact import redact
from cronstable.state.base import (
    Record,
    StateError,
    StateStore,
    claim_report,
    key,
    record_time,
    segments,
)

logger = logging.getLogger(__name__)

PAUSES = "pauses"
"""The key prefix of the API pauses (``pauses/<job>``, ``pauses/workflow/<name>``)."""
WORKFLOW = "workflow"
"""The segment under :data:`PAUSES` that holds the workflows' pauses."""
POLL_EVERY = 2.0
"""Seconds between two reads of the pauses from the store (another node's pause or
resume holds here within this time)."""
MAX_REASON = 1000
"""Longest reason kept (characters)."""


def pause_key(job: str, *, workflow: bool = False) -> str:
    return key(PAUSES, WORKFLOW, job) if workflow else key(PAUSES, job)


def _what(workflow: bool) -> str:
    return "Workflow" if workflow else "Job"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def read_pause(record: Record | None) -> Pause | None:
    """The API pause a ``pauses/<job>`` record holds; None for anything else."""
    if record is None or not isinstance(record.get("job"), str):
        return None
    return Pause(
        job=record["job"],
        source="api",
        reason=_text(record.get("reason")),
        by=_text(record.get("by")),
        since=record_time(record.get("since")),
        until=record_time(record.get("until")),
        node=_text(record.get("node")),
    )


def pause_record(pause: Pause) -> Record:
    return {
        "job": pause.job,
        "reason": pause.reason,
        "by": pause.by,
        "since": utc_text(pause.since) if pause.since is not None else None,
        "until": utc_text(pause.until) if pause.until is not None else None,
        "node": pause.node,
    }


def _reports(job: Job) -> bool:
    return any(settings.enabled for settings in job.config.on_paused.report.reporters().values())


class PauseBook:
    """See the module docstring.  ``store`` gives the state store in use (None without
    a state section); ``jobs`` the applied jobs; ``now`` the scheduler's clock;
    ``on_alert(job, pause)`` sends the job's onPaused report (a workflow's
    :attr:`~cronstable.config.desired.Workflow.job` for a workflow); ``workflows`` the
    applied workflows."""

    name = "pauses"

    def __init__(
        self,
        node: str,
        store: Callable[[], StateStore | None],
        jobs: Callable[[], Mapping[str, Job]],
        now: Callable[[], datetime],
        *,
        on_alert: Callable[[Job, Pause], None] | None = None,
        registry: CollectorRegistry | None = None,
        poll_every: float = POLL_EVERY,
        workflows: Callable[[], Mapping[str, Workflow]] = dict,
    ) -> None:
        self.node = node
        self._store = store
        self._jobs = jobs
        self._workflows = workflows
        self.now = now
        self.on_alert = on_alert
        self.poll_every = poll_every
        self._api: dict[str, Pause] = {}
        """The API pauses by job, as last read or written (expired ones included)."""
        self._api_flows: dict[str, Pause] = {}
        """The workflows' API pauses by workflow, likewise."""
        self._config_since: dict[str, datetime] = {}
        """When this daemon applied the revision that paused each job (config pauses)."""
        self._writes = 0
        """Bumped by every pause and resume here: a read that began before one is stale."""
        self._alerted: set[tuple[str, str]] = set()
        """(job, pause instance) reported by onPaused (or by another node)."""
        self._ended: set[tuple[str, str]] = set()
        """(job, since) of API pauses whose end was logged."""
        self._alerting_of: tuple[Mapping[str, Job], Mapping[str, Workflow]] | None = None
        self._alerting_jobs: list[Job] = []
        """The jobs with onPaused of the job set ``_alerting_of`` (:meth:`_alerting`)."""
        self._task: asyncio.Task[None] | None = None
        if registry is not None:
            registry.register(_PauseCollector(self))

    # ------------------------------------------------------------ what holds

    def config_pause(self, job: Job) -> Pause | None:
        return self.held(job.name, job.config.suspend)

    def held(self, name: str, suspend: Suspend | None) -> Pause | None:
        """The pause ``suspend`` (written on ``name``) makes now, or None: the one rule
        for a job's ``suspend`` (and, once they land, a workflow's)."""
        if suspend is None:
            return None
        since = self._config_since.get(name)
        pause = Pause(name, "config", suspend.reason, None, since, suspend.until)
        return pause if pause.holds(self.now()) else None

    def api_pause(self, name: str, *, workflow: bool = False) -> Pause | None:
        pause = (self._api_flows if workflow else self._api).get(name)
        return pause if pause is not None and pause.holds(self.now()) else None

    def _is_workflow(self, job: Job) -> bool:
        """Whether ``job`` is an applied workflow's job (no job has a workflow's name)."""
        return job.workflow is None and job.name in self._workflows()

    def holding(self, job: Job) -> Pause | None:
        """The pause holding ``job`` (or a workflow's job) now (the repository's first),
        or None."""
        return self.config_pause(job) or self.api_pause(job.name, workflow=self._is_workflow(job))

    def _applied(self, name: str, workflow: bool) -> Job | None:
        if workflow:
            flow = self._workflows().get(name)
            return flow.job if flow is not None else None
        return self._jobs().get(name)

    def pauses(self, job: str, *, workflow: bool = False) -> JobPauses:
        """The pauses holding job (or, with ``workflow``, workflow) ``job`` now."""
        applied = self._applied(job, workflow)
        return JobPauses(
            config=self.config_pause(applied) if applied is not None else None,
            api=self.api_pause(job, workflow=workflow),
        )

    def active(self) -> Iterator[Pause]:
        """Every pause holding now, job by job, then workflow by workflow (config first)."""
        for workflow, names in ((False, list(self._jobs())), (True, list(self._workflows()))):
            for name in names:
                held = self.pauses(name, workflow=workflow)
                yield from (p for p in (held.config, held.api) if p is not None)

    # ------------------------------------------------------------ commands

    async def pause(
        self,
        job: str,
        *,
        reason: str,
        by: str | None,
        until: datetime | None,
        workflow: bool = False,
    ) -> tuple[Pause, bool]:
        now = self.now()
        if until is not None and until <= now:
            raise ValueError(f"until ({utc_text(until)}) is not in the future")
        pause = Pause(job, "api", reason[:MAX_REASON], by, now, until, self.node)
        store = self._store()
        self._writes += 1
        if store is not None:
            try:
                await store.put(pause_key(job, workflow=workflow), pause_record(pause))
            except StateError as exc:
                raise PauseRefused(
                    f"the {store.backend} state store does not answer "
                    f"({redact(str(exc))}); the pause is not recorded"
                ) from exc
        (self._api_flows if workflow else self._api)[job] = pause
        logger.warning(
            "%s %s paused by %s%s: %s",
            _what(workflow),
            job,
            by or "anonymous",
            f" until {utc_text(until)}" if until is not None else "",
            redact(pause.reason or ""),
            extra={"job": job},
        )
        return pause, store is not None

    async def resume(self, job: str, *, by: str | None, workflow: bool = False) -> Pause | None:
        lifted = self.api_pause(job, workflow=workflow)
        store = self._store()
        self._writes += 1
        if store is not None:
            try:
                await store.delete(pause_key(job, workflow=workflow))
            except StateError as exc:
                raise PauseRefused(
                    f"the {store.backend} state store does not answer "
                    f"({redact(str(exc))}); the pause stays"
                ) from exc
        (self._api_flows if workflow else self._api).pop(job, None)
        if lifted is not None:
            logger.warning(
                "%s %s resumed by %s (paused by %s since %s)",
                _what(workflow),
                job,
                by or "anonymous",
                lifted.by or "anonymous",
                utc_text(lifted.since) if lifted.since is not None else "?",
                extra={"job": job},
            )
        return lifted

    # ------------------------------------------------------------ the store

    def load(self, records: Mapping[str, Record | None]) -> None:
        """The API pauses among ``records`` (keys ``pauses/<job>`` and
        ``pauses/workflow/<name>``), which replace those known (the state section's
        restore reads them before the first fire)."""
        found: dict[str, Pause] = {}
        flows: dict[str, Pause] = {}
        for full, record in records.items():
            parts = segments(full)
            if not parts or parts[0] != PAUSES or len(parts) not in (2, 3):
                continue
            if len(parts) == 3 and parts[1] != WORKFLOW:
                continue
            pause = read_pause(record)
            if pause is not None and pause.job == parts[-1]:
                (flows if len(parts) == 3 else found)[pause.job] = pause
        self._api = self._replace(self._api, found, workflow=False)
        self._api_flows = self._replace(self._api_flows, flows, workflow=True)

    def _replace(
        self, before: dict[str, Pause], found: dict[str, Pause], *, workflow: bool
    ) -> dict[str, Pause]:
        what = _what(workflow)
        for job, pause in found.items():
            if before.get(job) != pause and pause.holds(self.now()):
                logger.info(
                    "%s %s is paused by %s (recorded by node %s)%s: %s",
                    what,
                    job,
                    pause.by or "anonymous",
                    pause.node or "?",
                    f" until {utc_text(pause.until)}" if pause.until is not None else "",
                    redact(pause.reason or ""),
                    extra={"job": job},
                )
        for job, pause in before.items():
            if job not in found and pause.holds(self.now()):
                logger.info(
                    "%s %s: its pause by %s was lifted", what, job, pause.by, extra={"job": job}
                )
        return found

    async def refresh(self) -> None:
        """Read the API pauses from the store again (nothing without one)."""
        store = self._store()
        if store is None:
            return
        writes = self._writes
        records = await store.list(PAUSES + "/")
        if writes == self._writes:  # no pause or resume here meanwhile
            self.load(records)

    # ------------------------------------------------------------ onPaused

    async def check_alerts(self) -> None:
        """Report each pause that has lasted its job's ``onPaused.alertAfter``, once."""
        now = self.now()
        for job in self._alerting():
            alert_after = job.config.on_paused.alert_after
            pause = self.holding(job)
            if pause is None or pause.since is None or alert_after is None:
                continue
            if (now - pause.since).total_seconds() < alert_after:
                continue
            instance = f"config:{job.digest}" if pause.source == "config" else f"api:{pause.since}"
            if (job.name, instance) in self._alerted:
                continue
            self._alerted.add((job.name, instance))
            if await self._claim(job.name, pause, instance) and self.on_alert is not None:
                self.on_alert(job, pause)

    def _alerting(self) -> list[Job]:
        """The jobs and workflows with ``onPaused.alertAfter`` and a reporter, worked out
        once per applied job set (the scheduler answers one mapping per swap), so a
        round costs them, not every job."""
        jobs, workflows = self._jobs(), self._workflows()
        last = self._alerting_of
        if last is None or last[0] is not jobs or last[1] is not workflows:
            self._alerting_of = (jobs, workflows)
            self._alerting_jobs = [
                job
                for job in (*jobs.values(), *(flow.job for flow in workflows.values()))
                if job.config.on_paused.alert_after is not None and _reports(job)
            ]
        return self._alerting_jobs

    async def _claim(self, job: str, pause: Pause, instance: str) -> bool:
        """Whether this node reports ``pause`` (put-if-absent in the store, if any)."""
        store = self._store()
        if store is None:
            return True
        marker = key("alerts", "paused", job, pause.source)
        mine: Record = {"job": job, "instance": instance, "node": self.node}
        try:
            return await claim_report(store, marker, mine)
        except StateError as exc:
            logger.warning(
                "Job %s: cannot tell whether its pause was reported already (%s); reporting",
                job,
                redact(str(exc)),
                extra={"job": job},
            )
            return True

    def _log_ends(self) -> None:
        now = self.now()
        ends = [(False, *item) for item in self._api.items()]
        ends += [(True, *item) for item in self._api_flows.items()]
        for workflow, job, pause in ends:
            mark = (job, str(pause.since))
            if pause.until is not None and not pause.holds(now) and mark not in self._ended:
                self._ended.add(mark)
                logger.info(
                    "%s %s: its pause by %s ended (until %s); fires run again",
                    _what(workflow),
                    job,
                    pause.by or "anonymous",
                    utc_text(pause.until),
                    extra={"job": job},
                )

    async def _rounds(self) -> None:
        while True:
            await asyncio.sleep(self.poll_every)
            try:
                await self.refresh()
            except StateError as exc:
                logger.debug("Pauses: cannot read the store (%s)", redact(str(exc)))
            self._log_ends()
            try:
                await self.check_alerts()
            except Exception:
                logger.exception("Pauses: the onPaused check failed; please report this")

    # ------------------------------------------------------------ the section

    def affected(self, plan: Plan) -> bool:
        return True

    async def prepare(self, desired: DesiredState) -> None:
        return None

    def commit(self, prepared: None, desired: DesiredState) -> None:
        """Note when each job's config pause began here; start the rounds."""
        now = self.now()
        scheduled = {
            **desired.jobs,
            **{name: flow.job for name, flow in desired.workflows.items()},
        }
        for name, job in scheduled.items():
            if job.config.suspend is None:
                self._config_since.pop(name, None)
            elif name not in self._config_since:
                self._config_since[name] = now
                logger.warning(
                    "%s %s is paused by the repository (suspend)%s%s",
                    _what(name in desired.workflows),
                    name,
                    f" until {utc_text(job.config.suspend.until)}"
                    if job.config.suspend.until is not None
                    else "",
                    f": {redact(job.config.suspend.reason)}" if job.config.suspend.reason else "",
                    extra={"job": name},
                )
        for name in [n for n in self._config_since if n not in scheduled]:
            del self._config_since[name]
        if self._task is None:
            self._task = asyncio.create_task(self._rounds(), name="pauses")

    async def discard(self, prepared: None) -> None:
        return None

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class PauseGate:
    """The scheduler's gate: the cluster's answer first (a node that would not run the
    job anyway says so), then ``paused`` for a job a pause holds."""

    def __init__(self, inner: ClusterGate | None, book: PauseBook) -> None:
        self.inner = inner
        self.book = book

    def allows(self, job: Job) -> str | None:
        reason = self.inner.allows(job) if self.inner is not None else None
        if reason is not None:
            return reason
        return "paused" if self.book.holding(job) is not None else None

    async def release(self) -> None:
        if self.inner is not None:
            await self.inner.release()


class _PauseCollector(Collector):
    def __init__(self, book: PauseBook) -> None:
        self.book = book

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("cronstable_job_paused", "", labels=["job", "source"])
        yield GaugeMetricFamily("cronstable_job_paused_info", "", labels=_INFO)
        for name in ("since", "until"):
            yield GaugeMetricFamily(
                f"cronstable_job_paused_{name}_timestamp_seconds", "", labels=["job", "source"]
            )

    def collect(self) -> Iterator[Metric]:
        paused = GaugeMetricFamily(
            "cronstable_job_paused",
            "1 for each pause holding a job now, by source (config: suspend in the "
            "repository; api: POST /jobs/{name}/pause).",
            labels=["job", "source"],
        )
        info = GaugeMetricFamily(
            "cronstable_job_paused_info",
            "Who paused a job (the API token's name; empty for the repository) and why.",
            labels=_INFO,
        )
        since = GaugeMetricFamily(
            "cronstable_job_paused_since_timestamp_seconds",
            "When each pause began (Unix time).",
            labels=["job", "source"],
        )
        until = GaugeMetricFamily(
            "cronstable_job_paused_until_timestamp_seconds",
            "When each pause ends by itself (Unix time); absent for one without an end.",
            labels=["job", "source"],
        )
        for pause in self.book.active():
            labels = [pause.job, pause.source]
            paused.add_metric(labels, 1)
            info.add_metric([*labels, pause.by or "", (pause.reason or "")[:200]], 1)
            if pause.since is not None:
                since.add_metric(labels, pause.since.timestamp())
            if pause.until is not None:
                until.add_metric(labels, pause.until.timestamp())
        yield from (paused, info, since, until)


_INFO = ["job", "source", "by", "reason"]
