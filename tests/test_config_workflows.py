"""Workflows in the configuration: the loader, fingerprints, plan and diff, published form.

The YAML written here is also part of the corpus of the schema-vs-loader
differential test (tests/test_config_schema_agreement.py reads every
configuration written in tests/test_config_*.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from cronstable.cli.remote import republish
from cronstable.config import ConfigError, DesiredState, MemoryTree, load
from cronstable.config.models import TaskConfig
from cronstable.reconcile.plan import plan
from cronstable.reconcile.render import to_json, to_markdown, to_text

REPO = Path(__file__).resolve().parent.parent
AT = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)

ETL = """\
defaults:
  timezone: Europe/Lisbon
  concurrencyPolicy: Forbid
  onFailure:
    retry:
      maximumRetries: 2
      initialDelay: 1
jobs:
  - name: plain
    command: echo plain
    schedule: "*/5 * * * *"
workflows:
  - name: etl
    schedule: "0 3 * * *"
    tasks:
      - name: extract
        command: echo extract
      - name: transform-a
        command: echo a
        dependsOn: [extract]
      - name: transform-b
        command: echo b
        dependsOn: extract
      - name: load
        command: echo load
        dependsOn: [transform-a, transform-b]
      - name: alert
        command: echo alert
        dependsOn: [load]
        runWhen: anyFailed
        onFailure:
          retry:
            maximumRetries: 0
