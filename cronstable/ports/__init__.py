"""The leaf of interfaces: what the daemon's parts hand each other.

Nothing here does I/O or imports the daemon: only :mod:`cronstable.config`,
:mod:`cronstable.errors` and the standard library are below it.  Import the
names from ``cronstable.ports``; the modules inside only group them, one job each
(a single file would hold five):

* :mod:`.runs`: the run records (:class:`RunStart`, :class:`RunResult`,
  :class:`FinishedRun`, :class:`MissedFire`) and their vocabulary;
* :mod:`.launch`: a run about to start (:class:`Launch`) and who has a say in it
  (:class:`ClusterGate`, :class:`LaunchGuard`, :class:`StateHooks`), a :class:`Run`;
* :mod:`.listeners`: who hears of runs (:class:`RunListener`, :class:`ReportListener`);
* :mod:`.flows`: workflow runs (:class:`FlowRunView`, :class:`TaskRunView`) and who hears
  of them (:class:`FlowListener`);
* :mod:`.alerts`: what a late fire, a stuck run and a stale job are reported with
  (:class:`StuckRun`, :class:`AlertSink`) and shown now (:class:`JobAlerts`);
* :mod:`.pauses`: a job held back (:class:`Pause`, :class:`JobPauses`) and what may
  be asked of the pauses (:class:`PauseControl`);
* :mod:`.restore`: what a previous daemon's records are put back into
  (:class:`Restorable`, :class:`History`);
* :mod:`.channel`: a run's channel to its daemon (:class:`RunChannel`, :class:`RunGrant`),
  which the process layer opens for each run it starts;
* :mod:`.section`: :class:`Section`, a part of the daemon a revision configures;
* :mod:`.views`: the read models the daemon shows of itself (:class:`Status`,
  :class:`ClusterView` …), which :mod:`cronstable.web.encode` writes as JSON;
* :mod:`.fleet`: the fleet view (:class:`FleetView`) and the state records it reads
  (:class:`FleetRecords`);
* :mod:`.audit`: the audit trail (:class:`Trigger`, :class:`AuditEntry`,
  :class:`AuditPage`, :class:`AuditLog`).
"""

from __future__ import annotations

from cronstable.ports.alerts import AlertSink, JobAlerts, LateNow, StaleNow, StuckNow, StuckRun
from cronstable.ports.audit import (
    TRIGGER_KINDS,
    AuditEntry,
    AuditLog,
    AuditOutcome,
    AuditPage,
    Trigger,
    TriggerKind,
)
from cronstable.ports.channel import RunChannel, RunGrant, RunOwner
from cronstable.ports.fleet import (
    FleetCluster,
    FleetJob,
    FleetKind,
    FleetMember,
    FleetRecords,
    FleetView,
    Placement,
    RunRecord,
)
from cronstable.ports.flows import (
    WORKFLOW_RUN_ENV,
    FlowKind,
    FlowListener,
    FlowRecords,
    FlowRunView,
    TaskRunView,
    XcomValue,
    flow_run_id,
    keep_values,
)
from cronstable.ports.launch import (
    BackfillRefused,
    ClusterGate,
    Launch,
    LaunchGuard,
    LaunchKind,
    Run,
    SharedSlots,
    SlotsUnavailable,
    StateHooks,
)
from cronstable.ports.listeners import ReportListener, RunListener
from cronstable.ports.pauses import JobPauses, Pause, PauseControl, PauseRefused, PauseSource
from cronstable.ports.restore import History, Restorable, WallClock
from cronstable.ports.runs import (
    FAILURES,
    MISSED_REASONS,
    RUN_OUTCOMES,
    SPAWN_FAILED_RETURNCODE,
    FinishedRun,
    MissedFire,
    MissedReason,
    Moment,
    RunOutcome,
    RunResult,
    RunStart,
    report_moments,
    run_id,
    run_outcome,
    tail_text,
    utc_text,
)
from cronstable.ports.section import Section
from cronstable.ports.views import (
    AppliedConfig,
    BackfillView,
    ClusterMember,
    ClusterView,
    Election,
    EventData,
    FireBand,
    FlowRuns,
    Forecast,
    JobForecast,
    JobRuns,
    JobState,
    JobStatus,
    PendingRetry,
    PoolView,
    QueuedView,
    RevisionView,
    RunEnded,
    StateView,
    Status,
    StoreView,
    TaskDefinition,
    WorkflowStatus,
)

__all__ = [
    "FAILURES",
    "MISSED_REASONS",
    "RUN_OUTCOMES",
    "SPAWN_FAILED_RETURNCODE",
    "TRIGGER_KINDS",
    "AlertSink",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "AuditPage",
    "AppliedConfig",
    "BackfillRefused",
    "BackfillView",
    "ClusterGate",
    "ClusterMember",
    "ClusterView",
    "Election",
    "EventData",
    "FinishedRun",
    "FireBand",
    "FleetCluster",
    "FleetJob",
    "FleetKind",
    "FleetMember",
    "FleetRecords",
    "FleetView",
    "FlowKind",
    "FlowListener",
    "FlowRecords",
    "FlowRunView",
    "FlowRuns",
    "Forecast",
    "History",
    "JobForecast",
    "JobRuns",
    "JobState",
    "JobPauses",
    "JobStatus",
    "PendingRetry",
    "Launch",
    "LaunchGuard",
    "LaunchKind",
    "MissedFire",
    "PoolView",
    "QueuedView",
    "MissedReason",
    "Moment",
    "Pause",
    "PauseControl",
    "PauseRefused",
    "PauseSource",
    "Placement",
    "ReportListener",
    "Restorable",
    "RevisionView",
    "Run",
    "RunChannel",
    "RunEnded",
    "RunGrant",
    "RunOwner",
    "RunListener",
    "RunRecord",
    "SharedSlots",
    "SlotsUnavailable",
    "RunOutcome",
    "RunResult",
    "RunStart",
    "Section",
    "StateHooks",
    "StateView",
    "Status",
    "StoreView",
    "StuckRun",
    "StuckNow",
    "StaleNow",
    "LateNow",
    "JobAlerts",
    "TaskDefinition",
    "TaskRunView",
    "Trigger",
    "TriggerKind",
    "WallClock",
    "WORKFLOW_RUN_ENV",
    "XcomValue",
    "WorkflowStatus",
    "flow_run_id",
    "keep_values",
    "report_moments",
    "run_id",
    "run_outcome",
    "tail_text",
    "utc_text",
]
