"""Per-run resource use (os.wait4 rusage) and the ``monitor`` limits, with real processes."""

from __future__ import annotations

import resource
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from cronstable.config import ConfigError, Job, MemoryTree, load
from cronstable.ports import RunResult, RunStart
from cronstable.runtime.clock import SystemClock
from cronstable.runtime.history import RunHistory
from cronstable.runtime.process import JobProcess
from cronstable.runtime.run_metrics import RunMetrics
from cronstable.runtime.scheduler import Scheduler
from cronstable.web.encode import finished_run

pytestmark = pytest.mark.timeout(30)
async_test = pytest.mark.asyncio

PY = sys.executable
SCHEDULED = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
MiB = 1024 * 1024

# Touches every byte of argv[2] MiB (b"x" * n writes them: really resident, unlike a
# calloc'd bytearray), burns 0.3 s of CPU, then writes a file saying it finished.
HOG = (
    "import sys, time\n"
    "block = b'x' * (int(sys.argv[2]) * 1024 * 1024)\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.3: pass\n"
    "open(sys.argv[1], 'w').write('done')\n"
)


def own_max_rss() -> int:
    """This process's largest resident set, in bytes (Linux counts KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_job(command: str | list[str], **settings: Any) -> Job:
    entry = {"name": "hog", "schedule": "* * * * *", "command": command, **settings}
    state = load(MemoryTree({"c.yaml": yaml.safe_dump({"jobs": [entry]}).encode()}), "c.yaml")
    return next(iter(state.jobs.values()))


async def run(job: Job) -> RunResult:
    proc = JobProcess(job, scheduled_time=SCHEDULED, attempt=1)
    await proc.start()
    return await proc.wait()


def hog_mib() -> int:
    """What the hog allocates: 200 MiB above what this process ever held, so that the
    figure is the hog's even if it were charged this process's memory (Linux charges a
    program exec'd straight from a process that process's peak; jobs start from the
    exec shim, tests/test_runtime_child_rss.py)."""
    return own_max_rss() // MiB + 200


def hog_command(marker: Path, mib: int | None = None) -> str:
    # through the shell, and not as its last command: the hog is a descendant the
    # shell reaps, not the child itself
    size = hog_mib() if mib is None else mib
    return f"{shlex.quote(PY)} -c {shlex.quote(HOG)} {shlex.quote(str(marker))} {size}; true"


@async_test
async def test_cpu_and_max_rss_of_a_descendant_are_recorded(tmp_path: Path) -> None:
    size = hog_mib()
    result = await run(make_job(hog_command(tmp_path / "done", size)))
    assert result.fail_reason is None
    assert result.max_rss is not None and result.max_rss >= size * MiB
    assert result.max_rss < (size + 1800) * MiB  # bytes, not KiB counted as bytes twice
    assert result.cpu_seconds is not None and result.cpu_seconds >= 0.3


@async_test
async def test_a_small_run_uses_little() -> None:
    result = await run(make_job(["true"]))
    assert result.returncode == 0
    # its own megabyte or two, not this process's size (the exec shim)
    assert result.max_rss is not None and 0 < result.max_rss < 10 * MiB
    assert result.cpu_seconds is not None and result.cpu_seconds < 1


@async_test
async def test_max_rss_over_the_limit_fails_the_run_and_kills_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "done"
    size = hog_mib()
    # above anything the fork can be charged, below what the hog holds
    job = make_job(hog_command(marker, size), monitor={"maxRss": f"{size - 20}M"})
    result = await run(job)
    assert result.returncode == 0
    assert marker.read_text() == "done"  # ran to its end: nothing was killed
    assert result.fail_reason == "monitor: maxRss exceeded"
    assert result.failed


@async_test
async def test_max_cpu_seconds_over_the_limit_fails_the_run(tmp_path: Path) -> None:
    job = make_job(hog_command(tmp_path / "done"), monitor={"maxCpuSeconds": 0.1})
    result = await run(job)
    assert result.returncode == 0
    assert result.fail_reason == "monitor: maxCpuSeconds exceeded"


@async_test
async def test_within_the_limits_the_run_succeeds(tmp_path: Path) -> None:
    job = make_job(["true"], monitor={"maxRss": "1G", "maxCpuSeconds": 60})
    result = await run(job)
    assert result.fail_reason is None


@async_test
async def test_an_earlier_failure_keeps_its_reason(tmp_path: Path) -> None:
    job = make_job(hog_command(tmp_path / "d") + "; exit 3", monitor={"maxRss": 1024})
    result = await run(job)
    assert result.fail_reason == "nonzeroReturn (exit code 3)"


@async_test
async def test_spawn_failure_has_no_usage() -> None:
    result = await run(make_job(["/nonexistent/binary"]))
    assert result.returncode == 127
    assert result.cpu_seconds is None and result.max_rss is None


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("512M", 512 * MiB),
        ("512Mi", 512 * MiB),
        ("2G", 2 * 1024 * MiB),
        ("1.5k", 1536),
        (4096, 4096),
        ("4096", 4096),
    ],
)
def test_max_rss_sizes(written: object, expected: int) -> None:
    job = make_job(["true"], monitor={"maxRss": written})
    assert job.config.monitor is not None
    assert job.config.monitor.max_rss == expected


@pytest.mark.parametrize("written", ["lots", "12X", "-5M", 0, "1.5"])
def test_bad_max_rss_is_a_config_error_with_its_place(written: object) -> None:
    with pytest.raises(ConfigError) as caught:
        make_job(["true"], monitor={"maxRss": written})
    text = str(caught.value)
    assert "c.yaml" in text and "maxRss" in text


@async_test
async def test_history_and_metrics_carry_the_usage(tmp_path: Path) -> None:
    job = make_job(hog_command(tmp_path / "done"))
    result = await run(job)
    start = RunStart(
        id="hog@x#1",
        job="hog",
        scheduled_time=SCHEDULED,
        attempt=1,
        started_at=result.started_at,
        pid=result.pid,
        manual=False,
    )
    history = RunHistory()
    history.run_started(start)
    history.run_finished(start, result, "succeeded")
    shown = finished_run(history.finished("hog")[-1])
    assert shown["maxRss"] == result.max_rss >= 200 * MiB
    assert shown["cpuSeconds"] >= 0.3

    registry = CollectorRegistry()
    scheduler = Scheduler(SystemClock(), lambda *_: None)  # type: ignore[arg-type,return-value]
    scheduler.replace_jobs({"hog": job})
    metrics = RunMetrics(registry, lambda: scheduler)
    metrics.run_started(start)
    metrics.run_finished(start, result, "succeeded")
    rss = registry.get_sample_value("cronstable_job_run_max_rss_bytes", {"job": "hog"})
    cpu = registry.get_sample_value("cronstable_job_run_cpu_seconds_sum", {"job": "hog"})
    assert rss == result.max_rss
    assert cpu is not None and cpu >= 0.3
    metrics.forget(["hog"])
    assert registry.get_sample_value("cronstable_job_run_max_rss_bytes", {"job": "hog"}) is None
    # a job of that name again (a later revision): its runs make new series, not the
    # dropped ones' (the listener keeps each job's series once made)
    runs = {"job": "hog", "outcome": "succeeded"}
    metrics.run_started(start)
    metrics.run_finished(start, result, "succeeded")
    assert registry.get_sample_value("cronstable_job_runs_total", runs) == 1
    assert registry.get_sample_value("cronstable_job_run_max_rss_bytes", {"job": "hog"})
    metrics.keep_per_job(False)
    assert registry.get_sample_value("cronstable_job_runs_total", runs) is None
    metrics.keep_per_job(True)
    metrics.run_started(start)
    metrics.run_finished(start, result, "failed")
    assert registry.get_sample_value("cronstable_job_runs_total", runs) is None
    failed = {"job": "hog", "outcome": "failed"}
    assert registry.get_sample_value("cronstable_job_runs_total", failed) == 1
    assert registry.get_sample_value("cronstable_job_running", {"job": "hog"}) == 0


@async_test
async def test_without_a_pidfd_the_child_is_reaped_by_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the branch taken on kernels before 5.3 and on other systems
    monkeypatch.setattr("cronstable.runtime.child.pidfd_open", lambda pid: None)
    result = await run(make_job(hog_command(tmp_path / "done") + "; exit 4"))
    assert result.returncode == 4
    assert result.max_rss is not None and result.max_rss >= 200 * MiB
