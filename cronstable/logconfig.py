"""The ``logging`` section in two phases: build it all first, then install it.

``logging.config.dictConfig`` builds and installs in one pass: it closes the
running handlers first, so a handler that cannot be built (a ``FileHandler``
into a missing directory) fails halfway, leaving the daemon's logging torn.
Here :func:`build` makes every formatter, filter and handler of a
configuration without touching the live logging, and checks every name and
level the loggers use; :meth:`BuiltLogging.install` then puts them in place
as ``dictConfig`` would, and :meth:`BuiltLogging.close` releases them when the
revision is rejected instead.

The steps are those of CPython's ``DictConfigurator.configure`` (Lib/logging/
config.py), whose methods build each object; only the order changed: the
running handlers are closed and ``logging._handlers`` rewritten at install.
"""

from __future__ import annotations

import copy
import logging
import logging.config
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from cronstable.errors import KeyPath
from cronstable.logs import lean_records


class LoggingSetupError(Exception):
    """A part of a logging configuration cannot be built; ``key`` is where, inside it."""

    def __init__(self, key: KeyPath, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _reason(exc: BaseException) -> str:
    """What went wrong, with the cause when the message alone hides it."""
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({cause})"
    return text


def _cannot_build(key: KeyPath, exc: BaseException) -> LoggingSetupError:
    return LoggingSetupError(key, f"cannot be built: {_reason(exc)}")


def _check_level(level: Any) -> str | None:
    """Why ``level`` is not a logging level (a number or a registered name), if it is not."""
    if isinstance(level, int) and not isinstance(level, bool):
        return None
    if isinstance(level, str) and level in logging.getLevelNamesMapping():
        return None
    return f"unknown level {level!r}"


def _module_lock() -> threading.RLock:
    return cast(threading.RLock, logging._lock)  # type: ignore[attr-defined]


@dataclass(slots=True)
class BuiltLogging:
    """Formatters, filters and handlers built from one configuration, not yet live."""

    configurator: logging.config.DictConfigurator
    incremental: bool
    disable_existing: bool
    handlers: dict[str, logging.Handler] = field(default_factory=dict)
    """Handlers by name, in build order (none for an incremental configuration)."""

    def close(self) -> None:
        """Release what :func:`build` opened (files, sockets); for a rejected revision."""
        for handler in self.handlers.values():
            try:
                handler.close()
            except Exception:  # closing must not fail the rejection
                continue

    def install(self) -> None:
        """Make the configuration live, replacing (and closing) the running handlers."""
        config = self.configurator.config
        lean_records(False)  # its formats and filters may show the caller, thread, process
        with _module_lock():
            if self.incremental:
                self._install_incremental(config)
                return
            built = set(self.handlers.values())
            handler_list: list[Any] = logging._handlerList  # type: ignore[attr-defined]
            replaced = [ref for ref in handler_list if ref() not in built]
            logging._handlers.clear()  # type: ignore[attr-defined]
            logging.shutdown(replaced)
            handler_list[:] = [ref for ref in handler_list if ref() in built]
            for name, handler in self.handlers.items():
                handler.name = name
            # Loggers: as DictConfigurator.configure does, loggers no longer named are
            # disabled (disable_existing_loggers), their children reset otherwise.
            existing = sorted(logging.root.manager.loggerDict)
            children: list[str] = []
            loggers = config.get("loggers", {})
            for name in loggers:
                if name in existing:
                    prefix = name + "."
                    children.extend(n for n in existing if n.startswith(prefix))
                    existing.remove(name)
                self.configurator.configure_logger(name, loggers[name])
            handle_existing = logging.config._handle_existing_loggers  # type: ignore[attr-defined]
            handle_existing(existing, children, self.disable_existing)
            _keep_own_loggers()
            root = config.get("root")
            if root:
                self.configurator.configure_root(root)

    def _install_incremental(self, config: dict[str, Any]) -> None:
        live: dict[str, logging.Handler] = logging._handlers  # type: ignore[attr-defined]
        handlers = config.get("handlers", {})
        for name in handlers:
            level = handlers[name].get("level")
            if level and name in live:
                live[name].setLevel(level)
        loggers = config.get("loggers", {})
        for name in loggers:
            self.configurator.configure_logger(name, loggers[name], True)
        root = config.get("root")
        if root:
            self.configurator.configure_root(root, True)


OWN_LOGGERS = "cronstable"
"""The daemon's own logger tree: a section never disables it (see :func:`_keep_own_loggers`)."""


def _keep_own_loggers() -> None:
    """Enable the daemon's own loggers again after ``disable_existing_loggers``.

    That flag (true unless the section says otherwise, as in ``dictConfig`` and
    yacron) disables every logger created before the section, and the daemon's are
    all created at import: it would go silent, down to revisions rejected and jobs
    failed.  Only ``disabled`` is undone; levels, handlers and ``propagate`` set under
    ``loggers:`` still apply, so a section quiets them with a level instead.
    """
    for name, logger in logging.root.manager.loggerDict.items():
        if isinstance(logger, logging.Logger) and (
            name == OWN_LOGGERS or name.startswith(OWN_LOGGERS + ".")
        ):
            logger.disabled = False


def build(config: dict[str, Any]) -> BuiltLogging:
    """Build a ``dictConfig`` configuration without making it live.

    Raises :class:`LoggingSetupError` naming the part that cannot be built or
    refers to something missing; whatever was built by then is closed.
    Blocking (a file handler opens its file): call it from a thread.
    """
    configurator = logging.config.DictConfigurator(copy.deepcopy(config))
    cfg = configurator.config
    built = BuiltLogging(
        configurator,
        incremental=bool(cfg.pop("incremental", False)),
        disable_existing=bool(cfg.pop("disable_existing_loggers", True)),
    )
    try:
        if built.incremental:
            _check_incremental(cfg)
        else:
            _build_objects(configurator, built)
        _check_loggers(cfg, built)
    except BaseException:
        built.close()
        raise
    return built


def _build_objects(configurator: logging.config.DictConfigurator, built: BuiltLogging) -> None:
    cfg = configurator.config
    formatters = cfg.get("formatters", {})
    filters = cfg.get("filters", {})
    for kind, specs in (("formatters", formatters), ("filters", filters)):
        for name in specs:
            if not isinstance(specs[name], dict):
                raise LoggingSetupError((kind, name), "expected a mapping")
    for name in formatters:
        try:
            formatters[name] = configurator.configure_formatter(formatters[name])
        except Exception as exc:
            raise _cannot_build(("formatters", name), exc) from exc
    for name in filters:
        try:
            filters[name] = configurator.configure_filter(filters[name])
        except Exception as exc:
            raise _cannot_build(("filters", name), exc) from exc
    handlers = cfg.get("handlers", {})
    for name in handlers:
        spec = handlers[name]
        if not isinstance(spec, dict):
            raise LoggingSetupError(("handlers", name), "expected a mapping")
        if "class" not in spec and "()" not in spec:
            raise LoggingSetupError(("handlers", name), "needs a 'class' (or a '()' factory)")
        formatter = spec.get("formatter")
        if formatter and formatter not in formatters:
            raise LoggingSetupError(
                ("handlers", name, "formatter"), f"no formatter named {formatter!r}"
            )
        _check_filter_names(spec.get("filters"), filters, ("handlers", name, "filters"))
    # handlers may name another as their target: sorted, with a second pass, as CPython does
    deferred: list[str] = []
    for name in sorted(handlers):
        try:
            handler = configurator.configure_handler(handlers[name])
        except Exception as exc:
            if "target not configured yet" in str(exc.__cause__):
                deferred.append(name)
                continue
            raise _cannot_build(("handlers", name), exc) from exc
        handlers[name] = built.handlers[name] = handler
    for name in deferred:
        try:
            handler = configurator.configure_handler(handlers[name])
        except Exception as exc:
            raise _cannot_build(("handlers", name), exc) from exc
        handlers[name] = built.handlers[name] = handler


def _check_filter_names(names: Any, filters: Any, key: KeyPath) -> None:
    for name in names or ():
        if not callable(name) and not callable(getattr(name, "filter", None)):
            if name not in filters:
                raise LoggingSetupError(key, f"no filter named {name!r}")


def _check_incremental(cfg: dict[str, Any]) -> None:
    """An incremental configuration may only set levels of handlers that exist now."""
    live: dict[str, logging.Handler] = logging._handlers  # type: ignore[attr-defined]
    handlers = cfg.get("handlers", {})
    for name in handlers:
        if name not in live:
            raise LoggingSetupError(("handlers", name), f"no running handler named {name!r}")
        if not isinstance(handlers[name], dict):
            raise LoggingSetupError(("handlers", name), "expected a mapping")
        level = handlers[name].get("level")
        if level and (problem := _check_level(level)) is not None:
            raise LoggingSetupError(("handlers", name, "level"), problem)


def _loggers_of(cfg: dict[str, Any]) -> Iterable[tuple[KeyPath, Any]]:
    loggers = cfg.get("loggers", {})
    for name in loggers:
        yield ("loggers", name), loggers[name]
    root = cfg.get("root")
    if root:
        yield ("root",), root


def _check_loggers(cfg: dict[str, Any], built: BuiltLogging) -> None:
    """Every level, handler and filter a logger names exists: installing cannot fail."""
    filters = cfg.get("filters", {})
    for key, spec in _loggers_of(cfg):
        if not isinstance(spec, dict):
            raise LoggingSetupError(key, "expected a mapping")
        level = spec.get("level")
        if level is not None and (problem := _check_level(level)) is not None:
            raise LoggingSetupError((*key, "level"), problem)
        if built.incremental:
            continue
        for name in spec.get("handlers") or ():
            if name not in built.handlers:
                raise LoggingSetupError((*key, "handlers"), f"no handler named {name!r}")
        _check_filter_names(spec.get("filters"), filters, (*key, "filters"))
