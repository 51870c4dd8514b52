"""The Applier: a revision is applied whole or not at all, and every attempt is recorded."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from typing import Any

import pytest

from cronstable.config import DesiredState
from cronstable.metrics import DaemonMetrics
from cronstable.reconcile.apply import Applier, LoggingSection
from cronstable.reconcile.plan import Plan
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.daemon import JobsSection, ProcessSpawner
from cronstable.runtime.scheduler import Scheduler
from cronstable.snapshot import Snapshot, content_revision

pytestmark = pytest.mark.asyncio


def snap(text: str) -> Snapshot:
    files = {"c.yaml": textwrap.dedent(text).encode()}
    return Snapshot(content_revision(files), "test", files)


GOOD = """\
jobs:
  - {name: a, command: "true", schedule: "0 * * * *"}
"""
GOOD2 = """\
jobs:
  - {name: a, command: "true", schedule: "0 * * * *"}
  - {name: b, command: "true", schedule: "30 * * * *"}
"""


class Recorder:
    """A section that records what it was asked to do (and can fail to prepare)."""

    name = "recorder"

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.committed: list[DesiredState] = []
        self.discarded = 0

    def affected(self, plan: Plan) -> bool:
        return True

    async def prepare(self, desired: DesiredState) -> Any:
        if self.fail is not None:
            raise self.fail
        return desired

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        self.committed.append(desired)

    async def discard(self, prepared: Any) -> None:
        self.discarded += 1


def make(*extra: Any) -> tuple[Applier, Scheduler, DaemonMetrics]:
    scheduler = Scheduler(ManualClock(datetime(2026, 6, 1, tzinfo=UTC)), ProcessSpawner(None))
    metrics = DaemonMetrics()
    applier = Applier(
        [JobsSection(scheduler, ProcessSpawner(None)), LoggingSection(), *extra], metrics
    )
    return applier, scheduler, metrics


def metric(metrics: DaemonMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels or None)


async def test_apply_then_reject_keeps_the_running_revision() -> None:
    applier, scheduler, metrics = make()
    first = await applier.reconcile(snap(GOOD))
    assert first.outcome == "applied"
    assert list(scheduler.jobs) == ["a"]
    assert metric(metrics, "cronstable_config_last_reload_successful") == 1

    bad = await applier.reconcile(
        snap('jobs: [{name: a, command: "true", schedule: "61 * * * *"}]')
    )
    assert bad.outcome == "rejected"
    assert bad.errors == (
        "c.yaml:1:35: jobs[0].schedule: '61 * * * *': minute 61 is out of range 0-59",
    )
    assert list(scheduler.jobs) == ["a"]
    assert applier.status.applied is not None
    assert applier.status.applied.revision == first.revision
    assert applier.status.last_failed == bad
    assert metric(metrics, "cronstable_config_last_reload_successful") == 0
    assert (
        metric(
            metrics,
            "cronstable_config_revision_info",
            revision=first.revision,
            job_set_id=str(first.job_set_id),
            source="test",
        )
        == 1
    )
    assert metric(metrics, "cronstable_reconcile_duration_seconds_count", outcome="rejected") == 1

    second = await applier.reconcile(snap(GOOD2))
    assert second.outcome == "applied"
    assert second.summary is not None and second.summary["added"] == 1
    assert list(scheduler.jobs) == ["a", "b"]


async def test_an_unchanged_revision_is_recorded_as_such() -> None:
    applier, _, _ = make()
    await applier.reconcile(snap(GOOD))
    again = await applier.reconcile(snap("# a comment changes nothing\n" + GOOD))
    assert again.outcome == "unchanged"


async def test_one_failed_preparation_discards_every_prepared_section() -> None:
    from cronstable.config import ConfigError, Problem

    recorder = Recorder()
    applier, scheduler, _ = make(recorder)
    await applier.reconcile(snap(GOOD))
    recorder.fail = ConfigError([Problem("c.yaml", 1, 1, ("web",), "port in use")])
    record = await applier.reconcile(snap(GOOD2))
    assert record.outcome == "rejected"
    assert record.errors == ("c.yaml:1:1: web: port in use",)
    assert list(scheduler.jobs) == ["a"]  # the jobs section was prepared, then discarded
    assert len(recorder.committed) == 1


async def test_unknown_user_rejects_the_whole_revision() -> None:
    recorder = Recorder()
    applier, scheduler, _ = make(recorder)
    await applier.reconcile(snap(GOOD))
    record = await applier.reconcile(
        snap('jobs: [{name: a, command: "true", schedule: "@daily", user: no-such-user-x}]')
    )
    assert record.outcome == "rejected"
    assert "no-such-user-x" in record.errors[0]
    assert scheduler.jobs["a"].config.user is None
    assert len(recorder.committed) == 1


async def test_a_bad_logging_handler_rejects_the_revision() -> None:
    applier, scheduler, _ = make()
    await applier.reconcile(snap(GOOD))
    record = await applier.reconcile(
        snap(GOOD2 + "logging:\n  version: 1\n  handlers:\n    h: {class: no.such.Handler}\n")
    )
    assert record.outcome == "rejected"
    assert record.errors[0].startswith(
        "c.yaml:7:5: logging.handlers.h: cannot be built: Cannot resolve 'no.such.Handler'"
    )
    assert list(scheduler.jobs) == ["a"]


async def test_an_internal_error_is_a_rejection_not_a_crash() -> None:
    recorder = Recorder(fail=RuntimeError("boom"))
    applier, scheduler, _ = make(recorder)
    record = await applier.reconcile(snap(GOOD))
    assert record.outcome == "rejected"
    assert record.errors == ("<config>: internal error (RuntimeError: boom)",)
    assert list(scheduler.jobs) == []


async def test_a_logging_section_problem_names_its_file_and_line() -> None:
    applier, _, _ = make()
    record = await applier.reconcile(
        snap(GOOD + "logging:\n  version: 1\n  handlers:\n    h: {class: no.such.Handler}\n")
    )
    assert record.outcome == "rejected"
    [error] = record.errors
    assert error.startswith("c.yaml:6:5: logging.handlers.h: cannot be built"), error


async def test_the_loaders_warnings_are_logged_with_their_place(
    caplog: pytest.LogCaptureFixture,
) -> None:
    applier, _, _ = make()
    text = (
        "jobs:\n  - name: a\n    command: 'true'\n    schedule: '@daily'\n"
        "    onSuccess: {report: {mail: {password: {value: x, fromEnvVar: PW}}}}\n"
    )
    with caplog.at_level("WARNING", logger="cronstable.reconcile.apply"):
        record = await applier.reconcile(snap(text))
    assert record.outcome == "applied"
    assert [r.getMessage() for r in caplog.records] == [
        f"Revision {record.revision}: c.yaml:5:33: jobs[0].onSuccess.report.mail.password: "
        "value and fromEnvVar are both set; only value is used "
        "(the first set of value, fromFile, fromEnvVar wins)"
    ]


async def test_the_first_revision_loading_a_crontab_names_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    applier, _, _ = make()
    files = {"c.yaml": GOOD.encode(), "team.crontab": b"CRON_TZ=UTC\n0 1 * * * true\n"}
    first = Snapshot(content_revision(files), "test", files)
    files2 = {**files, "team.crontab": b"CRON_TZ=UTC\n0 2 * * * true\n"}
    second = Snapshot(content_revision(files2), "test", files2)
    with caplog.at_level("WARNING", logger="cronstable.reconcile.apply"):
        assert (await applier.reconcile(first)).outcome == "applied"
        assert (await applier.reconcile(second)).outcome == "applied"
    notices = [r.getMessage() for r in caplog.records if "crontab file" in r.getMessage()]
    assert notices == [
        f"Revision {first.revision} loads the crontab file team.crontab as configuration "
        "(crontab and *.crontab files are loaded like YAML; a leading _ in its name opts it out)"
    ]
