"""End to end: a real daemon delays each scheduled fire by the job's ``jitter`` offset,
and ``/status`` shows the planned and the actual start."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from daemon_proc import DaemonProcess, http, wait_for, write_config

from cronstable.runtime.jitter import offset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def test_fires_start_at_their_jitter_offset_and_status_shows_both_starts(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    out = tmp_path / "spread.out"
    config = write_config(
        tmp_path / "conf",
        f"""\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {{name: ops, fromEnvVar: OPS_TOKEN, scopes: [read]}}
jobs:
  - name: spread
    schedule: "*/3 * * * * * *"
    jitter: 1h
    command: echo "$CRONSTABLE_SCHEDULED_TIME $(date +%s.%N)" >> {out}
""",
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log", env=os.environ | {"OPS_TOKEN": "t"})
    daemon_procs.append(daemon.start())
    url = daemon.url()

    def found() -> list[tuple[datetime, float]]:
        text = out.read_text() if out.exists() else ""
        return [
            (datetime.fromisoformat(when), float(began))
            for when, began in (line.split() for line in text.splitlines())
        ]

    wait_for(lambda: len(found()) >= 3, 30, "three fires of spread")
    waits = []
    for fire, began in found():
        planned = fire + offset("spread", fire, fire + timedelta(seconds=3), 3600)
        # each run starts at its fire's planned start (the shell's own start-up aside),
        # before the next fire: the 1h jitter is capped by the 3 s schedule
        assert planned.timestamp() - 0.05 <= began < planned.timestamp() + 1.0
        waits.append(planned - fire)
    assert any(wait > timedelta(seconds=0.2) for wait in waits)

    status: dict[str, Any] = http(f"{url}/status", headers={"Authorization": "Bearer t"})[2]
    [job] = status["jobs"]
    assert job["jitter"] == 3600
    fire = datetime.fromisoformat(job["nextFire"])
    assert datetime.fromisoformat(job["nextStart"]) == fire + offset(
        "spread", fire, fire + timedelta(seconds=3), 3600
    )
    last = job["lastRun"]
    scheduled = datetime.fromisoformat(last["scheduledTime"])
    assert datetime.fromisoformat(last["plannedStart"]) == scheduled + offset(
        "spread", scheduled, scheduled + timedelta(seconds=3), 3600
    )
    assert datetime.fromisoformat(last["startedAt"]) >= datetime.fromisoformat(last["plannedStart"])
    assert daemon.stop() == 0
