"""The runs' channels (cronstable/channel/server.py) in this process, over a real unix
socket: where the node's socket is and who may use it, a token good for its own run only
and only while it lives, the bounds of a request, state.get and the named locks as the
job-side client (cronstable/channel/client.py) asks them."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import stat
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from daemon_proc import until

from cronstable import xcom
from cronstable.channel import protocol, server
from cronstable.channel.client import Channel, Refused, Unreachable
from cronstable.channel.locks import Locks
from cronstable.channel.server import RunChannels, RunSocket
from cronstable.config import load_snapshot
from cronstable.config.desired import Job
from cronstable.ports import (
    WORKFLOW_RUN_ENV,
    FinishedRun,
    JobState,
    PendingRetry,
    RunOutcome,
    RunOwner,
    RunStart,
)
from cronstable.snapshot import Snapshot

pytestmark = [pytest.mark.timeout(60)]

T0 = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)


def jobs(*names: str) -> dict[str, Job]:
    text = "jobs:\n" + "".join(
        f"  - {{name: {name}, command: 'true', schedule: '@daily'}}\n" for name in names
    )
    snapshot = Snapshot("r1", "test", {"cronstable.yaml": text.encode()}, "cronstable.yaml")
    return dict(load_snapshot(snapshot).jobs)


JOBS = jobs("export", "import")


def finished(job: str, outcome: RunOutcome, at: datetime) -> FinishedRun:
    start = RunStart(f"{job}@{at:%Y-%m-%dT%H:%M:%SZ}#1", job, at, 1, at, 4242, False)
    return FinishedRun(
        start=start,
        outcome=outcome,
        exit_code=0 if outcome == "succeeded" else 1,
        finished_at=at + timedelta(seconds=2),
        duration=2.0,
        fail_reason=None if outcome == "succeeded" else "nonzeroReturn (exit code 1)",
        stdout="out",
        stderr="",
        stdout_dropped=0,
        stderr_dropped=0,
    )


def states(name: str) -> JobState | None:
    if name not in JOBS:
        return None
    if name == "import":
        return JobState(name, None, None, None, ())
    return JobState(
        name,
        finished(name, "failed", T0 + timedelta(hours=1)),
        finished(name, "succeeded", T0),
        PendingRetry(2, T0 + timedelta(hours=1, seconds=30), T0 + timedelta(hours=1)),
        (),
    )


def short_dir() -> str:
    """A runtime directory short enough for unix socket paths (pytest's tmp_path is not)."""
    import tempfile

    return tempfile.mkdtemp(prefix="cs-", dir="/tmp")


@pytest_asyncio.fixture
async def channels() -> AsyncIterator[RunChannels]:
    base = short_dir()
    made = RunChannels(os.path.join(base, "runs"), states=states, locks=Locks())
    yield made
    await made.close()
    import shutil

    shutil.rmtree(base, ignore_errors=True)


async def open_run(
    channels: RunChannels, run: str, job: str = "export", owner: RunOwner | None = None
) -> RunSocket:
    grant = await channels.open(run, JOBS[job], owner)
    assert grant is not None
    return grant


def exists(path: str) -> bool:
    return os.path.exists(path)


def client(grant: RunSocket, token: str | None = None) -> Channel:
    return Channel(grant.path, token or grant.token)


async def ask(channel: Channel, op: str, **fields: object) -> dict[str, object]:
    return await asyncio.to_thread(channel.request, op, 5.0, **fields)


# ------------------------------------------------------------ where, who


def tree(path: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), path) for d, ds, fs in os.walk(path) for f in ds + fs
    )


