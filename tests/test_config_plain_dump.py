"""The plain dump of a settings model is pydantic's serializer's dump, key order and all.

:func:`cronstable.config.plain_dump.dump_without_defaults` makes a job's dump itself
when its set values are JSON already and asks the serializer otherwise; fingerprints
are made of it, so any difference would change a digest.  Each test compares it with
the serializer on jobs made of settings that validate one by one: every setting of a
job, set to its default, to values beside it and to values only the serializer dumps
(a pause, a schedule mapping, a list of variables).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from cronstable.config import load_path
from cronstable.config.fingerprint import canonical_job
from cronstable.config.models import JobConfig, RunSettings, Statsd, TaskConfig
from cronstable.config.plain_dump import _dumped, dump_without_defaults

REPO = Path(__file__).resolve().parent.parent
_M = TypeVar("_M", bound=BaseModel)
BASE = {"name": "job", "command": "echo hi", "schedule": "*/5 * * * *"}

VALUES: list[Any] = [
    None, True, False, 0, 1, 2, -3, 19, 30, 30.0, 0.5, 4096, 16777216, 1e400,
    "", "x", "a b", "/bin/sh", "/bin/bash", "UTC", "Europe/Lisbon", "root", "0",
    "Allow", "Forbid", "Replace", "BufferOne", "Leader", "PreferLeader", "EveryNode",
    "cluster", "node", "[{job_name} {stream_name}] ", "x.env", "*/2 * * * *", "1h",
    [], ["a", "b"], [{"key": "A", "value": "1"}], {},
    {"minute": "*/2"},
    {"producesStdout": True},
    {"producesStderr": True, "nonzeroReturn": True},
    {"retry": {"maximumRetries": 3, "initialDelay": 2}},
    {"report": {"shell": {"command": "echo failed"}}},
    {"report": {"mail": {"to": "a@b", "from": "c@d"}}},
    {"report": {"sentry": {"dsn": {"value": "https://k@sentry.example/1"}}}},
    {"rateLimit": 60},
    {"host": "statsd.example", "port": 8125, "prefix": "jobs"},
    {"reason": "migration"},
    {"until": "2030-01-01T00:00:00Z", "reason": "freeze"},
]  # fmt: skip
"""Candidates for every setting: each pair of key and value that validates is used."""


def valid_pairs(model: type[BaseModel], base: dict[str, Any]) -> list[tuple[str, Any]]:
    keys = [info.alias or name for name, info in model.model_fields.items() if name not in base]
    pairs = []
    for key, value in itertools.product(keys, VALUES):
        try:
            model.model_validate({**base, key: value})
        except ValidationError:
            continue
        pairs.append((key, value))
    return pairs


JOB_PAIRS = valid_pairs(JobConfig, BASE)
TASK_BASE = {"name": "task", "command": ["run", "it"]}
TASK_PAIRS = valid_pairs(TaskConfig, TASK_BASE)


def reference(model: BaseModel) -> dict[str, Any]:
    data: dict[str, Any] = type(model).__pydantic_serializer__.to_python(
        model, mode="json", by_alias=True, exclude_defaults=True
    )
    return data


def assert_same(model: BaseModel) -> None:
    made = dump_without_defaults(model)
    expected = reference(model)
    assert list(made.items()) == list(expected.items())
    # and with keys the caller replaces or drops, as canonical_job asks
    replaced = frozenset({"schedule", "environment"})
    dropped = frozenset({"env_file"})
    made = dump_without_defaults(model, placeholders=replaced, dropped=dropped)
    kept = {k: v for k, v in expected.items() if k not in dropped}
    assert list(made) == list(kept)
    assert {k: v for k, v in made.items() if k not in replaced} == {
        k: v for k, v in kept.items() if k not in replaced
    }


def test_the_candidates_reach_every_setting() -> None:
    """A setting no candidate validates for would go untested."""
    keys = {info.alias or name for name, info in JobConfig.model_fields.items()}
    assert keys - set(BASE) == {key for key, _ in JOB_PAIRS}


@pytest.mark.parametrize(("key", "value"), JOB_PAIRS, ids=lambda p: repr(p)[:40])
def test_each_setting_alone(key: str, value: Any) -> None:
    assert_same(JobConfig.model_validate({**BASE, key: value}))


def validated(model: type[_M], base: dict[str, Any], pairs: list[tuple[str, Any]]) -> _M:
    """``base`` with ``pairs`` validated; a combination that does not validate is skipped."""
    try:
        return model.model_validate({**base, **dict(pairs)})
    except ValidationError:
        assume(False)
        raise


def some_of(pairs: list[tuple[str, Any]]) -> st.SearchStrategy[list[tuple[str, Any]]]:
    return st.lists(st.sampled_from(pairs), max_size=12, unique_by=lambda p: p[0])


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(some_of(JOB_PAIRS))
def test_any_settings_together(pairs: list[tuple[str, Any]]) -> None:
    assert_same(validated(JobConfig, BASE, pairs))


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(some_of(TASK_PAIRS))
def test_a_tasks_settings(pairs: list[tuple[str, Any]]) -> None:
    config = validated(TaskConfig, TASK_BASE, pairs)
    assert_same(config)
    assert_same(config.model_copy(update={"name": "flow.task"}))


def test_the_plain_path_is_the_one_taken_for_a_plain_job() -> None:
    """Not only equal: made here, so a change that sends every job to the serializer
    shows (a fingerprint at 100,000 jobs pays for it)."""
    config = JobConfig.model_validate(
        {**BASE, "shell": "/bin/bash", "killTimeout": 5, "captureStdout": True, "utc": True}
    )
    assert _dumped(config, frozenset(), frozenset()) == reference(config)
    with_section = JobConfig.model_validate(
        {**BASE, "statsd": {"host": "h", "port": 1, "prefix": "p"}}
    )
    assert isinstance(with_section.statsd, Statsd)
    assert _dumped(with_section, frozenset(), frozenset()) == reference(with_section)


@pytest.mark.parametrize(
    "extra",
    [
        {"suspend": True},  # a pause with neither end nor reason dumps as true
        {"schedule": {"minute": "*/2"}},  # a union the plain path does not read
        {"suspend": {"reason": "migration"}},  # a model with its own serializer
        {"environment": [{"key": "A", "value": "1"}]},  # a list of models
    ],
)
def test_what_only_the_serializer_dumps(extra: dict[str, Any]) -> None:
    config = JobConfig.model_validate({**BASE, **extra})
    assert _dumped(config, frozenset(), frozenset()) is None
    assert_same(config)


def test_a_models_own_construction() -> None:
    """A workflow's job is made with model_construct: its set fields are what it names."""
    config = RunSettings.model_construct(
        name="flow", command="workflow flow", utc=True, jitter=None
    )
    assert_same(config)


def test_the_bundled_examples_fingerprint_as_the_serializer_dumps() -> None:
    state = load_path(str(REPO / "examples" / "gitops-repo"))
    assert state.jobs
    for job in state.jobs.values():
        assert_same(job.config)
        data = reference(job.config)
        data["schedule"] = job.schedule.text
        data["environment"] = dict(sorted(job.environment.items()))
        data.pop("env_file", None)
        assert canonical_job(job.config, job.schedule, job.environment) == data