"""


def y(text: str) -> bytes:
    return textwrap.dedent(text).encode()


def state(text: str, files: dict[str, str] | None = None) -> DesiredState:
    tree = {"c.yaml": y(text), **{k: y(v) for k, v in (files or {}).items()}}
    return load(MemoryTree(tree), "c.yaml")


def lines(text: str, files: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        state(text, files)
    return [str(p) for p in info.value.problems]


# ---------------------------------------------------------------- loading


def test_a_workflow_and_its_tasks() -> None:
    desired = state(ETL)
    assert list(desired.jobs) == ["plain"]
    flow = desired.workflows["etl"]
    assert (flow.file, flow.line) == ("c.yaml", 13)
    assert flow.schedule.text == "0 0 3 * * * *"
    assert flow.timezone == ZoneInfo("Europe/Lisbon")  # defaults reach the workflow
    assert flow.config.concurrency_policy == "Forbid"
    assert list(flow.tasks) == ["extract", "transform-a", "transform-b", "load", "alert"]
    load_ = flow.tasks["load"]
    assert load_.name == "etl.load" and load_.task == "load" and load_.workflow == "etl"
    assert isinstance(load_.config, TaskConfig)
    assert load_.config.depends_on == ["transform-a", "transform-b"]
    assert load_.config.on_failure.retry.maximum_retries == 2  # and its tasks, as jobs
    assert flow.tasks["alert"].config.on_failure.retry.maximum_retries == 0
    assert flow.dag.depends_on["transform-b"] == ("extract",)
    assert flow.dag.run_when == {
        "extract": "allSucceeded",
        "transform-a": "allSucceeded",
        "transform-b": "allSucceeded",
        "load": "allSucceeded",
        "alert": "anyFailed",
    }
    assert set(desired.tasks()) == {f"etl.{t}" for t in flow.tasks}


def test_workflows_in_included_files_with_their_defaults() -> None:
    main = """\
    include: [flows/etl.yaml]
    jobs: []
    """
    included = """\
    defaults:
      environment: [{key: STAGE, value: prod}]
    workflows:
      - name: etl
        schedule: "@daily"
        utc: false
        timezone: UTC
        tasks:
          - name: only
            command: echo "$STAGE"
            env_file: stage.env
    """
    desired = state(main, {"flows/etl.yaml": included, "flows/stage.env": "REGION=eu\n"})
    task = desired.workflows["etl"].tasks["only"]
    assert dict(task.environment) == {"REGION": "eu", "STAGE": "prod"}
    assert "flows/stage.env" in desired.files


def test_a_file_with_only_workflows_is_a_configuration() -> None:
    desired = state(
        """\
        workflows:
          - name: one
            schedule: "@every 90s"
            tasks: [{name: t, command: "true"}]
        """
    )
    assert list(desired.workflows["one"].tasks) == ["t"]


def test_every_refusal_is_located_at_its_key() -> None:
    got = lines(
        """\
        jobs:
          - name: etl.load
            command: echo
            schedule: "@daily"
          - name: shared
            command: echo
            schedule: "@daily"
        workflows:
          - name: etl
            schedule: "@daily"
            tasks:
              - name: load
                command: echo
          - name: ring
            schedule: "@daily"
            tasks:
              - name: a
                command: echo
                dependsOn: [c]
              - name: b
                command: echo
                dependsOn: [a]
              - name: c
                command: echo
                dependsOn: [b]
          - name: misc
            schedule: "@daily"
            tasks:
              - name: a
                command: echo
                dependsOn: [nope]
              - name: b
                command: echo
                runWhen: allDone
              - name: b
                command: echo
              - name: s
                command: echo
                schedule: "* * * * *"
              - name: x.y
                command: echo
          - name: shared
            schedule: "@daily"
            tasks: [{name: a, command: echo}]
          - name: ring
            schedule: "@daily"
            tasks: [{name: a, command: echo}]
          - name: none
            schedule: "@daily"
            tasks: []
        """
    )
    assert got == [
        "c.yaml:12:9: workflows[0].tasks[0].name: task 'etl.load' has the name of a job, "
        "at c.yaml:2: rename one of them",
        "c.yaml:19:9: workflows[1].tasks[0].dependsOn: a dependency cycle: a → c → b → a",
        "c.yaml:31:21: workflows[2].tasks[0].dependsOn[0]: dependsOn names 'nope', which is no "
        "task of workflow 'misc' (its tasks: a, b, x.y)",
        "c.yaml:34:9: workflows[2].tasks[1].runWhen: runWhen decides on the tasks named in "
        "dependsOn, and this task has none",
        "c.yaml:35:9: workflows[2].tasks[2].name: task 'b' is defined twice in workflow "
        "'misc'; the first is at c.yaml:32",
        "c.yaml:39:9: workflows[2].tasks[3].schedule: a task has no schedule of its own: its "
        "workflow's runs start it (move the schedule to the workflow, or make this a job)",
        "c.yaml:40:9: workflows[2].tasks[4].name: a task name cannot hold a '.': the task is "
        "known as WORKFLOW.TASK",
        "c.yaml:42:5: workflows[3].name: workflow 'shared' has the name of a job, at c.yaml:5: "
        "a name is a job's or a workflow's",
        "c.yaml:45:5: workflows[4].name: workflow 'ring' is defined twice; the first is at "
        "c.yaml:14",
        "c.yaml:48:5: workflows[5]: a workflow needs tasks: at least one",
    ]


def test_settings_of_workflows_and_tasks_are_validated_where_written() -> None:
    got = lines(
        """\
        defaults:
          clusterPolicy: Everywhere
        workflows:
          - name: w
            schedule: "61 * * * *"
            concurrencyPolicy: Sometimes
            tasks:
              - name: t
                command: echo
                runWhn: allDone
                dependsOn: [u]
              - name: u
                command: echo
                dependsOn: [t]
                runWhen: sometimes
        """
    )
    assert got[0].startswith("c.yaml:2:3: defaults.clusterPolicy:")
    assert got[1:] == [
        "c.yaml:5:5: workflows[0].schedule: '61 * * * *': minute 61 is out of range 0-59",
        "c.yaml:6:5: workflows[0].concurrencyPolicy: expected one of Allow, Forbid, Replace, "
        "got 'Sometimes'",
        "c.yaml:10:9: workflows[0].tasks[0]: unknown key 'runWhn' (did you mean 'runWhen'?)",
        "c.yaml:15:9: workflows[0].tasks[1].runWhen: expected one of allSucceeded, allDone, "
        "anyFailed, allFailed, got 'sometimes'",
    ]


def test_a_task_depending_on_itself_is_a_cycle() -> None:
    assert lines(
        """\
        workflows:
          - name: w
            schedule: "@daily"
            tasks:
              - {name: t, command: echo, dependsOn: [t]}
        """
    ) == ["c.yaml:5:34: workflows[0].tasks[0].dependsOn: a dependency cycle: t → t"]


def test_concurrency_scope_cluster_on_a_task_needs_a_cluster() -> None:
    got = lines(
        """\
        workflows:
          - name: w
            schedule: "@daily"
            tasks:
              - {name: t, command: echo, concurrencyScope: cluster}
        """
    )
    assert got == [
        "c.yaml:5: concurrencyScope: job 'w.t': concurrencyScope cluster needs a shared "
        "store: add a cluster section (etcd, filesystem or kubernetes)"
    ]


# ---------------------------------------------------------------- fingerprints


def test_digests_follow_what_changed() -> None:
    base = state(ETL)
    edited = state(ETL.replace("echo load", "echo LOAD"))
    before, after = base.workflows["etl"], edited.workflows["etl"]
    assert before.digest != after.digest
    assert base.job_set_id != edited.job_set_id
    changed = [t for t in before.tasks if before.tasks[t].digest != after.tasks[t].digest]
    assert changed == ["load"]
    assert base.jobs["plain"].digest == edited.jobs["plain"].digest
    # the workflow's schedule is its own, not its tasks'
    retimed = state(ETL.replace('"0 3 * * *"', '"0 4 * * *"')).workflows["etl"]
    assert retimed.digest != before.digest
    assert all(retimed.tasks[t].digest == before.tasks[t].digest for t in before.tasks)
    # spelling and order do not count
    respelled = state(ETL.replace("dependsOn: extract", "dependsOn: [extract]"))
    assert respelled.job_set_id == base.job_set_id


# ---------------------------------------------------------------- plan and diff


def test_plan_shows_workflow_and_task_changes() -> None:
    new = (
        ETL.replace('"0 3 * * *"', '"0 4 * * *"')
        .replace("echo load", "echo LOAD")
        .replace(
            """      - name: transform-b
        command: echo b
        dependsOn: extract
