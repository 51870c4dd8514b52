"""The ``logging`` section is two-phase, and ``-l``/``--log-format`` given win over it.

Revisions are applied by a real Applier in this process (the section's
handlers really open files) and by a real ``cronstable run`` daemon.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from daemon_proc import DaemonProcess, wait_for

from cronstable import logconfig
from cronstable.config import ConfigError, DesiredState, Problem
from cronstable.logs import JsonFormatter, LogOverrides
from cronstable.metrics import DaemonMetrics
from cronstable.reconcile.apply import Applier, LoggingSection
from cronstable.reconcile.plan import Plan
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.daemon import JobsSection, ProcessSpawner
from cronstable.runtime.scheduler import Scheduler
from cronstable.snapshot import Snapshot, content_revision

JOBS = 'jobs:\n  - {name: a, command: "true", schedule: "0 * * * *"}\n'


def snap(text: str) -> Snapshot:
    files = {"c.yaml": textwrap.dedent(text).encode()}
    return Snapshot(content_revision(files), "test", files)


def file_logging(path: Path, *, level: str = "INFO") -> str:
    return JOBS + textwrap.dedent(
        f"""\
        logging:
          version: 1
          disable_existing_loggers: false
          formatters:
            plain: {{format: "%(levelname)s %(name)s: %(message)s"}}
          handlers:
            file:
              class: logging.FileHandler
              filename: {path}
              formatter: plain
          root: {{level: {level}, handlers: [file]}}
        """
    )


class FailingSection:
    """A section after logging whose preparation fails (so logging's is discarded)."""

    name = "failing"

    def affected(self, plan: Plan) -> bool:
        return True

    async def prepare(self, desired: DesiredState) -> Any:
        raise ConfigError([Problem("c.yaml", 1, 1, ("web",), "port in use")])

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        raise AssertionError("never committed")

    async def discard(self, prepared: Any) -> None:
        return None


def make(*extra: Any, overrides: LogOverrides | None = None) -> tuple[Applier, DaemonMetrics]:
    spawner = ProcessSpawner(None)
    scheduler = Scheduler(ManualClock(datetime(2026, 6, 1, tzinfo=UTC)), spawner)
    metrics = DaemonMetrics()
    sections = [JobsSection(scheduler, spawner), LoggingSection(overrides), *extra]
    return Applier(sections, metrics), metrics


@pytest.fixture
def saved_logging() -> Iterator[None]:
    """The process's logging as it was: these tests install real configurations."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    named = dict(logging._handlers)  # type: ignore[attr-defined]
    listed = list(logging._handlerList)  # type: ignore[attr-defined]
    disabled = {
        name: lg.disabled
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging._handlers.clear()  # type: ignore[attr-defined]
    logging._handlers.update(named)  # type: ignore[attr-defined]
    logging._handlerList[:] = listed  # type: ignore[attr-defined]
    for name, flag in disabled.items():
        logger = logging.root.manager.loggerDict.get(name)
        if isinstance(logger, logging.Logger):
            logger.disabled = flag


def open_paths() -> set[str]:
    """Files this process holds open."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return found


# ------------------------------------------------------------ the Applier


@pytest.mark.asyncio
async def test_a_handler_that_cannot_be_built_rejects_the_revision(
    tmp_path: Path, saved_logging: None
) -> None:
    # issue 7 item 9: it used to log an error and record the revision "applied"
    applier, metrics = make()
    first = await applier.reconcile(snap(JOBS))
    assert first.outcome == "applied"
    root = logging.getLogger()
    handlers_before, level_before = list(root.handlers), root.level

    missing = tmp_path / "no-such-dir" / "cron.log"
    record = await applier.reconcile(snap(file_logging(missing)))

    assert record.outcome == "rejected"
    assert record.errors == (
        f"c.yaml:9:5: logging.handlers.file: cannot be built: "
        f"[Errno 2] No such file or directory: '{missing}'",
    )
    assert applier.status.last_failed == record
    assert applier.status.applied is not None
    assert applier.status.applied.revision == first.revision
    assert metrics.registry.get_sample_value("cronstable_config_last_reload_successful") == 0
    assert root.handlers == handlers_before and root.level == level_before  # the old logging


@pytest.mark.asyncio
async def test_problems_name_the_line_of_what_is_wrong(saved_logging: None) -> None:
    applier, _ = make()
    bad_formatter = JOBS + textwrap.dedent(
        """\
        logging:
          version: 1
          handlers:
            console:
              class: logging.StreamHandler
              formatter: nope
        """
    )
    record = await applier.reconcile(snap(bad_formatter))
    assert record.errors == (
        "c.yaml:8:7: logging.handlers.console.formatter: no formatter named 'nope'",
    )

    bad_class = JOBS + "logging:\n  version: 1\n  handlers:\n    h: {class: no.such.Handler}\n"
    record = await applier.reconcile(snap(bad_class))
    assert record.outcome == "rejected"
    assert record.errors[0].startswith(
        "c.yaml:6:5: logging.handlers.h: cannot be built: Cannot resolve 'no.such.Handler'"
    )

    unknown_handler = JOBS + "logging:\n  version: 1\n  root: {level: INFO, handlers: [gone]}\n"
    record = await applier.reconcile(snap(unknown_handler))
    assert record.errors == ("c.yaml:5:23: logging.root.handlers: no handler named 'gone'",)

    not_a_mapping = JOBS + "logging:\n  version: 1\n  formatters:\n    f: plain\n"
    record = await applier.reconcile(snap(not_a_mapping))
    assert record.errors == ("c.yaml:6:5: logging.formatters.f: expected a mapping",)

    bad_level = JOBS + "logging:\n  version: 1\n  loggers:\n    x: {level: LOUD}\n"
    record = await applier.reconcile(snap(bad_level))
    assert record.errors == ("c.yaml:6:9: logging.loggers.x.level: unknown level 'LOUD'",)


@pytest.mark.asyncio
async def test_a_discarded_preparation_closes_what_it_opened(
    tmp_path: Path, saved_logging: None
) -> None:
    log = tmp_path / "cron.log"
    applier, _ = make(FailingSection())
    before = list(logging.getLogger().handlers)
    record = await applier.reconcile(snap(file_logging(log)))
    assert record.outcome == "rejected"
    assert log.exists()  # prepared: the handler opened its file ...
    assert str(log) not in open_paths()  # ... and the rejection closed it
    assert logging.getLogger().handlers == before


@pytest.mark.asyncio
async def test_commit_installs_and_the_command_line_wins(
    tmp_path: Path, saved_logging: None
) -> None:
    log = tmp_path / "cron.log"
    applier, _ = make(overrides=LogOverrides(level="DEBUG", format="json"))
    record = await applier.reconcile(snap(file_logging(log, level="WARNING")))
    assert record.outcome == "applied"
    root = logging.getLogger()
    [handler] = root.handlers
    assert isinstance(handler, logging.FileHandler) and handler.name == "file"
    assert root.level == logging.DEBUG  # -l DEBUG beats the section's WARNING
    assert isinstance(handler.formatter, JsonFormatter)  # --log-format json beats "plain"
    logging.getLogger("cronstable.test").debug("hello")
    handler.flush()
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["message"] == "hello" and entry["level"] == "DEBUG"

    # the next revision's section replaces the handler (closing the old one); the
    # command line still wins
    log2 = tmp_path / "cron2.log"
    record = await applier.reconcile(snap(file_logging(log2, level="ERROR")))
    assert record.outcome == "applied"
    [handler2] = root.handlers
    assert handler2.baseFilename == str(log2)  # type: ignore[attr-defined]
    assert str(log) not in open_paths()
    assert root.level == logging.DEBUG and isinstance(handler2.formatter, JsonFormatter)


@pytest.mark.asyncio
async def test_without_overrides_the_section_sets_level_and_format(
    tmp_path: Path, saved_logging: None
) -> None:
    log = tmp_path / "cron.log"
    applier, _ = make()
    assert (await applier.reconcile(snap(file_logging(log, level="WARNING")))).outcome == "applied"
    root = logging.getLogger()
    assert root.level == logging.WARNING
    logging.getLogger("cronstable.test").warning("plain %s", "text")
    root.handlers[0].flush()
    assert log.read_text().splitlines()[-1] == "WARNING cronstable.test: plain text"


@pytest.mark.asyncio
async def test_the_daemons_own_loggers_survive_disable_existing_loggers(
    tmp_path: Path, saved_logging: None
) -> None:
    # dictConfig's default (disable_existing_loggers: true, as in yacron) would disable
    # every logger made before the section, cronstable's own among them: the daemon
    # went silent, not even logging that the revision was applied or a job failed.
    log = tmp_path / "cron.log"
    text = file_logging(log).replace("  disable_existing_loggers: false\n", "")
    text = text.replace(
        "root: {level: INFO", "loggers: {cronstable.quiet: {level: ERROR}}\n  root: {level: INFO"
    )
    own = logging.getLogger("cronstable.reconcile.apply")
    quiet = logging.getLogger("cronstable.quiet")
    other = logging.getLogger("somelibrary.module")
    applier, _ = make()
    assert (await applier.reconcile(snap(text))).outcome == "applied"
    assert not own.disabled
    assert other.disabled  # other libraries' loggers: as the section says
    own.info("still here")
    quiet.warning("under the level the section gives it")
    quiet.error("at it")
    logging.getLogger().handlers[0].flush()
    lines = log.read_text().splitlines()
    assert "INFO cronstable.reconcile.apply: still here" in lines
    assert "ERROR cronstable.quiet: at it" in lines
    assert not any("under the level" in line for line in lines)
    assert any("INFO cronstable.reconcile.apply: Revision " in line for line in lines)


def test_build_resolves_a_handler_targeting_another(tmp_path: Path) -> None:
    built = logconfig.build(
        {
            "version": 1,
            "handlers": {
                "a_memory": {
                    "class": "logging.handlers.MemoryHandler",
                    "capacity": 10,
                    "target": "z_file",
                },
                "z_file": {"class": "logging.FileHandler", "filename": str(tmp_path / "x.log")},
            },
        }
    )
    try:
        memory = built.handlers["a_memory"]
        assert memory.target is built.handlers["z_file"]  # type: ignore[attr-defined]
        assert memory not in logging.getLogger().handlers  # built, not installed
    finally:
        built.close()
    assert str(tmp_path / "x.log") not in open_paths()


# ------------------------------------------------------------ a real daemon


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


@pytest.fixture
def daemon(tmp_path: Path, daemon_procs: list[DaemonProcess]) -> Callable[..., DaemonProcess]:
    """``start(config, *args)``: ``cronstable run CONFIG ARGS``, killed after the test."""

    def start(config: Path, *args: str) -> DaemonProcess:
        proc = DaemonProcess(config, tmp_path / f"daemon-{len(daemon_procs)}.out", args=args)
        daemon_procs.append(proc.start())
        return proc

    return start


CONSOLE_LOGGING = JOBS.replace('"0 * * * *"', '"* * * * * * *"') + textwrap.dedent(
    """\
    logging:
      version: 1
      disable_existing_loggers: false
      formatters:
        plain: {format: "plain %(levelname)s %(name)s: %(message)s"}
      handlers:
        console: {class: logging.StreamHandler, formatter: plain, stream: "ext://sys.stderr"}
      root: {level: INFO, handlers: [console]}
    """
)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_daemon_command_line_log_options_win_over_the_section(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    config = tmp_path / "c.yaml"
    write(config, CONSOLE_LOGGING)
    proc = daemon(config, "-l", "DEBUG", "--log-format", "json")

    def debug_job_lines() -> list[dict[str, Any]]:
        records = []
        for line in proc.output().splitlines():
            if line.startswith("{"):
                records.append(json.loads(line))
        return [r for r in records if r["level"] == "DEBUG" and "started, pid" in r["message"]]

    wait_for(lambda: len(debug_job_lines()) >= 2)  # runs start after the section is applied
    assert proc.stop(20) == 0
    assert "plain " not in proc.output()  # the section's formatter never showed


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_daemon_without_log_options_follows_the_section_and_rejects_a_broken_one(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    config = tmp_path / "c.yaml"
    write(config, CONSOLE_LOGGING)
    proc = daemon(config)
    wait_for(lambda: "plain INFO cronstable.reconcile.apply: Revision " in proc.output())

    missing = tmp_path / "missing" / "cron.log"
    broken = CONSOLE_LOGGING.replace(
        'console: {class: logging.StreamHandler, formatter: plain, stream: "ext://sys.stderr"}',
        f"console: {{class: logging.FileHandler, formatter: plain, filename: {missing}}}",
    )
    write(config, broken)
    proc.send(signal.SIGHUP)
    # the old logging stays: the rejection is reported through the section's console handler
    wait_for(lambda: "plain ERROR cronstable.reconcile.apply: Revision " in proc.output())
    text = proc.output()
    assert (
        f"c.yaml:9:5: logging.handlers.console: cannot be built: "
        f"[Errno 2] No such file or directory: '{missing}'" in text
    )
    assert proc.stop(20) == 0
    assert "plain INFO cronstable.runtime.daemon: Stopped" in proc.output()


@pytest.mark.asyncio
async def test_a_section_gets_back_the_caller_thread_and_process(
    tmp_path: Path, saved_logging: None
) -> None:
    # the daemon's own logging skips them (no format of its own shows them); a section
    # may show any of them, and must see them filled in
    from cronstable.logs import lean_records

    log = tmp_path / "cron.log"
    text = file_logging(log).replace(
        "%(levelname)s %(name)s: %(message)s",
        "%(funcName)s:%(lineno)d %(threadName)s %(process)d %(message)s",
    )
    lean_records(True)
    try:
        logging.getLogger("cronstable.test").warning("lean")
        record = logging.LogRecord("x", logging.INFO, "f.py", 1, "m", None, None)
        assert record.threadName is None and record.process is None
        applier, _ = make()
        assert (await applier.reconcile(snap(text))).outcome == "applied"

        def speaks() -> None:
            logging.getLogger("cronstable.test").warning("hello")

        speaks()
        logging.getLogger().handlers[0].flush()
        assert log.read_text().splitlines()[-1] == (
            f"speaks:{speaks.__code__.co_firstlineno + 1} MainThread {os.getpid()} hello"
        )
    finally:
        lean_records(False)


def test_the_text_formats_time_is_the_standard_ones() -> None:
    from cronstable.logs import TEXT_FORMAT, TextFormatter

    ours, standard = TextFormatter(), logging.Formatter(TEXT_FORMAT)
    for created in (1_700_000_000.0, 1_700_000_000.5, 1_700_000_000.999, 1_700_000_001.004):
        record = logging.LogRecord("cronstable", logging.INFO, "f.py", 1, "m %s", ("x",), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.format(record) == standard.format(record)
