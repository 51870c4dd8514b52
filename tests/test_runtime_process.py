"""Tests of cronstable.runtime.process: real processes, no mocks."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import sys
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_proc import until

from cronstable.config import Job, MemoryTree, load
from cronstable.ports import RunResult
from cronstable.runtime.output import OutputMirror
from cronstable.runtime.process import JobProcess

pytestmark = pytest.mark.timeout(15)

PY = sys.executable
SCHEDULED = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


def make_job(command: str | list[str], **settings: Any) -> Job:
    """A job loaded from YAML like any other (settings use the YAML spelling)."""
    entry = {"name": settings.pop("name", "job"), "schedule": "* * * * *", "command": command}
    entry.update(settings)
    text = yaml.safe_dump({"jobs": [entry]})
    state = load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")
    return next(iter(state.jobs.values()))


async def run(job: Job, **kwargs: Any) -> RunResult:
    kwargs.setdefault("scheduled_time", SCHEDULED)
    kwargs.setdefault("attempt", 1)
    proc = JobProcess(job, **kwargs)
    await proc.start()
    return await proc.wait()


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def gone(pids: list[int], within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def read_pids(path: Path) -> list[int]:
    try:
        return [int(p) for p in path.read_text().split()]
    except FileNotFoundError:
        return []


async def wait_for_file(path: Path, lines: int = 1, within: float = 3.0) -> list[int]:
    """The pids a job wrote to ``path``, once there are ``lines`` (at least one) of them."""

    def enough() -> list[int] | None:
        found = read_pids(path)
        return found if len(found) >= max(lines, 1) else None

    found: list[int] = await until(enough, within, f"{path} getting {lines} lines", every=0.02)
    return found


@pytest.fixture
def stray_pids() -> Iterator[list[int]]:
    """Pids a test starts outside any job's process group, killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ------------------------------------------------------------ how commands run


@pytest.mark.asyncio
async def test_list_command_is_executed_without_a_shell() -> None:
    code = "import sys; print(sys.argv[1:])"
    result = await run(make_job([PY, "-c", code, "a b", "$HOME", "*"], captureStdout=True))
    assert result.returncode == 0
    assert result.stdout == "['a b', '$HOME', '*']"
    assert result.fail_reason is None and not result.failed
    assert result.stderr == ""


@pytest.mark.asyncio
async def test_string_command_runs_through_the_shell() -> None:
    result = await run(make_job("echo $((1 + 2)) | tr 3 x", captureStdout=True))
    assert result.stdout == "x"
    assert result.returncode == 0


@pytest.mark.asyncio
async def test_string_command_is_passed_as_shell_dash_c(tmp_path: Path) -> None:
    shell = tmp_path / "fakeshell"
    shell.write_text('#!/bin/sh\nfor a in "$@"; do echo "<$a>"; done\n')
    shell.chmod(0o755)
    result = await run(make_job("echo  hi; exit 9", shell=str(shell), captureStdout=True))
    assert result.stdout == "<-c>\n<echo  hi; exit 9>"
    assert result.returncode == 0


@pytest.mark.asyncio
async def test_shell_choice() -> None:
    command = 'echo "${BASH_VERSION:+bash}"'
    assert (await run(make_job(command, shell="/bin/bash", captureStdout=True))).stdout == "bash"
    assert (await run(make_job(command, shell="/bin/sh", captureStdout=True))).stdout in (
        "",
        "bash",
    )


@pytest.mark.asyncio
async def test_stdin_is_dev_null() -> None:
    result = await run(make_job("cat; readlink /proc/self/fd/0", captureStdout=True))
    assert result.stdout == "/dev/null"


# ------------------------------------------------------------------ environment