@pytest.mark.asyncio
async def test_every_run_shares_the_nodes_socket_with_a_token_of_its_own(
    channels: RunChannels,
) -> None:
    a = await open_run(channels, "export@1#1")
    b = await open_run(channels, "export@2#1")
    assert a.path == b.path == channels.path and a.token != b.token
    assert a.environment == {
        "CRONSTABLE_RUN_SOCKET": a.path,
        "CRONSTABLE_RUN_TOKEN": a.token,
    }
    assert len(a.token) >= 40
    home = os.path.dirname(a.path)
    runs = os.path.dirname(home)
    root = os.geteuid() == 0
    assert stat.S_IMODE(os.stat(runs).st_mode) == (0o711 if root else 0o700)
    assert stat.S_IMODE(os.stat(home).st_mode) == (0o711 if root else 0o700)
    info = os.stat(a.path)
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == (0o666 if root else 0o600)
    assert info.st_uid == os.geteuid()
    assert channels.live == 2
    # a run costs no file: a hundred more leave the directory as it was
    before = tree(runs)
    more = [await open_run(channels, f"export@{n}#1") for n in range(3, 103)]
    assert (
        tree(runs)
        == before
        == [os.path.basename(home), os.path.join(os.path.basename(home), "sock")]
    )
    for grant in more:
        grant.revoke()
    assert tree(runs) == before and channels.live == 2


def ask_as(uid: int, path: str, token: str) -> bytes:
    """One state.get request from a child process that runs as ``uid``; the answer line."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls until _exit
        code = 1
        try:
            os.close(read_end)
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(path)
                sock.sendall(protocol.encode({"v": 1, "token": token, "op": "state.get"}))
                answer = b""
                while not answer.endswith(b"\n"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
            os.write(write_end, answer)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    return b"".join(chunks)


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user needs root")
@pytest.mark.asyncio
async def test_a_token_serves_its_runs_user_only(channels: RunChannels) -> None:
    assert channels.directory is not None
    os.chmod(os.path.dirname(channels.directory), 0o711)  # as /run is: others pass through
    nobody = await open_run(channels, "export@1#1", owner=RunOwner(65534, 65534))
    mine = await open_run(channels, "import@1#1", "import")

    async def answer(uid: int, grant: RunSocket) -> dict[str, object]:
        line = await asyncio.to_thread(ask_as, uid, grant.path, grant.token)
        return protocol.decode(line)

    assert (await answer(65534, nobody))["ok"] is True  # the run's user
    assert (await answer(0, nobody))["ok"] is True  # root
    refused = await answer(65533, nobody)  # another user that got hold of the token
    assert (refused["ok"], refused["code"]) == (False, protocol.UNAUTHORIZED)
    refused = await answer(65534, mine)  # the run's user with a token of root's run
    assert refused["code"] == protocol.UNAUTHORIZED
    assert channels.refused == 2


@pytest.mark.asyncio
async def test_a_token_is_its_own_runs_and_good_while_it_lives(
    channels: RunChannels, caplog: pytest.LogCaptureFixture
) -> None:
    a = await open_run(channels, "export@1#1")
    b = await open_run(channels, "import@1#1", "import")
    assert (await ask(client(a), "state.get"))["state"]["job"] == "export"  # type: ignore[index]
    assert (await ask(client(b), "state.get"))["state"]["job"] == "import"  # type: ignore[index]
    for wrong in ("", a.token[:-1], a.token + "x", "x" * 10_000):
        with pytest.raises(Refused) as refused:
            await ask(Channel(a.path, wrong or "-"), "state.get")
        assert refused.value.code == protocol.UNAUTHORIZED and refused.value.status == 4
    assert channels.refused == 4
    # any local user may knock as root: one WARNING for a burst of refusals
    warned = [r for r in caplog.records if "no run's going" in r.getMessage()]
    assert len(warned) == 1 and a.token not in caplog.text


@pytest.mark.asyncio
async def test_a_revoked_runs_token_is_refused_and_its_open_connections_close(
    channels: RunChannels,
) -> None:
    grant = await open_run(channels, "export@1#1")
    other = await open_run(channels, "import@1#1", "import")
    held = await asyncio.to_thread(client(grant).connect, "lock", 5.0, name="db", wait=None)
    assert (await asyncio.to_thread(held.answer, time.monotonic() + 5))["held"] is True
    grant.revoke()
    grant.revoke()  # idempotent
    with pytest.raises(Refused) as refused:
        await ask(client(grant), "state.get")
    assert refused.value.code == protocol.UNAUTHORIZED

    said = await asyncio.to_thread(held.line, time.monotonic() + 5)
    assert said == {"event": "lost", "reason": "the run ended"}  # told, then closed
    assert await asyncio.to_thread(held.line, time.monotonic() + 5) is None
    held.sock.close()
    assert exists(grant.path)  # the node's socket serves the other runs
    assert (await ask(client(other), "state.get"))["ok"] is True
    assert channels.live == 1


# ------------------------------------------------------------ state.get


@pytest.mark.asyncio
async def test_state_get_answers_the_runs_job_by_default_and_any_job_of_the_revision(
    channels: RunChannels,
) -> None:
    grant = await open_run(channels, "export@1#1")
    state = (await ask(client(grant), "state.get"))["state"]
    assert state == {
        "job": "export",
        "lastRun": {
            "id": "export@2026-05-01T04:00:00Z#1",
            "scheduledTime": "2026-05-01T04:00:00Z",
            "attempt": 1,
            "startedAt": "2026-05-01T04:00:00Z",
            "pid": 4242,
            "manual": False,
            "finishedAt": "2026-05-01T04:00:02Z",
            "duration": 2.0,
            "outcome": "failed",
            "exitCode": 1,
            "failReason": "nonzeroReturn (exit code 1)",
        },
        "lastSuccess": {
            "id": "export@2026-05-01T03:00:00Z#1",
            "scheduledTime": "2026-05-01T03:00:00Z",
            "attempt": 1,
            "startedAt": "2026-05-01T03:00:00Z",
            "pid": 4242,
            "manual": False,
            "finishedAt": "2026-05-01T03:00:02Z",
            "duration": 2.0,
            "outcome": "succeeded",
            "exitCode": 0,
            "failReason": None,
        },
        "pendingRetry": {
            "attempt": 2,
            "due": "2026-05-01T04:00:30Z",
            "scheduledTime": "2026-05-01T04:00:00Z",
        },
        "running": [],
    }
    other = (await ask(client(grant), "state.get", job="import"))["state"]
    assert other == {
        "job": "import",
        "lastRun": None,
        "lastSuccess": None,
        "pendingRetry": None,
        "running": [],
    }
    with pytest.raises(Refused) as refused:
        await ask(client(grant), "state.get", job="nope")
    assert (refused.value.code, refused.value.status) == (protocol.NOT_FOUND, 1)


# ------------------------------------------------------------ bounds


def raw(path: str, data: bytes, *, half_close: bool = False) -> bytes:
    """Send ``data`` on a fresh connection; everything the daemon answers until it closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        try:
            sock.sendall(data)
        except BrokenPipeError:
            pass
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got


