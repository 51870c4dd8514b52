"""The event loop and default pool the daemon runs on (:mod:`cronstable.runtime.loops`)."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cronstable.runtime import loops

REPO = Path(__file__).resolve().parent.parent
HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


def test_the_default_pool_size_follows_the_usable_cpus() -> None:
    assert loops.default_executor_workers(1) == 5
    assert loops.default_executor_workers(2) == 6
    assert loops.default_executor_workers(64) == 32
    assert loops.default_executor_workers() == min(32, loops.available_cpus() + 4)


def test_asyncio_is_asyncios_own_loop() -> None:
    plan = loops.plan_loop("asyncio")
    assert plan.name == "asyncio" and plan.factory is None


@pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop is not installed (the speedups extra)")
def test_auto_and_uvloop_choose_uvloop_when_it_is_installed() -> None:
    for choice in ("auto", "uvloop"):
        plan = loops.plan_loop(choice)
        assert plan.name.startswith("uvloop ") and plan.factory is not None


@pytest.mark.parametrize(
    "choice",
    [
        "asyncio",
        pytest.param(
            "uvloop", marks=pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop is not installed")
        ),
    ],
)
def test_run_uses_the_loop_and_a_sized_pool_of_named_threads(choice: loops.LoopChoice) -> None:
    started: list[str] = []

    async def main() -> tuple[str, set[str]]:
        loop = type(asyncio.get_running_loop()).__module__
        gate = threading.Barrier(3, timeout=10)

        def work(first: bool) -> str:
            if first:
                gate.wait()  # three at once: the pool has at least three threads
            else:
                time.sleep(0.02)
            return threading.current_thread().name

        names = await asyncio.gather(*(asyncio.to_thread(work, i < 3) for i in range(20)))
        return loop, set(names)

    loop, names = loops.run(
        main(), loops.plan_loop(choice), workers=3, on_start=lambda: started.append("yes")
    )
    assert started == ["yes"]
    assert loop.startswith("uvloop" if choice == "uvloop" else "asyncio")
    # twenty blocking calls at once, on three threads and no more
    assert len(names) == 3 and all(n.startswith("cronstable-worker_") for n in names), names
    # the pool was shut down with the loop
    assert not any(t.name.startswith("cronstable-worker_") for t in threading.enumerate())


def test_loop_uvloop_without_uvloop_is_a_usage_error(tmp_path: Path) -> None:
    # a uvloop that cannot be imported, first on the path: as if the extra were missing
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "uvloop.py").write_text("raise ImportError('not installed here')\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "jobs.yaml").write_text("jobs: []\n")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(hidden), str(REPO)])}
    argv = [sys.executable, "-m", "cronstable", "run", str(tmp_path / "conf")]
    done = subprocess.run(
        [*argv, "--loop", "uvloop"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "uvloop is not installed (pip install 'cronstable[speedups]')" in done.stderr
    assert "Traceback" not in done.stderr
    bad = subprocess.run([*argv, "--executor-workers", "0"], capture_output=True, text=True,
                         env=env, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "from 1 to 1024" in bad.stderr


def test_the_daemon_collects_its_youngest_generation_less_often() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        loops.tune_collector()
        assert gc.get_threshold() == (loops.GC_YOUNG, 11, 12)
        assert loops.GC_YOUNG > 700
        # still collected: a garbage cycle is freed within GC_YOUNG allocations
        gc.collect()
        freed: list[str] = []

        class Cycle:
            def __init__(self) -> None:
                self.me = self

            def __del__(self) -> None:
                freed.append("yes")

        Cycle()
        keep = [[] for _ in range(loops.GC_YOUNG + 10)]
        assert freed == ["yes"]
        del keep
    finally:
        gc.set_threshold(*before)
