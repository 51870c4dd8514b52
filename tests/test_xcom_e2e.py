"""Values between the tasks of a workflow run, in real daemons whose tasks call
``cronstable xcom`` and write into ``$CRONSTABLE_XCOM_DIR``.

* extract → transform-a, transform-b (in parallel) → load: each value reaches the task
  that pulls it or declares it in ``xcomEnv``; ``GET /workflows/{name}/runs`` shows them;
  a task whose file cannot be a value fails, and that file is kept by no one (what it
  pushed before stays).
* A kill -9 mid-run, on both state stores: the restarted daemon goes on with the run,
  and the last task still gets what the first one left (the values were stored with the
  run's record).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_proc import DaemonProcess, http, wait_for
from test_state_e2e import Section, state_section
from test_workflows_state_e2e import flow_records, running_with_pid

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
__all__ = ["state_section"]  # the fixture, used by name

REPO = Path(__file__).resolve().parent.parent
CLI = f"{sys.executable} -m cronstable"


@pytest.fixture
def runtime() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def daemon(root: Path, config: Path, runtime: Path, name: str = "n1") -> DaemonProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONSTABLE_RUN_")}
    return DaemonProcess(
        config,
        root / f"{name}.log",
        args=[
            "--node-name",
            name,
            "--state-dir",
            str(root / f"state-{name}"),
            "--runtime-dir",
            str(runtime),
        ],
        env=env | {"PYTHONPATH": str(REPO)},
    )


def etl(out: Path) -> str:
    return textwrap.dedent(
        f"""\
        web:
          listen: ["http://127.0.0.1:0"]
        workflows:
          - name: etl
            schedule: "@reboot"
            tasks:
              - name: extract
                command: >-
                  {CLI} xcom push rows 42 &&
                  printf '/data/2026-05-01' > "$CRONSTABLE_XCOM_DIR/path"
              - name: transform-a
                dependsOn: [extract]
                xcomEnv: [extract.rows]
                command: >-
                  path=$({CLI} xcom pull extract path) &&
                  {CLI} xcom push out "a:$CRONSTABLE_XCOM_EXTRACT_ROWS:$path"
              - name: transform-b
                dependsOn: [extract]
                command: >-
                  printf 'b' | {CLI} xcom push out - &&
                  head -c 70000 /dev/zero | tr '\\0' x > "$CRONSTABLE_XCOM_DIR/huge"
              - name: load
                dependsOn: [transform-a, transform-b]
                runWhen: allDone
                xcomEnv: [transform-a.out, transform-b.out, extract.rows]
                command: >-
                  echo "a=$CRONSTABLE_XCOM_TRANSFORM_A_OUT" > {out}.tmp;
                  echo "b=${{CRONSTABLE_XCOM_TRANSFORM_B_OUT-unset}}" >> {out}.tmp;
                  echo "rows=$CRONSTABLE_XCOM_EXTRACT_ROWS" >> {out}.tmp;
                  {CLI} xcom pull etl.extract path >> {out}.tmp; echo >> {out}.tmp;
                  {CLI} xcom pull transform-b huge > /dev/null 2>&1; echo "huge=$?" >> {out}.tmp;
                  mv {out}.tmp {out}
        """
    )


def test_values_reach_the_tasks_that_wait_for_them(
    tmp_path: Path, runtime: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "load.out"
    config = tmp_path / "config"
    config.mkdir()
    (config / "cronstable.yaml").write_text(etl(out))
    proc = daemon(tmp_path, config, runtime)
    daemon_procs.append(proc.start())
    url = proc.url()
    wait_for(out.exists, timeout=30, what="load's output")
    assert out.read_text().splitlines() == [
        "a=a:42:/data/2026-05-01",
        "b=b",  # pushed before its run failed on its file: kept (the file's are not)
        "rows=42",
        "/data/2026-05-01",
        "huge=1",
    ]
    proc.wait_log(r"Workflow etl finished")
    status, _, body = http(f"{url}/workflows/etl/runs")
    assert status == 200, body
    run: dict[str, Any] = body["runs"][0]
    assert run["xcom"] == {
        "extract": {"rows": "42", "path": "/data/2026-05-01"},
        "transform-a": {"out": "a:42:/data/2026-05-01"},
        "transform-b": {"out": "b"},
    }
    assert run["xcomBytes"] == sum(
        len(k) + len(v) for values in run["xcom"].values() for k, v in values.items()
    )
    tasks = {task["task"]: task for task in run["tasks"]}
    assert tasks["transform-b"]["state"] == "failed"
    assert "xcom: file 'huge': a value is at most 65536 bytes" in tasks["transform-b"]["failReason"]
    assert tasks["load"]["state"] == "succeeded"
    assert proc.stop() == 0


def kill9_config(section: Section, out: Path, go: Path) -> str:
    return section + textwrap.dedent(
        f"""\
        workflows:
          - name: handoff
            schedule: "@reboot"
            tasks:
              - name: first
                command: {CLI} xcom push token s3cr3t-but-not-a-secret
              - name: wait
                dependsOn: [first]
                command: while [ ! -e {go} ]; do sleep 0.05; done
              - name: last
                dependsOn: [wait]
                runWhen: allDone
                xcomEnv: [first.token]
                command: echo "token=$CRONSTABLE_XCOM_FIRST_TOKEN" > {out}
        """
    )


def test_values_outlive_a_kill_9_with_their_run(
    tmp_path: Path, runtime: Path, state_section: Section, daemon_procs: list[DaemonProcess]
) -> None:
    out, go = tmp_path / "last.out", tmp_path / "go"
    config = tmp_path / "config"
    config.mkdir()
    (config / "cronstable.yaml").write_text(kill9_config(state_section, out, go))
    proc = daemon(tmp_path, config, runtime)
    daemon_procs.append(proc.start())

    def recorded() -> bool:
        records = flow_records(tmp_path, state_section)
        return running_with_pid(records, "wait") and any(
            item["key"] == "token" for record in records for item in record.get("xcom", ())
        )

    wait_for(recorded, timeout=30, what="the run recorded with first's value, wait running")
    proc.kill9()
    proc.start()
    proc.wait_log(r"goes on from durable state")
    go.touch()  # the adopted wait ends (its outcome lost with the daemon); last runs
    wait_for(out.exists, timeout=30, what="last's output")
    assert out.read_text() == "token=s3cr3t-but-not-a-secret\n"
    assert proc.stop() == 0


def test_a_plain_jobs_run_has_no_values(
    tmp_path: Path, runtime: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "job.out"
    config = tmp_path / "config"
    config.mkdir()
    (config / "cronstable.yaml").write_text(
        textwrap.dedent(
            f"""\
            jobs:
              - name: alone
                schedule: "@reboot"
                command: >-
                  {CLI} xcom push k v 2> {out}.err; echo "push=$?" > {out}.tmp;
                  echo "dir=${{CRONSTABLE_XCOM_DIR-unset}}" >> {out}.tmp; mv {out}.tmp {out}
            """
        )
    )
    proc = daemon(tmp_path, config, runtime)
    daemon_procs.append(proc.start())
    wait_for(out.exists, timeout=30, what="the job's output")
    assert out.read_text().splitlines() == ["push=2", "dir=unset"]
    assert "is no task of a workflow" in (tmp_path / "job.out.err").read_text()
    assert proc.stop() == 0