@pytest.mark.asyncio
async def test_environment_layers_and_cronstable_variables() -> None:
    job = make_job(
        [PY, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
        name="env-job",
        captureStdout=True,
        environment=[{"key": "A", "value": "job"}, {"key": "C", "value": "1.10"}],
    )
    lisbon = timezone(timedelta(hours=1))
    result = await run(
        job,
        scheduled_time=datetime(2026, 3, 8, 8, 0, tzinfo=lisbon),
        attempt=2,
        base_environment={"A": "base", "B": "base", "CRONSTABLE_ATTEMPT": "spoofed"},
    )
    assert result.stdout is not None
    env = yaml.safe_load(result.stdout)
    env.pop("LC_CTYPE", None)  # the interpreter may add it on start-up
    assert env == {
        "A": "job",
        "B": "base",
        "C": "1.10",
        "CRONSTABLE_JOB_NAME": "env-job",
        "CRONSTABLE_SCHEDULED_TIME": "2026-03-08T07:00:00+00:00",
        "CRONSTABLE_ATTEMPT": "2",
        "CRONSTABLE_RUN_ID": "env-job@2026-03-08T07:00:00Z#2",
    }


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("zone", "shown"),
    [
        # the day US clocks spring forward: 07:00 UTC is 03:00 EDT (after the change)
        ("America/New_York", "2026-03-08T03:00:00-04:00"),
        ("Asia/Kolkata", "2026-03-08T12:30:00+05:30"),
        ("UTC", "2026-03-08T07:00:00+00:00"),
    ],
)
async def test_the_scheduled_time_is_shown_in_the_jobs_zone(zone: str, shown: str) -> None:
    job = make_job(
        'echo "$CRONSTABLE_SCHEDULED_TIME $CRONSTABLE_RUN_ID"', captureStdout=True, timezone=zone
    )
    result = await run(job, scheduled_time=SCHEDULED, attempt=3)
    assert result.stdout == f"{shown} job@2026-03-08T07:00:00Z#3"
    # the text is the same instant as the fire
    assert datetime.fromisoformat(shown) == SCHEDULED


@pytest.mark.asyncio
async def test_default_base_environment_is_the_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONSTABLE_TEST_MARKER", "from-daemon")
    job = make_job('echo "$CRONSTABLE_TEST_MARKER $CRONSTABLE_ATTEMPT"', captureStdout=True)
    assert (await run(job)).stdout == "from-daemon 1"


# ----------------------------------------------------------- exit codes, failsWhen


@pytest.mark.asyncio
async def test_nonzero_return_fails() -> None:
    result = await run(make_job("exit 3"))
    assert result.returncode == 3
    assert result.fail_reason == "nonzeroReturn (exit code 3)"
    assert result.failed


@pytest.mark.asyncio
async def test_nonzero_return_can_be_allowed() -> None:
    result = await run(make_job("exit 3", failsWhen={"nonzeroReturn": False}))
    assert result.returncode == 3
    assert not result.failed


@pytest.mark.asyncio
async def test_killed_by_a_signal() -> None:
    result = await run(make_job("kill -9 $$"))
    assert result.returncode == -9
    assert result.fail_reason == "nonzeroReturn (killed by signal 9 (SIGKILL))"


@pytest.mark.asyncio
async def test_always_fails_even_on_success() -> None:
    result = await run(make_job("true", failsWhen={"always": True}))
    assert result.returncode == 0
    assert result.fail_reason == "always"


@pytest.mark.asyncio
async def test_produces_stdout_needs_capture() -> None:
    when = {"producesStdout": True}
    captured = await run(make_job("echo out", captureStdout=True, failsWhen=when))
    assert captured.fail_reason == "producesStdout"
    assert captured.stdout == "out"
    uncaptured = await run(make_job("echo out >/dev/null; true", failsWhen=when))
    assert uncaptured.fail_reason is None
    assert uncaptured.stdout is None


@pytest.mark.asyncio
async def test_produces_stderr_is_on_by_default() -> None:
    result = await run(make_job("echo oops >&2"))
    assert result.fail_reason == "producesStderr"
    assert result.stderr == "oops"
    allowed = await run(make_job("echo oops >&2", failsWhen={"producesStderr": False}))
    assert allowed.fail_reason is None
    assert allowed.stderr == "oops"


@pytest.mark.asyncio
async def test_produces_stderr_needs_capture(capfd: pytest.CaptureFixture[str]) -> None:
    result = await run(make_job("echo oops >&2", captureStderr=False))
    assert result.fail_reason is None
    assert result.stderr is None
    assert "oops" in capfd.readouterr().err  # went straight to the daemon's stderr


