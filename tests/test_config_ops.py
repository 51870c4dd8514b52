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
