"""End to end: `cronstable run` as a real process, on the real clock, driven by signals."""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(textwrap.dedent(text))
    tmp.replace(path)  # atomic, as an editor or git checkout would


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


WAIT = 15.0
"""How long a test waits for what the daemon does."""


@pytest.fixture
def daemon(tmp_path: Path, daemon_procs: list[DaemonProcess]) -> Callable[..., DaemonProcess]:
    """``start(config, *args)``: ``cronstable run -c CONFIG ARGS``, killed after the test."""

    def start(config: Path, *args: str) -> DaemonProcess:
        log = tmp_path / f"daemon-{len(daemon_procs)}.log"
        d = DaemonProcess(None, log, args=["-c", str(config), *args])
        daemon_procs.append(d.start())
        return d

    return start


def test_runs_reloads_on_sighup_and_keeps_the_old_config_when_the_new_is_bad(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    conf = tmp_path / "conf"
    first, second = tmp_path / "first.out", tmp_path / "second.out"
    write(
        conf / "jobs.yaml",
        f"""\
        jobs:
          - name: tick
            command: echo $CRONSTABLE_SCHEDULED_TIME >> {first}
            schedule: "* * * * * * *"
        """,
    )
    d = daemon(conf)
    wait_for(lambda: len(lines(first)) >= 2, WAIT)
    # CRONSTABLE_SCHEDULED_TIME is the fire's whole second, in UTC
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", t) for t in lines(first))

    write(
        conf / "jobs.yaml",
        f"""\
        jobs:
          - name: tock
            command: echo tock >> {second}
            schedule: "* * * * * * *"
        """,
    )
    d.send(signal.SIGHUP)
    wait_for(lambda: len(lines(second)) >= 2, WAIT)
    settled = len(lines(first))
    time.sleep(1.5)
    assert len(lines(first)) <= settled + 1  # tick is gone (at most one run in flight)

    write(conf / "jobs.yaml", "jobs:\n  - name: tock\n    schedule: [oops\n")
    d.send(signal.SIGHUP)
    wait_for(lambda: "rejected" in d.output(), WAIT)
    assert "jobs.yaml:3:15: invalid YAML: the '[' opened here is never closed" in d.output()
    before = len(lines(second))
    wait_for(lambda: len(lines(second)) >= before + 2, WAIT)  # the old schedule keeps firing

    d.send(signal.SIGTERM)
    assert d.wait(30) == 0
    assert "Stopped" in d.output()


def test_sigterm_waits_for_running_jobs(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    out = tmp_path / "out"
    write(
        tmp_path / "c.yaml",
        f"""\
        jobs:
          - name: slow
            command: echo started >> {out}; sleep 2; echo finished >> {out}
            schedule: "* * * * * * *"
            concurrencyPolicy: Forbid
        """,
    )
    d = daemon(tmp_path / "c.yaml")
    wait_for(lambda: lines(out) == ["started"], WAIT)
    d.send(signal.SIGTERM)
    assert d.wait(30) == 0
    assert lines(out) == ["started", "finished"]


def test_second_signal_stops_running_jobs(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    out = tmp_path / "out"
    write(
        tmp_path / "c.yaml",
        f"""\
        jobs:
          - name: stuck
            command: echo $$ >> {out}; exec sleep 300
            schedule: "@reboot"
            killTimeout: 1
        """,
    )
    d = daemon(tmp_path / "c.yaml")
    wait_for(lambda: len(lines(out)) == 1, WAIT)
    pid = int(lines(out)[0])
    d.send(signal.SIGINT)
    time.sleep(0.3)
    assert d.alive()  # still waiting for the job
    d.send(signal.SIGINT)
    assert d.wait(30) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_invalid_config_at_start_exits_1_with_every_error(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    write(
        tmp_path / "c.yaml",
        """\
        jobs:
          - name: a
            command: "true"
            schedule: "61 * * * *"
          - name: b
            command: "true"
            schedule: "* * * * *"
            concurrencyPolicy: Sometimes
        """,
    )
    d = daemon(tmp_path / "c.yaml")
    assert d.wait(30) == 1
    out = d.output()
    assert "c.yaml:4:5: jobs[0].schedule: '61 * * * *': minute 61 is out of range 0-59" in out
    assert "c.yaml:8:5: jobs[1].concurrencyPolicy" in out


def test_unknown_user_fails_the_revision(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    write(
        tmp_path / "c.yaml",
        """\
        jobs:
          - {name: a, command: "true", schedule: "@daily", user: no-such-user-here}
        """,
    )
    d = daemon(tmp_path / "c.yaml")
    assert d.wait(30) == 1
    assert "no-such-user-here" in d.output()


def test_json_log_format(tmp_path: Path, daemon: Callable[..., DaemonProcess]) -> None:
    write(
        tmp_path / "c.yaml",
        """\
        jobs:
          - {name: once, command: "exit 3", schedule: "@reboot"}
        """,
    )
    d = daemon(tmp_path / "c.yaml", "--log-format", "json")
    wait_for(lambda: '"outcome": "failed"' in d.output(), WAIT)
    d.send(signal.SIGTERM)
    assert d.wait(30) == 0
    records = [json.loads(line) for line in d.output().splitlines() if line.startswith("{")]
    finished = next(r for r in records if r.get("outcome") == "failed")
    assert finished["job"] == "once"
    assert finished["exit_code"] == 3
    assert finished["level"] == "INFO"
    assert {"time", "logger", "message", "scheduled_time", "duration"} <= finished.keys()


def test_a_helper_holding_the_output_blocks_neither_forbid_nor_a_graceful_stop(
    tmp_path: Path, daemon: Callable[..., DaemonProcess]
) -> None:
    # issue 7 item 10: each run leaves a `setsid` helper holding its stdout and
    # stderr for 30 s; the run ends 5 s (the stream grace) after its shell exits
    runs, helpers = tmp_path / "runs", tmp_path / "helpers"
    write(
        tmp_path / "c.yaml",
        f"""\
        jobs:
          - name: spawner
            command: echo run >> {runs}; setsid sh -c 'sleep 30' & echo $! >> {helpers}
            schedule: "* * * * * * *"
            captureStdout: true
            concurrencyPolicy: Forbid
        """,
    )
    try:
        d = daemon(tmp_path / "c.yaml", "--log-format", "json")
        wait_for(lambda: len(lines(runs)) >= 2, timeout=20)  # Forbid let the next fire run
        d.send(signal.SIGTERM)
        assert d.wait(20) == 0  # the run in flight ends with the grace, not with the helper
        records = [json.loads(line) for line in d.output().splitlines() if line.startswith("{")]
        warned = [r for r in records if r["level"] == "WARNING" and r.get("job") == "spawner"]
        assert warned, d.output()
        message = warned[0]["message"]
        assert "its main process exited but its stdout and stderr are still open 5 s" in message
        first_helper = int(lines(helpers)[0])
        assert first_helper in warned[0]["pids"]
        assert os.getsid(first_helper) == first_helper  # left running
    finally:
        for pid in lines(helpers):
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
