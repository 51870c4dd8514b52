"""End to end: ``cronstable backfill`` against a real daemon.

Every past fire of a job in a range runs, in order, one after another, each told its
own fire in ``CRONSTABLE_SCHEDULED_TIME``; ``--dry-run`` lists them; ``--max`` refuses
a larger range; the progress is in ``/status`` and the command's output; a paused job
backfills only with ``--ignore-pause``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, http, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

TOKEN = "t0ken"


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstable", *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"CRONSTABLE_TOKEN": TOKEN},
    )


def test_backfill_runs_every_fire_of_the_range_in_order(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "report.out"
    config = write_config(
        tmp_path / "conf",
        f"""\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {{name: ops, fromEnvVar: OPS_TOKEN, scopes: [read, trigger]}}
jobs:
  - name: report
    schedule: "0 * * * *"
    timezone: Asia/Kolkata
    jitter: 30m
    concurrencyPolicy: Forbid
    command: echo "$CRONSTABLE_SCHEDULED_TIME $CRONSTABLE_RUN_ID $(date +%s.%N)" >> {out}; sleep 0.2
  - name: held
    schedule: "0 * * * *"
    suspend: {{reason: on hold}}
    command: echo held >> {tmp_path / "held.out"}
""",
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log", env=os.environ | {"OPS_TOKEN": TOKEN})
    daemon_procs.append(daemon.start())
    url = daemon.url()
    # the job's hours in Kolkata (+05:30) begin at half past the UTC hour: the latest one
    half = datetime.now(UTC) - timedelta(minutes=30)
    hour = half.replace(minute=0, second=0, microsecond=0) + timedelta(minutes=30)
    start, end = (hour - timedelta(hours=5)).isoformat(), hour.isoformat()

    listed = cli(url, "backfill", "report", "--from", start, "--to", end, "--dry-run")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[-1] == "5 fires (dry run)"
    assert lines[0].endswith("+05:30") and lines[0].startswith(
        (hour - timedelta(hours=5)).strftime("%Y-%m-%d %H:%M:%SZ")
    )
    assert not out.exists()  # a dry run runs nothing

    too_many = cli(url, "backfill", "report", "--from", start, "--to", end, "--max", "4")
    assert too_many.returncode == 1
    assert "the range holds more than 4 fires of job 'report'" in too_many.stderr

    done = cli(url, "backfill", "report", "--from", start, "--to", end)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("backfilling report: 5 fires from ")
    assert done.stdout.splitlines()[-1] == "5/5 done (5 succeeded)"
    runs = [line.split() for line in out.read_text().splitlines()]
    fires = [hour - timedelta(hours=n) for n in (5, 4, 3, 2, 1)]
    assert [datetime.fromisoformat(when) for when, _, _ in runs] == fires  # in order
    assert all(when.endswith("+05:30") for when, _, _ in runs)  # the job's zone
    assert [ident for _, ident, _ in runs] == [
        f"report@{fire.strftime('%Y-%m-%dT%H:%M:%SZ')}#1" for fire in fires
    ]
    began = [float(at) for _, _, at in runs]
    assert all(b - a >= 0.2 for a, b in zip(began, began[1:], strict=False))  # one at a time
    _, _, status = http(f"{url}/status", headers={"Authorization": f"Bearer {TOKEN}"})
    progress = next(job for job in status["jobs"] if job["name"] == "report")["backfill"]
    assert (progress["state"], progress["done"], progress["total"], progress["by"]) == (
        "done",
        5,
        5,
        "ops",
    )
    assert progress["outcomes"] == {"succeeded": 5}
    _, _, runs_answer = http(
        f"{url}/jobs/report/runs", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert all(run["backfill"] and run["plannedStart"] is None for run in runs_answer["runs"])

    # a paused job: refused, unless asked to ignore the pause
    refused = cli(url, "backfill", "held", "--from", start, "--to", end)
    assert refused.returncode == 1 and "job 'held' is paused" in refused.stderr
    forced = cli(url, "backfill", "held", "--from", start, "--to", end, "--ignore-pause")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "held.out").read_text() == "held\n" * 5
    assert daemon.stop() == 0
