"""The one function that builds a daemon: :func:`build_daemon`.

Every part is made here, handed what it needs when it is made, and never rewired
afterwards.  Read :func:`build_daemon` top to bottom: the shared pieces, what the
scheduler calls (and how the parts that call it back reach it), the scheduler, the
sections in the order a revision is applied, the read-only view the web serves, and
what a stopping daemon closes, in order.

Where a new part goes: a daemon-wide section of the configuration is one more entry
in ``sections`` (its place in the list is its place in prepare and commit, and the
comment there says why each is where it is); a launch guard, a run listener or a
report listener is one more constructor argument of the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronstable.channel.locks import Locks
from cronstable.channel.server import RunChannels
from cronstable.cluster.claims import SlotGuard
from cronstable.cluster.lock_section import LockSlotSection, lock_record
from cronstable.cluster.pool_section import PoolSlotSection
from cronstable.cluster.pool_slots import PoolSlots
from cronstable.cluster.reboot import RebootGuard, reboot_scope
from cronstable.cluster.section import ClusterSection
from cronstable.cluster.slot_section import SlotSection
from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.etcd import EtcdPools
from cronstable.later import Later
from cronstable.logs import LogOverrides
from cronstable.metrics import DaemonMetrics
from cronstable.platform import default_state_dir, run_channel_dir
from cronstable.reconcile.apply import Applier, LoggingSection, ReconcileStatus, Section
from cronstable.reporting.dispatcher import ReportDispatcher
from cronstable.reporting.statsd import StatsdListener
from cronstable.runtime.clock import Clock, SystemClock
from cronstable.runtime.control import DaemonControl, RunRecordsSection
from cronstable.runtime.daemon import Closer, Daemon, JobsSection, ProcessSpawner, request_reload
from cronstable.runtime.events import EventHub
from cronstable.runtime.fleet import Fleet
from cronstable.runtime.history import FlowHistory, RunHistory
from cronstable.runtime.output import OutputMirror
from cronstable.runtime.pool_section import PoolsSection
from cronstable.runtime.pools import Pools
from cronstable.runtime.run_metrics import RunMetrics
from cronstable.runtime.scheduler import Scheduler
from cronstable.runtime.sdnotify import ServiceNotifier
from cronstable.runtime.triggers import Triggers, noticed_kind
from cronstable.sources.base import Source
from cronstable.state.alerts import AlertWatch
from cronstable.state.audit import AuditTrail
from cronstable.state.fleet import LastRuns, StoreFleetRecords
from cronstable.state.keeper import StateKeeper
from cronstable.state.pauses import PauseBook, PauseGate
from cronstable.state.section import StateSection
from cronstable.store_link import StoreLinks
from cronstable.web.section import WebSection


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What differs from node to node: the command line and the environment say it,
    never the repository (which holds what is the same on every node)."""

    name: str = "localhost"
    """``--node-name``: this node in the cluster's records and in its state records."""
    state_dir: Path | None = None
    """``--state-dir``: where a ``filesystem`` state store keeps this node's records
    (None: the platform's default, :func:`cronstable.platform.default_state_dir`)."""
    cache_dir: Path | None = None
    """``--cache-dir``: where a remote source keeps its last good revision (the source
    is opened with it, before the daemon is built)."""
    log_overrides: LogOverrides = field(default_factory=LogOverrides)
    """``-l``/``--log-format`` as given: they win over the ``logging`` section."""
    limits: Limits = DEFAULT_LIMITS
    """The input limits every revision is loaded under."""
    own_process: bool = False
    """The daemon is the process (``cronstable run``): what the first revision made is
    frozen out of the cyclic collector's walks (see :class:`~cronstable.reconcile.apply.Applier`);
    never in a process that builds daemons of its own (the tests)."""
    runtime_dir: Path | None = None
    """``--runtime-dir``: the daemon's runtime directory, where the runs' sockets are
    (None: the platform's, :func:`cronstable.platform.run_channel_dir`)."""


