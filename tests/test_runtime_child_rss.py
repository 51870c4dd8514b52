"""A run's maxRss is its own: jobs start from the exec shim, not from the daemon.

Linux charges a program, at its exec, the peak resident size of the process that
exec'd it; spawned straight from a daemon that once held 500 MB, ``echo`` reported
those 500 MB (issue 15).  These tests run real processes from a parent that really
holds 500 MB (this test process, and in the last one a real daemon that loaded a
large configuration), and check every other thing the shim must keep as it was:
exit codes and signals, spawn errors, the job's ids, killing the group, no leaked
descriptors.  The cases that depend on the shim's code run against both of its
builds: the one installed here (no C library, on Linux x86_64/aarch64) and the C
library one that other systems get, compiled for the test by setup.py's own code.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import pwd
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_proc import DaemonProcess, http, wait_for, write_config

from cronstable import platform
from cronstable.config import Job, MemoryTree, load
from cronstable.ports import RunResult
from cronstable.runtime import exec_shim
from cronstable.runtime.child import spawn
from cronstable.runtime.identity import Identity
from cronstable.runtime.process import JobProcess

pytestmark = pytest.mark.timeout(60)
async_test = pytest.mark.asyncio

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
SCHEDULED = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
MiB = 1024 * 1024
ALLOCATE_50MB = "import time; block = b'x' * (50 * 1024 * 1024); time.sleep(0.05)"


def make_job(command: str | list[str], **settings: Any) -> Job:
    entry = {"name": "rss", "schedule": "* * * * *", "command": command, **settings}
    state = load(MemoryTree({"c.yaml": yaml.safe_dump({"jobs": [entry]}).encode()}), "c.yaml")
    return next(iter(state.jobs.values()))


async def run(job: Job) -> RunResult:
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    return await proc.wait()


def vm_rss(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def parent_at_500mb() -> Iterator[None]:
    """This process holding 500 MB (b"x" * n writes every page: really resident)."""
    block = b"x" * (500 * MiB)
    assert vm_rss() >= 500 * MiB
    yield
    del block


def _setup_module() -> Any:
    spec = importlib.util.spec_from_file_location("cronstable_setup", REPO / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (setup() runs only as __main__)
    return module


@pytest.fixture(scope="module")
def libc_shim() -> Iterator[str]:
    """The shim's C library build (what a system other than Linux x86_64/aarch64 gets),
    in a directory any user may reach (jobs may run as nobody)."""
    setup_py = _setup_module()
    directory = Path(tempfile.mkdtemp(prefix="cronstable-libc-shim-"))
    directory.chmod(0o755)
    target = directory / exec_shim.SHIM_NAME
    try:
        assert setup_py.compile_shim(Path(exec_shim.SHIM_SOURCE), target, (["-static"], []))
        yield str(target)
    finally:
        shutil.rmtree(directory)


@pytest.fixture(params=["installed", "libc"])
def shim(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each build in turn, as the one spawn() finds."""
    installed = exec_shim.shim_path()
    assert installed is not None, "the exec shim is not built"
    if request.param == "installed":
        return installed
    path: str = request.getfixturevalue("libc_shim")
    monkeypatch.setattr(exec_shim, "shim_path", lambda: path)
    return path


# ------------------------------------------------------------------ the shim in use


def test_the_exec_shim_is_built_here() -> None:
    # CI must fail when the build step is missing: without the shim every run reports
    # the daemon's memory (the warning at start says so, and nobody reads it)
    path = exec_shim.shim_path()
    assert path is not None, (
        f"{exec_shim.SHIM_DIR}/{exec_shim.SHIM_NAME} is not built: run `make` "
        "(or `pip install -e .`) with a C compiler"
    )
    assert os.path.getmtime(path) >= os.path.getmtime(exec_shim.SHIM_SOURCE), (
        "the exec shim is older than its source: run `make` again"
    )
    if sys.platform == "linux" and os.uname().machine in ("x86_64", "aarch64"):
        # the build without a C library (a C library's start-up would double the cost
        # of every job start): small, and naming no C library function
        assert os.path.getsize(path) < 100_000, os.path.getsize(path)
        assert b"__libc_start_main" not in Path(path).read_bytes()


