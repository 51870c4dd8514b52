"""Large revisions: what the load and the first apply cost grows with the jobs, no faster.

Complexity, never timing: each case times a size and twice that size (the best of a few
runs, the cyclic collector out of the way) and asserts that twice the jobs cost less than
three times as much.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from cronstable.config import Limits, LoadCache, MemoryTree, load, load_snapshot
from cronstable.reconcile.apply import Applier
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.daemon import JobsSection, ProcessSpawner
from cronstable.runtime.scheduler import Scheduler
from cronstable.snapshot import Snapshot, content_revision

LIMITS = Limits(max_yaml_nodes=10_000_000, max_revision_bytes=1 << 30)


def files(jobs: int, per_file: int = 100) -> dict[str, bytes]:
    out = {}
    for f in range(jobs // per_file):
        lines = ["jobs:\n"]
        for j in range(per_file):
            i = f * per_file + j
            lines.append(
                f'  - {{name: job-{i}, command: "echo {i}", schedule: "{i % 60} {i % 24} * * *"}}\n'
            )
        out[f"team{f:04d}.yaml"] = "".join(lines).encode()
    return out


def best(run: Callable[[], object], times: int = 3) -> float:
    was = gc.isenabled()
    gc.disable()
    try:
        took = []
        for _ in range(times):
            started = time.perf_counter()
            run()
            took.append(time.perf_counter() - started)
        return min(took)
    finally:
        if was:
            gc.enable()


def test_loading_twice_the_jobs_costs_less_than_three_times_as_much() -> None:
    small, large = files(2000), files(4000)
    one = best(lambda: load(MemoryTree(small), "", limits=LIMITS))
    two = best(lambda: load(MemoryTree(large), "", limits=LIMITS))
    assert two < 3 * one, (one, two)


def test_a_warning_scan_costs_what_is_written_not_jobs_times_settings() -> None:
    """Jobs that write under onFailure (a retry) but set no reporter: the reporter scan
    looks under the keys written, so it grows with the jobs and not faster."""

    def written(jobs: int) -> dict[str, bytes]:
        text = "jobs:\n" + "".join(
            f'  - {{name: j{i}, command: "true", schedule: "@daily", '
            f"onFailure: {{retry: {{maximumRetries: 2}}}}}}\n"
            for i in range(jobs)
        )
        return {"c.yaml": text.encode()}

    small, large = written(1500), written(3000)
    one = best(lambda: load(MemoryTree(small), "", limits=LIMITS))
    two = best(lambda: load(MemoryTree(large), "", limits=LIMITS))
    assert two < 3 * one, (one, two)


@pytest.mark.asyncio
async def test_the_first_revision_of_a_daemon_process_is_frozen_out_of_the_collector() -> None:
    scheduler = Scheduler(ManualClock(datetime(2026, 6, 1, tzinfo=UTC)), ProcessSpawner(None))
    applier = Applier(
        [JobsSection(scheduler, ProcessSpawner(None))], limits=LIMITS, freeze_start_up=True
    )
    revision = files(300)
    gc.unfreeze()
    try:
        record = await applier.reconcile(Snapshot(content_revision(revision), "t", revision))
        assert record.outcome == "applied"
        assert gc.isenabled()
        frozen = gc.get_freeze_count()
        assert frozen > 300 * 5  # the revision's jobs and models among what is frozen
        revision = dict(revision)
        revision["team0000.yaml"] = revision["team0000.yaml"].replace(b"echo 0", b"echo x")
        record = await applier.reconcile(Snapshot(content_revision(revision), "t", revision))
        # frozen once only; and what the new revision replaced was freed, frozen as it was
        assert record.outcome == "applied" and gc.get_freeze_count() < frozen
    finally:
        gc.unfreeze()


def test_a_cached_reload_of_one_edited_file_reuses_every_other_file() -> None:
    revision = files(2000)
    cache = LoadCache()
    first = load_snapshot(Snapshot(content_revision(revision), "t", revision), cache=cache)
    revision = dict(revision)
    revision["team0007.yaml"] = revision["team0007.yaml"].replace(b"echo 700", b"echo seven")
    second = load_snapshot(Snapshot(content_revision(revision), "t", revision), cache=cache)
    same = [name for name, job in second.jobs.items() if job is first.jobs[name]]
    assert len(same) == 1900 and "job-700" not in same  # the edited file's jobs are rebuilt
    changed = [n for n, job in second.jobs.items() if job.digest != first.jobs[n].digest]
    assert changed == ["job-700"]
