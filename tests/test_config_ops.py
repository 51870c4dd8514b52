"""The operator keys of a job: ``jitter`` (and, as they land, ``suspend`` and
``onPaused``): how they are read, their defaults, and errors at file:line:key.

The configurations written here are also part of the schema-vs-loader corpus
(``test_config_schema_agreement.py`` reads every ``tests/test_config_*.py``).
"""

from __future__ import annotations

import textwrap

import pytest

from cronstable.config import ConfigError, DesiredState, MemoryTree, load


def ok(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        ok(text)
    return [str(problem) for problem in info.value.problems]


# ------------------------------------------------------------------ jitter


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("10m", 600.0), ("90s", 90.0), ("1h30m", 5400.0), ("500ms", 0.5), ("30", 30.0), ("0", 0.0)],
)
def test_jitter_is_a_duration(written: str, seconds: float) -> None:
    state = ok(
        f"""\
        jobs:
          - name: report
            command: ./report.sh
            schedule: "0 * * * *"
            jitter: {written}
        """
    )
    assert state.jobs["report"].config.jitter == seconds


def test_jitter_is_unset_by_default_and_comes_from_defaults() -> None:
    state = ok(
        """\
        defaults:
          jitter: 5m
        jobs:
          - {name: spread, command: "true", schedule: "@hourly"}
          - {name: exact, command: "true", schedule: "@hourly", jitter: 0}
        """
    )
    assert state.jobs["spread"].config.jitter == 300.0
    assert state.jobs["exact"].config.jitter == 0.0
    plain = ok('jobs: [{name: plain, command: "true", schedule: "@hourly"}]')
    assert plain.jobs["plain"].config.jitter is None


def test_jitter_changes_the_jobs_digest() -> None:
    base = 'jobs: [{name: r, command: "true", schedule: "@hourly"%s}]'
    assert ok(base % "").jobs["r"].digest != ok(base % ", jitter: 10m").jobs["r"].digest


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("-5s", "expected a duration: seconds, or numbers with units h, m, s or ms"),
        ("-1", "must be at least 0, got -1"),
        ("soon", "expected a duration: seconds, or numbers with units h, m, s or ms"),
        ("10 minutes", "expected a duration"),
    ],
)
def test_a_bad_jitter_names_file_line_and_key(written: str, message: str) -> None:
    [problem] = errors(
        f"""\
        jobs:
          - name: report
            command: ./report.sh
            schedule: "0 * * * *"
            jitter: {written}
        """
    )
    assert problem.startswith("c.yaml:5:5: jobs[0].jitter: " + message), problem


# ------------------------------------------------------------------ suspend and onPaused


def test_suspend_is_true_or_until_and_reason() -> None:
    state = ok(
        """\
        jobs:
          - name: plain
            command: "true"
            schedule: "@hourly"
            suspend: true
          - name: dated
            command: "true"
            schedule: "@hourly"
            suspend:
              until: 2026-05-04T09:00:00+02:00
              reason: the warehouse moves (OPS-1234)
          - name: off
            command: "true"
            schedule: "@hourly"
            suspend: no
          - name: zulu
            command: "true"
            schedule: "@hourly"
            suspend: {until: 2026-05-04T07:00:00Z}
        """
    )
    plain = state.jobs["plain"].config.suspend
    assert plain is not None and plain.until is None and plain.reason is None
    dated = state.jobs["dated"].config.suspend
    assert dated is not None and dated.reason == "the warehouse moves (OPS-1234)"
    assert dated.until is not None and dated.until.isoformat() == "2026-05-04T09:00:00+02:00"
    assert state.jobs["off"].config.suspend is None
    zulu = state.jobs["zulu"].config.suspend
    assert zulu is not None and zulu.until == dated.until


def test_suspend_under_defaults_pauses_every_job_of_the_file() -> None:
    state = ok(
        """\
        defaults:
          suspend: {reason: the whole file is on hold}
        jobs:
          - {name: a, command: "true", schedule: "@hourly"}
          - {name: b, command: "true", schedule: "@hourly", suspend: false}
        """
    )
    a = state.jobs["a"].config.suspend
    assert a is not None and a.reason == "the whole file is on hold"
    assert state.jobs["b"].config.suspend is None


