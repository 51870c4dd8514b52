"""The daemon's hold on its source: the follower is supervised, and a hung remote never
holds a stop.  Real ``git daemon`` remotes and a real silent TCP server on loopback."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, until, wait_for
from git_server import GitDaemon, SilentServer, WorkRepo

from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.runtime import daemon as daemon_module
from cronstable.runtime.daemon import Daemon
from cronstable.sources.factory import open_source
from cronstable.sources.git.source import GitSource

pytestmark = [pytest.mark.timeout(60)]


def applied(daemon: Daemon) -> str | None:
    record = daemon.applier.status.applied
    return record.revision if record is not None else None


@pytest.mark.asyncio
async def test_a_follower_that_dies_is_logged_and_restarted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_module, "FOLLOW_RESTART_FIRST", 0.2)
    caplog.set_level(logging.INFO)
    repo = WorkRepo.create(tmp_path / "remotes", "cron")
    first = repo.commit({"jobs.yaml": "jobs: []\n"})
    repo.push()
    with GitDaemon(tmp_path / "remotes") as server:
        source = open_source(
            f"{server.url('cron.git')}?interval=3600", cache_dir=tmp_path / "cache"
        )
        assert isinstance(source, GitSource)
        daemon = build_daemon(source, NodeFacts())
        running = asyncio.create_task(daemon.run())
        try:
            await until(lambda: applied(daemon) == first, 15, "first revision")
            # The fault: the source's poll task dies (as an unforeseen error in it would
            # end it).  Before supervision the daemon went on, deaf to every push.
            poller = source._task
            assert poller is not None
            poller.cancel()
            await until(lambda: "stopped unexpectedly" in caplog.text, 15, "ERROR line")
            second = repo.commit({"jobs.yaml": "jobs: []\n# second\n"})
            repo.push()
            await until(
                lambda: "Following" in caplog.text and "again" in caplog.text, 15, "restart"
            )
            source.nudge()  # SIGHUP's path: heard again
            await until(lambda: applied(daemon) == second, 15, "second revision")
        finally:
            daemon.request_stop()
            assert await asyncio.wait_for(running, 15) == 0
    errors = [
        r for r in caplog.records if r.levelno == logging.ERROR and r.name == daemon_module.__name__
    ]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    message = errors[0].getMessage()
    assert f"Following {source.description} stopped unexpectedly" in message
    assert f"still running revision {first}" in message and "restarting in 0 s" in message
    assert sum(r.getMessage().startswith("Reconciling") for r in caplog.records) == 0


@pytest.mark.slow  # a real `cronstable run`
def test_sigint_stops_the_daemon_at_once_while_the_first_fetch_hangs(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    """Ctrl-C while ``git://`` accepts and never answers: exit 0, "Stopped", in a second or so."""
    with SilentServer() as silent:
        log = tmp_path / "daemon.log"
        daemon = DaemonProcess(
            None,
            log,
            args=["--source", silent.url("git", "x.git"), "--cache-dir", str(tmp_path / "cache")],
        )
        daemon_procs.append(daemon.start())
        wait_for(lambda: silent.accepted > 0, 30, "the daemon's connection")
        assert silent.accepted == 1, "the daemon never connected"
        time.sleep(0.3)  # well inside the fetch (its timeout is 30 s)
        sent = time.monotonic()
        daemon.send(signal.SIGINT)
        code = daemon.wait(20)
        took = time.monotonic() - sent
    output = log.read_text()
    print(f"stop time while the first fetch hangs: {took:.2f} s")
    assert code == 0, output
    assert output.rstrip().endswith("Stopped") or "Stopped" in output.splitlines()[-1], output
    assert "Traceback" not in output, output
    assert took < 3.0, f"{took:.2f} s\n{output}"