@pytest.mark.asyncio
async def test_requests_are_bounded_in_size_form_and_time(
    channels: RunChannels, monkeypatch: pytest.MonkeyPatch
) -> None:
    grant = await open_run(channels, "export@1#1")

    def code(data: bytes) -> object:
        line = raw(grant.path, data).split(b"\n")[0]
        return protocol.decode(line)["code"]

    huge = b'{"v":1,"token":"' + b"x" * protocol.MAX_REQUEST + b'"}\n'
    assert await asyncio.to_thread(code, huge) == protocol.BAD_REQUEST
    assert await asyncio.to_thread(code, b"not json\n") == protocol.BAD_REQUEST
    assert await asyncio.to_thread(code, b"[1, 2]\n") == protocol.BAD_REQUEST
    versioned = protocol.encode({"v": 2, "token": grant.token, "op": "state.get"})
    assert await asyncio.to_thread(code, versioned) == protocol.BAD_REQUEST
    unknown = protocol.encode({"v": 1, "token": grant.token, "op": "rm -rf"})
    assert await asyncio.to_thread(code, unknown) == protocol.BAD_REQUEST
    # a line cut short is not answered; a request that never ends is cut off
    assert await asyncio.to_thread(raw, grant.path, b'{"v": 1', half_close=True) == b""
    monkeypatch.setattr(protocol, "REQUEST_TIMEOUT", 0.3)
    began = time.monotonic()
    assert await asyncio.to_thread(code, b'{"v": 1') == protocol.BAD_REQUEST
    assert time.monotonic() - began < 5