def test_on_paused_alerts_after_a_day_unless_told() -> None:
    state = ok(
        """\
        jobs:
          - {name: a, command: "true", schedule: "@hourly"}
          - name: b
            command: "true"
            schedule: "@hourly"
            onPaused:
              alertAfter: 4h
              rateLimit: 600
              report: {shell: {command: ./page-oncall}}
        """
    )
    assert state.jobs["a"].config.on_paused.alert_after == 86400
    b = state.jobs["b"].config.on_paused
    assert (b.alert_after, b.rate_limit, b.report.shell.command) == (14400, 600, "./page-oncall")


@pytest.mark.parametrize(
    ("written", "where", "message"),
    [
        ("suspend: maybe", "5:5: jobs[0].suspend", "expected true or false"),
        ("suspend: [x]", "5:5: jobs[0].suspend", "expected true or false"),
        (
            "suspend: {until: 2026-05-04T09:00:00}",
            "5:15: jobs[0].suspend.until",
            "'2026-05-04T09:00:00' has no offset",
        ),
        (
            "suspend: {until: next monday}",
            "5:15: jobs[0].suspend.until",
            "expected a date and time in ISO 8601 with an offset",
        ),
        ("suspend: {reason: x, by: me}", "5:26: jobs[0].suspend", "unknown key 'by'"),
        (
            "onPaused: {alertAfter: soon}",
            "5:16: jobs[0].onPaused.alertAfter",
            "expected a duration",
        ),
    ],
)
def test_a_bad_pause_setting_names_file_line_and_key(
    written: str, where: str, message: str
) -> None:
    found = errors(
        f"""\
        jobs:
          - name: report
            command: ./report.sh
            schedule: "0 * * * *"
            {written}
        """
    )
    assert any(problem.startswith(f"c.yaml:{where}") and message in problem for problem in found), (
        found
    )


def test_suspend_changes_the_jobs_digest() -> None:
    base = 'jobs: [{name: r, command: "true", schedule: "@hourly"%s}]'
    assert ok(base % "").jobs["r"].digest != ok(base % ", suspend: true").jobs["r"].digest


# ------------------------------------------------------------------ cronstable diff


def test_diff_renders_the_operator_keys_in_text_json_and_markdown() -> None:
    from datetime import UTC, datetime

    from cronstable.reconcile.plan import plan
    from cronstable.reconcile.render import to_json, to_markdown, to_text

    at = datetime(2026, 6, 1, tzinfo=UTC)
    before = ok('jobs: [{name: r, command: "true", schedule: "@hourly"}]')
    after = ok('jobs: [{name: r, command: "true", schedule: "@hourly", jitter: 10m}]')
    change = plan(after, before)
    assert "    jitter: null -> 600.0" in to_text(change, at)
    assert '"path": "jitter"' in to_json(change, at)
    assert "| `jitter` | `null` | `600.0` |" in to_markdown(change, at)
    paused = ok(
        'jobs: [{name: r, command: "true", schedule: "@hourly", jitter: 10m,'
        " suspend: {until: 2026-05-04T07:00:00Z, reason: audit}, onPaused: {alertAfter: 1h}}]"
    )
    text = to_text(plan(paused, after), at)
    assert "    suspend.reason: null -> 'audit'" in text, text
    assert "    suspend.until: null -> '2026-05-04T07:00:00Z'" in text, text
    assert "    onPaused.alertAfter: 86400.0 -> 3600.0" in text, text
    plain = ok('jobs: [{name: r, command: "true", schedule: "@hourly", suspend: yes}]')
    assert "    suspend: null -> true" in to_text(plan(plain, before), at)
    assert "    suspend: true -> null" in to_text(plan(before, plain), at)


# ------------------------------------------------------------------ buffered overlap


