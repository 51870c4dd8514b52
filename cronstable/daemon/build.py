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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronstable.cluster.claims import SlotGuard
from cronstable.cluster.section import ClusterSection
from cronstable.cluster.slot_section import SlotSection
from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.etcd import EtcdPools
from cronstable.later import Later
from cronstable.logs import LogOverrides
from cronstable.metrics import DaemonMetrics
from cronstable.platform import default_state_dir
from cronstable.reconcile.apply import Applier, LoggingSection, ReconcileStatus, Section
from cronstable.reporting.dispatcher import ReportDispatcher
from cronstable.reporting.statsd import StatsdListener
from cronstable.runtime.clock import Clock, SystemClock
from cronstable.runtime.control import DaemonControl, RunRecordsSection
from cronstable.runtime.daemon import Closer, Daemon, JobsSection, ProcessSpawner, request_reload
from cronstable.runtime.events import EventHub
from cronstable.runtime.history import RunHistory
from cronstable.runtime.output import OutputMirror
from cronstable.runtime.run_metrics import RunMetrics
from cronstable.runtime.scheduler import Scheduler
from cronstable.runtime.sdnotify import ServiceNotifier
from cronstable.sources.base import Source
from cronstable.state.keeper import StateKeeper
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
    spawner = ProcessSpawner(mirror)
    history = RunHistory()
    events = EventHub()
    status = ReconcileStatus(observers=[events.revision])
    pools = EtcdPools()  # one pool of connections per etcd: leadership, slots, state share it

    # What the scheduler asks and tells.  Some of these call the scheduler back (a slot
    # another node's Replace takes stops the runs here; the state restore resumes
    # schedules; metrics and statsd read the job table), so they are built first and
    # reach it through `scheduler_of`, which is set the moment the scheduler exists.
    scheduler_of: Later[Scheduler] = Later("the scheduler")
    cluster = ClusterSection(
        node.name, registry, pools=pools, on_change=lambda: scheduler_of().wake()
    )  # the gate: may this node start this job now (clusterPolicy)?
    keeper = StateKeeper(
        node.name, scheduler_of, history, cluster_wide=cluster.one_run, gated=cluster.gated
    )  # a launch guard, the state hooks and a run listener: durable state
    slots = SlotGuard(
        node.name,
        replace_runs=lambda job, why: scheduler_of().replace_runs(job, why),
        # the state section's onStoreUnavailable; without one, degrade
        on_unavailable=lambda: keeper.policy if keeper.store is not None else "degrade",
        stopping=lambda: scheduler_of().stopping,
    )  # a launch guard: concurrencyScope cluster holds the job's slot in the cluster's store
    run_metrics = RunMetrics(registry, scheduler_of)
    statsd = StatsdListener(lambda name: scheduler_of().job(name))
    reports = ReportDispatcher(registry, revision=status.applied_revision)
    scheduler = Scheduler(
        clock or SystemClock(),
        spawner,
        gate=cluster,
        guards=(slots, keeper),  # a held slot refuses before any state record is written
        hooks=keeper,
        run_listeners=(history, run_metrics, events, statsd, keeper),
        report_listeners=(reports,),
    )
    scheduler_of.set(scheduler)

    state = StateSection(keeper, node.state_dir or default_state_dir(), registry, pools=pools)
    slot_section = SlotSection(slots, registry, pools=pools)
    # a store that does not answer: /readyz, /status and the metrics say which
    stores = StoreLinks(
        {
            "cluster": lambda: cluster.link,
            "slots": lambda: slot_section.link,
            "state": lambda: state.link,
        }
    )
    registry.register(stores.collector())
    control = DaemonControl(
        status=status,
        scheduler=scheduler,
        history=history,
        metrics=metrics,
        reload=lambda: request_reload(source),
        events=events,
        source=source,
        cluster=lambda: cluster.view(iter(scheduler.jobs.values())),
        state=keeper.view,
        stores=stores.view,
        start_check=slots.refusal,
    )  # what the web reads of the daemon, and the few things it may ask
    web = WebSection(control, registry)
    # The sections, in the order each revision prepares and then commits them; the
    # first that cannot be prepared rejects the revision and the later ones are not.
    sections: list[Section[Any]] = [
        # first: the job table every later commit meets (the state restore resumes and
        # re-arms the jobs of this revision)
        JobsSection(scheduler, spawner),
        # early: what the later commits log goes through the revision's handlers
        LoggingSection(node.log_overrides),
        RunRecordsSection(history, run_metrics),  # drops what removed jobs left
        reports,
        # cluster before state: the restore asks the gate which jobs the leadership
        # places (their fires are not this node's to resume)
        cluster,
        state,
        slot_section,
        # last: it binds its listeners only once everything else is prepared, and its
        # commit serves what the others committed
        web,
    ]
    applier = Applier(
        sections, metrics, limits=node.limits, status=status, freeze_start_up=node.own_process
    )

    # closed in this order once the runs drained (a failure is logged, the rest closed)
    closing: list[Closer] = [
        ("statsd listener", statsd.close),  # first: the stop metrics of the last runs
        ("reporting section", reports.close),  # the reports in flight, each in its timeout
        ("cluster section", cluster.close),
        ("state section", state.close),  # what is queued is written (bounded)
        ("cluster-slots section", slot_section.close),
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
    )
