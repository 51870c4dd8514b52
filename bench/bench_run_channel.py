"""What each run's channel costs, and how fast the job-side clients answer.

    .venv/bin/python bench/bench_run_channel.py [RUNS]

* **Per run.**  RUNS (default 300) runs of ``true``, one after the other, through
  the process layer (:class:`~cronstable.runtime.process.JobProcess`, the exec
  shim where it is built) with a run channel (a socket and a token made before
  the spawn, revoked after) and, interleaved in the same loop, without one: the
  ratio of the medians is what the channel adds to a run, from the spawn call to
  the result.  The open and revoke alone are timed too.
* **Clients.**  ``cronstable state get`` and ``cronstable lock NAME -- true`` started
  as processes against a live channel, against ``cronstable --version`` (Python's
  start and the package's ``__init__``), 20 times each: what a job pays to ask.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cronstable.channel.locks import Locks  # noqa: E402
from cronstable.channel.server import RunChannels  # noqa: E402
from cronstable.config import MemoryTree, load  # noqa: E402
from cronstable.ports import JobState  # noqa: E402
from cronstable.runtime.process import JobProcess  # noqa: E402

T0 = datetime(2026, 6, 1, tzinfo=UTC)
JOB = next(
    iter(
        load(
            MemoryTree(
                {"c.yaml": b'jobs: [{name: bench, command: ["true"], schedule: "@daily"}]\n'}
            ),
            "c.yaml",
        ).jobs.values()
    )
)


def states(name: str) -> JobState | None:
    return JobState(name, None, None, None, ()) if name == "bench" else None


async def one_run(channels: RunChannels | None, attempt: int) -> float:
    began = time.perf_counter()
    proc = JobProcess(JOB, scheduled_time=T0, attempt=attempt, channel=channels)
    await proc.start()
    result = await proc.wait()
    assert result.returncode == 0, result
    return time.perf_counter() - began


async def per_run(runs: int, base: str) -> dict[str, float]:
    channels = RunChannels(os.path.join(base, "runs"), states=states, locks=Locks())
    with_channel: list[float] = []
    without: list[float] = []
    for attempt in range(1, runs + 1):
        with_channel.append(await one_run(channels, attempt))
        without.append(await one_run(None, attempt))
    opened: list[float] = []
    for attempt in range(runs):
        began = time.perf_counter()
        grant = await channels.open(f"bench@x#{attempt}", JOB, None)
        assert grant is not None
        grant.revoke()
        opened.append(time.perf_counter() - began)
    await channels.close()
    return {
        "with": statistics.median(with_channel),
        "without": statistics.median(without),
        "open+revoke": statistics.median(opened),
    }


def clients(base: str, times: int) -> dict[str, float]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    channels = asyncio.run_coroutine_threadsafe(_make(os.path.join(base, "runs2")), loop).result(10)
    grant = asyncio.run_coroutine_threadsafe(channels.open("bench@c#1", JOB, None), loop).result(10)
    assert grant is not None
    env = dict(os.environ) | dict(grant.environment) | {"PYTHONPATH": str(ROOT)}
    commands = {
        "--version": ["--version"],
        "state get": ["state", "get"],
        "lock -- true": ["lock", "db", "--", "true"],
    }
    found: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(times):
        for name, args in commands.items():
            began = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "cronstable", *args],
                env=env,
                stdout=subprocess.DEVNULL,
                check=True,  # no timeout: Popen.wait(timeout) polls, adding up to 50 ms
            )
            found[name].append(time.perf_counter() - began)
    loop.call_soon_threadsafe(grant.revoke)
    asyncio.run_coroutine_threadsafe(channels.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    return {name: statistics.median(values) for name, values in found.items()}


async def _make(directory: str) -> RunChannels:
    return RunChannels(directory, states=states, locks=Locks())


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    base = tempfile.mkdtemp(prefix="csb-", dir="/tmp")
    try:
        figures = asyncio.run(per_run(runs, base))
        print(f"{runs} runs of true, one at a time (medians):")
        print(f"  without a channel      {figures['without'] * 1000:8.2f} ms")
        print(
            f"  with a channel         {figures['with'] * 1000:8.2f} ms   "
            f"ratio {figures['with'] / figures['without']:.3f}"
        )
        print(f"  open + revoke alone    {figures['open+revoke'] * 1e6:8.0f} us")
        timed = clients(base, 20)
        floor = timed["--version"]
        print("job-side clients, started as processes (medians of 20):")
        for name, value in timed.items():
            print(f"  cronstable {name:<14} {value * 1000:8.1f} ms   ratio {value / floor:.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