def test_buffer_policies_and_their_limit() -> None:
    state = ok(
        """\
        defaults:
          bufferLimit: 4
        jobs:
          - {name: one, command: "true", schedule: "@hourly", concurrencyPolicy: BufferOne}
          - {name: all, command: "true", schedule: "@hourly", concurrencyPolicy: BufferAll}
          - name: few
            command: "true"
            schedule: "@hourly"
            concurrencyPolicy: BufferAll
            bufferLimit: 2
        """
    )
    assert state.jobs["one"].config.concurrency_policy == "BufferOne"
    assert state.jobs["all"].config.buffer_limit == 4
    assert state.jobs["few"].config.buffer_limit == 2
    plain = ok('jobs: [{name: p, command: "true", schedule: "@hourly"}]')
    assert plain.jobs["p"].config.buffer_limit == 10


@pytest.mark.parametrize(
    ("written", "where", "message"),
    [
        (
            "concurrencyPolicy: bufferAll",
            "5:5: jobs[0].concurrencyPolicy",
            "did you mean 'BufferAll'",
        ),
        ("bufferLimit: 0", "5:5: jobs[0].bufferLimit", "must be at least 1, got 0"),
        ("bufferLimit: 5000", "5:5: jobs[0].bufferLimit", "must be at most 1000"),
        ("bufferLimit: lots", "5:5: jobs[0].bufferLimit", "expected an integer"),
    ],
)
def test_a_bad_buffer_setting_names_file_line_and_key(
    written: str, where: str, message: str
) -> None:
    found = errors(
        f"""\
        jobs:
          - name: report
            command: ./report.sh
            schedule: "0 * * * *"
            {written}
        """
    )
    assert any(problem.startswith(f"c.yaml:{where}") and message in problem for problem in found), (
        found
    )


def test_a_workflow_refuses_the_buffer_policies_with_why() -> None:
    [own] = errors(
        """\
        workflows:
          - name: etl
            schedule: "@hourly"
            concurrencyPolicy: BufferOne
            tasks: [{name: t, command: "true"}]
        """
    )
    assert own.startswith("c.yaml:4:5: workflows[0].concurrencyPolicy: BufferOne buffers a job")
    assert "a workflow's runs are not buffered" in own
    [inherited] = errors(
        """\
        defaults:
          concurrencyPolicy: BufferAll
        jobs:
          - {name: j, command: "true", schedule: "@hourly"}
        workflows:
          - name: etl
            schedule: "@hourly"
            tasks: [{name: t, command: "true"}]
        """
    )
    assert inherited.startswith("c.yaml:2:3: defaults.concurrencyPolicy: BufferAll"), inherited
    assert "set it on the jobs instead" in inherited


def test_diff_renders_the_buffer_keys() -> None:
    from datetime import UTC, datetime

    from cronstable.reconcile.plan import plan
    from cronstable.reconcile.render import to_json, to_markdown, to_text

    at = datetime(2026, 6, 1, tzinfo=UTC)
    before = ok('jobs: [{name: r, command: "true", schedule: "@hourly"}]')
    after = ok(
        'jobs: [{name: r, command: "true", schedule: "@hourly", concurrencyPolicy: BufferAll,'
        " bufferLimit: 3}]"
    )
    change = plan(after, before)
    text = to_text(change, at)
    assert "    concurrencyPolicy: 'Allow' -> 'BufferAll'" in text, text
    assert "    bufferLimit: 10 -> 3" in text, text
    assert '"path": "bufferLimit"' in to_json(change, at)
    assert "| `bufferLimit` | `10` | `3` |" in to_markdown(change, at)
    assert after.jobs["r"].digest != before.jobs["r"].digest


# ------------------------------------------------------------------ late, stuck and stale


def test_on_late_on_stuck_and_on_stale_are_off_unless_told() -> None:
    state = ok(
        """\
        defaults:
          onStuck: {expectedDuration: 2h}
        jobs:
          - {name: plain, command: "true", schedule: "@hourly"}
          - name: watched
            command: "true"
            schedule: "@hourly"
            onLate:
              grace: 5m
              report: {shell: {command: ./page-oncall}}
            onStuck:
              p95Factor: 3
              rateLimit: 600
            onStale:
              maxSuccessAge: 26h
              report: {shell: {command: ./page-oncall}}
        """
    )
    plain = state.jobs["plain"].config
    assert plain.on_late.grace is None and plain.on_stale.max_success_age is None
    assert plain.on_stuck.expected_duration == 7200 and plain.on_stuck.p95_factor is None
    assert plain.on_late.rate_limit == 3600 and plain.on_stale.rate_limit == 0
    watched = state.jobs["watched"].config
    assert watched.on_late.grace == 300 and watched.on_late.report.shell.command == "./page-oncall"
    assert (watched.on_stuck.expected_duration, watched.on_stuck.p95_factor) == (7200, 3)
    assert watched.on_stuck.rate_limit == 600
    assert watched.on_stale.max_success_age == 26 * 3600


