"""The ``metrics`` section: ``perJob`` read, checked and located; the default by job count."""

from __future__ import annotations

import textwrap

import pytest

from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.config.models import PER_JOB_METRICS_UP_TO
from cronstable.runtime.control import per_job_metrics

JOB = """\
jobs:
  - name: a
    command: echo a
    schedule: "@yearly"
"""


def loaded(text: str, extra: dict[str, str] | None = None) -> DesiredState:
    files = {"c.yaml": textwrap.dedent(text).encode()}
    files |= {k: textwrap.dedent(v).encode() for k, v in (extra or {}).items()}
    return load(MemoryTree(files), "c.yaml" if not extra else "")


def problems(text: str, extra: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        loaded(text, extra)
    return [str(p) for p in info.value.problems]


def test_per_job_is_read_as_a_flag() -> None:
    state = loaded("metrics:\n  perJob: false\n" + JOB)
    assert state.metrics is not None and state.metrics.per_job is False
    assert loaded("metrics:\n  perJob: yes\n" + JOB).metrics.per_job is True  # type: ignore[union-attr]
    assert loaded("metrics: {}\n" + JOB).metrics.per_job is None  # type: ignore[union-attr]
    assert loaded(JOB).metrics is None


def test_a_bad_value_or_key_names_file_line_and_key() -> None:
    [bad] = problems("metrics:\n  perJob: sometimes\n" + JOB)
    assert bad.startswith("c.yaml:2:3: metrics.perJob: ")
    [unknown] = problems("metrics:\n  perjob: false\n" + JOB)
    assert unknown == "c.yaml:2:3: metrics: unknown key 'perjob' (did you mean 'perJob'?)"


def test_a_second_metrics_section_is_refused() -> None:
    found = problems(
        "metrics: {perJob: true}\n",
        {"b.yaml": "metrics: {perJob: false}\n" + JOB},
    )
    assert found == ["c.yaml:1:1: metrics: a second 'metrics' section; the first is in b.yaml:1"]


def test_a_changed_section_is_in_the_plan() -> None:
    from cronstable.reconcile.plan import plan

    before = loaded("metrics: {perJob: true}\n" + JOB)
    after = loaded("metrics: {perJob: false}\n" + JOB)
    assert [s.section for s in plan(after, before).sections] == ["metrics"]
    assert plan(before, before).empty


def test_per_job_series_default_off_above_the_threshold() -> None:
    small = loaded(JOB)
    assert per_job_metrics(small) == (True, "the revision has 1 jobs")
    many = {f"j{i}": small.jobs["a"] for i in range(PER_JOB_METRICS_UP_TO + 1)}
    keep, why = per_job_metrics(
        DesiredState(jobs=many, web=None, logging=None, job_set_id="x", files=())
    )
    assert not keep
    assert why == "the revision has 10,001 jobs, over 10,000 (metrics.perJob: true keeps them)"
    keep, why = per_job_metrics(
        DesiredState(
            jobs=many,
            web=None,
            logging=None,
            job_set_id="x",
            files=(),
            metrics=loaded("metrics: {perJob: true}\n" + JOB).metrics,
        )
    )
    assert (keep, why) == (True, "metrics.perJob is true")
    assert per_job_metrics(loaded("metrics: {perJob: false}\n" + JOB)) == (
        False,
        "metrics.perJob is false",
    )
