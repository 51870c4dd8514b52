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