@pytest.mark.asyncio
async def test_fails_when_order() -> None:
    everything = {"always": True, "producesStdout": True, "producesStderr": True}
    command = "echo o; echo e >&2; exit 4"
    job = make_job(command, captureStdout=True, failsWhen=everything)
    assert (await run(job)).fail_reason == "always"
    everything["always"] = False
    job = make_job(command, captureStdout=True, failsWhen=everything)
    assert (await run(job)).fail_reason == "nonzeroReturn (exit code 4)"
    job = make_job(command.replace("exit 4", "true"), captureStdout=True, failsWhen=everything)
    assert (await run(job)).fail_reason == "producesStdout"


# ------------------------------------------------------------------ spawn failure


@pytest.mark.asyncio
async def test_missing_binary_is_returncode_127(caplog: pytest.LogCaptureFixture) -> None:
    proc = JobProcess(make_job(["nosuch-cronstable-binary"]), scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    result = await proc.wait()
    assert result.returncode == 127
    assert result.fail_reason == (
        "spawn failed: [Errno 2] No such file or directory: 'nosuch-cronstable-binary'"
    )
    assert result.pid is None and proc.pid is None and not proc.running
    assert not result.timed_out and not result.cancelled
    assert result.started_at <= result.finished_at
    assert "could not start" in caplog.text
    await proc.cancel()  # harmless
    assert await proc.wait() is result


@pytest.mark.asyncio
async def test_bad_shell_is_returncode_127(tmp_path: Path) -> None:
    result = await run(make_job("true", shell="/nonexistent/sh"))
    assert result.returncode == 127
    assert result.fail_reason is not None and result.fail_reason.startswith("spawn failed: ")
    not_executable = tmp_path / "sh"
    not_executable.write_text("")
    result = await run(make_job("true", shell=str(not_executable)))
    assert result.returncode == 127
    assert "Permission denied" in (result.fail_reason or "")


@pytest.mark.asyncio
async def test_nul_byte_in_an_argument_is_returncode_127() -> None:
    result = await run(make_job(["echo", "a\0b"]))
    assert result.returncode == 127
    assert result.fail_reason is not None and "null" in result.fail_reason


@pytest.mark.asyncio
async def test_unencodable_environment_is_returncode_127() -> None:
    result = await run(make_job("true"), base_environment={"X": "\ud800"})
    assert result.returncode == 127
    assert result.fail_reason is not None and result.fail_reason.startswith("spawn failed:")


# --------------------------------------------------------------- stopping runs


@pytest.mark.asyncio
async def test_execution_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    job = make_job(
        f"sleep 300 & echo $! >> {pids}; sleep 300 & echo $! >> {pids}; wait",
        executionTimeout=0.5,
        killTimeout=2,
        failsWhen={"nonzeroReturn": False, "producesStderr": False},
    )
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    grandchildren = await wait_for_file(pids, lines=2)
    assert all(alive(p) for p in grandchildren)
    result = await proc.wait()
    assert result.returncode == -100
    assert result.timed_out and not result.cancelled
    assert result.fail_reason == "executionTimeout (0.5 s)"
    assert 0.5 <= result.duration < 2  # sh dies of SIGTERM at once: no killTimeout wait
    assert await gone(grandchildren)
    assert proc.pid is not None and await gone([proc.pid])


@pytest.mark.asyncio
async def test_a_run_finishing_in_time_is_not_timed_out() -> None:
    result = await run(make_job("sleep 0.1", executionTimeout=2))
    assert result.returncode == 0 and not result.timed_out


@pytest.mark.asyncio
async def test_sigterm_ignored_gets_sigkill_after_kill_timeout(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    job = make_job(f"trap '' TERM; echo $$ > {ready}; sleep 300; echo survived", killTimeout=0.3)
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    await wait_for_file(ready)
    began = time.monotonic()
    await proc.cancel()
    took = time.monotonic() - began
    result = await proc.wait()
    assert result.returncode == -9
    assert result.cancelled and not result.timed_out
    assert result.fail_reason == "cancelled"
    assert 0.3 <= took < 2


@pytest.mark.asyncio
async def test_timeout_with_sigterm_trapped(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    result = await run(make_job([PY, "-c", code], executionTimeout=0.3, killTimeout=0.3))
    assert result.returncode == -100 and result.timed_out
    assert 0.6 <= result.duration < 2


@pytest.mark.asyncio
async def test_cancel_is_idempotent() -> None:
    proc = JobProcess(make_job("sleep 300"), scheduled_time=SCHEDULED, attempt=1)
    await proc.cancel()  # before start: nothing to do
    await proc.start()
    assert proc.running
    await asyncio.gather(proc.cancel(), proc.cancel())
    await proc.cancel()
    assert not proc.running
    result = await proc.wait()
    assert result.returncode == -signal.SIGTERM
    assert result.cancelled and result.fail_reason == "cancelled"
    assert await proc.wait() is result


@pytest.mark.asyncio
async def test_cancel_after_the_run_finished_changes_nothing() -> None:
    proc = JobProcess(make_job("true"), scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    result = await proc.wait()
    await proc.cancel()
    assert await proc.wait() is result
    assert not result.cancelled and not result.failed


@pytest.mark.asyncio
async def test_cancelling_a_waiter_does_not_stop_the_run() -> None:
    proc = JobProcess(make_job("sleep 0.3"), scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(proc.wait(), 0.05)
    result = await proc.wait()
    assert result.returncode == 0 and not result.cancelled


@pytest.mark.asyncio
async def test_cancel_kills_descendants_holding_the_pipe_after_the_child_exited(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    job = make_job(f"sleep 300 & echo $! > {pids}; exit 0", captureStdout=True)
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    [grandchild] = await wait_for_file(pids)
    await asyncio.sleep(0.2)
    assert proc.running  # the child is gone, but its pipe is held
    await proc.cancel()
    result = await proc.wait()
    assert result.returncode == 0  # the child's own exit status
    assert result.cancelled and result.fail_reason == "cancelled"
    assert await gone([grandchild])


@pytest.mark.asyncio
async def test_escaped_descendant_cannot_strand_a_killed_run(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    stray_pids: list[int],
) -> None:
    pids = tmp_path / "pids"
    job = make_job(
        f"setsid sleep 300 & echo $! > {pids}; sleep 300",
        captureStdout=True,
        executionTimeout=0.3,
    )
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1, stream_grace=0.3)
    await proc.start()
    stray_pids.extend(await wait_for_file(pids))
    result = await proc.wait()
    assert result.returncode == -100 and result.timed_out
    assert "its process group was killed but its stdout and stderr are still open" in caplog.text
    assert f"held by pid {stray_pids[0]};" in caplog.text
    assert alive(stray_pids[0])  # outside the group: not ours to kill


@pytest.fixture
def escaped_sessions() -> Iterator[list[int]]:
    """Session leaders a job started with setsid; their whole group is killed at the end."""
    leaders: list[int] = []
    yield leaders
    for pid in leaders:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.asyncio
async def test_a_daemonised_helper_holding_stdout_does_not_keep_the_run_going(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    escaped_sessions: list[int],
) -> None:
    # issue 7 item 10: `setsid helper &` keeps stdout open after the job's main
    # process exited; the run used to stay "running" until the helper ended
    caplog.set_level(logging.WARNING, "cronstable.runtime.process")
    pids = tmp_path / "pids"
    job = make_job(
        f"echo before; setsid sh -c 'sleep 30' 2>/dev/null & echo $! > {pids}; exit 3",
        name="nightly-report",
        captureStdout=True,
        failsWhen={"nonzeroReturn": False},
    )
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1, stream_grace=0.5)
    await proc.start()
    escaped_sessions.extend(await wait_for_file(pids))
    [helper] = escaped_sessions
    result = await asyncio.wait_for(proc.wait(), 10)  # the helper lives 30 s
    assert not proc.running
    assert result.returncode == 3 and not result.timed_out and not result.cancelled
    assert result.stdout == "before"
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = warning.getMessage()
    assert message.startswith("job nightly-report: its main process exited but its stdout is ")
    holders: list[int] = warning.pids
    assert helper in holders  # the helper shell, and its sleep
    assert all(os.getsid(p) == helper for p in holders)
    assert f"held by pids {', '.join(map(str, holders))}; closing it and leaving them" in message
    assert all(alive(p) for p in holders)  # reported, never signalled


@pytest.mark.asyncio
async def test_output_written_by_a_descendant_within_the_grace_is_kept() -> None:
    job = make_job("(sleep 0.3; echo late) & echo early", captureStdout=True)
    result = await run(job)
    assert result.stdout == "early\nlate"


@pytest.mark.asyncio
async def test_process_group_and_session() -> None:
    code = "import os; print(os.getpid(), os.getpgid(0), os.getsid(0))"
    proc = JobProcess(
        make_job([PY, "-c", code], captureStdout=True), scheduled_time=SCHEDULED, attempt=1
    )
    await proc.start()
    result = await proc.wait()
    assert result.stdout == f"{proc.pid} {proc.pid} {proc.pid}"
    assert result.pid == proc.pid


# ------------------------------------------------------------------ output


@pytest.mark.asyncio
async def test_head_tail_and_discarded_counts() -> None:
    job = make_job(
        "seq 1 10; seq 1 20 >&2",
        captureStdout=True,
        saveLimit=4,
        failsWhen={"producesStderr": False},
    )
    result = await run(job)
    assert result.stdout == "1\n2\n[.... 6 lines discarded ...]\n9\n10"
    assert result.stdout_discarded == 6
    assert result.stderr == "1\n2\n[.... 16 lines discarded ...]\n19\n20"
    assert result.stderr_discarded == 16


class CountingSink:
    """A mirror target that counts what it is given instead of keeping it."""

    def __init__(self) -> None:
        self.size = 0
        self.lines = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        self.lines += data.count(b"\n")
        return len(data)

    def flush(self) -> None:
        pass


@pytest.mark.asyncio
async def test_flood_of_lines_completes() -> None:
    sink = CountingSink()
    mirror = OutputMirror(sink, CountingSink())
    job = make_job("yes | head -c 20000000", captureStdout=True, saveLimit=10)
    try:
        result = await run(job, mirror=mirror)
    finally:
        mirror.close()
    assert result.returncode == 0
    assert result.stdout == "y\n" * 5 + "[.... 9999990 lines discarded ...]" + "\ny" * 5
    assert result.stdout_discarded == 9_999_990
    # every line mirrored, unless the (bounded) mirror queue had to drop some
    assert 0 < sink.lines <= 10_000_000 + 1


@pytest.mark.asyncio
async def test_gigantic_line_keeps_memory_bounded(caplog: pytest.LogCaptureFixture) -> None:
    code = (
        "import sys; w = sys.stdout.buffer.write; w(b'first\\n');"
        "[w(b'x' * 1_000_000) for _ in range(20)]; w(b'\\nlast\\n')"
    )
    job = make_job([PY, "-c", code], captureStdout=True, maxLineLength=100_000)
    tracemalloc.start()
    try:
        result = await run(job)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.returncode == 0
    assert result.stdout == "first\nlast\n[.... 1 lines discarded ...]"
    assert result.stdout_discarded == 1
    assert peak < 3_000_000
    warnings = [r for r in caplog.records if "longer than 100000 bytes" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.asyncio
async def test_invalid_utf8_is_replaced() -> None:
    result = await run(make_job(r"printf 'caf\351\n'", captureStdout=True))
    assert result.stdout == "caf\ufffd"


@pytest.mark.asyncio
async def test_captured_lines_are_mirrored_with_the_stream_prefix() -> None:
    out, err = io.BytesIO(), io.BytesIO()
    mirror = OutputMirror(out, err)
    job = make_job(
        "echo one; echo two >&2; printf three",
        name="mirrored",
        captureStdout=True,
        streamPrefix="{stream_name}/{job_name}: ",
        failsWhen={"producesStderr": False},
    )
    try:
        result = await run(job, mirror=mirror)
    finally:
        mirror.close()
    assert result.stdout == "one\nthree"
    assert out.getvalue() == b"stdout/mirrored: one\nstdout/mirrored: three\n"
    assert err.getvalue() == b"stderr/mirrored: two\n"


@pytest.mark.asyncio
async def test_uncaptured_stream_is_not_piped(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fds = tmp_path / "fds"
    out, err = io.BytesIO(), io.BytesIO()
    mirror = OutputMirror(out, err)
    code = (
        "import os, sys; targets = [os.readlink(f'/proc/self/fd/{fd}') for fd in (1, 2)];"
        "open(sys.argv[1], 'w').write(chr(10).join(targets)); print('straight-through')"
    )
    job = make_job(
        [PY, "-c", code, str(fds)],
        captureStdout=False,
        captureStderr=True,
    )
    try:
        result = await run(job, mirror=mirror)
    finally:
        mirror.close()
    stdout_target, stderr_target = fds.read_text().split("\n")
    assert stdout_target == os.readlink("/proc/self/fd/1")  # the daemon's own stdout
    assert stderr_target.startswith("pipe:")
    assert result.stdout is None and result.stderr == ""
    assert "straight-through" in capfd.readouterr().out
    assert out.getvalue() == b""


# ------------------------------------------------------------------ misc


@pytest.mark.asyncio
async def test_priority_is_applied_to_the_group() -> None:
    code = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    job = make_job(f"sleep 0.2; {PY} -c '{code}'", captureStdout=True, priority=7)
    result = await run(job)
    assert result.stdout == "7"


@pytest.mark.asyncio
async def test_injected_wall_clock_and_metadata() -> None:
    instants = iter(
        [datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC), datetime(2030, 1, 1, 0, 0, 5, tzinfo=UTC)]
    )
    result = await run(
        make_job("true", name="clocked"), attempt=3, wall_clock=lambda: next(instants)
    )
    assert result.started_at == datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert result.finished_at == datetime(2030, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert result.job_name == "clocked" and result.attempt == 3
    assert result.scheduled_time == SCHEDULED
    assert 0 <= result.duration < 2


@pytest.mark.asyncio
async def test_cancel_while_starting_stops_the_run_once_up() -> None:
    proc = JobProcess(make_job("sleep 300"), scheduled_time=SCHEDULED, attempt=1)
    starting = asyncio.create_task(proc.start())
    await asyncio.sleep(0)  # start() is now spawning
    await proc.cancel()
    await starting
    result = await proc.wait()
    assert result.cancelled and result.returncode == -signal.SIGTERM
    assert result.duration < 2


@pytest.mark.asyncio
async def test_misuse_is_reported() -> None:
    proc = JobProcess(make_job("true"), scheduled_time=SCHEDULED, attempt=1)
    with pytest.raises(RuntimeError):
        await proc.wait()
    await proc.start()
    with pytest.raises(RuntimeError):
        await proc.start()
    await proc.wait()


@pytest.mark.asyncio
async def test_environment_values_are_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "s3cr3t-value"
    job = make_job(
        "exit 1",
        environment=[{"key": "TOKEN", "value": secret}],
        executionTimeout=5,
    )
    await run(job, base_environment={"OTHER": secret})
    await run(make_job(["nosuch-binary"]), base_environment={"OTHER": secret})
    assert secret not in caplog.text


# ------------------------------------------------------------ the run's channel


@pytest.mark.asyncio
async def test_a_run_gets_its_channel_in_its_environment_until_it_ends(tmp_path: Path) -> None:
    import shutil
    import tempfile

    from cronstable.channel.locks import Locks
    from cronstable.channel.server import RunChannels

    base = tempfile.mkdtemp(prefix="cs-", dir="/tmp")
    channels = RunChannels(os.path.join(base, "runs"), states=lambda _: None, locks=Locks())
    try:
        job = make_job(
            'echo "$CRONSTABLE_RUN_SOCKET"; test -S "$CRONSTABLE_RUN_SOCKET" && '
            'test -n "$CRONSTABLE_RUN_TOKEN"',
            captureStdout=True,
        )
        result = await run(job, channel=channels)
        assert result.returncode == 0, result.stderr
        socket_path = (result.stdout or "").strip()
        assert socket_path.startswith(os.path.join(base, "runs") + "/"), (socket_path, base)
        assert socket_path == channels.path  # the node's socket, which serves others still
        assert (channels.opened, channels.live) == (1, 0)  # its token revoked as it ended
        failed = await run(make_job(["/nonexistent/program"]), channel=channels)
        assert failed.fail_reason is not None and failed.fail_reason.startswith("spawn failed")
        assert (channels.opened, channels.live) == (2, 0)  # a spawn that failed revokes too
        plain = await run(make_job('echo "[$CRONSTABLE_RUN_SOCKET]"', captureStdout=True))
        assert plain.stdout == "[]"  # no channel given: none in the environment
    finally:
        await channels.close()
        shutil.rmtree(base, ignore_errors=True)