def build_daemon(
    source: Source,
    node: NodeFacts,
    *,
    clock: Clock | None = None,
    notifier: ServiceNotifier | None = None,
) -> Daemon:
    """A daemon that follows ``source`` as node ``node`` (not started: :meth:`Daemon.run`).

    ``clock``: the scheduler's (the system's by default; tests give a manual one).
    ``notifier``: the service manager's (systemd), read from the environment before
    this is called, so the jobs' environment (copied here) is without its variables.
    """
    metrics = DaemonMetrics()
    registry = metrics.registry
    # the source is opened before the daemon (a bad spec is reported before anything
    # starts), so this is the one hook set on something already built
    source.error_hook = metrics.source_error
    mirror = OutputMirror()
    history = RunHistory()
    flow_history = FlowHistory()
    events = EventHub()
    status = ReconcileStatus(observers=[events.revision])
    pools = EtcdPools()  # one pool of connections per etcd: leadership, slots, state share it

    # What the scheduler asks and tells.  Some of these call the scheduler back (a slot
    # another node's Replace takes stops the runs here; the state restore resumes
    # schedules; metrics and statsd read the job table), so they are built first and
    # reach it through `scheduler_of`, which is set the moment the scheduler exists.
    scheduler_of: Later[Scheduler] = Later("the scheduler")
    control_of: Later[DaemonControl] = Later("the daemon's control")
    cluster = ClusterSection(
        node.name, registry, pools=pools, on_change=lambda: scheduler_of().wake()
    )  # the gate: may this node start this job now (clusterPolicy)?
    keeper = StateKeeper(
        node.name,
        scheduler_of,
        history,
        cluster_wide=cluster.one_run,
        gated=cluster.gated,
        flow_history=flow_history,
        leadership=cluster.seen,
        members=cluster.members,
    )  # a launch guard, the state hooks, a run and a workflow listener: durable state
    slots = SlotGuard(
        node.name,
        replace_runs=lambda job, why: scheduler_of().replace_runs(job, why),
        # the state section's onStoreUnavailable; without one, degrade
        on_unavailable=lambda: keeper.policy if keeper.store is not None else "degrade",
        stopping=lambda: scheduler_of().stopping,
        # BufferOne, BufferAll: a launch waiting for another node's run counts as buffered
        waiting=lambda launch, node: scheduler_of().slot_wait(launch, node),
        abandoned=lambda launch: scheduler_of().abandoned(launch),
    )  # a launch guard: concurrencyScope cluster holds the job's slot in the cluster's store
    reboot = RebootGuard(
        lambda: cluster.leadership,
        cluster.one_run,
        lambda: reboot_scope(list(scheduler_of().jobs.values()), cluster.one_run),
        on_unavailable=lambda: keeper.policy if keeper.store is not None else "degrade",
    )  # a launch guard: a Leader @reboot job once per definition, on a store with a ran-set
    pool_slots = PoolSlots(
        node.name,
        on_unavailable=lambda: keeper.policy if keeper.store is not None else "degrade",
    )  # the records of scope-cluster pools in the cluster's store
    lock_slots = PoolSlots(
        node.name,
        on_unavailable=lambda: keeper.policy if keeper.store is not None else "degrade",
        title="Cluster locks",
        naming=lock_record,
    )  # the records of the named locks (cronstable lock) in the cluster's store
    channels = RunChannels(
        run_channel_dir(str(node.runtime_dir) if node.runtime_dir is not None else None),
        states=lambda name: control_of().job_state(name),
        locks=Locks(lock_slots),
        xcoms=_LaterXcoms(control_of),
    )  # every run's socket and token: what cronstable state get and lock ask
    spawner = ProcessSpawner(mirror, channels)
    run_metrics = RunMetrics(registry, scheduler_of)
    statsd = StatsdListener(lambda name: scheduler_of().job(name))
    reports = ReportDispatcher(registry, revision=status.applied_revision)
    clock = clock or SystemClock()
    job_pools = Pools(clock, shared=pool_slots)  # the slots launches of jobs with `pool` wait for
    pauses = PauseBook(
        node.name,
        lambda: keeper.store,
        lambda: scheduler_of().jobs,
        clock.now,
        on_alert=reports.pause_exceeded,
        registry=registry,
        workflows=lambda: scheduler_of().workflows,
    )  # suspend and the API's pauses, kept in the state store; the gate asks it
    # the fleet view's last run of each job, where other nodes read it
    last_runs = LastRuns(
        node.name, keeper.submit, lambda: keeper.store is not None and keeper.store.shared
    )
    alerts = AlertWatch(
        node.name,
        lambda: keeper.store,
        lambda: scheduler_of().scheduled,
        lambda name: scheduler_of().job(name),
        clock.now,
        sleep=clock.sleep,
        gate=lambda job: scheduler_of().gate_says(job),
        paused=lambda job: pauses.holding(job) is not None,
        start_of=lambda job, fire: scheduler_of().start_of(job, fire),
        durations=lambda name: (
            history.success_durations(name) or flow_history.success_durations(name)
        ),
        last_success=lambda name: history.last_success_at(name) or flow_history.last_success(name),
        sink=reports,
        registry=registry,
    )  # onLate, onStuck, onStale: a run, report and workflow listener with rounds of its own
    scheduler = Scheduler(
        clock,
        spawner,
        gate=PauseGate(cluster, pauses),  # clusterPolicy first, then a pause
        # a held slot refuses before any state record is written; the leadership's
        # @reboot ran-set is written last, once nothing else refuses
        guards=(slots, keeper, reboot),
        hooks=keeper,
        run_listeners=(history, run_metrics, events, statsd, keeper, last_runs, alerts),
        report_listeners=(reports, alerts),
        flow_listeners=(flow_history, run_metrics, statsd, keeper, last_runs, alerts),
        pools=job_pools,
        revision=status.applied_revision,  # each run records the revision it ran under
    )
    scheduler_of.set(scheduler)

    state = StateSection(
        keeper, node.state_dir or default_state_dir(), registry, pools=pools, pauses=pauses
    )
    slot_section = SlotSection(slots, registry, pools=pools)
    pool_slot_section = PoolSlotSection(pool_slots, registry, pools=pools)
    lock_section = LockSlotSection(lock_slots, registry, pools=pools)
    # a store that does not answer: /readyz, /status and the metrics say which
    stores = StoreLinks(
        {
            "cluster": lambda: cluster.link,
            "slots": lambda: slot_section.link,
            "pool-slots": lambda: pool_slot_section.link,
            "lock-slots": lambda: lock_section.link,
            "state": lambda: state.link,
        }
    )
    registry.register(stores.collector())
    registry.register(channels.collector())
    # each applied revision goes into this node's membership record (the fleet view)
    status.observers.append(
        lambda record: (
            cluster.revision_applied(record.revision) if record.outcome != "rejected" else None
        )
    )
    # each attempt the applier records, with what triggered it, goes into the audit trail
    # (the state store's when there is one: written through the keeper's writer)
    audit = AuditTrail(node.name, lambda: keeper.store, keeper.submit)
    status.observers.append(lambda record: audit.add(record.audit(node.name)))
    triggers = Triggers(noticed_kind(source.kind))  # reload requests waiting for a revision
    fleet = Fleet(
        node.name,
        scheduler,
        history,
        flow_history,
        now=clock.now,
        cluster=cluster.fleet,
        placement=cluster.placement,
        records=StoreFleetRecords(lambda: keeper.store),
        pauses=pauses,
    )  # GET /fleet: the members' records and the state store's run records, no node asked
    control = DaemonControl(
        status=status,
        scheduler=scheduler,
        history=history,
        metrics=metrics,
        reload=lambda trigger: request_reload(source, triggers, trigger),
        events=events,
        source=source,
        cluster=lambda: cluster.view(iter(scheduler.jobs.values())),
        state=keeper.view,
        stores=stores.view,
        start_check=slots.refusal,
        flow_history=flow_history,
        limits=node.limits,
        pauses=pauses,
        fleet=fleet,
        audit=audit,
        triggers=triggers,
        alerts=alerts.view,
    )  # what the web reads of the daemon, and the few things it may ask
    control_of.set(control)
    web = WebSection(control, registry)
    # The sections, in the order each revision prepares and then commits them; the
    # first that cannot be prepared rejects the revision and the later ones are not.
    sections: list[Section[Any]] = [
        # first: the job table every later commit meets (the state restore resumes and
        # re-arms the jobs of this revision)
        JobsSection(scheduler, spawner),
        # right after the jobs: no launch can meet a job whose pool is not applied yet,
        # and the state restore (below) adopts runs that hold pool slots
        PoolsSection(job_pools, registry),
        # early: what the later commits log goes through the revision's handlers
        LoggingSection(node.log_overrides),
        RunRecordsSection(history, run_metrics, flow_history),  # drops what removed jobs left
        reports,
        # cluster before state: the restore asks the gate which jobs the leadership
        # places (their fires are not this node's to resume)
        cluster,
        state,
        pauses,  # after state: it reads the store the state section committed
        alerts,  # after state too, for the same reason
        slot_section,
        pool_slot_section,
        lock_section,
        # last: it binds its listeners only once everything else is prepared, and its
        # commit serves what the others committed
        web,
    ]
    applier = Applier(
        sections, metrics, limits=node.limits, status=status, freeze_start_up=node.own_process
    )

    # closed in this order once the runs drained (a failure is logged, the rest closed)
    closing: list[Closer] = [
        ("backfills", control.backfills.close),  # no run of one starts any more
        ("statsd listener", statsd.close),  # first: the stop metrics of the last runs
        ("run channels", channels.close),  # every run ended: what is left of their sockets
        ("reporting section", reports.close),  # the reports in flight, each in its timeout
        ("cluster section", cluster.close),
        ("pauses", pauses.close),
        ("alerts", alerts.close),  # before the state section closes the store it writes
        ("audit trail", audit.close),  # its reading of the store, before the store closes
        ("state section", state.close),  # what is queued is written (bounded)
        ("cluster-slots section", slot_section.close),
        ("pools", job_pools.close),  # the pumps of the cluster pools, before their store
        ("cluster-pools section", pool_slot_section.close),
        ("cluster-locks section", lock_section.close),  # the locks' records, with the runs
        ("web section", web.close),  # last of the sections: /status answers meanwhile
        ("etcd connections", pools.close),  # what a section did not give back
        ("source", source.close),
    ]
    return Daemon(
        source,
        applier=applier,
        scheduler=scheduler,
        control=control,
        metrics=metrics,
        mirror=mirror,
        closing=closing,
        notifier=notifier,
        triggers=triggers,
    )


class _LaterXcoms:
    """The daemon's control as the runs' channels keep workflow values in it (it is built
    after the spawner that opens the channels)."""

    def __init__(self, control: Later[DaemonControl]) -> None:
        self.control = control

    def xcom_push(
        self, workflow: str, run: str, task: str, values: Mapping[str, str]
    ) -> str | None:
        return self.control().xcom_push(workflow, run, task, values)

    def xcom_pull(self, workflow: str, run: str, task: str, key: str) -> str | None:
        return self.control().xcom_pull(workflow, run, task, key)