@async_test
async def test_jobs_start_from_the_shim_and_lead_a_session_of_their_own(shim: str) -> None:
    probe = (
        "import os; print(os.getpid(), os.getpgid(0), os.getsid(0), "
        "open(f'/proc/{os.getppid()}/comm').read().strip())"
    )
    result = await run(make_job([PY, "-c", probe], captureStdout=True))
    assert result.returncode == 0, result
    pid, pgid, sid, parent = (result.stdout or "").split()
    assert parent == Path(shim).name
    # the run's pid is the command's, and its group and session are the run's own
    assert int(pid) == int(pgid) == int(sid) == result.pid


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@async_test
async def test_the_shim_reads_the_commands_start_ticks(tmp_path: Path, shim: str) -> None:
    # the daemon records them with the run (a pid reused later is told apart by them):
    # the shim reads them, so the daemon does not open /proc for every start.  A name
    # with ") " in it must not shift the fields (the last ")" ends the command's name)
    tricky = tmp_path / "a) 1 2 (b"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", tricky)
    for argv in (["sleep", "2"], [str(tricky), "2"]):
        child, _ = await spawn(argv, env=os.environ, capture=[], reader_limit=1024)
        try:
            ticks = platform.process_start_ticks(child.pid)
            assert ticks is not None
            assert child.start_ticks == ticks, argv
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            await child.exited
            child.close()


def test_a_shim_that_gives_no_start_ticks_is_still_understood() -> None:
    # one built before it said them (or without /proc): the daemon reads them itself
    assert exec_shim.parse_first(b"started 42") == exec_shim.Started(42, None)
    assert exec_shim.parse_first(b"started 42 1234") == exec_shim.Started(42, 1234)
    assert exec_shim.parse_first(b"started 42 x") is None
    assert exec_shim.parse_first(b"started 42 1 2") is None


