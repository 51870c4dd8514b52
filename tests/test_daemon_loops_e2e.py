"""End to end: the daemon on each event loop (``--loop``), with a sized pool."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


def config(out: Path, names: list[str]) -> str:
    return "jobs:\n" + "".join(
        f"  - name: {name}\n"
        f"    command: date +%s.%N >> {out}/{name}.out\n"
        f'    schedule: "* * * * * * *"\n'
        for name in names
    )


@pytest.mark.parametrize(
    ("loop", "named"),
    [
        ("asyncio", "asyncio"),
        pytest.param(
            "uvloop",
            "uvloop",
            marks=pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop is not installed"),
        ),
    ],
)
def test_the_daemon_runs_reloads_and_stops_on_the_loop_asked_for(
    tmp_path: Path, daemon_procs: list[DaemonProcess], loop: str, named: str
) -> None:
    conf, out = tmp_path / "conf", tmp_path / "out"
    conf.mkdir()
    out.mkdir()
    (conf / "jobs.yaml").write_text(config(out, ["one"]))
    daemon = DaemonProcess(
        conf, tmp_path / "daemon.log", args=["--loop", loop, "--executor-workers", "3"]
    )
    daemon_procs.append(daemon.start())
    said = daemon.wait_log(r"Event loop: (\S+)[^;]*\(--loop (\S+)\); default thread pool: (\d+)")
    assert (said[1], said[2], said[3]) == (named, loop, "3")
    wait_for(lambda: len((out / "one.out").read_text().split()) >= 2 if (out / "one.out").exists()
             else False, what="two runs of one")  # fmt: skip
    tmp = conf / "jobs.tmp"
    tmp.write_text(config(out, ["one", "two"]))
    tmp.replace(conf / "jobs.yaml")
    daemon.send(signal.SIGHUP)
    daemon.wait_log(r" applied in .* 1 added", timeout=15)
    wait_for(lambda: (out / "two.out").exists(), what="a run of the job the reload added")
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.current()
