"""The job-side commands as real processes (channel/commands.py): ``cronstable state get`` and
``cronstable lock`` against run channels served from this process (a thread running the
daemon's end, cronstable/channel/server.py, on its own event loop).

What a real daemon adds (the environment of its runs, two daemons sharing a lock through
etcd or a shared directory) is in test_jobside_e2e.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from daemon_proc import wait_for
from test_channel_server import JOBS, states

from cronstable.channel.commands import parse_wait
from cronstable.channel.locks import Locks
from cronstable.channel.server import RunChannels, RunSocket

pytestmark = [pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


class Served:
    """Run channels served by an event loop in a thread of this process."""

    def __init__(self) -> None:
        self.base = tempfile.mkdtemp(prefix="cs-", dir="/tmp")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.channels: RunChannels = self.call(self._make())

    async def _make(self) -> RunChannels:
        return RunChannels(os.path.join(self.base, "runs"), states=states, locks=Locks())

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def run(self, run: str, job: str = "export") -> RunSocket:
        grant = self.call(self.channels.open(run, JOBS[job], None))
        assert grant is not None
        return grant

    def revoke(self, grant: RunSocket) -> None:
        self.loop.call_soon_threadsafe(grant.revoke)

    def close(self) -> None:
        self.call(self.channels.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def served() -> Iterator[Served]:
    made = Served()
    yield made
    made.close()


def env(grant: RunSocket | None, **more: str) -> dict[str, str]:
    base = {
        key: value for key, value in os.environ.items() if not key.startswith("CRONSTABLE_RUN_")
    }
    base["PYTHONPATH"] = str(REPO)
    if grant is not None:
        base.update(grant.environment)
    return base | more


def cronstable(*args: str, environ: dict[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cronstable", *args],
        env=environ,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a run has
        **kwargs,
    )


def done(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


# ------------------------------------------------------------ fast paths


def test_the_job_side_commands_import_neither_asyncio_nor_aiohttp(served: Served) -> None:
    grant = served.run("export@1#1")
    probe = textwrap.dedent(
        """\
        import contextlib, io, sys
        from cronstable.__main__ import main
        with contextlib.redirect_stdout(io.StringIO()) as out:
            codes = [
                main(["state", "get"]),
                main(["lock", "db", "--", "true"]),
                # forms the plain path leaves to the argument parser
                main(["state", "get", "--format", "json"]),
                main(["-l", "INFO", "lock", "db", "--", "true"]),
                main(["xcom", "push", "rows", "1"]),  # a job's run: no workflow task
                main(["xcom", "pull", "extract", "rows"]),
            ]
        assert codes == [0, 0, 0, 0, 2, 2], (codes, out.getvalue())
        assert '"job": "export"' in out.getvalue()
        print(sorted(m for m in ("asyncio", "aiohttp", "mcp") if m in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env(grant),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cronstable", "state", "get"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env(grant),
        timeout=60,
    )
    assert timed.returncode == 0, timed.stderr
    imported = {line.split("|")[-1].strip() for line in timed.stderr.splitlines()}
    assert "cronstable.channel.client" in imported
    assert not imported & {"asyncio", "aiohttp", "cronstable.channel.server"}


# ------------------------------------------------------------ state get


def test_state_get_prints_the_jobs_state_and_another_jobs(served: Served) -> None:
    grant = served.run("export@1#1")
    code, out, err = done(cronstable("state", "get", environ=env(grant)))
    assert code == 0, err
    state = json.loads(out)
    assert state["job"] == "export"
    assert state["lastRun"]["outcome"] == "failed"
    assert state["lastSuccess"]["outcome"] == "succeeded"
    assert state["pendingRetry"]["attempt"] == 2
    code, out, err = done(cronstable("state", "get", "import", environ=env(grant)))
    assert (code, json.loads(out)["lastRun"]) == (0, None)
    code, out, err = done(cronstable("state", "get", "nope", environ=env(grant)))
    assert code == 1 and "no job 'nope'" in err


def test_state_get_outside_a_run_or_with_a_stale_token(served: Served) -> None:
    code, _, err = done(cronstable("state", "get", environ=env(None)))
    assert code == 2 and "give the KEY" in err
    grant = served.run("export@1#1")
    forged = env(grant) | {"CRONSTABLE_RUN_TOKEN": "x" * 43}
    code, _, err = done(cronstable("state", "get", environ=forged))
    assert code == 4 and "no run's going" in err
    served.revoke(grant)
    code, _, err = done(cronstable("state", "get", environ=env(grant)))
    assert code == 4 and "no run's going" in err  # the run ended: its token is good no more
    moved = env(grant) | {"CRONSTABLE_RUN_SOCKET": grant.path + ".gone"}
    code, _, err = done(cronstable("state", "get", environ=moved))
    assert code == 3 and "cannot reach the daemon" in err  # a daemon gone (a restart)
    # the store's own state get still answers an operator, with -c and a KEY
    code, _, err = done(cronstable("state", "get", "-c", "/nonexistent", "x/y", environ=env(grant)))
    assert code not in (0, 3, 4)


# ------------------------------------------------------------ lock


def test_parse_wait() -> None:
    assert [parse_wait(t) for t in ("0", "2.5", "30s", "5m", "1h", "1d")] == [
        0,
        2.5,
        30,
        300,
        3600,
        86400,
    ]
    for bad in ("", "-1", "5x", "inf", "nan", "m"):
        with pytest.raises(ValueError):
            parse_wait(bad)


def test_the_plain_forms_and_the_parsed_ones_agree(served: Served) -> None:
    grant = served.run("export@1#1")
    for args in (
        ["lock", "--wait=1", "--timeout", "5", "db", "--", "sh", "-c", "exit 4"],
        ["lock", "db", "--wait", "1m", "--", "sh", "-c", "exit 4"],
        ["-l", "DEBUG", "lock", "db", "--", "sh", "-c", "exit 4"],  # through argparse
    ):
        assert done(cronstable(*args, environ=env(grant)))[0] == 4, args
    for args in (["state", "get", "--timeout=3"], ["state", "get", "import", "--timeout", "3"]):
        code, out, err = done(cronstable(*args, environ=env(grant)))
        assert code == 0 and json.loads(out)["job"] in ("export", "import"), err
    code, out, _ = done(cronstable("lock", "-h", environ=env(grant)))
    assert code == 0 and "--wait D" in out
    code, _, err = done(cronstable("lock", "--wait", "db", "--", "true", environ=env(grant)))
    assert code == 2  # "db" is no duration: the parser says so
    code, _, err = done(cronstable("state", "get", "--timeout", "0", environ=env(grant)))
    assert code == 2


def test_lock_runs_the_command_and_exits_as_it_did(served: Served, tmp_path: Path) -> None:
    grant = served.run("export@1#1")
    code, out, err = done(
        cronstable("lock", "db", "--", "sh", "-c", "echo in; exit 7", environ=env(grant))
    )
    assert (code, out) == (7, "in\n"), err
    code, _, err = done(
        cronstable(
            "lock", "db", "--wait", "5s", "--", "sh", "-c", "kill -USR1 $$", environ=env(grant)
        )
    )
    assert code == 128 + signal.SIGUSR1, err
    code, _, err = done(cronstable("lock", "db", "--", "/nonexistent/cmd", environ=env(grant)))
    assert code == 127 and "cannot run" in err
    code, _, err = done(cronstable("lock", "db", "true", environ=env(grant)))
    assert code == 2 and "after --" in err
    code, _, err = done(cronstable("lock", "db", "--wait", "x", "--", "true", environ=env(grant)))
    assert code == 2
    code, _, err = done(cronstable("lock", "a b", "--", "true", environ=env(grant)))
    assert code == 2 and "a lock's name" in err
    code, _, err = done(cronstable("lock", "db", "--", "true", environ=env(None)))
    assert code == 2 and "CRONSTABLE_RUN_SOCKET" in err


def script(tmp_path: Path) -> list[str]:
    """A command that writes its pid, counts the SIGTERMs it gets, and exits 7 on one."""
    body = textwrap.dedent(
        f"""\
        trap 'echo TERM >> {tmp_path}/terms; exit 7' TERM
        echo $$ > {tmp_path}/pid.tmp && mv {tmp_path}/pid.tmp {tmp_path}/pid
        while :; do sleep 0.05; done
        """
    )
    return ["sh", "-c", body]


def started(tmp_path: Path) -> int:
    pid_file = tmp_path / "pid"
    wait_for(pid_file.exists, what="the command started")
    return int(pid_file.read_text())


def terms(tmp_path: Path) -> int:
    path = tmp_path / "terms"
    return len(path.read_text().splitlines()) if path.exists() else 0


def kill(pid: int, sig: int) -> None:
    """``kill -SIG PID`` from a process of its own (not the daemon's end, this one)."""
    subprocess.run(["kill", f"-{sig}", str(pid)], check=True, timeout=10)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_held_lock_keeps_others_waiting_and_wait_bounds_it(
    served: Served, tmp_path: Path
) -> None:
    holder = cronstable(
        "lock", "db", "--", *script(tmp_path), environ=env(served.run("export@1#1"))
    )
    started(tmp_path)
    began = time.monotonic()
    code, _, err = done(
        cronstable(
            "lock", "db", "--wait", "0.5", "--", "true", environ=env(served.run("export@2#1"))
        )
    )
    assert code == 75 and "not held within" in err
    assert time.monotonic() - began < 15
    waiter = cronstable(
        "lock",
        "db",
        "--",
        "sh",
        "-c",
        f"cat {tmp_path}/terms",
        environ=env(served.run("import@1#1", "import")),
    )
    time.sleep(0.5)
    assert waiter.poll() is None  # waits for the holder
    kill(holder.pid, signal.SIGTERM)  # the client alone: it passes it on
    assert done(holder)[0] == 7
    code, out, err = done(waiter)
    assert (code, out) == (0, "TERM\n"), err  # it ran once the holder was done


def test_signals_reach_the_command_once(served: Served, tmp_path: Path) -> None:
    grant = served.run("export@1#1")
    # sent to the whole process group by the daemon (this process is the socket's peer):
    # the command has it already, the client does not send it again
    holder = cronstable("lock", "db", "--", *script(tmp_path), environ=env(grant))
    started(tmp_path)
    os.killpg(holder.pid, signal.SIGTERM)
    assert done(holder)[0] == 7
    assert terms(tmp_path) == 1
    # sent to the client alone, by another process (kill PID): passed on
    (tmp_path / "pid").unlink()
    holder = cronstable("lock", "db", "--", *script(tmp_path), environ=env(grant))
    started(tmp_path)
    kill(holder.pid, signal.SIGTERM)
    assert done(holder)[0] == 7
    assert terms(tmp_path) == 2


def test_a_lock_lost_stops_the_command(served: Served, tmp_path: Path) -> None:
    grant = served.run("export@1#1")
    holder = cronstable("lock", "db", "--", *script(tmp_path), environ=env(grant))
    started(tmp_path)
    served.revoke(grant)  # the run ended (as the daemon would say it)
    code, _, err = done(holder)
    assert code == 69, err
    assert "the lock was lost (the run ended)" in err
    assert terms(tmp_path) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_command_does_not_outlive_a_killed_client(served: Served, tmp_path: Path) -> None:
    holder = cronstable(
        "lock", "db", "--", *script(tmp_path), environ=env(served.run("export@1#1"))
    )
    pid = started(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)  # the client alone, no chance to pass anything on
    holder.communicate(timeout=10)
    wait_for(lambda: gone(pid), what="the command killed with its client")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(holder.pid, signal.SIGKILL)