""",
            "",
        )
        .replace("dependsOn: [transform-a, transform-b]", "dependsOn: [transform-a]")
    )
    new += """\
  - name: fresh
    schedule: "@hourly"
    tasks: [{name: only, command: "true"}]
"""
    p = plan(state(new), state(ETL))
    assert p.jobs == ()
    assert p.summary()["workflows"] == {"added": 1, "removed": 0, "changed": 1, "unchanged": 0}
    added, changed = p.workflows
    assert (added.name, added.kind, [t.name for t in added.tasks]) == (
        "fresh",
        "added",
        ["fresh.only"],
    )
    assert changed.kind == "changed" and changed.schedule_changed
    assert [(f.path, f.old, f.new) for f in changed.fields] == [
        ("schedule", "0 0 3 * * * *", "0 0 4 * * * *")
    ]
    assert [(t.name, t.kind) for t in changed.tasks] == [
        ("etl.transform-b", "removed"),
        ("etl.load", "changed"),
    ]
    assert [(f.path, f.old, f.new) for f in changed.tasks[1].fields] == [
        ("command", "echo load", "echo LOAD"),
        ("dependsOn", ["transform-a", "transform-b"], ["transform-a"]),
    ]
    text = to_text(p, AT)
    assert text.splitlines()[0] == (
        "jobs: 0 added, 0 removed, 0 changed, 1 unchanged; "
        "workflows: 1 added, 0 removed, 1 changed, 0 unchanged"
    )
    assert "+ workflow fresh (@hourly)" in text
    assert "~ workflow etl (0 4 * * *)" in text
    assert "    - task etl.transform-b" in text
    assert "    ~ task etl.load\n        command: 'echo load' -> 'echo LOAD'" in text
    assert "    next after:  2026-03-09T04:00:00+00:00" in text
    body = json.loads(to_json(p, AT))
    etl = next(w for w in body["workflows"] if w["name"] == "etl")
    assert etl["change"] == "changed"
    assert {"name": "etl.transform-b", "change": "removed"} in etl["tasks"]
    md = to_markdown(p, AT)
    assert "| - | `etl.transform-b` | | |" in md
    assert "| `etl.load`: `command` | `'echo load'` | `'echo LOAD'` |" in md


def test_a_plan_without_workflows_reads_as_before() -> None:
    jobs_only = 'jobs: [{name: x, command: "true", schedule: "@daily"}]\n'
    p = plan(state(jobs_only), state(jobs_only))
    assert p.empty and "workflows" not in p.summary()
    assert "workflows" not in json.loads(to_json(p, AT))
    p = plan(state(ETL), state(ETL))
    assert p.empty and p.summary()["workflows"]["unchanged"] == 1


def test_removed_workflow_lists_its_tasks() -> None:
    p = plan(state("jobs: []\n"), state(ETL))
    (gone,) = p.workflows
    assert gone.kind == "removed"
    assert [t.kind for t in gone.tasks] == ["removed"] * 5
    assert p.count("removed") == 1  # the plain job; tasks are counted with their workflow


def test_the_published_form_reads_back_the_same() -> None:
    """``cronstable diff URL …`` compares against what a daemon publishes."""
    desired = state(ETL)
    again = republish(desired)
    assert again.job_set_id == desired.job_set_id
    flow = again.workflows["etl"]
    assert flow.digest == desired.workflows["etl"].digest
    assert flow.tasks["load"].name == "etl.load"
    assert flow.dag == desired.workflows["etl"].dag
    p = plan(republish(state(ETL.replace("echo a\n", "echo A\n"))), again)
    (change,) = p.workflows
    assert [(t.name, [f.path for f in t.fields]) for t in change.tasks] == [
        ("etl.transform-a", ["command"])
    ]


# ---------------------------------------------------------------- the command line


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_validate_and_next_list_workflows(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(ETL)
    done = run_cli("validate", str(path))
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith(f"{path}: valid, 1 job, 1 workflow, job-set id v1:")
    assert second == "  workflow etl: 5 tasks: extract → transform-a, transform-b → load → alert"
    done = run_cli("next", str(path), "-n", "2", "--after", "2026-03-08T02:58:00Z")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "plain\t2026-03-08T03:00:00+00:00",
        "etl\t2026-03-08T03:00:00+00:00",
        "plain\t2026-03-08T03:05:00+00:00",
        "etl\t2026-03-09T03:00:00+00:00",
    ]


def test_a_task_names_a_pool_of_the_revision() -> None:
    text = """\
        pools:
          - {name: db, slots: 1}
        defaults:
          poolTimeout: 5m
        workflows:
          - name: w
            schedule: "@daily"
            tasks:
              - {name: a, command: echo, pool: db, poolPriority: 3}
              - {name: b, command: echo, pool: dbx}
        """
    assert lines(text) == [
        "c.yaml:10:34: workflows[0].tasks[1].pool: task 'w.b': unknown pool 'dbx' "
        "(did you mean 'db'?)"
    ]
    fixed = state(text.replace("dbx", "db"))
    a = fixed.workflows["w"].tasks["a"].config
    assert (a.pool, a.pool_priority, a.pool_timeout) == ("db", 3, 300.0)


def test_suspend_on_paused_and_jitter_are_the_workflows_not_its_tasks() -> None:
    loaded = state(
        """\
        defaults:
          jitter: 5m
          suspend: {reason: freeze}
        jobs:
          - {name: j, command: echo, schedule: "@daily"}
        workflows:
          - name: etl
            schedule: "0 3 * * *"
            jitter: 90s
            onPaused: {alertAfter: 2h}
            tasks:
              - {name: a, command: echo}
              - {name: b, command: echo, dependsOn: [a]}
        """
    )
    flow = loaded.workflows["etl"]
    assert flow.config.jitter == 90 and flow.job.config.jitter == 90
    assert flow.config.suspend is not None and flow.config.suspend.reason == "freeze"
    assert flow.job.config.suspend == flow.config.suspend  # what the pause gate reads
    assert flow.job.config.on_paused.alert_after == 7200
    # the file's defaults reach the workflow, not its tasks
    assert all(t.config.suspend is None and t.config.jitter is None for t in flow.tasks.values())
    assert loaded.jobs["j"].config.jitter == 300
    got = lines(
        """\
        workflows:
          - name: etl
            schedule: "0 3 * * *"
            tasks:
              - {name: a, command: echo, suspend: true}
              - {name: b, command: echo, dependsOn: [a], jitter: 5m}
              - {name: c, command: echo, onPaused: {alertAfter: 1h}}
        """
    )
    assert got == [
        "c.yaml:5:34: workflows[0].tasks[0].suspend: a task has no suspend of its own: it "
        "belongs to what is scheduled (set it on workflow 'etl', or make this a job)",
        "c.yaml:6:50: workflows[0].tasks[1].jitter: a task has no jitter of its own: it "
        "belongs to what is scheduled (set it on workflow 'etl', or make this a job)",
        "c.yaml:7:34: workflows[0].tasks[2].onPaused: a task has no onPaused of its own: it "
        "belongs to what is scheduled (set it on workflow 'etl', or make this a job)",
    ]


def test_the_schema_gives_a_workflow_suspend_and_jitter_and_a_task_neither() -> None:
    from cronstable.config.jsonschema import config_schema

    defs = config_schema()["$defs"]
    assert {"suspend", "onPaused", "jitter"} <= set(defs["WorkflowConfig"]["properties"])
    assert not {"suspend", "onPaused", "jitter"} & set(defs["TaskConfig"]["properties"])
