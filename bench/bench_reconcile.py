"""Reconcile cost of a one-job edit in a 5,000-job repository, beside a full reparse.

    .venv/bin/python bench/bench_reconcile.py [JOBS]

Builds a repository of JOBS jobs (50 per team file, every file including a
shared defaults file), applies it, then applies revisions that each edit one
job's command in one file: the time is from the snapshot's arrival to the
scheduler's job table being swapped (load with the parse cache, plan, prepare,
commit), as the daemon does it.  Beside it: the same revisions loaded with no
cache (a full reparse), and the first apply.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cronstable.config import Limits, load_snapshot
from cronstable.reconcile.apply import Applier
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.daemon import JobsSection, ProcessSpawner
from cronstable.runtime.scheduler import Scheduler
from cronstable.snapshot import Snapshot, content_revision

PER_FILE = 50
EDITS = 15


def team_file(team: int, edit: int | None = None) -> bytes:
    lines = ["include: [_defaults.yaml]\n", "jobs:\n"]
    for j in range(PER_FILE):
        command = f"/usr/local/bin/task --team {team} --id {j}"
        if edit is not None and j == 0:
            command += f" --edit {edit}"
        lines.append(
            f"""  - name: team{team:03d}-job{j:02d}
    command: {command}
    schedule: "{(team + j) % 60} {j % 24} * * *"
    concurrencyPolicy: Forbid
    environment:
      - key: TEAM
        value: "{team}"
    onFailure:
      retry:
        maximumRetries: 2
"""
        )
    return "".join(lines).encode()


def snapshot(files: dict[str, bytes]) -> Snapshot:
    return Snapshot(content_revision(files), "bench", files)


async def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    teams = jobs // PER_FILE
    files = {f"jobs/team{t:03d}.yaml": team_file(t) for t in range(teams)}
    files["jobs/_defaults.yaml"] = b"defaults:\n  shell: /bin/bash\n  killTimeout: 10\n"
    scheduler = Scheduler(ManualClock(datetime(2026, 6, 1, tzinfo=UTC)), ProcessSpawner(None))
    # 100,000 jobs are past the default input limits: raised the way docs/cli.md says
    limits = Limits(max_revision_bytes=1 << 30, max_yaml_nodes=10_000_000)
    applier = Applier([JobsSection(scheduler, ProcessSpawner(None))], limits=limits)

    start = time.perf_counter()
    first = await applier.reconcile(snapshot(files))
    initial = time.perf_counter() - start
    assert first.outcome == "applied", first.errors

    incremental: list[float] = []
    full: list[float] = []
    for edit in range(EDITS):
        team = (edit * 7) % teams
        files = dict(files)
        files[f"jobs/team{team:03d}.yaml"] = team_file(team, edit)
        snap = snapshot(files)
        start = time.perf_counter()
        record = await applier.reconcile(snap)
        incremental.append(time.perf_counter() - start)
        assert record.outcome == "applied" and record.summary is not None
        assert record.summary["changed"] == 1, record.summary
        start = time.perf_counter()
        load_snapshot(snap, limits=limits)
        full.append(time.perf_counter() - start)

    def ms(samples: list[float]) -> str:
        return f"{statistics.median(samples) * 1000:8.1f} {min(samples) * 1000:8.1f}"

    print(f"{jobs} jobs in {teams} files; {EDITS} one-job edits; times in ms")
    print(f"{'':40}{'median':>8} {'best':>8}")
    print(f"{'first apply (cold: parse everything)':40}{initial * 1000:8.1f}")
    print(f"{'one-job edit: reconcile (cache)':40}{ms(incremental)}")
    print(f"{'one-job edit: full reparse, no cache':40}{ms(full)}")
    ratio = statistics.median(full) / statistics.median(incremental)
    print(f"\nfull reparse / incremental reconcile: {ratio:.1f}x (target: reconcile <= 100 ms)")


if __name__ == "__main__":
    asyncio.run(main())
