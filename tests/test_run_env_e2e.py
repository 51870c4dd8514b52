"""End to end: what a run is told of itself, in ``CRONSTABLE_SCHEDULED_TIME`` and
``CRONSTABLE_RUN_ID``, for each kind of run a real daemon starts.

* a scheduled fire: its fire, ISO 8601 with the offset of the job's zone;
* a retry: the fire it retries (the same text as its first attempt), with its own id;
* a start on request: the time it was started, and the id the API answered.

The catch-up of a fire missed while the daemon was down is covered in
``test_state_e2e.py`` (``test_a_fire_missed_while_down_catches_up_once_within_the_deadline``).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, http, wait_for, write_config

from cronstable.ports import run_id

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

LINE = 'echo "$CRONSTABLE_ATTEMPT $CRONSTABLE_SCHEDULED_TIME $CRONSTABLE_RUN_ID"'
KOLKATA = timedelta(hours=5, minutes=30)


def runs(path: Path) -> list[tuple[int, str, str]]:
    """(attempt, scheduled-time text, run id) of every run recorded in ``path``."""
    if not path.exists():
        return []
    return [
        (int(attempt), scheduled, ident)
        for attempt, scheduled, ident in (line.split() for line in path.read_text().splitlines())
    ]


def test_each_run_is_told_the_time_it_stands_for_and_its_id(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    ticks, flaky, manual = (tmp_path / f"{name}.out" for name in ("tick", "flaky", "manual"))
    config = write_config(
        tmp_path / "conf",
        f"""\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {{name: ops, fromEnvVar: OPS_TOKEN, scopes: [read, trigger]}}
defaults:
  timezone: Asia/Kolkata
jobs:
  - name: tick
    schedule: "* * * * * * *"
    command: {LINE} >> {ticks}
  - name: flaky
    schedule: "*/4 * * * * * *"
    command: {LINE} >> {flaky}; exit 1
    captureStderr: false
    onFailure:
      retry: {{maximumRetries: 1, initialDelay: 1}}
  - name: by-hand
    schedule: "@yearly"
    enabled: false
    command: {LINE} >> {manual}
""",
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log", env=os.environ | {"OPS_TOKEN": "t0k"})
    daemon_procs.append(daemon.start())
    url = daemon.url()

    wait_for(lambda: len(runs(ticks)) >= 2, what="two fires of tick")
    for attempt, scheduled, ident in runs(ticks):
        fire = datetime.fromisoformat(scheduled)
        assert fire.utcoffset() == KOLKATA, scheduled  # the job's zone, with its offset
        assert fire.microsecond == 0  # the fire's whole second, not when it started
        assert (attempt, ident) == (1, run_id("tick", fire, 1))

    wait_for(lambda: any(a == 2 for a, _, _ in runs(flaky)), 20, "a retry of flaky")
    by_attempt: dict[int, list[tuple[str, str]]] = {}
    for attempt, scheduled, ident in runs(flaky):
        by_attempt.setdefault(attempt, []).append((scheduled, ident))
    for scheduled, ident in by_attempt[2]:
        # the retry stands for the fire it retries: the same text as its first attempt
        assert scheduled in [first for first, _ in by_attempt[1]]
        assert ident == run_id("flaky", datetime.fromisoformat(scheduled), 2)
        assert datetime.fromisoformat(scheduled).second % 4 == 0

    before = datetime.now(UTC)
    status, _, body = http(
        f"{url}/jobs/by-hand/start", "POST", headers={"Authorization": "Bearer t0k"}
    )
    after = datetime.now(UTC)
    assert status == 202, body
    wait_for(lambda: runs(manual), what="the run started on request")
    [(attempt, scheduled, ident)] = runs(manual)
    started = datetime.fromisoformat(scheduled)
    assert started.utcoffset() == KOLKATA
    assert before <= started <= after  # the time it was started
    assert ident == body["run"]  # the id the API answered
    assert daemon.stop() == 0