@pytest.mark.asyncio
async def test_a_run_and_the_socket_have_a_bounded_number_of_connections(
    channels: RunChannels, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(protocol, "MAX_CONNECTIONS", 2)
    grant = await open_run(channels, "export@1#1")
    other = await open_run(channels, "import@1#1", "import")
    holds = [
        await asyncio.to_thread(client(grant).connect, "lock", 5.0, name=name, wait=None)
        for name in ("db1", "db2")
    ]
    for hold in holds:
        assert (await asyncio.to_thread(hold.answer, time.monotonic() + 5))["held"] is True
    with pytest.raises(Refused) as refused:
        await ask(client(grant), "state.get")
    assert refused.value.code == protocol.BUSY
    assert (await ask(client(other), "state.get"))["ok"] is True  # another run's are its own
    for hold in holds:
        hold.sock.close()

    async def answered() -> bool:
        try:
            return bool(await ask(client(grant), "state.get"))
        except Refused:
            return False

    await until(answered, what="answers again once they closed")
    # the socket as a whole: connections that never say who they are count too
    monkeypatch.setattr(server, "MAX_NODE_CONNECTIONS", 2)
    idle = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    for sock in idle:
        sock.connect(grant.path)

    async def both_counted() -> bool:
        return len(channels._connections) == 2

    await until(both_counted, what="the two idle connections seen")
    with pytest.raises(Refused) as refused:
        await ask(client(other), "state.get")
    assert refused.value.code == protocol.BUSY
    for sock in idle:
        sock.close()
    await until(answered, what="answers again once the idle ones closed")


# ------------------------------------------------------------ locks


@pytest.mark.asyncio
async def test_a_lock_is_held_by_one_run_at_a_time_and_handed_on_in_order(
    channels: RunChannels,
) -> None:
    a = await open_run(channels, "export@1#1")
    b = await open_run(channels, "export@2#1")
    c = await open_run(channels, "import@1#1", "import")
    first = await asyncio.to_thread(client(a).connect, "lock", 5.0, name="db", wait=None)
    assert (await asyncio.to_thread(first.answer, time.monotonic() + 5))["scope"] == "node"
    assert channels.locks.holder("db").run == "export@1#1"  # type: ignore[union-attr]
    second = await asyncio.to_thread(client(b).connect, "lock", 5.0, name="db", wait=None)
    third = await asyncio.to_thread(client(c).connect, "lock", 5.0, name="db", wait=None)

    async def queued(count: int) -> bool:
        return channels.locks.waiting() == count

    await until(lambda: queued(2), what="two takers waiting")
    # one that will not wait that long gives up (exit 75) and leaves the queue
    with pytest.raises(Refused) as refused:
        await asyncio.to_thread(client(c).request, "lock", 5.0, name="db", wait=0.2)
    assert (refused.value.code, refused.value.status) == (protocol.TIMEOUT, 75)
    await until(lambda: queued(2), what="the impatient one left")
    first.close()  # releasing is closing
    assert (await asyncio.to_thread(second.answer, time.monotonic() + 5))["held"] is True
    assert channels.locks.holder("db").run == "export@2#1"  # type: ignore[union-attr]
    second.close()
    await asyncio.to_thread(third.answer, time.monotonic() + 5)
    third.close()

    async def free() -> bool:
        return channels.locks.holder("db") is None and not channels.locks._locks

    await until(free, what="the lock forgotten once free")


@pytest.mark.asyncio
async def test_a_runs_end_takes_its_lock_away_and_says_so(channels: RunChannels) -> None:
    a = await open_run(channels, "export@1#1")
    b = await open_run(channels, "export@2#1")
    held = await asyncio.to_thread(client(a).connect, "lock", 5.0, name="db", wait=None)
    await asyncio.to_thread(held.answer, time.monotonic() + 5)
    waiting = await asyncio.to_thread(client(b).connect, "lock", 5.0, name="db", wait=None)
    await until(lambda: channels.locks.waiting() == 1, what="b waits")
    a.revoke()
    said = await asyncio.to_thread(held.line, time.monotonic() + 5)
    assert said == {"event": "lost", "reason": "the run ended"}
    assert await asyncio.to_thread(held.line, time.monotonic() + 5) is None  # then closed
    assert (await asyncio.to_thread(waiting.answer, time.monotonic() + 5))["held"] is True
    # and a run that ends while it waits is told so
    c = await open_run(channels, "import@1#1", "import")
    late = await asyncio.to_thread(client(c).connect, "lock", 5.0, name="db", wait=None)
    await until(lambda: channels.locks.waiting() == 1, what="c waits")
    c.revoke()
    with pytest.raises((Refused, Unreachable)):
        await asyncio.to_thread(late.answer, time.monotonic() + 5)
    assert channels.locks.waiting() == 0
    waiting.close()
    held.close()
    late.close()


@pytest.mark.asyncio
async def test_a_taker_that_goes_away_leaves_the_queue(channels: RunChannels) -> None:
    a = await open_run(channels, "export@1#1")
    b = await open_run(channels, "export@2#1")
    held = await asyncio.to_thread(client(a).connect, "lock", 5.0, name="db", wait=None)
    await asyncio.to_thread(held.answer, time.monotonic() + 5)
    gone = await asyncio.to_thread(client(b).connect, "lock", 5.0, name="db", wait=None)
    await until(lambda: channels.locks.waiting() == 1, what="b waits")
    gone.close()
    await until(lambda: channels.locks.waiting() == 0, what="b left the queue")
    held.close()
    await until(lambda: channels.locks.holder("db") is None, what="released")


@pytest.mark.asyncio
async def test_a_lock_name_is_checked(channels: RunChannels) -> None:
    grant = await open_run(channels, "export@1#1")
    for name in ("", "-x", "a b", "x" * 129, "ä", 3):
        with pytest.raises(Refused) as refused:
            await ask(client(grant), "lock", name=name, wait=0)
        assert refused.value.code == protocol.BAD_REQUEST
    for wait in (-1, "5", True):
        with pytest.raises(Refused):
            await ask(client(grant), "lock", name="ok", wait=wait)


# ------------------------------------------------------------ the directory of runs


@pytest.mark.asyncio
async def test_leftovers_of_a_dead_daemon_are_swept_and_live_ones_kept(
    channels: RunChannels,
) -> None:
    assert channels.directory is not None
    os.makedirs(channels.directory, exist_ok=True)
    dead = os.path.join(channels.directory, "a" * 24)
    os.mkdir(dead, 0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(os.path.join(dead, "sock"))  # closed at once: nobody listens there
    old = time.time() - 2 * server.STALE_AGE
    os.utime(dead, (old, old))
    grant = await open_run(channels, "export@1#1")  # the first opens sweep
    live = os.path.dirname(grant.path)
    os.utime(live, (old, old))

    async def swept() -> bool:
        return not exists(dead)

    await until(swept, what="the dead daemon's socket swept")
    assert await asyncio.to_thread(server._sweep, channels.directory) == 0
    assert exists(grant.path)


@pytest.mark.asyncio
async def test_runs_get_no_channel_when_the_directory_cannot_be_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    long = tmp_path / ("x" * 90) / "runs"
    too_long = RunChannels(str(long), states=states, locks=Locks())
    assert await too_long.open("export@1#1", JOBS["export"], None) is None
    assert "longer than a unix socket allows" in caplog.text
    base = Path(short_dir())
    try:
        blocked = base / "file"
        blocked.write_text("")
        unusable = RunChannels(str(blocked / "runs"), states=states, locks=Locks())
        assert await unusable.open("export@1#1", JOBS["export"], None) is None
        assert "cannot use" in caplog.text
    finally:
        import shutil

        shutil.rmtree(base)
    none = RunChannels(None, states=states, locks=Locks())
    assert await none.open("export@1#1", JOBS["export"], None) is None


# ------------------------------------------------------------ xcom


class Values:
    """A real Xcoms host: the values of workflow runs, in a dict (the budget aside)."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str, str, str], str] = {}
        self.refuse: str | None = None

    def xcom_push(
        self, workflow: str, run: str, task: str, values: Mapping[str, str]
    ) -> str | None:
        if self.refuse is not None:
            return self.refuse
        for key, value in values.items():
            self.kept[(workflow, run, task, key)] = value
        return None

    def xcom_pull(self, workflow: str, run: str, task: str, key: str) -> str | None:
        return self.kept.get((workflow, run, task, key))


FLOW = load_snapshot(
    Snapshot(
        "r1",
        "test",
        {
            "cronstable.yaml": b"workflows:\n  - name: etl\n    schedule: '@daily'\n"
            b"    tasks:\n      - {name: extract, command: 'true'}\n"
            b"      - {name: load, command: 'true', dependsOn: [extract]}\n"
        },
        "cronstable.yaml",
    )
).workflows["etl"]


def task_job(name: str, run: str = "etl@2026-05-01T03:00:00Z") -> Job:
    """A workflow task's definition as its run is spawned: told its workflow run."""
    job = FLOW.tasks[name]
    return dataclasses.replace(job, environment={**job.environment, WORKFLOW_RUN_ENV: run})


@pytest_asyncio.fixture
async def valued() -> AsyncIterator[tuple[RunChannels, Values]]:
    base = short_dir()
    values = Values()
    made = RunChannels(os.path.join(base, "runs"), states=states, locks=Locks(), xcoms=values)
    yield made, values
    await made.close()
    import shutil

    shutil.rmtree(base, ignore_errors=True)


async def open_task(channels: RunChannels, name: str, owner: RunOwner | None = None) -> RunSocket:
    grant = await channels.open(f"etl.{name}@2026-05-01T03:00:00Z#1", task_job(name), owner)
    assert grant is not None
    return grant


@pytest.mark.asyncio
async def test_a_task_pushes_and_pulls_values_of_its_workflow_run(
    valued: tuple[RunChannels, Values],
) -> None:
    channels, values = valued
    extract = await open_task(channels, "extract")
    assert (await ask(client(extract), "xcom.push", key="rows", value="42"))["ok"] is True
    assert values.kept == {("etl", "etl@2026-05-01T03:00:00Z", "extract", "rows"): "42"}
    load = await open_task(channels, "load")
    for source in ("extract", "etl.extract"):
        answer = await ask(client(load), "xcom.pull", task=source, key="rows")
        assert answer["value"] == "42"
    with pytest.raises(Refused) as refused:
        await ask(client(load), "xcom.pull", task="extract", key="nope")
    assert (refused.value.code, refused.value.status) == (protocol.NOT_FOUND, 1)
    for key, value in (
        (".x", "v"),
        ("a/b", "v"),
        ("ok", "nul\x00"),
        ("ok", "x" * (xcom.MAX_VALUE + 1)),
        ("ok", 5),
    ):
        with pytest.raises(Refused) as refused:
            await ask(client(load), "xcom.push", key=key, value=value)
        assert refused.value.code == protocol.BAD_REQUEST, (key, refused.value)
    values.refuse = "the values of workflow run etl@… would be 2000000 bytes together"
    with pytest.raises(Refused) as refused:
        await ask(client(load), "xcom.push", key="big", value="x")
    assert refused.value.code == protocol.REFUSED and "bytes together" in str(refused.value)
    # a job's run is no task: it has no values to push or pull
    plain = await open_run(channels, "export@1#1")
    assert xcom.DIR_ENV not in plain.environment
    with pytest.raises(Refused) as refused:
        await ask(client(plain), "xcom.push", key="rows", value="1")
    assert refused.value.code == protocol.BAD_REQUEST and "no task" in str(refused.value)


@pytest.mark.asyncio
async def test_the_files_a_task_writes_are_its_values(
    valued: tuple[RunChannels, Values],
) -> None:
    channels, values = valued
    grant = await open_task(channels, "extract")
    folder = Path(grant.environment[xcom.DIR_ENV])
    assert folder.parent.parent == Path(grant.path).parent  # in the daemon's directory
    assert mode(folder) == mode(folder.parent) == 0o700
    (folder / "rows").write_text("42")
    (folder / "path").write_text("/data/2026-05-01\n")
    (folder / ".partial").write_text("skipped: a hidden name")
    assert await grant.finish() is None
    run = "etl@2026-05-01T03:00:00Z"
    assert values.kept == {
        ("etl", run, "extract", "rows"): "42",
        ("etl", run, "extract", "path"): "/data/2026-05-01\n",
    }
    assert not exists(str(folder.parent))  # revoked: the run's directory went, values too
    assert await grant.finish() is None  # once


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def owner(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_uid, info.st_gid


def leave_files(folder: Path, leave: str, elsewhere: Path) -> None:
    """What a job may not leave in its xcom directory, one kind each."""
    secret = elsewhere / "secret"
    secret.write_text("the daemon's own")
    if leave == "symlink":
        (folder / "rows").symlink_to(secret)
    elif leave == "linked-dir":
        folder.rmdir()
        folder.symlink_to(elsewhere, target_is_directory=True)
    elif leave == "fifo":
        os.mkfifo(folder / "rows")
    elif leave == "too-big":
        (folder / "rows").write_text("x" * (xcom.MAX_VALUE + 1))
    elif leave == "not-text":
        (folder / "rows").write_bytes(b"\xff\xfe")
    elif leave == "bad-name":
        (folder / "a b").write_text("v")
    else:
        (folder / "rows").write_bytes(b"a\x00b")


@pytest.mark.parametrize(
    "leave",
    ["symlink", "linked-dir", "fifo", "too-big", "not-text", "bad-name", "nul"],
)
@pytest.mark.asyncio
async def test_files_a_task_may_not_leave_fail_it(
    valued: tuple[RunChannels, Values], leave: str, tmp_path: Path
) -> None:
    channels, values = valued
    grant = await open_task(channels, "extract")
    folder = Path(grant.environment[xcom.DIR_ENV])
    leave_files(folder, leave, tmp_path)
    problem = await grant.finish()
    assert problem is not None and problem.startswith("xcom: "), problem
    assert values.kept == {}  # nothing of it kept, the daemon's file never read
    assert not exists(str(folder.parent))
    assert exists(str(tmp_path / "secret"))  # and what a link pointed at stays


@pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")
@pytest.mark.asyncio
async def test_a_task_of_another_user_leaves_only_its_own_files(
    valued: tuple[RunChannels, Values],
) -> None:
    channels, values = valued
    grant = await open_task(channels, "extract", RunOwner(65534, 65534))
    folder = Path(grant.environment[xcom.DIR_ENV])
    assert owner(folder) == (65534, 65534)
    (folder / "mine").write_text("v")
    os.chown(folder / "mine", 65534, 65534)
    assert await grant.finish() is None
    assert list(values.kept.values()) == ["v"]
    other = await open_task(channels, "load", RunOwner(65534, 65534))
    folder = Path(other.environment[xcom.DIR_ENV])
    (folder / "root-only").write_text("v")  # root's, hard-linked or not: not the job's
    os.chown(folder / "root-only", 1, 1)
    problem = await other.finish()
    assert problem is not None and "regular file of the job's user" in problem
