"""``cronstable run``: the daemon in the foreground."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cronstable.config.limits import DEFAULT_LIMITS, Limits


def cmd_run(
    spec: str,
    log_level: str | None,
    log_format: str | None,
    cache_dir: str | None,
    limits: Limits = DEFAULT_LIMITS,
    *,
    settle: float | None = None,
    node_name: str = "localhost",
    state_dir: str | None = None,
) -> int:
    """``log_level``/``log_format``: None when not given (INFO and text, which the
    configuration's ``logging`` section may change); given, they win over it."""
    from cronstable.logs import LogOverrides, setup_logging
    from cronstable.runtime.daemon import Daemon
    from cronstable.sources.base import SourceError
    from cronstable.sources.factory import open_source

    setup_logging(log_level or "INFO", log_format or "text")
    log_open_files_limit()
    try:
        source = open_source(
            spec,
            cache_dir=Path(cache_dir) if cache_dir else None,
            limits=limits,
            settle=settle,
        )
    except SourceError as exc:
        import logging

        from cronstable.cli.sides import source_error

        logging.getLogger("cronstable").error("%s", source_error(spec, exc))
        return 2

    async def main() -> int:
        from cronstable.cluster.claims import SlotGuard
        from cronstable.cluster.section import ClusterSection
        from cronstable.cluster.slot_section import SlotSection
        from cronstable.platform import default_state_dir
        from cronstable.state.keeper import StateKeeper
        from cronstable.state.section import StateSection
        from cronstable.store_link import StoreLinks
        from cronstable.web.section import WebSection

        overrides = LogOverrides(level=log_level, format=log_format)
        daemon = Daemon(source, log_overrides=overrides, limits=limits)
        scheduler = daemon.scheduler
        cluster = ClusterSection(node_name, daemon.metrics.registry)
        cluster.on_change = scheduler.wake
        daemon.add_section(cluster)
        scheduler.gate = cluster
        daemon.control.cluster = lambda: cluster.view(iter(scheduler.jobs.values()))
        keeper = StateKeeper(
            node_name,
            scheduler,
            daemon.history,
            cluster_wide=cluster.one_run,
            gated=cluster.gated,
        )
        scheduler.guards.append(keeper)
        scheduler.state = keeper
        scheduler.run_listeners.append(keeper)
        daemon.control.state = keeper.view
        state = StateSection(keeper, state_dir or default_state_dir(), daemon.metrics.registry)
        daemon.add_section(state)
        slots = SlotGuard(
            node_name,
            replace_runs=scheduler.replace_runs,
            # the state section's onStoreUnavailable; without one, degrade
            on_unavailable=lambda: keeper.policy if keeper.store is not None else "degrade",
            stopping=lambda: scheduler.stopping,
        )
        scheduler.guards.insert(0, slots)  # a held slot refuses before any record is written
        daemon.control.start_check = slots.refusal
        slot_section = SlotSection(slots, daemon.metrics.registry)
        daemon.add_section(slot_section)
        # a store that does not answer: /readyz, /status and the metrics say which
        stores = StoreLinks(
            {
                "cluster": lambda: cluster.link,
                "slots": lambda: slot_section.link,
                "state": lambda: state.link,
            }
        )
        daemon.metrics.registry.register(stores.collector())
        daemon.control.stores = stores.view
        daemon.add_section(WebSection(daemon.control, daemon.metrics.registry))
        return await daemon.run()

    return asyncio.run(main())


def log_open_files_limit() -> None:
    """Raise the soft open-files limit to the hard one, so HTTP clients cannot take
    the descriptors jobs need; say so at INFO."""
    import logging

    from cronstable.platform import raise_open_files_limit

    limit = raise_open_files_limit()
    log = logging.getLogger("cronstable")
    if limit.error:
        log.warning(
            "Open files limit: cannot raise %d to the hard limit %d: %s",
            limit.soft_before,
            limit.hard,
            limit.error,
        )
    elif limit.soft != limit.soft_before:
        log.info("Open files limit: raised from %d to %d (the hard limit)",
                 limit.soft_before, limit.soft)  # fmt: skip
    else:
        log.info("Open files limit: %d (the hard limit)", limit.soft)