def test_a_workflow_takes_late_stale_and_stuck_and_its_tasks_only_stuck() -> None:
    state = ok(
        """\
        defaults:
          onLate: {grace: 10m}
          onStale: {maxSuccessAge: 24h}
          onStuck: {expectedDuration: 15m}
        workflows:
          - name: etl
            schedule: "@hourly"
            onStuck: {expectedDuration: 2h}
            tasks:
              - {name: extract, command: "true"}
        """
    )
    flow = state.workflows["etl"]
    assert flow.job.config.on_late.grace == 600
    assert flow.job.config.on_stale.max_success_age == 86400
    assert flow.job.config.on_stuck.expected_duration == 7200  # its own, not the defaults'
    task = flow.tasks["extract"].config
    assert task.on_late.grace is None and task.on_stale.max_success_age is None
    assert task.on_stuck.expected_duration == 900  # the file's defaults reach the tasks


@pytest.mark.parametrize(
    ("written", "where", "message"),
    [
        ("onLate: {grace: soon}", "5:14: jobs[0].onLate.grace", "expected a duration"),
        ("onLate: {grace: -1}", "5:14: jobs[0].onLate.grace", "must be at least 0"),
        (
            "onStuck: {expectedDuration: 0}",
            "5:15: jobs[0].onStuck.expectedDuration",
            "must be more than 0",
        ),
        ("onStuck: {p95Factor: 0}", "5:15: jobs[0].onStuck.p95Factor", "must be more than 0"),
        (
            "onStale: {maxSuccessAge: never}",
            "5:15: jobs[0].onStale.maxSuccessAge",
            "expected a duration",
        ),
        ("onStale: {maxAge: 1h}", "5:15: jobs[0].onStale", "unknown key 'maxAge'"),
    ],
)
def test_a_bad_alert_setting_names_file_line_and_key(
    written: str, where: str, message: str
) -> None:
    found = errors(
        f"""\
        jobs:
          - name: report
            command: ./report.sh
            schedule: "0 * * * *"
            {written}
        """
    )
    assert any(problem.startswith(f"c.yaml:{where}") and message in problem for problem in found), (
        found
    )


def test_a_task_refuses_on_late_and_on_stale() -> None:
    for key in ("onLate: {grace: 1m}", "onStale: {maxSuccessAge: 1h}"):
        [problem] = errors(
            f"""\
            workflows:
              - name: etl
                schedule: "@hourly"
                tasks:
                  - {{name: t, command: "true", {key}}}
            """
        )
        assert "a task has no on" in problem and "set it on workflow 'etl'" in problem, problem


def test_diff_renders_the_alert_keys() -> None:
    from datetime import UTC, datetime

    from cronstable.reconcile.plan import plan
    from cronstable.reconcile.render import to_json, to_markdown, to_text

    at = datetime(2026, 6, 1, tzinfo=UTC)
    before = ok('jobs: [{name: r, command: "true", schedule: "@hourly"}]')
    after = ok(
        'jobs: [{name: r, command: "true", schedule: "@hourly", onLate: {grace: 5m},'
        " onStuck: {expectedDuration: 1h, p95Factor: 3}, onStale: {maxSuccessAge: 26h}}]"
    )
    change = plan(after, before)
    text = to_text(change, at)
    for line in (
        "    onLate.grace: null -> 300.0",
        "    onStuck.expectedDuration: null -> 3600.0",
        "    onStuck.p95Factor: null -> 3.0",
        "    onStale.maxSuccessAge: null -> 93600.0",
    ):
        assert line in text, text
    assert '"path": "onStale.maxSuccessAge"' in to_json(change, at)
    assert "| `onLate.grace` | `null` | `300.0` |" in to_markdown(change, at)
    assert after.jobs["r"].digest != before.jobs["r"].digest
