"""How soon a local directory source notices a save: atomic save → snapshot yielded.

    .venv/bin/python bench/bench_local_source.py [SAVES]

Starts a :class:`~cronstable.sources.local.LocalDirSource` on a temporary
directory of a few configuration files, then SAVES times (default 30): saves one
file atomically (temporary file + rename, as editors and ``kubectl cp`` do) or in
place, and times until the source yields the snapshot holding it.  The time is
the watch's event delivery (~50 ms) + watchfiles' quiet step (50 ms) + a scan +
the settle pause (:attr:`LocalDirSource.settle`) + the confirming scan.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cronstable.sources.local import LocalDirSource


def save_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def save_in_place(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def summary(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return (
        f"{name:<12} n={len(ms):<3} min {ms[0]:6.0f} ms  median {statistics.median(ms):6.0f} ms"
        f"  p95 {p95:6.0f} ms  max {ms[-1]:6.0f} ms"
    )


async def measure(saves: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "jobs").mkdir()
        (root / "cronstable.yaml").write_bytes(b"jobs: []\n")
        for i in range(20):
            (root / f"jobs/team-{i}.yaml").write_bytes(b"jobs: []\n" * 50)
        source = LocalDirSource(root)
        began = time.perf_counter()
        await source.start()
        it = source.watch()
        await anext(it)
        print(f"start() to first snapshot: {(time.perf_counter() - began) * 1000:.0f} ms")
        await asyncio.sleep(1.5)  # past the watch's own first rescan
        try:
            for name, save in (("atomic save", save_atomically), ("in place", save_in_place)):
                samples = []
                for i in range(saves):
                    data = f"jobs: []\n# {name} {i}\n".encode()
                    saved = time.perf_counter()
                    save(root / "cronstable.yaml", data)
                    snap = await asyncio.wait_for(anext(it), 10)
                    samples.append(time.perf_counter() - saved)
                    assert snap.files["cronstable.yaml"] == data
                    await asyncio.sleep(0.05)
                print(summary(name, samples))
        finally:
            await source.close()


def main() -> None:
    saves = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    asyncio.run(measure(saves))


if __name__ == "__main__":
    main()
