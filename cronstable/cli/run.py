"""``cronstable run``: the daemon in the foreground."""

from __future__ import annotations

from pathlib import Path

from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.runtime.loops import LoopChoice


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
    loop: LoopChoice = "auto",
    executor_workers: int | None = None,
    runtime_dir: str | None = None,
) -> int:
    """``log_level``/``log_format``: None when not given (INFO and text, which the
    configuration's ``logging`` section may change); given, they win over it.
    ``loop``/``executor_workers``: ``--loop`` and ``--executor-workers``
    (:mod:`cronstable.runtime.loops`)."""
    from cronstable.daemon.build import NodeFacts, build_daemon
    from cronstable.logs import LogOverrides, setup_logging
    from cronstable.runtime import loops
    from cronstable.runtime.sdnotify import ServiceNotifier
    from cronstable.sources.base import SourceError
    from cronstable.sources.factory import open_source

    node = NodeFacts(
        name=node_name,
        state_dir=Path(state_dir) if state_dir else None,
        cache_dir=Path(cache_dir) if cache_dir else None,
        log_overrides=LogOverrides(level=log_level, format=log_format),
        limits=limits,
        own_process=True,
        runtime_dir=Path(runtime_dir) if runtime_dir else None,
    )
    setup_logging(log_level or "INFO", log_format or "text")
    import logging

    log = logging.getLogger("cronstable")
    try:
        event_loop = loops.plan_loop(loop)
    except loops.LoopUnavailable as exc:
        log.error("%s", exc)
        return 2
    workers = executor_workers or loops.default_executor_workers()
    loops.tune_collector()
    log_open_files_limit()
    try:
        source = open_source(spec, cache_dir=node.cache_dir, limits=limits, settle=settle)
    except SourceError as exc:
        from cronstable.cli.sides import source_error

        log.error("%s", source_error(spec, exc))
        return 2

    # read (and removed from the environment the jobs inherit) before the daemon is built
    notifier = ServiceNotifier.from_environment()

    async def main() -> int:
        return await build_daemon(source, node, notifier=notifier).run()

    def started() -> None:
        log.info(
            "Event loop: %s (--loop %s); default thread pool: %d threads (%s)",
            event_loop.name,
            event_loop.chosen,
            workers,
            loops.WORKER_THREAD_PREFIX,
        )

    return loops.run(main(), event_loop, workers=workers, on_start=started)


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