@async_test
async def test_a_job_gets_back_the_open_files_limit_the_daemon_started_with(
    shim: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon raises its soft RLIMIT_NOFILE to the hard limit (issue 15, item 3);
    its jobs get the one it started with, not the raised one."""
    from cronstable import platform

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard open-files limit ({hard}) leaves no room to raise 1024")
    monkeypatch.setattr(platform, "_jobs_open_files", None)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        raised = platform.raise_open_files_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == raised.soft > 1024
        assert platform.jobs_open_files_limit() == 1024
        result = await run(make_job("ulimit -Sn; ulimit -Hn", captureStdout=True))
        assert result.returncode == 0, result
        assert (result.stdout or "").split() == ["1024", str(hard)]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ------------------------------------------------------------------ maxRss


@async_test
async def test_echo_reports_its_own_memory_after_the_parent_held_500mb(
    parent_at_500mb: None, shim: str
) -> None:
    result = await run(make_job(["echo", "hi"], captureStdout=True))
    assert result.returncode == 0 and result.stdout == "hi"
    assert result.max_rss is not None and 0 < result.max_rss < 10 * MiB, result.max_rss
    # what the issue saw: the same echo spawned straight from this process
    child, _ = await spawn(["echo", "hi"], env=os.environ, capture=[], reader_limit=1, direct=True)
    await child.exited
    assert child.usage is not None and child.usage.max_rss is not None
    assert child.usage.max_rss >= 450 * MiB


@async_test
async def test_a_job_that_allocates_50mb_reports_50mb_not_the_parents_500(
    parent_at_500mb: None, shim: str
) -> None:
    for command in (
        [PY, "-c", ALLOCATE_50MB],
        f"{PY} -c {json.dumps(ALLOCATE_50MB)}; true",  # a descendant the shell reaps
    ):
        result = await run(make_job(command))
        assert result.returncode == 0, result
        assert result.max_rss is not None and 50 * MiB <= result.max_rss < 200 * MiB, command
        assert result.cpu_seconds is not None and result.cpu_seconds > 0


# ------------------------------------------------------------------ exits and signals


@async_test
async def test_exit_codes_and_signals_are_the_commands(shim: str) -> None:
    assert (await run(make_job("exit 3"))).returncode == 3
    assert (await run(make_job("kill -TERM $$"))).returncode == -signal.SIGTERM
    assert (await run(make_job("kill -KILL $$"))).returncode == -signal.SIGKILL
    result = await run(make_job(["true"]))
    assert result.returncode == 0 and result.fail_reason is None


def core_pattern() -> str:
    return Path("/proc/sys/kernel/core_pattern").read_text().strip()


def core_files(directory: Path) -> list[Path]:
    return list(directory.glob("core*"))


@async_test
async def test_a_command_killed_by_sigsegv_is_minus_11_and_the_shim_dumps_no_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shim: str
) -> None:
    pattern = core_pattern()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"core files do not land in the process's directory here ({pattern})")
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard != resource.RLIM_INFINITY and hard < 16 * MiB:
        pytest.skip("core dumps are limited here")
    # the shim starts where the daemon is (here tmp_path), the command in a
    # directory of its own: a core in tmp_path would be the shim's
    monkeypatch.chdir(tmp_path)
    own = tmp_path / "command"
    own.mkdir()
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    try:
        result = await run(make_job(f"cd {own} && kill -SEGV $$"))
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    assert result.returncode == -signal.SIGSEGV
    assert result.fail_reason == "nonzeroReturn (killed by signal 11 (SIGSEGV))"
    assert core_files(own), "the command dumped no core: the check proves nothing"
    assert not core_files(tmp_path)


@async_test
async def test_a_run_killed_after_kill_timeout_still_has_its_figures(shim: str) -> None:
    # the group gets SIGTERM, then SIGKILL: the shim is outside it, reaps the
    # command and reports on it (a shim in the group would die with it, unheard)
    job = make_job(
        f"trap '' TERM; {PY} -c {json.dumps(ALLOCATE_50MB)}; sleep 30",
        killTimeout=0.3,
    )
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    await asyncio.sleep(0.5)
    await proc.cancel()
    result = await proc.wait()
    assert result.cancelled and result.returncode == -signal.SIGKILL
    assert result.max_rss is not None and result.max_rss >= 50 * MiB
    assert result.cpu_seconds is not None and result.cpu_seconds > 0


# ------------------------------------------------------------------ the job's ids


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch ids")
@async_test
async def test_the_shim_takes_the_jobs_user_and_groups(shim: str) -> None:
    nobody = pwd.getpwnam("nobody")
    identity = Identity(nobody.pw_uid, nobody.pw_gid, (nobody.pw_gid, 1, 2))
    child, readers = await spawn(
        ["sh", "-c", "id -u; id -g; id -G"],
        env=os.environ,
        capture=[1],
        reader_limit=1024,
        identity=identity,
    )
    out = (await readers[1].read()).decode().split("\n")
    await child.exited
    child.close()
    assert child.returncode == 0
    assert out[:2] == [str(nobody.pw_uid), str(nobody.pw_gid)]
    assert sorted(map(int, out[2].split())) == sorted({nobody.pw_gid, 1, 2})


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as nobody")
def test_a_switch_the_shim_may_not_make_is_popens_error(shim: str) -> None:
    # the shim run by a daemon that is nobody, asked for root: setreuid fails in the
    # setup stage, which Popen reports without a file name
    read_end, write_end = os.pipe()
    done = subprocess.run(
        [shim, str(write_end), "0:0:", "-", "true"],
        pass_fds=(write_end,),
        user="nobody",
        timeout=10,
        check=False,
    )
    os.close(write_end)
    line = os.read(read_end, 256)
    os.close(read_end)
    assert (done.returncode, line) == (127, b"failed 1 setup\n")
    answer = exec_shim.parse_first(line.rstrip(b"\n"))
    assert isinstance(answer, exec_shim.Failed)
    error = answer.error("true")
    assert (type(error), str(error)) == (PermissionError, "[Errno 1] Operation not permitted")


# ------------------------------------------------------------------ spawn errors


async def _spawn_error(argv: list[str], env: dict[str, str], direct: bool) -> str:
    with pytest.raises(OSError) as caught:
        await spawn(argv, env=env, capture=[1], reader_limit=1024, direct=direct)
    return f"{type(caught.value).__name__}: {caught.value}"


@async_test
async def test_spawn_errors_are_the_ones_popen_raises(tmp_path: Path, shim: str) -> None:
    not_executable = tmp_path / "not-executable"
    not_executable.write_text("#!/bin/sh\n")
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x7fELF not really")
    garbage.chmod(0o755)
    denied_dir = tmp_path / "denied"
    denied_dir.mkdir()
    (denied_dir / "tool").write_text("")
    env = {"PATH": f"{tmp_path / 'missing'}:{denied_dir}:/usr/bin"}
    cases = [
        ["nosuch-cronstable-binary"],
        [str(tmp_path / "nosuch")],
        [str(tmp_path)],  # a directory
        [str(not_executable)],
        [str(garbage)],  # ENOEXEC: no /bin/sh retry, as Popen
        ["tool"],  # the first error other than ENOENT in PATH wins
    ]
    for argv in cases:
        direct = await _spawn_error(argv, env, direct=True)
        shim = await _spawn_error(argv, env, direct=False)
        assert shim == direct, argv
    assert "FileNotFoundError: [Errno 2] No such file or directory: 'nosuch-cronstable-binary'" in (
        await _spawn_error(["nosuch-cronstable-binary"], env, direct=False)
    )


@async_test
async def test_a_missing_command_or_shell_fails_the_run_as_before() -> None:
    result = await run(make_job(["nosuch-cronstable-binary"]))
    assert (result.returncode, result.pid, result.max_rss) == (127, None, None)
    assert result.fail_reason == (
        "spawn failed: [Errno 2] No such file or directory: 'nosuch-cronstable-binary'"
    )
    result = await run(make_job("true", shell="/nonexistent/sh"))
    assert result.returncode == 127
    assert result.fail_reason == (
        "spawn failed: [Errno 2] No such file or directory: '/nonexistent/sh'"
    )


# ------------------------------------------------------------------ descriptors, cancel


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@async_test
async def test_no_descriptor_outlives_its_run(shim: str) -> None:
    await run(make_job(["true"]))  # the loop's own descriptors exist from here on
    before = open_fds()
    for _ in range(5):
        await run(make_job("echo out; echo err >&2", captureStdout=True, stdin="in"))
        await run(make_job(["nosuch-cronstable-binary"]))
        proc = JobProcess(make_job(["sleep", "30"]), scheduled_time=SCHEDULED, attempt=1)
        await proc.start()
        await proc.cancel()
    assert open_fds() == before


@pytest.fixture(params=["close_range", "proc"])
def closing_shim(
    request: pytest.FixtureRequest, shim: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """Each build, closing the daemon's descriptors with close_range, or (built without
    it, as on a kernel before 5.9) through /proc/self/fd."""
    if request.param == "close_range":
        return shim
    raw = shim == exec_shim.shim_path()
    flags = (
        ["-DCRONSTABLE_EXEC_RAW", "-static", "-nostdlib", "-fno-stack-protector"]
        + ["-fno-builtin", "-fno-pie", "-no-pie"]
        if raw
        else ["-static"]
    )
    target = tmp_path / exec_shim.SHIM_NAME
    built = _setup_module().compile_shim(
        Path(exec_shim.SHIM_SOURCE), target, (["-DCRONSTABLE_EXEC_NO_CLOSE_RANGE", *flags],)
    )
    assert built
    monkeypatch.setattr(exec_shim, "shim_path", lambda: str(target))
    return str(target)


@async_test
async def test_a_descriptor_the_daemon_left_inheritable_does_not_reach_the_job(
    closing_shim: str,
) -> None:
    # the shim is started with posix_spawn, which closes nothing: the shim closes what
    # Popen's close_fds closed, whichever descriptors they are (a low one, a high one)
    low = os.open(os.devnull, os.O_RDONLY)
    high = os.dup2(low, 900)
    os.set_inheritable(low, True)
    os.set_inheritable(high, True)
    try:
        probe = "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"
        result = await run(make_job([PY, "-c", probe], captureStdout=True, stdin="in"))
    finally:
        os.close(low)
        os.close(high)
    assert result.returncode == 0, result
    # 0-2, and the descriptor listdir itself opened
    assert json.loads(result.stdout or "")[:3] == [0, 1, 2]
    assert len(json.loads(result.stdout or "")) == 4, result.stdout


@async_test
async def test_a_job_gets_sigpipe_back_though_python_ignores_it(shim: str) -> None:
    # Python ignores SIGPIPE (and an ignored signal stays so across exec); Popen gave
    # the default back, and so does the spawn of the shim: `yes | head` must end
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    probe = "grep SigIgn /proc/self/status"
    result = await run(make_job(["sh", "-c", probe], captureStdout=True))
    ignored = int((result.stdout or "").split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)), result.stdout
    result = await run(make_job("yes | head -n 1", captureStdout=True, executionTimeout=20))
    assert result.returncode == 0 and (result.stdout or "").strip() == "y", result


def test_a_daemon_started_with_its_standard_descriptors_closed_still_spawns(
    tmp_path: Path,
) -> None:
    # with 0 and 1 closed, the spawn's own pipes get those numbers: a posix_spawn dup2
    # would overwrite one with another, so such a spawn goes through Popen instead
    script = tmp_path / "spawn.py"
    script.write_text(
        "import asyncio, os, sys\n"
        "from cronstable.runtime.child import spawn\n"
        "held = [os.open(os.devnull, os.O_RDONLY) for _ in range(2)]\n"
        "assert held == [0, 1], held  # kept from the loop's own descriptors\n"
        "async def main():\n"
        "    for fd in held:\n"
        "        os.close(fd)  # free again: the spawn's pipes get 0 and 1\n"
        "    child, readers = await spawn(['sh', '-c', 'read x; echo got $x; echo err >&2'],"
        " env=os.environ, capture=[1, 2], reader_limit=1024, stdin=b'line\\n')\n"
        "    out = await readers[1].read()\n"
        "    err = await readers[2].read()\n"
        "    await child.exited\n"
        "    sys.stderr.write(repr((out, err, child.returncode)))\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        f"exec 0<&- 1>&-; exec {PY} {script}",
        shell=True,
        stderr=subprocess.PIPE,
        timeout=30,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().endswith("(b'got line\\n', b'err\\n', 0)"), done.stderr


@async_test
async def test_a_spawn_cancelled_while_starting_kills_the_command(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    argv = ["sh", "-c", f"echo $$ > {marker}; exec sleep 30"]
    task = asyncio.create_task(spawn(argv, env=os.environ, capture=[], reader_limit=1))
    await asyncio.sleep(0)  # Popen has run: the task waits for the shim's first line
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    wait_for(marker.exists, 10, "the command started")
    pid = int(marker.read_text())

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        except OSError:
            return True

    deadline = asyncio.get_running_loop().time() + 10
    while not gone() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)  # the loop runs: the shim's line arrives, the kill goes
    assert gone(), "the command of a cancelled spawn is still running"


def test_a_missing_shim_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    exec_shim.warn_if_missing(None)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "maxRss then includes the daemon's own memory" in caplog.text
    caplog.clear()
    exec_shim.warn_if_missing("/some/cronstable-exec")
    assert not caplog.records


# ------------------------------------------------------------------ a real daemon


BIG_FILE_BYTES = 3_900_000  # under the default 4 MiB per file
BIG_FILES = 60


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_daemon_that_loaded_a_500mb_revision_reports_echo_under_10mib(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    statsd.settimeout(10)
    port = statsd.getsockname()[1]
    yearly = "0 0 1 1 *"
    root = write_config(
        tmp_path / "config",
        yaml.safe_dump(
            {
                "web": {
                    "listen": ["http://127.0.0.1:0"],
                    "authTokens": [
                        {"name": "t", "fromEnvVar": "RSS_TOKEN", "scopes": ["read", "trigger"]}
                    ],
                },
                "jobs": [
                    {
                        "name": "echo",
                        "command": ["echo", "hi"],
                        "schedule": yearly,
                        "statsd": {"host": "127.0.0.1", "port": port, "prefix": "t.echo"},
                    },
                    {"name": "alloc", "command": [PY, "-c", ALLOCATE_50MB], "schedule": yearly},
                ],
            }
        ),
    )
    # a large repository: jobs carrying big stdin texts (the daemon's memory grows by
    # the real means of loading them), past the default revision size by the option
    text = "x" * BIG_FILE_BYTES  # written by hand: yaml.safe_dump takes a second a file
    for i in range(BIG_FILES):
        (root / f"big-{i:02d}.yaml").write_text(
            f"jobs:\n  - name: big-{i}\n    command: [cat]\n"
            f"    schedule: '{yearly}'\n    stdin: '{text}'\n"
        )
    daemon = DaemonProcess(
        root,
        tmp_path / "daemon.log",
        args=["--max-revision-bytes", str(512 * MiB)],
        env={**os.environ, "RSS_TOKEN": "rss-token"},
    )
    auth = {"Authorization": "Bearer rss-token"}
    daemon_procs.append(daemon.start())
    url = daemon.url(60)
    daemon.wait_log(r" applied in ", 120)
    assert daemon.peak_rss_bytes() >= 500 * MiB, daemon.peak_rss_bytes()

    def last_run(job: str) -> dict[str, Any] | None:
        status, _, body = http(f"{url}/jobs/{job}/runs", headers=auth)
        assert status == 200, body
        done = [r for r in body["runs"] if r["outcome"] != "running"]
        return done[0] if done else None

    for job in ("echo", "alloc"):
        status, _, body = http(f"{url}/jobs/{job}/start", "POST", headers=auth)
        assert status == 202, body
        wait_for(lambda job=job: last_run(job) is not None, 30, f"{job} finished")
    echo, alloc = last_run("echo"), last_run("alloc")
    assert echo is not None and alloc is not None
    assert echo["outcome"] == "succeeded" and 0 < echo["maxRss"] < 10 * MiB, echo
    assert alloc["outcome"] == "succeeded" and 50 * MiB <= alloc["maxRss"] < 200 * MiB, alloc
    status, _, metrics = http(f"{url}/metrics", headers=auth)
    assert status == 200
    gauge = [
        line
        for line in metrics.splitlines()
        if line.startswith('cronstable_job_run_max_rss_bytes{job="echo"}')
    ]
    assert gauge and float(gauge[0].split()[-1]) == echo["maxRss"]
    datagrams = []
    while not any(b"max_rss" in d for d in datagrams):
        datagrams.append(statsd.recv(4096))
    (line,) = [x for d in datagrams for x in d.decode().splitlines() if "max_rss" in x]
    assert line == f"t.echo.max_rss:{echo['maxRss']}|g"
    statsd.close()
    assert daemon.stop() == 0
