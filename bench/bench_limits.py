"""Rejecting a dense revision: peak memory and time, on a local and a git source.

    .venv/bin/python bench/bench_limits.py

A dense revision is one file of ``big:`` then millions of ``- x`` lines (4
bytes a value).  Each measurement runs in a fresh child process that starts
the source, takes its first snapshot and loads it the way the daemon does;
the child reports the time from snapshot to rejection (the load), the time
the source took to deliver the snapshot (reading, hashing, fetching; a local
source also waits its 0.2 s settle), and its peak RSS (``ru_maxrss``) over
both.  The byte
caps are raised to 1 GiB so that the figures measure the YAML node cap
(default :class:`~cronstable.config.limits.Limits`), not the byte caps.

Targets (issue 7): 64 MiB rejected in under 5 s and under 300 MB peak RSS;
10 MB in under 1 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZES = {"64 MiB": 64 << 20, "10 MB": 10_000_000}
TARGETS = {"64 MiB": (5.0, 300), "10 MB": (1.0, 300)}

CHILD = """
import asyncio, json, resource, sys, time
from pathlib import Path
from cronstable.config import ConfigError, Limits, load_snapshot
from cronstable.sources.factory import open_source

async def main():
    limits = Limits(max_file_bytes=1 << 30, max_revision_bytes=1 << 30)
    started = time.perf_counter()
    source = open_source(sys.argv[1], cache_dir=Path(sys.argv[2]), limits=limits)
    await source.start()
    try:
        snapshot = await anext(aiter(source.watch()))
    finally:
        await source.close()
    loaded = time.perf_counter()
    try:
        load_snapshot(snapshot, limits=limits)
        outcome = "accepted"
    except ConfigError as exc:
        outcome = str(exc.problems[0])
    done = time.perf_counter()
    return {
        "source_s": loaded - started,
        "reject_s": done - loaded,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "outcome": outcome,
    }

print(json.dumps(asyncio.run(main())))
"""


def write_dense(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    items = (size - 5) // 4
    with path.open("wb") as fh:
        fh.write(b"big:\n")
        for start in range(0, items, 1_000_000):
            fh.write(b"- x\n" * min(1_000_000, items - start))


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def measure(spec: str, cache: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, spec, str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if result.returncode != 0:
        raise SystemExit(f"child failed: {result.stderr[-2000:]}")
    figures: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def main() -> int:
    failed = False
    print(f"{'revision':<8} {'source':<6} {'reject':>8} {'peak RSS':>10}  outcome")
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
        base = Path(tmp)
        for label, size in SIZES.items():
            local = base / label.replace(" ", "") / "local"
            write_dense(local / "big.yaml", size)
            repo = base / label.replace(" ", "") / "repo"
            repo.mkdir()
            git(repo, "init", "-q", "-b", "main")
            (repo / "big.yaml").hardlink_to(local / "big.yaml")
            git(repo, "add", "big.yaml")
            git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "dense")
            for kind, spec in (("local", str(local)), ("git", f"git+file://{repo}")):
                cache = base / f"cache-{kind}-{size}"
                figures = measure(spec, cache)
                seconds, rss = float(str(figures["reject_s"])), float(str(figures["rss_mb"]))
                max_s, max_mb = TARGETS[label]
                ok = seconds < max_s and rss < max_mb
                failed |= not ok
                outcome = str(figures["outcome"])
                print(
                    f"{label:<8} {kind:<6} {seconds:>7.2f}s {rss:>7.0f} MB  "
                    f"{'ok' if ok else 'OVER TARGET'} (target {max_s:g} s, {max_mb} MB); "
                    f"then {float(str(figures['source_s'])):.2f}s to start the source; "
                    f"{outcome.split(': ', 1)[-1][:70]}"
                )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
