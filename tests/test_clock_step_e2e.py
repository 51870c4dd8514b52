"""End to end: the daemon under libfaketime, its wall clock stepped back an hour.

The scheduler's rule is tested on the injected clock (test_runtime_scheduler.py);
this checks that the real clock, asyncio's monotonic sleeps and the step detection
fit together.  libfaketime fakes the wall clock only
(``FAKETIME_DONT_FAKE_MONOTONIC=1``), from an offset read from a file that the
test rewrites (``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE=1``).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

LIBRARY_PATTERNS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)

# The daemon sleeps on asyncio's clock and waits with timeouts in worker threads;
# both must last what they say while the faked wall clock steps back.  Python's
# time.sleep is reported apart: libfaketime 0.9.10 (Debian 12) fails it with
# EINVAL under FAKETIME_DONT_FAKE_MONOTONIC (clock_nanosleep with TIMER_ABSTIME on
# CLOCK_MONOTONIC, wolfcw/libfaketime#426), and the daemon does not call it here.
PROBE = """\
import asyncio, datetime, pathlib, sys, threading, time
stamp = pathlib.Path(sys.argv[1])
async def main():
    before = datetime.datetime.now(datetime.UTC)
    stamp.write_text("-3600\\n")
    start = time.monotonic()
    for _ in range(3):
        await asyncio.sleep(0.1)
        await asyncio.to_thread(threading.Event().wait, 0.05)
    took = time.monotonic() - start
    moved = (datetime.datetime.now(datetime.UTC) - before).total_seconds()
    try:
        time.sleep(0.01)
        plain = "ok"
    except OSError as exc:
        plain = exc.strerror.replace(" ", "_")
    print(f"{took:.3f} {moved:.0f} {plain}")
asyncio.run(main())
"""


def faketime_env(stamp: Path) -> tuple[dict[str, str], str | None]:
    """The daemon's environment under libfaketime, and how time.sleep fails there (or None).

    Skips the test, with the reason, where libfaketime is missing or breaks the
    sleeps the daemon relies on.
    """
    found = [path for pattern in LIBRARY_PATTERNS for path in sorted(glob.glob(pattern))]
    if not found:
        pytest.skip("libfaketime is not installed (Debian: apt-get install faketime)")
    library = found[0]
    stamp.write_text("+0\n")
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=library,
        FAKETIME_TIMESTAMP_FILE=str(stamp),
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    try:
        probe = subprocess.run(
            [sys.executable, "-c", PROBE, str(stamp)],
            env=env,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"{library} hangs Python's sleeps")
    fields = probe.stdout.split()
    if probe.returncode != 0 or len(fields) != 3:
        pytest.skip(f"{library} breaks Python's sleeps: {probe.stderr.strip()[-300:]}")
    took, moved = float(fields[0]), float(fields[1])
    if not took < 3.0:
        pytest.skip(f"{library} stretches Python's sleeps: 0.45 s took {took:.1f} s")
    if not -3700 < moved < -3500:
        pytest.skip(f"{library} did not step the wall clock back an hour (moved {moved} s)")
    stamp.write_text("+0\n")
    plain = None if fields[2] == "ok" else fields[2].replace("_", " ")
    return env, plain


def test_a_step_back_of_an_hour_does_not_stall_a_per_second_job(tmp_path: Path) -> None:
    deadline = time.monotonic() + 50  # under the 60 s cap, with room to stop

    def left() -> float:
        return deadline - time.monotonic()

    stamp = tmp_path / "faketime"
    env, broken_sleep = faketime_env(stamp)
    out = tmp_path / "fires"
    config = tmp_path / "jobs.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            jobs:
              - name: tick
                command: echo $CRONSTABLE_SCHEDULED_TIME >> {out}
                schedule: "* * * * * * *"
            """
        )
    )

    def fires() -> list[datetime]:
        text = out.read_text() if out.exists() else ""
        return [datetime.fromisoformat(line) for line in text.split()]

    log = tmp_path / "daemon.log"
    daemon = DaemonProcess(None, log, args=["-c", str(config)], env=env).start()
    try:
        wait_for(lambda: len(fires()) >= 2, left(), "two fires before the step")
        stamp.write_text("-3600\n")  # an NTP step back by an hour
        latest = max(fires())
        earlier = latest - timedelta(minutes=50)

        def after_step() -> list[datetime]:
            return [t for t in fires() if t < earlier]

        # before the fix, the next fire was an hour away on the new clock
        try:
            wait_for(lambda: len(after_step()) >= 3, left(), "three fires after the step")
        except AssertionError:
            if broken_sleep is not None and broken_sleep in log.read_text():
                pytest.skip(f"libfaketime breaks time.sleep ({broken_sleep}), which ran")
            raise
        assert daemon.stop(10) == 0
    finally:
        daemon.kill9()
    repeated = after_step()
    assert repeated == sorted(repeated)
    assert len(set(repeated)) == len(repeated)  # each re-planned fire ran once
    assert "The wall clock stepped back" in log.read_text()
