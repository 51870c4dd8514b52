"""The committed JSON Schema is current, valid, and accepts every example."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from cronstable.config import load_path
from cronstable.config.jsonschema import config_schema, schema_text

REPO = Path(__file__).resolve().parent.parent
SCHEMA_FILE = REPO / "schema" / "cronstable.schema.json"
EXAMPLES = sorted((REPO / "examples").rglob("*.y*ml"))


def test_committed_schema_is_current() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "schema/cronstable.schema.json is stale: run `make schema`"
    )


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(config_schema())


def test_properties_carry_help_for_editors() -> None:
    job = config_schema()["$defs"]["JobConfig"]["properties"]
    for key in ("schedule", "command", "killTimeout", "concurrencyPolicy", "captureStdout"):
        assert job[key].get("description"), key
    assert job["killTimeout"]["default"] == 30
    assert "examples" in job["schedule"]


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_example_has_modeline_and_validates(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    target = (path.parent / first.split("$schema=", 1)[1]).resolve()
    assert target == SCHEMA_FILE
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


@pytest.mark.parametrize(
    "document",
    [
        # what an editor (YAML 1.2) sees for values cronstable reads as text
        {"jobs": [{"name": "a", "command": "x", "schedule": "@daily", "captureStdout": "yes"}]},
        {"jobs": [{"name": 1, "command": 2, "schedule": "@daily", "killTimeout": "0.5"}]},
        {"defaults": {"environment": [{"key": "V", "value": 1.1}]}},
        {"defaults": {"onSuccess": {"report": {"mail": {"to": "a@x, b@x"}}}}},
    ],
)
def test_schema_accepts_unquoted_forms(document: dict[str, object]) -> None:
    jsonschema.validate(document, config_schema(), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "document",
    [
        {"jobs": [{"name": "a", "command": "x", "schedule": "@daily", "shedule": "x"}]},
        {"jobs": [{"name": "a", "command": "x"}]},
        {"defaults": {"concurrencyPolicy": "Sometimes"}},
        {"bogus": 1},
    ],
)
def test_schema_rejects_what_the_loader_rejects(document: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, config_schema(), cls=jsonschema.Draft202012Validator)


def test_example_repository_loads() -> None:
    state = load_path(str(REPO / "examples" / "gitops-repo"))
    assert set(state.jobs) == {
        "platform-heartbeat",
        "platform-tmp-cleanup",
        "platform-disk-report",
        "data-nightly-export",
        "data-weekly-summary",
        "data-month-end-close",
        "payments-settlement",
        "payments-ledger-check",
        "ops-load-sample",
        "jobs-ops.crontab-07997826",
    }
    settlement = state.jobs["payments-settlement"]
    # environment wins over env_file; the env file is read relative to the job file
    assert settlement.environment["PAYMENTS_TIMEOUT"] == "20"
    assert settlement.environment["PAYMENTS_PROVIDER_URL"].startswith("https://")
    assert settlement.environment["CRONSTABLE_EXAMPLE"] == "yes"


@pytest.mark.parametrize("written", ["", "true", "5", "1.5", "null"])
def test_schema_refuses_a_schedule_that_is_not_text(written: str) -> None:
    # what an editor reads (YAML 1.2): null, a boolean, a number; the loader refuses each too
    text = f"jobs:\n  - name: a\n    command: x\n    schedule: {written}\n"
    document = yaml.safe_load(text)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, config_schema(), cls=jsonschema.Draft202012Validator)
    from cronstable.config import ConfigError, MemoryTree, load

    with pytest.raises(ConfigError):
        load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")


@pytest.mark.parametrize(
    "document",
    [
        {"jobs": None},
        {"defaults": None},
        {"defaults": {"onFailure": None, "environment": None}},
        {"defaults": {"onSuccess": {"report": {"sentry": {"dsn": None, "fingerprint": "x"}}}}},
    ],
)
def test_schema_accepts_empty_sections_as_the_loader_does(document: dict[str, object]) -> None:
    jsonschema.validate(document, config_schema(), cls=jsonschema.Draft202012Validator)
