"""``xcomEnv`` on a workflow's task: what the loader takes and refuses (at file:line:key),
and how it reaches the digest and the schema.

The YAML written here is also part of the corpus of the schema-vs-loader
differential test (tests/test_config_schema_agreement.py reads every
configuration written in tests/test_config_*.py).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cronstable import xcom
from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.config.models import TaskConfig

REPO = Path(__file__).resolve().parent.parent

ETL = """\
workflows:
  - name: etl
    schedule: "0 3 * * *"
    tasks:
      - name: extract
        command: echo extract
      - name: transform
        command: echo transform
        dependsOn: [extract]
      - name: load
        command: echo load
        dependsOn: [transform]
        xcomEnv: [extract.rows, transform.out-file, transform.out_file2]
"""


def state(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


def lines(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        state(text)
    return [str(p) for p in info.value.problems]


def test_a_task_declares_values_of_the_tasks_it_waits_for() -> None:
    flow = state(ETL).workflows["etl"]
    config = flow.tasks["load"].config
    assert isinstance(config, TaskConfig)
    assert config.xcom_env == ["extract.rows", "transform.out-file", "transform.out_file2"]
    assert xcom.env_name("transform", "out-file") == "CRONSTABLE_XCOM_TRANSFORM_OUT_FILE"
    assert xcom.env_name("my-task", "a.b") == "CRONSTABLE_XCOM_MY_TASK_A_B"


def test_xcom_env_changes_the_tasks_digest() -> None:
    before = state(ETL).workflows["etl"]
    after = state(ETL.replace("transform.out_file2]", "transform.other]")).workflows["etl"]
    assert before.tasks["load"].digest != after.tasks["load"].digest
    assert before.tasks["extract"].digest == after.tasks["extract"].digest


def test_what_xcom_env_may_not_name() -> None:
    problems = lines(
        """\
        workflows:
          - name: etl
            schedule: "@daily"
            tasks:
              - {name: extract, command: "true"}
              - {name: side, command: "true"}
              - name: load
                command: "true"
                dependsOn: [extract]
                xcomEnv:
                  - extract.rows
                  - extract.ROWS
                  - side.x
                  - nope.y
                  - load.z
                  - extract
                  - extract..hidden
        """
    )
    assert problems == [
        "c.yaml:12:13: workflows[0].tasks[2].xcomEnv[1]: 'extract.ROWS' and 'extract.rows' "
        "would both be CRONSTABLE_XCOM_EXTRACT_ROWS",
        "c.yaml:13:13: workflows[0].tasks[2].xcomEnv[2]: xcomEnv names 'side', but task "
        "'load' does not depend on it: a value reaches the tasks that wait for the one that "
        "leaves it (dependsOn, directly or through others)",
        "c.yaml:14:13: workflows[0].tasks[2].xcomEnv[3]: xcomEnv names 'nope', but it is no "
        "task of workflow 'etl': a value reaches the tasks that wait for the one that leaves "
        "it (dependsOn, directly or through others)",
        "c.yaml:15:13: workflows[0].tasks[2].xcomEnv[4]: xcomEnv names 'load', but task "
        "'load' does not depend on it: a value reaches the tasks that wait for the one that "
        "leaves it (dependsOn, directly or through others)",
        "c.yaml:16:13: workflows[0].tasks[2].xcomEnv[5]: 'extract' is not TASK.KEY (extract.rows)",
        "c.yaml:17:13: workflows[0].tasks[2].xcomEnv[6]: '.hidden' is not an xcom key: 1-128 "
        "letters, digits and _ . -, not starting with . or -",
    ]


def test_a_job_has_no_xcom_env() -> None:
    problems = lines(
        """\
        jobs:
          - name: alone
            command: "true"
            schedule: "@daily"
            xcomEnv: [a.b]
        """
    )
    assert len(problems) == 1 and "xcomEnv" in problems[0] and "c.yaml:5" in problems[0]


def test_the_schema_describes_xcom_env_on_tasks_only() -> None:
    schema = json.loads((REPO / "schema" / "cronstable.schema.json").read_text())
    task = schema["$defs"]["TaskConfig"]["properties"]["xcomEnv"]
    assert "CRONSTABLE_XCOM_<TASK>_<KEY>" in task["description"]
    assert "xcomEnv" not in schema["$defs"]["JobConfig"]["properties"]
